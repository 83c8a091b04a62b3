/*
 * Helpers for the raw driver tests.
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

/* A scratch directory from g_dir_make_tmp(). */
void fixture_setup(Fixture *f, gconstpointer data)
{
    GError *err = NULL;

    f->dir = g_dir_make_tmp("test-raw-XXXXXX", &err);
    g_assert_no_error(err);
}

/* A scratch directory on tmpfs, or none (the test skips). */
void fixture_setup_shm(Fixture *f, gconstpointer data)
{
    f->dir = g_strdup("/dev/shm/test-raw-XXXXXX");
    if (!g_file_test("/dev/shm", G_FILE_TEST_IS_DIR) || !g_mkdtemp(f->dir)) {
        g_clear_pointer(&f->dir, g_free);
    }
}

void fixture_teardown(Fixture *f, gconstpointer data)
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

bool fixture_missing(Fixture *f)
{
    if (!f->dir) {
        g_test_skip("scratch directory unavailable");
    }
    return !f->dir;
}

/* Create @name in the scratch directory as a sparse file of @size bytes. */
char *make_file(Fixture *f, const char *name, int64_t size)
{
    char *path = g_build_filename(f->dir, name, NULL);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    return path;
}

GHashTable *options_new(const char *key, const char *value)
{
    GHashTable *opts = g_hash_table_new_full(g_str_hash, g_str_equal,
                                             g_free, g_free);

    if (key) {
        g_hash_table_insert(opts, g_strdup(key), g_strdup(value));
    }
    return opts;
}

BlockDriverState *open_raw(const char *path, int flags,
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
void open_fails(const char *path, int flags, GHashTable *opts,
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


void completion_cb(void *opaque, int ret)
{
    Completion *c = opaque;

    g_assert_false(c->done);
    c->done = true;
    c->ret = ret;
}

int completion_wait(Completion *c)
{
    while (!c->done) {
        g_main_context_iteration(NULL, TRUE);
    }
    return c->ret;
}

/* Wait for a request just submitted: it must not have completed inside the
 * submitting call. */
int wait_fresh(Completion *c)
{
    g_assert_false(c->done);
    return completion_wait(c);
}

int drv_read(BlockDriverState *bs, int64_t offset, int64_t bytes,
             void *buf)
{
    Completion c = { 0 };

    bdrv_drv_submit(bs, BDRV_OP_READ, offset, bytes, buf, 0, NULL,
                    completion_cb, &c);
    return wait_fresh(&c);
}

int drv_write(BlockDriverState *bs, int64_t offset, int64_t bytes,
              const void *buf, BdrvRequestFlags flags)
{
    Completion c = { 0 };

    bdrv_drv_submit(bs, BDRV_OP_WRITE, offset, bytes, (void *)buf, flags,
                    NULL, completion_cb, &c);
    return wait_fresh(&c);
}

int drv_zeroes(BlockDriverState *bs, int64_t offset, int64_t bytes,
               BdrvRequestFlags flags)
{
    Completion c = { 0 };

    bdrv_drv_submit(bs, BDRV_OP_ZERO, offset, bytes, NULL, flags, NULL,
                    completion_cb, &c);
    return wait_fresh(&c);
}

int drv_discard(BlockDriverState *bs, int64_t offset, int64_t bytes)
{
    Completion c = { 0 };

    bdrv_drv_submit(bs, BDRV_OP_DISCARD, offset, bytes, NULL, 0, NULL,
                    completion_cb, &c);
    return wait_fresh(&c);
}

int drv_flush(BlockDriverState *bs)
{
    Completion c = { 0 };

    bdrv_drv_submit(bs, BDRV_OP_FLUSH, 0, 0, NULL, 0, NULL, completion_cb,
                    &c);
    return wait_fresh(&c);
}

/*
 * Block status of [offset, offset + bytes); checks that the extents are
 * contiguous from @offset, well formed, and end by @limit.
 */
GArray *drv_status(BlockDriverState *bs, int64_t offset,
                   int64_t bytes, int64_t limit)
{
    GArray *ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    const unsigned data = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    const unsigned zero = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    Completion c = { 0 };
    int64_t pos = offset;

    bdrv_drv_submit(bs, BDRV_OP_STATUS, offset, bytes, NULL, 0, ext,
                    completion_cb, &c);
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
unsigned status_at(GArray *ext, int64_t offset)
{
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        if (offset >= e->offset && offset < e->offset + e->length) {
            return e->flags;
        }
    }
    g_error("no extent covers %" PRId64, offset);
}

int64_t extents_end(GArray *ext)
{
    BlockExtent *e = &g_array_index(ext, BlockExtent, ext->len - 1);

    return e->offset + e->length;
}

void fill_pattern(uint8_t *buf, int64_t bytes, unsigned seed)
{
    for (int64_t i = 0; i < bytes; i++) {
        buf[i] = (uint8_t)(i * 7 + seed * 13 + 1);
    }
}

bool is_zero(const uint8_t *buf, int64_t bytes)
{
    for (int64_t i = 0; i < bytes; i++) {
        if (buf[i]) {
            return false;
        }
    }
    return true;
}
