/*
 * image-scan: read one or two images side by side, in parallel.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/image-scan.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror/mirror.h"
#include "block/thread-pool.h"
#include "util/buf-pool.h"
#include "util/cutils.h"

#include <errno.h>

/*
 * Block status is asked for the whole rest of the range, one request per
 * image at a time, and the driver answers for as much as it can at once
 * (raw: a few hundred extents; NBD: the protocol's most per request): the
 * requests grow with the extents, not the size.  The next is asked for
 * when fewer than this many known extents lie ahead of the planning, so
 * that the answer is there before the reads need it, and what is known
 * stays small.
 */
#define SCAN_STATUS_AHEAD 64

typedef struct ScanImage {
    ImageScan *scan;
    BlockDriverState *bs;
    int64_t length;
    GArray *extents;            /* known status from extents[head] on */
    guint head;
    int64_t known_end;          /* the status is known up to here */
    GArray *answer;             /* of the status request in flight */
    bool asking;
} ScanImage;

struct ImageScan {
    ImageScanConfig cfg;
    ScanImage img[IMAGE_SCAN_MAX_IMAGES];
    ThreadPool *pool;
    BufPool *bufs;              /* chunk-size buffers, reused: fresh ones
                                 * cost a page fault per page */
    int64_t pos;                /* next offset to plan */
    int64_t stop;               /* plan nothing at or past it */
    int chunks;                 /* chunks in flight */
    int requests;               /* status requests in flight */
    ImageScanError err;
    bool done;
};

static void scan_pump(ImageScan *s);

static void scan_fail(ImageScan *s, int image, bool status, int64_t offset,
                      int ret)
{
    if (!s->err.ret || offset < s->err.offset) {
        s->err = (ImageScanError) {
            .ret = ret, .image = image, .status = status, .offset = offset,
        };
    }
    image_scan_stop_at(s, offset);
}

void image_scan_stop_at(ImageScan *s, int64_t offset)
{
    s->stop = MIN(s->stop, offset);
}

/* ---- block status ---- */

static void scan_status_cb(void *opaque, int ret)
{
    ScanImage *im = opaque;
    ImageScan *s = im->scan;

    im->asking = false;
    s->requests--;
    if (ret < 0) {
        scan_fail(s, im - s->img, true, im->known_end, ret);
    } else {
        for (guint i = 0; i < im->answer->len; i++) {
            BlockExtent *e = &g_array_index(im->answer, BlockExtent, i);

            g_array_append_val(im->extents, *e);
            im->known_end = e->offset + e->length;
        }
    }
    g_array_set_size(im->answer, 0);
    scan_pump(s);
}

static void scan_ask_status(ImageScan *s, ScanImage *im)
{
    int64_t until = MIN(im->length, s->cfg.end);

    /* Not past a failure (or a difference): that would only fail again,
     * or read status no one needs. */
    if (im->asking || im->known_end >= until || im->known_end >= s->stop) {
        return;
    }
    im->asking = true;
    s->requests++;
    bdrv_aio_block_status(im->bs, im->known_end, until - im->known_end,
                          im->answer, scan_status_cb, im);
}

/*
 * The status of image @im at @pos into *@flags and where that run ends
 * into *@run_end; false when not known yet (it is being asked for).
 */
static bool scan_status_at(ImageScan *s, ScanImage *im, int64_t pos,
                           unsigned *flags, int64_t *run_end)
{
    if (pos >= im->length) {
        *flags = 0;
        *run_end = s->cfg.end;
        return true;
    }
    while (im->head < im->extents->len) {
        BlockExtent *e = &g_array_index(im->extents, BlockExtent, im->head);

        if (e->offset + e->length > pos) {
            break;
        }
        im->head++;
    }
    if (im->head >= 1024) {
        g_array_remove_range(im->extents, 0, im->head);
        im->head = 0;
    }
    if (im->extents->len - im->head < SCAN_STATUS_AHEAD) {
        scan_ask_status(s, im);
    }
    if (im->head >= im->extents->len) {
        return false;
    }
    *flags = g_array_index(im->extents, BlockExtent, im->head).flags;
    *run_end = MIN(im->known_end, im->length);
    for (guint i = im->head; i < im->extents->len; i++) {
        BlockExtent *e = &g_array_index(im->extents, BlockExtent, i);

        /* Runs of the same status merge (status comes in pieces of at
         * most what the driver answers at once). */
        if (e->flags != *flags) {
            *run_end = e->offset;
            break;
        }
    }
    return true;
}

/* ---- chunks ---- */

static void scan_chunk_free(ImageScanChunk *c)
{
    ImageScan *s = c->scan;

    for (int i = 0; i < s->cfg.n; i++) {
        bdrv_unmap(s->img[i].bs, &c->map[i]);
        if (c->buf[i]) {
            buf_pool_put(s->bufs, c->buf[i]);
        }
    }
    g_free(c);
}

static int scan_work(void *arg)
{
    ImageScanChunk *c = arg;

    c->scan->cfg.work(c->scan->cfg.opaque, c);
    return 0;
}

static void scan_work_done(void *opaque, int ret)
{
    ImageScanChunk *c = opaque;
    ImageScan *s = c->scan;

    if (s->cfg.done) {
        s->cfg.done(s->cfg.opaque, c);
    }
    scan_chunk_free(c);
    s->chunks--;
    scan_pump(s);
}

static void scan_read(ImageScanChunk *c, int i);

typedef struct ScanRead {
    ImageScanChunk *c;
    int i;
    bool mapped;
} ScanRead;

static void scan_chunk_step(ImageScanChunk *c)
{
    ImageScan *s = c->scan;

    if (--c->pending) {
        return;
    }
    if (c->ret < 0) {
        scan_fail(s, c->err_image, false, c->offset, c->ret);
        scan_chunk_free(c);
        s->chunks--;
        scan_pump(s);
        return;
    }
    thread_pool_submit_cpu(s->pool, scan_work, c, scan_work_done, c);
}

static void scan_one_read_cb(void *opaque, int ret)
{
    ScanRead *r = opaque;
    ImageScanChunk *c = r->c;
    int i = r->i;

    if (r->mapped && ret == -ENOTSUP) {
        /* The view cannot be had now (the file shrank...): read. */
        g_free(r);
        scan_read(c, i);
        return;
    }
    if (r->mapped && ret == 0) {
        c->data[i] = c->map[i].data;
    }
    g_free(r);
    if (ret < 0 && c->ret == 0) {
        c->ret = ret;
        c->err_image = i;
    }
    scan_chunk_step(c);
}

static void scan_read(ImageScanChunk *c, int i)
{
    BlockDriverState *bs = c->scan->img[i].bs;
    ScanRead *r = g_new0(ScanRead, 1);

    r->c = c;
    r->i = i;
    c->buf[i] = buf_pool_get(c->scan->bufs);
    g_assert(c->buf[i]);        /* at most n per chunk in flight */
    c->data[i] = c->buf[i];
    /* The data is used next on a pool worker (the work): not a read on
     * the main loop, which would keep it to one CPU. */
    bdrv_aio_pread(bs, c->offset, c->bytes, c->buf[i], BDRV_REQ_OFF_LOOP,
                   scan_one_read_cb, r);
}

static void scan_submit(ImageScan *s, ImageScanChunk *c, const bool *read)
{
    c->pending = 1;             /* held until every read is submitted */
    for (int i = 0; i < s->cfg.n; i++) {
        ScanImage *im = &s->img[i];

        if (!read[i]) {
            continue;
        }
        c->pending++;
        if (bdrv_can_map(im->bs) && c->offset + c->bytes <= im->length) {
            /* A view of the page cache: nothing is copied. */
            ScanRead *r = g_new0(ScanRead, 1);

            r->c = c;
            r->i = i;
            r->mapped = true;
            bdrv_aio_map(im->bs, c->offset, c->bytes, &c->map[i],
                         scan_one_read_cb, r);
        } else {
            scan_read(c, i);
        }
    }
    s->chunks++;
    scan_chunk_step(c);
}

/* Plan the next unit at s->pos; false when it must wait for status. */
static bool scan_plan_one(ImageScan *s)
{
    int64_t pos = s->pos;
    int64_t end = MIN(s->cfg.end, s->stop);
    int64_t run_end = end;
    int64_t align = s->cfg.align;
    unsigned flags[IMAGE_SCAN_MAX_IMAGES] = { 0 };
    bool read[IMAGE_SCAN_MAX_IMAGES] = { false };
    bool any_read = false;
    ImageScanChunk zero, *c;

    for (int i = 0; i < s->cfg.n; i++) {
        int64_t e;

        if (!scan_status_at(s, &s->img[i], pos, &flags[i], &e)) {
            return false;
        }
        run_end = MIN(run_end, e);
        read[i] = pos < s->img[i].length && !(flags[i] & BDRV_BLOCK_ZERO);
        any_read |= read[i];
    }
    if (any_read) {
        run_end = MIN(run_end, pos + s->cfg.chunk_size);
    }
    if (align > 1 && run_end < s->cfg.end) {
        int64_t a = QEMU_ALIGN_DOWN(run_end, align);

        if (a > pos) {
            run_end = a;
        } else {
            /* A block partly zero: read it whole where there is data. */
            run_end = MIN(QEMU_ALIGN_DOWN(pos, align) + align, s->cfg.end);
            any_read = false;
            for (int i = 0; i < s->cfg.n; i++) {
                read[i] = pos < s->img[i].length;
                any_read |= read[i];
            }
        }
    }
    s->pos = run_end;
    if (!any_read) {
        zero = (ImageScanChunk) { .offset = pos, .bytes = run_end - pos,
                                  .zero_run = true, .scan = s };
        memcpy(zero.flags, flags, sizeof(flags));
        if (s->cfg.plan) {
            s->cfg.plan(s->cfg.opaque, &zero);
        }
        return true;
    }
    c = g_new0(ImageScanChunk, 1);
    c->offset = pos;
    c->bytes = run_end - pos;
    c->scan = s;
    memcpy(c->flags, flags, sizeof(flags));
    if (s->cfg.plan) {
        s->cfg.plan(s->cfg.opaque, c);
    }
    scan_submit(s, c, read);
    return true;
}

static void scan_pump(ImageScan *s)
{
    if (s->cfg.interrupt && *s->cfg.interrupt) {
        image_scan_stop_at(s, s->pos);
    }
    while (s->pos < MIN(s->cfg.end, s->stop) &&
           s->chunks < s->cfg.max_in_flight) {
        if (!scan_plan_one(s)) {
            break;
        }
    }
    if (!s->chunks && !s->requests &&
        s->pos >= MIN(s->cfg.end, s->stop)) {
        s->done = true;
    }
}

int image_scan_run(const ImageScanConfig *cfg, ImageScanError *err)
{
    ImageScan s = { .cfg = *cfg };

    g_assert(cfg->n >= 1 && cfg->n <= IMAGE_SCAN_MAX_IMAGES);
    if (!s.cfg.chunk_size) {
        s.cfg.chunk_size = IMAGE_SCAN_DEFAULT_CHUNK;
    }
    if (!s.cfg.max_in_flight) {
        bool memory = true;

        /* A node that can do fused copies is a file in memory. */
        for (int i = 0; i < cfg->n; i++) {
            memory &= bdrv_can_copy(cfg->bs[i], cfg->bs[i]);
        }
        s.cfg.max_in_flight = memory ? IMAGE_SCAN_MEMORY_IN_FLIGHT
                                     : IMAGE_SCAN_DEFAULT_IN_FLIGHT;
    }
    if (s.cfg.align < 1) {
        s.cfg.align = 1;
    }
    s.pool = thread_pool_get();
    {
        size_t align = 4096;

        for (int i = 0; i < cfg->n; i++) {
            align = MAX(align, bdrv_get_mem_alignment(cfg->bs[i]));
        }
        s.bufs = buf_pool_new(s.cfg.chunk_size,
                              s.cfg.max_in_flight * cfg->n, align);
    }
    s.pos = cfg->start;
    s.stop = cfg->end;
    for (int i = 0; i < cfg->n; i++) {
        s.img[i] = (ScanImage) {
            .scan = &s,
            .bs = cfg->bs[i],
            .length = bdrv_getlength(cfg->bs[i]),
            .extents = g_array_new(FALSE, FALSE, sizeof(BlockExtent)),
            .answer = g_array_new(FALSE, FALSE, sizeof(BlockExtent)),
            .known_end = cfg->start,
        };
    }
    scan_pump(&s);
    tool_run_until(&s.done);
    buf_pool_free(s.bufs);
    for (int i = 0; i < cfg->n; i++) {
        g_array_unref(s.img[i].extents);
        g_array_unref(s.img[i].answer);
    }
    *err = s.err;
    return s.err.ret;
}

void image_scan_opts_clear(ImageScanOpts *o)
{
    g_free(o->parallel);
    g_free(o->chunk);
    g_free(o->connections);
}

bool image_scan_parse_opts(const ImageScanOpts *o, GHashTable *nbd_opts,
                           int64_t *chunk_size, int *max_in_flight)
{
    g_autoptr(GError) err = NULL;
    MirrorParams p;
    int64_t v = 0;

    mirror_params_init(&p);
    if ((o->parallel && !parse_count("-m", o->parallel, 1,
                                     MIRROR_MAX_IN_FLIGHT_LIMIT, &v,
                                     &err)) ||
        !tool_parse_engine_options(o->chunk, NULL, o->connections, &p,
                                   nbd_opts, &err)) {
        tool_error("%s", err->message);
        return false;
    }
    *chunk_size = p.chunk_size;
    *max_in_flight = v;
    return true;
}
