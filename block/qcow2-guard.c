/*
 * qcow2-lite write guard: the host clusters that the image's mappings use
 * more often than their refcounts say.
 *
 * The allocator trusts the refcounts: a cluster with refcount 0 is free.
 * In an image whose refcounts are too low (a refcount table entry or a
 * refcount block zeroed, a bad repair) a cluster that an L2 entry still
 * maps would be handed out again and another guest cluster's data written
 * over it.  QEMU's overlap checks only catch this when the cluster is
 * metadata; for data it goes unnoticed.  So, when an image is opened for
 * writing, every reference (header, refcount table and blocks, L1, L2
 * tables and the clusters their entries map) is counted once and compared
 * with the refcounts; the clusters whose refcount is below their
 * references are remembered in a sparse bitmap, and so is every cluster
 * mapped past the end of the file.  From then on, handing out such a
 * cluster or writing guest data in place into one marks the image corrupt
 * and fails the request with EIO (qcow2-refcount.c, qcow2-file.c).
 *
 * The cost is one read of every L2 table and refcount block at open
 * (nothing for a new image), and one bitmap lookup per cluster that the
 * allocator considers when there is a bitmap: a consistent image keeps
 * none.  The guard is
 * never cleared: a guarded cluster stays unusable for the rest of the
 * session even if all its references go (the image is inconsistent; `check
 * -r all` repairs it).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <inttypes.h>

/* The bitmaps are sparse: chunks of 2^15 clusters (4 KiB of bits), made
 * when a cluster in them is referenced, so that a huge sparse file costs
 * only what its tables reference. */
#define QCOW2_GUARD_CHUNK_BITS  15
#define QCOW2_GUARD_CHUNK_BYTES ((1 << QCOW2_GUARD_CHUNK_BITS) / 8)

/* Reference counting at open: a bit per referenced host cluster of the
 * file, a count for the few referenced more than once (compressed
 * packing). */
typedef struct Qcow2GuardScan {
    BDRVQcow2State *s;
    int64_t nb;                 /* host clusters of the file */
    GHashTable *seen;           /* chunk -> bitmap: referenced */
    GHashTable *multi;          /* cluster -> references beyond the first */
} Qcow2GuardScan;

static GHashTable *qcow2_guard_map_new(void)
{
    return g_hash_table_new_full(NULL, NULL, NULL, g_free);
}

static uint8_t *qcow2_guard_chunk(GHashTable *map, int64_t c, bool create)
{
    gpointer key = GSIZE_TO_POINTER(c >> QCOW2_GUARD_CHUNK_BITS);
    uint8_t *chunk = g_hash_table_lookup(map, key);

    if (!chunk && create) {
        chunk = g_malloc0(QCOW2_GUARD_CHUNK_BYTES);
        g_hash_table_insert(map, key, chunk);
    }
    return chunk;
}

bool qcow2_guard_test(const BDRVQcow2State *s, int64_t c)
{
    uint8_t *chunk = qcow2_guard_chunk(s->guard, c, false);
    int64_t bit = c & ((1 << QCOW2_GUARD_CHUNK_BITS) - 1);

    return chunk && (chunk[bit / 8] & (1 << (bit % 8)));
}

static void qcow2_guard_ref(Qcow2GuardScan *g, uint64_t off, uint64_t len)
{
    int cb = g->s->cluster_bits;

    if (!len) {
        return;
    }
    for (uint64_t c = off >> cb; c <= (off + len - 1) >> cb; c++) {
        int64_t bit = c & ((1 << QCOW2_GUARD_CHUNK_BITS) - 1);
        gpointer key = GSIZE_TO_POINTER(c);
        uint8_t *chunk;

        if (c >= (uint64_t)g->nb) {
            /* Mapped past the end of the file: whatever the allocator
             * puts there later would be shared. */
            g->s->guard_beyond = MIN(g->s->guard_beyond, (int64_t)c);
            return;
        }
        chunk = qcow2_guard_chunk(g->seen, c, true);
        if (!(chunk[bit / 8] & (1 << (bit % 8)))) {
            chunk[bit / 8] |= 1 << (bit % 8);
        } else {
            g_hash_table_insert(g->multi, key, GSIZE_TO_POINTER(
                GPOINTER_TO_SIZE(g_hash_table_lookup(g->multi, key)) + 1));
        }
    }
}

static uint64_t qcow2_guard_refs(Qcow2GuardScan *g, int64_t c)
{
    return 1 + GPOINTER_TO_SIZE(g_hash_table_lookup(g->multi,
                                                    GSIZE_TO_POINTER(c)));
}

/* The clusters an L2 table maps. */
static int qcow2_guard_l2(Qcow2GuardScan *g, uint64_t l2_off, uint8_t *buf)
{
    BDRVQcow2State *s = g->s;
    int ret = qcow2_pread(s, l2_off, buf, s->cluster_size);

    if (ret < 0) {
        return ret;
    }
    for (int64_t i = 0; i < s->cluster_size / 8; i++) {
        uint64_t e = qcow2_be64(buf + i * 8);
        int64_t off, len;

        switch (qcow2_l2_type(e)) {
        case QCOW2_CLUSTER_COMPRESSED:
            qcow2_compressed_range(s, e, &off, &len);
            qcow2_guard_ref(g, off, len);
            break;
        case QCOW2_CLUSTER_NORMAL:
        case QCOW2_CLUSTER_ZERO_ALLOC:
            off = e & L2E_OFFSET_MASK;
            if (!(off & (s->cluster_size - 1))) {
                /* (unaligned ones are refused when used) */
                qcow2_guard_ref(g, off, s->cluster_size);
            }
            break;
        default:
            break;
        }
    }
    return 0;
}

/* Keep the bits of the clusters whose refcount is below their
 * references; clear the others, drop chunks left empty.  Returns how many
 * stay, or -errno. */
static int64_t qcow2_guard_compare(Qcow2GuardScan *g, uint8_t *buf)
{
    BDRVQcow2State *s = g->s;
    int64_t per_rb = INT64_C(1) << s->refblock_bits;
    int64_t chunk_clusters = 1 << QCOW2_GUARD_CHUNK_BITS;
    g_autoptr(GArray) keys = g_array_new(FALSE, FALSE, sizeof(int64_t));
    GHashTableIter it;
    gpointer key;
    int64_t kept = 0;
    int64_t loaded = -1;        /* the refcount block range in @buf */

    g_hash_table_iter_init(&it, g->seen);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        int64_t k = GPOINTER_TO_SIZE(key);

        g_array_append_val(keys, k);
    }
    for (guint n = 0; n < keys->len; n++) {
        int64_t k = g_array_index(keys, int64_t, n);
        uint8_t *chunk = qcow2_guard_chunk(g->seen, k * chunk_clusters,
                                           false);
        int64_t end = MIN((k + 1) * chunk_clusters, g->nb);
        bool any = false;

        for (int64_t c = k * chunk_clusters; c < end; c++) {
            int64_t bit = c - k * chunk_clusters;
            int64_t r = c / per_rb;
            bool have = r < s->reftable_size && s->reftable[r];
            uint64_t rc = 0;

            if (!(chunk[bit / 8] & (1 << (bit % 8)))) {
                continue;
            }
            if (have && loaded != r) {
                int ret = qcow2_pread(s, s->reftable[r], buf,
                                      s->cluster_size);

                if (ret < 0) {
                    return ret;
                }
                loaded = r;
            }
            if (have) {
                rc = qcow2_refblock_get(buf, s->header.refcount_order,
                                        c - r * per_rb);
            }
            if (rc >= qcow2_guard_refs(g, c)) {
                chunk[bit / 8] &= ~(1 << (bit % 8));
            } else {
                kept++;
                any = true;
            }
        }
        if (!any) {
            g_hash_table_remove(g->seen, GSIZE_TO_POINTER(k));
        }
    }
    return kept;
}

bool qcow2_guard_build(BDRVQcow2State *s, GError **errp)
{
    Qcow2GuardScan g = { .s = s };
    g_autofree uint8_t *buf = g_malloc(s->cluster_size);
    int64_t kept = 0;
    int ret = 0;

    s->guard_beyond = INT64_MAX;
    g.nb = DIV_ROUND_UP(s->file_size, s->cluster_size);
    g.seen = qcow2_guard_map_new();
    g.multi = g_hash_table_new(NULL, NULL);

    qcow2_guard_ref(&g, 0, s->cluster_size);
    qcow2_guard_ref(&g, s->reftable_offset,
                    s->reftable_clusters * s->cluster_size);
    for (int64_t r = 0; r < s->reftable_size; r++) {
        qcow2_guard_ref(&g, s->reftable[r], s->reftable[r] ?
                        s->cluster_size : 0);
    }
    qcow2_guard_ref(&g, s->l1_offset, (int64_t)s->l1_size * 8);
    for (uint32_t i = 0; i < s->l1_size && ret == 0; i++) {
        uint64_t l2 = s->l1[i] & L1E_OFFSET_MASK;

        if (l2) {
            qcow2_guard_ref(&g, l2, s->cluster_size);
            ret = qcow2_guard_l2(&g, l2, buf);
        }
    }
    if (ret == 0) {
        kept = qcow2_guard_compare(&g, buf);
        ret = kept < 0 ? kept : 0;
    }
    g_hash_table_destroy(g.multi);
    if (ret < 0) {
        g_hash_table_destroy(g.seen);
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not read the mapping tables: %s",
                    g_strerror(-ret));
        return false;
    }
    if (kept) {
        s->guard = g.seen;
        g_debug("qcow2 '%s': %" PRId64 " clusters are used more often "
                "than their refcounts say", s->filename, kept);
    } else {
        g_hash_table_destroy(g.seen);
    }
    return true;
}

int qcow2_guard_check(BDRVQcow2State *s, int64_t c, const char *what)
{
    if (!qcow2_guarded(s, c)) {
        return 0;
    }
    return qcow2_signal_corruption(s, "preventing %s cluster 0x%" PRIx64
                                   ", which a mapping still uses (its "
                                   "refcount is below its references)",
                                   what, c << s->cluster_bits);
}
