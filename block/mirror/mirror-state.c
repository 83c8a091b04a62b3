/*
 * The persisted known-good set of a mirror job (see mirror-state.h).
 *
 * The extent sets: @good, known good now; @disk, what the last state
 * written holds; @writing, what the write in flight holds (a crash may
 * leave either file); @pending, made clean since the current flush
 * began, and @flushing, made clean before it; @hot and @hot_old, what
 * guests wrote in this and the last hot period; @parked, clean and
 * flushed but hot.  Invariant: @good, the held ranges and the hot
 * ranges are disjoint.
 *
 * Hot granules: a granule a guest wrote is not made known good again
 * for a hot period or two (MIRROR_STATE_HOT_NS), since the next guest
 * write to it would have to wait for the state file again: a guest that
 * keeps writing the same granules waits once per period, not once per
 * copy of them.  At the end of a period what was parked goes back to
 * @pending; what is still hot is parked again by the next flush.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-state.h"
#include "block/mirror/mirror.h"
#include "block/thread-pool.h"
#include "util/cutils.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct MirrorStateWaiter {
    BlockCompletionFunc *cb;
    void *opaque;
} MirrorStateWaiter;

/* One write of the file, for the worker thread. */
typedef struct MirrorStateWrite {
    const char *path;
    const char *tmp_path;
    const char *dir;
    GByteArray *data;
    int write_ret;              /* mirror_state_write_bg_work(): the
                                 * write's result */
} MirrorStateWrite;

struct MirrorState {
    char *path;
    char *tmp_path;
    char *dir;
    MirrorStateIdentity id;
    bool resumed;
    uint64_t seq;

    MirrorExtents good;
    MirrorExtents disk;
    MirrorExtents writing;
    MirrorExtents pending;
    MirrorExtents flushing;
    GArray *held;               /* MirrorExtent, one per gated guest write */
    int64_t pending_since_ns;   /* when @pending became non-empty */
    int64_t pending_data;       /* bytes of data copied into @pending */
    int64_t flush_begun_ns;     /* when the last flush began */
    MirrorExtents hot;
    MirrorExtents hot_old;
    MirrorExtents parked;
    int64_t hot_ns;             /* the hot period; 0: none */
    int64_t hot_since_ns;       /* when this period began */

    MirrorStateWrite *write;    /* in flight, or NULL */
    bool write_wanted;          /* another write after it */
    GQueue next_waiters;        /* MirrorStateWaiter: need a write that
                                 * begins after they came */
    GQueue waiters;             /* ... the write in flight */
    bool removed;               /* the job completed: the file is gone,
                                 * or a switched-over record */
    bool switch_record;         /* completion writes a switched-over
                                 * record instead of removing the file */
    int64_t switched_us;        /* > 0: the file is a switched-over
                                 * record of then (loaded or written) */
    void (*idle_cb)(void *opaque);
    void *idle_opaque;
};

/* ---- files ---- */

static int mirror_state_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int ret = 0;

    if (fd < 0) {
        return -errno;
    }
    if (fsync(fd) < 0) {
        ret = -errno;
    }
    close(fd);
    return ret;
}

/* Write the file: temporary, fsync, rename, fsync(dir).  On a worker. */
static int mirror_state_write_work(void *arg)
{
    MirrorStateWrite *w = arg;
    size_t done = 0;
    int fd, ret = 0;

    fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }
    while (done < w->data->len) {
        ssize_t n = write(fd, w->data->data + done, w->data->len - done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            ret = n < 0 ? -errno : -EIO;
            break;
        }
        done += n;
    }
    if (ret == 0 && fsync(fd) < 0) {
        ret = -errno;
    }
    if (close(fd) < 0 && ret == 0) {
        ret = -errno;
    }
    if (ret == 0 && rename(w->tmp_path, w->path) < 0) {
        ret = -errno;
    }
    if (ret == 0) {
        ret = mirror_state_fsync_dir(w->dir);
    }
    if (ret < 0) {
        unlink(w->tmp_path);
    }
    return ret;
}

/* Remove the file @path (and @tmp_path, a temporary one left behind),
 * then fsync @dir.  Blocking. */
static int mirror_state_unlink_paths(const char *path, const char *tmp_path,
                                     const char *dir)
{
    int ret = 0;

    unlink(tmp_path);
    if (unlink(path) < 0 && errno != ENOENT) {
        ret = -errno;
    }
    return ret ? ret : mirror_state_fsync_dir(dir);
}

static int mirror_state_unlink(MirrorState *st)
{
    return mirror_state_unlink_paths(st->path, st->tmp_path, st->dir);
}

/*
 * A write in the background (on a worker): when it fails nothing on disk
 * may be trusted, so the file is removed there too.  0: written, or
 * (->write_ret < 0) removed; else the removal's error.
 */
static int mirror_state_write_bg_work(void *arg)
{
    MirrorStateWrite *w = arg;

    w->write_ret = mirror_state_write_work(w);
    if (w->write_ret == 0) {
        return 0;
    }
    return mirror_state_unlink_paths(w->path, w->tmp_path, w->dir);
}

/*
 * Read the file @path into *@buf (g_free) and *@len: 1.  0: there is
 * none.  -1 with @errp set: it cannot be read, or is not a regular file
 * (a FIFO would block the read forever, a device read would be
 * nonsense; the writes rename over it anyway).
 */
static int mirror_state_read(const char *path, char **buf, gsize *len,
                             GError **errp)
{
    g_autoptr(GByteArray) b = g_byte_array_new();
    struct stat sb;
    int fd, ret = 1;

    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && errno == ENOENT) {
        return 0;
    }
    if (fd < 0 || fstat(fd, &sb) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN, "%s",
                    g_strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "not a regular file");
        close(fd);
        return -1;
    }
    for (;;) {
        uint8_t chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN, "%s",
                        g_strerror(errno));
            ret = -1;
            break;
        }
        if (n == 0) {
            break;
        }
        g_byte_array_append(b, chunk, n);
    }
    close(fd);
    if (ret == 1) {
        *len = b->len;
        *buf = (char *)g_byte_array_free(g_steal_pointer(&b), FALSE);
    }
    return ret;
}

bool mirror_state_probe(const char *path, bool *exists, GError **errp)
{
    g_autofree char *buf = NULL;
    MirrorStateFile f;
    gsize len;
    bool ok;
    int ret;

    *exists = false;
    ret = mirror_state_read(path, &buf, &len, errp);
    if (ret <= 0) {
        return ret == 0;
    }
    *exists = true;
    ok = mirror_state_decode((const uint8_t *)buf, len, &f, errp);
    mirror_state_file_clear(&f);
    return ok;
}

/* ---- writing the state ---- */

static void mirror_state_write_start(MirrorState *st);

static void mirror_state_write_free(MirrorStateWrite *w)
{
    g_byte_array_unref(w->data);
    g_free(w);
}

static void mirror_state_write_done(void *opaque, int ret)
{
    MirrorState *st = opaque;
    GQueue done = G_QUEUE_INIT;
    MirrorStateWaiter *w;
    int write_ret = st->write->write_ret;

    mirror_state_write_free(st->write);
    st->write = NULL;
    if (write_ret == 0) {
        mirror_extents_swap(&st->disk, &st->writing);
    } else {
        /* Nothing on disk may be trusted: the worker removed it. */
        g_debug("state file '%s': write failed: %s; %s", st->path,
                g_strerror(-write_ret),
                ret == 0 ? "removed it" : "cannot remove it either");
        if (ret == 0) {
            mirror_extents_clear(&st->disk);
        } else {
            ret = write_ret;
        }
    }
    mirror_extents_clear(&st->writing);
    done = st->waiters;
    g_queue_init(&st->waiters);
    if (st->write_wanted || st->next_waiters.length) {
        mirror_state_write_start(st);
    }
    while ((w = g_queue_pop_head(&done))) {
        w->cb(w->opaque, ret);
        g_free(w);
    }
    if (!st->write && st->idle_cb) {
        st->idle_cb(st->idle_opaque);
    }
}

static void mirror_state_write_start(MirrorState *st)
{
    MirrorStateWrite *w = g_new0(MirrorStateWrite, 1);
    MirrorStateWaiter *x;

    g_assert(!st->write);
    st->write_wanted = false;
    while ((x = g_queue_pop_head(&st->next_waiters))) {
        g_queue_push_tail(&st->waiters, x);
    }
    mirror_extents_copy(&st->writing, &st->good);
    *w = (MirrorStateWrite) {
        .path = st->path, .tmp_path = st->tmp_path, .dir = st->dir,
        .data = mirror_state_encode(&st->id, ++st->seq, &st->good, 0),
    };
    st->write = w;
    /* Guest writes may wait at the gate for this write: it goes ahead of
     * the job's own pool work, as their requests do (BDRV_REQ_PRIO). */
    thread_pool_submit_full(thread_pool_get(),
                            g_queue_is_empty(&st->waiters) ? 0
                                                           : THREAD_POOL_URGENT,
                            mirror_state_write_bg_work, w,
                            mirror_state_write_done, st);
}

/* The state changed: write it (after the write in flight). */
static void mirror_state_want_write(MirrorState *st)
{
    if (st->removed) {
        return;
    }
    if (st->write) {
        st->write_wanted = true;
    } else {
        mirror_state_write_start(st);
    }
}

/* Write a state with the known-good extents @good now, synchronously;
 * @switched_us as mirror_state_encode()'s.  0 or -errno. */
static int mirror_state_write_now(MirrorState *st, const MirrorExtents *good,
                                  int64_t switched_us)
{
    MirrorStateWrite w = {
        .path = st->path, .tmp_path = st->tmp_path, .dir = st->dir,
        .data = mirror_state_encode(&st->id, ++st->seq, good, switched_us),
    };
    int ret = mirror_state_write_work(&w);

    g_byte_array_unref(w.data);
    return ret;
}

/* ---- opening ---- */

MirrorState *mirror_state_open(const char *path,
                               const MirrorStateIdentity *id, GError **errp)
{
    g_autofree char *buf = NULL;
    MirrorState *st = g_new0(MirrorState, 1);
    MirrorStateFile f;
    gsize len;
    int ret;

    st->path = g_strdup(path);
    st->tmp_path = g_strconcat(path, ".tmp", NULL);
    st->dir = g_path_get_dirname(path);
    mirror_state_identity_copy(&st->id, id);
    mirror_extents_init(&st->good);
    mirror_extents_init(&st->disk);
    mirror_extents_init(&st->writing);
    mirror_extents_init(&st->pending);
    mirror_extents_init(&st->flushing);
    mirror_extents_init(&st->hot);
    mirror_extents_init(&st->hot_old);
    mirror_extents_init(&st->parked);
    st->hot_ns = MIRROR_STATE_HOT_NS;
    st->hot_since_ns = clock_ns();
    st->held = g_array_new(FALSE, FALSE, sizeof(MirrorExtent));
    g_queue_init(&st->waiters);
    g_queue_init(&st->next_waiters);

    ret = mirror_state_read(path, &buf, &len, errp);
    if (ret < 0) {
        goto fail;
    }
    if (ret > 0) {
        bool ok = mirror_state_decode((const uint8_t *)buf, len, &f, errp) &&
                  mirror_state_identity_check(&f.id, id, errp);

        if (ok) {
            st->resumed = true;
            st->seq = f.seq;
            st->switched_us = f.switched_us;
            mirror_extents_copy(&st->good, &f.good);
            mirror_extents_copy(&st->disk, &f.good);
        }
        mirror_state_file_clear(&f);
        if (!ok) {
            goto fail;
        }
        return st;
    }
    if (id->sync == MIRROR_SYNC_MODE_NONE) {
        mirror_extents_add(&st->good, 0, id->size);
    }
    ret = mirror_state_write_now(st, &st->good, 0);
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "cannot write it: %s", g_strerror(-ret));
        goto fail;
    }
    mirror_extents_copy(&st->disk, &st->good);
    return st;

fail:
    mirror_state_free(st);
    return NULL;
}

void mirror_state_free(MirrorState *st)
{
    MirrorStateWaiter *w;

    if (!st) {
        return;
    }
    g_assert(!st->write);
    while ((w = g_queue_pop_head(&st->next_waiters))) {
        w->cb(w->opaque, -ECANCELED);
        g_free(w);
    }
    mirror_extents_destroy(&st->good);
    mirror_extents_destroy(&st->disk);
    mirror_extents_destroy(&st->writing);
    mirror_extents_destroy(&st->pending);
    mirror_extents_destroy(&st->flushing);
    mirror_extents_destroy(&st->hot);
    mirror_extents_destroy(&st->hot_old);
    mirror_extents_destroy(&st->parked);
    g_array_free(st->held, TRUE);
    mirror_state_identity_clear(&st->id);
    g_free(st->path);
    g_free(st->tmp_path);
    g_free(st->dir);
    g_free(st);
}

bool mirror_state_busy(MirrorState *st)
{
    return st && st->write;
}

void mirror_state_set_idle_cb(MirrorState *st, void (*cb)(void *opaque),
                              void *opaque)
{
    if (st) {
        st->idle_cb = cb;
        st->idle_opaque = opaque;
    }
}

bool mirror_state_resumed(MirrorState *st)
{
    return st && st->resumed;
}

int64_t mirror_state_switched_us(MirrorState *st)
{
    return st ? st->switched_us : 0;
}

void mirror_state_set_switch_record(MirrorState *st, bool on)
{
    if (st) {
        st->switch_record = on;
    }
}

const MirrorExtents *mirror_state_good(MirrorState *st)
{
    return &st->good;
}

size_t mirror_state_memory(MirrorState *st)
{
    if (!st) {
        return 0;
    }
    return st->held->len * sizeof(MirrorExtent) +
           mirror_extents_memory(&st->good) +
           mirror_extents_memory(&st->disk) +
           mirror_extents_memory(&st->writing) +
           mirror_extents_memory(&st->pending) +
           mirror_extents_memory(&st->flushing) +
           mirror_extents_memory(&st->hot) +
           mirror_extents_memory(&st->hot_old) +
           mirror_extents_memory(&st->parked);
}

int64_t mirror_state_good_bytes(MirrorState *st)
{
    return st ? st->good.bytes : -1;
}

/* ---- what the job reports ---- */

/* [offset, offset + bytes) rounded out to granules, clipped to the size. */
static void mirror_state_granules(MirrorState *st, int64_t offset,
                                  int64_t bytes, int64_t *start, int64_t *end)
{
    int64_t g = st->id.granularity;

    *start = QEMU_ALIGN_DOWN(MIN(offset, st->id.size), g);
    *end = MIN(QEMU_ALIGN_UP(offset + bytes, g), st->id.size);
}

static void mirror_state_add_pending(MirrorState *st, int64_t start,
                                     int64_t end)
{
    if (end > start && !st->pending.bytes) {
        st->pending_since_ns = clock_ns();
    }
    mirror_extents_add(&st->pending, start, end);
}

/* mirror_state_clean() and mirror_state_clean_zero(); @data: the range
 * was copied as data. */
static void mirror_state_clean_range(MirrorState *st, DirtyBitmap *dirty,
                                     int64_t offset, int64_t bytes,
                                     bool data)
{
    int64_t pos, end;

    if (!st) {
        return;
    }
    if (data) {
        st->pending_data += bytes;
    }
    mirror_state_granules(st, offset, bytes, &pos, &end);
    while (pos < end) {
        int64_t d = dirty_bitmap_next_dirty(dirty, pos);
        int64_t stop = d < 0 || d > end ? end : d;

        mirror_state_add_pending(st, pos, stop);
        if (stop >= end) {
            break;
        }
        pos = dirty_bitmap_next_clean(dirty, stop, end - stop);
    }
}

void mirror_state_clean(MirrorState *st, DirtyBitmap *dirty, int64_t offset,
                        int64_t bytes)
{
    mirror_state_clean_range(st, dirty, offset, bytes, true);
}

void mirror_state_clean_zero(MirrorState *st, DirtyBitmap *dirty,
                             int64_t offset, int64_t bytes)
{
    mirror_state_clean_range(st, dirty, offset, bytes, false);
}

/* [start, end) is not good any more, nor about to be. */
static void mirror_state_forget(MirrorState *st, int64_t start, int64_t end)
{
    mirror_extents_remove(&st->good, start, end);
    mirror_extents_remove(&st->pending, start, end);
    mirror_extents_remove(&st->flushing, start, end);
    mirror_extents_remove(&st->parked, start, end);
}

/* Move what @from holds of [start, end) to @to. */
static void mirror_state_move(MirrorExtents *to, MirrorExtents *from,
                              int64_t start, int64_t end)
{
    g_autoptr(GArray) parts = g_array_new(FALSE, FALSE,
                                          sizeof(MirrorExtent));

    for (guint i = mirror_extents_first_after(from, start);
         i < mirror_extents_count(from); i++) {
        const MirrorExtent *x = mirror_extents_get(from, i);
        MirrorExtent m = { MAX(x->start, start), MIN(x->end, end) };

        if (x->start >= end) {
            break;
        }
        g_array_append_val(parts, m);
    }
    for (guint i = 0; i < parts->len; i++) {
        MirrorExtent *m = &g_array_index(parts, MirrorExtent, i);

        mirror_extents_remove(from, m->start, m->end);
        mirror_extents_add(to, m->start, m->end);
    }
}

/* Park what @flushing holds of the hot set @hot. */
static void mirror_state_park(MirrorState *st, const MirrorExtents *hot)
{
    for (guint i = 0; i < mirror_extents_count(hot); i++) {
        const MirrorExtent *h = mirror_extents_get(hot, i);

        mirror_state_move(&st->parked, &st->flushing, h->start, h->end);
    }
}

/* A hot period ended: the parked granules may be promoted again. */
static void mirror_state_rotate(MirrorState *st, int64_t now_ns)
{
    if (now_ns - st->hot_since_ns < st->hot_ns) {
        return;
    }
    mirror_extents_swap(&st->hot_old, &st->hot);
    mirror_extents_clear(&st->hot);
    if (now_ns - st->hot_since_ns >= 2 * st->hot_ns) {
        mirror_extents_clear(&st->hot_old);
    }
    st->hot_since_ns = now_ns;
    if (st->parked.bytes) {
        if (!st->pending.bytes) {
            st->pending_since_ns = now_ns;
        }
        mirror_extents_union(&st->pending, &st->parked);
        mirror_extents_clear(&st->parked);
    }
}

/* May a crash leave a file that calls part of [start, end) good? */
static bool mirror_state_on_disk(MirrorState *st, int64_t start, int64_t end)
{
    return mirror_extents_intersects(&st->disk, start, end) ||
           (st->write && mirror_extents_intersects(&st->writing, start, end));
}

void mirror_state_dirtied(MirrorState *st, int64_t offset, int64_t bytes)
{
    int64_t start, end;

    if (!st) {
        return;
    }
    mirror_state_granules(st, offset, bytes, &start, &end);
    mirror_state_forget(st, start, end);
    if (mirror_state_on_disk(st, start, end)) {
        mirror_state_want_write(st);
    }
}

void mirror_state_flush_begin(MirrorState *st)
{
    if (!st) {
        return;
    }
    mirror_extents_union(&st->flushing, &st->pending);
    mirror_extents_clear(&st->pending);
    st->pending_data = 0;
    st->flush_begun_ns = clock_ns();
}

void mirror_state_flush_end(MirrorState *st, int ret)
{
    if (!st) {
        return;
    }
    if (ret < 0) {
        /* Not flushed: the next flush tries again. */
        if (st->flushing.bytes) {
            if (!st->pending.bytes) {
                st->pending_since_ns = clock_ns();
            }
            mirror_extents_union(&st->pending, &st->flushing);
        }
        mirror_extents_clear(&st->flushing);
        return;
    }
    mirror_state_park(st, &st->hot);
    mirror_state_park(st, &st->hot_old);
    if (!st->flushing.bytes) {
        return;
    }
    mirror_extents_union(&st->good, &st->flushing);
    mirror_extents_clear(&st->flushing);
    /* A guest write between its gate and its completion: not yet. */
    for (guint i = 0; i < st->held->len; i++) {
        MirrorExtent *h = &g_array_index(st->held, MirrorExtent, i);

        mirror_extents_remove(&st->good, h->start, h->end);
    }
    mirror_state_want_write(st);
}

int64_t mirror_state_flush_due(MirrorState *st, int64_t now_ns)
{
    int64_t at;

    if (!st || st->removed) {
        return -1;
    }
    mirror_state_rotate(st, now_ns);
    if (!st->pending.bytes) {
        return -1;
    }
    if (st->pending_data >= MIRROR_STATE_FLUSH_BYTES) {
        return 0;
    }
    at = st->pending_since_ns + MIRROR_STATE_FLUSH_NS;
    if (st->pending.bytes >= MIRROR_STATE_FLUSH_BYTES) {
        at = MIN(at, st->flush_begun_ns + MIRROR_STATE_ZERO_FLUSH_NS);
    }
    return at <= now_ns ? 0 : at - now_ns;
}

/* ---- guest writes ---- */

bool mirror_state_guest_write(MirrorState *st, int64_t offset,
                              int64_t bytes, BlockCompletionFunc *cb,
                              void *opaque)
{
    MirrorExtent h;
    MirrorStateWaiter *w;

    if (!st || st->removed) {
        return true;
    }
    mirror_state_granules(st, offset, bytes, &h.start, &h.end);
    if (h.end <= h.start) {
        return true;
    }
    g_array_append_val(st->held, h);
    mirror_state_forget(st, h.start, h.end);
    if (st->hot_ns) {
        mirror_state_rotate(st, clock_ns());
        mirror_extents_add(&st->hot, h.start, h.end);
    }
    if (!mirror_state_on_disk(st, h.start, h.end)) {
        return true;
    }
    w = g_new0(MirrorStateWaiter, 1);
    w->cb = cb;
    w->opaque = opaque;
    if (st->write && !mirror_extents_intersects(&st->writing, h.start,
                                                h.end)) {
        /* The write in flight already says "not good": wait for it. */
        g_queue_push_tail(&st->waiters, w);
        return false;
    }
    g_queue_push_tail(&st->next_waiters, w);
    mirror_state_want_write(st);
    return false;
}

void mirror_state_guest_done(MirrorState *st, int64_t offset, int64_t bytes)
{
    int64_t start, end;

    if (!st) {
        return;
    }
    mirror_state_granules(st, offset, bytes, &start, &end);
    for (guint i = 0; i < st->held->len; i++) {
        MirrorExtent *h = &g_array_index(st->held, MirrorExtent, i);

        if (h->start == start && h->end == end) {
            g_array_remove_index_fast(st->held, i);
            return;
        }
    }
}

void mirror_state_set_hot_ns(MirrorState *st, int64_t ns)
{
    st->hot_ns = ns;
    if (!ns) {
        mirror_extents_clear(&st->hot);
        mirror_extents_clear(&st->hot_old);
        mirror_state_rotate(st, st->hot_since_ns);
    }
}

/* The job completed: the gate opens and everything is known good. */
static void mirror_state_completed(MirrorState *st)
{
    MirrorStateWaiter *w;

    st->removed = true;
    /* The job completed: all of it is good (hot granules too). */
    mirror_extents_clear(&st->good);
    mirror_extents_add(&st->good, 0, st->id.size);
    /* Nobody needs the file any more: waiting guests go on. */
    while ((w = g_queue_pop_head(&st->next_waiters))) {
        w->cb(w->opaque, 0);
        g_free(w);
    }
}

int mirror_state_remove(MirrorState *st, GError **errp)
{
    int ret;

    if (!st || (st->removed && !st->switched_us)) {
        return 0;
    }
    g_assert(!st->write);
    ret = mirror_state_unlink(st);
    if (ret < 0) {
        /* The file stays, and so does the gate that keeps it true. */
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "cannot remove the state file '%s': %s", st->path,
                    g_strerror(-ret));
        return ret;
    }
    st->switched_us = 0;
    if (!st->removed) {
        mirror_state_completed(st);
    }
    return 0;
}

int mirror_state_complete(MirrorState *st, GError **errp)
{
    int64_t now = g_get_real_time();
    MirrorExtents all;
    int ret;

    if (!st || !st->switch_record) {
        return mirror_state_remove(st, errp);
    }
    if (st->removed) {
        return 0;
    }
    g_assert(!st->write);
    mirror_extents_init(&all);
    if (st->id.size > 0) {
        mirror_extents_add(&all, 0, st->id.size);
    }
    ret = mirror_state_write_now(st, &all, now);
    mirror_extents_destroy(&all);
    if (ret < 0) {
        /* The file and the gate stay: the job must not switch over. */
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "cannot write the state file '%s': %s", st->path,
                    g_strerror(-ret));
        return ret;
    }
    mirror_state_completed(st);
    mirror_extents_copy(&st->disk, &st->good);
    st->switched_us = now;
    return 0;
}
