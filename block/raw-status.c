/*
 * Raw driver, block status: data and holes from lseek(SEEK_DATA /
 * SEEK_HOLE), run on a pool worker (raw-aio.c's raw_block_status()).  On
 * tmpfs SEEK_HOLE walks every page up to the next hole, milliseconds for
 * a full file of a few GiB, which is why callers ask for large windows at
 * a time, and why a file in memory with every page there is not walked at
 * all.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static void raw_add_extent(GArray *found, int64_t offset, int64_t end,
                           bool data)
{
    BlockExtent e = {
        .offset = offset,
        .length = end - offset,
        .flags = data ? BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                        BDRV_BLOCK_OFFSET_VALID
                      : BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                        BDRV_BLOCK_OFFSET_VALID,
        .host_offset = offset,
    };

    g_array_append_val(found, e);
}

int raw_do_status(BDRVRawState *s, int64_t offset, int64_t bytes,
                  GArray *found)
{
    int64_t pos = offset;
    int64_t end = offset + bytes;
    struct stat st;

    if (s->is_block || raw_unsupported(s, RAW_NO_SEEK_DATA)) {
        raw_add_extent(found, pos, end, true);
        return 0;
    }
    if (fstat(s->fd, &st) < 0) {
        return -errno;
    }
    if (pos >= st.st_size) {
        /* The file shrank since it was opened: reads return zeroes. */
        raw_add_extent(found, pos, end, false);
        return 0;
    }
    end = MIN(end, st.st_size);
    if (s->cpu_bound && (int64_t)st.st_blocks * 512 >= st.st_size) {
        /*
         * tmpfs counts the pages it holds and nothing else: all of them
         * there is no hole to find, and the walk (on the copy's critical
         * path at its start) is saved.  Pages
         * preallocated past the end (FALLOC_FL_KEEP_SIZE) could hide a
         * hole; it is then called data, which reads as zero and is copied
         * (or found zero by -S) as such.
         */
        raw_add_extent(found, pos, end, true);
        return 0;
    }

    while (pos < end && found->len < RAW_MAX_EXTENTS) {
        off_t data = lseek(s->fd, pos, SEEK_DATA);
        off_t hole;

        if (data < 0) {
            if (errno == ENXIO) {
                /* No data after @pos: a hole up to the end of the file. */
                raw_add_extent(found, pos, end, false);
                return 0;
            }
            if (errno == EINVAL || errno == EOPNOTSUPP) {
                raw_set_unsupported(s, RAW_NO_SEEK_DATA);
                break;
            }
            return -errno;
        }
        if (data > pos) {
            raw_add_extent(found, pos, MIN(data, end), false);
            pos = MIN(data, end);
            continue;
        }
        hole = lseek(s->fd, pos, SEEK_HOLE);
        if (hole < 0 && errno != ENXIO) {
            return -errno;
        }
        if (hole <= pos) {
            /* The file changed between the two calls. */
            break;
        }
        raw_add_extent(found, pos, MIN(hole, end), true);
        pos = MIN(hole, end);
    }
    if (pos < end && found->len < RAW_MAX_EXTENTS) {
        raw_add_extent(found, pos, end, true);
    }
    return 0;
}
