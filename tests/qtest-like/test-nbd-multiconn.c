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
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_flush(bs), ==, 0);
    /* A flush goes out on every connection. */
    g_assert_cmpint(count_lines(log, (const char *[]){ " Flush id=", NULL }),
                    ==, nbdblk_default_connections());
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

/* connections=N with a multi-conn server, 1 without; bad values fail. */
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
        g_autoptr(BlockDriverState) bs = must_open(srv->uri, 0, NULL);
        g_autofree char *before = NULL;

        g_assert_cmpint(nbdblk_get_connections(bs), ==,
                        nbdblk_default_connections());
        /* Requests spread over the connections. */
        g_file_get_contents(log, &before, NULL, NULL);
        for (int i = 0; i < 16; i++) {
            bdrv_aio_pread(bs, i * 4096, 4096, bufs[i], 0, pending_cb,
                           &p[i]);
        }
        run_until_all(p, 16, 60);
        for (int i = 0; i < 16; i++) {
            g_assert_cmpint(p[i].ret, ==, 0);
        }
        for (int c = 1; c <= 40; c++) {
            g_autofree char *needle = g_strdup_printf("connection=%d Read "
                                                      "id=", c);

            used += count_lines(log, (const char *[]){ needle, NULL }) > 0;
        }
        g_assert_cmpint(used, ==, nbdblk_default_connections());
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

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/flush-fua", test_flush_fua);
    g_test_add_func("/nbd/multi-conn", test_multi_conn);
    return g_test_run();
}
