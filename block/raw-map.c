/*
 * Raw driver, zero-copy reads: a view of the file (mmap) in place of a
 * read into a buffer, so that a copy to an NBD server moves each byte once
 * less (2 GiB into `nbdkit file`: our CPU 0.57 s against 0.89 s, wall
 * 0.83 s against 0.98 s; docs/mirror-tool.md).
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
 * Whether a view is cheaper than a read depends on the machine, not on the
 * file: a view costs an mmap, page-table entries for every page and a
 * munmap with its TLB flush, a read costs a copy into a buffer whose pages
 * are already mapped.  Under a hypervisor that shadows the guest's page
 * tables (PVM) every first touch of a new mapping is an exit, and a view
 * of 1 MiB costs 360 us against 72 us for a read; on an EPT guest the view
 * won.  So the first node asked measures both, once per process, on a
 * memfd of its own (raw_views_pay()).  The node option views=on uses
 * views without measuring, =off never (raw.c).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/raw-int.h"

#include "util/buf-pool.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Both costs grow with the pages touched, so a quarter of a 1 MiB
 * operation tells as much as all of it, at a quarter of the probe's own
 * first touches (about 2 ms of 9 here).  Up to RAW_PROBE_TRIES tries
 * each, fewer once one way is RAW_PROBE_CLEAR times as fast as the other.
 */
#define RAW_PROBE_BYTES     (256 * 1024)
#define RAW_PROBE_TRIES     4
#define RAW_PROBE_CLEAR     2

/* Read every cache line of @buf, as a consumer of the data would. */
static uint64_t raw_probe_touch(const uint8_t *buf, size_t bytes)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < bytes; i += 64) {
        sum += ((const volatile uint8_t *)buf)[i];
    }
    return sum;
}

/* Nanoseconds of one view of @fd (made, read, released), or -1. */
static int64_t raw_probe_view(int fd)
{
    int64_t start = clock_ns();
    void *p = mmap(NULL, RAW_PROBE_BYTES, PROT_READ, MAP_SHARED | MAP_POPULATE,
                   fd, 0);

    if (p == MAP_FAILED) {
        return -1;
    }
    raw_probe_touch(p, RAW_PROBE_BYTES);
    munmap(p, RAW_PROBE_BYTES);
    return clock_ns() - start;
}

/* Nanoseconds of one read of @fd into @buf (then read), or -1. */
static int64_t raw_probe_read(int fd, uint8_t *buf)
{
    int64_t start = clock_ns();

    if (pread(fd, buf, RAW_PROBE_BYTES, 0) != RAW_PROBE_BYTES) {
        return -1;
    }
    raw_probe_touch(buf, RAW_PROBE_BYTES);
    return clock_ns() - start;
}

/* The measurement behind raw_views_pay(): the best of a few tries each,
 * alternating, against a buffer that is touched beforehand as a pool
 * buffer in steady use is. */
static bool raw_views_probe(void)
{
    int64_t best_view = INT64_MAX, best_read = INT64_MAX;
    BufPool *pool = buf_pool_new(RAW_PROBE_BYTES, 1, 4096);
    uint8_t *buf = buf_pool_get(pool);
    int fd = memfd_create("qemu-mirror-view-probe", MFD_CLOEXEC);
    bool ok = fd >= 0;

    memset(buf, 0xa5, RAW_PROBE_BYTES);
    ok = ok && pwrite(fd, buf, RAW_PROBE_BYTES, 0) == RAW_PROBE_BYTES;
    for (int i = 0; ok && i < RAW_PROBE_TRIES; i++) {
        int64_t v = raw_probe_view(fd), r = raw_probe_read(fd, buf);

        ok = v >= 0 && r >= 0;
        best_view = MIN(best_view, v);
        best_read = MIN(best_read, r);
        if (i > 0 && (best_view > RAW_PROBE_CLEAR * best_read ||
                      best_read > RAW_PROBE_CLEAR * best_view)) {
            break;
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    buf_pool_put(pool, buf);
    buf_pool_free(pool);
    if (!ok) {
        g_debug("views: probe failed, reading instead");
        return false;
    }
    g_debug("views: %" PRId64 " us per MiB, reads %" PRId64 " us: %s",
            best_view * (1024 * 1024 / RAW_PROBE_BYTES) / 1000,
            best_read * (1024 * 1024 / RAW_PROBE_BYTES) / 1000,
            best_view < best_read ? "views" : "reads");
    return best_view < best_read;
}

bool raw_views_pay(void)
{
    static gsize done;
    static bool pays;

    if (g_once_init_enter(&done)) {
        pays = raw_views_probe();
        g_once_init_leave(&done, 1);
    }
    return pays;
}

static gpointer raw_views_probe_thread(gpointer opaque)
{
    raw_views_pay();
    return NULL;
}

void raw_views_probe_early(void)
{
    static gsize started;

    if (g_once_init_enter(&started)) {
        GThread *t = g_thread_try_new("views-probe", raw_views_probe_thread,
                                      NULL, NULL);

        if (t) {
            g_thread_unref(t);
        }
        g_once_init_leave(&started, 1);
    }
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
