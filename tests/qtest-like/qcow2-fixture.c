/*
 * Helpers for the qcow2-lite tests.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/qcow2-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/qcow2-int.h"
#include "block/qcow2.h"

#include <fcntl.h>
#include <unistd.h>

char *q_make_image(const char *dir, const char *name, int64_t size,
                   int cluster_bits, const char *backing,
                   const char *backing_fmt, bool small_reftable)
{
    char *path = g_build_filename(dir, name, NULL);
    Qcow2CreateParams p = {
        .size = size,
        .cluster_bits = cluster_bits,
        .backing_file = backing,
        .backing_format = backing_fmt,
        .small_reftable = small_reftable,
    };
    g_autoptr(GError) err = NULL;

    g_assert_true(qcow2_create_file(path, &p, &err));
    g_assert_no_error(err);
    return path;
}

char *q_make_raw(const char *dir, const char *name, int64_t size,
                 uint32_t seed)
{
    char *path = g_build_filename(dir, name, NULL);
    g_autofree uint8_t *buf = g_malloc(MAX(size, 1));

    test_fill_pattern(buf, 0, size, seed);
    g_assert_true(g_file_set_contents(path, (char *)buf, size, NULL));
    return path;
}

void q_poke(const char *path, int64_t offset, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, buf, len, offset), ==, (ssize_t)len);
    close(fd);
}

void q_poke_be64(const char *path, int64_t offset, uint64_t v)
{
    uint8_t b[8];

    qcow2_put_be64(b, v);
    q_poke(path, offset, b, 8);
}

void q_poke_be32(const char *path, int64_t offset, uint32_t v)
{
    uint8_t b[4];

    qcow2_put_be32(b, v);
    q_poke(path, offset, b, 4);
}

void q_poke_be16(const char *path, int64_t offset, uint16_t v)
{
    uint8_t b[2];

    qcow2_put_be16(b, v);
    q_poke(path, offset, b, 2);
}

static void q_peek(const char *path, int64_t offset, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, offset), ==, (ssize_t)len);
    close(fd);
}

uint64_t q_peek_be64(const char *path, int64_t offset)
{
    uint8_t b[8];

    q_peek(path, offset, b, 8);
    return qcow2_be64(b);
}

uint16_t q_peek_be16(const char *path, int64_t offset)
{
    uint8_t b[2];

    q_peek(path, offset, b, 2);
    return qcow2_be16(b);
}

BlockDriverState *q_open(const char *path, int flags)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = bdrv_open(path, "qcow2", flags, NULL, &err);

    g_assert_no_error(err);
    g_assert_nonnull(bs);
    return bs;
}

void q_open_refused(const char *path, int flags, const char *msg)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *before = NULL, *after = NULL;
    gsize blen, alen;
    BlockDriverState *bs;

    g_assert_true(g_file_get_contents(path, &before, &blen, NULL));
    bs = bdrv_open(path, "qcow2", flags, NULL, &err);
    if (bs) {
        g_test_message("'%s' opened, expected: %s", path, msg);
        bdrv_unref(bs);
        g_test_fail();
        return;
    }
    g_assert_nonnull(err);
    if (!strstr(err->message, msg)) {
        g_test_message("'%s': got \"%s\", expected \"%s\"", path,
                       err->message, msg);
        g_test_fail();
    }
    g_assert_true(g_file_get_contents(path, &after, &alen, NULL));
    g_assert_cmpmem(before, blen, after, alen);
}

void q_assert_clean(BlockDriverState *bs)
{
    g_autoptr(GError) err = NULL;
    BdrvCheckResult r;

    g_assert_true(qcow2_check(bs, &r, &err));
    for (guint i = 0; i < r.messages->len; i++) {
        g_test_message("check: %s", (char *)g_ptr_array_index(r.messages,
                                                               i));
    }
    g_assert_cmpint(r.corruptions, ==, 0);
    g_assert_cmpint(r.leaks, ==, 0);
    g_assert_cmpint(r.check_errors, ==, 0);
    bdrv_check_result_clear(&r);
}
