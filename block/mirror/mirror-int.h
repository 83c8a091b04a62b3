/*
 * Mirror job internals shared by block/mirror.c (scheduling, state,
 * errors) and block/mirror-op.c (the life of one operation).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_INT_H
#define BLOCK_MIRROR_INT_H

#include "block/mirror/dirty-bitmap.h"
#include "block/mirror/mirror.h"
#include "util/buf-pool.h"
#include "util/cutils.h"
#include "util/hbitmap.h"
#include "util/ratelimit.h"
#include "util/rate-meter.h"

#include <stddef.h>

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/* Largest sparse-size (qemu-img's -S): operations grow to it. */
#define MIRROR_MAX_SPARSE_SIZE  (16 * MiB)

/* Largest zero operation (no buffer behind it). */
#define MIRROR_MAX_ZERO_BYTES   (1 * GiB)

typedef enum MirrorMethod {
    MIRROR_METHOD_COPY,     /* read the source, write the target */
    MIRROR_METHOD_ZERO,     /* write zeroes to the target */
    MIRROR_METHOD_SKIP,     /* nothing to do (no operation is created) */
} MirrorMethod;

typedef struct MirrorJob MirrorJob;

typedef struct MirrorOp {
    MirrorJob *s;
    MirrorMethod method;
    int64_t offset;
    int64_t bytes;
    const uint8_t *buf;         /* COPY: the data, in one of these: */
    uint8_t *pool_buf;          /*   a pool buffer, */
    BdrvMapping map;            /*   a view of the source */
    BdrvCopyResult copy;        /* a fused copy's outcome */
    bool target_was_zero;       /* the target read as zero here */
    bool write_ready;           /* in order: read done, waiting its turn */
    bool in_order_queue;
    GList link;                 /* in s->ops */
    GList order_link;           /* in s->order */

    /* Writing a COPY in pieces (sparse detection). */
    int64_t write_pos;          /* next byte to write */
    int64_t piece_offset;       /* the piece in flight */
    int64_t piece_bytes;
    MirrorMethod piece_method;
} MirrorOp;

struct MirrorJob {
    Job common;

    BlockDriverState *src;
    BlockDriverState *dst;
    int64_t len;                /* of the source: what is copied */
    int64_t len_dst;

    /* parameters, resolved */
    MirrorSyncMode sync;
    MirrorCopyMode copy_mode;
    BlockdevOnError on_source_error;
    BlockdevOnError on_target_error;
    int64_t granularity;
    int64_t chunk_size;
    int64_t buf_size;           /* the most the window grows to */
    int max_in_flight;
    int64_t sparse_size;        /* convert -S: zero runs this long inside
                                 * data become zero writes (0: off) */
    int64_t sparse_align;       /* the pieces' alignment then (mirror-op.c) */
    bool compress;              /* compressed data writes */
    bool in_order;
    bool auto_complete;
    bool allocate_zeroes;
    bool target_zero;           /* the target started out all zero */

    /* what is left to copy, and what is being copied */
    DirtyBitmap *dirty;
    HBitmap *in_flight_bitmap;  /* granules covered by an operation */
    HBitmap *zero_bitmap;       /* granules known zero on the target */
    int64_t cursor;             /* where the next pass resumes */
    uint64_t passes;

    /* operations in flight */
    GQueue ops;                 /* MirrorOp, in creation order */
    GQueue order;               /* in order: ops whose write is not out */
    int in_flight;
    int64_t op_bytes_in_flight; /* COPY bytes: the buf-size budget */

    /*
     * The window now: defaults follow the channels of either end taking
     * requests and the bytes per channel they ask for
     * (mirror_window_refresh()), up to buf_size and max_in_flight; a value
     * given stays.  Per channel: win_unit_bytes, win_unit_ops (0: given);
     * win_asked: the unit is what the ends ask for, in operations of
     * win_op_size.
     */
    int64_t win_buf_size;
    int win_max_in_flight;
    int win_max_bufs;
    int win_channels;
    int64_t win_unit_bytes;
    int win_unit_ops;
    bool win_asked;
    int64_t win_op_size;

    /* COPY slots, at most win_max_bufs (of max_bufs): pool buffers
     * (buf_elem_size) or views */
    BufPool *bufs;
    int max_bufs;
    int64_t buf_elem_size;
    size_t buf_align;
    bool map_src;               /* large COPYs read views of the source */
    bool fuse;                  /* COPYs are fused copies (bdrv_aio_copy) */
    int nb_views;               /* slots taken by operations without one */

    /* source block status window */
    GArray *status;             /* BlockExtent over [status_start, _end) */
    int64_t status_start;
    int64_t status_end;
    guint status_idx;
    GArray *status_new;
    bool status_pending;
    GArray *status_writes;      /* BlockExtent: written while pending */
    bool status_stale;          /* too many of them: drop the answer */
    int64_t status_fetch_offset;

    /* flush */
    bool flush_in_flight;
    uint64_t writes_since_flush;
    uint64_t flush_mark;
    bool flush_is_final;        /* started after complete/cancel asked */
    bool final_flush_done;      /* a flush succeeded since then */
    bool ready_due;             /* a flush begun with nothing dirty nor in
                                 * flight succeeded: READY is due */

    RateLimit limit;
    GSource *rate_timer;
    GSource *kick;
    bool pumping;

    bool should_complete;
    bool finished;
    int ret;                    /* first reported error */
    char *error_detail;
    uint64_t errors;
    bool iostatus_failed;
    bool iostatus_nospace;
    int64_t start_ns;

    /* write-blocking mode and the switch-over */
    BlockDriverState *top;      /* the mirror-top filter, or NULL */
    GQueue active_waiting;      /* MirrorActiveOp waiting for overlaps */
    GQueue active_ops;          /* MirrorActiveOp running */
    int active_in_flight;       /* both of the above */
    bool actively_synced;
    bool stopping;              /* finishing: guests bypass the job */
    bool draining;              /* waiting for the filter to quiesce */
    bool drained;               /* the filter is quiesced */
    int64_t stats_active;       /* bytes guests wrote to the target */

    /* auto-converge (mirror-converge.c) */
    bool auto_converge;
    int64_t auto_converge_ms;
    uint64_t auto_converge_passes;
    int64_t behind_since_ns;    /* writers outpace us since, or 0 */
    GSource *converge_timer;

    RateMeter copy_rate;        /* bytes made clean per second */
    RateMeter write_rate;       /* granules guests wrote, dirty or not */
    bool notifier_added;

    int64_t stats_copied;
    int64_t stats_zeroed;
    int64_t stats_skipped;
};

/* mirror.c */

/* The JobDriver of mirror jobs. */
extern const JobDriver mirror_job_driver;

/* Start operations until a limit is reached, then see whether the job
 * changes state.  Every completion calls it. */
void mirror_pump(MirrorJob *s);

/* Size the window (win_*) for the channels of either end taking requests
 * now; cheap when they did not change.  mirror-setup.c. */
void mirror_window_refresh(MirrorJob *s);

/* Pump later, from the main loop (for calls from outside the job). */
void mirror_kick(MirrorJob *s);

/* With nothing in flight: finish, pause, flush, go READY or complete. */
void mirror_check_state(MirrorJob *s);

/* Pump again after @delay_ns (the speed limit is used up). */
void mirror_rate_limit_wait(MirrorJob *s, int64_t delay_ns);

/* Apply the error policy to a failed read (@is_read) or write of
 * [offset, offset + bytes) (bytes 0: a flush); emits BLOCK_JOB_ERROR. */
void mirror_error(MirrorJob *s, bool is_read, int ret, int64_t offset,
                  int64_t bytes);

/* Validate the resolved parameters and the two nodes. */
bool mirror_check_params(BlockDriverState *src, BlockDriverState *dst,
                         const MirrorParams *p, int64_t granularity,
                         int64_t chunk, int64_t buf_size, int max_in_flight,
                         GError **errp);

/* mirror-plan.c */

/*
 * Start one operation (or skip one known-zero range).  Returns false when
 * nothing more can start now; a completion, the rate timer or the block
 * status fetch it started will pump again.
 */
bool mirror_issue_one(MirrorJob *s);

/* Forget the cached block status of the source. */
void mirror_status_invalidate(MirrorJob *s);

/* The source was written at [offset, offset + bytes): what we know, or
 * are about to learn, of its block status there may be stale. */
void mirror_status_written(MirrorJob *s, int64_t offset, int64_t bytes);

/* mirror-active.c */

/* Start the waiting active writes that no longer overlap anything. */
void mirror_active_start_waiting(MirrorJob *s);

/* Is [offset, offset + bytes) an active write's own source write (which
 * must not dirty the range)? */
bool mirror_active_is_own_write(MirrorJob *s, int64_t offset,
                                int64_t bytes);

/* mirror-converge.c */

/* Start watching convergence (if auto-converge is on); stop it. */
void mirror_converge_start(MirrorJob *s);
void mirror_converge_stop(MirrorJob *s);

/* mirror-op.c */

/*
 * A slot for one COPY operation of @bytes, at most max_bufs at a time: a
 * pool buffer in *@buf, or NULL there when the operation reads the source
 * through a view (map_src, and @bytes large enough to gain by it).  False
 * when all slots are taken.  mirror_slot_put() gives it back.
 */
bool mirror_slot_get(MirrorJob *s, int64_t bytes, uint8_t **buf);
void mirror_slot_put(MirrorJob *s, uint8_t *buf);

/*
 * Start an operation over [offset, offset + bytes), whose dirty bits the
 * caller has just cleared.  COPY takes ownership of the slot @buf.
 */
void mirror_op_start(MirrorJob *s, MirrorMethod method, int64_t offset,
                     int64_t bytes, uint8_t *buf);

#endif /* BLOCK_MIRROR_INT_H */
