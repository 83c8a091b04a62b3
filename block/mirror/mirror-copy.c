/*
 * The copy paths of a COPY operation: buffer, view, fused (see
 * mirror-copy.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-copy.h"

#include <errno.h>

/* ---- buffer: read into the slot's pool buffer ---- */

static bool mirror_copy_buffer_wants_buf(int64_t bytes)
{
    return true;
}

static void mirror_copy_read_cb(void *opaque, int ret)
{
    MirrorCopy *c = opaque;

    c->env->done(c, ret);
}

static void mirror_copy_buffer_start(MirrorCopy *c)
{
    bdrv_aio_pread(c->env->src, c->offset, c->bytes, c->pool_buf,
                   c->env->read_flags, mirror_copy_read_cb, c);
}

static const MirrorCopyOps mirror_copy_buffer = {
    .name       = "buffer",
    .wants_buf  = mirror_copy_buffer_wants_buf,
    .start      = mirror_copy_buffer_start,
};

/* ---- view: map the source ---- */

/*
 * A view costs an mmap, a munmap and with it a TLB flush on every CPU
 * running one of our threads (on a VM, an IPI through the hypervisor); it
 * saves one memcpy of the data.  Small operations (the sync stage behind
 * a busy guest: one dirty granule each) lose by it, large ones gain.
 */
static bool mirror_copy_view_wants_buf(int64_t bytes)
{
    return bytes < MIRROR_MAP_MIN;
}

/* A view of the source is ready; without one, read into a buffer. */
static void mirror_copy_map_cb(void *opaque, int ret)
{
    MirrorCopy *c = opaque;

    if (ret == -ENOTSUP) {
        /* No view of this range: the slot becomes a pool buffer. */
        c->pool_buf = mirror_window_slot_to_buf(c->env->win);
        c->buf = c->pool_buf;
        mirror_copy_buffer_start(c);
        return;
    }
    c->buf = c->map.data;
    c->env->done(c, ret);
}

static void mirror_copy_view_start(MirrorCopy *c)
{
    if (c->pool_buf) {
        mirror_copy_buffer_start(c);    /* too small for a view */
        return;
    }
    bdrv_aio_map(c->env->src, c->offset, c->bytes, &c->map,
                 mirror_copy_map_cb, c);
}

static const MirrorCopyOps mirror_copy_view = {
    .name       = "view",
    .wants_buf  = mirror_copy_view_wants_buf,
    .start      = mirror_copy_view_start,
};

/* ---- fused: read and write in one pool job ---- */

static bool mirror_copy_fused_check(void *opaque, const uint8_t *buf,
                                    int64_t bytes)
{
    MirrorCopy *c = opaque;

    return c->env->check(c, buf, bytes);
}

static void mirror_copy_fused_cb(void *opaque, int ret)
{
    MirrorCopy *c = opaque;

    if (c->res.read_ret < 0) {
        c->env->done(c, c->res.read_ret);
        return;
    }
    /* Read only (zero blocks in it: the owner writes it), or written (or
     * failed) whole. */
    c->written = c->res.written || c->res.write_ret < 0;
    c->env->done(c, c->written ? ret : 0);
}

static void mirror_copy_fused_start(MirrorCopy *c)
{
    const MirrorCopyEnv *env = c->env;

    if (!bdrv_copy_fits(env->src, env->dst, c->offset, c->bytes,
                        c->pool_buf)) {
        mirror_copy_buffer_start(c);
        return;
    }
    bdrv_aio_copy(env->src, env->dst, c->offset, c->bytes, c->pool_buf,
                  mirror_copy_fused_check, &c->res, mirror_copy_fused_cb, c);
}

static const MirrorCopyOps mirror_copy_fused = {
    .name       = "fused",
    .wants_buf  = mirror_copy_buffer_wants_buf,
    .start      = mirror_copy_fused_start,
};

/* ---- the path of a job ---- */

void mirror_copy_path_init(MirrorCopyPath *p, BlockDriverState *src,
                           BlockDriverState *dst, MirrorWindow *win,
                           bool in_order, bool compress,
                           bool (*check)(MirrorCopy *c, const uint8_t *buf,
                                         int64_t bytes),
                           void (*done)(MirrorCopy *c, int ret))
{
    *p = (MirrorCopyPath) {
        .env = {
            .src = src,
            .dst = dst,
            .win = win,
            .check = check,
            .done = done,
            .read_flags = bdrv_writes_off_loop(dst) ? BDRV_REQ_OFF_LOOP : 0,
        },
    };
    if (!in_order && !compress && bdrv_can_copy(src, dst)) {
        p->ops = &mirror_copy_fused;
    } else if (bdrv_can_map(src)) {
        p->ops = &mirror_copy_view;
    } else {
        p->ops = &mirror_copy_buffer;
    }
    g_debug("mirror: copy path %s", p->ops->name);
}

bool mirror_copy_wants_buf(const MirrorCopyPath *p, int64_t bytes)
{
    return p->ops->wants_buf(bytes);
}

void mirror_copy_start(const MirrorCopyPath *p, MirrorCopy *c,
                       int64_t offset, int64_t bytes, uint8_t *buf)
{
    *c = (MirrorCopy) {
        .env = &p->env,
        .offset = offset,
        .bytes = bytes,
        .buf = buf,
        .pool_buf = buf,
    };
    p->ops->start(c);
}

void mirror_copy_release(MirrorCopy *c)
{
    bdrv_unmap(c->env->src, &c->map);
    mirror_window_slot_put(c->env->win, c->pool_buf);
}
