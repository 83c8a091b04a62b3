/*
 * The source's block status, fetched lazily in large windows and cached
 * (see mirror-status.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-status.h"

void mirror_status_init(MirrorStatus *st, BlockDriverState *src, int64_t len,
                        int64_t fallback_bytes, bool skip_backing,
                        bool allocate_zeroes, void (*fetched)(void *opaque),
                        void *opaque)
{
    *st = (MirrorStatus) {
        .src = src,
        .len = len,
        .fallback_bytes = fallback_bytes,
        .skip_backing = skip_backing,
        .allocate_zeroes = allocate_zeroes,
        .fetched = fetched,
        .opaque = opaque,
        .stale_from = INT64_MAX,
    };
}

void mirror_status_free(MirrorStatus *st)
{
    g_assert(!st->pending);
    if (st->extents) {
        g_array_unref(st->extents);
        st->extents = NULL;
    }
    if (st->writes) {
        g_array_unref(st->writes);
        st->writes = NULL;
    }
}

/* The index of the first extent of @ext (sorted, contiguous) that ends
 * after @offset; ext->len if none does. */
static guint mirror_extent_index(GArray *ext, int64_t offset)
{
    guint lo = 0, hi = ext->len;

    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;
        const BlockExtent *e = &g_array_index(ext, BlockExtent, mid);

        if (e->offset + e->length <= offset) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

const BlockExtent *mirror_status_lookup(MirrorStatus *st, int64_t offset)
{
    GArray *ext = st->extents;
    const BlockExtent *e;

    if (!ext || !ext->len || offset < st->start || offset >= st->end) {
        return NULL;
    }
    /* The cursor moves forward: try the last hit and the next first. */
    for (guint i = st->idx; i < MIN(st->idx + 2, ext->len); i++) {
        e = &g_array_index(ext, BlockExtent, i);
        if (e->offset <= offset && offset < e->offset + e->length) {
            st->idx = i;
            return e;
        }
    }
    st->idx = mirror_extent_index(ext, offset);
    return st->idx < ext->len ? &g_array_index(ext, BlockExtent, st->idx)
                              : NULL;
}

bool mirror_status_from_backing(const MirrorStatus *st, const BlockExtent *e)
{
    return st->skip_backing && e->depth > 0;
}

bool mirror_status_copies(const MirrorStatus *st, const BlockExtent *e)
{
    return !mirror_status_from_backing(st, e) &&
           ((e->flags & BDRV_BLOCK_DATA) || !(e->flags & BDRV_BLOCK_ZERO) ||
            st->allocate_zeroes);
}

/* The index of the first extent of @ext (sorted, contiguous) that
 * overlaps [offset, offset + bytes) and is not copied; ext->len if none. */
static guint mirror_status_first_stale(const MirrorStatus *st, GArray *ext,
                                       int64_t offset, int64_t bytes)
{
    guint i;

    for (i = mirror_extent_index(ext, offset); i < ext->len; i++) {
        const BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        if (e->offset >= offset + bytes || !mirror_status_copies(st, e)) {
            break;
        }
    }
    if (i < ext->len &&
        g_array_index(ext, BlockExtent, i).offset >= offset + bytes) {
        return ext->len;
    }
    return i;
}

/*
 * How many extents of the fresh answer @ext hold for the writes that
 * landed while it was being fetched: those before the first one that a
 * write may have changed (all when none).  An answer for the whole rest
 * of the disk stays of use when guests write far ahead, and also under
 * more writes than are remembered.
 */
static int64_t mirror_status_extents_valid(MirrorStatus *st, GArray *ext)
{
    GArray *w = st->writes;
    int64_t keep = mirror_extent_index(ext, st->stale_from);

    for (guint i = 0; keep > 0 && w && i < w->len; i++) {
        const BlockExtent *e = &g_array_index(w, BlockExtent, i);

        keep = MIN(keep, mirror_status_first_stale(st, ext, e->offset,
                                                   e->length));
    }
    st->stale_from = INT64_MAX;
    if (w) {
        g_array_set_size(w, 0);
    }
    return keep;
}

/* Append the read-ahead answer @ext to the cache, dropping the extents
 * behind the last lookup to make room. */
static void mirror_status_append(MirrorStatus *st, GArray *ext)
{
    guint room;

    g_array_remove_range(st->extents, 0, st->idx);
    st->idx = 0;
    st->start = g_array_index(st->extents, BlockExtent, 0).offset;
    room = MIRROR_STATUS_MAX_EXTENTS - MIN(st->extents->len,
                                           MIRROR_STATUS_MAX_EXTENTS);
    for (guint i = 0; i < MIN(ext->len, room); i++) {
        const BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_array_append_val(st->extents, *e);
        st->end += e->length;
    }
}

static void mirror_status_done(void *opaque, int ret)
{
    MirrorStatus *st = opaque;
    GArray *ext = st->fetched_extents;
    bool ahead;
    int64_t keep;

    st->fetched_extents = NULL;
    st->pending = false;
    /* A read-ahead: the cache still ends where this answer begins. */
    ahead = st->extents && st->extents->len && st->end == st->fetch_offset;
    keep = mirror_status_extents_valid(st, ext);
    if (keep == 0 && ext->len) {
        /* A write landed while we asked: the answer may predate it. */
        g_array_unref(ext);
        if (!ahead) {
            mirror_status_invalidate(st);
        }
        st->fetched(st->opaque);
        return;
    }
    if (ret < 0) {
        /* Unknown: copy it (the read will report a real failure). */
        BlockExtent e = {
            .offset = st->fetch_offset,
            .length = MIN(st->fallback_bytes, st->len - st->fetch_offset),
            .flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED,
        };
        g_array_set_size(ext, 0);
        g_array_append_val(ext, e);
    } else if (ext->len > MIN(keep, MIRROR_STATUS_MAX_EXTENTS)) {
        g_array_set_size(ext, MIN(keep, MIRROR_STATUS_MAX_EXTENTS));
    }
    if (ahead && ext->len) {
        mirror_status_append(st, ext);
        g_array_unref(ext);
        st->fetched(st->opaque);
        return;
    }
    if (st->extents) {
        g_array_unref(st->extents);
    }
    st->extents = ext;
    st->idx = 0;
    st->start = g_array_index(ext, BlockExtent, 0).offset;
    st->end = st->start;
    for (guint i = 0; i < ext->len; i++) {
        st->end += g_array_index(ext, BlockExtent, i).length;
    }
    st->fetched(st->opaque);
}

void mirror_status_fetch(MirrorStatus *st, int64_t offset)
{
    g_assert(!st->pending);
    st->pending = true;
    st->fetch_offset = offset;
    st->fetched_extents = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    bdrv_aio_block_status(st->src, offset,
                          MIN(MIRROR_STATUS_WINDOW, st->len - offset),
                          st->fetched_extents, mirror_status_done, st);
}

void mirror_status_read_ahead(MirrorStatus *st)
{
    GArray *ext = st->extents;

    if (!st->pending && ext && ext->len && st->end < st->len &&
        (ext->len - st->idx) <= ext->len / 2 + 1) {
        mirror_status_fetch(st, st->end);
    }
}

bool mirror_status_pending(const MirrorStatus *st)
{
    return st->pending;
}

void mirror_status_invalidate(MirrorStatus *st)
{
    if (st->extents) {
        g_array_set_size(st->extents, 0);
        st->start = st->end = 0;
    }
}

/*
 * Drop what the cache may no longer say right after a write to [offset,
 * offset + bytes) inside it: the extents from the first one written that
 * is not copied when that lies ahead of the last lookup, those up to the
 * last one written when that lies behind it, else all.  The cache covers
 * the rest of the disk: a write far from the cursor must not make the
 * job ask for its status again.
 */
static void mirror_status_drop_stale(MirrorStatus *st, int64_t offset,
                                     int64_t bytes)
{
    GArray *ext = st->extents;
    guint i = mirror_status_first_stale(st, ext, offset, bytes);
    guint j;

    if (i >= ext->len) {
        return;         /* only extents that are copied anyway */
    }
    if (i > st->idx) {
        st->end = g_array_index(ext, BlockExtent, i).offset;
        g_array_set_size(ext, i);
        return;
    }
    j = mirror_extent_index(ext, offset + bytes - 1);
    if (j < st->idx) {
        const BlockExtent *e = &g_array_index(ext, BlockExtent, j);

        st->start = e->offset + e->length;
        g_array_remove_range(ext, 0, j + 1);
        st->idx -= j + 1;
        return;
    }
    mirror_status_invalidate(st);
}

void mirror_status_written(MirrorStatus *st, int64_t offset, int64_t bytes)
{
    /* Guests keep writing during a live mirror: dropping the cache for
     * each write would re-read the status of the rest of the disk (on
     * tmpfs that walks every page) after every write, so only writes over
     * extents that do not copy cut it (mirror_status_drop_stale()). */
    if (offset < st->end && st->start < offset + bytes) {
        mirror_status_drop_stale(st, offset, bytes);
    }
    if (st->pending &&
        offset - st->fetch_offset < MIRROR_STATUS_WINDOW &&
        st->fetch_offset < offset + bytes) {
        BlockExtent e = { .offset = offset, .length = bytes };

        if (!st->writes) {
            st->writes = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
        }
        if (st->writes->len < MIRROR_STATUS_MAX_WRITES) {
            g_array_append_val(st->writes, e);
        } else {
            st->stale_from = MIN(st->stale_from, offset);
        }
    }
}

size_t mirror_status_memory(const MirrorStatus *st)
{
    GArray *arrays[] = { st->extents, st->fetched_extents, st->writes };
    size_t n = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++) {
        if (arrays[i]) {
            n += arrays[i]->len * sizeof(BlockExtent);
        }
    }
    return n;
}
