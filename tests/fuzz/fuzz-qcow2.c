/*
 * libFuzzer target: the input is a qcow2 image.
 *
 * Each input is written to img.qcow2 in a private directory under
 * $FUZZ_TMPDIR, /dev/shm (tmpfs) or the temporary directory, in that
 * order of preference, and goes through the real open path
 * (bdrv_open with format "qcow2": header, extensions, layout, tables,
 * backing chain), then the consistency check, block status over the whole
 * virtual disk and reads of what block status found.  The same directory
 * holds backing.raw and backing.qcow2 (over backing.raw), so seed images
 * with a relative backing name reach the backing code.  When the image
 * may be written, a few writes (each must read back), a write-zeroes, a
 * discard and a flush follow, then the image is opened read-only and
 * checked again.  Every problem must be an error: a crash, a hang, a leak
 * or a huge allocation is a bug.
 *
 * The work per input is bounded whatever size the image claims: at most
 * FUZZ_MAX_STATUS block status calls and FUZZ_READ_BUDGET bytes read.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzzing=true (docs/qcow2-lite.md).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "block/block.h"
#include "block/qcow2.h"
#include "tests/qtest-like/test-util.h"

#define FUZZ_MAX_STATUS     256             /* block status calls */
#define FUZZ_MAX_READS      64              /* read requests */
#define FUZZ_READ_CHUNK     (64 * 1024)     /* bytes per read */
#define FUZZ_READ_BUDGET    (1024 * 1024)   /* bytes read per input */
#define FUZZ_BACKING_SIZE   (64 * 1024)
#define FUZZ_WRITE_SIZE     (6 * 1024)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *fuzz_dir;
static char *fuzz_image;

static void fuzz_cleanup(void)
{
    test_scratch_free(g_steal_pointer(&fuzz_dir));
    g_clear_pointer(&fuzz_image, g_free);
}

/* Write @size bytes of @data to @path (created or truncated). */
static void fuzz_write_file(const char *path, const uint8_t *data,
                            size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t done = 0;

    g_assert(fd >= 0);
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);

        g_assert(n > 0);
        done += n;
    }
    close(fd);
}

/* backing.raw (a pattern) and backing.qcow2 over it, with some data. */
static void fuzz_make_backing_files(void)
{
    g_autofree char *raw = g_build_filename(fuzz_dir, "backing.raw", NULL);
    g_autofree char *qcow2 = g_build_filename(fuzz_dir, "backing.qcow2",
                                              NULL);
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    g_autofree uint8_t *buf = g_malloc(FUZZ_BACKING_SIZE);
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;

    test_fill_pattern(buf, 0, FUZZ_BACKING_SIZE, 7);
    fuzz_write_file(raw, buf, FUZZ_BACKING_SIZE);

    g_hash_table_insert(opts, "cluster_size", "4096");
    g_hash_table_insert(opts, "backing_file", "backing.raw");
    g_hash_table_insert(opts, "backing_fmt", "raw");
    if (!bdrv_create("qcow2", qcow2, 2 * FUZZ_BACKING_SIZE, opts, &err)) {
        g_error("cannot create %s: %s", qcow2, err->message);
    }
    bs = test_open(qcow2, "qcow2", BDRV_O_RDWR);
    memset(buf, 0x5a, 8192);
    g_assert_cmpint(test_pwrite(bs, 4096, 8192, buf), ==, 0);
    g_assert_cmpint(test_pwrite_zeroes(bs, 32768, 4096, 0), ==, 0);
    bdrv_unref(bs);
}

static void fuzz_quiet(const gchar *domain, GLogLevelFlags level,
                       const gchar *message, gpointer data)
{
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = g_getenv("FUZZ_TMPDIR") ? g_getenv("FUZZ_TMPDIR") :
                       g_file_test("/dev/shm", G_FILE_TEST_IS_DIR) ?
                       "/dev/shm" : g_get_tmp_dir();
    g_autofree char *tmpl = g_build_filename(base, "fuzz-qcow2-XXXXXX",
                                             NULL);

    /*
     * No thread churn between inputs: GLib stops pool threads beyond two
     * unused ones, and a worker starting or exiting while LeakSanitizer
     * looks (libFuzzer checks after inputs) showed its per-thread slice
     * magazine as a leak once.
     */
    g_setenv("G_SLICE", "always-malloc", TRUE);
    g_thread_pool_set_max_unused_threads(-1);
    g_thread_pool_set_max_idle_time(0);

    /* Hostile images are marked corrupt all the time: not worth a line
     * on stderr per input. */
    g_log_set_handler("mirror-block", G_LOG_LEVEL_WARNING, fuzz_quiet, NULL);
    fuzz_dir = g_mkdtemp(g_steal_pointer(&tmpl));
    g_assert(fuzz_dir);
    fuzz_image = g_build_filename(fuzz_dir, "img.qcow2", NULL);
    atexit(fuzz_cleanup);
    fuzz_make_backing_files();
    return 0;
}

/* The consistency check: its verdict does not matter, only that it
 * returns. */
static void fuzz_check(BlockDriverState *bs)
{
    BdrvCheckResult res;
    g_autoptr(GError) err = NULL;

    if (qcow2_check(bs, &res, &err)) {
        bdrv_check_result_clear(&res);
    }
}

/* Block status from 0 to the end (or FUZZ_MAX_STATUS calls); the
 * extents go to @extents. */
static void fuzz_block_status(BlockDriverState *bs, int64_t size,
                              GArray *extents)
{
    int64_t offset = 0;

    for (int i = 0; i < FUZZ_MAX_STATUS && offset < size; i++) {
        guint before = extents->len;
        const BlockExtent *last;

        if (test_block_status(bs, offset, size - offset, extents) < 0) {
            return;
        }
        g_assert_cmpuint(extents->len, >, before);
        last = &g_array_index(extents, BlockExtent, extents->len - 1);
        g_assert_cmpint(last->offset + last->length, >, offset);
        offset = last->offset + last->length;
    }
}

/* Read the start of each extent (and of the image), within the budget. */
static void fuzz_reads(BlockDriverState *bs, int64_t size,
                       const GArray *extents)
{
    g_autofree uint8_t *buf = g_malloc(FUZZ_READ_CHUNK);
    int64_t budget = FUZZ_READ_BUDGET;
    int reads = 0;

    test_pread(bs, 0, MIN(size, FUZZ_READ_CHUNK), buf);
    for (guint i = 0; i < extents->len && reads < FUZZ_MAX_READS &&
         budget > 0; i++) {
        const BlockExtent *e = &g_array_index(extents, BlockExtent, i);
        int64_t n = MIN(MIN(e->length, FUZZ_READ_CHUNK), budget);

        if (e->flags & BDRV_BLOCK_ZERO && !(e->flags & BDRV_BLOCK_DATA) &&
            i > 0) {
            continue;       /* holes read the same everywhere */
        }
        test_pread(bs, e->offset, n, buf);
        budget -= n;
        reads++;
    }
    /* Unaligned, across the end of the image. */
    if (size > 1000) {
        test_pread(bs, size - 1000, 1000 + 24, buf);
    }
}

/*
 * Write @bytes at @offset; when that works, the same bytes read back, also
 * across clusters: two guest clusters that share a host cluster whose
 * refcount is below their references are stopped by the write guard
 * (block/qcow2-guard.c), so a write can no longer land twice.
 */
static void fuzz_write_one(BlockDriverState *bs, int64_t offset,
                           int64_t bytes, const uint8_t *buf)
{
    g_autofree uint8_t *got = g_malloc(MAX(bytes, 1));

    if (test_pwrite(bs, offset, bytes, buf) == 0 &&
        test_pread(bs, offset, bytes, got) == 0 &&
        memcmp(got, buf, bytes)) {
        g_printerr("a write at %" G_GINT64_FORMAT " did not read back\n",
                   offset);
        abort();    /* libFuzzer saves the input (g_error traps) */
    }
}

/* Read-write: writes at the start, in the middle (unaligned) and at the
 * end, one across clusters, write-zeroes, discard and flush; then
 * read-only, the check again. */
static void fuzz_writes(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(FUZZ_WRITE_SIZE);
    BlockDriverState *bs = bdrv_open(fuzz_image, "qcow2", BDRV_O_RDWR,
                                     NULL, &err);
    int64_t len, n, mid;

    if (!bs) {
        return;
    }
    len = bdrv_getlength(bs);
    n = MIN(len, FUZZ_WRITE_SIZE);
    mid = len / 2 / 3 * 3;
    test_fill_pattern(buf, 0, n, 11);
    if (n > 0) {
        fuzz_write_one(bs, 0, n, buf);
        fuzz_write_one(bs, mid, MIN(n, len - mid), buf);
        fuzz_write_one(bs, len - n, n, buf);
        test_pwrite(bs, len / 3, MIN(n, len - len / 3), buf);
        test_pwrite_zeroes(bs, len / 4, MIN(len - len / 4, 4 * n),
                           BDRV_REQ_MAY_UNMAP);
        test_pdiscard(bs, 0, MIN(len, 2 * n));
        test_flush(bs);
    }
    bdrv_unref(bs);

    bs = bdrv_open(fuzz_image, "qcow2", 0, NULL, NULL);
    if (bs) {
        fuzz_check(bs);
        bdrv_unref(bs);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GArray) extents = g_array_new(FALSE, FALSE,
                                            sizeof(BlockExtent));
    BlockDriverState *bs;
    int64_t len;

    fuzz_write_file(fuzz_image, data, size);
    bs = bdrv_open(fuzz_image, "qcow2", 0, NULL, &err);
    if (!bs) {
        g_assert(err && err->message[0]);
        return 0;
    }
    len = bdrv_getlength(bs);
    g_assert_cmpint(len, >=, 0);
    fuzz_check(bs);
    fuzz_block_status(bs, len, extents);
    fuzz_reads(bs, len, extents);
    bdrv_unref(bs);
    fuzz_writes();
    return 0;
}
