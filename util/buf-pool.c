/*
 * A fixed set of equal I/O buffers in one mapping that asks for
 * transparent huge pages.  See buf-pool.h for why.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/buf-pool.h"
#include "util/cutils.h"

#include <glib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define BUF_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BUF_POOL_ASAN 1
#endif
#endif

#ifdef BUF_POOL_ASAN
/* The mapping is ours, not malloc's: tell ASan which buffers are out, so
 * that a use after put or a run past a buffer's end is still caught. */
#include <sanitizer/asan_interface.h>
#define POOL_POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POOL_POISON(p, n)   ((void)(p), (void)(n))
#define POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define BUF_POOL_HPAGE_DEFAULT  (2 * 1024 * 1024)

struct BufPool {
    uint8_t *base;          /* first buffer, huge-page aligned when huge */
    void *map;              /* the mapping as mmap() returned it */
    size_t map_len;
    size_t size;            /* bytes a caller may use of each buffer */
    size_t stride;          /* distance between buffers */
    int count;
    int used_ever;          /* buffers [0, used_ever) have been handed out */
    GPtrArray *free;        /* given back, reused last-in first-out */
    bool huge;
};

/* The PMD huge page size the kernel uses for THP, or 0 without THP; read
 * once per process. */
static size_t thp_size(void)
{
    static gsize once;
    static size_t size;
    FILE *f;
    unsigned long v;

    if (!g_once_init_enter(&once)) {
        return size;
    }
    f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "re");
    if (f) {
        if (fscanf(f, "%lu", &v) == 1 && v && !(v & (v - 1))) {
            size = v;
        }
        fclose(f);
    } else if (!access("/sys/kernel/mm/transparent_hugepage", F_OK)) {
        size = BUF_POOL_HPAGE_DEFAULT;
    }
    g_once_init_leave(&once, 1);
    return size;
}

BufPool *buf_pool_new(size_t size, int count, size_t align)
{
    size_t page = sysconf(_SC_PAGESIZE);
    size_t hpage = thp_size();
    BufPool *pool = g_new0(BufPool, 1);
    size_t len, map_align;
    uint8_t *p;

    g_assert(size > 0 && count > 0);
    g_assert(align && !(align & (align - 1)));
    pool->size = size;
    pool->stride = QEMU_ALIGN_UP(size, align);
    pool->count = count;
    pool->free = g_ptr_array_new();
    if (pool->stride > (SIZE_MAX - 2 * page) / count) {
        g_error("buffer pool of %d x %zu bytes is too large", count, size);
    }
    len = QEMU_ALIGN_UP(pool->stride * count, page);
    /* Huge pages only pay when a buffer spans one; align the start to one. */
    pool->huge = hpage && len >= hpage;
    map_align = MAX(pool->huge ? hpage : page, align);
    if (pool->huge) {
        len = QEMU_ALIGN_UP(len, hpage);
    }
    pool->map_len = len + map_align - page;
    pool->map = mmap(NULL, pool->map_len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool->map == MAP_FAILED) {
        g_error("out of memory mapping a buffer pool of %zu bytes", len);
    }
    p = (uint8_t *)QEMU_ALIGN_UP((uintptr_t)pool->map, map_align);
    if (pool->huge && madvise(p, len, MADV_HUGEPAGE) < 0) {
        pool->huge = false;             /* a kernel without THP */
    }
    pool->base = p;
    /* Poisoned as they come into use (so that a pool of a large buf-size
     * costs no shadow memory up front): buffer 0 now, see buf_pool_get(). */
    POOL_POISON(pool->base, pool->stride);
    return pool;
}

void buf_pool_free(BufPool *pool)
{
    if (!pool) {
        return;
    }
    POOL_UNPOISON(pool->base,
                  pool->stride * MIN(pool->used_ever + 1, pool->count));
    munmap(pool->map, pool->map_len);
    g_ptr_array_free(pool->free, TRUE);
    g_free(pool);
}

uint8_t *buf_pool_get(BufPool *pool)
{
    uint8_t *buf;

    if (pool->free->len) {
        buf = g_ptr_array_steal_index_fast(pool->free, pool->free->len - 1);
    } else if (pool->used_ever < pool->count) {
        buf = pool->base + (size_t)pool->used_ever++ * pool->stride;
        if (pool->used_ever < pool->count) {
            /* The next buffer, so that running past this one is caught. */
            POOL_POISON(buf + pool->stride, pool->stride);
        }
    } else {
        return NULL;
    }
    POOL_UNPOISON(buf, pool->size);
    return buf;
}

void buf_pool_put(BufPool *pool, uint8_t *buf)
{
    g_assert(buf >= pool->base &&
             (size_t)(buf - pool->base) % pool->stride == 0 &&
             (size_t)(buf - pool->base) / pool->stride <
             (size_t)pool->used_ever);
    POOL_POISON(buf, pool->size);
    g_ptr_array_add(pool->free, buf);
}

int buf_pool_in_use(const BufPool *pool)
{
    return pool->used_ever - (int)pool->free->len;
}

int buf_pool_used_ever(const BufPool *pool)
{
    return pool->used_ever;
}

bool buf_pool_huge(const BufPool *pool)
{
    return pool->huge;
}
