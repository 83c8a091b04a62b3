/*
 * Write-blocking mode: guest writes that the mirror-top filter hands to
 * the job are written to the source and then, with the same buffer, to
 * the target, before the guest hears back (QEMU's active mirror).  The
 * filter reaches the job core through MirrorTopOwner (mirror-top.h),
 * which forwards the writes here.
 *
 * An active write first waits until no operation overlaps the granules it
 * touches (and keeps background operations off them meanwhile), so the
 * target never receives an older copy after the newer data.  Granules it
 * covers completely become clean; a partly covered granule that is dirty
 * is left to the background copy (clearing it would lose the rest of it).
 * A failed target write dirties the range again and goes to the owner's
 * error policy; the guest gets the source write's result.
 *
 * A leaf: it uses the job's bitmaps (mirror-track.h) and block status
 * cache (mirror-status.h) through their functions, and calls its owner
 * back through MirrorActiveOwner.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_ACTIVE_H
#define BLOCK_MIRROR_ACTIVE_H

#include "block/block.h"
#include "block/mirror/mirror-status.h"
#include "block/mirror/mirror-track.h"
#include "block/mirror/mirror.h"

/* The job, as the active path calls it back; all on the main loop. */
typedef struct MirrorActiveOwner {
    /* A write to the target starts (the next flush has work). */
    void (*target_write)(void *opaque);
    /* The target write of [offset, offset + bytes) failed with @ret; the
     * range is dirty again: apply the error policy. */
    void (*target_failed)(void *opaque, int ret, int64_t offset,
                          int64_t bytes);
    /* An active write ended: the job may go on (pump). */
    void (*settled)(void *opaque);
} MirrorActiveOwner;

/* The active writes of a job: mirror-active.c only. */
typedef struct MirrorActive {
    /* Fixed at mirror_active_init(). */
    BlockDriverState *src;
    BlockDriverState *dst;
    int64_t granularity;
    int64_t len;
    MirrorTrack *track;
    MirrorStatus *status;
    const MirrorActiveOwner *owner;
    void *opaque;

    GQueue waiting;             /* MirrorActiveOp waiting for overlaps */
    GQueue running;             /* MirrorActiveOp running */
    int in_flight;              /* both of the above */
    bool synced;                /* write-blocking and in sync */
    int64_t bytes;              /* bytes guests wrote to the target */
} MirrorActive;

/* Set @a up for mirroring @src (@len bytes, in granules of @granularity)
 * onto @dst; @track's bitmaps exist once the job started. */
void mirror_active_init(MirrorActive *a, BlockDriverState *src,
                        BlockDriverState *dst, int64_t granularity,
                        int64_t len, MirrorTrack *track,
                        MirrorStatus *status, const MirrorActiveOwner *owner,
                        void *opaque);

/*
 * A guest write, as MirrorTopOwner.write (mirror-top.h): written to the
 * source, then (same @buf, unchanged until @cb runs) to the target; @cb
 * gets the source write's result.  Only while the job is write-blocking.
 */
void mirror_active_submit(MirrorActive *a, MirrorWriteKind kind,
                          int64_t offset, int64_t bytes, const void *buf,
                          BdrvRequestFlags flags, BlockCompletionFunc *cb,
                          void *opaque);

/* Active writes waiting (background operations then wait too, or they
 * would keep them waiting for ever under load)? */
bool mirror_active_has_waiting(const MirrorActive *a);

/* Active writes in flight, waiting or running. */
int mirror_active_in_flight(const MirrorActive *a);

/* Start the waiting active writes that no longer overlap anything (an
 * operation retired). */
void mirror_active_start_waiting(MirrorActive *a);

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
