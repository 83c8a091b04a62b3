/*
 * HBitmap tests: randomized operations checked against a plain reference
 * array (one byte per granule), merge and huge sparse bitmaps.  The fixed
 * edge cases (size 0, granules, word and level boundaries, INT64_MAX) are
 * in test-hbitmap-edges.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <string.h>

#include "util/hbitmap.h"

/* The reference model: bits[i] is 1 iff granule i is set. */
typedef struct RefBitmap {
    uint64_t size;
    int g;
    uint64_t nbits;
    uint8_t *bits;
} RefBitmap;

static RefBitmap *ref_new(uint64_t size, int g)
{
    RefBitmap *ref = g_new0(RefBitmap, 1);

    ref->size = size;
    ref->g = g;
    ref->nbits = (size >> g) + ((size & ((UINT64_C(1) << g) - 1)) != 0);
    ref->bits = g_malloc0(MAX(ref->nbits, 1));
    return ref;
}

static void ref_free(RefBitmap *ref)
{
    g_free(ref->bits);
    g_free(ref);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(RefBitmap, ref_free)

/* Clip [start, start + count) to the size; granules and end item. */
static bool ref_clip(const RefBitmap *ref, uint64_t start, uint64_t count,
                     uint64_t *first, uint64_t *last, uint64_t *end)
{
    if (count == 0 || start >= ref->size) {
        return false;
    }
    *end = count > ref->size - start ? ref->size : start + count;
    *first = start >> ref->g;
    *last = (*end - 1) >> ref->g;
    return true;
}

static void ref_fill(RefBitmap *ref, uint64_t start, uint64_t count,
                     uint8_t val)
{
    uint64_t first, last, end;

    if (ref_clip(ref, start, count, &first, &last, &end)) {
        memset(ref->bits + first, val, last - first + 1);
    }
}

static uint64_t ref_count_between(const RefBitmap *ref, uint64_t start,
                                  uint64_t count)
{
    uint64_t first, last, end, i, whole = 0, sum;

    if (!ref_clip(ref, start, count, &first, &last, &end)) {
        return 0;
    }
    /*
     * Granules strictly inside the range count in full.  The bytes are 0
     * or 1, so the popcount of 8 of them is how many are set.
     */
    for (i = first + 1; i + 8 <= last; i += 8) {
        uint64_t w;

        memcpy(&w, ref->bits + i, sizeof(w));
        whole += __builtin_popcountll(w);
    }
    for (; i < last; i++) {
        whole += ref->bits[i];
    }
    sum = whole << ref->g;
    if (ref->bits[first]) {
        sum += MIN((first + 1) << ref->g, end) - start;
    }
    if (last != first && ref->bits[last]) {
        sum += end - (last << ref->g);
    }
    return sum;
}

static int64_t ref_next(const RefBitmap *ref, uint64_t start, uint64_t count,
                        uint8_t val)
{
    uint64_t first, last, end;
    const uint8_t *p;

    if (!ref_clip(ref, start, count, &first, &last, &end)) {
        return -1;
    }
    p = memchr(ref->bits + first, val, last - first + 1);
    if (!p) {
        return -1;
    }
    return MAX((uint64_t)(p - ref->bits) << ref->g, start);
}

static bool ref_next_dirty_area(const RefBitmap *ref, uint64_t start,
                                uint64_t end, uint64_t max_count,
                                uint64_t *area_start, uint64_t *area_count)
{
    uint64_t first, last, i, j, s, e;
    const uint8_t *p;

    if (start >= end ||
        !ref_clip(ref, start, end - start, &first, &last, &end) ||
        !(p = memchr(ref->bits + first, 1, last - first + 1))) {
        return false;
    }
    i = p - ref->bits;
    p = memchr(ref->bits + i, 0, last - i + 1);
    j = p ? (uint64_t)(p - ref->bits) : last + 1;
    s = MAX(i << ref->g, start);
    e = MIN(j << ref->g, end);
    if (max_count && e - s > max_count) {
        e = s + max_count;
    }
    *area_start = s;
    *area_count = e - s;
    return true;
}

static uint64_t rand64(void)
{
    return ((uint64_t)g_test_rand_int() << 32) | (uint32_t)g_test_rand_int();
}

static uint64_t rand_below(uint64_t n)
{
    return n ? rand64() % n : 0;
}

/*
 * An item in [0, size], biased towards the edges of words and levels
 * (granule 63, 64, 4096, 262144...), the end, and their neighbours.
 */
static uint64_t pick_item(const RefBitmap *ref)
{
    static const uint64_t granules[] = {
        0, 1, 63, 64, 65, 127, 128, 4095, 4096, 4097, 262143, 262144,
    };
    uint64_t k, item;

    if (g_test_rand_bit()) {
        return rand_below(ref->size + 1);
    }
    switch (g_test_rand_int_range(0, 3)) {
    case 0:
        k = granules[g_test_rand_int_range(0, G_N_ELEMENTS(granules))];
        break;
    case 1:
        k = g_test_rand_int_range(0, 3);
        k = ref->nbits - MIN(ref->nbits, k);
        break;
    default:
        k = rand_below(ref->nbits + 1);
        break;
    }
    item = MIN(k, ref->nbits) << ref->g;
    switch (g_test_rand_int_range(0, 4)) {
    case 0:
        item -= MIN(item, 1);
        break;
    case 1:
        item += 1;
        break;
    case 2:
        item += rand_below(UINT64_C(1) << ref->g);
        break;
    }
    return MIN(item, ref->size);
}

/* A count: 0, a few granules, up to the end, past it, or "everything". */
static uint64_t pick_count(const RefBitmap *ref, uint64_t start)
{
    uint64_t rest = ref->size - MIN(start, ref->size);

    switch (g_test_rand_int_range(0, 8)) {
    case 0:
        return 0;
    case 1:
        return UINT64_MAX;
    case 2:
        return rest;
    case 3:
        return rest + 1 + rand_below(1000);
    case 4:
        return 1;
    case 5:
        return rand_below(rest + 1);
    default:
        return 1 + rand_below(UINT64_C(3) << ref->g);
    }
}

static void check_count(const HBitmap *hb, const RefBitmap *ref)
{
    uint64_t expect = ref_count_between(ref, 0, ref->size);

    g_assert_cmpuint(hbitmap_count(hb), ==, expect);
    g_assert_cmpint(hbitmap_is_empty(hb), ==, expect == 0);
}

/* One random query, compared with the reference. */
static void check_query(const HBitmap *hb, const RefBitmap *ref)
{
    uint64_t start = pick_item(ref);
    uint64_t count = pick_count(ref, start);
    uint64_t as = 0, ac = 0, rs = 0, rc = 0, end, max;
    bool found;

    switch (g_test_rand_int_range(0, 5)) {
    case 0:
        if (start < ref->size) {
            g_assert_cmpint(hbitmap_get(hb, start), ==,
                            ref->bits[start >> ref->g]);
        }
        break;
    case 1:
        g_assert_cmpint(hbitmap_next_dirty(hb, start, count), ==,
                        ref_next(ref, start, count, 1));
        break;
    case 2:
        g_assert_cmpint(hbitmap_next_zero(hb, start, count), ==,
                        ref_next(ref, start, count, 0));
        break;
    case 3:
        g_assert_cmpuint(hbitmap_count_between(hb, start, count), ==,
                         ref_count_between(ref, start, count));
        break;
    default:
        end = count > UINT64_MAX - start ? UINT64_MAX : start + count;
        max = g_test_rand_bit() ? 0 : pick_count(ref, start);
        found = hbitmap_next_dirty_area(hb, start, end, max, &as, &ac);
        g_assert_cmpint(found, ==,
                        ref_next_dirty_area(ref, start, end, max, &rs, &rc));
        if (found) {
            g_assert_cmpuint(as, ==, rs);
            g_assert_cmpuint(ac, ==, rc);
            g_assert_cmpuint(ac, >, 0);
        }
        break;
    }
}

/*
 * Exhaustive comparison at every granule start (small bitmaps only),
 * walking backwards to know the next dirty and clean granule.
 */
static void check_all(const HBitmap *hb, const RefBitmap *ref)
{
    int64_t next_dirty = -1, next_zero = -1;
    uint64_t i;

    check_count(hb, ref);
    for (i = ref->nbits; i-- > 0;) {
        uint64_t item = i << ref->g;

        if (ref->bits[i]) {
            next_dirty = item;
        } else {
            next_zero = item;
        }
        g_assert_cmpint(hbitmap_get(hb, item), ==, ref->bits[i]);
        g_assert_cmpint(hbitmap_next_dirty(hb, item, UINT64_MAX), ==,
                        next_dirty);
        g_assert_cmpint(hbitmap_next_zero(hb, item, UINT64_MAX), ==,
                        next_zero);
    }
}

typedef struct RandomCase {
    const char *name;
    uint64_t size;
    int granularity;
    int ops;
    int count_every;    /* check count/is_empty every N ops */
    int full_every;     /* exhaustive check every N ops, 0 = never */
} RandomCase;

static const RandomCase random_cases[] = {
    { "0-g0", 0, 0, 200, 1, 1 },
    { "0-g16", 0, 16, 200, 1, 1 },
    { "1-g0", 1, 0, 500, 1, 1 },
    { "1-g9", 1, 9, 500, 1, 1 },
    { "63-g0", 63, 0, 1000, 1, 1 },
    { "64-g0", 64, 0, 1000, 1, 1 },
    { "65-g0", 65, 0, 1000, 1, 1 },
    { "65-g1", 65, 1, 1000, 1, 1 },
    { "4097-g0", 4097, 0, 2000, 1, 50 },
    { "4097-g3", 4097, 3, 2000, 1, 50 },
    { "262145-g0", 262145, 0, 2000, 10, 500 },
    { "1000000-g4", 1000000, 4, 2000, 10, 0 },
    { "1G+511-g9", (INT64_C(1) << 30) + 511, 9, 1000, 20, 0 },
    { "2^40-g16", INT64_C(1) << 40, 16, 400, 50, 0 },
    { "2^40+4097-g16", (INT64_C(1) << 40) + 4097, 16, 400, 50, 0 },
    { "2^50-g26", INT64_C(1) << 50, 26, 400, 50, 0 },
    { "int64max-g40", INT64_MAX, 40, 400, 50, 0 },
    /* Four levels of the tree (2^24 bits fit in three). */
    { "2^25+4097-g0", (INT64_C(1) << 25) + 4097, 0, 150, 50, 0 },
};

static void test_random(gconstpointer data)
{
    const RandomCase *rc = data;
    g_autoptr(HBitmap) hb = hbitmap_new(rc->size, rc->granularity);
    g_autoptr(RefBitmap) ref = ref_new(rc->size, rc->granularity);
    int op, q;

    g_assert_cmpuint(hbitmap_size(hb), ==, rc->size);
    g_assert_cmpint(hbitmap_granularity(hb), ==, rc->granularity);
    check_count(hb, ref);

    for (op = 1; op <= rc->ops; op++) {
        int r = g_test_rand_int_range(0, 100);
        uint64_t start = pick_item(ref);
        uint64_t count = pick_count(ref, start);

        if (r < 47) {
            hbitmap_set(hb, start, count);
            ref_fill(ref, start, count, 1);
        } else if (r < 96) {
            hbitmap_reset(hb, start, count);
            ref_fill(ref, start, count, 0);
        } else if (r < 98) {
            hbitmap_set_all(hb);
            memset(ref->bits, 1, ref->nbits);
        } else {
            hbitmap_reset_all(hb);
            memset(ref->bits, 0, ref->nbits);
        }
        for (q = 0; q < 8; q++) {
            check_query(hb, ref);
        }
        if (op % rc->count_every == 0) {
            check_count(hb, ref);
        }
        if (rc->full_every && op % rc->full_every == 0) {
            check_all(hb, ref);
        }
    }
}

static void test_merge(void)
{
    static const uint64_t sizes[] = { 1, 65, 4097, 300000 };
    size_t i;
    int round, k;

    for (i = 0; i < G_N_ELEMENTS(sizes); i++) {
        for (round = 0; round < 20; round++) {
            g_autoptr(HBitmap) a = hbitmap_new(sizes[i], 1);
            g_autoptr(HBitmap) b = hbitmap_new(sizes[i], 1);
            g_autoptr(RefBitmap) ra = ref_new(sizes[i], 1);
            g_autoptr(RefBitmap) rb = ref_new(sizes[i], 1);
            uint64_t j;

            for (k = 0; k < 10; k++) {
                uint64_t start = pick_item(ra);
                uint64_t count = 1 + rand_below(200);

                hbitmap_set(k & 1 ? a : b, start, count);
                ref_fill(k & 1 ? ra : rb, start, count, 1);
            }
            hbitmap_merge(a, b);
            for (j = 0; j < ra->nbits; j++) {
                ra->bits[j] |= rb->bits[j];
            }
            check_all(a, ra);
            check_all(b, rb);
        }
    }
}

/* Searches skip clean regions through the upper levels. */
static void test_huge_sparse(void)
{
    /* 2^28 bits: 32 MiB at the bottom, only the touched pages used. */
    const uint64_t size = UINT64_C(1) << 44;
    g_autoptr(HBitmap) hb = hbitmap_new(size, 16);
    const uint64_t last = size - 65536;
    uint64_t v0;
    int i;

    hbitmap_set(hb, last + 5, 1);
    hbitmap_set(hb, 0, 1);
    g_assert_cmpuint(hbitmap_count(hb), ==, 2 * 65536);
    v0 = hbitmap_visits(hb);
    for (i = 0; i < 100000; i++) {
        uint64_t start = 1 + rand_below(last);

        g_assert_cmpint(hbitmap_next_dirty(hb, start, UINT64_MAX), ==, last);
    }
    /* A few nodes per level and search, where a scan visits millions. */
    g_assert_cmpuint(hbitmap_visits(hb) - v0, <=, 100000 * 3 * 4);
    g_assert_cmpuint(hbitmap_count_between(hb, 1, size), ==, 65536 * 2 - 1);
    hbitmap_reset(hb, 0, UINT64_MAX);
    g_assert_true(hbitmap_is_empty(hb));
    g_assert_cmpint(hbitmap_next_dirty(hb, 0, UINT64_MAX), ==, -1);
}

/* Bytes a bitmap holds with nothing in its tree. */
static size_t empty_memory(void)
{
    g_autoptr(HBitmap) hb = hbitmap_new(0, 0);

    return hbitmap_memory(hb);
}

/*
 * A 64 TiB disk at 64 KiB granules (2^30 bits), handled as the mirror job
 * does: all dirty, then cleared from the front in 1 MiB pieces with some
 * pieces left behind, then a sparse set of runs.  Memory follows the runs,
 * never the size, and comes back to nothing when the bits are uniform.
 */
static void test_huge_memory(void)
{
    const uint64_t size = UINT64_C(64) << 40;
    const uint64_t step = UINT64_C(1) << 20;
    g_autoptr(HBitmap) hb = hbitmap_new(size, 16);
    size_t base = empty_memory();
    size_t peak = 0;
    uint64_t off, v0;
    int i;

    g_assert_cmpuint(hbitmap_memory(hb), ==, base);
    hbitmap_set_all(hb);
    g_assert_cmpuint(hbitmap_count(hb), ==, size);
    g_assert_cmpuint(hbitmap_memory(hb), ==, base);

    /* The cursor: one edge, so one path of the tree. */
    for (off = 0; off < (UINT64_C(1) << 36); off += step) {
        hbitmap_reset(hb, off, step);
        peak = MAX(peak, hbitmap_memory(hb));
    }
    g_assert_cmpuint(peak, <=, base + 8 * 1024);
    g_assert_cmpuint(hbitmap_count(hb), ==, size - (UINT64_C(1) << 36));

    /* 1000 runs left behind (failed copies, guest writes): per run. */
    for (i = 0; i < 1000; i++) {
        hbitmap_set(hb, (uint64_t)i * (UINT64_C(1) << 26), 65536);
    }
    g_assert_cmpuint(hbitmap_memory(hb), <=, base + 1000 * 2 * 1024);
    g_assert_cmpint(hbitmap_next_zero(hb, UINT64_C(1) << 36, UINT64_MAX),
                    ==, -1);
    v0 = hbitmap_visits(hb);
    g_assert_cmpint(hbitmap_next_zero(hb, 0, UINT64_MAX), ==, 65536);
    g_assert_cmpint(hbitmap_next_dirty(hb, 65536, UINT64_MAX), ==,
                    UINT64_C(1) << 26);
    g_assert_cmpuint(hbitmap_count_between(hb, 0, UINT64_C(1) << 36), ==,
                     1000 * 65536 + 0);
    g_assert_cmpuint(hbitmap_visits(hb) - v0, <=, 200);

    /* Uniform again: nothing held. */
    hbitmap_set(hb, 0, UINT64_C(1) << 36);
    g_assert_cmpuint(hbitmap_count(hb), ==, size);
    g_assert_cmpuint(hbitmap_memory(hb), ==, base);
    hbitmap_reset(hb, 65536, size);
    g_assert_cmpuint(hbitmap_count(hb), ==, 65536);
    g_assert_cmpuint(hbitmap_memory(hb), <=, base + 4 * 1024);
    hbitmap_reset_all(hb);
    g_assert_cmpuint(hbitmap_memory(hb), ==, base);
}

/* Random ranges on a bitmap with several tree levels: after every range
 * is cleared again, nothing is held (every subtree collapsed). */
static void test_memory_returns(void)
{
    const uint64_t nbits = UINT64_C(1) << 22;
    g_autoptr(HBitmap) hb = hbitmap_new(nbits, 0);
    uint64_t starts[200], lens[200];
    int i;

    for (i = 0; i < 200; i++) {
        starts[i] = rand_below(nbits);
        lens[i] = 1 + rand_below(i % 2 ? 100 : 100000);
        hbitmap_set(hb, starts[i], lens[i]);
    }
    g_assert_cmpuint(hbitmap_memory(hb), >, empty_memory());
    for (i = 0; i < 200; i++) {
        hbitmap_reset(hb, starts[i], lens[i]);
    }
    g_assert_true(hbitmap_is_empty(hb));
    g_assert_cmpuint(hbitmap_memory(hb), ==, empty_memory());
}

int main(int argc, char **argv)
{
    size_t i;

    g_test_init(&argc, &argv, NULL);

    for (i = 0; i < G_N_ELEMENTS(random_cases); i++) {
        g_autofree char *path =
            g_strdup_printf("/hbitmap/random/%s", random_cases[i].name);

        g_test_add_data_func(path, &random_cases[i], test_random);
    }
    g_test_add_func("/hbitmap/merge", test_merge);
    g_test_add_func("/hbitmap/huge/sparse-skip", test_huge_sparse);
    g_test_add_func("/hbitmap/huge/memory", test_huge_memory);
    g_test_add_func("/hbitmap/memory-returns", test_memory_returns);

    return g_test_run();
}
