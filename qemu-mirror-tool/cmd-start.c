/*
 * mirror-tool start: run a mirror job from SRC onto DST (an existing image
 * of the same size), like QEMU's blockdev-mirror.
 *
 * Without --qmp the job runs to READY, completes, and a summary is
 * printed.  With --qmp PATH it serves QMP on that UNIX socket and stays in
 * the sync stage after READY until block-job-complete or block-job-cancel.
 * With --export the source is served over NBD while the job runs, then
 * the target (after a completion) or the source; every exit flushes what
 * the export serves.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "qemu-mirror-tool/job-runner.h"
#include "qemu-mirror-tool/qmp-job.h"
#include "qemu-mirror-tool/verify.h"
#include "block/export/nbd-server.h"
#include "block/mirror/mirror.h"
#include "block/mirror/mirror-top.h"
#include "util/cutils.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct StartOptions {
    char *src_format;
    char *dst_format;
    char *src_opts;
    char *dst_opts;
    char *sync;
    char *granularity;
    char *buf_size;
    char *chunk_size;
    char *max_in_flight;
    char *speed;
    char *on_source_error;
    char *on_target_error;
    char *copy_mode;
    char *qmp;
    char *job_id;
    char *connections;
    char *export_addr;
    char *export_name;
    char *converge_after;
    char *converge_passes;
    char *stall_warning;
    char *state_file;
    char *guest_priority;
    char *min_copy_rate;
    gboolean auto_converge;
    gboolean qmp_wait;
    gboolean target_is_zero;
    gboolean progress;
    gboolean json;
    gboolean verify;
} StartOptions;

static void start_options_clear(StartOptions *o)
{
    char **strs[] = {
        &o->src_format, &o->dst_format, &o->src_opts, &o->dst_opts,
        &o->sync, &o->granularity, &o->buf_size, &o->chunk_size,
        &o->max_in_flight, &o->speed,
        &o->on_source_error, &o->on_target_error, &o->copy_mode, &o->qmp,
        &o->job_id, &o->connections, &o->export_addr, &o->export_name,
        &o->converge_after, &o->converge_passes, &o->stall_warning,
        &o->state_file, &o->guest_priority, &o->min_copy_rate,
    };

    for (size_t i = 0; i < G_N_ELEMENTS(strs); i++) {
        g_clear_pointer(strs[i], g_free);
    }
}

/*
 * stop and enospc pause the job on an error until block-job-resume: only
 * a QMP client can send that.  Without --qmp the job would wait forever.
 */
static bool start_check_pausing(const StartOptions *o, const char *opt,
                                const char *value, BlockdevOnError action)
{
    if (o->qmp || (action != BLOCKDEV_ON_ERROR_STOP &&
                   action != BLOCKDEV_ON_ERROR_ENOSPC)) {
        return true;
    }
    tool_error("%s '%s' needs --qmp PATH: it pauses the job, and only "
               "QMP block-job-resume can resume it", opt, value);
    return false;
}

/* Turn the option strings into job parameters; false = bad input. */
static bool start_parse(StartOptions *o, MirrorParams *p,
                        int64_t *stall_warning, GHashTable *nbd_opts)
{
    g_autoptr(GError) err = NULL;
    static const char *const on_off[] = { "on", "off", NULL };
    int sync, on_source, on_target, copy_mode, guest;
    int64_t in_flight, passes;

    mirror_params_init(p);
    in_flight = p->max_in_flight;
    passes = p->auto_converge_passes;
    p->target_is_zero = o->target_is_zero;
    p->auto_complete = !o->qmp;
    if (!tool_check_format("-f", o->src_format) ||
        !tool_check_format("-O", o->dst_format)) {
        return false;
    }
    sync = p->sync;
    on_source = p->on_source_error;
    on_target = p->on_target_error;
    if (!tool_parse_choice("--sync", o->sync, qmp_sync_mode_names, &sync) ||
        !tool_parse_choice("--on-source-error", o->on_source_error,
                           qmp_on_error_names, &on_source) ||
        !tool_parse_choice("--on-target-error", o->on_target_error,
                           qmp_on_error_names, &on_target)) {
        return false;
    }
    p->sync = sync;
    p->on_source_error = on_source;
    p->on_target_error = on_target;
    if (!start_check_pausing(o, "--on-source-error", o->on_source_error,
                             p->on_source_error) ||
        !start_check_pausing(o, "--on-target-error", o->on_target_error,
                             p->on_target_error)) {
        return false;
    }
    if (o->job_id && !*o->job_id) {
        tool_error("--job-id '': must not be empty");
        return false;
    }
    copy_mode = p->copy_mode;
    if (!tool_parse_choice("--copy-mode", o->copy_mode, qmp_copy_mode_names,
                           &copy_mode)) {
        return false;
    }
    p->copy_mode = copy_mode;
    /* Any --speed is valid: job_check_speed(), the rule QMP uses. */
    if ((o->granularity &&
         !parse_size_range("--granularity", o->granularity,
                           MIRROR_MIN_GRANULARITY, MIRROR_MAX_GRANULARITY,
                           true, &p->granularity, &err)) ||
        !tool_parse_engine_options(o->chunk_size, o->buf_size,
                                   o->connections, p, nbd_opts, &err) ||
        (o->max_in_flight &&
         !parse_count("--max-in-flight", o->max_in_flight, 1,
                      MIRROR_MAX_IN_FLIGHT_LIMIT, &in_flight, &err)) ||
        (o->speed && (!parse_size("--speed", o->speed, &p->speed, &err) ||
                      !job_check_speed(p->speed, &err)))) {
        goto out_err;
    }
    p->max_in_flight = in_flight;
    if (!o->connections && o->export_addr) {
        /*
         * Live: guests share the main loop and the CPUs with the copy.
         * Four connections to the target starve them (bench/live.sh: fio
         * got a third of its rate), one keeps them at full speed and still
         * reaches READY sooner than qemu-storage-daemon does.
         */
        g_hash_table_insert(nbd_opts, g_strdup("connections"),
                            g_strdup("1"));
    }
    guest = p->guest_priority ? 0 : 1;
    if (!tool_parse_choice("--guest-priority", o->guest_priority, on_off,
                           &guest)) {
        return false;
    }
    p->guest_priority = guest == 0;
    if (o->min_copy_rate &&
        !parse_size_range("--min-copy-rate", o->min_copy_rate, 1, INT64_MAX,
                          false, &p->min_copy_rate, &err)) {
        goto out_err;
    }
    p->auto_converge = o->auto_converge;
    /* The ranges are mirror_check_converge_*()'s, as in QMP. */
    if ((o->converge_after &&
         !parse_count("--auto-converge-after", o->converge_after, 1,
                      MIRROR_CONVERGE_MAX_MS, &p->auto_converge_ms, &err)) ||
        (o->converge_passes &&
         !parse_count("--auto-converge-passes", o->converge_passes, 0,
                      MIRROR_CONVERGE_MAX_PASSES, &passes, &err))) {
        goto out_err;
    }
    p->auto_converge_passes = passes;
    if ((o->converge_after || o->converge_passes) && !o->auto_converge) {
        tool_error("--auto-converge-after and --auto-converge-passes need "
                   "--auto-converge");
        return false;
    }
    if (o->export_name && !o->export_addr) {
        tool_error("--export-name needs --export ADDR");
        return false;
    }
    if (o->qmp_wait && !o->qmp) {
        tool_error("--qmp-wait needs --qmp PATH");
        return false;
    }
    *stall_warning = JOB_RUNNER_STALL_WARNING_S;
    if (o->stall_warning &&
        !parse_count("--stall-warning", o->stall_warning, 0, 86400,
                     stall_warning, &err)) {
        goto out_err;
    }
    return true;

out_err:
    tool_error("%s", err->message);
    return false;
}

/* @path with its directory resolved (symlinks, "..", "."), or NULL when
 * the directory does not exist. */
static char *start_resolve_dir(const char *path)
{
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *base = g_path_get_basename(path);
    g_autofree char *real = realpath(dir, NULL);

    return real ? g_build_filename(real, base, NULL) : NULL;
}

/* Do @a and @b name the same file, existing or not? */
static bool start_same_path(const char *a, const char *b)
{
    g_autofree char *ra = NULL;
    g_autofree char *rb = NULL;

    if (bdrv_same_storage(a, b)) {
        return true;
    }
    ra = start_resolve_dir(a);
    rb = start_resolve_dir(b);
    return ra && rb && !strcmp(ra, rb);
}

/*
 * --qmp PATH must not be an image of the job or the --export socket:
 * listening there would unlink the image, or take the guests' disk away.
 * Checked before anything is opened (socket_unix_listen() refuses files
 * and live sockets as well, but only once the images are open).
 */
static bool start_check_paths(const StartOptions *o, const char *src,
                              const char *dst)
{
    /* --state-file: written over (rename), so never an image of ours. */
    if (o->state_file &&
        (start_same_path(o->state_file, src) ||
         start_same_path(o->state_file, dst) ||
         (o->qmp && start_same_path(o->state_file, o->qmp)))) {
        tool_error("--state-file '%s': is the job's %s", o->state_file,
                   start_same_path(o->state_file, src) ? "source image" :
                   start_same_path(o->state_file, dst) ? "target image" :
                   "--qmp socket");
        return false;
    }
    if (!o->qmp) {
        return true;
    }
    if (start_same_path(o->qmp, src) || start_same_path(o->qmp, dst)) {
        tool_error("--qmp '%s': is the job's %s image", o->qmp,
                   start_same_path(o->qmp, src) ? "source" : "target");
        return false;
    }
    if (o->export_addr && g_str_has_prefix(o->export_addr, "unix:") &&
        start_same_path(o->qmp, o->export_addr + strlen("unix:"))) {
        tool_error("--qmp '%s': is the --export '%s' socket as well",
                   o->qmp, o->export_addr);
        return false;
    }
    return true;
}

typedef struct StartFlush {
    bool done;
    int ret;
} StartFlush;

static void start_flush_cb(void *opaque, int ret)
{
    StartFlush *f = opaque;

    f->ret = ret;
    f->done = true;
}

/*
 * Let connected clients finish what they sent (up to 5 s), then flush the
 * image the export serves (the target after a completion, else the
 * source): guests need not have flushed their last writes, and we are the
 * last to hold the image.  Returns the flush's result (0 without an
 * export), with the image's role in *@role.  A second signal while we
 * wait exits at once (job-runner.c).
 */
static int start_export_stop(NbdServer *export, BlockDriverState *top,
                             BlockDriverState *dst, const char **role)
{
    StartFlush f = { 0 };

    if (export) {
        /* The flush of @top reaches the image it serves. */
        nbdsrv_close(export, 5000, start_flush_cb, &f);
        tool_run_until(&f.done);
        *role = mirror_top_child(top) == dst ? "target" : "source";
    }
    bdrv_unref(top);
    return f.ret;
}

int cmd_start(int argc, char **argv)
{
    StartOptions o = { 0 };
    g_autoptr(BlockDriverState) src = NULL;
    g_autoptr(BlockDriverState) dst = NULL;
    g_auto(ToolNodeOpts) nodes = tool_node_opts_init();
    g_autoptr(GError) err = NULL;
    QmpServer *qmp = NULL;
    BlockDriverState *top = NULL;
    MirrorState *state = NULL;
    bool ran = false;
    NbdServer *export = NULL;
    QmpJobHost host = { 0 };
    JobRunner runner;
    MirrorParams p;
    Job *job;
    int64_t stall_warning = 0;
    const char *served = NULL;
    int flush_ret;
    int ret = TOOL_EXIT_USAGE;
    g_auto(ToolExportOpts) export_opts = { 0 };
    g_autofree char *export_opt = NULL;
    g_auto(QmpServerOpts) qmp_opts = { 0 };
    g_auto(ToolVerify) verify = { 0 };
    GOptionEntry entries[] = {
        { "format", 'f', 0, G_OPTION_ARG_STRING, &o.src_format,
          "source format (default: probe)", "FMT" },
        { "target-format", 'O', 0, G_OPTION_ARG_STRING, &o.dst_format,
          "target format (default: raw; never probed)", "FMT" },
        TOOL_NODE_OPTS_ENTRIES(&o.src_opts, &o.dst_opts),
        { "sync", 0, 0, G_OPTION_ARG_STRING, &o.sync,
          "full (default), top or none", "MODE" },
        { "granularity", 0, 0, G_OPTION_ARG_STRING, &o.granularity,
          "dirty bitmap granularity, power of 2 in 512..64M (default: "
          "the target's cluster size in 4K..64K, else 64K)", "SIZE" },
        { "buf-size", 0, 0, G_OPTION_ARG_STRING, &o.buf_size,
          "bytes of data in flight (default 16M; NBD ends: see docs)", "SIZE" },
        { "chunk-size", 0, 0, G_OPTION_ARG_STRING, &o.chunk_size,
          "largest single I/O, power of 2 in 4K..64M (default 1M; 256K from an NBD source)", "SIZE" },
        { "max-in-flight", 0, 0, G_OPTION_ARG_STRING, &o.max_in_flight,
          "operations in flight, 1..1024 (default: as many as fill the window; see docs)", "N" },
        { "speed", 0, 0, G_OPTION_ARG_STRING, &o.speed,
          "copy at most RATE bytes per second (default: unlimited)",
          "RATE" },
        { "on-source-error", 0, 0, G_OPTION_ARG_STRING, &o.on_source_error,
          "report (default), ignore, stop or enospc (these two need "
          "--qmp)", "ACTION" },
        { "on-target-error", 0, 0, G_OPTION_ARG_STRING, &o.on_target_error,
          "report (default), ignore, stop or enospc (these two need "
          "--qmp)", "ACTION" },
        { "copy-mode", 0, 0, G_OPTION_ARG_STRING, &o.copy_mode,
          "background (default) or write-blocking", "MODE" },
        { "auto-converge", 0, 0, G_OPTION_ARG_NONE, &o.auto_converge,
          "switch to write-blocking when writers outpace the copy",
          NULL },
        { "auto-converge-after", 0, 0, G_OPTION_ARG_STRING,
          &o.converge_after,
          "... after they did so for MS milliseconds (default 5000)", "MS" },
        { "auto-converge-passes", 0, 0, G_OPTION_ARG_STRING,
          &o.converge_passes,
          "... or after N passes over the disk still left work", "N" },
        { "guest-priority", 0, 0, G_OPTION_ARG_STRING, &o.guest_priority,
          "on (default): the export's guests go first, and the job paces "
          "itself while their latency is above what it is without the job; "
          "off: they share the queues alike", "on|off" },
        { "min-copy-rate", 0, 0, G_OPTION_ARG_STRING, &o.min_copy_rate,
          "however busy the guests, the job never paces itself below RATE "
          "bytes per second (default 128M)", "RATE" },
        { "target-is-zero", 0, 0, G_OPTION_ARG_NONE, &o.target_is_zero,
          "the target reads as zero: skip zeroing it", NULL },
        { "connections", 0, 0, G_OPTION_ARG_STRING, &o.connections,
          "NBD connections per NBD end, 1..16 (default: CPUs up to 4; 1 with --export)", "N" },
        TOOL_NBD_TIMEOUT_ENTRIES,
        TOOL_THREADS_ENTRY,
        { "job-id", 0, 0, G_OPTION_ARG_STRING, &o.job_id,
          "the job's id and device name in QMP (default: mirror)", "ID" },
        { "qmp", 0, 0, G_OPTION_ARG_STRING, &o.qmp,
          "serve QMP on this UNIX socket; stay in sync after READY until "
          "block-job-complete or block-job-cancel", "PATH" },
        { "export", 0, 0, G_OPTION_ARG_STRING, &o.export_addr,
          "serve the source over NBD on unix:PATH or tcp:HOST:PORT while "
          "the job runs; after completion the export serves the target, "
          "after a cancel the source, until SIGINT/SIGTERM/quit", "ADDR" },
        { "export-name", 0, 0, G_OPTION_ARG_STRING, &o.export_name,
          "the NBD export name (default \"\")", "NAME" },
        TOOL_EXPORT_OPTS_ENTRIES(&export_opts, "export-", 0),
        QMP_SERVER_OPTS_ENTRIES(&qmp_opts),
        { "qmp-wait", 0, 0, G_OPTION_ARG_NONE, &o.qmp_wait,
          "start the job only once a QMP client has connected", NULL },
        { "stall-warning", 0, 0, G_OPTION_ARG_STRING, &o.stall_warning,
          "warn when no I/O completed for SECS seconds while some is in "
          "flight, 0..86400, 0 = never (default 30)", "SECS" },
        { "state-file", 0, 0, G_OPTION_ARG_STRING, &o.state_file,
          "record what is known good in PATH; rerun the same command to "
          "resume (see docs: Resuming)", "PATH" },
        { "progress", 'p', 0, G_OPTION_ARG_NONE, &o.progress,
          "show a progress bar on stderr", NULL },
        { "json", 0, 0, G_OPTION_ARG_NONE, &o.json,
          "print every event as a JSON line on stdout", NULL },
        { "verify", 0, 0, G_OPTION_ARG_NONE, &o.verify,
          "after completion compare the target with the source: exit 1 "
          "unless it equals the source at the switch-over (see docs)",
          NULL },
        { NULL },
    };
    static const char summary[] =
        "Mirror SRC onto DST, an existing image of the same size, and keep\n"
        "it in sync: without --qmp until READY, then complete; with --qmp\n"
        "until block-job-complete or block-job-cancel arrives.";

    if (!tool_parse_options("SRC DST", summary, entries, &argc, &argv) ||
        !tool_expect_args("start", argc, 2, "a source and a target") ||
        !start_parse(&o, &p, &stall_warning, nodes.nbd) ||
        !tool_node_opts_parse(&nodes, o.src_opts, o.dst_opts) ||
        !start_check_paths(&o, argv[1], argv[2])) {
        goto out;
    }
    /* The listeners' limits, before anything is opened. */
    export_opt = tool_export_opts_given(&export_opts, "--export-");
    {
        const char *qmp_opt = qmp_server_opts_given(&qmp_opts);

        if (export_opt && !o.export_addr) {
            tool_error("%s needs --export ADDR", export_opt);
            goto out;
        }
        if (qmp_opt && !o.qmp) {
            tool_error("%s needs --qmp PATH", qmp_opt);
            goto out;
        }
    }
    if (!tool_export_opts_check(&export_opts, "--export-", o.export_addr)) {
        goto out;
    }
    if (!qmp_server_opts_parse(&qmp_opts, &err)) {
        tool_error("%s", err->message);
        goto out;
    }
    if (bdrv_same_storage(argv[1], argv[2])) {
        tool_error("source and target are the same image '%s'", argv[2]);
        goto out;
    }
    /* Guests write to the source through the export. */
    tool_node_opts_resolve(&nodes, argv[1], argv[2]);
    /* No other writer of the source while the job runs (its writes
     * would miss the dirty bitmap); the target is ours alone, as QEMU's
     * mirror takes it. */
    src = tool_open_image("source", argv[1], o.src_format,
                          (o.export_addr ? BDRV_O_RDWR : 0) | BDRV_O_NO_SHARE,
                          nodes.src_open);
    if (!src || !tool_check_target_chain(src, argv[2])) {
        goto out;
    }
    dst = tool_open_image("target", argv[2], o.dst_format,
                          BDRV_O_RDWR | BDRV_O_NO_PROBE |
                          BDRV_O_UNSHARE(BLK_PERM_ALL &
                                         ~BLK_PERM_WRITE_UNCHANGED),
                          nodes.dst_open);
    if (!dst) {
        goto out;
    }
    job = mirror_job_new(o.job_id ? o.job_id : "mirror", src, dst, &p,
                         &err);
    if (!job) {
        tool_error("%s", err->message);
        goto out;
    }
    if (o.state_file) {
        state = job_runner_open_state(o.state_file, job, src, dst, p.sync,
                                      o.json);
        if (!state) {
            job_unref(job);
            goto out;
        }
        /* Guests write the target through the export after the
         * switch-over: until they are done (a clean exit), a rerun
         * must not copy the stale source over it. */
        mirror_state_set_switch_record(state, o.export_addr != NULL);
    }

    if (o.export_addr) {
        top = mirror_top_new(src, &err);
        export = top ? nbdsrv_new(top, o.export_addr, o.export_name, false,
                                  &err) : NULL;
        if (!export) {
            tool_error("--export '%s': %s", o.export_addr, err->message);
            job_unref(job);
            bdrv_unref(top);
            goto out_state;
        }
        /* Checked above, before anything was opened. */
        tool_export_opts_apply(&export_opts, "--export-", export);
        /* Guest-first: the export's requests go ahead of the job's. */
        nbdsrv_set_guest_priority(export, p.guest_priority);
        mirror_job_set_top(job, top);
        /* Like serve's "serving on ADDR", with PORT 0 resolved; on stderr,
         * as stdout may carry --json events. */
        fprintf(stderr, "mirror-tool: exporting the source on %s\n",
                nbdsrv_get_address(export));
        fflush(stderr);
    }

    job_runner_init(&runner, argv[2], o.progress);
    runner.json = o.json;
    runner.stall_warning_s = stall_warning;
    if (o.qmp) {
        qmp = qmp_server_new(o.qmp, (int)qmp_opts.max_clients, &err);
        if (!qmp) {
            tool_error("%s", err->message);
            job_unref(job);
            job_runner_destroy(&runner);
            start_export_stop(export, top, dst, &served);
            goto out_state;
        }
        host = (QmpJobHost) {
            .job = job, .quit = job_runner_quit, .opaque = &runner,
        };
        qmp_server_opts_apply(&qmp_opts, qmp);
        qmp_job_register(qmp, &host);
        runner.qmp = qmp;
        runner.qmp_wait = o.qmp_wait;
    }
    ran = true;
    if (o.verify) {
        tool_verify_init(&verify, src, dst, top, job);
        verify.interrupt = &runner.stop;
        verify.chunk_size = p.chunk_size;
    }
    ret = job_runner_run(&runner, job);
    if (ret == TOOL_EXIT_OK && o.verify) {
        ret = tool_verify_run(&verify);
    }
    if (ret == TOOL_EXIT_OK) {
        job_runner_print_summary(&runner, stdout);
        if (o.verify) {
            tool_verify_print(&verify, stdout, o.json);
        }
        fflush(stdout);
    }
    if (export && !runner.signal && !runner.quit) {
        /* The export goes on, backed by the target after a completion. */
        fprintf(stderr, "mirror-tool: the job is over; serving the %s on "
                "%s until SIGINT, SIGTERM or QMP quit\n",
                mirror_top_child(top) == dst ? "target" : "source",
                nbdsrv_get_address(export));
        job_runner_serve(&runner);
        if (qmp) {
            qmp_server_flush(qmp, 1000);   /* the reply to quit */
        }
    }
    flush_ret = start_export_stop(export, top, dst, &served);
    if (flush_ret < 0) {
        tool_error("flush of the %s '%s' (the image the export serves) "
                   "failed: %s; the guests' last writes may be lost",
                   served, !strcmp(served, "target") ? argv[2] : argv[1],
                   g_strerror(-flush_ret));
        ret = TOOL_EXIT_FAILURE;
    }
    if (flush_ret >= 0 && mirror_state_switched_us(state) > 0) {
        g_autoptr(GError) rm_err = NULL;

        /* A clean exit: the guests are done with the target.  Else the
         * switched-over record stays, and a rerun refuses. */
        if (mirror_state_remove(state, &rm_err) < 0) {
            tool_error("%s", rm_err->message);
            ret = TOOL_EXIT_FAILURE;
        }
    }
    qmp_server_free(qmp);
    job_runner_destroy(&runner);
out_state:
    if (state && !ran && !mirror_state_resumed(state)) {
        /* Bad input after all: no state file made by this run stays. */
        mirror_state_remove(state, NULL);
    }
    job_runner_close_state(state);
out:
    start_options_clear(&o);
    return ret;
}
