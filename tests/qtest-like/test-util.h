/*
 * Helpers for the GTest unit programs: run the main loop until something
 * happens (never sleep), synchronous wrappers for tests only, scratch
 * directories, and job event recording.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <glib.h>
#include "block/block.h"
#include "block/mirror/job.h"

/* Iterate the main context until *@flag is true, failing the test after
 * @timeout_s seconds. */
void test_run_until(bool *flag, int timeout_s);

/* Synchronous request wrappers: submit, run the loop, return the result. */
int test_pread(BlockDriverState *bs, int64_t off, int64_t bytes, void *buf);
int test_pwrite(BlockDriverState *bs, int64_t off, int64_t bytes,
                const void *buf);
int test_pwrite_zeroes(BlockDriverState *bs, int64_t off, int64_t bytes,
                       BdrvRequestFlags flags);
int test_pdiscard(BlockDriverState *bs, int64_t off, int64_t bytes);
int test_flush(BlockDriverState *bs);
int test_block_status(BlockDriverState *bs, int64_t off, int64_t bytes,
                      GArray *extents);

/* Open a spec or fail the test. */
BlockDriverState *test_open(const char *spec, const char *format, int flags);

/* Records every event of a job. */
typedef struct TestJobEvents {
    GArray *statuses;       /* JobStatus, in order */
    GArray *events;         /* JobEvent, in order */
    bool concluded;
    int ready_count;
    int pending_count;
    int completed_count;
    int cancelled_count;
    int error_count;
    int copy_mode_count;
    int reconnect_count;      /* JOB_EVENT_RECONNECTING, both ways */
} TestJobEvents;

void test_job_events_attach(TestJobEvents *ev, Job *job);
void test_job_events_clear(TestJobEvents *ev);

/* A scratch directory removed (with its files) by test_scratch_free. */
char *test_scratch_new(void);
void test_scratch_free(char *dir);

/* Fill @buf with a pattern that depends on @seed and the offset. */
void test_fill_pattern(uint8_t *buf, int64_t offset, int64_t bytes,
                       uint32_t seed);

/* For the NBD tests (test-nbd*.c): nbdkit arguments for a 1 MiB server
 * without trim, flush, FUA or multi-conn (the eval plugin advertises only
 * what has a script); reads zeroes. */
#define EVAL_SERVER "eval", "get_size=echo 1048576", \
    "pread=dd if=/dev/zero bs=$3 count=1 status=none", \
    "pwrite=cat >/dev/null"

#endif /* TEST_UTIL_H */
