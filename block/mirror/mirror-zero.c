/*
 * What the mirror job knows reads as zero on the target (see
 * mirror-zero.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-zero.h"
#include "util/cutils.h"

void mirror_zero_init(MirrorZero *z, int64_t len, int64_t granularity,
                      bool known)
{
    *z = (MirrorZero) { .len = len, .from = known ? 0 : len };
    if (known) {
        z->hb = hbitmap_new(len, __builtin_ctzll(granularity));
        hbitmap_set_all(z->hb);
    }
}

void mirror_zero_destroy(MirrorZero *z)
{
    if (z->hb) {
        z->visits_dropped += hbitmap_visits(z->hb);
    }
    hbitmap_free(z->hb);
    z->hb = NULL;
    z->from = z->len;
}

int64_t mirror_zero_run(const MirrorZero *z, int64_t offset, int64_t bytes)
{
    int64_t end;

    if (!z->hb || offset < z->from || offset >= z->len || bytes <= 0 ||
        !hbitmap_get(z->hb, offset)) {
        return 0;
    }
    end = hbitmap_next_zero(z->hb, offset, bytes);
    return end < 0 ? MIN(bytes, z->len - offset) : end - offset;
}

int64_t mirror_zero_next(const MirrorZero *z, int64_t offset, int64_t bytes)
{
    int64_t start = MAX(offset, z->from);

    if (!z->hb || offset + bytes <= start) {
        return -1;
    }
    return hbitmap_next_dirty(z->hb, start, offset + bytes - start);
}

bool mirror_zero_covers(const MirrorZero *z, int64_t offset, int64_t bytes)
{
    return bytes > 0 && mirror_zero_run(z, offset, bytes) >= bytes;
}

void mirror_zero_written(MirrorZero *z, int64_t offset, int64_t bytes)
{
    int64_t start = MAX(offset, z->from);

    if (z->hb && offset + bytes > start) {
        hbitmap_reset(z->hb, start, offset + bytes - start);
        if (hbitmap_memory(z->hb) > MIRROR_ZERO_MAX_MEMORY) {
            mirror_zero_destroy(z);
        }
    }
}

void mirror_zero_zeroed(MirrorZero *z, int64_t offset, int64_t bytes)
{
    int64_t start = MAX(offset, z->from);

    if (z->hb && offset + bytes > start) {
        hbitmap_set(z->hb, start, offset + bytes - start);
    }
}

void mirror_zero_drop_before(MirrorZero *z, int64_t pos)
{
    if (!z->hb || pos <= z->from) {
        return;
    }
    if (pos >= z->len) {
        mirror_zero_destroy(z);
        return;
    }
    /* Only what the frontier passed now: the whole drop stays linear in
     * the runs it removes. */
    hbitmap_reset(z->hb, z->from, pos - z->from);
    z->from = pos;
}

size_t mirror_zero_memory(const MirrorZero *z)
{
    return z->hb ? hbitmap_memory(z->hb) : 0;
}

uint64_t mirror_zero_visits(const MirrorZero *z)
{
    return z->visits_dropped + (z->hb ? hbitmap_visits(z->hb) : 0);
}
