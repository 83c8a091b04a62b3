/*
 * Running a mirror job from the command line.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/job-runner.h"
#include "qemu-mirror-tool/qmp-job.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror.h"
#include "block/nbd.h"
#include "util/cutils.h"
#include "util/progress.h"

#include <errno.h>
#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#define PROGRESS_INTERVAL_MS 100

static void job_runner_draw(JobRunner *r, bool final)
{
    Job *job = r->job;
    int64_t total = MAX(job->progress_total, job->progress_current);

    progress_render(r->line, job->progress_current, total,
                    clock_ns() - r->start_ns, 79);
    fprintf(stderr, "\r%s%s", r->line->str, final ? "\n" : "");
    fflush(stderr);
}

static gboolean job_runner_progress_cb(gpointer opaque)
{
    job_runner_draw(opaque, false);
    return G_SOURCE_CONTINUE;
}

static void job_runner_event(Job *job, const JobEvent *ev, void *opaque)
{
    JobRunner *r = opaque;
    const char *name = NULL;
    JsonNode *data = qmp_job_event_data(job, ev, &name);

    if (data && r->json) {
        g_autofree char *line = qmp_event_to_string(name,
                                                    json_node_copy(data));

        printf("%s\n", line);
        fflush(stdout);
    }
    if (data && r->qmp) {
        qmp_server_emit_event(r->qmp, name, data);
    } else if (data) {
        json_node_unref(data);
    }
    if (ev->type == JOB_EVENT_READY) {
        r->ready_ns = clock_ns();
    }
    if (ev->type == JOB_EVENT_STATUS_CHANGE &&
        ev->status == JOB_STATUS_NULL) {
        r->done = true;
        r->end_ns = clock_ns();
    }
}

static void job_runner_cancel(JobRunner *r, bool force)
{
    g_autoptr(GError) err = NULL;

    if (r->job && !job_user_cancel(r->job, force, &err)) {
        g_debug("cancel: %s", err->message);
    }
}

static void job_runner_interrupt(JobRunner *r, int sig)
{
    if (r->job && job_is_completed(r->job) && r->done) {
        /* The job is over: only the serving stops. */
        r->stop = true;
        return;
    }
    if (r->signal) {
        /* A second signal: stop at once. */
        tool_error("interrupted again; the target '%s' is incomplete",
                   r->target);
        _exit(sig == SIGINT ? TOOL_EXIT_SIGINT : TOOL_EXIT_SIGTERM);
    }
    r->signal = sig;
    /* After READY an orderly cancel leaves a point-in-time copy. */
    job_runner_cancel(r, !(r->job && r->job->ready_seen));
}

static gboolean job_runner_sigint(gpointer opaque)
{
    job_runner_interrupt(opaque, SIGINT);
    return G_SOURCE_CONTINUE;
}

static gboolean job_runner_sigterm(gpointer opaque)
{
    job_runner_interrupt(opaque, SIGTERM);
    return G_SOURCE_CONTINUE;
}

void job_runner_quit(void *opaque)
{
    JobRunner *r = opaque;

    r->quit = true;
    r->stop = true;
    job_runner_cancel(r, true);
}

/* While an NBD open connects (blocking): deliver the signals. */
static bool job_runner_signalled(void *opaque)
{
    JobRunner *r = opaque;

    while (g_main_context_iteration(NULL, FALSE)) {
        /* dispatch what is pending */
    }
    return r->signal != 0;
}

void job_runner_init(JobRunner *r, const char *target, bool progress)
{
    *r = (JobRunner) {
        .target = target,
        .progress = progress,
        .line = g_string_new(NULL),
    };
    r->sigint_source = g_unix_signal_add(SIGINT, job_runner_sigint, r);
    r->sigterm_source = g_unix_signal_add(SIGTERM, job_runner_sigterm, r);
    nbdblk_set_interrupt_func(job_runner_signalled, r);
}

static const char *job_runner_signame(JobRunner *r)
{
    return r->signal == SIGINT ? "SIGINT" : "SIGTERM";
}

int job_runner_check_interrupted(JobRunner *r)
{
    /* Signals are delivered through the main loop: look once. */
    while (g_main_context_iteration(NULL, FALSE)) {
        /* dispatch what is pending */
    }
    if (!r->signal) {
        return TOOL_EXIT_OK;
    }
    tool_error("interrupted by %s; the target '%s' is incomplete",
               job_runner_signame(r), r->target);
    return r->signal == SIGINT ? TOOL_EXIT_SIGINT : TOOL_EXIT_SIGTERM;
}

/* The outcome as an exit code and, unless it is plain success, a
 * message saying what the target holds. */
static int job_runner_outcome(JobRunner *r)
{
    Job *job = r->job;
    const char *detail;

    if (r->signal) {
        if (job->ret == 0) {
            tool_error("interrupted by %s after READY; the target '%s' is "
                       "a consistent point-in-time copy",
                       job_runner_signame(r), r->target);
        } else {
            tool_error("interrupted by %s; the target '%s' is incomplete",
                       job_runner_signame(r), r->target);
        }
        return r->signal == SIGINT ? TOOL_EXIT_SIGINT : TOOL_EXIT_SIGTERM;
    }
    if (job->ret == -ECANCELED) {
        tool_error("the job was cancelled; the target '%s' is incomplete",
                   r->target);
        return TOOL_EXIT_FAILURE;
    }
    if (job->ret < 0) {
        detail = mirror_get_error_detail(job);
        tool_error("%s; the target '%s' is incomplete",
                   detail ? detail : job->error ? job->error
                                               : g_strerror(-job->ret),
                   r->target);
        return TOOL_EXIT_FAILURE;
    }
    return TOOL_EXIT_OK;
}

static void job_runner_start(JobRunner *r)
{
    if (r->started) {
        return;
    }
    r->started = true;
    if (r->progress) {
        r->progress_timer = g_timeout_add(PROGRESS_INTERVAL_MS,
                                          job_runner_progress_cb, r);
    }
    r->start_ns = clock_ns();
    /* A QMP client may have cancelled it before it started. */
    if (r->job->status == JOB_STATUS_CREATED) {
        job_start(r->job);
    }
}

/*
 * --qmp-wait: a client completed negotiation.  Start the job now, before
 * the server reads that client's next request, so that the request finds
 * the job running (not CREATED) and no event is missed.
 */
static void job_runner_negotiated(void *opaque)
{
    JobRunner *r = opaque;

    if (!r->signal) {
        job_runner_start(r);
    }
}

int job_runner_run(JobRunner *r, Job *job)
{
    int ret;

    r->job = job;
    job_add_listener(job, job_runner_event, r);
    if (r->qmp_wait) {
        qmp_server_set_negotiated_cb(r->qmp, job_runner_negotiated, r);
    }
    ret = job_runner_check_interrupted(r);
    if (ret != TOOL_EXIT_OK && !r->started) {
        return ret;
    }
    while (r->qmp_wait && !r->started && !r->signal) {
        g_main_context_iteration(NULL, TRUE);
    }
    if (r->signal && !r->started) {
        return job_runner_check_interrupted(r);
    }
    /* Started already, a signal cancels it: run until it is gone. */
    job_runner_start(r);
    tool_run_until(&r->done);
    if (r->progress) {
        job_runner_draw(r, true);
    }
    if (r->qmp) {
        /* Let clients read the last events before we go. */
        qmp_server_flush(r->qmp, 1000);
    }
    return job_runner_outcome(r);
}

void job_runner_serve(JobRunner *r)
{
    tool_run_until(&r->stop);
}

void job_runner_print_summary(JobRunner *r, FILE *out)
{
    MirrorStats st;
    g_autofree char *copied = NULL;
    g_autofree char *zeroed = NULL;
    g_autofree char *skipped = NULL;
    g_autofree char *rate = NULL;
    double secs = (r->end_ns - r->start_ns) / 1e9;

    mirror_get_stats(r->job, &st);
    if (r->json) {
        fprintf(out, "{\"summary\": {\"bytes-copied\": %" G_GINT64_FORMAT
                ", \"bytes-zeroed\": %" G_GINT64_FORMAT ", \"bytes-skipped\""
                ": %" G_GINT64_FORMAT ", \"seconds\": %.3f, "
                "\"ready-seconds\": %.3f}}\n", st.bytes_copied,
                st.bytes_zeroed, st.bytes_skipped, secs,
                r->ready_ns ? (r->ready_ns - r->start_ns) / 1e9 : -1.0);
        return;
    }
    copied = size_to_str(st.bytes_copied);
    zeroed = size_to_str(st.bytes_zeroed);
    skipped = size_to_str(st.bytes_skipped);
    rate = size_to_str(secs > 0 ? st.len / secs : 0);
    fprintf(out, "copied %s, zeroed %s, skipped %s in %.2f s (%s/s)\n",
            copied, zeroed, skipped, secs, rate);
}

void job_runner_destroy(JobRunner *r)
{
    nbdblk_set_interrupt_func(NULL, NULL);
    if (r->progress_timer) {
        g_source_remove(r->progress_timer);
    }
    if (r->sigint_source) {
        g_source_remove(r->sigint_source);
    }
    if (r->sigterm_source) {
        g_source_remove(r->sigterm_source);
    }
    g_string_free(r->line, TRUE);
    job_unref(r->job);
    r->job = NULL;
}
