/*
 * Running a mirror job from the command line.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/job-runner.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror.h"
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

    if (ev->type == JOB_EVENT_STATUS_CHANGE &&
        (ev->status == JOB_STATUS_CONCLUDED ||
         ev->status == JOB_STATUS_NULL)) {
        r->done = true;
        r->end_ns = clock_ns();
    }
}

static void job_runner_interrupt(JobRunner *r, int sig)
{
    g_autoptr(GError) err = NULL;

    if (r->signal) {
        /* A second signal: stop at once. */
        tool_error("interrupted again; the target '%s' is incomplete",
                   r->target);
        _exit(sig == SIGINT ? TOOL_EXIT_SIGINT : TOOL_EXIT_SIGTERM);
    }
    r->signal = sig;
    if (r->job && !job_user_cancel(r->job, true, &err)) {
        g_debug("cancel on signal: %s", err->message);
    }
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

void job_runner_init(JobRunner *r, const char *target, bool progress)
{
    *r = (JobRunner) {
        .target = target,
        .progress = progress,
        .line = g_string_new(NULL),
    };
    r->sigint_source = g_unix_signal_add(SIGINT, job_runner_sigint, r);
    r->sigterm_source = g_unix_signal_add(SIGTERM, job_runner_sigterm, r);
}

static int job_runner_report_signal(JobRunner *r)
{
    tool_error("interrupted by %s; the target '%s' is incomplete",
               r->signal == SIGINT ? "SIGINT" : "SIGTERM", r->target);
    return r->signal == SIGINT ? TOOL_EXIT_SIGINT : TOOL_EXIT_SIGTERM;
}

int job_runner_check_interrupted(JobRunner *r)
{
    /* Signals are delivered through the main loop: look once. */
    while (g_main_context_iteration(NULL, FALSE)) {
        /* dispatch what is pending */
    }
    return r->signal ? job_runner_report_signal(r) : TOOL_EXIT_OK;
}

int job_runner_run(JobRunner *r, Job *job)
{
    const char *detail;
    int ret;

    r->job = job;
    ret = job_runner_check_interrupted(r);
    if (ret != TOOL_EXIT_OK) {
        return ret;
    }
    job_add_listener(job, job_runner_event, r);
    if (r->progress) {
        r->progress_timer = g_timeout_add(PROGRESS_INTERVAL_MS,
                                          job_runner_progress_cb, r);
    }
    r->start_ns = clock_ns();
    job_start(job);
    tool_run_until(&r->done);

    if (r->progress) {
        job_runner_draw(r, true);
    }
    if (r->signal) {
        return job_runner_report_signal(r);
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

void job_runner_print_summary(JobRunner *r)
{
    MirrorStats st;
    g_autofree char *copied = NULL;
    g_autofree char *zeroed = NULL;
    g_autofree char *skipped = NULL;
    g_autofree char *rate = NULL;
    double secs = (r->end_ns - r->start_ns) / 1e9;

    mirror_get_stats(r->job, &st);
    copied = size_to_str(st.bytes_copied);
    zeroed = size_to_str(st.bytes_zeroed);
    skipped = size_to_str(st.bytes_skipped);
    rate = size_to_str(secs > 0 ? st.len / secs : 0);
    fprintf(stderr, "copied %s, zeroed %s, skipped %s in %.2f s (%s/s)\n",
            copied, zeroed, skipped, secs, rate);
}

void job_runner_destroy(JobRunner *r)
{
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
