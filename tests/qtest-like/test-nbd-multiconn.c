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
        g_assert_true(nbdblk_spread_decided(bs));
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

/* Write streams of 64 MiB until the spread is decided (at most 1 GiB). */
static void write_until_decided(BlockDriverState *bs, uint8_t *buf)
{
    for (int i = 0; i < 16 && !nbdblk_spread_decided(bs); i++) {
        write_stream(bs, buf, 64, 64);
    }
    g_assert_true(nbdblk_spread_decided(bs));
}

/*
 * The default count against servers of known behaviour (nbd-spread.c):
 * a fast one is opened with one connection, and stays on it once it has
 * answered quickly on the data path; so is one whose first answer only
 * was slow; a read latency of 10 ms makes all
 * connections at open and asks for a deep window, and so does a read
 * that gets no answer; a write latency of 100 ms (reads fast) gets the
 * others after the trial, and the deep window (alone without multi-conn,
 * or when the server takes one client only);
 * a server that serialises every request gains nothing from more
 * connections and goes back to one.
 */
static void test_spread(void)
{
    int n = nbdblk_default_connections();
    g_autofree uint8_t *buf = g_malloc0(MiB);
    g_autofree char *file = NULL;
    int fd;

    if (!have_nbdkit() || n < 2) {
        return;         /* one CPU: one connection, nothing to decide */
    }
    /* The file plugin: the memory plugin's writes serialise on its lock. */
    fd = g_file_open_tmp("test-nbd-spread-XXXXXX", &file, NULL);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 64 * MiB), ==, 0);
    close(fd);
    {
        g_autoptr(Server) fast = server_start("memory", "64M", NULL);
        g_autoptr(BlockDriverState) bs = must_open(fast->uri, BDRV_O_RDWR,
                                                   NULL);

        if (nbdblk_spread_decided(bs)) {
            /* Only if both idle 4 KiB reads took 2 ms or more. */
            g_test_message("fast server looked slow at open");
            g_assert_cmpint(nbdblk_get_connections(bs), ==, n);
            g_assert_cmpint(nbdblk_get_active_connections(bs), ==, n);
            g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        } else {
            g_autofree char *upto = g_strdup_printf("connections: 1 (up to "
                                                    "%d)", n);

            /* One made; the pool is sized for the others. */
            g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
            g_assert_true(info_has(bs, upto));
            g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
            g_assert_cmpuint(bdrv_get_channels(bs), ==, n);
            g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 8 * MiB);
            /* Sized for a trial that finds the server slow. */
            g_assert_cmpint(bdrv_get_max_window_bytes(bs), ==, 32 * MiB);
            /* The window follows the one connection taking requests. */
            g_assert_cmpuint(bdrv_get_active_channels(bs), ==, 1);
            /* Too few bytes for the trial: still one. */
            write_stream(bs, buf, 32, 64);
            g_assert_false(nbdblk_spread_decided(bs));
            g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
            /* Enough bytes: decided, one way or the other; quick answers
             * (the usual case) keep one, and make no other. */
            write_until_decided(bs, buf);
            if (nbdblk_get_active_connections(bs) == 1) {
                g_assert_true(info_has(bs, "connections taking requests: "
                                           "1"));
            }
        }
    }
    {
        /*
         * A first answer slow (a cache miss behind 4 ms), the second quick
         * (a hit): the others, started while the first waited, are closed
         * again and the node goes on with one.
         */
        g_autoptr(Server) once = server_start("--filter=multi-conn",
                                              "--filter=cache",
                                              "--filter=delay", "memory",
                                              "64M", "delay-read=4ms",
                                              "cache-on-read=true",
                                              "multi-conn-mode=unsafe",
                                              NULL);
        g_autoptr(BlockDriverState) bs = must_open(once->uri, BDRV_O_RDWR,
                                                   NULL);

        if (nbdblk_spread_decided(bs)) {
            /* Only if the hit too took 2 ms or more (a loaded machine). */
            g_test_message("the cached read looked slow at open");
            g_assert_cmpint(nbdblk_get_connections(bs), ==, n);
        } else {
            g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
            g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
            g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 8 * MiB);
        }
        check_mib(bs, 3 * MiB, 0x5c);
    }
    {
        g_autoptr(Server) slow = server_start("--filter=delay", "memory",
                                              "64M", "delay-read=10ms",
                                              NULL);
        g_autoptr(BlockDriverState) bs = must_open(slow->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_true(nbdblk_spread_decided(bs));
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, n);
        /* A request queued behind each busy server worker. */
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        g_assert_cmpuint(bdrv_get_active_channels(bs), ==, n);
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
    }
    {
        /* A server that does not answer the probe: the open goes on after
         * half a second, on all connections. */
        g_autoptr(Server) mute = server_start("--filter=delay", "memory",
                                              "64M", "delay-read=20", NULL);
        gint64 start = g_get_monotonic_time();
        g_autoptr(BlockDriverState) bs = must_open(mute->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpint(g_get_monotonic_time() - start, <,
                        5 * G_USEC_PER_SEC);
        g_assert_true(nbdblk_spread_decided(bs));
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, n);
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        /* Writes still work, with the probe's reads in flight. */
        write_stream(bs, buf, 8, 64);
    }
    {
        g_autoptr(Server) slow = server_start("--filter=delay", "file", file,
                                              "delay-write=100ms", NULL);
        g_autoptr(BlockDriverState) bs = must_open(slow->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_false(nbdblk_spread_decided(bs));
        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
        g_assert_cmpuint(bdrv_get_channels(bs), ==, n);
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 8 * MiB);
        /* Server workers come per connection: with 32 writes of 100 ms in
         * flight, two connections moved 1.6-1.8x what one did. */
        write_until_decided(bs, buf);
        g_assert_cmpint(nbdblk_get_connections(bs), ==, n);
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, n);
        g_assert_cmpuint(bdrv_get_active_channels(bs), ==, n);
        /* ... and the deep window, which the pool was sized for. */
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        g_assert_cmpint(bdrv_get_max_window_bytes(bs), ==, 32 * MiB);
    }
    {
        /* Slow at writing, and no multi-conn: the deep window alone. */
        g_autoptr(Server) one = server_start("--filter=multi-conn",
                                             "--filter=delay", "file", file,
                                             "delay-write=100ms",
                                             "multi-conn-mode=disable",
                                             NULL);
        g_autoptr(BlockDriverState) bs = must_open(one->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_true(info_has(bs, "connections taking requests: 1"));
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 8 * MiB);
        write_until_decided(bs, buf);
        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
    }
    {
        /*
         * Slow at writing, and one client at a time: the others' handshakes
         * fail (their GSources drive them, the main loop goes on), and the
         * node goes on with one connection and the deep window.
         */
        g_autoptr(Server) lim = server_start("--filter=limit",
                                             "--filter=delay", "file", file,
                                             "delay-write=100ms", "limit=1",
                                             NULL);
        g_autoptr(BlockDriverState) bs = must_open(lim->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        write_until_decided(bs, buf);
        g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
        g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        check_mib(bs, 5 * MiB, 0x3a);
    }
    {
        g_autoptr(Server) serial = server_start("--filter=noparallel",
                                                "--filter=delay", "file",
                                                file, "delay-write=2ms",
                                                "serialize=all-requests",
                                                NULL);
        g_autoptr(BlockDriverState) bs = must_open(serial->uri, BDRV_O_RDWR,
                                                   NULL);

        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
        write_until_decided(bs, buf);
        g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
    }
    g_remove(file);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/flush-fua", test_flush_fua);
    g_test_add_func("/nbd/multi-conn", test_multi_conn);
    g_test_add_func("/nbd/spread", test_spread);
    return g_test_run();
}
