/*
 * NBD client driver tests: the URI parser on its own, then every driver
 * feature against real nbdkit servers that each test starts on a UNIX
 * socket in a scratch directory (and kills at the end).  Tests skip when
 * nbdkit is not installed.
 *
 * Timing assertions are generous (the machine may be busy): "prompt"
 * means well before a delay filter would have answered.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/nbd.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* ---- nbdkit servers ---- */

typedef struct Server {
    char *dir;          /* scratch directory */
    char *sock;
    char *uri;          /* nbd+unix:///?socket=SOCK */
    GPid pid;           /* 0 once reaped */
} Server;

static bool have_nbdkit(void)
{
    g_autofree char *path = g_find_program_in_path("nbdkit");

    if (!path) {
        g_test_skip("nbdkit is not installed");
    }
    return path != NULL;
}

static void server_reap(Server *srv)
{
    if (srv->pid) {
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, NULL, 0);
        g_spawn_close_pid(srv->pid);
        srv->pid = 0;
    }
}

/*
 * Start "nbdkit -f -U SOCK -P PIDFILE --exit-with-parent ARGS..." (ARGS:
 * filters, plugin, parameters; NULL-terminated) and wait until it
 * listens: nbdkit writes the pid file once the socket is ready.
 */
static Server *server_start(const char *first, ...)
{
    Server *srv = g_new0(Server, 1);
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autofree char *pidfile = NULL;
    g_autoptr(GError) err = NULL;
    const char *arg;
    va_list ap;

    srv->dir = g_dir_make_tmp("test-nbd-XXXXXX", &err);
    g_assert_no_error(err);
    srv->sock = g_build_filename(srv->dir, "sock", NULL);
    pidfile = g_build_filename(srv->dir, "pid", NULL);
    srv->uri = g_strdup_printf("nbd+unix:///?socket=%s", srv->sock);

    g_ptr_array_add(argv, "nbdkit");
    g_ptr_array_add(argv, "-f");
    g_ptr_array_add(argv, "--exit-with-parent");
    g_ptr_array_add(argv, "-U");
    g_ptr_array_add(argv, srv->sock);
    g_ptr_array_add(argv, "-P");
    g_ptr_array_add(argv, pidfile);
    va_start(ap, first);
    for (arg = first; arg; arg = va_arg(ap, const char *)) {
        g_ptr_array_add(argv, (char *)arg);
    }
    va_end(ap);
    g_ptr_array_add(argv, NULL);

    g_spawn_async(NULL, (char **)argv->pdata, NULL,
                  G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                  G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, &srv->pid, &err);
    g_assert_no_error(err);

    /* Wait for an event (the pid file), bounded; not a fixed delay. */
    for (int i = 0; i < 2000; i++) {
        gsize len = 0;
        g_autofree char *text = NULL;

        if (g_file_get_contents(pidfile, &text, &len, NULL) && len > 0 &&
            text[len - 1] == '\n') {
            return srv;
        }
        g_assert_cmpint(waitpid(srv->pid, NULL, WNOHANG), ==, 0);
        g_usleep(10 * 1000);
    }
    g_error("nbdkit did not start within 20 s");
}

static void server_free(Server *srv)
{
    GDir *dir;
    const char *name;

    server_reap(srv);
    dir = g_dir_open(srv->dir, 0, NULL);
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(srv->dir, name, NULL);

        g_remove(path);
    }
    if (dir) {
        g_dir_close(dir);
    }
    g_rmdir(srv->dir);
    g_free(srv->dir);
    g_free(srv->sock);
    g_free(srv->uri);
    g_free(srv);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(Server, server_free)

/* ---- helpers ---- */

static BlockDriverState *open_nbd(const char *uri, int flags,
                                  const char *connections, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);

    if (connections) {
        g_hash_table_insert(opts, "connections", (char *)connections);
    }
    return bdrv_open(uri, NULL, flags, opts, errp);
}

static BlockDriverState *must_open(const char *uri, int flags,
                                   const char *connections)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = open_nbd(uri, flags, connections, &err);

    g_assert_no_error(err);
    g_assert_nonnull(bs);
    g_assert_cmpstr(bdrv_get_format_name(bs), ==, "nbd");
    return bs;
}

/* One asynchronous request's outcome. */
typedef struct Pending {
    bool done;
    int ret;
    gint64 done_us;
} Pending;

static void pending_cb(void *opaque, int ret)
{
    Pending *p = opaque;

    g_assert_false(p->done);
    p->done = true;
    p->ret = ret;
    p->done_us = g_get_monotonic_time();
}

static void run_until_all(Pending *p, int n, int timeout_s)
{
    for (int i = 0; i < n; i++) {
        test_run_until(&p[i].done, timeout_s);
    }
}

static gboolean flag_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

/* Let the loop run for @ms (requests get sent, servers receive them). */
static void run_for_ms(int ms)
{
    bool flag = false;

    g_timeout_add(ms, flag_cb, &flag);
    test_run_until(&flag, 60);
}

static int pwrite_flags(BlockDriverState *bs, int64_t off, int64_t bytes,
                        const void *buf, BdrvRequestFlags flags)
{
    Pending p = { 0 };

    bdrv_aio_pwrite(bs, off, bytes, buf, flags, pending_cb, &p);
    test_run_until(&p.done, 60);
    return p.ret;
}

/* Is "key: value" among the `info` lines of @bs? */
static bool info_has(BlockDriverState *bs, const char *line)
{
    BlockImageInfo info;
    bool found = false;

    g_assert_true(bdrv_get_info(bs, &info, NULL));
    g_assert_cmpstr(info.format, ==, "nbd");
    g_assert_cmpint(info.actual_size, ==, -1);
    for (guint i = 0; info.specific && i < info.specific->len; i++) {
        found |= !strcmp(g_ptr_array_index(info.specific, i), line);
    }
    bdrv_image_info_clear(&info);
    return found;
}

static void assert_zero(const uint8_t *buf, int64_t len)
{
    g_assert_true(buffer_is_zero(buf, len));
}

/* Count lines of @file that contain every string in @needles (NULL
 * terminated); the nbdkit log filter writes one line per event. */
static int count_lines(const char *file, const char *const *needles)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    int n = 0;

    g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
    lines = g_strsplit(text, "\n", -1);
    for (int i = 0; lines[i]; i++) {
        bool all = true;

        for (int j = 0; needles[j]; j++) {
            all &= strstr(lines[i], needles[j]) != NULL;
        }
        n += all;
    }
    return n;
}

/* ---- URIs (no server needed) ---- */

typedef struct ValidUri {
    const char *spec;
    NbdBlkTransport transport;
    bool tls;
    const char *host;           /* or socket, by transport */
    const char *port;
    const char *export_name;
} ValidUri;

static void test_uri_valid(void)
{
    static const ValidUri cases[] = {
        { "nbd://example.com/disk", NBDBLK_TRANSPORT_TCP, false,
          "example.com", "10809", "disk" },
        { "nbd://example.com", NBDBLK_TRANSPORT_TCP, false, "example.com",
          "10809", "" },
        { "nbd://example.com:10810/", NBDBLK_TRANSPORT_TCP, false,
          "example.com", "10810", "" },
        { "nbd://example.com//disk", NBDBLK_TRANSPORT_TCP, false,
          "example.com", "10809", "/disk" },
        { "nbd://example.com/hello%20world", NBDBLK_TRANSPORT_TCP, false,
          "example.com", "10809", "hello world" },
        { "nbd://[::1]:1/x", NBDBLK_TRANSPORT_TCP, false, "::1", "1", "x" },
        { "nbd://10.0.0.1:65535/a/b", NBDBLK_TRANSPORT_TCP, false,
          "10.0.0.1", "65535", "a/b" },
        { "NBD://h/x", NBDBLK_TRANSPORT_TCP, false, "h", "10809", "x" },
        { "nbds://h/x?tls-certificates=/etc/pki/x", NBDBLK_TRANSPORT_TCP,
          true, "h", "10809", "x" },
        { "nbd+unix:///disk?socket=/tmp/s", NBDBLK_TRANSPORT_UNIX, false,
          "/tmp/s", NULL, "disk" },
        { "nbd+unix://?socket=/tmp/s", NBDBLK_TRANSPORT_UNIX, false,
          "/tmp/s", NULL, "" },
        { "nbd+unix:///?socket=my%20sock", NBDBLK_TRANSPORT_UNIX, false,
          "my sock", NULL, "" },
        { "nbds+unix:///e%C3%A9?socket=s&tls-psk-file=/k&tls-username=al",
          NBDBLK_TRANSPORT_UNIX, true, "s", NULL, "e\xc3\xa9" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const ValidUri *c = &cases[i];
        g_autoptr(GError) err = NULL;
        g_autoptr(NbdBlkUri) uri = nbdblk_uri_parse(c->spec, &err);

        g_test_message("%s", c->spec);
        g_assert_no_error(err);
        g_assert_true(nbdblk_spec_is_uri(c->spec));
        g_assert_cmpint(uri->transport, ==, c->transport);
        g_assert_cmpint(uri->tls, ==, c->tls);
        g_assert_cmpstr(uri->export_name, ==, c->export_name);
        if (c->transport == NBDBLK_TRANSPORT_TCP) {
            g_assert_cmpstr(uri->host, ==, c->host);
            g_assert_cmpstr(uri->port, ==, c->port);
            g_assert_null(uri->socket);
        } else {
            g_assert_cmpstr(uri->socket, ==, c->host);
            g_assert_null(uri->host);
        }
    }
}

static void test_uri_tls_params(void)
{
    g_autoptr(NbdBlkUri) a = nbdblk_uri_parse(
        "nbds+unix:///?socket=s&tls-psk-file=/k%2Cf&tls-username=alice",
        NULL);
    g_autoptr(NbdBlkUri) b = nbdblk_uri_parse(
        "nbds://h/?tls-certificates=/c&tls-verify-peer=0", NULL);
    g_autoptr(NbdBlkUri) c = nbdblk_uri_parse("nbd://h/", NULL);

    g_assert_cmpstr(a->tls_psk_file, ==, "/k,f");
    g_assert_cmpstr(a->tls_username, ==, "alice");
    g_assert_null(a->tls_certificates);
    g_assert_cmpint(a->tls_verify_peer, ==, -1);
    g_assert_cmpstr(b->tls_certificates, ==, "/c");
    g_assert_cmpint(b->tls_verify_peer, ==, 0);
    g_assert_false(c->tls);
}

typedef struct InvalidUri {
    const char *spec;
    const char *message;        /* a substring of the error */
} InvalidUri;

static void check_invalid(const char *spec, const char *message)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GError) err2 = NULL;
    g_autoptr(NbdBlkUri) uri = nbdblk_uri_parse(spec, &err);
    BlockDriverState *bs;

    g_test_message("%s -> %s", spec, err ? err->message : "(accepted)");
    g_assert_null(uri);
    g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
    g_assert_nonnull(strstr(err->message, message));
    g_assert_null(strchr(err->message, '\n'));
    g_assert_true(err->message[0] == '\'');

    /* bdrv_open() gives the same error, from this driver (no probing,
     * no connection attempt). */
    bs = bdrv_open(spec, NULL, 0, NULL, &err2);
    g_assert_null(bs);
    g_assert_error(err2, BLOCK_ERROR, BLOCK_ERROR_INVALID);
    g_assert_cmpstr(err2->message, ==, err->message);
}

static void test_uri_invalid(void)
{
    g_autofree char *long_export = g_strdup_printf("nbd://h/%0*d", 4097, 0);
    g_autofree char *long_socket = g_strdup_printf(
        "nbd+unix:///?socket=/%0*d", 120, 0);
    static const InvalidUri cases[] = {
        { "nbd+vsock:///x", "the vsock transport ('nbd+vsock') is not "
          "supported" },
        { "nbds+vsock://1/", "vsock" },
        { "nbd+ssh://h/", "unsupported URI scheme 'nbd+ssh'" },
        { "nbd+tcp://h/", "unsupported URI scheme 'nbd+tcp'" },
        { "http://h/x", "unsupported URI scheme 'http'" },
        { "nbd:/x", "expected '//' after 'nbd:'" },
        { "nbd:x", "expected '//'" },
        { "nbd://", "missing host" },
        { "nbd:///x", "missing host" },
        { "nbd+unix:///x", "missing socket=" },
        { "nbds+unix://", "missing socket=" },
        { "nbd+unix:///?socket=", "empty socket=" },
        { "nbd+unix://host/?socket=s", "a host must not be given" },
        { "nbd://h/?socket=s", "socket= is only valid with nbd+unix" },
        { "nbd://h:99999/", "bad port '99999'" },
        { "nbd://h:65536/", "bad port '65536'" },
        { "nbd://h:0/", "bad port '0'" },
        { "nbd://h:-1/", "bad port '-1'" },
        { "nbd://h:abc/", "bad port 'abc'" },
        { "nbd://h:12345678901234567890/", "bad port" },
        { "nbd://h:/", "missing port" },
        { "nbd://h/?foo=1", "unknown query parameter 'foo'" },
        { "nbd://h/?x-foo=1", "unknown query parameter 'x-foo'" },
        { "nbd+unix:///?socket=a&socket=b", "'socket' is given more than "
          "once" },
        { "nbd://h/x%00y", "the export name contains a NUL byte" },
        { "nbd://h/%zz", "bad percent-encoding '%zz' in the export name" },
        { "nbd://h/x%4", "bad percent-encoding '%4'" },
        { "nbd://h/%FF", "not valid UTF-8" },
        { "nbd://[::1/", "unterminated '['" },
        { "nbd://fe80::1/", "more than one ':'" },
        { "nbd://h/x y", "invalid character ' ' in the export name" },
        { "nbd://h/x\x01", "invalid byte 0x01" },
        { "nbd://h/x#frag", "fragment" },
        { "nbd://user@h/", "user information" },
        { "nbd://h/?tls-certificates=/x", "needs TLS" },
        { "nbds://h/?tls-certificates=/a&tls-psk-file=/b",
          "cannot be used together" },
        { "nbds://h/?tls-verify-peer=maybe", "expected 0 or 1" },
        { "nbd+unix:///?socket=%00abstract", "abstract sockets are not "
          "supported" },
        { "nbd+unix:///?socket", "has no '=value'" },
        { "nbd+unix:///?socket=s&", "empty query parameter" },
        { "nbd+unix:///?socket=s&&x=1", "empty query parameter" },
        { "nbd+unix:///?socket=a%zz", "bad percent-encoding '%zz' in "
          "socket" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        check_invalid(cases[i].spec, cases[i].message);
    }
    check_invalid(long_export, "the export name is 4097 bytes long");
    check_invalid(long_socket, "the socket path is 121 bytes long");
}

/* A user name never appears in messages. */
static void test_uri_redact(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *a = nbdblk_uri_redact(
        "nbds+unix:///?socket=s&tls-psk-file=/k&tls-username=alice");
    g_autofree char *b = nbdblk_uri_redact("nbd://bob:pw@h/x");
    g_autofree char *c = nbdblk_uri_redact(
        "nbds://h/?tls-username=alice&tls-certificates=/c");

    g_assert_cmpstr(a, ==,
                    "nbds+unix:///?socket=s&tls-psk-file=/k&tls-username=xxx");
    g_assert_cmpstr(b, ==, "nbd://xxx@h/x");
    g_assert_cmpstr(c, ==, "nbds://h/?tls-username=xxx&tls-certificates=/c");

    g_assert_null(nbdblk_uri_parse("nbds://h/?tls-username=secretname",
                                   &err));
    g_assert_nonnull(strstr(err->message, "needs tls-psk-file="));
    g_assert_null(strstr(err->message, "secretname"));
}

static void test_uri_recognize(void)
{
    g_assert_true(nbdblk_spec_is_uri("nbd://h/"));
    g_assert_true(nbdblk_spec_is_uri("nbd+unix:///?socket=s"));
    g_assert_true(nbdblk_spec_is_uri("NBDS://h/"));
    g_assert_true(nbdblk_spec_is_uri("nbd+whatever:x"));
    g_assert_true(nbdblk_spec_is_uri("http://h/x"));
    g_assert_false(nbdblk_spec_is_uri("null:size=1M"));
    g_assert_false(nbdblk_spec_is_uri("/tmp/nbd://x"));
    g_assert_false(nbdblk_spec_is_uri("nbd.img"));
    g_assert_false(nbdblk_spec_is_uri("disk:1.img"));
}

/* ---- data path against nbdkit ---- */

/* A 1 MiB server without trim, flush, FUA or multi-conn (the eval
 * plugin advertises only what has a script); reads zeroes. */
#define EVAL_SERVER "eval", "get_size=echo 1048576", \
    "pread=dd if=/dev/zero bs=$3 count=1 status=none", \
    "pwrite=cat >/dev/null"

/* memory 64M: patterned writes at aligned and odd places read back, and
 * the whole disk matches a model of it at the end. */
static void test_rw_memory(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    static const struct { int64_t off, len; } ranges[] = {
        { 0, 4096 }, { 1, 1 }, { 65535, 3 * MiB + 7 },
        { 40 * MiB, 24 * MiB }, { 64 * MiB - 100, 100 },
        { 20 * MiB - 3, 33 * MiB },
    };
    g_autofree uint8_t *model = g_malloc0(64 * MiB);
    g_autofree uint8_t *disk = g_malloc(64 * MiB);

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_getlength(bs), ==, 64 * MiB);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 1);
    g_assert_cmpint(bs->bl.max_transfer, ==, 32 * MiB);

    for (size_t i = 0; i < G_N_ELEMENTS(ranges); i++) {
        int64_t off = ranges[i].off, len = ranges[i].len;
        g_autofree uint8_t *r = g_malloc(len);

        g_assert_cmpint(off + len, <=, 64 * MiB);
        test_fill_pattern(model + off, off, len, i + 1);
        g_assert_cmpint(test_pwrite(bs, off, len, model + off), ==, 0);
        g_assert_cmpint(test_pread(bs, off, len, r), ==, 0);
        g_assert_cmpmem(r, len, model + off, len);
    }
    /* 64 MiB in one request: io.c sends 32 MiB pieces. */
    g_assert_cmpint(test_pread(bs, 0, 64 * MiB, disk), ==, 0);
    g_assert_true(memcmp(disk, model, 64 * MiB) == 0);
    g_assert_cmpint(test_flush(bs), ==, 0);
    g_assert_true(info_has(bs, "export: \"\""));
    g_assert_true(info_has(bs, "multi-conn: yes"));
    g_assert_true(info_has(bs, "connections: 4"));
    g_assert_true(info_has(bs, "read-only: no"));
}

/* An export size that is not a multiple of 512. */
static void test_rw_odd_size(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    const int64_t size = 1000001;
    uint8_t w[777], r[1000];
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "1000001", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_getlength(bs), ==, size);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 1);

    test_fill_pattern(w, size - sizeof(w), sizeof(w), 9);
    g_assert_cmpint(test_pwrite(bs, size - sizeof(w), sizeof(w), w), ==, 0);
    /* The read runs past the end: the tail reads as zero. */
    memset(r, 0xaa, sizeof(r));
    g_assert_cmpint(test_pread(bs, size - sizeof(w), sizeof(r), r), ==, 0);
    g_assert_cmpmem(r, sizeof(w), w, sizeof(w));
    assert_zero(r + sizeof(w), sizeof(r) - sizeof(w));
    g_assert_cmpint(test_pwrite(bs, size - 1, 2, w), ==, -ENOSPC);
    g_assert_cmpint(test_pwrite_zeroes(bs, size - 10, 10, 0), ==, 0);
    g_assert_cmpint(test_pread(bs, size - 10, 10, r), ==, 0);
    assert_zero(r, 10);

    g_assert_cmpint(test_block_status(bs, 0, size, ext), ==, 0);
    g_assert_cmpint(ext->len, >=, 1);
    {
        BlockExtent *last = &g_array_index(ext, BlockExtent, ext->len - 1);

        g_assert_cmpint(last->offset + last->length, ==, size);
    }
}

/* Check @ext covers [off, off + len) contiguously; return the flags
 * seen, OR-ed. */
static unsigned check_extents(GArray *ext, int64_t off, int64_t len)
{
    unsigned seen = 0;
    int64_t pos = off;

    g_assert_cmpint(ext->len, >=, 1);
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, pos);
        g_assert_cmpint(e->length, >, 0);
        pos += e->length;
        seen |= e->flags;
    }
    g_assert_cmpint(pos, <=, off + len);
    return seen;
}

/* sparse-random: zero extents read as zero, data extents do not. */
static void test_status_sparse_random(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    int64_t size = 256 * MiB, pos = 12345;
    unsigned seen = 0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("sparse-random", "256M", "seed=1", NULL);
    bs = must_open(srv->uri, 0, NULL);

    /* Walk the whole export from an unaligned offset in big requests. */
    while (pos < size) {
        g_array_set_size(ext, 0);
        g_assert_cmpint(test_block_status(bs, pos, size - pos, ext), ==, 0);
        seen |= check_extents(ext, pos, size - pos);
        for (guint i = 0; i < ext->len; i++) {
            BlockExtent *e = &g_array_index(ext, BlockExtent, i);
            int64_t n = MIN(e->length, 64 * KiB);

            g_assert_cmpint(test_pread(bs, e->offset, n, buf), ==, 0);
            if (e->flags & BDRV_BLOCK_ZERO) {
                g_assert_false(e->flags & BDRV_BLOCK_DATA);
                assert_zero(buf, n);
            } else {
                g_assert_true(e->flags & BDRV_BLOCK_DATA);
                g_assert_false(buffer_is_zero(buf, n));
            }
            pos = e->offset + e->length;
        }
    }
    g_assert_cmpint(pos, ==, size);
    g_assert_true(seen & BDRV_BLOCK_ZERO);
    g_assert_true(seen & BDRV_BLOCK_DATA);
}

/* null: one zero (and unallocated) extent for a 1 GiB question. */
static void test_status_null(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    BlockExtent *e;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("null", "4T", NULL);
    bs = must_open(srv->uri, 0, NULL);
    g_assert_cmpint(test_block_status(bs, 7, GiB, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->offset, ==, 7);
    g_assert_cmpint(e->length, ==, GiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_ZERO);

    /* Beyond 32 bits of length: capped, still at least one extent. */
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs, 0, 3 * TiB, ext), ==, 0);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, <=, 2 * GiB);
    g_assert_cmpint(e->length, >=, GiB);
}

/* memory: written ranges are data, the rest zero; noextents: all data. */
static void test_status_data(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) srv2 = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *w = g_malloc(MiB);
    BlockExtent *e;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    test_fill_pattern(w, 0, MiB, 3);
    g_assert_cmpint(test_pwrite(bs, 8 * MiB, MiB, w), ==, 0);
    g_assert_cmpint(test_block_status(bs, 8 * MiB, 2 * MiB, ext), ==, 0);
    check_extents(ext, 8 * MiB, 2 * MiB);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, MiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
    g_assert_cmpint(ext->len, ==, 2);
    e = &g_array_index(ext, BlockExtent, 1);
    g_assert_true(e->flags & BDRV_BLOCK_ZERO);
    g_assert_false(e->flags & BDRV_BLOCK_DATA);

    srv2 = server_start("--filter=noextents", "memory", "64M", NULL);
    bs2 = must_open(srv2->uri, 0, NULL);
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs2, 0, 64 * MiB, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 1);
    e = &g_array_index(ext, BlockExtent, 0);
    g_assert_cmpint(e->length, ==, 64 * MiB);
    g_assert_cmpuint(e->flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
}

/* Each base:allocation combination maps to its own flags: ZERO skips
 * the read, HOLE alone does not. */
static void test_status_flags(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    static const unsigned expect[] = {
        BDRV_BLOCK_DATA,                                /* hole */
        BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED,         /* zero */
        BDRV_BLOCK_ZERO,                                /* hole,zero */
        BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED,         /* data */
    };

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start(EVAL_SERVER, "extents=echo 0 262144 hole; "
                       "echo 262144 262144 zero; "
                       "echo 524288 262144 hole,zero; "
                       "echo 786432 262144", NULL);
    bs = must_open(srv->uri, 0, NULL);
    g_assert_cmpint(test_block_status(bs, 0, MiB, ext), ==, 0);
    check_extents(ext, 0, MiB);
    g_assert_cmpint(ext->len, ==, 4);
    for (guint i = 0; i < 4; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);

        g_assert_cmpint(e->offset, ==, i * 262144);
        g_assert_cmpint(e->length, ==, 262144);
        g_assert_cmpuint(e->flags, ==, expect[i]);
    }
    /* Clipped to the question, from an offset inside an extent. */
    g_array_set_size(ext, 0);
    g_assert_cmpint(test_block_status(bs, 300000, 300000, ext), ==, 0);
    g_assert_cmpint(ext->len, ==, 2);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 0).offset, ==, 300000);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 0).length, ==,
                    524288 - 300000);
    g_assert_cmpuint(g_array_index(ext, BlockExtent, 0).flags, ==,
                     expect[1]);
    g_assert_cmpint(g_array_index(ext, BlockExtent, 1).length, ==,
                    600000 - 524288);
}

/* Fill [off, off + len) with pattern data and zero it with @flags. */
static int zero_after_data(BlockDriverState *bs, int64_t off, int64_t len,
                           BdrvRequestFlags flags)
{
    g_autofree uint8_t *w = g_malloc(len);
    int ret;

    test_fill_pattern(w, off, len, 5);
    g_assert_cmpint(test_pwrite(bs, off, len, w), ==, 0);
    ret = test_pwrite_zeroes(bs, off, len, flags);
    g_assert_cmpint(test_pread(bs, off, len, w), ==, 0);
    if (ret == 0) {
        assert_zero(w, len);
    }
    return ret;
}

static void test_zero(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) nozero = NULL;
    g_autoptr(Server) slow = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autoptr(BlockDriverState) bs3 = NULL;

    if (!have_nbdkit()) {
        return;
    }
    /* memory: write zeroes, with and without unmap, and fast zero. */
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_true(info_has(bs, "features: flush fua zero fast-zero trim "
                           "base:allocation"));
    g_assert_cmpint(zero_after_data(bs, MiB, 3 * MiB, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    g_assert_cmpint(zero_after_data(bs, 5 * MiB + 3, 70000, 0), ==, 0);
    g_assert_cmpint(zero_after_data(bs, 9 * MiB, MiB,
                                    BDRV_REQ_NO_FALLBACK), ==, 0);
    g_assert_cmpint(zero_after_data(bs, 11 * MiB, MiB, BDRV_REQ_FUA), ==, 0);

    /* No write zeroes on the server: io.c falls back to writing zero
     * buffers, except when the caller asked for no fallback. */
    nozero = server_start("--filter=nozero", "memory", "64M", NULL);
    bs2 = must_open(nozero->uri, BDRV_O_RDWR, NULL);
    g_assert_true(info_has(bs2, "features: flush fua trim "
                           "base:allocation"));
    g_assert_cmpint(zero_after_data(bs2, MiB, 2 * MiB + 5, 0), ==, 0);
    g_assert_cmpint(zero_after_data(bs2, 8 * MiB, MiB, BDRV_REQ_MAY_UNMAP),
                    ==, 0);
    g_assert_cmpint(zero_after_data(bs2, 16 * MiB, MiB,
                                    BDRV_REQ_NO_FALLBACK), ==, -ENOTSUP);

    /* Fast zero advertised but refused by the server: -ENOTSUP. */
    slow = server_start("--filter=nozero", "memory", "64M",
                        "zeromode=plugin", "fastzeromode=slow", NULL);
    bs3 = must_open(slow->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(zero_after_data(bs3, MiB, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, -ENOTSUP);
    g_assert_cmpint(zero_after_data(bs3, MiB, MiB, 0), ==, 0);
}

/* sparse-random cannot fast-zero: refused before anything is sent. */
static void test_zero_fast_refused(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("sparse-random", "64M", "seed=1", "percent=0", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_false(info_has(bs, "features: flush fua zero fast-zero trim "
                            "base:allocation"));
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, BDRV_REQ_NO_FALLBACK),
                    ==, -ENOTSUP);
    /* A plain zero over (verified) zeroes works. */
    g_assert_cmpint(test_pwrite_zeroes(bs, 0, MiB, 0), ==, 0);
}

static void test_trim(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(Server) notrim = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(BlockDriverState) bs2 = NULL;
    g_autofree uint8_t *w = g_malloc(MiB);
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("memory", "64M", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    test_fill_pattern(w, 0, MiB, 7);
    g_assert_cmpint(test_pwrite(bs, 4 * MiB, MiB, w), ==, 0);
    g_assert_cmpint(test_pdiscard(bs, 4 * MiB, MiB), ==, 0);
    /* memory really deallocates: the range is a hole now. */
    g_assert_cmpint(test_block_status(bs, 4 * MiB, MiB, ext), ==, 0);
    g_assert_true(g_array_index(ext, BlockExtent, 0).flags &
                  BDRV_BLOCK_ZERO);
    g_assert_cmpint(test_pread(bs, 4 * MiB, MiB, w), ==, 0);
    assert_zero(w, MiB);

    /* No trim on the server: advisory, so success. */
    notrim = server_start(EVAL_SERVER, NULL);
    bs2 = must_open(notrim->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(test_pdiscard(bs2, 0, MiB), ==, 0);
}

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
    g_assert_cmpint(count_lines(log, (const char *[]){ " Flush id=", NULL }),
                    ==, 4);
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

static void test_read_only(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(GError) err = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree char *expect = NULL;
    uint8_t buf[512];

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("-r", "memory", "1M", NULL);
    g_assert_null(open_nbd(srv->uri, BDRV_O_RDWR, NULL, &err));
    expect = g_strdup_printf("'%s': the NBD export is read-only", srv->uri);
    g_assert_cmpstr(err->message, ==, expect);

    bs = must_open(srv->uri, 0, NULL);
    g_assert_true(info_has(bs, "read-only: yes"));
    g_assert_cmpint(test_pread(bs, 0, sizeof(buf), buf), ==, 0);
    assert_zero(buf, sizeof(buf));
    g_assert_cmpint(test_pwrite(bs, 0, sizeof(buf), buf), ==, -EPERM);
}

/* Block size constraints become limits; io.c pads and splits so that
 * the server (which rejects violations) never sees one. */
static void test_blocksize_policy(void)
{
    g_autoptr(Server) srv = NULL;
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    g_autofree uint8_t *w = g_malloc(3 * MiB);
    g_autofree uint8_t *r = g_malloc(3 * MiB);

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=blocksize-policy", "memory", "64M",
                       "blocksize-minimum=4K", "blocksize-preferred=64K",
                       "blocksize-maximum=1M",
                       "blocksize-error-policy=error", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
    g_assert_cmpint(bdrv_get_request_alignment(bs), ==, 4096);
    g_assert_cmpint(bs->bl.max_transfer, ==, MiB);
    g_assert_cmpint(bs->bl.opt_transfer, ==, 64 * KiB);
    g_assert_cmpint(bs->bl.max_pwrite_zeroes % 4096, ==, 0);
    g_assert_true(info_has(bs, "block size: minimum 4096, preferred 65536, "
                           "maximum 1048576 (0: not advertised)"));

    /* Unaligned and larger than the maximum. */
    test_fill_pattern(w, 1000, 3 * MiB - 5000, 11);
    g_assert_cmpint(test_pwrite(bs, 1000, 3 * MiB - 5000, w), ==, 0);
    g_assert_cmpint(test_pread(bs, 1000, 3 * MiB - 5000, r), ==, 0);
    g_assert_cmpmem(r, 3 * MiB - 5000, w, 3 * MiB - 5000);
    g_assert_cmpint(test_pwrite_zeroes(bs, 4097, 10000, 0), ==, 0);
    g_assert_cmpint(test_pread(bs, 4097, 10000, r), ==, 0);
    assert_zero(r, 10000);
    g_assert_cmpint(test_pdiscard(bs, 100, 3 * MiB), ==, 0);
    g_assert_cmpint(test_block_status(bs, 1001, 5 * MiB, ext), ==, 0);
    check_extents(ext, 1001, 5 * MiB);
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
                        NBDBLK_DEFAULT_CONNECTIONS);
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
        g_assert_cmpint(used, ==, NBDBLK_DEFAULT_CONNECTIONS);
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
    gint64 t0;

    if (!have_nbdkit()) {
        return;
    }
    srv = server_start("--filter=delay", "memory", "64M", "rdelay=5",
                       "wdelay=5", NULL);
    bs = must_open(srv->uri, BDRV_O_RDWR, NULL);
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
    signal(SIGPIPE, SIG_IGN);

    g_test_add_func("/nbd/uri/valid", test_uri_valid);
    g_test_add_func("/nbd/uri/tls-params", test_uri_tls_params);
    g_test_add_func("/nbd/uri/invalid", test_uri_invalid);
    g_test_add_func("/nbd/uri/redact", test_uri_redact);
    g_test_add_func("/nbd/uri/recognize", test_uri_recognize);
    g_test_add_func("/nbd/rw/memory", test_rw_memory);
    g_test_add_func("/nbd/rw/odd-size", test_rw_odd_size);
    g_test_add_func("/nbd/status/sparse-random", test_status_sparse_random);
    g_test_add_func("/nbd/status/null", test_status_null);
    g_test_add_func("/nbd/status/data", test_status_data);
    g_test_add_func("/nbd/status/flags", test_status_flags);
    g_test_add_func("/nbd/zero/fallback", test_zero);
    g_test_add_func("/nbd/zero/fast-refused", test_zero_fast_refused);
    g_test_add_func("/nbd/trim", test_trim);
    g_test_add_func("/nbd/flush-fua", test_flush_fua);
    g_test_add_func("/nbd/read-only", test_read_only);
    g_test_add_func("/nbd/blocksize-policy", test_blocksize_policy);
    g_test_add_func("/nbd/multi-conn", test_multi_conn);
    g_test_add_func("/nbd/errors/eio", test_errors);
    g_test_add_func("/nbd/errors/enospc", test_errors_enospc);
    g_test_add_func("/nbd/errors/status", test_errors_status);
    g_test_add_func("/nbd/death", test_server_death);
    g_test_add_func("/nbd/cancel", test_cancel);
    g_test_add_func("/nbd/queue", test_queue);
    g_test_add_func("/nbd/close-stalled", test_close_stalled);
    g_test_add_func("/nbd/tls-psk", test_tls_psk);
    return g_test_run();
}
