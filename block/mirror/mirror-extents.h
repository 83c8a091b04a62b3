/*
 * A set of byte ranges kept as sorted, disjoint, non-adjacent extents:
 * the known-good set of a state file (mirror-state.h) and its pending
 * parts.  Small for a mostly-good or mostly-bad disk whatever its size
 * (a bulk copy in ascending order is one extent), independent of the
 * dirty bitmap's layout.  Adding and removing a range is a binary search
 * plus a move of the extents after it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_EXTENTS_H
#define BLOCK_MIRROR_EXTENTS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct MirrorExtent {
    int64_t start;
    int64_t end;                /* exclusive; > start */
} MirrorExtent;

typedef struct MirrorExtents {
    GArray *a;                  /* MirrorExtent, sorted by start */
    int64_t bytes;              /* total length */
} MirrorExtents;

/* An empty set; mirror_extents_destroy() frees it. */
void mirror_extents_init(MirrorExtents *e);
void mirror_extents_destroy(MirrorExtents *e);

/* Remove everything. */
void mirror_extents_clear(MirrorExtents *e);

/* Add [start, end) (nothing when end <= start); touching extents merge. */
void mirror_extents_add(MirrorExtents *e, int64_t start, int64_t end);

/* Remove [start, end) (nothing when end <= start). */
void mirror_extents_remove(MirrorExtents *e, int64_t start, int64_t end);

/* Does any extent overlap [start, end)? */
bool mirror_extents_intersects(const MirrorExtents *e, int64_t start,
                               int64_t end);

/* The index of the first extent ending after @pos (the count if none). */
guint mirror_extents_first_after(const MirrorExtents *e, int64_t pos);

/* @dst becomes a copy of @src. */
void mirror_extents_copy(MirrorExtents *dst, const MirrorExtents *src);

/* Add every extent of @src to @dst. */
void mirror_extents_union(MirrorExtents *dst, const MirrorExtents *src);

/* Exchange the contents of @a and @b. */
void mirror_extents_swap(MirrorExtents *a, MirrorExtents *b);

/* Heap bytes the extents take now (their count: what grows). */
size_t mirror_extents_memory(const MirrorExtents *e);

static inline guint mirror_extents_count(const MirrorExtents *e)
{
    return e->a->len;
}

static inline const MirrorExtent *mirror_extents_get(const MirrorExtents *e,
                                                     guint i)
{
    return &g_array_index(e->a, MirrorExtent, i);
}

#endif /* BLOCK_MIRROR_EXTENTS_H */
