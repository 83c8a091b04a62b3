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
                                         limit - off);
            off = busy_end < 0 ? limit : busy_end;
        }
    }
    return -1;
}

/* The most one more ZERO operation may cover now (mirror-op.h). */
static int64_t mirror_zero_cap(MirrorJob *s)
{
    int64_t room = MIRROR_MAX_ZERO_IN_FLIGHT - mirror_ops_zero_in_flight(s);

    bool guests = s->copy_mode == MIRROR_COPY_MODE_WRITE_BLOCKING || s->top;

    return MIN(room, guests ? MIRROR_ACTIVE_MAX_ZERO_BYTES
                            : MIRROR_MAX_ZERO_BYTES);
}

/*
 * What to do with the @n bytes at @offset that the source reads as
 * zero: SKIP what the target is known to read as zero, in one step
 * however long, else ZERO up to where it is known zero again, within
 * the zero caps.  False when the zeroes in flight leave no room (a
 * completion pumps again).
 */
static bool mirror_plan_zero(MirrorJob *s, int64_t offset, int64_t n,
                             MirrorMethod *method, int64_t *max_bytes)
{
    int64_t g = s->cfg.granularity;
    int64_t run = mirror_zero_run(&s->track.zero, offset, n);
    int64_t cap, known;

    if (run > 0) {
        *method = MIRROR_METHOD_SKIP;
        *max_bytes = run;
        return true;
    }
    known = mirror_zero_next(&s->track.zero, offset, n);
    if (known > offset) {
        n = known - offset;
    }
    cap = mirror_zero_cap(s);
    if (n > cap) {
        n = QEMU_ALIGN_DOWN(cap, g);
        if (n <= 0) {
            return false;
        }
    }
    *method = MIRROR_METHOD_ZERO;
    *max_bytes = n;
    return true;
}

/*
 * Decide what to do at @offset: the method and the largest length allowed
 * by the source's block status and the size caps.  Returns false when
 * nothing may start there now: the block status is not known yet (a
 * fetch was started), or the zero caps are reached.
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
    mirror_status_read_ahead(&s->status);
    ext_end = ext->offset + ext->length;
    n = ext_end >= len ? len - offset : QEMU_ALIGN_DOWN(ext_end - offset, g);

    if (n < g || mirror_status_copies(&s->status, ext)) {
        /* Data, or status that changes inside this granule: copy (the
         * whole granule). */
        *method = MIRROR_METHOD_COPY;
        *max_bytes = n < g ? MIN(g, len - offset)
                           : MIN(n, MAX(s->cfg.chunk_size, g));
        return true;
    }
    if (mirror_status_from_backing(&s->status, ext)) {
        /* Provided by the target's backing file: nothing to copy, in one
         * step for the whole extent. */
        *method = MIRROR_METHOD_SKIP;
        *max_bytes = n;
        return true;
    }
    return mirror_plan_zero(s, offset, n, method, max_bytes);
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

    /*
     * Coalesce consecutive dirty granules that no operation covers, up
     * to what the plan allows: each search is bounded by that, so an
     * operation costs what it covers, not what lies beyond.
     */
    run_end = dirty_bitmap_next_clean(s->track.dirty, offset, max_bytes);
    busy = hbitmap_next_dirty(s->track.in_flight, offset, run_end - offset);
    if (busy >= 0) {
        run_end = busy;     /* > offset: the candidate is not in flight */
    }
    bytes = run_end - offset;
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
        mirror_state_clean_zero(s->track.state, s->track.dirty, offset,
                                bytes);
    } else {
        mirror_op_start(s, method, offset, bytes, buf);
    }
    /* The first pass is past this: what it knew of zeroes there is of
     * little use now (mirror-zero.h). */
    mirror_zero_drop_before(&s->track.zero, s->plan.cursor);
    return true;
}
