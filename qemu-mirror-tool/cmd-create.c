/*
 * mirror-tool create: make a new image, like qemu-img create.
 *
 *   mirror-tool create [-f FMT] [-o OPTS] [-q] IMG [SIZE]
 *
 * SIZE may be left out for a qcow2 image with a backing file: the image
 * then has the backing file's size.  Options are checked before anything
 * is written (a bad one exits 2 with nothing created), and so is
 * whatever can fail without touching an existing IMG (bdrv_create()):
 * a size its file system cannot hold, a backing file that is IMG or
 * reads it.  A new IMG that could not be made is removed.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "util/cutils.h"

#include <stdio.h>
#include <sys/stat.h>

/* The size of the backing file named in @opts, resolved against @img. */
static bool create_backing_size(const char *img, GHashTable *opts,
                                int64_t *size)
{
    const char *name = g_hash_table_lookup(opts, "backing_file");
    const char *fmt = g_hash_table_lookup(opts, "backing_fmt");
    g_autofree char *dir = g_path_get_dirname(img);
    g_autofree char *path = NULL;
    BlockDriverState *bs;

    if (!name) {
        tool_error("create: expected an image and a size (try 'mirror-tool "
                   "create --help')");
        return false;
    }
    path = g_path_is_absolute(name) ? g_strdup(name)
                                    : g_build_filename(dir, name, NULL);
    /* Only its size is read: no locks, as qemu-img create opens it. */
    bs = tool_open_image("backing file", path, fmt,
                         BDRV_O_NO_IO | BDRV_O_FORCE_SHARE, NULL);
    if (!bs) {
        return false;
    }
    *size = bdrv_getlength(bs);
    bdrv_unref(bs);
    return true;
}

/* "key=value ..." of @opts in a stable order, for the summary line. */
static char *create_describe(GHashTable *opts)
{
    g_autoptr(GList) keys = opts ? g_hash_table_get_keys(opts) : NULL;
    GString *s = g_string_new(NULL);

    keys = g_list_sort(keys, (GCompareFunc)strcmp);
    for (GList *l = keys; l; l = l->next) {
        g_string_append_printf(s, " %s=%s", (char *)l->data,
                               (char *)g_hash_table_lookup(opts, l->data));
    }
    return g_string_free(s, FALSE);
}

int cmd_create(int argc, char **argv)
{
    g_autofree char *format = NULL;
    g_autofree char *options = NULL;
    g_autofree char *desc = NULL;
    g_autoptr(GHashTable) opts = NULL;
    g_autoptr(GError) err = NULL;
    gboolean quiet = FALSE;
    const char *fmt;
    struct stat st;
    bool existed;
    int64_t size;
    GOptionEntry entries[] = {
        { "format", 'f', 0, G_OPTION_ARG_STRING, &format,
          "image format: raw (default) or qcow2", "FMT" },
        { "options", 'o', 0, G_OPTION_ARG_STRING, &options,
          "creation options, key=value,... (qcow2: cluster_size, "
          "preallocation=off|metadata, backing_file, backing_fmt; raw: "
          "preallocation=off|falloc|full)", "OPTS" },
        { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
          "print nothing on success", NULL },
        { NULL },
    };
    static const char summary[] =
        "Create the image IMG of SIZE bytes (suffixes K, M, G, T allowed).\n"
        "A qcow2 image with a backing file may leave SIZE out: it gets the\n"
        "backing file's size.";

    if (!tool_parse_options("IMG [SIZE]", summary, entries, &argc, &argv)) {
        return TOOL_EXIT_USAGE;
    }
    if (argc != 2 && argc != 3) {
        tool_error("create: expected an image and a size (try 'mirror-tool "
                   "create --help')");
        return TOOL_EXIT_USAGE;
    }
    fmt = format ? format : "raw";
    if (!bdrv_find_format(fmt)) {
        tool_error("-f '%s': unknown image format", fmt);
        return TOOL_EXIT_USAGE;
    }
    opts = options ? tool_parse_kv_options("-o", options)
                   : g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                           g_free);
    if (!opts) {
        return TOOL_EXIT_USAGE;
    }
    if (argc == 3) {
        if (!parse_size("SIZE", argv[2], &size, &err)) {
            tool_error("%s", err->message);
            return TOOL_EXIT_USAGE;
        }
    } else if (!create_backing_size(argv[1], opts, &size)) {
        return TOOL_EXIT_USAGE;
    }
    desc = create_describe(opts);
    existed = lstat(argv[1], &st) == 0;
    if (!bdrv_create(fmt, argv[1], size, opts, &err)) {
        /* Bad input touched nothing; a new file is removed again; an I/O
         * error may have truncated an existing one. */
        bool io = g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_IO);

        tool_error("cannot create '%s': %s%s", argv[1], err->message,
                   existed && io ? "; the image is incomplete" : "");
        return g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_INVALID)
               ? TOOL_EXIT_USAGE : TOOL_EXIT_FAILURE;
    }
    if (!quiet) {
        printf("Formatting '%s', fmt=%s size=%" G_GINT64_FORMAT "%s\n",
               argv[1], fmt, size, desc);
    }
    return tool_finish_stdout(TOOL_EXIT_OK);
}
