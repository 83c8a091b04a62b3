/*
 * Running a mirror job from the command line: start it, draw progress,
 * forward its events (to QMP clients, as JSON lines on stdout), turn
 * SIGINT/SIGTERM into an orderly cancel, and map the outcome to an exit
 * code and a message that says what state the target is in.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef JOB_RUNNER_H
#define JOB_RUNNER_H

#include "block/job.h"
#include "qemu-mirror-tool/qmp.h"
#include <stdio.h>
#include <glib.h>

typedef struct JobRunner {
    Job *job;               /* owned: unref'd by job_runner_destroy */
    const char *target;     /* for messages */
    bool progress;          /* -p: a bar on stderr */
    bool json;              /* --json: events as JSON lines on stdout */
    QmpServer *qmp;         /* events go to its clients too, or NULL */
    bool qmp_wait;          /* start the job once a QMP client is there */
    bool started;           /* job_runner_run started the job */
    bool done;
    bool quit;              /* QMP quit */
    bool stop;              /* a signal or quit asked us to stop */
    int signal;             /* SIGINT/SIGTERM received, or 0 */
    int64_t start_ns;
    int64_t ready_ns;
    int64_t end_ns;
    guint progress_timer;
    guint sigint_source;
    guint sigterm_source;
    GString *line;
} JobRunner;

/*
 * Prepare to run a job writing @target: from now on SIGINT and SIGTERM
 * are caught (call it before creating the target).  Set the optional
 * fields (json, qmp, qmp_wait) afterwards.
 */
void job_runner_init(JobRunner *r, const char *target, bool progress);

/*
 * Start @job (created, not started; the runner takes over its reference)
 * and run the main loop until it is gone (NULL state).  Returns the exit
 * code, having printed any failure.  If a signal arrived before, the job
 * is not started.
 */
int job_runner_run(JobRunner *r, Job *job);

/* Exit code and message for a signal that arrived before any job ran, or
 * TOOL_EXIT_OK if none did. */
int job_runner_check_interrupted(JobRunner *r);

/*
 * After the job: keep the main loop running (an NBD export keeps serving)
 * until SIGINT, SIGTERM or QMP quit.
 */
void job_runner_serve(JobRunner *r);

/* What QMP `quit` does: cancel the job (if still running) and stop. */
void job_runner_quit(void *opaque);

/* "copied 1.2 GiB, zeroed 2.8 GiB, skipped 0 B in 1.4 s (857 MiB/s)" on
 * @out, or a JSON object with --json. */
void job_runner_print_summary(JobRunner *r, FILE *out);

void job_runner_destroy(JobRunner *r);

#endif /* JOB_RUNNER_H */
