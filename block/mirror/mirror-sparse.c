/*
 * Sparse detection of the mirror job (see mirror-sparse.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-sparse.h"
#include "util/cutils.h"

#include <string.h>

#define MIRROR_SECTOR   512

/* The largest power of 2 not above @n (n > 0). */
static int64_t mirror_pow2_floor(int64_t n)
{
    return INT64_C(1) << (63 - __builtin_clzll((uint64_t)n));
}

void mirror_sparse_init(MirrorSparse *sp, int64_t size,
                        int64_t request_alignment)
{
    *sp = (MirrorSparse) { .size = size };
    if (size) {
        sp->align = MAX(mirror_pow2_floor(size), request_alignment);
    }
}

/* The 8 bytes at @p, as a word (any alignment). */
static inline uint64_t mirror_word(const uint8_t *p)
{
    uint64_t w;

    memcpy(&w, p, sizeof(w));
    return w;
}

/* Is the sector at @pos (up to @end) all zero?  @base: the data's start
 * (its bytes at @buf). */
static bool mirror_sector_is_zero(const uint8_t *buf, int64_t base,
                                  int64_t pos, int64_t end)
{
    return buffer_is_zero(buf + (pos - base),
                          MIN(pos + MIRROR_SECTOR, end) - pos);
}

/*
 * The run of sectors at @pos (up to @end) that are all zero (*@zero) or
 * all not, its end aligned as in mirror-sparse.h; returns its length.
 */
static int64_t mirror_sparse_alike(const MirrorSparse *sp,
                                   const uint8_t *buf, int64_t base,
                                   int64_t pos, int64_t end, bool *zero)
{
    int64_t align = sp->align;
    bool z = mirror_sector_is_zero(buf, base, pos, end);
    int64_t p = MIN(pos + MIRROR_SECTOR, end);
    int64_t tail;

    /* One check for the common case: all zero to the end. */
    if (z && buffer_is_zero(buf + (p - base), end - p)) {
        p = end;
    }
    for (;;) {
        /* Data: a sector whose first word is not zero is data, no call
         * needed (random data costs one load per sector). */
        while (!z && end - p >= 8 && mirror_word(buf + (p - base))) {
            p += MIRROR_SECTOR;
        }
        if (p >= end || mirror_sector_is_zero(buf, base, p, end) != z) {
            break;
        }
        p += MIRROR_SECTOR;
    }
    *zero = z;
    if (p >= end) {
        return end - pos;
    }
    tail = p % align;
    if (tail) {
        if (z && p - pos <= tail) {
            /* No boundary crossed: rewriting it as data costs nothing
             * more than the write of the data that follows. */
            *zero = z = false;
        }
        p = z ? p - tail : MIN(p - tail + align, end);
    }
    return p - pos;
}

int64_t mirror_sparse_run(const MirrorSparse *sp, const uint8_t *buf,
                          int64_t pos, int64_t end, bool *zero)
{
    int64_t min = MIN(sp->size, end - pos);
    int64_t used = mirror_sparse_alike(sp, buf, pos, pos, end, zero);
    int64_t p = pos + used;

    if (*zero) {
        return used;
    }
    while (p < end) {
        bool z;
        int64_t len = mirror_sparse_alike(sp, buf, pos, p, end, &z);

        p += len;
        if (!z) {
            used = p - pos;
        } else if (len >= min) {
            break;
        }
    }
    return used;
}
