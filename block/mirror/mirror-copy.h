/*
 * The copy path: how a COPY operation gets the source's bytes, chosen once
 * when the job is set up (mirror_copy_path_init()), from what the nodes
 * can do:
 *
 * - fused (bdrv_can_copy(): both ends' I/O is page-cache work, raw or
 *   qcow2 files on tmpfs): one pool job reads into the slot's buffer and
 *   writes the target (bdrv_aio_copy()), with no trip through the main
 *   loop between; not for in-order writes nor compression, whose writes
 *   wait on the main loop;
 * - view (bdrv_can_map(): a raw file on tmpfs): a COPY of MIRROR_MAP_MIN
 *   or more maps the source (bdrv_aio_map()) and the target is written
 *   from the view, one copy of every byte less; smaller ones read;
 * - buffer: read into the slot's pool buffer (bdrv_aio_pread()).
 *
 * The operation's life (read, in-order wait, write in pieces, retire)
 * stays with mirror-op.c; a path only brings the bytes in (and, fused,
 * may write them out too) and releases what holds them.
 *
 * A leaf: it knows the two nodes and the window (for the slots), and
 * reports to its owner through MirrorCopyEnv's two callbacks.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_COPY_H
#define BLOCK_MIRROR_COPY_H

#include "block/block.h"
#include "block/mirror/mirror-window.h"

typedef struct MirrorCopy MirrorCopy;

/* What the paths share: the nodes, the slots, and the owner's callbacks. */
typedef struct MirrorCopyEnv {
    BlockDriverState *src;
    BlockDriverState *dst;
    MirrorWindow *win;
    /*
     * Fused: on the pool worker, between the read and the write, with the
     * bytes read: false means "do not write them" (the owner writes them
     * from the main loop).  It may only read @buf and state that does not
     * change while the copy is in flight.  @c: the copy.
     */
    bool (*check)(MirrorCopy *c, const uint8_t *buf, int64_t bytes);
    /*
     * The copy's bytes are in (on the main loop): @ret < 0, the read
     * failed; else the data is at c->buf.  With c->written the path wrote
     * the target too (fused), and @ret is the write's result then.
     */
    void (*done)(MirrorCopy *c, int ret);
    /* Of the buffer path's reads: BDRV_REQ_OFF_LOOP when the target's
     * writes copy the data out on threads of their own
     * (bdrv_writes_off_loop()). */
    BdrvRequestFlags read_flags;
} MirrorCopyEnv;

/* One COPY's data, embedded in the operation. */
struct MirrorCopy {
    const MirrorCopyEnv *env;
    int64_t offset;
    int64_t bytes;
    const uint8_t *buf;         /* the data, once in: in one of these: */
    uint8_t *pool_buf;          /*   the slot's pool buffer, */
    BdrvMapping map;            /*   a view of the source */
    BdrvCopyResult res;         /* fused: what the pool job did */
    bool written;               /* fused: the target was written (or the
                                 * write failed) */
};

typedef struct MirrorCopyOps {
    const char *name;           /* "buffer", "view", "fused" (debug) */
    /*
     * Does a COPY of @bytes read into a pool buffer?  Otherwise its slot
     * holds no buffer (a view).  Pure.
     */
    bool (*wants_buf)(int64_t bytes);
    /*
     * Bring c->bytes of the source at c->offset into c->buf (the slot's
     * pool buffer c->pool_buf, or a view when it has none) and call
     * env->done(c, ret) once, later, on the main loop.  May write the
     * target too (fused: c->written).  The source is counted in flight
     * until then.
     */
    void (*start)(MirrorCopy *c);
} MirrorCopyOps;

/* Smallest COPY the view path reads from a view. */
#define MIRROR_MAP_MIN  (256 * 1024)

/* The copy path of a job: the ops chosen once, and the shared env. */
typedef struct MirrorCopyPath {
    const MirrorCopyOps *ops;
    MirrorCopyEnv env;
} MirrorCopyPath;

/*
 * Choose the path between @src and @dst once: fused where
 * bdrv_can_copy() and neither @in_order nor @compress, else view where
 * bdrv_can_map(@src), else buffer.  @check and @done as in MirrorCopyEnv.
 */
void mirror_copy_path_init(MirrorCopyPath *p, BlockDriverState *src,
                           BlockDriverState *dst, MirrorWindow *win,
                           bool in_order, bool compress,
                           bool (*check)(MirrorCopy *c, const uint8_t *buf,
                                         int64_t bytes),
                           void (*done)(MirrorCopy *c, int ret));

/* Does a COPY of @bytes read into a pool buffer on this path? */
bool mirror_copy_wants_buf(const MirrorCopyPath *p, int64_t bytes);

/* Start @c over [@offset, @offset + @bytes) with the slot @buf (NULL: a
 * view slot), as MirrorCopyOps.start. */
void mirror_copy_start(const MirrorCopyPath *p, MirrorCopy *c,
                       int64_t offset, int64_t bytes, uint8_t *buf);

/* Release what holds @c's data, and its slot (also when it never
 * started reading). */
void mirror_copy_release(MirrorCopy *c);

#endif /* BLOCK_MIRROR_COPY_H */
