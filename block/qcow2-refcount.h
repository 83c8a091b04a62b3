/*
 * qcow2-lite refcounts: lookups and updates, cluster and byte allocation
 * (qcow2-refcount.c) and the deferred frees that drop references only
 * once the L2 change is durable (qcow2-refcount-free.c).  All of it runs
 * under the layer's lock.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_REFCOUNT_H
#define BLOCK_QCOW2_REFCOUNT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct BDRVQcow2State BDRVQcow2State;

/* ---- qcow2-refcount.c ---- */

/* Refcount of host cluster @index (0 beyond the tables).  Lock held. */
int qcow2_get_refcount(BDRVQcow2State *s, int64_t index, uint64_t *rc);

/* Value @idx of a refcount block of any width (order 0..6). */
uint64_t qcow2_refblock_get(const uint8_t *rb, int order, int64_t idx);

/*
 * Add @delta to the refcount of every host cluster overlapping
 * [@offset, @offset + @length), allocating refcount blocks (and growing
 * the table) as needed for increments.  In the cache.  Lock held.
 */
int qcow2_update_refcount(BDRVQcow2State *s, int64_t offset,
                          int64_t length, int delta);

/*
 * Allocate up to @n contiguous free clusters (refcount 1 each).  *@host
 * and *@got say where and how many (>= 1); *@fresh is true when they were
 * never written (they read as zero).  Lock held.
 */
int qcow2_alloc_clusters(BDRVQcow2State *s, int64_t n, int64_t *host,
                         int64_t *got, bool *fresh);

/* Allocate @size bytes for a compressed cluster (packing, §1.5). */
int qcow2_alloc_bytes(BDRVQcow2State *s, int64_t size, int64_t *host);

/*
 * Put a new refcount table in place on disk: @nb refcount blocks @blocks
 * at cluster @start, the table @table (@nt clusters, big-endian entries)
 * right after them, durable before the header points at the table, and
 * the header durable.  The caller updates its in-memory state.  0 or
 * -errno.
 */
int qcow2_reftable_write(BDRVQcow2State *s, int64_t start,
                         const uint8_t *blocks, int64_t nb,
                         const uint8_t *table, int64_t nt);

/* ---- qcow2-refcount-free.c: deferred frees ---- */

/*
 * Drop the references of a replaced L2 entry @entry once the change is
 * durable (at the next metadata flush).  Lock held.
 */
void qcow2_free_entry_deferred(BDRVQcow2State *s, uint64_t entry);

/*
 * The same for the host range [@offset, @offset + @length): decremented
 * once the change is durable and no transfer that started before it is in
 * flight.  Past 64 MiB of pending frees, flushes the metadata.  Lock held.
 */
void qcow2_free_deferred(BDRVQcow2State *s, int64_t offset, int64_t length);

/* Apply the pending frees that are safe now (after a metadata flush). */
int qcow2_apply_pending_frees(BDRVQcow2State *s);

#endif /* BLOCK_QCOW2_REFCOUNT_H */
