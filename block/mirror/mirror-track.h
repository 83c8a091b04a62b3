/*
 * What the mirror job has left to copy and what is being copied: its
 * bitmaps, created when the job starts (mirror.c) and shared by the
 * parts that plan, run and block on operations through the bitmaps' own
 * functions (dirty-bitmap.h, util/hbitmap.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_TRACK_H
#define BLOCK_MIRROR_TRACK_H

#include "block/mirror/dirty-bitmap.h"
#include "block/mirror/mirror-extents.h"
#include "block/mirror/mirror-state.h"
#include "block/mirror/mirror-zero.h"
#include "util/hbitmap.h"

typedef struct MirrorTrack {
    DirtyBitmap *dirty;         /* granules to copy; NULL until the job
                                 * starts */
    HBitmap *in_flight;         /* granules covered by an operation or an
                                 * active write: no other may start there */
    MirrorZero zero;            /* what reads as zero on the target
                                 * (mirror-zero.h) */
    MirrorState *state;         /* --state-file: told what becomes clean
                                 * (mirror-state.h), or NULL */
    /*
     * Target ranges whose write completed but that no successful flush
     * covers yet: a server that dies may lose them although it
     * acknowledged them, so a reconnect of the target makes them dirty
     * again (mirror.c).  Whoever writes the target adds what it wrote
     * once the write completed (mirror-op.c, mirror-active.c); mirror.c
     * moves them to @flushing when a flush begins and drops them when
     * it succeeded without a reconnect in between.
     */
    MirrorExtents unflushed;
    MirrorExtents flushing;     /* completed before the flush in flight
                                 * began */
} MirrorTrack;

#endif /* BLOCK_MIRROR_TRACK_H */
