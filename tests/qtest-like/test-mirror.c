/*
 * Unit tests of the mirror job's copy engine with the null driver:
 * coalescing, zero extents, in-order writes, errors, cancel, pause, and
 * the job's states and events.  The limits are in test-mirror-limits.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/mirror/mirror.h"
#include "block/mirror/mirror-top.h"
#include "block/null.h"
#include "tests/qtest-like/mirror-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>

static void test_coalesce(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;

    /* 64 KiB granules coalesce into 1 MiB operations. */
    mirror_fixture_init(&f, "null:size=8M,record=on", "null:size=8M,record=on",
                        &p);
    mirror_fixture_run(&f);
    g_assert_cmpuint(null_get_records(f.src)->len, ==, 8 + 1); /* + status */
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    mirror_fixture_destroy(&f);
}

static void test_unaligned_length(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;
    NullStats st;

    /* 1025 KiB + 1 byte: not a multiple of the granule or the chunk. */
    mirror_fixture_init(&f, "null:size=1049601,record=on", "null:size=1049601",
                        &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(mirror_fixture_op_bytes(f.src, NULL_OP_READ), ==, 1049601);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
    mirror_fixture_destroy(&f);
}

static void test_zero_length(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;

    mirror_fixture_init(&f, "null:size=0", "null:size=0", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(f.ev.ready_count, ==, 1);
    g_assert_cmpint(f.ev.completed_count, ==, 1);
    mirror_fixture_destroy(&f);
}

static void test_zero_extents(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;

    /* Alternating 1 MiB data / zero: zeroes become write-zeroes. */
    mirror_fixture_init(&f, "null:size=16M,extents=alternate:1M,record=on",
                        "null:size=16M,record=on", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(mirror_fixture_op_bytes(f.src, NULL_OP_READ), ==, 8 * MiB);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_ZERO), ==, 8 * MiB);
    mirror_fixture_destroy(&f);
}

static void test_zero_extents_target_zero(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;
    MirrorStats ms;

    /* A target known to read as zero: zero extents need no I/O. */
    p.target_is_zero = true;
    mirror_fixture_init(&f, "null:size=16M,extents=alternate:1M,record=on",
                        "null:size=16M,record=on", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_ZERO), ==, 0);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    mirror_get_stats(f.job, &ms);
    g_assert_cmpint(ms.bytes_skipped, ==, 8 * MiB);
    g_assert_cmpint(ms.bytes_copied, ==, 8 * MiB);
    mirror_fixture_destroy(&f);
}

static void test_zero_extent_inside_granule(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;

    /* 48 KiB runs against 64 KiB granules: mixed granules are copied. */
    mirror_fixture_init(&f, "null:size=1536K,extents=alternate:48K,record=on",
                        "null:size=1536K,record=on", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE) +
                    mirror_fixture_op_bytes(f.dst, NULL_OP_ZERO), ==,
                    1536 * KiB);
    mirror_fixture_destroy(&f);
}

static void check_write_order(bool in_order)
{
    MirrorParams p = mirror_fixture_params(16, 64 * KiB, 0);
    MirrorFixture f;
    GArray *recs;
    int64_t last = -1;
    bool ascending = true;

    p.in_order = in_order;
    mirror_fixture_init(&f, "null:size=8M,latency-ns=10000,jitter-ns=2000000",
                        "null:size=8M,record=on", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    recs = null_get_records(f.dst);
    for (guint i = 0; i < recs->len; i++) {
        NullRecord *r = &g_array_index(recs, NullRecord, i);

        if (r->op == NULL_OP_WRITE) {
            ascending &= r->offset > last;
            last = r->offset;
        }
    }
    /* With random read latency, only the sequencer keeps writes ordered. */
    g_assert_true(ascending == in_order);
    mirror_fixture_destroy(&f);
}

static void test_order_in_order(void)
{
    check_write_order(true);
}

static void test_order_out_of_order(void)
{
    check_write_order(false);
}

static void check_error(const char *src, const char *dst, bool is_read)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    const char *detail;
    MirrorFixture f;
    MirrorStats ms;
    JobEvent *e;

    mirror_fixture_init(&f, src, dst, &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, -EIO);
    g_assert_cmpint(f.ev.completed_count, ==, 1);
    g_assert_cmpint(f.ev.error_count, ==, 1);
    for (guint i = 0; i < f.ev.events->len; i++) {
        e = &g_array_index(f.ev.events, JobEvent, i);
        if (e->type == JOB_EVENT_ERROR) {
            g_assert_cmpint(e->is_read, ==, is_read);
            g_assert_cmpint(e->action, ==, BLOCK_ERROR_ACTION_REPORT);
        }
    }
    detail = mirror_get_error_detail(f.job);
    g_assert_nonnull(detail);
    g_assert_nonnull(strstr(detail, "offset 5242880"));
    g_assert_nonnull(strstr(detail, is_read ? "read" : "write"));
    /* The failed range is dirty again: nothing claims it was copied. */
    mirror_get_stats(f.job, &ms);
    g_assert_cmpint(ms.dirty_bytes, >=, MiB);
    {
        static const JobStatus expect[] = {
            JOB_STATUS_RUNNING, JOB_STATUS_ABORTING, JOB_STATUS_CONCLUDED,
            JOB_STATUS_NULL,
        };
        g_assert_cmpmem(f.ev.statuses->data,
                        f.ev.statuses->len * sizeof(JobStatus), expect,
                        sizeof(expect));
    }
    mirror_fixture_destroy(&f);
}

static void test_error_read(void)
{
    check_error("null:size=16M,error-op=read,error-offset=5M",
                "null:size=16M", true);
}

static void test_error_write(void)
{
    check_error("null:size=16M",
                "null:size=16M,error-op=write,error-offset=5M", false);
}

static void test_states_success(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    static const JobStatus expect[] = {
        JOB_STATUS_RUNNING, JOB_STATUS_READY, JOB_STATUS_WAITING,
        JOB_STATUS_PENDING, JOB_STATUS_CONCLUDED, JOB_STATUS_NULL,
    };
    MirrorFixture f;

    mirror_fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    mirror_fixture_run(&f);
    g_assert_cmpmem(f.ev.statuses->data,
                    f.ev.statuses->len * sizeof(JobStatus), expect,
                    sizeof(expect));
    mirror_fixture_destroy(&f);
}

static gboolean cancel_cb(gpointer opaque)
{
    MirrorFixture *f = opaque;
    g_autoptr(GError) err = NULL;

    g_assert_true(job_user_cancel(f->job, false, &err));
    return G_SOURCE_REMOVE;
}

static void test_cancel_before_ready(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    MirrorFixture f;
    NullStats st;

    mirror_fixture_init(&f, "null:size=1G,latency-ns=1000000",
                        "null:size=1G", &p);
    job_start(f.job);
    g_idle_add(cancel_cb, &f);
    test_run_until(&f.ev.concluded, 60);
    /* A soft cancel before READY is a force cancel. */
    g_assert_cmpint(f.job->ret, ==, -ECANCELED);
    g_assert_cmpint(f.ev.cancelled_count, ==, 1);
    g_assert_cmpint(f.ev.completed_count, ==, 0);
    g_assert_cmpint(f.ev.ready_count, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.in_flight, ==, 0);
    g_assert_cmpuint(st.bytes[NULL_OP_READ], <, 64 * MiB);
    mirror_fixture_destroy(&f);
}

typedef struct PauseCtx {
    MirrorFixture *f;
    bool paused;
    uint64_t requests_at_pause;
} PauseCtx;

static void pause_listener(Job *job, const JobEvent *e, void *opaque)
{
    PauseCtx *pc = opaque;

    if (e->type == JOB_EVENT_STATUS_CHANGE &&
        e->status == JOB_STATUS_PAUSED) {
        NullStats st;

        null_get_stats(pc->f->src, &st);
        g_assert_cmpuint(st.in_flight, ==, 0);
        pc->requests_at_pause = st.requests[NULL_OP_READ];
        pc->paused = true;
    }
}

static gboolean pause_cb(gpointer opaque)
{
    PauseCtx *pc = opaque;
    g_autoptr(GError) err = NULL;

    g_assert_true(job_user_pause(pc->f->job, &err));
    g_assert_false(job_user_pause(pc->f->job, &err));
    g_assert_cmpstr(err->message, ==, "Job is already paused");
    return G_SOURCE_REMOVE;
}

static void test_pause_resume(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    PauseCtx pc = { 0 };
    MirrorFixture f;
    NullStats st;

    mirror_fixture_init(&f, "null:size=64M,latency-ns=200000", "null:size=64M",
                        &p);
    pc.f = &f;
    job_add_listener(f.job, pause_listener, &pc);
    job_start(f.job);
    g_idle_add(pause_cb, &pc);
    test_run_until(&pc.paused, 60);
    g_assert_cmpint(f.job->status, ==, JOB_STATUS_PAUSED);
    /* Nothing is issued while paused: spin the loop a little. */
    for (int i = 0; i < 100; i++) {
        g_main_context_iteration(NULL, FALSE);
    }
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.requests[NULL_OP_READ], ==, pc.requests_at_pause);
    g_assert_true(job_user_resume(f.job, &err));
    test_run_until(&f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.bytes[NULL_OP_READ], ==, 64 * MiB);
    mirror_fixture_destroy(&f);
}

/* ---- a target that reconnected: what it acknowledged is copied again */

typedef struct RecopyCtx {
    MirrorFixture *f;
    int64_t pause_at;           /* pause once the target wrote this much */
    bool paused;
} RecopyCtx;

/* Bytes the target received (data and zeroes). */
static int64_t target_written(MirrorFixture *f)
{
    NullStats st;

    null_get_stats(f->dst, &st);
    return st.bytes[NULL_OP_WRITE] + st.bytes[NULL_OP_ZERO];
}

static void recopy_listener(Job *job, const JobEvent *e, void *opaque)
{
    RecopyCtx *rc = opaque;

    if (e->type == JOB_EVENT_STATUS_CHANGE &&
        e->status == JOB_STATUS_PAUSED) {
        rc->paused = true;
    }
}

static gboolean recopy_poll_cb(gpointer opaque)
{
    RecopyCtx *rc = opaque;
    g_autoptr(GError) err = NULL;

    if (target_written(rc->f) < rc->pause_at) {
        return G_SOURCE_CONTINUE;
    }
    g_assert_true(job_user_pause(rc->f->job, &err));
    return G_SOURCE_REMOVE;
}

/* The target's node says it reconnected (as block/nbd-reconnect.c). */
static void target_reconnected(MirrorFixture *f)
{
    BdrvEvent ev = { .type = BDRV_EVENT_RECONNECTED };

    bdrv_notify_event(f->dst, &ev);
}

/*
 * Before any flush: every byte the target acknowledged is written again
 * after the reconnect, exactly once more, and nothing else is.
 */
static void test_reconnect_recopy(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    RecopyCtx rc = { 0 };
    MirrorFixture f;
    int64_t acked;
    NullStats st;

    mirror_fixture_init(&f, "null:size=64M,latency-ns=200000",
                        "null:size=64M", &p);
    rc.f = &f;
    rc.pause_at = 8 * MiB;
    job_add_listener(f.job, recopy_listener, &rc);
    job_start(f.job);
    g_timeout_add(1, recopy_poll_cb, &rc);
    test_run_until(&rc.paused, 60);
    /* Paused: nothing in flight, no flush yet; all of it unflushed. */
    acked = target_written(&f);
    null_get_stats(f.dst, &st);
    g_assert_cmpuint(st.requests[NULL_OP_FLUSH], ==, 0);
    g_assert_cmpint(acked, >=, 8 * MiB);
    g_assert_cmpint(acked, <, 64 * MiB);
    target_reconnected(&f);
    g_assert_true(job_user_resume(f.job, &err));
    test_run_until(&f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(target_written(&f), ==, 64 * MiB + acked);
    mirror_fixture_destroy(&f);
}

/*
 * After a flush that completed without a reconnect: nothing is copied
 * again, but the target is flushed again before completion.
 */
static void test_reconnect_after_flush(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    MirrorFixture f;
    NullStats st;
    uint64_t flushes;

    p.auto_complete = false;
    mirror_fixture_init(&f, "null:size=16M", "null:size=16M", &p);
    job_start(f.job);
    while (!f.ev.ready_count) {
        g_main_context_iteration(NULL, TRUE);
    }
    null_get_stats(f.dst, &st);
    flushes = st.requests[NULL_OP_FLUSH];
    g_assert_cmpuint(flushes, ==, 1);
    target_reconnected(&f);
    g_assert_true(job_complete(f.job, &err));
    test_run_until(&f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(target_written(&f), ==, 16 * MiB);
    null_get_stats(f.dst, &st);
    g_assert_cmpuint(st.requests[NULL_OP_FLUSH], >, flushes);
    mirror_fixture_destroy(&f);
}

static void guest_done_cb(void *opaque, int ret)
{
    int *left = opaque;

    g_assert_cmpint(ret, ==, 0);
    (*left)--;
}

/*
 * Write-blocking: guest writes mirrored to the target after READY are
 * copied again when the target reconnects before the next flush.
 */
static void test_reconnect_write_blocking(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    g_autofree uint8_t *buf = g_malloc0(64 * KiB);
    g_autoptr(GError) err = NULL;
    BlockDriverState *top;
    MirrorFixture f;
    int64_t before;
    int left = 3;

    p.sync = MIRROR_SYNC_MODE_NONE;
    p.granularity = 64 * KiB;
    p.copy_mode = MIRROR_COPY_MODE_WRITE_BLOCKING;
    p.auto_complete = false;
    /* As mirror_fixture_init(), with a writable source. */
    f.src = test_open("null:size=16M", NULL, BDRV_O_RDWR);
    f.dst = test_open("null:size=16M", NULL, BDRV_O_RDWR);
    f.job = mirror_job_new("job0", f.src, f.dst, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&f.ev, f.job);
    top = mirror_top_new(f.src, &err);
    g_assert_no_error(err);
    mirror_job_set_top(f.job, top);
    job_start(f.job);
    while (!f.ev.ready_count) {
        g_main_context_iteration(NULL, TRUE);
    }
    before = target_written(&f);
    for (int i = 0; i < 3; i++) {
        bdrv_aio_pwrite(top, (1 + 5 * i) * MiB, 64 * KiB, buf, 0,
                        guest_done_cb, &left);
    }
    while (left) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_assert_cmpint(target_written(&f), ==, before + 3 * 64 * KiB);
    target_reconnected(&f);
    g_assert_true(job_complete(f.job, &err));
    test_run_until(&f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(target_written(&f), ==, before + 6 * 64 * KiB);
    bdrv_unref(top);
    mirror_fixture_destroy(&f);
}

static void test_verbs(void)
{
    MirrorParams p = mirror_fixture_params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    MirrorFixture f;

    mirror_fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    g_assert_false(job_complete(f.job, &err));
    g_assert_cmpstr(err->message, ==, "Job 'job0' in state 'created' cannot "
                    "accept command verb 'complete'");
    g_clear_error(&err);
    g_assert_false(job_dismiss(f.job, &err));
    g_clear_error(&err);
    g_assert_false(job_set_speed(f.job, -1, &err));
    g_clear_error(&err);
    mirror_fixture_run(&f);
    g_assert_false(job_user_pause(f.job, &err));
    g_assert_cmpstr(err->message, ==, "Job 'job0' in state 'null' cannot "
                    "accept command verb 'pause'");
    mirror_fixture_destroy(&f);
}

static void test_bad_params(void)
{
    g_autoptr(BlockDriverState) src = test_open("null:size=4M", NULL, 0);
    g_autoptr(BlockDriverState) dst = test_open("null:size=4M", NULL,
                                                BDRV_O_RDWR);
    g_autoptr(BlockDriverState) small = test_open("null:size=2M", NULL,
                                                  BDRV_O_RDWR);
    g_autoptr(BlockDriverState) ro = test_open("null:size=4M", NULL, 0);
    struct {
        int64_t granularity, chunk;
        int max_in_flight;
        const char *msg;
    } cases[] = {
        { 1000, 0, 0, "power of 2" },
        { 256, 0, 0, "[512B, 64MB]" },
        { 128 * MiB, 0, 0, "[512B, 64MB]" },
        { 0, 3 * MiB, 0, "chunk-size" },
        { 0, 1024, 0, "chunk-size" },
        { 0, 0, 2000, "max-in-flight" },
    };
    MirrorParams p;

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;

        mirror_params_init(&p);
        p.granularity = cases[i].granularity;
        p.chunk_size = cases[i].chunk;
        p.max_in_flight = cases[i].max_in_flight;
        g_assert_null(mirror_job_new("j", src, dst, &p, &err));
        g_assert_nonnull(strstr(err->message, cases[i].msg));
    }
    {
        /* sparse-size: a multiple of 512 up to 16 MiB, as qemu-img's -S. */
        static const int64_t bad[] = { 1000, -512, 16 * MiB + 512 };

        for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
            g_autoptr(GError) err = NULL;

            mirror_params_init(&p);
            p.sparse_size = bad[i];
            g_assert_null(mirror_job_new("j", src, dst, &p, &err));
            g_assert_nonnull(strstr(err->message, "'sparse-size'"));
        }
    }
    mirror_params_init(&p);
    {
        g_autoptr(GError) err = NULL;
        g_assert_null(mirror_job_new("j", src, small, &p, &err));
        g_assert_nonnull(strstr(err->message, "different sizes"));
    }
    {
        g_autoptr(GError) err = NULL;
        g_assert_null(mirror_job_new("j", src, ro, &p, &err));
        g_assert_nonnull(strstr(err->message, "read-only"));
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror/bulk/coalesce", test_coalesce);
    g_test_add_func("/mirror/bulk/unaligned-length", test_unaligned_length);
    g_test_add_func("/mirror/bulk/zero-length", test_zero_length);
    g_test_add_func("/mirror/bulk/zero-extents", test_zero_extents);
    g_test_add_func("/mirror/bulk/zero-extents-target-zero",
                    test_zero_extents_target_zero);
    g_test_add_func("/mirror/bulk/zero-extent-inside-granule",
                    test_zero_extent_inside_granule);
    g_test_add_func("/mirror/order/in-order", test_order_in_order);
    g_test_add_func("/mirror/order/out-of-order", test_order_out_of_order);
    g_test_add_func("/mirror/error/read", test_error_read);
    g_test_add_func("/mirror/error/write", test_error_write);
    g_test_add_func("/mirror/job/states-success", test_states_success);
    g_test_add_func("/mirror/job/cancel-before-ready",
                    test_cancel_before_ready);
    g_test_add_func("/mirror/job/pause-resume", test_pause_resume);
    g_test_add_func("/mirror/job/verbs", test_verbs);
    g_test_add_func("/mirror/reconnect/recopy", test_reconnect_recopy);
    g_test_add_func("/mirror/reconnect/after-flush",
                    test_reconnect_after_flush);
    g_test_add_func("/mirror/reconnect/write-blocking",
                    test_reconnect_write_blocking);
    g_test_add_func("/mirror/job/bad-params", test_bad_params);
    return g_test_run();
}
