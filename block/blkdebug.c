/*
 * The blkdebug filter: a test double over real storage.
 *
 * Spec: "blkdebug:OPTIONS:IMAGE", e.g.
 *   blkdebug:error-op=flush,error-file=/tmp/t/fail:/tmp/t/disk.raw
 *   blkdebug::disk.raw                   (no options: a plain pass-through)
 * OPTIONS are comma-separated key=value pairs without ':' (the rest of the
 * spec is the image, which may contain ':'):
 *   format=FMT       the image's format (default: raw; never probed)
 *   latency-ns=N     delay every request by N ns before passing it on
 *   error-*          fault injection (block/fault-inject.h), e.g. fail
 *                    flushes exactly while a trigger file exists
 * Requests the rule does not fail go to the image unchanged, so tests
 * can inject a fault at an exact moment (nbdkit's error filter cannot
 * fail a flush, for one) and still compare bytes at the end.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/fault-inject.h"

#include <errno.h>

typedef struct BlkdebugState {
    BlockDriverState *child;
    int64_t latency_ns;
    FaultRule fault;
} BlkdebugState;

static bool blkdebug_recognize_spec(const char *spec)
{
    return g_str_has_prefix(spec, "blkdebug:");
}

static bool blkdebug_open(BlockDriverState *bs, const char *spec, int flags,
                          GHashTable *opts, GError **errp)
{
    BlkdebugState *s = bs->opaque;
    const char *rest = spec + strlen("blkdebug:");
    const char *colon = strchr(rest, ':');
    g_autofree char *optstr = NULL;
    g_autofree char *format = NULL;

    if (!colon || !colon[1]) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': expected blkdebug:OPTIONS:IMAGE", spec);
        return false;
    }
    optstr = g_strndup(rest, colon - rest);
    if (!bdrv_parse_spec_options(optstr, opts, errp) ||
        !fault_opt_size(opts, "blkdebug", "latency-ns", 0, &s->latency_ns,
                        errp) ||
        !fault_rule_parse(&s->fault, opts, "blkdebug", errp)) {
        fault_rule_clear(&s->fault);
        return false;
    }
    format = g_strdup(g_hash_table_lookup(opts, "format"));
    g_hash_table_remove(opts, "format");
    s->child = bdrv_open(colon + 1, format ? format : "raw",
                         flags | BDRV_O_NO_PROBE, NULL, errp);
    if (!s->child) {
        fault_rule_clear(&s->fault);
        return false;
    }
    return true;
}

static void blkdebug_close(BlockDriverState *bs)
{
    BlkdebugState *s = bs->opaque;

    bdrv_unref(s->child);
    fault_rule_clear(&s->fault);
}

static int64_t blkdebug_get_length(BlockDriverState *bs)
{
    BlkdebugState *s = bs->opaque;

    return bdrv_getlength(s->child);
}

static void blkdebug_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    BlkdebugState *s = bs->opaque;

    /* io.c on the child pads and splits again; keep its alignment. */
    bl->request_alignment = bdrv_get_request_alignment(s->child);
    bl->min_mem_alignment = bdrv_get_mem_alignment(s->child);
}

static bool blkdebug_get_info(BlockDriverState *bs, BlockImageInfo *info,
                              GError **errp)
{
    BlkdebugState *s = bs->opaque;
    bool ok = bdrv_get_info(s->child, info, errp);

    info->format = "blkdebug";
    /* A filter: no chain of files of its own (as bdrv_chain_contains()). */
    g_clear_pointer(&info->layers, g_ptr_array_unref);
    return ok;
}

static gboolean blkdebug_forward(gpointer opaque)
{
    BdrvRequest *req = opaque;
    BlkdebugState *s = req->bs->opaque;
    int ret = fault_rule_check(&s->fault, req->op, req->offset,
                               req->bytes);

    if (ret) {
        bdrv_req_complete_later(req, ret);
        return G_SOURCE_REMOVE;
    }
    bdrv_aio_submit(s->child, req->op, req->offset, req->bytes, req->buf,
                    req->flags, req->extents, bdrv_req_complete_cb, req);
    return G_SOURCE_REMOVE;
}

/* Pass a request on after the latency (at once when there is none). */
static void blkdebug_submit(BlockDriverState *bs, BdrvRequest *req)
{
    BlkdebugState *s = bs->opaque;

    if (s->latency_ns) {
        g_source_unref(bdrv_timer_new(s->latency_ns, blkdebug_forward, req));
    } else {
        blkdebug_forward(req);
    }
}

static void blkdebug_cancel_in_flight(BlockDriverState *bs)
{
    BlkdebugState *s = bs->opaque;

    bdrv_cancel_in_flight(s->child);
}

const BlockDriver bdrv_blkdebug = {
    .format_name        = "blkdebug",
    .instance_size      = sizeof(BlkdebugState),
    .recognize_spec     = blkdebug_recognize_spec,
    .open               = blkdebug_open,
    .close              = blkdebug_close,
    .get_length         = blkdebug_get_length,
    .refresh_limits     = blkdebug_refresh_limits,
    .get_info           = blkdebug_get_info,
    .aio_submit         = blkdebug_submit,
    .cancel_in_flight   = blkdebug_cancel_in_flight,
};
