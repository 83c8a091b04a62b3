/*
 * The request path: every read, write, zero, discard, flush and block
 * status goes through here, and only here are requests split, aligned,
 * bounced, clamped at the end of the image and counted.
 *
 * A request is padded out to the driver's request_alignment (reads through
 * a bounce buffer; writes by read-modify-write), then sent to the driver in
 * fragments of at most max_transfer bytes, one fragment at a time, so one
 * request never has more than one driver request in flight.  A
 * read-modify-write is "serialising": it waits until no overlapping request
 * is in flight and keeps new overlapping ones waiting, so the block it read
 * cannot change under it.
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

int64_t bdrv_max_zero(BlockDriverState *bs)
{
    int64_t align = bs->bl.request_alignment;
    int64_t max = bs->bl.max_pwrite_zeroes ? bs->bl.max_pwrite_zeroes
                                           : BDRV_DEFAULT_MAX_TRANSFER;

    return MAX(QEMU_ALIGN_DOWN(max, align), align);
}

int64_t bdrv_max_discard(BlockDriverState *bs)
{
    int64_t align = bs->bl.request_alignment;
    int64_t max = bs->bl.max_pdiscard ? bs->bl.max_pdiscard
                                      : BDRV_DEFAULT_MAX_TRANSFER;

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
    BdrvRequest *req = g_new0(BdrvRequest, 1);

    req->bs = bs;
    req->type = type;
    req->offset = offset;
    req->bytes = bytes;
    req->buf = buf;
    req->flags = flags;
    req->cb = cb;
    req->opaque = opaque;
    req->link.data = req;
    req->start = offset;
    req->end = offset + bytes;
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
    BlockCompletionFunc *cb = req->cb;
    void *opaque = req->opaque;

    if (req->tracked) {
        g_queue_unlink(&bs->tracked, &req->link);
    }
    if (ret == 0 && req->type == BDRV_OP_READ && req->bounce) {
        memcpy(req->buf, req->bounce + (req->offset - req->start),
               req->bytes);
    }
    if (req->type == BDRV_OP_WRITE || req->type == BDRV_OP_ZERO ||
        req->type == BDRV_OP_DISCARD) {
        bdrv_notify_write(bs, req->offset, req->bytes);
    }
    qemu_vfree(req->bounce);
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
    return a->start < b->end && b->start < a->end;
}

/* Must @req wait for @other (in flight or queued ahead of it)? */
static bool bdrv_req_conflict(const BdrvRequest *req,
                              const BdrvRequest *other)
{
    return (req->serialising || other->serialising) &&
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
        g_queue_push_tail_link(&bs->waiting, &req->link);
        return;
    }
    g_queue_push_tail_link(&bs->tracked, &req->link);
    req->tracked = true;
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
            req->tracked = true;
            bdrv_req_run(req);
        }
        l = next;
    }
}

/* ---- the fragment loop ---- */

static void bdrv_req_step(BdrvRequest *req);

/* Both partial blocks are in the bounce buffer: lay the new data over
 * them and write the whole aligned range. */
static void bdrv_rmw_merge(BdrvRequest *req)
{
    memcpy(req->bounce + (req->offset - req->start), req->buf, req->bytes);
    req->phase = BDRV_PHASE_IO;
}

static void bdrv_req_frag_done(void *opaque, int ret)
{
    BdrvRequest *req = opaque;

    if (ret == -ENOTSUP && req->type == BDRV_OP_ZERO &&
        req->phase == BDRV_PHASE_IO &&
        !(req->flags & BDRV_REQ_NO_FALLBACK)) {
        /* No efficient zeroing here: write zero buffers instead. */
        req->phase = BDRV_PHASE_ZERO_WRITE;
        bdrv_req_step(req);
        return;
    }
    if (ret == -ENOTSUP && req->type == BDRV_OP_DISCARD) {
        ret = 0;    /* discard is advisory */
    }
    if (ret < 0) {
        bdrv_req_finish(req, ret);
        return;
    }
    if (req->phase == BDRV_PHASE_RMW_HEAD) {
        req->phase = BDRV_PHASE_RMW_TAIL;
    } else if (req->phase == BDRV_PHASE_RMW_TAIL) {
        bdrv_rmw_merge(req);
    } else {
        req->pos += req->frag;
    }
    bdrv_req_step(req);
}

void *bdrv_zero_buffer(BlockDriverState *bs, int64_t *size)
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

/* Issue the next piece of work of @req, or finish it. */
static void bdrv_req_step(BdrvRequest *req)
{
    BlockDriverState *bs = req->bs;
    int64_t align = bs->bl.request_alignment;
    uint8_t *data = req->bounce ? req->bounce : req->buf;

    if (req->phase == BDRV_PHASE_RMW_HEAD) {
        if (req->offset != req->start) {
            req->frag = MIN(align, req->end - req->start);
            bdrv_drv_call(bs, BDRV_OP_READ, req->start, req->frag,
                          req->bounce, 0, NULL, bdrv_req_frag_done, req);
            return;
        }
        req->phase = BDRV_PHASE_RMW_TAIL;
    }
    if (req->phase == BDRV_PHASE_RMW_TAIL) {
        int64_t tail = QEMU_ALIGN_DOWN(req->offset + req->bytes, align);
        bool head_read = req->offset != req->start;

        if (req->offset + req->bytes != req->end &&
            !(head_read && tail == req->start)) {
            req->frag = req->end - tail;
            bdrv_drv_call(bs, BDRV_OP_READ, tail, req->frag,
                          req->bounce + (tail - req->start), 0, NULL,
                          bdrv_req_frag_done, req);
            return;
        }
        bdrv_rmw_merge(req);
    }

    if (req->pos >= req->end) {
        bdrv_req_finish(req, 0);
        return;
    }

    switch (req->type) {
    case BDRV_OP_READ:
        req->frag = MIN(req->end - req->pos, bdrv_max_rw(bs));
        bdrv_drv_call(bs, BDRV_OP_READ, req->pos, req->frag,
                      data + (req->pos - req->start), req->flags, NULL,
                      bdrv_req_frag_done, req);
        break;
    case BDRV_OP_WRITE:
        /* A compressed write is one unit of whole clusters: never split. */
        req->frag = req->flags & BDRV_REQ_WRITE_COMPRESSED
                    ? req->end - req->pos
                    : MIN(req->end - req->pos, bdrv_max_rw(bs));
        bdrv_drv_call(bs, BDRV_OP_WRITE, req->pos, req->frag,
                      data + (req->pos - req->start), req->flags, NULL,
                      bdrv_req_frag_done, req);
        break;
    case BDRV_OP_ZERO:
        if (req->phase == BDRV_PHASE_ZERO_WRITE) {
            int64_t zsize;
            void *zbuf = bdrv_zero_buffer(bs, &zsize);

            req->frag = MIN(MIN(req->end - req->pos, bdrv_max_rw(bs)),
                            zsize);
            bdrv_drv_call(bs, BDRV_OP_WRITE, req->pos, req->frag, zbuf,
                          req->flags & BDRV_REQ_FUA, NULL,
                          bdrv_req_frag_done, req);
        } else if (bdrv_drv_has(bs, BDRV_OP_ZERO)) {
            req->frag = MIN(req->end - req->pos, bdrv_max_zero(bs));
            bdrv_drv_call(bs, BDRV_OP_ZERO, req->pos, req->frag, NULL,
                          req->flags, NULL, bdrv_req_frag_done, req);
        } else {
            req->frag = 0;
            bdrv_complete_later(bdrv_req_frag_done, req, -ENOTSUP);
        }
        break;
    case BDRV_OP_DISCARD:
        req->frag = MIN(req->end - req->pos, bdrv_max_discard(bs));
        bdrv_drv_call(bs, BDRV_OP_DISCARD, req->pos, req->frag, NULL, 0,
                      NULL, bdrv_req_frag_done, req);
        break;
    default:
        g_assert_not_reached();
    }
}

static void bdrv_req_run(BdrvRequest *req)
{
    if (req->copy) {
        bdrv_copy_run(req);
        return;
    }
    if (req->map) {
        req->bs->drv->aio_map(req->bs, req->offset, req->bytes, req->map,
                              bdrv_req_finish_cb, req);
        return;
    }
    req->pos = req->start;
    bdrv_req_step(req);
}

/* ---- public entry points ---- */

/* Pad @req out to the driver's alignment; bounce if needed. */
static void bdrv_req_align(BdrvRequest *req, bool for_write)
{
    BlockDriverState *bs = req->bs;
    int64_t align = bs->bl.request_alignment;
    bool misaligned_buf;

    req->start = QEMU_ALIGN_DOWN(req->offset, align);
    req->end = MIN(QEMU_ALIGN_UP(req->offset + req->bytes, align),
                   bs->total_bytes);
    misaligned_buf = (uintptr_t)req->buf % bs->bl.min_mem_alignment != 0;

    if (req->start == req->offset && req->end == req->offset + req->bytes) {
        if (misaligned_buf) {
            req->bounce = bdrv_blockalign(bs, req->bytes);
            if (for_write) {
                memcpy(req->bounce, req->buf, req->bytes);
            }
        }
        req->phase = BDRV_PHASE_IO;
        return;
    }
    req->bounce = bdrv_blockalign(bs, req->end - req->start);
    if (for_write) {
        req->serialising = true;
        req->phase = BDRV_PHASE_RMW_HEAD;
    } else {
        req->phase = BDRV_PHASE_IO;
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
    if (req->offset > bs->total_bytes ||
        req->bytes > bs->total_bytes - req->offset) {
        bdrv_req_finish_later(req, -ENOSPC);
        return false;
    }
    if (req->bytes == 0) {
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
                       flags & (BDRV_REQ_FUA | BDRV_REQ_WRITE_COMPRESSED),
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
        if (req->start != req->offset ||
            req->end != req->offset + req->bytes) {
            bdrv_req_finish_later(req, -EINVAL);
            return;
        }
    }
    bdrv_req_submit(req);
}
