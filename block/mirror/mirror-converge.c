/*
 * Auto-converge: in background mode a guest that writes faster than the
 * job copies keeps the job from ever reaching READY (QEMU's users asked
 * for a way out).  Twice a second the job compares how fast guests write
 * (whole granules, whether they were dirty already or not, as QEMU's RAM
 * auto-converge counts the pages dirtied in a period) with how fast it
 * cleans them.  The newly dirtied bytes would not do: once everything a
 * fast writer touches is dirty, bytes get newly dirtied only as fast as
 * the job cleans them, and the writer never looks ahead.  When writers
 * have stayed ahead for auto-converge-ms, or the copy has wrapped around
 * the disk auto-converge-passes times and still has work, the job
 * switches itself to write-blocking (guest writes are then mirrored
 * synchronously, so the dirty set can only shrink) and says so with a
 * MIRROR_COPY_MODE_CHANGED event.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"

#define MIRROR_CONVERGE_CHECK_NS        (500 * 1000 * 1000LL)

static void mirror_converge_switch(MirrorJob *s, const char *reason)
{
    JobEvent ev = { .type = JOB_EVENT_COPY_MODE, .reason = reason };
    g_autoptr(GError) err = NULL;

    if (!mirror_change_copy_mode(&s->common, MIRROR_COPY_MODE_WRITE_BLOCKING,
                                 &err)) {
        g_debug("auto-converge: %s", err->message);
        return;
    }
    g_debug("auto-converge: write-blocking now (%s)", reason);
    job_emit(&s->common, &ev);
}

static gboolean mirror_converge_check(gpointer opaque)
{
    MirrorJob *s = opaque;
    int64_t now = clock_ns();
    double write_rate = rate_meter_get(&s->write_rate, now);
    double copy_rate = rate_meter_get(&s->copy_rate, now);
    bool work_left = dirty_bitmap_count(s->dirty) > 0;

    if (!s->auto_converge ||
        s->copy_mode != MIRROR_COPY_MODE_BACKGROUND || s->finished) {
        s->behind_since_ns = 0;
        return G_SOURCE_CONTINUE;
    }
    if (work_left && s->auto_converge_passes &&
        s->passes >= s->auto_converge_passes) {
        mirror_converge_switch(s, "passes");
        return G_SOURCE_CONTINUE;
    }
    if (!work_left || write_rate < copy_rate) {
        s->behind_since_ns = 0;
    } else if (!s->behind_since_ns) {
        s->behind_since_ns = now;
    } else if (now - s->behind_since_ns >= s->auto_converge_ms * 1000000) {
        mirror_converge_switch(s, "dirty-rate");
    }
    return G_SOURCE_CONTINUE;
}

void mirror_converge_start(MirrorJob *s)
{
    if (!s->auto_converge_ms) {
        s->auto_converge_ms = MIRROR_CONVERGE_DEFAULT_MS;
    }
    if (!s->converge_timer) {
        s->converge_timer = g_timeout_source_new(
            MIRROR_CONVERGE_CHECK_NS / 1000000);
        g_source_set_callback(s->converge_timer, mirror_converge_check, s,
                              NULL);
        g_source_attach(s->converge_timer,
                        g_main_context_get_thread_default());
    }
}

void mirror_converge_stop(MirrorJob *s)
{
    if (s->converge_timer) {
        g_source_destroy(s->converge_timer);
        g_source_unref(s->converge_timer);
        s->converge_timer = NULL;
    }
}

/* QEMU's wording for a parameter outside [@min, @max]. */
static bool mirror_check_range(const char *name, int64_t v, int64_t min,
                               int64_t max, GError **errp)
{
    if (v < min || v > max) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter '%s' expects a value in range "
                    "[%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", name, min,
                    max);
        return false;
    }
    return true;
}

bool mirror_check_converge_ms(int64_t ms, GError **errp)
{
    return mirror_check_range("auto-converge-ms", ms, 1,
                              MIRROR_CONVERGE_MAX_MS, errp);
}

bool mirror_check_converge_passes(int64_t passes, GError **errp)
{
    return mirror_check_range("auto-converge-passes", passes, 0,
                              MIRROR_CONVERGE_MAX_PASSES, errp);
}

void mirror_set_auto_converge(Job *job, int on, int64_t after_ms,
                              int64_t passes)
{
    MirrorJob *s = container_of(job, MirrorJob, common);

    if (on >= 0) {
        s->auto_converge = on;
    }
    if (after_ms >= 0) {
        g_assert(after_ms >= 1 && after_ms <= MIRROR_CONVERGE_MAX_MS);
        s->auto_converge_ms = after_ms;
    }
    if (passes >= 0) {
        s->auto_converge_passes = passes;
    }
    s->behind_since_ns = 0;
}
