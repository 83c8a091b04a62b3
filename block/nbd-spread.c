/*
 * NBD client driver: which connections take requests, and how deep a
 * window the node asks for.
 *
 * More connections bring more server workers (nbdkit runs 16 per
 * connection, qemu-nbd serves 16 requests per client), which is what hides
 * a server's latency: at 10 ms, 16 requests of 1 MiB move 1.6 GB/s per
 * connection.  They also cost: every connection is a handshake (nbdkit
 * starts its threads before it answers NBD_OPT_GO), more server threads
 * contending for the same file, and on a VM every wakeup of one of them on
 * the other CPU is an IPI through the hypervisor; a deeper window only
 * spreads the data over more cache and more first touches.  Against a
 * server that answers at once, one connection with a shallow window is
 * faster; against one that answers late, every connection with a window
 * that queues a request behind each busy worker (bench/README.md, "Fixed
 * defaults in place of the NBD trial").
 *
 * What tells the two apart is the server's latency, and nothing in the
 * handshake gives it (a delay filter on a UNIX socket is as slow as a WAN
 * link).  So the rule is fixed, decided at open, and the one thing it
 * needs is looked at for no longer than it takes to tell:
 *
 * - Right after the first handshake, one idle read of a block at offset 0
 *   is sent and waited for at most NBDBLK_SPREAD_LATENCY_NS; with
 *   multi-conn the other connections' handshakes start at the same
 *   moment.
 * - Answered within that time: the server is quick when it is free.  The
 *   node stays on its first connection with the shallow window
 *   (NBDBLK_WINDOW_FAST, nbd.c) for good; the others, barely started,
 *   are closed.
 * - Not answered: the server is latency-bound.  The node asks for the
 *   deep window (NBDBLK_WINDOW_LATENCY), sends from a thread per
 *   connection (nbd-sender.c), and open waits for the others'
 *   handshakes, which began beside the read: every connection then takes
 *   requests from the first.  Not waiting lets the copy start a few ms
 *   sooner on one connection, but nbdkit answers a handshake many times
 *   slower once its first connection is busy, and the copy was slower for
 *   it.  A server with no others to make (no multi-conn, a count of 1, or
 *   they cannot be made) gets the deep window on its one connection.
 * - A count asked for (connections=N) is made and every connection takes
 *   requests from the start; the idle read decides the window only.
 *
 * The threshold is far from both kinds: a local server answers a 4 KiB
 * read within tens of microseconds to half a millisecond, a delay filter
 * or a remote link in milliseconds.  The wait costs a quick server its
 * answer time, a slow one NBDBLK_SPREAD_LATENCY_NS.  A stall on our side
 * (the process not running when the answer came) makes a quick server
 * look slow, which only gives it every connection and the deep window,
 * what nbdcopy uses everywhere.  Nothing is tried on the data path, and
 * nothing decided is taken back; a server slow only at writing (its reads
 * quick) is taken for a quick one.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"

#include <inttypes.h>

/*
 * An idle answer later than this is the server's latency: below it, 16
 * requests of 1 MiB per connection move 8 GB/s, more than a 2-core machine
 * copies; a delay filter (10 ms) or a WAN link is well above, a local
 * server (0.05-0.5 ms) well below.
 */
#define NBDBLK_SPREAD_LATENCY_NS    (2 * 1000 * 1000)

/*
 * Start connecting (nbdblk_conn_start()) the connections up to
 * s->nr_planned not made yet, as conns[nr_conns..+nr_starting); the idle
 * read's wait and nbdblk_connect_wait_started() drive them.
 */
static void nbdblk_connect_start_more(NbdBlkState *s)
{
    while (s->nr_conns + s->nr_starting < s->nr_planned) {
        NbdBlkConn *c = &s->conns[s->nr_conns + s->nr_starting];
        g_autoptr(GError) err = NULL;

        c->index = s->nr_conns + s->nr_starting;
        if (!nbdblk_conn_start(s, c, &err)) {
            g_debug("nbd: %s: connection %d: %s", s->display, c->index,
                    err->message);
            return;
        }
        s->nr_starting++;
    }
}

/* Close the started connections. */
static void nbdblk_connect_drop_started(NbdBlkState *s)
{
    if (s->nr_starting) {
        g_debug("nbd: %s: closing %d connection(s) started and not joined",
                s->display, s->nr_starting);
    }
    for (int i = 0; i < s->nr_starting; i++) {
        NbdBlkConn *c = &s->conns[s->nr_conns + i];

        nbdblk_conn_close(c);
    }
    s->nr_starting = 0;
}

/* Drive the started connections until none is connecting (blocking). */
static void nbdblk_connect_wait_started(NbdBlkState *s)
{
    /* Those not ready by then (the first of them failed, the time is up,
     * or the caller was interrupted) are dropped by the join. */
    nbdblk_conns_wait_connected(&s->conns[s->nr_conns], s->nr_starting,
                                nbdblk_connect_timeout_ns(s));
}

/*
 * The started connections are done connecting: those ready, up to the
 * first that is not (or does not match the first connection), join the
 * node; the rest are closed.  More connections are an optimisation: one
 * that cannot be made (a client limit, say) ends the attempt and keeps
 * those there are.
 */
static void nbdblk_connect_join(NbdBlkState *s)
{
    while (s->nr_starting) {
        NbdBlkConn *c = &s->conns[s->nr_conns];

        if (nbd_aio_is_ready(c->h) != 1 || nbd_get_size(c->h) != s->size ||
            nbd_is_read_only(c->h) != s->read_only) {
            g_debug("nbd: %s: connection %d could not be made: %s",
                    s->display, c->index,
                    nbd_aio_is_ready(c->h) != 1 ? "no handshake"
                                                : "a different export");
            break;
        }
        s->nr_conns++;
        s->nr_starting--;
    }
    nbdblk_connect_drop_started(s);
}

/* The idle read finished; the handle lock is held, no nbd_* calls. */
static int nbdblk_probe_cb(void *opaque, int *error)
{
    NbdBlkState *s = opaque;

    s->probe_state = *error ? -1 : 1;
    nbdblk_conn_set_quiet(&s->conns[0], clock_ns());     /* io-timeout */
    return 1;                   /* retire the command */
}

/*
 * The idle read of open: sent, then waited for at most
 * NBDBLK_SPREAD_LATENCY_NS while the others' handshakes (started or not)
 * go on beside it.  True when it was answered by then (or failed: a read
 * error is the copy's business); the read stays in flight otherwise, and
 * s->probe_buf with it, until its answer or close.
 */
static bool nbdblk_probe_quick(NbdBlkState *s, int64_t len)
{
    nbd_completion_callback cb = {
        .callback = nbdblk_probe_cb,
        .user_data = s,
    };
    int64_t deadline;

    s->probe_buf = g_malloc(len);
    s->probe_state = 0;
    if (nbd_aio_pread(s->conns[0].h, s->probe_buf, len, 0, cb, 0) < 0) {
        return true;
    }
    deadline = clock_ns() + NBDBLK_SPREAD_LATENCY_NS;
    while (s->probe_state == 0) {
        int64_t left = deadline - clock_ns();

        if (left <= 0) {
            return false;
        }
        if (nbdblk_conns_poll(s->conns, s->nr_conns + s->nr_starting,
                              MAX(left / 1000000, 1)) < 0) {
            return true;
        }
    }
    /* Seen late (this process was not running, say): not quick. */
    return clock_ns() <= deadline;
}

void nbdblk_spread_open(NbdBlkState *s, bool asked)
{
    int64_t len = MAX(s->min_block, 4096);

    /* Made anyway when asked for; otherwise started in case the server
     * is slow, beside the idle read. */
    nbdblk_connect_start_more(s);
    s->latency_bound = s->size >= len && !nbdblk_probe_quick(s, len);
    if (asked || s->latency_bound) {
        nbdblk_connect_wait_started(s);
        nbdblk_connect_join(s);
    } else {
        nbdblk_connect_drop_started(s);
    }
    g_debug("nbd: %s: idle read %s within %d us: %d connection(s), %s "
            "window, sending from %s", s->display,
            s->latency_bound ? "not answered" : "answered",
            NBDBLK_SPREAD_LATENCY_NS / 1000, s->nr_conns,
            s->latency_bound ? "deep" : "shallow",
            s->latency_bound ? "a thread per connection" : "the main loop");
}

NbdBlkConn *nbdblk_pick_conn(NbdBlkState *s)
{
    NbdBlkConn *best = NULL;
    int n = s->nr_conns;

    for (int i = 0; i < n; i++) {
        NbdBlkConn *c = &s->conns[(s->next_conn + i) % n];

        /* fail_errno: shut down, its death not seen yet. */
        if (!c->dead && !c->fail_errno &&
            (!best || c->in_flight < best->in_flight)) {
            best = c;
        }
    }
    if (best) {
        s->next_conn = (best->index + 1) % n;
    }
    return best;
}

void nbdblk_spread_done(NbdBlkReq *req)
{
    __atomic_add_fetch(&req->conn->replies, 1, __ATOMIC_RELAXED);
}

int nbdblk_get_active_connections(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;
    int live = 0;

    if (bs->drv != &bdrv_nbd) {
        return 0;
    }
    /* Retired connections take no requests (nbdblk_pick_conn()). */
    for (int i = 0; i < s->nr_conns; i++) {
        live += !s->conns[i].dead;
    }
    return live ? live : s->nr_conns;
}

uint64_t nbdblk_get_replies(BlockDriverState *bs, int index)
{
    NbdBlkState *s = bs->opaque;

    g_assert(bs->drv == &bdrv_nbd);
    return index >= 0 && index < s->nr_conns
           ? __atomic_load_n(&s->conns[index].replies, __ATOMIC_RELAXED) : 0;
}
