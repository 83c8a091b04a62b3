/*
 * NBD URIs: parse and validate nbd://, nbds://, nbd+unix:// and
 * nbds+unix:// specs (RFC 3986 syntax, NBD doc/uri.md semantics) without
 * touching the network or the file system.  Every error is one line that
 * names the problem.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd.h"
#include "util/cutils.h"

#include <string.h>
#include <sys/un.h>

#define NBDBLK_DEFAULT_PORT  "10809"

/* Parameters we understand; anything else is refused (doc/uri.md). */
static const char *const nbdblk_known_params[] = {
    "socket", "tls-certificates", "tls-psk-file", "tls-username",
    "tls-verify-peer", "reconnect-delay", NULL,
};

/* Parameters whose value is not shown in messages. */
static const char *const nbdblk_secret_params[] = {
    "tls-username", NULL,
};

static void nbdblk_uri_error(GError **errp, const char *spec,
                             const char *fmt, ...) G_GNUC_PRINTF(3, 4);

static void nbdblk_uri_error(GError **errp, const char *spec,
                             const char *fmt, ...)
{
    g_autofree char *shown = nbdblk_uri_redact(spec);
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s", shown,
                msg);
}

void nbdblk_uri_free(NbdBlkUri *uri)
{
    if (!uri) {
        return;
    }
    g_free(uri->host);
    g_free(uri->port);
    g_free(uri->socket);
    g_free(uri->export_name);
    g_free(uri->tls_certificates);
    g_free(uri->tls_psk_file);
    g_free(uri->tls_username);
    g_free(uri);
}

/* Length of the scheme of @spec ("nbd+unix"), 0 when it has none. */
static size_t nbdblk_scheme_len(const char *spec)
{
    size_t i = 0;

    if (!g_ascii_isalpha(spec[0])) {
        return 0;
    }
    while (g_ascii_isalnum(spec[i]) || spec[i] == '+' || spec[i] == '-' ||
           spec[i] == '.') {
        i++;
    }
    return spec[i] == ':' ? i : 0;
}

bool nbdblk_spec_is_uri(const char *spec)
{
    size_t n = nbdblk_scheme_len(spec);

    if (n == 0) {
        return false;
    }
    return !g_ascii_strncasecmp(spec, "nbd", 3) ||
           g_str_has_prefix(spec + n + 1, "//");
}

char *nbdblk_uri_redact(const char *spec)
{
    GString *out = g_string_new(NULL);
    const char *p = spec;
    const char *auth = strstr(spec, "://");

    /* User info: "scheme://USER@host" */
    if (auth) {
        const char *start = auth + 3;
        size_t alen = strcspn(start, "/?#");
        const char *at = memchr(start, '@', alen);

        if (at) {
            g_string_append_len(out, spec, start - spec);
            g_string_append(out, "xxx");
            p = at;
        }
    }
    while (*p) {
        bool secret = false;

        g_string_append_c(out, *p);
        if (*p != '?' && *p != '&') {
            p++;
            continue;
        }
        p++;
        for (int i = 0; nbdblk_secret_params[i]; i++) {
            size_t klen = strlen(nbdblk_secret_params[i]);

            if (!strncmp(p, nbdblk_secret_params[i], klen) &&
                p[klen] == '=') {
                g_string_append_len(out, p, klen + 1);
                g_string_append(out, "xxx");
                p += klen + 1;
                secret = true;
            }
        }
        if (secret) {
            p += strcspn(p, "&#");
        }
    }
    return g_string_free(out, FALSE);
}

/* RFC 3986 unreserved and sub-delims, plus ':' and '@' (a "pchar"). */
static bool nbdblk_is_pchar(char c)
{
    return g_ascii_isalnum(c) || strchr("-._~!$&'()*+,;=:@", c);
}

static bool nbdblk_hexval(char c, int *v)
{
    if (!g_ascii_isxdigit(c)) {
        return false;
    }
    *v = g_ascii_xdigit_value(c);
    return true;
}

/*
 * Check the raw characters of [@s, @s + @len) (pchars, '%' escapes and
 * the characters in @extra) and percent-decode them into a new GString,
 * which may contain NUL bytes.  @what names the component in errors.
 */
static GString *nbdblk_decode(const char *spec, const char *s, size_t len,
                              const char *extra, const char *what,
                              GError **errp)
{
    g_autoptr(GString) out = g_string_sized_new(len);

    for (size_t i = 0; i < len; i++) {
        int hi, lo;

        if (s[i] == '%') {
            if (len - i < 3 || !nbdblk_hexval(s[i + 1], &hi) ||
                !nbdblk_hexval(s[i + 2], &lo)) {
                nbdblk_uri_error(errp, spec,
                                 "bad percent-encoding '%.*s' in %s",
                                 (int)MIN(3, len - i), s + i, what);
                return NULL;
            }
            g_string_append_c(out, (char)(hi << 4 | lo));
            i += 2;
        } else if (nbdblk_is_pchar(s[i]) || strchr(extra, s[i])) {
            g_string_append_c(out, s[i]);
        } else if (g_ascii_isprint(s[i])) {
            nbdblk_uri_error(errp, spec,
                             "invalid character '%c' in %s (percent-encode "
                             "it)", s[i], what);
            return NULL;
        } else {
            nbdblk_uri_error(errp, spec,
                             "invalid byte 0x%02x in %s (percent-encode it)",
                             (unsigned char)s[i], what);
            return NULL;
        }
    }
    return g_steal_pointer(&out);
}

/* Check a scheme and fill transport and tls. */
static bool nbdblk_parse_scheme(const char *spec, NbdBlkUri *uri,
                                GError **errp)
{
    size_t n = nbdblk_scheme_len(spec);
    g_autofree char *scheme = NULL;

    if (n == 0) {
        nbdblk_uri_error(errp, spec, "not a URI (expected nbd://, nbds://, "
                         "nbd+unix:// or nbds+unix://)");
        return false;
    }
    scheme = g_ascii_strdown(spec, n);
    if (!strcmp(scheme, "nbd") || !strcmp(scheme, "nbds")) {
        uri->transport = NBDBLK_TRANSPORT_TCP;
    } else if (!strcmp(scheme, "nbd+unix") || !strcmp(scheme, "nbds+unix")) {
        uri->transport = NBDBLK_TRANSPORT_UNIX;
    } else if (!strcmp(scheme, "nbd+vsock") ||
               !strcmp(scheme, "nbds+vsock")) {
        nbdblk_uri_error(errp, spec, "the vsock transport ('%s') is not "
                         "supported", scheme);
        return false;
    } else {
        nbdblk_uri_error(errp, spec, "unsupported URI scheme '%s' (expected "
                         "nbd, nbds, nbd+unix or nbds+unix)", scheme);
        return false;
    }
    uri->tls = g_str_has_prefix(scheme, "nbds");
    if (!g_str_has_prefix(spec + n + 1, "//")) {
        nbdblk_uri_error(errp, spec, "expected '//' after '%s:'", scheme);
        return false;
    }
    return true;
}

/* "host", "host:port", "[v6]" or "[v6]:port"; empty for UNIX. */
static bool nbdblk_parse_authority(const char *spec, const char *a,
                                   size_t len, NbdBlkUri *uri,
                                   GError **errp)
{
    const char *end = a + len;
    const char *host_end, *port = NULL;
    size_t port_len = 0;
    int port_num = 0;

    if (memchr(a, '@', len)) {
        nbdblk_uri_error(errp, spec, "user information before '@' is not "
                         "supported (use tls-username=)");
        return false;
    }
    if (uri->transport == NBDBLK_TRANSPORT_UNIX) {
        if (len) {
            nbdblk_uri_error(errp, spec, "a host must not be given with a "
                             "UNIX socket URI (use nbd+unix:///EXPORT?"
                             "socket=PATH)");
            return false;
        }
        return true;
    }
    if (len == 0) {
        nbdblk_uri_error(errp, spec, "missing host");
        return false;
    }
    if (a[0] == '[') {
        host_end = memchr(a, ']', len);
        if (!host_end) {
            nbdblk_uri_error(errp, spec, "unterminated '[' in the host");
            return false;
        }
        for (const char *c = a + 1; c < host_end; c++) {
            if (!g_ascii_isxdigit(*c) && *c != ':' && *c != '.') {
                nbdblk_uri_error(errp, spec, "invalid character '%c' in "
                                 "the IPv6 address", *c);
                return false;
            }
        }
        if (host_end == a + 1) {
            nbdblk_uri_error(errp, spec, "empty IPv6 address");
            return false;
        }
        uri->host = g_strndup(a + 1, host_end - a - 1);
        host_end++;
        if (host_end < end && *host_end != ':') {
            nbdblk_uri_error(errp, spec, "unexpected '%c' after the IPv6 "
                             "address", *host_end);
            return false;
        }
    } else {
        host_end = memchr(a, ':', len);
        host_end = host_end ? host_end : end;
        for (const char *c = a; c < host_end; c++) {
            if (!g_ascii_isalnum(*c) && !strchr("-._~", *c)) {
                nbdblk_uri_error(errp, spec, "invalid character '%c' in the "
                                 "host", *c);
                return false;
            }
        }
        if (host_end == a) {
            nbdblk_uri_error(errp, spec, "missing host");
            return false;
        }
        uri->host = g_strndup(a, host_end - a);
    }
    if (host_end < end) {
        port = host_end + 1;
        port_len = end - port;
        if (memchr(port, ':', port_len)) {
            nbdblk_uri_error(errp, spec, "more than one ':' in the host "
                             "(IPv6 addresses go in brackets: "
                             "nbd://[::1]/)");
            return false;
        }
    }
    if (!port) {
        uri->port = g_strdup(NBDBLK_DEFAULT_PORT);
        return true;
    }
    if (port_len == 0) {
        nbdblk_uri_error(errp, spec, "missing port after ':'");
        return false;
    }
    for (size_t i = 0; i < port_len; i++) {
        if (!g_ascii_isdigit(port[i]) || port_len > 5) {
            nbdblk_uri_error(errp, spec, "bad port '%.*s': expected a "
                             "number between 1 and 65535", (int)port_len,
                             port);
            return false;
        }
        port_num = port_num * 10 + (port[i] - '0');
    }
    if (port_num < 1 || port_num > 65535) {
        nbdblk_uri_error(errp, spec, "bad port '%.*s': expected a number "
                         "between 1 and 65535", (int)port_len, port);
        return false;
    }
    uri->port = g_strdup_printf("%d", port_num);
    return true;
}

/* The export name: the path minus its leading '/', percent-decoded. */
static bool nbdblk_parse_path(const char *spec, const char *p, size_t len,
                              NbdBlkUri *uri, GError **errp)
{
    g_autoptr(GString) name = NULL;

    if (len == 0) {
        uri->export_name = g_strdup("");
        return true;
    }
    g_assert(p[0] == '/');
    name = nbdblk_decode(spec, p + 1, len - 1, "/", "the export name", errp);
    if (!name) {
        return false;
    }
    if (memchr(name->str, '\0', name->len)) {
        nbdblk_uri_error(errp, spec, "the export name contains a NUL byte "
                         "(%%00)");
        return false;
    }
    if (name->len > NBDBLK_MAX_EXPORT_NAME) {
        nbdblk_uri_error(errp, spec, "the export name is %zu bytes long "
                         "(at most %d)", name->len, NBDBLK_MAX_EXPORT_NAME);
        return false;
    }
    if (!g_utf8_validate(name->str, name->len, NULL)) {
        nbdblk_uri_error(errp, spec, "the export name is not valid UTF-8");
        return false;
    }
    uri->export_name = g_string_free(g_steal_pointer(&name), FALSE);
    return true;
}

/* Store one decoded query parameter into @uri. */
static bool nbdblk_set_param(const char *spec, const char *key,
                             GString *value, NbdBlkUri *uri, GError **errp)
{
    bool is_socket = !strcmp(key, "socket");

    if (memchr(value->str, '\0', value->len)) {
        nbdblk_uri_error(errp, spec, "%s= contains a NUL byte (%%00)%s", key,
                         is_socket ? ": abstract sockets are not supported"
                                   : "");
        return false;
    }
    if (value->len == 0) {
        nbdblk_uri_error(errp, spec, "empty %s=", key);
        return false;
    }
    if (is_socket) {
        if (uri->transport != NBDBLK_TRANSPORT_UNIX) {
            nbdblk_uri_error(errp, spec, "socket= is only valid with "
                             "nbd+unix:// or nbds+unix://");
            return false;
        }
        if (value->len >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
            nbdblk_uri_error(errp, spec, "the socket path is %zu bytes long "
                             "(at most %zu)", value->len,
                             sizeof(((struct sockaddr_un *)NULL)->sun_path) -
                             1);
            return false;
        }
        uri->socket = g_strdup(value->str);
        return true;
    }
    if (!strcmp(key, "reconnect-delay")) {
        g_autoptr(GError) err = NULL;
        int64_t secs;

        if (!parse_count("reconnect-delay", value->str, 0,
                         NBDBLK_MAX_TIMEOUT, &secs, &err)) {
            nbdblk_uri_error(errp, spec, "%s", err->message);
            return false;
        }
        uri->reconnect_delay = secs;
        return true;
    }
    if (!uri->tls) {
        nbdblk_uri_error(errp, spec, "%s= needs TLS: use nbds:// or "
                         "nbds+unix://", key);
        return false;
    }
    if (!strcmp(key, "tls-certificates")) {
        uri->tls_certificates = g_strdup(value->str);
    } else if (!strcmp(key, "tls-psk-file")) {
        uri->tls_psk_file = g_strdup(value->str);
    } else if (!strcmp(key, "tls-username")) {
        uri->tls_username = g_strdup(value->str);
    } else if (!strcmp(key, "tls-verify-peer")) {
        if (!strcmp(value->str, "1") || !strcmp(value->str, "true")) {
            uri->tls_verify_peer = 1;
        } else if (!strcmp(value->str, "0") ||
                   !strcmp(value->str, "false")) {
            uri->tls_verify_peer = 0;
        } else {
            nbdblk_uri_error(errp, spec, "tls-verify-peer='%s': expected 0 "
                             "or 1", value->str);
            return false;
        }
    } else {
        g_assert_not_reached();
    }
    return true;
}

/* "key=value&key=value", each key known and given once. */
static bool nbdblk_parse_query(const char *spec, const char *q, size_t len,
                               NbdBlkUri *uri, GError **errp)
{
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal, g_free,
                                                       NULL);
    const char *end = q + len;

    while (len && q <= end) {
        const char *amp = memchr(q, '&', end - q);
        const char *pend = amp ? amp : end;
        const char *eq = memchr(q, '=', pend - q);
        g_autoptr(GString) key = NULL;
        g_autoptr(GString) value = NULL;

        if (pend == q) {
            nbdblk_uri_error(errp, spec, "empty query parameter");
            return false;
        }
        if (!eq) {
            nbdblk_uri_error(errp, spec, "query parameter '%.*s' has no "
                             "'=value'", (int)(pend - q), q);
            return false;
        }
        key = nbdblk_decode(spec, q, eq - q, "/?", "a query parameter",
                            errp);
        if (!key) {
            return false;
        }
        if (!g_strv_contains(nbdblk_known_params, key->str) ||
            memchr(key->str, '\0', key->len)) {
            nbdblk_uri_error(errp, spec, "unknown query parameter '%s' "
                             "(known: socket, tls-certificates, "
                             "tls-psk-file, tls-username, tls-verify-peer, "
                             "reconnect-delay)",
                             key->str);
            return false;
        }
        if (g_hash_table_contains(seen, key->str)) {
            nbdblk_uri_error(errp, spec, "query parameter '%s' is given "
                             "more than once", key->str);
            return false;
        }
        g_hash_table_add(seen, g_strdup(key->str));
        value = nbdblk_decode(spec, eq + 1, pend - eq - 1, "/?=",
                              key->str, errp);
        if (!value || !nbdblk_set_param(spec, key->str, value, uri, errp)) {
            return false;
        }
        q = pend + 1;
    }
    return true;
}

/* Rules that involve several parts of the URI. */
static bool nbdblk_check_combination(const char *spec, NbdBlkUri *uri,
                                     GError **errp)
{
    if (uri->transport == NBDBLK_TRANSPORT_UNIX && !uri->socket) {
        nbdblk_uri_error(errp, spec, "missing socket= (nbd+unix:// and "
                         "nbds+unix:// need ?socket=PATH)");
        return false;
    }
    if (uri->tls_certificates && uri->tls_psk_file) {
        nbdblk_uri_error(errp, spec, "tls-certificates= and tls-psk-file= "
                         "cannot be used together");
        return false;
    }
    if (uri->tls_username && !uri->tls_psk_file) {
        nbdblk_uri_error(errp, spec, "tls-username= needs tls-psk-file=");
        return false;
    }
    return true;
}

NbdBlkUri *nbdblk_uri_parse(const char *spec, GError **errp)
{
    g_autoptr(NbdBlkUri) uri = g_new0(NbdBlkUri, 1);
    const char *auth, *path, *query, *frag;

    uri->tls_verify_peer = -1;
    uri->reconnect_delay = -1;
    if (!nbdblk_parse_scheme(spec, uri, errp)) {
        return NULL;
    }
    auth = strstr(spec, "://") + 3;
    path = auth + strcspn(auth, "/?#");
    query = path + strcspn(path, "?#");
    frag = query + strcspn(query, "#");
    if (*frag) {
        nbdblk_uri_error(errp, spec, "a fragment ('#...') is not allowed");
        return NULL;
    }
    if (!nbdblk_parse_authority(spec, auth, path - auth, uri, errp) ||
        !nbdblk_parse_path(spec, path, query - path, uri, errp) ||
        !nbdblk_parse_query(spec, *query ? query + 1 : query,
                            *query ? frag - query - 1 : 0, uri, errp) ||
        !nbdblk_check_combination(spec, uri, errp)) {
        return NULL;
    }
    return g_steal_pointer(&uri);
}
