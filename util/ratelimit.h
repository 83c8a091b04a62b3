/*
 * Rate limiting in time slices, as QEMU's block jobs do it.
 *
 * A speed in bytes per second becomes a quota per slice (100 ms by default).
 * Work is charged with ratelimit_calculate_delay(); while the slice's quota
 * is not used up, the answer is 0 (go on); otherwise it is the number of
 * nanoseconds until the next slice begins.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_RATELIMIT_H
#define UTIL_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define RATELIMIT_SLICE_NS (100 * 1000 * 1000LL)

typedef struct RateLimit {
    int64_t slice_start_ns;
    int64_t slice_end_ns;
    uint64_t slice_quota;   /* bytes per slice; 0 = unlimited */
    uint64_t slice_ns;
    uint64_t dispatched;    /* bytes charged in the current slice */
} RateLimit;

/*
 * Set the speed in bytes per second (0 = unlimited) with @slice_ns slices.
 * Any speed works: one whose quota per slice exceeds UINT64_MAX bytes is
 * unlimited (it could never be reached anyway).
 */
void ratelimit_set_speed(RateLimit *limit, uint64_t speed, uint64_t slice_ns);

/* Is a limit set? */
bool ratelimit_enabled(const RateLimit *limit);

/*
 * May @n more bytes go now (at time @now_ns)?  Returns 0 and charges them
 * if so, or the delay in ns until they may, charging nothing.  A slice
 * admits requests until its quota is reached; the request that crosses the
 * quota (however large) is admitted and stretches the slice in proportion,
 * so the following requests wait and the average rate is the speed.
 */
int64_t ratelimit_calculate_delay(RateLimit *limit, int64_t now_ns,
                                  uint64_t n);

#endif /* UTIL_RATELIMIT_H */
