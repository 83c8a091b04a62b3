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
 * the disk auto-converge-passes times and still has work, the owner is
 * told to switch to write-blocking (guest writes are then mirrored
 * synchronously, so the dirty set can only shrink).
 *
 * A leaf: it owns its settings, the guests' write rate and its timer; it
 * learns the rest from its owner through MirrorConvergeOwner.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_CONVERGE_H
#define BLOCK_MIRROR_CONVERGE_H

#include "util/rate-meter.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/* What the owner tells auto-converge at each check. */
typedef struct MirrorConvergeSample {
    bool background;            /* background mode, job not finished */
    bool work_left;             /* something is dirty */
    uint64_t passes;            /* times the copy wrapped around */
    double copy_rate;           /* bytes/s made clean */
} MirrorConvergeSample;

typedef struct MirrorConvergeOwner {
    /* Fill in @sample as of @now_ns (clock_ns()). */
    void (*sample)(void *opaque, int64_t now_ns,
                   MirrorConvergeSample *sample);
    /* Switch to write-blocking, because of @reason ("passes",
     * "dirty-rate"); may fail (the owner says why). */
    void (*switch_mode)(void *opaque, const char *reason);
} MirrorConvergeOwner;

typedef struct MirrorConverge {
    const MirrorConvergeOwner *owner;
    void *opaque;
    bool on;
    int64_t after_ms;           /* writers ahead this long: switch */
    uint64_t passes;            /* this many passes: switch (0: never) */
    int64_t behind_since_ns;    /* writers outpace us since, or 0 */
    RateMeter write_rate;       /* granules guests wrote, dirty or not */
    GSource *timer;
} MirrorConverge;

/* Set @c up from the job's parameters (@after_ms 0: the default). */
void mirror_converge_init(MirrorConverge *c, bool on, int64_t after_ms,
                          uint64_t passes, const MirrorConvergeOwner *owner,
                          void *opaque);

/* Start watching (the job started); stop (it finished, or is freed). */
void mirror_converge_start(MirrorConverge *c);
void mirror_converge_stop(MirrorConverge *c);

/* Guests wrote @bytes (whole granules). */
void mirror_converge_note_write(MirrorConverge *c, int64_t bytes);

/* As mirror_set_auto_converge(): negative values leave a setting. */
void mirror_converge_set(MirrorConverge *c, int on, int64_t after_ms,
                         int64_t passes);

#endif /* BLOCK_MIRROR_CONVERGE_H */
