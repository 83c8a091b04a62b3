/*
 * Dirty bitmaps in bytes over util/hbitmap, with a dirty-rate meter.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/dirty-bitmap.h"
#include "util/cutils.h"
#include "util/hbitmap.h"

/* The rate is an exponentially weighted average over ~2 s windows. */
#define DIRTY_RATE_WINDOW_NS (500 * 1000 * 1000LL)
#define DIRTY_RATE_WEIGHT 0.25

struct DirtyBitmap {
    HBitmap *hb;
    int64_t size;
    int64_t granularity;

    bool track_rate;
    int64_t window_start_ns;
    int64_t window_bytes;     /* newly dirtied in the current window */
    double rate;              /* bytes per second */
};

DirtyBitmap *dirty_bitmap_new(int64_t size, int64_t granularity)
{
    DirtyBitmap *bm = g_new0(DirtyBitmap, 1);

    g_assert(size >= 0 && is_power_of_2(granularity));
    bm->hb = hbitmap_new(size, __builtin_ctzll(granularity));
    bm->size = size;
    bm->granularity = granularity;
    return bm;
}

void dirty_bitmap_free(DirtyBitmap *bm)
{
    if (bm) {
        hbitmap_free(bm->hb);
        g_free(bm);
    }
}

int64_t dirty_bitmap_granularity(const DirtyBitmap *bm)
{
    return bm->granularity;
}

int64_t dirty_bitmap_size(const DirtyBitmap *bm)
{
    return bm->size;
}

static void dirty_bitmap_account(DirtyBitmap *bm, int64_t newly)
{
    int64_t now = clock_ns();

    if (!bm->track_rate) {
        return;
    }
    dirty_bitmap_rate(bm, now);
    bm->window_bytes += newly;
}

void dirty_bitmap_set(DirtyBitmap *bm, int64_t offset, int64_t bytes)
{
    int64_t before;

    g_assert(offset >= 0 && bytes >= 0);
    if (offset >= bm->size || bytes == 0) {
        return;
    }
    before = hbitmap_count(bm->hb);
    hbitmap_set(bm->hb, offset, MIN(bytes, bm->size - offset));
    dirty_bitmap_account(bm, hbitmap_count(bm->hb) - before);
}

void dirty_bitmap_set_all(DirtyBitmap *bm)
{
    hbitmap_set_all(bm->hb);
}

void dirty_bitmap_reset(DirtyBitmap *bm, int64_t offset, int64_t bytes)
{
    g_assert(offset >= 0 && bytes >= 0);
    g_assert(QEMU_IS_ALIGNED(offset, bm->granularity));
    g_assert(QEMU_IS_ALIGNED(offset + bytes, bm->granularity) ||
             offset + bytes >= bm->size);
    if (offset >= bm->size || bytes == 0) {
        return;
    }
    hbitmap_reset(bm->hb, offset, MIN(bytes, bm->size - offset));
}

bool dirty_bitmap_get(const DirtyBitmap *bm, int64_t offset)
{
    return offset < bm->size && hbitmap_get(bm->hb, offset);
}

int64_t dirty_bitmap_count(const DirtyBitmap *bm)
{
    return hbitmap_count(bm->hb);
}

int64_t dirty_bitmap_count_range(const DirtyBitmap *bm, int64_t offset,
                                 int64_t bytes)
{
    if (offset >= bm->size || bytes <= 0) {
        return 0;
    }
    return hbitmap_count_between(bm->hb, offset,
                                 MIN(bytes, bm->size - offset));
}

int64_t dirty_bitmap_next_dirty(const DirtyBitmap *bm, int64_t offset)
{
    if (offset >= bm->size) {
        return -1;
    }
    return hbitmap_next_dirty(bm->hb, offset, UINT64_MAX);
}

int64_t dirty_bitmap_next_clean(const DirtyBitmap *bm, int64_t offset)
{
    int64_t r;

    if (offset >= bm->size) {
        return bm->size;
    }
    r = hbitmap_next_zero(bm->hb, offset, UINT64_MAX);
    return r < 0 ? bm->size : r;
}

void dirty_bitmap_track_rate(DirtyBitmap *bm, bool track)
{
    bm->track_rate = track;
    bm->window_start_ns = clock_ns();
    bm->window_bytes = 0;
    bm->rate = 0;
}

double dirty_bitmap_rate(DirtyBitmap *bm, int64_t now_ns)
{
    if (!bm->track_rate) {
        return 0;
    }
    /* Close every full window since the last call. */
    while (now_ns - bm->window_start_ns >= DIRTY_RATE_WINDOW_NS) {
        double w = bm->window_bytes * 1e9 / DIRTY_RATE_WINDOW_NS;

        bm->rate = bm->rate * (1 - DIRTY_RATE_WEIGHT) + w * DIRTY_RATE_WEIGHT;
        bm->window_bytes = 0;
        bm->window_start_ns += DIRTY_RATE_WINDOW_NS;
        if (now_ns - bm->window_start_ns > 20 * DIRTY_RATE_WINDOW_NS) {
            /* Long idle: the average has decayed to nothing. */
            bm->rate = 0;
            bm->window_start_ns = now_ns;
        }
    }
    return bm->rate;
}
