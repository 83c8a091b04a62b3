/*
 * TLS of the NBD export, in process: nbdsrv_tls_creds_new() on good and
 * bad PSK files (no key or user name in any message), then libnbd clients
 * with a pre-shared key against a server with nbdsrv_set_tls(): the
 * export's bytes through TLS (reads of 4 MiB, many small writes in flight
 * whose replies share records, a write read back), and the counters
 * (NbdServerStats) of completed handshakes, failed ones (an unknown user),
 * --tls-authz refusals and options refused for want of TLS.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <libnbd.h>

#define KEY_ALICE   "0123456789abcdef0123456789abcdef"
#define KEY_BOB     "fedcba9876543210fedcba9876543210"
#define SMALL_WRITES 256

/* Here the clients are libnbd handles: say what libnbd reported too. */
#undef FAIL_IF
#define FAIL_IF(cond)                                               \
    do {                                                            \
        if (cond) {                                                 \
            g_printerr("client: line %d: %s (%s)\n", __LINE__,      \
                       #cond, nbd_get_error());                     \
            return __LINE__;                                        \
        }                                                           \
    } while (0)

typedef struct TlsClient {
    ExportFixture *f;
    const char *psk_file;
    const char *user;       /* NULL: no TLS */
} TlsClient;

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

    FAIL_IF(!h);
    FAIL_IF(nbd_set_tls(h, c->user ? LIBNBD_TLS_REQUIRE
                                   : LIBNBD_TLS_DISABLE) < 0);
    if (c->user) {
        FAIL_IF(nbd_set_tls_psk_file(h, c->psk_file) < 0);
        FAIL_IF(nbd_set_tls_username(h, c->user) < 0);
    }
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

    FAIL_IF(!h);
    FAIL_IF(nbd_set_tls(h, LIBNBD_TLS_REQUIRE) < 0);
    FAIL_IF(nbd_set_tls_psk_file(h, c->psk_file) < 0);
    FAIL_IF(nbd_set_tls_username(h, c->user) < 0);
    FAIL_IF(nbd_add_meta_context(h, "base:allocation") < 0);
    FAIL_IF(nbd_connect_unix(h, f->sock) < 0);
    FAIL_IF(nbd_get_tls_negotiated(h) != 1);
    FAIL_IF(nbd_get_size(h) != f->size);
    for (int64_t pos = 0; pos < f->size; pos += 4 * MiB) {
        FAIL_IF(nbd_pread(h, buf + pos, 4 * MiB, pos, 0) < 0);
    }
    FAIL_IF(memcmp(buf, f->model, f->size));

    for (int i = 0; i < SMALL_WRITES; i++) {
        nbd_completion_callback cb = { .callback = aio_done,
                                       .user_data = &done };

        memset(small + i * 4096, (i % 255) + 1, 4096);
        FAIL_IF(nbd_aio_pwrite(h, small + i * 4096, 4096,
                               2 * MiB + i * 4096, cb, 0) < 0);
    }
    while (done < SMALL_WRITES) {
        FAIL_IF(nbd_poll(h, -1) < 0);
    }
    /* A large write whose payload spans many records. */
    test_fill_pattern(buf, 8 * MiB, 8 * MiB, 99);
    FAIL_IF(nbd_pwrite(h, buf, 8 * MiB, 8 * MiB, 0) < 0);
    memset(buf + 8 * MiB, 0, 8 * MiB);
    FAIL_IF(nbd_pread(h, buf + 8 * MiB, 8 * MiB, 8 * MiB, 0) < 0);
    FAIL_IF(memcmp(buf, buf + 8 * MiB, 8 * MiB));
    FAIL_IF(nbd_pread(h, buf, SMALL_WRITES * 4096, 2 * MiB, 0) < 0);
    FAIL_IF(memcmp(buf, small, SMALL_WRITES * 4096));

    /* Restore the model. */
    FAIL_IF(nbd_pwrite(h, f->model + 2 * MiB, SMALL_WRITES * 4096, 2 * MiB,
                       0) < 0);
    FAIL_IF(nbd_pwrite(h, f->model + 8 * MiB, 8 * MiB, 8 * MiB, 0) < 0);
    FAIL_IF(nbd_flush(h, 0) < 0);
    FAIL_IF(nbd_shutdown(h, 0) < 0);
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
    static const char *const authz[] = { "carol,bob", NULL };
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

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-nbd-tls/creds/errors", test_creds_errors);
    g_test_add_func("/export-nbd-tls/psk", test_psk);
    g_test_add_func("/export-nbd-tls/psk-authz", test_psk_authz);
    return g_test_run();
}
