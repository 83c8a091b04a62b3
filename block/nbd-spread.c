/*
 * NBD client driver: which connections take requests.
 *
 * More connections bring more server workers (nbdkit runs 16 per
 * connection, qemu-nbd serves 16 requests per client), which is what hides
 * a server's latency: at 10 ms, 16 requests of 1 MiB move 1.6 GB/s per
 * connection.  They also cost: every connection is more server threads
 * contending for the same file, and on a VM every wakeup of one of them on
 * the other CPU is an IPI through the hypervisor.  Against a server that
 * answers at once, one connection was faster on the 2-core machine
 * (bench/nbd.sh W1 0.78 of nbdcopy against 0.87 with two; W3 0.69-0.73 s
 * against 0.75-0.82 s).  From the client a latency-bound server and a busy
 * one look alike (a deep queue and long waits either way), so the driver
 * measures instead of guessing:
 *
 * - At open, an idle read of one block at offset 0 (a second one if the
 *   first took between NBDBLK_SPREAD_LATENCY_NS and NBDBLK_PROBE_SURE_NS;
 *   two sent at once both met a new connection's first stall, near 2 ms
 *   on a loaded machine): at NBDBLK_SPREAD_LATENCY_NS or more every time
 *   (a remote server, a delay filter), the server is latency-bound.
 *   Every connection is made at once and takes requests from the start,
 *   and the node asks for a window twice QEMU's (nbd.c, window_bytes) so
 *   that a request waits queued behind each busy server worker.  A stall
 *   that fooled it would only give the old default, all connections; each
 *   try costs the server's latency once.
 * - A count asked for (connections=N) is made and used from the start.
 * - Otherwise only the first connection is made, and the data path
 *   decides.  After NBDBLK_TRIAL_WARMUP bytes of reads and writes,
 *   NBDBLK_TRIAL_BYTES more are timed.  If one of them was answered within
 *   NBDBLK_SPREAD_LATENCY_NS (plus the time its bytes take at 1 GB/s), the
 *   server is quick when it is free: the node stays on one connection and
 *   never makes the others.  A new connection is not free either: nbdkit
 *   starts 16 threads for it, and each touches a buffer of the request
 *   size the first time, about 8 ms per MiB here, under the connection's
 *   read lock (bench/nbd.sh W3: 0.68 s with one connection made, 0.72 s
 *   with a second made and idle, 0.75 s with the old trial that also sent
 *   it requests).
 * - A server slow to answer even then (slow only at writing, say, or busy)
 *   gets the others, started from a dispatch (nbdblk_spread_dispatch())
 *   and driven through their handshakes by their GSources, so the main
 *   loop (guests writing through our export, say) never waits on them:
 *   NBDBLK_TRIAL_WARMUP bytes per connection on all of them, for the new
 *   connections' start, then NBDBLK_TRIAL_BYTES timed; all stay only if
 *   that was at least NBDBLK_TRIAL_GAIN times as fast as one, and then
 *   the node asks for the deep window too.  Without that warm-up the new
 *   connections' start hid a 10 ms write latency (787 against 807 MB/s:
 *   one connection kept).  A server with no others to make (no
 *   multi-conn, or they cannot be made) gets the deep window on its one
 *   connection.  Images too small to finish the trial stay as they are.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"

#include <inttypes.h>

/*
 * Idle latency from which one connection's server workers are too few:
 * below it, 16 requests of 1 MiB per connection move 8 GB/s, more than a
 * 2-core machine copies; a delay filter (10 ms) or a WAN link is well
 * above, a local server (0.05-0.5 ms) well below.
 */
#define NBDBLK_SPREAD_LATENCY_NS    (2 * 1000 * 1000)
#define NBDBLK_PROBE_TRIES          2
/* A first answer this slow is the server's latency, not a new
 * connection's stall (near 2 ms on a loaded machine; 5-10 ms seen while
 * bench/nbd.sh and the tests ran at once): no second read (bench/nbd.sh
 * W2 saves its 10 ms). */
#define NBDBLK_PROBE_SURE_NS        (8 * 1000 * 1000)
#define NBDBLK_PROBE_WAIT_NS        (500 * 1000 * 1000)

/* The trial: skip the start (our buffer pool, up to 64 MiB, and the
 * server's threads see their memory for the first time), then a timed
 * window; the same again on all connections when it goes on.  A 10 ms
 * server moves 64 MiB in 40 ms on one connection; a 20% gain is well
 * above what noise made here. */
#define NBDBLK_TRIAL_WARMUP         (64 * 1024 * 1024)
#define NBDBLK_TRIAL_BYTES          (64 * 1024 * 1024)
#define NBDBLK_TRIAL_GAIN           1.2
#define NBDBLK_TRIAL_NS_PER_BYTE    1

static void nbdblk_spread_set(NbdBlkState *s, NbdBlkSpread phase, int active)
{
    s->spread = phase;
    s->nr_active = active;
    s->trial_bytes = 0;
    s->trial_start_ns = clock_ns();
    s->trial_min_ns = INT64_MAX;
}

/* A probe read finished; the handle lock is held, no nbd_* calls. */
static int nbdblk_probe_cb(void *opaque, int *error)
{
    NbdBlkState *s = opaque;

    s->probe_state = *error ? -1 : 1;
    s->conns[0].quiet_since_ns = clock_ns();       /* io-timeout */
    return 1;                   /* retire the command */
}

/*
 * One idle read of @len bytes at offset 0 on the first connection: its
 * time in ns, -1 on an error, or INT64_MAX when no answer came within
 * NBDBLK_PROBE_WAIT_NS (a server that never answers must not hang the
 * open; the read then stays in flight, and s->probe_buf with it, until
 * close).  Once it has waited NBDBLK_SPREAD_LATENCY_NS, the server looks
 * latency-bound and the other connections are started, so that their
 * handshakes (5-15 ms with nbdkit, which starts its threads before
 * answering) overlap the wait; they are driven here too.
 */
static int64_t nbdblk_probe_read(NbdBlkState *s, int64_t len)
{
    struct nbd_handle *h = s->conns[0].h;
    nbd_completion_callback cb = {
        .callback = nbdblk_probe_cb,
        .user_data = s,
    };
    int64_t start = clock_ns();
    int64_t deadline = start + NBDBLK_PROBE_WAIT_NS;
    bool started = false;       /* once: one that cannot be made now
                                 * would fail again */

    s->probe_state = 0;
    if (nbd_aio_pread(h, s->probe_buf, len, 0, cb, 0) < 0) {
        return -1;
    }
    while (s->probe_state == 0) {
        int64_t now = clock_ns();
        int64_t left = deadline - now;

        if (left <= 0) {
            return INT64_MAX;
        }
        if (now - start >= NBDBLK_SPREAD_LATENCY_NS) {
            if (!started) {
                nbdblk_connect_start_more(s);
                started = true;
            }
        } else {
            left = MIN(left, start + NBDBLK_SPREAD_LATENCY_NS - now);
        }
        if (nbdblk_conns_poll(s->conns, s->nr_conns + s->nr_starting,
                              MAX(left / 1000000, 1)) < 0) {
            return -1;
        }
    }
    return s->probe_state > 0 ? clock_ns() - start : -1;
}

void nbdblk_spread_open(NbdBlkState *s, bool asked)
{
    int64_t len = MAX(s->min_block, 4096);
    int64_t best = INT64_MAX;
    bool probed = false;

    if (asked) {
        nbdblk_connect_start_more(s);   /* made anyway: during the probe */
    }
    if (s->size >= len) {
        s->probe_buf = g_malloc(len);
        for (int i = 0; i < NBDBLK_PROBE_TRIES; i++) {
            int64_t t;

            if (i > 0) {
                /* Not beside nbdkit starting the new connections' threads:
                 * the very stall this second read is there to see past. */
                nbdblk_connect_wait_started(s);
            }
            t = nbdblk_probe_read(s, len);

            if (t < 0) {
                break;  /* a read error is the copy's business */
            }
            probed = true;
            best = MIN(best, t);
            if (best < NBDBLK_SPREAD_LATENCY_NS ||
                t >= NBDBLK_PROBE_SURE_NS) {
                break;  /* one fast answer is enough; so is a sure slow one
                         * (no answer included) */
            }
        }
    }
    s->latency_bound = probed && best >= NBDBLK_SPREAD_LATENCY_NS;
    if (asked || s->latency_bound) {
        nbdblk_connect_more(s);
        nbdblk_spread_set(s, NBDBLK_SPREAD_FIXED, s->nr_conns);
    } else {
        /* Started for a first answer that was slow, then a quick one. */
        nbdblk_connect_drop_started(s);
        nbdblk_spread_set(s, NBDBLK_SPREAD_WARMUP, 1);
    }
    g_debug("nbd: %s: idle read of %" PRId64 " bytes in %" PRId64 " us: "
            "%s", s->display, len,
            !probed || best == INT64_MAX ? -1 : best / 1000,
            s->latency_bound ? "latency-bound: all connections, deep window"
            : s->spread == NBDBLK_SPREAD_FIXED ? "all connections"
                                               : "one connection, then a trial");
}

void nbdblk_spread_dispatch(NbdBlkState *s)
{
    if (s->spread == NBDBLK_SPREAD_CONNECT) {
        nbdblk_connect_start_more(s);
        for (int i = 0; i < s->nr_starting; i++) {
            NbdBlkConn *c = &s->conns[s->nr_conns + i];

            c->connecting = true;
            nbdblk_source_attach(c);
        }
        s->spread = NBDBLK_SPREAD_CONNECTING;
        s->connecting_since_ns = clock_ns();
    }
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
    if (s->nr_conns == 1) {
        /* Nothing to spread to: the deep window alone. */
        s->latency_bound = true;
        nbdblk_spread_set(s, NBDBLK_SPREAD_FIXED, 1);
        g_debug("nbd: %s: one connection, deep window", s->display);
        return;
    }
    nbdblk_spread_set(s, NBDBLK_SPREAD_WARMUP_ALL, s->nr_conns);
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
    NbdBlkState *s = req->s;
    int64_t now;
    double rate;

    if (s->spread == NBDBLK_SPREAD_FIXED || req->ret < 0 ||
        (req->op != NBDBLK_OP_READ && req->op != NBDBLK_OP_WRITE)) {
        return;
    }
    now = clock_ns();
    /* Beyond what its bytes take at 1 GB/s: a 32 MiB request is slow to
     * answer on any server. */
    s->trial_min_ns = MIN(s->trial_min_ns,
                          now - req->issued_ns -
                          req->bytes * NBDBLK_TRIAL_NS_PER_BYTE);
    s->trial_bytes += req->bytes;
    if (s->spread == NBDBLK_SPREAD_CONNECT ||
        s->spread == NBDBLK_SPREAD_CONNECTING ||
        s->trial_bytes < (s->spread == NBDBLK_SPREAD_WARMUP ?
                          NBDBLK_TRIAL_WARMUP :
                          s->spread == NBDBLK_SPREAD_WARMUP_ALL ?
                          NBDBLK_TRIAL_WARMUP * s->nr_active :
                          NBDBLK_TRIAL_BYTES)) {
        return;
    }
    rate = (double)s->trial_bytes / MAX(now - s->trial_start_ns, 1);
    switch (s->spread) {
    case NBDBLK_SPREAD_WARMUP:
        nbdblk_spread_set(s, NBDBLK_SPREAD_TRY_ONE, 1);
        break;
    case NBDBLK_SPREAD_TRY_ONE:
        g_debug("nbd: %s: %.0f MB/s on one connection, quickest answer "
                "%" PRId64 " us over 1 GB/s: %s", s->display, rate * 1000,
                s->trial_min_ns / 1000,
                s->trial_min_ns < NBDBLK_SPREAD_LATENCY_NS
                ? "one from now on" : "trying more");
        if (s->trial_min_ns < NBDBLK_SPREAD_LATENCY_NS) {
            nbdblk_spread_set(s, NBDBLK_SPREAD_FIXED, 1);
            break;
        }
        /* No nbd_* calls here: nbdblk_spread_dispatch() connects. */
        s->trial_rate_one = rate;
        s->spread = NBDBLK_SPREAD_CONNECT;
        break;
    case NBDBLK_SPREAD_WARMUP_ALL:
        nbdblk_spread_set(s, NBDBLK_SPREAD_TRY_ALL, s->nr_conns);
        break;
    case NBDBLK_SPREAD_TRY_ALL:
        /* Gaining from more workers is being latency-bound: the deep
         * window too. */
        s->latency_bound = rate >= NBDBLK_TRIAL_GAIN * s->trial_rate_one;
        nbdblk_spread_set(s, NBDBLK_SPREAD_FIXED,
                          s->latency_bound ? s->nr_conns : 1);
        g_debug("nbd: %s: %.0f MB/s on one connection, %.0f MB/s on %d: "
                "%d from now on", s->display, s->trial_rate_one * 1000,
                rate * 1000, s->nr_conns, s->nr_active);
        break;
    case NBDBLK_SPREAD_CONNECT:
    case NBDBLK_SPREAD_CONNECTING:
    case NBDBLK_SPREAD_FIXED:
        g_assert_not_reached();
    }
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

    return bs->drv == &bdrv_nbd && s->spread == NBDBLK_SPREAD_FIXED;
}
