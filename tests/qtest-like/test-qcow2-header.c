/*
 * qcow2-lite: hostile and unsupported images (qcow2-lite.md §2 refusals
 * and §5 corruptions), each a regression case.  Images are made by the
 * driver's own create (the layout qemu-img uses: header, refcount table at
 * 64K, refcount block at 128K, L1 at 192K, first L2 at 256K, data from
 * 320K with 64 KiB clusters), then bytes are poked.  A refused open must
 * name the problem and leave the file unchanged; data-path corruptions
 * fail the request with EIO and, read-write, set the corrupt bit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>

#include "block/qcow2-int.h"
#include "block/qcow2.h"
#include "tests/qtest-like/qcow2-fixture.h"
#include "tests/qtest-like/test-util.h"

#define CS          (64 * Q_KIB)
#define RT_OFF      (1 * CS)
#define RB_OFF      (2 * CS)
#define L1_OFF      (3 * CS)
#define L2_OFF      (4 * CS)
#define DATA_OFF    (5 * CS)

typedef struct SyncCompletion {
    bool done;
    int ret;
} SyncCompletion;

static void sync_completion_cb(void *opaque, int ret)
{
    SyncCompletion *c = opaque;

    c->ret = ret;
    c->done = true;
}

typedef struct Poke {
    const char *what;
    int64_t offset;
    int width;              /* 1, 2, 4, 8 bytes */
    uint64_t value;
    int flags;              /* refused with these open flags */
    const char *msg;
} Poke;

static void poke_value(const char *path, const Poke *p)
{
    uint8_t b = p->value;

    switch (p->width) {
    case 1:
        q_poke(path, p->offset, &b, 1);
        break;
    case 2:
        q_poke_be16(path, p->offset, p->value);
        break;
    case 4:
        q_poke_be32(path, p->offset, p->value);
        break;
    default:
        q_poke_be64(path, p->offset, p->value);
        break;
    }
}

/* A 1 MiB image with 64 KiB of data at guest 0 (L2 at 256K, data at
 * 320K). */
static char *make_with_data(const char *dir, const char *name)
{
    char *path = q_make_image(dir, name, 1 * Q_MIB, 16, NULL, NULL, false);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    g_autofree uint8_t *buf = g_malloc(CS);

    test_fill_pattern(buf, 0, CS, 1);
    g_assert_cmpint(test_pwrite(bs, 0, CS, buf), ==, 0);
    bdrv_unref(bs);
    g_assert_cmphex(q_peek_be64(path, L1_OFF), ==,
                    L2_OFF | QCOW_OFLAG_COPIED);
    g_assert_cmphex(q_peek_be64(path, L2_OFF), ==,
                    DATA_OFF | QCOW_OFLAG_COPIED);
    return path;
}

/* The next write marks the image corrupt: the driver warns once. */
static void expect_corrupt_warning(void)
{
    g_test_expect_message("mirror-block", G_LOG_LEVEL_WARNING,
                          "*marking the image as corrupt*");
}

/* Header fields: each poke is refused (read-only too, unless flags say
 * read-write only) without touching the file. */
static void test_header_pokes(void)
{
    static const Poke pokes[] = {
        { "magic", 0, 4, 0x514649fa, 0, "bad magic" },
        { "version 1", 4, 4, 1, 0, "Unsupported qcow2 version 1" },
        { "version 4", 4, 4, 4, 0, "Unsupported qcow2 version 4" },
        { "cluster_bits 8", 20, 4, 8, 0, "Unsupported cluster size: 2^8" },
        { "cluster_bits 22", 20, 4, 22, 0, "Unsupported cluster size" },
        { "header_length 96", 100, 4, 96, 0, "header too short" },
        { "header_length > cs", 100, 4, 2 * CS, 0, "exceeds cluster size" },
        { "header_length 113", 100, 4, 113, 0, "not a multiple of 8" },
        { "refcount_order 7", 96, 4, 7, 0, "width too large" },
        { "l1_size huge", 36, 4, 0x7fffffff, 0, "L1 table too large" },
        { "l1_size too small", 24, 8, 1ULL << 40, 0, "L1 table is too small" },
        { "L1 unaligned", 40, 8, L1_OFF + 512, 0, "L1 table offset invalid" },
        { "L1 beyond EOF", 40, 8, 1ULL << 30, 0, "beyond the end of the file" },
        { "reftable beyond EOF", 48, 8, 1ULL << 30, 0, "beyond the end" },
        { "reftable unaligned", 48, 8, RT_OFF + 512, 0, "offset invalid" },
        { "reftable clusters 0", 56, 4, 0, 0, "does not contain" },
        { "reftable clusters huge", 56, 4, 0x100000, 0,
          "Reference count table too large" },
        { "reftable over L1", 48, 8, L1_OFF, 0, "overlaps" },
        { "crypt AES", 32, 4, 1, 0, "encryption (AES)" },
        { "crypt LUKS", 32, 4, 2, 0, "encryption (LUKS)" },
        { "crypt 3", 32, 4, 3, 0, "Unsupported qcow2 encryption method 3" },
        { "compression type 2", 104, 1, 2, 0, "compression type 2" },
        { "zstd without bit", 104, 1, 1, 0, "without the compression type" },
        { "compression bit, zlib", 72, 8, 1 << 3, 0, "bit is set" },
        { "extended L2", 72, 8, 1 << 4, 0, "extended L2 entries" },
        { "data file bit", 72, 8, 1 << 2, 0, "external data file" },
        { "unknown bit 5", 72, 8, 1 << 5, 0,
          "unknown incompatible feature bit 5" },
        { "dirty", 72, 8, 1, BDRV_O_RDWR, "marked dirty" },
        { "corrupt", 72, 8, 2, BDRV_O_RDWR, "marked corrupt" },
        { "bitmaps autoclear", 88, 8, 1, BDRV_O_RDWR, "dirty bitmaps" },
        { "snapshots huge", 60, 4, 70000, 0, "Snapshot table too large" },
        { "snapshots unaligned", 64, 8, 12345, 0,
          "Snapshot table offset invalid" },
        { "refcount order 3", 96, 4, 3, BDRV_O_RDWR, "16-bit refcounts" },
        { "version 2", 4, 4, 2, BDRV_O_RDWR, "version 2" },
        { "size 2^63-1", 24, 8, INT64_MAX, 0, "Image is too big" },
        { "extension overrun", 116, 4, 0xffffff00, 0,
          "Header extension too large" },
        { "reftable entry unaligned", RT_OFF, 8, RB_OFF + 512, 0,
          "unaligned" },
        { "refblock beyond EOF", RT_OFF + 8, 8, 1ULL << 30, 0,
          "beyond the end" },
        { "refblock = L1", RT_OFF + 8, 8, L1_OFF, 0, "Overlapping metadata" },
        { "L1 entry unaligned", L1_OFF, 8, 0x8000000000040200ULL, 0,
          "L2 table offset 0x40200 unaligned" },
        { "L1 entry beyond EOF", L1_OFF, 8, 0x8000000010000000ULL, 0,
          "beyond the end" },
        { "L1 entry = L1 table", L1_OFF, 8, 0x8000000000000000ULL | L1_OFF,
          0, "Overlapping metadata" },
        { "L1 entry = reftable", L1_OFF, 8, RT_OFF, 0,
          "Overlapping metadata" },
    };
    g_autofree char *dir = test_scratch_new();

    for (size_t i = 0; i < G_N_ELEMENTS(pokes); i++) {
        const Poke *p = &pokes[i];
        g_autofree char *path = make_with_data(dir, "img.qcow2");

        g_test_message("poke: %s", p->what);
        poke_value(path, p);
        q_open_refused(path, p->flags, p->msg);
        if (p->flags & BDRV_O_RDWR) {
            /* Readable as long as nothing is written. */
            BlockDriverState *bs = q_open(path, 0);
            uint8_t buf[512];

            g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, 0);
            bdrv_unref(bs);
        }
        g_unlink(path);
    }
    {
        /* zstd: the type byte and the bit together */
        g_autofree char *path = make_with_data(dir, "z.qcow2");

        q_poke_be64(path, 72, 1 << 3);
        q_poke(path, 104, "\x01", 1);
        q_open_refused(path, 0, "zstd compression");
    }
    {
        /* Internal snapshots: readable, never written. */
        g_autofree char *path = make_with_data(dir, "s.qcow2");
        BlockDriverState *bs;

        q_poke_be32(path, 60, 1);
        q_poke_be64(path, 64, DATA_OFF);
        q_open_refused(path, BDRV_O_RDWR, "internal snapshots");
        bs = q_open(path, 0);
        bdrv_unref(bs);
    }
    test_scratch_free(g_steal_pointer(&dir));
}

/* Pure parsing: truncated headers never read out of bounds. */
static void test_header_truncated(void)
{
    uint8_t buf[CS] = { 0 };
    Qcow2Header h = { .cluster_bits = 16, .size = Q_MIB, .l1_size = 1,
                      .l1_table_offset = L1_OFF,
                      .refcount_table_offset = RT_OFF,
                      .refcount_table_clusters = 1 };
    g_autoptr(GError) err = NULL;

    g_assert_true(qcow2_header_build(buf, CS, &h, &err));
    for (size_t len = 0; len < 600; len++) {
        Qcow2Header out;
        g_autoptr(GError) e = NULL;
        bool ok = qcow2_header_parse(buf, len, &out, &e);

        /* A complete header with its feature table (8 + 384 bytes at
         * 112) parses; anything cut short fails cleanly. */
        if (len < QCOW2_V3_HEADER_LENGTH) {
            g_assert_false(ok);
        }
        if (len >= QCOW2_V3_HEADER_LENGTH + 8 + 384) {
            g_assert_true(ok);
        }
        if (ok) {
            qcow2_header_clear(&out);
        } else {
            g_assert_nonnull(e);
        }
    }
}

/* Backing file problems: missing, loops, unknown formats, bad names. */
static void test_backing(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *base = q_make_raw(dir, "base.raw", Q_MIB, 3);
    g_autofree char *ov = q_make_image(dir, "loop.qcw", Q_MIB, 16,
                                       "base.raw", "raw", false);
    g_autofree char *a = NULL, *b = NULL;
    int64_t name_off = q_peek_be64(ov, 8);
    BlockDriverState *bs;

    /* Self reference: the name is poked to the image's own. */
    q_poke(ov, name_off, "loop.qcw", 8);
    q_open_refused(ov, 0, "loop");
    q_poke_be64(ov, 8, 2 * CS);
    q_open_refused(ov, 0, "Invalid backing file offset");
    q_poke_be64(ov, 8, name_off);
    q_poke_be32(ov, 16, 2000);
    q_open_refused(ov, 0, "Backing file name too long");
    q_poke_be32(ov, 16, 8);
    q_poke(ov, name_off, "nope.raw", 8);
    q_open_refused(ov, 0, "Could not open backing file");
    q_poke(ov, name_off, "base\0raw", 8);
    q_open_refused(ov, 0, "NUL");
    q_poke(ov, name_off, "base.raw", 8);
    /* The backing format extension: unknown format, too long. */
    q_poke(ov, QCOW2_V3_HEADER_LENGTH + 8, "vmd", 3);
    q_open_refused(ov, 0, "backing format 'vmd' is not supported");
    q_poke(ov, QCOW2_V3_HEADER_LENGTH + 8, "raw", 3);
    q_poke_be32(ov, QCOW2_V3_HEADER_LENGTH + 4, 16);
    q_open_refused(ov, 0, "Invalid backing format extension");
    q_poke_be32(ov, QCOW2_V3_HEADER_LENGTH + 4, 3);
    bs = q_open(ov, BDRV_O_RDWR);
    bdrv_unref(bs);

    /* a -> b -> a */
    b = q_make_image(dir, "b.qcow2", Q_MIB, 16, "base.raw", "raw", false);
    a = q_make_image(dir, "a.qcow2", Q_MIB, 16, "b.qcow2", "qcow2", false);
    g_unlink(b);
    g_free(b);
    b = q_make_image(dir, "b.qcow2", Q_MIB, 16, "base.raw", "raw", false);
    q_poke(b, q_peek_be64(b, 8), "a.qcow2", 7);
    q_poke_be32(b, 16, 7);
    q_poke(b, QCOW2_V3_HEADER_LENGTH + 8, "qcow2", 5);
    q_poke_be32(b, QCOW2_V3_HEADER_LENGTH + 4, 5);
    q_open_refused(a, 0, "loop");

    /* 16 backing files are fine, 17 are too many. */
    {
        g_autofree char *prev = g_strdup("base.raw");
        const char *fmt = "raw";

        for (int i = 1; i <= 17; i++) {
            g_autofree char *name = g_strdup_printf("c%02d.qcow2", i);
            g_autofree char *path = q_make_image(dir, name, Q_MIB, 16, prev,
                                                 fmt, false);
            if (i <= 16) {
                bdrv_unref(q_open(path, 0));
            } else {
                q_open_refused(path, 0, "deeper than 16");
            }
            g_free(prev);
            prev = g_steal_pointer(&name);
            fmt = "qcow2";
        }
    }
    test_scratch_free(g_steal_pointer(&dir));
}

/* Corrupt entries met on the data path: EIO; read-write also sets the
 * corrupt bit and refuses later writes. */
static void test_data_path(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree uint8_t *buf = g_malloc(CS);
    g_autofree uint8_t *want = g_malloc(CS);
    BlockDriverState *bs;
    char *path;

    test_fill_pattern(want, 0, CS, 1);

    /* Unaligned data cluster: read EIO; write EIO + corrupt bit. */
    path = make_with_data(dir, "u.qcow2");
    q_poke_be64(path, L2_OFF, 0x8000000000050200ULL);
    bs = q_open(path, 0);
    g_assert_cmpint(test_pread(bs, 0, 512, buf), ==, -EIO);
    bdrv_unref(bs);
    bs = q_open(path, BDRV_O_RDWR);
    expect_corrupt_warning();
    g_assert_cmpint(test_pwrite(bs, 0, 512, buf), ==, -EIO);
    g_assert_cmpint(test_pwrite(bs, 2 * CS, 512, buf), ==, -EIO);
    g_test_assert_expected_messages();
    bdrv_unref(bs);
    g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=, 0);
    q_open_refused(path, BDRV_O_RDWR, "marked corrupt");
    g_unlink(path);
    g_free(path);

    /* Data cluster pointing at the refcount table: reads what is there;
     * a write is stopped by the overlap check. */
    path = make_with_data(dir, "o.qcow2");
    q_poke_be64(path, L2_OFF, QCOW_OFLAG_COPIED | RT_OFF);
    bs = q_open(path, BDRV_O_RDWR);
    g_assert_cmpint(test_pread(bs, 0, 512, buf), ==, 0);
    g_assert_cmphex(qcow2_be64(buf), ==, RB_OFF);
    expect_corrupt_warning();
    g_assert_cmpint(test_pwrite(bs, 0, 512, want), ==, -EIO);
    g_test_assert_expected_messages();
    bdrv_unref(bs);
    g_assert_cmphex(q_peek_be64(path, RT_OFF), ==, RB_OFF);
    g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=, 0);
    g_unlink(path);
    g_free(path);

    /* Beyond EOF, compressed beyond EOF or into the header: EIO. */
    path = make_with_data(dir, "e.qcow2");
    q_poke_be64(path, L2_OFF + 8, QCOW_OFLAG_COPIED | 0x10000000);
    q_poke_be64(path, L2_OFF + 16, QCOW_OFLAG_COMPRESSED | 0x10000000);
    q_poke_be64(path, L2_OFF + 24, QCOW_OFLAG_COMPRESSED | 0x100);
    /* Reserved bits are ignored when reading. */
    q_poke_be64(path, L2_OFF, QCOW_OFLAG_COPIED | DATA_OFF | 0x2);
    bs = q_open(path, 0);
    g_assert_cmpint(test_pread(bs, 0, CS, buf), ==, 0);
    g_assert_cmpmem(buf, CS, want, CS);
    g_assert_cmpint(test_pread(bs, CS, 512, buf), ==, -EIO);
    g_assert_cmpint(test_pread(bs, 2 * CS, 512, buf), ==, -EIO);
    g_assert_cmpint(test_pread(bs, 3 * CS, 512, buf), ==, -EIO);
    bdrv_unref(bs);
    g_unlink(path);
    g_free(path);

    /* A zero flag in a version 2 image. */
    path = make_with_data(dir, "v2.qcow2");
    q_poke_be32(path, 4, 2);
    q_poke_be64(path, L2_OFF + 8, QCOW_OFLAG_ZERO);
    bs = q_open(path, 0);
    g_assert_cmpint(test_pread(bs, 0, CS, buf), ==, 0);
    g_assert_cmpmem(buf, CS, want, CS);
    g_assert_cmpint(test_pread(bs, CS, 512, buf), ==, -EIO);
    bdrv_unref(bs);
    g_unlink(path);
    g_free(path);

    /* COPIED with refcount 2: written by copying, never in place. */
    path = make_with_data(dir, "c.qcow2");
    q_poke_be16(path, RB_OFF + 5 * 2, 2);
    bs = q_open(path, BDRV_O_RDWR);
    memset(buf, 0x5a, 4096);
    g_assert_cmpint(test_pwrite(bs, 4096, 4096, buf), ==, 0);
    bdrv_unref(bs);
    g_assert_cmphex(q_peek_be64(path, L2_OFF) & L2E_OFFSET_MASK, !=,
                    DATA_OFF);
    g_assert_cmpint(q_peek_be16(path, RB_OFF + 5 * 2), ==, 1);
    bs = q_open(path, 0);
    g_assert_cmpint(test_pread(bs, 0, CS, buf), ==, 0);
    memset(want + 4096, 0x5a, 4096);
    g_assert_cmpmem(buf, CS, want, CS);
    bdrv_unref(bs);
    g_unlink(path);
    g_free(path);

    test_scratch_free(g_steal_pointer(&dir));
}

/*
 * Refcounts below the references (issue 27.3): a zeroed refcount block or
 * refcount table entry made the allocator hand out the cluster that guest
 * cluster 0 maps, and a write elsewhere overwrote its data.  Now the write
 * fails with EIO, the corrupt bit is set, and guest cluster 0 reads as
 * before.  A cluster that two L2 entries map with refcount 1 is not
 * written in place.
 */
static void test_write_guard(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree uint8_t *buf = g_malloc(CS);
    g_autofree uint8_t *want = g_malloc(CS);
    g_autofree uint8_t *zero = g_malloc0(CS);
    static const struct {
        const char *what;
        int64_t offset;
        int64_t len;
    } damage[] = {
        { "zeroed refcount block", RB_OFF, CS },
        { "refcount table entry 0", RT_OFF, 8 },
    };

    test_fill_pattern(want, 0, CS, 1);
    for (size_t d = 0; d < G_N_ELEMENTS(damage); d++) {
        g_autofree char *path = make_with_data(dir, "z.qcow2");
        BlockDriverState *bs;

        g_test_message("%s", damage[d].what);
        q_poke(path, damage[d].offset, zero, damage[d].len);
        bs = q_open(path, BDRV_O_RDWR);
        memset(buf, 0x5a, CS);
        expect_corrupt_warning();
        g_assert_cmpint(test_pwrite(bs, 1 * CS, CS, buf), ==, -EIO);
        g_assert_cmpint(test_pwrite(bs, 2 * CS, CS, buf), ==, -EIO);
        g_test_assert_expected_messages();
        bdrv_unref(bs);
        g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=,
                        0);
        g_assert_cmphex(q_peek_be64(path, L1_OFF), ==,
                        L2_OFF | QCOW_OFLAG_COPIED);
        g_assert_cmphex(q_peek_be64(path, L2_OFF + 8), ==, 0);
        bs = q_open(path, 0);
        g_assert_cmpint(test_pread(bs, 0, CS, buf), ==, 0);
        g_assert_cmpmem(buf, CS, want, CS);
        bdrv_unref(bs);
        q_open_refused(path, BDRV_O_RDWR, "marked corrupt");
        g_unlink(path);
    }

    /* 512-byte clusters and 20 MiB of data: the guarded clusters span
     * several chunks of the guard's sparse bitmap.  The whole refcount
     * table is zeroed. */
    {
        g_autofree char *path = q_make_image(dir, "s.qcow2", 32 * Q_MIB, 9,
                                             NULL, NULL, false);
        g_autofree uint8_t *big = g_malloc(20 * Q_MIB);
        g_autofree uint8_t *got = g_malloc(20 * Q_MIB);
        g_autofree uint8_t *rtz = NULL;
        BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
        uint64_t rt, rtc;

        test_fill_pattern(big, 0, 20 * Q_MIB, 2);
        g_assert_cmpint(test_pwrite(bs, 0, 20 * Q_MIB, big), ==, 0);
        bdrv_unref(bs);
        rt = q_peek_be64(path, 48);
        rtc = q_peek_be64(path, 56) >> 32;
        rtz = g_malloc0(rtc * 512);
        q_poke(path, rt, rtz, rtc * 512);
        bs = q_open(path, BDRV_O_RDWR);
        memset(buf, 0x5a, 512);
        expect_corrupt_warning();
        g_assert_cmpint(test_pwrite(bs, 24 * Q_MIB, 512, buf), ==, -EIO);
        g_test_assert_expected_messages();
        bdrv_unref(bs);
        g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=,
                        0);
        bs = q_open(path, 0);
        g_assert_cmpint(test_pread(bs, 0, 20 * Q_MIB, got), ==, 0);
        g_assert_true(memcmp(got, big, 20 * Q_MIB) == 0);
        g_assert_cmpint(test_pread(bs, 24 * Q_MIB, 512, got), ==, 0);
        g_assert_true(buffer_is_zero(got, 512));
        bdrv_unref(bs);
        g_unlink(path);
    }

    /* A dirty L2 table is only written back where the metadata map has
     * an L2 table (white box: no image can make the two disagree). */
    {
        g_autofree char *path = make_with_data(dir, "m.qcow2");
        BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
        BDRVQcow2State *st = ((Qcow2Node *)bs->opaque)->s;

        memset(buf, 0x5a, 512);
        g_assert_cmpint(test_pwrite(bs, CS, 512, buf), ==, 0);
        g_hash_table_remove(st->meta, GSIZE_TO_POINTER(L2_OFF / CS));
        expect_corrupt_warning();
        g_assert_cmpint(test_flush(bs), ==, -EIO);
        g_test_assert_expected_messages();
        bdrv_unref(bs);
        g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=,
                        0);
        g_assert_cmphex(q_peek_be64(path, L2_OFF + 8), ==, 0);
        g_unlink(path);
    }

    /* Guest clusters 0 and 1 both map DATA_OFF, whose refcount is 1. */
    {
        g_autofree char *path = make_with_data(dir, "d.qcow2");
        BlockDriverState *bs;

        q_poke_be64(path, L2_OFF + 8, DATA_OFF | QCOW_OFLAG_COPIED);
        bs = q_open(path, BDRV_O_RDWR);
        memset(buf, 0x5a, 512);
        expect_corrupt_warning();
        g_assert_cmpint(test_pwrite(bs, CS, 512, buf), ==, -EIO);
        g_test_assert_expected_messages();
        bdrv_unref(bs);
        g_assert_cmphex(q_peek_be64(path, 72) & QCOW2_INCOMPAT_CORRUPT, !=,
                        0);
        bs = q_open(path, 0);
        g_assert_cmpint(test_pread(bs, 0, CS, buf), ==, 0);
        g_assert_cmpmem(buf, CS, want, CS);
        bdrv_unref(bs);
        g_unlink(path);
    }
    test_scratch_free(g_steal_pointer(&dir));
}

/* The largest sector count of a compressed descriptor reads fine. */
static void test_compressed_max_sectors(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = q_make_image(dir, "c.qcow2", Q_MIB, 16, NULL,
                                         NULL, false);
    g_autofree uint8_t *buf = g_malloc0(CS);
    g_autofree uint8_t *got = g_malloc(CS);
    BlockDriverState *bs = q_open(path, BDRV_O_RDWR);
    SyncCompletion c = { 0 };
    uint64_t e;

    memset(buf, 0xab, CS);
    bdrv_aio_pwrite(bs, 0, CS, buf, BDRV_REQ_WRITE_COMPRESSED,
                    sync_completion_cb, &c);
    test_run_until(&c.done, 30);
    g_assert_cmpint(c.ret, ==, 0);
    bdrv_unref(bs);
    e = q_peek_be64(path, L2_OFF);
    g_assert_cmphex(e & QCOW_OFLAG_COMPRESSED, !=, 0);
    q_poke_be64(path, L2_OFF, e | (255ULL << 54));
    bs = q_open(path, 0);
    g_assert_cmpint(test_pread(bs, 0, CS, got), ==, 0);
    g_assert_cmpmem(got, CS, buf, CS);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

/* Snapshots whose L1 tables all point at one L2 table (found by
 * fuzz-qcow2): the check stops at its read budget instead of reading the
 * same tables again for each snapshot, which took minutes. */
static void test_check_budget(void)
{
    g_autofree char *dir = test_scratch_new();
    g_autofree char *path = make_with_data(dir, "b.qcow2");
    g_autofree uint8_t *tab = g_malloc0(CS);
    const int64_t snap_off = 6 * CS, snap_l1 = 7 * CS;
    const int nb_snap = CS / 40;
    g_autoptr(GError) err = NULL;
    BdrvCheckResult res;
    BlockDriverState *bs;
    bool stopped = false;

    for (int i = 0; i < nb_snap; i++) {
        qcow2_put_be64(tab + 40 * i, snap_l1);
        qcow2_put_be32(tab + 40 * i + 8, CS / 8);
    }
    q_poke(path, snap_off, tab, CS);
    for (int i = 0; i < CS / 8; i++) {
        qcow2_put_be64(tab + 8 * i, L2_OFF);
    }
    q_poke(path, snap_l1, tab, CS);
    q_poke_be32(path, 60, nb_snap);
    q_poke_be64(path, 64, snap_off);

    bs = q_open(path, 0);
    g_assert_true(qcow2_check(bs, &res, &err));
    g_assert_cmpint(res.check_errors, ==, 1);
    for (guint i = 0; i < res.messages->len; i++) {
        stopped |= strstr(g_ptr_array_index(res.messages, i),
                          "check stopped") != NULL;
    }
    g_assert_true(stopped);
    bdrv_check_result_clear(&res);
    bdrv_unref(bs);
    test_scratch_free(g_steal_pointer(&dir));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qcow2/header/pokes", test_header_pokes);
    g_test_add_func("/qcow2/header/truncated", test_header_truncated);
    g_test_add_func("/qcow2/header/backing", test_backing);
    g_test_add_func("/qcow2/corrupt/data-path", test_data_path);
    g_test_add_func("/qcow2/corrupt/write-guard", test_write_guard);
    g_test_add_func("/qcow2/corrupt/compressed-max-sectors",
                    test_compressed_max_sectors);
    g_test_add_func("/qcow2/corrupt/check-budget", test_check_budget);
    return g_test_run();
}
