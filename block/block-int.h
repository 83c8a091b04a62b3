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

typedef struct BdrvRequest BdrvRequest;

/* Limits a driver publishes in refresh_limits(); io.c honours them. */
typedef struct BlockLimits {
    /*
     * Every request offset and length is a multiple of this (a power of 2),
     * except that a request may end exactly at the end of the image.
     * Default 1.
     */
    uint32_t request_alignment;

    /* Buffers of reads and writes handed to the driver are aligned to
     * this.  Default 1. */
    uint32_t min_mem_alignment;

    /* Largest read or write; a multiple of request_alignment.
     * 0 = io.c's default (1 GiB). */
    int64_t max_transfer;

    /* Largest write-zeroes / discard, a multiple of request_alignment.
     * 0 = no limit: io.c sends each range as one request. */
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

    /*
     * Writes copy their data out on threads of their own (an NBD node
     * whose server is latency-bound sends from a thread per connection,
     * nbd-sender.c), not on the main loop: a read that fills their
     * buffer on the main loop only holds the loop up (BDRV_REQ_OFF_LOOP).
     * Default false.
     */
    bool writes_off_loop;
} BlockLimits;

struct BlockDriver {
    /* Name used by -f/-O and shown by `info` ("raw", "null", ...). */
    const char *format_name;

    /* Size of the driver state, zero-allocated as bs->opaque. */
    size_t instance_size;

    /* BDRV_REQ_* write flags beyond FUA that the driver's writes
     * understand (BDRV_REQ_WRITE_COMPRESSED); io.c fails the others with
     * -ENOTSUP. */
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
     * Data path, in one of two shapes (block.c refuses a table with both
     * or neither):
     *
     * - asynchronous: aio_submit() alone;
     * - blocking: pread() and pwrite() (and optionally the other blocking
     *   members below), which io.c's adapter (block/io-blocking.c) runs on
     *   the thread pool, like an nbdkit plugin's callbacks.
     *
     * For either, io.c guarantees for every request: 0 < bytes; offset
     * and bytes are multiples of bl.request_alignment, except that offset
     * + bytes may equal the image length; [offset, offset + bytes) lies
     * inside the image; bytes <= bl.max_transfer (reads, writes; a
     * compressed write arrives unsplit) or bl.max_pwrite_zeroes /
     * bl.max_pdiscard; the buffer is aligned to bl.min_mem_alignment; an
     * overlapping request is never in flight at the same time when one of
     * the two is a read-modify-write.  Block status requests need not be
     * aligned.
     */

    /*
     * Asynchronous shape.  Bytes of private state the driver hangs off
     * each BdrvRequest it is handed (bdrv_req_priv()), zeroed before every
     * aio_submit() call.  0 = none.
     */
    size_t request_size;

    /*
     * Asynchronous shape.  Start @req (its op, offset, bytes, buf, flags
     * and extents: see BdrvRequest) without blocking the calling thread,
     * and complete it with bdrv_req_complete() exactly once, later, on
     * the main context that submitted it (never before this returns).
     * Every op must be handled: ZERO may fail with -ENOTSUP (io.c then
     * writes zero buffers unless BDRV_REQ_NO_FALLBACK), DISCARD may
     * succeed doing nothing, FLUSH makes completed writes durable, STATUS
     * appends at least one extent.  A filter passes @req on with
     * bdrv_aio_submit(child, ..., bdrv_req_complete_cb, req).
     */
    void (*aio_submit)(BlockDriverState *bs, BdrvRequest *req);

    /*
     * Blocking shape: run on a thread-pool worker (or, see run_here, on
     * the main loop), concurrently with each other; they block, must not
     * touch main-loop state, and return 0 or -errno.  Same guarantees as
     * above.
     *
     * pread: fill @buf; whatever lies past the end of the storage reads
     * as zero.  Required.
     */
    int (*pread)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                 void *buf);

    /* pwrite: write @buf; @flags may hold BDRV_REQ_FUA (durable on
     * return) and those in supported_write_flags.  Required. */
    int (*pwrite)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                  const void *buf, BdrvRequestFlags flags);

    /*
     * Optional, blocking shape.  Make the range read as zero, efficiently,
     * or return -ENOTSUP (and must with BDRV_REQ_NO_FALLBACK when it would
     * be slow): io.c then writes zero buffers.  BDRV_REQ_MAY_UNMAP allows
     * deallocating.  NULL behaves as always -ENOTSUP.
     */
    int (*pwrite_zeroes)(BlockDriverState *bs, int64_t offset,
                         int64_t bytes, BdrvRequestFlags flags);

    /* Optional, blocking shape.  Deallocate the range (advisory).
     * NULL = no-op. */
    int (*pdiscard)(BlockDriverState *bs, int64_t offset, int64_t bytes);

    /* Optional, blocking shape.  Make completed writes durable.
     * NULL = nothing to do. */
    int (*flush)(BlockDriverState *bs);

    /*
     * Optional, blocking shape.  Append to @extents (the adapter's own
     * array: io.c copies it into the caller's on the main loop) at least
     * one extent describing [@offset, ...); contiguous, starting at
     * @offset, ending at or before @offset + @bytes.  NULL = all
     * allocated data.
     */
    int (*block_status)(BlockDriverState *bs, int64_t offset, int64_t bytes,
                        GArray *extents);

    /*
     * Optional, blocking shape.  Whether the node's I/O is CPU work, not
     * waiting for a device (a file in memory): the adapter then runs its
     * requests through thread_pool_submit_cpu(), one worker per CPU back
     * to back, instead of a thread per request in flight.  NULL = no.
     * Main loop; cheap.
     */
    bool (*cpu_bound)(BlockDriverState *bs);

    /*
     * Optional, blocking shape.  Whether @req (READ .. STATUS, never a
     * view) should run on the main loop, now, instead of on a worker; the
     * adapter completes it from an idle source.  For copies from memory
     * that the main loop sends on anyway.  bs->run_here counts this node's
     * requests run here whose completions have not run yet.  NULL = never.
     */
    bool (*run_here)(BlockDriverState *bs, const BdrvRequest *req);

    /*
     * Optional, blocking shape.  Whether the node takes part in fused
     * copies (bdrv_aio_copy(): one CPU job of the pool reads one blocking
     * node with pread() and writes another with pwrite()).  Worth it only
     * where both are CPU work (page-cache copies), which is why the raw
     * and qcow2 drivers say yes only for files in memory.  NULL = yes.
     */
    bool (*can_copy)(BlockDriverState *bs);

    /*
     * Optional (all three or none; blocking shape).  Zero-copy reads:
     * can_map() says whether the node can map at all (bdrv_can_map's
     * promise: touching a view never blocks nor faults); map() fills @map
     * with a view of [@offset, @offset + @bytes), which io.c guarantees
     * lies inside the image, with its pages loaded, or returns -ENOTSUP;
     * it runs as the blocking members do (never on the main loop).
     * unmap() releases a view (main loop, never blocks).  No alignment
     * applies.
     */
    bool (*can_map)(BlockDriverState *bs);
    int (*map)(BlockDriverState *bs, int64_t offset, int64_t bytes,
               BdrvMapping *map);
    void (*unmap)(BlockDriverState *bs, BdrvMapping *map);

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
    char *filename;          /* the spec we were opened with (a driver
                              * may redact it: NBD user names) */
    int open_flags;          /* BDRV_O_* */
    uint64_t perm;           /* BLK_PERM_* held (from open_flags) */
    uint64_t shared_perm;    /* BLK_PERM_* shared with others */
    int refcnt;
    int64_t total_bytes;     /* length, cached at open */
    bool zero_init;          /* known to read as all zeroes */
    BlockLimits bl;
    int64_t max_io;          /* extra cap on data requests (0 = none) */

    /* block/io*.c bookkeeping */
    uint64_t in_flight;      /* requests submitted and not completed */
    unsigned run_here;       /* blocking requests run on the main loop
                              * whose completions have not run (run_here) */
    GQueue tracked;          /* BdrvRequest in flight, for serialisation */
    GQueue waiting;          /* BdrvRequest waiting on an overlap */
    void *zero_buffer;       /* aligned zeroes for the write fallback */
    GArray *write_notifiers; /* BdrvWriteNotifier, or NULL */
    GArray *event_listeners; /* BdrvEventListener, or NULL (block.c) */
    bool reconnecting;       /* bdrv_is_reconnecting() */
    uint64_t reconnects;     /* bdrv_get_reconnects() */
    int64_t zero_buffer_size;
};

/* What io.c is doing with a request (BdrvRequestIo.phase). */
typedef enum BdrvReqPhase {
    BDRV_PHASE_IO,          /* sending [pos, end) in fragments */
    BDRV_PHASE_RMW_HEAD,    /* reading the partial head block */
    BDRV_PHASE_RMW_TAIL,    /* reading the partial tail block */
    BDRV_PHASE_ZERO_WRITE,  /* zero fallback: writing zero buffers */
} BdrvReqPhase;

/* block/io*.c's part of a request: drivers never touch it. */
typedef struct BdrvRequestIo {
    BdrvOp type;             /* the caller's request */
    int64_t offset;          /* the caller's range, clamped to the image */
    int64_t bytes;
    uint8_t *buf;            /* the caller's buffer (READ, WRITE) */
    BdrvRequestFlags flags;
    BlockCompletionFunc *cb; /* the caller's completion */
    void *opaque;
    GArray *extents;         /* STATUS: the caller's array */
    guint first_extent;      /* STATUS: its length at submission */

    int64_t start;           /* the aligned range sent to the driver */
    int64_t end;
    uint8_t *bounce;         /* covers [start, end) when padding/bouncing */
    bool serialising;        /* read-modify-write in progress */
    bool tracked;            /* in bs->tracked */
    GList link;              /* in bs->tracked or bs->waiting */
    BdrvReqPhase phase;
    int64_t pos;             /* next byte of [start, end) to send */
    int64_t frag;            /* bytes of the fragment in flight */
    int64_t child_pos;       /* unaligned write-zeroes: next child piece */
    BdrvMapping *map;        /* a view (bdrv_aio_map), or NULL */
    struct BdrvCopyJob *copy; /* one side of a bdrv_aio_copy(), or NULL */

    BlockCompletionFunc *drv_done; /* io.c's step when the driver is done */
    GArray *found;           /* blocking STATUS: the worker's extents */
    bool here;               /* blocking: run on the main loop */
} BdrvRequestIo;

/*
 * One request, the only request record of the block layer: io.c tracks
 * the caller's request in it and hands it to the driver, one driver call
 * at a time (a fragment, a read of a partial block, ...), with the fields
 * below set for that call.  The driver reads them (never writes them),
 * keeps its own per-request state in bdrv_req_priv(), and finishes the
 * call with bdrv_req_complete(); after that it must not touch @req.
 */
struct BdrvRequest {
    BlockDriverState *bs;
    BdrvOp op;
    int64_t offset;
    int64_t bytes;           /* 0 for FLUSH */
    void *buf;               /* READ: fill it; WRITE: read only; else NULL */
    BdrvRequestFlags flags;  /* BDRV_REQ_* */
    GArray *extents;         /* STATUS: append BlockExtent; else NULL */

    BdrvRequestIo io;
    /* drv->request_size bytes of driver state follow (bdrv_req_priv()) */
};

/* The driver's per-request state: drv->request_size bytes, zeroed before
 * each aio_submit() call. */
static inline void *bdrv_req_priv(BdrvRequest *req)
{
    return req + 1;
}

/*
 * Finish the driver call @req was handed with @ret (0 or -errno).  Main
 * loop, exactly once per call, never from inside aio_submit(); afterwards
 * @req may already be reused for the next call or freed.
 */
void bdrv_req_complete(BdrvRequest *req, int ret);

/*
 * A driver tells the listeners of @bs about @ev (block.h, "Node events"),
 * on the main loop; block.c keeps bdrv_is_reconnecting() and
 * bdrv_get_reconnects() from the events.  RECONNECTING opens a reconnect,
 * which ends with exactly one RECONNECTED or RECONNECT_FAILED.
 */
void bdrv_notify_event(BlockDriverState *bs, const BdrvEvent *ev);

/* bdrv_req_complete() as a BlockCompletionFunc (@opaque: the request),
 * for filters that pass a request on to their child. */
void bdrv_req_complete_cb(void *opaque, int ret);

/* bdrv_req_complete() from an idle source: for a driver call that
 * finishes without waiting for anything. */
void bdrv_req_complete_later(BdrvRequest *req, int ret);

/*
 * Hand one request straight to @bs's driver (its aio_submit, or the
 * blocking adapter), without io.c's splitting, padding, tracking or
 * checks: the caller guarantees the data-path preconditions above.  For
 * tests of a driver's own contract.
 */
void bdrv_drv_submit(BlockDriverState *bs, BdrvOp op, int64_t offset,
                     int64_t bytes, void *buf, BdrvRequestFlags flags,
                     GArray *extents, BlockCompletionFunc *cb, void *opaque);

/* Has @bs's driver the blocking shape (pread/pwrite, io-blocking.c)? */
bool bdrv_is_blocking(BlockDriverState *bs);

/*
 * Is @drv's table consistent: exactly one data-path shape, the members
 * each shape requires, the map trio all or none, members of the blocking
 * shape only with it?  false with @errp naming the first fault.  block.c
 * checks every registered driver (and that each has open()) before the
 * first node is made, and each built-in filter's table when it gets a
 * node, and stops the program with g_error() on a broken one.
 */
bool bdrv_driver_check(const BlockDriver *drv, GError **errp);

/* The registry of block.c: @n driver tables (for tests that walk it). */
const BlockDriver *const *bdrv_get_drivers(size_t *n);

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

/*
 * For a driver's create(): open @filename as a new, empty file (created or
 * truncated, mode 0644) with @access (O_RDWR: the lock bytes are read
 * locks, which a write-only descriptor cannot take).  An existing
 * directory, FIFO, socket or character device is refused before open()
 * could block or fail oddly ("'F' is a directory", "'F' is not a regular
 * file", BLOCK_ERROR_INVALID); so is a block device unless
 * @block_device_ok ("... or block device").  An existing file is
 * truncated only after the locks of QEMU's create (write and resize held,
 * resize not shared; block/file-lock.h) showed no one else uses it
 * (BLOCK_ERROR_LOCKED), and the descriptor keeps them until it is closed.
 * Returns the descriptor, or -1 with @errp set ("Could not create 'F':
 * REASON", BLOCK_ERROR_OPEN).
 */
int bdrv_create_file(const char *filename, int access, bool block_device_ok,
                     GError **errp);

/* Schedule @cb(@opaque, @ret) on the current thread-default main context:
 * for drivers that finish without waiting for anything. */
void bdrv_complete_later(BlockCompletionFunc *cb, void *opaque, int ret);

#endif /* BLOCK_BLOCK_INT_H */
