/*
 * The mirror job's window: operations and COPY bytes in flight, and the
 * COPY slots (see mirror-window.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-window.h"
#include "util/cutils.h"

#include <inttypes.h>

/* What either end asks for per channel (@a, @b), at most
 * MIRROR_MAX_WINDOW_BYTES; 0 when neither asks. */
static int64_t mirror_window_asked(int64_t a, int64_t b)
{
    int64_t asked = MAX(a, b);

    return asked > 0 ? MIN(asked, MIRROR_MAX_WINDOW_BYTES) : 0;
}

void mirror_window_defaults(BlockDriverState *src, BlockDriverState *dst,
                            const MirrorParams *p, int64_t chunk,
                            MirrorWindowDefaults *d)
{
    /*
     * The default window grows with the channels of either end: each NBD
     * connection has its own server workers (nbdkit: 16), and a window of
     * 16 requests spread over two connections leaves a latency-bound
     * target waiting.  Per channel it is QEMU's 16 MiB, or what an end
     * asks for (window_bytes) when neither buf-size nor max-in-flight was
     * given: one given keeps the other at QEMU's.  These are its largest,
     * from the most the ends may ask for; it follows the channels taking
     * requests and what they ask for now (mirror_window_refresh()).
     */
    int64_t asked = mirror_window_asked(bdrv_get_max_window_bytes(src),
                                        bdrv_get_max_window_bytes(dst));
    bool use_asked = asked && !p->buf_size && !p->max_in_flight;
    int64_t unit = use_asked ? asked : MIRROR_DEFAULT_BUF_SIZE;
    /* At most 4 channels' worth, and at most MIRROR_MAX_WINDOW_BYTES. */
    int channels = MIN(MIN(MAX(bdrv_get_channels(src),
                               bdrv_get_channels(dst)),
                           MIRROR_MAX_WINDOW_CHANNELS),
                       MAX(MIRROR_MAX_WINDOW_BYTES / unit, 1));
    int64_t unit_bytes = p->buf_size ? 0 : unit;
    /* As many operations as fill it; 16 for QEMU's 16 MiB of 1 MiB ones.
     * Smaller default operations: more of them, the same bytes. */
    int64_t op_size = p->chunk_size ? MIRROR_DEFAULT_CHUNK_SIZE : chunk;
    int unit_ops = p->max_in_flight ? 0 : MAX(unit / op_size, 1);

    *d = (MirrorWindowDefaults) {
        .buf_size = p->buf_size ? p->buf_size : unit_bytes * channels,
        .max_in_flight = p->max_in_flight ? p->max_in_flight
                                          : unit_ops * channels,
        .unit_bytes = unit_bytes,
        .unit_ops = unit_ops,
        .asked = use_asked,
        .op_size = op_size,
    };
}

void mirror_window_init(MirrorWindow *w, const MirrorWindowDefaults *d,
                        int64_t granularity, int64_t elem_size,
                        BlockDriverState *src, BlockDriverState *dst)
{
    size_t align = MAX(MAX(bdrv_get_mem_alignment(src),
                           bdrv_get_mem_alignment(dst)), 4096);

    *w = (MirrorWindow) {
        .cfg = *d,
        .granularity = granularity,
        .elem_size = elem_size,
        .max_op = INT64_MAX,
    };
    /* One buffer holds one operation: at least one granule. */
    w->cfg.buf_size = MAX(QEMU_ALIGN_UP(d->buf_size, granularity),
                          elem_size);
    w->max_bufs = MAX(1, w->cfg.buf_size / elem_size);
    /* Only the buffers the window uses are ever touched. */
    w->bufs = buf_pool_new(elem_size, w->max_bufs, align);
    mirror_window_refresh(w, src, dst);
}

void mirror_window_free(MirrorWindow *w)
{
    g_assert(w->in_flight == 0);
    buf_pool_free(w->bufs);
    w->bufs = NULL;
}

void mirror_window_refresh(MirrorWindow *w, BlockDriverState *src,
                           BlockDriverState *dst)
{
    int ch = MIN(MAX(bdrv_get_active_channels(src),
                     bdrv_get_active_channels(dst)),
                 MIRROR_MAX_WINDOW_CHANNELS);
    int64_t unit = w->cfg.unit_bytes;

    if (w->cfg.asked) {
        unit = mirror_window_asked(bdrv_get_window_bytes(src),
                                   bdrv_get_window_bytes(dst));
    }
    if (ch == w->channels && unit == w->cfg.unit_bytes) {
        return;
    }
    w->channels = ch;
    if (w->cfg.asked) {
        w->cfg.unit_bytes = unit;
        w->cfg.unit_ops = MAX(unit / w->cfg.op_size, 1);
    }
    w->cur_buf_size = w->cfg.buf_size;
    if (w->cfg.unit_bytes) {
        w->cur_buf_size = MIN(MAX(QEMU_ALIGN_UP(w->cfg.unit_bytes * ch,
                                                w->granularity),
                                  w->elem_size),
                              w->cfg.buf_size);
    }
    w->cur_max_bufs = MAX(1, w->cur_buf_size / w->elem_size);
    w->cur_max_in_flight = w->cfg.unit_ops
                           ? MIN(w->cfg.unit_ops * ch, w->cfg.max_in_flight)
                           : w->cfg.max_in_flight;
    g_debug("mirror: window for %d channel(s): %d operations, %" PRId64
            " bytes", ch, w->cur_max_in_flight, w->cur_buf_size);
}

void mirror_window_set_max_op(MirrorWindow *w, int64_t max_op)
{
    w->max_op = max_op == INT64_MAX ? max_op
                                    : MAX(QEMU_ALIGN_DOWN(max_op,
                                                          w->granularity),
                                          w->granularity);
}

bool mirror_window_has_room(const MirrorWindow *w)
{
    return w->in_flight < w->cur_max_in_flight;
}

int64_t mirror_window_fit(const MirrorWindow *w, int64_t want)
{
    int64_t avail = w->cur_buf_size - w->bytes_in_flight;

    want = MIN(want, w->max_op);
    if (want <= avail) {
        return want;
    }
    /* Only when others are in flight: the window >= one buffer. */
    return avail > 0 ? QEMU_ALIGN_DOWN(avail, w->granularity) : 0;
}

void mirror_window_op_begin(MirrorWindow *w, int64_t copy_bytes)
{
    w->in_flight++;
    w->bytes_in_flight += copy_bytes;
}

void mirror_window_op_end(MirrorWindow *w, int64_t copy_bytes)
{
    g_assert(w->in_flight > 0);
    w->in_flight--;
    w->bytes_in_flight -= copy_bytes;
}

/* A pool buffer; there is one whenever a slot is free. */
static uint8_t *mirror_window_buf_get(MirrorWindow *w)
{
    uint8_t *buf = buf_pool_get(w->bufs);

    g_assert(buf);
    return buf;
}

bool mirror_window_slot_get(MirrorWindow *w, bool want_buf, uint8_t **buf)
{
    if (w->nb_views + buf_pool_in_use(w->bufs) >= w->cur_max_bufs) {
        return false;
    }
    if (want_buf) {
        *buf = mirror_window_buf_get(w);
    } else {
        w->nb_views++;
        *buf = NULL;
    }
    return true;
}

void mirror_window_slot_put(MirrorWindow *w, uint8_t *buf)
{
    if (buf) {
        buf_pool_put(w->bufs, buf);
    } else {
        w->nb_views--;
    }
}

uint8_t *mirror_window_slot_to_buf(MirrorWindow *w)
{
    g_assert(w->nb_views > 0);
    w->nb_views--;
    return mirror_window_buf_get(w);
}

int mirror_window_in_flight(const MirrorWindow *w)
{
    return w->in_flight;
}

int64_t mirror_window_bytes_in_flight(const MirrorWindow *w)
{
    return w->bytes_in_flight;
}

int64_t mirror_window_buf_size(const MirrorWindow *w)
{
    return w->cur_buf_size;
}

int mirror_window_max_in_flight(const MirrorWindow *w)
{
    return w->cur_max_in_flight;
}
