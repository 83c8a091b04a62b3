/*
 * NBD client driver tests against real nbdkit servers, the per-connection
 * side: flush on every connection and FUA (native or emulated), the
 * "connections" option with and without a multi-conn server.  The data
 * path tests are in test-nbd.c.  Tests skip without nbdkit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/nbd.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* Flush goes to every connection; FUA becomes write + flush without
 * server FUA; a server without flush needs none. */
static void test_flush_fua(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) nofua = NULL;
    g_autoptr(Server) noflush = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autoptr(BlockDriverState) bs3 = NULL;
    g_autofree char *logdir = NULL;
    g_autofree char *log = NULL;
    g_autofree char *log2 = NULL;
    g_autofree char *logarg = NULL;
    g_autofree char *logarg2 = NULL;
    uint8_t w[4096] = { 1 };

    if (!have_nbdkit()) {
        return;
    }
    logdir = g_dir_make_tmp("test-nbd-log-XXXXXX", NULL);
    log = g_build_filename(logdir, "log", NULL);
    log2 = g_build_filename(logdir, "log2", NULL);
    logarg = g_strdup_printf("logfile=%s", log);
    logarg2 = g_strdup_printf("logfile=%s", log2);

    srv = server_start("--filter=log", "memory", "64M", logarg, NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, "2");
    g_assert_cmpint(test_flush(bs), ==, 0);
    /* A flush goes out on every connection. */
    g_assert_cmpint(count_lines(log, (const char *[]){ " Flush id=", NULL }),
                    ==, 2);
    g_assert_cmpint(pwrite_flags(bs, 0, sizeof(w), w, BDRV_REQ_FUA), ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Write id=", "fua=1",
                                                       NULL }), ==, 1);
    /* Zero flags on the wire: MAY_UNMAP allows a hole (no NO_HOLE), and
     * NO_FALLBACK asks for a fast zero. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, BDRV_REQ_MAY_UNMAP), ==,
                    0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Zero id=",
                                "trim=1 fua=0 fast=0", NULL }), ==, 1);
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, 0), ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Zero id=",
                                "trim=0 fua=0 fast=0", NULL }), ==, 1);
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, 0);
    g_assert_cmpint(count_lines(log, (const char *[]){ " Zero id=",
                                "trim=0 fua=0 fast=1", NULL }), ==, 1);

    /* No FUA on the server: the write is followed by a flush. */
    nofua = server_start("--filter=log", EVAL_SERVER, "flush=true",
                         "can_fua=echo none", logarg2, NULL);
    bs2 = must_open(nofua->uri, BDRV_O_RDWR, "1");
    g_assert_true(info_has(bs2, "features: flush zero fast-zero "
                                "base:allocation"));
    g_assert_cmpint(pwrite_flags(bs2, 0, sizeof(w), w, BDRV_REQ_FUA), ==, 0);
    g_assert_cmpint(count_lines(log2, (const char *[]){ " Write id=", NULL }),
                    ==, 1);
    g_assert_cmpint(count_lines(log2, (const char *[]){ " Flush id=", NULL }),
                    ==, 1);
    g_assert_cmpint(count_lines(log2, (const char *[]){ "fua=1", NULL }),
                    ==, 0);

    /* No flush at all: success without asking. */
    noflush = server_start(EVAL_SERVER, NULL);
    bs3 = must_open(noflush->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_flush(bs3), ==, 0);
    g_assert_cmpint(pwrite_flags(bs3, 0, sizeof(w), w, BDRV_REQ_FUA), ==, 0);

    bdrv_unref(g_steal_pointer(&bs));
    bdrv_unref(g_steal_pointer(&bs2));
    server_reap(srv);
    server_reap(nofua);
    g_remove(log);
    g_remove(log2);
    g_rmdir(logdir);
}

/* connections=N with a multi-conn server, 1 without; bad values fail;
 * a count asked for takes requests on every connection. */
static void test_multi_conn(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) single = NULL;
    g_autoptr(Server) evals = NULL;
    g_autoptr(GError) err = NULL;
    g_autofree char *log = NULL;
    g_autofree char *logarg = NULL;
    Pending p[16] = { 0 };
    uint8_t bufs[16][4096];
    int used = 0;

    if (!have_nbdkit()) {
        return;
    }
    {
        g_autofree char *dir = g_dir_make_tmp("test-nbd-log-XXXXXX", NULL);

        log = g_build_filename(dir, "log", NULL);
    }
    logarg = g_strdup_printf("logfile=%s", log);
    srv = server_start("--filter=log", "memory", "64M", logarg, NULL);
    for (int n = 1; n <= 16; n *= 2) {
        g_autofree char *conns = g_strdup_printf("%d", n);
        g_autoptr(BlockDriverState) bs = must_open(srv->uri, 0, conns);

        g_assert_cmpint(nbdblk_get_connections(bs), ==, n);
    }
    {
        g_autoptr(BlockDriverState) bs = must_open(srv->uri, 0, "2");

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 2);
        /* Asked for: all connections from the start, for good. */
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 2);
        /* Requests spread over the connections (at 1 MiB and up: the
         * open-time probe of each open reads offset 0). */
        for (int i = 0; i < 16; i++) {
            bdrv_aio_pread(bs, MiB + i * 4096, 4096, bufs[i], 0, pending_cb,
                           &p[i]);
        }
        run_until_all(p, 16, 60);
        for (int i = 0; i < 16; i++) {
            g_assert_cmpint(p[i].ret, ==, 0);
        }
        for (int c = 1; c <= 40; c++) {
            g_autofree char *needle = g_strdup_printf("connection=%d Read "
                                                      "id=", c);

            used += count_lines(log, (const char *[]){ needle,
                                                       "offset=0x10",
                                                       NULL }) > 0;
        }
        g_assert_cmpint(used, ==, 2);
    }
    for (int i = 0; i < 4; i++) {
        static const char *const bad[] = { "0", "17", "x", "-1" };

        g_clear_error(&err);
        g_assert_null(open_nbd(srv->uri, 0, bad[i], &err));
        g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
        g_assert_nonnull(strstr(err->message, "connections"));
    }

    single = server_start("--filter=multi-conn", "memory", "64M",
                          "multi-conn-mode=disable", NULL);
    {
        g_autoptr(BlockDriverState) bs = must_open(single->uri, 0, "4");

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_true(info_has(bs, "multi-conn: no"));
        g_assert_true(info_has(bs, "connections: 1"));
    }
    evals = server_start(EVAL_SERVER, NULL);
    {
        g_autoptr(BlockDriverState) bs = must_open(evals->uri, 0, "8");

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
    }
    server_reap(srv);
    g_remove(log);
    {
        g_autofree char *dir = g_path_get_dirname(log);

        g_rmdir(dir);
    }
}

/* A stream of 1 MiB writes, as a copy makes: a new one as each ends. */
typedef struct Stream {
    BlockDriverState *bs;
    uint8_t *buf;
    int size_mib;       /* offsets wrap within the first size_mib MiB */
    int submitted;
    int total;
    int in_flight;
    int failed;
} Stream;

static void stream_next(Stream *st);

static void stream_cb(void *opaque, int ret)
{
    Stream *st = opaque;

    st->in_flight--;
    st->failed += ret < 0;
    stream_next(st);
}

static void stream_next(Stream *st)
{
    if (st->submitted < st->total) {
        int64_t off = (int64_t)(st->submitted++ % st->size_mib) * MiB;

        st->in_flight++;
        bdrv_aio_pwrite(st->bs, off, MiB, st->buf, 0, stream_cb, st);
    }
}

/* Write @mib MiB with 32 in flight, within the first @size_mib MiB. */
static void write_stream(BlockDriverState *bs, uint8_t *buf, int mib,
                         int size_mib)
{
    Stream st = { .bs = bs, .buf = buf, .size_mib = size_mib, .total = mib };
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    for (int i = 0; i < 32; i++) {
        stream_next(&st);
    }
    while (st.in_flight && g_get_monotonic_time() < deadline) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_assert_cmpint(st.in_flight, ==, 0);
    g_assert_cmpint(st.failed, ==, 0);
}

/* Write 1 MiB of @fill at @off and read it back. */
static void check_mib(BlockDriverState *bs, int64_t off, uint8_t fill)
{
    g_autofree uint8_t *w = g_malloc(MiB);
    g_autofree uint8_t *r = g_malloc(MiB);

    memset(w, fill, MiB);
    g_assert_cmpint(test_pwrite(bs, off, MiB, w), ==, 0);
    g_assert_cmpint(test_pread(bs, off, MiB, r), ==, 0);
    g_assert_cmpmem(r, MiB, w, MiB);
}

/*
 * Write @mib MiB in 1 MiB requests, 32 in flight, and check what each of
 * the first @n connections answered: all of it on the first when @n is 1,
 * a share on every one of them otherwise (requests go to the connection
 * with the fewest in flight).
 */
static void check_replies(BlockDriverState *bs, int mib, int n)
{
    g_autofree uint8_t *buf = g_malloc0(MiB);
    uint64_t before[NBDBLK_MAX_CONNECTIONS];
    uint64_t total = 0;

    for (int i = 0; i < NBDBLK_MAX_CONNECTIONS; i++) {
        before[i] = nbdblk_get_replies(bs, i);
    }
    write_stream(bs, buf, mib, 64);
    for (int i = 0; i < NBDBLK_MAX_CONNECTIONS; i++) {
        uint64_t got = nbdblk_get_replies(bs, i) - before[i];

        if (i >= n) {
            g_assert_cmpuint(got, ==, 0);
        } else if (n > 1) {
            g_assert_cmpuint(got, >=, mib / n / 4);
        }
        total += got;
    }
    g_assert_cmpuint(total, ==, mib);
}

/* The state a node of the default count @n is in from its open: @conns
 * made, all taking requests, with the window that goes with them. */
static void check_state(BlockDriverState *bs, int n, int conns,
                        bool latency_bound)
{
    g_autofree char *made = conns < n
        ? g_strdup_printf("connections: %d (up to %d)", conns, n)
        : g_strdup_printf("connections: %d", conns);
    g_autofree char *taking = g_strdup_printf("connections taking "
                                              "requests: %d", conns);

    g_assert_cmpint(nbdblk_get_connections(bs), ==, conns);
    g_assert_cmpint(nbdblk_get_active_connections(bs), ==, conns);
    g_assert_cmpuint(bdrv_get_active_channels(bs), ==, conns);
    g_assert_true(info_has(bs, made));
    g_assert_true(info_has(bs, taking));
    g_assert_true(info_has(bs, latency_bound ? "latency-bound: yes "
                                               "(deep window)"
                                             : "latency-bound: no"));
    g_assert_cmpint(bdrv_get_window_bytes(bs), ==,
                    latency_bound ? 32 * MiB : 8 * MiB);
    g_assert_cmpint(bdrv_get_max_window_bytes(bs), ==,
                    latency_bound ? 32 * MiB : 8 * MiB);
}

/*
 * An idle read answered at open within 2 ms: one connection, the shallow
 * window, for good: 64 MiB of writes all go to it and no other is made.
 * On a loaded machine a stall of ours can make the answer late, which
 * gives the node every connection (checked as such); a new server is then
 * tried, up to FAST_TRIES times.
 */
#define FAST_TRIES 10

static void test_spread_fast(void)
{
    int n = nbdblk_default_connections();
    bool reached = false;

    if (!have_nbdkit()) {
        return;
    }
    if (n < 2) {
        g_test_skip("one CPU: one connection by default, nothing to spread");
        return;
    }
    for (int i = 0; i < FAST_TRIES && !reached; i++) {
        g_autoptr(Server) srv = server_start("memory", "64M", NULL);
        g_autoptr(BlockDriverState) bs = must_open(srv->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpuint(bdrv_get_channels(bs), ==, n);
        if (info_has(bs, "latency-bound: yes (deep window)")) {
            g_test_message("attempt %d: the idle read was late", i + 1);
            check_state(bs, n, n, true);
            check_replies(bs, 64, n);
            continue;
        }
        /* Decided at open, without a request on the data path. */
        check_state(bs, n, 1, false);
        check_replies(bs, 64, 1);
        check_state(bs, n, 1, false);
        check_mib(bs, 3 * MiB, 0x5c);
        reached = true;
    }
    g_assert_true(reached);
}

/*
 * A read latency of 10 ms: from its open the node has every connection
 * and the deep window, and writes go to every one.  No timing that load
 * can turn: a stall only adds to the latency.
 */
static void test_spread_latency(void)
{
    int n = nbdblk_default_connections();

    if (!have_nbdkit()) {
        return;
    }
    if (n < 2) {
        g_test_skip("one CPU: one connection by default, nothing to spread");
        return;
    }
    {
        g_autoptr(Server) slow = server_start("--filter=delay", "memory",
                                              "64M", "delay-read=10ms",
                                              NULL);
        g_autoptr(BlockDriverState) bs = must_open(slow->uri, BDRV_O_RDWR,
                                                   NULL);

        check_state(bs, n, n, true);
        check_replies(bs, 64, n);
        check_mib(bs, 7 * MiB, 0xa7);
    }
    {
        /* A count asked for is kept; the window still deepens. */
        g_autoptr(Server) slow = server_start("--filter=delay", "memory",
                                              "64M", "delay-read=10ms",
                                              NULL);
        g_autoptr(BlockDriverState) bs = must_open(slow->uri, BDRV_O_RDWR,
                                                   "1");

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        check_replies(bs, 16, 1);
    }
    {
        /* A server that answers the idle read after 5 s: the open does
         * not wait for it (the bound is what a loaded machine needs for
         * the handshakes), and writes go through on every connection
         * with the read still in flight. */
        g_autoptr(Server) mute = server_start("--filter=delay", "memory",
                                              "64M", "delay-read=5", NULL);
        gint64 start = g_get_monotonic_time();
        g_autoptr(BlockDriverState) bs = must_open(mute->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpint(g_get_monotonic_time() - start, <,
                        4 * G_USEC_PER_SEC);
        check_state(bs, n, n, true);
        check_replies(bs, 16, n);
    }
}

/* Slow, and no multi-conn: the deep window on the one connection. */
static void test_spread_single(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=multi-conn", "--filter=delay", "memory",
                       "64M", "delay-read=10ms", "multi-conn-mode=disable",
                       NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpuint(bdrv_get_channels(bs), ==, 1);
    check_state(bs, 1, 1, true);
    check_replies(bs, 16, 1);
}

/*
 * Slow, and one client at a time: the others' handshakes fail, and the
 * node goes on with one connection and the deep window.
 */
static void test_spread_limit(void)
{
    int n = nbdblk_default_connections();
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;

    if (!have_nbdkit()) {
        return;
    }
    if (n < 2) {
        g_test_skip("one CPU: one connection by default, nothing to spread");
        return;
    }
    srv = server_start("--filter=limit", "--filter=delay", "memory", "64M",
                       "delay-read=10ms", "limit=1", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    check_state(bs, n, 1, true);
    check_replies(bs, 16, 1);
    check_mib(bs, 5 * MiB, 0x3c);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/flush-fua", test_flush_fua);
    g_test_add_func("/nbd/multi-conn", test_multi_conn);
    g_test_add_func("/nbd/spread/fast", test_spread_fast);
    g_test_add_func("/nbd/spread/latency", test_spread_latency);
    g_test_add_func("/nbd/spread/single", test_spread_single);
    g_test_add_func("/nbd/spread/limit", test_spread_limit);
    return g_test_run();
}
