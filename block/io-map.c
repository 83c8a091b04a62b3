/*
 * Views in place of reads (bdrv_aio_map): a read-only mapping of image
 * bytes, filled by a blocking driver's map() on the pool, tracked like a
 * read so that it waits behind an overlapping read-modify-write.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/io-int.h"

#include <errno.h>

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
    req->io.map = map;
    bdrv_req_submit(req);
}

void bdrv_map_run(BdrvRequest *req)
{
    req->op = BDRV_OP_READ;
    req->offset = req->io.offset;
    req->bytes = req->io.bytes;
    req->io.drv_done = bdrv_req_finish_cb;
    bdrv_blocking_submit(req);
}

void bdrv_unmap(BlockDriverState *bs, BdrvMapping *map)
{
    if (map->base) {
        bs->drv->unmap(bs, map);
    }
    *map = (BdrvMapping) { 0 };
}
