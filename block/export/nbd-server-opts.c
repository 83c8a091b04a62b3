/*
 * NBD server: the fixed newstyle handshake and option haggling.
 *
 * Every option but NBD_OPT_EXPORT_NAME gets a reply, unknown ones
 * NBD_REP_ERR_UNSUP; malformed data NBD_REP_ERR_INVALID; a wrong export
 * name NBD_REP_ERR_UNKNOWN.  Option data above 64 KiB is read and dropped,
 * then refused (NBD_REP_ERR_TOO_BIG).  Only framing errors (bad magic,
 * unknown client flags, an unservable NBD_OPT_EXPORT_NAME) end the
 * connection, as the protocol requires.  NBD_OPT_LIST lists every export
 * of the server (nbd-server-export.c); NBD_OPT_INFO, GO and EXPORT_NAME
 * pick one by name.
 *
 * TLS (doc/proto.md "TLS support"): a server without credentials is in
 * NOTLS mode and answers NBD_OPT_STARTTLS with NBD_REP_ERR_UNSUP.  With
 * credentials STARTTLS is acknowledged and the TLS handshake follows; the
 * options negotiated before it are forgotten.  In FORCEDTLS mode (--tls
 * require, the default) every other option before it but NBD_OPT_ABORT
 * gets NBD_REP_ERR_TLS_REQD, and NBD_OPT_EXPORT_NAME, which has no error
 * reply, closes the connection.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"

#include <stdarg.h>

#define NBD_META_BASE_ALLOCATION    "base:allocation"

void nbdsrv_opts_greet(NbdClient *c)
{
    uint8_t g[18];

    nbdsrv_put64(g, NBD_MAGIC_INIT);
    nbdsrv_put64(g + 8, NBD_MAGIC_OPTS);
    nbdsrv_put16(g + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    nbdsrv_client_queue(c, g, sizeof(g), NULL, 0, NULL);
}

void nbdsrv_opts_client_flags(NbdClient *c, uint32_t flags)
{
    /* Unknown flags: the server MUST drop the connection. */
    if (flags & ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        nbdsrv_client_close(c, true);
        return;
    }
    c->no_zeroes = flags & NBD_FLAG_C_NO_ZEROES;
    c->rstate = NBDR_OPT_HEADER;
}

/* Queue a reply to the current option with @len bytes of @data. */
static void nbdsrv_opt_reply(NbdClient *c, uint32_t type, const void *data,
                             size_t len)
{
    uint8_t hdr[NBD_OPT_REPLY_HEADER_SIZE];

    nbdsrv_put64(hdr, NBD_MAGIC_OPT_REPLY);
    nbdsrv_put32(hdr + 8, c->opt);
    nbdsrv_put32(hdr + 12, type);
    nbdsrv_put32(hdr + 16, len);
    nbdsrv_client_queue(c, hdr, sizeof(hdr),
                        len ? g_memdup2(data, len) : NULL, len, g_free);
}

static void nbdsrv_opt_ack(NbdClient *c)
{
    nbdsrv_opt_reply(c, NBD_REP_ACK, NULL, 0);
}

/* An error reply carrying a message for people. */
static void G_GNUC_PRINTF(3, 4)
nbdsrv_opt_error(NbdClient *c, uint32_t type, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    nbdsrv_opt_reply(c, type, msg, strlen(msg));
}

static void nbdsrv_enter_transmission(NbdClient *c, NbdExport *exp,
                                      bool check_align)
{
    c->exp = exp;
    nbdsrv_export_ref(exp);
    exp->clients++;
    c->transmission = true;
    c->check_align = check_align;
    c->rstate = NBDR_REQ_HEADER;
}

static void nbdsrv_opt_export_name(NbdClient *c, const uint8_t *name,
                                   uint32_t len)
{
    NbdExport *exp = nbdsrv_export_lookup(c->srv, name, len);
    uint8_t *d;

    if (!exp) {
        /* This option cannot fail politely: end the session. */
        nbdsrv_client_close(c, false);
        return;
    }
    d = g_malloc0(8 + 2 + 124);
    nbdsrv_put64(d, exp->size);
    nbdsrv_put16(d + 8, nbdsrv_cmd_transmission_flags(c, exp));
    nbdsrv_client_queue(c, NULL, 0, d, c->no_zeroes ? 10 : 8 + 2 + 124,
                        g_free);
    nbdsrv_enter_transmission(c, exp, false);
}

/* One NBD_REP_SERVER per export, as QEMU: the name, then the description
 * if it has one. */
static void nbdsrv_opt_list(NbdClient *c, uint32_t len)
{
    if (len) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                         "NBD_OPT_LIST takes no data");
        return;
    }
    for (GList *l = c->srv->exports.head; l; l = l->next) {
        NbdExport *exp = l->data;
        size_t n = strlen(exp->name);
        size_t dn = exp->description ? strlen(exp->description) : 0;
        g_autofree uint8_t *d = g_malloc(4 + n + dn);

        nbdsrv_put32(d, n);
        memcpy(d + 4, exp->name, n);
        if (dn) {
            memcpy(d + 4 + n, exp->description, dn);
        }
        nbdsrv_opt_reply(c, NBD_REP_SERVER, d, 4 + n + dn);
    }
    nbdsrv_opt_ack(c);
}

/* An NBD_REP_INFO of @type with @len bytes of payload @p. */
static void nbdsrv_info_reply(NbdClient *c, uint16_t type, const void *p,
                              size_t len)
{
    g_autofree uint8_t *d = g_malloc(2 + len);

    nbdsrv_put16(d, type);
    if (len) {
        memcpy(d + 2, p, len);
    }
    nbdsrv_opt_reply(c, NBD_REP_INFO, d, 2 + len);
}

/* NBD_OPT_INFO and NBD_OPT_GO share their format. */
static void nbdsrv_opt_info(NbdClient *c, const uint8_t *d, uint32_t len,
                            bool go)
{
    bool want_name = false, want_desc = false, want_bs = false;
    uint8_t export[10], bs[12];
    NbdExport *exp;
    uint32_t namelen;
    uint16_t n;

    if (len < 6 || (namelen = nbdsrv_get32(d)) > len - 6) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID, "malformed %s request",
                         go ? "NBD_OPT_GO" : "NBD_OPT_INFO");
        return;
    }
    n = nbdsrv_get16(d + 4 + namelen);
    if (len != 4 + namelen + 2 + 2 * (uint32_t)n) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                         "information request list does not match the "
                         "option length");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        switch (nbdsrv_get16(d + 6 + namelen + 2 * i)) {
        case NBD_INFO_NAME:
            want_name = true;
            break;
        case NBD_INFO_DESCRIPTION:
            want_desc = true;
            break;
        case NBD_INFO_BLOCK_SIZE:
            want_bs = true;
            break;
        default:
            break;      /* MUST be ignored */
        }
    }
    exp = nbdsrv_export_lookup(c->srv, d + 4, namelen);
    if (!exp) {
        nbdsrv_opt_error(c, NBD_REP_ERR_UNKNOWN, "no such export");
        return;
    }

    nbdsrv_put64(export, exp->size);
    nbdsrv_put16(export + 8, nbdsrv_cmd_transmission_flags(c, exp));
    nbdsrv_info_reply(c, NBD_INFO_EXPORT, export, sizeof(export));
    if (want_name) {
        nbdsrv_info_reply(c, NBD_INFO_NAME, exp->name, strlen(exp->name));
    }
    if (want_desc && exp->description) {
        nbdsrv_info_reply(c, NBD_INFO_DESCRIPTION, exp->description,
                          strlen(exp->description));
    }
    nbdsrv_put32(bs, exp->min_block);
    nbdsrv_put32(bs + 4, exp->pref_block);
    nbdsrv_put32(bs + 8, exp->max_block);
    nbdsrv_info_reply(c, NBD_INFO_BLOCK_SIZE, bs, sizeof(bs));
    nbdsrv_opt_ack(c);
    if (go) {
        /* A client that asked for block sizes must honour them. */
        nbdsrv_enter_transmission(c, exp, want_bs && exp->min_block > 1);
    }
}

/*
 * Parse the data of NBD_OPT_LIST_META_CONTEXT (@set false) or
 * NBD_OPT_SET_META_CONTEXT: export name, then counted queries.  We know
 * base:allocation only; *@want tells whether the queries select it.
 * Returns false when the data is malformed.
 */
static bool nbdsrv_meta_parse(const uint8_t *d, uint32_t len, bool set,
                              uint32_t *namelen, bool *want)
{
    uint32_t nq, pos;

    *want = false;
    if (len < 8 || (*namelen = nbdsrv_get32(d)) > len - 8) {
        return false;
    }
    nq = nbdsrv_get32(d + 4 + *namelen);
    pos = 8 + *namelen;
    for (uint32_t i = 0; i < nq; i++) {
        const uint8_t *q;
        uint32_t qlen;

        if (len - pos < 4) {
            return false;
        }
        qlen = nbdsrv_get32(d + pos);
        pos += 4;
        if (qlen > len - pos || qlen > NBD_MAX_STRING) {
            return false;
        }
        q = d + pos;
        pos += qlen;
        if (!memchr(q, ':', qlen)) {
            return false;       /* a query starts with "namespace:" */
        }
        if (qlen == strlen(NBD_META_BASE_ALLOCATION) &&
            !memcmp(q, NBD_META_BASE_ALLOCATION, qlen)) {
            *want = true;
        } else if (!set && qlen == 5 && !memcmp(q, "base:", 5)) {
            *want = true;       /* the wildcard lists the namespace */
        }
        /* Unknown namespaces and leaf names are ignored. */
    }
    if (!set && nq == 0) {
        *want = true;           /* no query: list everything */
    }
    return pos == len;
}

static void nbdsrv_opt_meta(NbdClient *c, const uint8_t *d, uint32_t len,
                            bool set)
{
    static const char ctx[] = NBD_META_BASE_ALLOCATION;
    uint8_t reply[4 + sizeof(ctx) - 1];
    uint32_t namelen;
    bool want;

    if (set) {
        c->meta_base_alloc = false;     /* replaced even on failure */
    }
    if (!c->structured) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                         "negotiate structured replies first");
        return;
    }
    if (!nbdsrv_meta_parse(d, len, set, &namelen, &want)) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                         "malformed meta context request");
        return;
    }
    if (!nbdsrv_export_lookup(c->srv, d + 4, namelen)) {
        nbdsrv_opt_error(c, NBD_REP_ERR_UNKNOWN, "no such export");
        return;
    }
    if (want) {
        nbdsrv_put32(reply, set ? NBDSRV_META_BASE_ALLOCATION : 0);
        memcpy(reply + 4, ctx, sizeof(ctx) - 1);
        nbdsrv_opt_reply(c, NBD_REP_META_CONTEXT, reply, sizeof(reply));
    }
    if (set) {
        c->meta_base_alloc = want;
    }
    nbdsrv_opt_ack(c);
}

/*
 * NBD_OPT_STARTTLS.  Plaintext the client sent after it, before our reply,
 * would be taken as if it came through TLS (the STARTTLS command injection
 * of CVE-2011-0411 and its kind): it ends the connection.
 */
static void nbdsrv_opt_starttls(NbdClient *c, uint32_t len)
{
    if (!c->srv->tls) {
        nbdsrv_opt_error(c, NBD_REP_ERR_UNSUP, "TLS is not supported");
        return;
    }
    if (c->tls) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID, "TLS is already in use");
        return;
    }
    if (len) {
        nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                         "NBD_OPT_STARTTLS takes no data");
        return;
    }
    if (c->rpos != c->rlen) {
        nbdsrv_client_close(c, true);
        return;
    }
    nbdsrv_opt_ack(c);
    if (!nbdsrv_tls_start(c)) {
        nbdsrv_client_close(c, false);
        return;
    }
    /* Nothing negotiated in plaintext carries over. */
    c->structured = false;
    c->meta_base_alloc = false;
    c->rstate = NBDR_TLS_HANDSHAKE;
}

/* FORCEDTLS before STARTTLS: refuse @c's option (true) unless it is
 * STARTTLS or ABORT. */
static bool nbdsrv_opt_tls_required(NbdClient *c)
{
    NbdServer *srv = c->srv;

    if (!srv->tls || !nbdsrv_tls_creds_required(srv->tls) || c->tls ||
        c->opt == NBD_OPT_STARTTLS || c->opt == NBD_OPT_ABORT) {
        return false;
    }
    srv->stats.tls_required++;
    if (c->opt == NBD_OPT_EXPORT_NAME) {
        /* It cannot be refused: end the session. */
        nbdsrv_client_close(c, false);
    } else {
        nbdsrv_opt_error(c, NBD_REP_ERR_TLS_REQD,
                         "TLS is required: send NBD_OPT_STARTTLS first");
    }
    return true;
}

static bool nbdsrv_opt_known(uint32_t opt)
{
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
    case NBD_OPT_ABORT:
    case NBD_OPT_LIST:
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
    case NBD_OPT_STRUCTURED_REPLY:
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        return true;
    default:
        return false;
    }
}

void nbdsrv_opts_header(NbdClient *c, uint64_t magic, uint32_t opt,
                        uint32_t len)
{
    if (magic != NBD_MAGIC_OPTS) {
        nbdsrv_client_close(c, true);
        return;
    }
    c->opt = opt;
    c->opt_len = len;
    c->opt_got = 0;
    if (opt == NBD_OPT_EXPORT_NAME && len > NBD_MAX_STRING) {
        /* No error reply exists for this option. */
        nbdsrv_client_close(c, true);
        return;
    }
    if (len > NBDSRV_MAX_OPTION) {
        /* Too big to buffer: drop the data, then refuse the option. */
        c->skip_left = len;
        c->skip_then = NBDSKIP_OPT_TOO_BIG;
        c->rstate = NBDR_SKIP;
        return;
    }
    c->opt_data = g_malloc(MAX(len, 1));
    c->rstate = NBDR_OPT_DATA;
    if (len == 0) {
        nbdsrv_opts_handle(c, false);
    }
}

void nbdsrv_opts_handle(NbdClient *c, bool too_big)
{
    const uint8_t *d = c->opt_data;
    uint32_t len = c->opt_len;

    c->rstate = NBDR_OPT_HEADER;    /* unless the option ends haggling */
    if (nbdsrv_opt_tls_required(c)) {
        g_clear_pointer(&c->opt_data, g_free);
        return;
    }
    if (too_big) {
        if (nbdsrv_opt_known(c->opt)) {
            nbdsrv_opt_error(c, NBD_REP_ERR_TOO_BIG,
                             "option data too long");
        } else {
            nbdsrv_opt_error(c, NBD_REP_ERR_UNSUP, "unknown option");
        }
        return;
    }
    switch (c->opt) {
    case NBD_OPT_EXPORT_NAME:
        nbdsrv_opt_export_name(c, d, len);
        break;
    case NBD_OPT_ABORT:
        nbdsrv_opt_ack(c);
        nbdsrv_client_finish(c);
        break;
    case NBD_OPT_LIST:
        nbdsrv_opt_list(c, len);
        break;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        nbdsrv_opt_info(c, d, len, c->opt == NBD_OPT_GO);
        break;
    case NBD_OPT_STRUCTURED_REPLY:
        if (len) {
            nbdsrv_opt_error(c, NBD_REP_ERR_INVALID,
                             "NBD_OPT_STRUCTURED_REPLY takes no data");
            break;
        }
        c->structured = true;
        nbdsrv_opt_ack(c);
        break;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        nbdsrv_opt_meta(c, d, len, c->opt == NBD_OPT_SET_META_CONTEXT);
        break;
    case NBD_OPT_STARTTLS:
        nbdsrv_opt_starttls(c, len);
        break;
    default:
        nbdsrv_opt_error(c, NBD_REP_ERR_UNSUP,
                         "unknown option %" G_GUINT32_FORMAT, c->opt);
        break;
    }
    g_clear_pointer(&c->opt_data, g_free);
}
