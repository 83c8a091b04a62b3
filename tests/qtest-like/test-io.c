/*
 * Unit tests of block/io.c: splitting, alignment, read-modify-write and
 * its serialisation, end-of-image clamping, the write-zeroes fallback,
 * block status defaults, and the consistency check of driver tables.  The
 * null driver records what reaches a driver; a raw file with a forced
 * alignment checks the bytes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/null.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static NullRecord *record(GArray *recs, guint i)
{
    return &g_array_index(recs, NullRecord, i);
}

static void assert_sequential(GArray *recs)
{
    /* One request never has two fragments in flight at once. */
    for (guint i = 1; i < recs->len; i++) {
        g_assert_cmpint(record(recs, i)->start_ns, >=,
                        record(recs, i - 1)->end_ns);
    }
}

static void test_split_max_io(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=4M,record=on,latency-ns=100000", NULL,
                  BDRV_O_RDWR);
    g_autofree uint8_t *buf = g_malloc(MiB);
    GArray *recs = null_get_records(bs);
    NullStats st;

    bdrv_set_max_io(bs, 64 * KiB);
    g_assert_cmpint(test_pread(bs, 0, MiB, buf), ==, 0);
    g_assert_cmpuint(recs->len, ==, 16);
    for (guint i = 0; i < recs->len; i++) {
        g_assert_cmpint(record(recs, i)->op, ==, NULL_OP_READ);
        g_assert_cmpint(record(recs, i)->offset, ==, i * 64 * KiB);
        g_assert_cmpint(record(recs, i)->bytes, ==, 64 * KiB);
    }
    assert_sequential(recs);
    null_get_stats(bs, &st);
    g_assert_cmpuint(st.max_in_flight, ==, 1);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

static void test_split_max_transfer(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=4M,record=on,max-transfer=128K", NULL,
                  BDRV_O_RDWR);
    g_autofree uint8_t *buf = g_malloc0(MiB + 5);
    GArray *recs = null_get_records(bs);
    NullStats st;

    /* The smaller of the cap and the driver's limit wins. */
    bdrv_set_max_io(bs, MiB);
    g_assert_cmpint(test_pwrite(bs, 0, MiB + 5, buf), ==, 0);
    g_assert_cmpuint(recs->len, ==, 9);
    for (guint i = 0; i < 8; i++) {
        g_assert_cmpint(record(recs, i)->bytes, ==, 128 * KiB);
    }
    g_assert_cmpint(record(recs, 8)->bytes, ==, 5);
    null_get_stats(bs, &st);
    g_assert_cmpint(st.max_data_request, ==, 128 * KiB);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

static void test_align_read(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=1M,record=on,align=4096", NULL, 0);
    uint8_t buf[5000];
    GArray *recs = null_get_records(bs);
    NullStats st;

    memset(buf, 0xaa, sizeof(buf));
    g_assert_cmpint(test_pread(bs, 100, 5000, buf), ==, 0);
    g_assert_cmpuint(recs->len, ==, 1);
    g_assert_cmpint(record(recs, 0)->offset, ==, 0);
    g_assert_cmpint(record(recs, 0)->bytes, ==, 8192);
    for (int i = 0; i < 5000; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    null_get_stats(bs, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

static void test_align_write_records(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=1M,record=on,align=4096", NULL, BDRV_O_RDWR);
    uint8_t buf[10000] = { 0 };
    GArray *recs = null_get_records(bs);
    NullStats st;

    /* Head and tail partial: read head, read tail, write all. */
    g_assert_cmpint(test_pwrite(bs, 100, 10000, buf), ==, 0);
    g_assert_cmpuint(recs->len, ==, 3);
    g_assert_cmpint(record(recs, 0)->op, ==, NULL_OP_READ);
    g_assert_cmpint(record(recs, 0)->offset, ==, 0);
    g_assert_cmpint(record(recs, 0)->bytes, ==, 4096);
    g_assert_cmpint(record(recs, 1)->op, ==, NULL_OP_READ);
    g_assert_cmpint(record(recs, 1)->offset, ==, 8192);
    g_assert_cmpint(record(recs, 1)->bytes, ==, 4096);
    g_assert_cmpint(record(recs, 2)->op, ==, NULL_OP_WRITE);
    g_assert_cmpint(record(recs, 2)->offset, ==, 0);
    g_assert_cmpint(record(recs, 2)->bytes, ==, 12288);

    /* Inside one block: a single read of that block. */
    g_array_set_size(recs, 0);
    g_assert_cmpint(test_pwrite(bs, 5000, 10, buf), ==, 0);
    g_assert_cmpuint(recs->len, ==, 2);
    g_assert_cmpint(record(recs, 0)->offset, ==, 4096);
    g_assert_cmpint(record(recs, 0)->bytes, ==, 4096);
    g_assert_cmpint(record(recs, 1)->offset, ==, 4096);
    null_get_stats(bs, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

/* A raw file whose driver is told to need 4 KiB alignment. */
static BlockDriverState *open_aligned_raw(const char *dir, int64_t size,
                                          char **path)
{
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;
    int fd;

    *path = g_build_filename(dir, "aligned.raw", NULL);
    fd = open(*path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    g_hash_table_insert(opts, "align", "4096");
    bs = bdrv_open(*path, "raw", BDRV_O_RDWR, opts, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(bdrv_get_request_alignment(bs), ==, 4096);
    return bs;
}

static void read_file(const char *path, uint8_t *buf, int64_t size)
{
    g_autofree char *data = NULL;
    gsize len;

    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    g_assert_cmpuint(len, ==, size);
    memcpy(buf, data, size);
}

static void test_align_rmw_bytes(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = NULL;
    const int64_t size = 64 * KiB + 1000;   /* not a multiple of 4 KiB */
    g_autofree uint8_t *model = g_malloc0(size);
    g_autofree uint8_t *file = g_malloc(size);
    g_autofree uint8_t *buf = g_malloc(size);
    BlockDriverState *bs = open_aligned_raw(dir, size, &path);
    GRand *rand = g_rand_new_with_seed(42);

    for (int i = 0; i < 200; i++) {
        int64_t off = g_rand_int_range(rand, 0, size);
        int64_t len = g_rand_int_range(rand, 1, MIN(size - off, 20000) + 1);

        test_fill_pattern(buf, off, len, i);
        g_assert_cmpint(test_pwrite(bs, off, len, buf + 1), ==, 0)
            ;
        /* +1: an unaligned buffer must be bounced, not rejected. */
        memcpy(model + off, buf + 1, len);
        if (i % 7 == 0) {
            int64_t zoff = g_rand_int_range(rand, 0, size);
            int64_t zlen = g_rand_int_range(rand, 1, size - zoff + 1);

            g_assert_cmpint(test_pwrite_zeroes(bs, zoff, zlen, 0), ==, 0);
            memset(model + zoff, 0, zlen);
        }
    }
    read_file(path, file, size);
    g_assert_cmpmem(file, size, model, size);

    /* And read back through io.c at odd offsets. */
    for (int i = 0; i < 100; i++) {
        int64_t off = g_rand_int_range(rand, 0, size);
        int64_t len = g_rand_int_range(rand, 1, size - off + 1);

        g_assert_cmpint(test_pread(bs, off, len, buf + 3), ==, 0);
        g_assert_cmpmem(buf + 3, len, model + off, len);
    }
    g_rand_free(rand);
    bdrv_unref(bs);
    test_scratch_free(dir);
}

typedef struct Pending {
    int done;
    int ret[2];
} Pending;

static void pending_cb0(void *opaque, int ret)
{
    Pending *p = opaque;
    p->ret[0] = ret;
    p->done++;
}

static void pending_cb1(void *opaque, int ret)
{
    Pending *p = opaque;
    p->ret[1] = ret;
    p->done++;
}

static void test_align_rmw_serialised(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = NULL;
    const int64_t size = 16 * KiB;
    BlockDriverState *bs = open_aligned_raw(dir, size, &path);
    uint8_t a[3000], b[3000], file[16 * KiB], model[16 * KiB] = { 0 };
    Pending p = { 0 };
    bool all;

    /* Two overlapping unaligned writes in flight at once: the second
     * must read-modify-write after the first has landed. */
    memset(a, 0x11, sizeof(a));
    memset(b, 0x22, sizeof(b));
    bdrv_aio_pwrite(bs, 1000, sizeof(a), a, 0, pending_cb0, &p);
    bdrv_aio_pwrite(bs, 3000, sizeof(b), b, 0, pending_cb1, &p);
    all = false;
    while (p.done < 2) {
        g_main_context_iteration(NULL, TRUE);
    }
    all = true;
    g_assert_true(all);
    g_assert_cmpint(p.ret[0], ==, 0);
    g_assert_cmpint(p.ret[1], ==, 0);
    memset(model + 1000, 0x11, sizeof(a));
    memset(model + 3000, 0x22, sizeof(b));
    read_file(path, file, size);
    g_assert_cmpmem(file, size, model, size);
    bdrv_unref(bs);
    test_scratch_free(dir);
}

static void test_eof(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=10000,record=on", NULL, BDRV_O_RDWR);
    uint8_t buf[8192];

    memset(buf, 0xff, sizeof(buf));
    g_assert_cmpint(test_pread(bs, 8000, 8192, buf), ==, 0);
    for (int i = 0; i < 8192; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    g_assert_cmpint(null_get_records(bs)->len, ==, 1);
    g_assert_cmpint(record(null_get_records(bs), 0)->bytes, ==, 2000);
    g_assert_cmpint(test_pwrite(bs, 8000, 2001, buf), ==, -ENOSPC);
    g_assert_cmpint(test_pwrite_zeroes(bs, 10000, 1, 0), ==, -ENOSPC);
    g_assert_cmpint(test_pwrite(bs, 8000, 2000, buf), ==, 0);
}

static void test_readonly(void)
{
    g_autoptr(BlockDriverState) bs = test_open("null:size=1M", NULL, 0);
    uint8_t buf[512] = { 0 };

    g_assert_cmpint(test_pwrite(bs, 0, 512, buf), ==, -EPERM);
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, 512, 0), ==, -EPERM);
    g_assert_cmpint(test_pdiscard(bs, 0, 512), ==, -EPERM);
}

static void test_zero_fallback(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=8M,record=on,zeroes=off", NULL, BDRV_O_RDWR);
    GArray *recs = null_get_records(bs);
    int64_t covered = 0;

    g_assert_cmpint(test_pwrite_zeroes(bs, 0, 3 * MiB, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    for (guint i = 0; i < recs->len; i++) {
        g_assert_cmpint(record(recs, i)->op, ==, NULL_OP_WRITE);
        g_assert_cmpint(record(recs, i)->offset, ==, covered);
        covered += record(recs, i)->bytes;
    }
    g_assert_cmpint(covered, ==, 3 * MiB);

    /* NO_FALLBACK: report -ENOTSUP, write nothing. */
    g_array_set_size(recs, 0);
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, -ENOTSUP);
    g_assert_cmpuint(recs->len, ==, 0);
}

static void test_zero_unaligned(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=1M,record=on,align=4096", NULL, BDRV_O_RDWR);
    GArray *recs = null_get_records(bs);
    NullStats st;
    int zeroes = 0;

    g_assert_cmpint(test_pwrite_zeroes(bs, 100, 20000, 0), ==, 0);
    /* Head block by RMW, aligned middle zeroed, tail block by RMW. */
    for (guint i = 0; i < recs->len; i++) {
        NullRecord *r = record(recs, i);

        if (r->op == NULL_OP_ZERO) {
            zeroes++;
            g_assert_cmpint(r->offset, ==, 4096);
            g_assert_cmpint(r->bytes, ==, 12288);
        }
    }
    g_assert_cmpint(zeroes, ==, 1);
    g_assert_cmpint(record(recs, recs->len - 1)->op, ==, NULL_OP_WRITE);
    g_assert_cmpint(record(recs, recs->len - 1)->offset, ==, 16384);
    null_get_stats(bs, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

static void test_discard_shrinks(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=1M,record=on,align=4096", NULL, BDRV_O_RDWR);
    GArray *recs = null_get_records(bs);

    g_assert_cmpint(test_pdiscard(bs, 100, 4000), ==, 0);
    g_assert_cmpuint(recs->len, ==, 0);
    g_assert_cmpint(test_pdiscard(bs, 100, 20000), ==, 0);
    g_assert_cmpuint(recs->len, ==, 1);
    g_assert_cmpint(record(recs, 0)->offset, ==, 4096);
    g_assert_cmpint(record(recs, 0)->bytes, ==, 12288);
}

/*
 * Write-zeroes and discard move no data: without a driver limit a range
 * of any length is one driver request (a 64 TiB thin disk's zero extent
 * costs one call, not 65536 of io.c's read and write cap).
 */
static void test_no_data_unsplit(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=64T,record=on,align=4096", NULL, BDRV_O_RDWR);
    GArray *recs = null_get_records(bs);
    NullStats st;

    g_assert_cmpint(test_pwrite_zeroes(bs, 4096, 64 * TiB - 8192,
                                       BDRV_REQ_MAY_UNMAP), ==, 0);
    g_assert_cmpuint(recs->len, ==, 1);
    g_assert_cmpint(record(recs, 0)->op, ==, NULL_OP_ZERO);
    g_assert_cmpint(record(recs, 0)->offset, ==, 4096);
    g_assert_cmpint(record(recs, 0)->bytes, ==, 64 * TiB - 8192);
    g_assert_cmpint(test_pdiscard(bs, 0, 64 * TiB), ==, 0);
    g_assert_cmpuint(recs->len, ==, 2);
    g_assert_cmpint(record(recs, 1)->op, ==, NULL_OP_DISCARD);
    g_assert_cmpint(record(recs, 1)->bytes, ==, 64 * TiB);
    null_get_stats(bs, &st);
    g_assert_cmpuint(st.misaligned, ==, 0);
}

/*
 * A driver that zeroes and discards at most 1 MiB per call, in memory
 * (16 MiB, filled with 0xff at open), answers every call from an idle
 * source, counts the calls in flight, and cannot zero (-ENOTSUP) the
 * fragment at fail_at: the fragments of a long write-zeroes after the
 * first go out a few at a time, and the fallback writes zero data.
 */
#define FAN_SIZE    (16 * MiB)

typedef struct FanState {
    uint8_t *mem;
    int64_t fail_at;            /* -1: none */
    int in_flight, max_in_flight;
    int zeroes, discards, writes;
} FanState;

typedef struct FanDone {
    BdrvRequest *req;
    int ret;
} FanDone;

static gboolean fan_complete(gpointer data)
{
    FanDone *d = data;
    FanState *s = d->req->bs->opaque;

    s->in_flight--;
    bdrv_req_complete(d->req, d->ret);
    g_free(d);
    return G_SOURCE_REMOVE;
}

static void fan_submit(BlockDriverState *bs, BdrvRequest *req)
{
    FanState *s = bs->opaque;
    FanDone *d = g_new0(FanDone, 1);

    d->req = req;
    s->in_flight++;
    s->max_in_flight = MAX(s->max_in_flight, s->in_flight);
    switch (req->op) {
    case BDRV_OP_ZERO:
        g_assert_cmpint(req->bytes, <=, MiB);
        s->zeroes++;
        if (req->offset == s->fail_at) {
            d->ret = -ENOTSUP;
        } else {
            memset(s->mem + req->offset, 0, req->bytes);
        }
        break;
    case BDRV_OP_DISCARD:
        g_assert_cmpint(req->bytes, <=, MiB);
        s->discards++;
        break;
    case BDRV_OP_WRITE:
        s->writes++;
        memcpy(s->mem + req->offset, req->buf, req->bytes);
        break;
    case BDRV_OP_READ:
        memcpy(req->buf, s->mem + req->offset, req->bytes);
        break;
    default:
        break;
    }
    g_idle_add(fan_complete, d);
}

static int64_t fan_get_length(BlockDriverState *bs)
{
    return FAN_SIZE;
}

static void fan_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    bl->request_alignment = 1;
    bl->max_pwrite_zeroes = MiB;
    bl->max_pdiscard = MiB;
}

static void fan_close(BlockDriverState *bs)
{
    g_free(((FanState *)bs->opaque)->mem);
}

static bool fan_init(BlockDriverState *bs, void *data, GError **errp)
{
    FanState *s = bs->opaque;

    s->mem = g_malloc(FAN_SIZE);
    memset(s->mem, 0xff, FAN_SIZE);
    s->fail_at = *(int64_t *)data;
    return true;
}

static const BlockDriver fan_driver = {
    .format_name = "fan",
    .instance_size = sizeof(FanState),
    .get_length = fan_get_length,
    .refresh_limits = fan_refresh_limits,
    .close = fan_close,
    .aio_submit = fan_submit,
};

static void fan_assert_zero(FanState *s, int64_t start, int64_t end)
{
    g_assert_cmpint(s->mem[start - 1], ==, 0xff);
    g_assert_true(buffer_is_zero(s->mem + start, end - start));
    g_assert_cmpint(s->mem[end], ==, 0xff);
}

static void test_no_data_fan_out(void)
{
    int64_t none = -1, fail_at = 5 * MiB + 4096;
    g_autoptr(BlockDriverState) bs =
        bdrv_new_internal(&fan_driver, "fan", BDRV_O_RDWR, fan_init, &none,
                          NULL);
    g_autoptr(BlockDriverState) bs2 =
        bdrv_new_internal(&fan_driver, "fan", BDRV_O_RDWR, fan_init,
                          &fail_at, NULL);
    FanState *s = bs->opaque, *s2 = bs2->opaque;

    /* 10 fragments: the first alone, then at most 4 at a time. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 4096, 10 * MiB, 0), ==, 0);
    g_assert_cmpint(s->zeroes, ==, 10);
    g_assert_cmpint(s->max_in_flight, ==, 4);
    g_assert_cmpint(s->writes, ==, 0);
    fan_assert_zero(s, 4096, 10 * MiB + 4096);
    g_assert_cmpint(test_pdiscard(bs, 0, 15 * MiB), ==, 0);
    g_assert_cmpint(s->discards, ==, 15);
    g_assert_cmpint(bdrv_get_in_flight(bs), ==, 0);

    /* The fragment at 5 MiB + 4 KiB cannot be zeroed: zero data is
     * written from there to the end (1 MiB at a time), and the request
     * succeeds. */
    g_assert_cmpint(test_pwrite_zeroes(bs2, 4096, 10 * MiB, 0), ==, 0);
    g_assert_cmpint(s2->writes, ==, 5);
    fan_assert_zero(s2, 4096, 10 * MiB + 4096);
    /* Without a fallback, the request fails. */
    memset(s2->mem, 0xff, FAN_SIZE);
    g_assert_cmpint(test_pwrite_zeroes(bs2, 4096, 10 * MiB,
                                       BDRV_REQ_NO_FALLBACK), ==, -ENOTSUP);
    g_assert_cmpint(bdrv_get_in_flight(bs2), ==, 0);
}

static void test_block_status_clamp(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=10M,extents=alternate:1M", NULL, 0);
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    int64_t pos = 512 * KiB;

    g_assert_cmpint(test_block_status(bs, pos, 100 * MiB, ext), ==, 0);
    g_assert_cmpuint(ext->len, ==, 10);
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, pos);
        g_assert_cmpint(!!(e->flags & BDRV_BLOCK_DATA), ==,
                        (e->offset / MiB) % 2 == 0);
        pos += e->length;
    }
    g_assert_cmpint(pos, ==, 10 * MiB);
}

static void test_in_flight_count(void)
{
    g_autoptr(BlockDriverState) bs =
        test_open("null:size=1M,latency-ns=1000000", NULL, BDRV_O_RDWR);
    uint8_t buf[4096];
    Pending p = { 0 };

    bdrv_aio_pread(bs, 0, 4096, buf, 0, pending_cb0, &p);
    bdrv_aio_pread(bs, 4096, 4096, buf, 0, pending_cb1, &p);
    g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 2);
    while (p.done < 2) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_assert_cmpuint(bdrv_get_in_flight(bs), ==, 0);
}

/* ---- driver tables (block.c's bdrv_driver_check) ---- */

static void dummy_close(BlockDriverState *bs)
{
}

static int64_t dummy_get_length(BlockDriverState *bs)
{
    return 0;
}

static bool dummy_open(BlockDriverState *bs, const char *spec, int flags,
                       GHashTable *options, GError **errp)
{
    return true;
}

static void dummy_submit(BlockDriverState *bs, BdrvRequest *req)
{
}

static int dummy_pread(BlockDriverState *bs, int64_t offset, int64_t bytes,
                       void *buf)
{
    return 0;
}

static int dummy_pwrite(BlockDriverState *bs, int64_t offset, int64_t bytes,
                        const void *buf, BdrvRequestFlags flags)
{
    return 0;
}

static int dummy_flush(BlockDriverState *bs)
{
    return 0;
}

static bool dummy_can(BlockDriverState *bs)
{
    return true;
}

static int dummy_map(BlockDriverState *bs, int64_t offset, int64_t bytes,
                     BdrvMapping *map)
{
    return -ENOTSUP;
}

static void dummy_unmap(BlockDriverState *bs, BdrvMapping *map)
{
}

static bool dummy_create(const char *filename, int64_t size,
                         GHashTable *options, GError **errp)
{
    return true;
}

static const char *const dummy_opts[] = { "x", NULL };

#define DUMMY_BASE \
    .format_name = "dummy", .open = dummy_open, .close = dummy_close, \
    .get_length = dummy_get_length

/* Every registered driver passes, has open(), and a name of its own. */
static void test_driver_registry(void)
{
    size_t n;
    const BlockDriver *const *drv = bdrv_get_drivers(&n);
    g_autoptr(GHashTable) names = g_hash_table_new(g_str_hash, g_str_equal);

    g_assert_cmpuint(n, >=, 5);
    for (size_t i = 0; i < n; i++) {
        g_autoptr(GError) err = NULL;

        g_assert_true(bdrv_driver_check(drv[i], &err));
        g_assert_no_error(err);
        g_assert_nonnull(drv[i]->open);
        g_assert_true(g_hash_table_add(names, (char *)drv[i]->format_name));
    }
    g_assert_true(g_hash_table_contains(names, "raw"));
    g_assert_true(g_hash_table_contains(names, "nbd"));
}

typedef struct BrokenTable {
    const char *what;           /* a word the error must contain */
    BlockDriver drv;
} BrokenTable;

/* Deliberately broken tables fail, each with a message that says why. */
static void test_driver_broken(void)
{
    static const BlockDriver good[] = {
        { DUMMY_BASE, .aio_submit = dummy_submit, .request_size = 64 },
        { DUMMY_BASE, .pread = dummy_pread, .pwrite = dummy_pwrite,
          .flush = dummy_flush, .can_map = dummy_can, .map = dummy_map,
          .unmap = dummy_unmap, .can_copy = dummy_can },
    };
    static const BrokenTable broken[] = {
        { "exactly one", { DUMMY_BASE } },
        { "exactly one", { DUMMY_BASE, .aio_submit = dummy_submit,
                           .pread = dummy_pread, .pwrite = dummy_pwrite } },
        { "both pread and pwrite", { DUMMY_BASE, .pread = dummy_pread } },
        { "both pread and pwrite", { DUMMY_BASE, .pwrite = dummy_pwrite } },
        { "blocking shape", { DUMMY_BASE, .aio_submit = dummy_submit,
                              .flush = dummy_flush } },
        { "blocking shape", { DUMMY_BASE, .aio_submit = dummy_submit,
                              .can_copy = dummy_can } },
        { "request_size", { DUMMY_BASE, .pread = dummy_pread,
                            .pwrite = dummy_pwrite, .request_size = 8 } },
        { "go together", { DUMMY_BASE, .pread = dummy_pread,
                           .pwrite = dummy_pwrite, .can_map = dummy_can } },
        { "go together", { DUMMY_BASE, .pread = dummy_pread,
                           .pwrite = dummy_pwrite, .map = dummy_map,
                           .unmap = dummy_unmap } },
        { "required", { .format_name = "dummy", .close = dummy_close,
                        .aio_submit = dummy_submit } },
        { "required", { .get_length = dummy_get_length,
                        .close = dummy_close, .aio_submit = dummy_submit } },
        { "supported_write_flags", { DUMMY_BASE, .aio_submit = dummy_submit,
                                     .supported_write_flags =
                                         BDRV_REQ_FUA } },
        { "create_opts", { DUMMY_BASE, .aio_submit = dummy_submit,
                           .create_opts = dummy_opts } },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        g_autoptr(GError) err = NULL;

        g_assert_true(bdrv_driver_check(&good[i], &err));
        g_assert_no_error(err);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(broken); i++) {
        g_autoptr(GError) err = NULL;

        g_assert_false(bdrv_driver_check(&broken[i].drv, &err));
        g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
        g_assert_nonnull(strstr(err->message, broken[i].what));
        g_assert_true(g_str_has_prefix(err->message, "driver '"));
    }
    /* A create() makes create_opts fine. */
    {
        BlockDriver drv = broken[G_N_ELEMENTS(broken) - 1].drv;

        drv.create = dummy_create;
        g_assert_true(bdrv_driver_check(&drv, NULL));
    }
}

static bool dummy_init(BlockDriverState *bs, void *data, GError **errp)
{
    return true;
}

/* A node of a broken table is never made: the program stops, loudly. */
static void test_driver_broken_aborts(void)
{
    static const BlockDriver both = {
        DUMMY_BASE, .aio_submit = dummy_submit, .pread = dummy_pread,
        .pwrite = dummy_pwrite,
    };

    if (g_test_subprocess()) {
        bdrv_new_internal(&both, "both", 0, dummy_init, NULL, NULL);
        return;
    }
    g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
    g_test_trap_assert_failed();
    g_test_trap_assert_stderr("*driver 'dummy': needs exactly one*");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/io/split/max-io", test_split_max_io);
    g_test_add_func("/io/split/max-transfer", test_split_max_transfer);
    g_test_add_func("/io/align/read", test_align_read);
    g_test_add_func("/io/align/write-records", test_align_write_records);
    g_test_add_func("/io/align/rmw-bytes", test_align_rmw_bytes);
    g_test_add_func("/io/align/rmw-serialised", test_align_rmw_serialised);
    g_test_add_func("/io/eof", test_eof);
    g_test_add_func("/io/readonly", test_readonly);
    g_test_add_func("/io/zero/fallback", test_zero_fallback);
    g_test_add_func("/io/zero/unaligned", test_zero_unaligned);
    g_test_add_func("/io/discard/shrinks", test_discard_shrinks);
    g_test_add_func("/io/no-data-unsplit", test_no_data_unsplit);
    g_test_add_func("/io/no-data-fan-out", test_no_data_fan_out);
    g_test_add_func("/io/block-status/clamp", test_block_status_clamp);
    g_test_add_func("/io/in-flight", test_in_flight_count);
    g_test_add_func("/io/driver/registry", test_driver_registry);
    g_test_add_func("/io/driver/broken", test_driver_broken);
    g_test_add_func("/io/driver/broken-aborts", test_driver_broken_aborts);
    return g_test_run();
}
