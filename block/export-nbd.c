/*
 * NBD server: listening, connections, buffering and backpressure.
 *
 * Each connection reads into a 64 KiB buffer (WRITE payloads go straight
 * into the request's buffer), parses as much as it can and stops parsing
 * at a limit: requests in flight, bytes held by the connection (request
 * buffers plus unsent replies) or by the whole server.  A paused
 * connection has no read watch; whatever frees budget (a completion, sent
 * output) schedules an idle "kick" that parses the buffered input again.
 * Output is a queue of pieces sent with sendmsg() when the socket is
 * writable.  See export-nbd-int.h for the lifetime rules.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export-nbd-int.h"
#include "util/cutils.h"

#include <errno.h>
#include <glib-unix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define NBDSRV_DEFAULT_HANDSHAKE_MS 10000
#define NBDSRV_DEFAULT_STALL_MS     30000
#define NBDSRV_ACCEPT_RETRY_MS      100
#define NBDSRV_ACCEPT_BATCH         64
#define NBDSRV_MAX_IOV              64

/* One piece of output: a small copied header, then owned data. */
typedef struct NbdOut {
    uint8_t hdr[32];
    size_t hdr_len;
    void *data;
    size_t data_len;
    GDestroyNotify free_data;
    size_t sent;
} NbdOut;

/* ---- sources on the server's context ---- */

static GSource *nbdsrv_fd_watch(NbdServer *srv, int fd, GIOCondition cond,
                                GUnixFDSourceFunc fn, void *opaque)
{
    GSource *src = g_unix_fd_source_new(fd, cond);

    g_source_set_callback(src, G_SOURCE_FUNC(fn), opaque, NULL);
    g_source_attach(src, srv->ctx);
    return src;
}

static GSource *nbdsrv_timer(NbdServer *srv, guint ms, GSourceFunc fn,
                             void *opaque)
{
    GSource *src = ms ? g_timeout_source_new(ms) : g_idle_source_new();

    /* Idle kicks must not starve behind busy sockets. */
    g_source_set_priority(src, G_PRIORITY_DEFAULT);
    g_source_set_callback(src, fn, opaque, NULL);
    g_source_attach(src, srv->ctx);
    return src;
}

/* Safe from inside the source's own dispatch. */
static void nbdsrv_source_clear(GSource **src)
{
    if (*src) {
        g_source_destroy(*src);
        g_source_unref(*src);
        *src = NULL;
    }
}

/* ---- budget ---- */

static void nbdsrv_client_kick(NbdClient *c);

static void nbdsrv_client_resume(NbdClient *c)
{
    if (!c->paused || c->closed) {
        return;
    }
    c->paused = false;
    if (c->wait_global) {
        c->wait_global = false;
        c->srv->global_waiters--;
    }
    nbdsrv_client_kick(c);
}

static void nbdsrv_resume_global(NbdServer *srv)
{
    if (!srv->global_waiters) {
        return;
    }
    for (GList *l = srv->clients.head; l; l = l->next) {
        NbdClient *c = l->data;

        if (c->wait_global) {
            nbdsrv_client_resume(c);
        }
    }
}

static void nbdsrv_held_add(NbdClient *c, uint64_t bytes)
{
    NbdServer *srv = c->srv;

    c->held += bytes;
    srv->held += bytes;
    srv->stats.max_held_bytes = MAX(srv->stats.max_held_bytes, srv->held);
}

static void nbdsrv_held_sub(NbdClient *c, uint64_t bytes)
{
    g_assert(c->held >= bytes && c->srv->held >= bytes);
    c->held -= bytes;
    c->srv->held -= bytes;
    nbdsrv_client_resume(c);
    nbdsrv_resume_global(c->srv);
}

bool nbdsrv_client_reserve(NbdClient *c, uint64_t bytes)
{
    NbdServer *srv = c->srv;

    if (c->in_flight >= NBDSRV_MAX_CLIENT_REQUESTS ||
        (c->held && c->held + bytes > NBDSRV_CLIENT_MAX_BYTES)) {
        c->paused = true;
        return false;
    }
    if (srv->held && srv->held + bytes > NBDSRV_SERVER_MAX_BYTES) {
        c->paused = true;
        c->wait_global = true;
        srv->global_waiters++;
        return false;
    }
    nbdsrv_held_add(c, bytes);
    return true;
}

void nbdsrv_client_release(NbdClient *c, uint64_t bytes)
{
    if (bytes) {
        nbdsrv_held_sub(c, bytes);
    }
}

/* ---- requests ---- */

NbdRequest *nbdsrv_req_new(NbdClient *c, const NbdRequestHeader *h)
{
    NbdServer *srv = c->srv;
    NbdRequest *req = g_new0(NbdRequest, 1);

    req->client = c;
    req->h = *h;
    nbdsrv_client_ref(c);
    c->in_flight++;
    srv->in_flight++;
    srv->stats.max_client_in_flight = MAX(srv->stats.max_client_in_flight,
                                          c->in_flight);
    return req;
}

void nbdsrv_req_free(NbdRequest *req)
{
    NbdClient *c = req->client;

    qemu_vfree(req->buf);
    if (req->extents) {
        g_array_unref(req->extents);
    }
    nbdsrv_client_release(c, req->held);
    c->in_flight--;
    c->srv->in_flight--;
    g_free(req);
    nbdsrv_client_resume(c);
    if (!c->closed && c->finishing && !c->in_flight &&
        g_queue_is_empty(&c->out)) {
        nbdsrv_client_close(c, false);
    }
    nbdsrv_client_unref(c);
}

/* ---- output ---- */

void nbdsrv_client_queue(NbdClient *c, const void *hdr, size_t hdr_len,
                         void *data, size_t data_len,
                         GDestroyNotify free_data)
{
    NbdOut *o;

    g_assert(hdr_len <= sizeof(o->hdr) && hdr_len + data_len > 0);
    if (c->closed) {
        if (data && free_data) {
            free_data(data);
        }
        return;
    }
    o = g_new0(NbdOut, 1);
    if (hdr_len) {
        memcpy(o->hdr, hdr, hdr_len);
    }
    o->hdr_len = hdr_len;
    o->data = data;
    o->data_len = data_len;
    o->free_data = free_data;
    if (g_queue_is_empty(&c->out)) {
        c->out_since_us = g_get_monotonic_time();
    }
    g_queue_push_tail(&c->out, o);
    c->out_bytes += hdr_len + data_len;
    nbdsrv_held_add(c, hdr_len + data_len);
    nbdsrv_client_update(c);
}

static void nbdsrv_out_free(NbdOut *o)
{
    if (o->data && o->free_data) {
        o->free_data(o->data);
    }
    g_free(o);
}

static int nbdsrv_out_iov(NbdClient *c, struct iovec *iov)
{
    int n = 0;

    for (GList *l = c->out.head; l && n < NBDSRV_MAX_IOV - 1; l = l->next) {
        NbdOut *o = l->data;
        size_t data_sent = o->sent > o->hdr_len ? o->sent - o->hdr_len : 0;

        if (o->sent < o->hdr_len) {
            iov[n++] = (struct iovec) { o->hdr + o->sent,
                                        o->hdr_len - o->sent };
        }
        if (o->data_len > data_sent) {
            iov[n++] = (struct iovec) { (uint8_t *)o->data + data_sent,
                                        o->data_len - data_sent };
        }
    }
    return n;
}

/* Send what the socket takes.  Returns false when the client was closed. */
static bool nbdsrv_client_send(NbdClient *c)
{
    uint64_t freed = 0;

    while (!g_queue_is_empty(&c->out)) {
        struct iovec iov[NBDSRV_MAX_IOV];
        struct msghdr msg = { .msg_iov = iov };
        ssize_t n;

        msg.msg_iovlen = nbdsrv_out_iov(c, iov);
        n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        if (n < 0) {
            nbdsrv_client_close(c, false);
            return false;
        }
        c->out_since_us = g_get_monotonic_time();
        while (n > 0) {
            NbdOut *o = g_queue_peek_head(&c->out);
            size_t left = o->hdr_len + o->data_len - o->sent;

            if ((size_t)n < left) {
                o->sent += n;
                break;
            }
            n -= left;
            freed += o->hdr_len + o->data_len;
            nbdsrv_out_free(g_queue_pop_head(&c->out));
        }
    }
    if (freed) {
        c->out_bytes -= freed;
        nbdsrv_held_sub(c, freed);
    }
    return true;
}

static gboolean nbdsrv_client_writable(int fd, GIOCondition cond,
                                       gpointer opaque)
{
    NbdClient *c = opaque;

    nbdsrv_client_ref(c);
    if (nbdsrv_client_send(c)) {
        nbdsrv_client_update(c);
    }
    nbdsrv_client_unref(c);
    return G_SOURCE_CONTINUE;
}

/* ---- input ---- */

/* Parse buffered input until more is needed, a limit pauses us, or the
 * connection ends. */
static void nbdsrv_client_process(NbdClient *c)
{
    while (!c->closed && !c->paused) {
        size_t avail = c->rlen - c->rpos;
        const uint8_t *p = c->rbuf ? c->rbuf + c->rpos : NULL;
        size_t n;

        switch (c->rstate) {
        case NBDR_CLIENT_FLAGS:
            if (avail < 4) {
                return;
            }
            c->rpos += 4;
            nbdsrv_opts_client_flags(c, nbdsrv_get32(p));
            break;
        case NBDR_OPT_HEADER:
            if (avail < NBD_OPT_HEADER_SIZE) {
                return;
            }
            if (c->out_bytes > NBDSRV_MAX_OPTION_OUTPUT) {
                c->paused = true;   /* resumed when replies are sent */
                return;
            }
            c->rpos += NBD_OPT_HEADER_SIZE;
            nbdsrv_opts_header(c, nbdsrv_get64(p), nbdsrv_get32(p + 8),
                               nbdsrv_get32(p + 12));
            break;
        case NBDR_OPT_DATA:
            n = MIN(avail, c->opt_len - c->opt_got);
            if (n) {
                memcpy(c->opt_data + c->opt_got, p, n);
            }
            c->rpos += n;
            c->opt_got += n;
            if (c->opt_got < c->opt_len) {
                return;
            }
            nbdsrv_opts_handle(c, false);
            break;
        case NBDR_REQ_HEADER: {
            NbdRequestHeader h;

            if (c->finishing) {
                c->rstate = NBDR_STOPPED;
                return;
            }
            if (avail < NBD_REQUEST_SIZE) {
                return;
            }
            h = (NbdRequestHeader) {
                .magic = nbdsrv_get32(p),
                .flags = nbdsrv_get16(p + 4),
                .type = nbdsrv_get16(p + 6),
                .cookie = nbdsrv_get64(p + 8),
                .offset = nbdsrv_get64(p + 16),
                .len = nbdsrv_get32(p + 24),
            };
            if (!nbdsrv_cmd_start(c, &h)) {
                return;     /* paused; the header stays buffered */
            }
            if (!c->closed) {
                c->rpos += NBD_REQUEST_SIZE;
            }
            break;
        }
        case NBDR_PAYLOAD: {
            NbdRequest *req = c->payload_req;

            n = MIN(avail, req->h.len - req->got);
            if (n) {
                memcpy(req->buf + req->got, p, n);
            }
            c->rpos += n;
            req->got += n;
            if (req->got < req->h.len) {
                return;
            }
            nbdsrv_cmd_payload_done(c);
            break;
        }
        case NBDR_SKIP:
            n = MIN(avail, c->skip_left);
            c->rpos += n;
            c->skip_left -= n;
            if (c->skip_left) {
                return;
            }
            if (c->skip_then == NBDSKIP_OPT_TOO_BIG) {
                nbdsrv_opts_handle(c, true);
            } else {
                c->rstate = NBDR_REQ_HEADER;
            }
            break;
        case NBDR_STOPPED:
            return;
        }
    }
}

/* Read what the socket has.  Returns false when the client was closed. */
static bool nbdsrv_client_recv(NbdClient *c)
{
    ssize_t n;

    if (c->rstate == NBDR_PAYLOAD && c->rpos == c->rlen) {
        /* Straight into the request's buffer. */
        NbdRequest *req = c->payload_req;

        n = recv(c->fd, req->buf + req->got, req->h.len - req->got, 0);
        if (n > 0) {
            req->got += n;
            return true;
        }
    } else {
        if (!c->rbuf) {
            c->rbuf = g_malloc(NBDSRV_RBUF_SIZE);
        }
        if (c->rpos) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        if (c->rlen == NBDSRV_RBUF_SIZE) {
            return true;
        }
        n = recv(c->fd, c->rbuf + c->rlen, NBDSRV_RBUF_SIZE - c->rlen, 0);
        if (n > 0) {
            c->rlen += n;
            return true;
        }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                  errno == EINTR)) {
        return true;
    }
    /* End of file or a socket error: the client is gone. */
    nbdsrv_client_close(c, false);
    return false;
}

static gboolean nbdsrv_client_readable(int fd, GIOCondition cond,
                                       gpointer opaque)
{
    NbdClient *c = opaque;

    nbdsrv_client_ref(c);
    if (nbdsrv_client_recv(c)) {
        nbdsrv_client_process(c);
        nbdsrv_client_update(c);
    }
    nbdsrv_client_unref(c);
    return G_SOURCE_CONTINUE;
}

static gboolean nbdsrv_client_kick_cb(gpointer opaque)
{
    NbdClient *c = opaque;

    nbdsrv_source_clear(&c->kick_src);
    nbdsrv_client_ref(c);
    nbdsrv_client_process(c);
    nbdsrv_client_update(c);
    nbdsrv_client_unref(c);
    return G_SOURCE_REMOVE;
}

static void nbdsrv_client_kick(NbdClient *c)
{
    if (!c->kick_src && !c->closed) {
        c->kick_src = nbdsrv_timer(c->srv, 0, nbdsrv_client_kick_cb, c);
    }
}

/* ---- connection lifetime ---- */

void nbdsrv_client_update(NbdClient *c)
{
    bool want_in, want_out;

    if (c->closed) {
        return;
    }
    if (c->finishing && !c->in_flight && g_queue_is_empty(&c->out) &&
        c->rstate == NBDR_STOPPED) {
        nbdsrv_client_close(c, false);
        return;
    }
    want_in = !c->paused && c->rstate != NBDR_STOPPED &&
              !(c->finishing && c->rstate == NBDR_REQ_HEADER);
    want_out = !g_queue_is_empty(&c->out);
    if (want_in && !c->in_src) {
        c->in_src = nbdsrv_fd_watch(c->srv, c->fd,
                                    G_IO_IN | G_IO_HUP | G_IO_ERR,
                                    nbdsrv_client_readable, c);
    } else if (!want_in) {
        nbdsrv_source_clear(&c->in_src);
    }
    if (want_out && !c->out_src) {
        c->out_src = nbdsrv_fd_watch(c->srv, c->fd,
                                     G_IO_OUT | G_IO_HUP | G_IO_ERR,
                                     nbdsrv_client_writable, c);
    } else if (!want_out) {
        nbdsrv_source_clear(&c->out_src);
    }
}

void nbdsrv_client_finish(NbdClient *c)
{
    c->finishing = true;
    c->rstate = NBDR_STOPPED;
    nbdsrv_client_update(c);
}

void nbdsrv_client_ref(NbdClient *c)
{
    c->refcnt++;
}

static void nbdsrv_finalize(NbdServer *srv);

static gboolean nbdsrv_finalize_cb(gpointer opaque)
{
    nbdsrv_finalize(opaque);
    return G_SOURCE_REMOVE;
}

void nbdsrv_client_unref(NbdClient *c)
{
    NbdServer *srv = c->srv;

    g_assert(c->refcnt > 0);
    if (--c->refcnt) {
        return;
    }
    g_assert(c->closed && !c->in_flight && !c->payload_req);
    g_queue_unlink(&srv->clients, &c->link);
    g_free(c);
    if (srv->freed && g_queue_is_empty(&srv->clients) && !srv->final_src) {
        /* We may be inside a block layer completion: release the node
         * from the main loop. */
        srv->final_src = nbdsrv_timer(srv, 0, nbdsrv_finalize_cb, srv);
    }
}

void nbdsrv_client_close(NbdClient *c, bool protocol_error)
{
    NbdServer *srv = c->srv;
    uint64_t freed = 0;
    NbdOut *o;

    if (c->closed) {
        return;
    }
    c->closed = true;
    if (protocol_error) {
        srv->stats.protocol_errors++;
    }
    nbdsrv_source_clear(&c->in_src);
    nbdsrv_source_clear(&c->out_src);
    nbdsrv_source_clear(&c->kick_src);
    if (c->wait_global) {
        c->wait_global = false;
        srv->global_waiters--;
    }
    c->paused = false;
    close(c->fd);
    c->fd = -1;
    while ((o = g_queue_pop_head(&c->out))) {
        freed += o->hdr_len + o->data_len;
        nbdsrv_out_free(o);
    }
    c->out_bytes = 0;
    g_clear_pointer(&c->rbuf, g_free);
    g_clear_pointer(&c->opt_data, g_free);
    c->rpos = c->rlen = 0;
    c->rstate = NBDR_STOPPED;
    srv->live_clients--;
    if (c->payload_req) {
        /* A WRITE whose payload never fully arrived: never submitted. */
        NbdRequest *req = c->payload_req;

        c->payload_req = NULL;
        nbdsrv_req_free(req);
    }
    if (freed) {
        nbdsrv_held_sub(c, freed);
    }
    nbdsrv_client_unref(c);     /* the socket's reference */
}

static void nbdsrv_client_new(NbdServer *srv, int fd)
{
    NbdClient *c = g_new0(NbdClient, 1);

    c->srv = srv;
    c->fd = fd;
    c->refcnt = 1;
    c->link.data = c;
    c->rstate = NBDR_CLIENT_FLAGS;
    c->connected_us = g_get_monotonic_time();
    g_queue_push_tail_link(&srv->clients, &c->link);
    srv->live_clients++;
    srv->stats.accepted++;
    nbdsrv_opts_greet(c);
    nbdsrv_client_update(c);
}

/* ---- listening ---- */

static gboolean nbdsrv_accept_cb(int fd, GIOCondition cond,
                                 gpointer opaque);

static gboolean nbdsrv_accept_retry_cb(gpointer opaque)
{
    NbdServer *srv = opaque;

    nbdsrv_source_clear(&srv->accept_retry_src);
    if (srv->listen_fd >= 0 && !srv->listen_src) {
        srv->listen_src = nbdsrv_fd_watch(srv, srv->listen_fd, G_IO_IN,
                                          nbdsrv_accept_cb, srv);
    }
    return G_SOURCE_REMOVE;
}

static gboolean nbdsrv_accept_cb(int fd, GIOCondition cond,
                                 gpointer opaque)
{
    NbdServer *srv = opaque;

    for (int i = 0; i < NBDSRV_ACCEPT_BATCH; i++) {
        int cfd = accept4(srv->listen_fd, NULL, NULL,
                          SOCK_NONBLOCK | SOCK_CLOEXEC);
        int one = 1;

        if (cfd < 0 && (errno == EINTR || errno == ECONNABORTED ||
                        errno == EPROTO)) {
            continue;
        }
        if (cfd < 0 && (errno == EMFILE || errno == ENFILE ||
                        errno == ENOBUFS || errno == ENOMEM)) {
            /* Out of descriptors: retry later instead of spinning. */
            nbdsrv_source_clear(&srv->listen_src);
            srv->accept_retry_src = nbdsrv_timer(srv, NBDSRV_ACCEPT_RETRY_MS,
                                                 nbdsrv_accept_retry_cb,
                                                 srv);
            return G_SOURCE_REMOVE;
        }
        if (cfd < 0) {
            break;
        }
        if (srv->live_clients >= NBDSRV_MAX_CLIENTS) {
            close(cfd);
            srv->stats.refused++;
            continue;
        }
        if (srv->port >= 0) {
            setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        nbdsrv_client_new(srv, cfd);
    }
    return G_SOURCE_CONTINUE;
}

/* Is there a live server behind the UNIX socket @addr? */
static bool nbdsrv_unix_in_use(const struct sockaddr_un *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool in_use;

    if (fd < 0) {
        return false;
    }
    in_use = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0
             || errno == EAGAIN || errno == EINPROGRESS;
    close(fd);
    return in_use;
}

static bool nbdsrv_listen_unix(NbdServer *srv, const char *path,
                               GError **errp)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    struct stat st;
    int fd;

    if (!*path || strlen(path) >= sizeof(addr.sun_path)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'unix:%s': socket path %s", path,
                    *path ? "too long" : "missing");
        return false;
    }
    strcpy(addr.sun_path, path);
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s' exists and is not a socket", path);
            return false;
        }
        if (nbdsrv_unix_in_use(&addr)) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': a server is already listening there", path);
            return false;
        }
        unlink(path);   /* left behind by a dead server */
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(fd, SOMAXCONN) < 0 || lstat(path, &st) < 0) {
        int err = errno;

        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO, "'%s': %s", path,
                    g_strerror(err));
        if (fd >= 0) {
            close(fd);
        }
        return false;
    }
    srv->listen_fd = fd;
    srv->unix_path = g_strdup(path);
    srv->unix_dev = st.st_dev;
    srv->unix_ino = st.st_ino;
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

static bool nbdsrv_listen_tcp(NbdServer *srv, const char *spec,
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
    struct addrinfo *res, *ai;
    guint64 port_num;
    size_t hl;
    int rc, err = 0;

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
    if (!*host || !g_ascii_string_to_unsigned(port, 10, 0, 65535,
                                              &port_num, NULL)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'tcp:%s': expected tcp:HOST:PORT with PORT 0..65535",
                    spec);
        return false;
    }
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s",
                    host, gai_strerror(rc));
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
    return true;
}

static void nbdsrv_stop_listening(NbdServer *srv)
{
    struct stat st;

    nbdsrv_source_clear(&srv->listen_src);
    nbdsrv_source_clear(&srv->accept_retry_src);
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
        srv->listen_fd = -1;
    }
    /* Remove the socket file only if it is still ours. */
    if (srv->unix_path && lstat(srv->unix_path, &st) == 0 &&
        st.st_dev == srv->unix_dev && st.st_ino == srv->unix_ino) {
        unlink(srv->unix_path);
    }
    g_clear_pointer(&srv->unix_path, g_free);
}

/* ---- timeouts ---- */

static gboolean nbdsrv_tick_cb(gpointer opaque)
{
    NbdServer *srv = opaque;
    gint64 now = g_get_monotonic_time();
    GList *l = srv->clients.head;

    while (l) {
        NbdClient *c = l->data;

        l = l->next;    /* closing may free c */
        if (c->closed) {
            continue;
        }
        if ((srv->handshake_timeout_ms && !c->transmission &&
             now - c->connected_us > srv->handshake_timeout_ms * 1000) ||
            (srv->stall_timeout_ms && !g_queue_is_empty(&c->out) &&
             now - c->out_since_us > srv->stall_timeout_ms * 1000)) {
            srv->stats.timeouts++;
            nbdsrv_client_close(c, false);
        }
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
    nbdsrv_source_clear(&srv->tick_src);
    srv->tick_src = nbdsrv_timer(srv, MAX(ms, 10), nbdsrv_tick_cb, srv);
}

/* ---- public API ---- */

static void nbdsrv_set_limits(NbdServer *srv)
{
    uint32_t align = bdrv_get_request_alignment(srv->bs);
    int64_t opt = srv->bs->bl.opt_transfer;

    /* io.c pads anything, so the minimum is only a hint of efficiency;
     * the protocol caps it at 64 KiB. */
    srv->min_block = is_power_of_2(align) && align <= 64 * KiB ? align : 1;
    srv->pref_block = MAX(4096, srv->min_block);
    if (is_power_of_2(opt) && opt <= 2 * MiB) {
        srv->pref_block = MAX(srv->pref_block, opt);
    }
    srv->max_block = NBDSRV_MAX_PAYLOAD;
}

NbdServer *nbdsrv_new(BlockDriverState *bs, const char *addr,
                      const char *export_name, bool read_only,
                      GError **errp)
{
    g_autofree NbdServer *srv = g_new0(NbdServer, 1);
    int64_t size = bdrv_getlength(bs);
    bool ok;

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
    srv->listen_fd = -1;
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
        return NULL;
    }
    srv->bs = bdrv_ref(bs);
    srv->size = size;
    srv->read_only = read_only;
    srv->export_name = g_strdup(export_name);
    srv->description = g_strdup_printf("qemu-mirror export (%s)",
                                       bdrv_get_format_name(bs));
    srv->handshake_timeout_ms = NBDSRV_DEFAULT_HANDSHAKE_MS;
    srv->stall_timeout_ms = NBDSRV_DEFAULT_STALL_MS;
    nbdsrv_set_limits(srv);
    srv->listen_src = nbdsrv_fd_watch(srv, srv->listen_fd, G_IO_IN,
                                      nbdsrv_accept_cb, srv);
    nbdsrv_start_tick(srv);
    return g_steal_pointer(&srv);
}

static void nbdsrv_finalize(NbdServer *srv)
{
    g_assert(g_queue_is_empty(&srv->clients));
    nbdsrv_source_clear(&srv->final_src);
    bdrv_unref(srv->bs);
    g_main_context_unref(srv->ctx);
    g_free(srv->export_name);
    g_free(srv->description);
    g_free(srv);
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
    nbdsrv_source_clear(&srv->tick_src);
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

bool nbdsrv_set_description(NbdServer *srv, const char *description)
{
    if (strlen(description) > NBD_MAX_STRING ||
        !g_utf8_validate(description, -1, NULL)) {
        return false;
    }
    g_free(srv->description);
    srv->description = g_strdup(description);
    return true;
}
