/*
 * Block layer: the public API of block nodes.
 *
 * A BlockDriverState (a "node") is one opened image: a raw file, a qcow2-lite
 * image, an NBD export or the null test double.  Users open nodes by filename
 * or spec, then issue asynchronous requests through block/io.c; every
 * completion runs later, on the thread-default GMainContext of the caller.
 *
 * Control-path functions (open, create, close) may block and report failure
 * through GError.  Data-path functions never block and report 0 or -errno to
 * their completion callback.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_BLOCK_H
#define BLOCK_BLOCK_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/* Error domain of the block layer (control path). */
#define BLOCK_ERROR (block_error_quark())
GQuark block_error_quark(void);
typedef enum {
    BLOCK_ERROR_OPEN = 1,   /* cannot open or read an image */
    BLOCK_ERROR_INVALID,    /* bad spec, option or value */
    BLOCK_ERROR_IO,         /* an I/O error on the control path */
    BLOCK_ERROR_LOCKED,     /* another user holds a conflicting lock on
                             * the image (file-lock.h) */
} BlockErrorCode;

typedef struct BlockDriver BlockDriver;
typedef struct BlockDriverState BlockDriverState;

/*
 * Completion of an asynchronous request.  @ret is 0 on success or a negative
 * errno.  It runs exactly once per request, never from inside the call that
 * submitted the request, always on the submitter's main context.
 */
typedef void BlockCompletionFunc(void *opaque, int ret);

/*
 * Permissions on an image, QEMU's BLK_PERM_* with their bit numbers (as
 * of QEMU 7.1, which dropped "graph modification"): what a node holds,
 * and which of them it shares with other users of the image.  A file node
 * locks them as QEMU's file-posix does (block/file-lock.h), so that other
 * processes, QEMU's included, see them.
 */
enum {
    BLK_PERM_CONSISTENT_READ = 0x01, /* reads see consistent data */
    BLK_PERM_WRITE           = 0x02, /* writes may change the data */
    BLK_PERM_WRITE_UNCHANGED = 0x04, /* writes that change no data */
    BLK_PERM_RESIZE          = 0x08, /* the image may change its size */
    BLK_PERM_ALL             = 0x0f,
};

/*
 * Flags for bdrv_open().  A node holds consistent-read (unless
 * BDRV_O_NO_IO) and, with BDRV_O_RDWR, write; it shares every permission
 * but those of BDRV_O_UNSHARE() (as qemu-io shares everything), or all
 * of them with BDRV_O_FORCE_SHARE.  A format node adds its own for its
 * metadata: qcow2 holds resize when writable and never shares write or
 * resize (QEMU's bdrv_default_perms_for_storage), unless force-shared.
 */
enum {
    BDRV_O_RDWR     = 0x0001, /* open for writing (default: read-only) */
    BDRV_O_NOCACHE  = 0x0002, /* bypass the host page cache (cache=none) */
    BDRV_O_NO_PROBE = 0x0004, /* never guess the format: raw unless told */
    BDRV_O_NO_IO    = 0x0008, /* no data is read (info): no consistent
                               * read permission (QEMU's BDRV_O_NO_IO) */
    BDRV_O_FORCE_SHARE = 0x0010, /* share every permission, as qemu-img
                               * -U; read-only nodes only */
};

/* bdrv_open() flag: share none of the BLK_PERM_* in @perm with others. */
#define BDRV_O_UNSHARE_SHIFT 8
#define BDRV_O_UNSHARE(perm) ((perm) << BDRV_O_UNSHARE_SHIFT)

/* QEMU's BDRV_O_NO_SHARE: no other writer or resizer while we have it. */
#define BDRV_O_NO_SHARE BDRV_O_UNSHARE(BLK_PERM_WRITE | BLK_PERM_RESIZE)

/* Flags of a single request */
typedef enum BdrvRequestFlags {
    BDRV_REQ_FUA         = 0x1, /* write: durable when the completion runs */
    BDRV_REQ_MAY_UNMAP   = 0x2, /* write-zeroes: may deallocate the range */
    BDRV_REQ_NO_FALLBACK = 0x4, /* write-zeroes: fail with -ENOTSUP rather
                                 * than write zero buffers (fast zero) */
    BDRV_REQ_WRITE_COMPRESSED = 0x8, /* write: store compressed; covers
                                 * whole clusters (the last may end at the
                                 * image end); sent to the driver unsplit;
                                 * -ENOTSUP where unsupported */
    BDRV_REQ_OFF_LOOP    = 0x10, /* read: the data is used next on
                                 * another thread (an NBD sender): a
                                 * driver must not make the read on the
                                 * main loop (run_here) */
    BDRV_REQ_PRIO        = 0x20, /* a guest's request (the export's):
                                 * every queue of the block layer (the
                                 * thread pool's work and completion
                                 * queues, an NBD node's wait for a free
                                 * connection) serves it ahead of
                                 * requests without the flag, FIFO within
                                 * each class.  Any request kind; io.c
                                 * keeps it on every driver call the
                                 * request makes; drivers without a queue
                                 * ignore it; never sent on the wire */
} BdrvRequestFlags;

/* Block status of an extent (BlockExtent.flags) */
enum {
    BDRV_BLOCK_DATA         = 0x01, /* reads come from stored data */
    BDRV_BLOCK_ZERO         = 0x02, /* reads return zeroes */
    BDRV_BLOCK_ALLOCATED    = 0x04, /* the content is defined at @depth */
    BDRV_BLOCK_OFFSET_VALID = 0x08, /* @host_offset is meaningful */
    BDRV_BLOCK_COMPRESSED   = 0x10, /* stored compressed (no host offset) */
};

/* One extent of a block status answer. */
/* The kinds of data-path request, for bdrv_aio_submit() and drivers' aio_submit. */
typedef enum BdrvOp {
    BDRV_OP_READ,
    BDRV_OP_WRITE,
    BDRV_OP_ZERO,
    BDRV_OP_DISCARD,
    BDRV_OP_FLUSH,
    BDRV_OP_STATUS,
} BdrvOp;

typedef struct BlockExtent {
    int64_t offset;      /* guest offset of the extent */
    int64_t length;      /* bytes, > 0 */
    unsigned flags;      /* BDRV_BLOCK_* */
    int depth;           /* 0: this image; n: n-th backing file */
    int64_t host_offset; /* where the data lives, if OFFSET_VALID */
} BlockExtent;

/* What `info` shows about an image; strings owned by the struct. */
typedef struct BlockImageInfo {
    const char *format;          /* driver name */
    int64_t virtual_size;
    int64_t actual_size;         /* bytes allocated on the host, -1 unknown */
    int64_t cluster_size;        /* 0 when the format has none */
    char *backing_file;          /* or NULL */
    char *backing_format;        /* or NULL */
    bool dirty_flag;             /* the format says metadata may be stale */
    GPtrArray *specific;         /* "key: value" strings, or NULL */
    /*
     * The files of the images the node reads, named as it opened them:
     * [0] the image itself, [n] its n-th backing file (map's file column,
     * info's full-backing-filename).  NULL when the format keeps no chain
     * of files (raw, NBD, null).
     */
    GPtrArray *layers;
} BlockImageInfo;

void bdrv_image_info_clear(BlockImageInfo *info);

/* What one check of an image found, in qemu-img check's terms. */
typedef struct BdrvCheckResult {
    int64_t corruptions;        /* refcount below references, bad entries */
    int64_t leaks;              /* clusters with refcount above references */
    int64_t check_errors;       /* the check itself failed to read */
    int64_t image_end_offset;   /* end of the last used cluster */
    int64_t total_clusters;     /* guest clusters of the virtual size */
    int64_t allocated_clusters; /* guest clusters with data */
    int64_t fragmented_clusters;
    int64_t compressed_clusters;
    bool marked;                /* the header's dirty or corrupt bit is set */
    GPtrArray *messages;        /* one line per problem, as qemu-img
                                 * prints them on stderr */
} BdrvCheckResult;

void bdrv_check_result_clear(BdrvCheckResult *res);

/* What a check may repair, as qemu-img check -r leaks|all. */
typedef enum BdrvCheckFix {
    BDRV_FIX_NONE,              /* check only: the image is not changed */
    BDRV_FIX_LEAKS,             /* refcounts above the references */
    BDRV_FIX_ALL,               /* also those below, and COPIED flags */
} BdrvCheckFix;

/* A check, and the repair and second check that may follow it. */
typedef struct BdrvCheckReport {
    BdrvCheckResult before;     /* the check (before any repair) */
    bool repaired;              /* a repair ran: the members below count */
    BdrvCheckResult after;      /* the check of the repaired image */
    int64_t leaks_fixed;
    int64_t corruptions_fixed;
    bool rebuilt;               /* the refcount structure was made anew */
    bool marked_consistent;     /* the corrupt or dirty bit was cleared */
} BdrvCheckReport;

void bdrv_check_report_clear(BdrvCheckReport *rep);

/*
 * Check @bs (opened read-only, nothing in flight) for leaks and
 * corruptions as qemu-img check does, into rep->before.  With @fix other
 * than BDRV_FIX_NONE and something to repair (leaks, corruptions, or the
 * header's dirty or corrupt bit set), also repair what @fix allows and
 * check the image again (rep->repaired, rep->after): the repair first
 * takes a writer's locks on @bs's file (BLOCK_ERROR_LOCKED when another
 * user holds the image), then opens the image file itself, and @bs is
 * good for nothing but bdrv_unref() afterwards.  Blocking.  Clear @rep with
 * bdrv_check_report_clear() whatever the result.
 *
 * Returns 0; -ENOTSUP with @errp set when the format has no check (@rep
 * left empty); or another -errno with @errp set when the check or the
 * repair could not run (rep->before then holds what a repair's own check
 * found before it failed, or nothing).
 */
int bdrv_check(BlockDriverState *bs, BdrvCheckFix fix, BdrvCheckReport *rep,
               GError **errp);

/*
 * Open @spec as a node.  @spec is a filename, or a driver spec such as
 * "null:size=1M,latency-ns=1000".  @format names the driver ("raw", "null",
 * ...) and overrides probing; NULL probes the file's first bytes.  @options
 * (string -> string, may be NULL) passes driver options; each driver removes
 * the keys it understands, and any key left over is an error.
 *
 * A file node (raw, qcow2 and its backing files) locks the permissions
 * of @flags on the image before it writes anything, and keeps the locks
 * until it closes; a lock another user holds fails the open with
 * BLOCK_ERROR_LOCKED.  BDRV_O_FORCE_SHARE with BDRV_O_RDWR is refused
 * (BLOCK_ERROR_INVALID), as QEMU refuses force-share on a writable node.
 *
 * Returns a node with one reference, or NULL with @errp set.
 */
BlockDriverState *bdrv_open(const char *spec, const char *format, int flags,
                            GHashTable *options, GError **errp);

/* Add a reference to @bs. */
BlockDriverState *bdrv_ref(BlockDriverState *bs);

/*
 * Drop a reference; the last one closes the node.  The caller guarantees no
 * request is in flight on @bs.  NULL is ignored.
 */
void bdrv_unref(BlockDriverState *bs);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(BlockDriverState, bdrv_unref)

/*
 * Create a new image of @size bytes at @filename with the driver @format.
 * @options (may be NULL) holds creation options such as "preallocation";
 * unknown ones are an error.  An existing file is overwritten, as qemu-img
 * create does, but only after what can be checked without touching it
 * passed: the options, a backing file that is (or reads) @filename
 * itself, and, where the image file will be about @size bytes long (raw,
 * or any preallocation), that the file system takes a file that long
 * (tried on an unnamed temporary file beside it) and, for allocating
 * preallocation, has the room.  A file that did not exist before and that
 * a failed create left behind is removed.  Errors: BLOCK_ERROR_INVALID
 * for bad input (nothing was touched), others for failures.
 */
bool bdrv_create(const char *format, const char *filename, int64_t size,
                 GHashTable *options, GError **errp);

/*
 * Would another user's lock stop a writable open of the file @filename
 * with @flags (BDRV_O_UNSHARE() bits), or a create over it?  Takes the
 * locks a writable raw or qcow2 node would take on it (the most of
 * either), and releases them: for a caller that must know before it
 * creates or truncates anything.  True when nothing conflicts, or
 * @filename is no existing file or block device (nothing to lock); false
 * with @errp set (BLOCK_ERROR_LOCKED) on a conflict.
 */
bool bdrv_lock_probe(const char *filename, int flags, GError **errp);

/* Is @format the name of a registered driver? */
bool bdrv_find_format(const char *format);

/* The driver that @spec names by its syntax ("nbd" for an NBD URI,
 * "null" for null:...), or NULL for a plain file name. */
const char *bdrv_spec_driver(const char *spec);

/* The driver name of @bs ("raw", "null", ...). */
const char *bdrv_get_format_name(BlockDriverState *bs);

/* The spec @bs was opened with. */
const char *bdrv_get_filename(BlockDriverState *bs);

/* Length in bytes (cached at open). */
int64_t bdrv_getlength(BlockDriverState *bs);

/* Was @bs opened writable? */
bool bdrv_is_writable(BlockDriverState *bs);

/* The BLK_PERM_* @bs holds, and those it shares (from its open flags;
 * a format's own are not included). */
uint64_t bdrv_get_perm(BlockDriverState *bs);
uint64_t bdrv_get_shared_perm(BlockDriverState *bs);

/*
 * True when every byte of @bs is known to read as zero because the image was
 * just created by us (a new raw file, a new qcow2 image without backing).
 */
bool bdrv_has_zero_init(BlockDriverState *bs);

/* Mark that @bs reads as all zeroes (set after a fresh create). */
void bdrv_set_zero_init(BlockDriverState *bs, bool zero_init);

/* The cluster size of the format, or 0 when it has none. */
int64_t bdrv_get_cluster_size(BlockDriverState *bs);

/* Alignment every request is padded to, and buffer alignment for I/O. */
uint32_t bdrv_get_request_alignment(BlockDriverState *bs);
uint32_t bdrv_get_mem_alignment(BlockDriverState *bs);

/* Independent request channels of @bs (BlockLimits.channels), at least 1. */
uint32_t bdrv_get_channels(BlockDriverState *bs);

/* The channels of @bs taking requests now, 1..bdrv_get_channels(); may
 * change as the driver learns about its server.  Main loop. */
uint32_t bdrv_get_active_channels(BlockDriverState *bs);

/* Bytes in flight per channel that keep @bs busy now (get_window_bytes(),
 * at most BlockLimits.window_bytes); may grow as the driver learns about
 * its server; 0 when the driver has no opinion.  Main loop. */
int64_t bdrv_get_window_bytes(BlockDriverState *bs);

/* The most bytes per channel @bs will ask for (BlockLimits.window_bytes):
 * what a caller sizes its buffers for; 0 when no opinion. */
int64_t bdrv_get_max_window_bytes(BlockDriverState *bs);

/* Size of one copy operation that reads @bs, as its driver prefers
 * (BlockLimits.copy_transfer); 0 when it has no preference. */
int64_t bdrv_get_copy_transfer(BlockDriverState *bs);

/* The request size @bs's driver prefers (BlockLimits.opt_transfer),
 * informational; 0 when it has no preference. */
int64_t bdrv_get_opt_transfer(BlockDriverState *bs);

/*
 * Whether @bs's writes copy their data out on threads of their own (an
 * NBD node with a sender thread per connection; BlockLimits.
 * writes_off_loop): then a caller that reads the data for them passes
 * BDRV_REQ_OFF_LOOP.
 */
bool bdrv_writes_off_loop(BlockDriverState *bs);

/* Fill @info for `info`.  Returns false with @errp set on failure. */
bool bdrv_get_info(BlockDriverState *bs, BlockImageInfo *info, GError **errp);

/*
 * Do two file names name the same storage (same path, or same device and
 * inode)?  Used to refuse copying an image onto itself.  Driver specs (NBD
 * URIs, null:) are never "the same": a server may serve both ends.
 */
bool bdrv_same_storage(const char *spec_a, const char *spec_b);

/*
 * Is the file @spec one of the images @bs reads: @bs itself (depth 0) or
 * a file of its backing chain (depth n)?  Compared by device and inode
 * after resolving symlinks (block devices by device number), so another
 * name or a hard link of a chain file is found.  Used to refuse a target
 * that would overwrite what the source reads.  False when @spec does not
 * exist, is a driver spec (NBD URI, null:), or @bs has no files (NBD,
 * null).  On true, *@depth (if not NULL) gets the depth and *@member (if
 * not NULL) the chain file's name as @bs opened it (free with g_free()).
 */
bool bdrv_chain_contains(BlockDriverState *bs, const char *spec, int *depth,
                         char **member);

/* Buffer helpers: aligned to the node's memory alignment, freed by
 * qemu_vfree(). */
void *bdrv_blockalign(BlockDriverState *bs, size_t size);
void *qemu_memalign(size_t alignment, size_t size);
void qemu_vfree(void *ptr);

/*
 * Run @func(@data) once, @delay_ns from now (0 = as soon as possible), on
 * the thread-default main context.  Returns the attached source with one
 * reference: g_source_destroy() cancels it; the caller unrefs it.
 */
GSource *bdrv_timer_new(int64_t delay_ns, GSourceFunc func, void *data);

/* ---- The request path (block/io.c) ---- */

/*
 * Read @bytes at @offset into @buf.  Any offset, length and buffer alignment
 * is accepted: io.c pads, bounces and splits as the driver requires.  Bytes
 * past the end of the image read as zero.
 */
void bdrv_aio_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
                    void *buf, BdrvRequestFlags flags,
                    BlockCompletionFunc *cb, void *opaque);

/*
 * Write @bytes at @offset from @buf, which must stay valid and unchanged
 * until the completion runs.  Unaligned writes are read-modify-write and are
 * serialised against overlapping requests.  Writing past the end of the
 * image fails with -ENOSPC.
 */
void bdrv_aio_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     const void *buf, BdrvRequestFlags flags,
                     BlockCompletionFunc *cb, void *opaque);

/*
 * Make [offset, offset+bytes) read as zero.  BDRV_REQ_MAY_UNMAP lets the
 * driver deallocate; BDRV_REQ_NO_FALLBACK fails with -ENOTSUP instead of
 * writing zero buffers when the driver cannot zero efficiently.
 */
void bdrv_aio_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                            int64_t bytes, BdrvRequestFlags flags,
                            BlockCompletionFunc *cb, void *opaque);

/*
 * Discard (trim) a range.  Advisory: afterwards the range reads as either
 * the old data or zeroes.  Unaligned head and tail are ignored.
 */
void bdrv_aio_pdiscard(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       BlockCompletionFunc *cb, void *opaque);

/* Make every completed write durable. */
void bdrv_aio_flush(BlockDriverState *bs, BlockCompletionFunc *cb,
                    void *opaque);

/*
 * Block status of [offset, offset+bytes), clamped to the image end.  On
 * success at least one extent is appended to @extents (a GArray of
 * BlockExtent); the extents are contiguous, start at @offset and may cover
 * less than asked.  Without driver support everything is allocated data.
 */
void bdrv_aio_block_status(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, GArray *extents,
                           BlockCompletionFunc *cb, void *opaque);

/*
 * Any of the requests above by kind: @buf for READ and WRITE, @extents for
 * STATUS, @offset and @bytes ignored for FLUSH; DISCARD, FLUSH and STATUS
 * keep only BDRV_REQ_PRIO of @flags.  For filters that pass requests on
 * whatever they are.
 */
void bdrv_aio_submit(BlockDriverState *bs, BdrvOp op, int64_t offset,
                     int64_t bytes, void *buf, BdrvRequestFlags flags,
                     GArray *extents, BlockCompletionFunc *cb, void *opaque);

/*
 * A read-only view of image bytes in memory, in place of a read into a
 * buffer: the bytes sent on from it are copied once less.  Filled in by
 * bdrv_aio_map(); @data is valid until bdrv_unmap().  The bytes may change
 * under the view when the image is written meanwhile (as a buffer read
 * racing with a write may see either): callers that care track writes.
 */
typedef struct BdrvMapping {
    const uint8_t *data;     /* the bytes at the offset asked for */
    void *base;              /* driver's: what to release */
    size_t length;
} BdrvMapping;

/*
 * Can bdrv_aio_map() map @bs at all?  True only where mapping is cheap and
 * safe: data that lives in memory (a raw file on tmpfs), so that touching
 * the view never waits for a disk nor meets an I/O error.
 */
bool bdrv_can_map(BlockDriverState *bs);


/*
 * Map [@offset, @offset + @bytes) of @bs into @map and run @cb; the pages
 * are loaded before @cb runs, so using them never blocks.  Fails with
 * -ENOTSUP through @cb when @bs cannot map that range now (the range
 * reaches past the image or the file shrank): read it instead.  Counts as
 * a request in flight on @bs until @cb.
 */
void bdrv_aio_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
                  BdrvMapping *map, BlockCompletionFunc *cb, void *opaque);

/* Release a view that bdrv_aio_map() filled in (a no-op when it filled
 * nothing); @map is zeroed. */
void bdrv_unmap(BlockDriverState *bs, BdrvMapping *map);

/*
 * Fused copies (block/io-copy.c): one pool job reads a range of @src and
 * writes it to the same range of @dst, where both nodes' I/O is CPU work
 * on a pool worker (buffered files).  Saves the handoffs of a read job, a
 * trip through the main loop and a write job.
 */

/* Can @src and @dst do fused copies at all? */
bool bdrv_can_copy(BlockDriverState *src, BlockDriverState *dst);

/*
 * Can [@offset, @offset + @bytes) go in one fused job with @buf: aligned
 * for both nodes (the range and the memory), inside both images, and no
 * larger than either node takes in one request?
 */
bool bdrv_copy_fits(BlockDriverState *src, BlockDriverState *dst,
                    int64_t offset, int64_t bytes, const void *buf);

/*
 * Run on the pool worker between the read and the write, with the bytes
 * read: false means "do not write them", and the caller looks at them on
 * the main loop.  It may only read @buf and state that does not change
 * while the copy is in flight.
 */
typedef bool BdrvCopyCheck(void *opaque, const uint8_t *buf, int64_t bytes);

/* What a fused copy did, filled in before its completion runs. */
typedef struct BdrvCopyResult {
    int read_ret;               /* 0 or -errno */
    int write_ret;              /* 0 or -errno; 0 if it did not run */
    bool written;               /* the write ran and succeeded */
} BdrvCopyResult;

/*
 * Read [@offset, @offset + @bytes) of @src into @buf, then, unless
 * @check(@opaque, ...) says no, write @buf to the same range of @dst.
 * Requires bdrv_can_copy() and bdrv_copy_fits().  @cb gets 0, or the
 * read's error, or the write's; @res says which.  Tracked as a read on
 * @src and a write on @dst, counted in flight on both: it waits behind
 * overlapping read-modify-writes like any request, and @dst's write
 * notifiers run (also when @check said no, which errs on the safe side).
 */
void bdrv_aio_copy(BlockDriverState *src, BlockDriverState *dst,
                   int64_t offset, int64_t bytes, void *buf,
                   BdrvCopyCheck *check, BdrvCopyResult *res,
                   BlockCompletionFunc *cb, void *opaque);

/*
 * Abort the requests in flight on @bs as fast as the driver can (NBD: within
 * well under a second); each still completes, with -ECANCELED or its
 * result.  A no-op for drivers that cannot abort.  The node may be unusable
 * afterwards (NBD fails every later request).
 */
void bdrv_cancel_in_flight(BlockDriverState *bs);

/*
 * Called when a write, write-zeroes or discard of [offset, offset+bytes)
 * submitted through io.c on the node completes, successfully or not (a
 * failed write may still have changed data), before the submitter's
 * completion runs.  The mirror job uses it to dirty what guests write.
 */
typedef void BdrvWriteNotifyFunc(void *opaque, int64_t offset,
                                 int64_t bytes);

void bdrv_add_write_notifier(BlockDriverState *bs, BdrvWriteNotifyFunc *fn,
                             void *opaque);
void bdrv_remove_write_notifier(BlockDriverState *bs,
                                BdrvWriteNotifyFunc *fn, void *opaque);

/*
 * Node events: what a driver tells the layers above about its link to its
 * storage, for visibility (the NBD driver's reconnect, block/nbd.h).
 * Requests need no listener: while a node is RECONNECTING they are held
 * (neither failed nor completed), after RECONNECTED they go on, and after
 * RECONNECT_FAILED the held ones and every later one fail with @error.
 */
typedef enum BdrvEventType {
    BDRV_EVENT_RECONNECTING,     /* the link broke; requests are held */
    BDRV_EVENT_RECONNECTED,      /* back, the same storage; they go on */
    BDRV_EVENT_RECONNECT_FAILED, /* gave up: the node has failed */
} BdrvEventType;

typedef struct BdrvEvent {
    BdrvEventType type;
    int error;              /* RECONNECTING: what broke the link (errno);
                             * FAILED: what requests fail with */
    const char *reason;     /* one line for people: RECONNECTING, what
                             * broke; FAILED, why it gave up */
    int delay_s;            /* RECONNECTING: gives up after this long */
    int64_t elapsed_ns;     /* RECONNECTED, FAILED: since the link broke */
} BdrvEvent;

/*
 * A listener gets every event of the node, synchronously, on the main
 * loop, from inside the driver: it must not submit requests to the node,
 * close it, or add or remove listeners from the call.
 */
typedef void BdrvEventFunc(void *opaque, BlockDriverState *bs,
                           const BdrvEvent *ev);

void bdrv_add_event_listener(BlockDriverState *bs, BdrvEventFunc *fn,
                             void *opaque);
void bdrv_remove_event_listener(BlockDriverState *bs, BdrvEventFunc *fn,
                                void *opaque);

/* Is @bs between BDRV_EVENT_RECONNECTING and its outcome? */
bool bdrv_is_reconnecting(BlockDriverState *bs);

/*
 * How many times @bs reconnected (BDRV_EVENT_RECONNECTED) since it was
 * opened: a generation.  A writer that flushed and sees it unchanged
 * since the flush began knows the flush reached the storage that holds
 * its writes now; a changed one means writes acknowledged before the
 * link broke may need another flush.
 */
uint64_t bdrv_get_reconnects(BlockDriverState *bs);

/* Requests submitted through io.c on @bs and not yet completed. */
uint64_t bdrv_get_in_flight(BlockDriverState *bs);

/*
 * Cap on the size of one data read or write reaching the driver of @bs, on
 * top of the driver's own max_transfer (0 = no extra cap).  The mirror job
 * sets it to its chunk size.
 */
void bdrv_set_max_io(BlockDriverState *bs, int64_t max_io);

#endif /* BLOCK_BLOCK_H */
