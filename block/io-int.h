/*
 * block/io.c internals shared with block/io-ops.c: the request object and
 * the steps of its life.  Nothing outside the request path uses this.
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

/* What a write request is doing right now. */
typedef enum BdrvReqPhase {
    BDRV_PHASE_IO,          /* sending [pos, end) in fragments */
    BDRV_PHASE_RMW_HEAD,    /* reading the partial head block */
    BDRV_PHASE_RMW_TAIL,    /* reading the partial tail block */
    BDRV_PHASE_ZERO_WRITE,  /* zero fallback: writing zero buffers */
} BdrvReqPhase;

typedef struct BdrvRequest BdrvRequest;
struct BdrvRequest {
    BlockDriverState *bs;
    BdrvOp type;
    int64_t offset;          /* the caller's range, clamped to the image */
    int64_t bytes;
    uint8_t *buf;            /* the caller's buffer (READ, WRITE) */
    BdrvRequestFlags flags;
    BlockCompletionFunc *cb;
    void *opaque;
    GArray *extents;         /* STATUS */

    int64_t start;           /* the aligned range sent to the driver */
    int64_t end;
    uint8_t *bounce;         /* covers [start, end) when padding/bouncing */
    bool serialising;        /* read-modify-write in progress */
    bool tracked;            /* in bs->tracked */
    GList link;              /* in bs->tracked or bs->waiting */

    BdrvReqPhase phase;
    int64_t pos;             /* next byte of [start, end) to send */
    int64_t frag;            /* bytes of the fragment in flight */

    /* An unaligned write-zeroes runs as up to three child requests. */
    int64_t child_pos;

    guint first_extent;      /* STATUS: index of the first new extent */

    BdrvMapping *map;        /* READ as a view (bdrv_aio_map), or NULL */
    struct BdrvCopyJob *copy; /* one side of a bdrv_aio_copy(), or NULL */
};

/* Largest read or write fragment for @bs. */
int64_t bdrv_max_rw(BlockDriverState *bs);

/* Run @req, one side of a fused copy, once it is tracked (io-copy.c). */
void bdrv_copy_run(BdrvRequest *req);

/* Largest write-zeroes / discard fragment for @bs. */
int64_t bdrv_max_zero(BlockDriverState *bs);
int64_t bdrv_max_discard(BlockDriverState *bs);

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
 * Hand one request to @bs's driver: to its aio_submit when it has one,
 * else to the member for @op.  Arguments as for aio_submit.
 */
void bdrv_drv_call(BlockDriverState *bs, BdrvOp op, int64_t offset,
                   int64_t bytes, void *buf, BdrvRequestFlags flags,
                   GArray *extents, BlockCompletionFunc *cb, void *opaque);

/* Does @bs's driver handle @op itself (else io.c's fallback applies)? */
bool bdrv_drv_has(BlockDriverState *bs, BdrvOp op);

/* Aligned zeroes for the write fallback (allocated once per node). */
void *bdrv_zero_buffer(BlockDriverState *bs, int64_t *size);

#endif /* BLOCK_IO_INT_H */
