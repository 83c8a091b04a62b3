/*
 * Raw driver views (bdrv_can_map / bdrv_aio_map / bdrv_unmap, raw-map.c):
 * only buffered regular files on tmpfs map; a view holds the same bytes as
 * a read, at any offset and length; ranges past the image or past a file
 * that shrank fail with -ENOTSUP; the open option views=auto|on|off decides
 * (auto: the probe's answer; a bad value is refused); and the mirror job
 * copying from views (or falling back to reads) makes a byte-identical
 * target.  Every node states its views= option: nothing is inherited from
 * an earlier case.  Files live
 * under /dev/shm (the tests skip without it), or in a g_dir_make_tmp()
 * directory for the "not tmpfs" case.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/mirror/mirror.h"
#include "block/raw-int.h"
#include "tests/qtest-like/raw-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* Open @path as raw with the node options @kv ("views=on,..."). */
static BlockDriverState *open_raw_opts(const char *path, int flags,
                                       const char *kv)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal,
                                                       g_free, g_free);

    g_assert_true(parse_key_values(NULL, kv, opts, NULL));
    return open_raw(path, flags, opts);
}

/* Write @bytes of pattern @seed at @offset of @path (through a new fd). */
static void write_pattern(const char *path, int64_t offset, int64_t bytes,
                          unsigned seed)
{
    g_autofree uint8_t *buf = g_malloc(bytes);
    int fd = open(path, O_WRONLY);

    g_assert_cmpint(fd, >=, 0);
    fill_pattern(buf, bytes, seed);
    g_assert_cmpint(pwrite(fd, buf, bytes, offset), ==, bytes);
    close(fd);
}

static void truncate_file(const char *path, int64_t size)
{
    int fd = open(path, O_WRONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
}

static uint8_t *read_file(const char *path, int64_t size)
{
    g_autofree gchar *data = NULL;
    gsize len;

    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    g_assert_cmpuint(len, ==, size);
    return (uint8_t *)g_steal_pointer(&data);
}

static int io_read(BlockDriverState *bs, int64_t offset, int64_t bytes,
                   void *buf)
{
    Completion c = { 0 };

    bdrv_aio_pread(bs, offset, bytes, buf, 0, completion_cb, &c);
    return wait_fresh(&c);
}

/* Map a range: the request is pending (in flight) after the call. */
static int map_range(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     BdrvMapping *map)
{
    Completion c = { 0 };
    int ret;

    bdrv_aio_map(bs, offset, bytes, map, completion_cb, &c);
    g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 1);
    ret = wait_fresh(&c);
    g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 0);
    return ret;
}

static bool on_tmpfs(const char *dir)
{
    struct statfs sfs;

    g_assert_cmpint(statfs(dir, &sfs), ==, 0);
    return sfs.f_type == TMPFS_MAGIC;
}

/* ---- Views hold what reads return ---- */

#define ODD_SIZE (1 * MIB + 1000)

static void test_map_ranges(Fixture *f, gconstpointer data)
{
    static const struct { int64_t offset, bytes; } ranges[] = {
        { 0, 4096 }, { 4096, 64 * KIB }, { 0, ODD_SIZE },
        { 1, 1 }, { 4095, 2 }, { 12345, 100000 }, { 300 * KIB + 7, 4096 },
        { ODD_SIZE - 1000, 1000 },          /* ends at the unaligned end */
        { ODD_SIZE - 5000, 5000 }, { ODD_SIZE - 1, 1 },
        { 512 * KIB - 17, 512 * KIB + 17 + 1000 },
    };
    g_autofree char *path = NULL;
    g_autofree uint8_t *buf = g_malloc(ODD_SIZE);
    BlockDriverState *bs;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", ODD_SIZE);
    write_pattern(path, 0, 700 * KIB, 3);   /* the rest is a hole */
    write_pattern(path, ODD_SIZE - 3000, 3000, 5);
    bs = open_raw_opts(path, 0, "views=on");
    g_assert_true(bdrv_can_map(bs));
    g_assert_cmpint(bdrv_getlength(bs), ==, ODD_SIZE);

    for (size_t i = 0; i < G_N_ELEMENTS(ranges); i++) {
        int64_t off = ranges[i].offset, bytes = ranges[i].bytes;
        BdrvMapping map;

        memset(&map, 0xa5, sizeof(map));
        g_assert_cmpint(map_range(bs, off, bytes, &map), ==, 0);
        g_assert_nonnull(map.data);
        g_assert_nonnull(map.base);
        g_assert_cmpuint(map.length, >=, bytes);
        g_assert_true(map.data >= (const uint8_t *)map.base);
        g_assert_true(map.data + bytes <=
                      (const uint8_t *)map.base + map.length);
        memset(buf, 0x5a, bytes);
        g_assert_cmpint(io_read(bs, off, bytes, buf), ==, 0);
        g_assert_cmpmem(map.data, bytes, buf, bytes);
        bdrv_unmap(bs, &map);
        g_assert_null(map.data);
        g_assert_null(map.base);
        g_assert_cmpuint(map.length, ==, 0);
    }

    /* Several views at once, released in another order. */
    {
        BdrvMapping m[3];
        Completion c[3] = { { 0 } };

        for (int i = 0; i < 3; i++) {
            bdrv_aio_map(bs, i * 300 * KIB + 11, 200 * KIB, &m[i],
                         completion_cb, &c[i]);
        }
        g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 3);
        for (int i = 0; i < 3; i++) {
            g_assert_false(c[i].done);
        }
        for (int i = 0; i < 3; i++) {
            g_assert_cmpint(completion_wait(&c[i]), ==, 0);
        }
        g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 0);
        for (int i = 2; i >= 0; i--) {
            g_assert_cmpint(io_read(bs, i * 300 * KIB + 11, 200 * KIB, buf),
                            ==, 0);
            g_assert_cmpmem(m[i].data, 200 * KIB, buf, 200 * KIB);
            bdrv_unmap(bs, &m[i]);
        }
    }
    bdrv_unref(bs);
}

/* ---- -ENOTSUP past the image and past a file that shrank ---- */

static void test_map_past_end(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    g_autofree uint8_t *buf = g_malloc(64 * KIB);
    BlockDriverState *bs;
    BdrvMapping map;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", ODD_SIZE);
    write_pattern(path, 0, ODD_SIZE, 9);
    bs = open_raw_opts(path, 0, "views=on");
    g_assert_true(bdrv_can_map(bs));

    /* Past the image: refused before the driver, still asynchronously. */
    g_assert_cmpint(map_range(bs, ODD_SIZE - 1000, 1001, &map), ==,
                    -ENOTSUP);
    g_assert_null(map.base);
    g_assert_cmpint(map_range(bs, ODD_SIZE, 1, &map), ==, -ENOTSUP);
    g_assert_cmpint(map_range(bs, 2 * MIB, 4096, &map), ==, -ENOTSUP);
    bdrv_unmap(bs, &map);               /* a failed view: a no-op */

    /* The file shrinks under the open node (its length stays). */
    truncate_file(path, 256 * KIB + 100);
    g_assert_cmpint(bdrv_getlength(bs), ==, ODD_SIZE);
    g_assert_cmpint(map_range(bs, 256 * KIB + 100, 4096, &map), ==,
                    -ENOTSUP);
    g_assert_null(map.data);
    g_assert_cmpint(map_range(bs, 200 * KIB, 64 * KIB, &map), ==,
                    -ENOTSUP);          /* straddles the new end */
    g_assert_cmpint(map_range(bs, 512 * KIB, 4096, &map), ==, -ENOTSUP);
    g_assert_cmpint(map_range(bs, ODD_SIZE - 1000, 1000, &map), ==,
                    -ENOTSUP);
    /* What is left still maps, and a read past the new end gives zeros. */
    g_assert_cmpint(map_range(bs, 192 * KIB, 64 * KIB + 100, &map), ==, 0);
    g_assert_cmpint(io_read(bs, 192 * KIB, 64 * KIB, buf), ==, 0);
    g_assert_cmpmem(map.data, 64 * KIB, buf, 64 * KIB);
    bdrv_unmap(bs, &map);
    g_assert_cmpint(io_read(bs, 512 * KIB, 64 * KIB, buf), ==, 0);
    g_assert_true(is_zero(buf, 64 * KIB));
    bdrv_unref(bs);
}

/* ---- Where views are off ---- */

static void expect_no_map(BlockDriverState *bs)
{
    BdrvMapping map;

    g_assert_false(bdrv_can_map(bs));
    g_assert_cmpint(map_range(bs, 0, 4096, &map), ==, -ENOTSUP);
    g_assert_null(map.data);
    g_assert_null(map.base);
}

/* views=off: no views; =on: views, whatever the rule says; anything else is
 * refused, naming the value. */
static void test_map_option(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    g_autoptr(GHashTable) bad = g_hash_table_new(g_str_hash, g_str_equal);
    BlockDriverState *bs;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", 64 * KIB);
    bs = open_raw_opts(path, 0, "views=off");
    expect_no_map(bs);
    bdrv_unref(bs);
    bs = open_raw_opts(path, 0, "views=on");
    g_assert_true(bdrv_can_map(bs));
    bdrv_unref(bs);
    g_hash_table_insert(bad, "views", "yes");
    open_fails(path, 0, bad, "views 'yes': expected auto, on or off");
}

/* auto (the default): views where the fixed rule (raw_views_pay()) says
 * they pay, which today is nowhere: a node opened by default, or with
 * views=auto, reads. */
static void test_map_auto(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    BlockDriverState *bs;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", 64 * KIB);
    g_assert_false(raw_views_pay());
    for (int i = 0; i < 2; i++) {
        bs = i ? open_raw_opts(path, 0, "views=auto")
               : open_raw(path, 0, NULL);
        expect_no_map(bs);
        bdrv_unref(bs);
    }
}

static void test_map_off_nocache(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    GError *err = NULL;
    BlockDriverState *bs;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", 64 * KIB);
    bs = bdrv_open(path, "raw", BDRV_O_NOCACHE, NULL, &err);
    if (!bs) {
        g_assert_nonnull(strstr(err->message, "cache=none is not supported"));
        g_test_skip(err->message);
        g_error_free(err);
        return;
    }
    expect_no_map(bs);
    bdrv_unref(bs);
}

static void test_map_off_not_tmpfs(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    BlockDriverState *bs;

    if (on_tmpfs(f->dir)) {
        g_test_skip("the scratch directory is on tmpfs");
        return;
    }
    path = make_file(f, "img", 64 * KIB);
    bs = open_raw(path, 0, NULL);
    expect_no_map(bs);
    bdrv_unref(bs);
}

/* ---- The mirror job over views ---- */

#define SRC_SIZE (16 * MIB)

/* A 16 MiB source: pattern runs at odd places, holes in between. */
static char *make_source(Fixture *f)
{
    static const struct { int64_t offset, bytes; } runs[] = {
        { 0, 1 * MIB + 123 }, { 2 * MIB - 4097, 8193 },
        { 3 * MIB, 3 * MIB + 512 }, { 9 * MIB + 1, 2 * MIB },
        { 13 * MIB + 4096, 100 * KIB }, { SRC_SIZE - 70 * KIB, 70 * KIB },
    };
    char *path = make_file(f, "src", SRC_SIZE);

    for (size_t i = 0; i < G_N_ELEMENTS(runs); i++) {
        write_pattern(path, runs[i].offset, runs[i].bytes, i + 1);
    }
    return path;
}

/* Mirror @src_path onto a new target of the same size (over garbage);
 * the source has views when @expect_map. */
static void run_mirror(Fixture *f, const char *src_path, int64_t trunc_to,
                       bool expect_map)
{
    g_autofree char *dst_path = make_file(f, "dst", SRC_SIZE);
    g_autofree uint8_t *want = NULL;
    g_autofree uint8_t *got = NULL;
    g_autoptr(GError) err = NULL;
    BlockDriverState *src, *dst;
    TestJobEvents ev;
    MirrorParams p;
    Job *job;

    write_pattern(dst_path, 0, SRC_SIZE, 77);
    /* Both ends are on tmpfs: without copy-offload=off, fused copies
     * (test-io-copy.c) would take the place of views. */
    src = open_raw_opts(src_path, 0, expect_map
                        ? "views=on,copy-offload=off"
                        : "views=off,copy-offload=off");
    dst = open_raw_opts(dst_path, BDRV_O_RDWR, "copy-offload=off");
    g_assert_false(bdrv_can_copy(src, dst));
    g_assert_cmpint(bdrv_can_map(src), ==, expect_map);
    if (trunc_to >= 0) {
        truncate_file(src_path, trunc_to);   /* the node keeps 16 MiB */
    }
    mirror_params_init(&p);
    p.chunk_size = 256 * KIB;
    p.buf_size = 2 * MIB;                   /* 8 slots */
    p.max_in_flight = 16;
    p.auto_complete = true;
    job = mirror_job_new("job0", src, dst, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&ev, job);
    job_start(job);
    test_run_until(&ev.concluded, 120);
    g_assert_cmpint(job->ret, ==, 0);
    job_unref(job);
    test_job_events_clear(&ev);
    g_assert_cmpuint(bdrv_get_in_flight(src), ==, 0);
    bdrv_unref(src);
    bdrv_unref(dst);

    got = read_file(dst_path, SRC_SIZE);
    want = g_malloc0(SRC_SIZE);
    if (trunc_to >= 0) {
        g_autofree uint8_t *part = read_file(src_path, trunc_to);

        memcpy(want, part, trunc_to);
    } else {
        g_free(want);
        want = read_file(src_path, SRC_SIZE);
    }
    g_assert_cmpmem(got, SRC_SIZE, want, SRC_SIZE);
}

static void test_mirror_views(Fixture *f, gconstpointer data)
{
    g_autofree char *src = NULL;

    if (fixture_missing(f)) {
        return;
    }
    src = make_source(f);
    run_mirror(f, src, -1, true);
}

static void test_mirror_views_off(Fixture *f, gconstpointer data)
{
    g_autofree char *src = NULL;

    if (fixture_missing(f)) {
        return;
    }
    src = make_source(f);
    run_mirror(f, src, -1, false);
}

/* The file shrinks after open: views past its end fall back to reads,
 * which see zeros past EOF. */
static void test_mirror_views_fallback(Fixture *f, gconstpointer data)
{
    g_autofree char *src = NULL;

    if (fixture_missing(f)) {
        return;
    }
    src = make_source(f);
    run_mirror(f, src, 5 * MIB + 1000, true);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

#define ADD(path, setup, fn) \
    g_test_add(path, Fixture, NULL, setup, fn, fixture_teardown)

    ADD("/raw/map/ranges", fixture_setup_shm, test_map_ranges);
    ADD("/raw/map/past-end", fixture_setup_shm, test_map_past_end);
    ADD("/raw/map/auto", fixture_setup_shm, test_map_auto);
    ADD("/raw/map/option", fixture_setup_shm, test_map_option);
    ADD("/raw/map/off/nocache", fixture_setup_shm, test_map_off_nocache);
    ADD("/raw/map/off/not-tmpfs", fixture_setup, test_map_off_not_tmpfs);
    ADD("/raw/map/mirror/views", fixture_setup_shm, test_mirror_views);
    ADD("/raw/map/mirror/views-off", fixture_setup_shm,
        test_mirror_views_off);
    ADD("/raw/map/mirror/fallback", fixture_setup_shm,
        test_mirror_views_fallback);
#undef ADD

    return g_test_run();
}
