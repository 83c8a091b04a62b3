/*
 * Block layer internals: the driver table and the node structure.
 *
 * A driver is one file that ends with a designated-initializer
 * `const BlockDriver bdrv_xxx = { ... };`, one line in the registry array of
 * block/block.c and one line in block/meson.build.  Drivers never split,
 * align or clamp requests: block/io.c does that for all of them and
 * guarantees the preconditions written on each member below.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_BLOCK_INT_H
#define BLOCK_BLOCK_INT_H

#include "block/block.h"

/* Limits a driver publishes in refresh_limits(); io.c honours them. */
typedef struct BlockLimits {
    /*
     * Every request offset and length is a multiple of this (a power of 2),
     * except that a request may end exactly at the end of the image.
     * Default 1.
     */
    uint32_t request_alignment;

    /* Buffers handed to aio_preadv/aio_pwritev are aligned to this.
     * Default 1. */
    uint32_t min_mem_alignment;

    /* Largest read or write; a multiple of request_alignment.
     * 0 = io.c's default (1 GiB). */
    int64_t max_transfer;

    /* Largest write-zeroes / discard.  0 = io.c's default (1 GiB). */
    int64_t max_pwrite_zeroes;
    int64_t max_pdiscard;

    /* Preferred request size, informational.  0 = none. */
    int64_t opt_transfer;

    /*
     * Size of one copy operation that reads this node, for callers that
     * pick their own (the mirror job's default chunk-size).  0 = theirs.
     */
    int64_t copy_transfer;

    /*
     * Independent channels the driver may spread requests over (NBD: the
     * connections), each with its own server-side workers; callers that
     * size a window of requests in flight scale it by this (at most), and
     * by get_active_channels() (now).  0 = one.
     */
    uint32_t channels;

    /*
     * Bytes in flight per channel that keep the node busy without more:
     * its latency times what it moves.  Callers that size a window use it
     * in place of their default.  The most the node will ask for; what it
     * asks for now is get_window_bytes().  0 = no opinion.
     */
    int64_t window_bytes;
} BlockLimits;

struct BlockDriver {
    /* Name used by -f/-O and shown by `info` ("raw", "null", ...). */
    const char *format_name;

    /* Size of the driver state, zero-allocated as bs->opaque. */
    size_t instance_size;

    /* BDRV_REQ_* write flags beyond FUA that aio_pwritev understands
     * (BDRV_REQ_WRITE_COMPRESSED); io.c fails the others with -ENOTSUP. */
    unsigned supported_write_flags;

    /*
     * Optional.  Score how likely it is that a file starting with @buf
     * (@buf_size bytes, possibly fewer than 512 for tiny files) is in this
     * format: 0 = no, 100 = certain.  Raw answers 1.
     */
    int (*probe)(const uint8_t *buf, int buf_size, const char *filename);

    /*
     * Optional.  Does @spec name an image of this driver by its syntax
     * ("null:...", "nbd://...")?  Such specs never reach probing.
     */
    bool (*recognize_spec)(const char *spec);

    /*
     * Open @spec into @bs (bs->opaque is allocated and zeroed).  May block.
     * @flags is BDRV_O_*.  Remove each understood key from @options (never
     * NULL here); block.c fails the open on keys left over.  Returns false
     * with @errp set on failure, having released everything it took.
     */
    bool (*open)(BlockDriverState *bs, const char *spec, int flags,
                 GHashTable *options, GError **errp);

    /* Release everything open() took.  No request is in flight. */
    void (*close)(BlockDriverState *bs);

    /*
     * Optional.  Create an image of @size bytes at @filename, truncating an
     * existing file.  @options only holds keys listed in @create_opts;
     * create() checks their values before touching the file.  May block.
     */
    bool (*create)(const char *filename, int64_t size, GHashTable *options,
                   GError **errp);

    /* NULL-terminated names of the options create() accepts, or NULL. */
    const char *const *create_opts;

    /* Current length in bytes, or -errno.  May block; called at open. */
    int64_t (*get_length)(BlockDriverState *bs);

    /* Optional.  Fill in the driver's limits; @bl starts at the defaults. */
    void (*refresh_limits)(BlockDriverState *bs, BlockLimits *bl);

    /*
     * Optional.  The channels taking requests now, 1..bl.channels, for a
     * driver that starts on fewer than it opened and decides on the data
     * path (NBD: one connection until the server shows it gains from
     * more).  NULL: all of bl.channels.  Main loop; cheap, asked per
     * request.
     */
    uint32_t (*get_active_channels)(BlockDriverState *bs);

    /*
     * Optional.  The bytes per channel the node asks for now,
     * 1..bl.window_bytes, for a driver that learns on the data path that
     * it needs more (NBD: a server found slow to answer writes).  NULL:
     * bl.window_bytes.  Main loop; cheap, asked per request.
     */
    int64_t (*get_window_bytes)(BlockDriverState *bs);

    /* Optional.  Format details for `info`; may block. */
    bool (*get_info)(BlockDriverState *bs, BlockImageInfo *info,
                     GError **errp);
    /*
     * Optional.  bdrv_check()'s work, with its contract: check @bs for
     * leaks and corruptions into rep->before (zeroed by the caller); with
     * @fix other than BDRV_FIX_NONE and something to repair, repair the
     * image file from opens of its own and check it again
     * (rep->repaired, rep->after).  Returns false with @errp set when the
     * check or the repair could not run.  Blocking; NULL = the format
     * cannot be checked (bdrv_check() fails with -ENOTSUP).
     */
    bool (*check)(BlockDriverState *bs, BdrvCheckFix fix,
                  BdrvCheckReport *rep, GError **errp);

    /*
     * Data path.  None of these may block the calling thread, and @cb must
     * run exactly once, later, on the main context that submitted the
     * request (never before the call returns).  io.c guarantees for every
     * call: 0 < @bytes; @offset and @bytes are multiples of
     * bl.request_alignment, except that @offset + @bytes may equal the
     * image length; [@offset, @offset + @bytes) lies inside the image;
     * @bytes <= bl.max_transfer (reads, writes) or bl.max_pwrite_zeroes /
     * bl.max_pdiscard; @buf is aligned to bl.min_mem_alignment.
     */

    /* Read into @buf; a short read is the driver's to finish or to fail. */
    void (*aio_preadv)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       void *buf, BdrvRequestFlags flags,
                       BlockCompletionFunc *cb, void *opaque);

    /* Write @buf; flags may contain BDRV_REQ_FUA. */
    void (*aio_pwritev)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                        const void *buf, BdrvRequestFlags flags,
                        BlockCompletionFunc *cb, void *opaque);

    /*
     * Optional.  Make the range read as zero.  May return -ENOTSUP through
     * @cb, and must when BDRV_REQ_NO_FALLBACK is set and zeroing would be
     * slow; io.c then falls back to writing zero buffers (unless the caller
     * asked for NO_FALLBACK).  NULL behaves as always -ENOTSUP.
     */
    void (*aio_pwrite_zeroes)(BlockDriverState *bs, int64_t offset,
                              int64_t bytes, BdrvRequestFlags flags,
                              BlockCompletionFunc *cb, void *opaque);

    /* Optional.  Deallocate the range (advisory).  NULL = no-op. */
    void (*aio_pdiscard)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                         BlockCompletionFunc *cb, void *opaque);

    /* Optional.  Make completed writes durable.  NULL = nothing to do. */
    void (*aio_flush)(BlockDriverState *bs, BlockCompletionFunc *cb,
                      void *opaque);

    /*
     * Optional.  Append to @extents (GArray of BlockExtent) at least one
     * extent describing [@offset, ...); extents must be contiguous, start
     * at @offset and end at or before @offset + @bytes.  Here @offset and
     * @bytes need not be aligned.  NULL = all allocated data.
     */
    void (*aio_block_status)(BlockDriverState *bs, int64_t offset,
                             int64_t bytes, GArray *extents,
                             BlockCompletionFunc *cb, void *opaque);

    /*
     * Instead of the six members above, for drivers that treat every
     * request alike (filters, qcow2): one entry point, told the kind by
     * @op, with the same contracts.  @buf is for READ and WRITE (never
     * written to for WRITE), @extents for STATUS; for FLUSH @offset and
     * @bytes are 0.  A driver with aio_submit handles every @op (it may
     * fail ZERO with -ENOTSUP) and sets none of the six members.
     */
    void (*aio_submit)(BlockDriverState *bs, BdrvOp op, int64_t offset,
                       int64_t bytes, void *buf, BdrvRequestFlags flags,
                       GArray *extents, BlockCompletionFunc *cb,
                       void *opaque);

    /*
     * Optional (all three or none).  Zero-copy reads: can_map() says
     * whether the node can map at all (bdrv_can_map's promise: touching a
     * view never blocks nor faults); aio_map() fills @map with a view of
     * [@offset, @offset + @bytes), which io.c guarantees lies inside the
     * image, with its pages loaded, or fails with -ENOTSUP; unmap()
     * releases a view (never blocks).  Same completion rules as the data
     * path above; no alignment applies.
     */
    bool (*can_map)(BlockDriverState *bs);
    void (*aio_map)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                    BdrvMapping *map, BlockCompletionFunc *cb, void *opaque);
    void (*unmap)(BlockDriverState *bs, BdrvMapping *map);

    /*
     * Optional (all three or none).  Fused copies (bdrv_aio_copy()):
     * can_copy() says whether the node's reads and writes are CPU work on
     * a pool worker (buffered files: page-cache copies), so that one pool
     * job may read a range from one such node and write it to another.
     * pread_blocking() and pwrite_blocking() are what the driver's own
     * read and write jobs run: they block, run on a pool worker, and
     * return 0 or -errno.  io.c guarantees what it does for aio_preadv()
     * and aio_pwritev() (alignment, range, max_transfer, memory alignment)
     * and tracks both requests; no flags but BDRV_REQ_FUA.
     */
    bool (*can_copy)(BlockDriverState *bs);
    int (*pread_blocking)(BlockDriverState *bs, int64_t offset,
                          int64_t bytes, void *buf);
    int (*pwrite_blocking)(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, const void *buf,
                           BdrvRequestFlags flags);

    /*
     * Optional.  Abort requests in flight as fast as possible; each still
     * completes (with -ECANCELED or its result), later, exactly once.
     * Never blocks.  Afterwards the node may fail every new request
     * (NBD does: its connections are gone).  NULL = requests simply run to
     * completion.
     */
    void (*cancel_in_flight)(BlockDriverState *bs);
};

struct BlockDriverState {
    const BlockDriver *drv;
    void *opaque;            /* driver state, drv->instance_size bytes */
    char *filename;          /* the spec we were opened with */
    int open_flags;          /* BDRV_O_* */
    int refcnt;
    int64_t total_bytes;     /* length, cached at open */
    bool zero_init;          /* known to read as all zeroes */
    BlockLimits bl;
    int64_t max_io;          /* extra cap on data requests (0 = none) */

    /* block/io.c bookkeeping */
    uint64_t in_flight;      /* requests submitted and not completed */
    GQueue tracked;          /* BdrvRequest in flight, for serialisation */
    GQueue waiting;          /* BdrvRequest waiting on an overlap */
    void *zero_buffer;       /* aligned zeroes for the write fallback */
    GArray *write_notifiers; /* BdrvWriteNotifier, or NULL */
    int64_t zero_buffer_size;
};

/* Driver tables, listed in block.c's registry. */
extern const BlockDriver bdrv_raw;
extern const BlockDriver bdrv_null;
extern const BlockDriver bdrv_blkdebug;
extern const BlockDriver bdrv_nbd;
extern const BlockDriver bdrv_qcow2;

/* Fills bs->opaque of a node built in code; false with @errp set. */
typedef bool BdrvInitFunc(BlockDriverState *bs, void *data, GError **errp);

/*
 * Create a node of @drv that no spec names (a filter built in code):
 * @init(bs, @data, errp) sets up bs->opaque where drv->open would parse a
 * spec; then the length and limits are read as for bdrv_open().  @name is
 * what bdrv_get_filename() shows.
 */
BlockDriverState *bdrv_new_internal(const BlockDriver *drv, const char *name,
                                    int flags, BdrvInitFunc *init,
                                    void *data, GError **errp);

/*
 * Parse "key=value,key=value" (the part of a driver spec after its prefix)
 * into @options.  Returns false with @errp set on a malformed pair.
 */
bool bdrv_parse_spec_options(const char *str, GHashTable *options,
                             GError **errp);

/* Schedule @cb(@opaque, @ret) on the current thread-default main context:
 * for drivers that finish without waiting for anything. */
void bdrv_complete_later(BlockCompletionFunc *cb, void *opaque, int ret);

#endif /* BLOCK_BLOCK_INT_H */
