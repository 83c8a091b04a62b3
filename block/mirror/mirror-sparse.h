/*
 * Sparse detection of the mirror job (convert -S): which runs of a COPY's
 * data are written as zeroes.
 *
 * The rules are qemu-img convert's (is_allocated_sectors_min()), an
 * operation standing for one of its buffers.  The data is seen in 512-byte
 * sectors (the image's last one may be shorter).  A run of alike sectors
 * that reaches the end of what is left is taken whole.  Otherwise its end
 * is aligned to the alignment: a data run grows to the next boundary, a
 * zero run shrinks to the last one, and a zero run that crosses no
 * boundary is data.  So an operation all of zeroes is one zero piece
 * whatever -S and the operation's size, zeroes at either end of an
 * operation are zero pieces, and only zero runs between data need -S
 * bytes.  Each operation is scanned on its own: no state crosses
 * operations.
 *
 * A leaf: pure functions over a buffer.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_SPARSE_H
#define BLOCK_MIRROR_SPARSE_H

#include <stdbool.h>
#include <stdint.h>

/* Largest sparse-size (qemu-img's -S): operations grow to it. */
#define MIRROR_MAX_SPARSE_SIZE  (16 * 1024 * 1024)

typedef struct MirrorSparse {
    int64_t size;               /* zero runs this long inside data become
                                 * zero writes (0: off) */
    int64_t align;              /* where pieces end */
} MirrorSparse;

/*
 * Set @sp up for zero runs of @size bytes (0: off).  Pieces end on
 * multiples of the largest power of 2 in @size, or of the target's
 * @request_alignment when that is larger, so that no write needs a
 * read-modify-write (as qemu-img convert's s->alignment).
 */
void mirror_sparse_init(MirrorSparse *sp, int64_t size,
                        int64_t request_alignment);

/* Is sparse detection on? */
static inline bool mirror_sparse_on(const MirrorSparse *sp)
{
    return sp->size != 0;
}

/*
 * The next piece of the data at image offset @pos up to @end, whose bytes
 * are at @buf (@buf[0] is @pos): a zero run (*@zero), or data including
 * the zero runs between data shorter than the size (or what is left).
 * Returns its length, > 0.
 */
int64_t mirror_sparse_run(const MirrorSparse *sp, const uint8_t *buf,
                          int64_t pos, int64_t end, bool *zero);

#endif /* BLOCK_MIRROR_SPARSE_H */
