/*
 * mirror-tool check: look for leaks and corruptions in a qcow2 image and
 * report them like qemu-img check; with -r, repair them as qemu-img check
 * -r does (block/qcow2-repair.c), then check again.
 *
 *   mirror-tool check [-f FMT] [--output=human|json] [-r leaks|all] IMG
 *
 * Exit codes are qemu-img check's (not the other commands'): 0 no
 * problem, 1 the check could not run (bad usage, the image cannot be
 * opened, read errors), 2 corruptions, 3 leaked clusters only, 63 the
 * format cannot be checked (raw); after a repair, those of the second
 * check.  Problems go to stderr, one per line; the summary to stdout.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <stdio.h>

enum {
    CHECK_EXIT_CORRUPT = 2,
    CHECK_EXIT_LEAKS = 3,
    CHECK_EXIT_UNSUPPORTED = 63,
};

static void check_print_human(const BdrvCheckResult *r)
{
    if (!r->corruptions && !r->leaks && !r->check_errors) {
        printf("No errors were found on the image.\n");
    }
    if (r->corruptions) {
        printf("\n%" G_GINT64_FORMAT " errors were found on the image.\n"
               "Data may be corrupted, or further writes to the image may "
               "corrupt it.\n", r->corruptions);
    }
    if (r->leaks) {
        printf("\n%" G_GINT64_FORMAT " leaked clusters were found on the "
               "image.\nThis means waste of disk space, but no harm to "
               "data.\n", r->leaks);
    }
    if (r->check_errors) {
        printf("\n%" G_GINT64_FORMAT " internal errors have occurred during "
               "the check.\n", r->check_errors);
    }
    if (r->total_clusters && r->allocated_clusters) {
        printf("%" G_GINT64_FORMAT "/%" G_GINT64_FORMAT " = %0.2f%% "
               "allocated, %0.2f%% fragmented, %0.2f%% compressed "
               "clusters\n", r->allocated_clusters, r->total_clusters,
               r->allocated_clusters * 100.0 / r->total_clusters,
               r->fragmented_clusters * 100.0 / r->allocated_clusters,
               r->compressed_clusters * 100.0 / r->allocated_clusters);
    }
    printf("Image end offset: %" G_GINT64_FORMAT "\n", r->image_end_offset);
}

/* Members like qemu-img's: counters only when they are not zero. */
static void check_add_nonzero(JsonBuilder *b, const char *key, int64_t v)
{
    if (v) {
        json_builder_set_member_name(b, key);
        json_builder_add_int_value(b, v);
    }
}

/* @rep: the repair, or NULL. */
static void check_print_json(const char *filename,
                             const BdrvCheckResult *r,
                             const BdrvCheckReport *rep)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "image-end-offset");
    json_builder_add_int_value(b, r->image_end_offset);
    json_builder_set_member_name(b, "total-clusters");
    json_builder_add_int_value(b, r->total_clusters);
    if (rep) {
        check_add_nonzero(b, "leaks-fixed", rep->leaks_fixed);
        check_add_nonzero(b, "corruptions-fixed", rep->corruptions_fixed);
    }
    json_builder_set_member_name(b, "check-errors");
    json_builder_add_int_value(b, r->check_errors);
    check_add_nonzero(b, "leaks", r->leaks);
    check_add_nonzero(b, "corruptions", r->corruptions);
    check_add_nonzero(b, "allocated-clusters", r->allocated_clusters);
    check_add_nonzero(b, "fragmented-clusters", r->fragmented_clusters);
    check_add_nonzero(b, "compressed-clusters", r->compressed_clusters);
    json_builder_set_member_name(b, "filename");
    json_builder_add_string_value(b, filename);
    json_builder_set_member_name(b, "format");
    json_builder_add_string_value(b, "qcow2");
    json_builder_end_object(b);
    tool_print_json(json_builder_get_root(b), true);
}

static void check_print_messages(const BdrvCheckResult *r)
{
    for (guint i = 0; i < r->messages->len; i++) {
        fprintf(stderr, "%s\n", (char *)g_ptr_array_index(r->messages, i));
    }
}

static int check_exit_code(const BdrvCheckResult *r)
{
    return r->check_errors ? TOOL_EXIT_FAILURE
           : r->corruptions ? CHECK_EXIT_CORRUPT
           : r->leaks ? CHECK_EXIT_LEAKS : TOOL_EXIT_OK;
}

/* check -r: report the repair of @filename like qemu-img. */
static int check_report_repair(const char *filename,
                               const BdrvCheckReport *rep, bool json)
{
    check_print_messages(&rep->before);
    if (rep->rebuilt) {
        fprintf(stderr, "Rebuilt the refcount structure\n");
    }
    if (rep->marked_consistent) {
        fprintf(stderr, "Cleared the corrupt and dirty bits\n");
    }
    if (!json && (rep->leaks_fixed || rep->corruptions_fixed)) {
        printf("The following inconsistencies were found and repaired:\n\n"
               "    %" G_GINT64_FORMAT " leaked clusters\n"
               "    %" G_GINT64_FORMAT " corruptions\n\n"
               "Double checking the fixed image now...\n",
               rep->leaks_fixed, rep->corruptions_fixed);
    }
    check_print_messages(&rep->after);
    if (json) {
        check_print_json(filename, &rep->after, rep);
    } else {
        check_print_human(&rep->after);
    }
    return check_exit_code(&rep->after);
}

int cmd_check(int argc, char **argv)
{
    static const char *const fixes[] = { "leaks", "all", NULL };
    static const BdrvCheckFix fix_modes[] = { BDRV_FIX_LEAKS, BDRV_FIX_ALL };
    g_autofree char *format = NULL;
    g_autofree char *output = NULL;
    g_autofree char *repair = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GError) err = NULL;
    BdrvCheckReport rep = { 0 };
    gboolean force_share = FALSE;
    int fix = -1;
    bool json;
    int ret;
    GOptionEntry entries[] = {
        { "format", 'f', 0, G_OPTION_ARG_STRING, &format,
          "image format (default: probe)", "FMT" },
        { "output", 0, 0, G_OPTION_ARG_STRING, &output,
          "output format: human (default) or json", "FMT" },
        { "repair", 'r', 0, G_OPTION_ARG_STRING, &repair,
          "repair leaked clusters (leaks) or also corruptions (all), as "
          "qemu-img check -r", "leaks|all" },
        TOOL_FORCE_SHARE_ENTRY(&force_share),
        { NULL },
    };
    static const char summary[] =
        "Check a qcow2 image for leaked clusters and corruptions; without\n"
        "-r the image is not changed.  Exit codes as qemu-img check: 0\n"
        "clean, 1 check failed, 2 corruptions, 3 leaks only, 63 format not\n"
        "checkable; after -r, those of the check of the repaired image.";

    if (!tool_parse_options("IMG", summary, entries, &argc, &argv) ||
        !tool_parse_output_format(output, &json) ||
        !tool_parse_choice("-r", repair, fixes, &fix) ||
        !tool_expect_args("check", argc, 1, "one image")) {
        return TOOL_EXIT_FAILURE;
    }
    if (!tool_check_format("-f", format)) {
        return TOOL_EXIT_FAILURE;
    }
    /* A repair writes: it may not share (qemu-img refuses it too; bad
     * input is exit 1 here, as in qemu-img check, where 2 means
     * corruptions). */
    if (force_share && fix >= 0) {
        tool_error("-U cannot be used with -r: a repair writes the image");
        return TOOL_EXIT_FAILURE;
    }
    bs = tool_open_image(NULL, argv[1], format,
                         force_share ? BDRV_O_FORCE_SHARE : 0, NULL);
    if (!bs) {
        return TOOL_EXIT_FAILURE;
    }
    ret = bdrv_check(bs, fix < 0 ? BDRV_FIX_NONE : fix_modes[fix], &rep,
                     &err);
    if (ret == -ENOTSUP) {
        tool_error("'%s': this image format (%s) does not support checks",
                   bdrv_get_filename(bs), bdrv_get_format_name(bs));
        return CHECK_EXIT_UNSUPPORTED;
    }
    if (ret < 0) {
        if (rep.before.messages) {
            check_print_messages(&rep.before);
        }
        tool_error("%s", err->message);
        bdrv_check_report_clear(&rep);
        return TOOL_EXIT_FAILURE;
    }
    if (rep.repaired) {
        ret = check_report_repair(bdrv_get_filename(bs), &rep, json);
    } else {
        check_print_messages(&rep.before);
        if (json) {
            check_print_json(bdrv_get_filename(bs), &rep.before, NULL);
        } else {
            check_print_human(&rep.before);
        }
        ret = check_exit_code(&rep.before);
    }
    bdrv_check_report_clear(&rep);
    return tool_finish_stdout(ret);
}
