/*
 * Jobs: state machine, verbs, pause/resume/cancel, completion and events.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/job.h"
#include "block/block.h"

#include <errno.h>

typedef struct JobListener {
    JobEventFunc *func;
    void *opaque;
} JobListener;

/* Allowed transitions: JobSTT[from][to] (QEMU's table). */
static const bool JobSTT[JOB_STATUS__MAX][JOB_STATUS__MAX] = {
    /*                          U  C  R  P  Y  S  W  D  X  E  N */
    [JOB_STATUS_UNDEFINED] = { 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_CREATED]   = { 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1 },
    [JOB_STATUS_RUNNING]   = { 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0 },
    [JOB_STATUS_PAUSED]    = { 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_READY]     = { 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0 },
    [JOB_STATUS_STANDBY]   = { 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_WAITING]   = { 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0 },
    [JOB_STATUS_PENDING]   = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0 },
    [JOB_STATUS_ABORTING]  = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0 },
    [JOB_STATUS_CONCLUDED] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
    [JOB_STATUS_NULL]      = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
};

/* Which states accept which verbs (QEMU's JobVerbTable). */
static const bool JobVerbTable[JOB_VERB__MAX][JOB_STATUS__MAX] = {
    /*                          U  C  R  P  Y  S  W  D  X  E  N */
    [JOB_VERB_CANCEL]      = { 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0 },
    [JOB_VERB_PAUSE]       = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_RESUME]      = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_SET_SPEED]   = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_COMPLETE]    = { 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_FINALIZE]    = { 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
    [JOB_VERB_DISMISS]     = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0 },
    [JOB_VERB_CHANGE]      = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
};

static void job_set_failed(Job *job, int ret, const char *error);
static void job_finalize_single(Job *job);

static const char *const job_status_names[JOB_STATUS__MAX] = {
    "undefined", "created", "running", "paused", "ready", "standby",
    "waiting", "pending", "aborting", "concluded", "null",
};

static const char *const job_verb_names[JOB_VERB__MAX] = {
    "cancel", "pause", "resume", "set-speed", "complete", "finalize",
    "dismiss", "change",
};

const char *job_status_str(JobStatus status)
{
    g_assert(status < JOB_STATUS__MAX);
    return job_status_names[status];
}

const char *job_verb_str(JobVerb verb)
{
    g_assert(verb < JOB_VERB__MAX);
    return job_verb_names[verb];
}

Job *job_create(const JobDriver *driver, size_t instance_size,
                const char *id)
{
    Job *job;

    g_assert(instance_size >= sizeof(Job));
    job = g_malloc0(instance_size);
    job->driver = driver;
    job->id = g_strdup(id);
    job->refcnt = 1;
    job->auto_finalize = true;
    job->auto_dismiss = true;
    job->listeners = g_array_new(FALSE, FALSE, sizeof(JobListener));
    job->status = JOB_STATUS_CREATED;
    return job;
}

void job_ref(Job *job)
{
    job->refcnt++;
}

void job_unref(Job *job)
{
    if (!job || --job->refcnt > 0) {
        return;
    }
    g_assert(job->status == JOB_STATUS_CREATED ||
             job->status == JOB_STATUS_CONCLUDED ||
             job->status == JOB_STATUS_NULL);
    if (job->driver->free) {
        job->driver->free(job);
    }
    g_array_unref(job->listeners);
    g_free(job->error);
    g_free(job->id);
    g_free(job);
}

void job_add_listener(Job *job, JobEventFunc *func, void *opaque)
{
    JobListener l = { .func = func, .opaque = opaque };

    g_array_append_val(job->listeners, l);
}

void job_emit(Job *job, const JobEvent *event)
{
    job_ref(job);
    for (guint i = 0; i < job->listeners->len; i++) {
        JobListener *l = &g_array_index(job->listeners, JobListener, i);
        l->func(job, event, l->opaque);
    }
    job_unref(job);
}

static void job_state_transition(Job *job, JobStatus to)
{
    JobEvent ev = { .type = JOB_EVENT_STATUS_CHANGE, .status = to };

    g_assert(JobSTT[job->status][to]);
    if (job->status == to) {
        return;
    }
    job->status = to;
    job_emit(job, &ev);
}

bool job_apply_verb(Job *job, JobVerb verb, GError **errp)
{
    if (JobVerbTable[verb][job->status]) {
        return true;
    }
    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                "Job '%s' in state '%s' cannot accept command verb '%s'",
                job->id, job_status_str(job->status), job_verb_str(verb));
    return false;
}

void job_start(Job *job)
{
    g_assert(job->status == JOB_STATUS_CREATED);
    job_state_transition(job, JOB_STATUS_RUNNING);
    job->driver->start(job);
}

bool job_should_pause(Job *job)
{
    return job->pause_count > 0;
}

bool job_is_paused(Job *job)
{
    return job->status == JOB_STATUS_PAUSED ||
           job->status == JOB_STATUS_STANDBY;
}

bool job_is_cancelled(Job *job)
{
    return job->cancelled && job->force_cancel;
}

bool job_is_completed(Job *job)
{
    switch (job->status) {
    case JOB_STATUS_WAITING:
    case JOB_STATUS_PENDING:
    case JOB_STATUS_ABORTING:
    case JOB_STATUS_CONCLUDED:
    case JOB_STATUS_NULL:
        return true;
    default:
        return false;
    }
}

bool job_pause_point(Job *job)
{
    if (!job_should_pause(job) || job_is_cancelled(job)) {
        return false;
    }
    if (job->status == JOB_STATUS_RUNNING) {
        job_state_transition(job, JOB_STATUS_PAUSED);
    } else if (job->status == JOB_STATUS_READY) {
        job_state_transition(job, JOB_STATUS_STANDBY);
    }
    return job_is_paused(job);
}

void job_pause(Job *job)
{
    if (job->pause_count++ == 0 && !job_is_completed(job) &&
        job->status != JOB_STATUS_CREATED) {
        job->driver->pause(job);
    }
}

void job_resume(Job *job)
{
    g_assert(job->pause_count > 0);
    if (--job->pause_count > 0 || job_is_completed(job) ||
        job->status == JOB_STATUS_CREATED) {
        return;
    }
    if (job->status == JOB_STATUS_PAUSED) {
        job_state_transition(job, JOB_STATUS_RUNNING);
    } else if (job->status == JOB_STATUS_STANDBY) {
        job_state_transition(job, JOB_STATUS_READY);
    }
    job->driver->resume(job);
}

bool job_user_pause(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_PAUSE, errp)) {
        return false;
    }
    if (job->user_paused) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Job is already paused");
        return false;
    }
    job->user_paused = true;
    job_pause(job);
    return true;
}

bool job_user_resume(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_RESUME, errp)) {
        return false;
    }
    if (!job->user_paused || job->pause_count <= 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Can't resume a job that was not paused");
        return false;
    }
    job->user_paused = false;
    job_resume(job);
    return true;
}

void job_stop_on_error(Job *job)
{
    if (!job->user_paused) {
        job->user_paused = true;
        job_pause(job);
    }
}

bool job_user_cancel(Job *job, bool force, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_CANCEL, errp)) {
        return false;
    }
    if (job->status == JOB_STATUS_CREATED) {
        /* Never started: conclude right away. */
        job->cancelled = job->force_cancel = true;
        job_completed(job, -ECANCELED, NULL);
        return true;
    }
    if (job->status == JOB_STATUS_PENDING) {
        /*
         * As QEMU's mirror: no longer READY, so a force cancel; the
         * result never takes effect (no prepare), the job is CANCELLED.
         */
        job_ref(job);
        job->cancelled = job->force_cancel = true;
        job_set_failed(job, -ECANCELED, NULL);
        job_finalize_single(job);
        job_unref(job);
        return true;
    }
    if (job_is_completed(job)) {
        return true;
    }
    /* Before READY every cancel is a force cancel. */
    if (!job->ready_seen) {
        force = true;
    }
    job->cancelled = true;
    job->force_cancel |= force;
    if (job->user_paused) {
        job->user_paused = false;
        job_resume(job);
    }
    job->driver->cancel(job, job->force_cancel);
    return true;
}

bool job_complete(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_COMPLETE, errp)) {
        return false;
    }
    if (job->cancelled || !job->driver->complete) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "The active block job '%s' cannot be completed",
                    job->id);
        return false;
    }
    return job->driver->complete(job, errp);
}

bool job_check_speed(int64_t speed, GError **errp)
{
    if (speed < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'speed' expects a non-negative value");
        return false;
    }
    return true;
}

bool job_set_speed(Job *job, int64_t speed, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_SET_SPEED, errp) ||
        !job_check_speed(speed, errp)) {
        return false;
    }
    job->speed = speed;
    if (job->driver->set_speed) {
        job->driver->set_speed(job, speed);
    }
    return true;
}

void job_transition_to_ready(Job *job)
{
    JobEvent ev = { .type = JOB_EVENT_READY };

    g_assert(!job->ready_seen);
    job->ready_seen = true;
    job_state_transition(job, JOB_STATUS_READY);
    job_emit(job, &ev);
}

static void job_conclude(Job *job)
{
    job_state_transition(job, JOB_STATUS_CONCLUDED);
    if (job->auto_dismiss) {
        job_state_transition(job, JOB_STATUS_NULL);
    }
}

/* The job's result is a failure (or a cancel): note it, ABORTING. */
static void job_set_failed(Job *job, int ret, const char *error)
{
    job->ret = ret;
    /* A cancel too, as QEMU's query-jobs shows ("Operation canceled"). */
    if (!job->error) {
        job->error = g_strdup(error ? error : g_strerror(-ret));
    }
    job_state_transition(job, JOB_STATUS_ABORTING);
}

/* Clean up, say how it ended and conclude (QEMU's job_finalize_single). */
static void job_finalize_single(Job *job)
{
    JobEvent ev = { .type = JOB_EVENT_COMPLETED };

    if (job->driver->clean) {
        job->driver->clean(job);
    }
    if (job->ret < 0 && job->cancelled) {
        ev.type = JOB_EVENT_CANCELLED;
    }
    job_emit(job, &ev);
    job_conclude(job);
}

/* PENDING: let the result take effect (prepare), then conclude. */
static void job_do_finalize(Job *job)
{
    int ret = job->driver->prepare ? job->driver->prepare(job) : 0;

    if (ret < 0) {
        job_set_failed(job, ret, NULL);
    }
    job_finalize_single(job);
}

bool job_finalize(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_FINALIZE, errp)) {
        return false;
    }
    job_ref(job);
    job_do_finalize(job);
    job_unref(job);
    return true;
}

bool job_dismiss(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_DISMISS, errp)) {
        return false;
    }
    job_state_transition(job, JOB_STATUS_NULL);
    return true;
}

void job_announce(Job *job)
{
    JobEvent ev = { .type = JOB_EVENT_STATUS_CHANGE, .status = job->status };

    g_assert(job->status == JOB_STATUS_CREATED);
    job_emit(job, &ev);
}

void job_completed(Job *job, int ret, const char *error)
{
    JobEvent pending = { .type = JOB_EVENT_PENDING };

    g_assert(!job_is_completed(job));
    job_ref(job);
    if (ret == 0 && job_is_cancelled(job)) {
        ret = -ECANCELED;
    }
    if (ret < 0) {
        job_set_failed(job, ret, error);
        job_finalize_single(job);
    } else {
        job->ret = 0;
        job_state_transition(job, JOB_STATUS_WAITING);
        job_state_transition(job, JOB_STATUS_PENDING);
        if (job->auto_finalize) {
            job_do_finalize(job);
        } else {
            job_emit(job, &pending);
        }
    }
    job_unref(job);
}
