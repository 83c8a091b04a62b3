/*
 * HBitmap: a sparse bitmap with a granularity.
 *
 * Each bit stands for 2^granularity consecutive items (bytes, for dirty
 * bitmaps).  The bits are kept in a radix tree whose subtrees that are all
 * clear or all set take no memory (hbitmap.c), so what a bitmap costs
 * follows the number of runs of set bits, not its size: an empty or a
 * full bitmap of 2^30 granules holds a few hundred bytes, and setting,
 * clearing, searching or counting over any range costs a few steps per
 * level of the tree (at most 10) at each edge of the range.  The number
 * of set bits is maintained on every change, so hbitmap_count() is O(1).
 *
 * Ranges are in items.  hbitmap_set() and hbitmap_reset() round the range
 * outward to whole granules: resetting part of a granule clears the whole
 * granule, so callers only reset ranges they fully processed.
 *
 * Not thread-safe; the block layer uses it from its main loop only.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_HBITMAP_H
#define UTIL_HBITMAP_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct HBitmap HBitmap;

/*
 * A bitmap for @size items (0 <= size <= INT64_MAX, 0 allowed), each bit
 * covering 2^@granularity items (0 <= granularity < 64).  All bits start
 * clear.  Memory is allocated as runs of set bits appear: about 0.5 KiB
 * per 4096 granules that hold both set and clear bits, plus as much
 * again per 64 such blocks, and nothing for uniform stretches.
 */
HBitmap *hbitmap_new(uint64_t size, int granularity);

/* Free @hb; NULL is ignored. */
void hbitmap_free(HBitmap *hb);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(HBitmap, hbitmap_free)

/* Number of items and granularity given at creation. */
uint64_t hbitmap_size(const HBitmap *hb);
int hbitmap_granularity(const HBitmap *hb);

/*
 * Set the bits covering items [start, start + count), rounded outward to
 * granules, and clipped to the bitmap size.  count == 0 does nothing.
 */
void hbitmap_set(HBitmap *hb, uint64_t start, uint64_t count);

/* Clear the bits covering [start, start + count), rounded outward. */
void hbitmap_reset(HBitmap *hb, uint64_t start, uint64_t count);

/* Set or clear every bit. */
void hbitmap_set_all(HBitmap *hb);
void hbitmap_reset_all(HBitmap *hb);

/* Is the bit covering @item set?  @item < size (asserted). */
bool hbitmap_get(const HBitmap *hb, uint64_t item);

/*
 * Number of items covered by set bits: (set bits) << granularity, except
 * that the last granule counts only the items inside the bitmap size.  O(1).
 */
uint64_t hbitmap_count(const HBitmap *hb);

/* True when no bit is set.  O(1). */
bool hbitmap_is_empty(const HBitmap *hb);

/*
 * The first item >= @start whose bit is set, returned as the first item of
 * its granule or @start itself if @start is inside a set granule; searching
 * stops before @start + @count (count UINT64_MAX = to the end).
 * Returns -1 if there is none.  O(log64 size) worst case.
 */
int64_t hbitmap_next_dirty(const HBitmap *hb, uint64_t start, uint64_t count);

/*
 * Like hbitmap_next_dirty() for the first item whose bit is clear (within
 * the bitmap's size).  O(log64 size) worst case.
 */
int64_t hbitmap_next_zero(const HBitmap *hb, uint64_t start, uint64_t count);

/*
 * Find the first run of set bits intersecting [start, end), limited to
 * @max_count items (0 = unlimited).  On success store the run, clipped to
 * [start, end), in *area_start and *area_count (> 0) and return true.
 * @end beyond the size is clipped; returns false, leaving the outputs
 * untouched, if there is no set bit in the range.
 */
bool hbitmap_next_dirty_area(const HBitmap *hb, uint64_t start, uint64_t end,
                             uint64_t max_count, uint64_t *area_start,
                             uint64_t *area_count);

/*
 * Number of items covered by set bits within [start, start + count),
 * clipped to the size.  Skips clean regions through the upper levels.
 */
uint64_t hbitmap_count_between(const HBitmap *hb, uint64_t start,
                               uint64_t count);

/* OR @src into @dst; both must have the same size and granularity.  Costs
 * the number of runs of set bits in @src. */
void hbitmap_merge(HBitmap *dst, const HBitmap *src);

/*
 * Bytes of heap @hb holds now: the struct and its tree.  For the owners'
 * memory accounting and for tests that bound it.
 */
size_t hbitmap_memory(const HBitmap *hb);

/*
 * Tree nodes and leaves visited by every call on @hb so far (searches,
 * counts and changes): a measure of the work done that tests bound, since
 * it must follow the runs of set bits touched, not the size.
 */
uint64_t hbitmap_visits(const HBitmap *hb);

#endif /* UTIL_HBITMAP_H */
