/*
 * qcow2-lite layout checks, pure functions over the header and the tables
 * read from an image (no file access, for a fuzz target): every table
 * inside the file and within QEMU's size limits, offsets aligned, no two
 * pieces of metadata overlapping.  The map of metadata clusters they build
 * is what the write path checks every data write against.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <inttypes.h>

/* Is [@off, @off + @len) inside a file of @file_size bytes (no overflow)? */
static bool qcow2_inside(uint64_t off, uint64_t len, int64_t file_size)
{
    return off <= (uint64_t)file_size && len <= (uint64_t)file_size - off;
}

static bool qcow2_ranges_overlap(uint64_t a, uint64_t alen, uint64_t b,
                                 uint64_t blen)
{
    return alen && blen && a < b + blen && b < a + alen;
}

/*
 * Where the table @what ("Active L1 table") of @bytes at @off lies: a
 * multiple of the cluster size @cs, not 0 when @required, and inside the
 * file; false with @errp set (QEMU's words) when not.  @idx >= 0: the
 * table is the one entry @idx of the refcount table or L1 table points to
 * (a refcount block, an L2 table), and the words say so.
 */
static bool qcow2_check_place(const char *what, int64_t idx, uint64_t off,
                              uint64_t bytes, bool required, uint64_t cs,
                              int64_t file_size, GError **errp)
{
    if (off % cs || (required && !off)) {
        if (idx < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "%s offset invalid (0x%" PRIx64 ")", what, off);
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "%s offset 0x%" PRIx64 " unaligned (entry %" PRId64
                        ")", what, off, idx);
        }
        return false;
    }
    if (!qcow2_inside(off, bytes, file_size)) {
        if (idx < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "%s (0x%" PRIx64 ", %" PRIu64 " bytes) lies beyond "
                        "the end of the file", what, off, bytes);
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "%s at 0x%" PRIx64 " (entry %" PRId64 ") lies beyond "
                        "the end of the file", what, off, idx);
        }
        return false;
    }
    return true;
}

bool qcow2_header_check_layout(const Qcow2Header *h, int64_t file_size,
                               GError **errp)
{
    uint64_t cs = UINT64_C(1) << h->cluster_bits;
    uint64_t per_l1 = cs * (cs / 8);    /* bytes one L2 table maps */
    uint64_t need_l1 = h->size / per_l1 + (h->size % per_l1 != 0);
    uint64_t l1_bytes = (uint64_t)h->l1_size * 8;
    uint64_t rt_bytes = (uint64_t)h->refcount_table_clusters * cs;

    if (need_l1 > QCOW2_MAX_L1_BYTES / 8) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Image is too big (virtual size %" PRIu64 ")", h->size);
        return false;
    }
    if (h->refcount_table_clusters == 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Image does not contain a reference count table");
        return false;
    }
    if (rt_bytes > QCOW2_MAX_REFTABLE_BYTES) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Reference count table too large (%" PRIu32
                    " clusters)", h->refcount_table_clusters);
        return false;
    }
    if (!qcow2_check_place("Reference count table", -1,
                           h->refcount_table_offset, rt_bytes, true, cs,
                           file_size, errp)) {
        return false;
    }
    if (h->nb_snapshots > QCOW2_MAX_SNAPSHOTS) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Snapshot table too large (%" PRIu32 " snapshots)",
                    h->nb_snapshots);
        return false;
    }
    if (h->snapshots_offset % cs ||
        (h->nb_snapshots && (!h->snapshots_offset ||
                             h->snapshots_offset >= (uint64_t)file_size))) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Snapshot table offset invalid (0x%" PRIx64 ")",
                    h->snapshots_offset);
        return false;
    }
    if (l1_bytes > QCOW2_MAX_L1_BYTES) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Active L1 table too large (%" PRIu32 " entries)",
                    h->l1_size);
        return false;
    }
    if (h->l1_size < need_l1) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "L1 table is too small (%" PRIu32 " entries for %"
                    PRIu64 " needed)", h->l1_size, need_l1);
        return false;
    }
    if (!qcow2_check_place("Active L1 table", -1, h->l1_table_offset,
                           l1_bytes, h->l1_size != 0, cs, file_size, errp)) {
        return false;
    }
    if (qcow2_ranges_overlap(h->l1_table_offset, QEMU_ALIGN_UP(l1_bytes, cs),
                             h->refcount_table_offset, rt_bytes)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Overlapping metadata: the L1 table overlaps the "
                    "refcount table");
        return false;
    }
    return true;
}

GHashTable *qcow2_meta_new(void)
{
    return g_hash_table_new(g_direct_hash, g_direct_equal);
}

const char *qcow2_meta_name(Qcow2MetaType type)
{
    switch (type) {
    case QCOW2_META_HEADER:
        return "the header";
    case QCOW2_META_L1:
        return "the active L1 table";
    case QCOW2_META_REFTABLE:
        return "the refcount table";
    case QCOW2_META_REFBLOCK:
        return "a refcount block";
    case QCOW2_META_L2:
        return "an L2 table";
    default:
        return "data";
    }
}

/* Claim the clusters of [@off, @off + @len) as @type in @meta. */
static bool qcow2_meta_claim(GHashTable *meta, uint64_t off, uint64_t len,
                             int cluster_bits, Qcow2MetaType type,
                             GError **errp)
{
    uint64_t first = off >> cluster_bits;
    uint64_t end = (off + len + (UINT64_C(1) << cluster_bits) - 1) >>
                   cluster_bits;

    for (uint64_t c = first; c < end; c++) {
        gpointer old = g_hash_table_lookup(meta, GSIZE_TO_POINTER(c));

        if (old) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Overlapping metadata: %s at 0x%" PRIx64
                        " overlaps %s", qcow2_meta_name(type),
                        c << cluster_bits,
                        qcow2_meta_name(GPOINTER_TO_INT(old)));
            return false;
        }
        g_hash_table_insert(meta, GSIZE_TO_POINTER(c),
                            GINT_TO_POINTER(type));
    }
    return true;
}

bool qcow2_check_tables(const Qcow2Header *h, const uint64_t *rt,
                        int64_t rt_entries, const uint64_t *l1,
                        int64_t file_size, GHashTable *meta, GError **errp)
{
    int cb = h->cluster_bits;
    uint64_t cs = UINT64_C(1) << cb;

    if (!qcow2_meta_claim(meta, 0, cs, cb, QCOW2_META_HEADER, errp) ||
        !qcow2_meta_claim(meta, h->refcount_table_offset,
                          (uint64_t)h->refcount_table_clusters * cs, cb,
                          QCOW2_META_REFTABLE, errp) ||
        !qcow2_meta_claim(meta, h->l1_table_offset,
                          (uint64_t)h->l1_size * 8, cb, QCOW2_META_L1,
                          errp)) {
        return false;
    }
    for (int64_t i = 0; i < rt_entries; i++) {
        uint64_t off = rt[i] & REFT_OFFSET_MASK;

        if (rt[i] & ~REFT_OFFSET_MASK) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Refcount table entry %" PRId64 " has reserved "
                        "bits set (0x%" PRIx64 ")", i, rt[i]);
            return false;
        }
        if (!off) {
            continue;
        }
        if (!qcow2_check_place("Refcount block", i, off, cs, false, cs,
                               file_size, errp) ||
            !qcow2_meta_claim(meta, off, cs, cb, QCOW2_META_REFBLOCK,
                              errp)) {
            return false;
        }
    }
    for (int64_t i = 0; i < h->l1_size; i++) {
        uint64_t off = l1[i] & L1E_OFFSET_MASK;

        if (!off) {
            continue;
        }
        if (!qcow2_check_place("L2 table", i, off, cs, false, cs, file_size,
                               errp) ||
            !qcow2_meta_claim(meta, off, cs, cb, QCOW2_META_L2, errp)) {
            return false;
        }
    }
    return true;
}
