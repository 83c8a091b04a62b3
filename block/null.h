/*
 * The null driver: a test double for what no real peer can do.
 *
 * Spec: "null:key=value,..." (or format "null" with options).  Nothing is
 * stored: reads return zeroes and writes are dropped.  Keys:
 *   size=SIZE            image length (default 1G)
 *   latency-ns=N         every request completes N ns after submission
 *   jitter-ns=N          ... plus a random 0..N ns (fixed seed), so that
 *                        requests complete out of order
 *   align=N              request_alignment (power of 2, default 1)
 *   max-transfer=N       max_transfer limit (default none)
 *   max-zero=N           max_pwrite_zeroes limit (default none)
 *   channels=N           request channels it claims, like NBD connections (1)
 *   window=SIZE          bytes in flight per channel it asks for, like NBD
 *                        (BlockLimits.window_bytes; default none)
 *   window-first=SIZE    ... of which it asks for this much at first
 *                        (get_window_bytes()), until active-channels-after
 *                        bytes were written: a window that grows
 *   active-channels=N    of which take requests (default: all) ...
 *   active-channels-after=SIZE
 *                        ... once SIZE bytes were written (default 0), all
 *                        before: a window that shrinks mid-job
 *   copy-transfer=SIZE   the copy operation size it prefers, like NBD (none)
 *   zeroes=on|off        support write-zeroes (default on)
 *   extents=data|zero|alternate:SIZE|sparse:DATA:PERIOD
 *                        block status: all data (default), all zero
 *                        holes, data/zero runs of SIZE starting with data,
 *                        or a DATA-byte data run at the start of every
 *                        PERIOD bytes and zero holes between (0 < DATA <=
 *                        PERIOD): sparse:64K:64M is 0.1% data scattered
 *                        in 64 KiB pieces
 *   error-op=..., error-offset=, error-length=, error-errno=,
 *   error-once=, error-file=
 *                        fault injection (block/fault-inject.h)
 *   record=on|off        keep a record of every request (default off),
 *                        with a digest of each write's bytes
 *
 * Every node also keeps statistics (NullStats) that tests read to check
 * the invariants of the layers above: request sizes, requests and bytes
 * in flight, overlapping writes, misaligned requests.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_NULL_H
#define BLOCK_NULL_H

#include "block/block.h"
#include "block/fault-inject.h"

/* The request kinds, as BdrvOp, in the null driver's words for tests. */
typedef enum NullOp {
    NULL_OP_READ = BDRV_OP_READ,
    NULL_OP_WRITE = BDRV_OP_WRITE,
    NULL_OP_ZERO = BDRV_OP_ZERO,
    NULL_OP_DISCARD = BDRV_OP_DISCARD,
    NULL_OP_FLUSH = BDRV_OP_FLUSH,
    NULL_OP_STATUS = BDRV_OP_STATUS,
    NULL_OP__MAX = FAULT_OP_ANY,
} NullOp;

/* One request as the driver saw it. */
typedef struct NullRecord {
    NullOp op;
    int64_t offset;
    int64_t bytes;
    unsigned flags;         /* BdrvRequestFlags */
    int64_t start_ns;       /* submission time */
    int64_t end_ns;         /* completion time (0 while in flight) */
    int ret;
    uint32_t data_hash;     /* WRITE: null_data_hash() of its bytes */
} NullRecord;

/* Counters; shared by every node attached with null_share_stats(). */
typedef struct NullStats {
    uint64_t requests[NULL_OP__MAX];
    uint64_t bytes[NULL_OP__MAX];
    uint64_t in_flight;             /* requests in flight now */
    uint64_t max_in_flight;         /* ... at most, ever */
    int64_t data_bytes_in_flight;   /* read + write bytes in flight now */
    int64_t max_data_bytes_in_flight;
    int64_t max_data_request;       /* largest read or write */
    uint64_t overlapping_writes;    /* write-like requests overlapping
                                     * another write-like one in flight */
    uint64_t misaligned;            /* requests breaking io.c's contract */
    uint64_t injected_errors;
} NullStats;

/* Snapshot of the statistics of a null node. */
void null_get_stats(BlockDriverState *bs, NullStats *stats);

/* Make @bs count into the statistics of @other (both null nodes), so that a
 * copy between two null nodes is measured as a whole. */
void null_share_stats(BlockDriverState *bs, BlockDriverState *other);

/* The digest of @bytes at @buf kept in NullRecord.data_hash (CRC-32):
 * tests check that each write carried the bytes they meant. */
uint32_t null_data_hash(const void *buf, int64_t bytes);

/* The records of a node opened with record=on (GArray of NullRecord, owned
 * by the node), or NULL. */
GArray *null_get_records(BlockDriverState *bs);

#endif /* BLOCK_NULL_H */
