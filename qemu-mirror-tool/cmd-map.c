/*
 * mirror-tool map: which parts of an image hold data, like qemu-img map.
 *
 * Block status is asked for the whole rest of the image each time, on the
 * main loop: the driver answers for as much as it can at once (raw: up to
 * a few hundred extents; NBD: the protocol's most per request), so the
 * calls grow with the extents, not the size.  Adjacent extents with the
 * same status (and contiguous host offsets) are merged.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "util/cutils.h"

#include <json-glib/json-glib.h>
#include <stdio.h>

typedef struct MapState {
    BlockDriverState *bs;
    const char *filename;
    bool json;
    bool done;
    int ret;
    int64_t pos;
    GArray *extents;
    BlockExtent cur;        /* pending merged extent (length 0: none) */
    bool first_json;
    bool human_header;
    bool layers_read;
    GPtrArray *layers;      /* BlockImageInfo.layers, or NULL */
} MapState;

/* The file of the image at backing @depth, from the node's get_info (read
 * once), or NULL when the node names none. */
static const char *map_layer(MapState *m, int depth)
{
    if (!m->layers_read) {
        BlockImageInfo info;

        m->layers_read = true;
        if (bdrv_get_info(m->bs, &info, NULL)) {
            m->layers = g_steal_pointer(&info.layers);
        }
        bdrv_image_info_clear(&info);
    }
    return m->layers && (guint)depth < m->layers->len
           ? g_ptr_array_index(m->layers, depth) : NULL;
}

static bool map_same(const BlockExtent *a, const BlockExtent *b)
{
    unsigned mask = BDRV_BLOCK_DATA | BDRV_BLOCK_ZERO |
                    BDRV_BLOCK_ALLOCATED | BDRV_BLOCK_OFFSET_VALID;

    if ((a->flags & mask) != (b->flags & mask) || a->depth != b->depth) {
        return false;
    }
    if (a->flags & BDRV_BLOCK_OFFSET_VALID) {
        return a->host_offset + a->length == b->host_offset;
    }
    return true;
}

static void map_print(MapState *m, const BlockExtent *e)
{
    if (m->json) {
        printf("%s{ \"start\": %" G_GINT64_FORMAT ", \"length\": %"
               G_GINT64_FORMAT ", \"depth\": %d, \"present\": %s, "
               "\"zero\": %s, \"data\": %s",
               m->first_json ? "[" : ",\n", e->offset, e->length, e->depth,
               e->flags & BDRV_BLOCK_ALLOCATED ? "true" : "false",
               e->flags & BDRV_BLOCK_ZERO ? "true" : "false",
               e->flags & BDRV_BLOCK_DATA ? "true" : "false");
        if (e->flags & BDRV_BLOCK_OFFSET_VALID) {
            printf(", \"offset\": %" G_GINT64_FORMAT, e->host_offset);
        }
        printf("}");
        m->first_json = false;
        return;
    }
    if (!m->human_header) {
        printf("%-16s%-16s%-16s%s\n", "Offset", "Length", "Mapped to",
               "File");
        m->human_header = true;
    }
    if ((e->flags & BDRV_BLOCK_DATA) &&
        (e->flags & BDRV_BLOCK_OFFSET_VALID)) {
        /* Data of a backing file: name that file, as qemu-img does. */
        const char *layer = e->depth ? map_layer(m, e->depth) : NULL;

        printf("%#-16" G_GINT64_MODIFIER "x%#-16" G_GINT64_MODIFIER
               "x%#-16" G_GINT64_MODIFIER "x%s\n", e->offset, e->length,
               e->host_offset, layer ? layer : m->filename);
    }
}

static void map_add(MapState *m, const BlockExtent *e)
{
    if (m->cur.length && map_same(&m->cur, e)) {
        m->cur.length += e->length;
        return;
    }
    if (m->cur.length) {
        map_print(m, &m->cur);
    }
    m->cur = *e;
}

static void map_next(MapState *m);

static void map_status_cb(void *opaque, int ret)
{
    MapState *m = opaque;

    if (ret < 0) {
        m->ret = ret;
        m->done = true;
        return;
    }
    for (guint i = 0; i < m->extents->len; i++) {
        BlockExtent *e = &g_array_index(m->extents, BlockExtent, i);

        map_add(m, e);
        m->pos = e->offset + e->length;
    }
    g_array_set_size(m->extents, 0);
    map_next(m);
}

static void map_next(MapState *m)
{
    int64_t len = bdrv_getlength(m->bs);

    if (m->pos >= len) {
        if (m->cur.length) {
            map_print(m, &m->cur);
        }
        m->done = true;
        return;
    }
    bdrv_aio_block_status(m->bs, m->pos, len - m->pos, m->extents,
                          map_status_cb, m);
}

int cmd_map(int argc, char **argv)
{
    g_autoptr(BlockDriverState) bs = NULL;
    MapState m = { 0 };
    bool json;
    int ret;

    bs = tool_open_one_image("map",
        "Show which parts of an image hold data, which read as zero,\n"
        "and where the data lives.", 0, argc, argv, &json, &ret);
    if (!bs) {
        return ret;
    }

    m.bs = bs;
    m.filename = bdrv_get_filename(bs);
    m.json = json;
    m.first_json = true;
    m.extents = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    map_next(&m);
    tool_run_until(&m.done);
    g_array_unref(m.extents);
    if (m.layers) {
        g_ptr_array_unref(m.layers);
    }
    if (m.ret < 0) {
        ret = tool_finish_stdout(TOOL_EXIT_FAILURE);
        tool_error("block status of '%s' failed at offset %" G_GINT64_FORMAT
                   ": %s", m.filename, m.pos, g_strerror(-m.ret));
        return ret;
    }
    if (json) {
        printf(m.first_json ? "[]\n" : "]\n");
    } else if (!m.human_header) {
        printf("%-16s%-16s%-16s%s\n", "Offset", "Length", "Mapped to",
               "File");
    }
    return tool_finish_stdout(TOOL_EXIT_OK);
}
