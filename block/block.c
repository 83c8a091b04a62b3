/*
 * Block layer core: the driver registry, opening and probing, creating,
 * reference counting and the node getters.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/file-lock.h"
#include "block/qcow2.h"
#include "util/cutils.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

G_DEFINE_QUARK(mirror-block-error-quark, block_error)

/* The registry: one line per driver. */
static const BlockDriver *const block_drivers[] = {
    &bdrv_raw,
    &bdrv_null,
    &bdrv_blkdebug,
    &bdrv_nbd,
    &bdrv_qcow2,
};

const BlockDriver *const *bdrv_get_drivers(size_t *n)
{
    *n = G_N_ELEMENTS(block_drivers);
    return block_drivers;
}

/* Fail @errp with "driver 'NAME': @fmt". */
static bool G_GNUC_PRINTF(3, 4)
bdrv_driver_fault(const BlockDriver *drv, GError **errp, const char *fmt,
                  ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "driver '%s': %s",
                drv->format_name ? drv->format_name : "(no name)", msg);
    return false;
}

bool bdrv_driver_check(const BlockDriver *drv, GError **errp)
{
    bool async = drv->aio_submit;
    bool blocking = drv->pread || drv->pwrite;
    int maps = !!drv->can_map + !!drv->map + !!drv->unmap;

    if (!drv->format_name || !drv->close || !drv->get_length) {
        return bdrv_driver_fault(drv, errp, "format_name, close and "
                                 "get_length are required");
    }
    if (async == blocking) {
        return bdrv_driver_fault(drv, errp, "needs exactly one data-path "
                                 "shape: aio_submit, or pread and pwrite");
    }
    if (blocking && (!drv->pread || !drv->pwrite)) {
        return bdrv_driver_fault(drv, errp, "the blocking shape needs both "
                                 "pread and pwrite");
    }
    if (async && (drv->pwrite_zeroes || drv->pdiscard || drv->flush ||
                  drv->block_status || drv->cpu_bound || drv->run_here ||
                  drv->can_copy || drv->map)) {
        return bdrv_driver_fault(drv, errp, "aio_submit with members of "
                                 "the blocking shape");
    }
    if (blocking && drv->request_size) {
        return bdrv_driver_fault(drv, errp, "request_size is for "
                                 "aio_submit only");
    }
    if (maps != 0 && maps != 3) {
        return bdrv_driver_fault(drv, errp, "can_map, map and unmap go "
                                 "together");
    }
    if (drv->supported_write_flags & ~BDRV_REQ_WRITE_COMPRESSED) {
        return bdrv_driver_fault(drv, errp, "supported_write_flags 0x%x "
                                 "beyond BDRV_REQ_WRITE_COMPRESSED",
                                 drv->supported_write_flags);
    }
    if (drv->create_opts && !drv->create) {
        return bdrv_driver_fault(drv, errp, "create_opts without create");
    }
    return true;
}

/*
 * Check the tables of every registered driver (they need open(), which
 * built-in filters do without) once, and @drv, about to get a node:
 * a broken table is a programming error, caught at the first open.
 */
static void bdrv_driver_assert(const BlockDriver *drv)
{
    static gsize registry_checked;
    g_autoptr(GError) err = NULL;

    if (g_once_init_enter(&registry_checked)) {
        for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
            if (!bdrv_driver_check(block_drivers[i], &err)) {
                g_error("%s", err->message);
            }
            if (!block_drivers[i]->open) {
                g_error("driver '%s': open is required",
                        block_drivers[i]->format_name);
            }
        }
        g_once_init_leave(&registry_checked, 1);
    }
    if (!bdrv_driver_check(drv, &err)) {
        g_error("%s", err->message);
    }
}

static const BlockDriver *bdrv_find_driver(const char *format)
{
    for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
        if (!strcmp(block_drivers[i]->format_name, format)) {
            return block_drivers[i];
        }
    }
    return NULL;
}

bool bdrv_find_format(const char *format)
{
    return bdrv_find_driver(format) != NULL;
}

static const BlockDriver *bdrv_driver_for_spec(const char *spec)
{
    for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
        if (block_drivers[i]->recognize_spec &&
            block_drivers[i]->recognize_spec(spec)) {
            return block_drivers[i];
        }
    }
    return NULL;
}

/*
 * Read the first bytes of @filename and ask every driver with a probe
 * function for a score; the best one wins.  Blocking (control path).
 */
static const BlockDriver *bdrv_probe(const char *filename, GError **errp)
{
    uint8_t buf[512];
    const BlockDriver *best = NULL;
    int best_score = 0;
    struct stat st;
    ssize_t n;
    int fd;

    /* O_NONBLOCK: probing a FIFO must not wait for a writer. */
    fd = open(filename, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not open '%s': %s", filename, g_strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not stat '%s': %s", filename, g_strerror(errno));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s' is a directory", filename);
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s' is not a regular file or block device", filename);
        close(fd);
        return NULL;
    }
    do {
        n = pread(fd, buf, sizeof(buf), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not read '%s': %s", filename, g_strerror(errno));
        close(fd);
        return NULL;
    }
    close(fd);

    for (size_t i = 0; i < G_N_ELEMENTS(block_drivers); i++) {
        int score;

        if (!block_drivers[i]->probe) {
            continue;
        }
        score = block_drivers[i]->probe(buf, n, filename);
        if (score > best_score) {
            best_score = score;
            best = block_drivers[i];
        }
    }
    if (!best) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not determine the format of '%s'", filename);
    }
    return best;
}

static bool bdrv_check_leftover_options(GHashTable *options,
                                        const char *format, GError **errp)
{
    GHashTableIter iter;
    gpointer key;

    g_hash_table_iter_init(&iter, options);
    if (g_hash_table_iter_next(&iter, &key, NULL)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Block format '%s' does not support the option '%s'",
                    format, (const char *)key);
        return false;
    }
    return true;
}

static GHashTable *bdrv_copy_options(GHashTable *options)
{
    GHashTable *copy = g_hash_table_new_full(g_str_hash, g_str_equal,
                                             g_free, g_free);
    if (options) {
        GHashTableIter iter;
        gpointer k, v;

        g_hash_table_iter_init(&iter, options);
        while (g_hash_table_iter_next(&iter, &k, &v)) {
            g_hash_table_insert(copy, g_strdup(k), g_strdup(v));
        }
    }
    return copy;
}

static BlockDriverState *bdrv_alloc(const BlockDriver *drv, const char *name,
                                    int flags);
static bool bdrv_finish_open(BlockDriverState *bs, GError **errp);

BlockDriverState *bdrv_open(const char *spec, const char *format, int flags,
                            GHashTable *options, GError **errp)
{
    g_autoptr(GHashTable) opts = bdrv_copy_options(options);
    const BlockDriver *drv;
    BlockDriverState *bs;

    if (!spec || !*spec) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "An image name must not be empty");
        return NULL;
    }
    if ((flags & BDRV_O_FORCE_SHARE) && (flags & BDRV_O_RDWR)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': force-share=on can only be used with read-only "
                    "images", spec);
        return NULL;
    }

    drv = bdrv_driver_for_spec(spec);
    if (format) {
        const BlockDriver *named = bdrv_find_driver(format);

        if (!named) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "Unknown image format '%s'", format);
            return NULL;
        }
        if (drv && drv != named) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s' is a %s image, not %s", spec,
                        drv->format_name, format);
            return NULL;
        }
        /* A driver that only opens its own specs (null:, nbd://) would
         * ignore a file name and serve something else in its place. */
        if (!drv && named->recognize_spec && !named->probe) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "Format '%s' opens its own specs, no files: '%s' "
                        "is a file name", format, spec);
            return NULL;
        }
        drv = named;
    } else if (!drv) {
        if (flags & BDRV_O_NO_PROBE) {
            drv = &bdrv_raw;
        } else {
            drv = bdrv_probe(spec, errp);
            if (!drv) {
                return NULL;
            }
        }
    }

    bs = bdrv_alloc(drv, spec, flags);
    if (!drv->open(bs, spec, flags, opts, errp)) {
        goto out_free;
    }
    if (!bdrv_check_leftover_options(opts, drv->format_name, errp)) {
        goto out_close;
    }
    if (!bdrv_finish_open(bs, errp)) {
        goto out_close;
    }
    return bs;

out_close:
    drv->close(bs);
out_free:
    g_free(bs->opaque);
    g_free(bs->filename);
    g_free(bs);
    return NULL;
}

BlockDriverState *bdrv_new_internal(const BlockDriver *drv, const char *name,
                                    int flags, BdrvInitFunc *init,
                                    void *data, GError **errp)
{
    BlockDriverState *bs = bdrv_alloc(drv, name, flags);

    if (!init(bs, data, errp)) {
        goto out_free;
    }
    if (!bdrv_finish_open(bs, errp)) {
        drv->close(bs);
        goto out_free;
    }
    return bs;

out_free:
    g_free(bs->opaque);
    g_free(bs->filename);
    g_free(bs);
    return NULL;
}

static BlockDriverState *bdrv_alloc(const BlockDriver *drv, const char *name,
                                    int flags)
{
    BlockDriverState *bs;

    bdrv_driver_assert(drv);
    bs = g_new0(BlockDriverState, 1);
    bs->drv = drv;
    bs->opaque = g_malloc0(drv->instance_size);
    bs->filename = g_strdup(name);
    bs->open_flags = flags;
    bs->perm = (flags & BDRV_O_NO_IO ? 0 : BLK_PERM_CONSISTENT_READ) |
               (flags & BDRV_O_RDWR ? BLK_PERM_WRITE : 0);
    bs->shared_perm = flags & BDRV_O_FORCE_SHARE ? BLK_PERM_ALL :
        BLK_PERM_ALL & ~((flags >> BDRV_O_UNSHARE_SHIFT) & BLK_PERM_ALL);
    bs->refcnt = 1;
    g_queue_init(&bs->tracked);
    g_queue_init(&bs->waiting);
    return bs;
}

/* After the driver opened @bs: cache its length, ask for its limits. */
static bool bdrv_finish_open(BlockDriverState *bs, GError **errp)
{
    const BlockDriver *drv = bs->drv;
    int64_t len;

    len = drv->get_length(bs);
    if (len < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not get the size of '%s': %s", bs->filename,
                    g_strerror(-len));
        return false;
    }
    bs->total_bytes = len;

    bs->bl = (BlockLimits) {
        .request_alignment = 1,
        .min_mem_alignment = 1,
    };
    if (drv->refresh_limits) {
        drv->refresh_limits(bs, &bs->bl);
    }
    g_assert(is_power_of_2(bs->bl.request_alignment));
    g_assert(is_power_of_2(bs->bl.min_mem_alignment));
    return true;
}

BlockDriverState *bdrv_ref(BlockDriverState *bs)
{
    bs->refcnt++;
    return bs;
}

void bdrv_unref(BlockDriverState *bs)
{
    if (!bs || --bs->refcnt > 0) {
        return;
    }
    g_assert(bs->in_flight == 0);
    g_assert(!bs->write_notifiers || bs->write_notifiers->len == 0);
    g_assert(!bs->event_listeners || bs->event_listeners->len == 0);
    bs->drv->close(bs);
    if (bs->write_notifiers) {
        g_array_unref(bs->write_notifiers);
    }
    if (bs->event_listeners) {
        g_array_unref(bs->event_listeners);
    }
    qemu_vfree(bs->zero_buffer);
    g_free(bs->opaque);
    g_free(bs->filename);
    g_free(bs);
}

/*
 * Is the existing @filename the backing file named in @opts, or a file of
 * that backing file's chain?  Creating it would destroy what the new
 * image reads.  The backing file is opened read-only to look; one that
 * cannot be opened is left for create() to report.
 */
static bool bdrv_create_check_backing(const char *filename, GHashTable *opts,
                                      GError **errp)
{
    const char *name = g_hash_table_lookup(opts, "backing_file");
    const char *fmt = g_hash_table_lookup(opts, "backing_fmt");
    g_autofree char *dir = g_path_get_dirname(filename);
    g_autofree char *path = NULL;
    g_autofree char *member = NULL;
    BlockDriverState *backing;
    int depth;
    bool found;

    if (!name || !*name || (fmt && !bdrv_find_driver(fmt))) {
        return true;
    }
    path = g_path_is_absolute(name) ? g_strdup(name)
                                    : g_build_filename(dir, name, NULL);
    /* Only its chain's names are read: lock nothing (QEMU opens a
     * backing file at create with force-share and no I/O). */
    backing = bdrv_open(path, fmt, BDRV_O_NO_IO | BDRV_O_FORCE_SHARE, NULL,
                        NULL);
    if (!backing) {
        return true;
    }
    found = bdrv_chain_contains(backing, filename, &depth, &member);
    bdrv_unref(backing);
    if (!found) {
        return true;
    }
    if (depth == 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing file '%s' is the image '%s' itself", name,
                    filename);
    } else {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing file '%s' reads the image '%s' (as '%s', "
                    "depth %d of its backing chain)", name, filename,
                    member, depth);
    }
    return false;
}

/*
 * Will a file of @size bytes fit where @filename (a regular file, stat
 * @st, or none yet: @st zeroed) lives?
 * Tried with ftruncate() on an unnamed temporary file in the same
 * directory (sparse: nothing is allocated), so that a size the file
 * system cannot hold (EFBIG) is found before @filename is truncated.
 * With @allocate, the free space (plus what @filename holds now, which
 * truncating frees) must cover @size.  A directory that takes no
 * temporary file skips the trial.
 */
static bool bdrv_create_check_room(const char *filename,
                                   const struct stat *st, int64_t size,
                                   bool allocate, GError **errp)
{
    g_autofree char *real = realpath(filename, NULL);
    g_autofree char *dir = g_path_get_dirname(real ? real : filename);
    struct statvfs vfs;
    int fd, err = 0;

    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, size) < 0) {
            err = errno;
        }
        close(fd);
    }
    if (err == EFBIG || err == EINVAL) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Could not create '%s': %s (the file system holds no "
                    "file of %" PRId64 " bytes)", filename, g_strerror(err),
                    size);
        return false;
    }
    if (allocate && statvfs(dir, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize +
                         (uint64_t)st->st_blocks * 512;

        if ((uint64_t)size > avail) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "Could not create '%s': %s (%" PRId64 " bytes to "
                        "allocate, %" PRIu64 " available)", filename,
                        g_strerror(ENOSPC), size, avail);
            return false;
        }
    }
    return true;
}

/* Before create() makes or overwrites @filename: what can fail without
 * touching it (see bdrv_create()). */
static bool bdrv_create_check(const BlockDriver *drv, const char *filename,
                              int64_t size, GHashTable *opts, GError **errp)
{
    const char *prealloc = g_hash_table_lookup(opts, "preallocation");
    bool full_size = drv == &bdrv_raw ||
                     (prealloc && strcmp(prealloc, "off"));
    bool allocate = drv == &bdrv_raw && prealloc &&
                    (!strcmp(prealloc, "falloc") || !strcmp(prealloc, "full"));
    struct stat st = { 0 };

    if (stat(filename, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            return true;    /* a block device is not truncated */
        }
        if (!bdrv_create_check_backing(filename, opts, errp)) {
            return false;
        }
    } else if (errno != ENOENT) {
        return true;        /* create() says why it cannot */
    }
    return !full_size ||
           bdrv_create_check_room(filename, &st, size, allocate, errp);
}

bool bdrv_create(const char *format, const char *filename, int64_t size,
                 GHashTable *options, GError **errp)
{
    g_autoptr(GHashTable) opts = bdrv_copy_options(options);
    const BlockDriver *drv = bdrv_find_driver(format);
    struct stat st;
    bool existed;

    if (!drv) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Unknown image format '%s'", format);
        return false;
    }
    if (!drv->create) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Format '%s' does not support image creation", format);
        return false;
    }
    if (size < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Invalid image size %" G_GINT64_FORMAT, size);
        return false;
    }
    if (bdrv_driver_for_spec(filename)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s' names a %s image, which cannot be created",
                    filename, bdrv_driver_for_spec(filename)->format_name);
        return false;
    }
    /* Unknown options are refused before anything is created. */
    if (g_hash_table_size(opts)) {
        GHashTableIter iter;
        gpointer key;

        g_hash_table_iter_init(&iter, opts);
        while (g_hash_table_iter_next(&iter, &key, NULL)) {
            if (!drv->create_opts ||
                !g_strv_contains(drv->create_opts, key)) {
                g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                            "Format '%s' does not support the option '%s'",
                            format, (const char *)key);
                return false;
            }
        }
    }
    existed = lstat(filename, &st) == 0;
    if (!bdrv_create_check(drv, filename, size, opts, errp)) {
        return false;
    }
    if (drv->create(filename, size, opts, errp)) {
        return true;
    }
    /* What this failed create made, it removes (never a symlink's
     * target: that name existed before). */
    if (!existed && lstat(filename, &st) == 0 && S_ISREG(st.st_mode)) {
        unlink(filename);
    }
    return false;
}

int bdrv_create_file(const char *filename, int access, bool block_device_ok,
                     GError **errp)
{
    struct stat st;
    int fd;

    if (stat(filename, &st) == 0 && !S_ISREG(st.st_mode) &&
        !(block_device_ok && S_ISBLK(st.st_mode))) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    S_ISDIR(st.st_mode) ? "'%s' is a directory"
                    : block_device_ok
                    ? "'%s' is not a regular file or block device"
                    : "'%s' is not a regular file", filename);
        return -1;
    }
    fd = open(filename, access | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not create '%s': %s", filename, g_strerror(errno));
        return -1;
    }
    /* Truncate only what no one else uses: the locks of QEMU's create
     * (write and resize, resize not shared) come first. */
    if (!file_lock_take(fd, ON_OFF_AUTO_AUTO,
                        BLK_PERM_WRITE | BLK_PERM_RESIZE,
                        BLK_PERM_ALL & ~BLK_PERM_RESIZE, filename, errp)) {
        close(fd);
        return -1;
    }
    if (fstat(fd, &st) < 0 ||
        (S_ISREG(st.st_mode) && ftruncate(fd, 0) < 0)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not create '%s': %s", filename, g_strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

bool bdrv_lock_probe(const char *filename, int flags, GError **errp)
{
    uint64_t shared = BLK_PERM_ALL &
        ~((flags >> BDRV_O_UNSHARE_SHIFT) & BLK_PERM_ALL) &
        ~(BLK_PERM_WRITE | BLK_PERM_RESIZE);
    struct stat st;
    bool ok;
    int fd;

    if (bdrv_driver_for_spec(filename) || stat(filename, &st) < 0 ||
        !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
        return true;
    }
    fd = open(filename, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return true;            /* the open or create says why */
    }
    ok = file_lock_take(fd, ON_OFF_AUTO_AUTO,
                        BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE |
                        BLK_PERM_RESIZE, shared, filename, errp);
    close(fd);
    return ok;
}

const char *bdrv_spec_driver(const char *spec)
{
    const BlockDriver *drv = bdrv_driver_for_spec(spec);

    return drv ? drv->format_name : NULL;
}

const char *bdrv_get_format_name(BlockDriverState *bs)
{
    return bs->drv->format_name;
}

const char *bdrv_get_filename(BlockDriverState *bs)
{
    return bs->filename;
}

int64_t bdrv_getlength(BlockDriverState *bs)
{
    return bs->total_bytes;
}

bool bdrv_is_writable(BlockDriverState *bs)
{
    return bs->open_flags & BDRV_O_RDWR;
}

uint64_t bdrv_get_perm(BlockDriverState *bs)
{
    return bs->perm;
}

uint64_t bdrv_get_shared_perm(BlockDriverState *bs)
{
    return bs->shared_perm;
}

bool bdrv_has_zero_init(BlockDriverState *bs)
{
    return bs->zero_init;
}

void bdrv_set_zero_init(BlockDriverState *bs, bool zero_init)
{
    bs->zero_init = zero_init;
}

int64_t bdrv_get_cluster_size(BlockDriverState *bs)
{
    BlockImageInfo info = { 0 };
    int64_t cs = 0;

    if (bs->drv->get_info && bs->drv->get_info(bs, &info, NULL)) {
        cs = info.cluster_size;
    }
    bdrv_image_info_clear(&info);
    return cs;
}

uint32_t bdrv_get_request_alignment(BlockDriverState *bs)
{
    return bs->bl.request_alignment;
}

uint32_t bdrv_get_mem_alignment(BlockDriverState *bs)
{
    return bs->bl.min_mem_alignment;
}

uint32_t bdrv_get_channels(BlockDriverState *bs)
{
    return MAX(bs->bl.channels, 1);
}

int64_t bdrv_get_window_bytes(BlockDriverState *bs)
{
    int64_t max = bs->bl.window_bytes;

    if (!max || !bs->drv->get_window_bytes) {
        return max;
    }
    return MIN(MAX(bs->drv->get_window_bytes(bs), 1), max);
}

int64_t bdrv_get_max_window_bytes(BlockDriverState *bs)
{
    return bs->bl.window_bytes;
}

uint32_t bdrv_get_active_channels(BlockDriverState *bs)
{
    uint32_t max = bdrv_get_channels(bs);

    if (!bs->drv->get_active_channels) {
        return max;
    }
    return MIN(MAX(bs->drv->get_active_channels(bs), 1), max);
}

int64_t bdrv_get_copy_transfer(BlockDriverState *bs)
{
    return bs->bl.copy_transfer;
}

bool bdrv_writes_off_loop(BlockDriverState *bs)
{
    return bs->bl.writes_off_loop;
}

int64_t bdrv_get_opt_transfer(BlockDriverState *bs)
{
    return bs->bl.opt_transfer;
}

bool bdrv_get_info(BlockDriverState *bs, BlockImageInfo *info, GError **errp)
{
    *info = (BlockImageInfo) {
        .format = bs->drv->format_name,
        .virtual_size = bs->total_bytes,
        .actual_size = -1,
    };
    if (bs->drv->get_info) {
        return bs->drv->get_info(bs, info, errp);
    }
    return true;
}

void bdrv_image_info_clear(BlockImageInfo *info)
{
    g_free(info->backing_file);
    g_free(info->backing_format);
    if (info->specific) {
        g_ptr_array_unref(info->specific);
    }
    if (info->layers) {
        g_ptr_array_unref(info->layers);
    }
    memset(info, 0, sizeof(*info));
}

void bdrv_check_result_clear(BdrvCheckResult *res)
{
    if (res->messages) {
        g_ptr_array_unref(res->messages);
    }
    memset(res, 0, sizeof(*res));
}

void bdrv_check_report_clear(BdrvCheckReport *rep)
{
    bdrv_check_result_clear(&rep->before);
    bdrv_check_result_clear(&rep->after);
    memset(rep, 0, sizeof(*rep));
}

int bdrv_check(BlockDriverState *bs, BdrvCheckFix fix, BdrvCheckReport *rep,
               GError **errp)
{
    memset(rep, 0, sizeof(*rep));
    if (!bs->drv->check) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "this image format (%s) does not support checks",
                    bs->drv->format_name);
        return -ENOTSUP;
    }
    return bs->drv->check(bs, fix, rep, errp) ? 0 : -EIO;
}

/* Do @a and @b describe the same storage?  Block devices by device
 * number (two nodes may name one disk), everything else by inode. */
static bool bdrv_stat_same(const struct stat *a, const struct stat *b)
{
    if (S_ISBLK(a->st_mode) && S_ISBLK(b->st_mode)) {
        return a->st_rdev == b->st_rdev;
    }
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

bool bdrv_chain_contains(BlockDriverState *bs, const char *spec, int *depth,
                         char **member)
{
    struct stat target, st;

    if (bdrv_driver_for_spec(spec) || stat(spec, &target) < 0) {
        return false;
    }
    for (int d = 0;; d++) {
        g_autofree char *name = NULL;

        if (qcow2_is_node(bs)) {
            name = qcow2_layer_filename(bs, d);
        } else if (d == 0 && !bdrv_driver_for_spec(bs->filename)) {
            name = g_strdup(bs->filename);
        }
        if (!name) {
            return false;
        }
        if (stat(name, &st) == 0 && bdrv_stat_same(&st, &target)) {
            if (depth) {
                *depth = d;
            }
            if (member) {
                *member = g_steal_pointer(&name);
            }
            return true;
        }
    }
}

bool bdrv_same_storage(const char *spec_a, const char *spec_b)
{
    struct stat a, b;

    /*
     * Driver specs (NBD URIs, null:) name storage we cannot compare: a
     * server may well serve its own verification (nbdkit sparse-random
     * as source and target of one copy).
     */
    if (bdrv_driver_for_spec(spec_a) || bdrv_driver_for_spec(spec_b)) {
        return false;
    }
    if (!strcmp(spec_a, spec_b)) {
        return true;
    }
    if (stat(spec_a, &a) < 0 || stat(spec_b, &b) < 0) {
        return false;
    }
    return bdrv_stat_same(&a, &b);
}

void *qemu_memalign(size_t alignment, size_t size)
{
    void *ptr;

    if (alignment < sizeof(void *)) {
        alignment = sizeof(void *);
    }
    if (posix_memalign(&ptr, alignment, size ? size : 1)) {
        g_error("out of memory allocating %zu bytes", size);
    }
    return ptr;
}

void qemu_vfree(void *ptr)
{
    free(ptr);
}

void *bdrv_blockalign(BlockDriverState *bs, size_t size)
{
    return qemu_memalign(MAX(bs->bl.min_mem_alignment, 64), size);
}

static gboolean bdrv_timer_dispatch(GSource *src, GSourceFunc cb,
                                    gpointer data)
{
    return cb(data);
}

static GSourceFuncs bdrv_timer_funcs = {
    .dispatch = bdrv_timer_dispatch,
};

GSource *bdrv_timer_new(int64_t delay_ns, GSourceFunc func, void *data)
{
    GSource *src = g_source_new(&bdrv_timer_funcs, sizeof(GSource));

    g_source_set_ready_time(src, g_get_monotonic_time() + delay_ns / 1000);
    g_source_set_callback(src, func, data, NULL);
    g_source_attach(src, g_main_context_get_thread_default());
    return src;
}

typedef struct LaterCompletion {
    BlockCompletionFunc *cb;
    void *opaque;
    int ret;
} LaterCompletion;

static gboolean bdrv_complete_later_cb(gpointer data)
{
    LaterCompletion *lc = data;

    lc->cb(lc->opaque, lc->ret);
    g_free(lc);
    return G_SOURCE_REMOVE;
}

void bdrv_complete_later(BlockCompletionFunc *cb, void *opaque, int ret)
{
    LaterCompletion *lc = g_new(LaterCompletion, 1);
    GSource *src = g_idle_source_new();

    *lc = (LaterCompletion) { .cb = cb, .opaque = opaque, .ret = ret };
    g_source_set_priority(src, G_PRIORITY_DEFAULT);
    g_source_set_callback(src, bdrv_complete_later_cb, lc, NULL);
    g_source_attach(src, g_main_context_get_thread_default());
    g_source_unref(src);
}

bool bdrv_parse_spec_options(const char *str, GHashTable *options,
                             GError **errp)
{
    g_autoptr(GError) err = NULL;

    if (!parse_key_values(NULL, str, options, &err)) {
        g_set_error_literal(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                            err->message);
        return false;
    }
    return true;
}

/* ---- node events ---- */

typedef struct BdrvEventListener {
    BdrvEventFunc *fn;
    void *opaque;
} BdrvEventListener;

void bdrv_add_event_listener(BlockDriverState *bs, BdrvEventFunc *fn,
                             void *opaque)
{
    BdrvEventListener l = { .fn = fn, .opaque = opaque };

    if (!bs->event_listeners) {
        bs->event_listeners = g_array_new(FALSE, FALSE,
                                          sizeof(BdrvEventListener));
    }
    g_array_append_val(bs->event_listeners, l);
}

void bdrv_remove_event_listener(BlockDriverState *bs, BdrvEventFunc *fn,
                                void *opaque)
{
    GArray *a = bs->event_listeners;

    for (guint i = 0; a && i < a->len; i++) {
        BdrvEventListener *l = &g_array_index(a, BdrvEventListener, i);

        if (l->fn == fn && l->opaque == opaque) {
            g_array_remove_index(a, i);
            return;
        }
    }
}

void bdrv_notify_event(BlockDriverState *bs, const BdrvEvent *ev)
{
    GArray *a = bs->event_listeners;

    bs->reconnecting = ev->type == BDRV_EVENT_RECONNECTING;
    if (ev->type == BDRV_EVENT_RECONNECTED) {
        bs->reconnects++;
    }
    for (guint i = 0; a && i < a->len; i++) {
        BdrvEventListener *l = &g_array_index(a, BdrvEventListener, i);

        l->fn(l->opaque, bs, ev);
    }
}

bool bdrv_is_reconnecting(BlockDriverState *bs)
{
    return bs->reconnecting;
}

uint64_t bdrv_get_reconnects(BlockDriverState *bs)
{
    return bs->reconnects;
}
