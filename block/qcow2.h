/*
 * qcow2-lite: what the block layer and tests use beyond the BlockDriver
 * table.  The tool reaches qcow2 only through the table: `check` through
 * its check member (qcow2_check_node(): the refcount and flag consistency
 * check of `qemu-img check`, and its repair), `info` and `map` through
 * get_info (BlockImageInfo, with the layers of the backing chain).  Block
 * core asks which file a backing depth is; tests check images directly,
 * read a few counters and slow data transfers down to observe
 * parallelism.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_H
#define BLOCK_QCOW2_H

#include "block/block.h"

/* Is @bs a qcow2 node? */
bool qcow2_is_node(BlockDriverState *bs);

/* The file name of the image at backing @depth of qcow2 node @bs (0: the
 * image itself), or NULL.  Free with g_free(). */
char *qcow2_layer_filename(BlockDriverState *bs, int depth);

/*
 * Check the qcow2 node @bs (opened read-only or read-write, nothing in
 * flight): count every reference (header, tables, L2 entries of the active
 * L1 and of the snapshots, bitmap tables) and compare with the refcounts;
 * check COPIED flags, alignment and reserved bits.  Reads only.  Blocking.
 * Fills @res (clear it with bdrv_check_result_clear()); returns false
 * with @errp set if the check could not run at all.
 */
bool qcow2_check(BlockDriverState *bs, BdrvCheckResult *res,
                 GError **errp);

/*
 * Check the qcow2 image @filename and repair what @fix (not
 * BDRV_FIX_NONE) allows (see block/qcow2-repair.c), then check it again
 * from a fresh open; when that finds no corruption, clear the corrupt and
 * dirty bits.  Nothing else may write the image.  Fills @rep with
 * rep->repaired set.  Returns false with @errp set if the image could not
 * be opened, checked or written (it may then be partly repaired: every
 * step leaves it consistent or as it was).  Blocking.
 */
bool qcow2_repair(const char *filename, BdrvCheckFix fix,
                  BdrvCheckReport *rep, GError **errp);

/* The BlockDriver.check member of qcow2 (block/block-int.h). */
bool qcow2_check_node(BlockDriverState *bs, BdrvCheckFix fix,
                      BdrvCheckReport *rep, GError **errp);

/* Counters for tests. */
typedef struct Qcow2Stats {
    int max_data_io_in_flight;  /* most data transfers at once, ever */
    int64_t reftable_offset;
    int64_t reftable_clusters;
    bool corrupt;
    int64_t status_l1_entries;  /* L1 entries block status looked at */
    int64_t status_l2_entries;  /* L2 entries block status looked at */
    int64_t zero_l2_entries;    /* L2 entries zeroing/discard looked at */
} Qcow2Stats;

void qcow2_get_stats(BlockDriverState *bs, Qcow2Stats *st);

/* Tests: sleep @delay_us in every data transfer (0: off). */
void qcow2_set_debug_delay(BlockDriverState *bs, int delay_us);

#endif /* BLOCK_QCOW2_H */
