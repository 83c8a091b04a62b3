/*
 * NBD server: listening, accepting, timeouts and the public API.  The
 * connections themselves are nbd-server-conn.c; the protocol is
 * nbd-server-opts.c (handshake) and nbd-server-cmd.c (requests).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"
#include "util/sockets.h"

#include <errno.h>
#include <glib-unix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define NBDSRV_ACCEPT_RETRY_MS      100
#define NBDSRV_ACCEPT_BATCH         64

/* ---- sources on the server's context ---- */

GSource *nbdsrv_fd_watch(NbdServer *srv, int priority, int fd,
                         GIOCondition cond, GUnixFDSourceFunc fn,
                         void *opaque)
{
    GSource *src = g_unix_fd_source_new(fd, cond);

    g_source_set_priority(src, priority);
    g_source_set_callback(src, G_SOURCE_FUNC(fn), opaque, NULL);
    g_source_attach(src, srv->ctx);
    return src;
}

GSource *nbdsrv_timer(NbdServer *srv, int priority, guint ms,
                      GSourceFunc fn, void *opaque)
{
    GSource *src = ms ? g_timeout_source_new(ms) : g_idle_source_new();

    /* Idle kicks must not starve behind busy sockets: never below
     * the default priority. */
    g_source_set_priority(src, priority);
    g_source_set_callback(src, fn, opaque, NULL);
    g_source_attach(src, srv->ctx);
    return src;
}

void nbdsrv_source_clear(GSource **src)
{
    if (*src) {
        g_source_destroy(*src);
        g_source_unref(*src);
        *src = NULL;
    }
}

/* ---- listening ---- */

static gboolean nbdsrv_accept_cb(int fd, GIOCondition cond,
                                 gpointer opaque);

/* Room for one more connection: a slot (--shared) and its guarantee
 * (requests of closed connections may still hold buffers). */
static bool nbdsrv_has_room(NbdServer *srv)
{
    return srv->live_clients < srv->max_clients &&
           srv->committed + NBDSRV_CLIENT_MIN_BYTES <= nbdsrv_budget(srv);
}

void nbdsrv_update_listen(NbdServer *srv)
{
    bool want = srv->listen_fd >= 0 && !srv->accept_retry_src &&
                nbdsrv_has_room(srv);

    if (!want && srv->listen_src && !srv->accept_retry_src) {
        srv->stats.full++;
    }
    if (want && !srv->listen_src) {
        srv->listen_src = nbdsrv_fd_watch(srv, G_PRIORITY_DEFAULT,
                                          srv->listen_fd, G_IO_IN,
                                          nbdsrv_accept_cb, srv);
    } else if (!want) {
        nbdsrv_source_clear(&srv->listen_src);
    }
}

static gboolean nbdsrv_accept_retry_cb(gpointer opaque)
{
    NbdServer *srv = opaque;

    nbdsrv_source_clear(&srv->accept_retry_src);
    nbdsrv_update_listen(srv);
    return G_SOURCE_REMOVE;
}

static gboolean nbdsrv_accept_cb(int fd, GIOCondition cond,
                                 gpointer opaque)
{
    NbdServer *srv = opaque;

    for (int i = 0; i < NBDSRV_ACCEPT_BATCH; i++) {
        int cfd;
        int one = 1;

        if (!nbdsrv_has_room(srv)) {
            /* Like qemu-nbd: the rest wait in the listen backlog until a
             * connection ends. */
            nbdsrv_update_listen(srv);
            return G_SOURCE_CONTINUE;
        }
        cfd = accept4(srv->listen_fd, NULL, NULL,
                          SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (cfd < 0 && (errno == EINTR || errno == ECONNABORTED ||
                        errno == EPROTO)) {
            continue;
        }
        if (cfd < 0 && (errno == EMFILE || errno == ENFILE ||
                        errno == ENOBUFS || errno == ENOMEM)) {
            /* Out of descriptors: retry later instead of spinning. */
            nbdsrv_source_clear(&srv->listen_src);
            srv->accept_retry_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT,
                                                 NBDSRV_ACCEPT_RETRY_MS,
                                                 nbdsrv_accept_retry_cb,
                                                 srv);
            return G_SOURCE_REMOVE;
        }
        if (cfd < 0) {
            break;
        }
        if (srv->port >= 0) {
            setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        } else {
            socket_unix_tune_sndbuf(cfd);
        }
        nbdsrv_client_new(srv, cfd);
    }
    return G_SOURCE_CONTINUE;
}

static bool nbdsrv_listen_unix(NbdServer *srv, const char *path,
                               GError **errp)
{
    g_autoptr(GError) err = NULL;

    if (!socket_unix_listen(&srv->unix_listener, NULL, path, SOMAXCONN,
                            &err)) {
        g_set_error(errp, BLOCK_ERROR,
                    err->code == CUTILS_ERROR_INVALID ? BLOCK_ERROR_INVALID
                                                      : BLOCK_ERROR_IO,
                    "%s", err->message);
        return false;
    }
    srv->listen_fd = srv->unix_listener.fd;
    return true;
}

static int nbdsrv_bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET) {
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    if (ss.ss_family == AF_INET6) {
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return -1;
}

/* The addresses to listen on for "tcp:@spec" (HOST:PORT), into *@res
 * (freeaddrinfo() it). */
static bool nbdsrv_tcp_resolve(const char *spec, struct addrinfo **res,
                               GError **errp)
{
    g_autofree char *host = NULL;
    const char *colon = strrchr(spec, ':');
    const char *port;
    struct addrinfo hints = {
        .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
    };
    int64_t port_num;
    size_t hl;
    int rc;

    if (!colon) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'tcp:%s': expected tcp:HOST:PORT", spec);
        return false;
    }
    host = g_strndup(spec, colon - spec);
    port = colon + 1;
    hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);    /* [::1] -> ::1 */
        host[hl - 2] = '\0';
    }
    if (!*host || !parse_count(NULL, port, 0, 65535, &port_num, NULL)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'tcp:%s': expected tcp:HOST:PORT with PORT 0..65535",
                    spec);
        return false;
    }
    rc = getaddrinfo(host, port, &hints, res);
    if (rc) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s",
                    host, gai_strerror(rc));
        return false;
    }
    return true;
}

/* Whether @sa is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x). */
static bool nbdsrv_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        const struct in6_addr *a = &in6->sin6_addr;

        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

bool nbdsrv_addr_is_remote(const char *addr, bool *remote, GError **errp)
{
    struct addrinfo *res, *ai;

    *remote = false;
    if (!g_str_has_prefix(addr, "tcp:")) {
        return true;                    /* unix:, or nbdsrv_new() refuses */
    }
    if (!nbdsrv_tcp_resolve(addr + 4, &res, errp)) {
        return false;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        *remote = *remote || !nbdsrv_is_loopback(ai->ai_addr);
    }
    freeaddrinfo(res);
    return true;
}

static bool nbdsrv_listen_tcp(NbdServer *srv, const char *spec,
                              GError **errp)
{
    const char *colon = strrchr(spec, ':');
    struct addrinfo *res, *ai;
    int err = 0;

    if (!nbdsrv_tcp_resolve(spec, &res, errp)) {
        return false;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family,
                        ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        int one = 1;

        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ai->ai_family == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, SOMAXCONN) == 0) {
            srv->listen_fd = fd;
            break;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (srv->listen_fd < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO, "'tcp:%s': %s",
                    spec, g_strerror(err ? err : EADDRNOTAVAIL));
        return false;
    }
    srv->port = nbdsrv_bound_port(srv->listen_fd);
    srv->addr = g_strdup_printf("tcp:%.*s:%d", (int)(colon - spec), spec,
                                srv->port);
    return true;
}

static void nbdsrv_stop_listening(NbdServer *srv)
{
    nbdsrv_source_clear(&srv->listen_src);
    nbdsrv_source_clear(&srv->accept_retry_src);
    if (srv->unix_listener.path) {
        /* Remove the socket file only if it is still ours. */
        socket_unix_listener_close(&srv->unix_listener);
    } else if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    srv->listen_fd = -1;
}

/* ---- timeouts ---- */

static gboolean nbdsrv_tick_cb(gpointer opaque)
{
    NbdServer *srv = opaque;
    gint64 now = g_get_monotonic_time();
    GList *l = srv->clients.head;

    while (l) {
        NbdClient *c = l->data;
        const char *why;

        l = l->next;    /* closing may free c */
        if (c->closed) {
            continue;
        }
        if (srv->handshake_timeout_ms && !c->transmission &&
            now - c->connected_us > srv->handshake_timeout_ms * 1000) {
            why = "handshake";
        } else if (srv->payload_timeout_ms &&
                   (c->rstate == NBDR_PAYLOAD ||
                    (c->rstate == NBDR_SKIP &&
                     c->skip_then == NBDSKIP_REQ_HEADER)) &&
                   now - c->payload_since_us >
                   srv->payload_timeout_ms * 1000) {
            why = "payload";
        } else if (srv->stall_timeout_ms && !g_queue_is_empty(&c->out) &&
                   now - c->out_since_us > srv->stall_timeout_ms * 1000) {
            why = "stall";
        } else {
            continue;
        }
        g_debug("nbd export: dropping a client: %s timeout", why);
        srv->stats.timeouts++;
        nbdsrv_client_close(c, false);
    }
    return G_SOURCE_CONTINUE;
}

static void nbdsrv_start_tick(NbdServer *srv)
{
    int64_t ms = 1000;

    if (srv->handshake_timeout_ms) {
        ms = MIN(ms, srv->handshake_timeout_ms / 4);
    }
    if (srv->stall_timeout_ms) {
        ms = MIN(ms, srv->stall_timeout_ms / 4);
    }
    if (srv->payload_timeout_ms) {
        ms = MIN(ms, srv->payload_timeout_ms / 4);
    }
    nbdsrv_source_clear(&srv->tick_src);
    srv->tick_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT, MAX(ms, 10),
                                 nbdsrv_tick_cb, srv);
}

/* ---- public API ---- */

NbdServer *nbdsrv_listen(const char *addr, GError **errp)
{
    g_autofree NbdServer *srv = g_new0(NbdServer, 1);
    bool ok;

    srv->listen_fd = -1;
    srv->unix_listener.fd = -1;
    srv->port = -1;
    srv->ctx = g_main_context_ref_thread_default();
    if (g_str_has_prefix(addr, "unix:")) {
        ok = nbdsrv_listen_unix(srv, addr + 5, errp);
    } else if (g_str_has_prefix(addr, "tcp:")) {
        ok = nbdsrv_listen_tcp(srv, addr + 4, errp);
    } else {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s': expected unix:PATH or tcp:HOST:PORT", addr);
        ok = false;
    }
    if (!ok) {
        g_main_context_unref(srv->ctx);
        g_free(srv->addr);
        return NULL;
    }
    srv->handshake_timeout_ms = NBDSRV_DEFAULT_HANDSHAKE_MS;
    srv->stall_timeout_ms = NBDSRV_DEFAULT_STALL_MS;
    srv->payload_timeout_ms = NBDSRV_DEFAULT_PAYLOAD_MS;
    srv->max_clients = NBDSRV_DEFAULT_SHARED;
    srv->budget_base = NBDSRV_SERVER_MAX_BYTES;
    if (!srv->addr) {
        srv->addr = g_strdup(addr);
    }
    nbdsrv_update_listen(srv);
    nbdsrv_start_tick(srv);
    return g_steal_pointer(&srv);
}

NbdServer *nbdsrv_new(BlockDriverState *bs, const char *addr,
                      const char *export_name, bool read_only,
                      GError **errp)
{
    g_autofree char *description = NULL;
    g_autoptr(GError) err = NULL;
    NbdServer *srv;
    int64_t size = bdrv_getlength(bs);

    export_name = export_name ? export_name : "";
    if (strlen(export_name) > NBD_MAX_STRING ||
        !g_utf8_validate(export_name, -1, NULL)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "export name: at most %d bytes of UTF-8",
                    NBD_MAX_STRING);
        return NULL;
    }
    if (!read_only && !bdrv_is_writable(bs)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s' is read-only: export it read-only",
                    bdrv_get_filename(bs));
        return NULL;
    }
    if (size < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO, "'%s': %s",
                    bdrv_get_filename(bs), g_strerror(-size));
        return NULL;
    }
    srv = nbdsrv_listen(addr, errp);
    if (!srv) {
        return NULL;
    }
    description = g_strdup_printf("qemu-mirror export (%s)",
                                  bdrv_get_format_name(bs));
    srv->multi_conn_always = true;
    srv->default_exp = nbdsrv_export_add(srv, bs, export_name, description,
                                         !read_only, &err);
    g_assert(srv->default_exp);     /* checked above */
    return srv;
}

void nbdsrv_finalize(NbdServer *srv)
{
    g_assert(g_queue_is_empty(&srv->clients));
    g_assert(g_queue_is_empty(&srv->exports));
    nbdsrv_source_clear(&srv->final_src);
    nbdsrv_source_clear(&srv->drained_src);
    nbdsrv_export_reap(srv);
    g_main_context_unref(srv->ctx);
    g_free(srv->addr);
    nbdsrv_tls_creds_free(srv->tls);
    g_free(srv);
}

uint64_t nbdsrv_budget(NbdServer *srv)
{
    return MAX(srv->budget_base,
               (uint64_t)srv->max_clients * NBDSRV_CLIENT_MIN_BYTES);
}

void nbdsrv_disconnect_all(NbdServer *srv)
{
    GList *l = srv->clients.head;

    while (l) {
        NbdClient *c = l->data;

        l = l->next;    /* closing may free c */
        nbdsrv_client_close(c, false);
    }
}

void nbdsrv_free(NbdServer *srv)
{
    if (!srv) {
        return;
    }
    g_assert(!srv->freed);
    nbdsrv_stop_listening(srv);
    nbdsrv_disconnect_all(srv);
    nbdsrv_export_remove_all(srv);
    nbdsrv_source_clear(&srv->tick_src);
    nbdsrv_source_clear(&srv->fair_src);
    srv->freed = true;
    if (g_queue_is_empty(&srv->clients)) {
        nbdsrv_finalize(srv);
    }
}

void nbdsrv_shutdown(NbdServer *srv)
{
    GList *l = srv->clients.head;

    srv->shutting_down = true;
    nbdsrv_stop_listening(srv);
    while (l) {
        NbdClient *c = l->data;

        l = l->next;
        if (c->closed) {
            continue;
        }
        if (!c->transmission) {
            nbdsrv_client_close(c, false);
            continue;
        }
        /* Finish what was sent (a payload in progress included). */
        c->finishing = true;
        if (c->rstate == NBDR_REQ_HEADER) {
            c->rstate = NBDR_STOPPED;
        }
        nbdsrv_client_update(c);
    }
}

bool nbdsrv_is_drained(NbdServer *srv)
{
    return g_queue_is_empty(&srv->clients);
}

int nbdsrv_get_port(NbdServer *srv)
{
    return srv->port;
}

unsigned nbdsrv_get_client_count(NbdServer *srv)
{
    return srv->live_clients;
}

uint64_t nbdsrv_get_in_flight(NbdServer *srv)
{
    return srv->in_flight;
}

uint64_t nbdsrv_get_held_bytes(NbdServer *srv)
{
    return srv->held;
}

void nbdsrv_get_stats(NbdServer *srv, NbdServerStats *stats)
{
    *stats = srv->stats;
}

void nbdsrv_set_timeouts(NbdServer *srv, int64_t handshake_ms,
                         int64_t stall_ms)
{
    g_assert(handshake_ms >= 0 && stall_ms >= 0);
    srv->handshake_timeout_ms = handshake_ms;
    srv->stall_timeout_ms = stall_ms;
    nbdsrv_start_tick(srv);
}

void nbdsrv_set_payload_timeout(NbdServer *srv, int64_t payload_ms)
{
    g_assert(payload_ms >= 0);
    srv->payload_timeout_ms = payload_ms;
    nbdsrv_start_tick(srv);
}

void nbdsrv_set_shared(NbdServer *srv, unsigned shared)
{
    g_assert(shared >= 1 && shared <= NBDSRV_MAX_SHARED);
    srv->max_clients = shared;
    nbdsrv_update_listen(srv);
}

void nbdsrv_set_budget(NbdServer *srv, uint64_t bytes)
{
    srv->budget_base = bytes;
    nbdsrv_update_listen(srv);
}

void nbdsrv_set_tls(NbdServer *srv, NbdTlsCreds *creds)
{
    nbdsrv_tls_creds_free(srv->tls);
    srv->tls = creds;
}

void nbdsrv_set_guest_priority(NbdServer *srv, bool on)
{
    srv->guest_priority = on;
}

const char *nbdsrv_get_address(NbdServer *srv)
{
    return srv->addr;
}

bool nbdsrv_set_description(NbdServer *srv, const char *description)
{
    NbdExport *exp = srv->default_exp;

    if (strlen(description) > NBD_MAX_STRING ||
        !g_utf8_validate(description, -1, NULL)) {
        return false;
    }
    g_free(exp->description);
    exp->description = g_strdup(description);
    return true;
}

/* ---- closing at exit ---- */

/* nbdsrv_close() in progress. */
typedef struct NbdClose {
    NbdServer *srv;
    void (*cb)(void *opaque, int ret);
    void *opaque;
    GSource *deadline_src;
    unsigned flushing;      /* flushes not yet completed */
    int ret;
} NbdClose;

static void nbdsrv_close_done(NbdClose *cl)
{
    NbdServer *srv = cl->srv;

    srv->closing = NULL;
    nbdsrv_source_clear(&cl->deadline_src);
    nbdsrv_free(srv);           /* drained: released at once */
    cl->cb(cl->opaque, cl->ret);
    g_free(cl);
}

static void nbdsrv_close_flush_cb(void *opaque, int ret)
{
    NbdClose *cl = opaque;

    if (ret < 0 && !cl->ret) {
        cl->ret = ret;
    }
    if (!--cl->flushing) {
        nbdsrv_close_done(cl);
    }
}

static gboolean nbdsrv_close_drained_cb(gpointer opaque)
{
    NbdClose *cl = opaque;
    NbdServer *srv = cl->srv;

    nbdsrv_source_clear(&srv->drained_src);
    /* One more count while the flushes are submitted, so that one
     * completing at once does not finish before the others start. */
    cl->flushing = 1;
    for (GList *l = srv->exports.head; l; l = l->next) {
        NbdExport *exp = l->data;

        cl->flushing++;
        bdrv_aio_flush(exp->bs, nbdsrv_close_flush_cb, cl);
    }
    nbdsrv_close_flush_cb(cl, 0);
    return G_SOURCE_REMOVE;
}

void nbdsrv_check_drained(NbdServer *srv)
{
    if (srv->closing && !srv->drained_src &&
        g_queue_is_empty(&srv->clients)) {
        srv->drained_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT, 0,
                                        nbdsrv_close_drained_cb,
                                        srv->closing);
    }
}

static gboolean nbdsrv_close_deadline_cb(gpointer opaque)
{
    NbdClose *cl = opaque;

    nbdsrv_source_clear(&cl->deadline_src);
    nbdsrv_disconnect_all(cl->srv);
    return G_SOURCE_REMOVE;
}

void nbdsrv_close(NbdServer *srv, unsigned timeout_ms,
                  void (*cb)(void *opaque, int ret), void *opaque)
{
    NbdClose *cl = g_new0(NbdClose, 1);

    g_assert(!srv->closing && !srv->freed);
    cl->srv = srv;
    cl->cb = cb;
    cl->opaque = opaque;
    srv->closing = cl;
    nbdsrv_shutdown(srv);
    cl->deadline_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT,
                                    MAX(timeout_ms, 1),
                                    nbdsrv_close_deadline_cb, cl);
    nbdsrv_check_drained(srv);
}
