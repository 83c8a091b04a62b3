/*
 * A buffer pool: a fixed number of equal I/O buffers carved from one
 * anonymous mapping that asks for transparent huge pages.
 *
 * Why not one posix_memalign() per buffer: a 1 MiB buffer is a fresh mmap
 * from the C library, and its first touch (the read that fills it) takes
 * 256 page faults.  On a VM each fault is an exit to the hypervisor, so 16
 * such buffers cost about as much as the copy of 300 MiB they serve (see
 * bench/README.md, "Buffer pool").  One mapping aligned to the huge page
 * size takes one fault per 2 MiB instead, when the kernel's THP mode is
 * "madvise" or "always".
 *
 * Buffers are handed out lowest address first and reused last-in first-out,
 * so a job that never has more than a few in flight touches only those.
 * Not thread-safe: the owner (the main loop) gets and puts.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_BUF_POOL_H
#define UTIL_BUF_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct BufPool BufPool;

/*
 * A pool of @count buffers of @size bytes each, every one aligned to
 * @align (a power of two).  Reserves address space only; memory is
 * touched as buffers are used.  Huge pages are asked for (MADV_HUGEPAGE)
 * when the pool spans one and the kernel has them; the system's
 * transparent_hugepage setting decides whether they are given.  Aborts
 * when the address space is not there, as g_malloc() does.
 */
BufPool *buf_pool_new(size_t size, int count, size_t align);

/* Free @pool and its mapping; every buffer must be back (or abandoned). */
void buf_pool_free(BufPool *pool);

/* A buffer of the pool's size, or NULL when all @count are out. */
uint8_t *buf_pool_get(BufPool *pool);

/* Give back @buf, which buf_pool_get() of @pool returned. */
void buf_pool_put(BufPool *pool, uint8_t *buf);

/* How many buffers are out right now. */
int buf_pool_in_use(const BufPool *pool);

/* How many distinct buffers have ever been handed out (touched memory). */
int buf_pool_used_ever(const BufPool *pool);

/* Whether the mapping was advised to use huge pages. */
bool buf_pool_huge(const BufPool *pool);

#endif /* UTIL_BUF_POOL_H */
