/*
 * Choosing the mirror job's next operation (see mirror-plan.h): the first
 * dirty granule at or after the cursor that no operation covers, what the
 * source's block status cache says is there, and how far it may coalesce
 * within the size caps, the window's byte budget and the speed limit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"
#include "block/mirror/mirror-plan.h"

void mirror_plan_init(MirrorJob *s, const MirrorPlanOwner *owner)
{
    s->plan.owner = owner;
}

uint64_t mirror_plan_passes(MirrorJob *s)
{
    return s->plan.passes;
}

/*
 * The first dirty offset at or after the cursor that no operation covers,
 * wrapping around once (a new pass); -1 if there is none.
 */
static int64_t mirror_next_candidate(MirrorJob *s)
{
    MirrorPlan *pl = &s->plan;
    int64_t len = s->cfg.len;

    for (int sweep = 0; sweep < 2; sweep++) {
        int64_t off = sweep == 0 ? pl->cursor : 0;
        int64_t limit = sweep == 0 ? len : pl->cursor;

        while (off < limit) {
            int64_t busy_end;

            off = dirty_bitmap_next_dirty(s->track.dirty, off);
            if (off < 0 || off >= limit) {
                break;
            }
            if (!hbitmap_get(s->track.in_flight, off)) {
                if (sweep == 1) {
                    pl->passes++;
                }
                return off;
            }
            busy_end = hbitmap_next_zero(s->track.in_flight, off,
                                         UINT64_MAX);
            off = busy_end < 0 ? len : busy_end;
        }
    }
    return -1;
}

/* Does the target already read as zero over [offset, offset + bytes)? */
static bool mirror_target_known_zero(MirrorJob *s, int64_t offset,
                                     int64_t bytes)
{
    return s->track.zero &&
           hbitmap_count_between(s->track.zero, offset, bytes) ==
           (uint64_t)bytes;
}

/*
 * Decide what to do at @offset: the method and the largest length allowed
 * by the source's block status and the size caps.  Returns false when the
 * block status is not known yet (a fetch was started).
 */
static bool mirror_plan(MirrorJob *s, int64_t offset, MirrorMethod *method,
                        int64_t *max_bytes)
{
    const BlockExtent *ext = mirror_status_lookup(&s->status, offset);
    int64_t g = s->cfg.granularity;
    int64_t len = s->cfg.len;
    int64_t ext_end, n;

    if (!ext) {
        if (!mirror_status_pending(&s->status)) {
            mirror_status_fetch(&s->status, offset);
        }
        return false;
    }
    ext_end = ext->offset + ext->length;
    n = ext_end >= len ? len - offset : QEMU_ALIGN_DOWN(ext_end - offset, g);

    if (mirror_status_copies(&s->status, ext)) {
        *method = MIRROR_METHOD_COPY;
    } else if (mirror_status_from_backing(&s->status, ext)) {
        /* Provided by the target's backing file: nothing to copy. */
        *method = MIRROR_METHOD_SKIP;
    } else {
        *method = MIRROR_METHOD_ZERO;
    }
    if (n < g) {
        /* Status changes inside this granule: copy the whole granule. */
        *method = MIRROR_METHOD_COPY;
        n = MIN(g, len - offset);
    }
    if (*method == MIRROR_METHOD_COPY) {
        n = MIN(n, MAX(s->cfg.chunk_size, g));
    } else {
        n = MIN(n, MIRROR_MAX_ZERO_BYTES);
    }
    *max_bytes = n;
    return true;
}

bool mirror_issue_one(MirrorJob *s)
{
    int64_t g = s->cfg.granularity;
    MirrorMethod method;
    int64_t offset, run_end, busy, max_bytes, bytes;
    uint8_t *buf = NULL;

    offset = mirror_next_candidate(s);
    if (offset < 0 || !mirror_plan(s, offset, &method, &max_bytes)) {
        return false;
    }

    /* Coalesce consecutive dirty granules that no operation covers. */
    run_end = dirty_bitmap_next_clean(s->track.dirty, offset);
    busy = hbitmap_next_dirty(s->track.in_flight, offset, UINT64_MAX);
    if (busy >= 0 && busy < run_end) {
        run_end = busy;
    }
    bytes = MIN(run_end - offset, max_bytes);

    if (method == MIRROR_METHOD_ZERO &&
        mirror_target_known_zero(s, offset, bytes)) {
        method = MIRROR_METHOD_SKIP;
    }
    if (method == MIRROR_METHOD_COPY) {
        bytes = mirror_window_fit(&s->win, bytes);
        if (bytes == 0 ||
            !mirror_window_slot_get(&s->win,
                                    mirror_copy_wants_buf(&s->copy, bytes),
                                    &buf)) {
            return false;
        }
        if (s->plan.owner->rate_limited(s, bytes)) {
            mirror_window_slot_put(&s->win, buf);
            return false;
        }
    }
    g_assert(bytes > 0);
    g_assert(QEMU_IS_ALIGNED(offset, g));
    g_assert(QEMU_IS_ALIGNED(bytes, g) || offset + bytes == s->cfg.len);

    /* Clear before reading: a write racing with the copy dirties again. */
    dirty_bitmap_reset(s->track.dirty, offset, bytes);
    s->plan.cursor = offset + bytes;

    if (method == MIRROR_METHOD_SKIP) {
        mirror_op_skip(s, bytes);
        mirror_state_clean(s->track.state, s->track.dirty, offset, bytes);
        return true;
    }
    mirror_op_start(s, method, offset, bytes, buf);
    return true;
}
