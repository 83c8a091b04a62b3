/*
 * Guest-first: the job's pace follows the guests' latency (see
 * mirror-guest.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-guest.h"
#include "block/block.h"
#include "util/cutils.h"

#include <inttypes.h>

/* How much of each period's copy rate goes into the average. */
#define MIRROR_GUEST_RATE_WEIGHT        0.25

void mirror_guest_init(MirrorGuest *g, bool on, int64_t min_copy_rate,
                       const MirrorGuestOwner *owner, void *opaque,
                       int64_t now)
{
    *g = (MirrorGuest) {
        .owner = owner,
        .opaque = opaque,
        .on = on,
        .min_copy_rate = min_copy_rate,
        .floor = min_copy_rate,
        .period_start_ns = now,
    };
    rate_meter_reset(&g->byte_rate, now);
    rate_meter_reset(&g->req_rate, now);
}

static void mirror_guest_clear_timer(MirrorGuest *g)
{
    if (g->probe_timer) {
        g_source_destroy(g->probe_timer);
        g_source_unref(g->probe_timer);
        g->probe_timer = NULL;
    }
}

void mirror_guest_stop(MirrorGuest *g)
{
    mirror_guest_clear_timer(g);
    g->probe = MIRROR_GUEST_PROBE_NONE;
}

static void mirror_guest_new_period(MirrorGuest *g, int64_t now)
{
    g->period_start_ns = now;
    g->period_reqs = 0;
    g->period_lat_ns = 0;
    g->period_busy = g->in_flight > 0;
    g->period_copied = 0;
}

/* The probe is over: the base is what it measured, if anything. */
static void mirror_guest_probe_end(MirrorGuest *g, int64_t now)
{
    mirror_guest_clear_timer(g);
    if (g->probe_reqs) {
        g->base_ns = MAX(g->probe_lat_ns / (int64_t)g->probe_reqs, 1);
    }
    g_debug("mirror: guest probe: %" PRIu64 " requests, base %" PRId64
            " ns", g->probe_reqs, g->base_ns);
    g->probe = MIRROR_GUEST_PROBE_NONE;
    g->probes++;
    g->next_probe_ns = now + MIRROR_GUEST_PROBE_EVERY_NS;
    mirror_guest_new_period(g, now);
    g->owner->kick(g->opaque);
}

static gboolean mirror_guest_probe_timeout(gpointer opaque);

static void mirror_guest_probe_arm(MirrorGuest *g, int64_t delay_ns)
{
    g_assert(!g->probe_timer);
    g->probe_timer = bdrv_timer_new(delay_ns, mirror_guest_probe_timeout, g);
}

/* Has the probe what it can get?  Enough requests; or its time is up and
 * none of those that arrived in it are still out (a slow source gets
 * until MIRROR_GUEST_PROBE_MAX_NS to answer them). */
static bool mirror_guest_probe_done(MirrorGuest *g, int64_t now)
{
    int64_t age = now - g->probe_start_ns;

    return g->probe_reqs >= MIRROR_GUEST_PROBE_REQS ||
           (age >= MIRROR_GUEST_PROBE_NS &&
            (g->probe_reqs >= g->probe_started ||
             age >= MIRROR_GUEST_PROBE_MAX_NS));
}

static gboolean mirror_guest_probe_timeout(gpointer opaque)
{
    MirrorGuest *g = opaque;
    int64_t now = clock_ns();

    g_source_unref(g->probe_timer);
    g->probe_timer = NULL;
    if (g->probe != MIRROR_GUEST_PROBE_MEASURE) {
        return G_SOURCE_REMOVE;
    }
    if (mirror_guest_probe_done(g, now)) {
        mirror_guest_probe_end(g, now);
    } else {
        mirror_guest_probe_arm(g, MIRROR_GUEST_PROBE_MAX_NS -
                                  (now - g->probe_start_ns));
    }
    return G_SOURCE_REMOVE;
}

/* Move the probe on: from DRAIN to MEASURE once the job's operations
 * ended, and from MEASURE to its end once it has what it needs. */
static void mirror_guest_probe_step(MirrorGuest *g, int64_t now)
{
    if (g->probe == MIRROR_GUEST_PROBE_DRAIN &&
        g->owner->in_flight(g->opaque) == 0) {
        g->probe = MIRROR_GUEST_PROBE_MEASURE;
        g->probe_start_ns = now;
        g->probe_started = 0;
        g->probe_reqs = 0;
        g->probe_lat_ns = 0;
        mirror_guest_probe_arm(g, MIRROR_GUEST_PROBE_NS);
    }
    if (g->probe == MIRROR_GUEST_PROBE_MEASURE &&
        mirror_guest_probe_done(g, now)) {
        mirror_guest_probe_end(g, now);
    }
}

/* Set the pace to @pace bytes/s (0: none).  While guests are busy it
 * stays within twice what the job achieves, so that a cut bites.  A
 * higher pace starts afresh: what a slow one charged does not hold the
 * job back. */
static void mirror_guest_set_pace(MirrorGuest *g, double pace)
{
    if (pace) {
        pace = MAX(MIN(pace, 2 * MAX(g->copy_rate, g->floor)), g->floor);
    }
    if (!pace || pace > g->pace) {
        g->pacer = (RateLimit) { 0 };
    }
    g->pace = pace;
    ratelimit_set_speed(&g->pacer, (uint64_t)pace,
                        MIRROR_GUEST_PACE_SLICE_NS);
}

/* End the period if it is due, and move the pace. */
static void mirror_guest_update(MirrorGuest *g, int64_t now)
{
    int64_t elapsed = now - g->period_start_ns;
    int64_t goal;

    if (g->probe != MIRROR_GUEST_PROBE_NONE ||
        elapsed < MIRROR_GUEST_PERIOD_NS) {
        return;
    }
    if (!g->on) {
        /* Off: the guests are only counted and timed. */
        if (g->period_reqs) {
            g->latency_ns = g->period_lat_ns / (int64_t)g->period_reqs;
        }
        mirror_guest_new_period(g, now);
        return;
    }
    g->copy_rate = g->copy_rate * (1 - MIRROR_GUEST_RATE_WEIGHT) +
                   g->period_copied * 1e9 / elapsed *
                   MIRROR_GUEST_RATE_WEIGHT;
    g->floor = MAX(g->min_copy_rate,
                   g->owner->dirty_rate(g->opaque, now) *
                   MIRROR_GUEST_CONVERGE_PCT / 100);
    if (!g->period_reqs && !g->period_busy) {
        /* Idle guests: give the job its share back quickly, and all of
         * it (no pace) once it is twice what the job achieves. */
        if (g->pace) {
            mirror_guest_set_pace(g, g->pace * 2 >= 2 * MAX(g->copy_rate,
                                                            g->floor)
                                     ? 0 : g->pace * 2);
        }
        mirror_guest_new_period(g, now);
        return;
    }
    if (g->period_reqs) {
        g->latency_ns = g->period_lat_ns / (int64_t)g->period_reqs;
    }
    goal = g->base_ns * MIRROR_GUEST_GOAL_PCT / 100 + MIRROR_GUEST_SLACK_NS;
    if (!g->base_ns) {
        /* The first probe comes first. */
    } else if (!g->period_reqs || g->latency_ns > goal) {
        /* Over the goal, or requests in flight for a whole period and
         * none ended: halve the pace. */
        mirror_guest_set_pace(g, (g->pace ? g->pace
                                           : MAX(g->copy_rate, g->floor)) / 2);
        g->cuts++;
    } else if (g->pace) {
        mirror_guest_set_pace(g, g->pace * 5 / 4);
    }
    g_debug("mirror: guest period: %" PRIu64 " requests, latency %" PRId64
            " ns, goal %" PRId64 " ns, copied %.0f B/s, pace %.0f B/s",
            g->period_reqs, g->latency_ns, goal, g->copy_rate, g->pace);
    mirror_guest_new_period(g, now);
}

void mirror_guest_begin(MirrorGuest *g, int64_t now)
{
    g->in_flight++;
    g->period_busy = true;
    if (g->on && g->probe == MIRROR_GUEST_PROBE_NONE &&
        now >= g->next_probe_ns) {
        g->probe = MIRROR_GUEST_PROBE_DRAIN;
        mirror_guest_probe_step(g, now);
    }
    if (g->probe == MIRROR_GUEST_PROBE_MEASURE &&
        now < g->probe_start_ns + MIRROR_GUEST_PROBE_NS) {
        g->probe_started++;
    }
}

void mirror_guest_done(MirrorGuest *g, int64_t start_ns, int64_t now,
                       int64_t bytes)
{
    int64_t lat = now - start_ns;
    double pace = g->pace;

    g_assert(g->in_flight > 0);
    g->in_flight--;
    g->requests++;
    rate_meter_add(&g->byte_rate, now, bytes);
    rate_meter_add(&g->req_rate, now, 1);
    g->period_reqs++;
    g->period_lat_ns += lat;
    if (g->probe == MIRROR_GUEST_PROBE_MEASURE &&
        start_ns >= g->probe_start_ns &&
        start_ns < g->probe_start_ns + MIRROR_GUEST_PROBE_NS) {
        g->probe_reqs++;
        g->probe_lat_ns += lat;
    }
    mirror_guest_probe_step(g, now);
    mirror_guest_update(g, now);
    if (pace && (!g->pace || g->pace > pace)) {
        g->owner->kick(g->opaque);
    }
}

void mirror_guest_copied(MirrorGuest *g, int64_t bytes)
{
    g->period_copied += bytes;
}

bool mirror_guest_may_issue(MirrorGuest *g, int64_t now)
{
    if (!g->on) {
        mirror_guest_update(g, now);
        return true;
    }
    mirror_guest_probe_step(g, now);
    mirror_guest_update(g, now);
    return g->probe == MIRROR_GUEST_PROBE_NONE;
}

int64_t mirror_guest_op_max(const MirrorGuest *g)
{
    return g->on && g->pace ? MIRROR_GUEST_OP_MAX : INT64_MAX;
}

int64_t mirror_guest_delay(MirrorGuest *g, int64_t now, int64_t bytes)
{
    int64_t delay;

    if (!g->on || !g->pace) {
        return 0;
    }
    delay = ratelimit_calculate_delay(&g->pacer, now, bytes);
    return MIN(delay, MIRROR_GUEST_PERIOD_NS);
}

void mirror_guest_reprobe(MirrorGuest *g)
{
    g->next_probe_ns = 0;
}
