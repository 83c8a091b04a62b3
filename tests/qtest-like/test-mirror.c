/*
 * Unit tests of the mirror job's copy engine with the null driver: the
 * limits (operations and bytes in flight, the chunk cap), coalescing,
 * zero extents, in-order writes, errors, cancel, pause, and the job's
 * states and events.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror.h"
#include "block/null.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>

typedef struct Fixture {
    BlockDriverState *src;
    BlockDriverState *dst;
    Job *job;
    TestJobEvents ev;
} Fixture;

/* Open src and dst (sharing statistics), create a job with @p. */
static void fixture_init(Fixture *f, const char *src_spec,
                         const char *dst_spec, const MirrorParams *p)
{
    g_autoptr(GError) err = NULL;

    f->src = test_open(src_spec, NULL, 0);
    f->dst = test_open(dst_spec, NULL, BDRV_O_RDWR);
    null_share_stats(f->dst, f->src);
    f->job = mirror_job_new("job0", f->src, f->dst, p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&f->ev, f->job);
}

static void fixture_run(Fixture *f)
{
    job_start(f->job);
    test_run_until(&f->ev.concluded, 120);
}

static void fixture_destroy(Fixture *f)
{
    job_unref(f->job);
    test_job_events_clear(&f->ev);
    bdrv_unref(f->src);
    bdrv_unref(f->dst);
}

static MirrorParams params(int max_in_flight, int64_t chunk, int64_t buf)
{
    MirrorParams p;

    mirror_params_init(&p);
    p.max_in_flight = max_in_flight;
    p.chunk_size = chunk;
    p.buf_size = buf;
    p.auto_complete = true;
    return p;
}

static int64_t op_bytes(BlockDriverState *bs, NullOp op)
{
    GArray *recs = null_get_records(bs);
    int64_t sum = 0;

    for (guint i = 0; i < recs->len; i++) {
        NullRecord *r = &g_array_index(recs, NullRecord, i);

        if (r->op == op) {
            sum += r->bytes;
        }
    }
    return sum;
}

static void test_limits_in_flight(void)
{
    MirrorParams p = params(4, 64 * KiB, MiB);
    Fixture f;
    NullStats st;

    fixture_init(&f, "null:size=16M,latency-ns=200000,jitter-ns=300000",
                 "null:size=16M,latency-ns=200000,jitter-ns=300000", &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.max_in_flight, ==, 4);     /* reached, never more */
    g_assert_cmpint(st.max_data_request, ==, 64 * KiB);
    g_assert_cmpint(st.max_data_bytes_in_flight, <=, MiB);
    g_assert_cmpuint(st.overlapping_writes, ==, 0);
    g_assert_cmpuint(st.misaligned, ==, 0);
    g_assert_cmpuint(st.bytes[NULL_OP_READ], ==, 16 * MiB);
    g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 16 * MiB);
    fixture_destroy(&f);
}

static void test_limits_buf_size(void)
{
    MirrorParams p = params(16, MiB, 2 * MiB);
    Fixture f;
    NullStats st;

    fixture_init(&f, "null:size=32M,latency-ns=100000,jitter-ns=200000",
                 "null:size=32M,latency-ns=100000", &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    /* buf-size allows two 1 MiB operations, whatever max-in-flight says. */
    g_assert_cmpint(st.max_data_bytes_in_flight, ==, 2 * MiB);
    g_assert_cmpuint(st.max_in_flight, ==, 2);
    g_assert_cmpint(st.max_data_request, ==, MiB);
    fixture_destroy(&f);
}

/*
 * Left at their defaults, max-in-flight and buf-size grow with the request
 * channels (NBD connections) of either end taking requests, up to four,
 * from QEMU's 16 and 16 MiB per channel or the window an end asks for
 * now (the pool is sized for the most it may ask for).  A source whose
 * driver prefers smaller copy operations (NBD: 256 KiB) sets the default
 * chunk-size, and the default max-in-flight grows to keep the bytes in
 * flight; an explicit chunk-size keeps max-in-flight at 16.
 */
static void test_limits_window(void)
{
    static const struct {
        const char *src;
        const char *dst;
        int64_t chunk;
        uint64_t window;
        int64_t window_bytes;
        int64_t largest;
    } cases[] = {
        { "null:size=128M", "null:size=128M,latency-ns=2000000",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M", "null:size=128M,latency-ns=2000000,channels=2",
          0, 32, 32 * MiB, MiB },
        { "null:size=128M", "null:size=128M,latency-ns=2000000,channels=9",
          0, 64, 64 * MiB, MiB },
        /* Four opened, one taking requests: one channel's window. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,active-channels=1",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M,channels=4,active-channels=3",
          "null:size=128M,latency-ns=2000000,channels=2",
          0, 48, 48 * MiB, MiB },
        /* An end that asks for its window per channel (NBD: 8 MiB against
         * a fast server, 32 MiB against a latency-bound one). */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=8M",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M",
          0, 64, 64 * MiB, MiB },
        { "null:size=128M,copy-transfer=256K,window=8M",
          "null:size=128M,latency-ns=2000000", 0, 32, 8 * MiB, 256 * KiB },
        /* An end that asks for 8 MiB now and may ask for 32 MiB later
         * (NBD: a trial found the server slow at writing): the window
         * follows what it asks for now, and grows when it asks more. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M,"
          "window-first=8M,active-channels-after=1G",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M,"
          "window-first=8M,active-channels-after=32M",
          0, 64, 64 * MiB, MiB },
        /* At most 64 MiB, however many channels ask. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,window=32M",
          0, 64, 64 * MiB, MiB },
        /* Four until 32 MiB are written, then one: the window shrinks
         * below what is in flight, and drains down to it. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,active-channels=1,"
          "active-channels-after=32M", 0, 64, 64 * MiB, MiB },
        { "null:size=128M,copy-transfer=256K",
          "null:size=128M,latency-ns=2000000", 0, 64, 16 * MiB, 256 * KiB },
        { "null:size=128M,copy-transfer=256K",
          "null:size=128M,latency-ns=2000000", MiB, 16, 16 * MiB, MiB },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        MirrorParams p = params(0, cases[i].chunk, 0);
        Fixture f;
        NullStats st;

        fixture_init(&f, cases[i].src, cases[i].dst, &p);
        fixture_run(&f);
        g_assert_cmpint(f.job->ret, ==, 0);
        null_get_stats(f.dst, &st);
        g_assert_cmpuint(st.max_in_flight, ==, cases[i].window);
        g_assert_cmpint(st.max_data_bytes_in_flight, ==,
                        cases[i].window_bytes);
        g_assert_cmpint(st.max_data_request, ==, cases[i].largest);
        g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 128 * MiB);
        fixture_destroy(&f);
    }
}

static void test_chunk_cap_large_granularity(void)
{
    /* A granule larger than the chunk: io.c still caps each I/O. */
    MirrorParams p = params(4, 64 * KiB, 0);
    Fixture f;
    NullStats st;

    p.granularity = 256 * KiB;
    fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpint(st.max_data_request, ==, 64 * KiB);
    g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 4 * MiB);
    fixture_destroy(&f);
}

static void test_coalesce(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;

    /* 64 KiB granules coalesce into 1 MiB operations. */
    fixture_init(&f, "null:size=8M,record=on", "null:size=8M,record=on",
                 &p);
    fixture_run(&f);
    g_assert_cmpuint(null_get_records(f.src)->len, ==, 8 + 1); /* + status */
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    fixture_destroy(&f);
}

static void test_unaligned_length(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;
    NullStats st;

    /* 1025 KiB + 1 byte: not a multiple of the granule or the chunk. */
    fixture_init(&f, "null:size=1049601,record=on", "null:size=1049601",
                 &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(op_bytes(f.src, NULL_OP_READ), ==, 1049601);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
    fixture_destroy(&f);
}

static void test_zero_length(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;

    fixture_init(&f, "null:size=0", "null:size=0", &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(f.ev.ready_count, ==, 1);
    g_assert_cmpint(f.ev.completed_count, ==, 1);
    fixture_destroy(&f);
}

static void test_zero_extents(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;

    /* Alternating 1 MiB data / zero: zeroes become write-zeroes. */
    fixture_init(&f, "null:size=16M,extents=alternate:1M,record=on",
                 "null:size=16M,record=on", &p);
    fixture_run(&f);
    g_assert_cmpint(op_bytes(f.src, NULL_OP_READ), ==, 8 * MiB);
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_ZERO), ==, 8 * MiB);
    fixture_destroy(&f);
}

static void test_zero_extents_target_zero(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;
    MirrorStats ms;

    /* A target known to read as zero: zero extents need no I/O. */
    p.target_is_zero = true;
    fixture_init(&f, "null:size=16M,extents=alternate:1M,record=on",
                 "null:size=16M,record=on", &p);
    fixture_run(&f);
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_ZERO), ==, 0);
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_WRITE), ==, 8 * MiB);
    mirror_get_stats(f.job, &ms);
    g_assert_cmpint(ms.bytes_skipped, ==, 8 * MiB);
    g_assert_cmpint(ms.bytes_copied, ==, 8 * MiB);
    fixture_destroy(&f);
}

static void test_zero_extent_inside_granule(void)
{
    MirrorParams p = params(16, MiB, 0);
    Fixture f;

    /* 48 KiB runs against 64 KiB granules: mixed granules are copied. */
    fixture_init(&f, "null:size=1536K,extents=alternate:48K,record=on",
                 "null:size=1536K,record=on", &p);
    fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(op_bytes(f.dst, NULL_OP_WRITE) +
                    op_bytes(f.dst, NULL_OP_ZERO), ==, 1536 * KiB);
    fixture_destroy(&f);
}

static void check_write_order(bool in_order)
{
    MirrorParams p = params(16, 64 * KiB, 0);
    Fixture f;
    GArray *recs;
    int64_t last = -1;
    bool ascending = true;

    p.in_order = in_order;
    fixture_init(&f, "null:size=8M,latency-ns=10000,jitter-ns=2000000",
                 "null:size=8M,record=on", &p);
    fixture_run(&f);
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
    fixture_destroy(&f);
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
    MirrorParams p = params(4, MiB, 0);
    const char *detail;
    Fixture f;
    MirrorStats ms;
    JobEvent *e;

    fixture_init(&f, src, dst, &p);
    fixture_run(&f);
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
    fixture_destroy(&f);
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
    MirrorParams p = params(4, MiB, 0);
    static const JobStatus expect[] = {
        JOB_STATUS_RUNNING, JOB_STATUS_READY, JOB_STATUS_WAITING,
        JOB_STATUS_PENDING, JOB_STATUS_CONCLUDED, JOB_STATUS_NULL,
    };
    Fixture f;

    fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    fixture_run(&f);
    g_assert_cmpmem(f.ev.statuses->data,
                    f.ev.statuses->len * sizeof(JobStatus), expect,
                    sizeof(expect));
    fixture_destroy(&f);
}

static gboolean cancel_cb(gpointer opaque)
{
    Fixture *f = opaque;
    g_autoptr(GError) err = NULL;

    g_assert_true(job_user_cancel(f->job, false, &err));
    return G_SOURCE_REMOVE;
}

static void test_cancel_before_ready(void)
{
    MirrorParams p = params(4, MiB, 0);
    Fixture f;
    NullStats st;

    fixture_init(&f, "null:size=1G,latency-ns=1000000", "null:size=1G", &p);
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
    fixture_destroy(&f);
}

typedef struct PauseCtx {
    Fixture *f;
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
    MirrorParams p = params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    PauseCtx pc = { 0 };
    Fixture f;
    NullStats st;

    fixture_init(&f, "null:size=64M,latency-ns=200000", "null:size=64M",
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
    fixture_destroy(&f);
}

static void test_verbs(void)
{
    MirrorParams p = params(4, MiB, 0);
    g_autoptr(GError) err = NULL;
    Fixture f;

    fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    g_assert_false(job_complete(f.job, &err));
    g_assert_cmpstr(err->message, ==, "Job 'job0' in state 'created' cannot "
                    "accept command verb 'complete'");
    g_clear_error(&err);
    g_assert_false(job_dismiss(f.job, &err));
    g_clear_error(&err);
    g_assert_false(job_set_speed(f.job, -1, &err));
    g_clear_error(&err);
    fixture_run(&f);
    g_assert_false(job_user_pause(f.job, &err));
    g_assert_cmpstr(err->message, ==, "Job 'job0' in state 'null' cannot "
                    "accept command verb 'pause'");
    fixture_destroy(&f);
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
    g_test_add_func("/mirror/limits/in-flight", test_limits_in_flight);
    g_test_add_func("/mirror/limits/buf-size", test_limits_buf_size);
    g_test_add_func("/mirror/limits/window", test_limits_window);
    g_test_add_func("/mirror/limits/chunk-cap-large-granularity",
                    test_chunk_cap_large_granularity);
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
    g_test_add_func("/mirror/job/bad-params", test_bad_params);
    return g_test_run();
}
