/*
 * qcow2-lite data path: reads, writes with cluster allocation and
 * copy-on-write, flush (the file helpers are in qcow2-file.c).  Runs on
 * thread-pool workers; metadata is looked at and changed under s->lock,
 * data moves with the lock dropped.
 *
 * A write to a guest cluster that is NORMAL, COPIED and has refcount 1
 * goes in place.  Anything else gets new clusters (one contiguous run per
 * step): the guest clusters are claimed with an allocation record (other
 * writers to them wait), the data plus the copy-on-write head and tail
 * (from the backing file, zeroes, the old cluster or a decompressed one)
 * are written with the lock dropped, then the L2 entries are switched and
 * the old references freed (deferred until the switch is durable).  A
 * ZERO_ALLOC cluster with refcount 1 keeps its host cluster: its head and
 * tail are written as zeroes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

static void qcow2_data_io_enter(BDRVQcow2State *s)
{
    int n = g_atomic_int_add(&s->data_io_in_flight, 1) + 1;
    int max = g_atomic_int_get(&s->max_data_io_in_flight);
    int delay = g_atomic_int_get(&s->data_delay_us);

    while (n > max &&
           !g_atomic_int_compare_and_exchange(&s->max_data_io_in_flight,
                                              max, n)) {
        max = g_atomic_int_get(&s->max_data_io_in_flight);
    }
    if (delay) {
        g_usleep(delay);
    }
}

static void qcow2_data_io_leave(BDRVQcow2State *s)
{
    g_atomic_int_add(&s->data_io_in_flight, -1);
}

/* ---- Reads ---- */

int qcow2_read_cluster_part(BDRVQcow2State *s, uint64_t entry,
                            int64_t offset, int64_t bytes, uint8_t *buf)
{
    g_autofree uint8_t *cluster = NULL;
    int ret;

    switch (qcow2_l2_type(entry)) {
    case QCOW2_CLUSTER_UNALLOCATED:
        if (s->backing) {
            return qcow2_backing_read(s->backing, offset, bytes, buf);
        }
        memset(buf, 0, bytes);
        return 0;
    case QCOW2_CLUSTER_ZERO_PLAIN:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        memset(buf, 0, bytes);
        return 0;
    case QCOW2_CLUSTER_NORMAL:
        return qcow2_pread_data(s, (entry & L2E_OFFSET_MASK) +
                                qcow2_offset_in_cluster(s, offset), buf,
                                bytes);
    case QCOW2_CLUSTER_COMPRESSED:
        cluster = g_malloc(s->cluster_size);
        ret = qcow2_read_compressed(s, entry, cluster);
        if (ret == 0) {
            memcpy(buf, cluster + qcow2_offset_in_cluster(s, offset),
                   bytes);
        }
        return ret;
    }
    g_assert_not_reached();
}

/* Same kind of cluster as @a, continuing it (contiguous on the host for
 * NORMAL)? */
static bool qcow2_same_run(uint64_t a, uint64_t b, int64_t i, int64_t cs)
{
    Qcow2ClusterType t = qcow2_l2_type(a);

    if (t != qcow2_l2_type(b)) {
        return false;
    }
    switch (t) {
    case QCOW2_CLUSTER_NORMAL:
        return (b & L2E_OFFSET_MASK) == (a & L2E_OFFSET_MASK) + i * cs;
    case QCOW2_CLUSTER_COMPRESSED:
        return false;
    default:
        return true;
    }
}

/*
 * One step of a read: look up the run of clusters of one kind from
 * @offset, then read it without the lock.  Returns bytes read or -errno.
 */
static int64_t qcow2_read_step(BDRVQcow2State *s, int64_t offset,
                               int64_t bytes, int64_t done, void *opaque)
{
    uint8_t *buf = (uint8_t *)opaque + done;
    int64_t cs = s->cluster_size;
    int64_t in = qcow2_offset_in_cluster(s, offset);
    int64_t max = DIV_ROUND_UP(in + bytes, cs);
    uint64_t entries[64];
    Qcow2IoTrack track;
    int64_t n, k, len, host;
    int ret;

    g_mutex_lock(&s->lock);
    ret = s->corrupt ? -EIO
                     : qcow2_l2_lookup(s, offset, MIN(max, 64), entries, &n);
    if (ret == 0) {
        ret = qcow2_entry_host(s, entries[0], &host);
    }
    if (ret < 0) {
        g_mutex_unlock(&s->lock);
        return ret;
    }
    for (k = 1; k < n && qcow2_same_run(entries[0], entries[k], k, cs);
         k++) {
        /* extend the run */
    }
    /* A NORMAL run must lie inside the file. */
    if (qcow2_l2_type(entries[0]) == QCOW2_CLUSTER_NORMAL &&
        (int64_t)(entries[0] & L2E_OFFSET_MASK) + (k - 1) * cs >=
        qcow2_file_end(s)) {
        k = MAX(1, (qcow2_file_end(s) - host + cs - 1) / cs);
    }
    len = MIN(bytes, k * cs - in);
    qcow2_io_begin(s, &track);
    g_mutex_unlock(&s->lock);

    if (qcow2_l2_type(entries[0]) == QCOW2_CLUSTER_UNALLOCATED &&
        s->backing) {
        ret = qcow2_backing_read(s->backing, offset, len, buf);
    } else if (qcow2_l2_type(entries[0]) == QCOW2_CLUSTER_NORMAL) {
        qcow2_data_io_enter(s);
        ret = qcow2_pread_data(s, host + in, buf, len);
        qcow2_data_io_leave(s);
    } else {
        ret = qcow2_read_cluster_part(s, entries[0], offset, len, buf);
    }

    g_mutex_lock(&s->lock);
    qcow2_io_end(s, &track);
    g_mutex_unlock(&s->lock);
    return ret < 0 ? ret : len;
}

int qcow2_run_steps(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                    Qcow2StepFunc *step, void *opaque)
{
    for (int64_t done = 0; done < bytes;) {
        int64_t n = step(s, offset + done, bytes - done, done, opaque);

        if (n < 0) {
            return n;
        }
        done += n;
    }
    return 0;
}

int qcow2_do_read(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                  uint8_t *buf)
{
    return qcow2_run_steps(s, offset, bytes, qcow2_read_step, buf);
}

/* ---- Writes ---- */

/* What one allocating step decided, under the lock. */
typedef struct Qcow2WritePlan {
    int64_t guest;              /* first guest cluster (byte offset) */
    int64_t nb;                 /* clusters */
    int64_t host;               /* where they go */
    bool new_clusters;          /* allocated now (else a ZERO_ALLOC kept) */
    bool fresh;                 /* the host clusters read as zero */
    uint64_t first_old;         /* old entries: head and tail sources */
    uint64_t last_old;
    uint64_t *old;              /* all old entries, to free */
} Qcow2WritePlan;

/*
 * Copy-on-write source for [@offset, @offset + @bytes) inside the cluster
 * whose old entry is @old; NULL (write nothing) when the host clusters
 * read as zero already and so does the source.
 */
static int qcow2_cow_buf(BDRVQcow2State *s, const Qcow2WritePlan *p,
                         uint64_t old, int64_t offset, int64_t bytes,
                         uint8_t **out)
{
    uint8_t *buf = g_malloc(bytes);
    int ret;

    *out = NULL;
    if (qcow2_l2_type(old) == QCOW2_CLUSTER_ZERO_ALLOC && !p->new_clusters) {
        memset(buf, 0, bytes);      /* the kept cluster holds stale data */
    } else {
        ret = qcow2_read_cluster_part(s, old, offset, bytes, buf);
        if (ret < 0) {
            g_free(buf);
            return ret;
        }
        if (p->fresh && buffer_is_zero(buf, bytes)) {
            g_free(buf);
            return 0;
        }
    }
    *out = buf;
    return 0;
}

/* Write the data of an allocating step with its COW head and tail. */
static int qcow2_write_alloc_data(BDRVQcow2State *s, const Qcow2WritePlan *p,
                                  int64_t offset, int64_t len,
                                  const uint8_t *buf)
{
    int64_t head = offset - p->guest;
    int64_t tail_start = offset + len;
    int64_t tail = p->guest + p->nb * s->cluster_size - tail_start;
    g_autofree uint8_t *head_buf = NULL;
    g_autofree uint8_t *tail_buf = NULL;
    struct iovec iov[3];
    int niov = 0;
    int64_t start = p->host + head;
    int ret;

    if (head) {
        ret = qcow2_cow_buf(s, p, p->first_old, p->guest, head, &head_buf);
        if (ret < 0) {
            return ret;
        }
        if (head_buf) {
            iov[niov++] = (struct iovec) { head_buf, head };
            start = p->host;
        }
    }
    iov[niov++] = (struct iovec) { (void *)buf, len };
    if (tail) {
        ret = qcow2_cow_buf(s, p, p->last_old, tail_start, tail, &tail_buf);
        if (ret < 0) {
            return ret;
        }
        if (tail_buf) {
            iov[niov++] = (struct iovec) { tail_buf, tail };
        }
    }
    qcow2_data_io_enter(s);
    ret = qcow2_pwritev(s, start, iov, niov);
    qcow2_data_io_leave(s);
    return ret;
}

/*
 * Plan an allocating step for the clusters from @offset whose entries
 * (@n of them) are in @entries, the first one not writable in place.
 * Lock held.
 */
static int qcow2_plan_alloc(BDRVQcow2State *s, int64_t offset,
                            const uint64_t *entries, int64_t n,
                            Qcow2WritePlan *p)
{
    int64_t k = 1;
    int ret;

    p->guest = qcow2_cluster_start(s, offset);
    if (qcow2_l2_type(entries[0]) == QCOW2_CLUSTER_ZERO_ALLOC &&
        (entries[0] & QCOW_OFLAG_COPIED)) {
        uint64_t rc;

        ret = qcow2_entry_host(s, entries[0], &p->host);
        if (ret == 0) {
            ret = qcow2_get_refcount(s, p->host >> s->cluster_bits, &rc);
        }
        if (ret < 0) {
            return ret;
        }
        if (rc == 1) {
            p->nb = 1;
            p->new_clusters = false;
            p->fresh = false;
            p->first_old = p->last_old = entries[0];
            p->old = g_new0(uint64_t, 1);
            return 0;
        }
    }
    while (k < n && !qcow2_entry_in_place(s, entries[k]) &&
           !(qcow2_l2_type(entries[k]) == QCOW2_CLUSTER_ZERO_ALLOC &&
             (entries[k] & QCOW_OFLAG_COPIED))) {
        k++;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t host;

        ret = qcow2_entry_host(s, entries[i], &host);
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_l2_prepare(s, p->guest);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_alloc_clusters(s, k, &p->host, &p->nb, &p->fresh);
    if (ret < 0) {
        return ret;
    }
    p->new_clusters = true;
    p->first_old = entries[0];
    p->last_old = entries[p->nb - 1];
    p->old = g_memdup2(entries, p->nb * sizeof(uint64_t));
    return 0;
}

/* After the data is written: point the L2 entries at it.  Lock held. */
static int qcow2_commit_alloc(BDRVQcow2State *s, const Qcow2WritePlan *p)
{
    g_autofree uint64_t *new = g_new(uint64_t, p->nb);
    int ret;

    for (int64_t i = 0; i < p->nb; i++) {
        new[i] = (p->host + i * s->cluster_size) | QCOW_OFLAG_COPIED;
    }
    ret = qcow2_l2_set(s, p->guest, p->nb, new);
    if (ret < 0) {
        return ret;
    }
    s->need_sync = true;
    if (p->new_clusters) {
        for (int64_t i = 0; i < p->nb; i++) {
            qcow2_free_entry_deferred(s, p->old[i]);
        }
    }
    return 0;
}

/* In place: the run of writable clusters from entries[0].  Lock held on
 * entry, dropped for the write. */
static int64_t qcow2_write_in_place(BDRVQcow2State *s, int64_t offset,
                                    int64_t bytes, const uint8_t *buf,
                                    const uint64_t *entries, int64_t n)
{
    int64_t cs = s->cluster_size;
    int64_t host0 = entries[0] & L2E_OFFSET_MASK;
    int64_t in = qcow2_offset_in_cluster(s, offset);
    Qcow2IoTrack track;
    int64_t k = 1, len;
    int ret;

    while (k < n && qcow2_entry_in_place(s, entries[k]) &&
           (int64_t)(entries[k] & L2E_OFFSET_MASK) == host0 + k * cs) {
        k++;
    }
    len = MIN(bytes, k * cs - in);
    ret = qcow2_check_overlap(s, host0 + in, len, "guest data");
    if (ret < 0) {
        g_mutex_unlock(&s->lock);
        return ret;
    }
    qcow2_io_begin(s, &track);
    g_mutex_unlock(&s->lock);

    qcow2_data_io_enter(s);
    ret = qcow2_pwrite(s, host0 + in, buf, len);
    qcow2_data_io_leave(s);

    g_mutex_lock(&s->lock);
    qcow2_io_end(s, &track);
    g_mutex_unlock(&s->lock);
    return ret < 0 ? ret : len;
}

/* One step of a write; returns the bytes written or -errno. */
static int64_t qcow2_write_step(BDRVQcow2State *s, int64_t offset,
                                int64_t bytes, int64_t done, void *opaque)
{
    const uint8_t *buf = (const uint8_t *)opaque + done;
    int64_t cs = s->cluster_size;
    int64_t in = qcow2_offset_in_cluster(s, offset);
    uint64_t entries[64];
    Qcow2WritePlan p = { 0 };
    Qcow2AllocRecord rec;
    int64_t n, len;
    int ret;

    ret = qcow2_lock_lookup(s, offset, bytes,
                            MIN(DIV_ROUND_UP(in + bytes, cs), 64), entries,
                            &n);
    if (ret < 0) {
        return ret;
    }
    if (qcow2_entry_in_place(s, entries[0])) {
        return qcow2_write_in_place(s, offset, bytes, buf, entries, n);
    }
    if (s->corrupt) {
        g_mutex_unlock(&s->lock);
        return -EIO;
    }
    ret = qcow2_plan_alloc(s, offset, entries, n, &p);
    if (ret == 0) {
        ret = qcow2_check_overlap(s, p.host, p.nb * cs, "guest data");
    }
    if (ret < 0) {
        g_mutex_unlock(&s->lock);
        g_free(p.old);
        return ret;
    }
    qcow2_alloc_record_add(s, &rec, p.guest, p.guest + p.nb * cs);
    g_mutex_unlock(&s->lock);

    len = MIN(bytes, p.nb * cs - in);
    ret = qcow2_write_alloc_data(s, &p, offset, len, buf);

    g_mutex_lock(&s->lock);
    if (ret == 0) {
        ret = qcow2_commit_alloc(s, &p);
    }
    if (ret < 0 && p.new_clusters) {
        /* Never referenced: give the clusters back at once. */
        qcow2_update_refcount(s, p.host, p.nb * cs, -1);
    }
    qcow2_alloc_record_remove(s, &rec);
    g_mutex_unlock(&s->lock);
    g_free(p.old);
    return ret < 0 ? ret : len;
}

int qcow2_do_write(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                   const uint8_t *buf, BdrvRequestFlags flags)
{
    /* The steps only read @buf. */
    int ret = qcow2_run_steps(s, offset, bytes, qcow2_write_step,
                              (void *)buf);

    return ret < 0 || !(flags & BDRV_REQ_FUA) ? ret : qcow2_do_flush(s);
}

int qcow2_do_flush(BDRVQcow2State *s)
{
    int ret;

    g_mutex_lock(&s->lock);
    ret = qcow2_flush_metadata(s);
    g_mutex_unlock(&s->lock);
    return ret;
}
