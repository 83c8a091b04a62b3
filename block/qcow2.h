/*
 * qcow2-lite: what the tools and tests use beyond the BlockDriver table.
 *
 * `mirror-tool check` runs qcow2_check() (the refcount and flag
 * consistency check of `qemu-img check`, read-only); `map` asks which file
 * a backing depth is; tests read a few counters and slow data transfers
 * down to observe parallelism.
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

/* The result of qcow2_check(), in qemu-img check's terms. */
typedef struct Qcow2CheckResult {
    int64_t corruptions;        /* refcount below references, bad entries */
    int64_t leaks;              /* clusters with refcount above references */
    int64_t check_errors;       /* the check itself failed to read */
    int64_t image_end_offset;   /* end of the last used cluster */
    int64_t total_clusters;     /* guest clusters of the virtual size */
    int64_t allocated_clusters; /* guest clusters with data */
    int64_t fragmented_clusters;
    int64_t compressed_clusters;
    bool marked;                /* the header's dirty or corrupt bit is set */
    GPtrArray *messages;        /* one line per problem, as qemu-img
                                 * prints them on stderr */
} Qcow2CheckResult;

void qcow2_check_result_clear(Qcow2CheckResult *res);

/*
 * Check the qcow2 node @bs (opened read-only or read-write, nothing in
 * flight): count every reference (header, tables, L2 entries of the active
 * L1 and of the snapshots, bitmap tables) and compare with the refcounts;
 * check COPIED flags, alignment and reserved bits.  Reads only.  Blocking.
 * Returns false with @errp set if the check could not run at all.
 */
bool qcow2_check(BlockDriverState *bs, Qcow2CheckResult *res,
                 GError **errp);

/* What a repair may change, as qemu-img check -r leaks|all. */
typedef enum Qcow2Fix {
    QCOW2_FIX_LEAKS,            /* refcounts above the references */
    QCOW2_FIX_ALL,              /* also those below, and COPIED flags */
} Qcow2Fix;

typedef struct Qcow2RepairResult {
    Qcow2CheckResult before;    /* the check before the repair */
    Qcow2CheckResult after;     /* the check of the repaired image */
    int64_t leaks_fixed;
    int64_t corruptions_fixed;
    bool rebuilt;               /* the refcount structure was made anew */
    bool marked_consistent;     /* the corrupt or dirty bit was cleared */
} Qcow2RepairResult;

void qcow2_repair_result_clear(Qcow2RepairResult *res);

/*
 * Check the qcow2 image @filename and repair what @fix allows (see
 * block/qcow2-repair.c), then check it again from a fresh open; when that
 * finds no corruption, clear the corrupt and dirty bits.  Nothing else
 * may have the image open.  Returns false with @errp set if the image
 * could not be opened, checked or written (it may then be partly
 * repaired: every step leaves it consistent or as it was).  Blocking.
 */
bool qcow2_repair(const char *filename, Qcow2Fix fix,
                  Qcow2RepairResult *res, GError **errp);

/* Counters for tests. */
typedef struct Qcow2Stats {
    int max_data_io_in_flight;  /* most data transfers at once, ever */
    int64_t reftable_offset;
    int64_t reftable_clusters;
    bool corrupt;
} Qcow2Stats;

void qcow2_get_stats(BlockDriverState *bs, Qcow2Stats *st);

/* Tests: sleep @delay_us in every data transfer (0: off). */
void qcow2_set_debug_delay(BlockDriverState *bs, int delay_us);

#endif /* BLOCK_QCOW2_H */
