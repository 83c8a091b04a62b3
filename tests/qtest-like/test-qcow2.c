/*
 * qcow2-lite data path through block/io.c: random reads and writes
 * against a shadow buffer at every cluster size, copy-on-write from raw
 * and qcow2 backing files and from compressed clusters, write-zeroes and
 * discard, refcount table growth (512-byte clusters), parallel writes to
 * distinct clusters (and to one cluster), block status through a chain,
 * create options.  Every image ends with the consistency check clean.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <string.h>
#include <zlib.h>

#include "block/qcow2-int.h"
#include "block/qcow2.h"
#include "tests/qtest-like/qcow2-fixture.h"
#include "tests/qtest-like/test-util.h"

typedef struct Done {
    bool done;
    int ret;
} Done;

static void done_cb(void *opaque, int ret)
{
    Done *d = opaque;

    d->ret = ret;
    d->done = true;
}

static void assert_reads(BlockDriverState *bs, const uint8_t *want,
                         int64_t size)
{
    g_autofree uint8_t *got = g_malloc(size);

    g_assert_cmpint(test_pread(bs, 0, size, got), ==, 0);
    for (int64_t i = 0; i < size; i++) {
        if (got[i] != want[i]) {
            g_test_message("first difference at %" G_GINT64_FORMAT, i);
            g_assert_cmphex(got[i], ==, want[i]);
        }
    }
}

/* Whole clusters of [off, off + len), the last may end at @size. */
static void shadow_whole_zero(uint8_t *shadow, int64_t size, int64_t cs,
                              int64_t off, int64_t len)
{
    int64_t start = QEMU_ALIGN_UP(off, cs);
    int64_t end = off + len >= size ? size : QEMU_ALIGN_DOWN(off + len, cs);

    if (start < end) {
        memset(shadow + start, 0, end - start);
    }
}

static void test_random_rw(gconstpointer data)
{
    int cb = GPOINTER_TO_INT(data);
    int64_t cs = INT64_C(1) << cb;
    int64_t size = 8 * Q_MIB + 3 * 512;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "r.qcow2", size, cb, NULL,
                                         NULL, false);
    g_autofree uint8_t *shadow = g_malloc0(size);
    g_autofree uint8_t *buf = g_malloc(256 * Q_KIB);
    g_autoptr(GRand) rand = g_rand_new_with_seed(cb);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);

    for (int i = 0; i < 300; i++) {
        int64_t off = g_rand_int_range(rand, 0, size - 1);
        int64_t len = g_rand_int_range(rand, 1, 256 * Q_KIB);
        int op = g_rand_int_range(rand, 0, 10);

        len = MIN(len, size - off);

        if (op < 6) {
            test_fill_pattern(buf, off, len, i);
            g_assert_cmpint(test_pwrite(bs, off, len, buf), ==, 0);
            memcpy(shadow + off, buf, len);
        } else if (op < 8) {
            g_assert_cmpint(test_pwrite_zeroes(bs, off, len,
                                               op == 6 ? BDRV_REQ_MAY_UNMAP
                                                       : 0), ==, 0);
            memset(shadow + off, 0, len);
        } else if (op == 8) {
            g_assert_cmpint(test_pdiscard(bs, off, len), ==, 0);
            shadow_whole_zero(shadow, size, cs, off, len);
        } else {
            g_assert_cmpint(test_pread(bs, off, len, buf), ==, 0);
            g_assert_cmpmem(buf, len, shadow + off, len);
        }
    }
    assert_reads(bs, shadow, size);
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);
    bdrv_unref(bs);
    bs = q_open(path, 0);
    assert_reads(bs, shadow, size);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* Status of one offset: flags and depth. */
static void assert_status(BlockDriverState *bs, int64_t off, unsigned flags,
                          int depth)
{
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockExtent *e;

    g_assert_cmpint(test_block_status(bs, off, 512, ext), ==, 0);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->offset, ==, off);
    g_assert_cmphex(e->flags & ~BDRV_BLOCK_OFFSET_VALID, ==,
                    flags & ~BDRV_BLOCK_OFFSET_VALID);
    if (flags & BDRV_BLOCK_OFFSET_VALID) {
        g_assert_cmphex(e->flags & BDRV_BLOCK_OFFSET_VALID, !=, 0);
    }
    g_assert_cmpint(e->depth, ==, depth);
}

#define DATA        (BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED)
#define ZERO        (BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED)
#define HOLE        (BDRV_BLOCK_ZERO)

/* Copy-on-write from a raw backing file shorter than the overlay. */
static void test_cow_raw(void)
{
    int64_t size = 4 * Q_MIB, bsize = 3 * Q_MIB + 1000;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *base = q_make_raw(dir, "base.raw", bsize, 7);
    g_autofree char *path = q_make_image(dir, "ov.qcow2", size, 16,
                                         "base.raw", "raw", false);
    g_autofree uint8_t *shadow = g_malloc0(size);
    g_autofree uint8_t *buf = g_malloc(Q_MIB);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);

    test_fill_pattern(shadow, 0, bsize, 7);
    assert_reads(bs, shadow, size);
    assert_status(bs, 0, DATA | BDRV_BLOCK_OFFSET_VALID, 1);
    assert_status(bs, bsize + 512, HOLE, 0);

    /* Partial writes: head and tail come from the base. */
    memset(buf, 0x11, 100);
    g_assert_cmpint(test_pwrite(bs, 70000, 100, buf), ==, 0);
    memset(shadow + 70000, 0x11, 100);
    /* Across the end of the base and past it. */
    memset(buf, 0x22, 200 * Q_KIB);
    g_assert_cmpint(test_pwrite(bs, bsize - 1000, 200 * Q_KIB, buf), ==, 0);
    memset(shadow + bsize - 1000, 0x22, 200 * Q_KIB);
    /* Zeroes over base data: partial (written) and whole (zero flag). */
    g_assert_cmpint(test_pwrite_zeroes(bs, 300 * Q_KIB, 1000, 0), ==, 0);
    memset(shadow + 300 * Q_KIB, 0, 1000);
    g_assert_cmpint(test_pwrite_zeroes(bs, Q_MIB, 128 * Q_KIB,
                                       BDRV_REQ_MAY_UNMAP), ==, 0);
    memset(shadow + Q_MIB, 0, 128 * Q_KIB);
    g_assert_cmpint(test_pdiscard(bs, 2 * Q_MIB, 64 * Q_KIB), ==, 0);
    memset(shadow + 2 * Q_MIB, 0, 64 * Q_KIB);

    assert_reads(bs, shadow, size);
    assert_status(bs, 65536, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    assert_status(bs, Q_MIB, ZERO, 0);
    assert_status(bs, 2 * Q_MIB, ZERO, 0);
    assert_status(bs, 512 * Q_KIB, DATA | BDRV_BLOCK_OFFSET_VALID, 1);
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);
    bdrv_unref(bs);
    bs = q_open(path, 0);
    assert_reads(bs, shadow, size);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* A qcow2 chain with mixed cluster sizes; depths in block status. */
static void test_cow_chain(void)
{
    int64_t size = 2 * Q_MIB;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *base = q_make_raw(dir, "base.raw", Q_MIB, 9);
    g_autofree char *mid = q_make_image(dir, "mid.qcow2", 3 * Q_MIB / 2, 12,
                                        "base.raw", "raw", false);
    g_autofree char *top = q_make_image(dir, "top.qcow2", size, 16,
                                        "mid.qcow2", "qcow2", false);
    g_autofree uint8_t *shadow = g_malloc0(size);
    g_autofree uint8_t *buf = g_malloc(64 * Q_KIB);
    BlockDriverState *bs = q_open(mid, BDRV_O_RDWR);

    test_fill_pattern(shadow, 0, Q_MIB, 9);
    memset(buf, 0x33, 5000);
    g_assert_cmpint(test_pwrite(bs, 10000, 5000, buf), ==, 0);
    memset(shadow + 10000, 0x33, 5000);
    bdrv_unref(bs);

    bs = q_open(top, BDRV_O_RDWR);
    assert_reads(bs, shadow, size);
    memset(buf, 0x44, 100);
    g_assert_cmpint(test_pwrite(bs, 200 * Q_KIB + 5, 100, buf), ==, 0);
    memset(shadow + 200 * Q_KIB + 5, 0x44, 100);
    assert_reads(bs, shadow, size);
    assert_status(bs, 200 * Q_KIB, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    assert_status(bs, 8192, DATA | BDRV_BLOCK_OFFSET_VALID, 1);
    assert_status(bs, 512 * Q_KIB, DATA | BDRV_BLOCK_OFFSET_VALID, 2);
    assert_status(bs, Q_MIB + 4096, HOLE, 1);      /* past the base */
    assert_status(bs, 3 * Q_MIB / 2 + 512, HOLE, 0);  /* past mid */
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

static int write_compressed(BlockDriverState *bs, int64_t off, int64_t len,
                            const void *buf)
{
    Done d = { 0 };

    bdrv_aio_pwrite(bs, off, len, buf, BDRV_REQ_WRITE_COMPRESSED, done_cb,
                    &d);
    test_run_until(&d.done, 60);
    return d.ret;
}

/* Compressed clusters: packing, reads, COW and rewrites over them. */
static void test_compressed(gconstpointer data)
{
    int cb = GPOINTER_TO_INT(data);
    int64_t cs = INT64_C(1) << cb;
    int64_t size = MAX(16 * cs, 2 * Q_MIB) + 1536;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "c.qcow2", size, cb, NULL,
                                         NULL, false);
    g_autofree uint8_t *shadow = g_malloc0(size);
    g_autofree uint8_t *buf = g_malloc(size);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);

    /* Compressible (repeating), random (stays normal), and the end. */
    for (int64_t i = 0; i < size; i++) {
        shadow[i] = (i / 7) % 13;
    }
    test_fill_pattern(shadow + 2 * cs, 0, cs, 5);
    g_assert_cmpint(write_compressed(bs, 0, size, shadow), ==, 0);
    assert_reads(bs, shadow, size);
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);

    /* COW over a compressed cluster, then a full rewrite of another. */
    memset(buf, 0x77, 300);
    g_assert_cmpint(test_pwrite(bs, 3 * cs + 10, 300, buf), ==, 0);
    memset(shadow + 3 * cs + 10, 0x77, 300);
    test_fill_pattern(buf, 0, cs, 8);
    g_assert_cmpint(test_pwrite(bs, 5 * cs, cs, buf), ==, 0);
    memcpy(shadow + 5 * cs, buf, cs);
    /* Compressing over allocated clusters writes them normally. */
    g_assert_cmpint(write_compressed(bs, 5 * cs, cs, shadow + 5 * cs), ==,
                    0);
    g_assert_cmpint(test_pwrite_zeroes(bs, 6 * cs, cs, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    memset(shadow + 6 * cs, 0, cs);
    assert_reads(bs, shadow, size);
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);
    bdrv_unref(bs);
    bs = q_open(path, 0);
    assert_reads(bs, shadow, size);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* 512-byte clusters: one refcount table cluster covers 8 MiB of file. */
static void test_refcount_growth(void)
{
    int64_t size = 16 * Q_MIB;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "g.qcow2", size, 9, NULL,
                                         NULL, true);
    g_autofree uint8_t *shadow = g_malloc0(size);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    Qcow2Stats st0, st1;

    qcow2_get_stats(bs, &st0);
    g_assert_cmpint(st0.reftable_clusters, ==, 1);
    test_fill_pattern(shadow, 0, 12 * Q_MIB, 4);
    for (int64_t off = 0; off < 12 * Q_MIB; off += Q_MIB) {
        g_assert_cmpint(test_pwrite(bs, off, Q_MIB, shadow + off), ==, 0);
    }
    qcow2_get_stats(bs, &st1);
    g_assert_cmpint(st1.reftable_clusters, >, 1);
    g_assert_cmpint(st1.reftable_offset, !=, st0.reftable_offset);
    assert_reads(bs, shadow, size);
    q_assert_clean(bs);
    bdrv_unref(bs);
    bs = q_open(path, 0);
    assert_reads(bs, shadow, size);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* Writes to distinct clusters transfer data at the same time. */
static void test_parallel_distinct(void)
{
    enum { N = 32, LEN = 64 * Q_KIB };
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "p.qcow2", N * LEN, 16, NULL,
                                         NULL, false);
    g_autofree uint8_t *shadow = g_malloc(N * LEN);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    Done d[N] = { 0 };
    Qcow2Stats st;

    test_fill_pattern(shadow, 0, N * LEN, 2);
    qcow2_set_debug_delay(bs, 20000);
    for (int i = 0; i < N; i++) {
        bdrv_aio_pwrite(bs, (int64_t)i * LEN, LEN, shadow + i * LEN, 0,
                        done_cb, &d[i]);
    }
    for (int i = 0; i < N; i++) {
        test_run_until(&d[i].done, 60);
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    qcow2_get_stats(bs, &st);
    g_test_message("max data transfers at once: %d",
                   st.max_data_io_in_flight);
    g_assert_cmpint(st.max_data_io_in_flight, >, 1);
    qcow2_set_debug_delay(bs, 0);
    assert_reads(bs, shadow, N * LEN);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* Writes racing to allocate one cluster: each keeps its data. */
static void test_parallel_same_cluster(void)
{
    enum { N = 16, PIECE = 4 * Q_KIB };
    int64_t size = 4 * 64 * Q_KIB;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *base = q_make_raw(dir, "b.raw", size, 6);
    g_autofree char *path = q_make_image(dir, "s.qcow2", size, 16, "b.raw",
                                         "raw", false);
    g_autofree uint8_t *shadow = g_malloc(size);
    g_autofree uint8_t *buf = g_malloc(N * PIECE);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    Done d[N] = { 0 };

    test_fill_pattern(shadow, 0, size, 6);
    test_fill_pattern(buf, 0, N * PIECE, 12);
    qcow2_set_debug_delay(bs, 5000);
    for (int i = 0; i < N; i++) {
        /* Two clusters, pieces interleaved between them. */
        int64_t off = (i % 2) * 64 * Q_KIB + (i / 2) * PIECE + 100;

        bdrv_aio_pwrite(bs, off, PIECE, buf + i * PIECE, 0, done_cb, &d[i]);
        memcpy(shadow + off, buf + i * PIECE, PIECE);
    }
    for (int i = 0; i < N; i++) {
        test_run_until(&d[i].done, 60);
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    qcow2_set_debug_delay(bs, 0);
    assert_reads(bs, shadow, size);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* Zero clusters: ZERO_ALLOC keeps its host cluster, ZERO_PLAIN frees. */
static void test_zero_clusters(void)
{
    int64_t cs = 64 * Q_KIB, size = 16 * cs;
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "z.qcow2", size, 16, NULL,
                                         NULL, false);
    g_autofree uint8_t *shadow = g_malloc(size);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);

    test_fill_pattern(shadow, 0, size, 3);
    g_assert_cmpint(test_pwrite(bs, 0, size, shadow), ==, 0);
    g_assert_cmpint(test_pwrite_zeroes(bs, cs, cs, 0), ==, 0);
    g_assert_cmpint(test_pwrite_zeroes(bs, 2 * cs, cs, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    g_assert_cmpint(test_pwrite_zeroes(bs, 3 * cs + 512, 1024, 0), ==, 0);
    memset(shadow + cs, 0, 2 * cs);
    memset(shadow + 3 * cs + 512, 0, 1024);
    assert_status(bs, cs, ZERO | BDRV_BLOCK_OFFSET_VALID, 0);
    assert_status(bs, 2 * cs, ZERO, 0);
    assert_status(bs, 3 * cs, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    /* A partial write into the ZERO_ALLOC cluster: the rest stays 0. */
    memset(shadow + cs + 1000, 0x99, 10);
    g_assert_cmpint(test_pwrite(bs, cs + 1000, 10, shadow + cs + 1000), ==,
                    0);
    assert_status(bs, cs, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    assert_reads(bs, shadow, size);
    /* Zeroing unallocated clusters of an image without backing: no-op. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 2 * cs, cs, 0), ==, 0);
    /* NO_FALLBACK on a partial data cluster: ENOTSUP. */
    {
        Done d = { 0 };

        bdrv_aio_pwrite_zeroes(bs, 4 * cs + 10, 20, BDRV_REQ_NO_FALLBACK,
                               done_cb, &d);
        test_run_until(&d.done, 30);
        g_assert_cmpint(d.ret, ==, -ENOTSUP);
    }
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

static void create_fails(const char *dir, GHashTable *opts, const char *msg)
{
    g_autofree char *path = g_build_filename(dir, "bad.qcow2", NULL);
    g_autoptr(GError) err = NULL;

    g_assert_false(bdrv_create("qcow2", path, Q_MIB, opts, &err));
    g_assert_nonnull(err);
    if (!strstr(err->message, msg)) {
        g_test_message("got \"%s\", expected \"%s\"", err->message, msg);
        g_test_fail();
    }
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
}

static GHashTable *opts_new(const char *k1, const char *v1, const char *k2,
                            const char *v2)
{
    GHashTable *h = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                          g_free);

    g_hash_table_insert(h, g_strdup(k1), g_strdup(v1));
    if (k2) {
        g_hash_table_insert(h, g_strdup(k2), g_strdup(v2));
    }
    return h;
}

static void test_create_options(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "pre.qcow2", NULL);
    g_autofree uint8_t *buf = g_malloc0(Q_MIB);
    g_autoptr(GHashTable) o = NULL;
    BlockDriverState *bs;
    const char *bad[][3] = {
        { "cluster_size", "1000", "power of 2" },
        { "cluster_size", "256", "power of 2" },
        { "cluster_size", "4M", "power of 2" },
        { "preallocation", "full", "off and metadata" },
        { "backing_file", "x.raw", "without backing format" },
        { "backing_fmt", "raw", "needs backing_file" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GHashTable) h = opts_new(bad[i][0], bad[i][1], NULL, NULL);

        create_fails(dir, h, bad[i][2]);
    }
    {
        g_autoptr(GHashTable) h = opts_new("backing_file", "nope.raw",
                                           "backing_fmt", "raw");

        create_fails(dir, h, "Could not open backing file");
    }
    {
        g_autoptr(GHashTable) h = opts_new("backing_file", "nope.raw",
                                           "backing_fmt", "vmdk");

        create_fails(dir, h, "raw or qcow2");
    }

    /* preallocation=metadata: all data, reads zero, writes in place. */
    o = opts_new("preallocation", "metadata", "cluster_size", "4k");
    g_assert_true(bdrv_create("qcow2", path, 3 * Q_MIB + 100, o, NULL));
    bs = q_open(path, BDRV_O_RDWR);
    g_assert_cmpint(bdrv_getlength(bs), ==, 3 * Q_MIB + 512);
    assert_status(bs, 0, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    assert_status(bs, 3 * Q_MIB, DATA | BDRV_BLOCK_OFFSET_VALID, 0);
    g_assert_cmpint(test_pread(bs, 0, Q_MIB, buf), ==, 0);
    g_assert_true(buffer_is_zero(buf, Q_MIB));
    q_assert_clean(bs);
    memset(buf, 0x42, 10000);
    g_assert_cmpint(test_pwrite(bs, 5000, 10000, buf), ==, 0);
    g_assert_cmpint(test_pread(bs, 0, 20000, buf), ==, 0);
    g_assert_true(buffer_is_zero(buf, 5000));
    g_assert_cmpint(buf[5000], ==, 0x42);
    g_assert_cmpint(buf[14999], ==, 0x42);
    g_assert_true(buffer_is_zero(buf + 15000, 5000));
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/*
 * qcow2_deflate() output is what QEMU inflates: raw deflate whose matches
 * reach back at most 4 KiB.  The cluster repeats a random 3000-byte block
 * every 5000 bytes, with compressible text in between: a deflate with a
 * larger window would match the repeats, and a streaming inflate with
 * QEMU's 4 KiB window would then fail ("invalid distance too far back").
 */
static void test_deflate_window(gconstpointer data)
{
    int64_t cs = INT64_C(1) << GPOINTER_TO_INT(data);
    g_autofree uint8_t *in = g_malloc(cs);
    g_autofree uint8_t *out = g_malloc(cs);
    g_autofree uint8_t *back = g_malloc(cs);
    g_autoptr(GRand) rand = g_rand_new_with_seed(cs);
    uint8_t block[3000];
    z_stream z = { 0 };
    int64_t clen;
    int ret;

    g_test_message("deflate backend: %s", qcow2_deflate_backend());
    for (size_t i = 0; i < sizeof(block); i++) {
        block[i] = g_rand_int(rand);
    }
    for (int64_t i = 0; i < cs; i++) {
        int64_t pos = i % 5000;

        in[i] = pos < 3000 ? block[pos] : "lorem ipsum dolor "[pos % 18];
    }
    clen = qcow2_deflate(in, cs, out);
    g_assert_cmpint(clen, >, 0);
    g_assert_cmpint(clen, <, cs);
    /* 512 bytes out per call: matches into earlier calls' output must lie
     * in the 4 KiB window (one call into the whole buffer would let zlib
     * reach back into that buffer instead, and see nothing wrong). */
    g_assert_cmpint(inflateInit2(&z, -QCOW2_DEFLATE_WINDOW_BITS), ==, Z_OK);
    z.next_in = out;
    z.avail_in = clen;
    z.next_out = back;
    do {
        z.avail_out = MIN(512, back + cs - z.next_out);
        ret = inflate(&z, Z_NO_FLUSH);
    } while (ret == Z_OK && z.next_out < back + cs);
    g_assert_cmpint(ret, ==, Z_STREAM_END);
    g_assert_true(z.next_out == back + cs);
    inflateEnd(&z);
    g_assert_true(memcmp(in, back, cs) == 0);

    /* Random data does not shrink: 0, and nothing else is promised. */
    for (int64_t i = 0; i < cs; i++) {
        in[i] = g_rand_int(rand);
    }
    g_assert_cmpint(qcow2_deflate(in, cs, out), ==, 0);
}

int main(int argc, char **argv)
{
    static const int sizes[] = { 9, 12, 16, 21 };

    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        g_autofree char *rw = g_strdup_printf("/qcow2/rw/random-%d",
                                              1 << sizes[i]);
        g_autofree char *c = g_strdup_printf("/qcow2/compressed/%d",
                                             1 << sizes[i]);

        g_test_add_data_func(rw, GINT_TO_POINTER(sizes[i]), test_random_rw);
        g_test_add_data_func(c, GINT_TO_POINTER(sizes[i]), test_compressed);
    }
    for (int bits = 13; bits <= 21; bits += 4) {
        g_autofree char *d = g_strdup_printf("/qcow2/deflate/window-%d",
                                             1 << bits);

        g_test_add_data_func(d, GINT_TO_POINTER(bits), test_deflate_window);
    }
    g_test_add_func("/qcow2/cow/raw-backing", test_cow_raw);
    g_test_add_func("/qcow2/cow/chain", test_cow_chain);
    g_test_add_func("/qcow2/refcount/growth-512", test_refcount_growth);
    g_test_add_func("/qcow2/parallel/distinct-clusters",
                    test_parallel_distinct);
    g_test_add_func("/qcow2/parallel/same-cluster",
                    test_parallel_same_cluster);
    g_test_add_func("/qcow2/zero/clusters", test_zero_clusters);
    g_test_add_func("/qcow2/create/options", test_create_options);
    return g_test_run();
}
