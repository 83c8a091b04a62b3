/*
 * qcow2-lite refcounts: lookups, updates, cluster and byte allocation,
 * refcount block allocation and refcount table growth.  The deferred
 * frees are in qcow2-refcount-free.c.
 *
 * Only 16-bit refcounts are written (read-write opens refuse other
 * widths); qcow2_refblock_get() reads every width for `check`.  All of it
 * runs under the layer's lock.
 *
 * A new refcount block is placed inside the range it covers, so that it
 * counts itself: a range without a block has no allocated cluster, so any
 * of its clusters that is not metadata is free.  It is written and synced
 * before the refcount table entry that hooks it in.  A grown refcount
 * table goes past the end of the file with the new blocks that count it;
 * blocks and table are synced before the header switches to it with one
 * 12-byte write, and the old table is freed after that.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <inttypes.h>

uint64_t qcow2_refblock_get(const uint8_t *rb, int order, int64_t idx)
{
    switch (order) {
    case 0:
    case 1:
    case 2: {
        int bits = 1 << order;
        int64_t bit = idx * bits;

        return (rb[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
    }
    case 3:
        return rb[idx];
    case 4:
        return qcow2_be16(rb + idx * 2);
    case 5:
        return qcow2_be32(rb + idx * 4);
    default:
        return qcow2_be64(rb + idx * 8);
    }
}

static int64_t qcow2_rt_index(const BDRVQcow2State *s, int64_t cluster)
{
    return cluster >> s->refblock_bits;
}

static bool qcow2_is_meta(const BDRVQcow2State *s, int64_t cluster)
{
    return g_hash_table_contains(s->meta, GSIZE_TO_POINTER(cluster));
}

/* The refcount block covering range @rt (which has one), pinned. */
static int qcow2_get_refblock(BDRVQcow2State *s, int64_t rt,
                              Qcow2CacheEntry **e)
{
    return qcow2_cache_get(s, s->rb_cache, s->reftable[rt], false, e);
}

int qcow2_get_refcount(BDRVQcow2State *s, int64_t index, uint64_t *rc)
{
    int64_t rt = qcow2_rt_index(s, index);
    Qcow2CacheEntry *e;
    int ret;

    if (rt >= s->reftable_size || !s->reftable[rt]) {
        *rc = 0;
        return 0;
    }
    ret = qcow2_get_refblock(s, rt, &e);
    if (ret < 0) {
        return ret;
    }
    *rc = qcow2_be16(e->data +
                     (index & ((INT64_C(1) << s->refblock_bits) - 1)) * 2);
    qcow2_cache_put(e);
    return 0;
}

/* Write one 8-byte refcount table entry, durably. */
static int qcow2_write_reftable_entry(BDRVQcow2State *s, int64_t rt)
{
    uint8_t buf[8];
    int ret;

    qcow2_put_be64(buf, s->reftable[rt]);
    ret = qcow2_pwrite(s, s->reftable_offset + rt * 8, buf, 8);
    return ret < 0 ? ret : qcow2_sync(s);
}

/* Remember that [@start, @end) of the file is in use from now on. */
static void qcow2_note_used(BDRVQcow2State *s, int64_t start, int64_t end)
{
    s->alloc_end = MAX(s->alloc_end, end);
    s->fresh_start = MAX(s->fresh_start, end);
}

/* Give range @rt (inside the table, no block yet) a refcount block. */
static int qcow2_refblock_alloc(BDRVQcow2State *s, int64_t rt)
{
    int64_t entries = INT64_C(1) << s->refblock_bits;
    int64_t first = rt << s->refblock_bits;
    g_autofree uint8_t *buf = NULL;
    int64_t b = -1;
    int ret;

    for (int64_t c = MAX(first, 1); c < first + entries; c++) {
        if (!qcow2_is_meta(s, c)) {
            b = c;
            break;
        }
    }
    if (b < 0) {
        return qcow2_signal_corruption(s, "no room for refcount block %"
                                       PRId64, rt);
    }
    ret = qcow2_guard_check(s, b, "a refcount block on");
    if (ret < 0) {
        return ret;
    }
    buf = g_malloc0(s->cluster_size);
    qcow2_put_be16(buf + (b - first) * 2, 1);
    ret = qcow2_pwrite(s, b * s->cluster_size, buf, s->cluster_size);
    if (ret == 0) {
        ret = qcow2_sync(s);
    }
    if (ret < 0) {
        return ret;
    }
    s->reftable[rt] = b * s->cluster_size;
    ret = qcow2_write_reftable_entry(s, rt);
    if (ret < 0) {
        s->reftable[rt] = 0;
        return ret;
    }
    g_hash_table_insert(s->meta, GSIZE_TO_POINTER(b),
                        GINT_TO_POINTER(QCOW2_META_REFBLOCK));
    qcow2_note_used(s, b * s->cluster_size, (b + 1) * s->cluster_size);
    return 0;
}

/* Is cluster @c free (for a new area): no metadata, refcount 0? */
static int qcow2_cluster_free(BDRVQcow2State *s, int64_t c, bool *free)
{
    uint64_t rc;
    int ret;

    if (c == 0 || qcow2_is_meta(s, c)) {
        *free = false;
        return 0;
    }
    ret = qcow2_get_refcount(s, c, &rc);
    *free = ret == 0 && rc == 0;
    if (*free) {
        ret = qcow2_guard_check(s, c, "the reuse of");
        *free = ret == 0;
    }
    return ret;
}

/*
 * Where a grown table and its new blocks go: @total clusters from the
 * first cluster past everything in use from which they are all free.
 */
static int qcow2_grow_area(BDRVQcow2State *s, int64_t total, int64_t *start)
{
    int64_t c = DIV_ROUND_UP(MAX(qcow2_file_end(s), s->fresh_start),
                             s->cluster_size);

    for (int64_t i = 0; i < total; i++) {
        bool free;
        int ret = qcow2_cluster_free(s, c + i, &free);

        if (ret < 0) {
            return ret;
        }
        if (!free) {
            c += i + 1;
            i = -1;
        }
    }
    *start = c;
    return 0;
}

/* Ranges without a refcount block among those [@start, @start + @n)
 * touches, in the table being grown to @new_size entries. */
static int64_t qcow2_count_missing_blocks(BDRVQcow2State *s, int64_t start,
                                          int64_t n)
{
    int64_t missing = 0;

    for (int64_t r = qcow2_rt_index(s, start);
         r <= qcow2_rt_index(s, start + n - 1); r++) {
        if (r >= s->reftable_size || !s->reftable[r]) {
            missing++;
        }
    }
    return missing;
}

int qcow2_reftable_write(BDRVQcow2State *s, int64_t start,
                         const uint8_t *blocks, int64_t nb,
                         const uint8_t *table, int64_t nt)
{
    int64_t cs = s->cluster_size;
    uint8_t hdr[12];
    int ret = 0;

    if (nb) {
        ret = qcow2_pwrite(s, start * cs, blocks, nb * cs);
    }
    if (ret == 0) {
        ret = qcow2_pwrite(s, (start + nb) * cs, table, nt * cs);
    }
    if (ret == 0) {
        ret = qcow2_sync(s);
    }
    if (ret < 0) {
        return ret;
    }
    qcow2_put_be64(hdr, (start + nb) * cs);
    qcow2_put_be32(hdr + 8, nt);
    ret = qcow2_pwrite(s, QCOW2_HDR_REFTABLE_OFFSET, hdr, sizeof(hdr));
    return ret < 0 ? ret : qcow2_sync(s);
}

/* Write the grown table, its new blocks, switch the header, free the old
 * table.  @table has @nt clusters of entries; @nb new blocks go at @start,
 * the table right after them. */
static int qcow2_reftable_switch(BDRVQcow2State *s, uint64_t *table,
                                 int64_t nt, int64_t start, int64_t nb)
{
    int64_t cs = s->cluster_size;
    int64_t entries = INT64_C(1) << s->refblock_bits;
    int64_t total = nb + nt;
    int64_t old_off = s->reftable_offset, old_clusters = s->reftable_clusters;
    g_autofree uint8_t *blocks = g_malloc0(nb * cs);
    g_autofree uint8_t *raw = g_malloc(nt * cs);
    bool wrote;
    int64_t k = 0;
    int ret;

    /* Hook the new blocks in, in range order, then count the area. */
    for (int64_t r = qcow2_rt_index(s, start);
         r <= qcow2_rt_index(s, start + total - 1); r++) {
        if (r >= s->reftable_size || !s->reftable[r]) {
            table[r] = (start + k++) * cs;
        }
    }
    for (int64_t c = start; c < start + total; c++) {
        int64_t r = qcow2_rt_index(s, c);

        if (r < s->reftable_size && s->reftable[r]) {
            ret = qcow2_update_refcount(s, c * cs, cs, 1);
            if (ret < 0) {
                return ret;
            }
        } else {
            int64_t blk = table[r] / cs - start;

            qcow2_put_be16(blocks + blk * cs + (c & (entries - 1)) * 2, 1);
        }
    }
    for (int64_t i = 0; i < nt * cs / 8; i++) {
        qcow2_put_be64(raw + i * 8, table[i]);
    }
    ret = qcow2_cache_flush(s, s->rb_cache, &wrote);
    if (ret == 0) {
        ret = qcow2_reftable_write(s, start, blocks, nb, raw, nt);
    }
    if (ret < 0) {
        return ret;
    }

    /* The new table is live. */
    g_free(s->reftable);
    s->reftable = g_steal_pointer(&table);
    s->reftable_size = nt * cs / 8;
    s->reftable_offset = (start + nb) * cs;
    s->reftable_clusters = nt;
    for (int64_t c = 0; c < old_clusters; c++) {
        g_hash_table_remove(s->meta, GSIZE_TO_POINTER(old_off / cs + c));
    }
    for (int64_t c = start; c < start + total; c++) {
        g_hash_table_insert(s->meta, GSIZE_TO_POINTER(c),
                            GINT_TO_POINTER(c < start + nb ?
                                            QCOW2_META_REFBLOCK :
                                            QCOW2_META_REFTABLE));
    }
    qcow2_note_used(s, start * cs, (start + total) * cs);
    return qcow2_update_refcount(s, old_off, old_clusters * cs, -1);
}

/* Grow the refcount table so that it has entry @need. */
static int qcow2_reftable_grow(BDRVQcow2State *s, int64_t need)
{
    int64_t cs = s->cluster_size;
    int64_t per_cluster = cs / 8;
    int64_t want = MAX(need + 1, s->reftable_size + s->reftable_size / 2);
    int64_t nt = DIV_ROUND_UP(want, per_cluster);
    int64_t nb = 0, start = 0;
    uint64_t *table;
    int ret;

    /* Blocks, table and their own coverage: iterate to a fixed point. */
    for (int i = 0; i < 64; i++) {
        int64_t nb2, nt2, last;

        ret = qcow2_grow_area(s, nb + nt, &start);
        if (ret < 0) {
            return ret;
        }
        nb2 = qcow2_count_missing_blocks(s, start, nb + nt);
        last = qcow2_rt_index(s, start + nb2 + nt - 1);
        nt2 = DIV_ROUND_UP(MAX(want, last + 1), per_cluster);
        if (nb2 == nb && nt2 == nt) {
            break;
        }
        nb = nb2;
        nt = nt2;
    }
    if (nt * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return -EFBIG;
    }
    table = g_new0(uint64_t, nt * per_cluster);
    memcpy(table, s->reftable, s->reftable_size * 8);
    ret = qcow2_reftable_switch(s, table, nt, start, nb);
    if (ret < 0 && s->reftable != table) {
        g_free(table);
    }
    return ret;
}

/*
 * Make sure range @rt has a refcount block.  Returns 0 when it had one,
 * 1 when one was created (or the table grown): the caller restarts its
 * search, since the new metadata may sit where it was looking.
 */
static int qcow2_ensure_refblock(BDRVQcow2State *s, int64_t rt)
{
    int ret;

    if (rt >= s->reftable_size) {
        ret = qcow2_reftable_grow(s, rt);
        return ret < 0 ? ret : 1;
    }
    if (!s->reftable[rt]) {
        ret = qcow2_refblock_alloc(s, rt);
        return ret < 0 ? ret : 1;
    }
    return 0;
}

/* A cluster's refcount dropped to 0. */
static void qcow2_cluster_freed(BDRVQcow2State *s, int64_t c)
{
    gpointer type = g_hash_table_lookup(s->meta, GSIZE_TO_POINTER(c));

    if (c < s->free_cluster_index) {
        s->free_cluster_index = c;
    }
    if (s->free_byte_offset && s->free_byte_offset / s->cluster_size == c) {
        s->free_byte_offset = 0;
    }
    if (GPOINTER_TO_INT(type) == QCOW2_META_L2) {
        qcow2_cache_discard(s->l2_cache, c * s->cluster_size);
        g_hash_table_remove(s->meta, GSIZE_TO_POINTER(c));
    }
}

int qcow2_update_refcount(BDRVQcow2State *s, int64_t offset,
                          int64_t length, int delta)
{
    int64_t first = offset >> s->cluster_bits;
    int64_t last = (offset + length - 1) >> s->cluster_bits;
    int64_t mask = (INT64_C(1) << s->refblock_bits) - 1;

    if (length <= 0) {
        return 0;
    }
    for (int64_t c = first; c <= last; c++) {
        int64_t rt = qcow2_rt_index(s, c);
        Qcow2CacheEntry *e;
        uint64_t rc;
        int ret;

        if (rt >= s->reftable_size || !s->reftable[rt]) {
            if (delta < 0) {
                return qcow2_signal_corruption(s, "freeing cluster 0x%"
                                               PRIx64 " whose refcount is "
                                               "0", c << s->cluster_bits);
            }
            ret = qcow2_ensure_refblock(s, rt);
            if (ret < 0) {
                return ret;
            }
        }
        ret = qcow2_get_refblock(s, rt, &e);
        if (ret < 0) {
            return ret;
        }
        rc = qcow2_be16(e->data + (c & mask) * 2);
        if ((delta < 0 && rc < (uint64_t)-delta) ||
            (delta > 0 && rc + delta > QCOW2_REFCOUNT_MAX)) {
            qcow2_cache_put(e);
            if (delta > 0) {
                return -ERANGE;
            }
            return qcow2_signal_corruption(s, "refcount of cluster 0x%"
                                           PRIx64 " would drop below 0",
                                           c << s->cluster_bits);
        }
        rc += delta;
        qcow2_put_be16(e->data + (c & mask) * 2, rc);
        qcow2_cache_mark_dirty(s->rb_cache, e);
        qcow2_cache_put(e);
        if (rc == 0) {
            qcow2_cluster_freed(s, c);
        }
    }
    return 0;
}

/* The first run of free clusters at or after free_cluster_index, at most
 * @n long.  Ranges without a block are free (except metadata). */
static int qcow2_find_free(BDRVQcow2State *s, int64_t n, int64_t *start,
                           int64_t *got)
{
    int64_t c = MAX(s->free_cluster_index, 1);
    int64_t run = 0;

    for (;; c++) {
        bool free;
        int ret = qcow2_cluster_free(s, c, &free);

        if (ret < 0) {
            return ret;
        }
        if (free) {
            if (run == 0) {
                *start = c;
            }
            if (++run == n) {
                break;
            }
        } else if (run) {
            break;
        } else {
            s->free_cluster_index = c + 1;
        }
    }
    *got = run;
    return 0;
}

int qcow2_alloc_clusters(BDRVQcow2State *s, int64_t n, int64_t *host,
                         int64_t *got, bool *fresh)
{
    int64_t start = 0, cnt = 0;
    int ret;

    for (;;) {
        bool restart = false;

        ret = qcow2_find_free(s, n, &start, &cnt);
        if (ret < 0) {
            return ret;
        }
        for (int64_t r = qcow2_rt_index(s, start);
             r <= qcow2_rt_index(s, start + cnt - 1) && !restart; r++) {
            ret = qcow2_ensure_refblock(s, r);
            if (ret < 0) {
                return ret;
            }
            restart = ret == 1;
        }
        if (!restart) {
            break;
        }
    }
    if ((start + cnt) << s->cluster_bits > (int64_t)L2E_OFFSET_MASK) {
        return -EFBIG;
    }
    ret = qcow2_update_refcount(s, start << s->cluster_bits,
                                cnt << s->cluster_bits, 1);
    if (ret < 0) {
        return ret;
    }
    if (start == s->free_cluster_index) {
        s->free_cluster_index = start + cnt;
    }
    *host = start << s->cluster_bits;
    *got = cnt;
    *fresh = *host >= s->fresh_start;
    qcow2_note_used(s, *host, *host + (cnt << s->cluster_bits));
    return 0;
}

int qcow2_alloc_bytes(BDRVQcow2State *s, int64_t size, int64_t *host)
{
    int64_t cs = s->cluster_size;
    int64_t off = s->free_byte_offset;
    int64_t h, got;
    bool fresh;
    int ret;

    g_assert(size > 0 && size < cs);
    if (off && off % cs) {
        int64_t cur = off / cs;
        uint64_t rc;

        ret = qcow2_get_refcount(s, cur, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc > 0 && rc < QCOW2_REFCOUNT_MAX) {
            if (off + size <= (cur + 1) * cs) {
                ret = qcow2_update_refcount(s, cur * cs, cs, 1);
                if (ret < 0) {
                    return ret;
                }
                *host = off;
                s->free_byte_offset = off + size;
                return 0;
            }
            /* Spill into the next cluster only if it is free. */
            if (qcow2_rt_index(s, cur + 1) < s->reftable_size &&
                s->reftable[qcow2_rt_index(s, cur + 1)]) {
                bool free;

                ret = qcow2_cluster_free(s, cur + 1, &free);
                if (ret < 0) {
                    return ret;
                }
                if (free) {
                    ret = qcow2_update_refcount(s, cur * cs, 2 * cs, 1);
                    if (ret < 0) {
                        return ret;
                    }
                    qcow2_note_used(s, off, (cur + 2) * cs);
                    *host = off;
                    s->free_byte_offset = off + size;
                    return 0;
                }
            }
        }
    }
    ret = qcow2_alloc_clusters(s, 1, &h, &got, &fresh);
    if (ret < 0) {
        return ret;
    }
    *host = h;
    s->free_byte_offset = h + size;
    return 0;
}
