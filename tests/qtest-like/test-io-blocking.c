/*
 * Unit tests of block/io-blocking.c, the adapter that runs blocking
 * drivers on the thread pool, and of fused copies between any two
 * blocking nodes.  The driver here is a table of this test's own: an
 * image in memory whose members record the thread they ran on.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>

#define MEM_SIZE (1 * MiB)

typedef struct MemOpts {
    bool cpu_bound;
    bool run_here;
    bool no_copy;               /* can_copy() says no */
} MemOpts;

typedef struct MemState {
    uint8_t *data;
    MemOpts opts;
    GMutex lock;                /* the fields below */
    int calls[BDRV_OP_STATUS + 1];
    int on_main;                /* calls run on the main thread */
    int on_worker;
} MemState;

static GThread *main_thread;

static void mem_count(BlockDriverState *bs, BdrvOp op)
{
    MemState *s = bs->opaque;

    g_mutex_lock(&s->lock);
    s->calls[op]++;
    if (g_thread_self() == main_thread) {
        s->on_main++;
    } else {
        s->on_worker++;
    }
    g_mutex_unlock(&s->lock);
}

static bool mem_init(BlockDriverState *bs, void *data, GError **errp)
{
    MemState *s = bs->opaque;

    s->data = g_malloc0(MEM_SIZE);
    s->opts = *(MemOpts *)data;
    g_mutex_init(&s->lock);
    return true;
}

static void mem_close(BlockDriverState *bs)
{
    MemState *s = bs->opaque;

    g_free(s->data);
    g_mutex_clear(&s->lock);
}

static int64_t mem_get_length(BlockDriverState *bs)
{
    return MEM_SIZE;
}

static int mem_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     void *buf)
{
    MemState *s = bs->opaque;

    mem_count(bs, BDRV_OP_READ);
    memcpy(buf, s->data + offset, bytes);
    return 0;
}

static int mem_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
                      const void *buf, BdrvRequestFlags flags)
{
    MemState *s = bs->opaque;

    mem_count(bs, BDRV_OP_WRITE);
    memcpy(s->data + offset, buf, bytes);
    return 0;
}

static int mem_flush(BlockDriverState *bs)
{
    mem_count(bs, BDRV_OP_FLUSH);
    return -EIO;                /* so that the test sees it was called */
}

/* The first half is data, the second half a hole. */
static int mem_block_status(BlockDriverState *bs, int64_t offset,
                            int64_t bytes, GArray *extents)
{
    int64_t half = MEM_SIZE / 2;
    BlockExtent e = { .offset = offset };

    mem_count(bs, BDRV_OP_STATUS);
    e.length = offset < half ? MIN(bytes, half - offset) : bytes;
    e.flags = offset < half ? BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED
                            : BDRV_BLOCK_ZERO;
    g_array_append_val(extents, e);
    return 0;
}

static bool mem_cpu_bound(BlockDriverState *bs)
{
    MemState *s = bs->opaque;

    return s->opts.cpu_bound;
}

static bool mem_run_here(BlockDriverState *bs, const BdrvRequest *req)
{
    MemState *s = bs->opaque;

    return s->opts.run_here && req->op == BDRV_OP_READ;
}

static bool mem_can_copy(BlockDriverState *bs)
{
    MemState *s = bs->opaque;

    return !s->opts.no_copy;
}

/* No pwrite_zeroes, pdiscard: io.c's fallbacks apply. */
static const BlockDriver bdrv_mem = {
    .format_name        = "mem",
    .instance_size      = sizeof(MemState),
    .close              = mem_close,
    .get_length         = mem_get_length,
    .pread              = mem_pread,
    .pwrite             = mem_pwrite,
    .flush              = mem_flush,
    .block_status       = mem_block_status,
    .cpu_bound          = mem_cpu_bound,
    .run_here           = mem_run_here,
    .can_copy           = mem_can_copy,
};

/* The same driver without the optional members. */
static const BlockDriver bdrv_mem_bare = {
    .format_name        = "mem-bare",
    .instance_size      = sizeof(MemState),
    .close              = mem_close,
    .get_length         = mem_get_length,
    .pread              = mem_pread,
    .pwrite             = mem_pwrite,
};

static BlockDriverState *mem_open(const BlockDriver *drv, MemOpts opts)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = bdrv_new_internal(drv, drv->format_name,
                                             BDRV_O_RDWR, mem_init, &opts,
                                             &err);

    g_assert_no_error(err);
    return bs;
}

static MemState *mem_state(BlockDriverState *bs)
{
    return bs->opaque;
}

/* Reads and writes run on workers and move the bytes. */
static void test_rw(gconstpointer data)
{
    const MemOpts *opts = data;
    g_autoptr(BlockDriverState) bs = mem_open(&bdrv_mem, *opts);
    g_autofree uint8_t *wbuf = g_malloc(256 * KiB);
    g_autofree uint8_t *rbuf = g_malloc0(256 * KiB);
    MemState *s = mem_state(bs);

    test_fill_pattern(wbuf, 4096, 256 * KiB, 7);
    g_assert_cmpint(test_pwrite(bs, 4096, 256 * KiB, wbuf), ==, 0);
    g_assert_cmpmem(s->data + 4096, 256 * KiB, wbuf, 256 * KiB);
    g_assert_cmpint(test_pread(bs, 4096, 256 * KiB, rbuf), ==, 0);
    g_assert_cmpmem(rbuf, 256 * KiB, wbuf, 256 * KiB);
    g_assert_cmpint(s->calls[BDRV_OP_READ], ==, 1);
    g_assert_cmpint(s->calls[BDRV_OP_WRITE], ==, 1);
    g_assert_cmpint(s->on_main, ==, 0);
    g_assert_cmpint(s->on_worker, ==, 2);
}

static void flag_cb(void *opaque, int ret)
{
    g_assert_cmpint(ret, ==, 0);
    *(bool *)opaque = true;
}

/* run_here: the read runs on the main loop, its completion later. */
static void test_run_here(void)
{
    g_autoptr(BlockDriverState) bs =
        mem_open(&bdrv_mem, (MemOpts) { .cpu_bound = true,
                                        .run_here = true });
    MemState *s = mem_state(bs);
    uint8_t buf[4096];
    bool done[2] = { false, false };

    memset(s->data, 0x5a, 4096);
    bdrv_aio_pread(bs, 0, 4096, buf, 0, flag_cb, &done[0]);
    g_assert_cmpint(s->on_main, ==, 1);
    g_assert_false(done[0]);
    g_assert_cmpuint(bs->run_here, ==, 1);
    test_run_until(&done[0], 10);
    g_assert_cmpuint(bs->run_here, ==, 0);
    g_assert_cmpint(buf[0], ==, 0x5a);
    g_assert_cmpint(buf[4095], ==, 0x5a);

    /* Writes are not asked to run here by this driver. */
    bdrv_aio_pwrite(bs, 0, 4096, buf, 0, flag_cb, &done[1]);
    test_run_until(&done[1], 10);
    g_assert_cmpint(s->on_main, ==, 1);
    g_assert_cmpint(s->on_worker, ==, 1);
}

/* Block status extents come back into the caller's array, after what
 * it held already. */
static void test_status(void)
{
    g_autoptr(BlockDriverState) bs = mem_open(&bdrv_mem, (MemOpts) { 0 });
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockExtent old = { .offset = 77, .length = 1 };
    BlockExtent *e;

    g_array_append_val(ext, old);
    g_assert_cmpint(test_block_status(bs, MEM_SIZE / 4, MEM_SIZE, ext), ==,
                    0);
    g_assert_cmpuint(ext->len, ==, 2);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->offset, ==, 77);
    e = &g_array_index(ext, BlockExtent, 1);
    g_assert_cmpint(e->offset, ==, MEM_SIZE / 4);
    g_assert_cmpint(e->length, ==, MEM_SIZE / 4);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);

    g_assert_cmpint(test_block_status(bs, MEM_SIZE / 2, 4096, ext), ==, 0);
    g_assert_cmpuint(ext->len, ==, 3);
    e = &g_array_index(ext, BlockExtent, 2);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_ZERO);
    g_assert_cmpint(mem_state(bs)->calls[BDRV_OP_STATUS], ==, 2);
}

/* The members a blocking driver leaves out: io.c's defaults. */
static void test_defaults(void)
{
    g_autoptr(BlockDriverState) bs = mem_open(&bdrv_mem_bare,
                                              (MemOpts) { 0 });
    g_autoptr(BlockDriverState) full = mem_open(&bdrv_mem, (MemOpts) { 0 });
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    MemState *s = mem_state(bs);
    BlockExtent *e;

    memset(s->data, 0xff, MEM_SIZE);
    /* No pwrite_zeroes: zero buffers are written. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 8192, 8192, 0), ==, 0);
    g_assert_true(buffer_is_zero(s->data + 8192, 8192));
    g_assert_cmpint(s->data[8191], ==, 0xff);
    g_assert_cmpint(s->data[16384], ==, 0xff);
    g_assert_cmpint(s->calls[BDRV_OP_WRITE], ==, 1);
    /* No pdiscard, flush: they succeed doing nothing. */
    g_assert_cmpint(test_pdiscard(bs, 0, 4096), ==, 0);
    g_assert_cmpint(s->data[0], ==, 0xff);
    g_assert_cmpint(test_flush(bs), ==, 0);
    /* No block_status: all data. */
    g_assert_cmpint(test_block_status(bs, 0, MEM_SIZE, ext), ==, 0);
    g_assert_cmpuint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, MEM_SIZE);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
    g_assert_cmpint(s->on_main + s->on_worker, ==, 1);

    /* With the member, the driver's flush runs (and fails here). */
    g_assert_cmpint(test_flush(full), ==, -EIO);
    g_assert_cmpint(mem_state(full)->calls[BDRV_OP_FLUSH], ==, 1);
}

typedef struct CopyWait {
    bool done;
    int ret;
} CopyWait;

static void copy_done(void *opaque, int ret)
{
    CopyWait *w = opaque;

    w->ret = ret;
    w->done = true;
}

/* Fused copies between two nodes of a driver that is neither raw nor
 * qcow2; can_copy() vetoes; an asynchronous node never qualifies. */
static void test_copy(void)
{
    g_autoptr(BlockDriverState) a = mem_open(&bdrv_mem, (MemOpts) { 0 });
    g_autoptr(BlockDriverState) b = mem_open(&bdrv_mem_bare,
                                             (MemOpts) { 0 });
    g_autoptr(BlockDriverState) veto =
        mem_open(&bdrv_mem, (MemOpts) { .no_copy = true });
    g_autoptr(BlockDriverState) null = test_open("null:size=1M", NULL,
                                                 BDRV_O_RDWR);
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    BdrvCopyResult res;
    CopyWait w = { 0 };

    g_assert_true(bdrv_is_blocking(a));
    g_assert_false(bdrv_is_blocking(null));
    g_assert_true(bdrv_can_copy(a, b));
    g_assert_true(bdrv_can_copy(b, a));
    g_assert_false(bdrv_can_copy(a, veto));
    g_assert_false(bdrv_can_copy(veto, a));
    g_assert_false(bdrv_can_copy(a, null));
    g_assert_false(bdrv_can_copy(null, a));

    test_fill_pattern(mem_state(a)->data + 128 * KiB, 128 * KiB, 64 * KiB,
                      3);
    bdrv_aio_copy(a, b, 128 * KiB, 64 * KiB, buf, NULL, &res, copy_done,
                  &w);
    g_assert_cmpuint(bdrv_get_in_flight(a), ==, 1);
    g_assert_cmpuint(bdrv_get_in_flight(b), ==, 1);
    test_run_until(&w.done, 10);
    g_assert_cmpint(w.ret, ==, 0);
    g_assert_true(res.written);
    g_assert_cmpmem(mem_state(b)->data + 128 * KiB, 64 * KiB,
                    mem_state(a)->data + 128 * KiB, 64 * KiB);
    g_assert_true(buffer_is_zero(mem_state(b)->data, 128 * KiB));
    /* One job: a read of one node and a write of the other, on a worker. */
    g_assert_cmpint(mem_state(a)->calls[BDRV_OP_READ], ==, 1);
    g_assert_cmpint(mem_state(b)->calls[BDRV_OP_WRITE], ==, 1);
    g_assert_cmpint(mem_state(a)->on_main + mem_state(b)->on_main, ==, 0);
}

int main(int argc, char **argv)
{
    static const MemOpts pool = { 0 };
    static const MemOpts cpu = { .cpu_bound = true };

    main_thread = g_thread_self();
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/io-blocking/rw/pool", &pool, test_rw);
    g_test_add_data_func("/io-blocking/rw/cpu", &cpu, test_rw);
    g_test_add_func("/io-blocking/run-here", test_run_here);
    g_test_add_func("/io-blocking/status", test_status);
    g_test_add_func("/io-blocking/defaults", test_defaults);
    g_test_add_func("/io-blocking/copy", test_copy);
    return g_test_run();
}
