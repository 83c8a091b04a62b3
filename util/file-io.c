/*
 * Blocking file I/O that finishes what it starts (util/file-io.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/file-io.h"

#include <errno.h>
#include <unistd.h>

int64_t file_pread_full(int fd, void *buf, int64_t bytes, int64_t offset,
                        uint32_t stop_align)
{
    int64_t done = 0;

    while (done < bytes) {
        ssize_t n = pread(fd, (uint8_t *)buf + done, bytes - done,
                          offset + done);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            break;
        }
        done += n;
        if (stop_align && n % stop_align) {
            break;
        }
    }
    return done;
}

int file_pwritev_full(int fd, struct iovec *iov, int niov, int64_t offset,
                      int rwf)
{
    while (niov > 0) {
        ssize_t n = pwritev2(fd, iov, niov, offset, rwf);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            return -ENOSPC;
        }
        offset += n;
        while (niov > 0 && (size_t)n >= iov->iov_len) {
            n -= iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + n;
            iov->iov_len -= n;
        }
    }
    return 0;
}

int file_pwrite_full(int fd, const void *buf, int64_t bytes, int64_t offset,
                     int rwf)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = bytes };

    return file_pwritev_full(fd, &iov, 1, offset, rwf);
}

int file_fdatasync(int fd)
{
    int r;

    do {
        r = fdatasync(fd);
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
