/*
 * The spot check of a resumed --state-file (see resume-check.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/resume-check.h"
#include "qemu-mirror-tool/tool.h"

#include <string.h>

/* Block-status requests spent looking for the source's data at most: a
 * fragmented image is sampled over what they found. */
#define RESUME_CHECK_STATUS_CALLS   256

typedef struct ResumeCheckRead {
    int64_t offset;
    int64_t bytes;
    uint8_t *buf[2];            /* source, target */
} ResumeCheckRead;

typedef struct ResumeCheck {
    int pending;
    int ret;                    /* the first error */
    bool done;
} ResumeCheck;

static void resume_check_cb(void *opaque, int ret)
{
    ResumeCheck *c = opaque;

    if (ret < 0 && c->ret == 0) {
        c->ret = ret;
    }
    if (--c->pending == 0) {
        c->done = true;
    }
}

/*
 * Collect into @data the parts of @good where @src has data (not known
 * zero), within RESUME_CHECK_STATUS_CALLS requests; what a failing
 * request would have found is left out.
 */
static void resume_check_data(BlockDriverState *src,
                              const MirrorExtents *good, MirrorExtents *data)
{
    int calls = RESUME_CHECK_STATUS_CALLS;

    for (guint i = 0; i < mirror_extents_count(good) && calls > 0; i++) {
        const MirrorExtent *x = mirror_extents_get(good, i);
        int64_t pos = x->start;

        while (pos < x->end && calls-- > 0) {
            g_autoptr(GArray) ext = g_array_new(FALSE, FALSE,
                                                sizeof(BlockExtent));
            ResumeCheck c = { .pending = 1 };

            bdrv_aio_block_status(src, pos, x->end - pos, ext,
                                  resume_check_cb, &c);
            tool_run_until(&c.done);
            if (c.ret < 0 || ext->len == 0) {
                return;
            }
            for (guint j = 0; j < ext->len; j++) {
                BlockExtent *b = &g_array_index(ext, BlockExtent, j);
                int64_t end = MIN(b->offset + b->length, x->end);

                if ((b->flags & BDRV_BLOCK_DATA) &&
                    !(b->flags & BDRV_BLOCK_ZERO) && end > pos) {
                    mirror_extents_add(data, MAX(b->offset, pos), end);
                }
                pos = MAX(pos, end);
            }
        }
    }
}

/* The byte at rank @rank (0 <= @rank < @e->bytes) of the extents @e. */
static int64_t resume_check_at(const MirrorExtents *e, int64_t rank)
{
    for (guint i = 0; i < mirror_extents_count(e); i++) {
        const MirrorExtent *x = mirror_extents_get(e, i);

        if (rank < x->end - x->start) {
            return x->start + rank;
        }
        rank -= x->end - x->start;
    }
    g_assert_not_reached();
}

int resume_check(BlockDriverState *src, BlockDriverState *dst,
                 const MirrorExtents *good, int64_t granularity,
                 int64_t *differs, GError **errp)
{
    int64_t size = bdrv_getlength(src);
    MirrorExtents data;
    const MirrorExtents *pool;
    g_autoptr(GArray) reads = g_array_new(FALSE, TRUE,
                                          sizeof(ResumeCheckRead));
    ResumeCheck c = { 0 };
    int64_t last = -1, n;
    int ret = 0;

    if (!good->bytes) {
        return 0;
    }
    mirror_extents_init(&data);
    resume_check_data(src, good, &data);
    pool = data.bytes ? &data : good;
    n = MIN(RESUME_CHECK_GRANULES, pool->bytes / granularity + 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t at = resume_check_at(pool, pool->bytes * (2 * i + 1) /
                                     (2 * n));
        int64_t g0 = at - at % granularity;
        ResumeCheckRead r = { 0 };

        if (g0 == last) {
            continue;
        }
        last = g0;
        /* A granule, or a window of it around @at. */
        r.bytes = MIN(granularity, RESUME_CHECK_MAX_BYTES);
        r.offset = MAX(g0, MIN(at - at % 4096, g0 + granularity - r.bytes));
        r.bytes = MIN(r.bytes, size - r.offset);
        if (r.bytes <= 0) {
            continue;
        }
        g_array_append_val(reads, r);
    }
    mirror_extents_destroy(&data);

    /* All reads at once: one round trip for an NBD image. */
    c.pending = 2 * reads->len + 1;
    for (guint i = 0; i < reads->len; i++) {
        ResumeCheckRead *r = &g_array_index(reads, ResumeCheckRead, i);

        for (int k = 0; k < 2; k++) {
            r->buf[k] = g_malloc(r->bytes);
            bdrv_aio_pread(k ? dst : src, r->offset, r->bytes, r->buf[k], 0,
                           resume_check_cb, &c);
        }
    }
    resume_check_cb(&c, 0);
    tool_run_until(&c.done);
    if (c.ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "cannot read the images to check it: %s",
                    g_strerror(-c.ret));
        ret = c.ret;
    }
    for (guint i = 0; i < reads->len; i++) {
        ResumeCheckRead *r = &g_array_index(reads, ResumeCheckRead, i);

        if (ret == 0 && memcmp(r->buf[0], r->buf[1], r->bytes)) {
            *differs = r->offset - r->offset % granularity;
            ret = 1;
        }
        g_free(r->buf[0]);
        g_free(r->buf[1]);
    }
    return ret;
}
