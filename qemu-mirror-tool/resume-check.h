/*
 * The spot check of a resumed --state-file: before a resumed job writes
 * anything, a sample of the granules the state calls known good is read
 * from the source and the target and compared.  In a known-good granule
 * the target equals the source (guest writes to the source dirty their
 * granules durably before they are acknowledged), so a difference means
 * the target was changed or made anew since the state was written (an
 * image made again with the same inode and size, a `truncate` or
 * `qemu-img create` over it): resuming would leave it wrong.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef RESUME_CHECK_H
#define RESUME_CHECK_H

#include "block/block.h"
#include "block/mirror/mirror-state.h"

/* How many known-good granules the check compares at most. */
#define RESUME_CHECK_GRANULES       64
/* Bytes compared of one granule at most (granules may be up to 64 MiB). */
#define RESUME_CHECK_MAX_BYTES      (1024 * 1024)

/*
 * Compare up to RESUME_CHECK_GRANULES granules (of @granularity bytes)
 * spread over @good, preferring those where @src has data (block
 * status), between @src and @dst; the reads run on the main loop, all
 * at once.  0: all equal.  1: one differs, *@differs its offset.  < 0:
 * a read failed (-errno, @errp set).
 */
int resume_check(BlockDriverState *src, BlockDriverState *dst,
                 const MirrorExtents *good, int64_t granularity,
                 int64_t *differs, GError **errp);

#endif /* RESUME_CHECK_H */
