/*
 * The life of one mirror operation: read the source into a pool buffer,
 * wait for its turn when writes go out in order, write the target (in
 * pieces when zero runs of the data become zero writes), then retire.
 *
 * A failed operation dirties its whole range again before the error policy
 * runs, so nothing is lost whatever the policy does next.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"

#include <errno.h>

/* ---- slots: at most win_max_bufs, each a pool buffer or a view ---- */

/*
 * Smallest operation copied from a view.  A view costs an mmap, a munmap
 * and with it a TLB flush on every CPU running one of our threads, which
 * on a VM is an IPI through the hypervisor; it saves one memcpy of the
 * data.  For 64 KiB operations (the sync stage behind a busy guest: one
 * dirty granule each) views made the job 5-15x slower to converge than
 * reads (bench/live.sh's w50 case); from 256 KiB up they win.
 */
#define MIRROR_MAP_MIN  (256 * 1024)

static int mirror_slots_used(MirrorJob *s)
{
    return s->nb_views + buf_pool_in_use(s->bufs);
}

/* A pool buffer; there is one whenever a slot is free. */
static uint8_t *mirror_buf_get(MirrorJob *s)
{
    uint8_t *buf = buf_pool_get(s->bufs);

    g_assert(buf);
    return buf;
}

bool mirror_slot_get(MirrorJob *s, int64_t bytes, uint8_t **buf)
{
    if (mirror_slots_used(s) >= s->win_max_bufs) {
        return false;
    }
    if (s->map_src && bytes >= MIRROR_MAP_MIN) {
        s->nb_views++;
        *buf = NULL;
    } else {
        *buf = mirror_buf_get(s);
    }
    return true;
}

void mirror_slot_put(MirrorJob *s, uint8_t *buf)
{
    if (buf) {
        buf_pool_put(s->bufs, buf);
    } else {
        s->nb_views--;
    }
}

/* Release what holds @op's data and its slot. */
static void mirror_op_release_data(MirrorOp *op)
{
    MirrorJob *s = op->s;

    bdrv_unmap(s->src, &op->map);
    mirror_slot_put(s, op->pool_buf);
}


/* Remove @op from the books and free it. */
static void mirror_op_retire(MirrorOp *op)
{
    MirrorJob *s = op->s;

    g_queue_unlink(&s->ops, &op->link);
    if (op->in_order_queue) {
        g_queue_unlink(&s->order, &op->order_link);
    }
    s->in_flight--;
    if (op->method == MIRROR_METHOD_COPY) {
        s->op_bytes_in_flight -= op->bytes;
        mirror_op_release_data(op);
    }
    hbitmap_reset(s->in_flight_bitmap, op->offset, op->bytes);
    g_free(op);
    if (!g_queue_is_empty(&s->active_waiting)) {
        mirror_active_start_waiting(s);
    }
}

static void mirror_op_done(MirrorOp *op)
{
    MirrorJob *s = op->s;

    s->common.progress_current += op->bytes;
    rate_meter_add(&s->copy_rate, clock_ns(), op->bytes);
    mirror_op_retire(op);
    mirror_pump(s);
}

/*
 * @op failed (or is dropped because of a cancel): make its range dirty
 * again, apply the error policy when there was an error, retire it.
 */
static void mirror_op_failed(MirrorOp *op, bool is_read, int ret,
                             int64_t offset, int64_t bytes)
{
    MirrorJob *s = op->s;

    dirty_bitmap_set(s->dirty, op->offset, op->bytes);
    if (ret < 0 && !job_is_cancelled(&s->common)) {
        /* After a force cancel, failures are the cancel's doing. */
        mirror_error(s, is_read, ret, offset, bytes);
    }
    mirror_op_retire(op);
    mirror_pump(s);
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
    if (op->piece_method == MIRROR_METHOD_ZERO) {
        s->stats_zeroed += op->piece_bytes;
        if (s->zero_bitmap && op->method == MIRROR_METHOD_ZERO) {
            hbitmap_set(s->zero_bitmap, op->offset, op->bytes);
        }
    } else {
        s->stats_copied += op->piece_bytes;
    }
    mirror_write_next(op);
}

/*
 * Sparse detection (convert -S), with qemu-img convert's rules
 * (is_allocated_sectors_min()), an operation standing for one of its
 * buffers.  The data is seen in 512-byte sectors (the image's last one may
 * be shorter).  A run of alike sectors that reaches the end of what is
 * left is taken whole.  Otherwise its end is aligned to sparse_align: a
 * data run grows to the next boundary, a zero run shrinks to the last one,
 * and a zero run that crosses no boundary is data.  So an operation all of
 * zeroes is one zero piece whatever -S and the operation's size, zeroes at
 * either end of an operation are zero pieces, and only zero runs between
 * data need -S bytes.
 */

#define MIRROR_SECTOR   512

/* Is the sector of @op's buffer at @pos (up to @end) all zero? */
static bool mirror_sector_is_zero(MirrorOp *op, int64_t pos, int64_t end)
{
    return buffer_is_zero(op->buf + (pos - op->offset),
                          MIN(pos + MIRROR_SECTOR, end) - pos);
}

/*
 * The run of sectors at @pos (up to @end) that are all zero (*@zero) or
 * all not, its end aligned as above; returns its length.
 */
static int64_t mirror_sparse_alike(MirrorOp *op, int64_t pos, int64_t end,
                                   bool *zero)
{
    int64_t align = op->s->sparse_align;
    bool z = mirror_sector_is_zero(op, pos, end);
    int64_t p = MIN(pos + MIRROR_SECTOR, end);
    int64_t tail;

    /* One check for the common case: all zero to the end. */
    if (z && buffer_is_zero(op->buf + (p - op->offset), end - p)) {
        p = end;
    }
    while (p < end && mirror_sector_is_zero(op, p, end) == z) {
        p += MIRROR_SECTOR;
    }
    *zero = z;
    if (p >= end) {
        return end - pos;
    }
    tail = p % align;
    if (tail) {
        if (z && p - pos <= tail) {
            /* No boundary crossed: rewriting it as data costs nothing
             * more than the write of the data that follows. */
            *zero = z = false;
        }
        p = z ? p - tail : MIN(p - tail + align, end);
    }
    return p - pos;
}

/*
 * The next piece of @op's write at @pos (up to @end): a zero run
 * (*@zero), or data, including the zero runs between data shorter than
 * sparse_size (or what is left).  Returns its length.
 */
static int64_t mirror_sparse_run(MirrorOp *op, int64_t pos, int64_t end,
                                 bool *zero)
{
    int64_t min = MIN(op->s->sparse_size, end - pos);
    int64_t used = mirror_sparse_alike(op, pos, end, zero);
    int64_t p = pos + used;

    if (*zero) {
        return used;
    }
    while (p < end) {
        bool z;
        int64_t len = mirror_sparse_alike(op, p, end, &z);

        p += len;
        if (!z) {
            used = p - pos;
        } else if (len >= min) {
            break;
        }
    }
    return used;
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
    s->writes_since_flush++;

    if (op->method == MIRROR_METHOD_ZERO) {
        mirror_piece_begin(op, pos, op->bytes, MIRROR_METHOD_ZERO);
        bdrv_aio_pwrite_zeroes(s->dst, pos, op->bytes, BDRV_REQ_MAY_UNMAP,
                               mirror_write_cb, op);
        return;
    }

    len = end - pos;
    zero = false;
    if (s->sparse_size) {
        len = mirror_sparse_run(op, pos, end, &zero);
    }
    /* Zero runs on a target known to be zero need no write at all. */
    while (zero && op->target_was_zero) {
        s->stats_skipped += len;
        pos += len;
        op->write_pos = pos;
        if (pos >= end) {
            mirror_op_done(op);
            return;
        }
        len = mirror_sparse_run(op, pos, end, &zero);
    }
    if (zero) {
        mirror_piece_begin(op, pos, len, MIRROR_METHOD_ZERO);
        bdrv_aio_pwrite_zeroes(s->dst, pos, len, BDRV_REQ_MAY_UNMAP,
                               mirror_write_cb, op);
    } else {
        mirror_piece_begin(op, pos, len, MIRROR_METHOD_COPY);
        bdrv_aio_pwrite(s->dst, pos, len, op->buf + (pos - op->offset),
                        s->compress ? BDRV_REQ_WRITE_COMPRESSED : 0,
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

    while ((head = s->order.head) &&
           ((MirrorOp *)head->data)->write_ready) {
        MirrorOp *op = head->data;

        g_queue_unlink(&s->order, head);
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

/* ---- reading ---- */

static void mirror_read_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;

    if (ret < 0) {
        MirrorJob *s = op->s;

        mirror_op_failed(op, true, ret, op->offset, op->bytes);
        if (s->in_order) {
            mirror_write_in_order(s);
        }
        return;
    }
    mirror_write_when_ready(op);
}

/*
 * On the pool worker, between the read and the write of a fused copy:
 * write the buffer there only when it is all data; zero blocks take the
 * main-loop way (mirror_write_next), which skips or zeroes them.
 */
static bool mirror_copy_check(void *opaque, const uint8_t *buf,
                              int64_t bytes)
{
    MirrorOp *op = opaque;
    bool zero;

    return !op->s->sparse_size ||
           (mirror_sparse_run(op, op->offset, op->offset + bytes, &zero) ==
            bytes && !zero);
}

static void mirror_copy_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;

    if (op->copy.read_ret < 0) {
        mirror_read_cb(op, op->copy.read_ret);
        return;
    }
    if (!op->copy.written && op->copy.write_ret == 0) {
        mirror_write_when_ready(op);    /* read only: zero blocks in it */
        return;
    }
    /* Written (or failed) whole: one piece, as mirror_write_next() has. */
    op->s->writes_since_flush++;
    mirror_piece_begin(op, op->offset, op->bytes, MIRROR_METHOD_COPY);
    mirror_write_cb(op, ret);
}

/* A view of the source is ready; without one, read into a buffer. */
static void mirror_map_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;
    MirrorJob *s = op->s;

    if (ret == -ENOTSUP) {
        /* No view of this range: the slot becomes a pool buffer. */
        s->nb_views--;
        op->buf = op->pool_buf = mirror_buf_get(s);
        bdrv_aio_pread(s->src, op->offset, op->bytes, op->pool_buf, 0,
                       mirror_read_cb, op);
        return;
    }
    op->buf = op->map.data;
    mirror_read_cb(op, ret);
}

void mirror_op_start(MirrorJob *s, MirrorMethod method, int64_t offset,
                     int64_t bytes, uint8_t *buf)
{
    MirrorOp *op = g_new0(MirrorOp, 1);

    op->s = s;
    op->method = method;
    op->offset = offset;
    op->bytes = bytes;
    op->buf = op->pool_buf = buf;
    op->link.data = op;
    op->order_link.data = op;
    g_queue_push_tail_link(&s->ops, &op->link);
    s->in_flight++;
    hbitmap_set(s->in_flight_bitmap, offset, bytes);
    if (s->in_order) {
        g_queue_push_tail_link(&s->order, &op->order_link);
        op->in_order_queue = true;
    }

    if (method == MIRROR_METHOD_COPY) {
        s->op_bytes_in_flight += bytes;
        if (s->zero_bitmap) {
            op->target_was_zero = hbitmap_count_between(s->zero_bitmap,
                                                        offset, bytes) ==
                                  (uint64_t)bytes;
            hbitmap_reset(s->zero_bitmap, offset, bytes);
        }
        if (buf && s->fuse &&
            bdrv_copy_fits(s->src, s->dst, offset, bytes, buf)) {
            bdrv_aio_copy(s->src, s->dst, offset, bytes, buf,
                          mirror_copy_check, &op->copy, mirror_copy_cb, op);
        } else if (buf) {
            bdrv_aio_pread(s->src, offset, bytes, buf, 0, mirror_read_cb, op);
        } else {
            bdrv_aio_map(s->src, offset, bytes, &op->map, mirror_map_cb, op);
        }
    } else {
        mirror_write_when_ready(op);
    }
}
