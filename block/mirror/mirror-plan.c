/*
 * Choosing the mirror job's next operation: the first dirty granule at or
 * after the cursor that no operation covers, what the source's block
 * status says is there (asked lazily, a large window at a time), and how
 * far it may coalesce within the size caps, the byte budget and the speed
 * limit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"

/* How much block status to ask for at once. */
#define MIRROR_STATUS_WINDOW    (1 * GiB)
/* Writes remembered while a fetch is pending; beyond, the answer is
 * dropped. */
#define MIRROR_STATUS_MAX_WRITES 4096

/* ---- source block status, fetched lazily in large windows ---- */

/* The index of the first extent of @st (sorted, contiguous) that ends
 * after @offset; st->len if none does. */
static guint mirror_extent_index(GArray *st, int64_t offset)
{
    guint lo = 0, hi = st->len;

    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;
        const BlockExtent *e = &g_array_index(st, BlockExtent, mid);

        if (e->offset + e->length <= offset) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static const BlockExtent *mirror_status_lookup(MirrorJob *s, int64_t offset)
{
    GArray *st = s->status;
    const BlockExtent *e;

    if (!st || !st->len || offset < s->status_start ||
        offset >= s->status_end) {
        return NULL;
    }
    /* The cursor moves forward: try the last hit and the next first. */
    for (guint i = s->status_idx; i < MIN(s->status_idx + 2, st->len); i++) {
        e = &g_array_index(st, BlockExtent, i);
        if (e->offset <= offset && offset < e->offset + e->length) {
            s->status_idx = i;
            return e;
        }
    }
    s->status_idx = mirror_extent_index(st, offset);
    return s->status_idx < st->len ? &g_array_index(st, BlockExtent,
                                                    s->status_idx)
                                   : NULL;
}

/*
 * Does mirror_plan() copy what @e describes, whatever its length?  Such an
 * answer stays right whatever is written there later: a write can only
 * turn a range into data (or, by discarding, into zeroes, which copying
 * reads correctly).
 */
static bool mirror_extent_copies(MirrorJob *s, const BlockExtent *e)
{
    return !(s->sync == MIRROR_SYNC_MODE_TOP && e->depth > 0) &&
           ((e->flags & BDRV_BLOCK_DATA) || !(e->flags & BDRV_BLOCK_ZERO) ||
            s->allocate_zeroes);
}

/* Do all extents of @st (sorted, contiguous) that overlap [offset,
 * offset + bytes) copy? */
static bool mirror_status_copies(MirrorJob *s, GArray *st, int64_t offset,
                                 int64_t bytes)
{
    for (guint i = mirror_extent_index(st, offset); i < st->len; i++) {
        const BlockExtent *e = &g_array_index(st, BlockExtent, i);

        if (e->offset >= offset + bytes) {
            break;
        }
        if (!mirror_extent_copies(s, e)) {
            return false;
        }
    }
    return true;
}

/* Does the fresh answer @st hold for the writes that landed while it was
 * being fetched? */
static bool mirror_status_survives_writes(MirrorJob *s, GArray *st)
{
    GArray *w = s->status_writes;
    bool ok = !s->status_stale;

    for (guint i = 0; ok && w && i < w->len; i++) {
        const BlockExtent *e = &g_array_index(w, BlockExtent, i);

        ok = mirror_status_copies(s, st, e->offset, e->length);
    }
    s->status_stale = false;
    if (w) {
        g_array_set_size(w, 0);
    }
    return ok;
}

static void mirror_status_done(void *opaque, int ret)
{
    MirrorJob *s = opaque;
    GArray *st = s->status_new;

    s->status_new = NULL;
    s->status_pending = false;
    if (!mirror_status_survives_writes(s, st)) {
        /* A write landed while we asked: the answer may predate it. */
        g_array_unref(st);
        mirror_status_invalidate(s);
        mirror_pump(s);
        return;
    }
    if (ret < 0) {
        /* Unknown: copy it (the read will report a real failure). */
        BlockExtent e = {
            .offset = s->status_fetch_offset,
            .length = MIN(s->chunk_size, s->len - s->status_fetch_offset),
            .flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED,
        };
        g_array_set_size(st, 0);
        g_array_append_val(st, e);
    }
    if (s->status) {
        g_array_unref(s->status);
    }
    s->status = st;
    s->status_idx = 0;
    s->status_start = g_array_index(st, BlockExtent, 0).offset;
    s->status_end = s->status_start;
    for (guint i = 0; i < st->len; i++) {
        s->status_end += g_array_index(st, BlockExtent, i).length;
    }
    mirror_pump(s);
}

static void mirror_status_fetch(MirrorJob *s, int64_t offset)
{
    g_assert(!s->status_pending);
    s->status_pending = true;
    s->status_fetch_offset = offset;
    s->status_new = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    bdrv_aio_block_status(s->src, offset,
                          MIN(MIRROR_STATUS_WINDOW, s->len - offset),
                          s->status_new, mirror_status_done, s);
}

void mirror_status_invalidate(MirrorJob *s)
{
    if (s->status) {
        g_array_set_size(s->status, 0);
        s->status_start = s->status_end = 0;
    }
}

void mirror_status_written(MirrorJob *s, int64_t offset, int64_t bytes)
{
    /* Guests keep writing during a live mirror: dropping the window for
     * each write would re-read the status of the whole window (on tmpfs
     * that walks every page) after every write, so only writes over
     * extents that do not copy drop it. */
    if (offset < s->status_end && s->status_start < offset + bytes &&
        !mirror_status_copies(s, s->status, offset, bytes)) {
        mirror_status_invalidate(s);
    }
    if (s->status_pending &&
        offset < s->status_fetch_offset + MIRROR_STATUS_WINDOW &&
        s->status_fetch_offset < offset + bytes) {
        BlockExtent e = { .offset = offset, .length = bytes };

        if (!s->status_writes) {
            s->status_writes = g_array_new(FALSE, FALSE,
                                           sizeof(BlockExtent));
        }
        if (s->status_writes->len < MIRROR_STATUS_MAX_WRITES) {
            g_array_append_val(s->status_writes, e);
        } else {
            s->status_stale = true;
        }
    }
}

/* ---- choosing the next operation ---- */

/*
 * The first dirty offset at or after the cursor that no operation covers,
 * wrapping around once (a new pass); -1 if there is none.
 */
static int64_t mirror_next_candidate(MirrorJob *s)
{
    for (int sweep = 0; sweep < 2; sweep++) {
        int64_t off = sweep == 0 ? s->cursor : 0;
        int64_t limit = sweep == 0 ? s->len : s->cursor;

        while (off < limit) {
            int64_t busy_end;

            off = dirty_bitmap_next_dirty(s->dirty, off);
            if (off < 0 || off >= limit) {
                break;
            }
            if (!hbitmap_get(s->in_flight_bitmap, off)) {
                if (sweep == 1) {
                    s->passes++;
                }
                return off;
            }
            busy_end = hbitmap_next_zero(s->in_flight_bitmap, off,
                                         UINT64_MAX);
            off = busy_end < 0 ? s->len : busy_end;
        }
    }
    return -1;
}

/* Does the target already read as zero over [offset, offset + bytes)? */
static bool mirror_target_known_zero(MirrorJob *s, int64_t offset,
                                     int64_t bytes)
{
    return s->zero_bitmap &&
           hbitmap_count_between(s->zero_bitmap, offset, bytes) ==
           (uint64_t)bytes;
}

/*
 * Decide what to do at @offset: the method and the largest length allowed
 * by the source's block status and the size caps.  Returns false when the
 * block status is not known yet (a fetch was started).
 */
static bool mirror_plan(MirrorJob *s, int64_t offset, MirrorMethod *method,
                        int64_t *max_bytes)
{
    const BlockExtent *ext = mirror_status_lookup(s, offset);
    int64_t g = s->granularity;
    int64_t ext_end, len;

    if (!ext) {
        if (!s->status_pending) {
            mirror_status_fetch(s, offset);
        }
        return false;
    }
    ext_end = ext->offset + ext->length;
    len = ext_end >= s->len ? s->len - offset
                            : QEMU_ALIGN_DOWN(ext_end - offset, g);

    if (mirror_extent_copies(s, ext)) {
        *method = MIRROR_METHOD_COPY;
    } else if (s->sync == MIRROR_SYNC_MODE_TOP && ext->depth > 0) {
        /* Provided by the target's backing file: nothing to copy. */
        *method = MIRROR_METHOD_SKIP;
    } else {
        *method = MIRROR_METHOD_ZERO;
    }
    if (len < g) {
        /* Status changes inside this granule: copy the whole granule. */
        *method = MIRROR_METHOD_COPY;
        len = MIN(g, s->len - offset);
    }
    if (*method == MIRROR_METHOD_COPY) {
        len = MIN(len, s->buf_elem_size);
    } else {
        len = MIN(len, MIRROR_MAX_ZERO_BYTES);
    }
    *max_bytes = len;
    return true;
}

bool mirror_issue_one(MirrorJob *s)
{
    int64_t g = s->granularity;
    MirrorMethod method;
    int64_t offset, run_end, busy, max_bytes, bytes, delay;
    uint8_t *buf = NULL;

    offset = mirror_next_candidate(s);
    if (offset < 0 || !mirror_plan(s, offset, &method, &max_bytes)) {
        return false;
    }

    /* Coalesce consecutive dirty granules that no operation covers. */
    run_end = dirty_bitmap_next_clean(s->dirty, offset);
    busy = hbitmap_next_dirty(s->in_flight_bitmap, offset, UINT64_MAX);
    if (busy >= 0 && busy < run_end) {
        run_end = busy;
    }
    bytes = MIN(run_end - offset, max_bytes);

    if (method == MIRROR_METHOD_ZERO &&
        mirror_target_known_zero(s, offset, bytes)) {
        method = MIRROR_METHOD_SKIP;
    }
    if (method == MIRROR_METHOD_COPY) {
        int64_t avail = s->win_buf_size - s->op_bytes_in_flight;

        if (bytes > avail) {
            /* Only when others are in flight: the window >= one buffer.
             * A window that just shrank may be overdrawn. */
            bytes = avail > 0 ? QEMU_ALIGN_DOWN(avail, g) : 0;
            if (bytes == 0) {
                return false;
            }
        }
        if (!mirror_slot_get(s, bytes, &buf)) {
            return false;
        }
        delay = ratelimit_calculate_delay(&s->limit, clock_ns(), bytes);
        if (delay > 0) {
            mirror_slot_put(s, buf);
            mirror_rate_limit_wait(s, delay);
            return false;
        }
    }
    g_assert(bytes > 0);
    g_assert(QEMU_IS_ALIGNED(offset, g));
    g_assert(QEMU_IS_ALIGNED(bytes, g) || offset + bytes == s->len);

    /* Clear before reading: a write racing with the copy dirties again. */
    dirty_bitmap_reset(s->dirty, offset, bytes);
    s->cursor = offset + bytes;

    if (method == MIRROR_METHOD_SKIP) {
        s->stats_skipped += bytes;
        s->common.progress_current += bytes;
        return true;
    }
    mirror_op_start(s, method, offset, bytes, buf);
    return true;
}
