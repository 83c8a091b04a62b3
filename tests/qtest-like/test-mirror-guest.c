/*
 * Guest-first's policy (block/mirror/mirror-guest.h), run on a clock of
 * the test's own: the probe of the guests' latency without the job, the
 * pace halving above the goal and growing below it, the floor of
 * --min-copy-rate and of the dirty rate, idle guests, the operations'
 * size while paced, slow guests' probes, and off.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-guest.h"

#include <glib.h>

#define US          1000LL
#define MS          (1000 * US)
#define KiB         1024LL
#define MiB         (1024 * KiB)

typedef struct Fixture {
    MirrorGuest g;
    int job_in_flight;          /* what the owner reports */
    double dirty_rate;          /* ... */
    int kicks;
    int64_t now;                /* the test's clock */
} Fixture;

static int fx_in_flight(void *opaque)
{
    Fixture *f = opaque;

    return f->job_in_flight;
}

static void fx_kick(void *opaque)
{
    Fixture *f = opaque;

    f->kicks++;
}

static double fx_dirty_rate(void *opaque, int64_t now_ns)
{
    Fixture *f = opaque;

    return f->dirty_rate;
}

static const MirrorGuestOwner fx_owner = {
    .in_flight  = fx_in_flight,
    .kick       = fx_kick,
    .dirty_rate = fx_dirty_rate,
};

static void fx_init(Fixture *f, bool on, int64_t min_copy_rate)
{
    *f = (Fixture) { .now = 1000 * MS };
    mirror_guest_init(&f->g, on, min_copy_rate, &fx_owner, f, f->now);
}

/* One guest request of 64 KiB taking @lat, then the clock moves on by
 * @gap; the job copies @copied bytes meanwhile. */
static void fx_request(Fixture *f, int64_t lat, int64_t gap, int64_t copied)
{
    int64_t start = f->now;

    mirror_guest_begin(&f->g, start);
    f->now += lat;
    mirror_guest_copied(&f->g, copied);
    mirror_guest_done(&f->g, start, f->now, 64 * KiB);
    f->now += gap;
}

/* The first guest request starts a probe: the job may not issue until
 * its operations ended and MIRROR_GUEST_PROBE_REQS requests were timed;
 * their mean is the base. */
static void fx_probe(Fixture *f, int64_t lat)
{
    uint64_t probes = f->g.probes;

    f->job_in_flight = 3;
    mirror_guest_begin(&f->g, f->now);
    g_assert_cmpint(f->g.probe, ==, MIRROR_GUEST_PROBE_DRAIN);
    g_assert_false(mirror_guest_may_issue(&f->g, f->now));
    /* That request was in the job's company: it is not measured. */
    f->now += 5 * lat;
    mirror_guest_done(&f->g, f->now - 5 * lat, f->now, 64 * KiB);
    f->job_in_flight = 0;
    g_assert_false(mirror_guest_may_issue(&f->g, f->now));
    g_assert_cmpint(f->g.probe, ==, MIRROR_GUEST_PROBE_MEASURE);
    for (int i = 0; i < MIRROR_GUEST_PROBE_REQS; i++) {
        g_assert_cmpint(f->g.probe, ==, MIRROR_GUEST_PROBE_MEASURE);
        fx_request(f, lat, 0, 0);
    }
    g_assert_cmpint(f->g.probe, ==, MIRROR_GUEST_PROBE_NONE);
    g_assert_cmpuint(f->g.probes, ==, probes + 1);
    g_assert_cmpint(f->g.base_ns, ==, lat);
    g_assert_true(mirror_guest_may_issue(&f->g, f->now));
}

/* Guests at @lat for one whole period, the job copying at @rate. */
static void fx_period(Fixture *f, int64_t lat, int64_t rate)
{
    int n = 10;
    int64_t step = MIRROR_GUEST_PERIOD_NS / n;

    for (int i = 0; i < n; i++) {
        fx_request(f, lat, step - lat, rate * step / 1000000000);
    }
    mirror_guest_may_issue(&f->g, f->now);
}

static int64_t fx_goal(Fixture *f)
{
    return f->g.base_ns * MIRROR_GUEST_GOAL_PCT / 100 +
           MIRROR_GUEST_SLACK_NS;
}

/* Above the goal the pace halves, from half the copy rate, down to the
 * floor; the cap follows the pace. */
static void test_cut_to_floor(void)
{
    Fixture f;
    int64_t floor = 32 * MiB;
    double last;

    fx_init(&f, true, floor);
    fx_probe(&f, 100 * US);
    g_assert_cmpfloat(f.g.pace, ==, 0);
    g_assert_cmpint(mirror_guest_op_max(&f.g), ==, INT64_MAX);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 64 * MiB), ==, 0);

    /* Latency at the goal: no pace. */
    for (int i = 0; i < 5; i++) {
        fx_period(&f, fx_goal(&f), 1024 * MiB);
    }
    g_assert_cmpfloat(f.g.pace, ==, 0);
    g_assert_cmpuint(f.g.cuts, ==, 0);

    /* Above it: cut, and cut again, never below the floor. */
    fx_period(&f, fx_goal(&f) + 1, 1024 * MiB);
    g_assert_cmpuint(f.g.cuts, ==, 1);
    g_assert_cmpfloat(f.g.pace, >, 0);
    g_assert_cmpfloat(f.g.pace, <=, f.g.copy_rate / 2 + 1);
    last = f.g.pace;
    g_assert_cmpint(mirror_guest_op_max(&f.g), ==, MIRROR_GUEST_OP_MAX);
    for (int i = 0; i < 20; i++) {
        fx_period(&f, 10 * fx_goal(&f), (int64_t)f.g.pace);
        g_assert_cmpfloat(f.g.pace, <=, last);
        g_assert_cmpfloat(f.g.pace, >=, floor);
        last = f.g.pace;
    }
    g_assert_cmpfloat(f.g.pace, ==, floor);
    g_assert_cmpuint(f.g.cuts, >=, 2);
    g_assert_cmpint(f.g.latency_ns, ==, 10 * fx_goal(&f));
}

/* The floor follows the guests' dirty rate: the job always outpaces
 * them, so that it converges. */
static void test_floor_dirty_rate(void)
{
    Fixture f;

    fx_init(&f, true, 1 * MiB);
    fx_probe(&f, 100 * US);
    f.dirty_rate = 200 * MiB;
    for (int i = 0; i < 20; i++) {
        fx_period(&f, 10 * fx_goal(&f), (int64_t)(f.g.pace ? f.g.pace
                                                           : 1024 * MiB));
        g_assert_cmpfloat(f.g.pace, >=,
                          200.0 * MiB * MIRROR_GUEST_CONVERGE_PCT / 100);
    }
    g_assert_cmpfloat(f.g.pace, ==,
                      200.0 * MiB * MIRROR_GUEST_CONVERGE_PCT / 100);
    /* Guests that stop dirtying lower the floor to --min-copy-rate. */
    f.dirty_rate = 0;
    for (int i = 0; i < 20; i++) {
        fx_period(&f, 10 * fx_goal(&f), (int64_t)f.g.pace);
    }
    g_assert_cmpfloat(f.g.pace, ==, 1 * MiB);
}

/* Requests in flight for a whole period and none ended count as late. */
static void test_stuck_guest_cuts(void)
{
    Fixture f;

    fx_init(&f, true, 1);
    fx_probe(&f, 100 * US);
    fx_period(&f, fx_goal(&f), 512 * MiB);
    mirror_guest_begin(&f.g, f.now);
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpuint(f.g.cuts, ==, 1);
    g_assert_cmpfloat(f.g.pace, >, 0);
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpuint(f.g.cuts, ==, 2);
}

/* At or below the goal the pace grows by a quarter per period, up to
 * twice what the job achieves.  Idle guests double it, and lift it from
 * there; paced, operations are at most MIRROR_GUEST_OP_MAX. */
static void test_grow_back(void)
{
    Fixture f;
    double last;
    int periods = 0;

    fx_init(&f, true, 1 * MiB);
    fx_probe(&f, 200 * US);
    fx_period(&f, 2 * fx_goal(&f), 800 * MiB);
    g_assert_cmpuint(f.g.cuts, ==, 1);
    for (int i = 0; i < 6; i++) {
        fx_period(&f, 2 * fx_goal(&f), (int64_t)f.g.pace);
    }
    last = f.g.pace;
    g_assert_cmpfloat(last, >, 0);
    /* Below the goal: +25% per period. */
    fx_period(&f, fx_goal(&f) / 2, (int64_t)last);
    g_assert_cmpfloat(f.g.pace, ==, last * 5 / 4);
    last = f.g.pace;

    /* Idle: no request ends nor is in flight in a period: doubled. */
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpfloat(f.g.pace, ==, last * 2);
    g_assert_cmpint(f.kicks, >, 0);

    /* Guests stay below the goal while the job copies fast: the pace
     * grows to twice what the job achieves, never lifted while busy. */
    while (periods++ < 100) {
        fx_period(&f, fx_goal(&f) / 2, 2048 * MiB);
        g_assert_cmpfloat(f.g.pace, >, 0);
        g_assert_cmpfloat(f.g.pace, <=, 2 * f.g.copy_rate);
        g_assert_cmpint(mirror_guest_op_max(&f.g), ==, MIRROR_GUEST_OP_MAX);
    }
    g_assert_cmpfloat(f.g.pace, >, 2 * 2000.0 * MiB);

    /* Idle: lifted, the whole window, operations of any size. */
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpfloat(f.g.pace, ==, 0);
    g_assert_cmpint(mirror_guest_op_max(&f.g), ==, INT64_MAX);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 64 * MiB), ==, 0);
}

/* The pace spaces the job's COPY operations out at its rate. */
static void test_pacer(void)
{
    Fixture f;
    int64_t start, delay, sent = 0;

    fx_init(&f, true, 64 * MiB);
    fx_probe(&f, 100 * US);
    for (int i = 0; i < 30 && f.g.pace != 64 * MiB; i++) {
        fx_period(&f, 10 * fx_goal(&f), 64 * MiB);
    }
    g_assert_cmpfloat(f.g.pace, ==, 64 * MiB);
    /* One second's worth of 1 MiB operations, asked for as soon as each
     * may go: they take a second (within one slice and one op). */
    start = f.now;
    while (sent < 64 * MiB) {
        delay = mirror_guest_delay(&f.g, f.now, 1 * MiB);
        if (delay > 0) {
            f.now += delay;
            continue;
        }
        sent += 1 * MiB;
    }
    g_assert_cmpint(f.now - start, >=, 1000 * MS - 2 * 16 * MS);
    g_assert_cmpint(f.now - start, <=, 1000 * MS + MIRROR_GUEST_PACE_SLICE_NS);
}

/* A probe ends after MIRROR_GUEST_PROBE_EVERY_NS again, and measures
 * only requests that arrive after the job's operations ended. */
static void test_probe_again(void)
{
    Fixture f;

    fx_init(&f, true, 1);
    fx_probe(&f, 100 * US);
    fx_period(&f, fx_goal(&f), 512 * MiB);
    f.now += MIRROR_GUEST_PROBE_EVERY_NS;
    fx_probe(&f, 300 * US);
    g_assert_cmpuint(f.g.probes, ==, 2);
}

/* Off: no probe, no pace, the whole window; the guests are counted. */
static void test_off(void)
{
    Fixture f;

    fx_init(&f, false, 1);
    f.job_in_flight = 5;
    for (int i = 0; i < 100; i++) {
        fx_request(&f, 10 * MS, MIRROR_GUEST_PERIOD_NS, 0);
        g_assert_true(mirror_guest_may_issue(&f.g, f.now));
    }
    g_assert_cmpint(f.g.probe, ==, MIRROR_GUEST_PROBE_NONE);
    g_assert_cmpuint(f.g.probes, ==, 0);
    g_assert_cmpuint(f.g.cuts, ==, 0);
    g_assert_cmpuint(f.g.requests, ==, 100);
    g_assert_cmpint(f.g.latency_ns, ==, 10 * MS);
    g_assert_cmpint(mirror_guest_op_max(&f.g), ==, INT64_MAX);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 1 * MiB), ==, 0);
}

/* A slow source: the probe waits for the requests that arrived in it to
 * end, up to MIRROR_GUEST_PROBE_MAX_NS. */
static void test_probe_slow_guest(void)
{
    Fixture f;
    int64_t start;

    fx_init(&f, true, 1);
    f.job_in_flight = 1;
    mirror_guest_begin(&f.g, f.now);
    f.job_in_flight = 0;
    f.now += US;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpint(f.g.probe, ==, MIRROR_GUEST_PROBE_MEASURE);
    /* That first request is not measured; one arrives in the probe and
     * takes 60 ms, longer than the probe's first MIRROR_GUEST_PROBE_NS. */
    mirror_guest_done(&f.g, f.now - US, f.now, 4 * KiB);
    start = f.now;
    mirror_guest_begin(&f.g, start);
    f.now += MIRROR_GUEST_PROBE_NS;
    g_assert_false(mirror_guest_may_issue(&f.g, f.now));
    f.now = start + 60 * MS;
    mirror_guest_done(&f.g, start, f.now, 4 * KiB);
    g_assert_cmpint(f.g.probe, ==, MIRROR_GUEST_PROBE_NONE);
    g_assert_cmpint(f.g.base_ns, ==, 60 * MS);

    /* A guest whose request never ends within MIRROR_GUEST_PROBE_MAX_NS
     * does not hold the job for longer. */
    mirror_guest_reprobe(&f.g);
    f.job_in_flight = 1;
    mirror_guest_begin(&f.g, f.now);
    mirror_guest_done(&f.g, f.now, f.now, 4 * KiB);
    f.job_in_flight = 0;
    f.now += US;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpint(f.g.probe, ==, MIRROR_GUEST_PROBE_MEASURE);
    start = f.now;
    mirror_guest_begin(&f.g, start);
    f.now = start + MIRROR_GUEST_PROBE_MAX_NS;
    g_assert_true(mirror_guest_may_issue(&f.g, f.now));
    g_assert_cmpint(f.g.base_ns, ==, 60 * MS);
    mirror_guest_stop(&f.g);
}

/* A pace that rises starts afresh: a long wait charged at a slow pace
 * does not hold the job back, and no wait is longer than a period. */
static void test_pace_rise_resets(void)
{
    Fixture f;

    fx_init(&f, true, 1);
    fx_probe(&f, 100 * US);
    fx_period(&f, fx_goal(&f), 64 * MiB);
    for (int i = 0; i < 40; i++) {
        fx_period(&f, 10 * fx_goal(&f), 0);
    }
    g_assert_cmpfloat(f.g.pace, <, 1 * MiB);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 1 * MiB), ==, 0);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 1 * MiB), ==,
                    MIRROR_GUEST_PERIOD_NS);
    /* Idle guests (a period without requests, after the one that ends
     * the last of them): the pace doubles, and the charge is forgotten. */
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    f.now += MIRROR_GUEST_PERIOD_NS;
    mirror_guest_may_issue(&f.g, f.now);
    g_assert_cmpint(mirror_guest_delay(&f.g, f.now, 1 * MiB), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror-guest/cut-to-floor", test_cut_to_floor);
    g_test_add_func("/mirror-guest/floor-dirty-rate",
                    test_floor_dirty_rate);
    g_test_add_func("/mirror-guest/stuck-guest-cuts", test_stuck_guest_cuts);
    g_test_add_func("/mirror-guest/grow-back", test_grow_back);
    g_test_add_func("/mirror-guest/pacer", test_pacer);
    g_test_add_func("/mirror-guest/probe-again", test_probe_again);
    g_test_add_func("/mirror-guest/off", test_off);
    g_test_add_func("/mirror-guest/probe-slow-guest",
                    test_probe_slow_guest);
    g_test_add_func("/mirror-guest/pace-rise-resets",
                    test_pace_rise_resets);
    return g_test_run();
}
