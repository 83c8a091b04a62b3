/*
 * Choosing the mirror job's next operation (mirror-plan.c): the first
 * dirty granule at or after the cursor that no operation covers, what the
 * source's block status says is there, and how far it may coalesce
 * within the size caps, the window's byte budget and the speed limit.
 * Included by the core, setup and the planner only; its state is in
 * mirror-plan-state.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_PLAN_H
#define BLOCK_MIRROR_PLAN_H

#include "block/mirror/mirror-plan-state.h"

#include <stdbool.h>
#include <stdint.h>

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
