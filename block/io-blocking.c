/*
 * The blocking-driver adapter: drivers whose I/O is blocking calls (raw
 * files, qcow2) write synchronous pread/pwrite/pwrite_zeroes/pdiscard/
 * flush/block_status members, like nbdkit plugins, and this runs each
 * driver call on a worker of the thread pool (block/thread-pool.c) and
 * completes it on the main loop.
 *
 * Where a call runs is the driver's to say: on a worker that may wait for
 * a device (thread_pool_submit), as CPU work when the node lives in
 * memory (cpu_bound: thread_pool_submit_cpu), or on the main loop itself
 * (run_here), completed from an idle source.  A BDRV_REQ_PRIO call is
 * THREAD_POOL_URGENT work: it starts and completes ahead of the others.
 * A block status call fills an array of the worker's own, copied into the
 * caller's on the main loop, so that workers never touch main-loop state.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/io-int.h"
#include "block/thread-pool.h"

bool bdrv_is_blocking(BlockDriverState *bs)
{
    return !bs->drv->aio_submit;
}

/* On a worker (or here): the driver's blocking member for req->op. */
static int bdrv_blocking_worker(void *arg)
{
    BdrvRequest *req = arg;
    BlockDriverState *bs = req->bs;
    const BlockDriver *drv = bs->drv;

    if (req->io.map) {
        return drv->map(bs, req->offset, req->bytes, req->io.map);
    }
    switch (req->op) {
    case BDRV_OP_READ:
        return drv->pread(bs, req->offset, req->bytes, req->buf);
    case BDRV_OP_WRITE:
        return drv->pwrite(bs, req->offset, req->bytes, req->buf,
                           req->flags);
    case BDRV_OP_ZERO:
        return drv->pwrite_zeroes(bs, req->offset, req->bytes, req->flags);
    case BDRV_OP_DISCARD:
        return drv->pdiscard(bs, req->offset, req->bytes);
    case BDRV_OP_FLUSH:
        return drv->flush(bs);
    case BDRV_OP_STATUS:
        return drv->block_status(bs, req->offset, req->bytes, req->io.found);
    }
    g_assert_not_reached();
}

/* Back on the main loop: the extents to the caller, then io.c. */
static void bdrv_blocking_done(void *opaque, int ret)
{
    BdrvRequest *req = opaque;

    if (req->io.found) {
        if (ret == 0) {
            g_array_append_vals(req->extents, req->io.found->data,
                                req->io.found->len);
        }
        g_array_unref(req->io.found);
        req->io.found = NULL;
    }
    if (req->io.here) {
        req->io.here = false;
        req->bs->run_here--;
    }
    bdrv_req_complete(req, ret);
}

void bdrv_blocking_submit(BdrvRequest *req)
{
    BlockDriverState *bs = req->bs;
    const BlockDriver *drv = bs->drv;
    ThreadPoolFlags pool_flags =
        req->flags & BDRV_REQ_PRIO ? THREAD_POOL_URGENT : 0;

    if (req->op == BDRV_OP_STATUS && !req->io.map) {
        req->io.found = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    }
    if (!req->io.map && drv->run_here && drv->run_here(bs, req)) {
        req->io.here = true;
        bs->run_here++;
        bdrv_complete_later(bdrv_blocking_done, req,
                            bdrv_blocking_worker(req));
        return;
    }
    if (drv->cpu_bound && drv->cpu_bound(bs)) {
        pool_flags |= THREAD_POOL_CPU;
    }
    thread_pool_submit_full(thread_pool_get(), pool_flags,
                            bdrv_blocking_worker, req, bdrv_blocking_done,
                            req);
}
