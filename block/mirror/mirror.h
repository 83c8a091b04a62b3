/*
 * The mirror job: the one copy engine of qemu-mirror.
 *
 * It copies a source node onto a target node of the same length, driven by
 * a dirty bitmap: the bulk stage marks the whole source dirty (sync=full)
 * and walks it in ascending order, asking the source's block status lazily
 * so that holes and zeroes become write-zeroes (or nothing, when the target
 * is known to read as zero) and data becomes copies; the sync stage copies
 * whatever gets dirtied again.  Each data I/O is at most chunk-size bytes,
 * consecutive dirty granules coalesce up to that, and at most
 * max-in-flight operations and buf-size bytes of data are in flight.
 *
 * `mirror-tool convert` is this job with sync=full and auto-complete; its
 * in-order mode submits writes in offset order.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_H
#define BLOCK_MIRROR_H

#include "block/block.h"
#include "block/mirror/job.h"

#define MIRROR_DEFAULT_CHUNK_SIZE    (1 << 20)      /* MAX_IO_BYTES */
#define MIRROR_DEFAULT_MAX_IN_FLIGHT 16             /* MAX_IN_FLIGHT */
#define MIRROR_DEFAULT_BUF_SIZE      (16 << 20)
/*
 * The least the job copies per second however busy the guests are
 * (--min-copy-rate): QEMU's default migration bandwidth (max-bandwidth),
 * what a migration gets when nobody says otherwise.
 */
#define MIRROR_DEFAULT_MIN_COPY_RATE (128LL << 20)
#define MIRROR_MAX_IN_FLIGHT_LIMIT   1024
/* The default window is scaled by at most this many channels. */
#define MIRROR_MAX_WINDOW_CHANNELS   4
/* ... and the default window at most this many bytes. */
#define MIRROR_MAX_WINDOW_BYTES      (64 << 20)
#define MIRROR_MIN_GRANULARITY       512
#define MIRROR_MAX_GRANULARITY       (64 << 20)
#define MIRROR_MIN_CHUNK_SIZE        (4 << 10)
#define MIRROR_MAX_CHUNK_SIZE        (64 << 20)
/* auto-converge-ms (CLI: --auto-converge-after): 1 ms to a day. */
#define MIRROR_CONVERGE_DEFAULT_MS   5000
#define MIRROR_CONVERGE_MAX_MS       86400000
/* auto-converge-passes: 0 (no pass limit) to a million. */
#define MIRROR_CONVERGE_MAX_PASSES   1000000

typedef enum MirrorSyncMode {
    MIRROR_SYNC_MODE_FULL,
    MIRROR_SYNC_MODE_TOP,
    MIRROR_SYNC_MODE_NONE,
} MirrorSyncMode;

typedef enum MirrorCopyMode {
    MIRROR_COPY_MODE_BACKGROUND,
    MIRROR_COPY_MODE_WRITE_BLOCKING,
} MirrorCopyMode;

/* on-source-error / on-target-error */
typedef enum BlockdevOnError {
    BLOCKDEV_ON_ERROR_REPORT,
    BLOCKDEV_ON_ERROR_IGNORE,
    BLOCKDEV_ON_ERROR_STOP,
    BLOCKDEV_ON_ERROR_ENOSPC,
} BlockdevOnError;

typedef struct MirrorParams {
    MirrorSyncMode sync;
    int64_t granularity;        /* 0: target cluster size in [4K, 64K],
                                 * else 64K */
    int64_t buf_size;           /* bytes of data in flight; 0: 16 MiB */
    int64_t chunk_size;         /* cap on one data I/O; 0: 1 MiB */
    int max_in_flight;          /* operations in flight; 0: 16 */
    int64_t speed;              /* bytes/s, 0 = unlimited */
    MirrorCopyMode copy_mode;
    BlockdevOnError on_source_error;
    BlockdevOnError on_target_error;

    bool target_is_zero;        /* the target reads as zeroes already */
    bool allocate_zeroes;       /* copy zero extents as data, for a fully
                                 * allocated target (qemu-img -S 0) */
    int64_t sparse_size;        /* turn zero runs of data into zero writes
                                 * at this granularity; 0 = off */
    bool in_order;              /* submit writes in offset order */
    bool auto_complete;         /* complete as soon as READY */
    bool auto_converge;         /* switch to write-blocking when writers
                                 * outpace the copy (see below) */
    int64_t auto_converge_ms;   /* ... for this long (0: 5000 ms) */
    uint64_t auto_converge_passes; /* ... or after this many passes over
                                 * the disk (0: no pass limit) */
    bool allow_larger_target;   /* copy onto the start of a larger target
                                 * (convert -n), instead of refusing */
    bool compress;              /* data writes with BDRV_REQ_WRITE_COMPRESSED
                                 * (convert -c): operations and data pieces
                                 * cover whole target clusters */
    bool guest_priority;        /* the window yields to guests' latency
                                 * (mirror-guest.h; default on) */
    int64_t min_copy_rate;      /* ... but never paces itself below this
                                 * many bytes/s (>= 1) */
} MirrorParams;

/* Counters for summaries and query-block-jobs. */
typedef struct MirrorStats {
    int64_t len;                /* image length */
    int64_t bytes_copied;       /* data written to the target */
    int64_t bytes_zeroed;       /* zeroed on the target */
    int64_t bytes_skipped;      /* known zero on both sides: no I/O */
    int64_t dirty_bytes;        /* still to copy */
    int64_t in_flight_bytes;    /* bytes of operations in flight */
    int in_flight;              /* operations in flight */
    int64_t granularity;
    int64_t chunk_size;
    int64_t buf_size;
    int max_in_flight;
    bool in_sync;               /* nothing dirty, nothing in flight */
    double dirty_rate;          /* bytes/s newly dirtied by writers */
    double copy_rate;           /* bytes/s the job made clean */
    int64_t eta_ms;             /* until in sync at these rates; -1 when
                                 * unknown or not converging */
    bool actively_synced;       /* write-blocking and in sync */
    const char *io_status;      /* "ok", "failed", "nospace" or
                                 * "reconnecting" */
    bool reconnecting;          /* the source or the target lost its
                                 * server and reconnects; the job's
                                 * requests to it wait */
    MirrorCopyMode copy_mode;
    uint64_t passes;            /* times the cursor wrapped around */
    uint64_t errors;            /* failed operations so far */
    int64_t known_good_bytes;   /* --state-file: known good now; else -1 */
    /*
     * Heap the job's per-granule and per-extent structures hold now (the
     * dirty, in-flight and zero bitmaps, the block status cache, the
     * extent sets of the target's flushes and of the state file), and at
     * most since it started: it follows the runs and extents, not the
     * disk's size.
     */
    int64_t tracking_bytes;
    int64_t tracking_bytes_peak;
    /* Bitmap nodes those bitmaps visited so far (util/hbitmap.h): the
     * work of the job's searches, for tests that bound it. */
    uint64_t tracking_visits;
    /*
     * The guests of the mirror-top filter as the job sees them
     * (mirror-guest.h): requests and bytes per second that ended, their
     * mean latency in the last period and without the job (0: not
     * measured yet), and the pace the job keeps to for them.
     */
    bool guest_priority;
    uint64_t guest_requests;
    double guest_request_rate;
    double guest_byte_rate;
    int64_t guest_latency_ns;
    int64_t guest_base_latency_ns;
    double guest_pace;          /* bytes/s the job paces itself to for
                                 * the guests; 0: not paced */
} MirrorStats;

/* What a guest write does (write-blocking mode). */
typedef enum MirrorWriteKind {
    MIRROR_WRITE_DATA,
    MIRROR_WRITE_ZERO,
    MIRROR_WRITE_DISCARD,
} MirrorWriteKind;

/* Fill @p with QEMU's defaults (all the 0 = default fields stay 0). */
void mirror_params_init(MirrorParams *p);

/*
 * Create a mirror job copying @src to @dst under job id @id.  Checks the
 * parameters (granularity a power of 2 in [512, 64M], chunk size a power
 * of 2 in [4K, 64M], max-in-flight in [1, 1024], buf-size >= 0) and the
 * nodes (same length, @dst writable, not the same node).  Returns the job
 * (CREATED, not started; start it with job_start()) or NULL with @errp set.
 * The job holds references to both nodes until it is freed.
 */
Job *mirror_job_new(const char *id, BlockDriverState *src,
                    BlockDriverState *dst, const MirrorParams *p,
                    GError **errp);

/* Counters of a mirror job. */
void mirror_get_stats(Job *job, MirrorStats *stats);

/*
 * Let @job own the switch-over of the mirror-top filter @top (whose child
 * is the job's source): completion quiesces @top, checks that nothing is
 * dirty, flushes the target and makes the target @top's child; in
 * write-blocking mode @top hands guest writes to the job.  Call before
 * job_start().
 */
void mirror_job_set_top(Job *job, BlockDriverState *top);

/*
 * Persist the job's progress in @state (mirror-state.h, opened with this
 * job's identity; the caller frees it after the job and the filter):
 * copy only what it does not know good, flush the target now and then
 * and record what became known good, make guest writes through the
 * mirror-top filter wait for their granules to be marked not good, and
 * remove the file when the job completes.  Call before job_start().
 */
typedef struct MirrorState MirrorState;
void mirror_job_set_state(Job *job, MirrorState *state);

/*
 * Switch a running job from background to write-blocking (QMP
 * block-job-change; the other direction is refused, as in QEMU).
 */
bool mirror_change_copy_mode(Job *job, MirrorCopyMode mode, GError **errp);

/*
 * The ranges of auto-converge-ms (1..MIRROR_CONVERGE_MAX_MS) and
 * auto-converge-passes (0..MIRROR_CONVERGE_MAX_PASSES), one rule for job
 * creation (the CLI's values) and QMP block-job-change alike.  False
 * with @errp set naming the QMP parameter: "Parameter 'auto-converge-ms'
 * expects a value in range [1, 86400000]".
 */
bool mirror_check_converge_ms(int64_t ms, GError **errp);
bool mirror_check_converge_passes(int64_t passes, GError **errp);

/*
 * Turn auto-converge on (@on 1) or off (0) at run time, or leave it (-1)
 * (QMP block-job-change "auto-converge"); @after_ms and @passes as in
 * MirrorParams (negative: unchanged), checked by the caller with
 * mirror_check_converge_ms() and mirror_check_converge_passes().
 */
void mirror_set_auto_converge(Job *job, int on, int64_t after_ms,
                              int64_t passes);

/*
 * What went wrong, with the operation, offset, length and image, when the
 * job failed with an I/O error ("write error at offset 4194304 (length
 * 1048576) of 'x': Input/output error"); NULL otherwise.
 */
const char *mirror_get_error_detail(Job *job);

#endif /* BLOCK_MIRROR_H */
