/*
 * The thread pool serves urgent work (a guest's requests) first: with one
 * worker held busy, work queued behind it starts urgent first and then in
 * submission order, for both the blocking queue and the CPU-bound one;
 * and in a dispatch the urgent completions run first.  No timing: the
 * worker is held and released by the test, and the test waits for the
 * work to have run before it lets the main loop complete it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/thread-pool.h"

#define NORMAL_JOBS 8
#define URGENT_ID   100
#define BLOCKER_ID  -1

typedef struct Order {
    GMutex lock;
    GCond cond;
    bool started;               /* the blocker runs */
    bool released;              /* the blocker may return */
    int ran;                    /* jobs run (their function returned) */
    GArray *run;                /* ids in the order the jobs ran */
    GArray *done;               /* ids in the order completions ran */
} Order;

typedef struct Job {
    Order *o;
    int id;
} Job;

static Order order;

static int job_run(void *arg)
{
    Job *j = arg;
    Order *o = j->o;

    g_mutex_lock(&o->lock);
    if (j->id == BLOCKER_ID) {
        o->started = true;
        g_cond_broadcast(&o->cond);
        while (!o->released) {
            g_cond_wait(&o->cond, &o->lock);
        }
    }
    g_array_append_val(o->run, j->id);
    o->ran++;
    g_cond_broadcast(&o->cond);
    g_mutex_unlock(&o->lock);
    return j->id;
}

static void job_done(void *opaque, int ret)
{
    Job *j = opaque;

    g_assert_cmpint(ret, ==, j->id);
    g_array_append_val(j->o->done, j->id);
}

/*
 * Hold the pool's only worker with a blocker, queue NORMAL_JOBS normal
 * jobs and then one urgent job (@flags: the queue), release the worker,
 * wait until all ran, then complete them on the main loop.
 */
static void run_queued(ThreadPoolFlags flags)
{
    ThreadPool *pool = thread_pool_get();
    Order *o = &order;
    Job jobs[NORMAL_JOBS + 2];
    int total = NORMAL_JOBS + 2;
    int i;

    thread_pool_set_max_threads(pool, 1);
    g_mutex_init(&o->lock);
    g_cond_init(&o->cond);
    o->started = o->released = false;
    o->ran = 0;
    o->run = g_array_new(FALSE, FALSE, sizeof(int));
    o->done = g_array_new(FALSE, FALSE, sizeof(int));

    jobs[0] = (Job) { .o = o, .id = BLOCKER_ID };
    thread_pool_submit_full(pool, flags, job_run, &jobs[0], job_done,
                            &jobs[0]);
    g_mutex_lock(&o->lock);
    while (!o->started) {
        g_cond_wait(&o->cond, &o->lock);
    }
    g_mutex_unlock(&o->lock);

    for (i = 1; i <= NORMAL_JOBS; i++) {
        jobs[i] = (Job) { .o = o, .id = i };
        thread_pool_submit_full(pool, flags, job_run, &jobs[i], job_done,
                                &jobs[i]);
    }
    jobs[i] = (Job) { .o = o, .id = URGENT_ID };
    thread_pool_submit_full(pool, flags | THREAD_POOL_URGENT, job_run,
                            &jobs[i], job_done, &jobs[i]);

    /* Nothing completes before the main loop runs: all ran first. */
    g_mutex_lock(&o->lock);
    o->released = true;
    g_cond_broadcast(&o->cond);
    while (o->ran < total) {
        g_cond_wait(&o->cond, &o->lock);
    }
    g_mutex_unlock(&o->lock);
    while ((int)o->done->len < total) {
        g_main_context_iteration(NULL, TRUE);
    }
}

static void check_run_order(void)
{
    GArray *run = order.run;

    g_assert_cmpint(run->len, ==, NORMAL_JOBS + 2);
    g_assert_cmpint(g_array_index(run, int, 0), ==, BLOCKER_ID);
    g_assert_cmpint(g_array_index(run, int, 1), ==, URGENT_ID);
    for (int i = 1; i <= NORMAL_JOBS; i++) {
        g_assert_cmpint(g_array_index(run, int, i + 1), ==, i);
    }
}

/*
 * The completions: every job had run (and queued its completion) before
 * the main loop ran, the urgent one after the blocker; the urgent
 * completion runs first, the others in the order their work finished.
 */
static void check_done_order(void)
{
    GArray *done = order.done;

    g_assert_cmpint(done->len, ==, NORMAL_JOBS + 2);
    g_assert_cmpint(g_array_index(done, int, 0), ==, URGENT_ID);
    g_assert_cmpint(g_array_index(done, int, 1), ==, BLOCKER_ID);
    for (int i = 1; i <= NORMAL_JOBS; i++) {
        g_assert_cmpint(g_array_index(done, int, i + 1), ==, i);
    }
}

static void order_free(void)
{
    g_array_unref(order.run);
    g_array_unref(order.done);
    g_mutex_clear(&order.lock);
    g_cond_clear(&order.cond);
}

static void test_pool_urgent_first(void)
{
    run_queued(0);
    check_run_order();
    check_done_order();
    order_free();
}

static void test_cpu_urgent_first(void)
{
    run_queued(THREAD_POOL_CPU);
    check_run_order();
    check_done_order();
    order_free();
}

/* Without urgent work the order is the submission order, as before. */
static int fifo_seen[NORMAL_JOBS];
static int fifo_count;

static int fifo_run(void *arg)
{
    return GPOINTER_TO_INT(arg);
}

static void fifo_done(void *opaque, int ret)
{
    fifo_seen[fifo_count++] = ret;
}

static void test_pool_fifo(void)
{
    ThreadPool *pool = thread_pool_get();

    thread_pool_set_max_threads(pool, 1);
    for (int i = 0; i < NORMAL_JOBS; i++) {
        thread_pool_submit(pool, fifo_run, GINT_TO_POINTER(i), fifo_done,
                           NULL);
    }
    while (fifo_count < NORMAL_JOBS) {
        g_main_context_iteration(NULL, TRUE);
    }
    for (int i = 0; i < NORMAL_JOBS; i++) {
        g_assert_cmpint(fifo_seen[i], ==, i);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/thread-pool/prio/blocking", test_pool_urgent_first);
    g_test_add_func("/thread-pool/prio/cpu", test_cpu_urgent_first);
    g_test_add_func("/thread-pool/prio/fifo", test_pool_fifo);
    return g_test_run();
}
