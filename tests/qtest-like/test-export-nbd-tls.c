/*
 * TLS of the NBD export, in process: nbdsrv_tls_creds_new() on good and
 * bad PSK files (no key or user name in any message), then libnbd clients
 * with a pre-shared key against a server with nbdsrv_set_tls(): the
 * export's bytes through TLS (reads of 4 MiB, many small writes in flight
 * whose replies share records, a write read back), and the counters
 * (NbdServerStats) of completed handshakes, failed ones (an unknown user),
 * --tls-authz refusals and options refused for want of TLS.  Then X.509
 * (certificates made with certtool): a client certificate of another CA
 * and a client without one fail the handshake (counted), the right one is
 * served, and a DN on the authorization list is matched.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <glib/gstdio.h>
#include <libnbd.h>

#define KEY_ALICE   "0123456789abcdef0123456789abcdef"
#define KEY_BOB     "fedcba9876543210fedcba9876543210"
#define SMALL_WRITES 256

/* Here the clients are libnbd handles (NBD_FAIL_IF). */

typedef struct TlsClient {
    ExportFixture *f;
    const char *psk_file;
    const char *user;       /* NULL: no TLS (PSK clients) */
    const char *cert_dir;   /* X.509 clients: libnbd's layout */
} TlsClient;

/* Set up @h for @c's credentials; false on a libnbd error. */
static bool client_creds(struct nbd_handle *h, TlsClient *c)
{
    if (c->cert_dir) {
        return nbd_set_tls(h, LIBNBD_TLS_REQUIRE) == 0 &&
               nbd_set_tls_certificates(h, c->cert_dir) == 0 &&
               nbd_set_tls_verify_peer(h, false) == 0;
    }
    if (!c->user) {
        return nbd_set_tls(h, LIBNBD_TLS_DISABLE) == 0;
    }
    return nbd_set_tls(h, LIBNBD_TLS_REQUIRE) == 0 &&
           nbd_set_tls_psk_file(h, c->psk_file) == 0 &&
           nbd_set_tls_username(h, c->user) == 0;
}

static char *write_psk(ExportFixture *f, const char *text)
{
    char *path = g_build_filename(f->dir, "keys.psk", NULL);

    g_assert_true(g_file_set_contents(path, text, -1, NULL));
    return path;
}

static NbdTlsCreds *psk_creds(const char *file, const char *const *authz)
{
    NbdTlsConfig cfg = {
        .psk_file = file, .require = true, .authz = authz,
    };
    g_autoptr(GError) err = NULL;
    NbdTlsCreds *creds = nbdsrv_tls_creds_new(&cfg, &err);

    g_assert_no_error(err);
    return creds;
}

/* Connect as c->user; 0 when connecting failed (as it must), else the
 * line of the failure. */
static int refused_client(void *opaque)
{
    TlsClient *c = opaque;
    struct nbd_handle *h = nbd_create();
    int rc;

    NBD_FAIL_IF(!h);
    NBD_FAIL_IF(!client_creds(h, c));
    rc = nbd_connect_unix(h, c->f->sock);
    nbd_close(h);
    return rc == 0 ? __LINE__ : 0;
}

static int aio_done(void *opaque, int *error)
{
    (*(int *)opaque)++;
    return 1;       /* retire the command */
}

/*
 * Read everything through TLS; 256 small writes in flight, more than the
 * server takes at once (NBDSRV_MAX_CLIENT_REQUESTS): it pauses with some
 * of them decrypted or read ahead, which the fd does not show, and must
 * resume without the fd; their 16-byte replies share records.  Then one
 * large write read back, and the model restored.
 */
static int tls_client(void *opaque)
{
    TlsClient *c = opaque;
    ExportFixture *f = c->f;
    struct nbd_handle *h = nbd_create();
    g_autofree uint8_t *buf = g_malloc(f->size);
    g_autofree uint8_t *small = g_malloc(SMALL_WRITES * 4096);
    int done = 0;

    NBD_FAIL_IF(!h);
    NBD_FAIL_IF(!client_creds(h, c));
    NBD_FAIL_IF(nbd_add_meta_context(h, "base:allocation") < 0);
    NBD_FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    NBD_FAIL_IF(nbd_get_tls_negotiated(h) != 1);
    NBD_FAIL_IF(nbd_get_size(h) != f->size);
    for (int64_t pos = 0; pos < f->size; pos += 4 * MiB) {
        NBD_FAIL_IF(nbd_pread(h, buf + pos, 4 * MiB, pos, 0) < 0);
    }
    NBD_FAIL_IF(memcmp(buf, f->model, f->size));

    for (int i = 0; i < SMALL_WRITES; i++) {
        nbd_completion_callback cb = { .callback = aio_done,
                                       .user_data = &done };

        memset(small + i * 4096, (i % 255) + 1, 4096);
        NBD_FAIL_IF(nbd_aio_pwrite(h, small + i * 4096, 4096,
                               2 * MiB + i * 4096, cb, 0) < 0);
    }
    while (done < SMALL_WRITES) {
        NBD_FAIL_IF(nbd_poll(h, -1) < 0);
    }
    /* A large write whose payload spans many records. */
    test_fill_pattern(buf, 8 * MiB, 8 * MiB, 99);
    NBD_FAIL_IF(nbd_pwrite(h, buf, 8 * MiB, 8 * MiB, 0) < 0);
    memset(buf + 8 * MiB, 0, 8 * MiB);
    NBD_FAIL_IF(nbd_pread(h, buf + 8 * MiB, 8 * MiB, 8 * MiB, 0) < 0);
    NBD_FAIL_IF(memcmp(buf, buf + 8 * MiB, 8 * MiB));
    NBD_FAIL_IF(nbd_pread(h, buf, SMALL_WRITES * 4096, 2 * MiB, 0) < 0);
    NBD_FAIL_IF(memcmp(buf, small, SMALL_WRITES * 4096));

    /* Restore the model. */
    NBD_FAIL_IF(nbd_pwrite(h, f->model + 2 * MiB, SMALL_WRITES * 4096, 2 * MiB,
                       0) < 0);
    NBD_FAIL_IF(nbd_pwrite(h, f->model + 8 * MiB, 8 * MiB, 8 * MiB, 0) < 0);
    NBD_FAIL_IF(nbd_flush(h, 0) < 0);
    NBD_FAIL_IF(nbd_shutdown(h, 0) < 0);
    nbd_close(h);
    return 0;
}

static void assert_creds_error(ExportFixture *f, const char *text,
                               const char *want)
{
    g_autofree char *file = write_psk(f, text);
    NbdTlsConfig cfg = { .psk_file = file, .require = true };
    g_autoptr(GError) err = NULL;
    g_autoptr(NbdTlsCreds) creds = nbdsrv_tls_creds_new(&cfg, &err);

    g_assert_null(creds);
    g_assert_nonnull(err);
    if (!strstr(err->message, want) || !strstr(err->message, file) ||
        strstr(err->message, "secret-user") ||
        strstr(err->message, "0123456789")) {
        g_printerr("unexpected message '%s'\n", err->message);
        g_assert_not_reached();
    }
}

static void test_creds_errors(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    NbdTlsConfig cfg = { .psk_file = "/nonexistent/keys.psk" };
    g_autoptr(GError) err = NULL;

    g_assert_null(nbdsrv_tls_creds_new(&cfg, &err));
    g_assert_nonnull(strstr(err->message, "/nonexistent/keys.psk"));
    assert_creds_error(f, "secret-user:" KEY_ALICE "\n\nsecret-user:"
                       KEY_ALICE "0\n", "line 3: the key has an odd");
    assert_creds_error(f, "secret-user:0123456789xx\n",
                       "line 1: the key is not hexadecimal");
    assert_creds_error(f, "secret-user0123456789\n", "line 1: expected");
    assert_creds_error(f, ":0123456789\n", "line 1: the user name is empty");
    assert_creds_error(f, "secret-user:\n", "line 1: the key is empty");
    assert_creds_error(f, "secret-user:" KEY_ALICE "\nsecret-user:"
                       KEY_BOB "\n", "line 2: the user name is given twice");
    assert_creds_error(f, "\n\n", "no username:hexkey line");
    fixture_free(f);
}

static void test_psk(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    g_autofree char *file = write_psk(f, "alice:" KEY_ALICE "\r\n"
                                      "bob:" KEY_BOB "\n");
    TlsClient good = { f, file, "alice" };
    TlsClient unknown = { f, file, "carol" };
    TlsClient plain = { f, file, NULL };
    NbdServerStats st;

    /* carol's key: libnbd looks it up in its own file. */
    g_autofree char *client_file = g_build_filename(f->dir, "client.psk",
                                                    NULL);
    g_assert_true(g_file_set_contents(client_file, "alice:" KEY_ALICE "\n"
                                      "carol:" KEY_BOB "\n", -1, NULL));
    unknown.psk_file = client_file;

    nbdsrv_set_tls(f->srv, psk_creds(file, NULL));
    g_assert_cmpint(run_client(tls_client, &good), ==, 0);
    g_assert_cmpint(run_client(refused_client, &unknown), ==, 0);
    g_assert_cmpint(run_client(refused_client, &plain), ==, 0);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.tls_handshakes, ==, 1);
    g_assert_cmpuint(st.tls_failures, ==, 1);
    g_assert_cmpuint(st.tls_refused, ==, 0);
    g_assert_cmpuint(st.tls_required, >=, 1);
    fixture_assert_file(f);
    fixture_free(f);
}

static void test_psk_authz(void)
{
    ExportFixture *f = fixture_new_raw(NULL, false);
    g_autofree char *file = write_psk(f, "alice:" KEY_ALICE "\n"
                                      "bob:" KEY_BOB "\n");
    static const char *const authz[] = { "bob", NULL };
    TlsClient alice = { f, file, "alice" };
    TlsClient bob = { f, file, "bob" };
    NbdServerStats st;

    nbdsrv_set_tls(f->srv, psk_creds(file, authz));
    g_assert_cmpint(run_client(refused_client, &alice), ==, 0);
    g_assert_cmpint(run_client(tls_client, &bob), ==, 0);
    nbdsrv_get_stats(f->srv, &st);
    g_assert_cmpuint(st.tls_handshakes, ==, 2);
    g_assert_cmpuint(st.tls_failures, ==, 0);
    g_assert_cmpuint(st.tls_refused, ==, 1);
    fixture_free(f);
}

/* ---- X.509 ---- */

static void certtool(const char *dir, const char *const *args)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autofree char *out = NULL, *err = NULL;
    int status = -1;

    g_ptr_array_add(argv, (char *)"certtool");
    for (; *args; args++) {
        g_ptr_array_add(argv, (char *)*args);
    }
    g_ptr_array_add(argv, NULL);
    g_assert_true(g_spawn_sync(dir, (char **)argv->pdata, NULL,
                               G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                               &status, NULL));
    if (status != 0) {
        g_printerr("certtool: %s\n", err);
        g_assert_not_reached();
    }
}

/* @dir/@name-key.pem, and @dir/@name-cert.pem signed by the CA in
 * @ca_dir (NULL: self-signed, a CA) with the template @info. */
static void make_cert(const char *dir, const char *ca_dir, const char *name,
                      const char *info)
{
    g_autofree char *key = g_strdup_printf("%s/%s-key.pem", dir, name);
    g_autofree char *cert = g_strdup_printf("%s/%s-cert.pem", dir, name);
    g_autofree char *tmpl = g_strdup_printf("%s/%s.info", dir, name);
    g_autofree char *ca_cert = NULL, *ca_key = NULL;
    g_autofree char *key_pem = NULL;
    const char *const genkey[] = { "--generate-privkey", "--key-type=ecdsa",
                                   "--outfile", key, NULL };

    g_assert_true(g_file_set_contents(tmpl, info, -1, NULL));
    certtool(dir, genkey);
    if (!ca_dir) {
        const char *const self[] = {
            "--generate-self-signed", "--load-privkey", key, "--template",
            tmpl, "--outfile", cert, NULL,
        };

        certtool(dir, self);
        return;
    }
    ca_cert = g_strdup_printf("%s/ca-cert.pem", ca_dir);
    ca_key = g_strdup_printf("%s/ca-key.pem", ca_dir);
    {
        const char *const sign[] = {
            "--generate-certificate", "--load-ca-certificate", ca_cert,
            "--load-ca-privkey", ca_key, "--load-privkey", key,
            "--template", tmpl, "--outfile", cert, NULL,
        };

        certtool(dir, sign);
    }
}

static void copy_file(const char *from, const char *to)
{
    g_autofree char *text = NULL;
    gsize len;

    g_assert_true(g_file_get_contents(from, &text, &len, NULL));
    g_assert_true(g_file_set_contents(to, text, len, NULL));
}

/*
 * DIR/pki: our CA, the server's certificate, a client's; DIR/client:
 * what libnbd reads (ca-cert.pem, client-cert.pem, client-key.pem);
 * DIR/other: a client certificate of another CA; DIR/none: no client
 * certificate at all.
 */
static void make_pki(const char *dir)
{
    static const char ca_info[] = "cn = Test CA\nca\ncert_signing_key\n"
                                  "expiration_days = 2\n";
    static const char server_info[] = "cn = localhost\ntls_www_server\n"
                                      "encryption_key\nsigning_key\n"
                                      "expiration_days = 2\n";
    static const char client_info[] = "organization = Example\n"
                                      "cn = client\ntls_www_client\n"
                                      "encryption_key\nsigning_key\n"
                                      "expiration_days = 2\n";
    const char *sub[] = { "pki", "client", "other", "none" };
    g_autofree char *pki = g_build_filename(dir, "pki", NULL);
    g_autofree char *cli = g_build_filename(dir, "client", NULL);
    g_autofree char *other = g_build_filename(dir, "other", NULL);
    g_autofree char *none = g_build_filename(dir, "none", NULL);

    for (size_t i = 0; i < G_N_ELEMENTS(sub); i++) {
        g_autofree char *d = g_build_filename(dir, sub[i], NULL);

        g_assert_cmpint(g_mkdir(d, 0700), ==, 0);
    }
    make_cert(pki, NULL, "ca", ca_info);
    make_cert(pki, pki, "server", server_info);
    make_cert(cli, pki, "client", client_info);
    make_cert(other, NULL, "ca", ca_info);
    make_cert(other, other, "client", client_info);
    for (size_t i = 1; i < G_N_ELEMENTS(sub); i++) {
        g_autofree char *from = g_build_filename(pki, "ca-cert.pem", NULL);
        g_autofree char *to = g_build_filename(dir, sub[i], "ca-cert.pem",
                                               NULL);

        copy_file(from, to);
    }
}

static NbdTlsCreds *x509_creds(const char *dir, bool verify,
                               const char *const *authz)
{
    g_autofree char *pki = g_build_filename(dir, "pki", NULL);
    NbdTlsConfig cfg = {
        .x509_dir = pki, .verify_peer = verify, .require = true,
        .authz = authz,
    };
    g_autoptr(GError) err = NULL;
    NbdTlsCreds *creds = nbdsrv_tls_creds_new(&cfg, &err);

    g_assert_no_error(err);
    return creds;
}

static void test_x509(void)
{
    ExportFixture *f;
    g_autofree char *cli = NULL, *other = NULL, *none = NULL;
    static const char *const authz[] = { "CN=client,O=Example", NULL };
    static const char *const authz_other[] = { "CN=client", NULL };
    g_autofree char *certtool_path = g_find_program_in_path("certtool");
    NbdServerStats st;

    if (!certtool_path) {
        g_test_skip("certtool is not installed");
        return;
    }
    f = fixture_new_raw(NULL, false);
    make_pki(f->dir);
    cli = g_build_filename(f->dir, "client", NULL);
    other = g_build_filename(f->dir, "other", NULL);
    none = g_build_filename(f->dir, "none", NULL);
    {
        TlsClient good = { .f = f, .cert_dir = cli };
        TlsClient wrong_ca = { .f = f, .cert_dir = other };
        TlsClient no_cert = { .f = f, .cert_dir = none };

        nbdsrv_set_tls(f->srv, x509_creds(f->dir, true, authz));
        g_assert_cmpint(run_client(tls_client, &good), ==, 0);
        g_assert_cmpint(run_client(refused_client, &wrong_ca), ==, 0);
        g_assert_cmpint(run_client(refused_client, &no_cert), ==, 0);
        nbdsrv_get_stats(f->srv, &st);
        g_assert_cmpuint(st.tls_handshakes, ==, 1);
        g_assert_cmpuint(st.tls_failures, ==, 2);
        g_assert_cmpuint(st.tls_refused, ==, 0);

        /* The DN must match whole. */
        nbdsrv_set_tls(f->srv, x509_creds(f->dir, true, authz_other));
        g_assert_cmpint(run_client(refused_client, &good), ==, 0);
        nbdsrv_get_stats(f->srv, &st);
        g_assert_cmpuint(st.tls_refused, ==, 1);

        /* Without verification no certificate is asked for. */
        nbdsrv_set_tls(f->srv, x509_creds(f->dir, false, NULL));
        no_cert.cert_dir = none;
        g_assert_cmpint(run_client(tls_client, &no_cert), ==, 0);
    }
    fixture_assert_file(f);
    fixture_free(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd-tls/creds/errors", test_creds_errors);
    g_test_add_func("/export-nbd-tls/psk", test_psk);
    g_test_add_func("/export-nbd-tls/psk-authz", test_psk_authz);
    g_test_add_func("/export-nbd-tls/x509", test_x509);
    return g_test_run();
}
