/*
 * Raw driver tests of cache=none (O_DIRECT, with the buffered twin for the
 * unaligned end of a file), block devices (given by RAW_TEST_BLOCKDEV, as
 * they need root), and round trips through io.c with unaligned requests.
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
