/*
 * mirror-tool info: an image's format and sizes, like qemu-img info.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "util/cutils.h"

#include <json-glib/json-glib.h>
#include <stdio.h>

static void info_print_human(const char *filename, BlockImageInfo *info)
{
    g_autofree char *vsize = size_to_str(info->virtual_size);

    printf("image: %s\n", filename);
    printf("file format: %s\n", info->format);
    printf("virtual size: %s (%" G_GINT64_FORMAT " bytes)\n", vsize,
           info->virtual_size);
    if (info->actual_size >= 0) {
        g_autofree char *asize = size_to_str(info->actual_size);
        printf("disk size: %s\n", asize);
    } else {
        printf("disk size: unavailable\n");
    }
    if (info->cluster_size > 0) {
        printf("cluster_size: %" G_GINT64_FORMAT "\n", info->cluster_size);
    }
    if (info->backing_file) {
        printf("backing file: %s\n", info->backing_file);
    }
    if (info->backing_format) {
        printf("backing file format: %s\n", info->backing_format);
    }
    if (info->specific && info->specific->len) {
        printf("Format specific information:\n");
        for (guint i = 0; i < info->specific->len; i++) {
            printf("    %s\n", (char *)g_ptr_array_index(info->specific, i));
        }
    }
}

/*
 * "format-specific": { "type": FORMAT, "data": { ... } } from the
 * "key: value" lines, as qemu-img: keys with dashes, true/false as
 * booleans, numbers as numbers.
 */
static void info_add_specific(JsonBuilder *b, BlockImageInfo *info)
{
    json_builder_set_member_name(b, "format-specific");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, info->format);
    json_builder_set_member_name(b, "data");
    json_builder_begin_object(b);
    for (guint i = 0; i < info->specific->len; i++) {
        const char *line = g_ptr_array_index(info->specific, i);
        const char *sep = strstr(line, ": ");
        g_autofree char *key = NULL;
        const char *v;
        int64_t n;

        if (!sep) {
            continue;
        }
        key = g_strdelimit(g_strndup(line, sep - line), " ", '-');
        v = sep + 2;
        json_builder_set_member_name(b, key);
        if (!strcmp(v, "true") || !strcmp(v, "false")) {
            json_builder_add_boolean_value(b, !strcmp(v, "true"));
        } else if (parse_count(NULL, v, G_MININT64, G_MAXINT64, &n, NULL)) {
            json_builder_add_int_value(b, n);
        } else {
            json_builder_add_string_value(b, v);
        }
    }
    json_builder_end_object(b);
    json_builder_end_object(b);
}

void tool_image_info_json(JsonBuilder *b, const char *filename,
                          BlockImageInfo *info)
{
    json_builder_set_member_name(b, "virtual-size");
    json_builder_add_int_value(b, info->virtual_size);
    json_builder_set_member_name(b, "filename");
    json_builder_add_string_value(b, filename);
    if (info->cluster_size > 0) {
        json_builder_set_member_name(b, "cluster-size");
        json_builder_add_int_value(b, info->cluster_size);
    }
    json_builder_set_member_name(b, "format");
    json_builder_add_string_value(b, info->format);
    if (info->actual_size >= 0) {
        json_builder_set_member_name(b, "actual-size");
        json_builder_add_int_value(b, info->actual_size);
    }
    if (info->backing_file) {
        json_builder_set_member_name(b, "backing-filename");
        json_builder_add_string_value(b, info->backing_file);
    }
    if (info->backing_format) {
        json_builder_set_member_name(b, "backing-filename-format");
        json_builder_add_string_value(b, info->backing_format);
    }
    if (info->backing_file && info->layers && info->layers->len > 1) {
        json_builder_set_member_name(b, "full-backing-filename");
        json_builder_add_string_value(b, g_ptr_array_index(info->layers, 1));
    }
    if (info->specific && info->specific->len) {
        info_add_specific(b, info);
    }
    json_builder_set_member_name(b, "dirty-flag");
    json_builder_add_boolean_value(b, info->dirty_flag);
}

static void info_print_json(const char *filename, BlockImageInfo *info)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    tool_image_info_json(b, filename, info);
    json_builder_end_object(b);
    tool_print_json(json_builder_get_root(b), true);
}

int cmd_info(int argc, char **argv)
{
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GError) err = NULL;
    BlockImageInfo info = { 0 };
    bool json;
    int ret;

    /* Metadata only, as qemu-img info: no consistent-read lock. */
    bs = tool_open_one_image("info", "Show an image's format and sizes.",
                             BDRV_O_NO_IO, argc, argv, &json, &ret);
    if (!bs) {
        return ret;
    }
    if (!bdrv_get_info(bs, &info, &err)) {
        tool_error("%s", err->message);
        return TOOL_EXIT_FAILURE;
    }
    if (json) {
        info_print_json(bdrv_get_filename(bs), &info);
    } else {
        info_print_human(bdrv_get_filename(bs), &info);
    }
    bdrv_image_info_clear(&info);
    return tool_finish_stdout(TOOL_EXIT_OK);
}
