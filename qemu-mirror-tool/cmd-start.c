/*
 * mirror-tool start: run a mirror job from SRC onto DST (an existing image
 * of the same size), like QEMU's blockdev-mirror.
 *
 * Without --qmp the job runs to READY, completes, and a summary is
 * printed.  With --qmp PATH it serves QMP on that UNIX socket and stays in
 * the sync stage after READY until block-job-complete or block-job-cancel.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "qemu-mirror-tool/job-runner.h"
#include "qemu-mirror-tool/qmp-job.h"
#include "block/export-nbd.h"
#include "block/mirror.h"
#include "block/mirror-top.h"
#include "util/cutils.h"

#include <stdio.h>

typedef struct StartOptions {
    char *src_format;
    char *dst_format;
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
    gboolean auto_converge;
    gboolean qmp_wait;
    gboolean target_is_zero;
    gboolean progress;
    gboolean json;
} StartOptions;

static void start_options_clear(StartOptions *o)
{
    char **strs[] = {
        &o->src_format, &o->dst_format, &o->sync, &o->granularity,
        &o->buf_size, &o->chunk_size, &o->max_in_flight, &o->speed,
        &o->on_source_error, &o->on_target_error, &o->copy_mode, &o->qmp,
        &o->job_id, &o->connections, &o->export_addr, &o->export_name,
        &o->converge_after, &o->converge_passes,
    };

    for (size_t i = 0; i < G_N_ELEMENTS(strs); i++) {
        g_clear_pointer(strs[i], g_free);
    }
}

static const char *const sync_names[] = { "full", "top", "none", NULL };
static const char *const on_error_names[] = {
    "report", "ignore", "stop", "enospc", NULL,
};
static const char *const copy_mode_names[] = {
    "background", "write-blocking", NULL,
};

/* Turn the option strings into job parameters; false = bad input. */
static bool start_parse(StartOptions *o, MirrorParams *p,
                        GHashTable *nbd_opts)
{
    g_autoptr(GError) err = NULL;
    int choice;
    int64_t v;

    mirror_params_init(p);
    p->target_is_zero = o->target_is_zero;
    p->auto_complete = !o->qmp;
    if (o->src_format && !bdrv_find_format(o->src_format)) {
        tool_error("-f '%s': unknown image format", o->src_format);
        return false;
    }
    if (o->dst_format && !bdrv_find_format(o->dst_format)) {
        tool_error("-O '%s': unknown image format", o->dst_format);
        return false;
    }
    if (o->sync) {
        if (!tool_parse_choice("--sync", o->sync, sync_names, &choice)) {
            return false;
        }
        p->sync = choice;
    }
    if (o->on_source_error) {
        if (!tool_parse_choice("--on-source-error", o->on_source_error,
                               on_error_names, &choice)) {
            return false;
        }
        p->on_source_error = choice;
    }
    if (o->on_target_error) {
        if (!tool_parse_choice("--on-target-error", o->on_target_error,
                               on_error_names, &choice)) {
            return false;
        }
        p->on_target_error = choice;
    }
    if (o->copy_mode) {
        if (!tool_parse_choice("--copy-mode", o->copy_mode,
                               copy_mode_names, &choice)) {
            return false;
        }
        p->copy_mode = choice;
    }
    if (o->granularity) {
        if (!parse_size_range("--granularity", o->granularity,
                              MIRROR_MIN_GRANULARITY, MIRROR_MAX_GRANULARITY,
                              true, &v, &err)) {
            goto out_err;
        }
        p->granularity = v;
    }
    if (!tool_parse_engine_options(o->chunk_size, o->buf_size,
                                   o->connections, p, nbd_opts, &err)) {
        goto out_err;
    }
    if (o->max_in_flight) {
        if (!parse_count("--max-in-flight", o->max_in_flight, 1,
                         MIRROR_MAX_IN_FLIGHT_LIMIT, &v, &err)) {
            goto out_err;
        }
        p->max_in_flight = v;
    }
    if (o->speed) {
        if (!parse_size("--speed", o->speed, &v, &err)) {
            goto out_err;
        }
        p->speed = v;
    }
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
    p->auto_converge = o->auto_converge;
    if (o->converge_after) {
        if (!parse_count("--auto-converge-after", o->converge_after, 1,
                         86400000, &v, &err)) {
            goto out_err;
        }
        p->auto_converge_ms = v;
    }
    if (o->converge_passes) {
        if (!parse_count("--auto-converge-passes", o->converge_passes, 1,
                         1000000, &v, &err)) {
            goto out_err;
        }
        p->auto_converge_passes = v;
    }
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
    return true;

out_err:
    tool_error("%s", err->message);
    return false;
}

static gboolean start_deadline_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

/* Let connected clients finish what they sent (up to 5 s), then go. */
static void start_export_stop(NbdServer *export, BlockDriverState *top)
{
    bool late = false;

    if (export) {
        guint deadline = g_timeout_add_seconds(5, start_deadline_cb, &late);

        nbdsrv_shutdown(export);
        while (!nbdsrv_is_drained(export) && !late) {
            g_main_context_iteration(NULL, TRUE);
        }
        if (!late) {
            g_source_remove(deadline);
        }
        nbdsrv_free(export);
        /* Requests the server abandoned still hold @top; they finish on
         * the loop. */
        while (mirror_top_in_flight(top)) {
            g_main_context_iteration(NULL, TRUE);
        }
    }
    bdrv_unref(top);
}

int cmd_start(int argc, char **argv)
{
    StartOptions o = { 0 };
    g_autoptr(GOptionContext) ctx = NULL;
    g_autoptr(BlockDriverState) src = NULL;
    g_autoptr(BlockDriverState) dst = NULL;
    g_autoptr(GHashTable) nbd_opts = g_hash_table_new_full(g_str_hash,
                                                           g_str_equal,
                                                           g_free, g_free);
    g_autoptr(GError) err = NULL;
    QmpServer *qmp = NULL;
    BlockDriverState *top = NULL;
    NbdServer *export = NULL;
    QmpJobHost host = { 0 };
    JobRunner runner;
    MirrorParams p;
    Job *job;
    int ret = TOOL_EXIT_USAGE;
    GOptionEntry entries[] = {
        { "format", 'f', 0, G_OPTION_ARG_STRING, &o.src_format,
          "source format (default: probe)", "FMT" },
        { "target-format", 'O', 0, G_OPTION_ARG_STRING, &o.dst_format,
          "target format (default: raw; never probed)", "FMT" },
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
          "report (default), ignore, stop or enospc", "ACTION" },
        { "on-target-error", 0, 0, G_OPTION_ARG_STRING, &o.on_target_error,
          "report (default), ignore, stop or enospc", "ACTION" },
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
        { "target-is-zero", 0, 0, G_OPTION_ARG_NONE, &o.target_is_zero,
          "the target reads as zero: skip zeroing it", NULL },
        { "connections", 0, 0, G_OPTION_ARG_STRING, &o.connections,
          "NBD connections per NBD end, 1..16 (default: CPUs up to 4; 1 with --export)", "N" },
        TOOL_NBD_TIMEOUT_ENTRIES,
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
        { "qmp-wait", 0, 0, G_OPTION_ARG_NONE, &o.qmp_wait,
          "start the job only once a QMP client has connected", NULL },
        { "progress", 'p', 0, G_OPTION_ARG_NONE, &o.progress,
          "show a progress bar on stderr", NULL },
        { "json", 0, 0, G_OPTION_ARG_NONE, &o.json,
          "print every event as a JSON line on stdout", NULL },
        { NULL },
    };

    ctx = g_option_context_new("SRC DST");
    g_option_context_set_summary(ctx,
        "Mirror SRC onto DST, an existing image of the same size, and keep\n"
        "it in sync: without --qmp until READY, then complete; with --qmp\n"
        "until block-job-complete or block-job-cancel arrives.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!tool_parse_options(ctx, &argc, &argv) ||
        !tool_expect_args("start", argc, 2, "a source and a target") ||
        !start_parse(&o, &p, nbd_opts)) {
        goto out;
    }
    if (bdrv_same_storage(argv[1], argv[2])) {
        tool_error("source and target are the same image '%s'", argv[2]);
        goto out;
    }
    /* Guests write to the source through the export. */
    src = tool_open_image("source", argv[1], o.src_format,
                          o.export_addr ? BDRV_O_RDWR : 0,
                          tool_nbd_options(argv[1], nbd_opts));
    if (!src) {
        goto out;
    }
    dst = tool_open_image("target", argv[2], o.dst_format,
                          BDRV_O_RDWR | BDRV_O_NO_PROBE,
                          tool_nbd_options(argv[2], nbd_opts));
    if (!dst) {
        goto out;
    }
    job = mirror_job_new(o.job_id ? o.job_id : "mirror", src, dst, &p,
                         &err);
    if (!job) {
        tool_error("%s", err->message);
        goto out;
    }

    if (o.export_addr) {
        top = mirror_top_new(src, &err);
        export = top ? nbdsrv_new(top, o.export_addr, o.export_name, false,
                                  &err) : NULL;
        if (!export) {
            tool_error("--export '%s': %s", o.export_addr, err->message);
            job_unref(job);
            bdrv_unref(top);
            goto out;
        }
        mirror_job_set_top(job, top);
    }

    job_runner_init(&runner, argv[2], o.progress);
    runner.json = o.json;
    if (o.qmp) {
        qmp = qmp_server_new(o.qmp, &err);
        if (!qmp) {
            tool_error("%s", err->message);
            job_unref(job);
            job_runner_destroy(&runner);
            start_export_stop(export, top);
            goto out;
        }
        host = (QmpJobHost) {
            .job = job, .quit = job_runner_quit, .opaque = &runner,
        };
        qmp_job_register(qmp, &host);
        runner.qmp = qmp;
        runner.qmp_wait = o.qmp_wait;
    }
    ret = job_runner_run(&runner, job);
    if (ret == TOOL_EXIT_OK) {
        job_runner_print_summary(&runner, stdout);
        fflush(stdout);
    }
    if (export && !runner.signal && !runner.quit) {
        /* The export goes on, backed by the target after a completion. */
        fprintf(stderr, "mirror-tool: the job is over; serving the %s on "
                "%s until SIGINT, SIGTERM or QMP quit\n",
                mirror_top_child(top) == dst ? "target" : "source",
                o.export_addr);
        job_runner_serve(&runner);
        if (qmp) {
            qmp_server_flush(qmp, 1000);   /* the reply to quit */
        }
    }
    start_export_stop(export, top);
    qmp_server_free(qmp);
    job_runner_destroy(&runner);
out:
    start_options_clear(&o);
    return ret;
}
