/*
 * Image locking compatible with QEMU's file-posix (see file-lock.h).
 *
 * QEMU locks one byte per permission with F_OFD_SETLK (F_RDLCK, so that
 * any number of holders of the same permission coexist) and tests for
 * conflicts with F_OFD_GETLK asking for F_WRLCK: a write lock conflicts
 * with every read lock another open file description holds on the byte.
 * Taking first and testing after leaves no window in which two openers
 * both miss each other (at worst both fail, as in QEMU).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/file-lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

/* The permission bits QEMU 7.2 locks (BLK_PERM_ALL: bits 0..3). */
#define FILE_LOCK_NBITS 4

const char *file_lock_perm_name(uint64_t perm)
{
    switch (perm) {
    case BLK_PERM_CONSISTENT_READ:
        return "consistent read";
    case BLK_PERM_WRITE:
        return "write";
    case BLK_PERM_WRITE_UNCHANGED:
        return "write unchanged";
    case BLK_PERM_RESIZE:
        return "resize";
    default:
        return "unknown";
    }
}

/* fcntl(@fd, @cmd) on the @len bytes at @start with lock type @type;
 * 0 or -errno.  *@type gets what F_OFD_GETLK reports. */
static int file_lock_fcntl(int fd, int cmd, int64_t start, int64_t len,
                           short *type)
{
    struct flock fl = {
        .l_type = *type,
        .l_whence = SEEK_SET,
        .l_start = start,
        .l_len = len,
    };
    int ret;

    do {
        ret = fcntl(fd, cmd, &fl);
    } while (ret < 0 && errno == EINTR);
    if (ret < 0) {
        return -errno;
    }
    *type = fl.l_type;
    return 0;
}

/* Shared-lock (@lock) or unlock one byte. */
static int file_lock_byte(int fd, int64_t off, bool lock)
{
    short type = lock ? F_RDLCK : F_UNLCK;

    return file_lock_fcntl(fd, F_OFD_SETLK, off, 1, &type);
}

/* Does an open file description other than @fd's hold a lock on the
 * byte at @off?  false also when the test fails (the take reported it). */
static bool file_lock_held_elsewhere(int fd, int64_t off)
{
    short type = F_WRLCK;

    return file_lock_fcntl(fd, F_OFD_GETLK, off, 1, &type) == 0 &&
           type != F_UNLCK;
}

void file_lock_release(int fd)
{
    short type = F_UNLCK;

    file_lock_fcntl(fd, F_OFD_SETLK, FILE_LOCK_PERM_BASE, FILE_LOCK_NBITS,
                    &type);
    type = F_UNLCK;
    file_lock_fcntl(fd, F_OFD_SETLK, FILE_LOCK_SHARED_BASE, FILE_LOCK_NBITS,
                    &type);
}

/* Can @fd take OFD locks at all?  -errno says why not. */
static int file_lock_probe(int fd)
{
    short type = F_WRLCK;

    return file_lock_fcntl(fd, F_OFD_GETLK, 0, 0, &type);
}

/*
 * For each permission of @bits, fail (releasing every lock of @fd) when
 * another open file description holds its byte at @base + bit; @kind is
 * "" or "shared " for the message.
 */
static bool file_lock_check(int fd, uint64_t bits, int base,
                            const char *kind, const char *filename,
                            GError **errp)
{
    for (int i = 0; i < FILE_LOCK_NBITS; i++) {
        uint64_t bit = 1ULL << i;

        if ((bits & bit) && file_lock_held_elsewhere(fd, base + i)) {
            file_lock_release(fd);
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_LOCKED,
                        "Failed to get %s\"%s\" lock: is another process "
                        "using the image '%s'?", kind,
                        file_lock_perm_name(bit), filename);
            return false;
        }
    }
    return true;
}

bool file_lock_take(int fd, OnOffAuto mode, uint64_t perm, uint64_t shared,
                    const char *filename, GError **errp)
{
    uint64_t unshared = ~shared & BLK_PERM_ALL;
    int ret;

    if (mode == ON_OFF_AUTO_OFF) {
        return true;
    }
    ret = file_lock_probe(fd);
    if (ret < 0) {
        if (mode == ON_OFF_AUTO_AUTO) {
            return true;
        }
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "locking=on: cannot lock '%s': %s", filename,
                    g_strerror(-ret));
        return false;
    }
    for (int i = 0; i < FILE_LOCK_NBITS; i++) {
        uint64_t bit = 1ULL << i;

        if (((perm & bit) &&
             (ret = file_lock_byte(fd, FILE_LOCK_PERM_BASE + i, true))) ||
            ((unshared & bit) &&
             (ret = file_lock_byte(fd, FILE_LOCK_SHARED_BASE + i, true)))) {
            file_lock_release(fd);
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Could not lock '%s': %s", filename,
                        g_strerror(-ret));
            return false;
        }
    }
    /* In QEMU's order: what we want, then what we do not share. */
    return file_lock_check(fd, perm, FILE_LOCK_SHARED_BASE, "", filename,
                           errp) &&
           file_lock_check(fd, unshared, FILE_LOCK_PERM_BASE, "shared ",
                           filename, errp);
}

bool file_lock_take_option(GHashTable *options, const char *spec,
                           OnOffAuto *mode, GError **errp)
{
    g_autoptr(GError) err = NULL;

    if (!take_on_off_auto(options, "locking", mode, &err)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s", spec,
                    err->message);
        return false;
    }
    return true;
}
