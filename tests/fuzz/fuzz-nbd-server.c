/*
 * libFuzzer target: the input is what an NBD client sends to our server.
 *
 * Each input but its two framing bytes (below) goes, byte for byte, into
 * one end of a socketpair whose other end is a connection of an
 * in-process NbdServer (block/export/nbd-server*.c) exporting a null
 * node: the handshake (client flags, options) and then the transmission
 * phase (requests, WRITE payloads), exactly as they would arrive from a
 * socket.  The main context is pumped while the input is written and the
 * server's output is read and dropped (a client that reads everything),
 * then the write side is shut down, and pumping goes on until the server
 * has closed the connection and every request it submitted has completed.
 *
 * The input is framed by two leading bytes, then the client's bytes:
 *   byte 0  the server and the client:
 *           bit 0     the export: clear writable, set read-only;
 *           bits 1-2  TLS: 0 none (NBD_OPT_STARTTLS is unsupported),
 *                     1 a PSK credential, plain clients served too
 *                     (--tls=on), 2 the same, TLS required, 3 X.509
 *                     certificates, TLS required, client certificates
 *                     verified and only the harness's DN authorized
 *                     (--tls-authz);
 *           bit 3     the client does TLS: with a credential, the bytes
 *                     up to and including the first NBD_OPT_STARTTLS
 *                     header (16 bytes, no data) go in plaintext, then
 *                     this harness completes a real TLS handshake (PSK
 *                     user "fuzz", or its client certificate) and the
 *                     rest of the input goes through
 *                     TLS (in plaintext if the handshake failed);
 *                     otherwise everything goes in plaintext, so that
 *                     what follows STARTTLS is plaintext trailing it or,
 *                     written after the reply (byte 1), a handshake on
 *                     garbage;
 *   byte 1  how the bytes are written: 0 as much as the socket takes at
 *           a time, N > 0 at most N bytes (one TLS record each), then one
 *           main-loop iteration, so that the server sees headers, options
 *           and payloads split across reads at every point.
 * tests/fuzz/record-nbd-sessions.sh and make-corpus-nbd.py write seeds in
 * this framing.  The PSK file is written, and the certificates made with
 * certtool, into a scratch directory once.
 *
 * A crash, a leak, an assertion or a connection that never ends (the
 * pump gives up after FUZZ_MAX_ITERATIONS and aborts) is a bug.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzzing=true.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block.h"
#include "block/export/nbd-server-int.h"
#include "tests/qtest-like/test-util.h"

/* A small export: reads and writes stay cheap; requests beyond it still
 * reach every check. */
#define FUZZ_EXPORT_SPEC        "null:size=4M"
#define FUZZ_MAX_ITERATIONS     1000000
/* The framing bytes before the client's (see the top of this file). */
#define FUZZ_HEADER_SIZE        2
#define FUZZ_F_READ_ONLY        0x01
#define FUZZ_F_TLS_SHIFT        1
#define FUZZ_F_TLS_MASK         0x03
#define FUZZ_F_TLS_CLIENT       0x08
/* Servers: [export][TLS none, PSK on, PSK require, X.509]. */
#define FUZZ_TLS_MODES          4
#define FUZZ_TLS_X509           3
/* The client certificate's subject, as GnuTLS prints it. */
#define FUZZ_CLIENT_DN          "CN=fuzz client,O=qemu-mirror"
/* The client's PSK: nbdkit's "username:hexkey" line. */
#define FUZZ_PSK_USER           "fuzz"
#define FUZZ_PSK_HEX            "00112233445566778899aabbccddeeff" \
                                "0123456789abcdef0123456789abcdef"
/* Main-loop iterations with nothing to do after which the client gives
 * up its handshake. */
#define FUZZ_TLS_IDLE           100
/* The client offers plain PSK only: no key exchange to slow each run. */
#define FUZZ_TLS_PRIORITY       "NORMAL:-KX-ALL:+PSK"
#define FUZZ_TLS_PRIORITY_X509  "NORMAL"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *fuzz_dir;
static BlockDriverState *fuzz_bs[2];
static NbdServer *fuzz_srv[2][FUZZ_TLS_MODES];
static gnutls_psk_client_credentials_t fuzz_psk;
static gnutls_certificate_credentials_t fuzz_x509;
static gnutls_priority_t fuzz_prio, fuzz_prio_x509;

static void fuzz_cleanup(void)
{
    for (int i = 0; i < 2; i++) {
        for (int t = 0; t < FUZZ_TLS_MODES; t++) {
            nbdsrv_free(g_steal_pointer(&fuzz_srv[i][t]));
        }
        g_clear_pointer(&fuzz_bs[i], bdrv_unref);
    }
    gnutls_psk_free_client_credentials(fuzz_psk);
    gnutls_certificate_free_credentials(fuzz_x509);
    gnutls_priority_deinit(fuzz_prio);
    gnutls_priority_deinit(fuzz_prio_x509);
    test_scratch_free(g_steal_pointer(&fuzz_dir));
}

/* TLS mode @t (see the top) for @srv, from the PSK file @psk or the
 * certificates in @x509. */
static void fuzz_set_tls(NbdServer *srv, const char *psk, const char *x509,
                         int t)
{
    static const char *const authz[] = { FUZZ_CLIENT_DN, NULL };
    NbdTlsConfig cfg = { .psk_file = psk, .require = t >= 2 };
    g_autoptr(GError) err = NULL;
    NbdTlsCreds *creds;

    if (t == FUZZ_TLS_X509) {
        cfg = (NbdTlsConfig) {
            .x509_dir = x509, .verify_peer = true, .require = true,
            .authz = authz,
        };
    }
    creds = nbdsrv_tls_creds_new(&cfg, &err);
    g_assert_no_error(err);
    nbdsrv_set_tls(srv, creds);
}

/* Run certtool in @dir with the arguments that follow (up to a NULL);
 * it must succeed. */
static void G_GNUC_NULL_TERMINATED fuzz_certtool(const char *dir, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autoptr(GError) err = NULL;
    const char *a;
    va_list ap;
    int status;

    g_ptr_array_add(argv, (gpointer)"certtool");
    va_start(ap, dir);
    while ((a = va_arg(ap, const char *))) {
        g_ptr_array_add(argv, (gpointer)a);
    }
    va_end(ap);
    g_ptr_array_add(argv, NULL);
    g_assert(g_spawn_sync(dir, (char **)argv->pdata, NULL,
                          G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL |
                          G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL,
                          &status, &err));
    g_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* @name-key.pem and @name-cert.pem in @dir, signed by its CA, from the
 * template lines @tmpl. */
static void fuzz_cert(const char *dir, const char *name, const char *tmpl)
{
    g_autofree char *key = g_strdup_printf("%s-key.pem", name);
    g_autofree char *cert = g_strdup_printf("%s-cert.pem", name);
    g_autofree char *t = g_build_filename(dir, "t.info", NULL);

    g_assert(g_file_set_contents(t, tmpl, -1, NULL));
    fuzz_certtool(dir, "--generate-privkey", "--key-type=ecdsa",
                  "--outfile", key, NULL);
    fuzz_certtool(dir, "--generate-certificate", "--load-ca-certificate",
                  "ca-cert.pem", "--load-ca-privkey", "ca-key.pem",
                  "--load-privkey", key, "--template", "t.info",
                  "--outfile", cert, NULL);
}

/* A CA, the server's certificate and the client's in @dir (qemu-nbd's
 * layout, plus client-*.pem), and the client's credentials. */
static void fuzz_make_x509(const char *dir)
{
    g_autofree char *t = g_build_filename(dir, "t.info", NULL);
    g_autofree char *ca = g_build_filename(dir, "ca-cert.pem", NULL);
    g_autofree char *cert = g_build_filename(dir, "client-cert.pem", NULL);
    g_autofree char *key = g_build_filename(dir, "client-key.pem", NULL);

    g_assert(g_mkdir_with_parents(dir, 0700) == 0);
    g_assert(g_file_set_contents(t, "cn = fuzz CA\nca\ncert_signing_key\n",
                                 -1, NULL));
    fuzz_certtool(dir, "--generate-privkey", "--key-type=ecdsa",
                  "--outfile", "ca-key.pem", NULL);
    fuzz_certtool(dir, "--generate-self-signed", "--load-privkey",
                  "ca-key.pem", "--template", "t.info", "--outfile",
                  "ca-cert.pem", NULL);
    fuzz_cert(dir, "server", "cn = fuzz server\ntls_www_server\n"
              "encryption_key\nsigning_key\n");
    fuzz_cert(dir, "client", "cn = fuzz client\norganization = qemu-mirror\n"
              "tls_www_client\nencryption_key\nsigning_key\n");
    g_assert(gnutls_certificate_allocate_credentials(&fuzz_x509) == 0);
    g_assert(gnutls_certificate_set_x509_trust_file(fuzz_x509, ca,
                                                    GNUTLS_X509_FMT_PEM) == 1);
    g_assert(gnutls_certificate_set_x509_key_file(fuzz_x509, cert, key,
                                                  GNUTLS_X509_FMT_PEM) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = g_getenv("FUZZ_TMPDIR") ? g_getenv("FUZZ_TMPDIR") :
                       g_file_test("/dev/shm", G_FILE_TEST_IS_DIR) ?
                       "/dev/shm" : g_get_tmp_dir();
    g_autofree char *tmpl = g_build_filename(base, "fuzz-nbd-XXXXXX", NULL);
    g_autofree char *psk = NULL;
    g_autofree char *x509 = NULL;
    gnutls_datum_t key = {
        .data = (unsigned char *)FUZZ_PSK_HEX,
        .size = strlen(FUZZ_PSK_HEX),
    };

    /* GnuTLS's client sends without MSG_NOSIGNAL: a server that hung up
     * must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    /* As in fuzz-qcow2.c: no thread churn for LeakSanitizer to see. */
    g_setenv("G_SLICE", "always-malloc", TRUE);
    g_thread_pool_set_max_unused_threads(-1);
    g_thread_pool_set_max_idle_time(0);

    fuzz_dir = g_mkdtemp(g_steal_pointer(&tmpl));
    g_assert(fuzz_dir);
    psk = g_build_filename(fuzz_dir, "psk", NULL);
    g_assert(g_file_set_contents(psk, FUZZ_PSK_USER ":" FUZZ_PSK_HEX "\n",
                                 -1, NULL));
    g_assert(gnutls_psk_allocate_client_credentials(&fuzz_psk) == 0);
    g_assert(gnutls_psk_set_client_credentials(fuzz_psk, FUZZ_PSK_USER,
                                               &key,
                                               GNUTLS_PSK_KEY_HEX) == 0);
    g_assert(gnutls_priority_init(&fuzz_prio, FUZZ_TLS_PRIORITY,
                                  NULL) == 0);
    g_assert(gnutls_priority_init(&fuzz_prio_x509, FUZZ_TLS_PRIORITY_X509,
                                  NULL) == 0);
    x509 = g_build_filename(fuzz_dir, "x509", NULL);
    fuzz_make_x509(x509);
    for (int i = 0; i < 2; i++) {
        fuzz_bs[i] = test_open(FUZZ_EXPORT_SPEC, NULL,
                               i ? 0 : BDRV_O_RDWR);
        for (int t = 0; t < FUZZ_TLS_MODES; t++) {
            g_autofree char *addr = g_strdup_printf("unix:%s/nbd%d-%d.sock",
                                                    fuzz_dir, i, t);
            g_autoptr(GError) err = NULL;

            /* Named, so that the name checks matter; "" selects it too. */
            fuzz_srv[i][t] = nbdsrv_new(fuzz_bs[i], addr, "exp", i == 1,
                                        &err);
            g_assert_no_error(err);
            if (t) {
                fuzz_set_tls(fuzz_srv[i][t], psk, x509, t);
            }
        }
    }
    atexit(fuzz_cleanup);
    return 0;
}

/* The client's end of one connection. */
typedef struct FuzzClient {
    NbdServer *srv;
    int fd;
    bool x509;                  /* the server has certificates, not a PSK */
    gnutls_session_t tls;       /* NULL: plaintext */
    bool tls_dead;              /* no TLS (any more): reads go straight to
                                 * the socket; with @tls, what is left of
                                 * the input is dropped */
    size_t split;
    size_t pending;             /* a TLS send to repeat (EAGAIN) */
} FuzzClient;

/* Read and drop whatever the server sent. */
static void fuzz_drain(FuzzClient *fc)
{
    uint8_t buf[64 * 1024];

    if (fc->tls && !fc->tls_dead) {
        ssize_t n;

        while ((n = gnutls_record_recv(fc->tls, buf, sizeof(buf))) > 0 ||
               (n < 0 && n != GNUTLS_E_AGAIN &&
                !gnutls_error_is_fatal(n))) {
            /* a client that reads everything */
        }
        if (n != GNUTLS_E_AGAIN) {
            fc->tls_dead = true;
        }
        return;
    }
    while (recv(fc->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        /* a client that reads everything */
    }
}

/* Send at most fc->split bytes of @data; the bytes taken (0: none now). */
static size_t fuzz_send(FuzzClient *fc, const uint8_t *data, size_t len)
{
    ssize_t n;

    if (fc->tls && fc->tls_dead) {
        return len;             /* the session is over: drop the rest */
    }
    len = MIN(len, fc->split);
    if (fc->tls) {
        n = gnutls_record_send(fc->tls, fc->pending ? NULL : data,
                               fc->pending ? 0 : len);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
            fc->pending = fc->pending ? fc->pending : len;
            return 0;
        }
        if (n < 0) {
            fc->tls_dead = true;
            return len;
        }
        n = fc->pending ? fc->pending : n;
        fc->pending = 0;
        return n;
    }
    n = send(fc->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
        return n;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return len;             /* the server hung up */
    }
    return 0;
}

/* One round: read what the server sent, run the main loop once.  False
 * when the server is done with the connection. */
static bool fuzz_pump(FuzzClient *fc)
{
    fuzz_drain(fc);
    g_main_context_iteration(NULL, FALSE);
    return !nbdsrv_is_drained(fc->srv);
}

/* Write @size bytes of @data, @fc->split at a time, pumping between
 * writes.  False when the server ended the connection. */
static bool fuzz_write(FuzzClient *fc, const uint8_t *data, size_t size,
                       int *iter)
{
    size_t off = 0;

    while (off < size && *iter < FUZZ_MAX_ITERATIONS) {
        off += fuzz_send(fc, data + off, size - off);
        ++*iter;
        if (!fuzz_pump(fc)) {
            return false;
        }
    }
    return true;
}

/* Where the first NBD_OPT_STARTTLS header without data ends in @data, or
 * 0. */
static size_t fuzz_starttls_end(const uint8_t *data, size_t size)
{
    uint8_t hdr[16];

    nbdsrv_put64(hdr, NBD_MAGIC_OPTS);
    nbdsrv_put32(hdr + 8, NBD_OPT_STARTTLS);
    nbdsrv_put32(hdr + 12, 0);
    for (size_t i = 0; i + sizeof(hdr) <= size; i++) {
        if (!memcmp(data + i, hdr, sizeof(hdr))) {
            return i + sizeof(hdr);
        }
    }
    return 0;
}

/*
 * The client side of a TLS handshake with the server on @fc->fd.  The
 * plaintext replies (the STARTTLS one last) were all read first: the
 * server sends nothing more before the client hello.  False when it
 * failed, and the rest goes in plaintext.
 */
static bool fuzz_tls_handshake(FuzzClient *fc, int *iter)
{
    int idle = 0;
    int rc;

    do {
        fuzz_drain(fc);
    } while (g_main_context_iteration(NULL, FALSE) &&
             ++*iter < FUZZ_MAX_ITERATIONS);
    if (nbdsrv_is_drained(fc->srv)) {
        return false;
    }
    g_assert(gnutls_init(&fc->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK) == 0);
    if (fc->x509) {
        /* The server's certificate is not checked: it is ours. */
        g_assert(gnutls_priority_set(fc->tls, fuzz_prio_x509) == 0);
        g_assert(gnutls_credentials_set(fc->tls, GNUTLS_CRD_CERTIFICATE,
                                        fuzz_x509) == 0);
    } else {
        g_assert(gnutls_priority_set(fc->tls, fuzz_prio) == 0);
        g_assert(gnutls_credentials_set(fc->tls, GNUTLS_CRD_PSK,
                                        fuzz_psk) == 0);
    }
    gnutls_transport_set_int(fc->tls, fc->fd);
    for (; *iter < FUZZ_MAX_ITERATIONS; ++*iter) {
        rc = gnutls_handshake(fc->tls);
        if (rc == 0) {
            return true;
        }
        if (rc != GNUTLS_E_AGAIN && rc != GNUTLS_E_INTERRUPTED &&
            gnutls_error_is_fatal(rc)) {
            break;
        }
        /* Nothing for the server to do: it does not take our hello as
         * one (it is skipping option data, say), and never answers. */
        idle = g_main_context_iteration(NULL, FALSE) ? 0 : idle + 1;
        if (idle > FUZZ_TLS_IDLE || nbdsrv_is_drained(fc->srv)) {
            break;
        }
    }
    g_clear_pointer(&fc->tls, gnutls_deinit);
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzClient fc = { 0 };
    size_t plain;
    int tls_mode;
    int fds[2];
    int iter = 0;

    if (size < FUZZ_HEADER_SIZE) {
        return -1;
    }
    tls_mode = (data[0] >> FUZZ_F_TLS_SHIFT) & FUZZ_F_TLS_MASK;
    fc.srv = fuzz_srv[data[0] & FUZZ_F_READ_ONLY][tls_mode];
    fc.x509 = tls_mode == FUZZ_TLS_X509;
    fc.split = data[1] ? data[1] : SIZE_MAX;
    plain = (data[0] & FUZZ_F_TLS_CLIENT) && tls_mode ?
            fuzz_starttls_end(data + FUZZ_HEADER_SIZE,
                              size - FUZZ_HEADER_SIZE) : 0;
    data += FUZZ_HEADER_SIZE;
    size -= FUZZ_HEADER_SIZE;
    if (!plain) {
        plain = size;
    }
    g_assert(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        0, fds) == 0);
    fc.fd = fds[1];
    nbdsrv_client_new(fc.srv, fds[0]);  /* the server owns fds[0] now */

    if (fuzz_write(&fc, data, plain, &iter) && plain < size) {
        if (!fuzz_tls_handshake(&fc, &iter)) {
            fc.tls_dead = true;
        }
        fuzz_write(&fc, data + plain, size - plain, &iter);
    }
    if (fc.tls && !fc.tls_dead) {
        gnutls_bye(fc.tls, GNUTLS_SHUT_WR);     /* best effort */
    }
    shutdown(fds[1], SHUT_WR);
    fc.tls_dead = true;
    while (iter++ < FUZZ_MAX_ITERATIONS && fuzz_pump(&fc)) {
        /* until the server closed and every request completed */
    }
    /* End of input always ends the connection: not ending is a hang. */
    g_assert(nbdsrv_is_drained(fc.srv));
    g_assert(nbdsrv_get_held_bytes(fc.srv) == 0);
    g_clear_pointer(&fc.tls, gnutls_deinit);
    close(fds[1]);
    return 0;
}
