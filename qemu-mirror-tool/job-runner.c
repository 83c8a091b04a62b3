/*
 * Running a mirror job from the command line.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/job-runner.h"
#include "qemu-mirror-tool/qmp-job.h"
#include "qemu-mirror-tool/resume-check.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror/mirror.h"
#include "block/nbd.h"
#include "util/cutils.h"
#include "util/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRESS_INTERVAL_MS 100

/*
 * A write to stdout or stderr failed (EPIPE: the reader went away; ENOSPC,
 * EIO...): that output stops, the job goes on.  Said once on stderr, which
 * may be gone as well.
 */
static void job_runner_output_lost(const char *what, const char *output,
                                   int err)
{
    tool_error("%s: %s; %s no longer printed; the job goes on", what,
               g_strerror(err), output);
}

/* Draw the progress bar; false when stderr cannot take it any more. */
static bool job_runner_draw(JobRunner *r, bool final)
{
    Job *job = r->job;
    int64_t total = MAX(job->progress_total, job->progress_current);

    if (!r->progress) {
        return false;
    }
    progress_render(r->line, job->progress_current, total,
                    clock_ns() - r->start_ns, 79);
    if (fprintf(stderr, "\r%s%s", r->line->str, final ? "\n" : "") < 0 ||
        fflush(stderr) == EOF) {
        int err = errno;

        r->progress = false;
        clearerr(stderr);
        job_runner_output_lost("stderr", "progress is", err);
        return false;
    }
    return true;
}

static gboolean job_runner_progress_cb(gpointer opaque)
{
    JobRunner *r = opaque;

    if (!job_runner_draw(r, false)) {
        r->progress_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

/* Print an event line on stdout (--json); stop at the first failure. */
static void job_runner_print_event(JobRunner *r, const char *line)
{
    if (printf("%s\n", line) < 0 || fflush(stdout) == EOF) {
        int err = errno;

        r->json = false;
        clearerr(stdout);
        job_runner_output_lost("stdout", "events are", err);
    }
}

/* The I/O the job is waiting for, for messages. */
static int job_runner_in_flight(JobRunner *r)
{
    MirrorStats st;

    mirror_get_stats(r->job, &st);
    return st.in_flight;
}

/*
 * Every second: if I/O is in flight and none completed for
 * stall_warning_s, say so (once per stall), so that a target or source
 * that stopped answering is visible; and say when it moves again.
 */
static gboolean job_runner_stall_cb(gpointer opaque)
{
    JobRunner *r = opaque;
    Job *job = r->job;
    MirrorStats st;
    int64_t now = clock_ns();
    uint64_t mark;

    mirror_get_stats(job, &st);
    mark = job->progress_current + st.errors;
    /* A reconnect says so itself (job_runner_say_reconnect()). */
    if (mark != r->stall_mark || !st.in_flight || job_is_paused(job) ||
        job_is_completed(job) || st.reconnecting) {
        if (r->stall_warned) {
            tool_error("I/O completes again after %.0f s",
                       (now - r->stall_since_ns) / 1e9);
        }
        r->stall_mark = mark;
        r->stall_since_ns = now;
        r->stall_warned = false;
        return G_SOURCE_CONTINUE;
    }
    if (!r->stall_warned &&
        now - r->stall_since_ns >= r->stall_warning_s * 1000000000) {
        r->stall_warned = true;
        tool_error("no I/O completed for %" G_GINT64_FORMAT " s; %d "
                   "requests in flight (is the source or the target "
                   "stalled?)", r->stall_warning_s, st.in_flight);
    }
    return G_SOURCE_CONTINUE;
}

/*
 * A node began or ended a reconnect: one line on stderr (not with -q or
 * --json), below the progress bar.  Tests wait for these lines: keep
 * their shape.
 */
static void job_runner_say_reconnect(JobRunner *r, const JobEvent *ev)
{
    if (!ev->reconnecting && ev->error) {
        /* Why the job will fail, for its last line (with -q too). */
        g_free(r->gave_up);
        r->gave_up = g_strdup_printf("%s not reconnected: %s", ev->node,
                                     ev->reason ? ev->reason
                                                : g_strerror(ev->error));
    }
    if (r->quiet || r->json) {
        return;
    }
    if (r->progress) {
        fputc('\n', stderr);
    }
    if (ev->reconnecting) {
        tool_error("%s '%s': connection lost (%s), reconnecting for up to "
                   "%d s", ev->node, ev->spec, ev->reason, ev->delay_s);
    } else if (ev->error) {
        tool_error("%s '%s': not reconnected: %s", ev->node, ev->spec,
                   ev->reason ? ev->reason : g_strerror(ev->error));
    } else {
        tool_error("%s '%s': reconnected after %.1f s", ev->node, ev->spec,
                   ev->elapsed_ns / 1e9);
    }
}

static void job_runner_event(Job *job, const JobEvent *ev, void *opaque)
{
    JobRunner *r = opaque;
    const char *name = NULL;
    JsonNode *data = qmp_job_event_data(job, ev, &name);

    if (data && r->json) {
        g_autofree char *line = qmp_event_to_string(name,
                                                    json_node_copy(data));

        job_runner_print_event(r, line);
    }
    if (data && r->qmp) {
        qmp_server_emit_event(r->qmp, name, data);
    } else if (data) {
        json_node_unref(data);
    }
    if (ev->type == JOB_EVENT_RECONNECTING) {
        job_runner_say_reconnect(r, ev);
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

static const char *job_runner_signame(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP. */
static int job_runner_sigexit(int sig)
{
    return sig == SIGINT ? TOOL_EXIT_SIGINT :
           sig == SIGHUP ? TOOL_EXIT_SIGHUP : TOOL_EXIT_SIGTERM;
}

static void job_runner_interrupt(JobRunner *r, int sig)
{
    if (r->signal || r->stop) {
        /* A second signal: stop at once. */
        if (r->job && job_is_completed(r->job) && r->done &&
            r->job->ret == 0 && !r->signal) {
            tool_error("interrupted again by %s; exiting without the "
                       "final flush", job_runner_signame(sig));
        } else {
            tool_error("interrupted again by %s; the target '%s' is "
                       "incomplete", job_runner_signame(sig), r->target);
        }
        _exit(job_runner_sigexit(sig));
    }
    if (r->job && job_is_completed(r->job) && r->done) {
        /* The job is over: only the serving stops (drain, flush). */
        tool_error("%s: stopping (interrupt again to stop at once)",
                   job_runner_signame(sig));
        r->stop = true;
        return;
    }
    r->signal = sig;
    if (r->job && r->started) {
        /* Say at once what we wait for: I/O may be stalled. */
        tool_error("%s: cancelling the job; waiting for %d requests in "
                   "flight (interrupt again to stop at once)",
                   job_runner_signame(sig), job_runner_in_flight(r));
    }
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

/* A dropped terminal or ssh session: as SIGTERM (orderly, with the
 * message), where the default action would kill us without a word. */
static gboolean job_runner_sighup(gpointer opaque)
{
    job_runner_interrupt(opaque, SIGHUP);
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
        .stall_warning_s = JOB_RUNNER_STALL_WARNING_S,
        .line = g_string_new(NULL),
    };
    r->sighup_source = g_unix_signal_add(SIGHUP, job_runner_sighup, r);
    r->sigint_source = g_unix_signal_add(SIGINT, job_runner_sigint, r);
    r->sigterm_source = g_unix_signal_add(SIGTERM, job_runner_sigterm, r);
    nbdblk_set_interrupt_func(job_runner_signalled, r);
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
               job_runner_signame(r->signal), r->target);
    return job_runner_sigexit(r->signal);
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
                       job_runner_signame(r->signal), r->target);
        } else {
            tool_error("interrupted by %s; the target '%s' is incomplete",
                       job_runner_signame(r->signal), r->target);
        }
        return job_runner_sigexit(r->signal);
    }
    if (job->ret == -ECANCELED) {
        tool_error("the job was cancelled; the target '%s' is incomplete",
                   r->target);
        return TOOL_EXIT_FAILURE;
    }
    if (job->ret < 0) {
        detail = mirror_get_error_detail(job);
        tool_error("%s%s%s%s; the target '%s' is incomplete",
                   detail ? detail : job->error ? job->error
                                               : g_strerror(-job->ret),
                   r->gave_up ? " (" : "", r->gave_up ? r->gave_up : "",
                   r->gave_up ? ")" : "", r->target);
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
    if (r->stall_warning_s > 0) {
        r->stall_since_ns = r->start_ns;
        r->stall_timer = g_timeout_add_seconds(1, job_runner_stall_cb, r);
    }
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
    if (r->stall_timer) {
        /* Say that a stall we reported ended, if the timer did not. */
        job_runner_stall_cb(r);
    }
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
    g_autofree char *kg = NULL;
    double secs = (r->end_ns - r->start_ns) / 1e9;

    mirror_get_stats(r->job, &st);
    if (st.known_good_bytes >= 0) {
        kg = g_strdup_printf(", \"known-good-bytes\": %" G_GINT64_FORMAT,
                             st.known_good_bytes);
    }
    if (r->json) {
        fprintf(out, "{\"summary\": {\"bytes-copied\": %" G_GINT64_FORMAT
                ", \"bytes-zeroed\": %" G_GINT64_FORMAT ", \"bytes-skipped\""
                ": %" G_GINT64_FORMAT ", \"seconds\": %.3f, "
                "\"ready-seconds\": %.3f%s}}\n", st.bytes_copied,
                st.bytes_zeroed, st.bytes_skipped, secs,
                r->ready_ns ? (r->ready_ns - r->start_ns) / 1e9 : -1.0,
                kg ? kg : "");
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
    g_clear_handle_id(&r->progress_timer, g_source_remove);
    g_clear_handle_id(&r->sigint_source, g_source_remove);
    g_clear_handle_id(&r->sigterm_source, g_source_remove);
    g_clear_handle_id(&r->sighup_source, g_source_remove);
    g_clear_handle_id(&r->stall_timer, g_source_remove);
    g_string_free(r->line, TRUE);
    g_clear_pointer(&r->gave_up, g_free);
    job_unref(r->job);
    r->job = NULL;
}

/*
 * An image's identity in a state file: "FORMAT NAME size=N", NAME the
 * node's file name (an NBD URI shows no TLS user name); for a local file
 * or block device its real path and " ino=N", and for a regular file
 * " btime=S.N" too when the file system reports a birth time, so that a
 * file removed and made anew under the same name is another image even
 * when it gets the same inode back.  What keeps its inode (a truncate or
 * `qemu-img create` over it) the spot check on resume finds
 * (resume-check.h).  No st_dev: device numbers of device-mapper, USB and
 * network file systems change across reboots, and resuming after a power
 * cut is the point.
 */
static char *job_runner_identity(BlockDriverState *bs)
{
    const char *name = bdrv_get_filename(bs);
    const char *fmt = bdrv_get_format_name(bs);
    g_autofree char *real = NULL;
    g_autofree char *btime = NULL;
    struct statx stx;

    if (statx(AT_FDCWD, name, 0, STATX_BASIC_STATS | STATX_BTIME,
              &stx) == 0 &&
        (S_ISREG(stx.stx_mode) || S_ISBLK(stx.stx_mode))) {
        real = realpath(name, NULL);
        if (S_ISREG(stx.stx_mode) && (stx.stx_mask & STATX_BTIME)) {
            btime = g_strdup_printf(" btime=%lld.%09u",
                                    (long long)stx.stx_btime.tv_sec,
                                    stx.stx_btime.tv_nsec);
        }
        return g_strdup_printf("%s %s ino=%ju%s size=%" G_GINT64_FORMAT,
                               fmt, real ? real : name,
                               (uintmax_t)stx.stx_ino, btime ? btime : "",
                               bdrv_getlength(bs));
    }
    return g_strdup_printf("%s %s size=%" G_GINT64_FORMAT, fmt, name,
                           bdrv_getlength(bs));
}

MirrorState *job_runner_open_state(const char *path, Job *job,
                                   BlockDriverState *src,
                                   BlockDriverState *dst, int sync,
                                   bool quiet)
{
    g_autoptr(GError) err = NULL;
    MirrorStateIdentity id;
    MirrorState *st;
    MirrorStats stats;

    mirror_get_stats(job, &stats);
    id = (MirrorStateIdentity) {
        .source = job_runner_identity(src),
        .target = job_runner_identity(dst),
        .size = stats.len,
        .granularity = stats.granularity,
        .sync = sync,
    };
    st = mirror_state_open(path, &id, &err);
    mirror_state_identity_clear(&id);
    if (!st) {
        tool_error("--state-file '%s': %s", path, err->message);
        return NULL;
    }
    if (mirror_state_switched_us(st) > 0) {
        g_autoptr(GDateTime) t =
            g_date_time_new_from_unix_utc(mirror_state_switched_us(st) /
                                          G_USEC_PER_SEC);
        g_autofree char *when = t ? g_date_time_format(t, "%FT%TZ") : NULL;

        tool_error("state file '%s': the job completed and the target took "
                   "over at %s; the source is stale: delete the state file "
                   "to copy again", path, when ? when : "?");
        mirror_state_free(st);
        return NULL;
    }
    if (mirror_state_resumed(st)) {
        int64_t at = 0;
        int ret = resume_check(src, dst, mirror_state_good(st),
                               stats.granularity, &at, &err);

        if (ret != 0) {
            if (ret < 0) {
                tool_error("state file '%s': %s", path, err->message);
            } else {
                tool_error("state file '%s': the target differs from the "
                           "source in a granule it calls known good "
                           "(offset %" G_GINT64_FORMAT "); the target "
                           "changed since: delete the state file to copy "
                           "again", path, at);
            }
            mirror_state_free(st);
            return NULL;
        }
    }
    if (mirror_state_resumed(st) && !quiet) {
        fprintf(stderr, "mirror-tool: resuming from '%s': %" G_GINT64_FORMAT
                " of %" G_GINT64_FORMAT " bytes known good\n", path,
                mirror_state_good_bytes(st), stats.len);
        fflush(stderr);
    }
    mirror_job_set_state(job, st);
    return st;
}

void job_runner_close_state(MirrorState *st)
{
    while (mirror_state_busy(st)) {
        g_main_context_iteration(NULL, TRUE);
    }
    mirror_state_free(st);
}
