/*
 * QEMU's mirror iotests over QMP, ported to `mirror-tool start --qmp`:
 * 041 (TestSingleDrive, zero-length and unaligned images, granularity,
 * buffer and chunk sizes, invalid values, TestSetSpeed) and 218 (cancel
 * in each phase, quit while throttled).  Every scenario that promises a
 * copy ends with a byte compare of source and target.
 *
 * Jobs are slowed down with --speed or blkdebug latency so that states
 * can be observed; the tests wait for events or poll query-block-jobs,
 * with deadlines, and never sleep to synchronise.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest.h"
#include "util/cutils.h"

#include <string.h>

#define DEV "{\"device\": \"mirror\"}"

static void assert_no_error(JsonObject *ev)
{
    g_assert_false(qtest_json_has(ev, "data/error"));
}

/* READY, then block-job-complete: COMPLETED, exit 0, a copy. */
static void complete_job(QTestState *q, QTestImages *im)
{
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) done = NULL;

    g_assert_cmpint(qtest_json_int(ready, "data/offset"), ==,
                    qtest_json_int(ready, "data/len"));
    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 60);
    assert_no_error(done);
    g_assert_cmpstr(qtest_json_str(done, "data/type"), ==, "mirror");
    g_assert_cmpstr(qtest_json_str(done, "data/device"), ==, "mirror");
    g_assert_cmpint(qtest_wait_exit(q, 60), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

/* ---- 041 TestSingleDrive ---- */

static void test_complete(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(4 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) job = NULL;
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    static const char *const statuses[] = {
        "running", "ready", "waiting", "pending", "concluded", "null",
    };

    g_assert_cmpstr(qtest_json_str(ready, "data/device"), ==, "mirror");
    g_assert_cmpint(qtest_json_int(ready, "data/len"), ==, 4 * MiB);
    g_assert_cmpint(qtest_json_int(ready, "data/offset"), ==, 4 * MiB);
    g_assert_cmpint(qtest_json_int(ready, "data/speed"), ==, 0);
    job = qtest_query_job(q);
    g_assert_true(qtest_json_bool(job, "ready"));
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "ready");
    g_assert_true(qtest_json_bool(job, "in-sync"));
    g_assert_cmpint(qtest_json_int(job, "dirty-bytes"), ==, 0);
    g_assert_cmpstr(qtest_json_str(job, "io-status"), ==, "ok");
    /* The target is complete already; the job stays until told. */
    qtest_assert_files_equal(im->src, im->dst);

    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    {
        g_autoptr(JsonObject) done = qtest_wait_event(q,
                                                      "BLOCK_JOB_COMPLETED",
                                                      60);
        assert_no_error(done);
    }
    /* Every status change, in QEMU's order. */
    for (size_t i = 0; i < G_N_ELEMENTS(statuses); i++) {
        g_autoptr(JsonObject) ev = qtest_wait_event(q, "JOB_STATUS_CHANGE",
                                                    30);

        g_assert_cmpstr(qtest_json_str(ev, "data/status"), ==, statuses[i]);
    }
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    g_assert_nonnull(strstr(qtest_stdout(q), "copied 4 MiB"));
    qtest_assert_files_equal(im->src, im->dst);
}

static void test_cancel(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--speed", "1M", im->src, im->dst,
                                          NULL);
    g_autofree char *before = NULL;
    g_autofree char *after = NULL;
    g_autoptr(JsonObject) ev = NULL;

    g_assert_true(g_file_get_contents(im->src, &before, NULL, NULL));
    qtest_qmp_assert_success(q, "block-job-cancel",
                             "{\"device\": \"mirror\", \"force\": true}");
    ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
    g_assert_cmpint(qtest_json_int(ev, "data/offset"), <, 16 * MiB);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_READY"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
    g_assert_nonnull(strstr(qtest_stderr(q), "cancelled"));
    /* The source is never modified. */
    g_assert_true(g_file_get_contents(im->src, &after, NULL, NULL));
    g_assert_cmpmem(before, 16 * MiB, after, 16 * MiB);
}

static void test_cancel_after_ready(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(4 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) ev = NULL;

    qtest_qmp_assert_success(q, "block-job-cancel", DEV);
    /* A point-in-time copy: COMPLETED, not CANCELLED. */
    ev = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    assert_no_error(ev);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_CANCELLED"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

static void test_pause(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--speed", "2M", "--chunk-size",
                                          "256K", im->src, im->dst, NULL);
    g_autoptr(JsonObject) job = NULL;
    int64_t offset;

    qtest_qmp_assert_success(q, "block-job-pause", DEV);
    qtest_qmp_assert_error(q, "GenericError", "Job is already paused",
                           "block-job-pause", DEV);
    qtest_wait_status(q, "paused", 30);
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "paused");
    g_assert_true(qtest_json_bool(job, "paused"));
    g_assert_false(qtest_json_bool(job, "busy"));
    g_assert_false(qtest_json_bool(job, "ready"));
    g_assert_cmpint(qtest_json_int(job, "in-flight-bytes"), ==, 0);
    offset = qtest_json_int(job, "offset");
    g_assert_cmpint(offset, <, 16 * MiB);

    /*
     * Lift the limit while paused: a job that did not hold still would
     * now issue at full speed, on the next turn of the tool's main loop
     * (set-speed kicks it).  Each query is a turn: none may see it move.
     */
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    for (int i = 0; i < 3; i++) {
        g_autoptr(JsonObject) j = qtest_query_job(q);

        g_assert_cmpint(qtest_json_int(j, "offset"), ==, offset);
        g_assert_cmpint(qtest_json_int(j, "in-flight-bytes"), ==, 0);
        g_assert_cmpstr(qtest_json_str(j, "status"), ==, "paused");
    }

    qtest_qmp_assert_success(q, "block-job-resume", DEV);
    qtest_wait_status(q, "running", 30);
    complete_job(q, im);
}

/* A pause in READY is STANDBY; complete is accepted there and takes
 * effect on resume. */
static void test_pause_ready(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(4 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) job = NULL;
    g_autoptr(JsonObject) done = NULL;

    qtest_qmp_assert_success(q, "job-pause", "{\"id\": \"mirror\"}");
    qtest_wait_status(q, "standby", 30);
    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "standby");
    qtest_qmp_assert_success(q, "job-resume", "{\"id\": \"mirror\"}");
    qtest_wait_status(q, "ready", 30);
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    assert_no_error(done);
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

/* Complete before READY is refused with QEMU's verb-table message. */
static void test_complete_too_early(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--speed", "1M", im->src, im->dst,
                                          NULL);

    qtest_qmp_assert_error(q, "GenericError",
                           "Job 'mirror' in state 'running' cannot accept "
                           "command verb 'complete'",
                           "block-job-complete", DEV);
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    complete_job(q, im);
}

/* Sizes and parameters that must all end in an exact copy. */
typedef struct CopyCase {
    const char *path;
    int64_t size;
    const char *args[5];
} CopyCase;

static const CopyCase copy_cases[] = {
    /* buf-size 4096 is rounded up to the granularity */
    { "/qmp/041/small-buffer", 4 * MiB, { "--buf-size", "4096" } },
    { "/qmp/041/small-buffer-granularity", 1 * MiB,
      { "--buf-size", "4096", "--granularity", "512" } },
    { "/qmp/041/granularity", 4 * MiB, { "--granularity", "8192" } },
    { "/qmp/041/granularity-large", 4 * MiB, { "--granularity", "2M" } },
    { "/qmp/041/chunk-size", 4 * MiB,
      { "--chunk-size", "64K", "--max-in-flight", "3" } },
    { "/qmp/041/buf-size-unaligned", 4 * MiB,
      { "--buf-size", "100000", "--chunk-size", "32K" } },
    { "/qmp/041/zero-length", 0, { NULL } },
    { "/qmp/041/unaligned-length", 1025 * KiB, { NULL } },
    { "/qmp/041/unaligned-length-granularity", 1025 * KiB + 1,
      { "--granularity", "4K" } },
};

static void test_copy_case(const void *opaque)
{
    const CopyCase *c = opaque;
    g_autoptr(QTestImages) im = qtest_images_new(c->size);
    g_autoptr(GPtrArray) args = g_ptr_array_new();
    g_autoptr(QTestState) q = NULL;
    g_autoptr(JsonObject) job = NULL;

    for (int i = 0; c->args[i]; i++) {
        g_ptr_array_add(args, (char *)c->args[i]);
    }
    g_ptr_array_add(args, im->src);
    g_ptr_array_add(args, im->dst);
    g_ptr_array_add(args, NULL);
    q = qtest_startv(im->dir, QTEST_QMP_WAIT,
                     (const char *const *)args->pdata);
    {
        g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY",
                                                       60);

        g_assert_cmpint(qtest_json_int(ready, "data/len"), ==, c->size);
        g_assert_cmpint(qtest_json_int(ready, "data/offset"), ==, c->size);
    }
    job = qtest_query_job(q);
    g_assert_cmpint(qtest_json_int(job, "len"), ==, c->size);
    g_assert_true(qtest_json_bool(job, "in-sync"));
    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    {
        g_autoptr(JsonObject) done = qtest_wait_event(q,
                                                      "BLOCK_JOB_COMPLETED",
                                                      60);
        assert_no_error(done);
    }
    g_assert_cmpint(qtest_wait_exit(q, 60), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

/* A zero-length image can also be soft-cancelled at READY. */
static void test_zero_length_cancel(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(0);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 30);
    g_autoptr(JsonObject) done = NULL;

    qtest_qmp_assert_success(q, "block-job-cancel", DEV);
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    assert_no_error(done);
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
}

/* ---- invalid values on the command line: exit 2, a clear message ---- */

static void test_invalid_cli(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(1 * MiB);
    static const struct {
        const char *opt, *val, *msg;
    } cases[] = {
        { "--granularity", "1000", "power of 2 between 512 and 64M" },
        { "--granularity", "256", "power of 2 between 512 and 64M" },
        { "--granularity", "128M", "power of 2 between 512 and 64M" },
        { "--buf-size", "-1", "--buf-size '-1': invalid size" },
        { "--buf-size", "0", "--buf-size '0': must be between" },
        { "--chunk-size", "3M", "power of 2 between 4K and 64M" },
        { "--chunk-size", "1K", "power of 2 between 4K and 64M" },
        { "--max-in-flight", "0", "must be between 1 and 1024" },
        { "--speed", "-1", "--speed '-1': invalid size" },
        { "--sync", "incremental", "expected full, top or none" },
        { "--on-source-error", "auto", "expected report, ignore" },
        { "--copy-mode", "fast", "expected background or write-blocking" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_NO_QMP,
                                              cases[i].opt, cases[i].val,
                                              im->src, im->dst, NULL);
        const char *err;

        g_assert_cmpint(qtest_wait_exit(q, 30), ==, 2);
        err = qtest_stderr(q);
        g_test_message("%s %s: %s", cases[i].opt, cases[i].val, err);
        g_assert_true(g_str_has_prefix(err, "mirror-tool: "));
        g_assert_nonnull(strstr(err, cases[i].msg));
        g_assert_cmpstr(qtest_stdout(q), ==, "");
    }
    /* Different sizes are bad input too. */
    {
        g_autofree char *small = g_build_filename(im->dir, "small.raw",
                                                  NULL);
        g_autoptr(QTestState) q = NULL;

        qtest_write_sparse_file(small, 512 * KiB);
        q = qtest_start(im->dir, QTEST_NO_QMP, im->src, small, NULL);
        g_assert_cmpint(qtest_wait_exit(q, 30), ==, 2);
        g_assert_nonnull(strstr(qtest_stderr(q), "different sizes"));
    }
}

/* ---- 041 TestSetSpeed ---- */

static void test_set_speed(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, "--speed",
                                          "1M", im->src, im->dst, NULL);
    g_autoptr(JsonObject) j1 = qtest_query_job(q);
    g_autoptr(JsonObject) j2 = NULL;
    g_autoptr(JsonObject) j3 = NULL;

    g_assert_cmpint(qtest_json_int(j1, "speed"), ==, 1 * MiB);
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": %d}",
                             (int)(8 * MiB));
    j2 = qtest_query_job(q);
    g_assert_cmpint(qtest_json_int(j2, "speed"), ==, 8 * MiB);
    qtest_qmp_assert_error(q, "GenericError",
                           "Parameter 'speed' expects a non-negative value",
                           "block-job-set-speed",
                           "{\"device\": \"mirror\", \"speed\": -1}");
    j3 = qtest_query_job(q);
    g_assert_cmpint(qtest_json_int(j3, "speed"), ==, 8 * MiB);
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    complete_job(q, im);
}

static void test_set_speed_default(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(1 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) job = qtest_query_job(q);

    g_assert_cmpint(qtest_json_int(job, "speed"), ==, 0);
    complete_job(q, im);
}

/*
 * The limit holds, counted in bytes rather than measured in time: at
 * 1 byte/s the limiter admits the first 64 KiB copy of its 100 ms slice
 * (the request that crosses the quota goes) and then makes the job wait
 * 64 KiB / 1 B/s, about 18 hours.  Once the first chunk is copied, a
 * pause (which drains what is in flight) finds the job at exactly that
 * chunk; a job that ignored the limit would have 16 operations in flight
 * by then, or be READY.  Lifted at run time, the waiting job goes on at
 * once to READY and an exact copy.
 */
static void test_set_speed_throttles(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--chunk-size", "64K", "--speed",
                                          "1", im->src, im->dst, NULL);
    g_autoptr(JsonObject) job = qtest_wait_job_int(q, "offset", 1, 60);

    g_assert_cmpint(qtest_json_int(job, "speed"), ==, 1);

    qtest_qmp_assert_success(q, "block-job-pause", DEV);
    qtest_wait_status(q, "paused", 30);
    g_clear_pointer(&job, json_object_unref);
    job = qtest_query_job(q);
    g_assert_cmpint(qtest_json_int(job, "offset"), ==, 64 * KiB);
    g_assert_cmpint(qtest_json_int(job, "in-flight-bytes"), ==, 0);
    g_assert_false(qtest_json_bool(job, "ready"));
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_READY"));

    qtest_qmp_assert_success(q, "block-job-resume", DEV);
    qtest_wait_status(q, "running", 30);
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    complete_job(q, im);
}

/*
 * Speeds from 2^62 up wrapped in the rate limiter (speed * slice) to a
 * quota of 1 byte per 100 ms: the job stalled.  Any non-negative speed is
 * valid (as in QEMU) and these are unlimited in effect.
 */
static void check_set_speed_huge(int64_t speed)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, "--speed",
                                          "1M", im->src, im->dst, NULL);
    g_autoptr(JsonObject) job = NULL;

    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": %"
                             G_GINT64_FORMAT "}", speed);
    job = qtest_query_job(q);
    g_assert_cmpint(qtest_json_int(job, "speed"), ==, speed);
    complete_job(q, im);
}

static void test_set_speed_2_62(void)
{
    check_set_speed_huge(INT64_C(1) << 62);
}

static void test_set_speed_max(void)
{
    check_set_speed_huge(INT64_MAX);
}

/*
 * block-job-change checks auto-converge-ms and -passes as the CLI does
 * (mirror_check_converge_*()): 2^63-1 overflowed a multiplication, and
 * negative values were accepted and ignored.  A refused change changes
 * nothing, not even the members that were valid.
 */
static void test_change_converge_ranges(void)
{
    static const struct {
        const char *member;
        const char *value;
        const char *error;
    } bad[] = {
        { "auto-converge-ms", "9223372036854775807",
          "Parameter 'auto-converge-ms' expects a value in range "
          "[1, 86400000]" },
        { "auto-converge-ms", "86400001",
          "Parameter 'auto-converge-ms' expects a value in range "
          "[1, 86400000]" },
        { "auto-converge-ms", "0",
          "Parameter 'auto-converge-ms' expects a value in range "
          "[1, 86400000]" },
        { "auto-converge-ms", "-1",
          "Parameter 'auto-converge-ms' expects a value in range "
          "[1, 86400000]" },
        { "auto-converge-passes", "-1",
          "Parameter 'auto-converge-passes' expects a value in range "
          "[0, 1000000]" },
        { "auto-converge-passes", "1000001",
          "Parameter 'auto-converge-passes' expects a value in range "
          "[0, 1000000]" },
    };
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, "--speed",
                                          "1M", im->src, im->dst, NULL);
    g_autoptr(JsonObject) ready = NULL;
    g_autoptr(JsonObject) job = NULL;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        qtest_qmp_assert_error(q, "GenericError", bad[i].error,
                               "block-job-change",
                               "{\"id\": \"mirror\", \"type\": \"mirror\", "
                               "\"copy-mode\": \"write-blocking\", "
                               "\"%s\": %s}", bad[i].member, bad[i].value);
    }
    /* Still background: write-blocking would be actively synced. */
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    job = qtest_query_job(q);
    g_assert_false(qtest_json_bool(job, "actively-synced"));
    qtest_qmp_assert_success(q, "block-job-change",
                             "{\"id\": \"mirror\", \"type\": \"mirror\", "
                             "\"auto-converge-ms\": 86400000, "
                             "\"auto-converge-passes\": 0}");
    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    g_assert_cmpint(qtest_wait_exit(q, 60), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

/* ---- 218: cancel in each phase ---- */

static void cancel_before_ready(bool force)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, "--speed",
                                          "1M", im->src, im->dst, NULL);
    g_autoptr(JsonObject) ev = NULL;

    qtest_qmp_assert_success(q, "block-job-cancel",
                             "{\"device\": \"mirror\", \"force\": %s}",
                             force ? "true" : "false");
    /* Before READY every cancel is a force cancel. */
    ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
    g_assert_cmpint(qtest_json_int(ev, "data/offset"), <, 16 * MiB);
    qtest_wait_status(q, "aborting", 30);
    qtest_wait_status(q, "null", 30);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_READY"));
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_COMPLETED"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
}

static void test_218_cancel_before_ready_soft(void)
{
    cancel_before_ready(false);
}

static void test_218_cancel_before_ready_force(void)
{
    cancel_before_ready(true);
}

static void cancel_after_ready(bool force)
{
    g_autoptr(QTestImages) im = qtest_images_new(4 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, im->src,
                                          im->dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) ev = NULL;

    qtest_qmp_assert_success(q, "block-job-cancel",
                             "{\"device\": \"mirror\", \"force\": %s}",
                             force ? "true" : "false");
    if (force) {
        ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
        g_assert_null(qtest_take_event(q, "BLOCK_JOB_COMPLETED"));
        g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
    } else {
        ev = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
        assert_no_error(ev);
        g_assert_null(qtest_take_event(q, "BLOCK_JOB_CANCELLED"));
        g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
        qtest_assert_files_equal(im->src, im->dst);
    }
}

static void test_218_cancel_after_ready_soft(void)
{
    cancel_after_ready(false);
}

static void test_218_cancel_after_ready_force(void)
{
    cancel_after_ready(true);
}

/* quit while every source read takes 1 s: the tool is gone within 5 s. */
static void test_218_quit_throttled(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(64 * MiB);
    g_autofree char *src = g_strdup_printf("blkdebug:latency-ns=1000000000:%s",
                                           im->src);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT, "--speed",
                                          "4M", src, im->dst, NULL);
    g_autoptr(JsonObject) job = qtest_wait_job_str(q, "status", "running",
                                                   30);
    gint64 t0;

    t0 = g_get_monotonic_time();
    qtest_qmp_assert_success(q, "quit", NULL);
    qtest_wait_exit(q, 5);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/041/complete", test_complete);
    g_test_add_func("/qmp/041/cancel", test_cancel);
    g_test_add_func("/qmp/041/cancel-after-ready", test_cancel_after_ready);
    g_test_add_func("/qmp/041/pause", test_pause);
    g_test_add_func("/qmp/041/pause-ready", test_pause_ready);
    g_test_add_func("/qmp/041/complete-too-early", test_complete_too_early);
    for (size_t i = 0; i < G_N_ELEMENTS(copy_cases); i++) {
        g_test_add_data_func(copy_cases[i].path, &copy_cases[i],
                             test_copy_case);
    }
    g_test_add_func("/qmp/041/zero-length-cancel", test_zero_length_cancel);
    g_test_add_func("/qmp/041/invalid-cli", test_invalid_cli);
    g_test_add_func("/qmp/041/set-speed", test_set_speed);
    g_test_add_func("/qmp/041/set-speed-default", test_set_speed_default);
    g_test_add_func("/qmp/041/set-speed-throttles", test_set_speed_throttles);
    g_test_add_func("/qmp/set-speed/2^62", test_set_speed_2_62);
    g_test_add_func("/qmp/set-speed/int64-max", test_set_speed_max);
    g_test_add_func("/qmp/block-job-change/converge-ranges",
                    test_change_converge_ranges);
    g_test_add_func("/qmp/218/cancel-before-ready/soft",
                    test_218_cancel_before_ready_soft);
    g_test_add_func("/qmp/218/cancel-before-ready/force",
                    test_218_cancel_before_ready_force);
    g_test_add_func("/qmp/218/cancel-after-ready/soft",
                    test_218_cancel_after_ready_soft);
    g_test_add_func("/qmp/218/cancel-after-ready/force",
                    test_218_cancel_after_ready_force);
    g_test_add_func("/qmp/218/quit-throttled", test_218_quit_throttled);
    return g_test_run();
}
