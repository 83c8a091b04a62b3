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

/*
 * Write streams of 64 MiB until the spread is decided (at most 1 GiB);
 * with @idle, each followed by idle reads of 4 KiB, one at a time: a
 * server quick when it is free gets moments to show it, which a stream
 * of 32 MiB in flight on a loaded machine never gives.
 */
static void write_until_decided(BlockDriverState *bs, uint8_t *buf,
                                bool idle)
{
    for (int i = 0; i < 16 && !nbdblk_spread_decided(bs); i++) {
        write_stream(bs, buf, 64, 64);
        for (int j = 0; idle && j < 16; j++) {
            g_assert_cmpint(test_pread(bs, 0, 4096, buf), ==, 0);
        }
    }
    g_assert_true(nbdblk_spread_decided(bs));
}

/*
 * The spread decides on times, and a loaded machine moves them: a
 * scheduling stall of a few ms makes an idle read look latency-bound at
 * open, and more connections are more threads winning more CPU from
 * other processes, a real gain even against a server that serialises.
 * Every outcome is then checked for consistency and for the data, and a
 * case is opened again, up to SPREAD_TRIES times, until one attempt
 * reaches the decision it is there for; on a quiet machine the first.
 */
#define SPREAD_TRIES 5
/* An open only: cheap, and on a loaded machine the cache hit right after
 * the others' start took 2 ms or more in half the attempts. */
#define FIRST_SLOW_TRIES 12

/* Not decided yet: one connection of @planned made and taking requests,
 * the pool and the largest window sized for all. */
static void check_undecided(BlockDriverState *bs, int planned)
{
    g_autofree char *upto = g_strdup_printf("connections: 1 (up to %d)",
                                            planned);

    g_assert_false(nbdblk_spread_decided(bs));
    g_assert_cmpint(nbdblk_get_connections(bs), ==, 1);
    g_assert_true(planned == 1 || info_has(bs, upto));
    g_assert_cmpint(nbdblk_get_active_connections(bs), ==, 1);
    g_assert_cmpuint(bdrv_get_channels(bs), ==, planned);
    g_assert_cmpuint(bdrv_get_active_channels(bs), ==, 1);
    g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 8 * MiB);
    g_assert_cmpint(bdrv_get_max_window_bytes(bs), ==, 32 * MiB);
}

/*
 * Decided, by a node opened with the default count of @n: a state one of
 * the decisions makes, and the data still goes through.  Returns the
 * connections taking requests.
 */
static int check_decided(BlockDriverState *bs, int n)
{
    int conns = nbdblk_get_connections(bs);
    int active = nbdblk_get_active_connections(bs);
    int64_t window = bdrv_get_window_bytes(bs);
    g_autofree char *made = g_strdup_printf("connections: %d", conns);
    g_autofree char *taking = g_strdup_printf("connections taking "
                                              "requests: %d", active);

    g_assert_true(nbdblk_spread_decided(bs));
    g_assert_true(info_has(bs, made));
    g_assert_true(info_has(bs, taking));
    g_assert_true(conns == 1 || conns == n);
    g_assert_true(active == 1 || active == conns);
    g_assert_cmpuint(bdrv_get_active_channels(bs), ==, active);
    g_assert_cmpint(bdrv_get_max_window_bytes(bs), ==, 32 * MiB);
    if (active > 1) {
        /* All of them, for a latency-bound server: the deep window. */
        g_assert_cmpint(window, ==, 32 * MiB);
    } else if (conns > 1) {
        /* The others made and found no faster: back to one, as fast. */
        g_assert_cmpint(window, ==, 8 * MiB);
    } else {
        /* Quick on one; or slow, and no other could be made. */
        g_assert_true(window == 8 * MiB || window == 32 * MiB);
    }
    check_mib(bs, 7 * MiB, 0xa5 + active);
    return active;
}

/* Starts a server of the kind a case tests, on @file if it needs one. */
typedef Server *SpreadStart(const char *file);

/*
 * Open a fresh server of @start (@planned connections the most it can
 * have) until the data path decides, after a trial (with idle reads if
 * @idle), on @want_conns made, @want_active taking requests and a window
 * of @want_window.  Every attempt must be consistent; one that decided
 * at open or otherwise is retried, on a new server (one that takes a
 * single client may not have seen the last one go yet).
 */
static void spread_until(SpreadStart *start, const char *file, bool idle,
                         int planned, int want_conns, int want_active,
                         int64_t want_window)
{
    int n = nbdblk_default_connections();
    g_autofree uint8_t *buf = g_malloc0(MiB);
    bool reached = false;

    for (int i = 0; i < SPREAD_TRIES && !reached; i++) {
        g_autoptr(Server) srv = start(file);
        g_autoptr(BlockDriverState) bs = must_open(srv->uri, BDRV_O_RDWR,
                                                   NULL);
        int active;

        if (nbdblk_spread_decided(bs)) {
            /* Both idle reads took 2 ms or more: all of them at once. */
            g_test_message("attempt %d: decided at open", i + 1);
            g_assert_cmpint(check_decided(bs, n), ==,
                            nbdblk_get_connections(bs));
            g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
            continue;
        }
        check_undecided(bs, planned);
        /* Too few bytes for the trial: still one. */
        write_stream(bs, buf, 32, 64);
        check_undecided(bs, planned);
        write_until_decided(bs, buf, idle);
        active = check_decided(bs, n);
        reached = nbdblk_get_connections(bs) == want_conns &&
                  active == want_active &&
                  bdrv_get_window_bytes(bs) == want_window;
        if (!reached) {
            g_test_message("attempt %d: %d connection(s), %d taking "
                           "requests, window %" PRId64, i + 1,
                           nbdblk_get_connections(bs), active,
                           bdrv_get_window_bytes(bs));
        }
    }
    g_assert_true(reached);
}

/* A temporary file of 64 MiB for the file plugin (the memory plugin's
 * writes serialise on its lock). */
static char *spread_file(void)
{
    char *file = NULL;
    int fd = g_file_open_tmp("test-nbd-spread-XXXXXX", &file, NULL);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 64 * MiB), ==, 0);
    close(fd);
    return file;
}

/*
 * The default count against servers of known behaviour (nbd-spread.c).
 * A fast one is opened with one connection, and stays on it once it has
 * answered quickly on the data path; it never makes the others.
 */
static Server *start_fast(const char *file)
{
    return server_start("memory", "64M", NULL);
}

static void test_spread_fast(void)
{
    int n = nbdblk_default_connections();

    if (!have_nbdkit() || n < 2) {
        return;         /* one CPU: one connection, nothing to decide */
    }
    spread_until(start_fast, NULL, true, n, 1, 1, 8 * MiB);
}

/*
 * A first answer slow (a cache miss behind 4 ms), the second quick (a
 * hit): the others, started while the first waited, are closed again and
 * the node goes on with one.  A fresh server each time: a cold cache.
 */
static void test_spread_first_slow(void)
{
    int n = nbdblk_default_connections();
    bool dropped = false;

    if (!have_nbdkit() || n < 2) {
        return;
    }
    for (int i = 0; i < FIRST_SLOW_TRIES && !dropped; i++) {
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
            /* The hit too took 2 ms or more, or the miss 8 ms or more. */
            g_test_message("attempt %d: decided at open", i + 1);
            g_assert_cmpint(check_decided(bs, n), ==, n);
            g_assert_cmpint(bdrv_get_window_bytes(bs), ==, 32 * MiB);
        } else {
            check_undecided(bs, n);
            check_mib(bs, 3 * MiB, 0x5c);
            dropped = true;
        }
    }
    g_assert_true(dropped);
}

/*
 * A read latency of 10 ms makes all connections at open and asks for a
 * deep window, and so does a read that gets no answer: no trial, no
 * timing that load can turn (a stall only adds to the latency).
 */
static void test_spread_latency(void)
{
    int n = nbdblk_default_connections();
    g_autofree uint8_t *buf = g_malloc0(MiB);

    if (!have_nbdkit() || n < 2) {
        return;
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
        g_assert_cmpint(check_decided(bs, n), ==, n);
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
}

/*
 * A write latency of 100 ms (reads fast) gets the others after the trial,
 * and the deep window: server workers come per connection, and with 32
 * writes of 100 ms in flight two connections moved 1.6-1.8x what one did.
 */
static Server *start_slow_write(const char *file)
{
    return server_start("--filter=delay", "file", file, "delay-write=100ms",
                        NULL);
}

/* Slow at writing, and no multi-conn: the deep window alone. */
static Server *start_slow_single(const char *file)
{
    return server_start("--filter=multi-conn", "--filter=delay", "file",
                        file, "delay-write=100ms", "multi-conn-mode=disable",
                        NULL);
}

/*
 * Slow at writing, and one client at a time: the others' handshakes fail
 * (their GSources drive them, the main loop goes on), and the node goes
 * on with one connection and the deep window.
 */
static Server *start_slow_limit(const char *file)
{
    return server_start("--filter=limit", "--filter=delay", "file", file,
                        "delay-write=100ms", "limit=1", NULL);
}

/*
 * A server that serialises every request gains nothing from more
 * connections and goes back to one.  Its 10 ms per request is most of
 * what one connection waits for; with 2 ms, the time on the socket was
 * the larger part on a loaded machine, and more connections overlapped it
 * (1.2-3.5x).
 */
static Server *start_serial(const char *file)
{
    return server_start("--filter=noparallel", "--filter=delay", "file",
                        file, "delay-write=10ms", "serialize=all-requests",
                        NULL);
}

static void test_spread_slow_write(void)
{
    int n = nbdblk_default_connections();
    g_autofree char *file = NULL;

    if (!have_nbdkit() || n < 2) {
        return;
    }
    file = spread_file();
    spread_until(start_slow_write, file, false, n, n, n, 32 * MiB);
    spread_until(start_slow_single, file, false, 1, 1, 1, 32 * MiB);
    spread_until(start_slow_limit, file, false, n, 1, 1, 32 * MiB);
    g_remove(file);
}

static void test_spread_serial(void)
{
    int n = nbdblk_default_connections();
    g_autofree char *file = NULL;

    if (!have_nbdkit() || n < 2) {
        return;
    }
    file = spread_file();
    spread_until(start_serial, file, false, n, n, 1, 8 * MiB);
    g_remove(file);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/flush-fua", test_flush_fua);
    g_test_add_func("/nbd/multi-conn", test_multi_conn);
    g_test_add_func("/nbd/spread/fast", test_spread_fast);
    g_test_add_func("/nbd/spread/first-slow", test_spread_first_slow);
    g_test_add_func("/nbd/spread/latency", test_spread_latency);
    g_test_add_func("/nbd/spread/slow-write", test_spread_slow_write);
    g_test_add_func("/nbd/spread/serial", test_spread_serial);
    return g_test_run();
}
