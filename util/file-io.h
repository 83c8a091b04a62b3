/*
 * Blocking file I/O that finishes what it starts: the one place that
 * retries after EINTR and continues short transfers, for every driver
 * that reads and writes files (raw, qcow2).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_FILE_IO_H
#define UTIL_FILE_IO_H

#include <stdint.h>
#include <sys/uio.h>

/*
 * Read up to @bytes at @offset of @fd into @buf, retrying after EINTR and
 * continuing short reads, until @bytes are read or the end of the file.
 * @stop_align is the O_DIRECT alignment of @fd, or 0: a read of O_DIRECT
 * that returns a count not a multiple of it has reached the end of the
 * file, and stops there.  Returns the bytes read (fewer than @bytes only
 * at the end of the file; the rest of @buf is untouched) or -errno.
 */
int64_t file_pread_full(int fd, void *buf, int64_t bytes, int64_t offset,
                        uint32_t stop_align);

/*
 * Write all of @iov (@niov entries, which this changes: they describe
 * what is left) at @offset of @fd with pwritev2() flags @rwf (RWF_*, or
 * 0) on every call, retrying after EINTR and continuing short writes.
 * Returns 0, -ENOSPC when a call writes nothing, or -errno (-EOPNOTSUPP
 * when the kernel refuses @rwf).
 */
int file_pwritev_full(int fd, struct iovec *iov, int niov, int64_t offset,
                      int rwf);

/* file_pwritev_full() of the one buffer @buf. */
int file_pwrite_full(int fd, const void *buf, int64_t bytes, int64_t offset,
                     int rwf);

/* fdatasync(@fd), retried after EINTR; 0 or -errno. */
int file_fdatasync(int fd);

#endif /* UTIL_FILE_IO_H */
