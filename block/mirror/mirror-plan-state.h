/*
 * The mirror planner's state and its owner interface (mirror-plan.c
 * writes the state; the core fills in the owner).  Apart from
 * mirror-plan.h so that MirrorJob (mirror-int.h) can embed the state
 * while only the core and setup see the planner's functions: an
 * operation (mirror-op.c) cannot call back up into the planner.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_PLAN_STATE_H
#define BLOCK_MIRROR_PLAN_STATE_H

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

#endif /* BLOCK_MIRROR_PLAN_STATE_H */
