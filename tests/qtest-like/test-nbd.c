/*
 * NBD client driver tests against real nbdkit servers: reads and writes,
 * odd sizes, block status, write-zeroes, trim, read-only exports, block
 * size constraints.  Flush, FUA and multi-conn are in test-nbd-multiconn.c.
 * Tests skip without nbdkit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/nbd.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* ---- data path against nbdkit ---- */

/* memory 64M: patterned writes at aligned and odd places read back, and
 * the whole disk matches a model of it at the end. */
static void test_rw_memory(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    static const struct { int64_t off, len; } ranges[] = {
        { 0, 4096 }, { 1, 1 }, { 65535, 3 * MiB + 7 },
        { 40 * MiB, 24 * MiB }, { 64 * MiB - 100, 100 },
        { 20 * MiB - 3, 33 * MiB },
    };
    g_autofree uint8_t *model = g_malloc0(64 * MiB);
    g_autofree uint8_t *disk = g_malloc(64 * MiB);

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_getlength(bs), ==, 64 * MiB);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 1);
    g_assert_cmpint(bs->bl.max_transfer, ==, 32 * MiB);

    for (size_t i = 0; i < G_N_ELEMENTS(ranges); i++) {
        int64_t off = ranges[i].off, len = ranges[i].len;
        g_autofree uint8_t *r = g_malloc(len);

        g_assert_cmpint(off + len, <=, 64 * MiB);
        test_fill_pattern(model + off, off, len, i + 1);
        g_assert_cmpint(test_pwrite(bs, off, len, model + off), ==, 0);
        g_assert_cmpint(test_pread(bs, off, len, r), ==, 0);
        g_assert_cmpmem(r, len, model + off, len);
    }
    /* 64 MiB in one request: io.c sends 32 MiB pieces. */
    g_assert_cmpint(test_pread(bs, 0, 64 * MiB, disk), ==, 0);
    g_assert_true(memcmp(disk, model, 64 * MiB) == 0);
    g_assert_cmpint(test_flush(bs), ==, 0);
    g_assert_true(info_has(bs, "export: \"\""));
    g_assert_true(info_has(bs, "multi-conn: yes"));
    {
        /* Made: the first, or all once their handshakes are through when
         * the idle read of open was late (nbd-spread.c). */
        int made = nbdblk_get_connections(bs);
        int planned = nbdblk_default_connections();
        g_autofree char *conns = made < planned
            ? g_strdup_printf("connections: %d (up to %d)", made, planned)
            : g_strdup_printf("connections: %d", made);

        g_assert_true(made == 1 || made == planned);
        g_assert_true(info_has(bs, conns));
    }
    g_assert_true(info_has(bs, "read-only: no"));
}

/* An export size that is not a multiple of 512. */
static void test_rw_odd_size(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    const int64_t size = 1000001;
    uint8_t w[777], r[1000];
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "1000001", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_getlength(bs), ==, size);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 1);

    test_fill_pattern(w, size - sizeof(w), sizeof(w), 9);
    g_assert_cmpint(test_pwrite(bs, size - sizeof(w), sizeof(w), w), ==, 0);
    /* The read runs past the end: the tail reads as zero. */
    memset(r, 0xaa, sizeof(r));
    g_assert_cmpint(test_pread(bs, size - sizeof(w), sizeof(r), r), ==, 0);
    g_assert_cmpmem(r, sizeof(w), w, sizeof(w));
    assert_zero(r + sizeof(w), sizeof(r) - sizeof(w));
    g_assert_cmpint(test_pwrite(bs, size - 1, 2, w), ==, -ENOSPC);
    g_assert_cmpint(test_pwrite_zeroes(bs, size - 10, 10, 0), ==, 0);
    g_assert_cmpint(test_pread(bs, size - 10, 10, r), ==, 0);
    assert_zero(r, 10);

    g_assert_cmpint(test_block_status(bs, 0, size, ext), ==, 0);
    g_assert_cmpint(ext->len, >=, 1);
    {
        BlockExtent *last = &g_array_index(ext, BlockExtent, ext->len - 1);

        g_assert_cmpint(last->offset + last->length, ==, size);
    }
}

/* Check @ext covers [off, off + len) contiguously; return the flags
 * seen, OR-ed. */
static unsigned check_extents(GArray *ext, int64_t off, int64_t len)
{
    unsigned seen = 0;
    int64_t pos = off;

    g_assert_cmpint(ext->len, >=, 1);
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, pos);
        g_assert_cmpint(e->length, >, 0);
        pos += e->length;
        seen |= e->flags;
    }
    g_assert_cmpint(pos, <=, off + len);
    return seen;
}

/* sparse-random: zero extents read as zero, data extents do not. */
static void test_status_sparse_random(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    int64_t size = 256 * MiB, pos = 12345;
    unsigned seen = 0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("sparse-random", "256M", "seed=1", NULL);
    bs = must_open(srv->uri, 0, NULL);

    /* Walk the whole export from an unaligned offset in big requests. */
    while (pos < size) {
        g_array_set_size(ext, 0);
        g_assert_cmpint(test_block_status(bs, pos, size - pos, ext), ==, 0);
        seen |= check_extents(ext, pos, size - pos);
        for (guint i = 0; i < ext->len; i++) {
            BlockExtent *e = &g_array_index(ext, BlockExtent, i);
            int64_t n = MIN(e->length, 64 * KiB);

            g_assert_cmpint(test_pread(bs, e->offset, n, buf), ==, 0);
            if (e->flags & BDRV_BLOCK_ZERO) {
                g_assert_false(e->flags & BDRV_BLOCK_DATA);
                assert_zero(buf, n);
            } else {
                g_assert_true(e->flags & BDRV_BLOCK_DATA);
                g_assert_false(buffer_is_zero(buf, n));
            }
            pos = e->offset + e->length;
        }
    }
    g_assert_cmpint(pos, ==, size);
    g_assert_true(seen & BDRV_BLOCK_ZERO);
    g_assert_true(seen & BDRV_BLOCK_DATA);
}

/* null: one zero (and unallocated) extent for a 1 GiB question. */
static void test_status_null(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockExtent *e;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("null", "4T", NULL);
    bs = must_open(srv->uri, 0, NULL);
    g_assert_cmpint(test_block_status(bs, 7, GiB, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->offset, ==, 7);
    g_assert_cmpint(e->length, ==, GiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_ZERO);

    /* Beyond 32 bits of length: one request of the protocol's most (4 GiB
     * less 64 KiB, aligned for any server), one extent. */
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs, 0, 3 * TiB, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, 4 * GiB - 64 * KiB);
}

/*
 * Zero and trim of long ranges go out in requests of the protocol's most
 * (4 GiB less 64 KiB), with the fast-zero flag when the caller allows no
 * fallback, and zero exactly the range asked.
 */
static void test_no_data_large(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *logdir = g_dir_make_tmp("test-nbd-log-XXXXXX", NULL);
    g_autofree char *log = g_build_filename(logdir, "log", NULL);
    g_autofree char *logarg = g_strdup_printf("logfile=%s", log);
    uint8_t w[4096], r[4096];

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=log", "memory", "64T", logarg, NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    test_fill_pattern(w, 0, sizeof(w), 3);
    g_assert_cmpint(test_pwrite(bs, 9 * GiB, sizeof(w), w), ==, 0);
    g_assert_cmpint(test_pwrite(bs, 17 * GiB, sizeof(w), w), ==, 0);

    /* 17 GiB less 4 KiB: 5 requests (9 of 2 GiB before). */
    g_assert_cmpint(test_pwrite_zeroes(bs, 4096, 17 * GiB - 4096,
                                       BDRV_REQ_MAY_UNMAP), ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Zero id=",
                                "fast=0", NULL }), ==, 5);
    g_assert_cmpint(test_pread(bs, 9 * GiB, sizeof(r), r), ==, 0);
    assert_zero(r, sizeof(r));
    g_assert_cmpint(test_pread(bs, 17 * GiB, sizeof(r), r), ==, 0);
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));

    g_assert_cmpint(test_pwrite_zeroes(bs, 0, 16 * GiB,
                                       BDRV_REQ_MAY_UNMAP |
                                       BDRV_REQ_NO_FALLBACK), ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Zero id=",
                                "fast=1", NULL }), ==, 5);
    g_assert_cmpint(test_pwrite(bs, 17 * GiB, sizeof(w), w), ==, 0);
    g_assert_cmpint(test_pdiscard(bs, 0, 17 * GiB + 4096), ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Trim id=", NULL }),
                    ==, 5);
    g_assert_cmpint(test_pread(bs, 17 * GiB, sizeof(r), r), ==, 0);
    assert_zero(r, sizeof(r));
    server_free(g_steal_pointer(&srv));
    g_unlink(log);
    g_rmdir(logdir);
}

/* memory: written ranges are data, the rest zero; noextents: all data. */
static void test_status_data(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) srv2 = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *w = g_malloc(MiB);
    BlockExtent *e;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    test_fill_pattern(w, 0, MiB, 3);
    g_assert_cmpint(test_pwrite(bs, 8 * MiB, MiB, w), ==, 0);
    g_assert_cmpint(test_block_status(bs, 8 * MiB, 2 * MiB, ext), ==, 0);
    check_extents(ext, 8 * MiB, 2 * MiB);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, MiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
    g_assert_cmpint(ext->len, ==, 2);
    e = &g_array_index(ext, BlockExtent, 1);
    g_assert_true(e->flags & BDRV_BLOCK_ZERO);
    g_assert_false(e->flags & BDRV_BLOCK_DATA);

    srv2 = server_start("--filter=noextents", "memory", "64M", NULL);
    bs2 = must_open(srv2->uri, 0, NULL);
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs2, 0, 64 * MiB, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, 64 * MiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
}

/* Each base:allocation combination maps to its own flags: ZERO skips
 * the read, HOLE alone does not. */
static void test_status_flags(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    static const unsigned expect[] = {
        BDRV_BLOCK_DATA,                                /* hole */
        BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED,         /* zero */
        BDRV_BLOCK_ZERO,                                /* hole,zero */
        BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED,         /* data */
    };

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start(EVAL_SERVER, "extents=echo 0 262144 hole; "
                       "echo 262144 262144 zero; "
                       "echo 524288 262144 hole,zero; "
                       "echo 786432 262144", NULL);
    bs = must_open(srv->uri, 0, NULL);
    g_assert_cmpint(test_block_status(bs, 0, MiB, ext), ==, 0);
    check_extents(ext, 0, MiB);
    g_assert_cmpint(ext->len, ==, 4);
    for (guint i = 0; i < 4; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, i * 262144);
        g_assert_cmpint(e->length, ==, 262144);
        g_assert_cmpuint(e->flags, ==, expect[i]);
    }
    /* Clipped to the question, from an offset inside an extent. */
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs, 300000, 300000, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 2);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 0).offset, ==, 300000);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 0).length, ==,
                    524288 - 300000);
    g_assert_cmpuint(g_array_index(ext, BlockExtent, 0).flags, ==,
                     expect[1]);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 1).length, ==,
                    600000 - 524288);
}

/* Fill [off, off + len) with pattern data and zero it with @flags. */
static int zero_after_data(BlockDriverState *bs, int64_t off, int64_t len,
                           BdrvRequestFlags flags)
{
    g_autofree uint8_t *w = g_malloc(len);
    int ret;

    test_fill_pattern(w, off, len, 5);
    g_assert_cmpint(test_pwrite(bs, off, len, w), ==, 0);
    ret = test_pwrite_zeroes(bs, off, len, flags);
    g_assert_cmpint(test_pread(bs, off, len, w), ==, 0);
    if (ret == 0) {
        assert_zero(w, len);
    }
    return ret;
}

static void test_zero(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) nozero = NULL;
    g_autoptr(Server) slow = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autoptr(BlockDriverState) bs3 = NULL;

    if (!have_nbdkit()) {
        return;
    }
    /* memory: write zeroes, with and without unmap, and fast zero. */
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_true(info_has(bs, "features: flush fua zero fast-zero trim "
                           "base:allocation"));
    g_assert_cmpint(zero_after_data(bs, MiB, 3 * MiB, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    g_assert_cmpint(zero_after_data(bs, 5 * MiB + 3, 70000, 0), ==, 0);
    g_assert_cmpint(zero_after_data(bs, 9 * MiB, MiB,
                                    BDRV_REQ_NO_FALLBACK), ==, 0);
    g_assert_cmpint(zero_after_data(bs, 11 * MiB, MiB, BDRV_REQ_FUA), ==, 0);

    /* No write zeroes on the server: io.c falls back to writing zero
     * buffers, except when the caller asked for no fallback. */
    nozero = server_start("--filter=nozero", "memory", "64M", NULL);
    bs2 = must_open(nozero->uri, BDRV_O_RDWR, NULL);
    g_assert_true(info_has(bs2, "features: flush fua trim "
                           "base:allocation"));
    g_assert_cmpint(zero_after_data(bs2, MiB, 2 * MiB + 5, 0), ==, 0);
    g_assert_cmpint(zero_after_data(bs2, 8 * MiB, MiB, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    g_assert_cmpint(zero_after_data(bs2, 16 * MiB, MiB,
                                    BDRV_REQ_NO_FALLBACK), ==, -ENOTSUP);

    /* Fast zero advertised but refused by the server: -ENOTSUP. */
    slow = server_start("--filter=nozero", "memory", "64M",
                        "zeromode=plugin", "fastzeromode=slow", NULL);
    bs3 = must_open(slow->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(zero_after_data(bs3, MiB, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, -ENOTSUP);
    g_assert_cmpint(zero_after_data(bs3, MiB, MiB, 0), ==, 0);
}

/* sparse-random cannot fast-zero: refused before anything is sent. */
static void test_zero_fast_refused(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("sparse-random", "64M", "seed=1", "percent=0", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_false(info_has(bs, "features: flush fua zero fast-zero trim "
                            "base:allocation"));
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, -ENOTSUP);
    /* A plain zero over (verified) zeroes works. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, 0), ==, 0);
}

static void test_trim(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) notrim = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autofree uint8_t *w = g_malloc(MiB);
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    test_fill_pattern(w, 0, MiB, 7);
    g_assert_cmpint(test_pwrite(bs, 4 * MiB, MiB, w), ==, 0);
    g_assert_cmpint(test_pdiscard(bs, 4 * MiB, MiB), ==, 0);
    /* memory really deallocates: the range is a hole now. */
    g_assert_cmpint(test_block_status(bs, 4 * MiB, MiB, ext), ==, 0);
    g_assert_true(g_array_index(ext, BlockExtent, 0).flags &
                  BDRV_BLOCK_ZERO);
    g_assert_cmpint(test_pread(bs, 4 * MiB, MiB, w), ==, 0);
    assert_zero(w, MiB);

    /* No trim on the server: advisory, so success. */
    notrim = server_start(EVAL_SERVER, NULL);
    bs2 = must_open(notrim->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_pdiscard(bs2, 0, MiB), ==, 0);
}

static void test_read_only(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(GError) err = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *expect = NULL;
    uint8_t buf[512];

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("-r", "memory", "1M", NULL);
    g_assert_null(open_nbd(srv->uri, BDRV_O_RDWR, NULL, &err));
    expect = g_strdup_printf("'%s': the NBD export is read-only", srv->uri);
    g_assert_cmpstr(err->message, ==, expect);

    bs = must_open(srv->uri, 0, NULL);
    g_assert_true(info_has(bs, "read-only: yes"));
    g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, 0);
    assert_zero(buf, sizeof(buf));
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, -EPERM);
}

/* Block size constraints become limits; io.c pads and splits so that
 * the server (which rejects violations) never sees one. */
static void test_blocksize_policy(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *w = g_malloc(3 * MiB);
    g_autofree uint8_t *r = g_malloc(3 * MiB);

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=blocksize-policy", "memory", "64M",
                       "blocksize-minimum=4K", "blocksize-preferred=64K",
                       "blocksize-maximum=1M",
                       "blocksize-error-policy=error", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 4096);
    g_assert_cmpint(bs->bl.max_transfer, ==, MiB);
    g_assert_cmpint(bs->bl.opt_transfer, ==, 64 * KiB);
    g_assert_cmpint(bs->bl.max_pwrite_zeroes % 4096, ==, 0);
    g_assert_true(info_has(bs, "block size: minimum 4096, preferred 65536, "
                           "maximum 1048576 (0: not advertised)"));

    /* Unaligned and larger than the maximum. */
    test_fill_pattern(w, 1000, 3 * MiB - 5000, 11);
    g_assert_cmpint(test_pwrite(bs, 1000, 3 * MiB - 5000, w), ==, 0);
    g_assert_cmpint(test_pread(bs, 1000, 3 * MiB - 5000, r), ==, 0);
    g_assert_cmpmem(r, 3 * MiB - 5000, w, 3 * MiB - 5000);
    g_assert_cmpint(test_pwrite_zeroes(bs, 4097, 10000, 0), ==, 0);
    g_assert_cmpint(test_pread(bs, 4097, 10000, r), ==, 0);
    assert_zero(r, 10000);
    g_assert_cmpint(test_pdiscard(bs, 100, 3 * MiB), ==, 0);
    g_assert_cmpint(test_block_status(bs, 1001, 5 * MiB, ext), ==, 0);
    check_extents(ext, 1001, 5 * MiB);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/rw/memory", test_rw_memory);
    g_test_add_func("/nbd/rw/odd-size", test_rw_odd_size);
    g_test_add_func("/nbd/status/sparse-random", test_status_sparse_random);
    g_test_add_func("/nbd/status/null", test_status_null);
    g_test_add_func("/nbd/status/data", test_status_data);
    g_test_add_func("/nbd/status/flags", test_status_flags);
    g_test_add_func("/nbd/zero/fallback", test_zero);
    g_test_add_func("/nbd/zero/fast-refused", test_zero_fast_refused);
    g_test_add_func("/nbd/trim", test_trim);
    g_test_add_func("/nbd/no-data/large", test_no_data_large);
    g_test_add_func("/nbd/read-only", test_read_only);
    g_test_add_func("/nbd/blocksize-policy", test_blocksize_policy);
    return g_test_run();
}
