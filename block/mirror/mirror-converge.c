/*
 * Auto-converge (see mirror-converge.h), and the ranges of its
 * parameters (mirror.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-converge.h"
#include "block/mirror/mirror.h"
#include "util/cutils.h"

#define MIRROR_CONVERGE_CHECK_NS        (500 * 1000 * 1000LL)

static gboolean mirror_converge_check(gpointer opaque)
{
    MirrorConverge *c = opaque;
    int64_t now = clock_ns();
    double write_rate = rate_meter_get(&c->write_rate, now);
    MirrorConvergeSample s;

    c->owner->sample(c->opaque, now, &s);
    if (!c->on || !s.background) {
        c->behind_since_ns = 0;
        return G_SOURCE_CONTINUE;
    }
    if (s.work_left && c->passes && s.passes >= c->passes) {
        c->owner->switch_mode(c->opaque, "passes");
        return G_SOURCE_CONTINUE;
    }
    if (!s.work_left || write_rate < s.copy_rate) {
        c->behind_since_ns = 0;
    } else if (!c->behind_since_ns) {
        c->behind_since_ns = now;
    } else if (now - c->behind_since_ns >= c->after_ms * 1000000) {
        c->owner->switch_mode(c->opaque, "dirty-rate");
    }
    return G_SOURCE_CONTINUE;
}

void mirror_converge_init(MirrorConverge *c, bool on, int64_t after_ms,
                          uint64_t passes, const MirrorConvergeOwner *owner,
                          void *opaque)
{
    *c = (MirrorConverge) {
        .owner = owner,
        .opaque = opaque,
        .on = on,
        .after_ms = after_ms ? after_ms : MIRROR_CONVERGE_DEFAULT_MS,
        .passes = passes,
    };
}

void mirror_converge_start(MirrorConverge *c)
{
    rate_meter_reset(&c->write_rate, clock_ns());
    if (!c->timer) {
        c->timer = g_timeout_source_new(MIRROR_CONVERGE_CHECK_NS / 1000000);
        g_source_set_callback(c->timer, mirror_converge_check, c, NULL);
        g_source_attach(c->timer, g_main_context_get_thread_default());
    }
}

void mirror_converge_stop(MirrorConverge *c)
{
    if (c->timer) {
        g_source_destroy(c->timer);
        g_source_unref(c->timer);
        c->timer = NULL;
    }
}

void mirror_converge_note_write(MirrorConverge *c, int64_t bytes)
{
    rate_meter_add(&c->write_rate, clock_ns(), bytes);
}

void mirror_converge_set(MirrorConverge *c, int on, int64_t after_ms,
                         int64_t passes)
{
    if (on >= 0) {
        c->on = on;
    }
    if (after_ms >= 0) {
        g_assert(after_ms >= 1 && after_ms <= MIRROR_CONVERGE_MAX_MS);
        c->after_ms = after_ms;
    }
    if (passes >= 0) {
        c->passes = passes;
    }
    c->behind_since_ns = 0;
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
