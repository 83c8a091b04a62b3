/*
 * Running a mirror job from the command line: start it, draw progress,
 * forward its events (to QMP clients, as JSON lines on stdout), turn
 * SIGINT/SIGTERM/SIGHUP into an orderly cancel (saying at once what it
 * waits for; a second one exits at once), warn when no I/O completes for
 * a while, and map the outcome to an exit code and a message that says
 * what state the target is in.
 *
 * Output that cannot be written (a reader that went away: EPIPE, since
 * main() ignores SIGPIPE) stops that output, never the job.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef JOB_RUNNER_H
#define JOB_RUNNER_H

#include "block/mirror/job.h"
#include "qemu-mirror-tool/qmp.h"
#include <stdio.h>
#include <glib.h>

typedef struct JobRunner {
    Job *job;               /* owned: unref'd by job_runner_destroy */
    const char *target;     /* for messages */
    bool progress;          /* -p: a bar on stderr */
    bool json;              /* --json: events as JSON lines on stdout */
    bool quiet;             /* -q: no reconnect lines on stderr */
    char *gave_up;          /* "target not reconnected: WHY", for the
                             * last line, or NULL */
    QmpServer *qmp;         /* events go to its clients too, or NULL */
    bool qmp_wait;          /* start the job once a QMP client is there */
    bool started;           /* job_runner_run started the job */
    bool done;
    bool quit;              /* QMP quit */
    bool stop;              /* a signal or quit asked us to stop */
    int signal;             /* SIGINT/SIGTERM/SIGHUP received, or 0 */
    int64_t stall_warning_s; /* warn after this long without a completed
                             * I/O while some is in flight; 0 = never */
    int64_t start_ns;
    int64_t ready_ns;
    int64_t end_ns;
    guint progress_timer;
    guint sigint_source;
    guint sigterm_source;
    guint sighup_source;
    guint stall_timer;
    uint64_t stall_mark;    /* progress + errors when last looked */
    int64_t stall_since_ns; /* since then nothing completed */
    bool stall_warned;
    GString *line;
} JobRunner;

/* Default of stall_warning_s (start --stall-warning). */
#define JOB_RUNNER_STALL_WARNING_S 30

/*
 * Prepare to run a job writing @target: from now on SIGINT, SIGTERM and
 * SIGHUP are caught (call it before creating the target).  Set the
 * optional fields (json, qmp, qmp_wait, stall_warning_s) afterwards.
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
 * until SIGINT, SIGTERM, SIGHUP or QMP quit.  A further signal while the
 * caller then shuts down (drains, flushes) exits at once.
 */
void job_runner_serve(JobRunner *r);

/* What QMP `quit` does: cancel the job (if still running) and stop. */
void job_runner_quit(void *opaque);

/* "copied 1.2 GiB, zeroed 2.8 GiB, skipped 0 B in 1.4 s (857 MiB/s)" on
 * @out, or a JSON object with --json. */
void job_runner_print_summary(JobRunner *r, FILE *out);

void job_runner_destroy(JobRunner *r);

#endif /* JOB_RUNNER_H */
