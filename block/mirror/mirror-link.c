/*
 * The mirror job's view of its nodes' links (see mirror-link.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-link.h"

/* A node event of the source or the target: tell the job's listeners. */
static void mirror_link_event(void *opaque, BlockDriverState *bs,
                              const BdrvEvent *ev)
{
    MirrorLink *l = opaque;
    JobEvent je = {
        .type = JOB_EVENT_RECONNECTING,
        .node = bs == l->dst ? "target" : "source",
        .spec = bdrv_get_filename(bs),
        .reconnecting = ev->type == BDRV_EVENT_RECONNECTING,
        .error = ev->type == BDRV_EVENT_RECONNECT_FAILED ? ev->error : 0,
        .reason = ev->type == BDRV_EVENT_RECONNECTED ? NULL : ev->reason,
        .delay_s = ev->delay_s,
        .elapsed_ns = ev->elapsed_ns,
    };

    job_emit(l->job, &je);
}

void mirror_link_start(MirrorLink *l, Job *job, BlockDriverState *src,
                       BlockDriverState *dst)
{
    *l = (MirrorLink) {
        .job = job,
        .src = src,
        .dst = dst,
        .listening = true,
        .flushed_gen = bdrv_get_reconnects(dst),
    };
    l->flush_gen = l->flushed_gen;
    bdrv_add_event_listener(src, mirror_link_event, l);
    if (dst != src) {
        bdrv_add_event_listener(dst, mirror_link_event, l);
    }
}

void mirror_link_stop(MirrorLink *l)
{
    if (!l->listening) {
        return;
    }
    bdrv_remove_event_listener(l->src, mirror_link_event, l);
    if (l->dst != l->src) {
        bdrv_remove_event_listener(l->dst, mirror_link_event, l);
    }
    l->listening = false;
}

bool mirror_link_reconnecting(const MirrorLink *l)
{
    return l->listening && (bdrv_is_reconnecting(l->src) ||
                            bdrv_is_reconnecting(l->dst));
}

void mirror_link_flush_begin(MirrorLink *l)
{
    l->flush_gen = bdrv_get_reconnects(l->dst);
}

bool mirror_link_flush_done(MirrorLink *l)
{
    l->flushed_gen = l->flush_gen;
    return !mirror_link_flush_stale(l);
}

bool mirror_link_flush_stale(const MirrorLink *l)
{
    return l->listening && bdrv_get_reconnects(l->dst) != l->flushed_gen;
}
