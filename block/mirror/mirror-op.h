/*
 * The life of one mirror operation (mirror-op.c): a COPY gets the
 * source's bytes through the copy path, waits for its turn when writes go
 * out in order, writes the target (in pieces when zero runs of the data
 * become zero writes), then retires; a ZERO writes zeroes.  Also what the
 * operations achieved: the counters behind query-block-jobs and the rate
 * at which they make the image clean.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_OP_H
#define BLOCK_MIRROR_OP_H

#include "block/mirror/mirror-copy.h"
#include "util/cutils.h"
#include "util/rate-meter.h"

#include <glib.h>

/*
 * ZERO operations (no buffer behind them).  An operation holds its range
 * until it completes: cancel and completion wait for it, a guest write
 * on its range waits for it in write-blocking mode, and on a target that
 * zeroes by writing it costs its length.  So a zero is as large as its
 * extent up to MIRROR_MAX_ZERO_BYTES, large enough that the job's own
 * cost is per extent and a target that takes large zero requests (a raw
 * file's fallocate) gets them; the block layer splits it for the
 * target's limit.  The zeroes in flight together stay within
 * MIRROR_MAX_ZERO_IN_FLIGHT (several of the largest, which keeps several
 * of the target's requests going).  Where guests write (write-blocking
 * mode, or a mirror-top filter: an export, whose job QMP or auto-converge
 * may switch to write-blocking while large zeroes are in flight) one
 * covers at most MIRROR_ACTIVE_MAX_ZERO_BYTES, what a guest may wait for.
 */
#define MIRROR_MAX_ZERO_BYTES           (64 * GiB)
#define MIRROR_MAX_ZERO_IN_FLIGHT       (256 * GiB)
#define MIRROR_ACTIVE_MAX_ZERO_BYTES    (1 * GiB)

typedef struct MirrorJob MirrorJob;

typedef enum MirrorMethod {
    MIRROR_METHOD_COPY,     /* read the source, write the target */
    MIRROR_METHOD_ZERO,     /* write zeroes to the target */
    MIRROR_METHOD_SKIP,     /* nothing to do (no operation is created) */
} MirrorMethod;

typedef struct MirrorOp {
    MirrorJob *s;
    MirrorMethod method;
    int64_t offset;
    int64_t bytes;
    MirrorCopy copy;            /* COPY: its data */
    bool target_was_zero;       /* the target read as zero here */
    bool write_ready;           /* in order: read done, waiting its turn */
    bool in_order_queue;
    GList link;                 /* in MirrorOpList.ops */
    GList order_link;           /* in MirrorOpList.order */

    /* Writing a COPY in pieces (sparse detection). */
    int64_t write_pos;          /* next byte to write */
    int64_t piece_offset;       /* the piece in flight */
    int64_t piece_bytes;
    MirrorMethod piece_method;
} MirrorOp;

/*
 * The job's core, as the operations call it back; all on the main loop.
 * The core fills it in (mirror-core.h); the operations call nothing of
 * the core but these.
 */
typedef struct MirrorOpOwner {
    /* A write to the target starts (the next flush has work). */
    void (*target_write)(MirrorJob *s);
    /* The read (@is_read) or write of [offset, offset + bytes) failed
     * with @ret; the operation's range is dirty again: apply the error
     * policy. */
    void (*failed)(MirrorJob *s, bool is_read, int ret, int64_t offset,
                   int64_t bytes);
    /* An operation retired: more may start, the job may change state
     * (pump). */
    void (*settled)(MirrorJob *s);
} MirrorOpOwner;

/* The operations of a job and what they achieved: mirror-op.c only. */
typedef struct MirrorOpList {
    const MirrorOpOwner *owner;
    GQueue ops;                 /* MirrorOp, in creation order */
    GQueue order;               /* in order: ops whose write is not out */
    RateMeter copy_rate;        /* bytes made clean per second */
    int64_t copied;             /* data written to the target */
    int64_t zeroed;             /* zeroes written to the target */
    int64_t skipped;            /* known zero on both sides: no I/O */
    int64_t zero_in_flight;     /* bytes of ZERO operations in flight */
} MirrorOpList;

/* Set up @s's operation list (before the copy path, which calls back);
 * @owner: the core, called back as MirrorOpOwner says. */
void mirror_ops_init(MirrorJob *s, const MirrorOpOwner *owner);

/* The job starts: the copy rate counts from now. */
void mirror_ops_start(MirrorJob *s);

/* The check and completion mirror_copy_path_init() wants. */
bool mirror_op_copy_check(MirrorCopy *c, const uint8_t *buf, int64_t bytes);
void mirror_op_copy_done(MirrorCopy *c, int ret);

/*
 * Start an operation over [offset, offset + bytes), whose dirty bits the
 * caller has just cleared.  COPY takes ownership of the slot @buf (from
 * mirror_window_slot_get(); NULL: a view slot).
 */
void mirror_op_start(MirrorJob *s, MirrorMethod method, int64_t offset,
                     int64_t bytes, uint8_t *buf);

/* [offset, offset + bytes) needs nothing (known zero on both sides): it
 * counts as done. */
void mirror_op_skip(MirrorJob *s, int64_t bytes);

/* Bytes of the ZERO operations in flight. */
int64_t mirror_ops_zero_in_flight(MirrorJob *s);

/* What the operations achieved, for query-block-jobs. */
double mirror_ops_copy_rate(MirrorJob *s, int64_t now_ns);
void mirror_ops_counters(MirrorJob *s, int64_t *copied, int64_t *zeroed,
                         int64_t *skipped);

#endif /* BLOCK_MIRROR_OP_H */
