/*
 * Raw driver tests: the bdrv_raw table called directly on nodes from
 * bdrv_open(), so that each check sees exactly what the driver does (io.c
 * would pad, split and fall back), plus a few round trips through io.c.
 * Scratch files live in a g_dir_make_tmp() directory, or under /dev/shm
 * for the "/shm" variants (tmpfs: holes and O_DIRECT behave differently).
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

#define KIB 1024
#define MIB (1024 * 1024)

typedef struct Fixture {
    char *dir;                  /* scratch directory, NULL when unavailable */
} Fixture;

/* A scratch directory from g_dir_make_tmp(). */
static void fixture_setup(Fixture *f, gconstpointer data)
{
    GError *err = NULL;

    f->dir = g_dir_make_tmp("test-raw-XXXXXX", &err);
    g_assert_no_error(err);
}

/* A scratch directory on tmpfs, or none (the test skips). */
static void fixture_setup_shm(Fixture *f, gconstpointer data)
{
    f->dir = g_strdup("/dev/shm/test-raw-XXXXXX");
    if (!g_file_test("/dev/shm", G_FILE_TEST_IS_DIR) || !g_mkdtemp(f->dir)) {
        g_clear_pointer(&f->dir, g_free);
    }
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    GDir *dir;
    const char *name;

    if (!f->dir) {
        return;
    }
    dir = g_dir_open(f->dir, 0, NULL);
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(f->dir, name, NULL);

        g_assert_cmpint(g_remove(path), ==, 0);
    }
    if (dir) {
        g_dir_close(dir);
    }
    g_assert_cmpint(g_rmdir(f->dir), ==, 0);
    g_free(f->dir);
}

static bool fixture_missing(Fixture *f)
{
    if (!f->dir) {
        g_test_skip("scratch directory unavailable");
    }
    return !f->dir;
}

/* Create @name in the scratch directory as a sparse file of @size bytes. */
static char *make_file(Fixture *f, const char *name, int64_t size)
{
    char *path = g_build_filename(f->dir, name, NULL);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    return path;
}

static GHashTable *options_new(const char *key, const char *value)
{
    GHashTable *opts = g_hash_table_new_full(g_str_hash, g_str_equal,
                                             g_free, g_free);

    if (key) {
        g_hash_table_insert(opts, g_strdup(key), g_strdup(value));
    }
    return opts;
}

static BlockDriverState *open_raw(const char *path, int flags,
                                  GHashTable *opts)
{
    GError *err = NULL;
    BlockDriverState *bs = bdrv_open(path, "raw", flags, opts, &err);

    g_assert_no_error(err);
    g_assert_nonnull(bs);
    g_assert(bs->drv == &bdrv_raw);
    return bs;
}

/* Expect bdrv_open() to fail with a message containing @expected. */
static void open_fails(const char *path, int flags, GHashTable *opts,
                       const char *expected)
{
    GError *err = NULL;
    BlockDriverState *bs = bdrv_open(path, "raw", flags, opts, &err);

    g_assert_null(bs);
    g_assert_nonnull(err);
    if (!strstr(err->message, expected)) {
        g_error("'%s' does not contain '%s'", err->message, expected);
    }
    g_error_free(err);
}

/* ---- Waiting for completions ---- */

typedef struct Completion {
    bool done;
    int ret;
} Completion;

static void completion_cb(void *opaque, int ret)
{
    Completion *c = opaque;

    g_assert_false(c->done);
    c->done = true;
    c->ret = ret;
}

static int completion_wait(Completion *c)
{
    while (!c->done) {
        g_main_context_iteration(NULL, TRUE);
    }
    return c->ret;
}

/* Wait for a request just submitted: it must not have completed inside the
 * submitting call. */
static int wait_fresh(Completion *c)
{
    g_assert_false(c->done);
    return completion_wait(c);
}

static int drv_read(BlockDriverState *bs, int64_t offset, int64_t bytes,
                    void *buf)
{
    Completion c = { 0 };

    bs->drv->aio_preadv(bs, offset, bytes, buf, 0, completion_cb, &c);
    return wait_fresh(&c);
}

static int drv_write(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     const void *buf, BdrvRequestFlags flags)
{
    Completion c = { 0 };

    bs->drv->aio_pwritev(bs, offset, bytes, buf, flags, completion_cb, &c);
    return wait_fresh(&c);
}

static int drv_zeroes(BlockDriverState *bs, int64_t offset, int64_t bytes,
                      BdrvRequestFlags flags)
{
    Completion c = { 0 };

    bs->drv->aio_pwrite_zeroes(bs, offset, bytes, flags, completion_cb, &c);
    return wait_fresh(&c);
}

static int drv_discard(BlockDriverState *bs, int64_t offset, int64_t bytes)
{
    Completion c = { 0 };

    bs->drv->aio_pdiscard(bs, offset, bytes, completion_cb, &c);
    return wait_fresh(&c);
}

static int drv_flush(BlockDriverState *bs)
{
    Completion c = { 0 };

    bs->drv->aio_flush(bs, completion_cb, &c);
    return wait_fresh(&c);
}

/*
 * Block status of [offset, offset + bytes); checks that the extents are
 * contiguous from @offset, well formed, and end by @limit.
 */
static GArray *drv_status(BlockDriverState *bs, int64_t offset,
                          int64_t bytes, int64_t limit)
{
    GArray *ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    const unsigned data = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    const unsigned zero = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    Completion c = { 0 };
    int64_t pos = offset;

    bs->drv->aio_block_status(bs, offset, bytes, ext, completion_cb, &c);
    g_assert_cmpint(wait_fresh(&c), ==, 0);
    g_assert_cmpuint(ext->len, >, 0);
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, pos);
        g_assert_cmpint(e->length, >, 0);
        g_assert_cmpint(e->depth, ==, 0);
        g_assert(e->flags == data || e->flags == zero);
        g_assert_cmpint(e->host_offset, ==, e->offset);
        pos += e->length;
    }
    g_assert_cmpint(pos, <=, limit);
    return ext;
}

/* The flags of the extent covering @offset, which must exist. */
static unsigned status_at(GArray *ext, int64_t offset)
{
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        if (offset >= e->offset && offset < e->offset + e->length) {
            return e->flags;
        }
    }
    g_error("no extent covers %" PRId64, offset);
}

static int64_t extents_end(GArray *ext)
{
    BlockExtent *e = &g_array_index(ext, BlockExtent, ext->len - 1);

    return e->offset + e->length;
}

static void fill_pattern(uint8_t *buf, int64_t bytes, unsigned seed)
{
    for (int64_t i = 0; i < bytes; i++) {
        buf[i] = (uint8_t)(i * 7 + seed * 13 + 1);
    }
}

static bool is_zero(const uint8_t *buf, int64_t bytes)
{
    for (int64_t i = 0; i < bytes; i++) {
        if (buf[i]) {
            return false;
        }
    }
    return true;
}

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
        bdrv_raw.aio_pwritev(bs, (int64_t)i * CHUNK, CHUNK, wbuf + i * CHUNK,
                             0, completion_cb, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        g_assert_false(c[i].done);
    }
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(completion_wait(&c[i]), ==, 0);
    }
    memset(c, 0, sizeof(c));
    for (int i = N - 1; i >= 0; i--) {
        bdrv_raw.aio_preadv(bs, (int64_t)i * CHUNK, CHUNK, rbuf + i * CHUNK,
                            0, completion_cb, &c[i]);
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

/* ---- cache=none ---- */

/*
 * Open @path with cache=none, or skip the test when the file system has no
 * O_DIRECT; then the open must have failed with a clear message.
 */
static BlockDriverState *open_nocache(const char *path, bool use_option)
{
    g_autoptr(GHashTable) opts = options_new(use_option ? "cache" : NULL,
                                             "none");
    int flags = BDRV_O_RDWR | (use_option ? 0 : BDRV_O_NOCACHE);
    GError *err = NULL;
    BlockDriverState *bs = bdrv_open(path, "raw", flags, opts, &err);

    if (!bs) {
        g_assert_nonnull(strstr(err->message,
                                "cache=none is not supported"));
        g_test_skip(err->message);
        g_error_free(err);
    }
    return bs;
}

static void test_nocache(Fixture *f, gconstpointer data)
{
    g_autofree char *path = NULL;
    g_autofree uint8_t *wbuf = g_malloc(64 * KIB);
    uint8_t *abuf = NULL;
    BlockDriverState *bs;
    uint32_t align;
    int64_t size, tail_off;
    int fd;

    if (fixture_missing(f)) {
        return;
    }
    /* The size is not a multiple of any O_DIRECT alignment. */
    path = make_file(f, "img", 3 * 4096 + 100);
    bs = open_nocache(path, data != NULL);
    if (!bs) {
        return;
    }
    size = bdrv_getlength(bs);
    align = bdrv_get_request_alignment(bs);
    g_assert_cmpuint(align, >=, 512);
    g_assert_cmpuint(align, <=, 4096);
    g_assert_cmpuint(bdrv_get_mem_alignment(bs), >=, align);
    g_assert_cmpint(posix_memalign((void **)&abuf, 4096, 64 * KIB), ==, 0);

    /* Aligned read and write. */
    fill_pattern(wbuf, 64 * KIB, 7);
    memcpy(abuf, wbuf, align);
    g_assert_cmpint(drv_write(bs, align, align, abuf, 0), ==, 0);
    memset(abuf, 0, align);
    g_assert_cmpint(drv_read(bs, align, align, abuf), ==, 0);
    g_assert_cmpmem(abuf, align, wbuf, align);

    /* A request ending at the unaligned end of the file: the partial block
     * goes through the buffered descriptor. */
    tail_off = (size - 1) / align * align - align;
    memcpy(abuf, wbuf + 100, size - tail_off);
    g_assert_cmpint(drv_write(bs, tail_off, size - tail_off, abuf,
                              BDRV_REQ_FUA), ==, 0);
    memset(abuf, 0xaa, 64 * KIB);
    g_assert_cmpint(drv_read(bs, tail_off, size - tail_off, abuf), ==, 0);
    g_assert_cmpmem(abuf, size - tail_off, wbuf + 100, size - tail_off);
    g_assert_cmpint(drv_flush(bs), ==, 0);

    fd = open(path, O_RDONLY);
    g_assert_cmpint(pread(fd, wbuf, size - tail_off, tail_off), ==,
                    size - tail_off);
    close(fd);
    g_assert_cmpmem(abuf, size - tail_off, wbuf, size - tail_off);

    free(abuf);
    bdrv_unref(bs);
}

/*
 * Only with RAW_TEST_NODIRECT_DIR naming a directory on a file system
 * without O_DIRECT (ramfs, say): cache=none must fail clearly.
 */
static void test_nocache_unsupported(Fixture *f, gconstpointer data)
{
    const char *dir = g_getenv("RAW_TEST_NODIRECT_DIR");
    g_autofree char *path = NULL;
    g_autofree char *msg = NULL;

    if (!dir) {
        g_test_skip("set RAW_TEST_NODIRECT_DIR to test a file system "
                    "without O_DIRECT");
        return;
    }
    path = g_build_filename(dir, "test-raw-nodirect", NULL);
    g_assert_true(g_file_set_contents(path, "abc", 3, NULL));
    msg = g_strdup_printf("Could not open '%s': cache=none is not supported "
                          "on this filesystem", path);
    open_fails(path, BDRV_O_NOCACHE, NULL, msg);
    g_assert_cmpint(g_unlink(path), ==, 0);
}

/* ---- Block devices ---- */

/*
 * Only with RAW_TEST_BLOCKDEV=/dev/... naming a block device whose
 * contents may be destroyed (a loop device, say).
 */
static void test_blockdev(Fixture *f, gconstpointer data)
{
    const char *dev = g_getenv("RAW_TEST_BLOCKDEV");
    const BdrvRequestFlags modes[] = { 0, BDRV_REQ_MAY_UNMAP };
    uint8_t *wbuf = NULL, *rbuf = NULL;
    GError *err = NULL;
    BlockDriverState *bs;
    BlockImageInfo info;
    GArray *ext;
    int64_t size;

    if (!dev) {
        g_test_skip("set RAW_TEST_BLOCKDEV to a scratch block device");
        return;
    }
    bs = open_raw(dev, BDRV_O_RDWR | (data ? BDRV_O_NOCACHE : 0), NULL);
    size = bdrv_getlength(bs);
    g_assert_cmpint(size, >=, 1 * MIB);
    if (data) {
        g_assert_cmpuint(bdrv_get_request_alignment(bs), >=, 512);
    }
    g_assert_cmpint(posix_memalign((void **)&wbuf, 4096, 1 * MIB), ==, 0);
    g_assert_cmpint(posix_memalign((void **)&rbuf, 4096, 1 * MIB), ==, 0);

    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
        fill_pattern(wbuf, 1 * MIB, i);
        g_assert_cmpint(drv_write(bs, 0, 1 * MIB, wbuf, BDRV_REQ_FUA), ==, 0);
        g_assert_cmpint(drv_read(bs, 0, 1 * MIB, rbuf), ==, 0);
        g_assert_cmpmem(rbuf, 1 * MIB, wbuf, 1 * MIB);
        g_assert_cmpint(drv_zeroes(bs, 64 * KIB, 128 * KIB, modes[i]), ==, 0);
        g_assert_cmpint(drv_read(bs, 0, 1 * MIB, rbuf), ==, 0);
        g_assert_true(is_zero(rbuf + 64 * KIB, 128 * KIB));
        g_assert_cmpmem(rbuf + 192 * KIB, 64 * KIB, wbuf + 192 * KIB,
                        64 * KIB);
    }
    /* Unaligned zeroing is left to io.c. */
    g_assert_cmpint(drv_zeroes(bs, 1, 511, 0), ==, -ENOTSUP);
    g_assert_cmpint(drv_discard(bs, 100, 256 * KIB), ==, 0);
    g_assert_cmpint(drv_flush(bs), ==, 0);

    ext = drv_status(bs, 0, size, size);
    g_assert_cmpuint(ext->len, ==, 1);
    g_assert_true(status_at(ext, 0) & BDRV_BLOCK_DATA);
    g_array_unref(ext);

    g_assert_true(bdrv_get_info(bs, &info, &err));
    g_assert_cmpint(info.actual_size, ==, -1);
    bdrv_image_info_clear(&info);
    bdrv_unref(bs);

    /* Creating "on" a device checks that it is big enough. */
    g_assert_false(bdrv_create("raw", dev, size + 512, NULL, &err));
    g_clear_error(&err);
    free(wbuf);
    free(rbuf);
}

/* ---- Through io.c ---- */

typedef struct IoCase {
    int flags;
    const char *align;
} IoCase;

/* Unaligned requests and buffers, padded and bounced by io.c. */
static void test_io_unaligned(Fixture *f, gconstpointer data)
{
    const IoCase *io = data;
    const int64_t size = 1 * MIB + 777;
    g_autofree char *path = make_file(f, "img", size);
    g_autofree uint8_t *wbuf = g_malloc(size);
    g_autofree uint8_t *rbuf = g_malloc(size + 1);
    g_autoptr(GHashTable) opts = options_new(io->align ? "align" : NULL,
                                             io->align);
    GError *err = NULL;
    BlockDriverState *bs = bdrv_open(path, "raw", BDRV_O_RDWR | io->flags,
                                     opts, &err);
    Completion c = { 0 };

    if (!bs) {
        g_assert_nonnull(strstr(err->message, "cache=none is not supported"));
        g_test_skip(err->message);
        g_error_free(err);
        return;
    }
    fill_pattern(wbuf, size, 9);
    bdrv_aio_pwrite(bs, 3, size - 3, wbuf + 3, 0, completion_cb, &c);
    g_assert_cmpint(wait_fresh(&c), ==, 0);
    c = (Completion) { 0 };
    bdrv_aio_pwrite(bs, 0, 3, wbuf, BDRV_REQ_FUA, completion_cb, &c);
    g_assert_cmpint(wait_fresh(&c), ==, 0);

    c = (Completion) { 0 };
    bdrv_aio_pread(bs, 1, size - 1, rbuf + 1, 0, completion_cb, &c);
    g_assert_cmpint(wait_fresh(&c), ==, 0);
    g_assert_cmpmem(rbuf + 1, size - 1, wbuf + 1, size - 1);
    bdrv_unref(bs);
}

int main(int argc, char **argv)
{
    static const IoCase io_buffered = { 0, NULL };
    static const IoCase io_align = { 0, "4096" };
    static const IoCase io_nocache = { BDRV_O_NOCACHE, NULL };

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
    ADD("/raw/nocache/flag/tmp", fixture_setup, NULL, test_nocache);
    ADD("/raw/nocache/flag/shm", fixture_setup_shm, NULL, test_nocache);
    ADD("/raw/nocache/option", fixture_setup, "option", test_nocache);
    ADD("/raw/nocache/unsupported", fixture_setup, NULL,
        test_nocache_unsupported);
    ADD("/raw/blockdev/buffered", fixture_setup, NULL, test_blockdev);
    ADD("/raw/blockdev/nocache", fixture_setup, "nocache", test_blockdev);
    ADD("/raw/io/buffered", fixture_setup, &io_buffered, test_io_unaligned);
    ADD("/raw/io/align", fixture_setup, &io_align, test_io_unaligned);
    ADD("/raw/io/nocache", fixture_setup, &io_nocache, test_io_unaligned);
#undef ADD

    return g_test_run();
}
