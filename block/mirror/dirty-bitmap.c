/*
 * Dirty bitmaps in bytes over util/hbitmap, with a dirty-rate meter.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/dirty-bitmap.h"
#include "util/cutils.h"
#include "util/hbitmap.h"
#include "util/rate-meter.h"

struct DirtyBitmap {
    HBitmap *hb;
    int64_t size;
    int64_t granularity;

    bool track_rate;
    RateMeter rate;           /* newly dirtied bytes */

    DirtyBitmapSetFunc *on_set;
    void *on_set_opaque;
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
    if (bm->track_rate) {
        rate_meter_add(&bm->rate, clock_ns(), newly);
    }
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
    if (bm->on_set) {
        bm->on_set(bm->on_set_opaque, offset, bytes);
    }
}

void dirty_bitmap_set_notify(DirtyBitmap *bm, DirtyBitmapSetFunc *fn,
                             void *opaque)
{
    bm->on_set = fn;
    bm->on_set_opaque = opaque;
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

int64_t dirty_bitmap_next_clean(const DirtyBitmap *bm, int64_t offset,
                                int64_t bytes)
{
    int64_t end, r;

    g_assert(offset >= 0 && bytes >= 0);
    end = bytes > bm->size - offset ? bm->size : offset + bytes;
    if (offset >= end) {
        return end;
    }
    r = hbitmap_next_zero(bm->hb, offset, end - offset);
    return r < 0 ? end : r;
}

size_t dirty_bitmap_memory(const DirtyBitmap *bm)
{
    return sizeof(*bm) + hbitmap_memory(bm->hb);
}

uint64_t dirty_bitmap_visits(const DirtyBitmap *bm)
{
    return hbitmap_visits(bm->hb);
}

void dirty_bitmap_track_rate(DirtyBitmap *bm, bool track)
{
    bm->track_rate = track;
    rate_meter_reset(&bm->rate, clock_ns());
}

double dirty_bitmap_rate(DirtyBitmap *bm, int64_t now_ns)
{
    return bm->track_rate ? rate_meter_get(&bm->rate, now_ns) : 0;
}
