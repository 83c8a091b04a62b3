/*
 * The mirror job, inside: MirrorJob, made of parts with one owner each,
 * and the owner interfaces through which the parts call the core back.
 *
 * Leaf parts: each its own struct and header; none includes this one nor
 * calls into the core but through the owner callbacks its header
 * documents:
 *   mirror-window.h    operations and bytes in flight, the COPY slots
 *   mirror-status.h    the source's block status, cached (a callback:
 *                      an answer came)
 *   mirror-copy.h      the copy path (buffer / view / fused), an ops
 *                      table chosen once at setup (MirrorCopyEnv)
 *   mirror-sparse.h    zero runs inside data (convert -S)
 *   mirror-active.h    write-blocking mode (MirrorActiveOwner)
 *   mirror-converge.h  auto-converge (MirrorConvergeOwner)
 *   mirror-guest.h     guest-first: the window follows the guests'
 *                      latency (MirrorGuestOwner)
 *   mirror-link.h      the nodes' reconnects (events, flush again)
 *   mirror-track.h     the job's bitmaps, shared through their own APIs
 * The engine, which includes this header: the core (mirror.c: the pump,
 * the job's state, flushes, errors, the JobDriver and a running job's
 * API), setup (mirror-setup.c: parameters resolved and checked,
 * creation), the planner (mirror-plan.h) and the life of an operation
 * (mirror-op.h).  The planner and the operations call the core back only
 * through MirrorPlanOwner and MirrorOpOwner; the core's own declarations
 * are in mirror-core.h, for mirror.c and mirror-setup.c alone.  Calls go
 * one way: core -> plan -> op -> leaf parts; setup -> core and the rest.
 *
 * Each part writes only its own struct; the others call its functions.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_INT_H
#define BLOCK_MIRROR_INT_H

#include "block/mirror/dirty-bitmap.h"
#include "block/mirror/mirror-active.h"
#include "block/mirror/mirror-converge.h"
#include "block/mirror/mirror-link.h"
#include "block/mirror/mirror-copy.h"
#include "block/mirror/mirror-guest.h"
#include "block/mirror/mirror-op.h"
#include "block/mirror/mirror-plan-state.h"
#include "block/mirror/mirror-sparse.h"
#include "block/mirror/mirror-status.h"
#include "block/mirror/mirror-track.h"
#include "block/mirror/mirror-window.h"
#include "block/mirror/mirror.h"
#include "util/cutils.h"
#include "util/hbitmap.h"
#include "util/ratelimit.h"
#include "util/rate-meter.h"

#include <stddef.h>

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/* The parameters, resolved and checked: written by mirror-setup.c only. */
typedef struct MirrorConfig {
    int64_t len;                /* of the source: what is copied */
    MirrorSyncMode sync;
    BlockdevOnError on_source_error;
    BlockdevOnError on_target_error;
    int64_t granularity;
    int64_t chunk_size;         /* the most one COPY covers */
    bool compress;              /* compressed data writes */
    bool in_order;              /* writes go out in offset order */
    bool auto_complete;
    bool allocate_zeroes;
    bool target_zero;           /* the target started out all zero */
} MirrorConfig;

/* The unflushed set (mirror-track.h) reaching this many extents makes
 * the job flush the target (mirror.c). */
#define MIRROR_UNFLUSHED_MAX    1024

/* Flushing the target: mirror.c only. */
typedef struct MirrorFlush {
    bool in_flight;
    uint64_t writes_since;      /* target writes since the last flush */
    uint64_t mark;              /* writes_since when it began */
    bool is_final;              /* began after complete/cancel asked */
    bool final_done;            /* a flush succeeded since then */
    bool ready_due;             /* a flush begun with nothing dirty nor in
                                 * flight succeeded: READY is due */
    bool state_in_flight;       /* a --state-file flush (mirror.c) */
} MirrorFlush;

/* The error policy's state: mirror.c only. */
typedef struct MirrorErrors {
    int ret;                    /* the first error reported: the job fails */
    char *detail;               /* ... what, where (mirror_get_error_detail) */
    uint64_t count;             /* failed operations so far */
    bool failed;                /* stopped on an error (io-status) */
    bool nospace;               /* ... on ENOSPC */
} MirrorErrors;

struct MirrorJob {
    Job common;

    BlockDriverState *src;
    BlockDriverState *dst;
    BlockDriverState *top;      /* the mirror-top filter, or NULL */
    MirrorConfig cfg;           /* mirror-setup.c */

    /* The parts. */
    MirrorTrack track;          /* mirror.c creates; shared (see
                                 * mirror-track.h) */
    MirrorWindow win;           /* mirror-window.c */
    MirrorStatus status;        /* mirror-status.c */
    MirrorCopyPath copy;        /* mirror-copy.c */
    MirrorSparse sparse;        /* mirror-sparse.c */
    MirrorPlan plan;            /* mirror-plan.c */
    MirrorOpList ops;           /* mirror-op.c */
    MirrorActive active;        /* mirror-active.c */
    MirrorConverge converge;    /* mirror-converge.c */
    MirrorLink link;            /* mirror-link.c */
    MirrorGuest guest;          /* mirror-guest.c */

    /* The core (mirror.c). */
    MirrorCopyMode copy_mode;
    MirrorFlush flush;
    MirrorErrors err;
    RateLimit limit;
    GSource *rate_timer;
    GSource *kick;
    GSource *state_timer;       /* the next --state-file flush */
    bool pumping;
    bool notifier_added;
    bool should_complete;
    bool finished;
    bool stopping;              /* finishing: guests bypass the job */
    bool draining;              /* waiting for the filter to quiesce */
    int64_t tracking_peak;      /* MirrorStats.tracking_bytes_peak */
    bool drained;               /* the filter is quiesced */
};

#endif /* BLOCK_MIRROR_INT_H */
