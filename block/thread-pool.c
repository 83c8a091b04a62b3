/*
 * Thread pool for blocking driver work; completions return to the loop.
 *
 * Workers are a GThreadPool.  A finished request is pushed onto a GAsyncQueue
 * and the pool's eventfd is bumped; a GSource on the owning main context
 * reads the eventfd and runs the completions there.
 *
 * Urgent work (a guest's requests) goes first at every queue here: the
 * GThreadPool's queue is sorted by (class, sequence number), the CPU-bound
 * jobs and the completions wait in two queues each, and the urgent one is
 * always emptied first.  FIFO within a class.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/thread-pool.h"
#include "util/cutils.h"

#include <errno.h>
#include <stdlib.h>
#include <glib-unix.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct ThreadPoolRequest {
    ThreadPool *pool;
    bool urgent;
    uint64_t seq;               /* submission order, for the sort */
    ThreadPoolFunc *func;       /* NULL: a CPU runner's token */
    void *arg;
    BlockCompletionFunc *cb;
    void *opaque;
    int ret;
} ThreadPoolRequest;

struct ThreadPool {
    GMainContext *ctx;
    GThreadPool *workers;
    uint64_t seq;               /* the next ThreadPoolRequest.seq (the
                                 * owning context's thread only) */
    GAsyncQueue *done;
    GAsyncQueue *done_urgent;
    int efd;
    GSource *source;
    GAsyncQueue *cpu_jobs;      /* thread_pool_submit_cpu(), not yet run */
    GAsyncQueue *cpu_urgent;    /* ... those with THREAD_POOL_URGENT */
    int cpu_runners;            /* atomic: workers running them */
    int cpu_max;                /* at most that many runners */
};

static void thread_pool_run(ThreadPool *pool, ThreadPoolRequest *req)
{
    uint64_t one = 1;
    ssize_t r;

    req->ret = req->func(req->arg);
    g_async_queue_push(req->urgent ? pool->done_urgent : pool->done, req);
    do {
        r = write(pool->efd, &one, sizeof(one));
    } while (r < 0 && errno == EINTR);
}

/* Become a CPU runner, unless there are cpu_max of them already. */
static bool thread_pool_cpu_claim(ThreadPool *pool)
{
    int n = g_atomic_int_get(&pool->cpu_runners);

    while (n < g_atomic_int_get(&pool->cpu_max)) {
        if (g_atomic_int_compare_and_exchange(&pool->cpu_runners, n, n + 1)) {
            return true;
        }
        n = g_atomic_int_get(&pool->cpu_runners);
    }
    return false;
}

/*
 * A CPU runner runs queued CPU-bound jobs back to back, so that the next
 * one starts on a warm thread without a wakeup.  Leaving, it looks once
 * more: a job queued while it still counted found every runner taken.
 */
static void thread_pool_cpu_runner(ThreadPool *pool)
{
    do {
        ThreadPoolRequest *req;

        while ((req = g_async_queue_try_pop(pool->cpu_urgent)) ||
               (req = g_async_queue_try_pop(pool->cpu_jobs))) {
            thread_pool_run(pool, req);
        }
        g_atomic_int_add(&pool->cpu_runners, -1);
    } while ((g_async_queue_length(pool->cpu_urgent) > 0 ||
              g_async_queue_length(pool->cpu_jobs) > 0) &&
             thread_pool_cpu_claim(pool));
}

static void thread_pool_worker(gpointer data, gpointer user_data)
{
    ThreadPool *pool = user_data;
    ThreadPoolRequest *req = data;

    if (!req->func) {
        g_free(req);            /* a token: become a CPU runner */
        thread_pool_cpu_runner(pool);
    } else {
        thread_pool_run(pool, req);
    }
}

/* The GThreadPool's queue order: urgent first, then submission order. */
static gint thread_pool_compare(gconstpointer a, gconstpointer b,
                                gpointer user_data)
{
    const ThreadPoolRequest *ra = a;
    const ThreadPoolRequest *rb = b;

    if (ra->urgent != rb->urgent) {
        return ra->urgent ? -1 : 1;
    }
    return ra->seq < rb->seq ? -1 : ra->seq > rb->seq;
}

static gboolean thread_pool_dispatch(gint fd, GIOCondition cond,
                                     gpointer user_data)
{
    ThreadPool *pool = user_data;
    ThreadPoolRequest *req;
    uint64_t n;

    if (read(pool->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
        g_error("thread pool eventfd read failed: %s", g_strerror(errno));
    }
    while ((req = g_async_queue_try_pop(pool->done_urgent)) ||
           (req = g_async_queue_try_pop(pool->done))) {
        req->cb(req->opaque, req->ret);
        g_free(req);
    }
    return G_SOURCE_CONTINUE;
}

static ThreadPool *thread_pool_new(GMainContext *ctx, int max_threads)
{
    ThreadPool *pool = g_new0(ThreadPool, 1);
    GError *err = NULL;

    pool->ctx = g_main_context_ref(ctx);
    pool->done = g_async_queue_new();
    pool->done_urgent = g_async_queue_new();
    pool->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pool->efd < 0) {
        g_error("eventfd: %s", g_strerror(errno));
    }
    pool->cpu_jobs = g_async_queue_new();
    pool->cpu_urgent = g_async_queue_new();
    pool->cpu_max = CLAMP((int)g_get_num_processors(), 1, max_threads);
    pool->workers = g_thread_pool_new(thread_pool_worker, pool, max_threads,
                                      FALSE, &err);
    if (!pool->workers) {
        g_error("cannot create thread pool: %s", err->message);
    }
    g_thread_pool_set_sort_function(pool->workers, thread_pool_compare, NULL);
    pool->source = g_unix_fd_source_new(pool->efd, G_IO_IN);
    g_source_set_callback(pool->source, G_SOURCE_FUNC(thread_pool_dispatch),
                          pool, NULL);
    g_source_set_name(pool->source, "thread-pool");
    g_source_attach(pool->source, ctx);
    g_debug("thread pool: up to %d workers", max_threads);
    return pool;
}

static GPrivate pool_key;
static GMutex pool_lock;
static GHashTable *pools; /* GMainContext * -> ThreadPool *, never freed */
static int pool_threads = THREAD_POOL_DEFAULT_THREADS;  /* pool_lock */

ThreadPool *thread_pool_get(void)
{
    GMainContext *ctx = g_main_context_ref_thread_default();
    ThreadPool *pool = g_private_get(&pool_key);

    if (pool && pool->ctx == ctx) {
        g_main_context_unref(ctx);
        return pool;
    }
    g_mutex_lock(&pool_lock);
    if (!pools) {
        pools = g_hash_table_new(NULL, NULL);
    }
    pool = g_hash_table_lookup(pools, ctx);
    if (!pool) {
        pool = thread_pool_new(ctx, pool_threads);
        g_hash_table_insert(pools, ctx, pool);
    }
    g_mutex_unlock(&pool_lock);
    g_private_set(&pool_key, pool);
    g_main_context_unref(ctx);
    return pool;
}

/* A request (or, with @func NULL, a CPU runner's token) in the class of
 * @flags, numbered in submission order. */
static ThreadPoolRequest *thread_pool_req_new(ThreadPool *pool,
                                              ThreadPoolFlags flags,
                                              ThreadPoolFunc *func,
                                              void *arg,
                                              BlockCompletionFunc *cb,
                                              void *opaque)
{
    ThreadPoolRequest *req = g_new(ThreadPoolRequest, 1);

    *req = (ThreadPoolRequest) {
        .pool = pool, .urgent = flags & THREAD_POOL_URGENT,
        .seq = pool->seq++,
        .func = func, .arg = arg, .cb = cb, .opaque = opaque,
    };
    return req;
}

void thread_pool_submit_full(ThreadPool *pool, ThreadPoolFlags flags,
                             ThreadPoolFunc *func, void *arg,
                             BlockCompletionFunc *cb, void *opaque)
{
    ThreadPoolRequest *req = thread_pool_req_new(pool, flags, func, arg,
                                                 cb, opaque);

    if (!(flags & THREAD_POOL_CPU)) {
        g_thread_pool_push(pool->workers, req, NULL);
        return;
    }
    g_async_queue_push(req->urgent ? pool->cpu_urgent : pool->cpu_jobs, req);
    if (thread_pool_cpu_claim(pool)) {
        g_thread_pool_push(pool->workers,
                           thread_pool_req_new(pool, flags, NULL, NULL,
                                               NULL, NULL),
                           NULL);
    }
}

void thread_pool_submit(ThreadPool *pool, ThreadPoolFunc *func, void *arg,
                        BlockCompletionFunc *cb, void *opaque)
{
    thread_pool_submit_full(pool, 0, func, arg, cb, opaque);
}

void thread_pool_submit_cpu(ThreadPool *pool, ThreadPoolFunc *func,
                            void *arg, BlockCompletionFunc *cb,
                            void *opaque)
{
    thread_pool_submit_full(pool, THREAD_POOL_CPU, func, arg, cb, opaque);
}

void thread_pool_set_threads(int threads)
{
    GHashTableIter it;
    gpointer pool;

    g_assert(threads >= 1 && threads <= THREAD_POOL_MAX_THREADS);
    g_mutex_lock(&pool_lock);
    pool_threads = threads;
    g_debug("thread pool: up to %d workers", threads);
    if (pools) {
        g_hash_table_iter_init(&it, pools);
        while (g_hash_table_iter_next(&it, NULL, &pool)) {
            thread_pool_set_max_threads(pool, threads);
        }
    }
    g_mutex_unlock(&pool_lock);
}

void thread_pool_set_max_threads(ThreadPool *pool, int max_threads)
{
    max_threads = CLAMP(max_threads, 1, THREAD_POOL_MAX_THREADS);
    g_debug("thread pool: up to %d workers", max_threads);
    g_thread_pool_set_max_threads(pool->workers, max_threads, NULL);
    g_atomic_int_set(&pool->cpu_max,
                     CLAMP((int)g_get_num_processors(), 1, max_threads));
}
