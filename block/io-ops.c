/*
 * The request path, second half: write-zeroes (with partial blocks as zero
 * data), discard, flush, block status, and aborting requests in flight.
 * Splitting, alignment and serialisation are in block/io.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/io-int.h"

#include <errno.h>

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
    int64_t end = parent->offset + parent->bytes;
    int64_t pos = parent->child_pos;
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
        parent->child_pos = next;
        bdrv_aio_pwrite_zeroes(bs, pos, next - pos, parent->flags,
                               bdrv_zero_child_done, parent);
        return;
    }
    zbuf = bdrv_zero_buffer(bs, &zsize);
    g_assert(next - pos <= zsize);
    parent->child_pos = next;
    bdrv_aio_pwrite(bs, pos, next - pos, zbuf, parent->flags & BDRV_REQ_FUA,
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
        req->child_pos = offset;
        bdrv_zero_unaligned_step(req);
        return;
    }
    req->phase = BDRV_PHASE_IO;
    bdrv_req_submit(req);
}

void bdrv_aio_pdiscard(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       BlockCompletionFunc *cb, void *opaque)
{
    int64_t align = bs->bl.request_alignment;
    BdrvRequest *req;
    int64_t end;

    g_assert(offset >= 0 && bytes >= 0);
    req = bdrv_req_new(bs, BDRV_OP_DISCARD, offset, bytes, NULL, 0,
                       cb, opaque);
    if (!bdrv_req_check_write(req)) {
        return;
    }
    /* Shrink to whole blocks; the partial ends are simply kept. */
    end = offset + bytes;
    req->start = QEMU_ALIGN_UP(offset, align);
    req->end = end == bs->total_bytes ? end : QEMU_ALIGN_DOWN(end, align);
    if (req->start >= req->end || !bdrv_drv_has(bs, BDRV_OP_DISCARD)) {
        bdrv_req_finish_later(req, 0);
        return;
    }
    req->phase = BDRV_PHASE_IO;
    bdrv_req_submit(req);
}

void bdrv_aio_flush(BlockDriverState *bs, BlockCompletionFunc *cb,
                    void *opaque)
{
    BdrvRequest *req = bdrv_req_new(bs, BDRV_OP_FLUSH, 0, 0, NULL, 0,
                                    cb, opaque);

    if (!bdrv_drv_has(bs, BDRV_OP_FLUSH) || !(bs->open_flags & BDRV_O_RDWR)) {
        bdrv_req_finish_later(req, 0);
        return;
    }
    bdrv_drv_call(bs, BDRV_OP_FLUSH, 0, 0, NULL, 0, NULL, bdrv_req_finish_cb,
                  req);
}

static void bdrv_block_status_done(void *opaque, int ret)
{
    BdrvRequest *req = opaque;
    GArray *ext = req->extents;
    guint first = req->first_extent;
    int64_t expect = req->offset;

    if (ret == 0 && ext->len <= first) {
        ret = -EIO;             /* a driver must say something */
    }
    for (guint i = first; ret == 0 && i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        if (e->offset != expect || e->length <= 0) {
            ret = -EIO;
            break;
        }
        if (e->offset + e->length > req->offset + req->bytes) {
            e->length = req->offset + req->bytes - e->offset;
            g_array_set_size(ext, i + 1);
        }
        expect = e->offset + e->length;
    }
    if (ret < 0) {
        g_array_set_size(ext, first);
    }
    bdrv_req_finish(req, ret);
}

void bdrv_aio_block_status(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, GArray *extents,
                           BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes > 0);
    bytes = MIN(bytes, bs->total_bytes - offset);
    req = bdrv_req_new(bs, BDRV_OP_STATUS, offset, bytes, NULL, 0,
                       cb, opaque);
    req->extents = extents;
    req->first_extent = extents->len;
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
    bdrv_drv_call(bs, BDRV_OP_STATUS, offset, bytes, NULL, 0, extents,
                  bdrv_block_status_done, req);
}

bool bdrv_drv_has(BlockDriverState *bs, BdrvOp op)
{
    const BlockDriver *drv = bs->drv;

    switch (op) {
    case BDRV_OP_ZERO:
        return drv->aio_submit || drv->aio_pwrite_zeroes;
    case BDRV_OP_DISCARD:
        return drv->aio_submit || drv->aio_pdiscard;
    case BDRV_OP_FLUSH:
        return drv->aio_submit || drv->aio_flush;
    case BDRV_OP_STATUS:
        return drv->aio_submit || drv->aio_block_status;
    default:
        return true;
    }
}

void bdrv_drv_call(BlockDriverState *bs, BdrvOp op, int64_t offset,
                   int64_t bytes, void *buf, BdrvRequestFlags flags,
                   GArray *extents, BlockCompletionFunc *cb, void *opaque)
{
    const BlockDriver *drv = bs->drv;

    if (drv->aio_submit) {
        drv->aio_submit(bs, op, offset, bytes, buf, flags, extents, cb,
                        opaque);
        return;
    }
    switch (op) {
    case BDRV_OP_READ:
        drv->aio_preadv(bs, offset, bytes, buf, flags, cb, opaque);
        break;
    case BDRV_OP_WRITE:
        drv->aio_pwritev(bs, offset, bytes, buf, flags, cb, opaque);
        break;
    case BDRV_OP_ZERO:
        drv->aio_pwrite_zeroes(bs, offset, bytes, flags, cb, opaque);
        break;
    case BDRV_OP_DISCARD:
        drv->aio_pdiscard(bs, offset, bytes, cb, opaque);
        break;
    case BDRV_OP_FLUSH:
        drv->aio_flush(bs, cb, opaque);
        break;
    case BDRV_OP_STATUS:
        drv->aio_block_status(bs, offset, bytes, extents, cb, opaque);
        break;
    }
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
        bdrv_aio_pdiscard(bs, offset, bytes, cb, opaque);
        break;
    case BDRV_OP_FLUSH:
        bdrv_aio_flush(bs, cb, opaque);
        break;
    case BDRV_OP_STATUS:
        bdrv_aio_block_status(bs, offset, bytes, extents, cb, opaque);
        break;
    }
}

/* ---- views in place of reads ---- */

bool bdrv_can_map(BlockDriverState *bs)
{
    return bs->drv->can_map && bs->drv->can_map(bs);
}

void bdrv_aio_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
                  BdrvMapping *map, BlockCompletionFunc *cb, void *opaque)
{
    BdrvRequest *req;

    g_assert(offset >= 0 && bytes > 0);
    *map = (BdrvMapping) { 0 };
    req = bdrv_req_new(bs, BDRV_OP_READ, offset, bytes, NULL, 0, cb, opaque);
    if (!bdrv_can_map(bs) || bytes > bs->total_bytes - offset) {
        bdrv_req_finish_later(req, -ENOTSUP);
        return;
    }
    /* Tracked like a read: it waits behind overlapping read-modify-write. */
    req->map = map;
    bdrv_req_submit(req);
}

void bdrv_unmap(BlockDriverState *bs, BdrvMapping *map)
{
    if (map->base) {
        bs->drv->unmap(bs, map);
    }
    *map = (BdrvMapping) { 0 };
}

void bdrv_cancel_in_flight(BlockDriverState *bs)
{
    if (bs->drv->cancel_in_flight) {
        bs->drv->cancel_in_flight(bs);
    }
}
