/*
 * The mirror job's core: the pump, the job's state (bulk and sync stages,
 * flushes, READY, completion, cancel, pause), the error policy, the
 * JobDriver, and a running job as mirror.h shows it (counters, copy mode,
 * the mirror-top filter).
 *
 * Everything runs on the main loop.  mirror_pump() is nbdcopy's
 * wait-for-request-slots loop turned inside out: it starts operations
 * (mirror_issue_one()) until a limit is reached (the window, the speed
 * limit, a block status fetch, waiting active writes) and every
 * completion calls it again; then mirror_check_state() sees whether the
 * job changes state.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-core.h"
#include "block/mirror/mirror-plan.h"
#include "block/mirror/mirror-top.h"

#include <errno.h>
#include <inttypes.h>

static MirrorJob *mirror_job(Job *job)
{
    return container_of(job, MirrorJob, common);
}

/* ---- scheduling ---- */

/* The one-shot source *@src of @s fired: forget it and pump. */
static gboolean mirror_pump_fired(MirrorJob *s, GSource **src)
{
    g_source_unref(*src);
    *src = NULL;
    mirror_pump(s);
    return G_SOURCE_REMOVE;
}

static gboolean mirror_kick_cb(gpointer opaque)
{
    MirrorJob *s = opaque;

    return mirror_pump_fired(s, &s->kick);
}

/* Pump later, from the main loop (for calls from outside the job). */
static void mirror_kick(MirrorJob *s)
{
    /* Before job_start() (set-speed in CREATED) there is nothing to do. */
    if (!s->kick && !s->finished && s->track.dirty) {
        s->kick = bdrv_timer_new(0, mirror_kick_cb, s);
    }
}

static gboolean mirror_rate_timer_cb(gpointer opaque)
{
    MirrorJob *s = opaque;

    return mirror_pump_fired(s, &s->rate_timer);
}

/* The planner's MirrorPlanOwner.rate_limited: over the speed limit or
 * the guests' pace, pump again when the delay is over. */
static bool mirror_rate_limited(MirrorJob *s, int64_t bytes)
{
    int64_t now = clock_ns();
    int64_t delay = mirror_guest_delay(&s->guest, now, bytes);

    if (delay <= 0) {
        delay = ratelimit_calculate_delay(&s->limit, now, bytes);
    }

    if (delay <= 0) {
        return false;
    }
    g_assert(!s->rate_timer);
    s->rate_timer = bdrv_timer_new(delay, mirror_rate_timer_cb, s);
    return true;
}

static void mirror_cancel_timers(MirrorJob *s)
{
    if (s->state_timer) {
        g_source_destroy(s->state_timer);
        g_source_unref(s->state_timer);
        s->state_timer = NULL;
    }
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

static void mirror_check_state(MirrorJob *s);
static void mirror_state_flush(MirrorJob *s);
static void mirror_error(MirrorJob *s, bool is_read, int ret, int64_t offset,
                         int64_t bytes);

static bool mirror_can_issue(MirrorJob *s)
{
    /* Waiting active writes go first: background copies would keep them
     * waiting for ever under load. */
    if (s->finished || s->err.ret != 0 || job_is_cancelled(&s->common) ||
        mirror_active_has_waiting(&s->active) ||
        job_should_pause(&s->common) || s->rate_timer ||
        s->flush.in_flight) {
        return false;
    }
    /* Then the guests: a probe of their latency, and while the job is
     * paced for them, smaller operations. */
    if (!mirror_guest_may_issue(&s->guest, clock_ns())) {
        return false;
    }
    mirror_window_set_max_op(&s->win, mirror_guest_op_max(&s->guest));
    return mirror_window_has_room(&s->win);
}

/* MirrorStats.tracking_bytes: O(1) (each part counts as it changes). */
static int64_t mirror_tracking_bytes(MirrorJob *s)
{
    MirrorTrack *t = &s->track;

    if (!t->dirty) {
        return 0;
    }
    return dirty_bitmap_memory(t->dirty) + hbitmap_memory(t->in_flight) +
           mirror_zero_memory(&t->zero) + mirror_status_memory(&s->status) +
           mirror_extents_memory(&t->unflushed) +
           mirror_extents_memory(&t->flushing) +
           mirror_state_memory(t->state);
}

static void mirror_update_progress(MirrorJob *s)
{
    s->common.progress_total = s->common.progress_current +
                               dirty_bitmap_count(s->track.dirty) +
                               mirror_window_bytes_in_flight(&s->win);
    s->tracking_peak = MAX(s->tracking_peak, mirror_tracking_bytes(s));
}

void mirror_pump(MirrorJob *s)
{
    if (s->pumping || s->finished) {
        return;
    }
    s->pumping = true;
    mirror_window_refresh(&s->win, s->src, s->dst);
    while (mirror_can_issue(s) && mirror_issue_one(s)) {
        /* keep going */
    }
    s->pumping = false;
    mirror_update_progress(s);
    mirror_state_flush(s);
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
    int64_t g = s->cfg.granularity;

    if (mirror_active_is_own_write(&s->active, offset, bytes)) {
        return;     /* write-blocking: the job dirties what it must */
    }
    dirty_bitmap_set(s->track.dirty, offset, bytes);
    mirror_converge_note_write(&s->converge,
                               MIN(QEMU_ALIGN_UP(offset + bytes, g),
                                   s->cfg.len) - QEMU_ALIGN_DOWN(offset, g));
    mirror_active_set_synced(&s->active, false);
    mirror_status_written(&s->status, offset, bytes);
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
    g_assert(!s->finished && mirror_window_in_flight(&s->win) == 0 &&
             mirror_active_in_flight(&s->active) == 0);
    s->finished = true;
    s->stopping = true;
    if (s->top) {
        /*
         * Guests' requests no longer concern the job.  A quiesced filter
         * stays so until the job concludes (at once on failure; after
         * success at finalize: prepare() switches over, then clean() lets
         * the guests go on), as QEMU's mirror keeps its source drained
         * until then.
         */
        mirror_top_set_job(s->top, NULL, NULL);
    }
    mirror_remove_notifier(s);
    mirror_link_stop(&s->link);
    mirror_cancel_timers(s);
    mirror_converge_stop(&s->converge);
    mirror_guest_stop(&s->guest);
    bdrv_set_max_io(s->src, 0);
    bdrv_set_max_io(s->dst, 0);
    job_completed(&s->common, ret, NULL);
}

/*
 * A flush of the target (either kind) begins: it covers the writes that
 * completed so far.  One flush is in flight at a time.
 */
static void mirror_target_flush_begin(MirrorJob *s)
{
    MirrorTrack *t = &s->track;

    mirror_link_flush_begin(&s->link);
    mirror_state_flush_begin(t->state);
    if (mirror_extents_count(&t->flushing)) {
        mirror_extents_union(&t->flushing, &t->unflushed);
        mirror_extents_clear(&t->unflushed);
    } else {
        mirror_extents_swap(&t->flushing, &t->unflushed);
    }
}

/*
 * It ended with @ret.  True when it succeeded but the target reconnected
 * meanwhile: then it made nothing durable (what it covered was dirtied
 * again by the reconnect, mirror_target_reconnected()), nothing becomes
 * known good, and another flush is needed.
 */
static bool mirror_target_flush_end(MirrorJob *s, int ret)
{
    MirrorTrack *t = &s->track;
    bool relinked = ret >= 0 && !mirror_link_flush_done(&s->link);

    if (ret >= 0 && !relinked) {
        mirror_extents_clear(&t->flushing);
    } else {
        mirror_extents_union(&t->unflushed, &t->flushing);
        mirror_extents_clear(&t->flushing);
    }
    mirror_state_flush_end(t->state, relinked ? -ECONNRESET : ret);
    return relinked;
}

/*
 * The target reconnected (its node event): what it acknowledged and no
 * flush covers may be gone with the old server's cache.  Copy it again.
 */
static void mirror_target_reconnected(void *opaque)
{
    MirrorJob *s = opaque;
    MirrorExtents *sets[] = { &s->track.unflushed, &s->track.flushing };
    int64_t bytes = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(sets); i++) {
        for (guint j = 0; j < mirror_extents_count(sets[i]); j++) {
            const MirrorExtent *x = mirror_extents_get(sets[i], j);

            /* Through the notifier, no longer known good either. */
            dirty_bitmap_set(s->track.dirty, x->start, x->end - x->start);
            /* A lost zero write: the target is not zero there. */
            mirror_zero_written(&s->track.zero, x->start,
                                x->end - x->start);
        }
        bytes += sets[i]->bytes;
        mirror_extents_clear(sets[i]);
    }
    if (bytes) {
        g_debug("mirror: the target reconnected: %" PRId64 " bytes written "
                "since its last flush are copied again", bytes);
        mirror_active_set_synced(&s->active, false);
        mirror_kick(s);
    }
}

static void mirror_flush_done(void *opaque, int ret)
{
    MirrorJob *s = opaque;
    bool relinked;

    s->flush.in_flight = false;
    /* A flush that spanned a reconnect makes nothing known good. */
    relinked = mirror_target_flush_end(s, ret);
    if (ret < 0) {
        mirror_error(s, false, ret, 0, 0);
    } else if (relinked) {
        /* The target reconnected during it: flush again (below). */
        s->flush.writes_since = MAX(s->flush.writes_since, 1);
    } else {
        if (s->flush.writes_since == s->flush.mark) {
            s->flush.writes_since = 0;
        }
        if (s->flush.is_final) {
            s->flush.final_done = true;
        } else if (!s->common.ready_seen) {
            s->flush.ready_due = true;
        }
    }
    mirror_pump(s);
}

static void mirror_flush_target(MirrorJob *s)
{
    s->flush.in_flight = true;
    s->flush.mark = s->flush.writes_since;
    s->flush.is_final = s->should_complete || s->common.cancelled;
    mirror_target_flush_begin(s);
    bdrv_aio_flush(s->dst, mirror_flush_done, s);
}

/* ---- --state-file: flushes that make what was copied known good ---- */

static void mirror_state_flush_done(void *opaque, int ret)
{
    MirrorJob *s = opaque;

    s->flush.state_in_flight = false;
    /* One that spanned a reconnect makes nothing known good either. */
    mirror_target_flush_end(s, ret);
    /* writes_since stays: writes in flight when it began are not covered
     * (READY and completion flush again). */
    if (ret < 0) {
        mirror_error(s, false, ret, 0, 0);
    }
    mirror_pump(s);
}

static gboolean mirror_state_timer_cb(gpointer opaque)
{
    MirrorJob *s = opaque;

    return mirror_pump_fired(s, &s->state_timer);
}

/*
 * Background flushes of the target: with a state file when
 * mirror_state_flush_due() says (every MIRROR_STATE_FLUSH_BYTES made
 * clean, or MIRROR_STATE_FLUSH_NS after the first of them), and whenever
 * the unflushed set (mirror-track.h) reaches MIRROR_UNFLUSHED_MAX
 * extents, which keeps it small (guests writing all over the disk while
 * the job waits for complete).  Operations go on meanwhile: what
 * completes during the flush waits for the next one.  None once the job
 * is being cancelled, failing or pausing: a stalled target must not hold
 * those up.
 */
static void mirror_state_flush(MirrorJob *s)
{
    int64_t due;

    if (s->finished || s->flush.in_flight ||
        s->flush.state_in_flight || s->err.ret < 0 ||
        job_is_cancelled(&s->common) || job_should_pause(&s->common)) {
        return;
    }
    if (mirror_extents_count(&s->track.unflushed) >= MIRROR_UNFLUSHED_MAX) {
        due = 0;
    } else if (s->track.state) {
        due = mirror_state_flush_due(s->track.state, clock_ns());
    } else {
        return;
    }
    if (due > 0 && !s->state_timer) {
        s->state_timer = bdrv_timer_new(due, mirror_state_timer_cb, s);
    } else if (due == 0) {
        if (s->state_timer) {
            g_source_destroy(s->state_timer);
            g_source_unref(s->state_timer);
            s->state_timer = NULL;
        }
        s->flush.state_in_flight = true;
        mirror_target_flush_begin(s);
        bdrv_aio_flush(s->dst, mirror_state_flush_done, s);
    }
}

/* A write to the target starts: the next flush has something to do. */
static void mirror_note_target_write(MirrorJob *s)
{
    s->flush.writes_since++;
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
    if (s->cfg.auto_complete) {
        s->should_complete = true;
        s->flush.final_done = flushed;
    }
    return s->finished || job_is_completed(job);
}

static void mirror_check_state(MirrorJob *s)
{
    Job *job = &s->common;

    int in_flight = mirror_window_in_flight(&s->win);

    if (!s->flush.in_flight && mirror_link_flush_stale(&s->link)) {
        /* The target reconnected since the last flush: what the old
         * server acknowledged may not be on its disk.  Flush again
         * before READY or completion. */
        s->flush.writes_since = MAX(s->flush.writes_since, 1);
        s->flush.final_done = false;
    }
    if (s->flush.ready_due && !s->finished && !job_is_cancelled(job) &&
        s->err.ret == 0 && !job_should_pause(job)) {
        /*
         * As QEMU: READY once a flush that began with nothing dirty and
         * nothing in flight succeeded, even if guests wrote meanwhile and
         * their copies are running now.  Waiting for a moment that stays
         * clean across the flush's round trip kept busy guests' jobs from
         * READY for seconds; in-sync in query-block-jobs says whether the
         * target is behind.
         */
        s->flush.ready_due = false;
        if (mirror_ready(s, !in_flight && !s->flush.writes_since &&
                            !dirty_bitmap_count(s->track.dirty))) {
            return;
        }
    }
    if (s->finished || in_flight || s->flush.in_flight ||
        s->flush.state_in_flight ||
        mirror_status_pending(&s->status) || s->draining) {
        return;
    }
    /* No background operation in flight: the job may change state now. */
    if (job_is_cancelled(job) || s->err.ret < 0) {
        s->stopping = true;     /* new guest writes bypass the job */
        if (!mirror_active_in_flight(&s->active)) {
            mirror_finish(s, job_is_cancelled(job) ? -ECANCELED
                                                   : s->err.ret);
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
    if (dirty_bitmap_count(s->track.dirty) > 0) {
        if (s->drained) {
            /* Written while we quiesced: let guests go, copy, retry. */
            s->drained = false;
            mirror_top_drain_end(s->top);
        }
        return;     /* rate limited or waiting to retry */
    }
    if (s->flush.writes_since) {
        mirror_flush_target(s);
        return;
    }
    if (s->copy_mode == MIRROR_COPY_MODE_WRITE_BLOCKING) {
        mirror_active_set_synced(&s->active, true);
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
        if (!s->flush.final_done) {
            mirror_flush_target(s);
            return;
        }
        if (s->should_complete && s->track.state) {
            /*
             * Nothing to resume: the file goes (or says "switched
             * over", mirror_state_set_switch_record()) before guests
             * reach the target, else a rerun after a crash would copy
             * the stale source over their writes.  A state write in
             * flight would put it back: wait for it (its end pumps).
             */
            g_autoptr(GError) err = NULL;
            int ret;

            if (mirror_state_busy(s->track.state)) {
                return;
            }
            ret = mirror_state_complete(s->track.state, &err);
            if (ret < 0) {
                /* A rerun would copy the stale source over what guests
                 * write to the target: no switch-over, the job fails. */
                s->err.ret = ret;
                s->err.detail = g_strdup(err->message);
                mirror_finish(s, ret);
                return;
            }
        }
        /* The switch-over is mirror_prepare()'s, at finalize. */
        mirror_finish(s, 0);
    }
}

/* ---- errors ---- */

static BlockErrorAction mirror_error_action(MirrorJob *s, bool is_read,
                                            int err)
{
    switch (is_read ? s->cfg.on_source_error : s->cfg.on_target_error) {
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

/* Apply the error policy to a failed read (@is_read) or write of
 * [offset, offset + bytes) (bytes 0: a flush); emits BLOCK_JOB_ERROR. */
static void mirror_error(MirrorJob *s, bool is_read, int ret, int64_t offset,
                         int64_t bytes)
{
    BlockErrorAction action = mirror_error_action(s, is_read, -ret);
    JobEvent ev = {
        .type = JOB_EVENT_ERROR,
        .is_read = is_read,
        .action = action,
        .error = -ret,
    };

    s->err.count++;
    if (action == BLOCK_ERROR_ACTION_REPORT && s->err.ret == 0) {
        BlockDriverState *bs = is_read ? s->src : s->dst;

        s->err.ret = ret;
        if (bytes) {
            s->err.detail = g_strdup_printf(
                "%s error at offset %" PRId64 " (length %" PRId64
                ") of '%s': %s", is_read ? "read" : "write", offset, bytes,
                bdrv_get_filename(bs), g_strerror(-ret));
        } else {
            s->err.detail = g_strdup_printf("flush of '%s' failed: %s",
                                              bdrv_get_filename(bs),
                                              g_strerror(-ret));
        }
    }
    job_emit(&s->common, &ev);
    if (action == BLOCK_ERROR_ACTION_STOP) {
        s->err.nospace = ret == -ENOSPC;
        s->err.failed = true;
        job_stop_on_error(&s->common);
    }
}

/* ---- the planner and the operations, as their owner ---- */

const MirrorPlanOwner mirror_plan_owner = {
    .rate_limited   = mirror_rate_limited,
};

const MirrorOpOwner mirror_op_owner = {
    .target_write   = mirror_note_target_write,
    .failed         = mirror_error,
    .settled        = mirror_pump,
};

/* ---- auto-converge, as its owner ---- */

static void mirror_converge_sample(void *opaque, int64_t now_ns,
                                   MirrorConvergeSample *cs)
{
    MirrorJob *s = opaque;

    *cs = (MirrorConvergeSample) {
        .copy_rate = mirror_ops_copy_rate(s, now_ns),
        .work_left = dirty_bitmap_count(s->track.dirty) > 0,
        .passes = mirror_plan_passes(s),
        .background = s->copy_mode == MIRROR_COPY_MODE_BACKGROUND &&
                      !s->finished,
    };
}

static void mirror_converge_switch(void *opaque, const char *reason)
{
    MirrorJob *s = opaque;
    JobEvent ev = { .type = JOB_EVENT_COPY_MODE, .reason = reason };
    g_autoptr(GError) err = NULL;

    if (!mirror_change_copy_mode(&s->common, MIRROR_COPY_MODE_WRITE_BLOCKING,
                                 &err)) {
        g_debug("auto-converge: %s", err->message);
        return;
    }
    g_debug("auto-converge: write-blocking now (%s)", reason);
    job_emit(&s->common, &ev);
}

const MirrorConvergeOwner mirror_converge_owner = {
    .sample         = mirror_converge_sample,
    .switch_mode    = mirror_converge_switch,
};

/* ---- the active path, as its owner ---- */

static void mirror_active_target_write(void *opaque)
{
    mirror_note_target_write(opaque);
}

static void mirror_active_target_failed(void *opaque, int ret,
                                        int64_t offset, int64_t bytes)
{
    mirror_error(opaque, false, ret, offset, bytes);
}

static void mirror_active_settled(void *opaque)
{
    mirror_pump(opaque);
}

const MirrorActiveOwner mirror_active_owner = {
    .target_write   = mirror_active_target_write,
    .target_failed  = mirror_active_target_failed,
    .settled        = mirror_active_settled,
};

/* ---- guest-first, as its owner ---- */

static int mirror_guest_in_flight(void *opaque)
{
    MirrorJob *s = opaque;

    return mirror_window_in_flight(&s->win);
}

static void mirror_guest_kick(void *opaque)
{
    mirror_kick(opaque);
}

static double mirror_guest_dirty_rate(void *opaque, int64_t now_ns)
{
    MirrorJob *s = opaque;

    return s->track.dirty ? dirty_bitmap_rate(s->track.dirty, now_ns) : 0;
}

const MirrorGuestOwner mirror_guest_owner = {
    .in_flight      = mirror_guest_in_flight,
    .kick           = mirror_guest_kick,
    .dirty_rate     = mirror_guest_dirty_rate,
};

/* ---- the mirror-top filter, as its owner ---- */

/* MirrorTopOwner.write_blocking: guest writes come to the job. */
static bool mirror_top_write_blocking(void *opaque)
{
    MirrorJob *s = opaque;

    return s->copy_mode == MIRROR_COPY_MODE_WRITE_BLOCKING &&
           s->track.dirty && !s->finished && !s->stopping &&
           s->err.ret == 0 && !job_is_cancelled(&s->common);
}

static void mirror_top_write(void *opaque, MirrorWriteKind kind,
                             int64_t offset, int64_t bytes, const void *buf,
                             BdrvRequestFlags flags, BlockCompletionFunc *cb,
                             void *cb_opaque)
{
    MirrorJob *s = opaque;

    g_assert(mirror_top_write_blocking(s));
    mirror_active_submit(&s->active, kind, offset, bytes, buf, flags, cb,
                         cb_opaque);
}

/* MirrorTopOwner.guest_begin / guest_done: guest-first's timing. */
static void mirror_top_guest_begin(void *opaque, int64_t now_ns)
{
    MirrorJob *s = opaque;

    mirror_guest_begin(&s->guest, now_ns);
}

static void mirror_top_guest_done(void *opaque, int64_t start_ns,
                                  int64_t now_ns, int64_t bytes)
{
    MirrorJob *s = opaque;

    mirror_guest_done(&s->guest, start_ns, now_ns, bytes);
}

static const MirrorTopOwner mirror_top_owner = {
    .write_blocking = mirror_top_write_blocking,
    .write          = mirror_top_write,
    .guest_begin    = mirror_top_guest_begin,
    .guest_done     = mirror_top_guest_done,
};

/* ---- JobDriver ---- */

/* The state file's writes ended: completion may have waited for them. */
static void mirror_state_idle(void *opaque)
{
    mirror_pump(opaque);
}

/* The dirty bitmap's notifier: dirty granules are not known good. */
static void mirror_state_dirty_cb(void *opaque, int64_t offset,
                                  int64_t bytes)
{
    MirrorJob *s = opaque;

    mirror_state_dirtied(s->track.state, offset, bytes);
}

static void mirror_start(Job *job)
{
    MirrorJob *s = mirror_job(job);
    int64_t len = s->cfg.len;
    int gbits = __builtin_ctzll(s->cfg.granularity);

    s->track.dirty = dirty_bitmap_new(len, s->cfg.granularity);
    s->track.in_flight = hbitmap_new(len, gbits);
    mirror_extents_init(&s->track.unflushed);
    mirror_extents_init(&s->track.flushing);
    /* What a crashed run wrote but did not flush is not zero any more. */
    mirror_zero_init(&s->track.zero, len, s->cfg.granularity,
                     s->cfg.target_zero &&
                     !mirror_state_resumed(s->track.state));
    if (s->track.state) {
        /* Copy what is not known good (for sync=none the state starts
         * as all good: mirror-state.h). */
        const MirrorExtents *good = mirror_state_good(s->track.state);

        dirty_bitmap_set_all(s->track.dirty);
        for (guint i = 0; i < mirror_extents_count(good); i++) {
            const MirrorExtent *x = mirror_extents_get(good, i);

            dirty_bitmap_reset(s->track.dirty, x->start, x->end - x->start);
        }
        dirty_bitmap_set_notify(s->track.dirty, mirror_state_dirty_cb, s);
    } else if (s->cfg.sync != MIRROR_SYNC_MODE_NONE) {
        dirty_bitmap_set_all(s->track.dirty);
    }
    dirty_bitmap_track_rate(s->track.dirty, true);
    bdrv_add_write_notifier(s->src, mirror_source_written, s);
    s->notifier_added = true;
    mirror_link_start(&s->link, job, s->src, s->dst,
                      mirror_target_reconnected, s);
    mirror_ops_start(s);
    mirror_converge_start(&s->converge);
    bdrv_set_max_io(s->src, s->cfg.chunk_size);
    bdrv_set_max_io(s->dst, s->cfg.chunk_size);
    mirror_pump(s);
}

static void mirror_pause(Job *job)
{
    mirror_kick(mirror_job(job));
}

static void mirror_resume(Job *job)
{
    MirrorJob *s = mirror_job(job);

    s->err.failed = s->err.nospace = false;
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

    if (force && mirror_window_in_flight(&s->win)) {
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

/* Finalize after success: the switch-over (after a complete). */
static int mirror_prepare(Job *job)
{
    MirrorJob *s = mirror_job(job);

    if (s->top && s->should_complete) {
        mirror_top_set_child(s->top, s->dst);
    }
    return 0;
}

/* Conclude: the guests waiting at the quiesced filter go on. */
static void mirror_clean(Job *job)
{
    MirrorJob *s = mirror_job(job);

    if (s->top && s->drained) {
        s->drained = false;
        mirror_top_drain_end(s->top);
    }
}

static void mirror_free(Job *job)
{
    MirrorJob *s = mirror_job(job);

    mirror_state_set_idle_cb(s->track.state, NULL, NULL);
    mirror_remove_notifier(s);
    mirror_link_stop(&s->link);
    mirror_cancel_timers(s);
    mirror_converge_stop(&s->converge);
    mirror_guest_stop(&s->guest);
    dirty_bitmap_free(s->track.dirty);
    hbitmap_free(s->track.in_flight);
    mirror_zero_destroy(&s->track.zero);
    mirror_extents_destroy(&s->track.unflushed);
    mirror_extents_destroy(&s->track.flushing);
    mirror_status_free(&s->status);
    mirror_window_free(&s->win);
    g_free(s->err.detail);
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
    .prepare    = mirror_prepare,
    .clean      = mirror_clean,
    .free       = mirror_free,
};

/* ---- a running job, from outside (mirror.h) ---- */

void mirror_get_stats(Job *job, MirrorStats *st)
{
    MirrorJob *s = mirror_job(job);
    DirtyBitmap *dirty = s->track.dirty;
    int64_t now = clock_ns();

    *st = (MirrorStats) {
        .len = s->cfg.len,
        .dirty_bytes = dirty ? dirty_bitmap_count(dirty) : s->cfg.len,
        .in_flight_bytes = mirror_window_bytes_in_flight(&s->win),
        .in_flight = mirror_window_in_flight(&s->win),
        .granularity = s->cfg.granularity,
        .chunk_size = s->cfg.chunk_size,
        .buf_size = mirror_window_buf_size(&s->win),
        .max_in_flight = mirror_window_max_in_flight(&s->win),
        .dirty_rate = dirty ? dirty_bitmap_rate(dirty, now) : 0,
        .copy_rate = mirror_ops_copy_rate(s, now),
        .eta_ms = -1,
        .io_status = s->err.nospace ? "nospace" :
                     s->err.failed ? "failed" :
                     mirror_link_reconnecting(&s->link) ? "reconnecting"
                                                        : "ok",
        .reconnecting = mirror_link_reconnecting(&s->link),
        .copy_mode = s->copy_mode,
        .passes = mirror_plan_passes(s),
        .errors = s->err.count,
        .known_good_bytes = mirror_state_good_bytes(s->track.state),
        .tracking_bytes = mirror_tracking_bytes(s),
        .guest_priority = s->guest.on,
        .guest_requests = s->guest.requests,
        .guest_request_rate = rate_meter_get(&s->guest.req_rate, now),
        .guest_byte_rate = rate_meter_get(&s->guest.byte_rate, now),
        .guest_latency_ns = s->guest.latency_ns,
        .guest_base_latency_ns = s->guest.base_ns,
        .guest_pace = s->guest.on ? s->guest.pace : 0,
    };
    s->tracking_peak = MAX(s->tracking_peak, st->tracking_bytes);
    st->tracking_bytes_peak = s->tracking_peak;
    if (dirty) {
        st->tracking_visits = dirty_bitmap_visits(dirty) +
                              hbitmap_visits(s->track.in_flight) +
                              mirror_zero_visits(&s->track.zero);
    }
    mirror_ops_counters(s, &st->bytes_copied, &st->bytes_zeroed,
                        &st->bytes_skipped);
    st->in_sync = dirty && st->dirty_bytes == 0 && st->in_flight == 0;
    st->actively_synced = mirror_active_synced(&s->active);
    if (st->in_sync) {
        st->eta_ms = 0;
    } else if (st->copy_rate > st->dirty_rate) {
        st->eta_ms = (st->dirty_bytes + st->in_flight_bytes) * 1000.0 /
                     (st->copy_rate - st->dirty_rate);
    }
}

void mirror_job_set_top(Job *job, BlockDriverState *top)
{
    MirrorJob *s = mirror_job(job);

    g_assert(job->status == JOB_STATUS_CREATED);
    g_assert(mirror_top_child(top) == s->src);
    s->top = top;
    mirror_top_set_job(top, &mirror_top_owner, s);
    mirror_top_set_state(top, s->track.state);
}

void mirror_job_set_state(Job *job, MirrorState *state)
{
    MirrorJob *s = mirror_job(job);

    g_assert(job->status == JOB_STATUS_CREATED);
    s->track.state = state;
    mirror_state_set_idle_cb(state, mirror_state_idle, s);
    if (s->top) {
        mirror_top_set_state(s->top, state);
    }
}

bool mirror_change_copy_mode(Job *job, MirrorCopyMode mode, GError **errp)
{
    MirrorJob *s = mirror_job(job);

    if (!job_apply_verb(job, JOB_VERB_CHANGE, errp)) {
        return false;
    }
    if (mode == s->copy_mode) {
        return true;
    }
    if (mode != MIRROR_COPY_MODE_WRITE_BLOCKING) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Change to copy mode 'background' is not implemented");
        return false;
    }
    /* From now on guest writes through the filter are mirrored at once;
     * what is dirty already is copied in the background. */
    s->copy_mode = mode;
    mirror_guest_reprobe(&s->guest);
    mirror_active_set_synced(&s->active, false);
    mirror_kick(s);
    return true;
}

void mirror_set_auto_converge(Job *job, int on, int64_t after_ms,
                              int64_t passes)
{
    mirror_converge_set(&mirror_job(job)->converge, on, after_ms, passes);
}

const char *mirror_get_error_detail(Job *job)
{
    return mirror_job(job)->err.detail;
}
