/*
 * Guest-first: the job's window follows the guests' latency (see
 * mirror-guest.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-guest.h"
#include "util/cutils.h"

#include <inttypes.h>

/* How much of each period's copy rate goes into the average. */
#define MIRROR_GUEST_RATE_WEIGHT        0.25

void mirror_guest_init(MirrorGuest *g, bool on, int64_t min_copy_rate,
                       int64_t granule, int64_t max_window,
                       const MirrorGuestOwner *owner, void *opaque,
                       int64_t now)
{
    *g = (MirrorGuest) {
        .owner = owner,
        .opaque = opaque,
        .on = on,
        .min_copy_rate = min_copy_rate,
        .floor = min_copy_rate,
        .min_cap = granule,
        .max_cap = MAX(max_window, granule),
        .period_start_ns = now,
    };
    g->cap = g->max_cap;
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

static gboolean mirror_guest_probe_timeout(gpointer opaque)
{
    MirrorGuest *g = opaque;

    g_source_unref(g->probe_timer);
    g->probe_timer = NULL;
    if (g->probe == MIRROR_GUEST_PROBE_MEASURE) {
        mirror_guest_probe_end(g, clock_ns());
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
        g->probe_reqs = 0;
        g->probe_lat_ns = 0;
        g_assert(!g->probe_timer);
        g->probe_timer = g_timeout_source_new(MIRROR_GUEST_PROBE_NS /
                                              1000000);
        g_source_set_callback(g->probe_timer, mirror_guest_probe_timeout, g,
                              NULL);
        g_source_attach(g->probe_timer, g_main_context_get_thread_default());
    }
    if (g->probe == MIRROR_GUEST_PROBE_MEASURE &&
        (g->probe_reqs >= MIRROR_GUEST_PROBE_REQS ||
         now - g->probe_start_ns >= MIRROR_GUEST_PROBE_NS)) {
        mirror_guest_probe_end(g, now);
    }
}

/* Set the pace to @pace bytes/s (0: none) and the cap that follows.
 * While guests are busy it stays within twice what the job achieves,
 * so that it can always be cut where it bites. */
static void mirror_guest_set_pace(MirrorGuest *g, double pace)
{
    if (pace) {
        pace = MAX(MIN(pace, 2 * MAX(g->copy_rate, g->floor)), g->floor);
    }
    g->pace = pace;
    ratelimit_set_speed(&g->pacer, (uint64_t)pace,
                        MIRROR_GUEST_PACE_SLICE_NS);
    g->cap = pace ? CLAMP((int64_t)(pace * MIRROR_GUEST_WINDOW_NS / 1e9),
                          g->min_cap, g->max_cap)
                  : g->max_cap;
}

/* End the period if it is due, and move the pace. */
static void mirror_guest_update(MirrorGuest *g, int64_t now)
{
    int64_t elapsed = now - g->period_start_ns;
    int64_t goal;

    if (!g->on || g->probe != MIRROR_GUEST_PROBE_NONE ||
        elapsed < MIRROR_GUEST_PERIOD_NS) {
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
        mirror_guest_set_pace(g, (g->pace ? g->pace : g->copy_rate) / 2);
        g->cuts++;
    } else if (g->pace) {
        mirror_guest_set_pace(g, g->pace * 5 / 4);
    }
    g_debug("mirror: guest period: %" PRIu64 " requests, latency %" PRId64
            " ns, goal %" PRId64 " ns, copied %.0f B/s, pace %.0f B/s, cap %"
            PRId64, g->period_reqs, g->latency_ns, goal, g->copy_rate,
            g->pace, g->cap);
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
        start_ns >= g->probe_start_ns) {
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
        return true;
    }
    mirror_guest_probe_step(g, now);
    mirror_guest_update(g, now);
    return g->probe == MIRROR_GUEST_PROBE_NONE;
}

int64_t mirror_guest_cap(const MirrorGuest *g)
{
    return g->on ? g->cap : g->max_cap;
}

int64_t mirror_guest_op_max(const MirrorGuest *g)
{
    return g->on && g->pace ? MIRROR_GUEST_OP_MAX : INT64_MAX;
}

int64_t mirror_guest_delay(MirrorGuest *g, int64_t now, int64_t bytes)
{
    if (!g->on || !g->pace) {
        return 0;
    }
    return ratelimit_calculate_delay(&g->pacer, now, bytes);
}

void mirror_guest_set_max(MirrorGuest *g, int64_t max_window)
{
    max_window = MAX(max_window, g->min_cap);
    if (max_window != g->max_cap) {
        g->max_cap = max_window;
        mirror_guest_set_pace(g, g->pace);
    }
}
