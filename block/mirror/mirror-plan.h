/*
 * Choosing the mirror job's next operation (mirror-plan.c): the first
 * dirty granule at or after the cursor that no operation covers, what the
 * source's block status says is there, and how far it may coalesce
 * within the size caps, the window's byte budget and the speed limit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_PLAN_H
#define BLOCK_MIRROR_PLAN_H

#include <stdbool.h>
#include <stdint.h>

typedef struct MirrorJob MirrorJob;

/*
 * The job's core, as the planner calls it; on the main loop.  The core
 * fills it in (mirror-core.h); the planner calls nothing of the core but
 * this.
 */
typedef struct MirrorPlanOwner {
    /* A COPY of @bytes is about to start: true when the speed limit holds
     * it back (the core pumps again once it may start), false when it may
     * start now (the bytes are counted against the limit). */
    bool (*rate_limited)(MirrorJob *s, int64_t bytes);
} MirrorPlanOwner;

/* Where the planner is: mirror-plan.c only. */
typedef struct MirrorPlan {
    const MirrorPlanOwner *owner;
    int64_t cursor;             /* where the next pass resumes */
    uint64_t passes;            /* times the cursor wrapped around */
} MirrorPlan;

/* Set up @s's planner; @owner: the core, called as MirrorPlanOwner
 * says. */
void mirror_plan_init(MirrorJob *s, const MirrorPlanOwner *owner);

/*
 * Start one operation (or skip one known-zero range).  Returns false when
 * nothing more can start now; a completion, the rate timer or the block
 * status fetch it started will pump again.
 */
bool mirror_issue_one(MirrorJob *s);

/* Times the cursor wrapped around. */
uint64_t mirror_plan_passes(MirrorJob *s);

#endif /* BLOCK_MIRROR_PLAN_H */
