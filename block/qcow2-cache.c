/*
 * qcow2-lite metadata cache and write-back order.
 *
 * Two caches per writable layer, one of L2 tables and one of refcount
 * blocks (a read-only layer has only the first): a bounded set of
 * cluster-sized tables keyed by host offset, least recently used first out,
 * with dirty flags.  Everything runs under the layer's lock; a table in use
 * is pinned so that loading another one cannot evict it.
 *
 * Write-back keeps the on-disk invariant "refcount >= references":
 *   1. dirty refcount blocks, then a sync (which also covers every data
 *      write an updated L2 entry points at: those completed before the
 *      entry was changed in memory);
 *   2. dirty L2 tables (an L2 table is never written before step 1);
 *   3. a sync, then the dirty L1 sectors (a new L2 table is durable before
 *      the L1 entry that points at it);
 *   4. a sync; only now the pending frees are applied, so a refcount is
 *      never decremented on disk before the L2 change that dropped the
 *      reference is durable; the refcount blocks they change are written
 *      and synced last.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

struct Qcow2Cache {
    bool is_l2;
    int64_t max_entries;
    int64_t entry_size;
    GHashTable *map;            /* offset (int64 key) -> Qcow2CacheEntry */
    GQueue lru;                 /* head: most recently used */
    int64_t ndirty;
};

Qcow2Cache *qcow2_cache_new(bool is_l2, int64_t max_entries,
                            int64_t entry_size)
{
    Qcow2Cache *c = g_new0(Qcow2Cache, 1);

    c->is_l2 = is_l2;
    c->max_entries = MAX(max_entries, 4);
    c->entry_size = entry_size;
    c->map = g_hash_table_new(g_int64_hash, g_int64_equal);
    g_queue_init(&c->lru);
    return c;
}

int64_t qcow2_cache_max_entries(const Qcow2Cache *c)
{
    return c->max_entries;
}

static void qcow2_cache_entry_free(Qcow2CacheEntry *e)
{
    qemu_vfree(e->data);
    g_free(e);
}

void qcow2_cache_free(Qcow2Cache *c)
{
    GList *l;

    if (!c) {
        return;
    }
    while ((l = g_queue_pop_head_link(&c->lru))) {
        qcow2_cache_entry_free(l->data);
    }
    g_hash_table_destroy(c->map);
    g_free(c);
}

/* Write one dirty table back, in order (L2 tables after the barrier),
 * only where the metadata map has a table of its kind (QEMU's overlap
 * check of metadata writes). */
static int qcow2_cache_write(BDRVQcow2State *s, Qcow2Cache *c,
                             Qcow2CacheEntry *e)
{
    Qcow2MetaType want = c->is_l2 ? QCOW2_META_L2 : QCOW2_META_REFBLOCK;
    Qcow2MetaType t = GPOINTER_TO_INT(g_hash_table_lookup(s->meta,
                          GSIZE_TO_POINTER(e->offset >> s->cluster_bits)));
    int ret;

    if (t != want) {
        return qcow2_signal_corruption(s, "preventing invalid write of %s "
                                       "at 0x%" PRIx64 " (it is %s there)",
                                       qcow2_meta_name(want), e->offset,
                                       qcow2_meta_name(t));
    }
    if (c->is_l2) {
        ret = qcow2_l2_barrier(s);
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_pwrite(s, e->offset, e->data, c->entry_size);
    if (ret < 0) {
        return ret;
    }
    e->dirty = false;
    c->ndirty--;
    return 0;
}

static void qcow2_cache_remove(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    g_hash_table_remove(c->map, &e->offset);
    g_queue_unlink(&c->lru, &e->lru);
    if (e->dirty) {
        c->ndirty--;
    }
    qcow2_cache_entry_free(e);
}

/*
 * Make room for one more table: evict the least recently used unpinned
 * one (writing it back if dirty) and hand its buffer over in *@spare for
 * the new table (NULL if none was evicted).  A cache whose tables are all
 * pinned grows past its bound for a moment.
 *
 * Reusing the buffer keeps the cache's memory at its bound: freed and
 * allocated again by whichever pool worker misses, 64 KiB tables spread
 * over every worker's malloc arena and stayed resident there (120 MiB of
 * RSS for an 8 MiB cache while a job copied scattered clusters).
 */
static int qcow2_cache_make_room(BDRVQcow2State *s, Qcow2Cache *c,
                                 void **spare)
{
    *spare = NULL;
    if ((int64_t)g_queue_get_length(&c->lru) < c->max_entries) {
        return 0;
    }
    for (GList *l = c->lru.tail; l; l = l->prev) {
        Qcow2CacheEntry *e = l->data;

        if (e->pin) {
            continue;
        }
        if (e->dirty) {
            int ret = qcow2_cache_write(s, c, e);

            if (ret < 0) {
                return ret;
            }
        }
        *spare = e->data;
        e->data = NULL;
        qcow2_cache_remove(c, e);
        return 0;
    }
    return 0;
}

int qcow2_cache_get(BDRVQcow2State *s, Qcow2Cache *c, int64_t offset,
                    bool fresh, Qcow2CacheEntry **entry)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->map, &offset);
    void *spare;
    int ret;

    if (e) {
        if (fresh) {
            memset(e->data, 0, c->entry_size);
        }
        g_queue_unlink(&c->lru, &e->lru);
        g_queue_push_head_link(&c->lru, &e->lru);
        e->pin++;
        *entry = e;
        return 0;
    }
    ret = qcow2_cache_make_room(s, c, &spare);
    if (ret < 0) {
        return ret;
    }
    e = g_new0(Qcow2CacheEntry, 1);
    e->offset = offset;
    e->data = spare ? spare : qemu_memalign(512, c->entry_size);
    e->lru.data = e;
    if (fresh) {
        memset(e->data, 0, c->entry_size);
    } else {
        ret = qcow2_pread(s, offset, e->data, c->entry_size);
        if (ret < 0) {
            qcow2_cache_entry_free(e);
            return ret;
        }
    }
    g_hash_table_insert(c->map, &e->offset, e);
    g_queue_push_head_link(&c->lru, &e->lru);
    e->pin = 1;
    *entry = e;
    return 0;
}

void qcow2_cache_put(Qcow2CacheEntry *e)
{
    g_assert(e->pin > 0);
    e->pin--;
}

void qcow2_cache_mark_dirty(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    if (!e->dirty) {
        e->dirty = true;
        c->ndirty++;
    }
}

void qcow2_cache_discard(Qcow2Cache *c, int64_t offset)
{
    Qcow2CacheEntry *e = c ? g_hash_table_lookup(c->map, &offset) : NULL;

    if (e) {
        g_assert(e->pin == 0);
        qcow2_cache_remove(c, e);
    }
}

int qcow2_cache_flush(BDRVQcow2State *s, Qcow2Cache *c, bool *wrote)
{
    *wrote = false;
    if (!c || !c->ndirty) {
        return 0;
    }
    /* Oldest first: the write order does not matter within one cache. */
    for (GList *l = c->lru.tail; l && c->ndirty; l = l->prev) {
        Qcow2CacheEntry *e = l->data;

        if (e->dirty) {
            int ret = qcow2_cache_write(s, c, e);

            if (ret < 0) {
                return ret;
            }
            *wrote = true;
        }
    }
    return 0;
}

int qcow2_l2_barrier(BDRVQcow2State *s)
{
    bool wrote;
    int ret = qcow2_cache_flush(s, s->rb_cache, &wrote);

    if (ret < 0) {
        return ret;
    }
    if (wrote || s->need_sync) {
        ret = qcow2_sync(s);
        if (ret < 0) {
            return ret;
        }
        s->need_sync = false;
    }
    return 0;
}

/* Write the dirty 512-byte sectors of the L1 table. */
static int qcow2_write_l1(BDRVQcow2State *s)
{
    int64_t sectors = DIV_ROUND_UP((int64_t)s->l1_size * 8, 512);
    uint8_t buf[512];

    for (int64_t i = 0; i < sectors; i++) {
        int64_t first = i * 64;
        int64_t n = MIN(64, (int64_t)s->l1_size - first);
        int ret;

        if (!(s->l1_dirty[i / 8] & (1 << (i % 8)))) {
            continue;
        }
        for (int64_t j = 0; j < n; j++) {
            qcow2_put_be64(buf + j * 8, s->l1[first + j]);
        }
        ret = qcow2_check_overlap(s, s->l1_offset + i * 512, n * 8, NULL);
        if (ret == 0) {
            ret = qcow2_pwrite(s, s->l1_offset + i * 512, buf, n * 8);
        }
        if (ret < 0) {
            return ret;
        }
        s->l1_dirty[i / 8] &= ~(1 << (i % 8));
    }
    s->l1_any_dirty = false;
    return 0;
}

/* The file covers every allocated cluster (a crash before this leaves
 * only leaks past its end, which qemu-img check ignores). */
static int qcow2_extend_file(BDRVQcow2State *s)
{
    if (s->alloc_end > s->file_size) {
        qcow2_debug_change('T');
        if (ftruncate(s->fd, s->alloc_end) < 0) {
            return -errno;
        }
        s->file_size = s->alloc_end;
    }
    return 0;
}

int qcow2_flush_metadata(BDRVQcow2State *s)
{
    bool wrote;
    int ret;

    if (!s->writable) {
        return 0;
    }
    if (s->corrupt) {
        return -EIO;
    }
    ret = qcow2_l2_barrier(s);
    if (ret == 0) {
        ret = qcow2_cache_flush(s, s->l2_cache, &wrote);
    }
    if (ret == 0 && s->l1_any_dirty) {
        ret = qcow2_sync(s);
        if (ret == 0) {
            ret = qcow2_write_l1(s);
        }
    }
    if (ret == 0) {
        ret = qcow2_extend_file(s);
    }
    if (ret == 0) {
        ret = qcow2_sync(s);
    }
    if (ret == 0) {
        s->need_sync = false;
        ret = qcow2_apply_pending_frees(s);
    }
    /* The decrements, so that a clean close leaves no leak behind. */
    if (ret == 0) {
        ret = qcow2_cache_flush(s, s->rb_cache, &wrote);
        if (ret == 0 && wrote) {
            ret = qcow2_sync(s);
        }
    }
    return ret;
}
