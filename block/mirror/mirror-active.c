/*
 * Write-blocking mode (see mirror-active.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-active.h"
#include "util/cutils.h"

typedef struct MirrorActiveOp {
    MirrorActive *a;
    MirrorWriteKind kind;
    int64_t offset;             /* the guest's range */
    int64_t bytes;
    int64_t start;              /* granules touched: [start, end) */
    int64_t end;
    const void *buf;
    BdrvRequestFlags flags;
    bool writing_source;        /* the source write is in flight */
    int ret;                    /* the source write's result */
    BlockCompletionFunc *cb;
    void *opaque;
    GList link;                 /* in MirrorActive.waiting or .running */
} MirrorActiveOp;

void mirror_active_init(MirrorActive *a, BlockDriverState *src,
                        BlockDriverState *dst, int64_t granularity,
                        int64_t len, MirrorTrack *track,
                        MirrorStatus *status, const MirrorActiveOwner *owner,
                        void *opaque)
{
    *a = (MirrorActive) {
        .src = src,
        .dst = dst,
        .granularity = granularity,
        .len = len,
        .track = track,
        .status = status,
        .owner = owner,
        .opaque = opaque,
    };
    g_queue_init(&a->waiting);
    g_queue_init(&a->running);
}

bool mirror_active_has_waiting(const MirrorActive *a)
{
    return a->waiting.head != NULL;
}

int mirror_active_in_flight(const MirrorActive *a)
{
    return a->in_flight;
}

bool mirror_active_synced(const MirrorActive *a)
{
    return a->synced;
}

void mirror_active_set_synced(MirrorActive *a, bool synced)
{
    a->synced = synced;
}

bool mirror_active_is_own_write(const MirrorActive *a, int64_t offset,
                                int64_t bytes)
{
    for (GList *l = a->running.head; l; l = l->next) {
        MirrorActiveOp *op = l->data;

        if (op->writing_source && op->offset == offset &&
            op->bytes == bytes) {
            return true;
        }
    }
    return false;
}

static bool mirror_active_overlaps(MirrorActiveOp *x, MirrorActiveOp *y)
{
    return x->start < y->end && y->start < x->end;
}

/* Can @op start: nothing in flight on its granules, nobody ahead? */
static bool mirror_active_can_start(MirrorActive *a, MirrorActiveOp *op)
{
    if (hbitmap_count_between(a->track->in_flight, op->start,
                              op->end - op->start)) {
        return false;
    }
    for (GList *l = a->waiting.head; l && l->data != op; l = l->next) {
        if (mirror_active_overlaps(l->data, op)) {
            return false;
        }
    }
    return true;
}

static void mirror_active_settle(MirrorActiveOp *op, int ret)
{
    MirrorActive *a = op->a;
    BlockCompletionFunc *cb = op->cb;
    void *opaque = op->opaque;

    hbitmap_reset(a->track->in_flight, op->start, op->end - op->start);
    g_queue_unlink(&a->running, &op->link);
    a->in_flight--;
    g_free(op);
    cb(opaque, ret);
    mirror_active_start_waiting(a);
    a->owner->settled(a->opaque);
}

static void mirror_active_target_done(void *opaque, int ret)
{
    MirrorActiveOp *op = opaque;
    MirrorActive *a = op->a;

    /* Data may have landed, even from a write that failed. */
    if (op->kind == MIRROR_WRITE_DATA) {
        mirror_zero_written(&a->track->zero, op->start, op->end - op->start);
    }
    if (ret < 0) {
        dirty_bitmap_set(a->track->dirty, op->start, op->end - op->start);
        a->synced = false;
        a->owner->target_failed(a->opaque, ret, op->offset, op->bytes);
    } else {
        /* Acknowledged, not yet flushed (mirror-track.h). */
        mirror_extents_add(&a->track->unflushed, op->start, op->end);
        mirror_state_clean(a->track->state, a->track->dirty, op->start,
                           op->end - op->start);
    }
    mirror_active_settle(op, op->ret);
}

/*
 * The source has the new data: clean the granules the write covered
 * completely and write the target, leaving dirty partial granules to the
 * background copy.
 */
static void mirror_active_source_done(void *opaque, int ret)
{
    MirrorActiveOp *op = opaque;
    MirrorActive *a = op->a;
    DirtyBitmap *dirty = a->track->dirty;
    int64_t g = a->granularity;
    int64_t wstart = op->offset, wend = op->offset + op->bytes;
    int64_t full_start = QEMU_ALIGN_UP(op->offset, g);
    int64_t full_end = wend == a->len ? wend : QEMU_ALIGN_DOWN(wend, g);

    op->writing_source = false;
    op->ret = ret;
    /* Partly covered granules may still be copied in the background:
     * what we knew of their block status is stale now. */
    mirror_status_written(a->status, op->offset, op->bytes);
    if (ret < 0 || op->kind == MIRROR_WRITE_DISCARD) {
        /*
         * A failed write may have changed part of the source; after a
         * discard the source reads as old data or zeroes.  Either way the
         * background copy brings the target up to date.
         */
        dirty_bitmap_set(dirty, op->offset, op->bytes);
        a->synced = false;
        mirror_active_settle(op, ret);
        return;
    }
    if (op->offset % g && dirty_bitmap_get(dirty, op->start)) {
        wstart = MIN(op->start + g, wend);
    }
    if (wend % g && wend != a->len &&
        dirty_bitmap_get(dirty, QEMU_ALIGN_DOWN(wend - 1, g))) {
        wend = MAX(QEMU_ALIGN_DOWN(wend - 1, g), wstart);
    }
    if (full_start < full_end) {
        dirty_bitmap_reset(dirty, full_start, full_end - full_start);
    }
    if (wstart >= wend) {
        mirror_active_settle(op, 0);
        return;
    }
    a->owner->target_write(a->opaque);
    a->bytes += wend - wstart;
    if (op->kind == MIRROR_WRITE_ZERO) {
        bdrv_aio_pwrite_zeroes(a->dst, wstart, wend - wstart,
                               op->flags & (BDRV_REQ_MAY_UNMAP |
                                            BDRV_REQ_PRIO),
                               mirror_active_target_done, op);
    } else {
        bdrv_aio_pwrite(a->dst, wstart, wend - wstart,
                        (const uint8_t *)op->buf + (wstart - op->offset),
                        op->flags & (BDRV_REQ_FUA | BDRV_REQ_PRIO),
                        mirror_active_target_done, op);
    }
}

static void mirror_active_run(MirrorActiveOp *op)
{
    MirrorActive *a = op->a;

    hbitmap_set(a->track->in_flight, op->start, op->end - op->start);
    op->writing_source = true;
    switch (op->kind) {
    case MIRROR_WRITE_DATA:
        bdrv_aio_pwrite(a->src, op->offset, op->bytes, op->buf, op->flags,
                        mirror_active_source_done, op);
        break;
    case MIRROR_WRITE_ZERO:
        bdrv_aio_pwrite_zeroes(a->src, op->offset, op->bytes, op->flags,
                               mirror_active_source_done, op);
        break;
    case MIRROR_WRITE_DISCARD:
        bdrv_aio_submit(a->src, BDRV_OP_DISCARD, op->offset, op->bytes,
                        NULL, op->flags & BDRV_REQ_PRIO, NULL,
                        mirror_active_source_done, op);
        break;
    }
}

void mirror_active_start_waiting(MirrorActive *a)
{
    GList *l = a->waiting.head;

    while (l) {
        GList *next = l->next;
        MirrorActiveOp *op = l->data;

        if (mirror_active_can_start(a, op)) {
            g_queue_unlink(&a->waiting, l);
            g_queue_push_tail_link(&a->running, &op->link);
            mirror_active_run(op);
        }
        l = next;
    }
}

void mirror_active_submit(MirrorActive *a, MirrorWriteKind kind,
                          int64_t offset, int64_t bytes, const void *buf,
                          BdrvRequestFlags flags, BlockCompletionFunc *cb,
                          void *opaque)
{
    int64_t g = a->granularity;
    MirrorActiveOp *op = g_new0(MirrorActiveOp, 1);

    *op = (MirrorActiveOp) {
        .a = a, .kind = kind, .offset = offset, .bytes = bytes,
        .start = QEMU_ALIGN_DOWN(offset, g),
        .end = MIN(QEMU_ALIGN_UP(offset + bytes, g), a->len),
        .buf = buf, .flags = flags, .cb = cb, .opaque = opaque,
    };
    op->link.data = op;
    if (bytes == 0 || offset + bytes > a->len) {
        /* Nothing to mirror, or the source refuses it: pass it on. */
        op->end = op->start;
    }
    a->in_flight++;
    g_queue_push_tail_link(&a->waiting, &op->link);
    mirror_active_start_waiting(a);
}
