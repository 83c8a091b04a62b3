/*
 * NBD export tests with hostile and broken clients, backpressure and
 * request lifetimes: malformed handshakes and options, requests out of
 * bounds, of length 0 or 64 MiB, unknown commands and flags, bad magic,
 * disconnects mid-payload, 200 connections at once, a client that never
 * reads its replies, out-of-order completion, concurrent writers, and the
 * server freed or shut down with requests in flight.  After each attack the
 * server still serves a normal client the right bytes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/export-nbd-int.h"

#include <errno.h>
#include <libnbd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL_IF(cond)                                               \
    do {                                                            \
        if (cond) {                                                 \
            g_printerr("client: line %d: %s\n", __LINE__, #cond);   \
            return __LINE__;                                        \
        }                                                           \
    } while (0)

/* A main-loop callback run every 5 ms until it returns true. */
typedef struct Monitor {
    bool (*fn)(void *data);
    void *data;
    guint id;
} Monitor;

static gboolean monitor_cb(gpointer opaque)
{
    Monitor *m = opaque;

    if (m->fn(m->data)) {
        m->id = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void monitor_start(Monitor *m, bool (*fn)(void *), void *data)
{
    *m = (Monitor) { .fn = fn, .data = data };
    m->id = g_timeout_add(5, monitor_cb, m);
}

static void monitor_stop(Monitor *m)
{
    if (m->id) {
        g_source_remove(m->id);
        m->id = 0;
    }
}

/* For client threads: wait for @flag, at most 30 s. */
static bool wait_flag(gint *flag)
{
    for (int i = 0; i < 6000 && !g_atomic_int_get(flag); i++) {
        g_usleep(5000);
    }
    return g_atomic_int_get(flag);
}

static bool no_clients(void *opaque)
{
    ExportFixture *f = opaque;

    return nbdsrv_get_client_count(f->srv) == 0 &&
           nbdsrv_get_in_flight(f->srv) == 0;
}

/* After an attack: nobody left, a normal client works, data intact. */
static void assert_recovered(ExportFixture *f)
{
    run_loop_until(no_clients, f, 30);
    assert_normal_client(f);
    if (f->image) {
        fixture_assert_file(f);
    }
}

/* Send an option and expect one reply of @type. */
static bool opt_expect(int fd, uint32_t opt, const void *data, uint32_t len,
                       uint32_t type)
{
    RawOptReply r;
    bool ok = raw_opt(fd, opt, data, len) && raw_opt_reply(fd, &r) &&
              r.opt == opt && r.type == type;

    g_free(r.data);
    return ok;
}

/* ---- handshake ---- */

static int handshake_client(void *opaque)
{
    ExportFixture *f = opaque;
    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    uint8_t big[100 * 1024] = { 0 }, hdr[16], d[32];
    RawReply rr;
    int fd;

    /* Unknown client flags: dropped. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, 0x80) || !raw_wait_closed(fd));
    close(fd);
    /* Not NBD at all. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_write(fd, http, strlen(http)));
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    /* Truncated client flags, then gone; gone before reading anything. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_read(fd, big, 18) || !raw_write(fd, "\0", 2));
    close(fd);
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0);
    close(fd);
    /* Wrong option magic. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE));
    nbdsrv_put64(hdr, 0x1122334455667788ULL);
    nbdsrv_put32(hdr + 8, NBD_OPT_GO);
    nbdsrv_put32(hdr + 12, 0);
    FAIL_IF(!raw_write(fd, hdr, 16) || !raw_wait_closed(fd));
    close(fd);
    /* An export name longer than any string may be. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE));
    nbdsrv_put64(hdr, NBD_MAGIC_OPTS);
    nbdsrv_put32(hdr + 8, NBD_OPT_EXPORT_NAME);
    nbdsrv_put32(hdr + 12, 5000);
    FAIL_IF(!raw_write(fd, hdr, 16) || !raw_wait_closed(fd));
    close(fd);
    /* A wrong export name with NBD_OPT_EXPORT_NAME ends the session. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE));
    FAIL_IF(!raw_opt(fd, NBD_OPT_EXPORT_NAME, "nope", 4));
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    /* An option claiming 4 GiB of data, then a disconnect. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE));
    nbdsrv_put64(hdr, NBD_MAGIC_OPTS);
    nbdsrv_put32(hdr + 8, 4242);
    nbdsrv_put32(hdr + 12, 0xfffffff0);
    FAIL_IF(!raw_write(fd, hdr, 16) || !raw_write(fd, big, sizeof(big)));
    close(fd);
    /* ABORT is acknowledged, then the server closes. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE));
    FAIL_IF(!opt_expect(fd, NBD_OPT_ABORT, NULL, 0, NBD_REP_ACK));
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);

    /* Refused options keep the session usable. */
    fd = raw_connect(f->sock);
    FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE |
                                    NBD_FLAG_C_NO_ZEROES));
    FAIL_IF(!opt_expect(fd, 4242, "0123456789", 10, NBD_REP_ERR_UNSUP));
    FAIL_IF(!opt_expect(fd, NBD_OPT_STARTTLS, NULL, 0, NBD_REP_ERR_UNSUP));
    FAIL_IF(!opt_expect(fd, NBD_OPT_LIST, "x", 1, NBD_REP_ERR_INVALID));
    FAIL_IF(!opt_expect(fd, NBD_OPT_GO, big, sizeof(big),
                        NBD_REP_ERR_TOO_BIG));
    FAIL_IF(!opt_expect(fd, NBD_OPT_INFO, "abc", 3, NBD_REP_ERR_INVALID));
    nbdsrv_put32(d, 1000);      /* name longer than the option */
    nbdsrv_put16(d + 4, 0);
    FAIL_IF(!opt_expect(fd, NBD_OPT_INFO, d, 6, NBD_REP_ERR_INVALID));
    nbdsrv_put32(d, 4);
    memcpy(d + 4, "nope", 4);
    nbdsrv_put16(d + 8, 0);
    FAIL_IF(!opt_expect(fd, NBD_OPT_GO, d, 10, NBD_REP_ERR_UNKNOWN));
    nbdsrv_put32(d, 0);
    nbdsrv_put32(d + 4, 0);
    FAIL_IF(!opt_expect(fd, NBD_OPT_SET_META_CONTEXT, d, 8,
                        NBD_REP_ERR_INVALID));      /* not structured */
    FAIL_IF(!opt_expect(fd, NBD_OPT_STRUCTURED_REPLY, "x", 1,
                        NBD_REP_ERR_INVALID));
    FAIL_IF(!opt_expect(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0,
                        NBD_REP_ACK));
    nbdsrv_put32(d + 4, 1);     /* one query... */
    nbdsrv_put32(d + 8, 3);     /* ...without a namespace */
    memcpy(d + 12, "abc", 3);
    FAIL_IF(!opt_expect(fd, NBD_OPT_LIST_META_CONTEXT, d, 15,
                        NBD_REP_ERR_INVALID));
    nbdsrv_put32(d + 8, 100);   /* ...longer than the option */
    FAIL_IF(!opt_expect(fd, NBD_OPT_SET_META_CONTEXT, d, 15,
                        NBD_REP_ERR_INVALID));
    nbdsrv_put32(d + 4, 0);     /* no query selects nothing */
    FAIL_IF(!opt_expect(fd, NBD_OPT_SET_META_CONTEXT, d, 8, NBD_REP_ACK));
    FAIL_IF(!raw_go(fd, "", false, false));
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, 1, 0, 4096, NULL));
    FAIL_IF(!raw_reply(fd, true, 0, &rr) || rr.error || rr.len != 4096);
    FAIL_IF(memcmp(rr.data, f->model, 4096) != 0);
    raw_reply_clear(&rr);
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_BLOCK_STATUS, 2, 0, 4096, NULL));
    FAIL_IF(!raw_reply(fd, true, 0, &rr) || rr.error != NBD_EINVAL);
    close(fd);
    return 0;
}

static void test_handshake(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    NbdServerStats st;

    g_assert_cmpint(run_client(handshake_client, f), ==, 0);
    assert_recovered(f);
    nbdsrv_get_stats(f->srv, &st);
    /* flags, HTTP, option magic, long EXPORT_NAME */
    g_assert_cmpuint(st.protocol_errors, ==, 4);
    fixture_free(f);
}

/* ---- requests ---- */

typedef struct Case {
    uint16_t flags, type;
    uint64_t offset;
    uint32_t len;
    uint32_t error;
    bool payload;           /* a WRITE payload of @len follows */
} Case;

static int run_cases(int fd, bool structured, const Case *cases, size_t n,
                     const uint8_t *payload)
{
    for (size_t i = 0; i < n; i++) {
        const Case *c = &cases[i];
        RawReply r;
        bool read_ok = c->type == NBD_CMD_READ && !c->error;

        FAIL_IF(!raw_request(fd, c->flags, c->type, 1000 + i, c->offset,
                             c->len, c->payload ? payload : NULL));
        if (!raw_reply(fd, structured, read_ok ? c->len : 0, &r)) {
            g_printerr("case %zu: no reply\n", i);
            return __LINE__;
        }
        if (r.cookie != 1000 + i || r.error != c->error) {
            g_printerr("case %zu: cookie %" G_GUINT64_FORMAT " error %u, "
                       "expected %u\n", i, r.cookie, r.error, c->error);
            return __LINE__;
        }
        FAIL_IF(!read_ok && r.len && c->type != NBD_CMD_BLOCK_STATUS);
        FAIL_IF(read_ok && r.len != c->len);
        raw_reply_clear(&r);
    }
    return 0;
}

#define S FIX_SIZE

static const Case bad_cases[] = {
    /* beyond the end */
    { 0, NBD_CMD_READ, S, 512, NBD_EINVAL },
    { 0, NBD_CMD_READ, S - 100, 200, NBD_EINVAL },
    { 0, NBD_CMD_READ, UINT64_MAX - 10, 100, NBD_EINVAL },
    { 0, NBD_CMD_WRITE, S - 100, 4096, NBD_ENOSPC, true },
    { 0, NBD_CMD_TRIM, S, 1, NBD_EINVAL },
    { 0, NBD_CMD_WRITE_ZEROES, S - 1, 2, NBD_ENOSPC },
    { 0, NBD_CMD_BLOCK_STATUS, S, 1, NBD_EINVAL },
    { 0, NBD_CMD_READ, S + 1, 0, NBD_EINVAL },
    /* length 0 */
    { 0, NBD_CMD_READ, 0, 0, 0 },
    { 0, NBD_CMD_READ, S, 0, 0 },
    { 0, NBD_CMD_WRITE, 4096, 0, 0 },
    { 0, NBD_CMD_TRIM, 4096, 0, 0 },
    { 0, NBD_CMD_WRITE_ZEROES, 4096, 0, 0 },
    { 0, NBD_CMD_BLOCK_STATUS, 0, 0, NBD_EINVAL },
    /* too long */
    { 0, NBD_CMD_READ, 0, 64 * MiB, NBD_EINVAL },
    { NBD_CMD_FLAG_DF, NBD_CMD_READ, 0, 64 * MiB, NBD_EOVERFLOW },
    { 0, NBD_CMD_WRITE, 0, 40 * MiB, NBD_EINVAL, true },
    /* unknown commands and flags */
    { 0, 99, 0, 4096, NBD_EINVAL },
    { 0, 5, 0, 4096, NBD_EINVAL },         /* NBD_CMD_CACHE */
    { 0x8000, NBD_CMD_READ, 0, 4096, NBD_EINVAL },
    { NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE, 0, 4096, NBD_EINVAL, true },
    { NBD_CMD_FLAG_REQ_ONE, NBD_CMD_READ, 0, 4096, NBD_EINVAL },
    { 0, NBD_CMD_FLUSH, 1, 0, NBD_EINVAL },
    /* and valid ones in between still work */
    { NBD_CMD_FLAG_DF, NBD_CMD_READ, 777, 64 * KiB, 0 },
    { 0, NBD_CMD_READ, 0, S, 0 },
    { NBD_CMD_FLAG_REQ_ONE, NBD_CMD_BLOCK_STATUS, 0, S, 0 },
    { NBD_CMD_FLAG_FUA, NBD_CMD_FLUSH, 0, 0, 0 },
};

static const Case simple_cases[] = {
    { 0, NBD_CMD_READ, S, 512, NBD_EINVAL },
    { 0, NBD_CMD_READ, 0, 64 * MiB, NBD_EINVAL },
    { NBD_CMD_FLAG_DF, NBD_CMD_READ, 0, 4096, NBD_EINVAL },
    { 0, NBD_CMD_BLOCK_STATUS, 0, 4096, NBD_EINVAL },
    { 0, NBD_CMD_READ, 4 * MiB, 1 * MiB, 0 },
    { 0, NBD_CMD_READ, 0, 0, 0 },
};

static int requests_client(void *opaque)
{
    ExportFixture *f = opaque;
    g_autofree uint8_t *payload = g_malloc0(40 * MiB);
    uint8_t junk[64] = { 0xde, 0xad };
    RawReply r;
    int fd, ret;

    memset(payload, 0xee, 40 * MiB);    /* must never reach the image */
    fd = raw_open(f->sock, true, true);
    FAIL_IF(fd < 0);
    ret = run_cases(fd, true, bad_cases, G_N_ELEMENTS(bad_cases), payload);
    FAIL_IF(ret);
    /* Bad request magic: framing is lost, the server hangs up. */
    FAIL_IF(!raw_write(fd, junk, sizeof(junk)) || !raw_wait_closed(fd));
    close(fd);

    fd = raw_open(f->sock, false, false);
    FAIL_IF(fd < 0);
    ret = run_cases(fd, false, simple_cases, G_N_ELEMENTS(simple_cases),
                    payload);
    FAIL_IF(ret);
    /* The simple READ error above carried no payload: a read after it
     * gets exactly its data. */
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, 5, 15 * MiB, 4096, NULL));
    FAIL_IF(!raw_reply(fd, false, 4096, &r) || r.error || r.cookie != 5);
    FAIL_IF(memcmp(r.data, f->model + 15 * MiB, 4096) != 0);
    raw_reply_clear(&r);
    close(fd);

    /* A WRITE far too large to skip: error, then hang up. */
    fd = raw_open(f->sock, true, false);
    FAIL_IF(fd < 0);
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_WRITE, 6, 0, 1024 * MiB, NULL));
    FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error != NBD_EINVAL);
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);

    /* Gone in the middle of a WRITE payload, and of a header. */
    fd = raw_open(f->sock, true, false);
    FAIL_IF(fd < 0);
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_WRITE, 7, 8 * MiB, 1 * MiB, NULL));
    FAIL_IF(!raw_write(fd, payload, 100 * KiB));
    close(fd);
    fd = raw_open(f->sock, true, false);
    FAIL_IF(fd < 0 || !raw_write(fd, "\x25\x60\x95\x13\0\0\0", 7));
    close(fd);
    return 0;
}

static void test_requests(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    NbdServerStats st;

    g_assert_cmpint(run_client(requests_client, f), ==, 0);
    assert_recovered(f);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.protocol_errors, ==, 1);
    fixture_free(f);
}

/* ---- many connections ---- */

typedef struct Many {
    ExportFixture *f;
    gint opened;            /* main saw all of them */
} Many;

static bool many_seen(void *opaque)
{
    Many *m = opaque;

    if (nbdsrv_get_client_count(m->f->srv) == 200) {
        g_atomic_int_set(&m->opened, 1);
        return true;
    }
    return false;
}

static int many_client(void *opaque)
{
    Many *m = opaque;
    int fds[200];
    uint8_t g[18];

    for (int i = 0; i < 200; i++) {
        fds[i] = raw_connect(m->f->sock);
        FAIL_IF(fds[i] < 0);
        if (i % 2) {
            FAIL_IF(!raw_read(fds[i], g, sizeof(g)));
        }
    }
    FAIL_IF(!wait_flag(&m->opened));
    for (int i = 0; i < 200; i++) {
        close(fds[i]);
    }
    return 0;
}

static void test_many_connections(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    Many m = { .f = f };
    Monitor mon;
    NbdServerStats st;

    monitor_start(&mon, many_seen, &m);
    g_assert_cmpint(run_client(many_client, &m), ==, 0);
    monitor_stop(&mon);
    assert_recovered(f);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.accepted, >=, 200);
    fixture_free(f);
}

/* ---- a client that never reads ---- */

typedef struct NoRead {
    ExportFixture *f;
    gint stuck;             /* the server stopped reading from it */
    gint stall;             /* please enable the stall timeout */
    gint dropped;           /* the stall timeout dropped it */
    bool stall_set;
} NoRead;

static bool no_read_monitor(void *opaque)
{
    NoRead *n = opaque;

    if (!g_atomic_int_get(&n->stuck) &&
        nbdsrv_get_held_bytes(n->f->srv) >= 60 * MiB &&
        nbdsrv_get_in_flight(n->f->srv) == 0) {
        g_atomic_int_set(&n->stuck, 1);
    }
    if (g_atomic_int_get(&n->stall)) {
        NbdServerStats st;

        if (!n->stall_set) {
            nbdsrv_set_timeouts(n->f->srv, 10000, 300);
            n->stall_set = true;
        }
        nbdsrv_get_stats(n->f->srv, &st);
        if (st.timeouts) {
            g_atomic_int_set(&n->dropped, 1);
            return true;
        }
    }
    return false;
}

static int no_read_client(void *opaque)
{
    NoRead *n = opaque;
    int fd = raw_open(n->f->sock, true, false);

    FAIL_IF(fd < 0);
    for (int i = 0; i < 200; i++) {
        FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, i, (i % 15) * MiB,
                             1 * MiB, NULL));
    }
    FAIL_IF(!wait_flag(&n->stuck));
    /* Others are served meanwhile. */
    FAIL_IF(normal_client(n->f) != 0);
    /* Still not reading: the stall timeout drops it. */
    g_atomic_int_set(&n->stall, 1);
    FAIL_IF(!wait_flag(&n->dropped));
    FAIL_IF(!raw_wait_closed(fd));
    close(fd);
    return 0;
}

static void test_no_read(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    NoRead n = { .f = f };
    Monitor mon;
    NbdServerStats st;

    monitor_start(&mon, no_read_monitor, &n);
    g_assert_cmpint(run_client(no_read_client, &n), ==, 0);
    monitor_stop(&mon);
    assert_recovered(f);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.max_client_in_flight, <=,
                     NBDSRV_MAX_CLIENT_REQUESTS);
    g_assert_cmpuint(st.max_held_bytes, <=, 80 * MiB);
    g_assert_cmpuint(st.timeouts, ==, 1);
    fixture_free(f);
}

/* ---- out of order, and the in-flight cap ---- */

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
    g_test_add_func("/export-nbd/hostile/handshake", test_handshake);
    g_test_add_func("/export-nbd/hostile/requests", test_requests);
    g_test_add_func("/export-nbd/hostile/many-connections",
                    test_many_connections);
    g_test_add_func("/export-nbd/hostile/never-reads", test_no_read);
    g_test_add_func("/export-nbd/limits/pipeline", test_pipeline);
    g_test_add_func("/export-nbd/limits/two-writers", test_two_writers);
    g_test_add_data_func("/export-nbd/lifetime/free-in-flight", NULL,
                         test_lifetime);
    g_test_add_data_func("/export-nbd/lifetime/shutdown", "", test_lifetime);
    g_test_add_func("/export-nbd/lifetime/disc", test_disc);
    return g_test_run();
}
