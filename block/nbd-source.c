/*
 * NBD client driver: a libnbd handle as a GSource (the pattern of libnbd's
 * examples/glib-main-loop.c), for its replies.  prepare() re-reads the
 * handle's fd and whether it waits for a read, which change as the state
 * machine moves; dispatch() calls nbd_aio_notify_read, which runs our
 * completion callbacks with the handle locked, and then, with libnbd out
 * of the way, finishes the requests those callbacks queued.  Writing is
 * the sender thread's where the connection has one (nbd-sender.c): when
 * a reply read here leaves libnbd with bytes to write (a request it
 * queued while reading), the sender is kicked to write them.  Without
 * one, the source waits for the socket to take them too and calls
 * nbd_aio_notify_write.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"

#include <errno.h>
#include <string.h>

typedef struct NbdBlkSource {
    GSource source;             /* must be first */
    NbdBlkConn *conn;
    NbdBlkFdWatch watch;
    bool dispatching;
} NbdBlkSource;

void nbdblk_fd_watch_set(GSource *src, NbdBlkFdWatch *w, int fd,
                         GIOCondition events)
{
    if (fd != w->fd) {
        if (w->tag) {
            g_source_remove_unix_fd(src, w->tag);
            w->tag = NULL;
        }
        w->fd = fd;
        if (fd >= 0) {
            w->tag = g_source_add_unix_fd(src, fd, events);
        }
        w->events = events;
    } else if (w->tag && events != w->events) {
        g_source_modify_unix_fd(src, w->tag, events);
        w->events = events;
    }
}

/* Poll what libnbd wants now: its fd may change, its direction does. */
static void nbdblk_source_update(NbdBlkSource *ns)
{
    NbdBlkConn *c = ns->conn;
    GIOCondition events = 0;
    int fd = -1;

    if (!c->dead) {
        unsigned dir = nbd_aio_get_direction(c->h);

        fd = nbd_aio_get_fd(c->h);
        if (dir & LIBNBD_AIO_DIRECTION_READ) {
            events |= G_IO_IN;
        }
        if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && !c->sender) {
            events |= G_IO_OUT;
        }
    }
    nbdblk_fd_watch_set(&ns->source, &ns->watch, fd, events);
}

static gboolean nbdblk_source_prepare(GSource *src, gint *timeout)
{
    NbdBlkSource *ns = (NbdBlkSource *)src;
    int64_t left;

    *timeout = -1;
    nbdblk_conn_check(ns->conn);
    nbdblk_source_update(ns);
    left = nbdblk_conn_stall_left(ns->conn);
    if (left <= 0) {
        return TRUE;            /* stalled: dispatch() shuts it down */
    }
    if (left != INT64_MAX) {
        *timeout = MIN(left / 1000000 + 1, G_MAXINT);
    }
    /* Requests finished outside a dispatch (a failed submission, a dead
     * node, the sender thread's) are completed from here, later than
     * their submission. */
    return nbdblk_done_pending(ns->conn->s);
}

static gboolean nbdblk_source_check(GSource *src)
{
    NbdBlkSource *ns = (NbdBlkSource *)src;

    return (ns->watch.tag && g_source_query_unix_fd(src, ns->watch.tag)) ||
           nbdblk_done_pending(ns->conn->s) ||
           nbdblk_conn_stall_left(ns->conn) <= 0;
}

static gboolean nbdblk_source_dispatch(GSource *src, GSourceFunc func,
                                       gpointer data)
{
    NbdBlkSource *ns = (NbdBlkSource *)src;
    NbdBlkConn *c = ns->conn;
    GIOCondition revents = ns->watch.tag
                           ? g_source_query_unix_fd(src, ns->watch.tag) : 0;

    if (ns->dispatching) {
        return G_SOURCE_CONTINUE;       /* see nbdblk_source_attach() */
    }
    ns->dispatching = true;
    if (nbdblk_conn_stall_left(c) <= 0) {
        /* io-timeout: no reply for that long.  Its commands fail (the
         * next read sees EOF), and it is retired like a connection the
         * server dropped. */
        g_debug("nbd: %s: connection %d: no reply for %d s (io-timeout)",
                c->s->display, c->index, c->s->io_timeout);
        c->fail_errno = ETIMEDOUT;
        nbdblk_conn_abort(c);
    }
    if (revents && !c->dead) {
        unsigned dir = nbd_aio_get_direction(c->h);
        bool rd = revents & G_IO_IN;
        bool wr = revents & G_IO_OUT;

        if (revents & (G_IO_HUP | G_IO_ERR | G_IO_NVAL)) {
            /* Let libnbd find out what happened, in the direction it is
             * waiting for: a read sees EOF, a write EPIPE (in the sender
             * thread, where there is one). */
            rd = rd || (dir & LIBNBD_AIO_DIRECTION_READ) ||
                 !(dir & LIBNBD_AIO_DIRECTION_WRITE);
            wr = !rd && !c->sender;
        }
        int r = 0;

        /* Both ready: read first, a reply may change what to write. */
        if (rd) {
            r = nbd_aio_notify_read(c->h);
        } else if (wr) {
            r = nbd_aio_notify_write(c->h);
        }
        if (r < 0 && !c->lost_why && nbd_get_error()) {
            /* How it died, in libnbd's words less the call's name
             * ("nbd_aio_notify_read: "), for the reconnect. */
            const char *why = nbd_get_error();
            const char *colon = strstr(why, ": ");

            c->lost_why = g_strdup(g_str_has_prefix(why, "nbd_") && colon
                                   ? colon + 2 : why);
        }
        if (c->sender &&
            (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)) {
            nbdblk_sender_kick(c);
        }
        nbdblk_conn_check(c);
    }
    ns->dispatching = false;
    /* Last: completions may free the node, and this source with it. */
    nbdblk_process_done(c->s);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs nbdblk_source_funcs = {
    .prepare = nbdblk_source_prepare,
    .check = nbdblk_source_check,
    .dispatch = nbdblk_source_dispatch,
};

void nbdblk_source_attach(NbdBlkConn *c)
{
    GSource *src = g_source_new(&nbdblk_source_funcs,
                                sizeof(NbdBlkSource));
    NbdBlkSource *ns = (NbdBlkSource *)src;
    g_autofree char *name = g_strdup_printf("nbdblk-%d", c->index);

    ns->conn = c;
    ns->watch.fd = -1;
    g_source_set_name(src, name);
    /*
     * GLib blocks a source while it dispatches it: it takes the source's
     * fds out of the poll set and puts them back, and each change wakes
     * the context with a write to its eventfd, and the next poll returns
     * at once for it: two writes and a read per dispatch, that is per
     * reply (bench/README.md, "GLib wakeups").  A source that may recurse
     * is not blocked; dispatch() makes a nested call return at once
     * instead.
     */
    g_source_set_can_recurse(src, TRUE);
    g_source_attach(src, g_main_context_get_thread_default());
    c->source = src;
}

void nbdblk_source_destroy(NbdBlkConn *c)
{
    if (c->source) {
        g_source_destroy(c->source);
        g_source_unref(c->source);
        c->source = NULL;
    }
}
