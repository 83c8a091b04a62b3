/*
 * Unit tests of --state-file's engine (block/mirror/mirror-state*.c,
 * mirror-extents.c): the extent set against a bitmap model, the file
 * format (round trip; every single-byte corruption and every truncation
 * of a valid file refused; identity mismatches refused), the group
 * commit of guest writes, and jobs on the null driver that persist what
 * they copied, resume from it and remove the file on completion.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/mirror/mirror.h"
#include "block/mirror/mirror-state.h"
#include "block/mirror/mirror-top.h"
#include "block/null.h"
#include "tests/qtest-like/mirror-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define G 65536

/* ---- the extent set ---- */

static void check_extents(const MirrorExtents *e, const bool *model, int n)
{
    int64_t bytes = 0;
    int64_t prev_end = -1;
    int j = 0;

    for (guint i = 0; i < mirror_extents_count(e); i++) {
        const MirrorExtent *x = mirror_extents_get(e, i);

        g_assert_cmpint(x->start, >, prev_end);     /* not adjacent */
        g_assert_cmpint(x->end, >, x->start);
        prev_end = x->end;
        bytes += x->end - x->start;
    }
    g_assert_cmpint(bytes, ==, e->bytes);
    for (int k = 0; k < n; k++) {
        bool in = false;

        while (j < (int)mirror_extents_count(e) &&
               mirror_extents_get(e, j)->end <= k) {
            j++;
        }
        in = j < (int)mirror_extents_count(e) &&
             mirror_extents_get(e, j)->start <= k;
        g_assert_cmpint(in, ==, model[k]);
    }
}

static void test_extents_model(void)
{
    enum { N = 512 };
    bool model[N] = { 0 };
    MirrorExtents e;
    GRand *r = g_rand_new_with_seed(20);

    mirror_extents_init(&e);
    for (int op = 0; op < 20000; op++) {
        int a = g_rand_int_range(r, 0, N);
        int len = g_rand_int_range(r, 0, 40);
        int b = MIN(N, a + len);
        int kind = g_rand_int_range(r, 0, 3);

        if (kind == 0) {
            mirror_extents_add(&e, a, b);
            for (int k = a; k < b; k++) {
                model[k] = true;
            }
        } else if (kind == 1) {
            mirror_extents_remove(&e, a, b);
            for (int k = a; k < b; k++) {
                model[k] = false;
            }
        } else {
            bool any = false;

            for (int k = a; k < b; k++) {
                any |= model[k];
            }
            g_assert_cmpint(mirror_extents_intersects(&e, a, b), ==, any);
        }
        if (op % 16 == 0) {
            check_extents(&e, model, N);
        }
    }
    check_extents(&e, model, N);
    mirror_extents_destroy(&e);
    g_rand_free(r);
}

/* ---- the format ---- */

static MirrorStateIdentity test_identity(void)
{
    return (MirrorStateIdentity) {
        .source = (char *)"raw /src ino=1 size=1048576",
        .target = (char *)"qcow2 /dst ino=2 size=1048576",
        .size = 16 * G + 100,
        .granularity = G,
        .sync = MIRROR_SYNC_MODE_FULL,
    };
}

static GByteArray *test_file(MirrorExtents *good)
{
    MirrorStateIdentity id = test_identity();

    mirror_extents_init(good);
    mirror_extents_add(good, 0, 3 * G);
    mirror_extents_add(good, 5 * G, 6 * G);
    mirror_extents_add(good, 9 * G, 16 * G + 100);     /* to the end */
    return mirror_state_encode(&id, 7, good, 0);
}

static void test_format_round_trip(void)
{
    MirrorStateIdentity id = test_identity();
    MirrorExtents good;
    g_autoptr(GByteArray) b = test_file(&good);
    g_autoptr(GError) err = NULL;
    MirrorStateFile f;

    g_assert_true(mirror_state_decode(b->data, b->len, &f, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(f.seq, ==, 7);
    g_assert_true(mirror_state_identity_check(&f.id, &id, &err));
    g_assert_cmpuint(mirror_extents_count(&f.good), ==, 3);
    g_assert_cmpint(f.good.bytes, ==, good.bytes);
    for (guint i = 0; i < 3; i++) {
        g_assert_cmpint(mirror_extents_get(&f.good, i)->start, ==,
                        mirror_extents_get(&good, i)->start);
        g_assert_cmpint(mirror_extents_get(&f.good, i)->end, ==,
                        mirror_extents_get(&good, i)->end);
    }
    g_assert_cmpint(f.switched_us, ==, 0);
    /* 80 + identities + 4, three 16-byte extents, 4. */
    g_assert_cmpuint(b->len, ==, 80 + strlen(id.source) +
                     strlen(id.target) + 4 + 3 * 16 + 4);
    mirror_state_file_clear(&f);
    mirror_extents_destroy(&good);
}

static uint32_t get_le32_at(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = v >> (8 * i);
    }
}

/* A version 1 file (no switch-over time, identities at 72) is read; a
 * switched-over record round-trips. */
static void test_format_versions(void)
{
    MirrorStateIdentity id = test_identity();
    MirrorExtents good;
    g_autoptr(GByteArray) b = test_file(&good);
    g_autoptr(GByteArray) v1 = g_byte_array_new();
    g_autoptr(GByteArray) sw = NULL;
    uint32_t hlen = get_le32_at(b->data + 12), hcrc;
    MirrorStateFile f;

    /* v1: bytes 0..71, the identities, CRC; the extents, CRC. */
    g_byte_array_append(v1, b->data, 72);
    g_byte_array_append(v1, b->data + 80, hlen - 4 - 80);
    put_le32(v1->data + 8, 1);
    put_le32(v1->data + 12, hlen - 8);
    hcrc = crc32(0, v1->data, v1->len);
    g_byte_array_set_size(v1, v1->len + 4);
    put_le32(v1->data + v1->len - 4, hcrc);
    g_byte_array_append(v1, b->data + hlen, b->len - hlen - 4);
    g_byte_array_set_size(v1, v1->len + 4);
    put_le32(v1->data + v1->len - 4,
             crc32(hcrc, v1->data + hlen - 8, b->len - hlen - 4));
    g_assert_true(mirror_state_decode(v1->data, v1->len, &f, NULL));
    g_assert_true(mirror_state_identity_check(&f.id, &id, NULL));
    g_assert_cmpint(f.good.bytes, ==, good.bytes);
    g_assert_cmpint(f.switched_us, ==, 0);
    mirror_state_file_clear(&f);

    sw = mirror_state_encode(&id, 9, &good, 1234567);
    g_assert_true(mirror_state_decode(sw->data, sw->len, &f, NULL));
    g_assert_cmpint(f.switched_us, ==, 1234567);
    g_assert_cmpuint(get_le32_at(sw->data + 52), ==,
                     MIRROR_STATE_F_SWITCHED);
    mirror_state_file_clear(&f);
    mirror_extents_destroy(&good);
}

static void test_format_corrupt_bytes(void)
{
    MirrorExtents good;
    g_autoptr(GByteArray) b = test_file(&good);
    g_autofree uint8_t *copy = g_memdup2(b->data, b->len);

    for (guint i = 0; i < b->len; i++) {
        for (int x = 1; x < 256; x++) {
            g_autoptr(GError) err = NULL;
            MirrorStateFile f;

            copy[i] = b->data[i] ^ x;
            g_assert_false(mirror_state_decode(copy, b->len, &f, &err));
            g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
            mirror_state_file_clear(&f);
        }
        copy[i] = b->data[i];
    }
    mirror_extents_destroy(&good);
}

static void test_format_truncated(void)
{
    MirrorExtents good;
    g_autoptr(GByteArray) b = test_file(&good);

    for (guint len = 0; len < b->len; len++) {
        g_autoptr(GError) err = NULL;
        MirrorStateFile f;

        g_assert_false(mirror_state_decode(b->data, len, &f, &err));
        g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
        mirror_state_file_clear(&f);
    }
    /* A byte too many (two files run together) is refused too. */
    g_byte_array_append(b, (const uint8_t *)"x", 1);
    {
        g_autoptr(GError) err = NULL;
        MirrorStateFile f;

        g_assert_false(mirror_state_decode(b->data, b->len, &f, &err));
        mirror_state_file_clear(&f);
    }
    mirror_extents_destroy(&good);
}

/* Well-formed files (right CRCs) with bad extents are refused. */
static void test_format_bad_extents(void)
{
    MirrorStateIdentity id = test_identity();
    struct { int64_t s, e; } bad[] = {
        { G / 2, G },                   /* not aligned */
        { 0, G + 1 },                   /* ends unaligned, not at the end */
        { 15 * G, 17 * G },             /* beyond the size */
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GError) err = NULL;
        g_autoptr(GByteArray) b = NULL;
        MirrorExtents e;
        MirrorStateFile f;

        mirror_extents_init(&e);
        mirror_extents_add(&e, bad[i].s, bad[i].e);
        b = mirror_state_encode(&id, 1, &e, 0);
        g_assert_false(mirror_state_decode(b->data, b->len, &f, &err));
        g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
        mirror_state_file_clear(&f);
        mirror_extents_destroy(&e);
    }
}

static void test_format_identity(void)
{
    MirrorStateIdentity a = test_identity();
    struct { const char *what; MirrorStateIdentity b; } cases[] = {
        { "source", a }, { "target", a }, { "size", a },
        { "granularity", a }, { "sync mode", a },
    };

    cases[0].b.source = (char *)"raw /src ino=3 size=1048576";
    cases[1].b.target = (char *)"qcow2 /other ino=2 size=1048576";
    cases[2].b.size++;
    cases[3].b.granularity *= 2;
    cases[4].b.sync = MIRROR_SYNC_MODE_TOP;
    g_assert_true(mirror_state_identity_check(&a, &a, NULL));
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;
        g_autofree char *want = g_strdup_printf("the %s differs",
                                                cases[i].what);

        g_assert_false(mirror_state_identity_check(&a, &cases[i].b, &err));
        g_assert_nonnull(strstr(err->message, want));
    }
}

/* ---- the file on disk ---- */

/* The state file at @path, decoded (or the test fails). */
static void read_state(const char *path, MirrorStateFile *f)
{
    g_autofree char *buf = NULL;
    gsize len;

    g_assert_true(g_file_get_contents(path, &buf, &len, NULL));
    g_assert_true(mirror_state_decode((uint8_t *)buf, len, f, NULL));
}

static void wait_idle(MirrorState *st)
{
    while (mirror_state_busy(st)) {
        g_main_context_iteration(NULL, TRUE);
    }
}

static void test_open_create_resume(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    g_autofree char *before = NULL, *after = NULL;
    MirrorStateIdentity id = test_identity(), other = test_identity();
    MirrorExtents good;
    g_autoptr(GByteArray) b = test_file(&good);
    g_autoptr(GError) err = NULL;
    MirrorState *st;
    MirrorStateFile f;
    bool exists;

    /* Missing: created, nothing known good. */
    g_assert_true(mirror_state_probe(path, &exists, NULL));
    g_assert_false(exists);
    st = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    g_assert_false(mirror_state_resumed(st));
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 0);
    mirror_state_free(st);
    read_state(path, &f);
    g_assert_cmpint(f.good.bytes, ==, 0);
    mirror_state_file_clear(&f);

    /* Existing: resumed with its extents. */
    g_assert_true(g_file_set_contents(path, (char *)b->data, b->len, NULL));
    st = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    g_assert_true(mirror_state_resumed(st));
    g_assert_cmpint(mirror_state_good_bytes(st), ==, good.bytes);
    mirror_state_free(st);

    /* Another job's: refused, the file left as it was. */
    g_assert_true(g_file_get_contents(path, &before, NULL, NULL));
    other.granularity = 2 * G;
    g_assert_null(mirror_state_open(path, &other, &err));
    g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
    g_assert_true(g_file_get_contents(path, &after, NULL, NULL));
    g_assert_cmpmem(before, b->len, after, b->len);

    /* Corrupt: refused by probe and open alike. */
    b->data[b->len - 1] ^= 1;
    g_assert_true(g_file_set_contents(path, (char *)b->data, b->len, NULL));
    g_clear_error(&err);
    g_assert_false(mirror_state_probe(path, &exists, &err));
    g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
    g_clear_error(&err);
    g_assert_null(mirror_state_open(path, &id, &err));
    g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);

    mirror_extents_destroy(&good);
    test_scratch_free(dir);
}

/*
 * Completion with a switched-over record (start --export): the file
 * stays, all known good, flagged with the time; a reopen sees the flag;
 * mirror_state_remove() then removes it.  Without the record: removed.
 */
static void test_switched_over(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorStateIdentity id = test_identity();
    g_autoptr(GError) err = NULL;
    int64_t t0 = g_get_real_time();
    MirrorState *st, *again;
    MirrorStateFile f;

    st = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    g_assert_cmpint(mirror_state_switched_us(st), ==, 0);
    mirror_state_set_switch_record(st, true);
    g_assert_cmpint(mirror_state_complete(st, &err), ==, 0);
    g_assert_no_error(err);
    g_assert_cmpint(mirror_state_switched_us(st), >=, t0);
    read_state(path, &f);
    g_assert_cmpint(f.switched_us, ==, mirror_state_switched_us(st));
    g_assert_cmpint(f.good.bytes, ==, id.size);
    mirror_state_file_clear(&f);

    again = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    g_assert_true(mirror_state_resumed(again));
    g_assert_cmpint(mirror_state_switched_us(again), ==,
                    mirror_state_switched_us(st));
    mirror_state_free(again);

    g_assert_cmpint(mirror_state_remove(st, &err), ==, 0);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    g_assert_cmpint(mirror_state_switched_us(st), ==, 0);
    mirror_state_free(st);

    /* Without the record: the file goes at completion. */
    st = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    g_assert_cmpint(mirror_state_complete(st, &err), ==, 0);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    g_assert_cmpint(mirror_state_switched_us(st), ==, 0);
    mirror_state_free(st);
    test_scratch_free(dir);
}

/* ---- guest writes: the group commit ---- */

typedef struct GateWaiter {
    const char *path;
    int64_t offset;
    int calls;
    int ret;
    uint64_t seq;           /* of the file when the write was let go */
} GateWaiter;

static void gate_cb(void *opaque, int ret)
{
    GateWaiter *w = opaque;
    MirrorStateFile f;

    w->calls++;
    w->ret = ret;
    /* Its granule is not known good on disk before the write goes. */
    read_state(w->path, &f);
    g_assert_false(mirror_extents_intersects(&f.good, w->offset,
                                             w->offset + 1));
    w->seq = f.seq;
    mirror_state_file_clear(&f);
}

static void test_gate_group_commit(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorStateIdentity id = test_identity();
    GateWaiter a = { path, 0 }, b = { path, 4 * G }, c = { path, 100 };
    MirrorState *st;
    MirrorStateFile f;

    /* sync=none: everything starts known good. */
    id.sync = MIRROR_SYNC_MODE_NONE;
    st = mirror_state_open(path, &id, NULL);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, id.size);

    /* The first write to a good granule waits: a state write starts. */
    g_assert_false(mirror_state_guest_write(st, 0, 512, gate_cb, &a));
    g_assert_true(mirror_state_busy(st));
    /* Two more while it is in flight: one shares it, one waits for
     * the next (that write took its granule as good). */
    g_assert_false(mirror_state_guest_write(st, 4 * G, 4096, gate_cb, &b));
    g_assert_false(mirror_state_guest_write(st, 100, 1, gate_cb, &c));
    wait_idle(st);
    g_assert_cmpint(a.calls, ==, 1);
    g_assert_cmpint(b.calls, ==, 1);
    g_assert_cmpint(c.calls, ==, 1);
    g_assert_cmpint(a.ret | b.ret | c.ret, ==, 0);
    /* @c's granule is @a's: the write in flight covers it. */
    g_assert_cmpuint(a.seq, ==, 2);
    g_assert_cmpuint(c.seq, ==, 2);
    g_assert_cmpuint(b.seq, ==, 3);
    /* Granules already not good on disk: no wait, no write. */
    g_assert_true(mirror_state_guest_write(st, 0, G, gate_cb, &a));
    g_assert_true(mirror_state_guest_write(st, 4 * G, 1, gate_cb, &b));
    g_assert_false(mirror_state_busy(st));
    mirror_state_guest_done(st, 0, 512);
    mirror_state_guest_done(st, 4 * G, 4096);
    mirror_state_guest_done(st, 100, 1);
    mirror_state_guest_done(st, 0, G);
    mirror_state_guest_done(st, 4 * G, 1);
    read_state(path, &f);
    g_assert_cmpint(f.good.bytes, ==, id.size - 2 * G);
    mirror_state_file_clear(&f);
    g_assert_cmpint(a.calls + b.calls + c.calls, ==, 3);

    /* Completion removes the file; later writes never wait. */
    wait_idle(st);
    g_assert_cmpint(mirror_state_remove(st, NULL), ==, 0);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    g_assert_true(mirror_state_guest_write(st, 8 * G, 1, gate_cb, &a));
    mirror_state_free(st);
    test_scratch_free(dir);
}

/* A flush promotes only what was clean when it began, never a granule
 * a guest write holds. */
static void test_flush_promotes(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorStateIdentity id = test_identity();
    g_autoptr(DirtyBitmap) dirty = dirty_bitmap_new(id.size, G);
    MirrorState *st = mirror_state_open(path, &id, NULL);
    MirrorStateFile f;

    dirty_bitmap_set(dirty, 2 * G, G);
    mirror_state_clean(st, dirty, 0, 4 * G);            /* 0, 1, 3 */
    g_assert_cmpint(mirror_state_flush_due(st, clock_ns()), >, 0);
    mirror_state_flush_begin(st);
    mirror_state_clean(st, dirty, 4 * G, G);            /* after: not yet */
    g_assert_true(mirror_state_guest_write(st, 3 * G, 1, NULL, NULL));
    mirror_state_flush_end(st, 0);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 2 * G);
    wait_idle(st);
    read_state(path, &f);
    g_assert_cmpint(f.good.bytes, ==, 2 * G);
    g_assert_false(mirror_extents_intersects(&f.good, 2 * G, 4 * G));
    mirror_state_file_clear(&f);

    /* A failed flush promotes nothing; the next one does. */
    mirror_state_guest_done(st, 3 * G, 1);
    mirror_state_flush_begin(st);
    mirror_state_flush_end(st, -EIO);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 2 * G);
    mirror_state_flush_begin(st);
    mirror_state_dirtied(st, 4 * G, 1);         /* dirtied meanwhile */
    mirror_state_flush_end(st, 0);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 2 * G);

    /* A copy that completes while a guest write holds its granule (the
     * copy may have read the old data): a flush does not promote it.
     * (No hot period here: it would keep the granule out anyway.) */
    mirror_state_set_hot_ns(st, 0);
    g_assert_true(mirror_state_guest_write(st, 6 * G, 1, NULL, NULL));
    mirror_state_clean(st, dirty, 6 * G, G);
    mirror_state_flush_begin(st);
    mirror_state_flush_end(st, 0);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 2 * G);
    mirror_state_guest_done(st, 6 * G, 1);
    wait_idle(st);
    mirror_state_free(st);
    test_scratch_free(dir);
}

/* A granule a guest wrote is parked, not promoted, until its hot period
 * ends; then the next flush promotes it. */
static void test_flush_hot(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorStateIdentity id = test_identity();
    g_autoptr(DirtyBitmap) dirty = dirty_bitmap_new(id.size, G);
    MirrorState *st = mirror_state_open(path, &id, NULL);
    const int64_t hot = 20 * 1000 * 1000;      /* 20 ms */
    int64_t t0;

    mirror_state_set_hot_ns(st, hot);
    t0 = clock_ns();
    g_assert_true(mirror_state_guest_write(st, 2 * G, 1, NULL, NULL));
    mirror_state_guest_done(st, 2 * G, 1);
    mirror_state_clean(st, dirty, 0, 4 * G);    /* the copy of it, too */
    mirror_state_flush_begin(st);
    mirror_state_flush_end(st, 0);
    if (clock_ns() - t0 < hot) {
        g_assert_cmpint(mirror_state_good_bytes(st), ==, 3 * G);
        /* Parked: nothing waits for a flush. */
        g_assert_cmpint(mirror_state_flush_due(st, t0), ==, -1);
    }
    /* Once it has not been written for a period or two, it is. */
    while (clock_ns() - t0 < 2 * hot) {
        g_usleep(1000);
    }
    g_assert_cmpint(mirror_state_flush_due(st, clock_ns()), >=, 0);
    mirror_state_flush_begin(st);
    mirror_state_flush_end(st, 0);
    g_assert_cmpint(mirror_state_good_bytes(st), ==, 4 * G);
    wait_idle(st);
    mirror_state_free(st);
    test_scratch_free(dir);
}

/* ---- jobs ---- */

#define JOB_SIZE    (512 * MiB)
#define FAIL_AT     (400 * MiB)

static MirrorState *job_state(const char *path, MirrorFixture *f)
{
    MirrorStateIdentity id = {
        .source = (char *)"null src", .target = (char *)"null dst",
        .size = JOB_SIZE, .granularity = G, .sync = MIRROR_SYNC_MODE_FULL,
    };
    g_autoptr(GError) err = NULL;
    MirrorState *st = mirror_state_open(path, &id, &err);

    g_assert_no_error(err);
    mirror_job_set_state(f->job, st);
    return st;
}

static void test_job_fail_then_resume(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    g_autofree char *dst_spec = g_strdup_printf(
        "null:size=%" G_GINT64_FORMAT ",error-op=write,error-offset=%"
        G_GINT64_FORMAT ",error-length=%d", (gint64)JOB_SIZE,
        (gint64)FAIL_AT, G);
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorFixture f;
    MirrorStats stats;
    MirrorStateFile file;
    MirrorState *st;
    int64_t good;

    p.granularity = G;
    p.in_order = true;
    mirror_fixture_init(&f, "null:size=512M", dst_spec, &p);
    st = job_state(path, &f);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, -EIO);
    wait_idle(st);
    mirror_fixture_destroy(&f);
    mirror_state_free(st);

    /* What was flushed every 64 MiB is known good, never the granule
     * whose write failed. */
    read_state(path, &file);
    good = file.good.bytes;
    g_assert_cmpint(good, >=, FAIL_AT - 2 * MIRROR_STATE_FLUSH_BYTES);
    g_assert_false(mirror_extents_intersects(&file.good, FAIL_AT,
                                             FAIL_AT + G));
    mirror_state_file_clear(&file);

    /* The rerun writes only the rest, then removes the file. */
    p.in_order = false;
    mirror_fixture_init(&f, "null:size=512M,record=on",
                        "null:size=512M,record=on", &p);
    st = job_state(path, &f);
    g_assert_true(mirror_state_resumed(st));
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE), ==,
                    JOB_SIZE - good);
    g_assert_cmpint(mirror_fixture_op_bytes(f.src, NULL_OP_READ), ==,
                    JOB_SIZE - good);
    mirror_get_stats(f.job, &stats);
    g_assert_cmpint(stats.known_good_bytes, ==, JOB_SIZE);
    wait_idle(st);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    mirror_fixture_destroy(&f);
    mirror_state_free(st);
    test_scratch_free(dir);
}

/* The target reconnects while the first state-file flush is in flight. */
typedef struct SpanCtx {
    MirrorFixture *f;
    MirrorState *st;
    int phase;                  /* 0: wait for a flush, 1: for its end */
    guint flush;                /* its record */
    int64_t acked;              /* target writes completed at the event */
} SpanCtx;

static gboolean span_poll_cb(gpointer opaque)
{
    SpanCtx *c = opaque;
    GArray *recs = null_get_records(c->f->dst);

    if (c->phase == 0) {
        for (guint i = 0; i < recs->len; i++) {
            NullRecord *r = &g_array_index(recs, NullRecord, i);

            if (r->op == NULL_OP_FLUSH && !r->end_ns) {
                BdrvEvent ev = { .type = BDRV_EVENT_RECONNECTED };

                for (guint j = 0; j < recs->len; j++) {
                    NullRecord *w = &g_array_index(recs, NullRecord, j);

                    if ((w->op == NULL_OP_WRITE || w->op == NULL_OP_ZERO) &&
                        w->end_ns) {
                        c->acked += w->bytes;
                    }
                }
                g_assert_cmpint(mirror_state_good_bytes(c->st), ==, 0);
                bdrv_notify_event(c->f->dst, &ev);
                c->flush = i;
                c->phase = 1;
                break;
            }
        }
        return G_SOURCE_CONTINUE;
    }
    if (!g_array_index(recs, NullRecord, c->flush).end_ns) {
        return G_SOURCE_CONTINUE;
    }
    /* It succeeded, but across a reconnect: nothing became good. */
    g_assert_cmpint(mirror_state_good_bytes(c->st), ==, 0);
    c->phase = 2;
    return G_SOURCE_REMOVE;
}

static void test_job_reconnect_during_flush(void)
{
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    SpanCtx c = { 0 };
    MirrorFixture f;

    p.granularity = G;
    mirror_fixture_init(&f, "null:size=512M",
                        "null:size=512M,record=on,latency-ns=20000000", &p);
    c.f = &f;
    c.st = job_state(path, &f);
    g_timeout_add(1, span_poll_cb, &c);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    g_assert_cmpint(c.phase, ==, 2);
    g_assert_cmpint(c.acked, >=, MIRROR_STATE_FLUSH_BYTES);
    /* What the target acknowledged before the event, once more. */
    g_assert_cmpint(mirror_fixture_op_bytes(f.dst, NULL_OP_WRITE) +
                    mirror_fixture_op_bytes(f.dst, NULL_OP_ZERO), ==,
                    JOB_SIZE + c.acked);
    wait_idle(c.st);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    mirror_fixture_destroy(&f);
    mirror_state_free(c.st);
    test_scratch_free(dir);
}

/* A guest write through the filter, acknowledged: what the file says. */
typedef struct GuestWrite {
    const char *path;
    int64_t offset;
    bool done;
    int ret;
    bool good_on_disk;      /* the file called the granule good at the ack */
} GuestWrite;

static void guest_write_cb(void *opaque, int ret)
{
    GuestWrite *w = opaque;
    MirrorStateFile f;

    read_state(w->path, &f);
    w->good_on_disk = mirror_extents_intersects(&f.good, w->offset,
                                                w->offset + 1);
    mirror_state_file_clear(&f);
    w->ret = ret;
    w->done = true;
}

/*
 * sync=none: every granule starts known good.  A guest write through the
 * mirror-top filter is acknowledged only once the file on disk says its
 * granule is not good (checked at the very acknowledgement, before the
 * loop runs on), in both copy modes.
 */
static void test_job_guest_write(gconstpointer opaque)
{
    MirrorCopyMode mode = GPOINTER_TO_INT(opaque);
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "st", NULL);
    MirrorParams p = mirror_fixture_params(16, MiB, 0);
    MirrorStateIdentity id = {
        .source = (char *)"null src", .target = (char *)"null dst",
        .size = 64 * MiB, .granularity = G, .sync = MIRROR_SYNC_MODE_NONE,
    };
    g_autofree uint8_t *buf = g_malloc0(4096);
    GuestWrite w[3] = {
        { path, 0 }, { path, 17 * G + 512 }, { path, 0 },
    };
    g_autoptr(GError) err = NULL;
    BlockDriverState *top;
    MirrorFixture f;
    MirrorState *st;

    p.sync = MIRROR_SYNC_MODE_NONE;
    p.granularity = G;
    p.copy_mode = mode;
    p.auto_complete = false;
    /* As mirror_fixture_init(), with a writable source. */
    f.src = test_open("null:size=64M", NULL, BDRV_O_RDWR);
    f.dst = test_open("null:size=64M", NULL, BDRV_O_RDWR);
    f.job = mirror_job_new("job0", f.src, f.dst, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&f.ev, f.job);
    st = mirror_state_open(path, &id, &err);
    g_assert_no_error(err);
    top = mirror_top_new(f.src, &err);
    g_assert_no_error(err);
    mirror_job_set_top(f.job, top);
    mirror_job_set_state(f.job, st);
    job_start(f.job);
    for (int i = 0; i < 3; i++) {
        bdrv_aio_pwrite(top, w[i].offset, 4096, buf, 0, guest_write_cb,
                        &w[i]);
    }
    for (int i = 0; i < 3; i++) {
        test_run_until(&w[i].done, 30);
        g_assert_cmpint(w[i].ret, ==, 0);
        g_assert_false(w[i].good_on_disk);
    }
    g_assert_true(job_user_cancel(f.job, false, NULL));
    test_run_until(&f.ev.concluded, 30);
    wait_idle(st);
    bdrv_unref(top);
    mirror_fixture_destroy(&f);
    mirror_state_free(st);
    test_scratch_free(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror-state/extents/model", test_extents_model);
    g_test_add_func("/mirror-state/format/round-trip",
                    test_format_round_trip);
    g_test_add_func("/mirror-state/format/versions", test_format_versions);
    g_test_add_func("/mirror-state/format/corrupt-bytes",
                    test_format_corrupt_bytes);
    g_test_add_func("/mirror-state/format/truncated", test_format_truncated);
    g_test_add_func("/mirror-state/format/bad-extents",
                    test_format_bad_extents);
    g_test_add_func("/mirror-state/format/identity", test_format_identity);
    g_test_add_func("/mirror-state/file/open-create-resume",
                    test_open_create_resume);
    g_test_add_func("/mirror-state/file/switched-over", test_switched_over);
    g_test_add_func("/mirror-state/gate/group-commit",
                    test_gate_group_commit);
    g_test_add_func("/mirror-state/flush/promotes", test_flush_promotes);
    g_test_add_func("/mirror-state/flush/hot", test_flush_hot);
    g_test_add_func("/mirror-state/job/fail-then-resume",
                    test_job_fail_then_resume);
    g_test_add_func("/mirror-state/job/reconnect-during-flush",
                    test_job_reconnect_during_flush);
    g_test_add_data_func("/mirror-state/job/guest-write/background",
                         GINT_TO_POINTER(MIRROR_COPY_MODE_BACKGROUND),
                         test_job_guest_write);
    g_test_add_data_func("/mirror-state/job/guest-write/write-blocking",
                         GINT_TO_POINTER(MIRROR_COPY_MODE_WRITE_BLOCKING),
                         test_job_guest_write);
    return g_test_run();
}
