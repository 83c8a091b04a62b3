/*
 * HBitmap: a hierarchical bitmap with a granularity.
 *
 * levels[0] is the bit array proper, one bit per granule.  levels[l + 1]
 * holds one bit per word of levels[l], set iff that word is non-zero.  The
 * top level is a single word.  Bits past the end of a level are always
 * clear, so a whole word can be tested without masking the tail.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/hbitmap.h"

#include <string.h>

#define BITS_PER_WORD 64
#define WORD_SHIFT 6
#define WORD_MASK (BITS_PER_WORD - 1)

/* 64^11 > 2^64: eleven summary levels cover any bit count. */
#define HBITMAP_MAX_LEVELS 12

/* Returned by the internal searches when there is no such bit. */
#define NO_BIT UINT64_MAX

struct HBitmap {
    uint64_t size;          /* items */
    int granularity;        /* each bit covers 1 << granularity items */
    uint64_t nbits;         /* bits in levels[0] (granules) */
    uint64_t count;         /* set bits in levels[0] */
    int nlevels;
    uint64_t nwords[HBITMAP_MAX_LEVELS];
    uint64_t *levels[HBITMAP_MAX_LEVELS];
};

/* Bits (@bit % 64)..63 of a word. */
static inline uint64_t mask_from(uint64_t bit)
{
    return ~UINT64_C(0) << (bit & WORD_MASK);
}

/* Bits 0..(@bit % 64) of a word. */
static inline uint64_t mask_to(uint64_t bit)
{
    return ~UINT64_C(0) >> (WORD_MASK - (bit & WORD_MASK));
}

/* Number of bits in level @l (the words of the level below, or granules). */
static uint64_t level_bits(const HBitmap *hb, int l)
{
    return l == 0 ? hb->nbits : hb->nwords[l - 1];
}

HBitmap *hbitmap_new(uint64_t size, int granularity)
{
    HBitmap *hb;
    uint64_t words;
    int l;

    g_assert(granularity >= 0 && granularity < 64);
    g_assert(size <= INT64_MAX);

    hb = g_new0(HBitmap, 1);
    hb->size = size;
    hb->granularity = granularity;
    hb->nbits = (size >> granularity) +
                ((size & ((UINT64_C(1) << granularity) - 1)) != 0);

    words = MAX((hb->nbits + WORD_MASK) >> WORD_SHIFT, 1);
    for (l = 0; ; l++) {
        g_assert(l < HBITMAP_MAX_LEVELS);
        hb->nwords[l] = words;
        hb->levels[l] = g_new0(uint64_t, words);
        if (words == 1) {
            break;
        }
        words = (words + WORD_MASK) >> WORD_SHIFT;
    }
    hb->nlevels = l + 1;
    return hb;
}

void hbitmap_free(HBitmap *hb)
{
    int l;

    if (!hb) {
        return;
    }
    for (l = 0; l < hb->nlevels; l++) {
        g_free(hb->levels[l]);
    }
    g_free(hb);
}

uint64_t hbitmap_size(const HBitmap *hb)
{
    return hb->size;
}

int hbitmap_granularity(const HBitmap *hb)
{
    return hb->granularity;
}

/*
 * First set bit >= @bit in level @l, or NO_BIT.  A miss in the current word
 * asks the level above for the next non-zero word, so the cost is bounded
 * by the number of levels.
 */
static uint64_t find_next_set(const HBitmap *hb, int l, uint64_t bit)
{
    uint64_t widx = bit >> WORD_SHIFT;
    uint64_t w;

    if (widx >= hb->nwords[l]) {
        return NO_BIT;
    }
    w = hb->levels[l][widx] & mask_from(bit);
    if (w) {
        return (widx << WORD_SHIFT) + __builtin_ctzll(w);
    }
    if (l + 1 == hb->nlevels) {
        return NO_BIT;
    }
    widx = find_next_set(hb, l + 1, widx + 1);
    if (widx == NO_BIT) {
        return NO_BIT;
    }
    w = hb->levels[l][widx];
    g_assert(w != 0);
    return (widx << WORD_SHIFT) + __builtin_ctzll(w);
}

/* Index of the first non-zero word >= @widx in level @l, or NO_BIT. */
static uint64_t next_nonzero_word(const HBitmap *hb, int l, uint64_t widx)
{
    if (widx >= hb->nwords[l]) {
        return NO_BIT;
    }
    if (hb->levels[l][widx] || l + 1 == hb->nlevels) {
        return hb->levels[l][widx] ? widx : NO_BIT;
    }
    return find_next_set(hb, l + 1, widx + 1);
}

/* First clear bit in levels[0] within [@first, @last], or NO_BIT. */
static uint64_t find_next_clear(const HBitmap *hb, uint64_t first,
                                uint64_t last)
{
    uint64_t widx = first >> WORD_SHIFT;
    uint64_t lastw = last >> WORD_SHIFT;
    uint64_t w = ~hb->levels[0][widx] & mask_from(first);
    uint64_t bit;

    while (!w) {
        if (++widx > lastw) {
            return NO_BIT;
        }
        w = ~hb->levels[0][widx];
    }
    bit = (widx << WORD_SHIFT) + __builtin_ctzll(w);
    return bit <= last ? bit : NO_BIT;
}

/*
 * Set bits [@first, @last] of level @l and the summary bits above them.
 * Every word touched ends up non-zero, so the parent range is exactly the
 * touched words; we stop climbing once no word went from zero to non-zero.
 */
static void set_bits(HBitmap *hb, int l, uint64_t first, uint64_t last)
{
    uint64_t *words = hb->levels[l];
    uint64_t fw = first >> WORD_SHIFT;
    uint64_t lw = last >> WORD_SHIFT;
    uint64_t added = 0;
    bool woke = false;
    uint64_t i;

    for (i = fw; i <= lw; i++) {
        uint64_t mask = ~UINT64_C(0);
        uint64_t old = words[i];

        if (i == fw) {
            mask &= mask_from(first);
        }
        if (i == lw) {
            mask &= mask_to(last);
        }
        words[i] = old | mask;
        added += __builtin_popcountll(mask & ~old);
        woke |= old == 0;
    }
    if (l == 0) {
        hb->count += added;
    }
    if (woke && l + 1 < hb->nlevels) {
        set_bits(hb, l + 1, fw, lw);
    }
}

/*
 * Clear bits [@first, @last] of level @l and the summary bits of the words
 * that became zero.  Only non-zero words are visited: the level above is
 * read (before it is updated) to skip clean stretches.
 */
static void reset_bits(HBitmap *hb, int l, uint64_t first, uint64_t last)
{
    uint64_t *words = hb->levels[l];
    uint64_t fw = first >> WORD_SHIFT;
    uint64_t lw = last >> WORD_SHIFT;
    uint64_t removed = 0;
    uint64_t i;

    for (i = next_nonzero_word(hb, l, fw); i != NO_BIT && i <= lw;
         i = next_nonzero_word(hb, l, i + 1)) {
        uint64_t mask = ~UINT64_C(0);

        if (i == fw) {
            mask &= mask_from(first);
        }
        if (i == lw) {
            mask &= mask_to(last);
        }
        removed += __builtin_popcountll(words[i] & mask);
        words[i] &= ~mask;
    }
    if (l == 0) {
        g_assert(hb->count >= removed);
        hb->count -= removed;
    }
    if (l + 1 == hb->nlevels) {
        return;
    }
    /* Partly cleared edge words may still be dirty; all others are zero. */
    if (words[fw]) {
        if (fw == lw) {
            return;
        }
        fw++;
    }
    if (words[lw]) {
        lw--;
    }
    if (fw <= lw) {
        reset_bits(hb, l + 1, fw, lw);
    }
}

/*
 * Clip [@start, @start + @count) to the bitmap and convert it to granules
 * [*@first, *@last].  Returns false if nothing is left.
 */
static bool range_to_bits(const HBitmap *hb, uint64_t start, uint64_t count,
                          uint64_t *first, uint64_t *last)
{
    uint64_t end;

    if (count == 0 || start >= hb->size) {
        return false;
    }
    end = count > hb->size - start ? hb->size : start + count;
    *first = start >> hb->granularity;
    *last = (end - 1) >> hb->granularity;
    return true;
}

void hbitmap_set(HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last;

    if (range_to_bits(hb, start, count, &first, &last)) {
        set_bits(hb, 0, first, last);
    }
}

void hbitmap_reset(HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last;

    if (range_to_bits(hb, start, count, &first, &last)) {
        reset_bits(hb, 0, first, last);
    }
}

void hbitmap_set_all(HBitmap *hb)
{
    int l;

    if (hb->nbits == 0) {
        return;
    }
    for (l = 0; l < hb->nlevels; l++) {
        uint64_t bits = level_bits(hb, l);
        uint64_t full = bits >> WORD_SHIFT;

        memset(hb->levels[l], 0xff, full * sizeof(uint64_t));
        if (bits & WORD_MASK) {
            hb->levels[l][full] = mask_to((bits & WORD_MASK) - 1);
        }
    }
    hb->count = hb->nbits;
}

void hbitmap_reset_all(HBitmap *hb)
{
    int l;

    for (l = 0; l < hb->nlevels; l++) {
        memset(hb->levels[l], 0, hb->nwords[l] * sizeof(uint64_t));
    }
    hb->count = 0;
}

static bool bit_is_set(const HBitmap *hb, uint64_t bit)
{
    return (hb->levels[0][bit >> WORD_SHIFT] >> (bit & WORD_MASK)) & 1;
}

bool hbitmap_get(const HBitmap *hb, uint64_t item)
{
    g_assert(item < hb->size);
    return bit_is_set(hb, item >> hb->granularity);
}

uint64_t hbitmap_count(const HBitmap *hb)
{
    uint64_t items = hb->count << hb->granularity;

    /* The last granule may stick out past the end of the bitmap. */
    if (hb->count && bit_is_set(hb, hb->nbits - 1)) {
        items -= (hb->nbits << hb->granularity) - hb->size;
    }
    return items;
}

bool hbitmap_is_empty(const HBitmap *hb)
{
    return hb->count == 0;
}

int64_t hbitmap_next_dirty(const HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last, bit;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return -1;
    }
    bit = find_next_set(hb, 0, first);
    if (bit == NO_BIT || bit > last) {
        return -1;
    }
    return bit == first ? (int64_t)start : (int64_t)(bit << hb->granularity);
}

int64_t hbitmap_next_zero(const HBitmap *hb, uint64_t start, uint64_t count)
{
    uint64_t first, last, bit;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return -1;
    }
    bit = find_next_clear(hb, first, last);
    if (bit == NO_BIT) {
        return -1;
    }
    return bit == first ? (int64_t)start : (int64_t)(bit << hb->granularity);
}

bool hbitmap_next_dirty_area(const HBitmap *hb, uint64_t start, uint64_t end,
                             uint64_t max_count, uint64_t *area_start,
                             uint64_t *area_count)
{
    int64_t dirty, clean;
    uint64_t limit;

    end = MIN(end, hb->size);
    if (start >= end) {
        return false;
    }
    dirty = hbitmap_next_dirty(hb, start, end - start);
    if (dirty < 0) {
        return false;
    }
    limit = end;
    if (max_count && max_count < end - (uint64_t)dirty) {
        limit = dirty + max_count;
    }
    clean = hbitmap_next_zero(hb, dirty, limit - dirty);
    *area_start = dirty;
    *area_count = (clean < 0 ? limit : (uint64_t)clean) - dirty;
    return true;
}

uint64_t hbitmap_count_between(const HBitmap *hb, uint64_t start,
                               uint64_t count)
{
    uint64_t first, last, end, bits = 0, items;
    uint64_t fw, lw, i;

    if (!range_to_bits(hb, start, count, &first, &last)) {
        return 0;
    }
    fw = first >> WORD_SHIFT;
    lw = last >> WORD_SHIFT;
    for (i = next_nonzero_word(hb, 0, fw); i != NO_BIT && i <= lw;
         i = next_nonzero_word(hb, 0, i + 1)) {
        uint64_t w = hb->levels[0][i];

        if (i == fw) {
            w &= mask_from(first);
        }
        if (i == lw) {
            w &= mask_to(last);
        }
        bits += __builtin_popcountll(w);
    }

    /* Whole granules, minus the parts of the edge granules outside. */
    items = bits << hb->granularity;
    end = count > hb->size - start ? hb->size : start + count;
    if (bit_is_set(hb, first)) {
        items -= start - (first << hb->granularity);
    }
    if (bit_is_set(hb, last)) {
        items -= ((last + 1) << hb->granularity) - end;
    }
    return items;
}

void hbitmap_merge(HBitmap *dst, const HBitmap *src)
{
    uint64_t i;

    g_assert(dst->size == src->size);
    g_assert(dst->granularity == src->granularity);

    for (i = next_nonzero_word(src, 0, 0); i != NO_BIT;
         i = next_nonzero_word(src, 0, i + 1)) {
        uint64_t old = dst->levels[0][i];
        uint64_t merged = old | src->levels[0][i];

        dst->levels[0][i] = merged;
        dst->count += __builtin_popcountll(merged & ~old);
        if (old == 0 && dst->nlevels > 1) {
            set_bits(dst, 1, i, i);
        }
    }
}
