/*
 * The request path: every read, write, zero, discard, flush and block
 * status goes through here, and only here are requests split, aligned,
 * bounced, clamped at the end of the image and counted; bdrv_drv_call()
 * hands each piece to the driver (aio_submit, or io-blocking.c's adapter
 * for blocking drivers), and the driver gives it back through
 * bdrv_req_complete().
 *
 * A request is padded out to the driver's request_alignment (reads through
 * a bounce buffer; writes by read-modify-write), then sent to the driver in
 * fragments of at most max_transfer bytes (write-zeroes and discard: of
 * max_pwrite_zeroes / max_pdiscard, whole when the driver sets none), one
 * fragment at a time, so one request never has more than one driver
 * request in flight; except that the fragments of a long write-zeroes or
 * discard after the first go out a few at a time (they move no data, and
 * are round trips on NBD).  A read-modify-write is "serialising": it waits
 * until no overlapping request is in flight and keeps new overlapping ones
 * waiting, so the block it read cannot change under it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/io-int.h"

#include <errno.h>

int64_t bdrv_max_rw(BlockDriverState *bs)
{
    int64_t align = bs->bl.request_alignment;
    int64_t max = bs->bl.max_transfer ? bs->bl.max_transfer
                                      : BDRV_DEFAULT_MAX_TRANSFER;

    if (bs->max_io && bs->max_io < max) {
        max = bs->max_io;
    }
    return MAX(QEMU_ALIGN_DOWN(max, align), align);
}

/*
 * Largest write-zeroes or discard fragment under the driver's @limit (0:
 * none).  Without a limit one request covers the whole range, however
 * long: those requests move no data, and a thin disk's zero extent costs
 * one driver call, not one per GiB (QEMU's default for them too).
 */
static int64_t bdrv_max_no_data(BlockDriverState *bs, int64_t limit)
{
    int64_t align = bs->bl.request_alignment;
    int64_t max = limit ? limit : INT64_MAX;

    return MAX(QEMU_ALIGN_DOWN(max, align), align);
}

uint64_t bdrv_get_in_flight(BlockDriverState *bs)
{
    return bs->in_flight;
}

void bdrv_set_max_io(BlockDriverState *bs, int64_t max_io)
{
    g_assert(max_io >= 0);
    bs->max_io = max_io;
}

/* ---- write notifiers ---- */

typedef struct BdrvWriteNotifier {
    BdrvWriteNotifyFunc *fn;
    void *opaque;
} BdrvWriteNotifier;

void bdrv_add_write_notifier(BlockDriverState *bs, BdrvWriteNotifyFunc *fn,
                             void *opaque)
{
    BdrvWriteNotifier n = { .fn = fn, .opaque = opaque };

    if (!bs->write_notifiers) {
        bs->write_notifiers = g_array_new(FALSE, FALSE,
                                          sizeof(BdrvWriteNotifier));
    }
    g_array_append_val(bs->write_notifiers, n);
}

void bdrv_remove_write_notifier(BlockDriverState *bs,
                                BdrvWriteNotifyFunc *fn, void *opaque)
{
    for (guint i = 0; bs->write_notifiers && i < bs->write_notifiers->len;
         i++) {
        BdrvWriteNotifier *n = &g_array_index(bs->write_notifiers,
                                              BdrvWriteNotifier, i);
        if (n->fn == fn && n->opaque == opaque) {
            g_array_remove_index(bs->write_notifiers, i);
            return;
        }
    }
}

static void bdrv_notify_write(BlockDriverState *bs, int64_t offset,
                              int64_t bytes)
{
    for (guint i = 0; bs->write_notifiers && i < bs->write_notifiers->len;
         i++) {
        BdrvWriteNotifier *n = &g_array_index(bs->write_notifiers,
                                              BdrvWriteNotifier, i);
        n->fn(n->opaque, offset, bytes);
    }
}

/* ---- request lifetime ---- */

BdrvRequest *bdrv_req_new(BlockDriverState *bs, BdrvOp type,
                          int64_t offset, int64_t bytes, void *buf,
                          BdrvRequestFlags flags,
                          BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req = g_malloc0(sizeof(BdrvRequest) +
                                 bs->drv->request_size);

    req->bs = bs;
    req->io.type = type;
    req->io.offset = offset;
    req->io.bytes = bytes;
    req->io.buf = buf;
    req->io.flags = flags;
    req->io.cb = cb;
    req->io.opaque = opaque;
    req->io.link.data = req;
    req->io.start = offset;
    req->io.end = offset + bytes;
    bs->in_flight++;
    return req;
}

static void bdrv_process_waiting(BlockDriverState *bs);

/*
 * Finish @req: untrack it, let waiters go, then run the caller's
 * completion.  This is the only place a request is freed.
 */
void bdrv_req_finish(BdrvRequest *req, int ret)
{
    BlockDriverState *bs = req->bs;
    BlockCompletionFunc *cb = req->io.cb;
    void *opaque = req->io.opaque;

    if (req->io.tracked) {
        g_queue_unlink(&bs->tracked, &req->io.link);
    }
    if (ret == 0 && req->io.type == BDRV_OP_READ && req->io.bounce) {
        memcpy(req->io.buf, req->io.bounce + (req->io.offset - req->io.start),
               req->io.bytes);
    }
    if (req->io.type == BDRV_OP_WRITE || req->io.type == BDRV_OP_ZERO ||
        req->io.type == BDRV_OP_DISCARD) {
        bdrv_notify_write(bs, req->io.offset, req->io.bytes);
    }
    g_assert(!req->io.found);
    qemu_vfree(req->io.bounce);
    g_free(req);
    bs->in_flight--;
    bdrv_process_waiting(bs);
    cb(opaque, ret);
}

void bdrv_req_finish_cb(void *opaque, int ret)
{
    bdrv_req_finish(opaque, ret);
}

/* Complete a request that needs no I/O, later, as the contract says. */
void bdrv_req_finish_later(BdrvRequest *req, int ret)
{
    bdrv_complete_later(bdrv_req_finish_cb, req, ret);
}

/* ---- serialisation ---- */

static bool bdrv_req_overlap(const BdrvRequest *a, const BdrvRequest *b)
{
    return a->io.start < b->io.end && b->io.start < a->io.end;
}

/* Must @req wait for @other (in flight or queued ahead of it)? */
static bool bdrv_req_conflict(const BdrvRequest *req,
                              const BdrvRequest *other)
{
    return (req->io.serialising || other->io.serialising) &&
           bdrv_req_overlap(req, other);
}

static bool bdrv_req_must_wait(BlockDriverState *bs, BdrvRequest *req,
                               GList *stop)
{
    for (GList *l = bs->tracked.head; l; l = l->next) {
        if (bdrv_req_conflict(req, l->data)) {
            return true;
        }
    }
    /* Keep order with conflicting requests queued earlier. */
    for (GList *l = bs->waiting.head; l && l != stop; l = l->next) {
        if (bdrv_req_conflict(req, l->data)) {
            return true;
        }
    }
    return false;
}

static void bdrv_req_run(BdrvRequest *req);

/*
 * Start @req now if nothing overlapping forbids it, else queue it until the
 * conflicting requests complete.
 */
void bdrv_req_submit(BdrvRequest *req)
{
    BlockDriverState *bs = req->bs;

    if (bdrv_req_must_wait(bs, req, NULL)) {
        g_queue_push_tail_link(&bs->waiting, &req->io.link);
        return;
    }
    g_queue_push_tail_link(&bs->tracked, &req->io.link);
    req->io.tracked = true;
    bdrv_req_run(req);
}

static void bdrv_process_waiting(BlockDriverState *bs)
{
    GList *l = bs->waiting.head;

    while (l) {
        GList *next = l->next;
        BdrvRequest *req = l->data;

        if (!bdrv_req_must_wait(bs, req, l)) {
            g_queue_unlink(&bs->waiting, l);
            g_queue_push_tail_link(&bs->tracked, l);
            req->io.tracked = true;
            bdrv_req_run(req);
        }
        l = next;
    }
}

/* ---- the driver call ---- */

/* Does @bs's driver handle @op itself (else io.c's fallback applies)? */
static bool bdrv_drv_has(BlockDriverState *bs, BdrvOp op)
{
    const BlockDriver *drv = bs->drv;

    if (drv->aio_submit) {
        return true;
    }
    switch (op) {
    case BDRV_OP_ZERO:
        return drv->pwrite_zeroes;
    case BDRV_OP_DISCARD:
        return drv->pdiscard;
    case BDRV_OP_FLUSH:
        return drv->flush;
    case BDRV_OP_STATUS:
        return drv->block_status;
    default:
        return true;
    }
}

void bdrv_drv_call(BdrvRequest *req, BdrvOp op, int64_t offset,
                   int64_t bytes, void *buf, BdrvRequestFlags flags,
                   GArray *extents, BlockCompletionFunc *done)
{
    const BlockDriver *drv = req->bs->drv;

    req->op = op;
    req->offset = offset;
    req->bytes = bytes;
    req->buf = buf;
    req->flags = flags;
    req->extents = extents;
    req->io.drv_done = done;
    if (!drv->aio_submit) {
        bdrv_blocking_submit(req);
        return;
    }
    if (drv->request_size) {
        memset(bdrv_req_priv(req), 0, drv->request_size);
    }
    drv->aio_submit(req->bs, req);
}

void bdrv_req_complete(BdrvRequest *req, int ret)
{
    req->io.drv_done(req, ret);
}

void bdrv_req_complete_cb(void *opaque, int ret)
{
    bdrv_req_complete(opaque, ret);
}

void bdrv_req_complete_later(BdrvRequest *req, int ret)
{
    bdrv_complete_later(bdrv_req_complete_cb, req, ret);
}

void bdrv_drv_submit(BlockDriverState *bs, BdrvOp op, int64_t offset,
                     int64_t bytes, void *buf, BdrvRequestFlags flags,
                     GArray *extents, BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req = bdrv_req_new(bs, op, offset, bytes, buf, flags,
                                    cb, opaque);

    bdrv_drv_call(req, op, offset, bytes, buf, flags, extents,
                  bdrv_req_finish_cb);
}

/* ---- the fragment loop ---- */

static void bdrv_req_step(BdrvRequest *req);

/* Both partial blocks are in the bounce buffer: lay the new data over
 * them and write the whole aligned range. */
static void bdrv_rmw_merge(BdrvRequest *req)
{
    BdrvRequestIo *io = &req->io;

    memcpy(io->bounce + (io->offset - io->start), io->buf, io->bytes);
    io->phase = BDRV_PHASE_IO;
}

static void bdrv_req_frag_done(void *opaque, int ret)
{
    BdrvRequest *req = opaque;
    BdrvRequestIo *io = &req->io;

    if (ret == -ENOTSUP && io->type == BDRV_OP_ZERO &&
        io->phase == BDRV_PHASE_IO && !(io->flags & BDRV_REQ_NO_FALLBACK)) {
        /* No efficient zeroing here: write zero buffers instead. */
        io->phase = BDRV_PHASE_ZERO_WRITE;
        bdrv_req_step(req);
        return;
    }
    if (ret == -ENOTSUP && io->type == BDRV_OP_DISCARD) {
        ret = 0;    /* discard is advisory */
    }
    if (ret < 0) {
        bdrv_req_finish(req, ret);
        return;
    }
    if (io->phase == BDRV_PHASE_RMW_HEAD) {
        io->phase = BDRV_PHASE_RMW_TAIL;
    } else if (io->phase == BDRV_PHASE_RMW_TAIL) {
        bdrv_rmw_merge(req);
    } else {
        io->pos += io->frag;
    }
    bdrv_req_step(req);
}

/* Aligned zeroes for the write fallback (allocated once per node). */
static void *bdrv_zero_buffer(BlockDriverState *bs, int64_t *size)
{
    if (!bs->zero_buffer) {
        bs->zero_buffer_size = MAX(BDRV_ZERO_BUFFER_SIZE,
                                   bs->bl.request_alignment);
        bs->zero_buffer = bdrv_blockalign(bs, bs->zero_buffer_size);
        memset(bs->zero_buffer, 0, bs->zero_buffer_size);
    }
    *size = bs->zero_buffer_size;
    return bs->zero_buffer;
}

/* ---- write-zeroes and discard fragments in parallel ---- */

/*
 * A write-zeroes or discard longer than the driver takes at once (NBD:
 * 4 GiB less 64 KiB) costs a round trip per fragment; one after the other
 * they add up (16385 for a 64 TiB zero), a few at a time they overlap.
 * Once the first fragment went through (so that a driver that cannot zero
 * at all says so once), the rest go out as fragment requests of their
 * own, at most BDRV_NO_DATA_FRAGS in flight.  They are not tracked and
 * notify nobody: the caller's request, tracked over the whole range,
 * does that when it completes.  A fragment the driver cannot zero
 * (-ENOTSUP, fallback allowed) stops the fan-out: once those in flight
 * are back, the request writes zero buffers from the lowest such
 * fragment on, over fragments that may have been zeroed already (the
 * same bytes either way).
 */
#define BDRV_NO_DATA_FRAGS 4

typedef struct BdrvFragFan {
    BdrvRequest *parent;
    int in_flight;
    int ret;                    /* the first error (not a fallback) */
    int64_t fallback_pos;       /* lowest fragment to write instead */
} BdrvFragFan;

static void bdrv_fan_issue(BdrvFragFan *fan);

static void bdrv_fan_frag_done(void *opaque, int ret)
{
    BdrvRequest *frag = opaque;
    BdrvFragFan *fan = frag->io.opaque;
    BdrvRequest *parent = fan->parent;
    BdrvRequestIo *io = &parent->io;
    int64_t offset = frag->offset;

    g_free(frag);
    parent->bs->in_flight--;
    fan->in_flight--;
    if (ret == -ENOTSUP && io->type == BDRV_OP_DISCARD) {
        ret = 0;                /* discard is advisory */
    }
    if (ret == -ENOTSUP && io->type == BDRV_OP_ZERO &&
        !(io->flags & BDRV_REQ_NO_FALLBACK)) {
        fan->fallback_pos = MIN(fan->fallback_pos, offset);
    } else if (ret < 0 && !fan->ret) {
        fan->ret = ret;
    }
    bdrv_fan_issue(fan);
}

/* Issue fragments up to the bound; finish when none is left in flight. */
static void bdrv_fan_issue(BdrvFragFan *fan)
{
    BdrvRequest *parent = fan->parent;
    BlockDriverState *bs = parent->bs;
    BdrvRequestIo *io = &parent->io;
    bool stop = fan->ret || fan->fallback_pos < io->end;

    while (!stop && io->pos < io->end &&
           fan->in_flight < BDRV_NO_DATA_FRAGS) {
        int64_t limit = io->type == BDRV_OP_ZERO ? bs->bl.max_pwrite_zeroes
                                                 : bs->bl.max_pdiscard;
        int64_t len = MIN(io->end - io->pos, bdrv_max_no_data(bs, limit));
        BdrvRequest *frag = bdrv_req_new(bs, io->type, io->pos, len, NULL,
                                         io->flags, NULL, fan);

        io->pos += len;
        fan->in_flight++;
        bdrv_drv_call(frag, io->type, frag->io.offset, len, NULL,
                      io->flags, NULL, bdrv_fan_frag_done);
    }
    if (fan->in_flight) {
        return;
    }
    if (fan->ret) {
        bdrv_req_finish(parent, fan->ret);
    } else if (fan->fallback_pos < io->end) {
        io->pos = fan->fallback_pos;
        io->phase = BDRV_PHASE_ZERO_WRITE;
        bdrv_req_step(parent);
    } else {
        bdrv_req_finish(parent, 0);
    }
    g_free(fan);
}

/* Whether the rest of @req goes out as parallel fragments (and does). */
static bool bdrv_fan_out(BdrvRequest *req, int64_t max)
{
    BdrvRequestIo *io = &req->io;
    BdrvFragFan *fan;

    if (io->pos == io->start || io->end - io->pos <= max) {
        return false;
    }
    fan = g_new0(BdrvFragFan, 1);
    fan->parent = req;
    fan->fallback_pos = io->end;
    bdrv_fan_issue(fan);
    return true;
}

/* Issue the next piece of work of @req, or finish it. */
static void bdrv_req_step(BdrvRequest *req)
{
    BlockDriverState *bs = req->bs;
    BdrvRequestIo *io = &req->io;
    int64_t align = bs->bl.request_alignment;
    uint8_t *data = io->bounce ? io->bounce : io->buf;

    if (io->phase == BDRV_PHASE_RMW_HEAD) {
        if (io->offset != io->start) {
            io->frag = MIN(align, io->end - io->start);
            bdrv_drv_call(req, BDRV_OP_READ, io->start, io->frag, io->bounce,
                          io->flags & BDRV_REQ_PRIO, NULL,
                          bdrv_req_frag_done);
            return;
        }
        io->phase = BDRV_PHASE_RMW_TAIL;
    }
    if (io->phase == BDRV_PHASE_RMW_TAIL) {
        int64_t tail = QEMU_ALIGN_DOWN(io->offset + io->bytes, align);
        bool head_read = io->offset != io->start;

        if (io->offset + io->bytes != io->end &&
            !(head_read && tail == io->start)) {
            io->frag = io->end - tail;
            bdrv_drv_call(req, BDRV_OP_READ, tail, io->frag,
                          io->bounce + (tail - io->start),
                          io->flags & BDRV_REQ_PRIO, NULL,
                          bdrv_req_frag_done);
            return;
        }
        bdrv_rmw_merge(req);
    }

    if (io->pos >= io->end) {
        bdrv_req_finish(req, 0);
        return;
    }

    switch (io->type) {
    case BDRV_OP_READ:
        io->frag = MIN(io->end - io->pos, bdrv_max_rw(bs));
        bdrv_drv_call(req, BDRV_OP_READ, io->pos, io->frag,
                      data + (io->pos - io->start), io->flags, NULL,
                      bdrv_req_frag_done);
        break;
    case BDRV_OP_WRITE:
        /* A compressed write is one unit of whole clusters: never split. */
        io->frag = io->flags & BDRV_REQ_WRITE_COMPRESSED
                   ? io->end - io->pos
                   : MIN(io->end - io->pos, bdrv_max_rw(bs));
        bdrv_drv_call(req, BDRV_OP_WRITE, io->pos, io->frag,
                      data + (io->pos - io->start), io->flags, NULL,
                      bdrv_req_frag_done);
        break;
    case BDRV_OP_ZERO:
        if (io->phase == BDRV_PHASE_ZERO_WRITE) {
            int64_t zsize;
            void *zbuf = bdrv_zero_buffer(bs, &zsize);

            io->frag = MIN(MIN(io->end - io->pos, bdrv_max_rw(bs)), zsize);
            bdrv_drv_call(req, BDRV_OP_WRITE, io->pos, io->frag, zbuf,
                          io->flags & (BDRV_REQ_FUA | BDRV_REQ_PRIO), NULL,
                          bdrv_req_frag_done);
        } else if (bdrv_drv_has(bs, BDRV_OP_ZERO)) {
            int64_t max = bdrv_max_no_data(bs, bs->bl.max_pwrite_zeroes);

            if (bdrv_fan_out(req, max)) {
                break;
            }
            io->frag = MIN(io->end - io->pos, max);
            bdrv_drv_call(req, BDRV_OP_ZERO, io->pos, io->frag, NULL,
                          io->flags, NULL, bdrv_req_frag_done);
        } else {
            io->frag = 0;
            bdrv_complete_later(bdrv_req_frag_done, req, -ENOTSUP);
        }
        break;
    case BDRV_OP_DISCARD: {
        int64_t max = bdrv_max_no_data(bs, bs->bl.max_pdiscard);

        if (bdrv_fan_out(req, max)) {
            break;
        }
        io->frag = MIN(io->end - io->pos, max);
        bdrv_drv_call(req, BDRV_OP_DISCARD, io->pos, io->frag, NULL,
                      io->flags, NULL, bdrv_req_frag_done);
        break;
    }
    default:
        g_assert_not_reached();
    }
}

static void bdrv_req_run(BdrvRequest *req)
{
    if (req->io.copy) {
        bdrv_copy_run(req);
        return;
    }
    if (req->io.map) {
        bdrv_map_run(req);
        return;
    }
    req->io.pos = req->io.start;
    bdrv_req_step(req);
}

/* ---- public entry points ---- */

/* Pad @req out to the driver's alignment; bounce if needed. */
static void bdrv_req_align(BdrvRequest *req, bool for_write)
{
    BlockDriverState *bs = req->bs;
    BdrvRequestIo *io = &req->io;
    int64_t align = bs->bl.request_alignment;
    bool misaligned_buf;

    io->start = QEMU_ALIGN_DOWN(io->offset, align);
    io->end = MIN(QEMU_ALIGN_UP(io->offset + io->bytes, align),
                  bs->total_bytes);
    misaligned_buf = (uintptr_t)io->buf % bs->bl.min_mem_alignment != 0;

    if (io->start == io->offset && io->end == io->offset + io->bytes) {
        if (misaligned_buf) {
            io->bounce = bdrv_blockalign(bs, io->bytes);
            if (for_write) {
                memcpy(io->bounce, io->buf, io->bytes);
            }
        }
        io->phase = BDRV_PHASE_IO;
        return;
    }
    io->bounce = bdrv_blockalign(bs, io->end - io->start);
    if (for_write) {
        io->serialising = true;
        io->phase = BDRV_PHASE_RMW_HEAD;
    } else {
        io->phase = BDRV_PHASE_IO;
    }
}

/*
 * Checks every write-like request needs: a writable node, a range inside
 * the image; an empty request succeeds at once.  Returns false when @req
 * was completed here.
 */
bool bdrv_req_check_write(BdrvRequest *req)
{
    BlockDriverState *bs = req->bs;

    if (!(bs->open_flags & BDRV_O_RDWR)) {
        bdrv_req_finish_later(req, -EPERM);
        return false;
    }
    if (req->io.offset > bs->total_bytes ||
        req->io.bytes > bs->total_bytes - req->io.offset) {
        bdrv_req_finish_later(req, -ENOSPC);
        return false;
    }
    if (req->io.bytes == 0) {
        bdrv_req_finish_later(req, 0);
        return false;
    }
    return true;
}

void bdrv_aio_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
                    void *buf, BdrvRequestFlags flags,
                    BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes >= 0);
    if (offset >= bs->total_bytes) {
        memset(buf, 0, bytes);
        bytes = 0;
    } else if (bytes > bs->total_bytes - offset) {
        int64_t inside = bs->total_bytes - offset;

        memset((uint8_t *)buf + inside, 0, bytes - inside);
        bytes = inside;
    }
    req = bdrv_req_new(bs, BDRV_OP_READ, offset, bytes, buf, flags,
                       cb, opaque);
    if (bytes == 0) {
        bdrv_req_finish_later(req, 0);
        return;
    }
    bdrv_req_align(req, false);
    bdrv_req_submit(req);
}

void bdrv_aio_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     const void *buf, BdrvRequestFlags flags,
                     BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes >= 0);
    req = bdrv_req_new(bs, BDRV_OP_WRITE, offset, bytes, (void *)buf,
                       flags & (BDRV_REQ_FUA | BDRV_REQ_WRITE_COMPRESSED |
                                BDRV_REQ_PRIO),
                       cb, opaque);
    if (!bdrv_req_check_write(req)) {
        return;
    }
    bdrv_req_align(req, true);
    if (flags & BDRV_REQ_WRITE_COMPRESSED) {
        /* Compressed: supported by the driver, and nothing to pad. */
        if (!(bs->drv->supported_write_flags & BDRV_REQ_WRITE_COMPRESSED)) {
            bdrv_req_finish_later(req, -ENOTSUP);
            return;
        }
        if (req->io.start != req->io.offset ||
            req->io.end != req->io.offset + req->io.bytes) {
            bdrv_req_finish_later(req, -EINVAL);
            return;
        }
    }
    bdrv_req_submit(req);
}

/* ---- write-zeroes, discard, flush, block status ---- */

static void bdrv_zero_child_done(void *opaque, int ret);

/*
 * An unaligned write-zeroes: the partial head and tail blocks are written
 * as zero data (read-modify-write), the aligned middle is zeroed.  The
 * pieces run one after the other as child requests.
 */
static void bdrv_zero_unaligned_step(BdrvRequest *parent)
{
    BlockDriverState *bs = parent->bs;
    int64_t align = bs->bl.request_alignment;
    int64_t end = parent->io.offset + parent->io.bytes;
    int64_t pos = parent->io.child_pos;
    int64_t next;
    int64_t zsize;
    void *zbuf;

    if (pos >= end) {
        bdrv_req_finish(parent, 0);
        return;
    }
    next = MIN(QEMU_ALIGN_UP(pos + 1, align), end);
    if (pos % align == 0 && end - pos >= align) {
        /* Aligned middle, up to the last whole block (or EOF). */
        next = end == bs->total_bytes ? end : QEMU_ALIGN_DOWN(end, align);
        parent->io.child_pos = next;
        bdrv_aio_pwrite_zeroes(bs, pos, next - pos, parent->io.flags,
                               bdrv_zero_child_done, parent);
        return;
    }
    zbuf = bdrv_zero_buffer(bs, &zsize);
    g_assert(next - pos <= zsize);
    parent->io.child_pos = next;
    bdrv_aio_pwrite(bs, pos, next - pos, zbuf,
                    parent->io.flags & (BDRV_REQ_FUA | BDRV_REQ_PRIO),
                    bdrv_zero_child_done, parent);
}

static void bdrv_zero_child_done(void *opaque, int ret)
{
    BdrvRequest *parent = opaque;

    if (ret < 0) {
        bdrv_req_finish(parent, ret);
        return;
    }
    bdrv_zero_unaligned_step(parent);
}

void bdrv_aio_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                            int64_t bytes, BdrvRequestFlags flags,
                            BlockCompletionFunc *cb, void *opaque)
{
    int64_t align = bs->bl.request_alignment;
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes >= 0);
    req = bdrv_req_new(bs, BDRV_OP_ZERO, offset, bytes, NULL, flags,
                       cb, opaque);
    if (!bdrv_req_check_write(req)) {
        return;
    }
    if (offset % align ||
        ((offset + bytes) % align && offset + bytes != bs->total_bytes)) {
        if (flags & BDRV_REQ_NO_FALLBACK) {
            /* Partial blocks cannot be zeroed without writing data. */
            bdrv_req_finish_later(req, -ENOTSUP);
            return;
        }
        req->io.child_pos = offset;
        bdrv_zero_unaligned_step(req);
        return;
    }
    req->io.phase = BDRV_PHASE_IO;
    bdrv_req_submit(req);
}

/* Discard, flush and block status take no flag but BDRV_REQ_PRIO, which
 * only bdrv_aio_submit() passes them. */
static void bdrv_do_pdiscard(BlockDriverState *bs, int64_t offset,
                             int64_t bytes, BdrvRequestFlags flags,
                             BlockCompletionFunc *cb, void *opaque)
{
    int64_t align = bs->bl.request_alignment;
    BdrvRequest *req;
    int64_t end;

    g_assert(offset >= 0 && bytes >= 0);
    req = bdrv_req_new(bs, BDRV_OP_DISCARD, offset, bytes, NULL,
                       flags & BDRV_REQ_PRIO, cb, opaque);
    if (!bdrv_req_check_write(req)) {
        return;
    }
    /* Shrink to whole blocks; the partial ends are simply kept. */
    end = offset + bytes;
    req->io.start = QEMU_ALIGN_UP(offset, align);
    req->io.end = end == bs->total_bytes ? end : QEMU_ALIGN_DOWN(end, align);
    if (req->io.start >= req->io.end || !bdrv_drv_has(bs, BDRV_OP_DISCARD)) {
        bdrv_req_finish_later(req, 0);
        return;
    }
    req->io.phase = BDRV_PHASE_IO;
    bdrv_req_submit(req);
}

void bdrv_aio_pdiscard(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       BlockCompletionFunc *cb, void *opaque)
{
    bdrv_do_pdiscard(bs, offset, bytes, 0, cb, opaque);
}

static void bdrv_do_flush(BlockDriverState *bs, BdrvRequestFlags flags,
                          BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req = bdrv_req_new(bs, BDRV_OP_FLUSH, 0, 0, NULL,
                                    flags & BDRV_REQ_PRIO, cb, opaque);

    if (!bdrv_drv_has(bs, BDRV_OP_FLUSH) || !(bs->open_flags & BDRV_O_RDWR)) {
        bdrv_req_finish_later(req, 0);
        return;
    }
    bdrv_drv_call(req, BDRV_OP_FLUSH, 0, 0, NULL, req->io.flags, NULL,
                  bdrv_req_finish_cb);
}

void bdrv_aio_flush(BlockDriverState *bs, BlockCompletionFunc *cb,
                    void *opaque)
{
    bdrv_do_flush(bs, 0, cb, opaque);
}

static void bdrv_block_status_done(void *opaque, int ret)
{
    BdrvRequest *req = opaque;
    GArray *ext = req->io.extents;
    guint first = req->io.first_extent;
    int64_t expect = req->io.offset;

    if (ret == 0 && ext->len <= first) {
        ret = -EIO;             /* a driver must say something */
    }
    for (guint i = first; ret == 0 && i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        if (e->offset != expect || e->length <= 0) {
            ret = -EIO;
            break;
        }
        if (e->offset + e->length > req->io.offset + req->io.bytes) {
            e->length = req->io.offset + req->io.bytes - e->offset;
            g_array_set_size(ext, i + 1);
        }
        expect = e->offset + e->length;
    }
    if (ret < 0) {
        g_array_set_size(ext, first);
    }
    bdrv_req_finish(req, ret);
}

static void bdrv_do_block_status(BlockDriverState *bs, int64_t offset,
                                 int64_t bytes, BdrvRequestFlags flags,
                                 GArray *extents, BlockCompletionFunc *cb,
                                 void *opaque)
{
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes > 0);
    bytes = MIN(bytes, bs->total_bytes - offset);
    req = bdrv_req_new(bs, BDRV_OP_STATUS, offset, bytes, NULL,
                       flags & BDRV_REQ_PRIO, cb, opaque);
    req->io.extents = extents;
    req->io.first_extent = extents->len;
    if (bytes <= 0) {
        bdrv_req_finish_later(req, -EINVAL);
        return;
    }
    if (!bdrv_drv_has(bs, BDRV_OP_STATUS)) {
        BlockExtent e = {
            .offset = offset,
            .length = bytes,
            .flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED,
        };
        g_array_append_val(extents, e);
        bdrv_req_finish_later(req, 0);
        return;
    }
    bdrv_drv_call(req, BDRV_OP_STATUS, offset, bytes, NULL, req->io.flags,
                  extents, bdrv_block_status_done);
}

void bdrv_aio_block_status(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, GArray *extents,
                           BlockCompletionFunc *cb, void *opaque)
{
    bdrv_do_block_status(bs, offset, bytes, 0, extents, cb, opaque);
}

void bdrv_aio_submit(BlockDriverState *bs, BdrvOp op, int64_t offset,
                     int64_t bytes, void *buf, BdrvRequestFlags flags,
                     GArray *extents, BlockCompletionFunc *cb, void *opaque)
{
    switch (op) {
    case BDRV_OP_READ:
        bdrv_aio_pread(bs, offset, bytes, buf, flags, cb, opaque);
        break;
    case BDRV_OP_WRITE:
        bdrv_aio_pwrite(bs, offset, bytes, buf, flags, cb, opaque);
        break;
    case BDRV_OP_ZERO:
        bdrv_aio_pwrite_zeroes(bs, offset, bytes, flags, cb, opaque);
        break;
    case BDRV_OP_DISCARD:
        bdrv_do_pdiscard(bs, offset, bytes, flags, cb, opaque);
        break;
    case BDRV_OP_FLUSH:
        bdrv_do_flush(bs, flags, cb, opaque);
        break;
    case BDRV_OP_STATUS:
        bdrv_do_block_status(bs, offset, bytes, flags, extents, cb, opaque);
        break;
    }
}

void bdrv_cancel_in_flight(BlockDriverState *bs)
{
    if (bs->drv->cancel_in_flight) {
        bs->drv->cancel_in_flight(bs);
    }
}
