/*
 * qcow2-lite file access and request bookkeeping: blocking reads and
 * writes of the image file (retried on EINTR and short transfers), the
 * sync, the overlap check every data write passes, the transfers in flight
 * (so that a freed cluster is not reused while an old transfer may still
 * touch it) and the allocation records that serialise the requests
 * changing the same guest clusters.  All on worker threads.  With
 * -Dtest-hooks=true, also the crash test's instrumentation (see
 * qcow2-debug.h): every change to an image file is counted here, so that
 * the test can kill the process exactly before the N-th one.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "util/file-io.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- Test instrumentation (the crash test), test builds only ---- */

#ifdef CONFIG_TEST_HOOKS

#define QCOW2_DEBUG_TRACE   (1 << 20)   /* kinds remembered */

typedef struct Qcow2Debug {
    int64_t kill_at;            /* 0: never */
    char *count_path;           /* where `count` writes the trace */
    gint changes;               /* file changes so far (atomic) */
    char *trace;                /* their kinds, for `count` */
} Qcow2Debug;

static Qcow2Debug qcow2_debug;

/* At exit: the kinds of the changes, one letter each, into count_path. */
static void qcow2_debug_report(void)
{
    gint n = g_atomic_int_get(&qcow2_debug.changes);

    g_file_set_contents(qcow2_debug.count_path, qcow2_debug.trace,
                        MIN(n, QCOW2_DEBUG_TRACE), NULL);
}

static int64_t qcow2_debug_number(const char *key, const char *v)
{
    int64_t n;

    if (!v || !parse_count(NULL, v, 1, G_MAXINT32, &n, NULL)) {
        g_error("%s: '%s=%s': expected a positive number",
                QCOW2_DEBUG_ENV, key, v ? v : "");
    }
    return n;
}

/* Parse QCOW2_DEBUG_ENV once; a bad value aborts (it is for tests). */
static const Qcow2Debug *qcow2_debug_get(void)
{
    static gsize done;

    if (g_once_init_enter(&done)) {
        const char *env = g_getenv(QCOW2_DEBUG_ENV);
        g_auto(GStrv) parts = g_strsplit(env ? env : "", ",", -1);

        for (int i = 0; parts[i]; i++) {
            g_auto(GStrv) kv = g_strsplit(parts[i], "=", 2);

            if (!kv[0][0]) {
                continue;
            } else if (!strcmp(kv[0], "kill-at")) {
                qcow2_debug.kill_at = qcow2_debug_number(kv[0], kv[1]);
            } else if (!strcmp(kv[0], "count") && kv[1] && kv[1][0]) {
                qcow2_debug.count_path = g_strdup(kv[1]);
            } else {
                g_error("%s: unknown key '%s'", QCOW2_DEBUG_ENV, kv[0]);
            }
        }
        if (qcow2_debug.count_path) {
            qcow2_debug.trace = g_malloc0(QCOW2_DEBUG_TRACE);
            atexit(qcow2_debug_report);
        }
        g_once_init_leave(&done, 1);
    }
    return &qcow2_debug;
}

void qcow2_debug_change(char kind)
{
    const Qcow2Debug *d = qcow2_debug_get();
    gint n;

    if (!d->kill_at && !d->trace) {
        return;
    }
    n = g_atomic_int_add(&qcow2_debug.changes, 1) + 1;
    if (d->trace && n <= QCOW2_DEBUG_TRACE) {
        qcow2_debug.trace[n - 1] = kind;
    }
    if (n == d->kill_at) {
        raise(SIGKILL);
    }
}

#endif /* CONFIG_TEST_HOOKS */

/* ---- File I/O (blocking) ---- */

int qcow2_pread(BDRVQcow2State *s, int64_t offset, void *buf,
                int64_t bytes)
{
    int64_t n = file_pread_full(s->fd, buf, bytes, offset, 0);

    if (n < 0) {
        return n;
    }
    if (n < bytes) {
        /* Metadata cut off by the end of the file.  Tables we allocated
         * but never wrote read as zeroes. */
        if (offset + bytes <= s->alloc_end) {
            memset((uint8_t *)buf + n, 0, bytes - n);
            return 0;
        }
        return -EIO;
    }
    return 0;
}

/* Data: whatever lies past the end of the file reads as zero. */
int qcow2_pread_data(BDRVQcow2State *s, int64_t offset, void *buf,
                     int64_t bytes)
{
    int64_t n = file_pread_full(s->fd, buf, bytes, offset, 0);

    if (n < 0) {
        return n;
    }
    memset((uint8_t *)buf + n, 0, bytes - n);
    return 0;
}

int qcow2_pwritev(BDRVQcow2State *s, int64_t offset,
                  struct iovec *iov, int niov)
{
    qcow2_debug_change('W');
    return file_pwritev_full(s->fd, iov, niov, offset, 0);
}

int qcow2_pwrite(BDRVQcow2State *s, int64_t offset, const void *buf,
                 int64_t bytes)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = bytes };

    return qcow2_pwritev(s, offset, &iov, 1);
}

int qcow2_sync(BDRVQcow2State *s)
{
    qcow2_debug_change('S');
    return file_fdatasync(s->fd);
}

int qcow2_check_overlap(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                        const char *what)
{
    int64_t first = offset >> s->cluster_bits;
    int64_t last = (offset + bytes - 1) >> s->cluster_bits;

    if (!what) {
        return 0;       /* a metadata write at its own place */
    }
    for (int64_t c = first; c <= last; c++) {
        gpointer t = g_hash_table_lookup(s->meta, GSIZE_TO_POINTER(c));

        if (t) {
            return qcow2_signal_corruption(s, "preventing invalid write of "
                                           "%s on metadata (overlaps with "
                                           "%s at 0x%" PRIx64 ")", what,
                                           qcow2_meta_name(
                                               GPOINTER_TO_INT(t)),
                                           c << s->cluster_bits);
        }
        if (qcow2_guarded(s, c)) {
            g_autofree char *on = g_strdup_printf("a write of %s on", what);

            return qcow2_guard_check(s, c, on);
        }
    }
    return 0;
}

/* ---- In-flight bookkeeping (lock held) ---- */

void qcow2_io_begin(BDRVQcow2State *s, Qcow2IoTrack *t)
{
    t->seq = ++s->io_seq;
    t->link = (GList) { .data = t };
    g_queue_push_tail_link(&s->io, &t->link);
}

void qcow2_io_end(BDRVQcow2State *s, Qcow2IoTrack *t)
{
    g_queue_unlink(&s->io, &t->link);
}

static bool qcow2_alloc_overlaps(BDRVQcow2State *s, int64_t start,
                                 int64_t end)
{
    for (GList *l = s->allocs.head; l; l = l->next) {
        Qcow2AllocRecord *r = l->data;

        if (r->start < end && start < r->end) {
            return true;
        }
    }
    return false;
}

void qcow2_wait_allocs(BDRVQcow2State *s, int64_t offset, int64_t bytes)
{
    int64_t start = qcow2_cluster_start(s, offset);
    int64_t end = offset + bytes;

    while (qcow2_alloc_overlaps(s, start, end)) {
        g_cond_wait(&s->cond, &s->lock);
    }
}

void qcow2_alloc_record_add(BDRVQcow2State *s, Qcow2AllocRecord *r,
                            int64_t start, int64_t end)
{
    r->start = start;
    r->end = end;
    r->link = (GList) { .data = r };
    g_queue_push_tail_link(&s->allocs, &r->link);
}

void qcow2_alloc_record_remove(BDRVQcow2State *s, Qcow2AllocRecord *r)
{
    g_queue_unlink(&s->allocs, &r->link);
    g_cond_broadcast(&s->cond);
}
