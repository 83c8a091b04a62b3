/*
 * A set of byte ranges as sorted extents (see mirror-extents.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-extents.h"

void mirror_extents_init(MirrorExtents *e)
{
    e->a = g_array_new(FALSE, FALSE, sizeof(MirrorExtent));
    e->bytes = 0;
}

void mirror_extents_destroy(MirrorExtents *e)
{
    if (e->a) {
        g_array_free(e->a, TRUE);
        e->a = NULL;
    }
    e->bytes = 0;
}

void mirror_extents_clear(MirrorExtents *e)
{
    g_array_set_size(e->a, 0);
    e->bytes = 0;
}

/* The first index whose extent ends at or after @pos (@strict: after). */
static guint mirror_extents_find(const MirrorExtents *e, int64_t pos,
                                 bool strict)
{
    guint lo = 0, hi = e->a->len;

    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;
        int64_t end = mirror_extents_get(e, mid)->end;

        if (strict ? end > pos : end >= pos) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

/* Replace extents [i, j) with the @n extents at @with. */
static void mirror_extents_splice(MirrorExtents *e, guint i, guint j,
                                  const MirrorExtent *with, guint n)
{
    for (guint k = i; k < j; k++) {
        const MirrorExtent *x = mirror_extents_get(e, k);

        e->bytes -= x->end - x->start;
    }
    for (guint k = 0; k < n; k++) {
        e->bytes += with[k].end - with[k].start;
    }
    if (j > i) {
        g_array_remove_range(e->a, i, j - i);
    }
    if (n) {
        g_array_insert_vals(e->a, i, with, n);
    }
}

void mirror_extents_add(MirrorExtents *e, int64_t start, int64_t end)
{
    MirrorExtent m = { start, end };
    guint i, j;

    if (end <= start) {
        return;
    }
    /* Fast path: appending after the last extent (a bulk copy). */
    if (e->a->len) {
        MirrorExtent *last = &g_array_index(e->a, MirrorExtent,
                                            e->a->len - 1);

        if (start >= last->start && start <= last->end) {
            if (end > last->end) {
                e->bytes += end - last->end;
                last->end = end;
            }
            return;
        }
    }
    /* Extents [i, j) overlap or touch [start, end). */
    i = mirror_extents_find(e, start, false);
    j = i;
    while (j < e->a->len && mirror_extents_get(e, j)->start <= end) {
        j++;
    }
    if (j > i) {
        m.start = MIN(m.start, mirror_extents_get(e, i)->start);
        m.end = MAX(m.end, mirror_extents_get(e, j - 1)->end);
    }
    mirror_extents_splice(e, i, j, &m, 1);
}

void mirror_extents_remove(MirrorExtents *e, int64_t start, int64_t end)
{
    MirrorExtent keep[2];
    guint i, j, n = 0;

    if (end <= start) {
        return;
    }
    /* Extents [i, j) overlap [start, end). */
    i = mirror_extents_find(e, start, true);
    j = i;
    while (j < e->a->len && mirror_extents_get(e, j)->start < end) {
        j++;
    }
    if (j == i) {
        return;
    }
    if (mirror_extents_get(e, i)->start < start) {
        keep[n++] = (MirrorExtent) { mirror_extents_get(e, i)->start, start };
    }
    if (mirror_extents_get(e, j - 1)->end > end) {
        keep[n++] = (MirrorExtent) { end, mirror_extents_get(e, j - 1)->end };
    }
    mirror_extents_splice(e, i, j, keep, n);
}

bool mirror_extents_intersects(const MirrorExtents *e, int64_t start,
                               int64_t end)
{
    guint i;

    if (end <= start) {
        return false;
    }
    i = mirror_extents_find(e, start, true);
    return i < e->a->len && mirror_extents_get(e, i)->start < end;
}

guint mirror_extents_first_after(const MirrorExtents *e, int64_t pos)
{
    return mirror_extents_find(e, pos, true);
}

void mirror_extents_copy(MirrorExtents *dst, const MirrorExtents *src)
{
    g_array_set_size(dst->a, 0);
    g_array_append_vals(dst->a, src->a->data, src->a->len);
    dst->bytes = src->bytes;
}

void mirror_extents_union(MirrorExtents *dst, const MirrorExtents *src)
{
    for (guint i = 0; i < src->a->len; i++) {
        const MirrorExtent *x = mirror_extents_get(src, i);

        mirror_extents_add(dst, x->start, x->end);
    }
}

size_t mirror_extents_memory(const MirrorExtents *e)
{
    return e->a ? e->a->len * sizeof(MirrorExtent) : 0;
}

void mirror_extents_swap(MirrorExtents *a, MirrorExtents *b)
{
    MirrorExtents t = *a;

    *a = *b;
    *b = t;
}
