/*
 * Error handling of the mirror job over QMP, ported from QEMU's iotests:
 * 041 TestReadErrors / TestWriteErrors (report, ignore, stop, enospc),
 * 229 (force-cancel a job stopped by an error) and
 * tests/mirror-ready-cancel-error (the final flush fails during a soft
 * cancel after READY, transiently or persistently).
 *
 * Faults come from the blkdebug filter over the raw images: a rule fails
 * one operation at one offset, once (error-once=on) or exactly while a
 * trigger file exists, which the test removes when it has seen what it
 * wanted.  Every scenario that promises a copy ends with a byte compare.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest.h"
#include "util/cutils.h"

#include <string.h>

#define DEV "{\"device\": \"mirror\"}"
#define IMAGE_SIZE (4 * MiB)
#define ERROR_OFFSET "2M"

typedef enum FaultMode {
    FAULT_ONCE,         /* error-once=on */
    FAULT_TRIGGER,      /* while the trigger file exists */
} FaultMode;

/* "blkdebug:error-op=OP,error-offset=2M,...:IMAGE" */
static char *fault_spec(QTestImages *im, const char *image, const char *op,
                        FaultMode mode, const char *err)
{
    g_autofree char *rule = NULL;

    if (mode == FAULT_ONCE) {
        rule = g_strdup("error-once=on");
    } else {
        rule = g_strdup_printf("error-file=%s", im->trigger);
        qtest_images_set_trigger(im, true);
    }
    return g_strdup_printf("blkdebug:error-op=%s,error-offset=%s,"
                           "error-errno=%s,%s:%s", op,
                           !strcmp(op, "flush") ? "0" : ERROR_OFFSET, err,
                           rule, image);
}

/* Start mirroring with a fault on the source (@is_read) or the target,
 * and @policy for it. */
static QTestState *start_faulty(QTestImages *im, bool is_read, FaultMode mode,
                                const char *err, const char *policy)
{
    g_autofree char *spec = fault_spec(im, is_read ? im->src : im->dst,
                                       is_read ? "read" : "write", mode,
                                       err);

    return qtest_start(im->dir, QTEST_QMP_WAIT,
                       is_read ? "--on-source-error" : "--on-target-error",
                       policy, "--chunk-size", "256K",
                       is_read ? spec : im->src, is_read ? im->dst : spec,
                       NULL);
}

/* The next BLOCK_JOB_ERROR: device, operation and action as expected. */
static void expect_error_event(QTestState *q, bool is_read,
                               const char *action)
{
    g_autoptr(JsonObject) ev = qtest_wait_event(q, "BLOCK_JOB_ERROR", 30);

    g_assert_cmpstr(qtest_json_str(ev, "data/device"), ==, "mirror");
    g_assert_cmpstr(qtest_json_str(ev, "data/operation"), ==,
                    is_read ? "read" : "write");
    g_assert_cmpstr(qtest_json_str(ev, "data/action"), ==, action);
}

/* READY, complete, COMPLETED without error, exit 0, an exact copy. */
static void complete_job(QTestState *q, QTestImages *im)
{
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) done = NULL;

    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 60);
    g_assert_false(qtest_json_has(done, "data/error"));
    g_assert_cmpint(qtest_wait_exit(q, 60), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

/* report: the job fails with "Input/output error"; exit 1. */
static void check_report(bool is_read, const char *policy, const char *err)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_faulty(im, is_read, FAULT_TRIGGER, err,
                                           policy);
    g_autoptr(JsonObject) done = NULL;
    g_autofree char *where = g_strdup_printf("%s error at offset %d",
                                             is_read ? "read" : "write",
                                             (int)(2 * MiB));

    expect_error_event(q, is_read, "report");
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    g_assert_cmpstr(qtest_json_str(done, "data/error"), ==,
                    "Input/output error");
    g_assert_cmpint(qtest_json_int(done, "data/offset"), <, IMAGE_SIZE);
    qtest_wait_status(q, "aborting", 30);
    qtest_wait_status(q, "null", 30);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_READY"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
    g_assert_nonnull(strstr(qtest_stderr(q), where));
}

static void test_read_report(void)
{
    check_report(true, "report", "EIO");
}

static void test_write_report(void)
{
    check_report(false, "report", "EIO");
}

/* enospc with another errno: report. */
static void test_write_enospc_eio(void)
{
    check_report(false, "enospc", "EIO");
}

/* ignore: an event, the job goes on (not paused) and completes. */
static void check_ignore(bool is_read, FaultMode mode)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_faulty(im, is_read, mode, "EIO",
                                           "ignore");
    g_autoptr(JsonObject) job = NULL;
    JsonObject *more;

    expect_error_event(q, is_read, "ignore");
    if (mode == FAULT_TRIGGER) {
        qtest_images_set_trigger(im, false);
    }
    job = qtest_query_job(q);
    g_assert_false(qtest_json_bool(job, "paused"));
    g_assert_cmpstr(qtest_json_str(job, "io-status"), ==, "ok");
    g_assert_cmpstr(qtest_json_str(job, "status"), !=, "paused");
    complete_job(q, im);
    /* Once means once; with the trigger, errors until it went away. */
    more = qtest_take_event(q, "BLOCK_JOB_ERROR");
    if (mode == FAULT_ONCE) {
        g_assert_null(more);
    }
    g_clear_pointer(&more, json_object_unref);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_CANCELLED"));
}

static void test_read_ignore(void)
{
    check_ignore(true, FAULT_ONCE);
}

static void test_read_ignore_trigger(void)
{
    check_ignore(true, FAULT_TRIGGER);
}

static void test_write_ignore(void)
{
    check_ignore(false, FAULT_ONCE);
}

static void test_write_ignore_trigger(void)
{
    check_ignore(false, FAULT_TRIGGER);
}

/*
 * stop (or enospc with ENOSPC): paused with io-status failed/nospace;
 * resume clears it, the job retries the range and completes.
 */
static void check_stop(bool is_read, const char *policy, const char *err,
                       const char *io_status)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_faulty(im, is_read, FAULT_TRIGGER, err,
                                           policy);
    g_autoptr(JsonObject) job = NULL;
    g_autoptr(JsonObject) job2 = NULL;

    expect_error_event(q, is_read, "stop");
    qtest_wait_status(q, "paused", 30);
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "paused");
    g_assert_true(qtest_json_bool(job, "paused"));
    g_assert_false(qtest_json_bool(job, "ready"));
    g_assert_cmpstr(qtest_json_str(job, "io-status"), ==, io_status);
    /* The failed range is dirty again. */
    g_assert_cmpint(qtest_json_int(job, "dirty-bytes"), >, 0);
    /* Stopped like a user pause: another pause is refused. */
    qtest_qmp_assert_error(q, "GenericError", "Job is already paused",
                           "block-job-pause", DEV);

    qtest_images_set_trigger(im, false);
    qtest_qmp_assert_success(q, "block-job-resume", DEV);
    job2 = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job2, "io-status"), ==, "ok");
    qtest_wait_status(q, "running", 30);
    complete_job(q, im);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_ERROR"));
}

static void test_read_stop(void)
{
    check_stop(true, "stop", "EIO", "failed");
}

static void test_write_stop(void)
{
    check_stop(false, "stop", "EIO", "failed");
}

static void test_write_enospc(void)
{
    check_stop(false, "enospc", "ENOSPC", "nospace");
}

static void test_read_enospc(void)
{
    check_stop(true, "enospc", "ENOSPC", "nospace");
}

/* 229: a job stopped by an error can be force-cancelled. */
static void check_cancel_stopped(bool force)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_faulty(im, false, FAULT_TRIGGER, "EIO",
                                           "stop");
    g_autoptr(JsonObject) job = NULL;
    g_autoptr(JsonObject) ev = NULL;

    expect_error_event(q, false, "stop");
    qtest_wait_status(q, "paused", 30);
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "io-status"), ==, "failed");
    /* The fault is still there: nothing may be retried. */
    qtest_qmp_assert_success(q, "block-job-cancel",
                             "{\"device\": \"mirror\", \"force\": %s}",
                             force ? "true" : "false");
    ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
    g_assert_cmpint(qtest_json_int(ev, "data/offset"), <, IMAGE_SIZE);
    qtest_wait_status(q, "null", 30);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_COMPLETED"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
}

static void test_229_force_cancel(void)
{
    check_cancel_stopped(true);
}

/* Before READY a soft cancel is a force cancel, paused or not. */
static void test_229_soft_cancel(void)
{
    check_cancel_stopped(false);
}

/*
 * mirror-ready-cancel-error: after READY, a soft cancel flushes the
 * target once more; that flush fails (on-target-error=stop), the job goes
 * to STANDBY.  Transient: resume, the flush is retried and the job
 * completes with a point-in-time copy.  Persistent: it stays stopped and
 * only a force cancel ends it.
 */
static void check_ready_cancel_error(bool transient)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autofree char *dst = g_strdup_printf("blkdebug:error-op=flush,"
                                           "error-file=%s:%s", im->trigger,
                                           im->dst);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--on-target-error", "stop",
                                          im->src, dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) job = NULL;
    g_autoptr(JsonObject) ev = NULL;

    qtest_conn_clear_events(qtest_conn(q));
    qtest_images_set_trigger(im, true);
    qtest_qmp_assert_success(q, "block-job-cancel", DEV);
    expect_error_event(q, false, "stop");
    qtest_wait_status(q, "standby", 30);
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "standby");
    g_assert_cmpstr(qtest_json_str(job, "io-status"), ==, "failed");
    g_assert_true(qtest_json_bool(job, "paused"));

    if (transient) {
        qtest_images_set_trigger(im, false);
        qtest_qmp_assert_success(q, "block-job-resume", DEV);
        qtest_wait_status(q, "ready", 30);
        ev = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
        g_assert_false(qtest_json_has(ev, "data/error"));
        g_assert_null(qtest_take_event(q, "BLOCK_JOB_ERROR"));
        qtest_wait_status(q, "null", 30);
        g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
        qtest_assert_files_equal(im->src, im->dst);
        return;
    }
    /* Persistent: a resume only fails the flush again. */
    qtest_qmp_assert_success(q, "block-job-resume", DEV);
    expect_error_event(q, false, "stop");
    qtest_wait_status(q, "standby", 30);
    qtest_qmp_assert_success(q, "block-job-cancel",
                             "{\"device\": \"mirror\", \"force\": true}");
    ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
    g_assert_null(qtest_take_event(q, "BLOCK_JOB_COMPLETED"));
    qtest_wait_status(q, "null", 30);
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
}

static void test_ready_cancel_error_transient(void)
{
    check_ready_cancel_error(true);
}

static void test_ready_cancel_error_persistent(void)
{
    check_ready_cancel_error(false);
}

/* block-job-complete takes the same path: the final flush fails and is
 * retried on resume. */
static void test_ready_complete_error_transient(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autofree char *dst = g_strdup_printf("blkdebug:error-op=flush,"
                                           "error-file=%s:%s", im->trigger,
                                           im->dst);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--on-target-error", "stop",
                                          im->src, dst, NULL);
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 60);
    g_autoptr(JsonObject) ev = NULL;

    qtest_images_set_trigger(im, true);
    qtest_qmp_assert_success(q, "block-job-complete", DEV);
    expect_error_event(q, false, "stop");
    qtest_wait_status(q, "standby", 30);
    qtest_images_set_trigger(im, false);
    qtest_qmp_assert_success(q, "block-job-resume", DEV);
    ev = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    g_assert_false(qtest_json_has(ev, "data/error"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/041/read-error/report", test_read_report);
    g_test_add_func("/qmp/041/read-error/ignore", test_read_ignore);
    g_test_add_func("/qmp/041/read-error/ignore-trigger",
                    test_read_ignore_trigger);
    g_test_add_func("/qmp/041/read-error/stop", test_read_stop);
    g_test_add_func("/qmp/041/read-error/enospc", test_read_enospc);
    g_test_add_func("/qmp/041/write-error/report", test_write_report);
    g_test_add_func("/qmp/041/write-error/ignore", test_write_ignore);
    g_test_add_func("/qmp/041/write-error/ignore-trigger",
                    test_write_ignore_trigger);
    g_test_add_func("/qmp/041/write-error/stop", test_write_stop);
    g_test_add_func("/qmp/041/write-error/enospc", test_write_enospc);
    g_test_add_func("/qmp/041/write-error/enospc-eio",
                    test_write_enospc_eio);
    g_test_add_func("/qmp/229/force-cancel-stopped", test_229_force_cancel);
    g_test_add_func("/qmp/229/soft-cancel-stopped", test_229_soft_cancel);
    g_test_add_func("/qmp/ready-cancel-error/transient",
                    test_ready_cancel_error_transient);
    g_test_add_func("/qmp/ready-cancel-error/persistent",
                    test_ready_cancel_error_persistent);
    g_test_add_func("/qmp/ready-complete-error/transient",
                    test_ready_complete_error_transient);
    return g_test_run();
}
