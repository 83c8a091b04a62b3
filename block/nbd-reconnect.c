/*
 * NBD client driver: making a broken connection again (reconnect-delay,
 * block/nbd.h).
 *
 * When the last live connection of a node dies (nbd-io.c), the node does
 * not fail: its requests stay in s->queued (those in flight on the dead
 * connection come back failed and are queued again first, in their
 * order, nbdblk_retry()), new ones join them, and this file makes a new
 * connection, on the main loop: a GSource drives one libnbd handle
 * through nbd_aio_connect_* and the handshake (never a blocking wait that
 * would stall the export's guests), each attempt bounded by
 * connect-timeout, with a backoff between attempts from
 * NBDBLK_RC_BACKOFF_MIN_NS doubling to NBDBLK_RC_BACKOFF_MAX_NS, until
 * reconnect-delay after the break.  (A TCP host name is resolved by
 * libnbd as the attempt starts, which blocks for as long as the resolver
 * takes; an address does not.)
 *
 * A handle that finished its handshake must show the same export: the
 * same size (else the node fails for good: "export size changed from X
 * to Y"), still writable if it was, block size constraints that still
 * allow what the node sends, and every feature the node may use (flush,
 * FUA, write zeroes, fast zero, trim, base:allocation; multi-conn when it
 * has several connections): requests already prepared rely on them, so
 * losing one fails the node too, with the reason.  Then, when the server
 * can flush, a flush goes first on the new handle: writes the old server
 * acknowledged before it went away may not have reached its disk.  Then
 * the handle takes the place of the dead connection (its GSource, its
 * sender thread on a latency-bound node) and the held requests go out in
 * their order; a write whose reply was lost is written again to the same
 * offset (NBD writes are idempotent).  Past the delay the node fails as
 * without reconnect: every held request fails with the error that broke
 * the connection; but not for good: the next request begins another
 * reconnect (nbdblk_reconnect_revive()), so that a job stopped by its
 * error policy goes on when resumed after the server is back.  A node
 * that failed for another reason (a changed export, a cancel) stays
 * failed.
 *
 * A connection we declared dead (io-timeout, NBD_ESHUTDOWN, a cancel) is
 * aborted with linger 0 (nbdblk_conn_abort()): its close, as libnbd sees
 * it DEAD, drops what our kernel had not delivered and sends RST, so no
 * orphaned socket delivers an old write after the new connection wrote
 * the same bytes again.  What this cannot reach: requests the old server
 * had already received (its socket buffer, its own queue; over a UNIX
 * socket everything sent), which a live server (stalled, or behind a
 * partition) may still carry out later.  Its writes in flight go out
 * again here only after the first flush on the new handle, and the
 * mirror counts them as not flushed once they complete (mirror-link.h),
 * but an old write that lands after a newer one to the same bytes is
 * not seen: docs/mirror-tool.md says so.
 *
 * On a multi-conn node a connection that dies while others live is
 * retired (its requests go to the others) and made again here in the
 * background, once per retirement and for at most reconnect-delay, so
 * that the node gets its parallelism back; if the last one dies
 * meanwhile, that attempt becomes the node's reconnect.
 *
 * The node tells the layers above through node events (block.h):
 * RECONNECTING when its requests start being held, then RECONNECTED or
 * RECONNECT_FAILED.  A background reconnect is silent (the node never
 * stopped).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define NBDBLK_RC_BACKOFF_MIN_NS    (100 * 1000 * 1000)
#define NBDBLK_RC_BACKOFF_MAX_NS    (2000 * 1000 * 1000LL)

typedef struct NbdBlkRcSource {
    GSource source;             /* must be first */
    NbdBlkState *s;
    NbdBlkFdWatch watch;
} NbdBlkRcSource;

static void nbdblk_rc_step(NbdBlkState *s);

/* ---- the GSource ---- */

/* Poll what the handle being made wants now. */
static void nbdblk_rc_source_update(NbdBlkRcSource *rs)
{
    NbdBlkReconnect *rc = &rs->s->rc;
    GIOCondition events = 0;
    int fd = -1;

    if (rc->conn.h && (rc->phase == NBDBLK_RC_CONNECT ||
                       rc->phase == NBDBLK_RC_FLUSH)) {
        unsigned dir = nbd_aio_get_direction(rc->conn.h);

        fd = nbd_aio_get_fd(rc->conn.h);
        events = (dir & LIBNBD_AIO_DIRECTION_READ ? G_IO_IN : 0) |
                 (dir & LIBNBD_AIO_DIRECTION_WRITE ? G_IO_OUT : 0);
    }
    nbdblk_fd_watch_set(&rs->source, &rs->watch, fd, events);
}

/* Is what the dead connection had settled, so that the new handle may
 * take its place? */
static bool nbdblk_rc_can_join(NbdBlkState *s)
{
    return !nbdblk_done_pending(s) && s->conns[s->rc.slot].in_flight == 0;
}

/* When the reconnect must look again without the fd: a timer. */
static int64_t nbdblk_rc_wake_ns(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;

    switch (rc->phase) {
    case NBDBLK_RC_WAIT:
        return MIN(rc->next_try_ns, rc->deadline_ns);
    case NBDBLK_RC_CONNECT:
        return MIN(rc->try_end_ns, rc->deadline_ns);
    case NBDBLK_RC_FLUSH:
        return rc->deadline_ns;
    case NBDBLK_RC_JOIN:
        return nbdblk_rc_can_join(s) ? 0 : rc->deadline_ns;
    default:
        return 0;
    }
}

static gboolean nbdblk_rc_prepare(GSource *src, gint *timeout)
{
    NbdBlkRcSource *rs = (NbdBlkRcSource *)src;
    int64_t left = nbdblk_rc_wake_ns(rs->s) - clock_ns();

    nbdblk_rc_source_update(rs);
    if (left <= 0) {
        *timeout = 0;
        return TRUE;
    }
    *timeout = MIN(left / 1000000 + 1, G_MAXINT);
    return FALSE;
}

static gboolean nbdblk_rc_check(GSource *src)
{
    NbdBlkRcSource *rs = (NbdBlkRcSource *)src;

    return (rs->watch.tag && g_source_query_unix_fd(src, rs->watch.tag)) ||
           nbdblk_rc_wake_ns(rs->s) <= clock_ns();
}

static gboolean nbdblk_rc_dispatch(GSource *src, GSourceFunc func,
                                   gpointer data)
{
    NbdBlkRcSource *rs = (NbdBlkRcSource *)src;
    NbdBlkState *s = rs->s;
    GIOCondition revents = rs->watch.tag
                           ? g_source_query_unix_fd(src, rs->watch.tag) : 0;
    struct nbd_handle *h = s->rc.conn.h;

    if (h && revents) {
        unsigned dir = nbd_aio_get_direction(h);
        GIOCondition bad = G_IO_HUP | G_IO_ERR;

        /* In the direction libnbd waits for, so that it finds out about
         * an error or hang-up (a refused TCP connect is one, seen as a
         * write); a failure leaves the handle dead. */
        if ((dir & LIBNBD_AIO_DIRECTION_READ) &&
            (revents & (G_IO_IN | bad))) {
            nbd_aio_notify_read(h);
        } else if ((dir & LIBNBD_AIO_DIRECTION_WRITE) &&
                   (revents & (G_IO_OUT | bad))) {
            nbd_aio_notify_write(h);
        }
    }
    nbdblk_rc_step(s);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs nbdblk_rc_source_funcs = {
    .prepare = nbdblk_rc_prepare,
    .check = nbdblk_rc_check,
    .dispatch = nbdblk_rc_dispatch,
};

static void nbdblk_rc_source_attach(NbdBlkState *s)
{
    GSource *src = g_source_new(&nbdblk_rc_source_funcs,
                                sizeof(NbdBlkRcSource));
    NbdBlkRcSource *rs = (NbdBlkRcSource *)src;

    rs->s = s;
    rs->watch.fd = -1;
    g_source_set_name(src, "nbdblk-reconnect");
    g_source_attach(src, g_main_context_get_thread_default());
    s->rc.source = src;
}

/* ---- the attempts ---- */

/* Close the handle being made, if any. */
static void nbdblk_rc_close_attempt(NbdBlkReconnect *rc)
{
    if (rc->conn.h) {
        rc->conn.dead = true;   /* no NBD_CMD_DISC: it may be half made */
        nbdblk_conn_close(&rc->conn);
    }
}

/* Everything of the reconnect but the node's state goes. */
static void nbdblk_rc_end(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;

    nbdblk_rc_close_attempt(rc);
    if (rc->source) {
        g_source_destroy(rc->source);
        g_source_unref(rc->source);
        rc->source = NULL;
    }
    g_clear_pointer(&rc->why, g_free);
    g_clear_pointer(&rc->last_error, g_free);
    rc->phase = NBDBLK_RC_IDLE;
    rc->all_down = false;
}

/* An attempt failed (@msg): back off, then try again. */
static void nbdblk_rc_attempt_failed(NbdBlkState *s, const char *msg)
{
    NbdBlkReconnect *rc = &s->rc;

    g_debug("nbd: %s: reconnect attempt: %s", s->display, msg);
    g_free(rc->last_error);
    rc->last_error = g_strdup(msg);
    nbdblk_rc_close_attempt(rc);
    rc->phase = NBDBLK_RC_WAIT;
    rc->next_try_ns = clock_ns() + rc->backoff_ns;
    rc->backoff_ns = MIN(rc->backoff_ns * 2, NBDBLK_RC_BACKOFF_MAX_NS);
}

static void nbdblk_rc_try(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;
    g_autoptr(GError) err = NULL;

    rc->conn.index = rc->slot;
    if (!nbdblk_conn_start(s, &rc->conn, &err)) {
        nbdblk_rc_attempt_failed(s, err->message);
        return;
    }
    rc->phase = NBDBLK_RC_CONNECT;
    rc->try_end_ns = s->connect_timeout ? clock_ns() +
                     nbdblk_connect_timeout_ns(s) : INT64_MAX;
}

/*
 * Is the export on @h the one the node was opened on?  NULL if so, else
 * why not (a new string).
 */
static char *nbdblk_rc_mismatch(NbdBlkState *s, struct nbd_handle *h)
{
    static const struct {
        const char *name;
        size_t have;            /* offsetof the NbdBlkState flag */
        int (*now)(struct nbd_handle *h);
    } features[] = {
        { "flush", offsetof(NbdBlkState, can_flush), nbd_can_flush },
        { "FUA", offsetof(NbdBlkState, can_fua), nbd_can_fua },
        { "write zeroes", offsetof(NbdBlkState, can_zero), nbd_can_zero },
        { "fast zero", offsetof(NbdBlkState, can_fast_zero),
          nbd_can_fast_zero },
        { "trim", offsetof(NbdBlkState, can_trim), nbd_can_trim },
    };
    int64_t size = nbd_get_size(h);
    int64_t min = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    int64_t max = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);

    if (size != s->size) {
        return g_strdup_printf("export size changed from %" PRId64 " to %"
                               PRId64, s->size, size);
    }
    if (!s->read_only && nbd_is_read_only(h) == 1) {
        return g_strdup("the export became read-only");
    }
    if (min > MAX(s->min_block, 1) ||
        (max > 0 && max < (s->max_block ? s->max_block
                                        : NBDBLK_MAX_TRANSFER))) {
        return g_strdup_printf("the block size constraints changed "
                               "(minimum %u to %" PRId64 ", maximum %u to %"
                               PRId64 ")", s->min_block, min, s->max_block,
                               max);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(features); i++) {
        if (*(bool *)((char *)s + features[i].have) &&
            features[i].now(h) != 1) {
            return g_strdup_printf("the server no longer offers %s",
                                   features[i].name);
        }
    }
    if (s->can_status &&
        nbd_can_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) != 1) {
        return g_strdup("the server no longer offers base:allocation");
    }
    if (s->nr_conns > 1 && nbd_can_multi_conn(h) != 1) {
        return g_strdup("the server no longer offers multi-conn");
    }
    return NULL;
}

/* The first flush finished; the handle lock is held, no nbd_* calls. */
static int nbdblk_rc_flush_cb(void *opaque, int *error)
{
    NbdBlkState *s = opaque;

    s->rc.flush_state = *error ? -*error : 1;
    return 1;
}

/* Give up for good: the node fails (@err, @why). */
static void nbdblk_rc_fail(NbdBlkState *s, int err, const char *why)
{
    NbdBlkReconnect *rc = &s->rc;

    if (!rc->all_down) {
        /* A background one: the connection just stays retired. */
        g_debug("nbd: %s: connection %d not made again: %s", s->display,
                rc->slot, why);
        nbdblk_rc_end(s);
        nbdblk_reconnect_retired(s, NULL);
        return;
    }
    g_free(s->fail_reason);
    s->fail_reason = g_strdup(why);
    nbdblk_set_dead(s, err);    /* fails the held requests, stops us */
}

/* The handshake is over: check the export, then flush or join. */
static void nbdblk_rc_connected(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;
    g_autofree char *bad = nbdblk_rc_mismatch(s, rc->conn.h);
    nbd_completion_callback cb = {
        .callback = nbdblk_rc_flush_cb,
        .user_data = s,
    };

    if (bad) {
        nbdblk_rc_fail(s, EIO, bad);
        return;
    }
    rc->phase = NBDBLK_RC_JOIN;
    if (rc->all_down && s->can_flush) {
        rc->flush_state = 0;
        if (nbd_aio_flush(rc->conn.h, cb, 0) < 0) {
            nbdblk_rc_attempt_failed(s, nbd_get_error());
            return;
        }
        rc->phase = NBDBLK_RC_FLUSH;
    }
}

/*
 * The new handle replaces conns[rc->slot]: the dead one's sender thread
 * and handle go (what it had is settled already: s->done was empty), and
 * the node's queue goes out.
 */
static void nbdblk_rc_join(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;
    NbdBlkConn *c = &s->conns[rc->slot];
    bool all_down = rc->all_down;
    BdrvEvent ev = {
        .type = BDRV_EVENT_RECONNECTED,
        .elapsed_ns = clock_ns() - rc->since_ns,
    };

    g_assert(c->dead && !c->sender);
    nbdblk_source_destroy(c);
    nbdblk_conn_close(c);
    g_clear_pointer(&c->lost_why, g_free);
    c->h = g_steal_pointer(&rc->conn.h);
    c->dead = false;
    c->fail_errno = 0;
    c->rc_tried = false;
    nbdblk_conn_set_quiet(c, clock_ns());
    nbdblk_source_attach(c);
    if (s->latency_bound) {
        nbdblk_sender_start(c);
    }
    s->nr_reconnects++;
    g_debug("nbd: %s: connection %d made again after %.1f s", s->display,
            rc->slot, ev.elapsed_ns / 1e9);
    nbdblk_rc_end(s);
    if (all_down) {
        /* The server is back: each retired connection gets a try. */
        for (int i = 0; i < s->nr_conns; i++) {
            s->conns[i].rc_tried = false;
        }
        bdrv_notify_event(s->bs, &ev);
    }
    nbdblk_pump(s);
    /* Another retired connection may be waiting for its turn. */
    nbdblk_reconnect_retired(s, NULL);
}

static void nbdblk_rc_step(NbdBlkState *s)
{
    NbdBlkReconnect *rc = &s->rc;
    int64_t now = clock_ns();

    if (rc->phase == NBDBLK_RC_IDLE) {
        return;
    }
    if (now >= rc->deadline_ns &&
        !(rc->phase == NBDBLK_RC_JOIN && nbdblk_rc_can_join(s))) {
        g_autofree char *why = g_strdup_printf(
            "no connection within %d s (reconnect-delay)%s%s",
            s->reconnect_delay, rc->last_error ? ": " : "",
            rc->last_error ? rc->last_error : "");

        /* Not for good: a later request may find the server back. */
        s->revivable = rc->all_down;
        nbdblk_rc_fail(s, rc->err, why);
        return;
    }
    switch (rc->phase) {
    case NBDBLK_RC_WAIT:
        if (now >= rc->next_try_ns) {
            nbdblk_rc_try(s);
        }
        break;
    case NBDBLK_RC_CONNECT:
        if (nbd_aio_is_ready(rc->conn.h) == 1) {
            nbdblk_rc_connected(s);
        } else if (nbd_aio_is_connecting(rc->conn.h) != 1) {
            nbdblk_rc_attempt_failed(s, nbd_get_error() ? nbd_get_error()
                                                        : "no handshake");
        } else if (now >= rc->try_end_ns) {
            nbdblk_rc_attempt_failed(s, "no handshake within "
                                     "connect-timeout");
        }
        break;
    case NBDBLK_RC_FLUSH:
        if (rc->flush_state == 1) {
            rc->phase = NBDBLK_RC_JOIN;
        } else if (nbd_aio_is_dead(rc->conn.h) == 1 ||
                   nbd_aio_is_closed(rc->conn.h) == 1) {
            nbdblk_rc_attempt_failed(s, "the connection broke while "
                                     "flushing");
        } else if (rc->flush_state < 0) {
            g_autofree char *why = g_strdup_printf(
                "the first flush after reconnecting failed: %s",
                g_strerror(-rc->flush_state));

            nbdblk_rc_fail(s, -rc->flush_state, why);
        }
        break;
    default:
        break;
    }
    /* Joins once what the dead connection had is settled. */
    if (rc->phase == NBDBLK_RC_JOIN && nbdblk_rc_can_join(s)) {
        nbdblk_rc_join(s);
    }
}

/* ---- starting and stopping ---- */

/* Start a reconnect of conns[@slot] (RC_IDLE). */
static void nbdblk_rc_start(NbdBlkState *s, int slot)
{
    NbdBlkReconnect *rc = &s->rc;
    int64_t now = clock_ns();

    g_assert(rc->phase == NBDBLK_RC_IDLE);
    rc->slot = slot;
    rc->since_ns = now;
    rc->deadline_ns = now + (int64_t)s->reconnect_delay * 1000000000;
    rc->backoff_ns = NBDBLK_RC_BACKOFF_MIN_NS;
    rc->phase = NBDBLK_RC_WAIT;
    rc->next_try_ns = now;      /* the first attempt at once */
    memset(&rc->conn, 0, sizeof(rc->conn));
    nbdblk_rc_source_attach(s);
}

bool nbdblk_reconnect_begin(NbdBlkState *s, int err, const char *why)
{
    NbdBlkReconnect *rc = &s->rc;
    g_autofree char *reason = NULL;
    BdrvEvent ev = {
        .type = BDRV_EVENT_RECONNECTING,
        .error = err,
        .delay_s = s->reconnect_delay,
    };

    if (!s->reconnect_delay || s->dead_errno || s->cancelling) {
        return false;
    }
    if (err == ETIMEDOUT) {
        reason = g_strdup_printf("no reply for %d s, io-timeout",
                                 s->io_timeout);
    } else {
        reason = g_strdup(why ? why : err == ENOTCONN
                          ? "the connection was closed" : g_strerror(err));
    }
    if (rc->phase == NBDBLK_RC_IDLE) {
        nbdblk_rc_start(s, 0);
    }
    /* A background attempt becomes the node's, with the full delay; one
     * that was about to join flushes first (nbdblk_rc_connected()). */
    if (rc->phase == NBDBLK_RC_JOIN) {
        rc->phase = NBDBLK_RC_CONNECT;
        rc->try_end_ns = 0;
    } else if (rc->phase == NBDBLK_RC_WAIT) {
        /* The node waits now: no more backing off from before. */
        rc->next_try_ns = clock_ns();
        rc->backoff_ns = NBDBLK_RC_BACKOFF_MIN_NS;
    }
    rc->all_down = true;
    rc->err = err;
    rc->since_ns = clock_ns();
    rc->deadline_ns = rc->since_ns +
                      (int64_t)s->reconnect_delay * 1000000000;
    g_free(rc->why);
    rc->why = g_steal_pointer(&reason);
    ev.reason = rc->why;
    g_debug("nbd: %s: connection lost (%s); reconnecting for up to %d s",
            s->display, rc->why, s->reconnect_delay);
    bdrv_notify_event(s->bs, &ev);
    return true;
}

void nbdblk_reconnect_retired(NbdBlkState *s, NbdBlkConn *c)
{
    if (!s->reconnect_delay || s->dead_errno || s->cancelling ||
        s->rc.phase != NBDBLK_RC_IDLE) {
        return;
    }
    for (int i = 0; !c && i < s->nr_conns; i++) {
        if (s->conns[i].dead && !s->conns[i].rc_tried) {
            c = &s->conns[i];
        }
    }
    if (!c || c->rc_tried) {
        return;
    }
    c->rc_tried = true;
    nbdblk_rc_start(s, c->index);
}

void nbdblk_reconnect_stop(NbdBlkState *s, const char *why)
{
    NbdBlkReconnect *rc = &s->rc;
    BdrvEvent ev = {
        .type = BDRV_EVENT_RECONNECT_FAILED,
        .error = s->dead_errno ? s->dead_errno : rc->err,
        .reason = why,
        .elapsed_ns = clock_ns() - rc->since_ns,
    };
    bool all_down = nbdblk_reconnecting(s);

    if (rc->phase == NBDBLK_RC_IDLE) {
        return;
    }
    nbdblk_rc_end(s);
    if (all_down) {
        g_debug("nbd: %s: not reconnected: %s", s->display, why);
        bdrv_notify_event(s->bs, &ev);
    }
}

bool nbdblk_reconnect_revive(NbdBlkState *s)
{
    int err = s->dead_errno;

    if (!s->revivable || s->cancelling || s->rc.phase != NBDBLK_RC_IDLE) {
        return false;
    }
    s->revivable = false;
    s->dead_errno = 0;
    g_clear_pointer(&s->fail_reason, g_free);
    if (!nbdblk_reconnect_begin(s, err, "the server was lost before; "
                                "a new request tries again")) {
        s->dead_errno = err;
        return false;
    }
    return true;
}
