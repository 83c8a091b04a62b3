/*
 * Raw driver, data path: each request runs on a worker of the shared
 * thread pool with blocking system calls (preadv/pwritev, fallocate,
 * BLKZEROOUT, fdatasync; lseek SEEK_DATA/SEEK_HOLE in raw-status.c); its
 * completion comes
 * back to the main loop.  Workers only share the BDRVRawState, and of it
 * they only write `unsupported`, atomically.  A few reads at a time of a
 * file in memory are made on the main loop instead (raw_read_here()), and
 * completed from an idle source.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"
#include "block/thread-pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

typedef enum RawOp {
    RAW_OP_READ,
    RAW_OP_WRITE,
    RAW_OP_ZEROES,
    RAW_OP_DISCARD,
    RAW_OP_FLUSH,
    RAW_OP_STATUS,
    RAW_OP_MAP,
} RawOp;

/* Reads made on the main loop (raw_read_here()): the largest, a copy
 * like libnbd's send; and how many may wait for their completions, a
 * window's worth against a fast NBD server (8 MiB). */
#define RAW_READ_HERE_MAX   (1024 * 1024)
#define RAW_READ_HERE_DEPTH 8

/* One request in flight; the completion frees it. */
typedef struct RawRequest {
    BDRVRawState *s;
    RawOp op;
    int64_t offset;
    int64_t bytes;
    void *buf;                  /* RAW_OP_READ / RAW_OP_WRITE */
    BdrvRequestFlags flags;
    GArray *found;              /* RAW_OP_STATUS: filled by the worker */
    GArray *extents;            /* RAW_OP_STATUS: the caller's, main loop */
    BdrvMapping *map;           /* RAW_OP_MAP: filled by the worker */
    BlockCompletionFunc *cb;
    void *opaque;
} RawRequest;

/* ---- Worker side: blocking system calls, 0 or -errno ---- */

/*
 * Read @bytes at @offset; whatever lies past the end of the file reads as
 * zero.  @dio_align is the O_DIRECT alignment of @fd or 0: an O_DIRECT read
 * that stops inside a block has reached the end of the file.
 */
static int raw_pread_full(int fd, uint8_t *buf, int64_t bytes,
                          int64_t offset, uint32_t dio_align)
{
    int64_t done = 0;

    while (done < bytes) {
        ssize_t n = pread(fd, buf + done, bytes - done, offset + done);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            break;
        }
        done += n;
        if (dio_align && !QEMU_IS_ALIGNED(n, dio_align)) {
            break;
        }
    }
    memset(buf + done, 0, bytes - done);
    return 0;
}

/* Write all of @buf at @offset, passing @rwf (RWF_*) to every call. */
int raw_pwrite_full(int fd, const uint8_t *buf, int64_t bytes,
                    int64_t offset, int rwf)
{
    int64_t done = 0;

    while (done < bytes) {
        struct iovec iov = {
            .iov_base = (void *)(buf + done),
            .iov_len = bytes - done,
        };
        ssize_t n = pwritev2(fd, &iov, 1, offset + done, rwf);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            return -ENOSPC;
        }
        done += n;
    }
    return 0;
}

static int raw_fdatasync(int fd)
{
    int r;

    do {
        r = fdatasync(fd);
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

/* A write that is durable on return when @fua is set. */
static int raw_pwrite_fua(BDRVRawState *s, int fd, const uint8_t *buf,
                          int64_t bytes, int64_t offset, bool fua)
{
    int ret;

    if (fua && !raw_unsupported(s, RAW_NO_RWF_DSYNC)) {
        ret = raw_pwrite_full(fd, buf, bytes, offset, RWF_DSYNC);
        if (ret != -EOPNOTSUPP) {
            return ret;
        }
        raw_set_unsupported(s, RAW_NO_RWF_DSYNC);
    }
    ret = raw_pwrite_full(fd, buf, bytes, offset, 0);
    if (ret == 0 && fua) {
        ret = raw_fdatasync(fd);
    }
    return ret;
}

/*
 * Read or write.  Under cache=none a request that ends at an unaligned end
 * of file goes to @fd up to the last whole block and to @tail_fd after it.
 */
static int raw_do_rw(RawRequest *req)
{
    BDRVRawState *s = req->s;
    int64_t head = req->bytes;
    uint8_t *buf = req->buf;
    bool fua = req->flags & BDRV_REQ_FUA;
    int ret = 0;

    if (s->tail_fd >= 0) {
        head = QEMU_ALIGN_DOWN(req->bytes, (int64_t)s->dio_align);
    }
    if (head > 0) {
        if (req->op == RAW_OP_READ) {
            ret = raw_pread_full(s->fd, buf, head, req->offset, s->dio_align);
        } else {
            ret = raw_pwrite_fua(s, s->fd, buf, head, req->offset, fua);
        }
    }
    if (ret == 0 && head < req->bytes) {
        if (req->op == RAW_OP_READ) {
            ret = raw_pread_full(s->tail_fd, buf + head, req->bytes - head,
                                 req->offset + head, 0);
        } else {
            ret = raw_pwrite_fua(s, s->tail_fd, buf + head,
                                 req->bytes - head, req->offset + head, fua);
        }
    }
    return ret;
}

/*
 * fallocate() with @mode, unless @method is known unsupported.  Returns
 * -ENOTSUP for an unsupported method and remembers it.
 */
static int raw_fallocate(BDRVRawState *s, int method, int mode,
                         int64_t offset, int64_t bytes)
{
    int r;

    if (raw_unsupported(s, method)) {
        return -ENOTSUP;
    }
    do {
        r = fallocate(s->fd, mode, offset, bytes);
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
        return 0;
    }
    if (errno == EOPNOTSUPP || errno == ENOSYS) {
        raw_set_unsupported(s, method);
        return -ENOTSUP;
    }
    return -errno;
}

/* ioctl(BLKZEROOUT / BLKDISCARD), with the same conventions. */
static int raw_blk_ioctl(BDRVRawState *s, int method, unsigned long cmd,
                         int64_t offset, int64_t bytes)
{
    uint64_t range[2] = { offset, bytes };

    if (raw_unsupported(s, method)) {
        return -ENOTSUP;
    }
    if (ioctl(s->fd, cmd, range) == 0) {
        return 0;
    }
    if (errno == EOPNOTSUPP || errno == ENOTTY) {
        raw_set_unsupported(s, method);
        return -ENOTSUP;
    }
    return -errno;
}

/*
 * Fast zeroing, in this order: punch a hole (MAY_UNMAP only; guaranteed to
 * read as zero on files and, through the kernel's no-fallback zeroout, on
 * block devices); then BLKZEROOUT on block devices (unless NO_FALLBACK: the
 * kernel may write zeroes itself) or ZERO_RANGE on files.  -ENOTSUP when
 * nothing applies: io.c writes zeroes.
 */
static int raw_do_zeroes(RawRequest *req)
{
    BDRVRawState *s = req->s;
    const int punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    int ret;

    if (s->is_block && ((req->offset | req->bytes) & (s->block_size - 1))) {
        return -ENOTSUP;
    }
    if (req->flags & BDRV_REQ_MAY_UNMAP) {
        ret = raw_fallocate(s, RAW_NO_PUNCH_HOLE, punch, req->offset,
                            req->bytes);
        if (ret != -ENOTSUP) {
            return ret;
        }
    }
    if (s->is_block) {
        if (req->flags & BDRV_REQ_NO_FALLBACK) {
            return -ENOTSUP;
        }
        return raw_blk_ioctl(s, RAW_NO_BLKZEROOUT, BLKZEROOUT, req->offset,
                             req->bytes);
    }
    return raw_fallocate(s, RAW_NO_ZERO_RANGE,
                         FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                         req->offset, req->bytes);
}

/* Advisory: an unsupported discard succeeds without doing anything. */
static int raw_do_discard(RawRequest *req)
{
    BDRVRawState *s = req->s;
    int64_t start = req->offset;
    int64_t end = req->offset + req->bytes;
    int ret;

    if (s->is_block) {
        start = QEMU_ALIGN_UP(start, (int64_t)s->block_size);
        end = QEMU_ALIGN_DOWN(end, (int64_t)s->block_size);
        if (start >= end) {
            return 0;
        }
        ret = raw_blk_ioctl(s, RAW_NO_DISCARD, BLKDISCARD, start,
                            end - start);
    } else {
        ret = raw_fallocate(s, RAW_NO_PUNCH_HOLE,
                            FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            start, end - start);
    }
    return ret == -ENOTSUP ? 0 : ret;
}

static int raw_do_flush(RawRequest *req)
{
    BDRVRawState *s = req->s;
    int ret = raw_fdatasync(s->fd);

    if (ret == 0 && s->tail_fd >= 0) {
        ret = raw_fdatasync(s->tail_fd);
    }
    return ret;
}

/*
 * Run a request that modifies a buffered regular file.  The kernel
 * serialises those per inode anyway (tmpfs, ext4 and xfs take the inode
 * lock for buffered writes and fallocate), and lets waiters spin on the
 * lock while the holder runs: on a small machine that burns the CPU the
 * readers need.  Taking our own mutex first makes waiters sleep instead.
 */
static int raw_serialised(RawRequest *req, int (*fn)(RawRequest *req))
{
    BDRVRawState *s = req->s;
    int ret;

    if (!s->serialise_writes) {
        return fn(req);
    }
    g_mutex_lock(&s->write_lock);
    ret = fn(req);
    g_mutex_unlock(&s->write_lock);
    return ret;
}

static int raw_worker(void *arg)
{
    RawRequest *req = arg;

    switch (req->op) {
    case RAW_OP_READ:
        return raw_do_rw(req);
    case RAW_OP_WRITE:
        return raw_serialised(req, raw_do_rw);
    case RAW_OP_ZEROES:
        return raw_serialised(req, raw_do_zeroes);
    case RAW_OP_DISCARD:
        return raw_serialised(req, raw_do_discard);
    case RAW_OP_FLUSH:
        return raw_do_flush(req);
    case RAW_OP_STATUS:
        return raw_do_status(req->s, req->offset, req->bytes, req->found);
    case RAW_OP_MAP:
        return raw_do_map(req->s, req->offset, req->bytes, req->map);
    }
    g_assert_not_reached();
}

/* ---- Fused copies (block/io-copy.c): the same jobs, run in place ---- */

bool raw_can_copy(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;

    return s->can_copy;
}

int raw_pread_blocking(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       void *buf)
{
    RawRequest req = {
        .s = bs->opaque, .op = RAW_OP_READ, .offset = offset,
        .bytes = bytes, .buf = buf,
    };

    return raw_worker(&req);
}

int raw_pwrite_blocking(BlockDriverState *bs, int64_t offset, int64_t bytes,
                        const void *buf, BdrvRequestFlags flags)
{
    RawRequest req = {
        .s = bs->opaque, .op = RAW_OP_WRITE, .offset = offset,
        .bytes = bytes, .buf = (void *)buf, .flags = flags,
    };

    return raw_worker(&req);
}

/* ---- Main-loop side ---- */

static void raw_complete(void *opaque, int ret)
{
    RawRequest *req = opaque;
    BlockCompletionFunc *cb = req->cb;
    void *cb_opaque = req->opaque;

    if (req->found) {
        if (ret == 0) {
            g_array_append_vals(req->extents, req->found->data,
                                req->found->len);
        }
        g_array_unref(req->found);
    }
    g_free(req);
    cb(cb_opaque, ret);
}

static RawRequest *raw_request_new(BlockDriverState *bs, RawOp op,
                                   int64_t offset, int64_t bytes,
                                   BdrvRequestFlags flags,
                                   BlockCompletionFunc *cb, void *opaque)
{
    RawRequest *req = g_new0(RawRequest, 1);

    *req = (RawRequest) {
        .s = bs->opaque, .op = op, .offset = offset, .bytes = bytes,
        .flags = flags, .cb = cb, .opaque = opaque,
    };
    return req;
}

static void raw_read_here_done(void *opaque, int ret)
{
    RawRequest *req = opaque;

    req->s->reads_here--;
    raw_complete(req, ret);
}

/*
 * A read of a file in memory is a copy, like the send to an NBD server
 * that usually follows it on the main loop: made there too, the data is
 * still in this CPU's cache for the send, and no worker is woken.  At
 * most RAW_READ_HERE_DEPTH of them wait for their completion, each up to
 * RAW_READ_HERE_MAX: when a larger window opens at once, the rest go to
 * the workers, or the first sends would wait for every read and its first
 * touch of the pool (W2 of bench/nbd.sh: 0.599 -> 0.615 s, with slow
 * outliers, when every read was made here).  Medians of 9 against none
 * made here: W3 0.707 -> 0.678 s, start (2 GiB into nbdkit file) 0.706
 * -> 0.681 s, CPU -7%; W2 0.605 -> 0.599 s.  One at a time gained only
 * a third of that.
 */
static bool raw_read_here(RawRequest *req)
{
    BDRVRawState *s = req->s;

    if (!s->cpu_bound || req->op != RAW_OP_READ ||
        s->reads_here >= RAW_READ_HERE_DEPTH ||
        req->bytes > RAW_READ_HERE_MAX) {
        return false;
    }
    s->reads_here++;
    bdrv_complete_later(raw_read_here_done, req, raw_worker(req));
    return true;
}

/* On the thread pool (as CPU jobs for a file in memory), or here. */
static void raw_submit(RawRequest *req)
{
    if (raw_read_here(req)) {
        return;
    }
    if (req->s->cpu_bound) {
        thread_pool_submit_cpu(thread_pool_get(), raw_worker, req,
                               raw_complete, req);
        return;
    }
    thread_pool_submit(thread_pool_get(), raw_worker, req, raw_complete, req);
}

void raw_aio_preadv(BlockDriverState *bs, int64_t offset,
                    int64_t bytes, void *buf, BdrvRequestFlags flags,
                    BlockCompletionFunc *cb, void *opaque)
{
    RawRequest *req = raw_request_new(bs, RAW_OP_READ, offset, bytes, flags,
                                      cb, opaque);

    req->buf = buf;
    raw_submit(req);
}

void raw_aio_pwritev(BlockDriverState *bs, int64_t offset,
                     int64_t bytes, const void *buf,
                     BdrvRequestFlags flags,
                     BlockCompletionFunc *cb, void *opaque)
{
    RawRequest *req = raw_request_new(bs, RAW_OP_WRITE, offset, bytes, flags,
                                      cb, opaque);

    req->buf = (void *)buf;
    raw_submit(req);
}

void raw_aio_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, BdrvRequestFlags flags,
                           BlockCompletionFunc *cb, void *opaque)
{
    raw_submit(raw_request_new(bs, RAW_OP_ZEROES, offset, bytes, flags,
                               cb, opaque));
}

void raw_aio_pdiscard(BlockDriverState *bs, int64_t offset,
                      int64_t bytes, BlockCompletionFunc *cb,
                      void *opaque)
{
    raw_submit(raw_request_new(bs, RAW_OP_DISCARD, offset, bytes, 0,
                               cb, opaque));
}

void raw_aio_flush(BlockDriverState *bs, BlockCompletionFunc *cb,
                   void *opaque)
{
    raw_submit(raw_request_new(bs, RAW_OP_FLUSH, 0, 0, 0, cb, opaque));
}

void raw_aio_block_status(BlockDriverState *bs, int64_t offset,
                          int64_t bytes, GArray *extents,
                          BlockCompletionFunc *cb, void *opaque)
{
    RawRequest *req = raw_request_new(bs, RAW_OP_STATUS, offset, bytes, 0,
                                      cb, opaque);

    req->extents = extents;
    req->found = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    raw_submit(req);
}

void raw_aio_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
                 BdrvMapping *map, BlockCompletionFunc *cb, void *opaque)
{
    RawRequest *req = raw_request_new(bs, RAW_OP_MAP, offset, bytes, 0,
                                      cb, opaque);

    req->map = map;
    raw_submit(req);
}
