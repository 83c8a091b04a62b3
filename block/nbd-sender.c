/*
 * NBD client driver: a connection's sender thread, on a node whose server
 * is latency-bound (nbd-spread.c).
 *
 * The main loop decides what goes where (nbd-io.c) and reads the replies
 * (nbd-source.c); this thread hands the requests to libnbd and writes
 * them to the socket.  Why: a write's payload is copied into the socket
 * (about as long as the read that filled it), and on the main loop every
 * such copy held up the next read's completion, the next reply and the
 * next request on every other connection; against a server that takes
 * many requests at once (every connection, the deep window), the main
 * loop was what paced the server.  Here each connection sends on its own,
 * as fast as its server takes the data, and a socket that is full waits
 * only for itself.  A quick server keeps the main loop sending: one
 * connection, a few requests in flight, and the data read just before on
 * the same CPU (raw_run_here()) is sent from its cache, with no thread
 * woken; a latency-bound node's reads stay off the main loop
 * (BlockLimits.writes_off_loop, BDRV_REQ_OFF_LOOP; bench/README.md,
 * "Sender threads").
 *
 * The thread's whole work: take the requests queued for it
 * (nbdblk_sender_push()), in order, and call libnbd for each
 * (nbdblk_send()); then, while libnbd still has bytes to write, wait
 * until the socket takes more and tell libnbd (nbd_aio_notify_write()).
 * It never reads replies, so completion callbacks run here only when
 * libnbd fails commands as it finds the connection dead; they take the
 * done queue's lock (nbd-io.c) like those on the main loop.  After each
 * batch of libnbd calls it wakes the main loop, which looks at the
 * handle again (its direction, whether it died) and completes what is
 * done.  libnbd's handle lock orders its calls against the main loop's.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Take what is queued for @c, and whether it is to stop. */
static bool nbdblk_sender_take(NbdBlkConn *c, GQueue *batch)
{
    bool stop;

    g_mutex_lock(&c->send_lock);
    *batch = c->send_queue;
    g_queue_init(&c->send_queue);
    stop = c->send_stop;
    g_mutex_unlock(&c->send_lock);
    return stop;
}

/* Wait until there is something to do: a kick, or room in the socket
 * while libnbd has bytes to write. */
static void nbdblk_sender_wait(NbdBlkConn *c)
{
    struct pollfd fds[2] = {
        { .fd = c->send_efd, .events = POLLIN },
    };
    unsigned dir = nbd_aio_get_direction(c->h);
    int n = 1;
    uint64_t v;

    if (dir & LIBNBD_AIO_DIRECTION_WRITE) {
        fds[1].fd = nbd_aio_get_fd(c->h);
        fds[1].events = POLLOUT;
        n = fds[1].fd >= 0 ? 2 : 1;
    }
    if (poll(fds, n, -1) < 0) {
        return;                         /* EINTR: look again */
    }
    if (fds[0].revents & POLLIN) {
        (void)!read(c->send_efd, &v, sizeof(v));
    }
    /*
     * Writable, or an error or hang-up that libnbd finds as it writes
     * (the connection then dies).  The main loop may have moved libnbd
     * on meanwhile (read a reply, finished the write): look again; a
     * notification it does not expect any more is refused (EINVAL) and
     * changes nothing.
     */
    if (n == 2 && fds[1].revents &&
        (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)) {
        nbd_aio_notify_write(c->h);
        g_main_context_wakeup(c->context);
    }
}

static gpointer nbdblk_sender_run(gpointer opaque)
{
    NbdBlkConn *c = opaque;

    for (;;) {
        GQueue batch;
        bool stop = nbdblk_sender_take(c, &batch);
        GList *l;

        if (!g_queue_is_empty(&batch)) {
            while ((l = g_queue_pop_head_link(&batch))) {
                nbdblk_send(c, l->data);
            }
            g_main_context_wakeup(c->context);
        }
        if (stop) {
            return NULL;
        }
        nbdblk_sender_wait(c);
    }
}

void nbdblk_sender_kick(NbdBlkConn *c)
{
    uint64_t one = 1;

    if (c->sender) {
        (void)!write(c->send_efd, &one, sizeof(one));
    }
}

void nbdblk_sender_push(NbdBlkConn *c, NbdBlkReq *req)
{
    g_mutex_lock(&c->send_lock);
    nbdblk_queue_push(&c->send_queue, req);
    g_mutex_unlock(&c->send_lock);
    nbdblk_sender_kick(c);
}

void nbdblk_sender_start(NbdBlkConn *c)
{
    g_autofree char *name = g_strdup_printf("nbdblk-send-%d", c->index);

    c->send_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->send_efd < 0) {
        g_error("nbd: eventfd: %s", g_strerror(errno));
    }
    g_mutex_init(&c->send_lock);
    g_queue_init(&c->send_queue);
    c->send_stop = false;
    c->context = g_main_context_ref_thread_default();
    c->sender = g_thread_new(name, nbdblk_sender_run, c);
}

void nbdblk_sender_stop(NbdBlkConn *c)
{
    if (!c->sender) {
        return;
    }
    g_mutex_lock(&c->send_lock);
    c->send_stop = true;
    g_mutex_unlock(&c->send_lock);
    nbdblk_sender_kick(c);
    g_thread_join(c->sender);
    c->sender = NULL;
    g_assert(g_queue_is_empty(&c->send_queue));
    g_mutex_clear(&c->send_lock);
    close(c->send_efd);
    c->send_efd = -1;
    g_main_context_unref(c->context);
    c->context = NULL;
}
