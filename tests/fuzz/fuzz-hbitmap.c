/*
 * libFuzzer target: util/hbitmap against a reference of one byte per
 * granule.  The input picks a size (up to a few levels of the tree) and a
 * granularity, then a list of operations; after each, the bitmap's count
 * and a query at the operation's offset must match the reference, and at
 * the end every query over the whole bitmap, and the tree must hold
 * nothing once every bit is cleared (each subtree collapsed).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/hbitmap.h"

/* Enough granules for three tree levels (4096 x 64 x 2 + a tail). */
#define FUZZ_MAX_BITS   (2 * 64 * 4096 + 4099)

typedef struct Input {
    const uint8_t *p;
    size_t left;
} Input;

static uint64_t take(Input *in, unsigned bytes)
{
    uint64_t v = 0;

    while (bytes-- && in->left) {
        v = (v << 8) | *in->p++;
        in->left--;
    }
    return v;
}

typedef struct Ref {
    uint64_t size;
    int g;
    uint64_t nbits;
    uint8_t *bits;
} Ref;

static bool ref_clip(const Ref *r, uint64_t start, uint64_t count,
                     uint64_t *first, uint64_t *last, uint64_t *end)
{
    if (count == 0 || start >= r->size) {
        return false;
    }
    *end = count > r->size - start ? r->size : start + count;
    *first = start >> r->g;
    *last = (*end - 1) >> r->g;
    return true;
}

static void ref_fill(Ref *r, uint64_t start, uint64_t count, uint8_t v)
{
    uint64_t first, last, end;

    if (ref_clip(r, start, count, &first, &last, &end)) {
        memset(r->bits + first, v, last - first + 1);
    }
}

static int64_t ref_next(const Ref *r, uint64_t start, uint64_t count,
                        uint8_t v)
{
    uint64_t first, last, end;
    const uint8_t *hit;

    if (!ref_clip(r, start, count, &first, &last, &end)) {
        return -1;
    }
    hit = memchr(r->bits + first, v, last - first + 1);
    return hit ? (int64_t)MAX((uint64_t)(hit - r->bits) << r->g, start) : -1;
}

static uint64_t ref_count_between(const Ref *r, uint64_t start,
                                  uint64_t count)
{
    uint64_t first, last, end, i, set = 0, sum;

    if (!ref_clip(r, start, count, &first, &last, &end)) {
        return 0;
    }
    /* The bytes are 0 or 1: a word's popcount is how many are set. */
    for (i = first; i + 8 <= last + 1; i += 8) {
        uint64_t w;

        memcpy(&w, r->bits + i, sizeof(w));
        set += __builtin_popcountll(w);
    }
    for (; i <= last; i++) {
        set += r->bits[i];
    }
    /* Whole granules, less the parts of the edge ones outside. */
    sum = set << r->g;
    if (r->bits[first]) {
        sum -= start - (first << r->g);
    }
    if (r->bits[last]) {
        sum -= ((last + 1) << r->g) - end;
    }
    return sum;
}

/* A range of the input's choosing: short, long, or to the end. */
static void take_range(Input *in, const Ref *r, uint64_t *start,
                       uint64_t *count)
{
    uint64_t kind = take(in, 1);

    *start = take(in, 4) % (r->size + 1);
    switch (kind % 4) {
    case 0:
        *count = take(in, 1);
        break;
    case 1:
        *count = take(in, 3);
        break;
    case 2:
        *count = take(in, 4) % (r->size + 1);
        break;
    default:
        *count = UINT64_MAX;
        break;
    }
}

static void check_at(const HBitmap *hb, const Ref *r, uint64_t start,
                     uint64_t count)
{
    g_assert(hbitmap_next_dirty(hb, start, count) ==
             ref_next(r, start, count, 1));
    g_assert(hbitmap_next_zero(hb, start, count) ==
             ref_next(r, start, count, 0));
    g_assert(hbitmap_count_between(hb, start, count) ==
             ref_count_between(r, start, count));
    if (start < r->size) {
        g_assert(hbitmap_get(hb, start) == r->bits[start >> r->g]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in = { data, size };
    Ref r;
    HBitmap *hb, *other;
    size_t empty;
    uint64_t i;

    r.g = take(&in, 1) % 4;
    r.size = take(&in, 3) % ((uint64_t)FUZZ_MAX_BITS << r.g);
    r.nbits = (r.size + (UINT64_C(1) << r.g) - 1) >> r.g;
    r.bits = g_malloc0(MAX(r.nbits, 1));
    hb = hbitmap_new(r.size, r.g);
    other = hbitmap_new(r.size, r.g);
    empty = hbitmap_memory(hb);

    while (in.left) {
        uint64_t op = take(&in, 1);
        uint64_t start, count;

        take_range(&in, &r, &start, &count);
        switch (op % 8) {
        case 0:
        case 1:
            hbitmap_set(hb, start, count);
            ref_fill(&r, start, count, 1);
            break;
        case 2:
        case 3:
            hbitmap_reset(hb, start, count);
            ref_fill(&r, start, count, 0);
            break;
        case 4:
            hbitmap_set_all(hb);
            memset(r.bits, 1, r.nbits);
            break;
        case 5:
            hbitmap_reset_all(hb);
            memset(r.bits, 0, r.nbits);
            break;
        case 6:
            /* Merge a range set in another bitmap. */
            hbitmap_reset_all(other);
            hbitmap_set(other, start, count);
            hbitmap_merge(hb, other);
            ref_fill(&r, start, count, 1);
            break;
        default:
            break;
        }
        g_assert(hbitmap_count(hb) == ref_count_between(&r, 0, r.size));
        g_assert(hbitmap_is_empty(hb) == (hbitmap_count(hb) == 0));
        check_at(hb, &r, start, count);
    }

    for (i = 0; i < r.size; i += MAX(r.size / 64, 1)) {
        check_at(hb, &r, i, UINT64_MAX);
    }
    /* Clear run by run: every subtree must collapse back to nothing. */
    for (;;) {
        int64_t d = hbitmap_next_dirty(hb, 0, UINT64_MAX);
        int64_t z;

        if (d < 0) {
            break;
        }
        z = hbitmap_next_zero(hb, d, UINT64_MAX);
        hbitmap_reset(hb, d, (z < 0 ? (int64_t)r.size : z) - d);
    }
    g_assert(hbitmap_is_empty(hb));
    g_assert(hbitmap_memory(hb) == empty);

    hbitmap_free(other);
    hbitmap_free(hb);
    g_free(r.bits);
    return 0;
}
