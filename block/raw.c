/*
 * Raw driver: regular files and block devices, byte for byte.
 *
 * Buffered by default.  cache=none (BDRV_O_NOCACHE) sets O_DIRECT and
 * publishes the O_DIRECT alignment as request and memory alignment.  A
 * file's size need not be a multiple of that alignment, so a second,
 * buffered descriptor serves the partial block at the end of a file.
 *
 * A blocking driver: its data-path members (block/raw-aio.c) are blocking
 * system calls that io.c's adapter runs on workers of the shared thread
 * pool.  Workers only share the BDRVRawState, and of it they only write
 * `unsupported`, with atomic operations.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"
#include "block/file-lock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- Control path ---- */

/*
 * The O_DIRECT alignment of the regular file @fd (opened with O_DIRECT):
 * statx(STATX_DIOALIGN) where the file system reports it (Linux 6.1+),
 * else the smallest of 512..4096 that a read at offset 0 accepts, else
 * 4096 when the file is empty and reading cannot tell.  0 if the file
 * refuses every alignment tried.
 */
static uint32_t raw_probe_dio_align(int fd, uint32_t *mem_align)
{
    uint32_t align;
    void *buf;

#ifdef STATX_DIOALIGN
    struct statx stx;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
        *mem_align = MAX(stx.stx_dio_mem_align, stx.stx_dio_offset_align);
        return stx.stx_dio_offset_align;
    }
#endif
    buf = qemu_memalign(RAW_MAX_PROBE_ALIGN, RAW_MAX_PROBE_ALIGN);
    for (align = RAW_MIN_PROBE_ALIGN; align <= RAW_MAX_PROBE_ALIGN;
         align *= 2) {
        ssize_t n;

        do {
            n = pread(fd, buf, align, 0);
        } while (n < 0 && errno == EINTR);
        if (n > 0) {
            break;
        }
        if (n == 0 || errno != EINVAL) {
            align = RAW_MAX_PROBE_ALIGN;
            break;
        }
    }
    qemu_vfree(buf);
    if (align > RAW_MAX_PROBE_ALIGN) {
        return 0;
    }
    *mem_align = align;
    return align;
}

/*
 * Open @spec with @oflags and check that it is a regular file or a block
 * device, without blocking on a FIFO.  Returns the fd, or -1 with @errp set.
 */
static int raw_open_fd(const char *spec, int oflags, struct stat *st,
                       GError **errp)
{
    int fd = open(spec, oflags | O_CLOEXEC | O_NONBLOCK);

    if (fd < 0) {
        if (errno == EISDIR) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "'%s' is a directory", spec);
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Could not open '%s': %s", spec, g_strerror(errno));
        }
        return -1;
    }
    if (fstat(fd, st) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not stat '%s': %s", spec, g_strerror(errno));
        goto out_close_fd;
    }
    if (S_ISDIR(st->st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s' is a directory", spec);
        goto out_close_fd;
    }
    if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s' is not a regular file or block device", spec);
        goto out_close_fd;
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not open '%s': %s", spec, g_strerror(errno));
        goto out_close_fd;
    }
    return fd;

out_close_fd:
    close(fd);
    return -1;
}

/* The open options of a raw node (docs/mirror-tool.md, IMAGES). */
typedef struct RawOpenOptions {
    bool nocache;               /* cache=none */
    uint32_t align;             /* align=N; 0: the device's */
    OnOffAuto views;            /* views=: zero-copy reads from memory */
    OnOffAuto copy_offload;     /* copy-offload=: fused copies */
    OnOffAuto locking;          /* locking=: QEMU's image locks */
} RawOpenOptions;

/* Take the options of RawOpenOptions out of @options into @o. */
static bool raw_parse_options(GHashTable *options, const char *spec,
                              RawOpenOptions *o, GError **errp)
{
    const char *v = g_hash_table_lookup(options, "cache");
    g_autoptr(GError) err = NULL;
    int64_t n;

    if (v) {
        if (!strcmp(v, "none") || !strcmp(v, "writeback")) {
            o->nocache = !strcmp(v, "none");
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': invalid cache mode '%s' (expected none or "
                        "writeback)", spec, v);
            return false;
        }
        g_hash_table_remove(options, "cache");
    }
    v = g_hash_table_lookup(options, "align");
    if (v) {
        if (!parse_count(NULL, v, 1, RAW_MAX_ALIGN, &n, NULL) ||
            !is_power_of_2(n)) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': invalid align '%s' (expected a power of 2 "
                        "up to %" G_GINT64_FORMAT ")", spec, v,
                        (gint64)RAW_MAX_ALIGN);
            return false;
        }
        o->align = n;
        g_hash_table_remove(options, "align");
    }
    if (!take_on_off_auto(options, "views", &o->views, &err) ||
        !take_on_off_auto(options, "copy-offload", &o->copy_offload,
                          &err)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s", spec,
                    err->message);
        return false;
    }
    return file_lock_take_option(options, spec, &o->locking, errp);
}

/*
 * Switch @s->fd to O_DIRECT, find its alignment and, for a file, open the
 * buffered twin for the tail.
 */
static bool raw_open_direct(BDRVRawState *s, const char *spec, int oflags,
                            const struct stat *st, GError **errp)
{
    struct stat tail_st;

    if (fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_DIRECT) < 0) {
        if (errno == EINVAL) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Could not open '%s': cache=none is not supported "
                        "on this filesystem", spec);
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Could not open '%s' with O_DIRECT: %s", spec,
                        g_strerror(errno));
        }
        return false;
    }
    if (s->is_block) {
        s->dio_align = s->mem_alignment = s->block_size;
        return true;
    }
    s->dio_align = raw_probe_dio_align(s->fd, &s->mem_alignment);
    if (!s->dio_align) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not open '%s': no O_DIRECT alignment up to %d "
                    "works", spec, RAW_MAX_PROBE_ALIGN);
        return false;
    }
    s->tail_fd = raw_open_fd(spec, oflags, &tail_st, errp);
    if (s->tail_fd < 0) {
        return false;
    }
    if (tail_st.st_dev != st->st_dev || tail_st.st_ino != st->st_ino) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s' was replaced while being opened", spec);
        return false;
    }
    return true;
}

static void raw_close(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;

    if (s->tail_fd >= 0) {
        close(s->tail_fd);
    }
    if (s->fd >= 0) {
        close(s->fd);
    }
    s->fd = s->tail_fd = -1;
    g_mutex_clear(&s->write_lock);
}

static bool raw_open(BlockDriverState *bs, const char *spec, int flags,
                     GHashTable *options, GError **errp)
{
    BDRVRawState *s = bs->opaque;
    int oflags = flags & BDRV_O_RDWR ? O_RDWR : O_RDONLY;
    RawOpenOptions o = { .nocache = flags & BDRV_O_NOCACHE };
    bool in_memory;
    struct stat st;
    int size;

    s->fd = -1;
    s->tail_fd = -1;
    g_mutex_init(&s->write_lock);
    if (!raw_parse_options(options, spec, &o, errp)) {
        return false;
    }
    s->fd = raw_open_fd(spec, oflags, &st, errp);
    if (s->fd < 0) {
        return false;
    }
    /* The locks live on @fd alone: the tail descriptor and views never
     * lock, so our own other opens of the file never meet them. */
    if (!file_lock_take(s->fd, o.locking, bs->perm, bs->shared_perm, spec,
                        errp)) {
        goto out_close;
    }
    s->is_block = S_ISBLK(st.st_mode);
    s->block_size = 512;
    if (s->is_block && ioctl(s->fd, BLKSSZGET, &size) == 0 &&
        is_power_of_2(size)) {
        s->block_size = size;
    }
    s->request_alignment = s->mem_alignment = 1;
    if (o.nocache) {
        if (!raw_open_direct(s, spec, oflags, &st, errp)) {
            goto out_close;
        }
        s->request_alignment = s->dio_align;
    }
    if (o.align) {
        if (o.align < s->request_alignment) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': align=%" PRIu32 " is below the O_DIRECT "
                        "alignment %" PRIu32, spec, o.align,
                        s->request_alignment);
            goto out_close;
        }
        s->request_alignment = o.align;
    }
    s->serialise_writes = !s->is_block && !o.nocache;
    /* Views and fused copies only in memory, where no read can fail (a
     * read error under a mapping is a SIGBUS); views=auto uses views where
     * they pay, =on wherever they are safe, =off never; copy-offload=off
     * turns fused copies off. */
    in_memory = fd_in_memory(s->fd);
    s->can_map = in_memory && o.views != ON_OFF_AUTO_OFF;
    s->map_forced = o.views == ON_OFF_AUTO_ON;
    s->can_copy = in_memory && o.copy_offload != ON_OFF_AUTO_OFF;
    /* What the open options came to (the tests read it). */
    g_debug("raw '%s': views %s, fused copies %s", spec,
            !s->can_map ? "off" : s->map_forced ? "on" : "where they pay",
            s->can_copy ? "on" : "off");
    /* Its I/O never waits for a device: run it as CPU work, one worker
     * per CPU taking requests back to back, instead of a thread for each
     * request in flight (fewer context switches, no slower:
     * bench/README.md). */
    s->cpu_bound = in_memory;
    return true;

out_close:
    raw_close(bs);
    return false;
}

static int64_t raw_get_length(BlockDriverState *bs)
{
    BDRVRawState *s = bs->opaque;
    struct stat st;

    if (s->is_block) {
        uint64_t size;

        if (ioctl(s->fd, BLKGETSIZE64, &size) < 0) {
            return -errno;
        }
        return size;
    }
    if (fstat(s->fd, &st) < 0) {
        return -errno;
    }
    return st.st_size;
}

/*
 * max_transfer stays at io.c's default for block devices too: the kernel
 * splits a large preadv into bios that fit the queue's max_sectors itself.
 * Write-zeroes and discard have no limit: one fallocate() (or BLKZEROOUT /
 * BLKDISCARD, which the kernel splits the same way) per request, however
 * long, so zeroing a thin file costs a call per extent.
 */
static void raw_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    BDRVRawState *s = bs->opaque;

    bl->request_alignment = s->request_alignment;
    bl->min_mem_alignment = s->mem_alignment;
}

static bool raw_get_info(BlockDriverState *bs, BlockImageInfo *info,
                         GError **errp)
{
    BDRVRawState *s = bs->opaque;
    struct stat st;

    if (fstat(s->fd, &st) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not stat '%s': %s", bs->filename,
                    g_strerror(errno));
        return false;
    }
    /* A block device has no st_blocks: its usage is unknown. */
    info->actual_size = s->is_block ? -1 : (int64_t)st.st_blocks * 512;
    info->cluster_size = 0;
    return true;
}

static int raw_probe(const uint8_t *buf, int buf_size, const char *filename)
{
    return 1;
}

typedef enum RawPrealloc {
    RAW_PREALLOC_OFF,
    RAW_PREALLOC_FALLOC,
    RAW_PREALLOC_FULL,
} RawPrealloc;

/* preallocation=full: write zeroes over [0, size), then make them durable */
static int raw_prealloc_full(int fd, int64_t size)
{
    g_autofree uint8_t *zeroes = g_malloc0(RAW_PREALLOC_CHUNK);
    int64_t offset;
    int ret;

    for (offset = 0; offset < size; offset += RAW_PREALLOC_CHUNK) {
        ret = file_pwrite_full(fd, zeroes, MIN(RAW_PREALLOC_CHUNK,
                                               size - offset), offset, 0);
        if (ret < 0) {
            return ret;
        }
    }
    return fsync(fd) < 0 ? -errno : 0;
}

/* Size, preallocate and close the newly created @fd. */
static bool raw_create_fill(int fd, const char *filename, int64_t size,
                            RawPrealloc prealloc, GError **errp)
{
    struct stat st;
    int ret = 0;

    if (fstat(fd, &st) < 0) {
        ret = -errno;
    } else if (S_ISBLK(st.st_mode)) {
        uint64_t dev_size;

        if (ioctl(fd, BLKGETSIZE64, &dev_size) < 0) {
            ret = -errno;
        } else if ((uint64_t)size > dev_size) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s' holds %" PRIu64 " bytes, less than %"
                        PRId64, filename, dev_size, size);
            return false;
        }
    } else if (ftruncate(fd, size) < 0) {
        ret = -errno;
    }
    /* A block device is allocated already: falloc has nothing to do. */
    if (ret == 0 && prealloc == RAW_PREALLOC_FALLOC &&
        S_ISREG(st.st_mode) && size > 0) {
        ret = -posix_fallocate(fd, 0, size);
    }
    if (ret == 0 && prealloc == RAW_PREALLOC_FULL) {
        ret = raw_prealloc_full(fd, size);
    }
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not create '%s': %s", filename, g_strerror(-ret));
        return false;
    }
    return true;
}

static bool raw_create(const char *filename, int64_t size, GHashTable *options,
                       GError **errp)
{
    const char *v = options ? g_hash_table_lookup(options, "preallocation")
                            : NULL;
    RawPrealloc prealloc = RAW_PREALLOC_OFF;
    bool ok;
    int fd;

    if (v) {
        if (!strcmp(v, "falloc")) {
            prealloc = RAW_PREALLOC_FALLOC;
        } else if (!strcmp(v, "full")) {
            prealloc = RAW_PREALLOC_FULL;
        } else if (strcmp(v, "off")) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "Invalid preallocation mode '%s' (expected off, "
                        "falloc or full)", v);
            return false;
        }
        g_hash_table_remove(options, "preallocation");
    }
    fd = bdrv_create_file(filename, O_RDWR, true, errp);
    if (fd < 0) {
        return false;
    }
    ok = raw_create_fill(fd, filename, size, prealloc, errp);
    if (close(fd) < 0 && ok) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not create '%s': %s", filename, g_strerror(errno));
        ok = false;
    }
    return ok;
}

static const char *const raw_create_opts[] = { "preallocation", NULL };

const BlockDriver bdrv_raw = {
    .format_name        = "raw",
    .instance_size      = sizeof(BDRVRawState),
    .probe              = raw_probe,
    .open               = raw_open,
    .close              = raw_close,
    .create             = raw_create,
    .create_opts        = raw_create_opts,
    .get_length         = raw_get_length,
    .refresh_limits     = raw_refresh_limits,
    .get_info           = raw_get_info,
    .pread              = raw_pread,
    .pwrite             = raw_pwrite,
    .pwrite_zeroes      = raw_pwrite_zeroes,
    .pdiscard           = raw_pdiscard,
    .flush              = raw_flush,
    .block_status       = raw_block_status,
    .cpu_bound          = raw_cpu_bound,
    .run_here           = raw_run_here,
    .can_copy           = raw_can_copy,
    .can_map            = raw_can_map,
    .map                = raw_map,
    .unmap              = raw_unmap,
};
