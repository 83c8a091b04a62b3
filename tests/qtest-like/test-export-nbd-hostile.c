/*
 * NBD export tests with hostile and broken clients: malformed handshakes
 * and options, requests out of bounds, of length 0 or 64 MiB, unknown
 * commands and flags, bad magic, disconnects mid-payload, 200 connections
 * at once, a client that never reads its replies.  After each attack the
 * server still serves a normal client the right bytes.  Backpressure and
 * request lifetimes are in test-export-nbd-limits.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/export/nbd-server-int.h"

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

    nbdsrv_set_shared(f->srv, 200);
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

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd/hostile/handshake", test_handshake);
    g_test_add_func("/export-nbd/hostile/requests", test_requests);
    g_test_add_func("/export-nbd/hostile/many-connections",
                    test_many_connections);
    g_test_add_func("/export-nbd/hostile/never-reads", test_no_read);
    return g_test_run();
}
