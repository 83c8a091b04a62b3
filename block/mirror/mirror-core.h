/*
 * The mirror job's core (mirror.c) as setup (mirror-setup.c) sees it: the
 * JobDriver, the owner tables the core fills in for the parts that call
 * it back, and the pump.  Only mirror.c and mirror-setup.c include this
 * header: the planner and the operations reach the core through
 * MirrorPlanOwner and MirrorOpOwner alone, so the engine's calls form a
 * tree (core -> plan -> op -> leaf parts; setup -> core).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_CORE_H
#define BLOCK_MIRROR_CORE_H

#include "block/mirror/mirror-int.h"

/* The JobDriver of mirror jobs. */
extern const JobDriver mirror_job_driver;

/* The core as the owner of the planner, the operations, auto-converge,
 * the active path and guest-first. */
extern const MirrorPlanOwner mirror_plan_owner;
extern const MirrorOpOwner mirror_op_owner;
extern const MirrorConvergeOwner mirror_converge_owner;
extern const MirrorActiveOwner mirror_active_owner;
extern const MirrorGuestOwner mirror_guest_owner;

/* Start operations until a limit is reached, then see whether the job
 * changes state.  Every completion calls it (through the owner tables);
 * setup hands it to the block status cache as its fetched callback. */
void mirror_pump(MirrorJob *s);

#endif /* BLOCK_MIRROR_CORE_H */
