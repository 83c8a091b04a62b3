/*
 * HBitmap edge cases, each checked against hand-computed answers: size 0,
 * ranges rounding outward to granules and a partial last granule, single
 * bits and ranges on both sides of word and level boundaries,
 * next_dirty_area clipping, and arithmetic near INT64_MAX.  The
 * randomized tests are in test-hbitmap.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>

#include "util/hbitmap.h"

static void test_size_zero(void)
{
    g_autoptr(HBitmap) hb = hbitmap_new(0, 9);
    g_autoptr(HBitmap) other = hbitmap_new(0, 9);
    uint64_t s = 7, c = 7;

    hbitmap_set(hb, 0, UINT64_MAX);
    hbitmap_set_all(hb);
    g_assert_true(hbitmap_is_empty(hb));
    g_assert_cmpuint(hbitmap_count(hb), ==, 0);
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, -1);
    g_assert_cmpint(hbitmap_next_zero(hb, 0, UINT64_MAX), ==, -1);
    g_assert_false(hbitmap_next_dirty_area(hb, 0, UINT64_MAX, 0, &s, &c));
    g_assert_cmpuint(s, ==, 7);
    g_assert_cmpuint(hbitmap_count_between(hb, 0, UINT64_MAX), ==, 0);
    hbitmap_reset(hb, 0, 1);
    hbitmap_merge(hb, other);
    g_assert_true(hbitmap_is_empty(hb));
}

/* Ranges round outward to granules; the last granule is partial. */
static void test_granularity(void)
{
    /* 1000 items, 16 per granule: 62 full granules and one of 8. */
    g_autoptr(HBitmap) hb = hbitmap_new(1000, 4);
    uint64_t s, c;

    hbitmap_set(hb, 5, 1);
    g_assert_cmpuint(hbitmap_count(hb), ==, 16);
    g_assert_true(hbitmap_get(hb, 0));
    g_assert_true(hbitmap_get(hb, 15));
    g_assert_false(hbitmap_get(hb, 16));
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, 0);
    g_assert_cmpint(hbitmap_next_dirty(hb, 3, UINT64_MAX), ==, 3);
    g_assert_cmpint(hbitmap_next_dirty(hb, 16, UINT64_MAX), ==, -1);
    g_assert_cmpint(hbitmap_next_zero(hb, 3, UINT64_MAX), ==, 16);
    g_assert_cmpint(hbitmap_next_zero(hb, 3, 13), ==, -1);
    g_assert_cmpint(hbitmap_next_zero(hb, 3, 14), ==, 16);
    g_assert_cmpuint(hbitmap_count_between(hb, 4, 8), ==, 8);

    /* Resetting a single item clears its whole granule. */
    hbitmap_set(hb, 16, 32);
    g_assert_cmpuint(hbitmap_count(hb), ==, 48);
    hbitmap_reset(hb, 15, 2);
    g_assert_cmpuint(hbitmap_count(hb), ==, 16);
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, 32);

    /* The last granule counts only the 8 items inside the bitmap. */
    hbitmap_reset_all(hb);
    hbitmap_set(hb, 999, 1);
    g_assert_cmpuint(hbitmap_count(hb), ==, 8);
    g_assert_true(hbitmap_get(hb, 992));
    g_assert_cmpuint(hbitmap_count_between(hb, 990, 100), ==, 8);
    g_assert_cmpuint(hbitmap_count_between(hb, 995, 2), ==, 2);
    g_assert_true(hbitmap_next_dirty_area(hb, 0, 5000, 0, &s, &c));
    g_assert_cmpuint(s, ==, 992);
    g_assert_cmpuint(c, ==, 8);

    hbitmap_set_all(hb);
    g_assert_cmpuint(hbitmap_count(hb), ==, 1000);
    g_assert_cmpint(hbitmap_next_zero(hb, 0, UINT64_MAX), ==, -1);
    hbitmap_set(hb, 2000, 10);
    hbitmap_reset(hb, 2000, 10);
    g_assert_cmpuint(hbitmap_count(hb), ==, 1000);
}

/* Single bits on both sides of word and level boundaries. */
static void test_boundaries(void)
{
    static const uint64_t bits[] = {
        0, 62, 63, 64, 65, 4095, 4096, 4097, 262143, 262144, 262145,
        16777215, 16777216, 16777217, 2 * 16777216 - 1,
    };
    const uint64_t size = 2 * 16777216;
    g_autoptr(HBitmap) hb = hbitmap_new(size, 0);
    size_t i, j;

    for (i = 0; i < G_N_ELEMENTS(bits); i++) {
        uint64_t b = bits[i];

        hbitmap_set(hb, b, 1);
        g_assert_cmpuint(hbitmap_count(hb), ==, 1);
        g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, b);
        g_assert_cmpint(hbitmap_next_dirty(hb, b, 1), ==, b);
        g_assert_cmpint(hbitmap_next_dirty(hb, b + 1, UINT64_MAX), ==, -1);
        g_assert_cmpint(hbitmap_next_dirty(hb, 0, b), ==, -1);
        g_assert_cmpint(hbitmap_next_zero(hb, b, UINT64_MAX), ==,
                        b + 1 < size ? (int64_t)b + 1 : -1);
        g_assert_cmpuint(hbitmap_count_between(hb, 0, b), ==, 0);
        g_assert_cmpuint(hbitmap_count_between(hb, 0, b + 1), ==, 1);
        hbitmap_reset(hb, b, 1);
        g_assert_true(hbitmap_is_empty(hb));
        g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, -1);
    }

    /* Ranges that start and end on each pair of boundaries. */
    for (i = 0; i < G_N_ELEMENTS(bits); i++) {
        for (j = i; j < G_N_ELEMENTS(bits); j++) {
            uint64_t n = bits[j] - bits[i] + 1;

            hbitmap_set(hb, bits[i], n);
            g_assert_cmpuint(hbitmap_count(hb), ==, n);
            g_assert_cmpint(hbitmap_next_zero(hb, bits[i], UINT64_MAX), ==,
                            bits[j] + 1 < size ? (int64_t)bits[j] + 1 : -1);
            hbitmap_reset(hb, bits[i] + 1, n - 1);
            g_assert_cmpuint(hbitmap_count(hb), ==, 1);
            g_assert_cmpint(hbitmap_next_dirty(hb, bits[i] + 1, UINT64_MAX),
                            ==, -1);
            hbitmap_reset(hb, 0, UINT64_MAX);
            g_assert_true(hbitmap_is_empty(hb));
            g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, -1);
        }
    }
}

static void test_next_dirty_area(void)
{
    g_autoptr(HBitmap) hb = hbitmap_new(1 << 20, 9);
    uint64_t s = 0, c = 0;

    hbitmap_set(hb, 4096, 8192);    /* [4096, 12288) */
    hbitmap_set(hb, 65536, 512);    /* [65536, 66048) */

    g_assert_true(hbitmap_next_dirty_area(hb, 0, 1 << 20, 0, &s, &c));
    g_assert_cmpuint(s, ==, 4096);
    g_assert_cmpuint(c, ==, 8192);
    g_assert_true(hbitmap_next_dirty_area(hb, 0, 1 << 20, 1000, &s, &c));
    g_assert_cmpuint(s, ==, 4096);
    g_assert_cmpuint(c, ==, 1000);
    /* Clipped to [start, end) inside granules. */
    g_assert_true(hbitmap_next_dirty_area(hb, 5000, 6000, 0, &s, &c));
    g_assert_cmpuint(s, ==, 5000);
    g_assert_cmpuint(c, ==, 1000);
    g_assert_true(hbitmap_next_dirty_area(hb, 12288, UINT64_MAX, 0, &s, &c));
    g_assert_cmpuint(s, ==, 65536);
    g_assert_cmpuint(c, ==, 512);
    g_assert_false(hbitmap_next_dirty_area(hb, 66048, UINT64_MAX, 0, &s,
                                           &c));
    g_assert_false(hbitmap_next_dirty_area(hb, 12288, 65536, 0, &s, &c));
    g_assert_false(hbitmap_next_dirty_area(hb, 5000, 5000, 0, &s, &c));
}

/* Arithmetic near INT64_MAX: clipping, partial last granule. */
static void test_huge_limits(void)
{
    const uint64_t size = INT64_MAX;
    g_autoptr(HBitmap) hb = hbitmap_new(size, 40);
    const uint64_t last_granule = (size >> 40) << 40;
    uint64_t s, c;

    hbitmap_set(hb, size - 1, UINT64_MAX);
    g_assert_cmpuint(hbitmap_count(hb), ==, size - last_granule);
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, last_granule);
    g_assert_cmpint(hbitmap_next_dirty(hb, size - 1, UINT64_MAX), ==,
                    size - 1);
    g_assert_cmpint(hbitmap_next_zero(hb, last_granule, UINT64_MAX), ==, -1);
    g_assert_cmpuint(hbitmap_count_between(hb, 0, UINT64_MAX), ==,
                     size - last_granule);
    g_assert_true(hbitmap_next_dirty_area(hb, 0, UINT64_MAX, 0, &s, &c));
    g_assert_cmpuint(s, ==, last_granule);
    g_assert_cmpuint(c, ==, size - last_granule);

    hbitmap_set_all(hb);
    g_assert_cmpuint(hbitmap_count(hb), ==, size);
    g_assert_cmpuint(hbitmap_count_between(hb, 1, UINT64_MAX), ==, size - 1);
    hbitmap_reset(hb, 1, 1);
    g_assert_cmpuint(hbitmap_count(hb), ==, size - (UINT64_C(1) << 40));
    g_assert_cmpint(hbitmap_next_zero(hb, 0, UINT64_MAX), ==, 0);
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==,
                    INT64_C(1) << 40);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    g_test_add_func("/hbitmap/size-zero", test_size_zero);
    g_test_add_func("/hbitmap/set-reset/granularity", test_granularity);
    g_test_add_func("/hbitmap/set-reset/boundaries", test_boundaries);
    g_test_add_func("/hbitmap/next-dirty-area", test_next_dirty_area);
    g_test_add_func("/hbitmap/huge/limits", test_huge_limits);

    return g_test_run();
}
