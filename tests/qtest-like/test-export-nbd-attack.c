/*
 * NBD export tests: hostile clients that try to take what others need
 * (issue 28).  Each attack runs while a well-behaved client (the victim)
 * reads 4 KiB, writes 4 KiB and reads it back, and reads 32 MiB (or the
 * whole export when smaller), all byte-exact, through the raw protocol
 * client whose every receive gives up after 10 s: a starved victim fails
 * the test instead of hanging it.
 *
 *  - write-hold: 33 connections each announce a 32 MiB WRITE and send one
 *    byte of its payload (on the old server: the whole 1 GiB budget, and
 *    every other client hung);
 *  - payload-timeout: such a WRITE (and a refused one whose payload is
 *    being skipped) is dropped after the payload timeout and its buffer
 *    freed;
 *  - slow-readers: connections that queue 32 MiB reads and never read the
 *    replies hold at most their share of the budget;
 *  - option-flood: NBD_OPT_LIST sent without reading the replies holds at
 *    most 64 KiB of output (the old server let it reach 4.5 MiB);
 *  - shared: --shared=N limits the connections served at once; more wait
 *    in the listen backlog until one ends;
 *  - gate: 8 connections asking for 128 MiB of reads at once put at most
 *    64 MiB into the block layer, and a small read goes past them.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/export/nbd-server-int.h"
#include "block/null.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the victim ---- */

/* A reply to a READ of @len at @off that must match the model. */
static bool victim_read(int fd, ExportFixture *f, uint64_t cookie,
                        int64_t off, uint32_t len)
{
    RawReply r;
    bool ok;

    if (!raw_request(fd, 0, NBD_CMD_READ, cookie, off, len, NULL) ||
        !raw_reply(fd, true, 0, &r)) {
        g_printerr("victim: no reply to a read of %u at %" PRId64 "\n",
                   len, off);
        return false;
    }
    ok = r.cookie == cookie && !r.error && r.len == len &&
         memcmp(r.data, f->model + off, len) == 0;
    raw_reply_clear(&r);
    return ok;
}

/* Read 4 KiB, write 4 KiB and read it back, read 32 MiB (at most the
 * export).  0 or a line number. */
static int victim(ExportFixture *f)
{
    int fd = raw_open(f->sock, true, false);
    int64_t woff = 10 * MiB;
    uint8_t pat[4096];
    RawReply r;

    FAIL_IF(fd < 0);
    FAIL_IF(!victim_read(fd, f, 1, 4 * MiB, 4096));
    test_fill_pattern(pat, woff, sizeof(pat), 99);
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_WRITE, 2, woff, sizeof(pat), pat));
    FAIL_IF(!raw_reply(fd, true, 0, &r) || r.cookie != 2 || r.error);
    raw_reply_clear(&r);
    memcpy(f->model + woff, pat, sizeof(pat));
    FAIL_IF(!victim_read(fd, f, 3, woff, sizeof(pat)));
    FAIL_IF(!victim_read(fd, f, 4, 0, MIN(32 * MiB, f->size)));
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_DISC, 5, 0, 0, NULL));
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    return 0;
}

/* ---- attack state shared with the main loop ---- */

typedef struct Attack {
    ExportFixture *f;
    int count;              /* attackers */
    gint ready;             /* the main loop saw them all at their limit */
    uint64_t max_held;      /* most a negotiating client held */
} Attack;

/* Clients in transmission that wait for something the attacker never
 * gives: a WRITE payload, or budget (paused with nothing in flight). */
static bool attackers_stuck(void *opaque)
{
    Attack *a = opaque;
    int n = 0;

    for (GList *l = a->f->srv->clients.head; l; l = l->next) {
        NbdClient *c = l->data;

        if (!c->closed && c->transmission &&
            (c->rstate == NBDR_PAYLOAD || (c->paused && !c->in_flight))) {
            n++;
        }
    }
    if (n >= a->count) {
        g_atomic_int_set(&a->ready, 1);
        return true;
    }
    return false;
}

/* ---- 33 WRITEs holding 32 MiB each ---- */

static int write_hold_client(void *opaque)
{
    Attack *a = opaque;
    int fds[33];
    uint8_t one = 0xee;
    int ret;

    for (int i = 0; i < a->count; i++) {
        fds[i] = raw_open(a->f->sock, true, false);
        FAIL_IF(fds[i] < 0);
        FAIL_IF(!raw_request(fds[i], 0, NBD_CMD_WRITE, i, 0, 32 * MiB,
                             NULL));
        FAIL_IF(!raw_write(fds[i], &one, 1));
    }
    FAIL_IF(!wait_flag(&a->ready));
    ret = victim(a->f);
    for (int i = 0; i < a->count; i++) {
        close(fds[i]);
    }
    return ret;
}

static void test_write_hold(void)
{
    ExportFixture *f = fixture_new_raw_size(NULL, false, 64 * MiB);
    Attack a = { .f = f, .count = 33 };
    Monitor mon;

    nbdsrv_set_shared(f->srv, 40);
    nbdsrv_set_payload_timeout(f->srv, 0);  /* they stay */
    monitor_start(&mon, attackers_stuck, &a);
    g_assert_cmpint(run_client(write_hold_client, &a), ==, 0);
    monitor_stop(&mon);
    assert_recovered(f);
    g_assert_cmpuint(nbdsrv_get_held_bytes(f->srv), ==, 0);
    fixture_free(f);
}

/* ---- the payload timeout ---- */

static int payload_client(void *opaque)
{
    Attack *a = opaque;
    ExportFixture *f = a->f;
    int slow = raw_open(f->sock, true, false);
    int skip = raw_open(f->sock, true, false);
    uint8_t some[10] = { 0xee };
    RawReply r;

    FAIL_IF(slow < 0 || skip < 0);
    /* A WRITE whose payload stops after one byte. */
    FAIL_IF(!raw_request(slow, 0, NBD_CMD_WRITE, 1, 0, 32 * MiB, NULL));
    FAIL_IF(!raw_write(slow, some, 1));
    /* A refused WRITE (past the end) whose payload never comes. */
    FAIL_IF(!raw_request(skip, 0, NBD_CMD_WRITE, 2, f->size - 4096, MiB,
                         NULL));
    FAIL_IF(!raw_write(skip, some, sizeof(some)));
    FAIL_IF(!raw_reply(skip, true, 0, &r) || r.cookie != 2 ||
            r.error != NBD_ENOSPC);
    raw_reply_clear(&r);
    FAIL_IF(victim(f) != 0);
    /* Both dropped by the timeout (receives give up after 10 s). */
    FAIL_IF(!raw_wait_closed(slow));
    FAIL_IF(!raw_wait_closed(skip));
    close(slow);
    close(skip);
    return 0;
}

static void test_payload_timeout(void)
{
    ExportFixture *f = fixture_new_raw_size(NULL, false, 64 * MiB);
    Attack a = { .f = f };
    NbdServerStats st;

    nbdsrv_set_payload_timeout(f->srv, 1000);
    g_assert_cmpint(run_client(payload_client, &a), ==, 0);
    run_loop_until(no_clients, f, 30);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.timeouts, ==, 2);
    g_assert_cmpuint(nbdsrv_get_held_bytes(f->srv), ==, 0);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- readers that never read ---- */

static int slow_readers_client(void *opaque)
{
    Attack *a = opaque;
    int fds[8];
    int ret;

    for (int i = 0; i < a->count; i++) {
        fds[i] = raw_open(a->f->sock, true, false);
        FAIL_IF(fds[i] < 0);
        for (int j = 0; j < 3; j++) {
            FAIL_IF(!raw_request(fds[i], 0, NBD_CMD_READ, j, j * MiB,
                                 32 * MiB, NULL));
        }
    }
    FAIL_IF(!wait_flag(&a->ready));
    ret = victim(a->f);
    for (int i = 0; i < a->count; i++) {
        close(fds[i]);
    }
    return ret;
}

static bool readers_within_share(void *opaque)
{
    Attack *a = opaque;

    for (GList *l = a->f->srv->clients.head; l; l = l->next) {
        NbdClient *c = l->data;

        if (!c->closed && c->held > nbdsrv_client_share(c)) {
            return false;
        }
    }
    return true;
}

/* When the readers are stuck, before the victim comes: none holds more
 * than its share. */
static bool slow_readers_checked(void *opaque)
{
    Attack *a = opaque;

    if (!attackers_stuck(a)) {
        return false;
    }
    g_assert_true(readers_within_share(a));
    return true;
}

static void test_slow_readers(void)
{
    ExportFixture *f = fixture_new_raw_size(NULL, false, 64 * MiB);
    Attack a = { .f = f, .count = 7 };
    Monitor mon;

    /* A budget of 8 guarantees (264 MiB) over 8 connections, so that
     * 7 readers could take it all if nothing held them to their share. */
    nbdsrv_set_shared(f->srv, 8);
    nbdsrv_set_budget(f->srv, 0);
    nbdsrv_set_timeouts(f->srv, 10000, 0);  /* no stall timeout */
    monitor_start(&mon, slow_readers_checked, &a);
    g_assert_cmpint(run_client(slow_readers_client, &a), ==, 0);
    monitor_stop(&mon);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- NBD_OPT_LIST without reading the replies ---- */

static bool option_flood_monitor(void *opaque)
{
    Attack *a = opaque;

    for (GList *l = a->f->srv->clients.head; l; l = l->next) {
        NbdClient *c = l->data;

        if (c->closed || c->transmission) {
            continue;
        }
        a->max_held = MAX(a->max_held, c->held);
        if (c->paused && c->rstate == NBDR_OPT_HEADER) {
            g_atomic_int_set(&a->ready, 1);
        }
    }
    return false;
}

static int option_flood_client(void *opaque)
{
    Attack *a = opaque;
    int fd = raw_connect(a->f->sock);
    uint8_t opt[16 * 256];
    int sent = 0;
    int ret;

    FAIL_IF(fd < 0);
    FAIL_IF(!raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE |
                              NBD_FLAG_C_NO_ZEROES));
    for (int i = 0; i < 256; i++) {
        nbdsrv_put64(opt + 16 * i, NBD_MAGIC_OPTS);
        nbdsrv_put32(opt + 16 * i + 8, NBD_OPT_LIST);
        nbdsrv_put32(opt + 16 * i + 12, 0);
    }
    /* Up to 250,000 options, until the server stops reading them. */
    while (sent < 250000 * 16 && !g_atomic_int_get(&a->ready)) {
        size_t off = sent % sizeof(opt);
        ssize_t n = send(fd, opt + off, sizeof(opt) - off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        struct pollfd p = { .fd = fd, .events = POLLOUT };

        if (n > 0) {
            sent += n;
            continue;
        }
        FAIL_IF(n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                errno != EINTR);
        poll(&p, 1, 100);
    }
    FAIL_IF(!wait_flag(&a->ready));
    ret = normal_client(a->f);
    close(fd);
    return ret;
}

static void test_option_flood(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    Attack a = { .f = f };
    Monitor mon;

    nbdsrv_set_timeouts(f->srv, 60000, 30000);
    monitor_start(&mon, option_flood_monitor, &a);
    g_assert_cmpint(run_client(option_flood_client, &a), ==, 0);
    monitor_stop(&mon);
    /* The cap, plus the replies to the one option read past it. */
    g_assert_cmpuint(a.max_held, <=, NBDSRV_MAX_OPTION_OUTPUT + 4 * KiB);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- --shared ---- */

typedef struct Shared {
    ExportFixture *f;
    gint full;              /* the server stopped accepting */
    unsigned max_live;
} Shared;

static bool shared_monitor(void *opaque)
{
    Shared *s = opaque;
    NbdServerStats st;

    nbdsrv_get_stats(s->f->srv, &st);
    s->max_live = MAX(s->max_live, nbdsrv_get_client_count(s->f->srv));
    if (st.full && nbdsrv_get_client_count(s->f->srv) == 2) {
        g_atomic_int_set(&s->full, 1);
    }
    return false;
}

static int shared_client(void *opaque)
{
    Shared *s = opaque;
    int a = raw_open(s->f->sock, true, false);
    int b = raw_connect(s->f->sock);
    uint8_t g[18];
    int c;

    FAIL_IF(a < 0 || b < 0 || !raw_read(b, g, sizeof(g)));
    FAIL_IF(!wait_flag(&s->full));
    /* A third waits in the backlog (the monitor sees at most two)... */
    c = raw_connect(s->f->sock);
    FAIL_IF(c < 0);
    FAIL_IF(!victim_read(a, s->f, 7, 0, 4096));
    /* ... until one leaves: then it is served. */
    close(b);
    FAIL_IF(!raw_greeting(c, NBD_FLAG_C_FIXED_NEWSTYLE |
                             NBD_FLAG_C_NO_ZEROES));
    FAIL_IF(!raw_go(c, "", true, false));
    FAIL_IF(!victim_read(c, s->f, 8, 15 * MiB, 64 * KiB));
    close(c);
    close(a);
    return 0;
}

static void test_shared(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    Shared s = { .f = f };
    Monitor mon;

    nbdsrv_set_shared(f->srv, 2);
    monitor_start(&mon, shared_monitor, &s);
    g_assert_cmpint(run_client(shared_client, &s), ==, 0);
    monitor_stop(&mon);
    g_assert_cmpuint(s.max_live, ==, 2);
    assert_recovered(f);
    fixture_free(f);
}

/* ---- the gate: large requests do not flood the block layer ---- */

static int gate_client(void *opaque)
{
    Attack *a = opaque;
    g_autofree uint8_t *zero = g_malloc0(4 * MiB);
    int fds[8];
    int v;

    for (int i = 0; i < 8; i++) {
        fds[i] = raw_open(a->f->sock, true, false);
        FAIL_IF(fds[i] < 0);
        for (int j = 0; j < 4; j++) {
            FAIL_IF(!raw_request(fds[i], 0, NBD_CMD_READ, j,
                                 (i * 4 + j) * 4 * MiB, 4 * MiB, NULL));
        }
    }
    /* A small read is not queued behind them. */
    v = raw_open(a->f->sock, true, false);
    FAIL_IF(v < 0);
    for (int k = 0; k < 3; k++) {
        RawReply r;

        FAIL_IF(!raw_request(v, 0, NBD_CMD_READ, k, 4096 * k, 4096, NULL));
        FAIL_IF(!raw_reply(v, true, 0, &r) || r.error || r.len != 4096 ||
                memcmp(r.data, zero, 4096) != 0);
        raw_reply_clear(&r);
    }
    close(v);
    for (int i = 0; i < 8; i++) {
        for (int j = 0; j < 4; j++) {
            RawReply r;

            FAIL_IF(!raw_reply(fds[i], true, 0, &r) || r.error ||
                    r.len != 4 * MiB || memcmp(r.data, zero, r.len) != 0);
            raw_reply_clear(&r);
        }
        close(fds[i]);
    }
    return 0;
}

/*
 * Every request takes 2 s: the first 16 (64 MiB) must all be in before
 * the first is answered, else the gate never holds 64 MiB.  With 0.5 s a
 * loaded machine (load 12 on 2 CPUs) took longer for the 4 handshakes and
 * 16 requests that many, one run in five (60 MiB at most); with 20 ms
 * every run failed so (44-48 MiB).
 */
static void test_gate(void)
{
    ExportFixture *f = fixture_new_spec("null:size=128M,latency-ns=2000000000",
                                        false);
    Attack a = { .f = f };
    NullStats st;

    g_assert_cmpint(run_client(gate_client, &a), ==, 0);
    run_loop_until(no_clients, f, 30);
    null_get_stats(f->bs, &st);
    /* 128 MiB were asked for at once; 64 MiB (and the small reads) were
     * in the block layer at most. */
    g_assert_cmpint(st.max_data_bytes_in_flight, <=,
                    NBDSRV_GATE_MAX + 3 * 4096);
    g_assert_cmpint(st.max_data_bytes_in_flight, >=, NBDSRV_GATE_MAX);
    fixture_free(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd/attack/write-hold", test_write_hold);
    g_test_add_func("/export-nbd/attack/payload-timeout",
                    test_payload_timeout);
    g_test_add_func("/export-nbd/attack/slow-readers", test_slow_readers);
    g_test_add_func("/export-nbd/attack/option-flood", test_option_flood);
    g_test_add_func("/export-nbd/attack/shared", test_shared);
    g_test_add_func("/export-nbd/attack/gate", test_gate);
    return g_test_run();
}
