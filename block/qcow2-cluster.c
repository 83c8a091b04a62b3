/*
 * qcow2-lite cluster mapping: L2 lookups and updates (allocating or
 * copying L2 tables), write-zeroes and discard as L2 changes, and block
 * status through the backing chain.
 *
 * L2 changes only go to the cache; qcow2-cache.c writes them back after
 * the refcounts and data they depend on are durable.  Clusters whose
 * reference an L2 change drops are freed only once that change is durable
 * (qcow2_free_entry_deferred()).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <inttypes.h>

/* How much one block status call looks at, at most: L2 tables (a run of
 * L1 entries without one costs no table), extents. */
#define QCOW2_STATUS_MAX_TABLES     256
#define QCOW2_STATUS_MAX_EXTENTS    1024

int qcow2_l2_lookup(BDRVQcow2State *s, int64_t offset, int64_t max,
                    uint64_t *entries, int64_t *n)
{
    int64_t gc = offset >> s->cluster_bits;
    int64_t l1_idx = gc >> s->l2_bits;
    int64_t l2_idx = gc & ((INT64_C(1) << s->l2_bits) - 1);
    int64_t cnt = MIN(max, (INT64_C(1) << s->l2_bits) - l2_idx);
    Qcow2CacheEntry *e;
    uint64_t l2_off;
    int ret;

    g_assert(cnt > 0 && l1_idx < s->l1_size);
    *n = cnt;
    l2_off = s->l1[l1_idx] & L1E_OFFSET_MASK;
    if (!l2_off) {
        memset(entries, 0, cnt * sizeof(uint64_t));
        return 0;
    }
    ret = qcow2_cache_get(s, s->l2_cache, l2_off, false, &e);
    if (ret < 0) {
        return ret;
    }
    for (int64_t i = 0; i < cnt; i++) {
        entries[i] = qcow2_be64(e->data + (l2_idx + i) * 8);
    }
    qcow2_cache_put(e);
    return 0;
}

int qcow2_lock_lookup(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                      int64_t max, uint64_t *entries, int64_t *n)
{
    int ret = -EIO;

    g_mutex_lock(&s->lock);
    if (!s->corrupt) {
        qcow2_wait_allocs(s, offset, bytes);
        ret = qcow2_l2_lookup(s, offset, max, entries, n);
    }
    if (ret < 0) {
        g_mutex_unlock(&s->lock);
    }
    return ret;
}

static void qcow2_l1_mark_dirty(BDRVQcow2State *s, int64_t l1_idx)
{
    int64_t sector = l1_idx / 64;

    s->l1_dirty[sector / 8] |= 1 << (sector % 8);
    s->l1_any_dirty = true;
}

/*
 * The L2 table of L1 entry @l1_idx, ready to be changed: allocated when
 * missing, copied when shared (refcount > 1).  Pinned.
 */
static int qcow2_l2_for_write(BDRVQcow2State *s, int64_t l1_idx,
                              Qcow2CacheEntry **entry)
{
    uint64_t l1e = s->l1[l1_idx];
    uint64_t old = l1e & L1E_OFFSET_MASK;
    Qcow2CacheEntry *olde = NULL;
    int64_t host, got;
    bool fresh;
    uint64_t rc = 0;
    int ret;

    if (old && (l1e & QCOW_OFLAG_COPIED)) {
        return qcow2_cache_get(s, s->l2_cache, old, false, entry);
    }
    if (old) {
        ret = qcow2_get_refcount(s, old >> s->cluster_bits, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc == 1) {
            s->l1[l1_idx] |= QCOW_OFLAG_COPIED;
            qcow2_l1_mark_dirty(s, l1_idx);
            return qcow2_cache_get(s, s->l2_cache, old, false, entry);
        }
        if (rc == 0) {
            return qcow2_signal_corruption(s, "L2 table at 0x%" PRIx64
                                           " has refcount 0", old);
        }
    }
    ret = qcow2_alloc_clusters(s, 1, &host, &got, &fresh);
    if (ret < 0) {
        return ret;
    }
    if (old) {
        ret = qcow2_cache_get(s, s->l2_cache, old, false, &olde);
        if (ret < 0) {
            qcow2_update_refcount(s, host, s->cluster_size, -1);
            return ret;
        }
    }
    ret = qcow2_cache_get(s, s->l2_cache, host, true, entry);
    if (ret < 0) {
        if (olde) {
            qcow2_cache_put(olde);
        }
        qcow2_update_refcount(s, host, s->cluster_size, -1);
        return ret;
    }
    if (olde) {
        memcpy((*entry)->data, olde->data, s->cluster_size);
        qcow2_cache_put(olde);
    }
    qcow2_cache_mark_dirty(s->l2_cache, *entry);
    g_hash_table_insert(s->meta, GSIZE_TO_POINTER(host >> s->cluster_bits),
                        GINT_TO_POINTER(QCOW2_META_L2));
    s->l1[l1_idx] = host | QCOW_OFLAG_COPIED;
    qcow2_l1_mark_dirty(s, l1_idx);
    if (old) {
        /* The copy is complete and hooked in: the old table may go. */
        qcow2_free_deferred(s, old, s->cluster_size);
    }
    return 0;
}

int qcow2_l2_prepare(BDRVQcow2State *s, int64_t offset)
{
    Qcow2CacheEntry *e;
    int ret = qcow2_l2_for_write(s, (offset >> s->cluster_bits) >> s->l2_bits,
                                 &e);

    if (ret == 0) {
        qcow2_cache_put(e);
    }
    return ret;
}

int qcow2_l2_set(BDRVQcow2State *s, int64_t offset, int64_t n,
                 const uint64_t *entries)
{
    int64_t gc = offset >> s->cluster_bits;
    int64_t l1_idx = gc >> s->l2_bits;
    int64_t l2_idx = gc & ((INT64_C(1) << s->l2_bits) - 1);
    Qcow2CacheEntry *e;
    int ret;

    g_assert(l2_idx + n <= (INT64_C(1) << s->l2_bits));
    ret = qcow2_l2_for_write(s, l1_idx, &e);
    if (ret < 0) {
        return ret;
    }
    for (int64_t i = 0; i < n; i++) {
        qcow2_put_be64(e->data + (l2_idx + i) * 8, entries[i]);
    }
    qcow2_cache_mark_dirty(s->l2_cache, e);
    qcow2_cache_put(e);
    return 0;
}

int qcow2_entry_host(BDRVQcow2State *s, uint64_t entry, int64_t *host)
{
    Qcow2ClusterType t = qcow2_l2_type(entry);

    *host = 0;
    if (s->header.version < 3 &&
        (t == QCOW2_CLUSTER_ZERO_PLAIN || t == QCOW2_CLUSTER_ZERO_ALLOC)) {
        return qcow2_signal_corruption(s, "zero cluster entry in a "
                                       "version 2 image");
    }
    if (t != QCOW2_CLUSTER_NORMAL && t != QCOW2_CLUSTER_ZERO_ALLOC) {
        return 0;
    }
    *host = entry & L2E_OFFSET_MASK;
    if (*host & (s->cluster_size - 1)) {
        return qcow2_signal_corruption(s, "cluster allocation offset 0x%"
                                       PRIx64 " unaligned (L2 entry 0x%"
                                       PRIx64 ")", *host, entry);
    }
    if (*host >= qcow2_file_end(s)) {
        return qcow2_signal_corruption(s, "data cluster at 0x%" PRIx64
                                       " lies beyond the end of the file",
                                       *host);
    }
    return 0;
}

bool qcow2_entry_in_place(BDRVQcow2State *s, uint64_t entry)
{
    int64_t host;
    uint64_t rc;

    if (qcow2_l2_type(entry) != QCOW2_CLUSTER_NORMAL ||
        !(entry & QCOW_OFLAG_COPIED) ||
        qcow2_entry_host(s, entry, &host) < 0 ||
        qcow2_get_refcount(s, host >> s->cluster_bits, &rc) < 0) {
        return false;
    }
    return rc == 1;
}

/* Does the guest cluster part at @offset with @entry read as zero? */
static bool qcow2_reads_zero(BDRVQcow2State *s, uint64_t entry,
                             int64_t offset)
{
    switch (qcow2_l2_type(entry)) {
    case QCOW2_CLUSTER_ZERO_PLAIN:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        return true;
    case QCOW2_CLUSTER_UNALLOCATED:
        return !s->backing || offset >= s->backing->size;
    default:
        return false;
    }
}

/*
 * The new L2 entry of a whole cluster that is zeroed (@discard false) or
 * discarded; *@drop says whether the old entry's references go.
 */
static uint64_t qcow2_zero_entry(BDRVQcow2State *s, uint64_t e,
                                 BdrvRequestFlags flags, bool discard,
                                 bool *drop)
{
    bool unmap = discard || (flags & BDRV_REQ_MAY_UNMAP);

    *drop = false;
    switch (qcow2_l2_type(e)) {
    case QCOW2_CLUSTER_UNALLOCATED:
        return s->backing ? QCOW_OFLAG_ZERO : e;
    case QCOW2_CLUSTER_ZERO_PLAIN:
        return e;
    case QCOW2_CLUSTER_ZERO_ALLOC:
        if (!unmap && (e & QCOW_OFLAG_COPIED)) {
            return e;
        }
        break;
    case QCOW2_CLUSTER_NORMAL:
        if (!unmap && qcow2_entry_in_place(s, e)) {
            return e | QCOW_OFLAG_ZERO;
        }
        break;
    case QCOW2_CLUSTER_COMPRESSED:
        break;
    }
    *drop = true;
    return QCOW_OFLAG_ZERO;
}

/*
 * The first L1 index in [@l1_idx, @limit) whose entry has an L2 table, or
 * @limit.  Lock held.
 */
static int64_t qcow2_next_l2_table(const BDRVQcow2State *s, int64_t l1_idx,
                                   int64_t limit)
{
    int64_t i = l1_idx;

    while (i < limit && !(s->l1[i] & L1E_OFFSET_MASK)) {
        i++;
    }
    return i;
}

/*
 * How many bytes from @offset (cluster aligned), at most @bytes, lie under
 * L1 entries without an L2 table: 0 when the L1 entry of @offset has one.
 * Lock held.
 */
static int64_t qcow2_bytes_without_table(const BDRVQcow2State *s,
                                         int64_t offset, int64_t bytes)
{
    int64_t l1_idx = (offset >> s->cluster_bits) >> s->l2_bits;
    int64_t last = ((offset + bytes - 1) >> s->cluster_bits) >> s->l2_bits;
    int64_t next = qcow2_next_l2_table(s, l1_idx, last + 1);

    if (next == l1_idx) {
        return 0;
    }
    return MIN(((next << s->l2_bits) << s->cluster_bits) - offset, bytes);
}

/*
 * Zero or discard whole clusters from @offset (cluster aligned), at most
 * @bytes and within one L2 table, or, without a backing file, over the
 * run of L1 entries without an L2 table from @offset, which reads as zero
 * and stays as it is.  Returns the bytes handled or -errno.
 */
static int64_t qcow2_zero_clusters(BDRVQcow2State *s, int64_t offset,
                                   int64_t bytes, BdrvRequestFlags flags,
                                   bool discard)
{
    int64_t max = MIN(DIV_ROUND_UP(bytes, s->cluster_size),
                      INT64_C(1) << s->l2_bits);
    g_autofree uint64_t *old = NULL;
    g_autofree uint64_t *new = NULL;
    bool changed = false;
    int64_t n;
    int ret;

    g_mutex_lock(&s->lock);
    if (s->corrupt) {
        g_mutex_unlock(&s->lock);
        return -EIO;
    }
    qcow2_wait_allocs(s, offset, bytes);
    if (!s->backing) {
        int64_t none = qcow2_bytes_without_table(s, offset, bytes);

        if (none > 0) {
            g_mutex_unlock(&s->lock);
            return none;
        }
    }
    old = g_new(uint64_t, max);
    ret = qcow2_l2_lookup(s, offset, max, old, &n);
    if (ret < 0) {
        g_mutex_unlock(&s->lock);
        return ret;
    }
    s->zero_l2_entries += n;
    new = g_new(uint64_t, n);
    for (int64_t i = 0; i < n; i++) {
        bool drop;
        int64_t host;

        ret = qcow2_entry_host(s, old[i], &host);
        if (ret < 0) {
            goto out_unlock;
        }
        new[i] = qcow2_zero_entry(s, old[i], flags, discard, &drop);
        changed |= new[i] != old[i];
        if (!drop) {
            old[i] = 0;     /* nothing to free */
        }
    }
    if (changed) {
        ret = qcow2_l2_set(s, offset, n, new);
        if (ret < 0) {
            goto out_unlock;
        }
        for (int64_t i = 0; i < n; i++) {
            qcow2_free_entry_deferred(s, old[i]);
        }
    }
    ret = 0;
out_unlock:
    g_mutex_unlock(&s->lock);
    return ret < 0 ? ret : MIN(bytes, n * s->cluster_size);
}

/* Zero part of one cluster: nothing if it reads as zero already, else
 * write zero data. */
static int qcow2_zero_partial(BDRVQcow2State *s, int64_t offset,
                              int64_t bytes, BdrvRequestFlags flags)
{
    g_autofree uint8_t *zeroes = NULL;
    uint64_t entry;
    int64_t n;
    int ret;

    g_mutex_lock(&s->lock);
    ret = s->corrupt ? -EIO : qcow2_l2_lookup(s, offset, 1, &entry, &n);
    g_mutex_unlock(&s->lock);
    if (ret < 0) {
        return ret;
    }
    if (qcow2_reads_zero(s, entry, offset)) {
        return 0;
    }
    if (flags & BDRV_REQ_NO_FALLBACK) {
        return -ENOTSUP;
    }
    zeroes = g_malloc0(bytes);
    return qcow2_do_write(s, offset, bytes, zeroes, flags & BDRV_REQ_FUA);
}

/* Is [@offset, @end) a run of whole clusters (the last may stop at the
 * image end)? */
static int64_t qcow2_whole_end(BDRVQcow2State *s, int64_t end)
{
    return end >= s->size ? QEMU_ALIGN_UP(s->size, s->cluster_size)
                          : qcow2_cluster_start(s, end);
}

int qcow2_do_zeroes(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                    BdrvRequestFlags flags)
{
    int64_t end = offset + bytes;
    int ret = 0;

    while (offset < end) {
        int64_t cend = qcow2_cluster_start(s, offset) + s->cluster_size;
        int64_t whole = qcow2_whole_end(s, end);

        if (!qcow2_offset_in_cluster(s, offset) && whole > offset) {
            int64_t done = qcow2_zero_clusters(s, offset, whole - offset,
                                               flags, false);
            if (done < 0) {
                return done;
            }
            offset += done;
            continue;
        }
        ret = qcow2_zero_partial(s, offset, MIN(end, cend) - offset, flags);
        if (ret < 0) {
            return ret;
        }
        offset = MIN(end, cend);
    }
    if (flags & BDRV_REQ_FUA) {
        ret = qcow2_do_flush(s);
    }
    return ret;
}

int qcow2_do_discard(BDRVQcow2State *s, int64_t offset, int64_t bytes)
{
    int64_t pos = QEMU_ALIGN_UP(offset, s->cluster_size);
    int64_t end = qcow2_whole_end(s, offset + bytes);

    while (pos < end) {
        int64_t done = qcow2_zero_clusters(s, pos, end - pos, 0, true);

        if (done < 0) {
            return done;
        }
        pos += done;
    }
    return 0;
}

/* Status of [@offset, @offset + @bytes), unallocated in this layer. */
static int qcow2_unallocated_status(BDRVQcow2State *s, int64_t offset,
                                    int64_t bytes, GArray *out)
{
    int64_t end = offset + bytes;

    while (s->backing && offset < MIN(end, s->backing->size)) {
        g_autoptr(GArray) sub = g_array_new(FALSE, FALSE,
                                            sizeof(BlockExtent));
        int64_t len = MIN(end, s->backing->size) - offset;
        int ret = qcow2_backing_status(s->backing, offset, len, sub);

        if (ret < 0) {
            return ret;
        }
        for (guint i = 0; i < sub->len; i++) {
            BlockExtent *e = &g_array_index(sub, BlockExtent, i);

            qcow2_extent_append(out, e->offset, e->length, e->flags,
                                e->depth + 1, e->host_offset);
            offset = e->offset + e->length;
        }
    }
    if (offset < end) {
        qcow2_extent_append(out, offset, end - offset, BDRV_BLOCK_ZERO, 0,
                            0);
    }
    return 0;
}

/* The status of an allocated cluster of each type; 0: unallocated. */
static const unsigned qcow2_cluster_status[] = {
    [QCOW2_CLUSTER_UNALLOCATED] = 0,
    [QCOW2_CLUSTER_ZERO_PLAIN] = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED,
    [QCOW2_CLUSTER_ZERO_ALLOC] = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                                 BDRV_BLOCK_OFFSET_VALID,
    [QCOW2_CLUSTER_NORMAL] = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                             BDRV_BLOCK_OFFSET_VALID,
    [QCOW2_CLUSTER_COMPRESSED] = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                                 BDRV_BLOCK_COMPRESSED,
};

/* A run of guest clusters that block status reports alike. */
typedef struct Qcow2StatusRun {
    int64_t start;              /* guest offset, cluster aligned */
    int64_t end;                /* past its last cluster */
    unsigned flags;             /* qcow2_cluster_status[]; 0: unallocated */
    int64_t host;               /* of @start, with BDRV_BLOCK_OFFSET_VALID */
} Qcow2StatusRun;

/* Add the guest clusters [@start, @start + @len) to @runs: they extend
 * the last run when alike (and, with an offset, contiguous on the host). */
static void qcow2_status_run_add(GArray *runs, int64_t start, int64_t len,
                                 unsigned flags, int64_t host)
{
    Qcow2StatusRun r = { start, start + len, flags, host };

    if (runs->len) {
        Qcow2StatusRun *last = &g_array_index(runs, Qcow2StatusRun,
                                              runs->len - 1);

        if (last->end == start && last->flags == flags &&
            (!(flags & BDRV_BLOCK_OFFSET_VALID) ||
             last->host + (start - last->start) == host)) {
            last->end += len;
            return;
        }
    }
    g_array_append_val(runs, r);
}

/*
 * The runs of the clusters from the one holding @pos to the one holding
 * @end - 1: when the L1 entry of @pos has no L2 table, one unallocated
 * run over it and every following L1 entry without one (no cluster is
 * looked at); else the runs of its L2 table, each entry checked.
 * *@table says whether an L2 table was looked at.  Lock held.
 */
static int qcow2_status_runs(BDRVQcow2State *s, int64_t pos, int64_t end,
                             GArray *runs, bool *table)
{
    int64_t cs = s->cluster_size;
    int64_t gc = pos >> s->cluster_bits;
    int64_t last = (end - 1) >> s->cluster_bits;
    int64_t l1_idx = gc >> s->l2_bits;
    int64_t l2_idx = gc & ((INT64_C(1) << s->l2_bits) - 1);
    int64_t n = MIN((INT64_C(1) << s->l2_bits) - l2_idx, last - gc + 1);
    Qcow2CacheEntry *e;
    int ret = 0;

    *table = (s->l1[l1_idx] & L1E_OFFSET_MASK) != 0;
    if (!*table) {
        int64_t next = qcow2_next_l2_table(s, l1_idx + 1,
                                           (last >> s->l2_bits) + 1);
        int64_t next_gc = MIN(next << s->l2_bits, last + 1);

        s->status_l1_entries += next - l1_idx + (next <= last >> s->l2_bits);
        qcow2_status_run_add(runs, gc << s->cluster_bits,
                             (next_gc - gc) << s->cluster_bits, 0, 0);
        return 0;
    }
    s->status_l1_entries++;
    ret = qcow2_cache_get(s, s->l2_cache, s->l1[l1_idx] & L1E_OFFSET_MASK,
                          false, &e);
    if (ret < 0) {
        return ret;
    }
    s->status_l2_entries += n;
    for (int64_t i = 0; i < n; i++) {
        uint64_t entry = qcow2_be64(e->data + (l2_idx + i) * 8);
        int64_t host = 0;

        /* An unallocated entry is 0, unless it has stray flags. */
        if (entry) {
            ret = qcow2_entry_host(s, entry, &host);
            if (ret < 0) {
                break;
            }
        }
        qcow2_status_run_add(runs, (gc + i) << s->cluster_bits, cs,
                             qcow2_cluster_status[qcow2_l2_type(entry)],
                             host);
    }
    qcow2_cache_put(e);
    return ret;
}

int qcow2_do_block_status(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                          GArray *out)
{
    int64_t end = MIN(offset + bytes, s->size);
    g_autoptr(GArray) runs = g_array_new(FALSE, FALSE,
                                         sizeof(Qcow2StatusRun));
    int64_t pos = offset;
    guint first = out->len;
    int tables = 0;

    while (pos < end && tables < QCOW2_STATUS_MAX_TABLES &&
           out->len - first < QCOW2_STATUS_MAX_EXTENTS) {
        bool table = false;
        int ret;

        g_array_set_size(runs, 0);
        g_mutex_lock(&s->lock);
        ret = s->corrupt ? -EIO
                         : qcow2_status_runs(s, pos, end, runs, &table);
        g_mutex_unlock(&s->lock);
        if (ret < 0) {
            return ret;
        }
        tables += table;
        /* The backing chain is asked with the lock dropped. */
        for (guint i = 0; i < runs->len; i++) {
            Qcow2StatusRun *r = &g_array_index(runs, Qcow2StatusRun, i);
            int64_t rend = MIN(r->end, end);

            if (r->flags) {
                qcow2_extent_append(out, pos, rend - pos, r->flags, 0,
                                    r->host + (pos - r->start));
            } else {
                ret = qcow2_unallocated_status(s, pos, rend - pos, out);
                if (ret < 0) {
                    return ret;
                }
            }
            pos = rend;
        }
    }
    return 0;
}
