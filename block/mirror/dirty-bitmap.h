/*
 * Dirty bitmaps: which byte ranges of a node still need copying.
 *
 * A thin layer over util/hbitmap in bytes: one bit per granule
 * (a power of two, 512 B .. 64 MiB).  Setting rounds outward to granules;
 * clearing is only allowed on whole granules (or up to the end of the
 * image), because clearing a partly processed granule would lose data.
 * It also measures how fast bytes get dirtied, for ETA and convergence.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_DIRTY_BITMAP_H
#define BLOCK_DIRTY_BITMAP_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct DirtyBitmap DirtyBitmap;

/* A clean bitmap over @size bytes with @granularity (power of 2). */
DirtyBitmap *dirty_bitmap_new(int64_t size, int64_t granularity);
void dirty_bitmap_free(DirtyBitmap *bm);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(DirtyBitmap, dirty_bitmap_free)

int64_t dirty_bitmap_granularity(const DirtyBitmap *bm);
int64_t dirty_bitmap_size(const DirtyBitmap *bm);

/* Mark [offset, offset + bytes) dirty, rounded out to granules. */
void dirty_bitmap_set(DirtyBitmap *bm, int64_t offset, int64_t bytes);

/* Called by dirty_bitmap_set() with its range, after the bits are set. */
typedef void DirtyBitmapSetFunc(void *opaque, int64_t offset, int64_t bytes);

/* Call @fn(@opaque, ...) on every dirty_bitmap_set() from now on (NULL:
 * stop); one notifier at a time. */
void dirty_bitmap_set_notify(DirtyBitmap *bm, DirtyBitmapSetFunc *fn,
                             void *opaque);

/* Mark everything dirty (no notifier call). */
void dirty_bitmap_set_all(DirtyBitmap *bm);

/*
 * Mark [offset, offset + bytes) clean.  @offset is granule aligned and
 * @offset + @bytes is granule aligned or the end of the bitmap.
 */
void dirty_bitmap_reset(DirtyBitmap *bm, int64_t offset, int64_t bytes);

/* Is the granule holding @offset dirty? */
bool dirty_bitmap_get(const DirtyBitmap *bm, int64_t offset);

/* Dirty bytes (whole granules, the last clipped to the size).  O(1). */
int64_t dirty_bitmap_count(const DirtyBitmap *bm);

/* Dirty bytes inside [offset, offset + bytes). */
int64_t dirty_bitmap_count_range(const DirtyBitmap *bm, int64_t offset,
                                 int64_t bytes);

/* Start of the first dirty granule at or after @offset (or @offset itself
 * when it is dirty), or -1. */
int64_t dirty_bitmap_next_dirty(const DirtyBitmap *bm, int64_t offset);

/*
 * Start of the first clean granule in [offset, offset + bytes), or
 * @offset + @bytes clipped to the size when there is none.  The search
 * is bounded by @bytes: callers ask for no more than they can use.
 */
int64_t dirty_bitmap_next_clean(const DirtyBitmap *bm, int64_t offset,
                                int64_t bytes);

/* Heap bytes @bm holds now, and bitmap nodes visited so far
 * (util/hbitmap.h). */
size_t dirty_bitmap_memory(const DirtyBitmap *bm);
uint64_t dirty_bitmap_visits(const DirtyBitmap *bm);

/*
 * Bytes newly dirtied per second, averaged over the last few seconds,
 * counting only set() calls made after dirty_bitmap_track_rate(bm, true).
 */
void dirty_bitmap_track_rate(DirtyBitmap *bm, bool track);
double dirty_bitmap_rate(DirtyBitmap *bm, int64_t now_ns);

#endif /* BLOCK_DIRTY_BITMAP_H */
