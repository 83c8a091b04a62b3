/*
 * Raw driver, data path: the blocking members (block/block-int.h) that
 * io.c's adapter (block/io-blocking.c) runs on workers of the shared
 * thread pool: preadv/pwritev, fallocate, BLKZEROOUT, fdatasync; lseek
 * SEEK_DATA/SEEK_HOLE in raw-status.c; mmap in raw-map.c.  Workers only
 * share the BDRVRawState, and of it they only write `unsupported`,
 * atomically.  A file in memory runs its requests as CPU work, a few
 * reads at a time on the main loop (raw_run_here()), and in fused copies.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads made on the main loop (raw_run_here()): the largest, a copy
 * like libnbd's send; and how many may wait for their completions, a
 * window's worth against a fast NBD server (8 MiB). */
#define RAW_READ_HERE_MAX   (1024 * 1024)
#define RAW_READ_HERE_DEPTH 8

/*
 * Read @bytes at @offset; whatever lies past the end of the file reads as
 * zero.  @dio_align is the O_DIRECT alignment of @fd or 0.
 */
static int raw_pread_zero(int fd, uint8_t *buf, int64_t bytes,
                          int64_t offset, uint32_t dio_align)
{
    int64_t n = file_pread_full(fd, buf, bytes, offset, dio_align);

    if (n < 0) {
        return n;
    }
    memset(buf + n, 0, bytes - n);
    return 0;
}

/* A write that is durable on return when @fua is set. */
static int raw_pwrite_fua(BDRVRawState *s, int fd, const uint8_t *buf,
                          int64_t bytes, int64_t offset, bool fua)
{
    int ret;

    if (fua && !raw_unsupported(s, RAW_NO_RWF_DSYNC)) {
        ret = file_pwrite_full(fd, buf, bytes, offset, RWF_DSYNC);
        if (ret != -EOPNOTSUPP) {
            return ret;
        }
        raw_set_unsupported(s, RAW_NO_RWF_DSYNC);
    }
    ret = file_pwrite_full(fd, buf, bytes, offset, 0);
    if (ret == 0 && fua) {
        ret = file_fdatasync(fd);
    }
    return ret;
}

/*
 * Under cache=none a request that ends at an unaligned end of file goes
 * to @fd up to the last whole block and to @tail_fd after it: the bytes
 * that go to @fd.
 */
static int64_t raw_head_bytes(BDRVRawState *s, int64_t bytes)
{
    if (s->tail_fd >= 0) {
        return QEMU_ALIGN_DOWN(bytes, (int64_t)s->dio_align);
    }
    return bytes;
}

int raw_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
              void *buf)
{
    BDRVRawState *s = bs->opaque;
    int64_t head = raw_head_bytes(s, bytes);
    int ret = 0;

    if (head > 0) {
        ret = raw_pread_zero(s->fd, buf, head, offset, s->dio_align);
    }
    if (ret == 0 && head < bytes) {
        ret = raw_pread_zero(s->tail_fd, (uint8_t *)buf + head, bytes - head,
                             offset + head, 0);
    }
    return ret;
}

static int raw_do_pwrite(BDRVRawState *s, int64_t offset, int64_t bytes,
                         const uint8_t *buf, bool fua)
{
    int64_t head = raw_head_bytes(s, bytes);
    int ret = 0;

    if (head > 0) {
        ret = raw_pwrite_fua(s, s->fd, buf, head, offset, fua);
    }
    if (ret == 0 && head < bytes) {
        ret = raw_pwrite_fua(s, s->tail_fd, buf + head, bytes - head,
                             offset + head, fua);
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
static int raw_do_zeroes(BDRVRawState *s, int64_t offset, int64_t bytes,
                         BdrvRequestFlags flags)
{
    const int punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    int ret;

    if (s->is_block && ((offset | bytes) & (s->block_size - 1))) {
        return -ENOTSUP;
    }
    if (flags & BDRV_REQ_MAY_UNMAP) {
        ret = raw_fallocate(s, RAW_NO_PUNCH_HOLE, punch, offset,
                            bytes);
        if (ret != -ENOTSUP) {
            return ret;
        }
    }
    if (s->is_block) {
        if (flags & BDRV_REQ_NO_FALLBACK) {
            return -ENOTSUP;
        }
        return raw_blk_ioctl(s, RAW_NO_BLKZEROOUT, BLKZEROOUT, offset,
                             bytes);
    }
    return raw_fallocate(s, RAW_NO_ZERO_RANGE,
                         FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                         offset, bytes);
}

/* Advisory: an unsupported discard succeeds without doing anything. */
static int raw_do_discard(BDRVRawState *s, int64_t offset, int64_t bytes)
{
    int64_t start = offset;
    int64_t end = offset + bytes;
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

int raw_flush(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;
    int ret = file_fdatasync(s->fd);

    if (ret == 0 && s->tail_fd >= 0) {
        ret = file_fdatasync(s->tail_fd);
    }
    return ret;
}

/*
 * Requests that modify a buffered regular file run one at a time.  The
 * kernel serialises those per inode anyway (tmpfs, ext4 and xfs take the
 * inode lock for buffered writes and fallocate), and lets waiters spin on
 * the lock while the holder runs: on a small machine that burns the CPU
 * the readers need.  Taking our own mutex first makes waiters sleep
 * instead.
 */
static void raw_write_begin(BDRVRawState *s)
{
    if (s->serialise_writes) {
        g_mutex_lock(&s->write_lock);
    }
}

static void raw_write_end(BDRVRawState *s)
{
    if (s->serialise_writes) {
        g_mutex_unlock(&s->write_lock);
    }
}

int raw_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
               const void *buf, BdrvRequestFlags flags)
{
    BDRVRawState *s = bs->opaque;
    int ret;

    raw_write_begin(s);
    ret = raw_do_pwrite(s, offset, bytes, buf, flags & BDRV_REQ_FUA);
    raw_write_end(s);
    return ret;
}

int raw_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                      int64_t bytes, BdrvRequestFlags flags)
{
    BDRVRawState *s = bs->opaque;
    int ret;

    raw_write_begin(s);
    ret = raw_do_zeroes(s, offset, bytes, flags);
    raw_write_end(s);
    return ret;
}

int raw_pdiscard(BlockDriverState *bs, int64_t offset, int64_t bytes)
{
    BDRVRawState *s = bs->opaque;
    int ret;

    raw_write_begin(s);
    ret = raw_do_discard(s, offset, bytes);
    raw_write_end(s);
    return ret;
}

int raw_block_status(BlockDriverState *bs, int64_t offset,
                     int64_t bytes, GArray *extents)
{
    return raw_do_status(bs->opaque, offset, bytes, extents);
}

int raw_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
            BdrvMapping *map)
{
    return raw_do_map(bs->opaque, offset, bytes, map);
}

/* Its I/O never waits for a device in memory: CPU work. */
bool raw_cpu_bound(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;

    return s->cpu_bound;
}

/*
 * A read of a file in memory is a copy, like the send to an NBD server
 * that usually follows it on the main loop: made there too, the data is
 * still in this CPU's cache for the send, and no worker is woken.  At
 * most RAW_READ_HERE_DEPTH of them wait for their completion, each up to
 * RAW_READ_HERE_MAX: when a larger window opens at once, the rest go to
 * the workers, or the first sends would wait for every read and its first
 * touch of the pool.  Not when the caller sends the data from another
 * thread (BDRV_REQ_OFF_LOOP: an NBD node's sender threads): then a read
 * here would only hold up the main loop (bench/README.md, "Sender
 * threads").
 */
bool raw_run_here(BlockDriverState *bs, const BdrvRequest *req)
{
    BDRVRawState *s = bs->opaque;

    return s->cpu_bound && req->op == BDRV_OP_READ &&
           !(req->flags & BDRV_REQ_OFF_LOOP) &&
           bs->run_here < RAW_READ_HERE_DEPTH &&
           req->bytes <= RAW_READ_HERE_MAX;
}

/* Fused copies only where both sides are page-cache copies. */
bool raw_can_copy(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;

    return s->can_copy;
}
