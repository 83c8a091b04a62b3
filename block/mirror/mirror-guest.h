/*
 * Guest-first: the job yields to the guests that use its source through
 * the mirror-top filter (a live migration's VM, through the export).
 *
 * The filter times every guest request, from its arrival at the filter
 * to its completion (in write-blocking mode that includes the target's
 * share).  The job's share is a pace, in bytes per second of COPY data,
 * that follows that latency (AIMD); paced, its operations are at most
 * MIRROR_GUEST_OP_MAX, so that each holds the loop, the CPUs and the
 * queues for less time, and its bytes in flight are what the pace moves
 * in the time an operation takes:
 *
 * - The goal is the guests' mean latency without the job (the base)
 *   times MIRROR_GUEST_GOAL_PCT / 100, plus MIRROR_GUEST_SLACK_NS.  A
 *   probe measures the base: the job stops starting operations, waits
 *   until its own have ended, averages the next MIRROR_GUEST_PROBE_REQS
 *   guest requests that arrive after that (or those that arrived within
 *   MIRROR_GUEST_PROBE_NS and ended within MIRROR_GUEST_PROBE_MAX_NS),
 *   and goes on.  Probes run when guests first show up, every
 *   MIRROR_GUEST_PROBE_EVERY_NS while they stay, and when the job's copy
 *   mode changed (write-blocking adds the target to their latency).
 * - Every MIRROR_GUEST_PERIOD_NS the mean latency of the guest requests
 *   that ended in the period is compared with the goal: above it, the
 *   pace halves (the first time: half the rate the job copied at); at or
 *   below it, the pace grows by a quarter, up to twice what the job
 *   achieves; a period in which no guest request ended nor was in
 *   flight (the guests are idle) doubles it, and lifts it once it is
 *   twice what the job achieves: the job runs free again.
 * - The floor: the pace never goes below the minimum copy rate
 *   (--min-copy-rate), nor below MIRROR_GUEST_CONVERGE_PCT percent of
 *   the rate at which guests dirty what was copied (a job slower than
 *   that never converges).  So a busy guest slows the migration down,
 *   never stops it; auto-converge remains the way to finish against a
 *   guest that writes faster than the job can copy at all.
 *
 * A leaf: it owns its settings, the guests' counters, the pace and its
 * probe's timer; it learns the rest from its owner.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_GUEST_H
#define BLOCK_MIRROR_GUEST_H

#include "util/rate-meter.h"
#include "util/ratelimit.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#define MIRROR_GUEST_PERIOD_NS          (10 * 1000 * 1000LL)
#define MIRROR_GUEST_GOAL_PCT           150
#define MIRROR_GUEST_SLACK_NS           (50 * 1000LL)
#define MIRROR_GUEST_PROBE_REQS         16
#define MIRROR_GUEST_PROBE_NS           (20 * 1000 * 1000LL)
#define MIRROR_GUEST_PROBE_MAX_NS       (100 * 1000 * 1000LL)
#define MIRROR_GUEST_PROBE_EVERY_NS     (2000 * 1000 * 1000LL)
#define MIRROR_GUEST_CONVERGE_PCT       125
#define MIRROR_GUEST_OP_MAX             (256 * 1024LL)
#define MIRROR_GUEST_PACE_SLICE_NS      (1000 * 1000LL)

typedef struct MirrorGuestOwner {
    /* The job's own operations in flight (a probe waits for none). */
    int (*in_flight)(void *opaque);
    /* The pace rose or a probe ended: the job may start operations. */
    void (*kick)(void *opaque);
    /* Bytes per second guests newly dirty (what the job copied). */
    double (*dirty_rate)(void *opaque, int64_t now_ns);
} MirrorGuestOwner;

typedef enum MirrorGuestProbe {
    MIRROR_GUEST_PROBE_NONE,
    MIRROR_GUEST_PROBE_DRAIN,   /* waiting for the job's operations */
    MIRROR_GUEST_PROBE_MEASURE, /* timing guest requests without them */
} MirrorGuestProbe;

typedef struct MirrorGuest {
    const MirrorGuestOwner *owner;
    void *opaque;

    /* Settings. */
    bool on;                    /* adapt (else only count the guests) */
    int64_t min_copy_rate;      /* bytes/s, the least floor */

    /* The job's share: a pace in bytes/s (0: none). */
    double pace;
    double floor;               /* bytes/s: the least pace now */
    RateLimit pacer;

    /* The guests. */
    int in_flight;
    uint64_t requests;          /* ended, ever */
    RateMeter byte_rate;        /* bytes/s of requests that ended */
    RateMeter req_rate;         /* requests/s (counted as 1 byte each) */
    int64_t latency_ns;         /* mean of the last period with requests */
    int64_t base_ns;            /* mean without the job; 0: unknown */

    /* The current period. */
    int64_t period_start_ns;
    uint64_t period_reqs;
    int64_t period_lat_ns;      /* sum */
    bool period_busy;           /* a request was in flight in it */
    int64_t period_copied;      /* the job's COPY bytes that ended */
    double copy_rate;           /* bytes/s, averaged over periods */

    /* The probe. */
    MirrorGuestProbe probe;
    int64_t probe_start_ns;     /* requests from then on are measured */
    uint64_t probe_started;     /* ... that began before its deadline */
    uint64_t probe_reqs;        /* ... that ended */
    int64_t probe_lat_ns;
    int64_t next_probe_ns;      /* 0: at the next guest request */
    GSource *probe_timer;

    uint64_t probes;            /* finished, ever (tests) */
    uint64_t cuts;              /* times the pace was cut (tests) */
} MirrorGuest;

/*
 * Set @g up: @on adapts the job's share to the guests (off: they are
 * only counted and timed); @min_copy_rate in bytes/s is the least pace.
 * No pace at first.
 */
void mirror_guest_init(MirrorGuest *g, bool on, int64_t min_copy_rate,
                       const MirrorGuestOwner *owner, void *opaque,
                       int64_t now_ns);

/* Stop the probe's timer (the job finished, or is freed). */
void mirror_guest_stop(MirrorGuest *g);

/*
 * Times are clock_ns() values the caller passes in (@now_ns), so that
 * tests can run the policy on a clock of their own.
 */

/* A guest request arrives at the filter at @now_ns. */
void mirror_guest_begin(MirrorGuest *g, int64_t now_ns);

/* The guest request of @bytes that began at @start_ns ended at @now_ns. */
void mirror_guest_done(MirrorGuest *g, int64_t start_ns, int64_t now_ns,
                       int64_t bytes);

/* The job's COPY operation of @bytes ended. */
void mirror_guest_copied(MirrorGuest *g, int64_t bytes);

/*
 * May the job start an operation now (no probe holds it back)?  Also
 * ends the period when it is due.
 */
bool mirror_guest_may_issue(MirrorGuest *g, int64_t now_ns);

/* The largest COPY operation the job may start now (INT64_MAX: its
 * own chunk size). */
int64_t mirror_guest_op_max(const MirrorGuest *g);

/* Measure the base again at the next guest request (the copy mode
 * changed). */
void mirror_guest_reprobe(MirrorGuest *g);

/*
 * The job would start a COPY of @bytes now: 0 when the pace allows it
 * (and it is counted), else the nanoseconds to wait before asking again
 * (at most one period, so that idle guests are noticed in time).
 */
int64_t mirror_guest_delay(MirrorGuest *g, int64_t now_ns, int64_t bytes);

#endif /* BLOCK_MIRROR_GUEST_H */
