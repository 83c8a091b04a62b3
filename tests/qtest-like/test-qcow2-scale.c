/*
 * qcow2-lite costs that must follow the allocated L2 tables of a thin
 * image, not its virtual size (issue 21), counted, never timed: block
 * status of a whole 1 TiB and 64 TiB image (empty, with three pieces of
 * data, over an empty backing file) is answered in one driver call and
 * looks at the same L2 entries at both sizes; write-zeroes and discard of
 * the whole image look at no more L2 entries than the tables that exist.
 * The extents and the bytes read back are checked too.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>

#include "block/qcow2.h"
#include "tests/qtest-like/qcow2-fixture.h"
#include "tests/qtest-like/test-util.h"

#define TIB         (INT64_C(1) << 40)
#define CB          16                      /* 64 KiB clusters */
#define CS          (INT64_C(1) << CB)
#define L2_ENTRIES  (CS / 8)                /* clusters per L2 table */
#define L1_SPAN     (L2_ENTRIES * CS)       /* bytes per L1 entry */

#define DATA        (BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED | \
                     BDRV_BLOCK_OFFSET_VALID)
#define HOLE        (BDRV_BLOCK_ZERO)

/* What one size of a case measured. */
typedef struct ScaleRun {
    int calls;                  /* block status requests to cover it */
    Qcow2Stats st;
} ScaleRun;

/*
 * Block status of [@off, @size) of @bs, request after request from where
 * the last extent ended (as map does) into @ext; returns the requests.
 */
static int status_rest(BlockDriverState *bs, int64_t off, int64_t size,
                       GArray *ext)
{
    int calls = 0;

    g_array_set_size(ext, 0);
    while (off < size) {
        g_autoptr(GArray) part = g_array_new(FALSE, FALSE,
                                             sizeof(BlockExtent));
        BlockExtent *last;

        g_assert_cmpint(test_block_status(bs, off, size - off, part), ==, 0);
        g_assert_cmpuint(part->len, >, 0);
        calls++;
        g_assert_cmpint(calls, <=, 100000);
        g_array_append_vals(ext, part->data, part->len);
        last = &g_array_index(part, BlockExtent, part->len - 1);
        off = last->offset + last->length;
    }
    return calls;
}

/* Extent @i of @ext is [@off, @off + @len) with @flags at @depth. */
static void assert_extent(GArray *ext, guint i, int64_t off, int64_t len,
                          unsigned flags, int depth)
{
    BlockExtent *e;

    g_assert_cmpuint(i, <, ext->len);
    e = &g_array_index(ext, BlockExtent, i);
    g_assert_cmpint(e->offset, ==, off);
    g_assert_cmpint(e->length, ==, len);
    g_assert_cmphex(e->flags, ==, flags);
    g_assert_cmpint(e->depth, ==, depth);
}

/* The three 64 KiB pieces of data of an image of @size bytes. */
static const int64_t piece_len = 64 * Q_KIB;

static int64_t piece_off(int64_t size, int i)
{
    return i == 0 ? 0 : i == 1 ? size / 2 + 4 * Q_KIB : size - piece_len;
}

static void write_pieces(BlockDriverState *bs, int64_t size)
{
    g_autofree uint8_t *buf = g_malloc(piece_len);

    for (int i = 0; i < 3; i++) {
        test_fill_pattern(buf, piece_off(size, i), piece_len, i + 1);
        g_assert_cmpint(test_pwrite(bs, piece_off(size, i), piece_len, buf),
                        ==, 0);
    }
}

/* The pieces read back as written (@written) or as zeroes. */
static void assert_pieces(BlockDriverState *bs, int64_t size, bool written)
{
    g_autofree uint8_t *want = g_malloc0(piece_len);
    g_autofree uint8_t *got = g_malloc(piece_len);

    for (int i = 0; i < 3; i++) {
        if (written) {
            test_fill_pattern(want, piece_off(size, i), piece_len, i + 1);
        }
        g_assert_cmpint(test_pread(bs, piece_off(size, i), piece_len, got),
                        ==, 0);
        g_assert_cmpmem(got, piece_len, want, piece_len);
    }
}

/* An empty image: one hole, in one request, with no L2 entry looked at;
 * from the middle too. */
static void run_empty(int64_t size, ScaleRun *r)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "e.qcow2", size, CB, NULL,
                                         NULL, true);
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockDriverState *bs = q_open(path, 0);

    r->calls = status_rest(bs, 0, size, ext);
    g_assert_cmpuint(ext->len, ==, 1);
    assert_extent(ext, 0, 0, size, HOLE, 0);
    g_assert_cmpint(status_rest(bs, size / 2 + 4097, size, ext), ==, 1);
    assert_extent(ext, 0, size / 2 + 4097, size / 2 - 4097, HOLE, 0);
    qcow2_get_stats(bs, &r->st);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

static void test_status_empty(void)
{
    ScaleRun small, big;

    run_empty(TIB, &small);
    run_empty(64 * TIB, &big);
    g_test_message("requests %d / %d, L1 entries %" G_GINT64_FORMAT
                   " / %" G_GINT64_FORMAT, small.calls, big.calls,
                   small.st.status_l1_entries, big.st.status_l1_entries);
    g_assert_cmpint(small.calls, ==, 1);
    g_assert_cmpint(big.calls, ==, 1);
    g_assert_cmpint(small.st.status_l2_entries, ==, 0);
    g_assert_cmpint(big.st.status_l2_entries, ==, 0);
    /* At most each L1 entry once per request (two of them here). */
    g_assert_cmpint(big.st.status_l1_entries, <=, 2 * (64 * TIB / L1_SPAN));
}

/* An empty image over an empty qcow2 backing file of the same size: one
 * hole one layer down, in one request. */
static void test_status_backing(void)
{
    for (int64_t size = TIB; size <= 64 * TIB; size *= 64) {
        g_autofree char *dir = test_scratch_new();
        g_autofree char *base = q_make_image(dir, "b.qcow2", size, CB, NULL,
                                             NULL, true);
        g_autofree char *path = q_make_image(dir, "o.qcow2", size, CB,
                                             "b.qcow2", "qcow2", true);
        g_autoptr(GArray) ext = g_array_new(FALSE, FALSE,
                                            sizeof(BlockExtent));
        BlockDriverState *bs = q_open(path, 0);
        Qcow2Stats st;

        g_assert_nonnull(base);
        g_assert_cmpint(status_rest(bs, 0, size, ext), ==, 1);
        g_assert_cmpuint(ext->len, ==, 1);
        assert_extent(ext, 0, 0, size, HOLE, 1);
        qcow2_get_stats(bs, &st);
        g_assert_cmpint(st.status_l2_entries, ==, 0);
        bdrv_unref(bs);
        test_scratch_free(g_steal_pointer(&dir));
    }
}

/*
 * Three pieces of data in three L2 tables: five extents in one request,
 * the entries of those tables looked at; then write-zeroes and discard of
 * the whole image look at those tables only.
 */
static void run_sparse(int64_t size, ScaleRun *r, ScaleRun *z)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "s.qcow2", size, CB, NULL,
                                         NULL, true);
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    int64_t mid = size / 2;
    Qcow2Stats st0;

    write_pieces(bs, size);
    qcow2_get_stats(bs, &st0);
    r->calls = status_rest(bs, 0, size, ext);
    qcow2_get_stats(bs, &r->st);
    r->st.status_l1_entries -= st0.status_l1_entries;
    r->st.status_l2_entries -= st0.status_l2_entries;
    g_assert_cmpuint(ext->len, ==, 5);
    assert_extent(ext, 0, 0, CS, DATA, 0);
    assert_extent(ext, 1, CS, mid - CS, HOLE, 0);
    assert_extent(ext, 2, mid, 2 * CS, DATA, 0);
    assert_extent(ext, 3, mid + 2 * CS, mid - 3 * CS, HOLE, 0);
    assert_extent(ext, 4, size - CS, CS, DATA, 0);
    assert_pieces(bs, size, true);

    /* Zeroing keeps the clusters (ZERO_ALLOC), discard frees them. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, size, 0), ==, 0);
    assert_pieces(bs, size, false);
    g_assert_cmpint(test_pdiscard(bs, 0, size), ==, 0);
    assert_pieces(bs, size, false);
    z->calls = status_rest(bs, 0, size, ext);
    g_assert_cmpuint(ext->len, ==, 5);
    assert_extent(ext, 0, 0, CS, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED, 0);
    assert_extent(ext, 2, mid, 2 * CS,
                  BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED, 0);
    qcow2_get_stats(bs, &z->st);
    g_assert_cmpint(test_flush(bs), ==, 0);
    q_assert_clean(bs);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

static void test_status_sparse(void)
{
    ScaleRun small, big, zsmall, zbig;

    run_sparse(TIB, &small, &zsmall);
    run_sparse(64 * TIB, &big, &zbig);
    g_test_message("requests %d / %d, L2 entries %" G_GINT64_FORMAT
                   " / %" G_GINT64_FORMAT ", zeroing %" G_GINT64_FORMAT
                   " / %" G_GINT64_FORMAT, small.calls, big.calls,
                   small.st.status_l2_entries, big.st.status_l2_entries,
                   zsmall.st.zero_l2_entries, zbig.st.zero_l2_entries);
    g_assert_cmpint(small.calls, ==, 1);
    g_assert_cmpint(big.calls, ==, 1);
    g_assert_cmpint(big.st.status_l2_entries, ==,
                    small.st.status_l2_entries);
    g_assert_cmpint(big.st.status_l2_entries, <=, 3 * L2_ENTRIES);
    g_assert_cmpint(big.st.status_l1_entries, <=, 64 * TIB / L1_SPAN + 3);
    /* Two passes (zero, discard) over the three tables. */
    g_assert_cmpint(zbig.st.zero_l2_entries, ==, zsmall.st.zero_l2_entries);
    g_assert_cmpint(zbig.st.zero_l2_entries, <=, 2 * 3 * L2_ENTRIES);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qcow2-scale/status/empty", test_status_empty);
    g_test_add_func("/qcow2-scale/status/backing", test_status_backing);
    g_test_add_func("/qcow2-scale/status/sparse-zero-discard",
                    test_status_sparse);
    return g_test_run();
}
