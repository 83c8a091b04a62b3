/*
 * Write-blocking mode (mirror-active.c): guest writes that the mirror-top
 * filter hands to the job are written to the source and then, with the
 * same buffer, to the target, before the guest hears back (QEMU's active
 * mirror).  The entry points for the filter are in mirror.h
 * (mirror_is_write_blocking(), mirror_active_write()).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_ACTIVE_H
#define BLOCK_MIRROR_ACTIVE_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct MirrorJob MirrorJob;

/* The active writes of a job: mirror-active.c only. */
typedef struct MirrorActive {
    GQueue waiting;             /* MirrorActiveOp waiting for overlaps */
    GQueue running;             /* MirrorActiveOp running */
    int in_flight;              /* both of the above */
    bool synced;                /* write-blocking and in sync */
    int64_t bytes;              /* bytes guests wrote to the target */
} MirrorActive;

void mirror_active_init(MirrorActive *a);

/* Active writes waiting (background operations then wait too, or they
 * would keep them waiting for ever under load)? */
bool mirror_active_has_waiting(const MirrorActive *a);

/* Active writes in flight, waiting or running. */
int mirror_active_in_flight(const MirrorActive *a);

/* Start the waiting active writes that no longer overlap anything. */
void mirror_active_start_waiting(MirrorJob *s);

/* Is [offset, offset + bytes) an active write's own source write (which
 * must not dirty the range)? */
bool mirror_active_is_own_write(const MirrorActive *a, int64_t offset,
                                int64_t bytes);

/* Is the target in sync by write-blocking (query-block-jobs'
 * actively-synced)?  mirror_active_set_synced(): the job says so (true),
 * or something dirtied the source since (false). */
bool mirror_active_synced(const MirrorActive *a);
void mirror_active_set_synced(MirrorActive *a, bool synced);

#endif /* BLOCK_MIRROR_ACTIVE_H */
