/*
 * image-compare: the first difference between two images.
 *
 * Chunks finish out of order; each one that differs records its first
 * difference and stops the planning there.  Every chunk below it was
 * planned before it, so when the scan is over the lowest recorded
 * difference is the first one.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/image-compare.h"
#include "util/cutils.h"

#include <string.h>

/* qemu-img compare compares data in sectors of this many bytes. */
#define COMPARE_SECTOR 512

/* Step of the search for a difference: large enough for memcmp and
 * buffer_is_zero to run at full speed, small enough to stop early. */
#define COMPARE_STEP (64 * KiB)

typedef struct CompareState {
    const ImageCompare *cmp;
    int64_t content;            /* qemu-img's offset of the first one */
    int64_t byte;               /* its first differing byte */
    int64_t status;             /* strict: the first status difference */
} CompareState;

static inline uint8_t compare_byte(const uint8_t *p, int64_t i)
{
    return p ? p[i] : 0;
}

/* The first index in [@from, @bytes) where @a and @b differ (NULL: all
 * zero bytes; not both), or -1. */
static int64_t compare_first_diff(const uint8_t *a, const uint8_t *b,
                                  int64_t from, int64_t bytes)
{
    for (int64_t i = from; i < bytes; i += COMPARE_STEP) {
        int64_t n = MIN(COMPARE_STEP, bytes - i);
        bool same = a && b ? !memcmp(a + i, b + i, n)
                           : buffer_is_zero((a ? a : b) + i, n);

        if (same) {
            continue;
        }
        for (int64_t j = i; j < i + n; j++) {
            if (compare_byte(a, j) != compare_byte(b, j)) {
                return j;
            }
        }
    }
    return -1;
}

static void compare_plan(void *opaque, ImageScanChunk *c)
{
    CompareState *st = opaque;
    const unsigned mask = BDRV_BLOCK_DATA | BDRV_BLOCK_ZERO |
                          BDRV_BLOCK_ALLOCATED;

    if (st->cmp->strict && st->status < 0 &&
        (c->flags[0] & mask) != (c->flags[1] & mask)) {
        st->status = c->offset;
        image_scan_stop_at(c->scan, c->offset);
    }
}

static void compare_work(void *opaque, ImageScanChunk *c)
{
    c->result = compare_first_diff(c->data[0], c->data[1], 0, c->bytes);
}

static void compare_done(void *opaque, ImageScanChunk *c)
{
    CompareState *st = opaque;
    const HBitmap *skip = st->cmp->skip;
    int64_t d = c->result;
    int64_t at;

    /* Differences in bytes not to compare do not count: look on. */
    while (d >= 0 && skip && hbitmap_get(skip, c->offset + d)) {
        int64_t next = hbitmap_next_zero(skip, c->offset + d,
                                         c->bytes - d);

        d = next < 0 ? -1 : compare_first_diff(c->data[0], c->data[1],
                                               next - c->offset, c->bytes);
    }
    if (d < 0) {
        return;
    }
    /* As qemu-img compare: the sector of the first difference. */
    at = c->offset + QEMU_ALIGN_DOWN(d, COMPARE_SECTOR);
    if (st->content < 0 || at < st->content) {
        st->content = at;
        st->byte = c->offset + d;
    }
    image_scan_stop_at(c->scan, c->offset + d);
}

void image_compare_run(const ImageCompare *cmp, ImageCompareResult *res)
{
    CompareState st = { .cmp = cmp, .content = -1, .status = -1 };
    ImageScanConfig cfg = {
        .bs = { cmp->bs[0], cmp->bs[1] },
        .n = 2,
        .start = cmp->start,
        .end = cmp->end,
        .chunk_size = cmp->chunk_size,
        .max_in_flight = cmp->max_in_flight,
        .interrupt = cmp->interrupt,
        .plan = compare_plan,
        .work = compare_work,
        .done = compare_done,
        .opaque = &st,
    };
    ImageScanError err;
    int64_t first = INT64_MAX;

    *res = (ImageCompareResult) { .outcome = IMAGE_COMPARE_SAME };
    image_scan_run(&cfg, &err);
    if (st.status >= 0) {
        first = st.status;
        *res = (ImageCompareResult) {
            .outcome = IMAGE_COMPARE_STATUS, .offset = st.status,
        };
    }
    if (st.content >= 0 && st.content < first) {
        first = st.content;
        *res = (ImageCompareResult) {
            .outcome = IMAGE_COMPARE_CONTENT, .offset = st.content,
            .byte = st.byte,
        };
    }
    if (err.ret < 0 && err.offset < first) {
        *res = (ImageCompareResult) {
            .outcome = IMAGE_COMPARE_ERROR, .err = err,
        };
    }
}
