/*
 * Fused copies: one pool job reads a range of one blocking node (its
 * driver's pread()) and writes it to another (pwrite()), where both
 * nodes' I/O is CPU work on a pool worker (buffered files in memory, whose
 * reads and writes are page-cache copies).  Any two nodes of the blocking
 * shape qualify unless one's driver says no (can_copy()).
 *
 * The ordinary way costs a read job, a trip through the main loop and a
 * write job, with a wakeup at each handoff; on a small machine those gaps
 * and the contention of many workers on one file's write lock left a
 * convert to a new file well behind a plain pread/pwrite loop
 * (bench/README.md, "The copy floor").  Here the job is tracked as a read
 * request on the source and a write request on the target, so it waits
 * behind overlapping read-modify-writes and runs the target's write
 * notifiers like any other request, and it runs through
 * thread_pool_submit_cpu(): one per CPU at most, back to back.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/io-int.h"
#include "block/thread-pool.h"

typedef struct BdrvCopyJob {
    BdrvRequest *rreq;          /* READ on the source */
    BdrvRequest *wreq;          /* WRITE on the target, once rreq runs */
    BlockDriverState *dst;
    BdrvCopyCheck *check;
    BdrvCopyResult *res;
    BlockCompletionFunc *cb;
    void *opaque;
} BdrvCopyJob;

/* Can @bs be one side of a fused copy? */
static bool bdrv_copy_side(BlockDriverState *bs)
{
    return bdrv_is_blocking(bs) &&
           (!bs->drv->can_copy || bs->drv->can_copy(bs));
}

bool bdrv_can_copy(BlockDriverState *src, BlockDriverState *dst)
{
    return bdrv_copy_side(src) && bdrv_copy_side(dst);
}

static bool bdrv_copy_fits_one(BlockDriverState *bs, int64_t offset,
                               int64_t bytes, const void *buf)
{
    int64_t align = bs->bl.request_alignment;

    return offset % align == 0 &&
           (bytes % align == 0 || offset + bytes == bs->total_bytes) &&
           bytes <= bdrv_max_rw(bs) &&
           offset <= bs->total_bytes && bytes <= bs->total_bytes - offset &&
           (uintptr_t)buf % bs->bl.min_mem_alignment == 0;
}

bool bdrv_copy_fits(BlockDriverState *src, BlockDriverState *dst,
                    int64_t offset, int64_t bytes, const void *buf)
{
    return offset >= 0 && bytes > 0 &&
           bdrv_copy_fits_one(src, offset, bytes, buf) &&
           bdrv_copy_fits_one(dst, offset, bytes, buf);
}

/* On a pool worker: read, ask, write. */
static int bdrv_copy_worker(void *arg)
{
    BdrvCopyJob *job = arg;
    BdrvRequest *r = job->rreq;
    BdrvRequest *w = job->wreq;
    int ret;

    ret = r->bs->drv->pread(r->bs, r->io.offset, r->io.bytes, r->io.buf);
    job->res->read_ret = ret;
    if (ret < 0 ||
        (job->check && !job->check(job->opaque, r->io.buf, r->io.bytes))) {
        return ret;
    }
    ret = w->bs->drv->pwrite(w->bs, w->io.offset, w->io.bytes, w->io.buf,
                             w->io.flags);
    job->res->write_ret = ret;
    job->res->written = ret == 0;
    return ret;
}

/* The read side finished last: the caller's completion. */
static void bdrv_copy_read_done(void *opaque, int ret)
{
    BdrvCopyJob *job = opaque;
    BlockCompletionFunc *cb = job->cb;
    void *cb_opaque = job->opaque;

    ret = job->res->read_ret < 0 ? job->res->read_ret : job->res->write_ret;
    g_free(job);
    cb(cb_opaque, ret);
}

/* The write side finished (or was refused before it ran). */
static void bdrv_copy_write_done(void *opaque, int ret)
{
    BdrvCopyJob *job = opaque;

    if (ret < 0 && job->res->read_ret == 0 && job->res->write_ret == 0) {
        job->res->write_ret = ret;      /* refused: read-only target */
    }
    job->wreq = NULL;
    bdrv_req_finish(job->rreq, job->res->read_ret);
}

static void bdrv_copy_job_done(void *opaque, int ret)
{
    BdrvCopyJob *job = opaque;

    bdrv_req_finish(job->wreq, job->res->write_ret);
}

void bdrv_copy_run(BdrvRequest *req)
{
    BdrvCopyJob *job = req->io.copy;

    if (req == job->rreq) {
        /* The read side is tracked: track the write side, then run. */
        job->wreq = bdrv_req_new(job->dst, BDRV_OP_WRITE, req->io.offset,
                                 req->io.bytes, req->io.buf, 0,
                                 bdrv_copy_write_done, job);
        job->wreq->io.copy = job;
        if (bdrv_req_check_write(job->wreq)) {
            bdrv_req_submit(job->wreq);
        }
        return;
    }
    thread_pool_submit_cpu(thread_pool_get(), bdrv_copy_worker, job,
                           bdrv_copy_job_done, job);
}

void bdrv_aio_copy(BlockDriverState *src, BlockDriverState *dst,
                   int64_t offset, int64_t bytes, void *buf,
                   BdrvCopyCheck *check, BdrvCopyResult *res,
                   BlockCompletionFunc *cb, void *opaque)
{
    BdrvCopyJob *job = g_new0(BdrvCopyJob, 1);

    g_assert(bdrv_can_copy(src, dst));
    g_assert(bdrv_copy_fits(src, dst, offset, bytes, buf));
    *res = (BdrvCopyResult) { 0 };
    *job = (BdrvCopyJob) {
        .dst = dst, .check = check, .res = res, .cb = cb, .opaque = opaque,
    };
    job->rreq = bdrv_req_new(src, BDRV_OP_READ, offset, bytes, buf, 0,
                             bdrv_copy_read_done, job);
    job->rreq->io.copy = job;
    bdrv_req_submit(job->rreq);
}
