/*
 * Internals shared by the files of the request path: block/io.c (the
 * request path itself), block/io-blocking.c (the adapter that runs
 * blocking drivers on the thread pool), block/io-map.c (views) and
 * block/io-copy.c (fused copies).  Nothing outside them uses this.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_IO_INT_H
#define BLOCK_IO_INT_H

#include "block/block-int.h"
#include "util/cutils.h"

#define BDRV_DEFAULT_MAX_TRANSFER  (1 * GiB)
#define BDRV_ZERO_BUFFER_SIZE      (1 * MiB)

/* Largest read or write fragment for @bs. */
int64_t bdrv_max_rw(BlockDriverState *bs);

/* A new request, counted in flight on @bs. */
BdrvRequest *bdrv_req_new(BlockDriverState *bs, BdrvOp type,
                          int64_t offset, int64_t bytes, void *buf,
                          BdrvRequestFlags flags, BlockCompletionFunc *cb,
                          void *opaque);

/* Finish @req now: untrack it, notify writers, run its completion. */
void bdrv_req_finish(BdrvRequest *req, int ret);

/* bdrv_req_finish() as a BlockCompletionFunc (opaque: the request). */
void bdrv_req_finish_cb(void *opaque, int ret);

/* Finish @req later (for requests that need no I/O). */
void bdrv_req_finish_later(BdrvRequest *req, int ret);

/* Start @req, or queue it behind overlapping serialising requests. */
void bdrv_req_submit(BdrvRequest *req);

/* The checks of every write-like request; false when it was finished. */
bool bdrv_req_check_write(BdrvRequest *req);

/*
 * Hand @req to its node's driver for one call: @op on [@offset, @offset +
 * @bytes) with @buf, @flags, @extents; @done(@req, ret) runs when the
 * driver completes it.  Goes to aio_submit, or to the blocking adapter.
 */
void bdrv_drv_call(BdrvRequest *req, BdrvOp op, int64_t offset,
                   int64_t bytes, void *buf, BdrvRequestFlags flags,
                   GArray *extents, BlockCompletionFunc *done);

/* io-blocking.c: run the driver call set up in @req (a blocking driver),
 * or the view of req->io.map, on the pool or here. */
void bdrv_blocking_submit(BdrvRequest *req);

/* io-map.c: run @req, a view, once it is tracked. */
void bdrv_map_run(BdrvRequest *req);

/* io-copy.c: run @req, one side of a fused copy, once it is tracked. */
void bdrv_copy_run(BdrvRequest *req);

#endif /* BLOCK_IO_INT_H */
