/*
 * The mirror job's view of its nodes' links (block.h, "Node events"): a
 * source or target that lost its server and reconnects holds the job's
 * requests meanwhile; the job says so (MirrorStats.reconnecting,
 * JOB_EVENT_RECONNECTING), is told when the target is back (writes the
 * old server acknowledged but had not flushed may be lost: the job copies
 * them again), and flushes the target again after a reconnect before it
 * claims READY or completes.  The job's writes in flight when the target
 * lost its connection are not among those copied again: the node sends
 * them again after its first flush, and they join the writes no flush
 * covers as they complete, like any other.
 *
 * A leaf: it knows the two nodes and the job it emits events for.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_LINK_H
#define BLOCK_MIRROR_LINK_H

#include "block/block.h"
#include "block/mirror/job.h"

typedef struct MirrorLink {
    Job *job;
    BlockDriverState *src;
    BlockDriverState *dst;
    bool listening;
    void (*reconnected)(void *opaque);
    void *opaque;
    uint64_t flush_gen;         /* dst reconnects when the flush in flight
                                 * began */
    uint64_t flushed_gen;       /* ... when the last successful one began */
} MirrorLink;

/*
 * Listen to @src's and @dst's node events for @job: each start and end of
 * a reconnect becomes a JOB_EVENT_RECONNECTING; when @dst reconnected,
 * @reconnected(@opaque) runs first, from the node's event (block.h: it
 * must not submit requests to the node).  The target counts as flushed
 * as it is now.
 */
void mirror_link_start(MirrorLink *l, Job *job, BlockDriverState *src,
                       BlockDriverState *dst,
                       void (*reconnected)(void *opaque), void *opaque);

/* Stop listening (idempotent; before the nodes go). */
void mirror_link_stop(MirrorLink *l);

/* Is the source or the target reconnecting now? */
bool mirror_link_reconnecting(const MirrorLink *l);

/* A flush of the target begins. */
void mirror_link_flush_begin(MirrorLink *l);

/*
 * It succeeded: true when the target did not reconnect meanwhile (the
 * flush covers what it holds); false: another flush is needed.
 */
bool mirror_link_flush_done(MirrorLink *l);

/*
 * Did the target reconnect since the last successful flush began?  Then
 * another flush must succeed before READY or completion.
 */
bool mirror_link_flush_stale(const MirrorLink *l);

#endif /* BLOCK_MIRROR_LINK_H */
