/*
 * Raw driver internals shared by block/raw.c (open, create, info) and
 * block/raw-aio.c (the data path on the thread pool).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_RAW_INT_H
#define BLOCK_RAW_INT_H

#include "block/block-int.h"
#include "util/cutils.h"
#include "util/file-io.h"

/* O_DIRECT alignments probed by reading, and the largest one tried. */
#define RAW_MIN_PROBE_ALIGN 512
#define RAW_MAX_PROBE_ALIGN 4096

/* Largest value of the "align" debug option. */
#define RAW_MAX_ALIGN (64 * MiB)

/* Cap on the extents one block status request returns. */
#define RAW_MAX_EXTENTS 256

/* Write size of preallocation=full. */
#define RAW_PREALLOC_CHUNK (1 * MiB)

/*
 * Methods the kernel refused with EOPNOTSUPP on this open file, so that
 * later requests skip them.  Workers set them concurrently: access through
 * g_atomic_int_* only.
 */
enum {
    RAW_NO_PUNCH_HOLE = 0x01, /* fallocate(PUNCH_HOLE | KEEP_SIZE) */
    RAW_NO_ZERO_RANGE = 0x02, /* fallocate(ZERO_RANGE) */
    RAW_NO_BLKZEROOUT = 0x04, /* ioctl(BLKZEROOUT) */
    RAW_NO_DISCARD    = 0x08, /* ioctl(BLKDISCARD) */
    RAW_NO_RWF_DSYNC  = 0x10, /* pwritev2(RWF_DSYNC) */
    RAW_NO_SEEK_DATA  = 0x20, /* lseek(SEEK_DATA / SEEK_HOLE) */
};

typedef struct BDRVRawState {
    int fd;                     /* all I/O; has O_DIRECT with cache=none */
    int tail_fd;                /* cache=none on a file: buffered twin of
                                 * @fd for the partial last block; else -1 */
    bool is_block;              /* a block device, not a regular file */
    uint32_t block_size;        /* logical block size of a block device */
    uint32_t dio_align;         /* O_DIRECT alignment; 0 when buffered */
    uint32_t request_alignment;
    uint32_t mem_alignment;
    guint unsupported;          /* RAW_NO_*, atomic */
    bool serialise_writes;      /* buffered regular file: one writer */
    GMutex write_lock;          /* held by that writer */
    bool can_map;               /* views (raw-map.c) are safe */
    bool map_forced;            /* views=on: and never measured */
    bool can_copy;              /* fused copies (bdrv_aio_copy) apply */
    bool cpu_bound;             /* in memory: I/O is copying, no waiting */
} BDRVRawState;

/*
 * The data-path members of bdrv_raw, blocking (block/raw-aio.c);
 * contracts in block/block-int.h.
 */
int raw_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
              void *buf);
int raw_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
               const void *buf, BdrvRequestFlags flags);
int raw_pwrite_zeroes(BlockDriverState *bs, int64_t offset, int64_t bytes,
                      BdrvRequestFlags flags);
int raw_pdiscard(BlockDriverState *bs, int64_t offset, int64_t bytes);
int raw_flush(BlockDriverState *bs);
int raw_block_status(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     GArray *extents);
bool raw_cpu_bound(BlockDriverState *bs);
bool raw_run_here(BlockDriverState *bs, const BdrvRequest *req);
bool raw_can_copy(BlockDriverState *bs);

/* Methods found unsupported (RAW_NO_*), shared by the workers. */
static inline bool raw_unsupported(BDRVRawState *s, int method)
{
    return g_atomic_int_get(&s->unsupported) & method;
}

static inline void raw_set_unsupported(BDRVRawState *s, int method)
{
    g_atomic_int_or(&s->unsupported, method);
}

/*
 * raw-status.c, on a pool worker (raw_block_status()): append to
 * @found the data/hole extents of [@offset, @offset + @bytes) from
 * SEEK_DATA and SEEK_HOLE, up to the end of the file and at most
 * RAW_MAX_EXTENTS of them.  Data is allocated; a hole reads as zero.
 * When the file system cannot tell, or the file changes under us, the
 * rest is reported as data, which is always safe.  0 or -errno.
 */
int raw_do_status(BDRVRawState *s, int64_t offset, int64_t bytes,
                  GArray *found);

/*
 * raw-map.c, on a pool worker (raw_map()): map [@offset,
 * @offset + @bytes) of @s's file into @map with its pages loaded; 0,
 * -ENOTSUP when the range now lies past the end of the file (or mmap
 * fails: read instead), or -errno.
 */
int raw_do_map(BDRVRawState *s, int64_t offset, int64_t bytes,
               BdrvMapping *map);

/*
 * Whether views of in-memory files are used when nobody asked either way:
 * a fixed rule (raw-map.c), no measurement.  Thread-safe.
 */
bool raw_views_pay(void);

/* BlockDriver can_map / unmap (raw-map.c) and map (raw-aio.c). */
bool raw_can_map(BlockDriverState *bs);
int raw_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
            BdrvMapping *map);
void raw_unmap(BlockDriverState *bs, BdrvMapping *map);

#endif /* BLOCK_RAW_INT_H */
