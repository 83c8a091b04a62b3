/*
 * The life of one mirror operation (see mirror-op.h): a COPY gets the
 * source's bytes through the copy path (mirror-copy.h), waits for its
 * turn when writes go out in order, writes the target (in pieces when
 * zero runs of the data become zero writes: mirror-sparse.h), then
 * retires.
 *
 * An operation covers whole granules [offset, offset + bytes) (the last
 * one may end at the end of the image).  Its dirty bits were cleared
 * when it started, before the source is read; no two operations overlap
 * (the in-flight bitmap).  A failed operation dirties its whole range
 * again before the error policy runs, so nothing is lost whatever the
 * policy does next.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"

void mirror_ops_init(MirrorJob *s, const MirrorOpOwner *owner)
{
    s->ops.owner = owner;
    g_queue_init(&s->ops.ops);
    g_queue_init(&s->ops.order);
}

void mirror_ops_start(MirrorJob *s)
{
    rate_meter_reset(&s->ops.copy_rate, clock_ns());
}

double mirror_ops_copy_rate(MirrorJob *s, int64_t now_ns)
{
    return rate_meter_get(&s->ops.copy_rate, now_ns);
}

void mirror_ops_counters(MirrorJob *s, int64_t *copied, int64_t *zeroed,
                         int64_t *skipped)
{
    *copied = s->ops.copied;
    *zeroed = s->ops.zeroed;
    *skipped = s->ops.skipped;
}

int64_t mirror_ops_zero_in_flight(MirrorJob *s)
{
    return s->ops.zero_in_flight;
}

void mirror_op_skip(MirrorJob *s, int64_t bytes)
{
    s->ops.skipped += bytes;
    s->common.progress_current += bytes;
}

/* Remove @op from the books and free it. */
static void mirror_op_retire(MirrorOp *op)
{
    MirrorJob *s = op->s;
    int64_t copy_bytes = op->method == MIRROR_METHOD_COPY ? op->bytes : 0;

    g_queue_unlink(&s->ops.ops, &op->link);
    if (op->in_order_queue) {
        g_queue_unlink(&s->ops.order, &op->order_link);
    }
    mirror_window_op_end(&s->win, copy_bytes);
    if (copy_bytes) {
        mirror_copy_release(&op->copy);
    }
    if (op->method == MIRROR_METHOD_ZERO) {
        s->ops.zero_in_flight -= op->bytes;
    }
    hbitmap_reset(s->track.in_flight, op->offset, op->bytes);
    g_free(op);
    if (mirror_active_has_waiting(&s->active)) {
        mirror_active_start_waiting(&s->active);
    }
}

static void mirror_op_done(MirrorOp *op)
{
    MirrorJob *s = op->s;

    s->common.progress_current += op->bytes;
    rate_meter_add(&s->ops.copy_rate, clock_ns(), op->bytes);
    if (op->method == MIRROR_METHOD_COPY) {
        mirror_guest_copied(&s->guest, op->bytes);
    }
    if (op->method == MIRROR_METHOD_COPY) {
        mirror_state_clean(s->track.state, s->track.dirty, op->offset,
                           op->bytes);
    } else {
        mirror_state_clean_zero(s->track.state, s->track.dirty, op->offset,
                                op->bytes);
    }
    mirror_op_retire(op);
    s->ops.owner->settled(s);
}

/*
 * @op failed (or is dropped because of a cancel): make its range dirty
 * again, apply the error policy when there was an error, retire it.
 */
static void mirror_op_failed(MirrorOp *op, bool is_read, int ret,
                             int64_t offset, int64_t bytes)
{
    MirrorJob *s = op->s;

    dirty_bitmap_set(s->track.dirty, op->offset, op->bytes);
    if (ret < 0 && !job_is_cancelled(&s->common)) {
        /* After a force cancel, failures are the cancel's doing. */
        s->ops.owner->failed(s, is_read, ret, offset, bytes);
    }
    mirror_op_retire(op);
    s->ops.owner->settled(s);
}

/* ---- writing ---- */

static void mirror_write_next(MirrorOp *op);

static void mirror_write_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;
    MirrorJob *s = op->s;

    if (ret < 0) {
        mirror_op_failed(op, false, ret, op->piece_offset, op->piece_bytes);
        return;
    }
    mirror_extents_add(&s->track.unflushed, op->piece_offset,
                       op->piece_offset + op->piece_bytes);
    if (op->piece_method == MIRROR_METHOD_ZERO) {
        s->ops.zeroed += op->piece_bytes;
        if (op->method == MIRROR_METHOD_ZERO) {
            mirror_zero_zeroed(&s->track.zero, op->offset, op->bytes);
        }
    } else {
        s->ops.copied += op->piece_bytes;
    }
    mirror_write_next(op);
}

/* The piece of @op's write in flight: [@pos, @pos + @len) as @method. */
static void mirror_piece_begin(MirrorOp *op, int64_t pos, int64_t len,
                               MirrorMethod method)
{
    op->write_pos = pos + len;
    op->piece_offset = pos;
    op->piece_bytes = len;
    op->piece_method = method;
}

/* The next piece of @op's data at @pos (up to @end), as
 * mirror_sparse_run(). */
static int64_t mirror_op_sparse_run(MirrorOp *op, int64_t pos, int64_t end,
                                    bool *zero)
{
    return mirror_sparse_run(&op->s->sparse,
                             op->copy.buf + (pos - op->offset), pos, end,
                             zero);
}

static void mirror_write_next(MirrorOp *op)
{
    MirrorJob *s = op->s;
    int64_t end = op->offset + op->bytes;
    int64_t pos = op->write_pos;
    int64_t len;
    bool zero;

    if (pos >= end) {
        mirror_op_done(op);
        return;
    }
    s->ops.owner->target_write(s);

    if (op->method == MIRROR_METHOD_ZERO) {
        mirror_piece_begin(op, pos, op->bytes, MIRROR_METHOD_ZERO);
        bdrv_aio_pwrite_zeroes(s->dst, pos, op->bytes, BDRV_REQ_MAY_UNMAP,
                               mirror_write_cb, op);
        return;
    }

    len = end - pos;
    zero = false;
    if (mirror_sparse_on(&s->sparse)) {
        len = mirror_op_sparse_run(op, pos, end, &zero);
    }
    /* Zero runs on a target known to be zero need no write at all. */
    while (zero && op->target_was_zero) {
        s->ops.skipped += len;
        pos += len;
        op->write_pos = pos;
        if (pos >= end) {
            mirror_op_done(op);
            return;
        }
        len = mirror_op_sparse_run(op, pos, end, &zero);
    }
    if (zero) {
        mirror_piece_begin(op, pos, len, MIRROR_METHOD_ZERO);
        bdrv_aio_pwrite_zeroes(s->dst, pos, len, BDRV_REQ_MAY_UNMAP,
                               mirror_write_cb, op);
    } else {
        mirror_piece_begin(op, pos, len, MIRROR_METHOD_COPY);
        bdrv_aio_pwrite(s->dst, pos, len, op->copy.buf + (pos - op->offset),
                        s->cfg.compress ? BDRV_REQ_WRITE_COMPRESSED : 0,
                        mirror_write_cb, op);
    }
}

static void mirror_write_start(MirrorOp *op)
{
    if (job_is_cancelled(&op->s->common)) {
        /* A force cancel drops what has not been written yet. */
        mirror_op_failed(op, false, 0, 0, 0);
        return;
    }
    op->write_pos = op->offset;
    mirror_write_next(op);
}

/* In order: send out every write whose turn has come. */
static void mirror_write_in_order(MirrorJob *s)
{
    GList *head;

    while ((head = s->ops.order.head) &&
           ((MirrorOp *)head->data)->write_ready) {
        MirrorOp *op = head->data;

        g_queue_unlink(&s->ops.order, head);
        op->in_order_queue = false;
        mirror_write_start(op);
    }
}

static void mirror_write_when_ready(MirrorOp *op)
{
    if (op->in_order_queue) {
        op->write_ready = true;
        mirror_write_in_order(op->s);
    } else {
        mirror_write_start(op);
    }
}

/* ---- the copy path's callbacks ---- */

/*
 * Fused copies, on the pool worker between the read and the write: write
 * the buffer there only when it is all data; zero blocks take the
 * main-loop way (mirror_write_next), which skips or zeroes them.
 */
bool mirror_op_copy_check(MirrorCopy *c, const uint8_t *buf, int64_t bytes)
{
    MirrorOp *op = container_of(c, MirrorOp, copy);
    const MirrorSparse *sp = &op->s->sparse;
    bool zero;

    return !mirror_sparse_on(sp) ||
           (mirror_sparse_run(sp, buf, op->offset, op->offset + bytes,
                              &zero) == bytes && !zero);
}

void mirror_op_copy_done(MirrorCopy *c, int ret)
{
    MirrorOp *op = container_of(c, MirrorOp, copy);
    MirrorJob *s = op->s;

    if (c->written) {
        /* Written (or failed) whole: one piece, as mirror_write_next()
         * has. */
        s->ops.owner->target_write(s);
        mirror_piece_begin(op, op->offset, op->bytes, MIRROR_METHOD_COPY);
        mirror_write_cb(op, ret);
        return;
    }
    if (ret < 0) {
        mirror_op_failed(op, true, ret, op->offset, op->bytes);
        if (s->cfg.in_order) {
            mirror_write_in_order(s);
        }
        return;
    }
    mirror_write_when_ready(op);
}

void mirror_op_start(MirrorJob *s, MirrorMethod method, int64_t offset,
                     int64_t bytes, uint8_t *buf)
{
    MirrorOp *op = g_new0(MirrorOp, 1);

    op->s = s;
    op->method = method;
    op->offset = offset;
    op->bytes = bytes;
    op->link.data = op;
    op->order_link.data = op;
    g_queue_push_tail_link(&s->ops.ops, &op->link);
    mirror_window_op_begin(&s->win,
                           method == MIRROR_METHOD_COPY ? bytes : 0);
    hbitmap_set(s->track.in_flight, offset, bytes);
    if (method == MIRROR_METHOD_ZERO) {
        s->ops.zero_in_flight += bytes;
    }
    if (s->cfg.in_order) {
        g_queue_push_tail_link(&s->ops.order, &op->order_link);
        op->in_order_queue = true;
    }

    if (method == MIRROR_METHOD_COPY) {
        op->target_was_zero = mirror_zero_covers(&s->track.zero, offset,
                                                 bytes);
        mirror_zero_written(&s->track.zero, offset, bytes);
        mirror_copy_start(&s->copy, &op->copy, offset, bytes, buf);
    } else {
        mirror_write_when_ready(op);
    }
}
