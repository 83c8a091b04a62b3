/*
 * NBD client driver: one libnbd handle's life.  Connecting is the control
 * path: started (nbd_aio_connect_*), then driven by poll() until the
 * handshake is over, blocking, so that several can be made at once: for
 * at most the node's connect timeout, and never longer than
 * NBDBLK_INTERRUPT_POLL_MS without asking the caller's interrupt check
 * (nbdblk_set_interrupt_func()) whether to give up; once
 * connected the handle is only driven asynchronously through its GSource
 * (nbd-source.c).
 * Closing never waits for the server.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"
#include "util/sockets.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

/* libnbd's last error, prefixed with the spec, the user name scrubbed. */
static void nbdblk_conn_error(NbdBlkState *s, GError **errp)
{
    g_autoptr(GString) msg = g_string_new(nbd_get_error());

    if (s->uri->tls_username && *s->uri->tls_username) {
        g_string_replace(msg, s->uri->tls_username, "xxx", 0);
    }
    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN, "'%s': %s",
                s->display, msg->str);
}

/* TLS settings from the URI; never downgrades an nbds:// URI. */
static int nbdblk_conn_setup_tls(const NbdBlkUri *uri, struct nbd_handle *h)
{
    if (!uri->tls) {
        return nbd_set_tls(h, LIBNBD_TLS_DISABLE);
    }
    if (nbd_set_tls(h, LIBNBD_TLS_REQUIRE) < 0) {
        return -1;
    }
    if (uri->tls_certificates &&
        nbd_set_tls_certificates(h, uri->tls_certificates) < 0) {
        return -1;
    }
    if (uri->tls_psk_file &&
        nbd_set_tls_psk_file(h, uri->tls_psk_file) < 0) {
        return -1;
    }
    if (uri->tls_username &&
        nbd_set_tls_username(h, uri->tls_username) < 0) {
        return -1;
    }
    if (uri->tls_verify_peer >= 0 &&
        nbd_set_tls_verify_peer(h, uri->tls_verify_peer) < 0) {
        return -1;
    }
    return 0;
}

bool nbdblk_conn_start(NbdBlkState *s, NbdBlkConn *c, GError **errp)
{
    const NbdBlkUri *uri = s->uri;
    g_autofree char *name = g_strdup_printf("nbdblk-%d", c->index);
    struct nbd_handle *h = nbd_create();
    int r;

    if (!h) {
        nbdblk_conn_error(s, errp);
        return false;
    }
    if (uri->tls && nbd_supports_tls(h) != 1) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': this libnbd was built without TLS support",
                    s->display);
        nbd_close(h);
        return false;
    }
    /*
     * Structured replies and base:allocation for block status; libnbd's
     * default strict mode stays on (bounds, alignment, flags checked
     * before anything is sent).  Read buffers are not zeroed first (the
     * CVE-2022-0485 guard): libnbd fails a read the server did not cover
     * in full, and no caller uses the buffer of a failed read.
     */
    r = nbd_set_handle_name(h, name);
    r = r < 0 ? r : nbd_set_export_name(h, uri->export_name);
    r = r < 0 ? r : nbd_set_request_structured_replies(h, true);
    r = r < 0 ? r : nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION);
    r = r < 0 ? r : nbd_set_pread_initialize(h, false);
    r = r < 0 ? r : nbdblk_conn_setup_tls(uri, h);
    if (r >= 0) {
        if (uri->transport == NBDBLK_TRANSPORT_UNIX) {
            r = nbd_aio_connect_unix(h, uri->socket);
        } else {
            r = nbd_aio_connect_tcp(h, uri->host, uri->port);
        }
    }
    if (r < 0) {
        nbdblk_conn_error(s, errp);
        nbd_close(h);
        return false;
    }
    if (uri->transport == NBDBLK_TRANSPORT_UNIX) {
        socket_unix_tune_sndbuf(nbd_aio_get_fd(h));
    }
    c->s = s;
    c->h = h;
    c->dead = false;
    c->fail_errno = 0;
    c->in_flight = 0;
    nbdblk_conn_set_quiet(c, clock_ns());
    c->sender = NULL;
    return true;
}

/* The caller's interrupt check (nbdblk_set_interrupt_func()). */
static NbdBlkInterruptFunc *nbdblk_interrupt_func;
static void *nbdblk_interrupt_opaque;

void nbdblk_set_interrupt_func(NbdBlkInterruptFunc *func, void *opaque)
{
    nbdblk_interrupt_func = func;
    nbdblk_interrupt_opaque = opaque;
}

bool nbdblk_interrupted(void)
{
    return nbdblk_interrupt_func &&
           nbdblk_interrupt_func(nbdblk_interrupt_opaque);
}

int nbdblk_conns_wait_connected(NbdBlkConn *conns, int n,
                                int64_t timeout_ns)
{
    int64_t deadline = timeout_ns ? clock_ns() + timeout_ns : INT64_MAX;

    for (;;) {
        int64_t left = deadline - clock_ns();
        bool busy = false;

        for (int i = 0; i < n; i++) {
            busy = busy || nbd_aio_is_connecting(conns[i].h) == 1;
        }
        if (!busy) {
            return 0;
        }
        if (nbdblk_interrupted()) {
            return -EINTR;
        }
        if (left <= 0) {
            return -ETIMEDOUT;
        }
        left = MIN(left / 1000000 + 1, NBDBLK_INTERRUPT_POLL_MS);
        if (nbdblk_conns_poll(conns, n, left) < 0) {
            return -1;  /* conns[0] failed: the caller sees it */
        }
    }
}

/* The error of a first connection that did not finish its handshake. */
static void nbdblk_conn_wait_error(NbdBlkState *s, NbdBlkConn *c, int r,
                                   GError **errp)
{
    const char *state = nbd_connection_state(c->h);
    int secs = s->connect_timeout;

    if (r == -EINTR) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': interrupted while connecting", s->display);
    } else if (r == -ETIMEDOUT && state &&
               g_str_has_prefix(state, "CONNECT")) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': could not connect to the NBD server within "
                    "%d s (connect-timeout)", s->display, secs);
    } else if (r == -ETIMEDOUT) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': the NBD server did not finish the handshake "
                    "within %d s (connect-timeout)", s->display, secs);
    } else {
        nbdblk_conn_error(s, errp);
    }
}

/* Drive c->h (started) until the handshake is over, blocking for at most
 * the connect timeout. */
static bool nbdblk_conn_finish(NbdBlkState *s, NbdBlkConn *c, GError **errp)
{
    int r = nbdblk_conns_wait_connected(c, 1, nbdblk_connect_timeout_ns(s));

    if (r < -1 || nbd_aio_is_ready(c->h) != 1) {
        nbdblk_conn_wait_error(s, c, r, errp);
        nbd_close(c->h);
        c->h = NULL;
        return false;
    }
    return true;
}

bool nbdblk_conn_connect(NbdBlkState *s, NbdBlkConn *c, GError **errp)
{
    return nbdblk_conn_start(s, c, errp) && nbdblk_conn_finish(s, c, errp);
}

int nbdblk_conns_poll(NbdBlkConn *conns, int n, int timeout_ms)
{
    struct pollfd fds[NBDBLK_MAX_CONNECTIONS];
    int r;

    g_assert(n <= NBDBLK_MAX_CONNECTIONS);
    for (int i = 0; i < n; i++) {
        unsigned dir = nbd_aio_get_direction(conns[i].h);

        fds[i].fd = nbd_aio_get_fd(conns[i].h);
        fds[i].events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                        (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0);
        fds[i].revents = 0;
    }
    r = poll(fds, n, timeout_ms);
    if (r < 0) {
        /* A signal: the caller looks at its interrupt check and loops. */
        return errno == EINTR ? 0 : -1;
    }
    for (int i = 0; i < n; i++) {
        /* As nbd_poll() does; a failure leaves the handle dead, which its
         * owner sees (its commands fail, or it is not ready). */
        if (fds[i].revents & (POLLIN | POLLHUP)) {
            r = nbd_aio_notify_read(conns[i].h);
        } else if (fds[i].revents & POLLOUT) {
            r = nbd_aio_notify_write(conns[i].h);
        } else if (fds[i].revents & POLLERR) {
            r = -1;
        } else {
            continue;
        }
        if (r < 0 && i == 0) {
            return -1;
        }
    }
    return 0;
}

void nbdblk_conn_close(NbdBlkConn *c)
{
    if (!c->h) {
        return;
    }
    /*
     * A polite NBD_CMD_DISC when we can send it without waiting (it is
     * queued and sent as far as the socket takes it); nbd_shutdown()
     * would block until the server hangs up.  Fails harmlessly on a
     * connection that is not usable any more.
     */
    if (!c->dead) {
        nbd_aio_disconnect(c->h, 0);
    }
    nbd_close(c->h);
    c->h = NULL;
}

void nbdblk_conn_abort(NbdBlkConn *c)
{
    int fd;

    if (!c->h || c->dead) {
        return;
    }
    fd = nbd_aio_get_fd(c->h);
    if (fd >= 0) {
        /*
         * Linger 0 first: the close of this socket (libnbd's, as the
         * handle goes DEAD below) then discards what the kernel still
         * holds unsent or unacknowledged and sends RST, instead of
         * leaving an orphan that delivers our old writes once the link
         * is back, after the new connection wrote newer data to the
         * same bytes.  No effect on a UNIX socket (its bytes are in the
         * server's buffer already): see nbd-reconnect.c for what stays.
         */
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };

        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        /* The next read sees EOF: libnbd moves to DEAD, closes the
         * socket and fails every command in flight with ENOTCONN. */
        shutdown(fd, SHUT_RDWR);
    }
}
