/*
 * Thread pool for blocking driver work.
 *
 * Blocking calls (preadv, pwritev, fallocate, fdatasync, lseek) run on
 * worker threads; their completions come back to the main context that
 * submitted them, through an eventfd watched by a GSource, so that every
 * piece of block-layer state is only touched on the main loop.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_THREAD_POOL_H
#define BLOCK_THREAD_POOL_H

#include "block/block.h"

typedef struct ThreadPool ThreadPool;

/* Work run on a worker thread; returns 0 or -errno.  It must not touch
 * main-loop state. */
typedef int ThreadPoolFunc(void *arg);

/* Default number of worker threads of each pool, and the most a pool has. */
#define THREAD_POOL_DEFAULT_THREADS 16
#define THREAD_POOL_MAX_THREADS     256

/*
 * The pool for the calling thread's thread-default main context, created on
 * first use with the number of workers thread_pool_set_threads() set last
 * (THREAD_POOL_DEFAULT_THREADS if it was never called).
 */
ThreadPool *thread_pool_get(void);

/*
 * Give every pool, those that exist and those made later, @threads
 * workers: 1..THREAD_POOL_MAX_THREADS (the caller checks the value it was
 * given; anything else is a programming error).  For the program's
 * configuration (mirror-tool --threads), before its I/O starts.
 */
void thread_pool_set_threads(int threads);

/* How thread_pool_submit_full() queues a piece of work. */
typedef enum ThreadPoolFlags {
    THREAD_POOL_URGENT = 0x1,   /* a guest's request (BDRV_REQ_PRIO): it
                                 * starts before every queued piece of work
                                 * without the flag, and its completion
                                 * runs before theirs in a dispatch; FIFO
                                 * within each class */
    THREAD_POOL_CPU    = 0x2,   /* CPU-bound (thread_pool_submit_cpu()) */
} ThreadPoolFlags;

/*
 * Run @func(@arg) on a worker; afterwards run @cb(@opaque, ret) on the main
 * context the pool belongs to.  Never calls @cb before returning.  Work
 * starts in submission order, and completions run in the order the work
 * finished, except that THREAD_POOL_URGENT work goes first in both (see
 * ThreadPoolFlags); with THREAD_POOL_CPU it is CPU-bound work, queued as
 * thread_pool_submit_cpu() says.  Called on the pool's main context.
 */
void thread_pool_submit_full(ThreadPool *pool, ThreadPoolFlags flags,
                             ThreadPoolFunc *func, void *arg,
                             BlockCompletionFunc *cb, void *opaque);

/* thread_pool_submit_full() with no flags. */
void thread_pool_submit(ThreadPool *pool, ThreadPoolFunc *func, void *arg,
                        BlockCompletionFunc *cb, void *opaque);

/*
 * thread_pool_submit() for work that keeps a CPU busy (copies between
 * page-cache files, compression): at most one such job per CPU runs at a
 * time, the others wait in submission order (urgent ones first, with
 * thread_pool_submit_full()), and a worker that finishes one goes on with
 * the next.  More of them at once would only fight for the CPUs, and for
 * the locks of the files they write.
 */
void thread_pool_submit_cpu(ThreadPool *pool, ThreadPoolFunc *func,
                            void *arg, BlockCompletionFunc *cb,
                            void *opaque);

/* Change the number of worker threads of @pool (clamped to
 * 1..THREAD_POOL_MAX_THREADS). */
void thread_pool_set_max_threads(ThreadPool *pool, int max_threads);

#endif /* BLOCK_THREAD_POOL_H */
