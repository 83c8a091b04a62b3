/*
 * Jobs: QEMU's job state machine, verb table and events.
 *
 * A job is a long-running operation (the mirror) driven by callbacks on
 * the main loop.  The states, the allowed transitions (JobSTT) and which
 * verbs each state accepts (JobVerbTable) are QEMU's, so that QMP clients
 * see the same life cycle:
 *
 *   created -> running -> (paused <-> running)* -> ready
 *           -> (standby <-> ready)* -> waiting -> pending -> concluded -> null
 *   failure or cancel: running|ready|pending -> aborting -> concluded -> null
 *
 * Every transition emits JOB_EVENT_STATUS_CHANGE to the listeners.  As in
 * QEMU, a job that finished its work waits in PENDING for job_finalize()
 * when auto_finalize is false (the driver's prepare(), e.g. the mirror's
 * switch-over, runs at finalize), and stays CONCLUDED until job_dismiss()
 * when auto_dismiss is false.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_JOB_H
#define BLOCK_JOB_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum JobStatus {
    JOB_STATUS_UNDEFINED,
    JOB_STATUS_CREATED,
    JOB_STATUS_RUNNING,
    JOB_STATUS_PAUSED,
    JOB_STATUS_READY,
    JOB_STATUS_STANDBY,
    JOB_STATUS_WAITING,
    JOB_STATUS_PENDING,
    JOB_STATUS_ABORTING,
    JOB_STATUS_CONCLUDED,
    JOB_STATUS_NULL,
    JOB_STATUS__MAX,
} JobStatus;

typedef enum JobVerb {
    JOB_VERB_CANCEL,
    JOB_VERB_PAUSE,
    JOB_VERB_RESUME,
    JOB_VERB_SET_SPEED,
    JOB_VERB_COMPLETE,
    JOB_VERB_FINALIZE,
    JOB_VERB_DISMISS,
    JOB_VERB_CHANGE,
    JOB_VERB__MAX,
} JobVerb;

typedef enum JobEventType {
    JOB_EVENT_STATUS_CHANGE,    /* JOB_STATUS_CHANGE */
    JOB_EVENT_READY,            /* BLOCK_JOB_READY */
    JOB_EVENT_PENDING,          /* BLOCK_JOB_PENDING (auto_finalize off) */
    JOB_EVENT_COMPLETED,        /* BLOCK_JOB_COMPLETED (error if failed) */
    JOB_EVENT_CANCELLED,        /* BLOCK_JOB_CANCELLED */
    JOB_EVENT_ERROR,            /* BLOCK_JOB_ERROR */
    JOB_EVENT_COPY_MODE,        /* MIRROR_COPY_MODE_CHANGED (ours) */
    JOB_EVENT_RECONNECTING,     /* BLOCK_JOB_RECONNECTING (ours): a node
                                 * began or ended a reconnect */
} JobEventType;

/* Error actions (BlockdevOnError) and the operation of BLOCK_JOB_ERROR. */
typedef enum BlockErrorAction {
    BLOCK_ERROR_ACTION_IGNORE,
    BLOCK_ERROR_ACTION_REPORT,
    BLOCK_ERROR_ACTION_STOP,
} BlockErrorAction;

typedef struct Job Job;

typedef struct JobEvent {
    JobEventType type;
    JobStatus status;           /* STATUS_CHANGE: the new status */
    bool is_read;               /* ERROR: operation read or write */
    BlockErrorAction action;    /* ERROR */
    int error;                  /* ERROR: the errno (positive) */
    const char *reason;         /* COPY_MODE: "auto-converge" etc.;
                                 * RECONNECTING: what broke the link
                                 * (started), why it gave up (failed),
                                 * NULL (reconnected) */
    const char *node;           /* RECONNECTING: "source" or "target" */
    const char *spec;           /* RECONNECTING: the node's (redacted) */
    bool reconnecting;          /* RECONNECTING: started, or over */
    int delay_s;                /* RECONNECTING started: gives up after */
    int64_t elapsed_ns;         /* RECONNECTING over: since it started */
} JobEvent;

/* A listener gets every event of the job, synchronously. */
typedef void JobEventFunc(Job *job, const JobEvent *event, void *opaque);

typedef struct JobDriver {
    /* "mirror" */
    const char *job_type;

    /* Begin the work; the job is RUNNING.  The driver eventually calls
     * job_completed() exactly once. */
    void (*start)(Job *job);

    /*
     * A pause was requested: stop issuing new work and call
     * job_pause_point() once nothing is in flight (it may do so at once).
     */
    void (*pause)(Job *job);

    /* The last pause was lifted: issue work again. */
    void (*resume)(Job *job);

    /*
     * block-job-complete, in READY or STANDBY and not cancelled.  Return
     * false with @errp set to refuse.
     */
    bool (*complete)(Job *job, GError **errp);

    /*
     * A cancel was requested (@force: drop everything now; otherwise,
     * after READY, finish a point-in-time copy).  The driver stops and
     * calls job_completed().
     */
    void (*cancel)(Job *job, bool force);

    /* The speed limit changed (bytes/s, 0 = unlimited). */
    void (*set_speed)(Job *job, int64_t speed);

    /*
     * Optional.  The job completed its work (ret 0) and is finalized now
     * (at once with auto_finalize, else by job_finalize()): make the
     * result take effect (QEMU's .prepare: the mirror's switch-over).
     * Returns 0, or -errno to fail the job after all.
     */
    int (*prepare)(Job *job);

    /*
     * Optional.  The job concludes, whatever its result (after prepare()
     * on success): release what it kept until finalize (QEMU's .clean:
     * the mirror's quiesced source).
     */
    void (*clean)(Job *job);

    /* Release the driver's part of the job (called by job_unref). */
    void (*free)(Job *job);
} JobDriver;

struct Job {
    const JobDriver *driver;
    char *id;
    JobStatus status;
    int refcnt;

    int pause_count;        /* pause requests in force */
    bool user_paused;       /* paused by the user (or a 'stop' error) */
    bool cancelled;         /* a cancel was requested */
    bool force_cancel;
    bool auto_finalize;
    bool auto_dismiss;
    bool ready_seen;        /* READY was reached once */

    int ret;                /* final result, 0 or -errno */
    char *error;            /* message when failed, or NULL */
    int64_t speed;
    int64_t progress_current;
    int64_t progress_total;

    GArray *listeners;      /* JobListener */
};

const char *job_status_str(JobStatus status);
const char *job_verb_str(JobVerb verb);

/*
 * Create a job of @driver (the driver embeds Job as its first member and
 * passes its size).  The job is CREATED, with one reference.
 */
Job *job_create(const JobDriver *driver, size_t instance_size,
                const char *id);

void job_ref(Job *job);

/* Drop a reference; the last one frees the job (it must be CONCLUDED or
 * NULL, or never started). */
void job_unref(Job *job);

/* Add a listener for every event of @job. */
void job_add_listener(Job *job, JobEventFunc *func, void *opaque);

/*
 * Emit JOB_STATUS_CHANGE "created" to the listeners of a CREATED job:
 * QEMU announces a job as it creates it (QMP's blockdev-mirror), so add
 * the listeners first.
 */
void job_announce(Job *job);

/* CREATED -> RUNNING, then the driver's start(). */
void job_start(Job *job);

/* Is @verb allowed in the job's state?  Error as QEMU words it. */
bool job_apply_verb(Job *job, JobVerb verb, GError **errp);

/*
 * The one rule for a speed limit in bytes/s (0 = unlimited), for the CLI
 * (start --speed), job creation and QMP block-job-set-speed alike: a
 * negative value is refused with QEMU's words, "Parameter 'speed' expects
 * a non-negative value"; any other int64_t is valid (util/ratelimit.c
 * counts every one of them without wrapping).
 */
bool job_check_speed(int64_t speed, GError **errp);

/*
 * The user verbs, each checked against the verb table (set-speed also
 * with job_check_speed()).  job_user_cancel() of a PENDING job fails it
 * as cancelled (its prepare() never runs); job_finalize() of a PENDING
 * job runs prepare() and concludes it; job_dismiss() of a CONCLUDED job
 * makes it NULL.
 */
bool job_user_pause(Job *job, GError **errp);
bool job_user_resume(Job *job, GError **errp);
bool job_user_cancel(Job *job, bool force, GError **errp);
bool job_complete(Job *job, GError **errp);
bool job_set_speed(Job *job, int64_t speed, GError **errp);
bool job_finalize(Job *job, GError **errp);
bool job_dismiss(Job *job, GError **errp);

/* Internal pause/resume (counted, no verb check, not user-visible). */
void job_pause(Job *job);
void job_resume(Job *job);

/* Should the driver stop issuing work now (paused or pausing)? */
bool job_should_pause(Job *job);

/*
 * The driver has nothing in flight: if a pause is pending, enter PAUSED
 * (from RUNNING) or STANDBY (from READY).  Returns true if the job is now
 * paused.
 */
bool job_pause_point(Job *job);

/* Is the job in PAUSED or STANDBY? */
bool job_is_paused(Job *job);

/* Cancelled (with force, or before READY)? */
bool job_is_cancelled(Job *job);

/* Has the job finished (WAITING or later)? */
bool job_is_completed(Job *job);

/* RUNNING -> READY once, with BLOCK_JOB_READY. */
void job_transition_to_ready(Job *job);

/* Emit an event (JOB_EVENT_ERROR etc.) to the listeners. */
void job_emit(Job *job, const JobEvent *event);

/*
 * Stop the job as the 'stop' error action does: user-paused.
 */
void job_stop_on_error(Job *job);

/*
 * The driver is done: @ret is 0, or -errno with @error describing it (may
 * be NULL).  On success the job moves to WAITING and PENDING, and with
 * auto_finalize on to CONCLUDED through job_finalize()'s steps (else it
 * emits JOB_EVENT_PENDING and waits there); on failure or cancel it moves
 * through ABORTING to CONCLUDED.  COMPLETED or CANCELLED is emitted just
 * before CONCLUDED; with auto_dismiss on, NULL follows at once.
 */
void job_completed(Job *job, int ret, const char *error);

#endif /* BLOCK_JOB_H */
