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
 * link).  So the rule is fixed, and the one thing it needs is looked at
 * for no longer than it takes to tell:
 *
 * - At open, right after the first handshake, one idle read of a block at
 *   offset 0 is sent and waited for at most NBDBLK_SPREAD_LATENCY_NS.
 *   With multi-conn the other connections are started at the same moment
 *   (nbdkit starts a connection's threads before it answers NBD_OPT_GO:
 *   quickly on an idle server, many times slower beside a busy
 *   connection).
 * - Answered within that time: the server is quick when it is free.  The
 *   node stays on its first connection with the shallow window
 *   (NBDBLK_WINDOW_FAST, nbd.c) for good; the others, barely started,
 *   are closed.
 * - Not answered: the server is latency-bound.  The node asks for the
 *   deep window (NBDBLK_WINDOW_LATENCY) at once and returns; the copy
 *   starts on the first connection, the others' handshakes go on, driven
 *   by their GSources so that the main loop never waits on them, and
 *   they take requests as soon as they are all through
 *   (nbdblk_spread_dispatch()).  A server with no others to make (no
 *   multi-conn, a count of 1, or they cannot be made) gets the deep
 *   window on its one connection.
 * - A count asked for (connections=N) is made at open and every one of
 *   them takes requests from the start; the idle read decides the window
 *   only.
 *
 * The threshold is far from both kinds: a local server answers a 4 KiB
 * read within tens of microseconds to half a millisecond, a delay filter
 * or a remote link in milliseconds; and the wait costs a quick server its
 * answer time, a slow one NBDBLK_SPREAD_LATENCY_NS, where the read used
 * to be waited for in full and the copy then ran a trial of 128 MiB on
 * the data path before making the others.  A stall on our side (the
 * process not running when the answer came) makes a quick server look
 * slow, which only gives it every connection and the deep window, what
 * nbdcopy uses everywhere; no decision is taken back.
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

/* Decided: @active connections take requests from now on. */
static void nbdblk_spread_fix(NbdBlkState *s, int active)
{
    s->spread = NBDBLK_SPREAD_FIXED;
    s->nr_active = active;
}

/* The idle read finished; the handle lock is held, no nbd_* calls. */
static int nbdblk_probe_cb(void *opaque, int *error)
{
    NbdBlkState *s = opaque;

    s->probe_state = *error ? -1 : 1;
    s->conns[0].quiet_since_ns = clock_ns();       /* io-timeout */
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
    bool quick;

    s->asked = asked;
    /* Made anyway when asked for; otherwise started in case the server
     * is slow, beside the idle read. */
    nbdblk_connect_start_more(s);
    quick = s->size < len || nbdblk_probe_quick(s, len);
    s->latency_bound = !quick;
    if (asked) {
        nbdblk_connect_wait_started(s);
        nbdblk_connect_join(s);
        nbdblk_spread_fix(s, s->nr_conns);
    } else if (!quick && s->nr_starting) {
        for (int i = 0; i < s->nr_starting; i++) {
            NbdBlkConn *c = &s->conns[s->nr_conns + i];

            c->connecting = true;
            nbdblk_source_attach(c);
        }
        s->spread = NBDBLK_SPREAD_CONNECTING;
        s->connecting_since_ns = clock_ns();
        s->nr_active = 1;
    } else {
        nbdblk_connect_drop_started(s);
        nbdblk_spread_fix(s, 1);
    }
    g_debug("nbd: %s: idle read %s within %d us: %s", s->display,
            quick ? "answered" : "not answered",
            NBDBLK_SPREAD_LATENCY_NS / 1000,
            s->latency_bound ? "latency-bound, deep window, all connections"
                             : "one connection, shallow window");
}

void nbdblk_spread_dispatch(NbdBlkState *s)
{
    if (s->spread != NBDBLK_SPREAD_CONNECTING) {
        return;
    }
    for (int i = 0; i < s->nr_starting; i++) {
        if (nbd_aio_is_connecting(s->conns[s->nr_conns + i].h) == 1 &&
            (!s->connect_timeout ||
             clock_ns() - s->connecting_since_ns <
             nbdblk_connect_timeout_ns(s))) {
            return;     /* a later dispatch, of its source or another;
                         * after the connect timeout the join drops it */
        }
    }
    nbdblk_connect_join(s);
    nbdblk_spread_fix(s, s->nr_conns);
    g_debug("nbd: %s: %d connection(s) taking requests", s->display,
            s->nr_active);
}

NbdBlkConn *nbdblk_pick_conn(NbdBlkState *s)
{
    NbdBlkConn *best = NULL;
    int n = s->nr_active;

    for (int i = 0; i < n; i++) {
        NbdBlkConn *c = &s->conns[(s->next_conn + i) % n];

        if (!c->dead && (!best || c->in_flight < best->in_flight)) {
            best = c;
        }
    }
    if (!best && n < s->nr_conns) {
        /* Those taking requests died: the others take over. */
        n = s->nr_conns;
        for (int i = 0; i < n; i++) {
            NbdBlkConn *c = &s->conns[(s->next_conn + i) % n];

            if (!c->dead && (!best || c->in_flight < best->in_flight)) {
                best = c;
            }
        }
    }
    if (best) {
        s->next_conn = (best->index + 1) % n;
    }
    return best;
}

void nbdblk_spread_done(NbdBlkReq *req)
{
    req->conn->replies++;
}

int nbdblk_get_active_connections(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;
    int live = 0;

    if (bs->drv != &bdrv_nbd) {
        return 0;
    }
    /* Retired connections take no requests (nbdblk_pick_conn()). */
    for (int i = 0; i < s->nr_active; i++) {
        live += !s->conns[i].dead;
    }
    for (int i = s->nr_active; i < s->nr_conns && !live; i++) {
        live += !s->conns[i].dead;
    }
    return live ? live : s->nr_active;
}

bool nbdblk_spread_decided(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    if (bs->drv != &bdrv_nbd) {
        return false;
    }
    return s->spread == NBDBLK_SPREAD_FIXED;
}

uint64_t nbdblk_get_replies(BlockDriverState *bs, int index)
{
    NbdBlkState *s = bs->opaque;

    g_assert(bs->drv == &bdrv_nbd);
    return index >= 0 && index < s->nr_conns ? s->conns[index].replies : 0;
}
