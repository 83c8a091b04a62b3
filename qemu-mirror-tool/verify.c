/*
 * --verify of convert and start.
 *
 * Why compare after the job rather than hash what the job read: a hash
 * taken at read time must be kept right across granules copied again
 * after guest writes (start), and proves only that the target equals
 * what the job happened to read; a compare after the job re-reads both
 * images through the same parallel engine as `compare` and proves the
 * final state itself, for the cost of reading the source once more
 * (block status first: holes of both are not read).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/verify.h"
#include "qemu-mirror-tool/image-compare.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror/mirror-top.h"
#include "util/cutils.h"

/* The granularity of v->rewritten: 512-byte sectors. */
#define VERIFY_GRANULARITY 9
#define VERIFY_SECTOR (1 << VERIFY_GRANULARITY)

/* The bytes of one sector that guests wrote, a bit each. */
typedef struct VerifyMask {
    uint64_t bits[VERIFY_SECTOR / 64];
} VerifyMask;

/* Note that guests wrote [@offset, @end) of one sector, not all of it. */
static void verify_mark_partial(ToolVerify *v, int64_t offset, int64_t end)
{
    gpointer key = GSIZE_TO_POINTER(offset >> VERIFY_GRANULARITY);
    VerifyMask *m = g_hash_table_lookup(v->partial, key);

    if (end <= offset) {
        return;
    }
    if (!m) {
        m = g_new0(VerifyMask, 1);
        g_hash_table_insert(v->partial, key, m);
    }
    for (int64_t i = offset % VERIFY_SECTOR;
         i < offset % VERIFY_SECTOR + (end - offset); i++) {
        m->bits[i / 64] |= 1ULL << (i % 64);
    }
}

/* Did guests write byte @offset (of a sector they did not write whole)? */
static bool verify_partial_get(ToolVerify *v, int64_t offset)
{
    gpointer key = GSIZE_TO_POINTER(offset >> VERIFY_GRANULARITY);
    VerifyMask *m = g_hash_table_lookup(v->partial, key);
    int64_t i = offset % VERIFY_SECTOR;

    return m && (m->bits[i / 64] >> (i % 64)) & 1;
}

/*
 * A guest wrote [@offset, @offset + @bytes) of the target: exactly those
 * bytes are not held against it.  The sectors it covers whole are not
 * compared at all; the bytes of a sector it covers in part are, and a
 * difference there counts unless a guest wrote that very byte.
 */
static void verify_guest_wrote(void *opaque, int64_t offset, int64_t bytes)
{
    ToolVerify *v = opaque;
    int64_t end = offset + bytes;
    int64_t first = QEMU_ALIGN_UP(offset, VERIFY_SECTOR);
    int64_t last = QEMU_ALIGN_DOWN(end, VERIFY_SECTOR);

    if (last <= first) {
        /* Within one sector, or across one boundary. */
        int64_t mid = MIN(first, end);

        verify_mark_partial(v, offset, mid);
        if (end > mid) {
            verify_mark_partial(v, mid, end);
        }
        return;
    }
    hbitmap_set(v->rewritten, first, last - first);
    if (offset < first) {
        verify_mark_partial(v, offset, first);
    }
    if (end > last) {
        verify_mark_partial(v, last, end);
    }
}

/* The first byte at or after @offset (before @end) guests did not write;
 * @end if none. */
static int64_t verify_written_end(ToolVerify *v, int64_t offset,
                                  int64_t end)
{
    while (offset < end) {
        if (hbitmap_get(v->rewritten, offset)) {
            offset = hbitmap_next_zero(v->rewritten, offset, end - offset);
            if (offset < 0) {
                return end;
            }
        } else if (verify_partial_get(v, offset)) {
            offset++;
        } else {
            break;
        }
    }
    return offset;
}

/* The job's events, synchronously: the switch-over happened when the
 * job completes with the filter on the target. */
static void verify_job_event(Job *job, const JobEvent *event, void *opaque)
{
    ToolVerify *v = opaque;

    if (v->switched || !v->top || mirror_top_child(v->top) != v->dst) {
        return;
    }
    v->switched = true;
    v->rewritten = hbitmap_new(bdrv_getlength(v->dst), VERIFY_GRANULARITY);
    v->partial = g_hash_table_new_full(NULL, NULL, NULL, g_free);
    bdrv_add_write_notifier(v->dst, verify_guest_wrote, v);
}

void tool_verify_init(ToolVerify *v, BlockDriverState *src,
                      BlockDriverState *dst, BlockDriverState *top,
                      Job *job)
{
    *v = (ToolVerify) { .src = src, .dst = dst, .top = top };
    if (top) {
        job_add_listener(job, verify_job_event, v);
    }
}

static void verify_drained(void *opaque)
{
    *(bool *)opaque = true;
}

/*
 * Where to look on when the target's byte @offset (before @end) differs:
 * after what the guests wrote there since the switch-over, or @offset
 * when no guest wrote it.  A guest write in flight while the target was
 * read is noted only when it completes: hold new guest requests until
 * those in flight are done, then look.
 */
static int64_t verify_rewritten_end(ToolVerify *v, int64_t offset,
                                    int64_t end)
{
    bool drained = false;
    int64_t ret;

    if (!v->rewritten) {
        return offset;
    }
    mirror_top_drain_begin(v->top, verify_drained, &drained);
    tool_run_until(&drained);
    ret = verify_written_end(v, offset, end);
    mirror_top_drain_end(v->top);
    return ret;
}

/* How many bytes guests wrote since the switch-over. */
static uint64_t verify_rewritten_bytes(ToolVerify *v)
{
    uint64_t n = hbitmap_count(v->rewritten);
    GHashTableIter it;
    gpointer key, value;

    g_hash_table_iter_init(&it, v->partial);
    while (g_hash_table_iter_next(&it, &key, &value)) {
        VerifyMask *m = value;
        int64_t sector = GPOINTER_TO_SIZE(key);

        if (hbitmap_get(v->rewritten, sector << VERIFY_GRANULARITY)) {
            continue;           /* counted whole */
        }
        for (guint i = 0; i < G_N_ELEMENTS(m->bits); i++) {
            n += __builtin_popcountll(m->bits[i]);
        }
    }
    return n;
}

int tool_verify_run(ToolVerify *v)
{
    ImageCompare cmp = {
        .bs = { v->src, v->dst },
        .end = bdrv_getlength(v->src),
        .chunk_size = v->chunk_size,
        .max_in_flight = v->max_in_flight,
        .interrupt = v->interrupt,
    };
    ImageCompareResult res;
    int64_t start_ns = clock_ns();

    if (v->top && !v->switched) {
        tool_error("verify: the job did not switch the export to the "
                   "target; nothing to verify");
        return TOOL_EXIT_FAILURE;
    }
    v->bytes = cmp.end;
    for (;;) {
        cmp.skip = v->rewritten;
        image_compare_run(&cmp, &res);
        if (v->interrupt && *v->interrupt) {
            tool_error("verify interrupted; the target was not verified");
            return TOOL_EXIT_FAILURE;
        }
        if (res.outcome != IMAGE_COMPARE_CONTENT) {
            break;
        }
        /* A guest wrote there meanwhile: look on after what it wrote. */
        cmp.start = verify_rewritten_end(v, res.byte, cmp.end);
        if (cmp.start == res.byte) {
            break;
        }
        if (cmp.start >= cmp.end) {
            res.outcome = IMAGE_COMPARE_SAME;
            break;
        }
    }
    v->seconds = (clock_ns() - start_ns) / 1e9;
    switch (res.outcome) {
    case IMAGE_COMPARE_SAME:
        return TOOL_EXIT_OK;
    case IMAGE_COMPARE_CONTENT:
        tool_error("verify failed at offset %" G_GINT64_FORMAT ": the "
                   "target differs from the source", res.byte);
        return TOOL_EXIT_FAILURE;
    case IMAGE_COMPARE_STATUS:
        g_assert_not_reached();
    case IMAGE_COMPARE_ERROR:
        break;
    }
    tool_error("verify failed: %s of the %s at offset %" G_GINT64_FORMAT
               ": %s", res.err.status ? "block status" : "read",
               res.err.image ? "target" : "source", res.err.offset,
               g_strerror(-res.err.ret));
    return TOOL_EXIT_FAILURE;
}

void tool_verify_print(ToolVerify *v, FILE *out, bool json)
{
    g_autofree char *size = size_to_str(v->bytes);
    uint64_t skipped = v->rewritten ? verify_rewritten_bytes(v) : 0;

    if (json) {
        fprintf(out, "{\"verify\": {\"result\": \"verified\", "
                "\"bytes\": %" G_GINT64_FORMAT ", \"rewritten-bytes\": %"
                G_GUINT64_FORMAT ", \"seconds\": %.3f}}\n", v->bytes,
                skipped, v->seconds);
        return;
    }
    if (v->rewritten) {
        g_autofree char *rw = size_to_str(skipped);

        fprintf(out, "verified: the target equals the source at the "
                "switch-over (%s compared in %.2f s; %s written by guests "
                "since)\n", size, v->seconds, rw);
    } else {
        fprintf(out, "verified: the target equals the source (%s compared "
                "in %.2f s)\n", size, v->seconds);
    }
}

void tool_verify_clear(ToolVerify *v)
{
    if (v->rewritten) {
        bdrv_remove_write_notifier(v->dst, verify_guest_wrote, v);
        g_clear_pointer(&v->rewritten, hbitmap_free);
        g_clear_pointer(&v->partial, g_hash_table_unref);
    }
}
