/*
 * NBD export tests with well-behaved clients: addresses, libnbd reading,
 * writing, zeroing, trimming, block status and option haggling against an
 * in-process server, read-only exports, errno mapping, and the lifetime
 * rules (free with requests in flight, graceful shutdown, DISC).
 *
 * The server runs on this thread's main loop; every client runs on its
 * own thread (libnbd's synchronous API or the raw client of
 * export-fixture.c), so both sides make progress.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/export/nbd-server-int.h"

#include <errno.h>
#include <libnbd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Here the clients are libnbd handles (NBD_FAIL_IF). */

/* ---- addresses ---- */

static void assert_new_fails(ExportFixture *f, const char *addr,
                             const char *name, const char *msg)
{
    g_autoptr(GError) err = NULL;
    NbdServer *srv = nbdsrv_new(f->bs, addr, name, false, &err);

    g_assert_null(srv);
    g_assert_nonnull(err);
    if (!strstr(err->message, msg)) {
        g_printerr("'%s': unexpected message '%s'\n", addr, err->message);
        g_assert_not_reached();
    }
}

static void test_addr_errors(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    g_autofree char *long_path = g_strdup_printf("unix:/%0200d", 0);
    g_autofree char *on_file = g_strdup_printf("unix:%s", f->image);
    g_autofree char *in_use = g_strdup_printf("unix:%s", f->sock);
    g_autofree char *long_name = g_strnfill(NBD_MAX_STRING + 1, 'x');
    g_autofree char *ok_addr = g_strdup_printf("unix:%s/b.sock", f->dir);

    assert_new_fails(f, "foo", NULL, "expected unix:PATH or tcp:HOST:PORT");
    assert_new_fails(f, "unix:", NULL, "socket path missing");
    assert_new_fails(f, long_path, NULL, "too long");
    assert_new_fails(f, "tcp:127.0.0.1", NULL, "expected tcp:HOST:PORT");
    assert_new_fails(f, "tcp:127.0.0.1:99999", NULL, "PORT 0..65535");
    assert_new_fails(f, "tcp:127.0.0.1:x", NULL, "PORT 0..65535");
    assert_new_fails(f, "tcp::10809", NULL, "expected tcp:HOST:PORT");
    assert_new_fails(f, on_file, NULL, "exists and is not a socket");
    assert_new_fails(f, in_use, NULL, "already listening");
    assert_new_fails(f, ok_addr, long_name, "export name");
    assert_new_fails(f, ok_addr, "\xff\xfe", "export name");
    fixture_assert_file(f);     /* the image was not replaced */
    assert_normal_client(f);    /* nor the live socket */
    fixture_free(f);
}

/* A socket file left by a dead server is replaced. */
static void test_addr_stale(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    g_autofree char *path = g_build_filename(f->dir, "stale.sock", NULL);
    g_autofree char *addr = g_strdup_printf("unix:%s", path);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autoptr(GError) err = NULL;
    NbdServer *srv;
    struct stat st;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    close(fd);
    srv = nbdsrv_new(f->bs, addr, NULL, false, &err);
    g_assert_no_error(err);
    g_assert_cmpint(nbdsrv_get_port(srv), ==, -1);
    nbdsrv_free(srv);
    g_assert_cmpint(lstat(path, &st), <, 0);    /* removed on free */
    fixture_free(f);
}

typedef struct TcpCheck {
    ExportFixture *f;
    const char *host;
    int port;
} TcpCheck;

static int tcp_client(void *opaque)
{
    TcpCheck *t = opaque;
    g_autofree char *port = g_strdup_printf("%d", t->port);
    g_autofree uint8_t *buf = g_malloc(1 * MiB);
    struct nbd_handle *h = nbd_create();
    int ret = 0;

    if (nbd_connect_tcp(h, t->host, port) < 0 ||
        nbd_pread(h, buf, 1 * MiB, 0, 0) < 0 ||
        memcmp(buf, t->f->model, 1 * MiB) != 0) {
        g_printerr("tcp client: %s\n", nbd_get_error());
        ret = __LINE__;
    }
    nbd_close(h);
    return ret;
}

/* Can a socket of our own listen on [::1]?  Decided without the server. */
static bool have_ipv6_loopback(void)
{
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6,
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;

    if (fd >= 0) {
        close(fd);
    }
    return ok;
}

/*
 * Serve on @addr (port 0: any) and read the export back from @host over
 * TCP.  A machine without an IPv6 loopback skips the IPv6 case.
 */
static void test_addr_tcp(gconstpointer data)
{
    const char *const *addr = data;
    g_autoptr(GError) err = NULL;
    ExportFixture *f;
    NbdServer *srv;
    TcpCheck t;

    if (strchr(addr[1], ':') && !have_ipv6_loopback()) {
        g_test_skip("no IPv6 loopback");
        return;
    }
    f = fixture_new_raw(NULL, false);
    srv = nbdsrv_new(f->bs, addr[0], NULL, false, &err);
    t = (TcpCheck) { .f = f, .host = addr[1] };
    g_assert_no_error(err);
    t.port = nbdsrv_get_port(srv);
    g_assert_cmpint(t.port, >, 0);
    g_assert_cmpint(run_client(tcp_client, &t), ==, 0);
    nbdsrv_free(srv);
    fixture_free(f);
}

/* ---- data path through libnbd ---- */

typedef struct StatusSeen {
    uint32_t entries[64];
    size_t n;
} StatusSeen;

static int status_cb(void *opaque, const char *context, uint64_t offset,
                     uint32_t *entries, size_t nr, int *error)
{
    StatusSeen *s = opaque;

    if (!strcmp(context, "base:allocation")) {
        s->n = MIN(nr, G_N_ELEMENTS(s->entries));
        memcpy(s->entries, entries, s->n * sizeof(uint32_t));
    }
    return 0;
}

static int data_client(void *opaque)
{
    ExportFixture *f = opaque;
    struct nbd_handle *h = nbd_create();
    StatusSeen s = { 0 };
    /* data, hole, data, hole, data (see fixture_new_raw) */
    static const uint32_t expect[] = {
        1 * MiB, 0, 3 * MiB, 3, 2 * MiB, 0, 9 * MiB, 3, 1 * MiB, 0,
    };
    g_autofree uint8_t *buf = g_malloc(3 * MiB);
    uint8_t *m = f->model;

    NBD_FAIL_IF(nbd_add_meta_context(h, "base:allocation") < 0);
    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    NBD_FAIL_IF(nbd_get_size(h) != FIX_SIZE);
    NBD_FAIL_IF(nbd_is_read_only(h) != 0);
    NBD_FAIL_IF(nbd_can_flush(h) != 1 || nbd_can_fua(h) != 1);
    NBD_FAIL_IF(nbd_can_trim(h) != 1 || nbd_can_zero(h) != 1);
    NBD_FAIL_IF(nbd_can_fast_zero(h) != 1 || nbd_can_multi_conn(h) != 1);
    NBD_FAIL_IF(nbd_can_df(h) != 1 || nbd_can_meta_context(h,
                                                       "base:allocation") != 1);
    NBD_FAIL_IF(nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM) != 1);
    NBD_FAIL_IF(nbd_get_block_size(h, LIBNBD_SIZE_PREFERRED) != 4096);
    NBD_FAIL_IF(nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM) != 32 * MiB);

    /* Block status of the untouched image, then one extent only. */
    NBD_FAIL_IF(nbd_block_status(h, FIX_SIZE, 0, (nbd_extent_callback) {
                .callback = status_cb, .user_data = &s }, 0) < 0);
    NBD_FAIL_IF(s.n != G_N_ELEMENTS(expect) ||
            memcmp(s.entries, expect, sizeof(expect)) != 0);
    NBD_FAIL_IF(nbd_block_status(h, 512 * KiB, 2 * MiB, (nbd_extent_callback) {
                .callback = status_cb, .user_data = &s },
                LIBNBD_CMD_FLAG_REQ_ONE) < 0);
    NBD_FAIL_IF(s.n != 2 || s.entries[0] != 512 * KiB || s.entries[1] != 3);

    /* Writes: aligned, odd, across data and hole, with FUA. */
    test_fill_pattern(m + 2 * MiB, 2 * MiB, 64 * KiB, 101);
    NBD_FAIL_IF(nbd_pwrite(h, m + 2 * MiB, 64 * KiB, 2 * MiB, 0) < 0);
    test_fill_pattern(m + 777, 777, 12345, 102);
    NBD_FAIL_IF(nbd_pwrite(h, m + 777, 12345, 777, 0) < 0);
    test_fill_pattern(m + 6 * MiB - 3, 6 * MiB - 3, 1 * MiB, 103);
    NBD_FAIL_IF(nbd_pwrite(h, m + 6 * MiB - 3, 1 * MiB, 6 * MiB - 3,
                       LIBNBD_CMD_FLAG_FUA) < 0);
    test_fill_pattern(m + FIX_SIZE - 8 * MiB, FIX_SIZE - 8 * MiB, 8 * MiB,
                      104);
    NBD_FAIL_IF(nbd_pwrite(h, m + FIX_SIZE - 8 * MiB, 8 * MiB,
                       FIX_SIZE - 8 * MiB, 0) < 0);

    /* Zeroes: punching, allocating (NO_HOLE), unaligned, fast. */
    memset(m + 4 * MiB, 0, 256 * KiB);
    NBD_FAIL_IF(nbd_zero(h, 256 * KiB, 4 * MiB, 0) < 0);
    memset(m + 9 * MiB + 5, 0, 100 * KiB);
    NBD_FAIL_IF(nbd_zero(h, 100 * KiB, 9 * MiB + 5, LIBNBD_CMD_FLAG_NO_HOLE) < 0);
    if (nbd_zero(h, 1 * MiB, 10 * MiB, LIBNBD_CMD_FLAG_FAST_ZERO) < 0) {
        /* Not fast here: then nothing may have changed. */
        NBD_FAIL_IF(nbd_get_errno() != ENOTSUP);
    } else {
        memset(m + 10 * MiB, 0, 1 * MiB);
    }
    if (nbd_zero(h, 100, 10 * MiB + 1, LIBNBD_CMD_FLAG_FAST_ZERO) < 0) {
        NBD_FAIL_IF(nbd_get_errno() != ENOTSUP);
    } else {
        memset(m + 10 * MiB + 1, 0, 100);
    }

    /* Trim leaves old data or zeroes: learn which. */
    NBD_FAIL_IF(nbd_trim(h, 1 * MiB, 15 * MiB - 2 * MiB, LIBNBD_CMD_FLAG_FUA) < 0);
    NBD_FAIL_IF(nbd_pread(h, buf, 1 * MiB, 15 * MiB - 2 * MiB, 0) < 0);
    for (int i = 0; i < 1 * MiB; i++) {
        NBD_FAIL_IF(buf[i] && buf[i] != m[15 * MiB - 2 * MiB + i]);
    }
    memcpy(m + 15 * MiB - 2 * MiB, buf, 1 * MiB);
    NBD_FAIL_IF(nbd_flush(h, 0) < 0);

    /* A 3 MiB read spanning everything touched around 4-7 MiB. */
    NBD_FAIL_IF(nbd_pread(h, buf, 3 * MiB, 4 * MiB, 0) < 0);
    NBD_FAIL_IF(memcmp(buf, m + 4 * MiB, 3 * MiB) != 0);
    NBD_FAIL_IF(nbd_shutdown(h, 0) < 0);
    nbd_close(h);
    return 0;
}

static void test_data_libnbd(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);

    g_assert_cmpint(run_client(data_client, f), ==, 0);
    assert_normal_client(f);
    /* What reached the file, once the server let go of the image. */
    nbdsrv_free(f->srv);
    f->srv = NULL;
    fixture_assert_file(f);
    fixture_free(f);
}

/* ---- read-only ---- */

static int read_only_client(void *opaque)
{
    ExportFixture *f = opaque;
    static const uint16_t cmds[] = {
        NBD_CMD_WRITE, NBD_CMD_TRIM, NBD_CMD_WRITE_ZEROES,
    };
    uint8_t payload[512] = { 1 };
    struct nbd_handle *h = nbd_create();
    RawReply r;
    int fd;

    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    NBD_FAIL_IF(nbd_is_read_only(h) != 1 || nbd_can_trim(h) || nbd_can_zero(h));
    NBD_FAIL_IF(nbd_pwrite(h, payload, sizeof(payload), 0, 0) == 0);
    NBD_FAIL_IF(nbd_get_errno() != EPERM);
    nbd_close(h);

    /* What a client that ignores the flags gets. */
    for (int structured = 0; structured < 2; structured++) {
        fd = raw_open(f->sock, structured, false);
        NBD_FAIL_IF(fd < 0);
        for (size_t i = 0; i < G_N_ELEMENTS(cmds); i++) {
            NBD_FAIL_IF(!raw_request(fd, 0, cmds[i], i, 0, sizeof(payload),
                                 cmds[i] == NBD_CMD_WRITE ? payload : NULL));
            NBD_FAIL_IF(!raw_reply(fd, structured, 0, &r));
            NBD_FAIL_IF(r.cookie != i || r.error != NBD_EPERM);
            raw_reply_clear(&r);
        }
        NBD_FAIL_IF(!raw_request(fd, 0, NBD_CMD_FLUSH, 9, 0, 0, NULL));
        NBD_FAIL_IF(!raw_reply(fd, structured, 0, &r) || r.error);
        close(fd);
    }
    return 0;
}

static void test_read_only(void)
{
    ExportFixture *f = fixture_new_raw(NULL, true);
    NbdServerStats st;

    g_assert_cmpint(run_client(read_only_client, f), ==, 0);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.errors, >=, 6);
    assert_normal_client(f);
    fixture_assert_file(f);
    fixture_free(f);
}

/* ---- errno mapping ---- */

typedef struct ErrCase {
    ExportFixture *f;
    uint16_t cmd;
    uint16_t flags;
    bool structured;
    uint32_t expect;
} ErrCase;

static int err_client(void *opaque)
{
    ErrCase *e = opaque;
    uint8_t payload[4096] = { 0 };
    RawReply r;
    int fd = raw_open(e->f->sock, e->structured, false);

    NBD_FAIL_IF(fd < 0);
    NBD_FAIL_IF(!raw_request(fd, e->flags, e->cmd, 42, 1 * MiB, 4096,
                         e->cmd == NBD_CMD_WRITE ? payload : NULL));
    NBD_FAIL_IF(!raw_reply(fd, e->structured,
                       e->cmd == NBD_CMD_READ ? 4096 : 0, &r));
    NBD_FAIL_IF(r.cookie != 42 || r.error != e->expect);
    NBD_FAIL_IF(r.len != 0);    /* no data after an error */
    raw_reply_clear(&r);
    /* The connection still works. */
    NBD_FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, 43, 0, 4096, NULL));
    NBD_FAIL_IF(!raw_reply(fd, e->structured, 4096, &r) || r.error);
    NBD_FAIL_IF(r.len != 4096);
    raw_reply_clear(&r);
    close(fd);
    return 0;
}

static void test_errno_mapping(void)
{
    static const struct { const char *name; uint32_t nbd; } map[] = {
        { "EIO", NBD_EIO }, { "ENOSPC", NBD_ENOSPC }, { "EPERM", NBD_EPERM },
        { "EINVAL", NBD_EINVAL }, { "ENOMEM", NBD_ENOMEM },
        { "ESHUTDOWN", NBD_ESHUTDOWN }, { "ENOTSUP", NBD_ENOTSUP },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(map); i++) {
        for (int op = 0; op < 2; op++) {
            g_autofree char *spec = g_strdup_printf(
                "null:size=16M,error-op=%s,error-offset=1M,"
                "error-length=1M,error-errno=%s", op ? "write" : "read",
                map[i].name);
            ExportFixture *f = fixture_new_spec(spec, false);
            ErrCase e = {
                .f = f, .cmd = op ? NBD_CMD_WRITE : NBD_CMD_READ,
                .structured = i % 2, .expect = map[i].nbd,
            };

            g_assert_cmpint(run_client(err_client, &e), ==, 0);
            fixture_free(f);
        }
    }
}

/* FAST_ZERO where zeroing is never fast: ENOTSUP, and without the flag
 * the fallback writes zeroes. */
static void test_fast_zero(void)
{
    ExportFixture *f = fixture_new_spec("null:size=16M,zeroes=off", false);
    ErrCase e = { .f = f, .cmd = NBD_CMD_WRITE_ZEROES, .structured = true,
                  .flags = NBD_CMD_FLAG_FAST_ZERO, .expect = NBD_ENOTSUP };

    g_assert_cmpint(run_client(err_client, &e), ==, 0);
    e.flags = 0;
    e.expect = 0;
    g_assert_cmpint(run_client(err_client, &e), ==, 0);
    fixture_free(f);
}

/* ---- options ---- */

static int list_cb(void *opaque, const char *name, const char *desc)
{
    g_strlcpy(opaque, name, 64);
    return 0;
}

static int meta_cb(void *opaque, const char *name)
{
    (*(int *)opaque)++;
    return g_str_equal(name, "base:allocation") ? 0 : -1;
}

static int options_client(void *opaque)
{
    ExportFixture *f = opaque;
    struct nbd_handle *h = nbd_create();
    char listed[64] = "";
    int metas = 0;
    char *s;

    NBD_FAIL_IF(nbd_set_opt_mode(h, true) < 0);
    NBD_FAIL_IF(nbd_set_full_info(h, true) < 0);
    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    NBD_FAIL_IF(nbd_opt_list(h, (nbd_list_callback) {
                .callback = list_cb, .user_data = listed }) != 1);
    NBD_FAIL_IF(strcmp(listed, "exp") != 0);
    NBD_FAIL_IF(nbd_set_export_name(h, "other") < 0);
    NBD_FAIL_IF(nbd_opt_info(h) == 0);          /* NBD_REP_ERR_UNKNOWN */
    NBD_FAIL_IF(nbd_set_export_name(h, "exp") < 0);
    NBD_FAIL_IF(nbd_opt_info(h) < 0);
    NBD_FAIL_IF(nbd_get_size(h) != FIX_SIZE);
    s = nbd_get_export_description(h);
    NBD_FAIL_IF(!s || strcmp(s, "qemu-mirror export (raw)") != 0);
    free(s);
    s = nbd_get_canonical_export_name(h);
    NBD_FAIL_IF(!s || strcmp(s, "exp") != 0);
    free(s);
    NBD_FAIL_IF(nbd_opt_list_meta_context(h, (nbd_context_callback) {
                .callback = meta_cb, .user_data = &metas }) != 1);
    NBD_FAIL_IF(metas != 1);
    NBD_FAIL_IF(nbd_opt_go(h) < 0);
    NBD_FAIL_IF(nbd_aio_is_ready(h) != 1);
    nbd_close(h);

    /* The default export ("") is this export too. */
    h = nbd_create();
    NBD_FAIL_IF(nbd_set_export_name(h, "") < 0);
    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    nbd_close(h);
    /* A wrong name fails NBD_OPT_GO politely... */
    h = nbd_create();
    NBD_FAIL_IF(nbd_set_export_name(h, "nope") < 0);
    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) == 0);
    nbd_close(h);
    return 0;
}

static void test_options(void)
{
    ExportFixture *f = fixture_new_raw("exp", false);

    g_assert_cmpint(run_client(options_client, f), ==, 0);
    assert_normal_client(f);
    fixture_free(f);
}

/* NBD_OPT_EXPORT_NAME, simple replies, with and without the zeroes. */
static int export_name_client(void *opaque)
{
    ExportFixture *f = opaque;

    for (int no_zeroes = 0; no_zeroes < 2; no_zeroes++) {
        uint8_t info[134];
        size_t info_len = no_zeroes ? 10 : 134;
        RawReply r;
        int fd = raw_connect(f->sock);

        NBD_FAIL_IF(fd < 0 || !raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE |
                                        (no_zeroes ? NBD_FLAG_C_NO_ZEROES
                                                   : 0)));
        NBD_FAIL_IF(!raw_opt(fd, NBD_OPT_EXPORT_NAME, "exp", 3));
        NBD_FAIL_IF(!raw_read(fd, info, info_len));
        NBD_FAIL_IF(nbdsrv_get64(info) != FIX_SIZE);
        NBD_FAIL_IF(!(nbdsrv_get16(info + 8) & NBD_FLAG_HAS_FLAGS));
        NBD_FAIL_IF(nbdsrv_get16(info + 8) & NBD_FLAG_SEND_DF);
        for (size_t i = 10; i < info_len; i++) {
            NBD_FAIL_IF(info[i] != 0);
        }
        NBD_FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, 7, 4 * MiB, 64 * KiB,
                             NULL));
        NBD_FAIL_IF(!raw_reply(fd, false, 64 * KiB, &r));
        NBD_FAIL_IF(r.structured || r.error || r.cookie != 7);
        NBD_FAIL_IF(memcmp(r.data, f->model + 4 * MiB, 64 * KiB) != 0);
        raw_reply_clear(&r);
        close(fd);
    }
    return 0;
}

static void test_export_name(void)
{
    ExportFixture *f = fixture_new_raw("exp", false);

    g_assert_cmpint(run_client(export_name_client, f), ==, 0);
    fixture_free(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd/addr/errors", test_addr_errors);
    g_test_add_func("/export-nbd/addr/stale-socket", test_addr_stale);
    {
        static const char *const ipv4[] = { "tcp:127.0.0.1:0", "127.0.0.1" };
        static const char *const ipv6[] = { "tcp:[::1]:0", "::1" };

        g_test_add_data_func("/export-nbd/addr/tcp", ipv4, test_addr_tcp);
        g_test_add_data_func("/export-nbd/addr/tcp6", ipv6, test_addr_tcp);
    }
    g_test_add_func("/export-nbd/data/libnbd", test_data_libnbd);
    g_test_add_func("/export-nbd/data/read-only", test_read_only);
    g_test_add_func("/export-nbd/data/errno", test_errno_mapping);
    g_test_add_func("/export-nbd/data/fast-zero", test_fast_zero);
    g_test_add_func("/export-nbd/options/libnbd", test_options);
    g_test_add_func("/export-nbd/options/export-name", test_export_name);
    return g_test_run();
}
