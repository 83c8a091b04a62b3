/*
 * Helpers for the GTest unit programs.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/test-util.h"

#include <glib/gstdio.h>
#include <string.h>

static gboolean test_timeout_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

void test_run_until(bool *flag, int timeout_s)
{
    bool timed_out = false;
    guint id = g_timeout_add_seconds(timeout_s, test_timeout_cb, &timed_out);

    while (!*flag && !timed_out) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_assert_false(timed_out);
    g_source_remove(id);
}

typedef struct SyncReq {
    bool done;
    int ret;
} SyncReq;

static void sync_cb(void *opaque, int ret)
{
    SyncReq *r = opaque;

    r->ret = ret;
    r->done = true;
}

#define SYNC(call)                              \
    do {                                        \
        SyncReq r = { 0 };                      \
        call;                                   \
        test_run_until(&r.done, 60);            \
        return r.ret;                           \
    } while (0)

int test_pread(BlockDriverState *bs, int64_t off, int64_t bytes, void *buf)
{
    SYNC(bdrv_aio_pread(bs, off, bytes, buf, 0, sync_cb, &r));
}

int test_pwrite(BlockDriverState *bs, int64_t off, int64_t bytes,
                const void *buf)
{
    SYNC(bdrv_aio_pwrite(bs, off, bytes, buf, 0, sync_cb, &r));
}

int test_pwrite_zeroes(BlockDriverState *bs, int64_t off, int64_t bytes,
                       BdrvRequestFlags flags)
{
    SYNC(bdrv_aio_pwrite_zeroes(bs, off, bytes, flags, sync_cb, &r));
}

int test_pdiscard(BlockDriverState *bs, int64_t off, int64_t bytes)
{
    SYNC(bdrv_aio_pdiscard(bs, off, bytes, sync_cb, &r));
}

int test_flush(BlockDriverState *bs)
{
    SYNC(bdrv_aio_flush(bs, sync_cb, &r));
}

int test_block_status(BlockDriverState *bs, int64_t off, int64_t bytes,
                      GArray *extents)
{
    SYNC(bdrv_aio_block_status(bs, off, bytes, extents, sync_cb, &r));
}

BlockDriverState *test_open(const char *spec, const char *format, int flags)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = bdrv_open(spec, format, flags, NULL, &err);

    g_assert_no_error(err);
    g_assert_nonnull(bs);
    return bs;
}

static void test_job_event_cb(Job *job, const JobEvent *e, void *opaque)
{
    TestJobEvents *ev = opaque;

    g_array_append_val(ev->events, *e);
    switch (e->type) {
    case JOB_EVENT_STATUS_CHANGE:
        g_array_append_val(ev->statuses, e->status);
        if (e->status == JOB_STATUS_CONCLUDED) {
            ev->concluded = true;
        }
        break;
    case JOB_EVENT_READY:
        ev->ready_count++;
        break;
    case JOB_EVENT_PENDING:
        ev->pending_count++;
        break;
    case JOB_EVENT_COMPLETED:
        ev->completed_count++;
        break;
    case JOB_EVENT_CANCELLED:
        ev->cancelled_count++;
        break;
    case JOB_EVENT_ERROR:
        ev->error_count++;
        break;
    case JOB_EVENT_COPY_MODE:
        ev->copy_mode_count++;
        break;
    case JOB_EVENT_RECONNECTING:
        ev->reconnect_count++;
        break;
    }
}

void test_job_events_attach(TestJobEvents *ev, Job *job)
{
    memset(ev, 0, sizeof(*ev));
    ev->statuses = g_array_new(FALSE, FALSE, sizeof(JobStatus));
    ev->events = g_array_new(FALSE, FALSE, sizeof(JobEvent));
    job_add_listener(job, test_job_event_cb, ev);
}

void test_job_events_clear(TestJobEvents *ev)
{
    g_array_unref(ev->statuses);
    g_array_unref(ev->events);
}

char *test_scratch_new(void)
{
    g_autoptr(GError) err = NULL;
    char *dir = g_dir_make_tmp("qemu-mirror-test-XXXXXX", &err);

    g_assert_no_error(err);
    return dir;
}

void test_scratch_free(char *dir)
{
    GDir *d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);
        g_unlink(path);
    }
    if (d) {
        g_dir_close(d);
    }
    g_rmdir(dir);
    g_free(dir);
}

void test_fill_pattern(uint8_t *buf, int64_t offset, int64_t bytes,
                       uint32_t seed)
{
    for (int64_t i = 0; i < bytes; i++) {
        uint64_t x = (uint64_t)(offset + i) * 2654435761u + seed;
        buf[i] = (uint8_t)(x ^ (x >> 13) ^ (x >> 29));
    }
}
