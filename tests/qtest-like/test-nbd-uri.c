/*
 * NBD URI parsing and validation, without a server: valid forms, TLS
 * parameters, every malformed case with its message, redaction.
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
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

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

/* reconnect-delay=SECS: any URI, TLS or not; -1 when not given. */
static void test_uri_reconnect_delay(void)
{
    static const struct {
        const char *spec;
        int delay;
    } cases[] = {
        { "nbd://h/", -1 },
        { "nbd://h/?reconnect-delay=0", 0 },
        { "nbd://h/x?reconnect-delay=30", 30 },
        { "nbd+unix:///?socket=/s&reconnect-delay=86400", 86400 },
        { "nbds://h/?reconnect-delay=5&tls-certificates=/c", 5 },
        { "nbd://h/?reconnect-delay=%36%30", 60 },
    };
    static const char *const bad[] = { "abc", "-1", "86401", "", "1.5" };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;
        g_autoptr(NbdBlkUri) uri = nbdblk_uri_parse(cases[i].spec, &err);

        g_test_message("%s", cases[i].spec);
        g_assert_no_error(err);
        g_assert_cmpint(uri->reconnect_delay, ==, cases[i].delay);
    }
    /* The node option: refused before anything connects. */
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash,
                                                      g_str_equal);
        g_autoptr(GError) err = NULL;
        g_autofree char *want = g_strdup_printf("nbd: reconnect-delay '%s'",
                                                bad[i]);

        g_hash_table_insert(opts, "reconnect-delay", (char *)bad[i]);
        g_assert_null(bdrv_open("nbd+unix:///?socket=/nonexistent/s", NULL,
                                0, opts, &err));
        g_test_message("%s -> %s", bad[i], err->message);
        g_assert_error(err, BLOCK_ERROR, BLOCK_ERROR_INVALID);
        g_assert_true(g_str_has_prefix(err->message, want));
    }
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
        /* reconnect-delay: the value named as written */
        { "nbd://h/?reconnect-delay=abc", "reconnect-delay 'abc': invalid "
          "number" },
        { "nbd://h/?reconnect-delay=-1", "reconnect-delay '-1': must be "
          "between 0 and 86400" },
        { "nbd://h/?reconnect-delay=86401", "reconnect-delay '86401': must "
          "be between 0 and 86400" },
        { "nbd://h/?reconnect-delay=1s", "reconnect-delay '1s': invalid "
          "number" },
        { "nbd://h/?reconnect-delay=", "empty reconnect-delay=" },
        { "nbd://h/?reconnect-delay=1&reconnect-delay=2",
          "query parameter 'reconnect-delay' is given more than once" },
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

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/uri/valid", test_uri_valid);
    g_test_add_func("/nbd/uri/tls-params", test_uri_tls_params);
    g_test_add_func("/nbd/uri/invalid", test_uri_invalid);
    g_test_add_func("/nbd/uri/reconnect-delay", test_uri_reconnect_delay);
    g_test_add_func("/nbd/uri/redact", test_uri_redact);
    g_test_add_func("/nbd/uri/recognize", test_uri_recognize);
    return g_test_run();
}
