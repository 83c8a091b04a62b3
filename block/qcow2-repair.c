/*
 * qcow2-lite repair (`mirror-tool check -r leaks|all`), what `qemu-img
 * check -r` repairs:
 *
 *  - leaks (refcount above the references): the refcount is lowered to
 *    the references, in the refcount block that holds it;
 *  - with `all`, also refcounts below the references (the references are
 *    the truth), and the COPIED flags of L1 and L2 entries (set exactly
 *    when the refcount is 1).  When a refcount has no block to live in (a
 *    zeroed refcount table entry, a block that overlaps other clusters),
 *    the whole refcount structure is built anew past the end of the file
 *    from the references, written and synced, then the header switches to
 *    it with one 12-byte write (as QEMU's rebuild); the old table and
 *    blocks are then unreferenced and free.
 *
 * What cannot be repaired (unaligned or out-of-file entries, reserved
 * bits) stays and the second check reports it.  The image is opened
 * read-write for this only (the dirty and corrupt bits are what it is
 * for), without its backing file; images with internal snapshots or
 * bitmaps, other refcount widths or version 2 are refused, as for any
 * write.  After the repair a fresh read-only open checks the image again;
 * when that finds no corruption, the corrupt and dirty bits are cleared.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "block/file-lock.h"
#include "block/qcow2.h"

#include <errno.h>
#include <inttypes.h>

static uint32_t qcow2_repair_rc(const uint32_t *want, int64_t nb,
                                uint64_t off, int cb)
{
    uint64_t i = off >> cb;

    return i < (uint64_t)nb ? want[i] : 0;
}

/* Write @bytes of @buf at @off; once one succeeds, *@wrote says that the
 * pass must sync before it returns. */
static int qcow2_repair_write(BDRVQcow2State *s, int64_t off,
                              const void *buf, int64_t bytes, bool *wrote)
{
    int ret = qcow2_pwrite(s, off, buf, bytes);

    *wrote |= ret >= 0;
    return ret;
}

/* Lower (and with @all, raise) the refcounts in the blocks that hold
 * them.  *@rebuild is set when some refcount has no usable block. */
static int qcow2_repair_in_place(BDRVQcow2State *s, const Qcow2Counts *k,
                                 const uint32_t *want, bool all,
                                 bool *rebuild)
{
    int64_t per_rb = INT64_C(1) << s->refblock_bits;
    g_autofree uint8_t *rb = g_malloc(s->cluster_size);
    bool wrote = false;
    int ret;

    *rebuild = false;
    for (int64_t first = 0; first < k->nb; first += per_rb) {
        int64_t r = first / per_rb;
        int64_t end = MIN(first + per_rb, k->nb);
        uint64_t block = r < s->reftable_size ? s->reftable[r] : 0;
        bool changed = false;

        for (int64_t i = first; i < end && !changed; i++) {
            changed = want[i] != k->rc[i];
        }
        if (!changed) {
            continue;
        }
        if (!block || k->refs[block >> s->cluster_bits] != 1) {
            /* No block, or one that other clusters overlap. */
            if (all) {
                *rebuild = true;
                return 0;
            }
            continue;
        }
        ret = qcow2_pread(s, block, rb, s->cluster_size);
        if (ret < 0) {
            return ret;
        }
        for (int64_t i = first; i < end; i++) {
            qcow2_put_be16(rb + (i - first) * 2, want[i]);
        }
        ret = qcow2_repair_write(s, block, rb, s->cluster_size, &wrote);
        if (ret < 0) {
            return ret;
        }
    }
    return wrote ? qcow2_sync(s) : 0;
}

/*
 * A new refcount structure past the end of the file holding @want (the
 * references, less those of the old table and blocks), switched to with
 * the header.
 */
static int qcow2_repair_rebuild(BDRVQcow2State *s, const Qcow2Counts *k,
                                uint32_t *want)
{
    int64_t cs = s->cluster_size;
    int cb = s->cluster_bits;
    int64_t per_rb = INT64_C(1) << s->refblock_bits;
    int64_t start = k->nb;
    int64_t nblk = 0, nt = 1;
    g_autofree uint8_t *blocks = NULL;
    g_autofree uint8_t *table = NULL;

    for (int64_t c = 0; c < s->reftable_clusters; c++) {
        int64_t i = (s->reftable_offset >> cb) + c;

        if (i < k->nb && want[i]) {
            want[i]--;
        }
    }
    for (int64_t r = 0; r < s->reftable_size; r++) {
        int64_t i = s->reftable[r] >> cb;

        if (s->reftable[r] && i < k->nb && want[i]) {
            want[i]--;
        }
    }
    /* Blocks for every cluster up to and including themselves and the
     * table: a fixed point. */
    for (;;) {
        int64_t total = start + nblk + nt;
        int64_t nblk2 = DIV_ROUND_UP(total, per_rb);
        int64_t nt2 = DIV_ROUND_UP(nblk2 * 8, cs);

        if (nblk2 == nblk && nt2 == nt) {
            break;
        }
        nblk = nblk2;
        nt = nt2;
    }
    if (nt * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return -EFBIG;
    }
    blocks = g_malloc0(nblk * cs);
    table = g_malloc0(nt * cs);
    for (int64_t i = 0; i < k->nb; i++) {
        qcow2_put_be16(blocks + i * 2, want[i]);
    }
    for (int64_t i = start; i < start + nblk + nt; i++) {
        qcow2_put_be16(blocks + i * 2, 1);
    }
    for (int64_t b = 0; b < nblk; b++) {
        qcow2_put_be64(table + b * 8, (start + b) * cs);
    }
    return qcow2_reftable_write(s, start, blocks, nblk, table, nt);
}

/* COPIED exactly when the refcount (@want) is 1, in L1 and L2 entries. */
static int qcow2_repair_copied(BDRVQcow2State *s, const Qcow2Counts *k,
                               const uint32_t *want)
{
    int cb = s->cluster_bits;
    g_autofree uint8_t *l2 = g_malloc(s->cluster_size);
    bool wrote = false;
    int ret;

    for (uint32_t i = 0; i < s->l1_size; i++) {
        uint64_t e = s->l1[i];
        uint64_t off = e & L1E_OFFSET_MASK;
        bool one = qcow2_repair_rc(want, k->nb, off, cb) == 1;
        uint64_t fixed = one ? e | QCOW_OFLAG_COPIED : e & ~QCOW_OFLAG_COPIED;
        bool dirty = false;

        if (!off) {
            continue;
        }
        if (fixed != e) {
            uint8_t buf[8];

            qcow2_put_be64(buf, fixed);
            ret = qcow2_repair_write(s, s->l1_offset + i * 8, buf, 8,
                                     &wrote);
            if (ret < 0) {
                return ret;
            }
            s->l1[i] = fixed;
        }
        if (!one) {
            continue;   /* shared or unreferenced: not ours to rewrite */
        }
        ret = qcow2_pread(s, off, l2, s->cluster_size);
        if (ret < 0) {
            return ret;
        }
        for (int64_t j = 0; j < s->cluster_size / 8; j++) {
            uint64_t le = qcow2_be64(l2 + j * 8);
            uint64_t lf = le;

            switch (qcow2_l2_type(le)) {
            case QCOW2_CLUSTER_COMPRESSED:
                lf = le & ~QCOW_OFLAG_COPIED;
                break;
            case QCOW2_CLUSTER_NORMAL:
            case QCOW2_CLUSTER_ZERO_ALLOC:
                if (le & L2E_OFFSET_MASK & (s->cluster_size - 1)) {
                    break;      /* unaligned: not repairable here */
                }
                lf = qcow2_repair_rc(want, k->nb, le & L2E_OFFSET_MASK,
                                     cb) == 1 ? le | QCOW_OFLAG_COPIED
                                              : le & ~QCOW_OFLAG_COPIED;
                break;
            default:
                break;
            }
            if (lf != le) {
                qcow2_put_be64(l2 + j * 8, lf);
                dirty = true;
            }
        }
        if (dirty) {
            ret = qcow2_repair_write(s, off, l2, s->cluster_size, &wrote);
            if (ret < 0) {
                return ret;
            }
        }
    }
    return wrote ? qcow2_sync(s) : 0;
}

/* Repair the refcounts (and with @all the flags) of @s from @k. */
static bool qcow2_repair_counts(BDRVQcow2State *s, const Qcow2Counts *k,
                                bool all, bool *rebuilt, GError **errp)
{
    g_autofree uint32_t *want = g_new0(uint32_t, MAX(k->nb, 1));
    bool rebuild;
    int ret;

    for (int64_t i = 0; i < k->nb; i++) {
        want[i] = all ? k->refs[i] : MIN(k->rc[i], k->refs[i]);
        if (want[i] > QCOW2_REFCOUNT_MAX) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                        "Cannot repair '%s': cluster %" PRId64 " has %"
                        PRIu32 " references, more than a 16-bit refcount "
                        "holds", s->filename, i, want[i]);
            return false;
        }
    }
    ret = qcow2_repair_in_place(s, k, want, all, &rebuild);
    if (ret == 0 && rebuild) {
        ret = qcow2_repair_rebuild(s, k, want);
        *rebuilt = true;
    }
    if (ret == 0 && all) {
        ret = qcow2_repair_copied(s, k, want);
    }
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not repair '%s': %s", s->filename,
                    g_strerror(-ret));
        return false;
    }
    return true;
}

/* The image checks clean: clear the corrupt and dirty bits.  1 when one
 * was set, 0 when none, or -errno. */
static int qcow2_repair_mark_consistent(BDRVQcow2State *s)
{
    uint64_t bits = QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT;
    uint8_t buf[8];
    int ret;

    if (!(s->header.incompatible_features & bits)) {
        return 0;
    }
    s->header.incompatible_features &= ~bits;
    qcow2_put_be64(buf, s->header.incompatible_features);
    ret = qcow2_pwrite(s, QCOW2_HDR_INCOMPAT, buf, 8);
    if (ret == 0) {
        ret = qcow2_sync(s);
    }
    return ret < 0 ? ret : 1;
}

bool qcow2_repair(const char *filename, BdrvCheckFix fix, BdrvCheckReport *res,
                  GError **errp)
{
    BDRVQcow2State *s, *ro;
    Qcow2Counts k = { 0 };
    bool ok = false;
    int ret;

    g_assert(fix != BDRV_FIX_NONE);
    memset(res, 0, sizeof(*res));
    res->repaired = true;
    s = qcow2_state_open_repair(filename, true, errp);
    if (!s) {
        g_prefix_error(errp, "Could not open '%s' to repair it: ",
                       filename);
        return false;
    }
    if (!qcow2_check_state(s, &res->before, &k, errp)) {
        goto out;
    }
    if (res->before.check_errors) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "'%s' not repaired: the check could not read all of "
                    "its tables", filename);
        goto out;
    }
    if ((res->before.leaks || res->before.corruptions) &&
        !qcow2_repair_counts(s, &k, fix == BDRV_FIX_ALL, &res->rebuilt,
                             errp)) {
        goto out;
    }

    /* Check again, from a fresh open: nothing of @s is trusted. */
    ro = qcow2_state_open_repair(filename, false, errp);
    if (!ro) {
        g_prefix_error(errp, "Could not open '%s' after the repair: ",
                       filename);
        goto out;
    }
    ok = qcow2_check_state(ro, &res->after, NULL, errp);
    qcow2_state_close(ro);
    if (!ok) {
        goto out;
    }
    res->leaks_fixed = MAX(0, res->before.leaks - res->after.leaks);
    res->corruptions_fixed = MAX(0, res->before.corruptions -
                                    res->after.corruptions);
    if (!res->after.corruptions && !res->after.check_errors) {
        ret = qcow2_repair_mark_consistent(s);
        if (ret < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                        "Could not clear the corrupt bit of '%s': %s",
                        filename, g_strerror(-ret));
            ok = false;
            goto out;
        }
        res->marked_consistent = ret == 1;
    }

out:
    g_free(k.refs);
    g_free(k.rc);
    qcow2_state_close(s);
    return ok;
}

/*
 * Take the locks of a writable qcow2 node on @bs's own descriptor, as
 * qemu-img check -r holds them: the repair's opens of the file lock
 * nothing, so that they never meet @bs's locks, and this keeps everyone
 * else out while they write.
 */
static bool qcow2_repair_lock(BlockDriverState *bs, GError **errp)
{
    BDRVQcow2State *s = ((Qcow2Node *)bs->opaque)->s;

    if (s->force_share) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': force-share=on can only be used with read-only "
                    "images", s->filename);
        return false;
    }
    return file_lock_take(s->fd, s->locking,
                          BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE |
                          BLK_PERM_RESIZE,
                          BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED,
                          s->filename, errp);
}

bool qcow2_check_node(BlockDriverState *bs, BdrvCheckFix fix,
                      BdrvCheckReport *rep, GError **errp)
{
    BdrvCheckResult *r = &rep->before;

    if (!qcow2_check(bs, r, errp)) {
        bdrv_check_result_clear(r);
        return false;
    }
    if (fix == BDRV_FIX_NONE || !(r->leaks || r->corruptions || r->marked)) {
        return true;
    }
    if (bdrv_is_writable(bs)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s' is open read-write: not repaired",
                    bdrv_get_filename(bs));
        return false;
    }
    if (!qcow2_repair_lock(bs, errp)) {
        return false;
    }
    /* The repair opens the image itself, read-write, and checks it
     * again: this check only said whether there is work. */
    bdrv_check_result_clear(r);
    return qcow2_repair(bdrv_get_filename(bs), fix, rep, errp);
}
