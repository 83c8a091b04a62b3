/*
 * Image locking compatible with QEMU's file-posix: permissions held on an
 * image and those not shared with others, as OFD locks on QEMU's lock
 * bytes, so that mirror-tool, QEMU, qemu-img, qemu-io, qemu-nbd and
 * qemu-storage-daemon see each other's use of an image.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_FILE_LOCK_H
#define BLOCK_FILE_LOCK_H

#include "block/block.h"
#include "util/cutils.h"

/*
 * The lock bytes of QEMU's file-posix (RAW_LOCK_PERM_BASE and
 * RAW_LOCK_SHARED_BASE): a shared lock on PERM_BASE + bit says "I hold
 * this permission", one on SHARED_BASE + bit "I do not share it".  The
 * bits are BLK_PERM_*, which QEMU 7.1 and later number 0..3.
 */
#define FILE_LOCK_PERM_BASE     100
#define FILE_LOCK_SHARED_BASE   200

/*
 * Take the locks of @perm (BLK_PERM_* held) and ~@shared (those others
 * may not hold) on @fd, as QEMU does: first the lock bytes, then a test
 * that no other open file description (another process, or another open
 * of ours) holds a byte that conflicts.  On a conflict every lock byte of
 * @fd is released, those taken before included (QEMU re-applies the old
 * ones instead: our callers close the node after a failure, so a caller
 * that keeps it must take its old locks again), and @errp says which
 * permission, naming @filename:
 * 'Failed to get "write" lock: is another process using the image
 * 'F'?' (BLOCK_ERROR_LOCKED).  The locks live until file_lock_release()
 * or the last close of @fd's open file description; locks on other
 * descriptors of the same file never count as ours.
 *
 * @mode: ON_OFF_AUTO_OFF takes nothing; AUTO takes the locks where the
 * file takes OFD locks and quietly nothing where it does not; ON fails
 * there (BLOCK_ERROR_OPEN).  Blocking (fcntl); never waits for a lock.
 */
bool file_lock_take(int fd, OnOffAuto mode, uint64_t perm, uint64_t shared,
                    const char *filename, GError **errp);

/* Release every lock byte @fd holds (a no-op where it holds none). */
void file_lock_release(int fd);

/* QEMU's name of the single permission @perm ("consistent read",
 * "write", "write unchanged", "resize"). */
const char *file_lock_perm_name(uint64_t perm);

/*
 * Take the "locking" node option (on, off or auto: QEMU's) out of
 * @options into *@mode (left alone when absent).  False with @errp set
 * (BLOCK_ERROR_INVALID, naming @spec) on a bad value.
 */
bool file_lock_take_option(GHashTable *options, const char *spec,
                           OnOffAuto *mode, GError **errp);

#endif /* BLOCK_FILE_LOCK_H */
