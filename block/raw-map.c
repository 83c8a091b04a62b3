/*
 * Raw driver, zero-copy reads: a view of the file (mmap) in place of a
 * read into a buffer, so that a copy to an NBD server moves each byte once
 * less.
 *
 * Only for buffered regular files on tmpfs: their pages are in memory, so
 * touching a view never waits for a disk and never meets an I/O error (a
 * failing disk under a mapping is a SIGBUS, not an error return).  The view
 * is made on a pool worker with MAP_POPULATE, so the main loop does not
 * even take the page faults.  A file that shrank since open would turn the
 * bytes past its new end into a SIGBUS: the worker checks the size first
 * and fails with -ENOTSUP, and the caller reads instead (what is left is a
 * race with a concurrent truncate, which a buffer read would answer with a
 * short read).
 *
 * Whether a view is cheaper than a read is a fixed rule
 * (raw_views_pay()), not measured per process: a view costs an mmap,
 * page-table entries for every page and a munmap with its TLB flush, a
 * read costs a copy into a buffer whose pages are already mapped.  The
 * node option views=on uses views whatever the rule says, =off never
 * (raw.c).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool raw_views_pay(void)
{
    /*
     * Reads.  A view pays per page mapped, a read per byte copied, and a
     * page costs the most where the mirror runs most: in a guest, where
     * every first touch of a new mapping takes the hypervisor's page
     * tables too (under PVM, one exit per page).  Measured on the
     * project's 2-core guest, a view lost to a read into a pool buffer at
     * every operation size the mirror uses, 256 KiB to 4 MiB
     * (bench/views.c; figures in bench/README.md), and W3 of bench/nbd.sh
     * took twice as long with views.  So views are for whoever asks for
     * them, on a machine where they were measured to pay.
     */
    return false;
}

bool raw_can_map(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;

    return s->can_map && (s->map_forced || raw_views_pay());
}

int raw_do_map(BDRVRawState *s, int64_t offset, int64_t bytes,
               BdrvMapping *map)
{
    int64_t page = sysconf(_SC_PAGESIZE);
    int64_t start = QEMU_ALIGN_DOWN(offset, page);
    size_t length = offset + bytes - start;
    struct stat st;
    void *base;

    if (fstat(s->fd, &st) < 0) {
        return -errno;
    }
    if (offset + bytes > st.st_size) {
        return -ENOTSUP;
    }
    base = mmap(NULL, length, PROT_READ, MAP_SHARED | MAP_POPULATE, s->fd,
                start);
    if (base == MAP_FAILED) {
        return -ENOTSUP;        /* address space, map count: read instead */
    }
    *map = (BdrvMapping) {
        .data = (const uint8_t *)base + (offset - start),
        .base = base,
        .length = length,
    };
    return 0;
}

void raw_unmap(BlockDriverState *bs, BdrvMapping *map)
{
    munmap(map->base, map->length);
}
