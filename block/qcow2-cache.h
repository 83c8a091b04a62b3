/*
 * qcow2-lite metadata cache (qcow2-cache.c): the caches of L2 tables and
 * refcount blocks, and the crash-safe write-back of all dirty metadata
 * (refcount blocks, then L2 tables, then L1, then the pending frees).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_CACHE_H
#define BLOCK_QCOW2_CACHE_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct Qcow2Cache Qcow2Cache;
typedef struct BDRVQcow2State BDRVQcow2State;

typedef struct Qcow2CacheEntry {
    int64_t offset;             /* host offset of the table */
    uint8_t *data;              /* one cluster */
    bool dirty;
    int pin;
    GList lru;
} Qcow2CacheEntry;

/*
 * An empty cache of at most @max_entries (at least 4) tables of
 * @entry_size bytes; @is_l2 for L2 tables (written after the barrier),
 * else refcount blocks.  Free it with qcow2_cache_free() (NULL is fine).
 */
Qcow2Cache *qcow2_cache_new(bool is_l2, int64_t max_entries,
                            int64_t entry_size);
void qcow2_cache_free(Qcow2Cache *c);

/* The most tables @c holds (what qcow2_cache_new() made of its size). */
int64_t qcow2_cache_max_entries(const Qcow2Cache *c);

/*
 * The table at host @offset, pinned: read from the file, or all zeroes
 * when @fresh (a newly allocated table).  Evicting a dirty table writes it
 * back first.  Lock held.  Unpin with qcow2_cache_put().
 */
int qcow2_cache_get(BDRVQcow2State *s, Qcow2Cache *c, int64_t offset,
                    bool fresh, Qcow2CacheEntry **entry);
void qcow2_cache_put(Qcow2CacheEntry *e);

/* The pinned table @e of @c was changed: write it back at a flush. */
void qcow2_cache_mark_dirty(Qcow2Cache *c, Qcow2CacheEntry *e);

/* Forget the table at @offset (it was freed); it must not be pinned. */
void qcow2_cache_discard(Qcow2Cache *c, int64_t offset);

/* Write every dirty table of @c; *@wrote says whether any was. */
int qcow2_cache_flush(BDRVQcow2State *s, Qcow2Cache *c, bool *wrote);

/*
 * Before an L2 table is written: every refcount block and data write it
 * may depend on is made durable.  Lock held.
 */
int qcow2_l2_barrier(BDRVQcow2State *s);

/*
 * Write back all dirty metadata in the crash-safe order, extend the file
 * over every allocation, sync, then apply the pending frees.  Lock held.
 */
int qcow2_flush_metadata(BDRVQcow2State *s);

#endif /* BLOCK_QCOW2_CACHE_H */
