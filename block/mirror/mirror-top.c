/*
 * mirror-top: the filter node guests use while a mirror job runs.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/mirror/mirror-top.h"
#include "util/cutils.h"

#include <errno.h>

typedef struct TopState {
    BlockDriverState *child;
    const MirrorTopOwner *job;  /* the mirror job, or NULL */
    void *job_opaque;
    MirrorState *state;         /* the gate of guest writes, or NULL */
    uint64_t in_flight;
    int drain_count;
    GQueue held;                /* BdrvRequest waiting for the drain end */
    void (*drained_cb)(void *opaque);
    void *drained_opaque;
    GSource *drained_source;
} TopState;

/* Each request's own state (bdrv_req_priv()). */
typedef struct TopRequest {
    bool timed;                 /* counted by the owner's guest_begin */
    int64_t start_ns;           /* ... which returned this */
} TopRequest;

static void top_check_drained(TopState *s);

static gboolean top_drained_cb(gpointer opaque)
{
    TopState *s = opaque;
    void (*cb)(void *) = s->drained_cb;

    g_source_unref(s->drained_source);
    s->drained_source = NULL;
    if (cb && s->drain_count && !s->in_flight) {
        s->drained_cb = NULL;
        cb(s->drained_opaque);
    }
    return G_SOURCE_REMOVE;
}

static void top_check_drained(TopState *s)
{
    if (s->drained_cb && s->drain_count && !s->in_flight &&
        !s->drained_source) {
        s->drained_source = bdrv_timer_new(0, top_drained_cb, s);
    }
}

/* The active-mirror kind of a guest write, or -1 for what is no write. */
static int top_write_kind(BdrvOp op);

static void top_request_done(void *opaque, int ret)
{
    BdrvRequest *r = opaque;
    TopState *s = r->bs->opaque;
    TopRequest *tr = bdrv_req_priv(r);

    if (top_write_kind(r->op) >= 0) {
        mirror_state_guest_done(s->state, r->offset, r->bytes);
    }
    if (tr->timed && s->job) {
        s->job->guest_done(s->job_opaque, tr->start_ns, clock_ns(),
                           r->bytes);
    }
    s->in_flight--;
    top_check_drained(s);
    bdrv_req_complete(r, ret);
}

static int top_write_kind(BdrvOp op)
{
    switch (op) {
    case BDRV_OP_WRITE:
        return MIRROR_WRITE_DATA;
    case BDRV_OP_ZERO:
        return MIRROR_WRITE_ZERO;
    case BDRV_OP_DISCARD:
        return MIRROR_WRITE_DISCARD;
    default:
        return -1;
    }
}

/* A guest request goes to the job (write-blocking) or the child. */
static void top_go(BdrvRequest *r)
{
    TopState *s = r->bs->opaque;
    int kind = top_write_kind(r->op);

    if (kind >= 0 && s->job && s->job->write_blocking(s->job_opaque)) {
        s->job->write(s->job_opaque, kind, r->offset, r->bytes, r->buf,
                      r->flags, top_request_done, r);
        return;
    }
    /* A guest flush flushes the source; the job flushes the target. */
    bdrv_aio_submit(s->child, r->op, r->offset, r->bytes, r->buf, r->flags,
                    r->extents, top_request_done, r);
}

/* The state file says the guest write @opaque's granules are not known
 * good now (or could not: @ret < 0, the write fails). */
static void top_gate_passed(void *opaque, int ret)
{
    BdrvRequest *r = opaque;

    if (ret < 0) {
        top_request_done(r, ret);
        return;
    }
    top_go(r);
}

/* A guest request, held while drained, goes on: a write first through
 * the state file's gate. */
static void top_dispatch(BdrvRequest *r)
{
    TopState *s = r->bs->opaque;

    s->in_flight++;
    if (top_write_kind(r->op) >= 0 &&
        !mirror_state_guest_write(s->state, r->offset, r->bytes,
                                  top_gate_passed, r)) {
        return;
    }
    top_go(r);
}

static void top_submit(BlockDriverState *top, BdrvRequest *r)
{
    TopState *s = top->opaque;
    TopRequest *tr = bdrv_req_priv(r);

    /* Held while drained counts too: the guest waits all the same. */
    if (s->job) {
        tr->timed = true;
        tr->start_ns = clock_ns();
        s->job->guest_begin(s->job_opaque, tr->start_ns);
    }

    if (s->drain_count) {
        g_queue_push_tail(&s->held, r);
        return;
    }
    top_dispatch(r);
}

/* ---- driver members ---- */

static bool top_init(BlockDriverState *bs, void *data, GError **errp)
{
    TopState *s = bs->opaque;

    s->child = bdrv_ref(data);
    g_queue_init(&s->held);
    return true;
}

static void top_close(BlockDriverState *bs)
{
    TopState *s = bs->opaque;

    g_assert(!s->in_flight && g_queue_is_empty(&s->held));
    if (s->drained_source) {
        g_source_destroy(s->drained_source);
        g_source_unref(s->drained_source);
    }
    bdrv_unref(s->child);
}

static int64_t top_get_length(BlockDriverState *bs)
{
    TopState *s = bs->opaque;

    return bdrv_getlength(s->child);
}

static void top_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    /* The child's io.c pads and splits: no constraint here. */
}

static bool top_get_info(BlockDriverState *bs, BlockImageInfo *info,
                         GError **errp)
{
    TopState *s = bs->opaque;

    return bdrv_get_info(s->child, info, errp);
}

static const BlockDriver bdrv_mirror_top = {
    .format_name        = "mirror-top",
    .instance_size      = sizeof(TopState),
    .request_size       = sizeof(TopRequest),
    .close              = top_close,
    .get_length         = top_get_length,
    .refresh_limits     = top_refresh_limits,
    .get_info           = top_get_info,
    .aio_submit         = top_submit,
};

/* ---- the job's side ---- */

BlockDriverState *mirror_top_new(BlockDriverState *child, GError **errp)
{
    return bdrv_new_internal(&bdrv_mirror_top, bdrv_get_filename(child),
                             bdrv_is_writable(child) ? BDRV_O_RDWR : 0,
                             top_init, child, errp);
}

BlockDriverState *mirror_top_child(BlockDriverState *top)
{
    TopState *s = top->opaque;

    return s->child;
}

void mirror_top_set_job(BlockDriverState *top, const MirrorTopOwner *owner,
                        void *opaque)
{
    TopState *s = top->opaque;

    s->job = owner;
    s->job_opaque = opaque;
}

void mirror_top_set_state(BlockDriverState *top, MirrorState *state)
{
    TopState *s = top->opaque;

    s->state = state;
}

void mirror_top_drain_begin(BlockDriverState *top, void (*cb)(void *opaque),
                            void *opaque)
{
    TopState *s = top->opaque;

    s->drain_count++;
    s->drained_cb = cb;
    s->drained_opaque = opaque;
    top_check_drained(s);
}

void mirror_top_drain_end(BlockDriverState *top)
{
    TopState *s = top->opaque;
    BdrvRequest *r;

    g_assert(s->drain_count > 0);
    if (--s->drain_count) {
        return;
    }
    s->drained_cb = NULL;
    while ((r = g_queue_pop_head(&s->held))) {
        top_dispatch(r);
    }
}

void mirror_top_set_child(BlockDriverState *top, BlockDriverState *child)
{
    TopState *s = top->opaque;
    BlockDriverState *old = s->child;

    g_assert(s->drain_count && !s->in_flight);
    s->child = bdrv_ref(child);
    bdrv_unref(old);
}

uint64_t mirror_top_in_flight(BlockDriverState *top)
{
    TopState *s = top->opaque;

    return s->in_flight;
}
