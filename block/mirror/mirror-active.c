/*
 * Write-blocking mode (see mirror-active.h).
 *
 * An active write first waits until no operation overlaps the granules it
 * touches (and keeps background operations off them meanwhile), so the
 * target never receives an older copy after the newer data.  Granules it
 * covers completely become clean; a partly covered granule that is dirty
 * is left to the background copy (clearing it would lose the rest of it).
 * A failed target write dirties the range again and goes through
 * on-target-error; the guest gets the source write's result.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"

#include <errno.h>

typedef struct MirrorActiveOp {
    MirrorJob *s;
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

void mirror_active_init(MirrorActive *a)
{
    *a = (MirrorActive) { .synced = false };
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

bool mirror_is_write_blocking(Job *job)
{
    MirrorJob *s = container_of(job, MirrorJob, common);

    return s->copy_mode == MIRROR_COPY_MODE_WRITE_BLOCKING &&
           s->track.dirty && !s->finished && !s->stopping && s->ret == 0 &&
           !job_is_cancelled(job);
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

static bool mirror_active_overlaps(MirrorActiveOp *a, MirrorActiveOp *b)
{
    return a->start < b->end && b->start < a->end;
}

/* Can @op start: nothing in flight on its granules, nobody ahead? */
static bool mirror_active_can_start(MirrorJob *s, MirrorActiveOp *op)
{
    if (hbitmap_count_between(s->track.in_flight, op->start,
                              op->end - op->start)) {
        return false;
    }
    for (GList *l = s->active.waiting.head; l && l->data != op;
         l = l->next) {
        if (mirror_active_overlaps(l->data, op)) {
            return false;
        }
    }
    return true;
}

static void mirror_active_settle(MirrorActiveOp *op, int ret)
{
    MirrorJob *s = op->s;
    BlockCompletionFunc *cb = op->cb;
    void *opaque = op->opaque;

    hbitmap_reset(s->track.in_flight, op->start, op->end - op->start);
    g_queue_unlink(&s->active.running, &op->link);
    s->active.in_flight--;
    g_free(op);
    cb(opaque, ret);
    mirror_active_start_waiting(s);
    mirror_pump(s);
}

static void mirror_active_target_done(void *opaque, int ret)
{
    MirrorActiveOp *op = opaque;
    MirrorJob *s = op->s;

    if (ret < 0) {
        dirty_bitmap_set(s->track.dirty, op->start, op->end - op->start);
        s->active.synced = false;
        mirror_error(s, false, ret, op->offset, op->bytes);
    } else if (s->track.zero && op->kind == MIRROR_WRITE_DATA) {
        hbitmap_reset(s->track.zero, op->start, op->end - op->start);
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
    MirrorJob *s = op->s;
    DirtyBitmap *dirty = s->track.dirty;
    int64_t g = s->cfg.granularity;
    int64_t len = s->cfg.len;
    int64_t wstart = op->offset, wend = op->offset + op->bytes;
    int64_t full_start = QEMU_ALIGN_UP(op->offset, g);
    int64_t full_end = wend == len ? wend : QEMU_ALIGN_DOWN(wend, g);

    op->writing_source = false;
    op->ret = ret;
    /* Partly covered granules may still be copied in the background:
     * what we knew of their block status is stale now. */
    mirror_status_written(&s->status, op->offset, op->bytes);
    if (ret < 0 || op->kind == MIRROR_WRITE_DISCARD) {
        /*
         * A failed write may have changed part of the source; after a
         * discard the source reads as old data or zeroes.  Either way the
         * background copy brings the target up to date.
         */
        dirty_bitmap_set(dirty, op->offset, op->bytes);
        s->active.synced = false;
        mirror_active_settle(op, ret);
        return;
    }
    if (op->offset % g && dirty_bitmap_get(dirty, op->start)) {
        wstart = MIN(op->start + g, wend);
    }
    if (wend % g && wend != len &&
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
    mirror_note_target_write(s);
    s->active.bytes += wend - wstart;
    if (op->kind == MIRROR_WRITE_ZERO) {
        bdrv_aio_pwrite_zeroes(s->dst, wstart, wend - wstart,
                               op->flags & BDRV_REQ_MAY_UNMAP,
                               mirror_active_target_done, op);
    } else {
        bdrv_aio_pwrite(s->dst, wstart, wend - wstart,
                        (const uint8_t *)op->buf + (wstart - op->offset),
                        op->flags & BDRV_REQ_FUA, mirror_active_target_done,
                        op);
    }
}

static void mirror_active_run(MirrorActiveOp *op)
{
    MirrorJob *s = op->s;

    hbitmap_set(s->track.in_flight, op->start, op->end - op->start);
    op->writing_source = true;
    switch (op->kind) {
    case MIRROR_WRITE_DATA:
        bdrv_aio_pwrite(s->src, op->offset, op->bytes, op->buf, op->flags,
                        mirror_active_source_done, op);
        break;
    case MIRROR_WRITE_ZERO:
        bdrv_aio_pwrite_zeroes(s->src, op->offset, op->bytes, op->flags,
                               mirror_active_source_done, op);
        break;
    case MIRROR_WRITE_DISCARD:
        bdrv_aio_pdiscard(s->src, op->offset, op->bytes,
                          mirror_active_source_done, op);
        break;
    }
}

void mirror_active_start_waiting(MirrorJob *s)
{
    GList *l = s->active.waiting.head;

    while (l) {
        GList *next = l->next;
        MirrorActiveOp *op = l->data;

        if (mirror_active_can_start(s, op)) {
            g_queue_unlink(&s->active.waiting, l);
            g_queue_push_tail_link(&s->active.running, &op->link);
            mirror_active_run(op);
        }
        l = next;
    }
}

void mirror_active_write(Job *job, MirrorWriteKind kind, int64_t offset,
                         int64_t bytes, const void *buf,
                         BdrvRequestFlags flags, BlockCompletionFunc *cb,
                         void *opaque)
{
    MirrorJob *s = container_of(job, MirrorJob, common);
    int64_t g = s->cfg.granularity;
    MirrorActiveOp *op = g_new0(MirrorActiveOp, 1);

    g_assert(mirror_is_write_blocking(job));
    *op = (MirrorActiveOp) {
        .s = s, .kind = kind, .offset = offset, .bytes = bytes,
        .start = QEMU_ALIGN_DOWN(offset, g),
        .end = MIN(QEMU_ALIGN_UP(offset + bytes, g), s->cfg.len),
        .buf = buf, .flags = flags, .cb = cb, .opaque = opaque,
    };
    op->link.data = op;
    if (bytes == 0 || offset + bytes > s->cfg.len) {
        /* Nothing to mirror, or the source refuses it: pass it on. */
        op->end = op->start;
    }
    s->active.in_flight++;
    g_queue_push_tail_link(&s->active.waiting, &op->link);
    mirror_active_start_waiting(s);
}
