/*
 * Rate limiter tests: the quota per slice for small, usual and huge
 * speeds (every int64_t speed must count without wrapping: 2^62 and more
 * wrapped to a quota of 1 byte per 100 ms, and the job crawled), and the
 * delays that keep the average rate.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <inttypes.h>

#include "util/ratelimit.h"

#define SLICE RATELIMIT_SLICE_NS
#define MiB (1024 * 1024)

/* The quota per 100 ms slice is speed / 10, rounded up. */
static void test_quota(void)
{
    static const struct {
        uint64_t speed;
        uint64_t quota;
    } cases[] = {
        { 1, 1 },
        { 9, 1 },
        { 10, 1 },
        { 11, 2 },
        { 10 * MiB, MiB },
        { 1000000000, 100000000 },
        { 1000000001, 100000001 },
        { UINT64_C(1) << 60, (UINT64_C(1) << 60) / 10 + 1 },
        { UINT64_C(1) << 62, (UINT64_C(1) << 62) / 10 + 1 },
        { INT64_MAX, INT64_MAX / 10 + 1 },
        { UINT64_MAX, UINT64_MAX / 10 + 1 },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        RateLimit rl = { 0 };

        ratelimit_set_speed(&rl, cases[i].speed, SLICE);
        g_assert_true(ratelimit_enabled(&rl));
        g_assert_cmpuint(rl.slice_quota, ==, cases[i].quota);
    }
}

/* 0 is unlimited; so is a quota beyond UINT64_MAX (long slices). */
static void test_unlimited(void)
{
    RateLimit rl = { 0 };

    ratelimit_set_speed(&rl, 0, SLICE);
    g_assert_false(ratelimit_enabled(&rl));
    g_assert_cmpint(ratelimit_calculate_delay(&rl, 0, UINT64_MAX / 2), ==,
                    0);
    /* 2^63 B/s over 10 s slices: 2^63 * 10, more than 64 bits hold. */
    ratelimit_set_speed(&rl, UINT64_C(1) << 63, 10 * 1000000000ULL);
    g_assert_false(ratelimit_enabled(&rl));
}

/* A huge speed lets every request of a busy job go at once. */
static void test_huge_speed_no_delay(void)
{
    RateLimit rl = { 0 };
    int64_t now = 1000000000;

    ratelimit_set_speed(&rl, INT64_MAX, SLICE);
    for (int i = 0; i < 10000; i++) {
        g_assert_cmpint(ratelimit_calculate_delay(&rl, now, 64 * MiB), ==,
                        0);
        now += 1000;
    }
}

/* 10 MiB/s: a slice takes 1 MiB, then the next request waits for it. */
static void test_delay(void)
{
    RateLimit rl = { 0 };
    int64_t now = 1000000000;

    ratelimit_set_speed(&rl, 10 * MiB, SLICE);
    g_assert_cmpint(ratelimit_calculate_delay(&rl, now, MiB / 2), ==, 0);
    g_assert_cmpint(ratelimit_calculate_delay(&rl, now, MiB / 2), ==, 0);
    g_assert_cmpint(ratelimit_calculate_delay(&rl, now + 1000, 4096), ==,
                    SLICE - 1000);
    g_assert_cmpint(ratelimit_calculate_delay(&rl, now + SLICE, 4096), ==,
                    0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/ratelimit/quota", test_quota);
    g_test_add_func("/ratelimit/unlimited", test_unlimited);
    g_test_add_func("/ratelimit/huge-speed-no-delay",
                    test_huge_speed_no_delay);
    g_test_add_func("/ratelimit/delay", test_delay);
    return g_test_run();
}
