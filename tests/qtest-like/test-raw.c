/*
 * Raw driver tests: the bdrv_raw table called directly on nodes from
 * bdrv_open(), so that each check sees exactly what the driver does (io.c
 * would pad, split and fall back): open, read and write, write-zeroes and
 * discard, block status, create.  Scratch files live in a g_dir_make_tmp()
 * directory, or under /dev/shm for the "/shm" variants (tmpfs: holes
 * behave differently).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block/block-int.h"
#include "tests/qtest-like/raw-fixture.h"

/* ---- Open ---- */

static void test_open_errors(Fixture *f, gconstpointer data)
{
    g_autofree char *missing = g_build_filename(f->dir, "nope", NULL);
    g_autofree char *subdir = g_build_filename(f->dir, "subdir", NULL);
    g_autofree char *fifo = g_build_filename(f->dir, "fifo", NULL);
    g_autofree char *msg = g_strdup_printf("Could not open '%s': %s", missing,
                                           g_strerror(ENOENT));
    g_autofree char *dirmsg = g_strdup_printf("'%s' is a directory", subdir);

    open_fails(missing, 0, NULL, msg);
    g_assert_cmpint(g_mkdir(subdir, 0755), ==, 0);
    open_fails(subdir, 0, NULL, dirmsg);
    open_fails(subdir, BDRV_O_RDWR, NULL, dirmsg);
    /* A FIFO is refused, and opening it must not block. */
    g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
    open_fails(fifo, 0, NULL, "not a regular file or block device");
}

static void test_open_options(Fixture *f, gconstpointer data)
{
    g_autofree char *path = make_file(f, "img", 64 * KIB);
    const char *bad[][2] = {
        { "cache", "bogus" }, { "align", "3" }, { "align", "0" },
        { "align", "4k" }, { "align", "1073741824" },
    };
    g_autoptr(GHashTable) opts = NULL;
    BlockDriverState *bs;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GHashTable) o = options_new(bad[i][0], bad[i][1]);
        g_autofree char *quoted = g_strdup_printf("'%s'", bad[i][1]);

        open_fails(path, 0, o, quoted);
    }

    /* Consumed options are removed: bdrv_open() refuses leftovers. */
    opts = options_new("align", "4096");
    g_hash_table_insert(opts, g_strdup("cache"), g_strdup("writeback"));
    bs = open_raw(path, 0, opts);
    g_assert_cmpuint(bdrv_get_request_alignment(bs), ==, 4096);
    g_assert_cmpuint(bdrv_get_mem_alignment(bs), ==, 1);
    g_assert_cmpint(bdrv_getlength(bs), ==, 64 * KIB);
    g_assert_false(bdrv_is_writable(bs));
    g_assert_cmpint(bdrv_raw.probe((const uint8_t *)"", 0, path), ==, 1);
    bdrv_unref(bs);
}

/* ---- Data path ---- */

static void test_rw_roundtrip(Fixture *f, gconstpointer data)
{
    g_autofree char *path = make_file(f, "img", 1 * MIB);
    g_autofree uint8_t *wbuf = g_malloc(256 * KIB);
    g_autofree uint8_t *rbuf = g_malloc(256 * KIB);
    const int64_t offsets[] = { 0, 4097, 300 * KIB, 1 * MIB - 256 * KIB };
    BlockDriverState *bs = open_raw(path, BDRV_O_RDWR, NULL);
    int fd;

    for (size_t i = 0; i < G_N_ELEMENTS(offsets); i++) {
        fill_pattern(wbuf, 256 * KIB, i);
        g_assert_cmpint(drv_write(bs, offsets[i], 256 * KIB, wbuf,
                                  i == 1 ? BDRV_REQ_FUA : 0), ==, 0);
        memset(rbuf, 0xaa, 256 * KIB);
        g_assert_cmpint(drv_read(bs, offsets[i], 256 * KIB, rbuf), ==, 0);
        g_assert_cmpmem(rbuf, 256 * KIB, wbuf, 256 * KIB);
    }
    g_assert_cmpint(drv_flush(bs), ==, 0);

    /* The file itself holds the last write. */
    fd = open(path, O_RDONLY);
    g_assert_cmpint(pread(fd, rbuf, 256 * KIB, 1 * MIB - 256 * KIB), ==,
                    256 * KIB);
    close(fd);
    g_assert_cmpmem(rbuf, 256 * KIB, wbuf, 256 * KIB);
    bdrv_unref(bs);
}

/* Many requests in flight at once on the thread pool. */
static void test_rw_parallel(Fixture *f, gconstpointer data)
{
    enum { N = 64, CHUNK = 64 * KIB };
    g_autofree char *path = make_file(f, "img", N * CHUNK);
    g_autofree uint8_t *wbuf = g_malloc(N * CHUNK);
    g_autofree uint8_t *rbuf = g_malloc0(N * CHUNK);
    Completion c[N] = { 0 };
    BlockDriverState *bs = open_raw(path, BDRV_O_RDWR, NULL);

    fill_pattern(wbuf, N * CHUNK, 3);
    for (int i = 0; i < N; i++) {
        bdrv_drv_submit(bs, BDRV_OP_WRITE, (int64_t)i * CHUNK, CHUNK,
                        wbuf + i * CHUNK, 0, NULL, completion_cb, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        g_assert_false(c[i].done);
    }
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(completion_wait(&c[i]), ==, 0);
    }
    memset(c, 0, sizeof(c));
    for (int i = N - 1; i >= 0; i--) {
        bdrv_drv_submit(bs, BDRV_OP_READ, (int64_t)i * CHUNK, CHUNK,
                        rbuf + i * CHUNK, 0, NULL, completion_cb, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(completion_wait(&c[i]), ==, 0);
    }
    g_assert_cmpmem(rbuf, N * CHUNK, wbuf, N * CHUNK);
    bdrv_unref(bs);
}

/* A read that reaches the end of the file fills the rest with zeroes. */
static void test_rw_eof(Fixture *f, gconstpointer data)
{
    g_autofree char *path = make_file(f, "img", 8 * KIB);
    g_autofree uint8_t *wbuf = g_malloc(8 * KIB);
    g_autofree uint8_t *rbuf = g_malloc(8 * KIB);
    BlockDriverState *bs = open_raw(path, BDRV_O_RDWR, NULL);

    fill_pattern(wbuf, 8 * KIB, 1);
    g_assert_cmpint(drv_write(bs, 0, 8 * KIB, wbuf, 0), ==, 0);

    /* The file shrinks behind the node's back. */
    g_assert_cmpint(truncate(path, 1000), ==, 0);
    memset(rbuf, 0xaa, 8 * KIB);
    g_assert_cmpint(drv_read(bs, 0, 8 * KIB, rbuf), ==, 0);
    g_assert_cmpmem(rbuf, 1000, wbuf, 1000);
    g_assert_true(is_zero(rbuf + 1000, 8 * KIB - 1000));
    bdrv_unref(bs);
}

/* Write zeroes, discard: data outside the range stays. */
static void test_zeroes(Fixture *f, gconstpointer data)
{
    const int64_t size = 1 * MIB, off = 64 * KIB, len = 256 * KIB;
    g_autofree char *path = NULL;
    g_autofree uint8_t *wbuf = g_malloc(size);
    g_autofree uint8_t *rbuf = g_malloc(size);
    const BdrvRequestFlags modes[] = {
        0, BDRV_REQ_NO_FALLBACK, BDRV_REQ_MAY_UNMAP,
        BDRV_REQ_MAY_UNMAP | BDRV_REQ_NO_FALLBACK,
    };
    BlockDriverState *bs;
    int fd;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", size);
    bs = open_raw(path, BDRV_O_RDWR, NULL);
    fill_pattern(wbuf, size, 5);
    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
        int ret;

        g_assert_cmpint(drv_write(bs, 0, size, wbuf, 0), ==, 0);
        ret = drv_zeroes(bs, off, len, modes[i]);
        if (ret == -ENOTSUP) {
            /* Allowed without a fast method (tmpfs has no ZERO_RANGE);
             * a second try must give the same answer. */
            g_assert_false(modes[i] & BDRV_REQ_MAY_UNMAP);
            g_assert_cmpint(drv_zeroes(bs, off, len, modes[i]), ==, -ENOTSUP);
            continue;
        }
        g_assert_cmpint(ret, ==, 0);
        g_assert_cmpint(drv_read(bs, 0, size, rbuf), ==, 0);
        g_assert_cmpmem(rbuf, off, wbuf, off);
        g_assert_true(is_zero(rbuf + off, len));
        g_assert_cmpmem(rbuf + off + len, size - off - len,
                        wbuf + off + len, size - off - len);
    }

    /* With MAY_UNMAP the range became a hole. */
    fd = open(path, O_RDONLY);
    g_assert_cmpint(lseek(fd, off, SEEK_DATA), >=, off + len);
    close(fd);

    /* Discard punches a hole in a file as well. */
    g_assert_cmpint(drv_write(bs, 0, size, wbuf, 0), ==, 0);
    g_assert_cmpint(drv_discard(bs, off, len), ==, 0);
    g_assert_cmpint(drv_read(bs, 0, size, rbuf), ==, 0);
    g_assert_true(is_zero(rbuf + off, len));
    g_assert_cmpmem(rbuf + off + len, size - off - len,
                    wbuf + off + len, size - off - len);
    bdrv_unref(bs);
}

/* ---- Block status ---- */

static void test_status(Fixture *f, gconstpointer data)
{
    const int64_t size = 4 * MIB;
    const int64_t written[][2] = {
        { 0, 4 * KIB }, { 1 * MIB, 8 * KIB }, { 1 * MIB + 64 * KIB, 4 * KIB },
        { 3 * MIB, 4 * KIB },
    };
    g_autofree char *path = NULL;
    g_autofree char *hole_path = NULL;
    g_autofree uint8_t *buf = g_malloc(8 * KIB);
    BlockDriverState *bs, *hole_bs;
    GArray *ext;

    if (fixture_missing(f)) {
        return;
    }
    path = make_file(f, "img", size);
    bs = open_raw(path, BDRV_O_RDWR, NULL);
    fill_pattern(buf, 8 * KIB, 2);
    for (size_t i = 0; i < G_N_ELEMENTS(written); i++) {
        g_assert_cmpint(drv_write(bs, written[i][0], written[i][1], buf, 0),
                        ==, 0);
    }

    /* The whole image: written bytes are data, zero extents hold none. */
    ext = drv_status(bs, 0, size, size);
    g_assert_cmpint(extents_end(ext), ==, size);
    for (size_t i = 0; i < G_N_ELEMENTS(written); i++) {
        g_assert_true(status_at(ext, written[i][0]) & BDRV_BLOCK_DATA);
        g_assert_true(status_at(ext, written[i][0] + written[i][1] - 1) &
                      BDRV_BLOCK_DATA);
    }
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        for (size_t j = 0; e->flags & BDRV_BLOCK_ZERO &&
                           j < G_N_ELEMENTS(written); j++) {
            g_assert(e->offset + e->length <= written[j][0] ||
                     e->offset >= written[j][0] + written[j][1]);
        }
    }
    g_assert_true(status_at(ext, 512 * KIB) & BDRV_BLOCK_ZERO);
    g_assert_true(status_at(ext, 2 * MIB) & BDRV_BLOCK_ZERO);
    g_array_unref(ext);

    /* Unaligned start and length. */
    ext = drv_status(bs, 1000, 1 * MIB + 5, 1000 + 1 * MIB + 5);
    g_assert_true(status_at(ext, 1000) & BDRV_BLOCK_DATA);
    g_assert_true(status_at(ext, 8 * KIB) & BDRV_BLOCK_ZERO);
    g_array_unref(ext);

    /* After the last data: one hole up to the end of the file. */
    ext = drv_status(bs, 3 * MIB + 8 * KIB, 1 * MIB, size);
    g_assert_cmpuint(ext->len, ==, 1);
    g_assert_cmpint(extents_end(ext), ==, size);
    g_assert_true(status_at(ext, size - 1) & BDRV_BLOCK_ZERO);
    g_array_unref(ext);

    /* A request past the end of the file is clamped to it. */
    ext = drv_status(bs, size - 100, 4 * KIB, size);
    g_array_unref(ext);

    /* A file that is one hole. */
    hole_path = make_file(f, "hole", 3 * MIB + 5);
    hole_bs = open_raw(hole_path, 0, NULL);
    ext = drv_status(hole_bs, 0, 3 * MIB + 5, 3 * MIB + 5);
    g_assert_cmpuint(ext->len, ==, 1);
    g_assert_cmpint(extents_end(ext), ==, 3 * MIB + 5);
    g_assert_cmpuint(g_array_index(ext, BlockExtent, 0).flags, ==,
                     BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                     BDRV_BLOCK_OFFSET_VALID);
    g_array_unref(ext);
    bdrv_unref(hole_bs);
    bdrv_unref(bs);
}

/* ---- Create and info ---- */

static void create_one(Fixture *f, const char *prealloc, int64_t size,
                       struct stat *st)
{
    g_autofree char *path = g_build_filename(f->dir, "new", NULL);
    g_autoptr(GHashTable) opts = options_new(prealloc ? "preallocation"
                                             : NULL, prealloc);
    GError *err = NULL;

    g_assert_true(bdrv_raw.create(path, size, opts, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(g_hash_table_size(opts), ==, 0);
    g_assert_cmpint(stat(path, st), ==, 0);
    g_assert_cmpint(st->st_size, ==, size);
}

static void test_create(Fixture *f, gconstpointer data)
{
    const int64_t size = 4 * MIB + 512;
    g_autofree char *path = g_build_filename(f->dir, "new", NULL);
    g_autoptr(GHashTable) bad = options_new("preallocation", "metadata");
    g_autoptr(GHashTable) empty = options_new(NULL, NULL);
    g_autofree uint8_t *buf = g_malloc(size);
    GError *err = NULL;
    BlockImageInfo info;
    BlockDriverState *bs;
    struct stat st;
    int fd;

    create_one(f, NULL, size, &st);
    g_assert_cmpint((int64_t)st.st_blocks * 512, <, size / 2);
    create_one(f, "off", 1 * MIB, &st);
    create_one(f, "falloc", size, &st);
    g_assert_cmpint((int64_t)st.st_blocks * 512, >=, size);
    create_one(f, "full", size, &st);
    g_assert_cmpint((int64_t)st.st_blocks * 512, >=, size);

    fd = open(path, O_RDONLY);
    g_assert_cmpint(read(fd, buf, size), ==, size);
    close(fd);
    g_assert_true(is_zero(buf, size));

    /* Info reports what the host allocated. */
    bs = open_raw(path, 0, NULL);
    g_assert_true(bdrv_get_info(bs, &info, &err));
    g_assert_no_error(err);
    g_assert_cmpint(info.actual_size, ==, (int64_t)st.st_blocks * 512);
    g_assert_cmpint(info.cluster_size, ==, 0);
    g_assert_cmpint(info.virtual_size, ==, size);
    bdrv_image_info_clear(&info);
    bdrv_unref(bs);

    /* An unknown mode is named and leaves the existing file alone. */
    g_assert_false(bdrv_raw.create(path, 1 * MIB, bad, &err));
    g_assert_nonnull(strstr(err->message, "'metadata'"));
    g_clear_error(&err);
    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_cmpint(st.st_size, ==, size);

    /* A directory is refused. */
    g_assert_false(bdrv_raw.create(f->dir, 1 * MIB, empty, &err));
    g_assert_nonnull(strstr(err->message, "is a directory"));
    g_clear_error(&err);

    /* Through the registry as well. */
    g_assert_true(bdrv_create("raw", path, 12345, NULL, &err));
    g_assert_no_error(err);
    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_cmpint(st.st_size, ==, 12345);
}

int main(int argc, char **argv)
{

    g_test_init(&argc, &argv, NULL);

#define ADD(path, setup, data, fn) \
    g_test_add(path, Fixture, data, setup, fn, fixture_teardown)

    ADD("/raw/open/errors", fixture_setup, NULL, test_open_errors);
    ADD("/raw/open/options", fixture_setup, NULL, test_open_options);
    ADD("/raw/rw/roundtrip", fixture_setup, NULL, test_rw_roundtrip);
    ADD("/raw/rw/parallel", fixture_setup, NULL, test_rw_parallel);
    ADD("/raw/rw/eof-zero-fill", fixture_setup, NULL, test_rw_eof);
    ADD("/raw/zeroes/tmp", fixture_setup, NULL, test_zeroes);
    ADD("/raw/zeroes/shm", fixture_setup_shm, NULL, test_zeroes);
    ADD("/raw/status/tmp", fixture_setup, NULL, test_status);
    ADD("/raw/status/shm", fixture_setup_shm, NULL, test_status);
    ADD("/raw/create", fixture_setup, NULL, test_create);
#undef ADD

    return g_test_run();
}
