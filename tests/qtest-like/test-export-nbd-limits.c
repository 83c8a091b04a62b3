/*
 * NBD export tests of backpressure and request lifetimes: pipelined
 * requests completing out of order, concurrent writers, the server freed
 * or shut down with requests in flight, and NBD_CMD_DISC with requests
 * in flight.  After each the server still serves a normal client the
 * right bytes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/block-int.h"
#include "block/export/nbd-server-int.h"

#include <errno.h>
#include <libnbd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int pipeline_client(void *opaque)
{
    ExportFixture *f = opaque;
    bool seen[100] = { false };
    bool in_order = true;
    int fd = raw_open(f->sock, true, false);

    FAIL_IF(fd < 0);
    for (int i = 0; i < 100; i++) {
        FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, i, i * 4096, 4096, NULL));
    }
    for (int i = 0; i < 100; i++) {
        RawReply r;

        FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error || r.len != 4096);
        FAIL_IF(r.cookie >= 100 || seen[r.cookie]);
        seen[r.cookie] = true;
        in_order &= r.cookie == (uint64_t)i;
        raw_reply_clear(&r);
    }
    FAIL_IF(in_order);      /* jitter reorders completions */
    close(fd);
    return 0;
}

static void test_pipeline(void)
{
    ExportFixture *f = fixture_new_spec(
        "null:size=16M,latency-ns=20000000,jitter-ns=20000000", false);
    NbdServerStats st;

    g_assert_cmpint(run_client(pipeline_client, f), ==, 0);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.max_client_in_flight, ==,
                     NBDSRV_MAX_CLIENT_REQUESTS);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- two writers ---- */

typedef struct Writer {
    ExportFixture *f;
    int64_t base;
    int ret;
} Writer;

static gpointer writer_thread(gpointer opaque)
{
    Writer *w = opaque;
    struct nbd_handle *h = nbd_create();

    if (nbd_connect_unix(h, w->f->sock) < 0) {
        w->ret = __LINE__;
    }
    for (int i = 0; !w->ret && i < 256; i++) {
        int64_t off = w->base + i * 8 * KiB;

        if (nbd_pwrite(h, w->f->model + off, 8 * KiB, off, 0) < 0) {
            w->ret = __LINE__;
        }
    }
    nbd_close(h);
    return NULL;
}

static int writers_client(void *opaque)
{
    ExportFixture *f = opaque;
    Writer w[2] = { { f, 2 * MiB }, { f, 10 * MiB } };
    GThread *t[2];

    for (int i = 0; i < 2; i++) {
        test_fill_pattern(f->model + w[i].base, w[i].base, 2 * MiB, 50 + i);
        t[i] = g_thread_new("writer", writer_thread, &w[i]);
    }
    for (int i = 0; i < 2; i++) {
        g_thread_join(t[i]);
        FAIL_IF(w[i].ret);
    }
    return normal_client(f);
}

static void test_two_writers(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);

    g_assert_cmpint(run_client(writers_client, f), ==, 0);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- lifetimes ---- */

typedef struct Life {
    ExportFixture *f;
    int requests;
    bool graceful;
    gint acted;
} Life;

/* When every request is in flight: free or shut down the server. */
static bool life_monitor(void *opaque)
{
    Life *l = opaque;

    if (nbdsrv_get_in_flight(l->f->srv) < (uint64_t)l->requests) {
        return false;
    }
    if (l->graceful) {
        nbdsrv_shutdown(l->f->srv);
    } else {
        nbdsrv_free(l->f->srv);
        l->f->srv = NULL;
    }
    g_atomic_int_set(&l->acted, 1);
    return true;
}

static int life_client(void *opaque)
{
    Life *l = opaque;
    uint8_t payload[4096] = { 0 };
    int fd = raw_open(l->f->sock, true, false);

    FAIL_IF(fd < 0);
    for (int i = 0; i < l->requests; i++) {
        uint16_t cmd = i % 3 ? NBD_CMD_READ : NBD_CMD_WRITE;

        FAIL_IF(!raw_request(fd, 0, cmd, i, i * 4096, 4096,
                             cmd == NBD_CMD_WRITE ? payload : NULL));
    }
    FAIL_IF(!wait_flag(&l->acted));
    if (l->graceful) {
        /* Every request is answered before the server hangs up. */
        for (int i = 0; i < l->requests; i++) {
            RawReply r;

            FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error);
            raw_reply_clear(&r);
        }
        FAIL_IF(raw_connect(l->f->sock) >= 0);  /* no longer listening */
    }
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    return 0;
}

static bool bs_idle(void *opaque)
{
    ExportFixture *f = opaque;

    return f->bs->refcnt == 1 && bdrv_get_in_flight(f->bs) == 0;
}

static bool srv_drained(void *opaque)
{
    return nbdsrv_is_drained(((ExportFixture *)opaque)->srv);
}

static void test_lifetime(gconstpointer graceful)
{
    ExportFixture *f = fixture_new_spec(
        "null:size=16M,latency-ns=1000000000", false);
    Life l = { .f = f, .requests = 12, .graceful = graceful != NULL };
    Monitor mon;
    struct stat st;

    monitor_start(&mon, life_monitor, &l);
    g_assert_cmpint(run_client(life_client, &l), ==, 0);
    monitor_stop(&mon);
    if (l.graceful) {
        run_loop_until(srv_drained, f, 30);
        g_assert_cmpint(lstat(f->sock, &st), <, 0);
    } else {
        /* The requests outlive the server; their completions release
         * the node. */
        g_assert_cmpuint(bdrv_get_in_flight(f->bs), >, 0);
        run_loop_until(bs_idle, f, 30);
    }
    fixture_free(f);
}

/* DISC right after writes: they complete and are answered first. */
static int disc_client(void *opaque)
{
    ExportFixture *f = opaque;
    int fd = raw_open(f->sock, true, false);

    FAIL_IF(fd < 0);
    for (int i = 0; i < 3; i++) {
        int64_t off = 8 * MiB + i * 64 * KiB;

        test_fill_pattern(f->model + off, off, 64 * KiB, 70 + i);
        FAIL_IF(!raw_request(fd, 0, NBD_CMD_WRITE, i, off, 64 * KiB,
                             f->model + off));
    }
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_DISC, 9, 0, 0, NULL));
    for (int i = 0; i < 3; i++) {
        RawReply r;

        FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error);
        raw_reply_clear(&r);
    }
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    return 0;
}

static void test_disc(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);

    g_assert_cmpint(run_client(disc_client, f), ==, 0);
    assert_recovered(f);
    fixture_free(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd/limits/pipeline", test_pipeline);
    g_test_add_func("/export-nbd/limits/two-writers", test_two_writers);
    g_test_add_data_func("/export-nbd/lifetime/free-in-flight", NULL,
                         test_lifetime);
    g_test_add_data_func("/export-nbd/lifetime/shutdown", "", test_lifetime);
    g_test_add_func("/export-nbd/lifetime/disc", test_disc);
    return g_test_run();
}
