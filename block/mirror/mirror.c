/*
 * The mirror job: dirty bitmap, bounded operations in flight, bulk and sync
 * stages, READY, completion and cancel.
 *
 * Everything runs on the main loop.  mirror_pump() is nbdcopy's
 * wait-for-request-slots loop turned inside out: it starts operations until
 * a limit is reached (max-in-flight operations, buf-size bytes of data,
 * the speed limit, free buffers) and every completion calls it again.
 *
 * An operation covers whole granules [offset, offset + bytes) (the last one
 * may end at the end of the image).  Its dirty bits are cleared when it
 * starts, before the source is read, and set again if it fails; no two
 * operations overlap (in_flight_bitmap).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"
#include "block/mirror/mirror-top.h"

#include <errno.h>
#include <inttypes.h>

void mirror_params_init(MirrorParams *p)
{
    *p = (MirrorParams) {
        .sync = MIRROR_SYNC_MODE_FULL,
        .copy_mode = MIRROR_COPY_MODE_BACKGROUND,
        .on_source_error = BLOCKDEV_ON_ERROR_REPORT,
        .on_target_error = BLOCKDEV_ON_ERROR_REPORT,
    };
}

static MirrorJob *mirror_job(Job *job)
{
    return container_of(job, MirrorJob, common);
}

/* ---- scheduling ---- */

static gboolean mirror_kick_cb(gpointer opaque)
{
    MirrorJob *s = opaque;

    g_source_unref(s->kick);
    s->kick = NULL;
    mirror_pump(s);
    return G_SOURCE_REMOVE;
}

void mirror_kick(MirrorJob *s)
{
    /* Before job_start() (set-speed in CREATED) there is nothing to do. */
    if (!s->kick && !s->finished && s->dirty) {
        s->kick = bdrv_timer_new(0, mirror_kick_cb, s);
    }
}

static gboolean mirror_rate_timer_cb(gpointer opaque)
{
    MirrorJob *s = opaque;

    g_source_unref(s->rate_timer);
    s->rate_timer = NULL;
    mirror_pump(s);
    return G_SOURCE_REMOVE;
}

void mirror_rate_limit_wait(MirrorJob *s, int64_t delay_ns)
{
    g_assert(!s->rate_timer);
    s->rate_timer = bdrv_timer_new(delay_ns, mirror_rate_timer_cb, s);
}

static void mirror_cancel_timers(MirrorJob *s)
{
    if (s->kick) {
        g_source_destroy(s->kick);
        g_source_unref(s->kick);
        s->kick = NULL;
    }
    if (s->rate_timer) {
        g_source_destroy(s->rate_timer);
        g_source_unref(s->rate_timer);
        s->rate_timer = NULL;
    }
}

/* ---- the pump and the job's state ---- */

static bool mirror_can_issue(MirrorJob *s)
{
    /* Waiting active writes go first: background copies would keep them
     * waiting for ever under load. */
    return !s->finished && s->ret == 0 && !job_is_cancelled(&s->common) &&
           g_queue_is_empty(&s->active_waiting) &&
           !job_should_pause(&s->common) && !s->status_pending &&
           !s->rate_timer && s->in_flight < s->win_max_in_flight &&
           !s->flush_in_flight;
}

static void mirror_update_progress(MirrorJob *s)
{
    s->common.progress_total = s->common.progress_current +
                               dirty_bitmap_count(s->dirty) +
                               s->op_bytes_in_flight;
}

void mirror_pump(MirrorJob *s)
{
    if (s->pumping || s->finished) {
        return;
    }
    s->pumping = true;
    mirror_window_refresh(s);
    while (mirror_can_issue(s) && mirror_issue_one(s)) {
        /* keep going */
    }
    s->pumping = false;
    mirror_update_progress(s);
    mirror_check_state(s);
}

/*
 * Something wrote to the source through the block layer: that range must
 * be copied again, and what we know of its block status is stale.
 */
static void mirror_source_written(void *opaque, int64_t offset,
                                  int64_t bytes)
{
    MirrorJob *s = opaque;

    if (mirror_active_is_own_write(s, offset, bytes)) {
        return;     /* write-blocking: the job dirties what it must */
    }
    dirty_bitmap_set(s->dirty, offset, bytes);
    rate_meter_add(&s->write_rate, clock_ns(),
                   MIN(QEMU_ALIGN_UP(offset + bytes, s->granularity),
                       s->len) - QEMU_ALIGN_DOWN(offset, s->granularity));
    s->actively_synced = false;
    mirror_status_written(s, offset, bytes);
    mirror_kick(s);
}

static void mirror_remove_notifier(MirrorJob *s)
{
    if (s->notifier_added) {
        bdrv_remove_write_notifier(s->src, mirror_source_written, s);
        s->notifier_added = false;
    }
}

static void mirror_finish(MirrorJob *s, int ret)
{
    g_assert(!s->finished && s->in_flight == 0 && s->active_in_flight == 0);
    s->finished = true;
    s->stopping = true;
    if (s->top) {
        /* After a switch-over the guests' requests now go to the target. */
        mirror_top_set_job(s->top, NULL);
        if (s->drained) {
            s->drained = false;
            mirror_top_drain_end(s->top);
        }
    }
    mirror_remove_notifier(s);
    mirror_cancel_timers(s);
    mirror_converge_stop(s);
    bdrv_set_max_io(s->src, 0);
    bdrv_set_max_io(s->dst, 0);
    job_completed(&s->common, ret, NULL);
}

static void mirror_flush_done(void *opaque, int ret)
{
    MirrorJob *s = opaque;

    s->flush_in_flight = false;
    if (ret < 0) {
        mirror_error(s, false, ret, 0, 0);
    } else {
        if (s->writes_since_flush == s->flush_mark) {
            s->writes_since_flush = 0;
        }
        if (s->flush_is_final) {
            s->final_flush_done = true;
        } else if (!s->common.ready_seen) {
            s->ready_due = true;
        }
    }
    mirror_pump(s);
}

static void mirror_flush_target(MirrorJob *s)
{
    s->flush_in_flight = true;
    s->flush_mark = s->writes_since_flush;
    s->flush_is_final = s->should_complete || s->common.cancelled;
    bdrv_aio_flush(s->dst, mirror_flush_done, s);
}

/* The filter is quiesced: guests wait while we check and switch. */
static void mirror_top_drained(void *opaque)
{
    MirrorJob *s = opaque;

    s->draining = false;
    s->drained = true;
    mirror_pump(s);
}

/*
 * Go READY (once).  Without --qmp that also asks for completion, and when
 * @flushed, the flush that made us READY covered every write: it is the
 * final one.  True when the job ended meanwhile (nothing more to do).
 */
static bool mirror_ready(MirrorJob *s, bool flushed)
{
    Job *job = &s->common;

    if (job->ready_seen) {
        return false;
    }
    job_transition_to_ready(job);
    if (s->auto_complete) {
        s->should_complete = true;
        s->final_flush_done = flushed;
    }
    return s->finished || job_is_completed(job);
}

void mirror_check_state(MirrorJob *s)
{
    Job *job = &s->common;

    if (s->ready_due && !s->finished && !job_is_cancelled(job) &&
        s->ret == 0 && !job_should_pause(job)) {
        /*
         * As QEMU: READY once a flush that began with nothing dirty and
         * nothing in flight succeeded, even if guests wrote meanwhile and
         * their copies are running now.  Waiting for a moment that stays
         * clean across the flush's round trip kept busy guests' jobs from
         * READY for seconds; in-sync in query-block-jobs says whether the
         * target is behind.
         */
        s->ready_due = false;
        if (mirror_ready(s, !s->in_flight && !s->writes_since_flush &&
                            !dirty_bitmap_count(s->dirty))) {
            return;
        }
    }
    if (s->finished || s->in_flight || s->flush_in_flight ||
        s->status_pending || s->draining) {
        return;
    }
    /* No background operation in flight: the job may change state now. */
    if (job_is_cancelled(job) || s->ret < 0) {
        s->stopping = true;     /* new guest writes bypass the job */
        if (!s->active_in_flight) {
            mirror_finish(s, job_is_cancelled(job) ? -ECANCELED : s->ret);
        }
        return;
    }
    if (job_should_pause(job)) {
        if (s->drained) {
            /* Never keep guests waiting while the job is paused. */
            s->drained = false;
            mirror_top_drain_end(s->top);
        }
        job_pause_point(job);
        return;
    }
    if (dirty_bitmap_count(s->dirty) > 0) {
        if (s->drained) {
            /* Written while we quiesced: let guests go, copy, retry. */
            s->drained = false;
            mirror_top_drain_end(s->top);
        }
        return;     /* rate limited or waiting to retry */
    }
    if (s->writes_since_flush) {
        mirror_flush_target(s);
        return;
    }
    if (s->copy_mode == MIRROR_COPY_MODE_WRITE_BLOCKING) {
        s->actively_synced = true;
    }
    if (mirror_ready(s, true)) {
        return;
    }
    if (s->should_complete || job->cancelled) {
        if (s->top && !s->drained) {
            /* Quiesce guests, then look again: nothing may be dirty. */
            s->draining = true;
            mirror_top_drain_begin(s->top, mirror_top_drained, s);
            return;
        }
        /*
         * As QEMU: complete (or a soft cancel) flushes the target once
         * more, even with nothing written since READY, and a failure is
         * handled by on-target-error (stop: STANDBY, resume retries).
         */
        if (!s->final_flush_done) {
            mirror_flush_target(s);
            return;
        }
        if (s->top && s->should_complete) {
            mirror_top_set_child(s->top, s->dst);    /* the switch-over */
        }
        mirror_finish(s, 0);
    }
}

/* ---- errors ---- */

static BlockErrorAction mirror_error_action(MirrorJob *s, bool is_read,
                                            int err)
{
    switch (is_read ? s->on_source_error : s->on_target_error) {
    case BLOCKDEV_ON_ERROR_IGNORE:
        return BLOCK_ERROR_ACTION_IGNORE;
    case BLOCKDEV_ON_ERROR_STOP:
        return BLOCK_ERROR_ACTION_STOP;
    case BLOCKDEV_ON_ERROR_ENOSPC:
        return err == ENOSPC ? BLOCK_ERROR_ACTION_STOP
                             : BLOCK_ERROR_ACTION_REPORT;
    default:
        return BLOCK_ERROR_ACTION_REPORT;
    }
}

void mirror_error(MirrorJob *s, bool is_read, int ret, int64_t offset,
                  int64_t bytes)
{
    BlockErrorAction action = mirror_error_action(s, is_read, -ret);
    JobEvent ev = {
        .type = JOB_EVENT_ERROR,
        .is_read = is_read,
        .action = action,
        .error = -ret,
    };

    s->errors++;
    if (action == BLOCK_ERROR_ACTION_REPORT && s->ret == 0) {
        BlockDriverState *bs = is_read ? s->src : s->dst;

        s->ret = ret;
        if (bytes) {
            s->error_detail = g_strdup_printf(
                "%s error at offset %" PRId64 " (length %" PRId64
                ") of '%s': %s", is_read ? "read" : "write", offset, bytes,
                bdrv_get_filename(bs), g_strerror(-ret));
        } else {
            s->error_detail = g_strdup_printf("flush of '%s' failed: %s",
                                              bdrv_get_filename(bs),
                                              g_strerror(-ret));
        }
    }
    job_emit(&s->common, &ev);
    if (action == BLOCK_ERROR_ACTION_STOP) {
        s->iostatus_nospace = ret == -ENOSPC;
        s->iostatus_failed = true;
        job_stop_on_error(&s->common);
    }
}

/* ---- JobDriver ---- */

static void mirror_start(Job *job)
{
    MirrorJob *s = mirror_job(job);
    int gbits = __builtin_ctzll(s->granularity);

    s->dirty = dirty_bitmap_new(s->len, s->granularity);
    s->in_flight_bitmap = hbitmap_new(s->len, gbits);
    if (s->target_zero) {
        s->zero_bitmap = hbitmap_new(s->len, gbits);
        hbitmap_set_all(s->zero_bitmap);
    }
    if (s->sync != MIRROR_SYNC_MODE_NONE) {
        dirty_bitmap_set_all(s->dirty);
    }
    dirty_bitmap_track_rate(s->dirty, true);
    bdrv_add_write_notifier(s->src, mirror_source_written, s);
    s->notifier_added = true;
    rate_meter_reset(&s->copy_rate, clock_ns());
    rate_meter_reset(&s->write_rate, clock_ns());
    mirror_converge_start(s);
    bdrv_set_max_io(s->src, s->chunk_size);
    bdrv_set_max_io(s->dst, s->chunk_size);
    s->start_ns = clock_ns();
    mirror_pump(s);
}

static void mirror_pause(Job *job)
{
    mirror_kick(mirror_job(job));
}

static void mirror_resume(Job *job)
{
    MirrorJob *s = mirror_job(job);

    s->iostatus_failed = s->iostatus_nospace = false;
    mirror_kick(s);
}

static bool mirror_complete(Job *job, GError **errp)
{
    MirrorJob *s = mirror_job(job);

    s->should_complete = true;
    mirror_kick(s);
    return true;
}

static void mirror_cancel(Job *job, bool force)
{
    MirrorJob *s = mirror_job(job);

    if (force && s->in_flight) {
        /*
         * Abort what waits on the target (an NBD server that stopped
         * answering, say).  The source stays usable: guests still use it.
         */
        bdrv_cancel_in_flight(s->dst);
    }
    mirror_kick(s);
}

static void mirror_set_speed(Job *job, int64_t speed)
{
    MirrorJob *s = mirror_job(job);

    ratelimit_set_speed(&s->limit, speed, RATELIMIT_SLICE_NS);
    if (s->rate_timer) {
        g_source_destroy(s->rate_timer);
        g_source_unref(s->rate_timer);
        s->rate_timer = NULL;
    }
    mirror_kick(s);
}

static void mirror_free(Job *job)
{
    MirrorJob *s = mirror_job(job);

    g_assert(s->in_flight == 0);
    mirror_remove_notifier(s);
    mirror_cancel_timers(s);
    mirror_converge_stop(s);
    dirty_bitmap_free(s->dirty);
    hbitmap_free(s->in_flight_bitmap);
    hbitmap_free(s->zero_bitmap);
    if (s->status) {
        g_array_unref(s->status);
    }
    if (s->status_writes) {
        g_array_unref(s->status_writes);
    }
    buf_pool_free(s->bufs);
    g_free(s->error_detail);
    bdrv_unref(s->src);
    bdrv_unref(s->dst);
}

const JobDriver mirror_job_driver = {
    .job_type   = "mirror",
    .start      = mirror_start,
    .pause      = mirror_pause,
    .resume     = mirror_resume,
    .complete   = mirror_complete,
    .cancel     = mirror_cancel,
    .set_speed  = mirror_set_speed,
    .free       = mirror_free,
};
