/*
 * The mirror job's sync stage, in process: writes to the source (through
 * the block layer, as a guest's would arrive) dirty it, before and after
 * READY, and the job copies them; READY follows the flush that began
 * clean even if a guest wrote meanwhile (QEMU's rule); the speed limit holds
 * in the bulk stage and in the sync stage, and set-speed changes it at run
 * time (counted in requests, not measured in time); a soft cancel
 * after READY leaves a point-in-time copy; the final flush of a soft
 * cancel may fail and is retried (QEMU's mirror-ready-cancel-error, with
 * the write after READY that the QEMU test does).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror.h"
#include "block/null.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

typedef struct Fixture {
    char *dir;
    char *src_path;
    char *dst_path;
    char *trigger;
    BlockDriverState *src;
    BlockDriverState *dst;
    Job *job;
    TestJobEvents ev;
} Fixture;

/* Raw files: @size bytes of pattern in the source, a sparse target. */
static void fixture_files(Fixture *f, int64_t size)
{
    g_autofree uint8_t *buf = g_malloc(size ? size : 1);
    g_autoptr(GError) err = NULL;

    f->dir = test_scratch_new();
    f->src_path = g_build_filename(f->dir, "src.raw", NULL);
    f->dst_path = g_build_filename(f->dir, "dst.raw", NULL);
    f->trigger = g_build_filename(f->dir, "trigger", NULL);
    test_fill_pattern(buf, 0, size, 7);
    g_file_set_contents(f->src_path, (char *)buf, size, &err);
    g_assert_no_error(err);
    g_file_set_contents(f->dst_path, "", 0, &err);
    g_assert_no_error(err);
    g_assert_cmpint(truncate(f->dst_path, size), ==, 0);
}

static void fixture_init(Fixture *f, const char *src_spec,
                         const char *dst_spec, const MirrorParams *p)
{
    g_autoptr(GError) err = NULL;

    f->src = test_open(src_spec, NULL, BDRV_O_RDWR);
    f->dst = test_open(dst_spec, NULL, BDRV_O_RDWR);
    f->job = mirror_job_new("job0", f->src, f->dst, p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&f->ev, f->job);
}

static void fixture_destroy(Fixture *f)
{
    job_unref(f->job);
    test_job_events_clear(&f->ev);
    bdrv_unref(f->src);
    bdrv_unref(f->dst);
    if (f->dir) {
        test_scratch_free(f->dir);
        g_free(f->src_path);
        g_free(f->dst_path);
        g_free(f->trigger);
    }
}

static MirrorParams params(int64_t chunk, int64_t speed)
{
    MirrorParams p;

    mirror_params_init(&p);
    p.chunk_size = chunk;
    p.speed = speed;
    p.auto_complete = false;
    return p;
}

static gboolean tick_cb(gpointer opaque)
{
    return G_SOURCE_CONTINUE;
}

/* Run the loop until @cond holds (a tick keeps it from blocking for
 * long), failing after @timeout_s. */
#define RUN_UNTIL(cond, timeout_s)                                        \
    do {                                                                  \
        gint64 deadline_ = g_get_monotonic_time() +                       \
                           (timeout_s) * G_USEC_PER_SEC;                  \
        guint tick_ = g_timeout_add(5, tick_cb, NULL);                    \
        while (!(cond)) {                                                 \
            g_assert_cmpint(g_get_monotonic_time(), <, deadline_);        \
            g_main_context_iteration(NULL, TRUE);                         \
        }                                                                 \
        g_source_remove(tick_);                                           \
    } while (0)

static bool job_in_sync(Job *job)
{
    MirrorStats st;

    mirror_get_stats(job, &st);
    return st.in_sync;
}

/*
 * Run the loop until nothing is ready to run and @job (if any) has no
 * operation in flight: what is left waits for a timer (the rate
 * limiter's) or for nothing.  Deterministic: no wall time decides it.
 */
static void run_until_quiet(Job *job)
{
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    for (;;) {
        MirrorStats st = { 0 };

        if (job) {
            mirror_get_stats(job, &st);
        }
        if (st.in_flight == 0 && !g_main_context_pending(NULL)) {
            return;
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        /* Block only while an operation is in flight: it wakes us. */
        g_main_context_iteration(NULL, st.in_flight > 0);
    }
}

static void assert_files_equal(const char *a, const char *b)
{
    g_autofree char *da = NULL;
    g_autofree char *db = NULL;
    gsize la, lb;

    g_assert_true(g_file_get_contents(a, &da, &la, NULL));
    g_assert_true(g_file_get_contents(b, &db, &lb, NULL));
    g_assert_cmpuint(la, ==, lb);
    g_assert_true(memcmp(da, db, la) == 0);
}

/* Write @bytes of pattern @seed at @off to the source, as a guest would. */
static void guest_write(Fixture *f, int64_t off, int64_t bytes,
                        uint32_t seed)
{
    g_autofree uint8_t *buf = g_malloc(bytes);

    test_fill_pattern(buf, off, bytes, seed);
    g_assert_cmpint(test_pwrite(f->src, off, bytes, buf), ==, 0);
}

static void complete_and_check(Fixture *f)
{
    g_autoptr(GError) err = NULL;

    g_assert_true(job_complete(f->job, &err));
    RUN_UNTIL(f->ev.concluded, 60);
    g_assert_cmpint(f->job->ret, ==, 0);
    g_assert_cmpint(f->ev.completed_count, ==, 1);
    g_assert_cmpint(f->ev.ready_count, ==, 1);
    assert_files_equal(f->src_path, f->dst_path);
}

/* ---- copying what is written ---- */

static void test_writes_after_ready(void)
{
    const int64_t size = 8 * MiB;
    MirrorParams p = params(0, 0);
    Fixture f = { 0 };
    MirrorStats st;

    fixture_files(&f, size);
    fixture_init(&f, f.src_path, f.dst_path, &p);
    job_start(f.job);
    RUN_UNTIL(f.ev.ready_count == 1 && job_in_sync(f.job), 60);
    assert_files_equal(f.src_path, f.dst_path);

    /* Unaligned, across granules, at the very end. */
    guest_write(&f, 1000, 100, 11);
    mirror_get_stats(f.job, &st);
    g_assert_cmpint(st.dirty_bytes + st.in_flight_bytes, >, 0);
    g_assert_false(st.in_sync);
    guest_write(&f, 3 * MiB + 12345, 200000, 12);
    guest_write(&f, size - 777, 777, 13);
    RUN_UNTIL(job_in_sync(f.job), 60);
    /* In sync again, READY all along. */
    g_assert_cmpint(f.job->status, ==, JOB_STATUS_READY);
    assert_files_equal(f.src_path, f.dst_path);

    /* And once more, then complete right away. */
    guest_write(&f, 5 * MiB, 64 * KiB, 14);
    complete_and_check(&f);
    fixture_destroy(&f);
}

static void test_writes_during_bulk(void)
{
    const int64_t size = 8 * MiB;
    MirrorParams p = params(256 * KiB, 4 * MiB);
    g_autoptr(GError) err = NULL;
    Fixture f = { 0 };

    fixture_files(&f, size);
    fixture_init(&f, f.src_path, f.dst_path, &p);
    job_start(f.job);
    /* Behind the cursor and ahead of it, while the bulk stage runs. */
    RUN_UNTIL(f.job->progress_current >= MiB, 30);
    guest_write(&f, 4096, 8192, 21);
    guest_write(&f, 6 * MiB + 1, 300000, 22);
    g_assert_cmpint(f.ev.ready_count, ==, 0);
    g_assert_true(job_set_speed(f.job, 0, &err));
    RUN_UNTIL(f.ev.ready_count == 1, 60);
    complete_and_check(&f);
    fixture_destroy(&f);
}

/*
 * As QEMU, READY follows a flush that began with nothing dirty and nothing
 * in flight, even when a guest wrote while it ran: the job is READY with
 * that write not yet on the target (in-sync says so), copies it, and
 * completes to an equal target.  Every target request takes 400 ms, so the
 * flush is caught in flight and the write's copy is still running when
 * READY comes.
 */
static void test_write_during_ready_flush(void)
{
    const int64_t size = MiB;
    MirrorParams p = params(0, 0);
    g_autofree char *dst = NULL;
    Fixture f = { 0 };
    MirrorStats st;

    fixture_files(&f, size);
    dst = g_strdup_printf("blkdebug:latency-ns=400000000:%s", f.dst_path);
    fixture_init(&f, f.src_path, dst, &p);
    job_start(f.job);
    /* Nothing dirty or in flight and not READY yet: the flush runs. */
    RUN_UNTIL(job_in_sync(f.job), 60);
    g_assert_cmpint(f.ev.ready_count, ==, 0);
    g_assert_cmpuint(bdrv_get_in_flight(f.dst), ==, 1);
    guest_write(&f, 256 * KiB, 64 * KiB, 31);   /* one granule */
    g_assert_cmpint(f.ev.ready_count, ==, 0);
    RUN_UNTIL(f.ev.ready_count == 1, 60);
    mirror_get_stats(f.job, &st);
    g_assert_false(st.in_sync);
    g_assert_cmpint(st.dirty_bytes + st.in_flight_bytes, ==, 64 * KiB);
    RUN_UNTIL(job_in_sync(f.job), 60);
    complete_and_check(&f);
    fixture_destroy(&f);
}

/* ---- the speed limit, counted ---- */

/*
 * The speed limit in requests, not in time.  At 1 byte/s the quota of a
 * 100 ms slice is one byte: the limiter lets the first copy of a slice go
 * (a request that crosses the quota is admitted) and stretches the slice
 * to 64 KiB / 1 B/s, about 18 hours.  So a job at 1 byte/s reads exactly
 * one chunk and then waits, and the loop goes quiet with the job neither
 * READY nor in sync; a job that ignored the limit, did not charge what it
 * copies, or did not take a new speed at run time would read on.  The
 * arithmetic of quota and delay for other speeds is test-ratelimit.c's,
 * with a clock of its own.
 */
#define SPEED_TINY 1

static uint64_t null_reads(BlockDriverState *bs)
{
    NullStats st;

    null_get_stats(bs, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
    return st.requests[NULL_OP_READ];
}

static uint64_t null_written(BlockDriverState *bs)
{
    NullStats st;

    null_get_stats(bs, &st);
    return st.bytes[NULL_OP_WRITE];
}

static void test_speed_bulk(void)
{
    const int64_t chunk = 64 * KiB;
    MirrorParams p = params(chunk, SPEED_TINY);
    g_autoptr(GError) err = NULL;
    uint64_t reads;
    Fixture f = { 0 };

    fixture_init(&f, "null:size=64M", "null:size=64M", &p);
    job_start(f.job);
    /* The limit from the start: one chunk, then the job waits. */
    run_until_quiet(f.job);
    g_assert_cmpuint(null_reads(f.src), ==, 1);
    g_assert_cmpuint(null_written(f.dst), ==, chunk);
    g_assert_cmpint(f.job->progress_current, ==, chunk);
    g_assert_cmpint(f.job->status, ==, JOB_STATUS_RUNNING);

    /* Lifted at run time: the waiting job goes on at once. */
    g_assert_true(job_set_speed(f.job, 0, &err));
    RUN_UNTIL(f.job->progress_current >= 16 * MiB, 60);

    /* Set again at run time: at most one more read, then it waits. */
    reads = null_reads(f.src);
    g_assert_true(job_set_speed(f.job, SPEED_TINY, &err));
    run_until_quiet(f.job);
    g_assert_cmpuint(null_reads(f.src), <=, reads + 1);
    g_assert_cmpint(f.job->progress_current, <, 64 * MiB);
    g_assert_cmpint(f.ev.ready_count, ==, 0);

    g_assert_true(job_set_speed(f.job, 0, &err));
    RUN_UNTIL(f.ev.ready_count == 1, 60);
    g_assert_cmpuint(null_written(f.dst), ==, 64 * MiB);
    g_assert_true(job_user_cancel(f.job, false, &err));
    RUN_UNTIL(f.ev.concluded, 60);
    g_assert_cmpint(f.ev.completed_count, ==, 1);
    fixture_destroy(&f);
}

static void test_speed_sync(void)
{
    const int64_t chunk = 64 * KiB;
    MirrorParams p = params(chunk, 0);
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc0(32 * MiB);
    uint64_t reads, written;
    Fixture f = { 0 };

    fixture_init(&f, "null:size=64M", "null:size=64M", &p);
    job_start(f.job);
    RUN_UNTIL(f.ev.ready_count == 1 && job_in_sync(f.job), 60);

    /* Unlike QEMU, the limit still applies after READY. */
    g_assert_true(job_set_speed(f.job, SPEED_TINY, &err));
    reads = null_reads(f.src);
    written = null_written(f.dst);
    g_assert_cmpint(test_pwrite(f.src, 0, 32 * MiB, buf), ==, 0);
    run_until_quiet(f.job);
    /* The guest's write, and one chunk of the job's copy of it. */
    g_assert_cmpuint(null_reads(f.src), ==, reads + 1);
    g_assert_cmpuint(null_written(f.dst), ==, written + chunk);
    g_assert_false(job_in_sync(f.job));
    g_assert_cmpint(f.job->status, ==, JOB_STATUS_READY);
    g_assert_true(job_set_speed(f.job, 0, &err));
    RUN_UNTIL(job_in_sync(f.job), 60);
    g_assert_cmpuint(null_written(f.dst), ==, written + 32 * MiB);
    g_assert_true(job_complete(f.job, &err));
    RUN_UNTIL(f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    fixture_destroy(&f);
}

/* ---- soft cancel after READY: a point-in-time copy ---- */

static void test_soft_cancel_point_in_time(void)
{
    const int64_t size = 4 * MiB;
    MirrorParams p = params(0, 0);
    g_autoptr(GError) err = NULL;
    g_autofree char *copy = NULL;
    g_autofree char *after = NULL;
    gsize len;
    Fixture f = { 0 };

    fixture_files(&f, size);
    fixture_init(&f, f.src_path, f.dst_path, &p);
    job_start(f.job);
    RUN_UNTIL(f.ev.ready_count == 1, 60);

    /* Written before the cancel: part of the copy. */
    guest_write(&f, 2 * MiB - 5, 10000, 31);
    g_assert_true(job_user_cancel(f.job, false, &err));
    RUN_UNTIL(f.ev.concluded, 60);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(f.ev.completed_count, ==, 1);
    g_assert_cmpint(f.ev.cancelled_count, ==, 0);
    assert_files_equal(f.src_path, f.dst_path);

    /* Written after it: the target keeps the old point in time. */
    g_assert_true(g_file_get_contents(f.dst_path, &copy, &len, NULL));
    guest_write(&f, 0, 64 * KiB, 32);
    run_until_quiet(NULL);
    g_assert_true(g_file_get_contents(f.dst_path, &after, NULL, NULL));
    g_assert_true(memcmp(copy, after, len) == 0);
    fixture_destroy(&f);
}

/* ---- mirror-ready-cancel-error, in process ---- */

static void flush_error_listener(Job *job, const JobEvent *e, void *opaque)
{
    bool *standby = opaque;

    if (e->type == JOB_EVENT_STATUS_CHANGE &&
        e->status == JOB_STATUS_STANDBY) {
        *standby = true;
    }
}

static void check_ready_cancel_error(bool transient)
{
    MirrorParams p = params(0, 0);
    g_autoptr(GError) err = NULL;
    g_autofree char *dst = NULL;
    bool standby = false;
    Fixture f = { 0 };
    MirrorStats st;

    fixture_files(&f, 4 * MiB);
    dst = g_strdup_printf("blkdebug:error-op=flush,error-file=%s:%s",
                          f.trigger, f.dst_path);
    p.on_target_error = BLOCKDEV_ON_ERROR_STOP;
    fixture_init(&f, f.src_path, dst, &p);
    job_add_listener(f.job, flush_error_listener, &standby);
    job_start(f.job);
    RUN_UNTIL(f.ev.ready_count == 1, 60);

    /* As the QEMU test: write, so that the job does not leave at once,
     * and fail the flush before the end. */
    g_assert_true(g_file_set_contents(f.trigger, "", 0, NULL));
    guest_write(&f, 0, 64 * KiB, 41);
    g_assert_true(job_user_cancel(f.job, false, &err));
    RUN_UNTIL(standby, 30);
    g_assert_cmpint(f.ev.error_count, ==, 1);
    mirror_get_stats(f.job, &st);
    g_assert_cmpstr(st.io_status, ==, "failed");

    if (transient) {
        g_assert_cmpint(g_unlink(f.trigger), ==, 0);
        g_assert_true(job_user_resume(f.job, &err));
        RUN_UNTIL(f.ev.concluded, 30);
        g_assert_cmpint(f.job->ret, ==, 0);
        g_assert_cmpint(f.ev.completed_count, ==, 1);
        assert_files_equal(f.src_path, f.dst_path);
    } else {
        g_assert_true(job_user_cancel(f.job, true, &err));
        RUN_UNTIL(f.ev.concluded, 30);
        g_assert_cmpint(f.job->ret, ==, -ECANCELED);
        g_assert_cmpint(f.ev.cancelled_count, ==, 1);
    }
    fixture_destroy(&f);
}

static void test_ready_cancel_error_transient(void)
{
    check_ready_cancel_error(true);
}

static void test_ready_cancel_error_persistent(void)
{
    check_ready_cancel_error(false);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror/sync/writes-after-ready",
                    test_writes_after_ready);
    g_test_add_func("/mirror/sync/writes-during-bulk",
                    test_writes_during_bulk);
    g_test_add_func("/mirror/sync/write-during-ready-flush",
                    test_write_during_ready_flush);
    g_test_add_func("/mirror/sync/speed-bulk", test_speed_bulk);
    g_test_add_func("/mirror/sync/speed-sync", test_speed_sync);
    g_test_add_func("/mirror/sync/soft-cancel-point-in-time",
                    test_soft_cancel_point_in_time);
    g_test_add_func("/mirror/sync/ready-cancel-error/transient",
                    test_ready_cancel_error_transient);
    g_test_add_func("/mirror/sync/ready-cancel-error/persistent",
                    test_ready_cancel_error_persistent);
    return g_test_run();
}
