/*
 * NBD server: TLS with GnuTLS.  Credentials (X.509 in qemu-nbd's layout,
 * or nbdkit's PSK file) are loaded once, when the server is configured;
 * each connection that sends NBD_OPT_STARTTLS gets a session that runs
 * non-blocking on the connection's socket, driven by the connection's fd
 * watches (nbd-server-conn.c).
 *
 * Reading: GnuTLS pulls ciphertext from a per-session read-ahead buffer
 * filled by one recv() of up to NBDSRV_TLS_INBUF bytes, not by one recv()
 * per record header and body; what that buffer and GnuTLS hold is input
 * the fd no longer shows (nbdsrv_tls_pending()).  Writing: one record per
 * call, pushed with sendmsg(); a record the socket did not take stays
 * inside GnuTLS, encrypted, until the socket is writable again.
 *
 * Nothing here logs or returns in a message a key, a user name, a
 * distinguished name or a file's content; keys are zeroed when freed.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Ciphertext read from the socket at once (a few records). */
#define NBDSRV_TLS_INBUF            (128 * KiB)
/* Largest PSK file we read (thousands of users). */
#define NBDSRV_TLS_MAX_PSK_FILE     (1 * MiB)
/* Longest PSK we take, in bytes (psktool makes 32). */
#define NBDSRV_TLS_MAX_PSK          64

#define NBDSRV_TLS_PRIORITY_X509    "NORMAL"
#define NBDSRV_TLS_PRIORITY_PSK     "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK"
/*
 * Appended where the CPU has AES and carry-less multiply instructions:
 * AES-GCM first, chosen by our order.  GnuTLS puts ChaCha20 first when it
 * judges the CPU slow at AES, and on some virtual CPUs it judges so while
 * its AES-GCM runs ten times faster than ChaCha20 there: a TLS copy then
 * costs several times the plain one.
 */
#define NBDSRV_TLS_PRIORITY_AES     \
    ":-CHACHA20-POLY1305:+CHACHA20-POLY1305:%SERVER_PRECEDENCE"

typedef struct NbdPskUser {
    char *name;
    uint8_t *key;
    size_t key_len;
} NbdPskUser;

struct NbdTlsCreds {
    bool psk;
    bool verify_peer;
    bool require;
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk_cred;
    gnutls_priority_t priority;
    GPtrArray *users;           /* NbdPskUser */
    GPtrArray *authz;           /* char *: DNs or user names; NULL: any */
};

struct NbdTlsSession {
    gnutls_session_t session;
    NbdClient *client;
    int fd;
    uint8_t *inbuf;             /* NBDSRV_TLS_INBUF */
    size_t inpos, inlen;        /* undelivered ciphertext [inpos, inlen) */
    size_t send_held;           /* bytes of a record GnuTLS holds (0:
                                 * none) */
};

/* ---- credentials ---- */

static void nbdsrv_psk_user_free(gpointer p)
{
    NbdPskUser *u = p;

    explicit_bzero(u->key, u->key_len);
    g_free(u->key);
    explicit_bzero(u->name, strlen(u->name));
    g_free(u->name);
    g_free(u);
}

static void nbdsrv_authz_free(gpointer p)
{
    char *name = p;

    explicit_bzero(name, strlen(name));
    g_free(name);
}

void nbdsrv_tls_creds_free(NbdTlsCreds *creds)
{
    if (!creds) {
        return;
    }
    if (creds->x509) {
        gnutls_certificate_free_credentials(creds->x509);
    }
    if (creds->psk_cred) {
        gnutls_psk_free_server_credentials(creds->psk_cred);
    }
    if (creds->priority) {
        gnutls_priority_deinit(creds->priority);
    }
    if (creds->users) {
        g_ptr_array_unref(creds->users);
    }
    if (creds->authz) {
        g_ptr_array_unref(creds->authz);
    }
    g_free(creds);
}

bool nbdsrv_tls_creds_required(const NbdTlsCreds *creds)
{
    return creds->require;
}

/* Check that @dir/@name can be opened for reading; @optional: a missing
 * file is not an error (*@present false). */
static bool nbdsrv_tls_file(const char *dir, const char *name,
                            bool optional, char **path, bool *present,
                            GError **errp)
{
    g_autofree char *p = g_build_filename(dir, name, NULL);
    int fd = open(p, O_RDONLY | O_CLOEXEC);

    if (present) {
        *present = fd >= 0;
    }
    if (fd < 0 && !(optional && errno == ENOENT)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s: %s",
                    dir, name, g_strerror(errno));
        return false;
    }
    if (fd >= 0) {
        close(fd);
    }
    *path = g_steal_pointer(&p);
    return true;
}

/*
 * Verify the client's certificate during the handshake, so that a client
 * with a bad one gets an alert rather than a connection that closes after
 * a handshake it thought went well.
 */
static int nbdsrv_tls_verify_cb(gnutls_session_t session)
{
    unsigned status = 0;

    if (gnutls_certificate_verify_peers3(session, NULL, &status) < 0 ||
        status) {
        g_debug("nbd export: a TLS client certificate does not verify");
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    return 0;
}

/*
 * The server's own certificate must be valid now: an expired one would
 * only show as every client's handshake failing, on the clients.
 */
static bool nbdsrv_tls_check_server_cert(NbdTlsCreds *creds,
                                         const char *dir, const char *ca,
                                         GError **errp)
{
    gnutls_x509_crt_t *crts = NULL;
    gnutls_x509_trust_list_t trust = NULL;
    unsigned n = 0, status = 0;
    time_t now = time(NULL);
    const char *why = NULL;

    if (gnutls_certificate_get_x509_crt(creds->x509, 0, &crts, &n) < 0) {
        return true;        /* nothing to check */
    }
    if (n && gnutls_x509_crt_get_activation_time(crts[0]) > now) {
        why = "not valid yet";
    } else if (n && gnutls_x509_crt_get_expiration_time(crts[0]) < now) {
        why = "expired";
    } else if (n && (gnutls_x509_trust_list_init(&trust, 0) < 0 ||
                     gnutls_x509_trust_list_add_trust_file(
                         trust, ca, NULL, GNUTLS_X509_FMT_PEM, 0, 0) <= 0 ||
                     gnutls_x509_trust_list_verify_crt(trust, crts, n, 0,
                                                       &status, NULL) < 0 ||
                     status)) {
        /* As QEMU checks its pair: clients that trust this CA would
         * refuse every handshake. */
        why = "not issued by ca-cert.pem";
    }
    if (trust) {
        gnutls_x509_trust_list_deinit(trust, 1);
    }
    for (unsigned i = 0; i < n; i++) {
        gnutls_x509_crt_deinit(crts[i]);
    }
    gnutls_free(crts);
    if (why) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': server-cert.pem: the certificate is %s", dir,
                    why);
        return false;
    }
    return true;
}

static bool nbdsrv_tls_load_x509(NbdTlsCreds *creds, const char *dir,
                                 GError **errp)
{
    g_autofree char *ca = NULL, *cert = NULL, *key = NULL, *crl = NULL;
    bool has_crl;
    int rc;

    if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': not a directory", dir);
        return false;
    }
    if (!nbdsrv_tls_file(dir, "ca-cert.pem", false, &ca, NULL, errp) ||
        !nbdsrv_tls_file(dir, "server-cert.pem", false, &cert, NULL, errp) ||
        !nbdsrv_tls_file(dir, "server-key.pem", false, &key, NULL, errp) ||
        !nbdsrv_tls_file(dir, "ca-crl.pem", true, &crl, &has_crl, errp)) {
        return false;
    }
    if (gnutls_certificate_allocate_credentials(&creds->x509) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "'%s': out of memory", dir);
        return false;
    }
    rc = gnutls_certificate_set_x509_trust_file(creds->x509, ca,
                                                GNUTLS_X509_FMT_PEM);
    if (rc <= 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': ca-cert.pem: %s", dir,
                    rc < 0 ? gnutls_strerror(rc) : "no certificate in it");
        return false;
    }
    if (has_crl) {
        rc = gnutls_certificate_set_x509_crl_file(creds->x509, crl,
                                                  GNUTLS_X509_FMT_PEM);
        if (rc < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': ca-crl.pem: %s", dir, gnutls_strerror(rc));
            return false;
        }
    }
    rc = gnutls_certificate_set_x509_key_file(creds->x509, cert, key,
                                              GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': server-cert.pem and server-key.pem: %s", dir,
                    gnutls_strerror(rc));
        return false;
    }
    if (!nbdsrv_tls_check_server_cert(creds, dir, ca, errp)) {
        return false;
    }
    if (creds->verify_peer) {
        gnutls_certificate_set_verify_function(creds->x509,
                                               nbdsrv_tls_verify_cb);
    }
    return true;
}

/* Decode the hex key of one PSK line; false if it is not an even number
 * of hex digits. */
static bool nbdsrv_psk_hex(const char *hex, size_t len, uint8_t *out)
{
    if (len % 2) {
        return false;
    }
    for (size_t i = 0; i < len; i += 2) {
        int hi = g_ascii_xdigit_value(hex[i]);
        int lo = g_ascii_xdigit_value(hex[i + 1]);

        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i / 2] = hi << 4 | lo;
    }
    return true;
}

static NbdPskUser *nbdsrv_psk_find(const NbdTlsCreds *creds,
                                   const char *name)
{
    for (guint i = 0; i < creds->users->len; i++) {
        NbdPskUser *u = g_ptr_array_index(creds->users, i);

        if (!strcmp(u->name, name)) {
            return u;
        }
    }
    return NULL;
}

/* One line "username:hexkey" of @file (@lineno for messages). */
static bool nbdsrv_psk_line(NbdTlsCreds *creds, const char *file,
                            unsigned lineno, char *line, GError **errp)
{
    size_t len = strlen(line);
    const char *why = NULL;
    char *colon, *hex;
    size_t hex_len;
    NbdPskUser *u;

    if (len && line[len - 1] == '\r') {
        line[--len] = '\0';
    }
    if (!len) {
        return true;
    }
    colon = strchr(line, ':');
    hex = colon ? colon + 1 : NULL;
    hex_len = hex ? strlen(hex) : 0;
    if (!colon) {
        why = "expected username:hexkey";
    } else if (colon == line) {
        why = "the user name is empty";
    } else if (!hex_len) {
        why = "the key is empty";
    } else if (hex_len % 2) {
        why = "the key has an odd number of hex digits";
    } else if (hex_len / 2 > NBDSRV_TLS_MAX_PSK) {
        why = "the key is longer than 64 bytes";
    } else if (!g_utf8_validate(line, colon - line, NULL)) {
        why = "the user name is not UTF-8";
    }
    if (!why) {
        u = g_new0(NbdPskUser, 1);
        u->key_len = hex_len / 2;
        u->key = g_malloc(u->key_len);
        u->name = g_strndup(line, colon - line);
        if (!nbdsrv_psk_hex(hex, hex_len, u->key)) {
            why = "the key is not hexadecimal";
        } else if (nbdsrv_psk_find(creds, u->name)) {
            why = "the user name is given twice";
        }
        if (why) {
            nbdsrv_psk_user_free(u);
        } else {
            g_ptr_array_add(creds->users, u);
        }
    }
    if (why) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': line %u: %s", file, lineno, why);
        return false;
    }
    return true;
}

/* GnuTLS asks for the key of @username. */
static int nbdsrv_tls_psk_cb(gnutls_session_t session, const char *username,
                             gnutls_datum_t *key)
{
    NbdTlsSession *s = gnutls_session_get_ptr(session);
    NbdPskUser *u = nbdsrv_psk_find(s->client->srv->tls, username);

    if (!u) {
        g_debug("nbd export: a TLS client gave an unknown PSK identity");
        return -1;
    }
    key->data = gnutls_malloc(u->key_len);
    if (!key->data) {
        return -1;
    }
    memcpy(key->data, u->key, u->key_len);
    key->size = u->key_len;
    return 0;
}

/*
 * Read the PSK file @file into *@text (NUL-terminated, *@len bytes; the
 * caller zeroes and frees it): a regular file of at most
 * NBDSRV_TLS_MAX_PSK_FILE bytes.
 */
static bool nbdsrv_tls_read_psk(const char *file, char **text, size_t *len,
                                GError **errp)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    const char *why = NULL;
    struct stat st;
    size_t got = 0;
    char *buf;

    if (fd < 0) {
        why = g_strerror(errno);
    } else if (fstat(fd, &st) < 0) {
        why = g_strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if (st.st_size > NBDSRV_TLS_MAX_PSK_FILE) {
        why = "larger than 1 MiB";
    }
    if (why) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s",
                    file, why);
        if (fd >= 0) {
            close(fd);
        }
        return false;
    }
    /* What it held when opened: a file growing under us is cut there. */
    buf = g_malloc(st.st_size + 1);
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, st.st_size - got);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            why = n < 0 ? g_strerror(errno) : NULL;
            break;
        }
        got += n;
    }
    close(fd);
    if (why) {
        explicit_bzero(buf, got);
        g_free(buf);
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s",
                    file, why);
        return false;
    }
    buf[got] = '\0';
    *text = buf;
    *len = got;
    return true;
}

static bool nbdsrv_tls_load_psk(NbdTlsCreds *creds, const char *file,
                                GError **errp)
{
    char *text = NULL;
    size_t len = 0;
    bool ok = true;
    char *line, *next;
    unsigned lineno = 0;

    if (!nbdsrv_tls_read_psk(file, &text, &len, errp)) {
        return false;
    }
    creds->users = g_ptr_array_new_with_free_func(nbdsrv_psk_user_free);
    if (memchr(text, '\0', len)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': not a text file", file);
        ok = false;
    }
    for (line = text; ok && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) {
            *next++ = '\0';
        }
        ok = nbdsrv_psk_line(creds, file, ++lineno, line, errp);
    }
    explicit_bzero(text, len);
    g_free(text);
    if (ok && !creds->users->len) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': no username:hexkey line", file);
        ok = false;
    }
    if (!ok) {
        return false;
    }
    if (gnutls_psk_allocate_server_credentials(&creds->psk_cred) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "'%s': out of memory", file);
        return false;
    }
    gnutls_psk_set_server_credentials_function(creds->psk_cred,
                                               nbdsrv_tls_psk_cb);
    return true;
}

/*
 * The --tls-authz list: DNs whole, PSK user names split at commas; after
 * the PSK file was loaded, so that a name no line of it has (a typo that
 * would lock everyone out) is refused at once, by position, not echoed.
 */
static bool nbdsrv_tls_load_authz(NbdTlsCreds *creds,
                                  const NbdTlsConfig *cfg, GError **errp)
{
    if (!cfg->authz || !cfg->authz[0]) {
        return true;
    }
    if (!creds->psk && !creds->verify_peer) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "an authorization list of distinguished names needs "
                    "client certificates to be verified");
        return false;
    }
    creds->authz = g_ptr_array_new_with_free_func(nbdsrv_authz_free);
    for (const char *const *a = cfg->authz; *a; a++) {
        if (creds->psk) {
            g_auto(GStrv) names = g_strsplit(*a, ",", -1);

            for (char **n = names; *n; n++) {
                if (!**n) {
                    continue;
                }
                if (!nbdsrv_psk_find(creds, *n)) {
                    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                                "'%s': authorization list %d names a user "
                                "the file does not have", cfg->psk_file,
                                (int)(a - cfg->authz) + 1);
                    return false;
                }
                g_ptr_array_add(creds->authz, g_strdup(*n));
            }
        } else if (!strchr(*a, '=')) {
            /* Not named: it may be a user name meant for PSK. */
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "an authorization entry is not a distinguished "
                        "name (such as CN=client,O=Example)");
            return false;
        } else {
            g_ptr_array_add(creds->authz, g_strdup(*a));
        }
    }
    if (!creds->authz->len) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the authorization list names nobody");
        return false;
    }
    return true;
}

/* Whether the CPU has AES-GCM in hardware (see NBDSRV_TLS_PRIORITY_AES). */
static bool nbdsrv_tls_fast_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#else
    return false;
#endif
}

NbdTlsCreds *nbdsrv_tls_creds_new(const NbdTlsConfig *cfg, GError **errp)
{
    g_autoptr(NbdTlsCreds) creds = g_new0(NbdTlsCreds, 1);
    g_autofree char *prio = NULL;
    int rc;

    g_assert(!cfg->x509_dir != !cfg->psk_file);
    creds->psk = cfg->psk_file;
    creds->verify_peer = cfg->verify_peer && !creds->psk;
    creds->require = cfg->require;
    if (creds->psk ? !nbdsrv_tls_load_psk(creds, cfg->psk_file, errp)
                   : !nbdsrv_tls_load_x509(creds, cfg->x509_dir, errp)) {
        return NULL;
    }
    if (!nbdsrv_tls_load_authz(creds, cfg, errp)) {
        return NULL;
    }
    prio = g_strconcat(creds->psk ? NBDSRV_TLS_PRIORITY_PSK
                                  : NBDSRV_TLS_PRIORITY_X509,
                       nbdsrv_tls_fast_aes() ? NBDSRV_TLS_PRIORITY_AES : "",
                       NULL);
    rc = gnutls_priority_init(&creds->priority, prio, NULL);
    if (rc < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "TLS priority '%s': %s", prio, gnutls_strerror(rc));
        return NULL;
    }
    return g_steal_pointer(&creds);
}

/* ---- transport ---- */

static ssize_t nbdsrv_tls_pull(gnutls_transport_ptr_t opaque, void *buf,
                               size_t len)
{
    NbdTlsSession *s = opaque;
    size_t n;

    if (s->inpos == s->inlen) {
        ssize_t got;

        s->inpos = s->inlen = 0;
        do {
            got = recv(s->fd, s->inbuf, NBDSRV_TLS_INBUF, 0);
        } while (got < 0 && errno == EINTR);
        if (got < 0) {
            gnutls_transport_set_errno(s->session, errno);
            return -1;
        }
        if (got == 0) {
            return 0;
        }
        s->inlen = got;
    }
    n = MIN(len, s->inlen - s->inpos);
    memcpy(buf, s->inbuf + s->inpos, n);
    s->inpos += n;
    return n;
}

static ssize_t nbdsrv_tls_push(gnutls_transport_ptr_t opaque,
                               const giovec_t *iov, int iovcnt)
{
    NbdTlsSession *s = opaque;
    struct msghdr msg = {
        .msg_iov = (struct iovec *)iov,
        .msg_iovlen = iovcnt,
    };
    ssize_t n;

    do {
        n = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        gnutls_transport_set_errno(s->session, errno);
    }
    return n;
}

/* ---- sessions ---- */

bool nbdsrv_tls_start(NbdClient *c)
{
    NbdTlsCreds *creds = c->srv->tls;
    NbdTlsSession *s = g_new0(NbdTlsSession, 1);
    int rc;

    s->client = c;
    s->fd = c->fd;
    /*
     * No session tickets (and no session cache): a resumed session would
     * skip the client certificate's verification, and every connection
     * of a migration is long-lived anyway.
     */
    rc = gnutls_init(&s->session,
                     GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_TICKETS);
    if (rc < 0) {
        g_free(s);
        return false;
    }
    c->tls = s;
    if (creds->psk) {
        rc = gnutls_credentials_set(s->session, GNUTLS_CRD_PSK,
                                    creds->psk_cred);
    } else {
        rc = gnutls_credentials_set(s->session, GNUTLS_CRD_CERTIFICATE,
                                    creds->x509);
        gnutls_certificate_server_set_request(s->session,
                                              creds->verify_peer
                                              ? GNUTLS_CERT_REQUIRE
                                              : GNUTLS_CERT_IGNORE);
    }
    if (rc >= 0) {
        rc = gnutls_priority_set(s->session, creds->priority);
    }
    if (rc < 0) {
        nbdsrv_tls_stop(c);
        return false;
    }
    s->inbuf = g_malloc(NBDSRV_TLS_INBUF);
    gnutls_session_set_ptr(s->session, s);
    gnutls_transport_set_ptr(s->session, s);
    gnutls_transport_set_pull_function(s->session, nbdsrv_tls_pull);
    gnutls_transport_set_vec_push_function(s->session, nbdsrv_tls_push);
    /* Our handshake limit covers the TLS handshake: no timer of its own. */
    gnutls_handshake_set_timeout(s->session, 0);
    c->tls_want_write = false;
    return true;
}

void nbdsrv_tls_stop(NbdClient *c)
{
    NbdTlsSession *s = c->tls;

    if (!s) {
        return;
    }
    if (c->tls_ready) {
        /* Best effort: never waits for a full socket. */
        gnutls_bye(s->session, GNUTLS_SHUT_WR);
    }
    gnutls_deinit(s->session);
    g_free(s->inbuf);
    g_free(s);
    c->tls = NULL;
    c->tls_ready = false;
}

/* The subject DN of the client's certificate (RFC 4514), or NULL. */
static char *nbdsrv_tls_peer_dn(gnutls_session_t session)
{
    const gnutls_datum_t *certs;
    unsigned n = 0;
    gnutls_x509_crt_t crt;
    gnutls_datum_t dn = { 0 };
    char *ret = NULL;

    certs = gnutls_certificate_get_peers(session, &n);
    if (!certs || !n || gnutls_x509_crt_init(&crt) < 0) {
        return NULL;
    }
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) >= 0 &&
        gnutls_x509_crt_get_dn3(crt, &dn, 0) >= 0) {
        ret = g_strndup((const char *)dn.data, dn.size);
        gnutls_free(dn.data);
    }
    gnutls_x509_crt_deinit(crt);
    return ret;
}

/* Whether the authenticated peer of @c is on the --tls-authz list. */
static bool nbdsrv_tls_authorized(NbdClient *c)
{
    NbdTlsCreds *creds = c->srv->tls;
    g_autofree char *dn = NULL;
    const char *name;
    bool ok = false;

    if (!creds->authz) {
        return true;
    }
    if (creds->psk) {
        name = gnutls_psk_server_get_username(c->tls->session);
    } else {
        name = dn = nbdsrv_tls_peer_dn(c->tls->session);
    }
    for (guint i = 0; name && !ok && i < creds->authz->len; i++) {
        ok = !strcmp(name, g_ptr_array_index(creds->authz, i));
    }
    if (dn) {
        explicit_bzero(dn, strlen(dn));
    }
    return ok;
}

int nbdsrv_tls_handshake(NbdClient *c)
{
    NbdServer *srv = c->srv;
    int rc;

    do {
        rc = gnutls_handshake(c->tls->session);
    } while (rc < 0 && rc != GNUTLS_E_AGAIN && !gnutls_error_is_fatal(rc));
    if (rc == GNUTLS_E_AGAIN) {
        c->tls_want_write = gnutls_record_get_direction(c->tls->session);
        return 0;
    }
    if (rc < 0) {
        g_debug("nbd export: TLS handshake failed: %s", gnutls_strerror(rc));
        srv->stats.tls_failures++;
        /* Tell the client why, if the socket takes it now (best effort:
         * the connection closes either way). */
        gnutls_alert_send_appropriate(c->tls->session, rc);
        return -1;
    }
    srv->stats.tls_handshakes++;
    if (!g_log_writer_default_would_drop(G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN)) {
        char *desc = gnutls_session_get_desc(c->tls->session);

        g_debug("nbd export: TLS session %s", desc);
        gnutls_free(desc);
    }
    if (!nbdsrv_tls_authorized(c)) {
        g_debug("nbd export: a TLS client is not on the authorization "
                "list");
        srv->stats.tls_refused++;
        return -1;
    }
    c->tls_ready = true;
    return 1;
}

ssize_t nbdsrv_tls_recv(NbdClient *c, void *buf, size_t len)
{
    ssize_t n = gnutls_record_recv(c->tls->session, buf, len);

    if (n >= 0) {
        return n;
    }
    if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED ||
        !gnutls_error_is_fatal(n)) {
        /* A warning alert or a rehandshake request: nothing to deliver;
         * what follows it is still pending. */
        errno = EAGAIN;
        return -1;
    }
    if (n == GNUTLS_E_PREMATURE_TERMINATION) {
        return 0;
    }
    g_debug("nbd export: TLS receive failed: %s", gnutls_strerror(n));
    errno = EPROTO;
    return -1;
}

ssize_t nbdsrv_tls_send(NbdClient *c, const void *buf, size_t len)
{
    NbdTlsSession *s = c->tls;
    ssize_t n;

    if (s->send_held) {
        /* GnuTLS holds the encrypted record: flush it. */
        g_assert(len >= s->send_held);
        n = gnutls_record_send(s->session, NULL, 0);
    } else {
        n = gnutls_record_send(s->session, buf, MIN(len, NBDSRV_TLS_RECORD));
    }
    if (n >= 0) {
        s->send_held = 0;
        return n;
    }
    if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
        if (!s->send_held) {
            s->send_held = MIN(len, NBDSRV_TLS_RECORD);
        }
        errno = EAGAIN;
        return -1;
    }
    g_debug("nbd export: TLS send failed: %s", gnutls_strerror(n));
    errno = EPIPE;
    return -1;
}

bool nbdsrv_tls_pending(NbdClient *c)
{
    NbdTlsSession *s = c->tls;

    return s && c->tls_ready &&
           (gnutls_record_check_pending(s->session) > 0 ||
            s->inpos < s->inlen);
}
