/*
 * What the mirror job knows reads as zero on the target: the whole
 * target at first when it started out zero (created, or the user said
 * so), less what has been written since.
 *
 * The knowledge is kept only ahead of a frontier that the planner moves
 * forward (mirror_zero_drop_before(): the first pass's cursor): behind
 * it the first pass has written or skipped everything, and what a later
 * pass would gain from it (a skipped zero write) is not worth a bitmap
 * that data scattered all over the disk fragments into a run per
 * extent.  So its size follows what was written ahead of the cursor
 * (guest writes in write-blocking mode), not the layout of the source;
 * past MIRROR_ZERO_MAX_MEMORY it is dropped altogether.  Dropping
 * knowledge is always safe: it only costs a zero write later.
 *
 * A leaf over util/hbitmap, with the job's granularity.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_ZERO_H
#define BLOCK_MIRROR_ZERO_H

#include "util/hbitmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Heap the knowledge may hold; beyond, it is dropped (see above). */
#define MIRROR_ZERO_MAX_MEMORY  (256 * 1024)

typedef struct MirrorZero {
    HBitmap *hb;                /* granules known zero; NULL: none */
    int64_t from;               /* nothing is known before this */
    int64_t len;
    uint64_t visits_dropped;    /* by the bitmap before it was dropped */
} MirrorZero;

/*
 * Set up @z over @len bytes in granules of @granularity: all known zero
 * when @known, else nothing known (and nothing allocated).
 */
void mirror_zero_init(MirrorZero *z, int64_t len, int64_t granularity,
                      bool known);

/* Free what @z holds; then nothing is known. */
void mirror_zero_destroy(MirrorZero *z);

/*
 * The bytes from @offset (granule aligned) known to read as zero,
 * contiguously, up to @bytes: 0 when @offset is not known zero, @bytes
 * when all of them are.  Bounded by @bytes.
 */
int64_t mirror_zero_run(const MirrorZero *z, int64_t offset, int64_t bytes);

/* The first offset in [offset, offset + bytes) known zero, or -1. */
int64_t mirror_zero_next(const MirrorZero *z, int64_t offset, int64_t bytes);

/* Are all of [offset, offset + bytes) known zero? */
bool mirror_zero_covers(const MirrorZero *z, int64_t offset, int64_t bytes);

/* [offset, offset + bytes) may not read as zero any more (it is about to
 * be written, or a write to it may have been lost). */
void mirror_zero_written(MirrorZero *z, int64_t offset, int64_t bytes);

/* [offset, offset + bytes) (whole granules) reads as zero now; kept only
 * at or after the frontier. */
void mirror_zero_zeroed(MirrorZero *z, int64_t offset, int64_t bytes);

/* Heap bytes held now, and bitmap nodes visited so far, also by the
 * bitmaps dropped since (util/hbitmap.h). */
size_t mirror_zero_memory(const MirrorZero *z);
uint64_t mirror_zero_visits(const MirrorZero *z);

/* Forget what is known before @pos (the frontier only moves forward);
 * at the end of the image, everything. */
void mirror_zero_drop_before(MirrorZero *z, int64_t pos);

#endif /* BLOCK_MIRROR_ZERO_H */
