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

/* Guest writes are watched to this granularity (bytes of the bitmap's
 * granules): a write marks the sectors it touched. */
#define VERIFY_GRANULARITY 9

static void verify_guest_wrote(void *opaque, int64_t offset, int64_t bytes)
{
    ToolVerify *v = opaque;

    hbitmap_set(v->rewritten, offset, bytes);
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
 * Was the target's byte @offset written by a guest since the switch-over?
 * A guest write in flight while the target was read is noted only when
 * it completes: hold new guest requests until those in flight are done,
 * then look.
 */
static bool verify_rewritten(ToolVerify *v, int64_t offset)
{
    bool drained = false;
    bool ret;

    if (!v->rewritten) {
        return false;
    }
    mirror_top_drain_begin(v->top, verify_drained, &drained);
    tool_run_until(&drained);
    ret = hbitmap_get(v->rewritten, offset);
    mirror_top_drain_end(v->top);
    return ret;
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
        if (res.outcome != IMAGE_COMPARE_CONTENT ||
            !verify_rewritten(v, res.byte)) {
            break;
        }
        /* A guest wrote there meanwhile: look on after what it wrote. */
        cmp.start = hbitmap_next_zero(v->rewritten, res.byte,
                                      cmp.end - res.byte);
        if (cmp.start < 0) {
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
    uint64_t skipped = v->rewritten ? hbitmap_count(v->rewritten) : 0;

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
    }
}
