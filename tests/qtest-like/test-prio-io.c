/*
 * BDRV_REQ_PRIO through the request path: io.c keeps the flag on every
 * driver call a request makes (fragments, read-modify-write reads, the
 * zero-write fallback, the pieces of an unaligned write-zeroes, and
 * discard, flush and block status through bdrv_aio_submit()), as the
 * null driver records them; and a blocking driver's PRIO request
 * overtakes the normal ones waiting for the thread pool's only worker.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/null.h"
#include "block/thread-pool.h"
#include "tests/qtest-like/raw-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* One request through bdrv_aio_submit(), waited for. */
static int submit_wait(BlockDriverState *bs, BdrvOp op, int64_t offset,
                       int64_t bytes, void *buf, BdrvRequestFlags flags)
{
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    Completion c = { 0 };

    bdrv_aio_submit(bs, op, offset, bytes, buf, flags, ext, completion_cb,
                    &c);
    return completion_wait(&c);
}

/*
 * The records of @bs from @first on: how many, and that each has
 * BDRV_REQ_PRIO exactly when @prio, and every flag of @keep.
 */
static guint check_records(BlockDriverState *bs, guint first, bool prio,
                           unsigned keep)
{
    GArray *rec = null_get_records(bs);

    for (guint i = first; i < rec->len; i++) {
        NullRecord *r = &g_array_index(rec, NullRecord, i);

        g_assert_cmpuint(!!(r->flags & BDRV_REQ_PRIO), ==, prio);
        g_assert_cmpuint(r->flags & keep, ==, keep);
    }
    return rec->len - first;
}

static void flags_through_io(bool prio)
{
    g_autoptr(BlockDriverState) bs = test_open(
        "null:size=16M,align=4096,max-transfer=64K,record=on", NULL,
        BDRV_O_RDWR);
    g_autoptr(BlockDriverState) nz = test_open(
        "null:size=16M,align=4096,zeroes=off,record=on", NULL, BDRV_O_RDWR);
    BdrvRequestFlags p = prio ? BDRV_REQ_PRIO : 0;
    g_autofree uint8_t *buf = g_malloc0(MIB);
    guint n = 0, got;

    /* Fragments of a read and of a FUA write. */
    g_assert_cmpint(submit_wait(bs, BDRV_OP_READ, 0, 256 * KIB, buf, p),
                    ==, 0);
    got = check_records(bs, n, prio, 0);
    g_assert_cmpuint(got, ==, 4);
    n += got;
    g_assert_cmpint(submit_wait(bs, BDRV_OP_WRITE, 0, 256 * KIB, buf,
                                p | BDRV_REQ_FUA), ==, 0);
    got = check_records(bs, n, prio, BDRV_REQ_FUA);
    g_assert_cmpuint(got, ==, 4);
    n += got;
    /* Read-modify-write: head and tail reads, then the write. */
    g_assert_cmpint(submit_wait(bs, BDRV_OP_WRITE, 100, 10000, buf, p), ==,
                    0);
    got = check_records(bs, n, prio, 0);
    g_assert_cmpuint(got, ==, 3);
    n += got;
    /* Unaligned write-zeroes: zero-data pieces and an aligned zero. */
    g_assert_cmpint(submit_wait(bs, BDRV_OP_ZERO, 100, 3 * 4096, NULL, p),
                    ==, 0);
    got = check_records(bs, n, prio, 0);
    g_assert_cmpuint(got, >=, 3);
    n += got;
    /* Discard, flush and block status keep only the flag. */
    g_assert_cmpint(submit_wait(bs, BDRV_OP_DISCARD, 0, 8192, NULL,
                                p | BDRV_REQ_FUA), ==, 0);
    g_assert_cmpint(submit_wait(bs, BDRV_OP_FLUSH, 0, 0, NULL, p), ==, 0);
    g_assert_cmpint(submit_wait(bs, BDRV_OP_STATUS, 0, MIB, NULL, p), ==,
                    0);
    got = check_records(bs, n, prio, 0);
    g_assert_cmpuint(got, ==, 3);
    for (guint i = n; i < n + got; i++) {
        NullRecord *r = &g_array_index(null_get_records(bs), NullRecord, i);

        g_assert_cmpuint(r->flags, ==, p);
    }

    /* No efficient zeroing: the zero buffers written instead. */
    g_assert_cmpint(submit_wait(nz, BDRV_OP_ZERO, 0, 2 * MIB, NULL,
                                p | BDRV_REQ_FUA), ==, 0);
    got = check_records(nz, 0, prio, 0);
    g_assert_cmpuint(got, ==, 2);       /* 1 MiB zero buffer, twice */
    for (guint i = 0; i < got; i++) {
        NullRecord *r = &g_array_index(null_get_records(nz), NullRecord, i);

        g_assert_cmpint(r->op, ==, NULL_OP_WRITE);
        g_assert_true(r->flags & BDRV_REQ_FUA);
    }
}

static void test_flags_prio(void)
{
    flags_through_io(true);
}

static void test_flags_none(void)
{
    flags_through_io(false);
}

/* ---- a blocking driver's requests in the thread pool ---- */

#define QUEUED 6

typedef struct Hold {
    GMutex lock;
    GCond cond;
    bool started;
    bool released;
} Hold;

static int hold_worker(void *arg)
{
    Hold *h = arg;

    g_mutex_lock(&h->lock);
    h->started = true;
    g_cond_broadcast(&h->cond);
    while (!h->released) {
        g_cond_wait(&h->cond, &h->lock);
    }
    g_mutex_unlock(&h->lock);
    return 0;
}

static bool hold_done;

static void hold_done_cb(void *opaque, int ret)
{
    hold_done = true;
}

typedef struct Done {
    GArray *order;
    int id;
} Done;

static void write_done(void *opaque, int ret)
{
    Done *d = opaque;

    g_assert_cmpint(ret, ==, 0);
    g_array_append_val(d->order, d->id);
}

/*
 * The pool's only worker is held; QUEUED normal writes to a raw file wait
 * for it, then a PRIO write.  Released, the PRIO write runs and completes
 * first.  Writes: a raw file's reads may run on the main loop.
 */
static void test_blocking_prio(Fixture *f, gconstpointer data)
{
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *path = NULL;
    g_autoptr(GArray) order = g_array_new(FALSE, FALSE, sizeof(int));
    ThreadPool *pool = thread_pool_get();
    Done done[QUEUED + 1];
    uint8_t buf[4096] = { 1 };
    Hold h = { 0 };
    bool cpu;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", MIB);
    bs = open_raw(path, BDRV_O_RDWR, NULL);
    cpu = bs->drv->cpu_bound && bs->drv->cpu_bound(bs);
    g_test_message("the node is %s", cpu ? "CPU-bound" : "blocking");
    g_mutex_init(&h.lock);
    g_cond_init(&h.cond);
    thread_pool_set_max_threads(pool, 1);
    /* Hold the worker of the queue the node's requests go to. */
    thread_pool_submit_full(pool, cpu ? THREAD_POOL_CPU : 0, hold_worker,
                            &h, hold_done_cb, NULL);
    g_mutex_lock(&h.lock);
    while (!h.started) {
        g_cond_wait(&h.cond, &h.lock);
    }
    g_mutex_unlock(&h.lock);

    for (int i = 0; i <= QUEUED; i++) {
        done[i] = (Done) { .order = order, .id = i };
        bdrv_aio_pwrite(bs, i * 4096, sizeof(buf), buf,
                        i == QUEUED ? BDRV_REQ_PRIO : 0, write_done,
                        &done[i]);
    }
    g_mutex_lock(&h.lock);
    h.released = true;
    g_cond_broadcast(&h.cond);
    g_mutex_unlock(&h.lock);
    while (order->len < QUEUED + 1 || !hold_done) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_assert_cmpint(g_array_index(order, int, 0), ==, QUEUED);
    for (int i = 1; i <= QUEUED; i++) {
        g_assert_cmpint(g_array_index(order, int, i), ==, i - 1);
    }
    thread_pool_set_max_threads(pool, THREAD_POOL_DEFAULT_THREADS);
    g_mutex_clear(&h.lock);
    g_cond_clear(&h.cond);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/io/prio/flags", test_flags_prio);
    g_test_add_func("/io/prio/flags-none", test_flags_none);
    g_test_add("/io/prio/thread-pool", Fixture, NULL, fixture_setup,
               test_blocking_prio, fixture_teardown);
    g_test_add("/io/prio/thread-pool/shm", Fixture, NULL, fixture_setup_shm,
               test_blocking_prio, fixture_teardown);
    return g_test_run();
}
