/*
 * mirror-top: the filter node that guests use while a mirror job copies
 * what is below it (QEMU's mirror_top).
 *
 * Reads and flushes go to the child.  Writes, write-zeroes and discards go
 * to the child too, and the job learns of them: in background mode from
 * the child's write notifier (the range becomes dirty once the write
 * completed); in write-blocking mode the filter hands them to the job,
 * which writes source and target with the same buffer.  The job can
 * quiesce the filter (new requests wait, in-flight ones finish) and then
 * switch the child to the target: the switch-over.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_TOP_H
#define BLOCK_MIRROR_TOP_H

#include "block/block.h"
#include "block/mirror/job.h"
#include "block/mirror/mirror.h"
#include "block/mirror/mirror-state.h"

/*
 * The mirror job behind the filter, as the filter calls it; on the main
 * loop.  The job hands it over with mirror_top_set_job(); the filter
 * calls nothing else of the job.
 */
typedef struct MirrorTopOwner {
    /* Should guest writes go to @write (write-blocking mode) rather than
     * to the child alone? */
    bool (*write_blocking)(void *opaque);
    /*
     * A guest write in write-blocking mode (only while @write_blocking
     * says so): written to the source, then (same @buf, which stays
     * unchanged until @cb runs) to the target; @cb(@cb_opaque) gets the
     * source write's result.
     */
    void (*write)(void *opaque, MirrorWriteKind kind, int64_t offset,
                  int64_t bytes, const void *buf, BdrvRequestFlags flags,
                  BlockCompletionFunc *cb, void *cb_opaque);
    /*
     * A guest request arrived at the filter at @now_ns (clock_ns());
     * @guest_done gets that back, and its end time, when the request
     * ended (whatever its result), for guest-first (mirror-guest.h).
     * Every request counted by @guest_begin ends with one @guest_done
     * while the owner is set.
     */
    void (*guest_begin)(void *opaque, int64_t now_ns);
    void (*guest_done)(void *opaque, int64_t start_ns, int64_t now_ns,
                       int64_t bytes);
} MirrorTopOwner;

/* A filter over @child (a reference is taken); writable if @child is. */
BlockDriverState *mirror_top_new(BlockDriverState *child, GError **errp);

/* The node guest requests reach now. */
BlockDriverState *mirror_top_child(BlockDriverState *top);

/*
 * Guest writes pass @state's gate (mirror_state_guest_write()) before
 * they go on, from now on (NULL: none).  @state outlives @top.
 */
void mirror_top_set_state(BlockDriverState *top, MirrorState *state);

/* The mirror job that may want write-blocking writes (@owner, called
 * with @opaque), or none (NULL). */
void mirror_top_set_job(BlockDriverState *top, const MirrorTopOwner *owner,
                        void *opaque);

/*
 * Quiesce: from now on new requests wait; @cb(@opaque) runs (later, on
 * the loop) once no request is in flight.  Calls nest.
 */
void mirror_top_drain_begin(BlockDriverState *top, void (*cb)(void *opaque),
                            void *opaque);

/* End a drain: waiting requests go to the (possibly new) child. */
void mirror_top_drain_end(BlockDriverState *top);

/* Replace the child (only while drained); the old one is unref'd. */
void mirror_top_set_child(BlockDriverState *top, BlockDriverState *child);

/* Guest requests in flight through the filter. */
uint64_t mirror_top_in_flight(BlockDriverState *top);

#endif /* BLOCK_MIRROR_TOP_H */
