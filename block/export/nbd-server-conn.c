/*
 * NBD server: one connection's buffering, backpressure and lifetime.
 *
 * Each connection reads into a 64 KiB buffer (WRITE payloads go straight
 * into the request's buffer), parses as much as it can and stops parsing
 * at a limit: requests in flight, bytes held by the connection (request
 * buffers plus unsent replies) or by the whole server.  A paused
 * connection has no read watch; whatever frees budget (a completion, sent
 * output) schedules an idle "kick" that parses the buffered input again.
 * Output is a queue of pieces sent with sendmsg() when the socket is
 * writable.  See block/export/nbd-server-int.h for the lifetime rules.
 *
 * After NBD_OPT_STARTTLS the same happens through TLS
 * (nbd-server-tls.c): input is decrypted into the same buffers, and output
 * goes one record at a time, small pieces (replies and the headers of the
 * data that follows them) gathered into one record rather than a record
 * each.  Input GnuTLS buffered past the socket does not make the fd
 * readable: whenever the connection wants input and some is buffered, an
 * idle kick reads it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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

/* Bytes a queued piece holds against the budget: its bookkeeping too (the
 * piece, its queue link and the allocator's headers), so that a flood of
 * tiny replies is bounded by what it really costs. */
#define NBDSRV_OUT_OVERHEAD (sizeof(NbdOut) + sizeof(GList) + 64)
#define NBDSRV_OUT_HELD(o)  ((o)->hdr_len + (o)->data_len + NBDSRV_OUT_OVERHEAD)

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

uint64_t nbdsrv_client_commit(NbdClient *c)
{
    return c->closed ? c->held : MAX(c->held, NBDSRV_CLIENT_MIN_BYTES);
}

uint64_t nbdsrv_client_share(NbdClient *c)
{
    NbdServer *srv = c->srv;
    uint64_t share = nbdsrv_budget(srv) / MAX(srv->live_clients, 1);

    return MIN(NBDSRV_CLIENT_MAX_BYTES,
               MAX(share, NBDSRV_CLIENT_MIN_BYTES));
}

/* The guarantees of the connections --shared still allows. */
static uint64_t nbdsrv_unclaimed(NbdServer *srv)
{
    unsigned free_slots = srv->max_clients > srv->live_clients
                          ? srv->max_clients - srv->live_clients : 0;

    return free_slots * NBDSRV_CLIENT_MIN_BYTES;
}

static void nbdsrv_held_add(NbdClient *c, uint64_t bytes)
{
    NbdServer *srv = c->srv;
    uint64_t before = nbdsrv_client_commit(c);

    c->held += bytes;
    srv->held += bytes;
    srv->committed += nbdsrv_client_commit(c) - before;
    srv->stats.max_held_bytes = MAX(srv->stats.max_held_bytes, srv->held);
}

static void nbdsrv_held_sub(NbdClient *c, uint64_t bytes)
{
    NbdServer *srv = c->srv;
    uint64_t before = nbdsrv_client_commit(c);

    g_assert(c->held >= bytes && srv->held >= bytes);
    c->held -= bytes;
    srv->held -= bytes;
    srv->committed -= before - nbdsrv_client_commit(c);
    nbdsrv_client_resume(c);
    nbdsrv_resume_global(srv);
    if (!srv->listen_src && !srv->freed) {
        /* Accepting may have paused for want of budget. */
        nbdsrv_update_listen(srv);
    }
}

bool nbdsrv_client_reserve(NbdClient *c, uint64_t bytes)
{
    NbdServer *srv = c->srv;
    uint64_t held = c->held + bytes;
    uint64_t more = MAX(held, NBDSRV_CLIENT_MIN_BYTES) -
                    MAX(c->held, NBDSRV_CLIENT_MIN_BYTES);

    /* Within its guarantee a client never waits for the others; beyond
     * it, it waits for its own replies to be read (its share) or for
     * others to give budget back. */
    if (c->in_flight >= NBDSRV_MAX_CLIENT_REQUESTS ||
        held > nbdsrv_client_share(c)) {
        c->paused = true;
        return false;
    }
    /* ... and the guarantees of connections yet to come stay free. */
    if (more && srv->committed + more + nbdsrv_unclaimed(srv) >
                nbdsrv_budget(srv)) {
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
    c->exp->in_flight++;
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
    c->exp->in_flight--;
    c->srv->in_flight--;
    g_free(req);
    nbdsrv_client_resume(c);
    nbdsrv_client_update(c);    /* a finishing client may be done */
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
    nbdsrv_held_add(c, NBDSRV_OUT_HELD(o));
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

/*
 * Send one TLS record of the output: straight from a piece's data when a
 * whole record of it is next, else the next pieces gathered into
 * c->tls_stage (a reply header and the start of its data, or many small
 * replies).  As sendmsg().
 */
static ssize_t nbdsrv_client_send_tls(NbdClient *c)
{
    NbdOut *o = g_queue_peek_head(&c->out);
    size_t len = 0;

    if (o->sent >= o->hdr_len &&
        o->hdr_len + o->data_len - o->sent >= NBDSRV_TLS_RECORD) {
        return nbdsrv_tls_send(c, (uint8_t *)o->data + o->sent - o->hdr_len,
                               NBDSRV_TLS_RECORD);
    }
    if (!c->tls_stage) {
        c->tls_stage = g_malloc(NBDSRV_TLS_RECORD);
    }
    for (GList *l = c->out.head; l && len < NBDSRV_TLS_RECORD; l = l->next) {
        size_t pos;

        o = l->data;
        pos = l == c->out.head ? o->sent : 0;
        if (pos < o->hdr_len) {
            size_t n = MIN(o->hdr_len - pos, NBDSRV_TLS_RECORD - len);

            memcpy(c->tls_stage + len, o->hdr + pos, n);
            len += n;
            pos += n;
        }
        if (pos >= o->hdr_len && len < NBDSRV_TLS_RECORD) {
            size_t n = MIN(o->hdr_len + o->data_len - pos,
                           NBDSRV_TLS_RECORD - len);

            if (n) {
                memcpy(c->tls_stage + len,
                       (uint8_t *)o->data + pos - o->hdr_len, n);
            }
            len += n;
        }
    }
    return nbdsrv_tls_send(c, c->tls_stage, len);
}

/* Send what the socket takes.  Returns false when the client was closed. */
static bool nbdsrv_client_send(NbdClient *c)
{
    uint64_t freed = 0, held = 0;

    while (!g_queue_is_empty(&c->out)) {
        struct iovec iov[NBDSRV_MAX_IOV];
        struct msghdr msg = { .msg_iov = iov };
        ssize_t n;

        if (c->tls_ready) {
            n = nbdsrv_client_send_tls(c);
        } else {
            msg.msg_iovlen = nbdsrv_out_iov(c, iov);
            n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
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
            held += NBDSRV_OUT_HELD(o);
            nbdsrv_out_free(g_queue_pop_head(&c->out));
        }
    }
    if (freed) {
        c->out_bytes -= freed;
        nbdsrv_held_sub(c, held);
    }
    return true;
}

/* One step of the TLS handshake; on success negotiation goes on, in
 * TLS. */
static void nbdsrv_client_tls_step(NbdClient *c)
{
    int rc = nbdsrv_tls_handshake(c);

    if (rc < 0) {
        nbdsrv_client_close(c, false);
    } else if (rc > 0) {
        c->rstate = NBDR_OPT_HEADER;
    }
}

static gboolean nbdsrv_client_writable(int fd, GIOCondition cond,
                                       gpointer opaque)
{
    NbdClient *c = opaque;
    bool ok = true;

    nbdsrv_client_ref(c);
    nbdsrv_client_turn(c);
    if (!g_queue_is_empty(&c->out)) {
        ok = nbdsrv_client_send(c);
    } else if (c->rstate == NBDR_TLS_HANDSHAKE) {
        nbdsrv_client_tls_step(c);
    }
    if (ok) {
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
            if (c->held > NBDSRV_MAX_OPTION_OUTPUT) {
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
        case NBDR_TLS_HANDSHAKE:
        case NBDR_STOPPED:
            return;
        }
    }
}

/* recv() from @c's socket, through TLS once it is on. */
static ssize_t nbdsrv_client_read(NbdClient *c, void *buf, size_t len)
{
    return c->tls_ready ? nbdsrv_tls_recv(c, buf, len)
                        : recv(c->fd, buf, len, 0);
}

/*
 * Read what the socket has, once.  Returns the bytes read, 0 when there is
 * nothing to read now (or no room), -1 when the client was closed.
 */

static ssize_t nbdsrv_client_recv(NbdClient *c)
{
    ssize_t n;

    if (c->rstate == NBDR_TLS_HANDSHAKE) {
        /* Not a byte more in plaintext: the handshake reads the rest. */
        return 0;
    }
    if (c->rstate == NBDR_PAYLOAD && c->rpos == c->rlen) {
        /* Straight into the request's buffer. */
        NbdRequest *req = c->payload_req;

        n = nbdsrv_client_read(c, req->buf + req->got,
                               req->h.len - req->got);
        if (n > 0) {
            req->got += n;
            return n;
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
            return 0;
        }
        n = nbdsrv_client_read(c, c->rbuf + c->rlen,
                               NBDSRV_RBUF_SIZE - c->rlen);
        if (n > 0) {
            c->rlen += n;
            return n;
        }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                  errno == EINTR)) {
        return 0;
    }
    /* End of file or a socket error: the client is gone. */
    nbdsrv_client_close(c, false);
    return -1;
}

/*
 * Readable: read and parse until the socket is empty, a limit pauses the
 * client, or NBDSRV_READ_BUDGET bytes or NBDSRV_READ_MAX_REQUESTS requests
 * (a flood of tiny ones) came in.  Through TLS a read returns at most one
 * record and costs a decryption whatever its size, so each counts as at
 * least a full record: a client sending 1-byte records cannot keep the
 * loop here for millions of them.  One recv per dispatch
 * (a request header, then its payload in the next) gave a guest half a
 * request per main-loop iteration while the job, all of whose completions
 * run in one, took the rest: fio got 55% of its rate during a mirror.
 */
static void nbdsrv_client_read_all(NbdClient *c)
{
    uint64_t first = c->srv->stats.requests;
    size_t budget = NBDSRV_READ_BUDGET;
    ssize_t n;

    while ((n = nbdsrv_client_recv(c)) >= 0) {
        size_t cost = c->tls_ready ? MAX((size_t)n, NBDSRV_TLS_RECORD)
                                   : (size_t)n;

        nbdsrv_client_process(c);
        if (n == 0 || c->closed || c->paused || cost >= budget ||
            c->srv->stats.requests - first >= NBDSRV_READ_MAX_REQUESTS) {
            break;
        }
        budget -= cost;
    }
}

static gboolean nbdsrv_client_readable(int fd, GIOCondition cond,
                                       gpointer opaque)
{
    NbdClient *c = opaque;

    nbdsrv_client_ref(c);
    nbdsrv_client_turn(c);
    if (c->rstate == NBDR_TLS_HANDSHAKE) {
        nbdsrv_client_tls_step(c);
    } else {
        nbdsrv_client_read_all(c);
    }
    nbdsrv_client_update(c);
    nbdsrv_client_unref(c);
    return G_SOURCE_CONTINUE;
}

/* Whether @c reads input now (else it waits for a limit, its replies or
 * the TLS handshake, or reads nothing more). */
static bool nbdsrv_client_wants_input(NbdClient *c)
{
    return !c->closed && !c->paused && c->rstate != NBDR_STOPPED &&
           c->rstate != NBDR_TLS_HANDSHAKE &&
           !(c->finishing && c->rstate == NBDR_REQ_HEADER);
}

static gboolean nbdsrv_client_kick_cb(gpointer opaque)
{
    NbdClient *c = opaque;

    nbdsrv_client_turn(c);
    nbdsrv_source_clear(&c->kick_src);
    nbdsrv_client_ref(c);
    nbdsrv_client_process(c);
    if (nbdsrv_client_wants_input(c) && nbdsrv_tls_pending(c)) {
        /* Input GnuTLS holds: the fd will not tell. */
        nbdsrv_client_read_all(c);
    }
    nbdsrv_client_update(c);
    nbdsrv_client_unref(c);
    return G_SOURCE_REMOVE;
}

/* @c's sources at the priority nbdsrv_client_priority() says. */
static void nbdsrv_client_reprioritize(NbdClient *c)
{
    GSource *srcs[] = { c->in_src, c->out_src, c->kick_src };

    for (size_t i = 0; i < G_N_ELEMENTS(srcs); i++) {
        if (srcs[i]) {
            g_source_set_priority(srcs[i], nbdsrv_client_priority(c));
        }
    }
}

/* The default-priority sources had a turn: every connection back to
 * guest priority, the server's count restarted. */
static gboolean nbdsrv_fair_cb(gpointer opaque)
{
    NbdServer *srv = opaque;

    nbdsrv_source_clear(&srv->fair_src);
    srv->prio_turns = 0;
    for (GList *l = srv->clients.head; l; l = l->next) {
        NbdClient *c = l->data;

        if (c->yielded) {
            c->yielded = false;
            nbdsrv_client_reprioritize(c);
        }
    }
    return G_SOURCE_REMOVE;
}

void nbdsrv_client_turn(NbdClient *c)
{
    NbdServer *srv = c->srv;

    /* One count for the whole server: however many connections there
     * are, the others wait at most NBDSRV_PRIO_TURNS dispatches. */
    if (!srv->guest_priority || srv->fair_src ||
        ++srv->prio_turns < NBDSRV_PRIO_TURNS) {
        return;
    }
    srv->stats.prio_yields++;
    for (GList *l = srv->clients.head; l; l = l->next) {
        NbdClient *o = l->data;

        o->yielded = true;
        nbdsrv_client_reprioritize(o);
    }
    srv->fair_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT, 0, nbdsrv_fair_cb,
                                 srv);
}

static void nbdsrv_client_kick(NbdClient *c)
{
    if (!c->kick_src && !c->closed) {
        c->kick_src = nbdsrv_timer(c->srv, nbdsrv_client_priority(c),
                                   0, nbdsrv_client_kick_cb, c);
    }
}

/* ---- connection lifetime ---- */

/* Have the watch *@src of @c on @cond (and hang-ups, errors) call @fn
 * when @want, and none when not. */
static void nbdsrv_client_watch(NbdClient *c, GSource **src, bool want,
                                GIOCondition cond, GUnixFDSourceFunc fn)
{
    if (want && !*src) {
        *src = nbdsrv_fd_watch(c->srv, nbdsrv_client_priority(c),
                               c->fd, cond | G_IO_HUP | G_IO_ERR, fn, c);
    } else if (!want) {
        nbdsrv_source_clear(src);
    }
}

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
    want_in = nbdsrv_client_wants_input(c);
    want_out = !g_queue_is_empty(&c->out);
    if (c->rstate == NBDR_TLS_HANDSHAKE) {
        /* The STARTTLS reply goes out in plaintext first. */
        want_in = !want_out && !c->tls_want_write;
        want_out = want_out || c->tls_want_write;
    } else if (want_in && nbdsrv_tls_pending(c)) {
        nbdsrv_client_kick(c);
    }
    nbdsrv_client_watch(c, &c->in_src, want_in, G_IO_IN,
                        nbdsrv_client_readable);
    nbdsrv_client_watch(c, &c->out_src, want_out, G_IO_OUT,
                        nbdsrv_client_writable);
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
    if (c->exp) {
        nbdsrv_export_unref(c->exp);
    }
    g_free(c);
    if (!srv->freed) {
        nbdsrv_update_listen(srv);  /* its buffers are free */
        nbdsrv_check_drained(srv);
    }
    if (srv->freed && g_queue_is_empty(&srv->clients) && !srv->final_src) {
        /* We may be inside a block layer completion: release the node
         * from the main loop. */
        srv->final_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT, 0,
                                      nbdsrv_finalize_cb, srv);
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
    /* From now on only what it holds counts, not its guarantee. */
    srv->committed -= nbdsrv_client_commit(c);
    c->closed = true;
    srv->committed += nbdsrv_client_commit(c);
    if (protocol_error) {
        g_debug("nbd export: dropping a client that broke the protocol");
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
    nbdsrv_tls_stop(c);
    g_clear_pointer(&c->tls_stage, g_free);
    close(c->fd);
    c->fd = -1;
    while ((o = g_queue_pop_head(&c->out))) {
        freed += NBDSRV_OUT_HELD(o);
        nbdsrv_out_free(o);
    }
    c->out_bytes = 0;
    g_clear_pointer(&c->rbuf, g_free);
    g_clear_pointer(&c->opt_data, g_free);
    c->rpos = c->rlen = 0;
    c->rstate = NBDR_STOPPED;
    srv->live_clients--;
    if (c->exp) {
        c->exp->clients--;
    }
    nbdsrv_resume_global(srv);  /* its guarantee is free again */
    if (!srv->freed) {
        nbdsrv_update_listen(srv);
    }
    nbdsrv_cmd_drop_waiting(c);
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

void nbdsrv_client_new(NbdServer *srv, int fd)
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
    srv->committed += nbdsrv_client_commit(c);
    srv->stats.accepted++;
    nbdsrv_opts_greet(c);
    nbdsrv_client_update(c);
}
