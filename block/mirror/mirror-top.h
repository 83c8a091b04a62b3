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

/* A filter over @child (a reference is taken); writable if @child is. */
BlockDriverState *mirror_top_new(BlockDriverState *child, GError **errp);

/* The node guest requests reach now. */
BlockDriverState *mirror_top_child(BlockDriverState *top);

/* The mirror job that wants write-blocking writes, or NULL. */
void mirror_top_set_job(BlockDriverState *top, Job *job);

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
