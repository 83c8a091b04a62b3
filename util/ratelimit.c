/*
 * Rate limiting in time slices.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/ratelimit.h"

#include <glib.h>

#define NS_PER_SEC 1000000000ULL

void ratelimit_set_speed(RateLimit *limit, uint64_t speed, uint64_t slice_ns)
{
    uint64_t whole, part, quota;

    limit->slice_ns = slice_ns;
    if (speed == 0) {
        limit->slice_quota = 0;
        return;
    }
    /*
     * speed * slice_ns / 1 s, rounded up so that tiny speeds still admit
     * something per slice.  The product itself overflows from 2^64 / slice
     * (2^64 / 10^8: about 184 GB/s with 100 ms slices) and wrapped to a
     * tiny quota that stalled the job: split the speed into whole seconds
     * and the rest, and take a quota past UINT64_MAX as unlimited.
     */
    if (!g_uint64_checked_mul(&whole, speed / NS_PER_SEC, slice_ns) ||
        !g_uint64_checked_mul(&part, speed % NS_PER_SEC, slice_ns) ||
        !g_uint64_checked_add(&quota, whole,
                              part / NS_PER_SEC +
                              (part % NS_PER_SEC != 0))) {
        limit->slice_quota = 0;
        return;
    }
    limit->slice_quota = MAX(quota, 1);
}

bool ratelimit_enabled(const RateLimit *limit)
{
    return limit->slice_quota != 0;
}

int64_t ratelimit_calculate_delay(RateLimit *limit, int64_t now_ns,
                                  uint64_t n)
{
    if (!limit->slice_quota) {
        return 0;
    }
    if (limit->dispatched >= limit->slice_quota &&
        now_ns < limit->slice_end_ns) {
        /* The (possibly extended) slice is used up: wait for its end. */
        return limit->slice_end_ns - now_ns;
    }
    if (limit->slice_end_ns <= now_ns) {
        limit->slice_start_ns = now_ns;
        limit->slice_end_ns = now_ns + limit->slice_ns;
        limit->dispatched = 0;
    }
    limit->dispatched += n;
    if (limit->dispatched >= limit->slice_quota) {
        /*
         * Over quota: stretch the slice so that what was dispatched in it
         * matches the speed; the next request waits until it ends.  A
         * request larger than one slice's quota is let through but paid
         * for with a longer wait, so the average rate holds.
         */
        double slices = (double)limit->dispatched / limit->slice_quota;

        limit->slice_end_ns = limit->slice_start_ns +
                              (int64_t)(slices * limit->slice_ns);
    }
    return 0;
}
