/*
 * mirror-tool convert: copy an image, like qemu-img convert, on the mirror
 * job (sync=full, auto-complete).  Without -W writes are submitted in
 * offset order; with -W they go out as soon as their data is read.
 *
 * Every check happens before the target is created or opened for writing,
 * so bad input never touches it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "qemu-mirror-tool/job-runner.h"
#include "block/mirror/mirror.h"
#include "util/cutils.h"

#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Defaults chosen by measurement: see docs/mirror-tool.md and bench/.
 * -m and --buf-size default to the mirror job's (scaled by NBD
 * connections, block/mirror/mirror-setup.c). */
#define CONVERT_DEFAULT_SPARSE     (4 * KiB)
#define CONVERT_MAX_SPARSE         (16 * MiB)

typedef struct ConvertOptions {
    char *src_format;
    char *dst_format;
    char *create_opts;
    char *src_opts;
    char *dst_opts;
    char *src_cache;
    char *dst_cache;
    char *parallel;
    char *sparse;
    char *rate;
    char *chunk_size;
    char *buf_size;
    char *connections;
    gboolean no_create;
    gboolean oob_writes;
    gboolean progress;
    gboolean quiet;
    gboolean target_is_zero;
    gboolean compress;
    gboolean force_share;
} ConvertOptions;

static void convert_options_clear(ConvertOptions *o)
{
    g_free(o->src_format);
    g_free(o->dst_format);
    g_free(o->create_opts);
    g_free(o->src_opts);
    g_free(o->dst_opts);
    g_free(o->src_cache);
    g_free(o->dst_cache);
    g_free(o->parallel);
    g_free(o->sparse);
    g_free(o->rate);
    g_free(o->chunk_size);
    g_free(o->buf_size);
    g_free(o->connections);
}

/* Cache mode names: "none" = O_DIRECT, "writeback" = the page cache. */
static bool convert_cache_flags(const char *opt, const char *mode,
                                int *flags)
{
    if (!mode || !strcmp(mode, "writeback")) {
        return true;
    }
    if (!strcmp(mode, "none")) {
        *flags |= BDRV_O_NOCACHE;
        return true;
    }
    tool_error("%s '%s': expected none or writeback", opt, mode);
    return false;
}

/* Turn the option strings into job parameters; false = bad input. */
static bool convert_parse(ConvertOptions *o, MirrorParams *p,
                          int *src_flags, int *dst_flags,
                          GHashTable **create_opts, GHashTable *nbd_opts)
{
    g_autoptr(GError) err = NULL;
    int64_t v;

    mirror_params_init(p);
    p->sync = MIRROR_SYNC_MODE_FULL;
    p->auto_complete = true;
    p->allow_larger_target = true;
    p->in_order = !o->oob_writes;
    p->sparse_size = CONVERT_DEFAULT_SPARSE;
    p->target_is_zero = o->target_is_zero;
    p->compress = o->compress;

    if (!tool_check_format("-f", o->src_format) ||
        !tool_check_format("-O", o->dst_format)) {
        return false;
    }
    if (o->parallel) {
        if (!parse_count("-m", o->parallel, 1, MIRROR_MAX_IN_FLIGHT_LIMIT,
                         &v, &err)) {
            goto out_err;
        }
        p->max_in_flight = v;
    }
    if (o->sparse) {
        if (!parse_size("-S", o->sparse, &v, &err)) {
            goto out_err;
        }
        if (v % 512 || v > CONVERT_MAX_SPARSE) {
            tool_error("-S '%s': must be 0 or a multiple of 512 up to 16M",
                       o->sparse);
            return false;
        }
        p->sparse_size = v;
        p->allocate_zeroes = v == 0;
    }
    if (o->rate) {
        if (!parse_size_range("-r", o->rate, 1, INT64_MAX, false, &v,
                              &err)) {
            goto out_err;
        }
        p->speed = v;
    }
    if (!tool_parse_engine_options(o->chunk_size, o->buf_size,
                                   o->connections, p, nbd_opts, &err)) {
        goto out_err;
    }
    if (o->compress && (!o->dst_format || strcmp(o->dst_format, "qcow2"))) {
        tool_error("-c: compressed output needs a qcow2 target (-O qcow2)");
        return false;
    }
    if (o->target_is_zero && !o->no_create) {
        tool_error("--target-is-zero requires -n (an existing target)");
        return false;
    }
    if (o->create_opts && o->no_create) {
        tool_error("-o cannot be used with -n: the target is not created");
        return false;
    }
    if (o->create_opts) {
        *create_opts = tool_parse_kv_options("-o", o->create_opts);
        if (!*create_opts) {
            return false;
        }
    }
    if (!convert_cache_flags("-T", o->src_cache, src_flags) ||
        !convert_cache_flags("-t", o->dst_cache, dst_flags)) {
        return false;
    }
    /* Locks as qemu-img convert's: no other writer or resizer of the
     * source (-U: share it all), nor of the target. */
    *src_flags |= o->force_share ? BDRV_O_FORCE_SHARE : BDRV_O_NO_SHARE;
    *dst_flags |= BDRV_O_NO_SHARE;
    /* The qcow2 driver refuses cache=none when it opens the target: say
     * so before the target is created. */
    if ((*dst_flags & BDRV_O_NOCACHE) && o->dst_format &&
        !strcmp(o->dst_format, "qcow2")) {
        tool_error("-t '%s': cache=none is not supported for qcow2 "
                   "targets", o->dst_cache);
        return false;
    }
    return true;

out_err:
    tool_error("%s", err->message);
    return false;
}

/*
 * Check the job parameters before the target exists.  The mirror job
 * checks them when it is created, against the target; ask it now against
 * a stand-in of the source's size (a null node, which stores nothing), so
 * that a value it refuses never leaves a created or truncated target
 * behind.  False with the message printed.
 */
static bool convert_check_job(BlockDriverState *src, const MirrorParams *p)
{
    g_autofree char *spec = g_strdup_printf("null:size=%" G_GINT64_FORMAT,
                                            bdrv_getlength(src));
    g_autoptr(BlockDriverState) stand_in = NULL;
    g_autoptr(GError) err = NULL;
    Job *job;

    stand_in = bdrv_open(spec, NULL, BDRV_O_RDWR, NULL, &err);
    if (stand_in) {
        job = mirror_job_new("convert", src, stand_in, p, &err);
        if (job) {
            job_unref(job);
            return true;
        }
    }
    tool_error("%s", err->message);
    return false;
}

/*
 * Check the node options @user of a target that is still to be created
 * (as @fmt): the driver only reads them when it opens an image, and by
 * then bdrv_create() has made or truncated the target.  So open a small
 * image of that format made in memory (a memfd, no file anywhere) with
 * them, read-only: the check changes no image (a writable qcow2 syncs at
 * close, which the crash test's kill points count).  Only a bad value
 * (BLOCK_ERROR_INVALID) counts: the memfd is not the target's file
 * system, and what it cannot do (cache=none where tmpfs has no O_DIRECT,
 * before Linux 6.6) says nothing of the target; the open after the
 * create checks that.  False with the message printed, naming
 * @dst; true when they pass or there is nothing to check.
 */
static bool convert_check_target_opts(const char *fmt, const char *dst,
                                      GHashTable *user)
{
    g_autofree char *path = NULL;
    g_autofree char *msg = NULL;
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;
    int fd;

    if (!user || !g_hash_table_size(user)) {
        return true;
    }
    fd = memfd_create("mirror-tool-options", MFD_CLOEXEC);
    if (fd < 0) {
        return true;        /* the open after the create checks them */
    }
    path = g_strdup_printf("/proc/self/fd/%d", fd);
    if (bdrv_create(fmt, path, 64 * KiB, NULL, NULL)) {
        bs = bdrv_open(path, fmt, 0, user, &err);
        if (bs) {
            bdrv_unref(bs);
        } else if (g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_INVALID)) {
            g_auto(GStrv) parts = g_strsplit(err->message, path, -1);

            msg = g_strjoinv(dst, parts);
        }
    }
    close(fd);
    if (msg) {
        tool_error("target: %s", msg);
        return false;
    }
    return true;
}

/* A target this run created: removed again if it is not filled. */
typedef struct ConvertCreated {
    bool created;
    dev_t dev;
    ino_t ino;
} ConvertCreated;

/*
 * Remove the target @dst that this run created and failed to fill, if
 * the name still leads to the file we made (same device and inode).
 */
static void convert_remove_created(const char *dst, ConvertCreated *c)
{
    struct stat st;

    if (!c->created) {
        return;
    }
    if (lstat(dst, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_dev == c->dev && st.st_ino == c->ino) {
        if (unlink(dst) == 0) {
            tool_error("removed the target '%s', which this command created",
                       dst);
        } else {
            tool_error("cannot remove the incomplete target '%s': %s", dst,
                       g_strerror(errno));
        }
    }
    c->created = false;
}

/* Open the target: existing (-n) or newly created (*@c says whether by
 * us); NULL on bad input or a failure, with *exit_code set. */
static BlockDriverState *convert_open_target(ConvertOptions *o,
                                             const char *dst,
                                             BlockDriverState *src,
                                             int dst_flags,
                                             GHashTable *create_opts,
                                             GHashTable *open_opts,
                                             ConvertCreated *c,
                                             int *exit_code)
{
    const char *fmt = o->dst_format ? o->dst_format : "raw";
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;
    struct stat st;
    bool existed;

    *exit_code = TOOL_EXIT_USAGE;
    if (o->no_create) {
        /* Never probe a target: it is raw unless -O or its spec says. */
        bs = tool_open_image("target", dst, o->dst_format,
                             dst_flags | BDRV_O_RDWR | BDRV_O_NO_PROBE,
                             open_opts);
        if (!bs) {
            return NULL;
        }
        if (bdrv_getlength(bs) < bdrv_getlength(src)) {
            tool_error("target '%s' (%" G_GINT64_FORMAT " bytes) is smaller "
                       "than the source (%" G_GINT64_FORMAT " bytes)", dst,
                       bdrv_getlength(bs), bdrv_getlength(src));
            bdrv_unref(bs);
            return NULL;
        }
        return bs;
    }
    /* The create truncates: first, whether the node we will open on it
     * gets its locks (a writer shares write with a create, not with us). */
    if (!bdrv_lock_probe(dst, dst_flags, &err)) {
        tool_error("target: %s", err->message);
        return NULL;
    }
    existed = lstat(dst, &st) == 0;
    if (!bdrv_create(fmt, dst, bdrv_getlength(src), create_opts, &err)) {
        /* A bad -o option or a directory is bad input: nothing written.
         * An I/O error may have truncated an existing target. */
        bool io = g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_IO);

        tool_error("cannot create '%s': %s%s", dst, err->message,
                   existed && io ? "; the target is incomplete" : "");
        *exit_code = g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_INVALID) ||
                     g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_LOCKED)
                     ? TOOL_EXIT_USAGE : TOOL_EXIT_FAILURE;
        return NULL;
    }
    if (!existed && lstat(dst, &st) == 0 && S_ISREG(st.st_mode)) {
        *c = (ConvertCreated) {
            .created = true, .dev = st.st_dev, .ino = st.st_ino,
        };
    }
    bs = bdrv_open(dst, fmt, dst_flags | BDRV_O_RDWR, open_opts, &err);
    if (!bs) {
        /* A new file is removed by the caller; an existing one was
         * overwritten already. */
        tool_error("target: %s%s", err->message,
                   c->created ? "" : "; the target is incomplete");
        *exit_code = c->created && g_error_matches(err, BLOCK_ERROR,
                                                   BLOCK_ERROR_INVALID)
                     ? TOOL_EXIT_USAGE : TOOL_EXIT_FAILURE;
        return NULL;
    }
    /* A new image reads as zeroes, unless it has a backing file. */
    bdrv_set_zero_init(bs, !create_opts ||
                           !g_hash_table_contains(create_opts,
                                                  "backing_file"));
    return bs;
}

int cmd_convert(int argc, char **argv)
{
    ConvertOptions o = { 0 };
    g_autoptr(BlockDriverState) src = NULL;
    g_autoptr(BlockDriverState) dst = NULL;
    g_autoptr(GHashTable) create_opts = NULL;
    g_auto(ToolNodeOpts) nodes = tool_node_opts_init();
    g_autoptr(GError) err = NULL;
    ConvertCreated created = { 0 };
    MirrorParams p;
    JobRunner runner;
    Job *job;
    int src_flags = 0, dst_flags = 0;
    int ret;
    GOptionEntry entries[] = {
        { "format", 'f', 0, G_OPTION_ARG_STRING, &o.src_format,
          "source format (default: probe)", "FMT" },
        { "output-format", 'O', 0, G_OPTION_ARG_STRING, &o.dst_format,
          "target format (default: raw)", "FMT" },
        { "options", 'o', 0, G_OPTION_ARG_STRING, &o.create_opts,
          "target creation options, e.g. preallocation=falloc", "OPTS" },
        TOOL_NODE_OPTS_ENTRIES(&o.src_opts, &o.dst_opts),
        { "no-create", 'n', 0, G_OPTION_ARG_NONE, &o.no_create,
          "write into an existing target (at least as large as the source)",
          NULL },
        { "oob-writes", 'W', 0, G_OPTION_ARG_NONE, &o.oob_writes,
          "allow out-of-order writes (default: in offset order)", NULL },
        { "parallel", 'm', 0, G_OPTION_ARG_STRING, &o.parallel,
          "operations in flight, 1..1024 (default: as many as fill the window; see docs)", "N" },
        { "sparse-size", 'S', 0, G_OPTION_ARG_STRING, &o.sparse,
          "zero runs of at least SIZE become holes (default 4K; 0: fully "
          "allocate)", "SIZE" },
        { "rate-limit", 'r', 0, G_OPTION_ARG_STRING, &o.rate,
          "copy at most RATE bytes per second", "RATE" },
        { "compress", 'c', 0, G_OPTION_ARG_NONE, &o.compress,
          "compress the data (qcow2 targets, like qemu-img convert -c)",
          NULL },
        { "target-is-zero", 0, 0, G_OPTION_ARG_NONE, &o.target_is_zero,
          "the target already reads as zero: skip zeroing (needs -n)",
          NULL },
        { "chunk-size", 0, 0, G_OPTION_ARG_STRING, &o.chunk_size,
          "largest single I/O, power of 2 in 4K..64M (default 1M; 256K from an NBD source)", "SIZE" },
        { "buf-size", 0, 0, G_OPTION_ARG_STRING, &o.buf_size,
          "bytes of data in flight (default 16M; NBD ends: see docs)", "SIZE" },
        { "connections", 0, 0, G_OPTION_ARG_STRING, &o.connections,
          "NBD connections per end when the server allows multi-conn, "
          "1..16 (default: CPUs up to 4)", "N" },
        TOOL_NBD_TIMEOUT_ENTRIES,
        TOOL_THREADS_ENTRY,
        { "cache", 't', 0, G_OPTION_ARG_STRING, &o.dst_cache,
          "target cache mode: writeback (default) or none", "MODE" },
        { "source-cache", 'T', 0, G_OPTION_ARG_STRING, &o.src_cache,
          "source cache mode: writeback (default) or none", "MODE" },
        { "force-share", 'U', 0, G_OPTION_ARG_NONE, &o.force_share,
          "open the source even if another process writes it (see docs: "
          "Locking)", NULL },
        { "progress", 'p', 0, G_OPTION_ARG_NONE, &o.progress,
          "show a progress bar on stderr", NULL },
        { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet,
          "print nothing on success", NULL },
        { NULL },
    };
    static const char summary[] =
        "Copy the image SRC to DST, like qemu-img convert, keeping holes\n"
        "and turning zero runs into holes.";

    if (!tool_parse_options("SRC DST", summary, entries, &argc, &argv) ||
        !tool_expect_args("convert", argc, 2, "a source and a target") ||
        !convert_parse(&o, &p, &src_flags, &dst_flags, &create_opts,
                       nodes.nbd) ||
        !tool_node_opts_parse(&nodes, o.src_opts, o.dst_opts)) {
        ret = TOOL_EXIT_USAGE;
        goto out;
    }
    if (bdrv_same_storage(argv[1], argv[2])) {
        tool_error("source and target are the same image '%s'", argv[2]);
        ret = TOOL_EXIT_USAGE;
        goto out;
    }
    tool_node_opts_resolve(&nodes, argv[1], argv[2]);
    src = tool_open_image("source", argv[1], o.src_format, src_flags,
                          nodes.src_open);
    if (!src) {
        ret = TOOL_EXIT_USAGE;
        goto out;
    }
    /* The whole source chain is open: the target may be none of its
     * files, and every parameter passes before the target is touched. */
    if (!tool_check_target_chain(src, argv[2]) ||
        !convert_check_job(src, &p) ||
        (!o.no_create &&
         !convert_check_target_opts(o.dst_format ? o.dst_format : "raw",
                                    argv[2], nodes.dst_user))) {
        ret = TOOL_EXIT_USAGE;
        goto out;
    }

    /* From here a signal means "stop, and say the target is incomplete". */
    job_runner_init(&runner, argv[2], o.progress && !o.quiet);
    runner.quiet = o.quiet;
    dst = convert_open_target(&o, argv[2], src, dst_flags, create_opts,
                              nodes.dst_open, &created, &ret);
    if (!dst) {
        /* A signal that cut a connect short: its exit code. */
        if (runner.signal) {
            ret = job_runner_check_interrupted(&runner);
        }
        goto out_runner;
    }
    job = mirror_job_new("convert", src, dst, &p, &err);
    if (!job) {
        tool_error("%s", err->message);
        ret = TOOL_EXIT_USAGE;
        goto out_runner;
    }
    ret = job_runner_run(&runner, job);
    if (ret == TOOL_EXIT_OK && o.progress && !o.quiet) {
        job_runner_print_summary(&runner, stderr);
    }
out_runner:
    job_runner_destroy(&runner);
    g_clear_pointer(&dst, bdrv_unref);
    if (ret != TOOL_EXIT_OK) {
        /* Failed, cancelled or interrupted: a target we created and did
         * not fill goes (one we did not create was named incomplete). */
        convert_remove_created(argv[2], &created);
    }
out:
    convert_options_clear(&o);
    return ret;
}
