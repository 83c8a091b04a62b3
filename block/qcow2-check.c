/*
 * qcow2-lite consistency check (`mirror-tool check`), read-only: count
 * every reference to every host cluster, compare with the refcounts, and
 * check the COPIED flags, offsets and reserved bits of the active tables,
 * reporting problems in qemu-img check's words.
 *
 * References come from the header, the active L1 table and its L2 tables
 * (a compressed cluster references every host cluster its sectors touch),
 * the refcount table and blocks, the snapshot table with each snapshot's
 * L1 and L2 tables, and the bitmap directory with its bitmap tables.
 * Everything is read straight from the file, in bounded pieces.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "block/qcow2.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>

/* Most host clusters a check handles (two 4-byte counters each). */
#define QCOW2_CHECK_MAX_CLUSTERS    (INT64_C(1) << 26)
#define QCOW2_CHECK_MAX_TABLE       (64 * MiB)

/*
 * Bytes of tables one check may read: QCOW2_CHECK_READ_FACTOR times the
 * file plus QCOW2_CHECK_READ_SLACK.  A table is read once per table that
 * points at it, so snapshots or bitmaps that all point at the same big
 * tables would make the work quadratic in the file size (a 64 KiB image
 * kept the check busy for minutes).
 */
#define QCOW2_CHECK_READ_FACTOR     16
#define QCOW2_CHECK_READ_SLACK      (1 * MiB)

typedef struct Qcow2Check {
    BDRVQcow2State *s;
    BdrvCheckResult *res;
    int64_t nb;                 /* host clusters in the file */
    uint32_t *refs;             /* references found */
    uint32_t *rc;               /* refcounts on disk */
    uint64_t read_budget;       /* bytes of tables left to read */
    bool read_stopped;          /* the budget ran out (reported once) */
} Qcow2Check;

static void G_GNUC_PRINTF(3, 4) qcow2_check_msg(Qcow2Check *c,
                                               int64_t *counter,
                                               const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_ptr_array_add(c->res->messages, g_strdup_vprintf(fmt, ap));
    va_end(ap);
    (*counter)++;
}

/* One reference to every cluster of [@off, @off + @len). */
static void qcow2_check_ref(Qcow2Check *c, uint64_t off, uint64_t len,
                            const char *what)
{
    int cb = c->s->cluster_bits;

    if (!len) {
        return;
    }
    for (uint64_t i = off >> cb; i <= (off + len - 1) >> cb; i++) {
        if (i >= (uint64_t)c->nb) {
            qcow2_check_msg(c, &c->res->corruptions, "ERROR %s at offset "
                            "0x%" PRIx64 " lies beyond the end of the file",
                            what, off);
            return;
        }
        if (c->refs[i] < UINT32_MAX) {
            c->refs[i]++;
        }
    }
}

/* Read a table of @bytes at @off (bounded by the caller). */
static uint8_t *qcow2_check_read(Qcow2Check *c, uint64_t off,
                                 uint64_t bytes)
{
    uint8_t *buf;

    if (c->read_stopped || bytes > c->read_budget) {
        if (!c->read_stopped) {
            c->read_stopped = true;
            c->res->check_errors++;
            g_ptr_array_add(c->res->messages,
                            g_strdup_printf("ERROR the tables point at "
                                            "tables more than %d times the "
                                            "image size: check stopped",
                                            QCOW2_CHECK_READ_FACTOR));
        }
        return NULL;
    }
    c->read_budget -= bytes;
    buf = (int64_t)off < c->s->file_size &&
          bytes <= (uint64_t)(c->s->file_size - off) ?
          g_malloc(MAX(bytes, 1)) : NULL;
    if (!buf || qcow2_pread(c->s, off, buf, bytes) < 0) {
        g_free(buf);
        c->res->check_errors++;
        g_ptr_array_add(c->res->messages,
                        g_strdup_printf("ERROR cannot read %" PRIu64
                                        " bytes at 0x%" PRIx64, bytes, off));
        return NULL;
    }
    return buf;
}

/* References of one L2 table; @active: the image's own (counts stats). */
static void qcow2_check_l2(Qcow2Check *c, uint64_t l2_off, bool active)
{
    BDRVQcow2State *s = c->s;
    g_autofree uint8_t *l2 = qcow2_check_read(c, l2_off, s->cluster_size);
    int64_t next_contiguous = 0;    /* fragmentation, within the table */

    for (int64_t i = 0; l2 && i < s->cluster_size / 8; i++) {
        uint64_t e = qcow2_be64(l2 + i * 8);
        int64_t off, len;

        switch (qcow2_l2_type(e)) {
        case QCOW2_CLUSTER_COMPRESSED:
            qcow2_compressed_range(s, e, &off, &len);
            qcow2_check_ref(c, off, len, "compressed cluster");
            if (active) {
                /* Fragmented by nature, as qemu-img counts them. */
                c->res->allocated_clusters++;
                c->res->compressed_clusters++;
                c->res->fragmented_clusters++;
            }
            break;
        case QCOW2_CLUSTER_NORMAL:
        case QCOW2_CLUSTER_ZERO_ALLOC:
            off = e & L2E_OFFSET_MASK;
            if (off & (s->cluster_size - 1)) {
                qcow2_check_msg(c, &c->res->corruptions, "ERROR offset=%"
                                PRIx64 ": Cluster is not properly aligned; "
                                "L2 entry corrupted.", off);
                break;
            }
            qcow2_check_ref(c, off, s->cluster_size, "data cluster");
            if (active) {
                c->res->allocated_clusters++;
                if (next_contiguous && off != next_contiguous) {
                    c->res->fragmented_clusters++;
                }
                next_contiguous = off + s->cluster_size;
            }
            break;
        default:
            break;
        }
    }
}

/* An L1 table (@n entries at @off) and its L2 tables. */
static void qcow2_check_l1(Qcow2Check *c, uint64_t off, uint64_t n,
                           bool active)
{
    g_autofree uint8_t *l1 = NULL;

    qcow2_check_ref(c, off, n * 8, "L1 table");
    if (!n || n * 8 > QCOW2_MAX_L1_BYTES) {
        return;
    }
    l1 = qcow2_check_read(c, off, n * 8);
    for (uint64_t i = 0; l1 && i < n; i++) {
        uint64_t l2 = qcow2_be64(l1 + i * 8) & L1E_OFFSET_MASK;

        if (!l2) {
            continue;
        }
        if (l2 & (c->s->cluster_size - 1)) {
            qcow2_check_msg(c, &c->res->corruptions, "ERROR l2_offset=%"
                            PRIx64 ": Table is not cluster aligned; L1 entry "
                            "corrupted", l2);
            continue;
        }
        qcow2_check_ref(c, l2, c->s->cluster_size, "L2 table");
        qcow2_check_l2(c, l2, active);
    }
}

/* The internal snapshots: their table, L1 and L2 tables. */
static void qcow2_check_snapshots(Qcow2Check *c)
{
    const Qcow2Header *h = &c->s->header;
    uint64_t pos = h->snapshots_offset;
    uint8_t hdr[40];

    for (uint32_t i = 0; i < h->nb_snapshots; i++) {
        g_autofree uint8_t *p = qcow2_check_read(c, pos, sizeof(hdr));
        uint64_t entry_len;

        if (!p) {
            return;
        }
        memcpy(hdr, p, sizeof(hdr));
        entry_len = QEMU_ALIGN_UP(40 + (uint64_t)qcow2_be32(hdr + 36) +
                                  qcow2_be16(hdr + 12) +
                                  qcow2_be16(hdr + 14), 8);
        qcow2_check_ref(c, pos, entry_len, "snapshot table");
        pos += entry_len;
        if (pos - h->snapshots_offset > QCOW2_CHECK_MAX_TABLE) {
            c->res->check_errors++;
            return;
        }
        qcow2_check_l1(c, qcow2_be64(hdr), qcow2_be32(hdr + 8), false);
    }
}

/* The bitmap directory, bitmap tables and their data clusters. */
static void qcow2_check_bitmaps(Qcow2Check *c)
{
    const Qcow2Header *h = &c->s->header;
    g_autofree uint8_t *dir = NULL;
    uint64_t pos = 0;

    if (!h->has_bitmaps_ext || !h->bitmap_dir_size ||
        h->bitmap_dir_size > QCOW2_CHECK_MAX_TABLE) {
        return;
    }
    qcow2_check_ref(c, h->bitmap_dir_offset, h->bitmap_dir_size,
                    "bitmap directory");
    dir = qcow2_check_read(c, h->bitmap_dir_offset, h->bitmap_dir_size);
    while (dir && pos + 24 <= h->bitmap_dir_size) {
        uint64_t t_off = qcow2_be64(dir + pos);
        uint64_t t_n = qcow2_be32(dir + pos + 8);
        g_autofree uint8_t *table = NULL;

        qcow2_check_ref(c, t_off, t_n * 8, "bitmap table");
        if (t_n * 8 <= QCOW2_CHECK_MAX_TABLE) {
            table = qcow2_check_read(c, t_off, t_n * 8);
        }
        for (uint64_t i = 0; table && i < t_n; i++) {
            uint64_t d = qcow2_be64(table + i * 8) & L2E_OFFSET_MASK;

            if (d) {
                qcow2_check_ref(c, d, c->s->cluster_size, "bitmap data");
            }
        }
        pos += QEMU_ALIGN_UP(24 + (uint64_t)qcow2_be32(dir + pos + 20) +
                             qcow2_be16(dir + pos + 18), 8);
    }
}

/* The refcounts on disk, for the clusters of the file. */
static void qcow2_check_read_refcounts(Qcow2Check *c)
{
    BDRVQcow2State *s = c->s;
    int64_t per_rb = INT64_C(1) << s->refblock_bits;

    for (int64_t r = 0; r < s->reftable_size && r * per_rb < c->nb; r++) {
        g_autofree uint8_t *rb = NULL;

        if (!s->reftable[r]) {
            continue;
        }
        rb = qcow2_check_read(c, s->reftable[r], s->cluster_size);
        for (int64_t i = 0; rb && i < per_rb && r * per_rb + i < c->nb;
             i++) {
            c->rc[r * per_rb + i] = MIN(qcow2_refblock_get(rb,
                                        s->header.refcount_order, i),
                                        UINT32_MAX);
        }
    }
}

static uint32_t qcow2_check_rc(Qcow2Check *c, uint64_t off)
{
    uint64_t i = off >> c->s->cluster_bits;

    return i < (uint64_t)c->nb ? c->rc[i] : 0;
}

/* COPIED flags and reserved bits of the active tables. */
static void qcow2_check_flags(Qcow2Check *c)
{
    BDRVQcow2State *s = c->s;

    for (int64_t i = 0; i < s->l1_size; i++) {
        uint64_t l1e = s->l1[i];
        uint64_t l2_off = l1e & L1E_OFFSET_MASK;
        g_autofree uint8_t *l2 = NULL;
        uint32_t rc;

        if (l1e & L1E_RESERVED_MASK) {
            qcow2_check_msg(c, &c->res->corruptions, "ERROR found L1 entry "
                            "with reserved bits set: %" PRIx64, l1e);
        }
        if (!l2_off) {
            continue;
        }
        rc = qcow2_check_rc(c, l2_off);
        if ((rc == 1) != !!(l1e & QCOW_OFLAG_COPIED)) {
            qcow2_check_msg(c, &c->res->corruptions, "ERROR OFLAG_COPIED L2 "
                            "cluster: l1_index=%" PRId64 " l1_entry=%" PRIx64
                            " refcount=%" PRIu32, i, l1e, rc);
        }
        l2 = qcow2_check_read(c, l2_off, s->cluster_size);
        for (int64_t j = 0; l2 && j < s->cluster_size / 8; j++) {
            uint64_t e = qcow2_be64(l2 + j * 8);
            Qcow2ClusterType t = qcow2_l2_type(e);

            if (t == QCOW2_CLUSTER_COMPRESSED) {
                int64_t coff, clen;

                qcow2_compressed_range(s, e, &coff, &clen);
                if (e & QCOW_OFLAG_COPIED) {
                    qcow2_check_msg(c, &c->res->corruptions, "ERROR: "
                                    "coffset=0x%" PRIx64 ": copied flag must "
                                    "never be set for compressed clusters",
                                    coff);
                }
                continue;
            }
            if (e & L2E_STD_RESERVED_MASK) {
                qcow2_check_msg(c, &c->res->corruptions, "ERROR found l2 "
                                "entry with reserved bits set: %" PRIx64, e);
            }
            if ((t == QCOW2_CLUSTER_ZERO_PLAIN ||
                 t == QCOW2_CLUSTER_ZERO_ALLOC) && s->header.version < 3) {
                qcow2_check_msg(c, &c->res->corruptions, "ERROR: zero "
                                "cluster entry in a version 2 image: %"
                                PRIx64, e);
            }
            if (t != QCOW2_CLUSTER_NORMAL && t != QCOW2_CLUSTER_ZERO_ALLOC) {
                continue;
            }
            rc = qcow2_check_rc(c, e & L2E_OFFSET_MASK);
            if ((rc == 1) != !!(e & QCOW_OFLAG_COPIED)) {
                qcow2_check_msg(c, &c->res->corruptions, "ERROR OFLAG_COPIED "
                                "data cluster: l2_entry=%" PRIx64 " refcount="
                                "%" PRIu32, e, rc);
            }
        }
    }
}

/* Compare references and refcounts. */
static void qcow2_check_compare(Qcow2Check *c)
{
    for (int64_t i = 0; i < c->nb; i++) {
        if (c->rc[i] < c->refs[i]) {
            qcow2_check_msg(c, &c->res->corruptions, "ERROR cluster %" PRId64
                            " refcount=%" PRIu32 " reference=%" PRIu32, i,
                            c->rc[i], c->refs[i]);
        } else if (c->rc[i] > c->refs[i]) {
            qcow2_check_msg(c, &c->res->leaks, "Leaked cluster %" PRId64
                            " refcount=%" PRIu32 " reference=%" PRIu32, i,
                            c->rc[i], c->refs[i]);
        }
        if (c->rc[i] || c->refs[i]) {
            c->res->image_end_offset = (i + 1) << c->s->cluster_bits;
        }
    }
}

bool qcow2_check_state(BDRVQcow2State *s, BdrvCheckResult *res,
                       Qcow2Counts *counts, GError **errp)
{
    Qcow2Check c = { .s = s, .res = res };
    int ret;

    memset(res, 0, sizeof(*res));
    res->messages = g_ptr_array_new_with_free_func(g_free);
    ret = qcow2_do_flush(s);
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not flush '%s': %s", s->filename,
                    g_strerror(-ret));
        return false;
    }
    c.nb = DIV_ROUND_UP(qcow2_file_end(s), s->cluster_size);
    c.read_budget = QCOW2_CHECK_READ_FACTOR * (uint64_t)qcow2_file_end(s) +
                    QCOW2_CHECK_READ_SLACK;
    if (c.nb > QCOW2_CHECK_MAX_CLUSTERS) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s' is too large to check (%" PRId64 " clusters)",
                    s->filename, c.nb);
        return false;
    }
    c.refs = g_new0(uint32_t, MAX(c.nb, 1));
    c.rc = g_new0(uint32_t, MAX(c.nb, 1));
    res->total_clusters = DIV_ROUND_UP(s->size, s->cluster_size);
    res->marked = s->header.incompatible_features &
                  (QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT);

    qcow2_check_ref(&c, 0, s->cluster_size, "header");
    qcow2_check_ref(&c, s->reftable_offset,
                    s->reftable_clusters * s->cluster_size,
                    "refcount table");
    for (int64_t r = 0; r < s->reftable_size; r++) {
        if (s->reftable[r]) {
            qcow2_check_ref(&c, s->reftable[r], s->cluster_size,
                            "refcount block");
        }
    }
    qcow2_check_l1(&c, s->l1_offset, s->l1_size, true);
    qcow2_check_snapshots(&c);
    qcow2_check_bitmaps(&c);
    qcow2_check_read_refcounts(&c);
    qcow2_check_compare(&c);
    qcow2_check_flags(&c);
    if (counts) {
        counts->nb = c.nb;
        counts->refs = g_steal_pointer(&c.refs);
        counts->rc = g_steal_pointer(&c.rc);
    }
    g_free(c.refs);
    g_free(c.rc);
    return true;
}

bool qcow2_check(BlockDriverState *bs, BdrvCheckResult *res,
                 GError **errp)
{
    return qcow2_check_state(((Qcow2Node *)bs->opaque)->s, res, NULL, errp);
}
