/*
 * NBD client driver under faults, against real nbdkit servers: injected
 * errors, a server that dies or stalls, cancel, the per-connection queue
 * bound, TLS with PSK.  Timing bounds are generous ("prompt" means well
 * before a delay filter would have answered).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/nbd.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* Server errors come back as -errno; the node stays usable. */
static void test_errors(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *rtrigger = NULL;
    g_autofree char *wtrigger = NULL;
    g_autofree char *rarg = NULL;
    g_autofree char *warg = NULL;
    uint8_t buf[4096] = { 0 };

    if (!have_nbdkit()) {
        return;
    }
    rtrigger = g_build_filename(g_get_tmp_dir(), "test-nbd-rtrigger-XXXXXX",
                                NULL);
    g_close(g_mkstemp(rtrigger), NULL);
    wtrigger = g_build_filename(g_get_tmp_dir(), "test-nbd-wtrigger-XXXXXX",
                                NULL);
    g_close(g_mkstemp(wtrigger), NULL);
    g_remove(wtrigger);
    rarg = g_strdup_printf("error-pread-file=%s", rtrigger);
    warg = g_strdup_printf("error-pwrite-file=%s", wtrigger);

    srv = server_start("--filter=error", "memory", "64M", "error=EIO",
                       "error-pread-rate=100%", rarg,
                       "error-pwrite-rate=100%", warg, NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, -EIO);
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, 0);
    g_remove(rtrigger);
    g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, 0);
    g_file_set_contents(wtrigger, "", 0, NULL);
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, -EIO);
    g_remove(wtrigger);
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, 0);
    g_assert_cmpint(test_flush(bs), ==, 0);
}

/* A failing block status is an error, and leaves no extents behind. */
static void test_errors_status(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=error", "memory", "64M", "error=EPERM",
                       "error-extents-rate=100%", NULL);
    bs = must_open(srv->uri, 0, NULL);
    g_assert_cmpint(test_block_status(bs, 0, MiB, ext), ==, -EPERM);
    g_assert_cmpint(ext->len, ==, 0);
}

static void test_errors_enospc(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    uint8_t buf[4096] = { 1 };

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=error", "memory", "64M", "error=ENOSPC",
                       "error-pwrite-rate=100%", "error-zero-rate=100%",
                       NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, -ENOSPC);
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, 0), ==, -ENOSPC);
    g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, 0);
}

/* The server dies with requests in flight: they fail promptly; later
 * requests fail at once; closing does not hang. */
static void test_server_death(void)
{
    g_autoptr(Server) srv = NULL;
    BlockDriverState *bs;
    Pending p[8] = { 0 };
    static uint8_t bufs[8][65536];
    g_autofree char *uri = NULL;
    gint64 t0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=delay", "memory", "64M", "rdelay=5",
                       "wdelay=5", NULL);
    /* Without reconnect (test-nbd-reconnect.c has it). */
    uri = g_strconcat(srv->uri, "&reconnect-delay=0", NULL);
    bs = must_open(uri, BDRV_O_RDWR, NULL);
    for (int i = 0; i < 8; i++) {
        if (i % 2) {
            bdrv_aio_pwrite(bs, i * MiB, sizeof(bufs[i]), bufs[i], 0,
                            pending_cb, &p[i]);
        } else {
            bdrv_aio_pread(bs, i * MiB, sizeof(bufs[i]), bufs[i], 0,
                           pending_cb, &p[i]);
        }
    }
    run_for_ms(300);            /* the server holds them now */
    for (int i = 0; i < 8; i++) {
        g_assert_false(p[i].done);
    }
    t0 = g_get_monotonic_time();
    kill(srv->pid, SIGKILL);
    run_until_all(p, 8, 30);
    for (int i = 0; i < 8; i++) {
        g_test_message("request %d: %s after %" G_GINT64_FORMAT " ms", i,
                       g_strerror(-p[i].ret), (p[i].done_us - t0) / 1000);
        g_assert_true(p[i].ret == -ENOTCONN || p[i].ret == -EIO ||
                      p[i].ret == -ESHUTDOWN);
        g_assert_cmpint(p[i].done_us - t0, <, 3 * G_USEC_PER_SEC);
    }
    server_reap(srv);

    t0 = g_get_monotonic_time();
    g_assert_cmpint(test_pread(bs, 0, 4096, bufs[0]), ==, -ENOTCONN);
    g_assert_cmpint(test_flush(bs), ==, -ENOTCONN);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC);
    g_assert_true(info_has(bs, "state: failed (Transport endpoint is not "
                           "connected)"));
    bdrv_unref(bs);
}

/* cancel_in_flight: slow requests in flight and queued end with
 * -ECANCELED well within a second. */
static void test_cancel(void)
{
    g_autoptr(Server) srv = NULL;
    BlockDriverState *bs;
    enum { N = NBDBLK_MAX_IN_FLIGHT + 6 };
    static Pending p[N];
    static uint8_t bufs[N][4096];
    gint64 t0, worst = 0;

    if (!have_nbdkit()) {
        return;
    }
    memset(p, 0, sizeof(p));
    srv = server_start("--filter=delay", "memory", "64M", "rdelay=10",
                       NULL);
    bs = must_open(srv->uri, 0, "1");
    for (int i = 0; i < N; i++) {
        bdrv_aio_pread(bs, i * 4096, 4096, bufs[i], 0, pending_cb, &p[i]);
    }
    run_for_ms(300);
    t0 = g_get_monotonic_time();
    bdrv_cancel_in_flight(bs);
    run_until_all(p, N, 30);
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(p[i].ret, ==, -ECANCELED);
        worst = MAX(worst, p[i].done_us - t0);
    }
    g_test_message("all %d cancelled after %" G_GINT64_FORMAT " ms", N,
                   worst / 1000);
    g_assert_cmpint(worst, <, G_USEC_PER_SEC);
    g_assert_cmpint(test_pread(bs, 0, 4096, bufs[0]), ==, -ECANCELED);
    bdrv_unref(bs);
}

/* More requests than slots: the excess waits in the driver and every
 * request still gets the right data. */
static void test_queue(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    enum { N = 3 * NBDBLK_MAX_IN_FLIGHT + 7 };
    static Pending p[N];
    static uint8_t bufs[N][4096];
    g_autofree uint8_t *w = g_malloc(N * 4096);
    unsigned in_flight, queued;

    if (!have_nbdkit()) {
        return;
    }
    memset(p, 0, sizeof(p));
    srv = server_start("--filter=delay", "memory", "64M", "rdelay=20ms",
                       NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, "1");
    test_fill_pattern(w, 0, N * 4096, 21);
    g_assert_cmpint(test_pwrite(bs, 0, N * 4096, w), ==, 0);
    for (int i = 0; i < N; i++) {
        bdrv_aio_pread(bs, i * 4096, 4096, bufs[i], 0, pending_cb, &p[i]);
    }
    g_assert_cmpint(bdrv_get_in_flight(bs), ==, N);
    nbdblk_get_counts(bs, &in_flight, &queued);
    g_assert_cmpuint(in_flight, ==, NBDBLK_MAX_IN_FLIGHT);
    g_assert_cmpuint(queued, ==, N - NBDBLK_MAX_IN_FLIGHT);
    run_until_all(p, N, 60);
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(p[i].ret, ==, 0);
        g_assert_cmpmem(bufs[i], 4096, w + i * 4096, 4096);
    }
    nbdblk_get_counts(bs, &in_flight, &queued);
    g_assert_cmpuint(in_flight + queued, ==, 0);
}

/* Closing never waits for a server that stopped answering. */
static void test_close_stalled(void)
{
    g_autoptr(Server) srv = NULL;
    BlockDriverState *bs;
    gint64 t0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    kill(srv->pid, SIGSTOP);
    t0 = g_get_monotonic_time();
    bdrv_unref(bs);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC);
    kill(srv->pid, SIGCONT);
}

/* Open @uri with @options (key, value, ..., NULL); NULL with @errp set. */
static BlockDriverState *open_with(const char *uri, GError **errp,
                                   const char *key, ...)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal,
                                                       g_free, g_free);
    va_list ap;

    va_start(ap, key);
    for (const char *k = key; k; k = va_arg(ap, const char *)) {
        g_hash_table_insert(opts, g_strdup(k),
                            g_strdup(va_arg(ap, const char *)));
    }
    va_end(ap);
    return bdrv_open(uri, "nbd", BDRV_O_RDWR, opts, errp);
}

/* SIGSTOP @pid and wait until every thread of it has stopped: kill()
 * returns before a thread running on another CPU is stopped. */
static void stop_server(GPid pid)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/task", (int)pid);
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    bool all;

    g_assert_cmpint(kill(pid, SIGSTOP), ==, 0);
    do {
        g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
        const char *tid;

        g_assert_nonnull(d);
        all = true;
        while ((tid = g_dir_read_name(d)) && all) {
            g_autofree char *path = g_strdup_printf("%s/%s/stat", dir, tid);
            g_autofree char *stat = NULL;
            const char *paren;

            if (g_file_get_contents(path, &stat, NULL, NULL) &&
                (paren = strrchr(stat, ')')) && paren[1] == ' ') {
                all = paren[2] == 'T' || paren[2] == 't';
            }
        }
        if (!all) {
            g_assert_cmpint(g_get_monotonic_time(), <, deadline);
            g_usleep(1000);     /* waiting for the stop, not a delay */
        }
    } while (!all);
}

/* A stopped server: the handshake gives up after connect-timeout, and
 * an interrupt check that says stop ends the wait at once. */
static bool test_interrupt_now(void *opaque)
{
    int *calls = opaque;

    return ++*calls >= 3;
}

static void test_connect_timeout(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;
    gint64 t0;
    int calls = 0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    stop_server(srv->pid);
    t0 = g_get_monotonic_time();
    bs = open_with(srv->uri, &err, "connect-timeout", "1", NULL);
    g_assert_null(bs);
    g_assert_nonnull(strstr(err->message, "did not finish the handshake "
                            "within 1 s (connect-timeout)"));
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, G_USEC_PER_SEC);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 10 * G_USEC_PER_SEC);
    g_clear_error(&err);

    nbdblk_set_interrupt_func(test_interrupt_now, &calls);
    t0 = g_get_monotonic_time();
    bs = open_with(srv->uri, &err, "connect-timeout", "0", NULL);
    nbdblk_set_interrupt_func(NULL, NULL);
    g_assert_null(bs);
    g_assert_nonnull(strstr(err->message, "interrupted while connecting"));
    g_assert_cmpint(calls, ==, 3);      /* every 100 ms at most */
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
    g_clear_error(&err);

    bs = open_with(srv->uri, &err, "connect-timeout", "86401", NULL);
    g_assert_null(bs);
    g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
    kill(srv->pid, SIGCONT);
}

/* A server that stops answering: io-timeout fails what was in flight,
 * and everything after, with ETIMEDOUT. */
static void test_io_timeout(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;
    Pending p[4] = { 0 };
    static uint8_t bufs[4][4096];
    gint64 t0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = open_with(srv->uri, &err, "io-timeout", "1", "connections", "1",
                   "reconnect-delay", "0", NULL);
    g_assert_no_error(err);
    g_assert_cmpint(test_pread(bs, 0, 4096, bufs[0]), ==, 0);
    stop_server(srv->pid);
    t0 = g_get_monotonic_time();
    for (int i = 0; i < 4; i++) {
        bdrv_aio_pread(bs, i * 4096, 4096, bufs[i], 0, pending_cb, &p[i]);
    }
    run_until_all(p, 4, 30);
    for (int i = 0; i < 4; i++) {
        g_assert_cmpint(p[i].ret, ==, -ETIMEDOUT);
        g_assert_cmpint(p[i].done_us - t0, >=, G_USEC_PER_SEC);
        g_assert_cmpint(p[i].done_us - t0, <, 10 * G_USEC_PER_SEC);
    }
    g_assert_cmpint(test_pread(bs, 0, 4096, bufs[0]), ==, -ETIMEDOUT);
    g_assert_true(info_has(bs, "state: failed (Connection timed out)"));
    bdrv_unref(bs);
    kill(srv->pid, SIGCONT);
}

/* TLS with a pre-shared key; no downgrade either way. */
static void test_tls_psk(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) plain = NULL;
    g_autoptr(GError) err = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *keys = NULL;
    g_autofree char *pskarg = NULL;
    g_autofree char *uri = NULL;
    g_autofree char *plain_uri = NULL;
    g_autofree char *wrong_user = NULL;
    g_autofree char *missing = NULL;
    g_autofree char *out = NULL;
    uint8_t w[4096], r[4096];

    if (!have_nbdkit()) {
        return;
    }
    if (!g_spawn_command_line_sync("nbdkit --dump-config", &out, NULL, NULL,
                                   NULL) || !strstr(out, "tls=yes")) {
        g_test_skip("nbdkit was built without TLS");
        return;
    }
    keys = g_build_filename(g_get_tmp_dir(), "test-nbd-psk-XXXXXX", NULL);
    g_close(g_mkstemp(keys), NULL);
    g_assert_true(g_file_set_contents(keys, "alice:0123456789abcdef0123456"
                                      "789abcdef\n", -1, NULL));
    pskarg = g_strdup_printf("--tls-psk=%s", keys);
    srv = server_start("--tls=require", pskarg, "memory", "1M", NULL);
    uri = g_strdup_printf("nbds+unix:///?socket=%s&tls-psk-file=%s&"
                          "tls-username=alice", srv->sock, keys);
    bs = open_nbd(uri, BDRV_O_RDWR, NULL, &err);
    if (!bs && strstr(err->message, "without TLS support")) {
        g_test_skip("libnbd was built without TLS");
        g_remove(keys);
        return;
    }
    g_assert_no_error(err);
    g_assert_true(info_has(bs, "tls: yes"));
    test_fill_pattern(w, 0, sizeof(w), 31);
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(w), w), ==, 0);
    g_assert_cmpint(test_pread(bs, 0, sizeof(r), r), ==, 0);
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));

    /* Without TLS the server refuses; with the wrong user too, and the
     * user name is not shown. */
    g_clear_error(&err);
    g_assert_null(open_nbd(srv->uri, 0, NULL, &err));
    wrong_user = g_strdup_printf("nbds+unix:///?socket=%s&tls-psk-file=%s&"
                                 "tls-username=mallory", srv->sock, keys);
    g_clear_error(&err);
    g_assert_null(open_nbd(wrong_user, 0, NULL, &err));
    g_assert_null(strstr(err->message, "mallory"));
    missing = g_strdup_printf("nbds+unix:///?socket=%s&tls-psk-file=%s.no",
                              srv->sock, keys);
    g_clear_error(&err);
    g_assert_null(open_nbd(missing, 0, NULL, &err));
    g_assert_nonnull(strstr(err->message, "tls-psk-file"));

    /* nbds:// to a server without TLS fails rather than downgrading. */
    plain = server_start("memory", "1M", NULL);
    plain_uri = g_strdup_printf("nbds+unix:///?socket=%s&tls-psk-file=%s&"
                                "tls-username=alice", plain->sock, keys);
    g_clear_error(&err);
    g_assert_null(open_nbd(plain_uri, 0, NULL, &err));
    g_remove(keys);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/errors/eio", test_errors);
    g_test_add_func("/nbd/errors/enospc", test_errors_enospc);
    g_test_add_func("/nbd/errors/status", test_errors_status);
    g_test_add_func("/nbd/death", test_server_death);
    g_test_add_func("/nbd/cancel", test_cancel);
    g_test_add_func("/nbd/queue", test_queue);
    g_test_add_func("/nbd/close-stalled", test_close_stalled);
    g_test_add_func("/nbd/connect-timeout", test_connect_timeout);
    g_test_add_func("/nbd/io-timeout", test_io_timeout);
    g_test_add_func("/nbd/tls-psk", test_tls_psk);
    return g_test_run();
}
