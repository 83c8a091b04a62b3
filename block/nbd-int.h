/*
 * NBD client driver internals, shared by block/nbd*.c:
 *
 *   nbd-uri.c     parse and validate URIs (block/nbd.h)
 *   nbd-conn.c    one libnbd handle: connect (blocking, control path),
 *                 disconnect, force-close
 *   nbd-source.c  a handle as a GSource on the main loop (replies)
 *   nbd-sender.c  a connection's sender thread (requests out)
 *   nbd-spread.c  at open: how many connections, how deep a window;
 *                 then which connection a request goes to
 *   nbd-io.c      requests: queueing, completions
 *   nbd-reconnect.c  a broken connection made again, on the main loop
 *   nbd.c         the driver table: open, close, limits, info
 *
 * Threading: everything runs on the main loop thread but, on a node whose
 * server is latency-bound, the calls that hand requests to libnbd and
 * write them out, which each connection's sender thread makes
 * (nbd-sender.c).  libnbd calls our completion
 * callbacks with its handle lock held, from inside nbd_aio_notify_*() or
 * nbd_aio_*(), on either thread; they only record the result and queue
 * the request on NbdBlkState.done, under done_lock.  A GSource dispatch
 * drains that queue after libnbd has returned, and only then runs upper
 * completions.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_NBD_INT_H
#define BLOCK_NBD_INT_H

#include "block/block-int.h"
#include "block/nbd.h"

#include <libnbd.h>

/* Our cap on one read or write (the NBD "SHOULD accept" size). */
#define NBDBLK_MAX_TRANSFER   (32 * 1024 * 1024)

/*
 * Cap on zero, trim and block status lengths: the protocol's 32-bit
 * length (libnbd refuses more without extended headers), rounded down to
 * 64 KiB, the largest minimum block size a server may advertise, so that
 * the pieces of a longer range stay aligned for every server.  The
 * maximum block size limits payloads only, not these.
 */
#define NBDBLK_MAX_LENGTH     ((1LL << 32) - 64 * 1024)

/* The longest a blocking wait goes without the interrupt check. */
#define NBDBLK_INTERRUPT_POLL_MS  100

/* BlockLimits.window_bytes, per connection (nbd.c). */
#define NBDBLK_WINDOW_FAST    (8 * 1024 * 1024)
#define NBDBLK_WINDOW_LATENCY (32 * 1024 * 1024)

typedef struct NbdBlkState NbdBlkState;
typedef struct NbdBlkConn NbdBlkConn;

typedef enum NbdBlkOp {
    NBDBLK_OP_READ,
    NBDBLK_OP_WRITE,
    NBDBLK_OP_ZERO,
    NBDBLK_OP_TRIM,
    NBDBLK_OP_FLUSH,
    NBDBLK_OP_STATUS,
} NbdBlkOp;

/*
 * The driver's state of one request (bdrv_req_priv() of @up), or one
 * per-connection part of a flush (allocated on its own, @up NULL).
 */
typedef struct NbdBlkReq NbdBlkReq;
struct NbdBlkReq {
    NbdBlkState *s;
    BdrvRequest *up;            /* the request it serves; NULL: a part */
    NbdBlkConn *conn;           /* while issued to libnbd */
    NbdBlkOp op;
    int64_t offset;
    int64_t bytes;              /* STATUS: what the reply may cover */
    uint32_t nbd_flags;         /* LIBNBD_CMD_FLAG_* */
    bool flush_after;           /* FUA without server FUA: write, flush */
    bool counted;               /* holds a slot in conn->in_flight */
    bool ahead;                 /* queued ahead of the others (after
                                 * those ahead already): a guest's
                                 * (BDRV_REQ_PRIO) or a retried one */
    guint first_extent;         /* STATUS: extents->len at submission */
    int64_t status_start;       /* STATUS: aligned range sent */
    int64_t status_len;
    bool status_seen;           /* STATUS: base:allocation answered */
    int ret;                    /* 0 or -errno, once known */
    int64_t issued_ns;          /* when handed to libnbd */
    NbdBlkReq *parent;          /* flush part: the whole flush */
    int parts;                  /* flush: parts not finished yet */
    GList link;                 /* in s->queued, s->done, conn->send_queue
                                 * or a local list */
};

struct NbdBlkConn {
    NbdBlkState *s;
    int index;
    struct nbd_handle *h;
    GSource *source;
    unsigned in_flight;         /* counted requests issued here */
    bool dead;                  /* libnbd handle dead or closed */
    int fail_errno;             /* why we shut it down (ETIMEDOUT,
                                 * ESHUTDOWN), or 0 */
    int64_t quiet_since_ns;     /* last reply, or the first request after
                                 * none were in flight (io-timeout);
                                 * atomic: nbdblk_conn_quiet_since() */
    uint64_t replies;           /* requests answered here (introspection;
                                 * atomic) */
    char *lost_why;             /* libnbd's word on how it died, or NULL */
    bool rc_tried;              /* retired: a background reconnect was
                                 * tried (once per retirement) */

    /* The sender thread (nbd-sender.c), once a latency-bound node is
     * open; NULL: the main loop sends. */
    GThread *sender;
    GMutex send_lock;           /* guards send_queue, send_stop */
    GQueue send_queue;          /* NbdBlkReq to hand to libnbd, in order */
    bool send_stop;
    int send_efd;               /* eventfd: wakes the sender */
    GMainContext *context;      /* the main loop's, to wake it */
};

/* c->quiet_since_ns, read and written from either thread. */
static inline int64_t nbdblk_conn_quiet_since(NbdBlkConn *c)
{
    return __atomic_load_n(&c->quiet_since_ns, __ATOMIC_RELAXED);
}

static inline void nbdblk_conn_set_quiet(NbdBlkConn *c, int64_t ns)
{
    __atomic_store_n(&c->quiet_since_ns, ns, __ATOMIC_RELAXED);
}

/* Where a reconnect is (nbd-reconnect.c). */
typedef enum NbdBlkRcPhase {
    NBDBLK_RC_IDLE,             /* none */
    NBDBLK_RC_WAIT,             /* backing off until next_try_ns */
    NBDBLK_RC_CONNECT,          /* conn.h connecting, until try_end_ns */
    NBDBLK_RC_FLUSH,            /* the first flush on the new handle */
    NBDBLK_RC_JOIN,             /* ready: joins once s->done is settled */
} NbdBlkRcPhase;

typedef struct NbdBlkReconnect {
    NbdBlkRcPhase phase;
    bool all_down;              /* every connection is down and the node's
                                 * requests are held; false: a background
                                 * one, for one retired connection */
    int slot;                   /* the conns[] entry it replaces */
    int err;                    /* what broke the link (errno) */
    char *why;                  /* ... in words */
    int64_t since_ns;           /* when */
    int64_t deadline_ns;        /* gives up then */
    int64_t next_try_ns;        /* WAIT */
    int64_t try_end_ns;         /* CONNECT: connect-timeout */
    int64_t backoff_ns;         /* the wait after the next failure */
    int flush_state;            /* FLUSH: 0 pending, 1 done, -errno */
    char *last_error;           /* the last attempt's failure */
    NbdBlkConn conn;            /* the handle being made */
    GSource *source;            /* drives it (nbd-reconnect.c) */
} NbdBlkReconnect;

struct NbdBlkState {
    BlockDriverState *bs;       /* node events */
    NbdBlkUri *uri;
    char *display;              /* the spec for messages (redacted) */
    NbdBlkConn conns[NBDBLK_MAX_CONNECTIONS];
    int nr_conns;               /* conns[0..nr_conns) are connected */
    int nr_starting;            /* conns[nr_conns..+nr_starting) are
                                 * connecting (nbdblk_connect_start_more()) */
    int nr_planned;             /* at most this many (bl.channels) */
    bool latency_bound;         /* the idle read of open was not answered
                                 * within NBDBLK_SPREAD_LATENCY_NS */
    void *probe_buf;            /* the idle read's, freed at close */
    int probe_state;            /* 0 in flight, 1 done, -1 failed */

    int64_t size;
    uint32_t min_block;         /* as advertised; 0 = not advertised */
    uint32_t pref_block;
    uint32_t max_block;
    bool read_only;
    bool can_multi_conn;
    bool can_flush;
    bool can_fua;
    bool can_zero;
    bool can_fast_zero;
    bool can_trim;
    bool can_status;            /* base:allocation negotiated */

    int next_conn;              /* where the next tie-break starts */
    GQueue queued;              /* waiting for a free slot */
    GMutex done_lock;           /* guards done (callbacks on any thread) */
    GQueue done;                /* finished, to complete from dispatch */
    int dead_errno;             /* 0 while usable, else every request
                                 * fails with -dead_errno */
    bool cancelling;            /* cancel_in_flight(): ENOTCONN means
                                 * ECANCELED */
    int nr_retired;             /* connections that died, node alive */
    int64_t nr_retried;         /* requests issued again after that */
    int connect_timeout;        /* seconds, 0: none ("connect-timeout") */
    int io_timeout;             /* seconds, 0: none ("io-timeout") */
    int reconnect_delay;        /* seconds, 0: none ("reconnect-delay") */
    NbdBlkReconnect rc;
    uint64_t nr_reconnects;     /* connections made again */
    char *fail_reason;          /* why the node failed for good, or NULL */
    bool revivable;             /* it failed because reconnect-delay ran
                                 * out: the next request starts another
                                 * reconnect (nbdblk_reconnect_revive()) */
};

/* The connect timeout in ns, 0 for none. */
static inline int64_t nbdblk_connect_timeout_ns(NbdBlkState *s)
{
    return (int64_t)s->connect_timeout * 1000 * 1000 * 1000;
}

/* ---- nbd-conn.c ---- */

/*
 * Create c->h and connect it to s->uri (blocking).  On failure sets @errp
 * (BLOCK_ERROR_OPEN, libnbd's message) and leaves c->h NULL.
 */
bool nbdblk_conn_connect(NbdBlkState *s, NbdBlkConn *c, GError **errp);

/*
 * The first step of nbdblk_conn_connect(): create c->h and begin
 * connecting; the socket's connect and the handshake go on as
 * nbdblk_conns_poll() or the handle's GSource drives it.  On failure sets
 * @errp and leaves c->h NULL.
 */
bool nbdblk_conn_start(NbdBlkState *s, NbdBlkConn *c, GError **errp);

/*
 * One poll() of at most @timeout_ms over the sockets of conns[0..@n),
 * each in the direction libnbd wants, then what was ready handed to
 * libnbd.  -1 when poll() fails or conns[0]'s handle fails (the others
 * failing leaves them dead, for their owner to see); 0 otherwise, also
 * when a signal cut the poll short.  Not for handles that have a GSource.
 */
int nbdblk_conns_poll(NbdBlkConn *conns, int n, int timeout_ms);

/*
 * Drive the started handles of conns[0..@n) (blocking) until none is
 * connecting: 0 then, -ETIMEDOUT when @timeout_ns (0: none) went by
 * first, -EINTR when the interrupt check said so, -1 when conns[0]'s
 * handle failed.  Their states tell the rest.
 */
int nbdblk_conns_wait_connected(NbdBlkConn *conns, int n,
                                int64_t timeout_ns);

/* The caller's interrupt check says give up (nbdblk_set_interrupt_func()). */
bool nbdblk_interrupted(void);

/*
 * Close c->h without waiting for the server: send NBD_CMD_DISC when the
 * connection is healthy, then nbd_close().  Requests still in flight are
 * dropped without completion (close() runs with nothing in flight).
 */
void nbdblk_conn_close(NbdBlkConn *c);

/*
 * Shut the socket of @c down so that libnbd notices on its next read and
 * fails every command in flight; never blocks.  The socket lingers 0 s:
 * its close discards what the kernel has not delivered and sends RST.
 */
void nbdblk_conn_abort(NbdBlkConn *c);

/*
 * io-timeout: how long @c (with commands in flight) has left before it is
 * stalled, in ns; INT64_MAX when it has nothing in flight or there is no
 * timeout.  Main loop, no libnbd lock held.
 */
int64_t nbdblk_conn_stall_left(NbdBlkConn *c);

/* ---- nbd-source.c ---- */

/* One fd a GSource polls, as libnbd wants it now. */
typedef struct NbdBlkFdWatch {
    int fd;                     /* -1: none */
    gpointer tag;               /* from g_source_add_unix_fd() */
    GIOCondition events;
} NbdBlkFdWatch;

/* Make @src poll @fd (-1: nothing) for @events through @w: the watch is
 * added, moved to another fd or changed as needed. */
void nbdblk_fd_watch_set(GSource *src, NbdBlkFdWatch *w, int fd,
                         GIOCondition events);

/* Attach a GSource for @c to the thread-default main context. */
void nbdblk_source_attach(NbdBlkConn *c);

/* Destroy it (safe from inside its own dispatch). */
void nbdblk_source_destroy(NbdBlkConn *c);

/* ---- nbd-sender.c ---- */

/* Start @c's sender thread (connected, its GSource attached). */
void nbdblk_sender_start(NbdBlkConn *c);

/*
 * Stop it: what was pushed is still handed to libnbd, then the thread
 * ends and is joined.  Before the handle is closed.  No-op without one.
 */
void nbdblk_sender_stop(NbdBlkConn *c);

/* Queue @req (fields set) for @c's sender thread, after those before. */
void nbdblk_sender_push(NbdBlkConn *c, NbdBlkReq *req);

/* Wake @c's sender thread: libnbd has bytes to write (its direction
 * says so after a main-loop call). */
void nbdblk_sender_kick(NbdBlkConn *c);

/* ---- nbd-spread.c: which connections take requests ---- */

/*
 * At open, with the first connection made and s->nr_planned set, before
 * the GSources are attached: decide from an idle read, waited for at most
 * 2 ms, whether the server is latency-bound (s->latency_bound), and make
 * the connections that take requests (all of them when latency-bound or
 * @asked, the count given; the first only otherwise).  Blocking, for at
 * most the connect timeout (nbd-spread.c).
 */
void nbdblk_spread_open(NbdBlkState *s, bool asked);

/* The live connection with the fewest counted requests (ties rotate), or
 * NULL; not one being shut down (fail_errno), whose death is not seen
 * yet. */
NbdBlkConn *nbdblk_pick_conn(NbdBlkState *s);

/* @req's reply arrived (req->ret set): count it on its connection.
 * Called with the handle lock held: no nbd_* calls. */
void nbdblk_spread_done(NbdBlkReq *req);

/* ---- nbd-reconnect.c ---- */

/*
 * The last live connection died (@err: ETIMEDOUT, ENOTCONN; @why: libnbd's
 * words or NULL): unless reconnect-delay is 0 or the node failed, hold its
 * requests (s->queued, which nbdblk_pump() leaves alone while no
 * connection is live) and reconnect; true then.  False: the caller fails
 * the node.
 */
bool nbdblk_reconnect_begin(NbdBlkState *s, int err, const char *why);

/*
 * Connection @c of several died and was retired: make it again in the
 * background (once per retirement, for at most reconnect-delay) unless
 * reconnect-delay is 0 or a reconnect is under way.  @c NULL: the first
 * retired connection not tried yet, if any (after a reconnect ended).
 */
void nbdblk_reconnect_retired(NbdBlkState *s, NbdBlkConn *c);

/* Is every connection down and the node reconnecting? */
static inline bool nbdblk_reconnecting(NbdBlkState *s)
{
    return s->rc.phase != NBDBLK_RC_IDLE && s->rc.all_down;
}

/*
 * Stop a reconnect (the node is cancelled, fails or closes): the handle
 * being made is closed; one that held the node's requests ends with
 * BDRV_EVENT_RECONNECT_FAILED (@why).
 */
void nbdblk_reconnect_stop(NbdBlkState *s, const char *why);

/*
 * A request comes to a node that failed because reconnect-delay ran out
 * (s->revivable): the server may be back (QEMU tries a new connection for
 * each request after its delay, so that block-job-resume goes on).  Undo
 * the failure and begin another reconnect, with the full delay; true when
 * it began (the request then waits in the queue), false when the node
 * stays failed.
 */
bool nbdblk_reconnect_revive(NbdBlkState *s);

/* ---- nbd-io.c ---- */

/*
 * Look at c->h after a libnbd call: when it has died, retire it (its
 * failed requests are issued again on the live connections) or, when it
 * was the last live one or the node is being cancelled, fail the node
 * (every queued request fails, the other connections are aborted).
 */
void nbdblk_conn_check(NbdBlkConn *c);

/*
 * Hand @req (req->conn == @c, set up by the main loop) to libnbd: the
 * sender thread's work.  A request libnbd refuses goes to s->done with
 * its error.  Touches nothing of @req after libnbd took it.
 */
void nbdblk_send(NbdBlkConn *c, NbdBlkReq *req);

/* Whether s->done holds anything (any thread). */
bool nbdblk_done_pending(NbdBlkState *s);

/*
 * Finish what is on s->done: follow-up commands, flush parts, slots, the
 * queue, and last the upper completions.  Called from dispatch; @s may be
 * freed by a completion, so nothing touches it afterwards.
 */
void nbdblk_process_done(NbdBlkState *s);

/*
 * Queue @req on @q (s->queued, or a connection's send_queue under its
 * send_lock): at the tail, or, when @req->ahead, behind the requests
 * ahead already and before every other.
 */
void nbdblk_queue_push(GQueue *q, NbdBlkReq *req);

/* Start queued requests while there are free slots on live
 * connections. */
void nbdblk_pump(NbdBlkState *s);

/* Make the node unusable: every request from now on fails with @err; a
 * reconnect stops. */
void nbdblk_set_dead(NbdBlkState *s, int err);

/* Drop requests still queued or done without completing them (close). */
void nbdblk_drop_requests(NbdBlkState *s);

/* BlockDriver aio_submit and cancel_in_flight (contracts in
 * block/block-int.h). */
void nbdblk_aio_submit(BlockDriverState *bs, BdrvRequest *breq);
void nbdblk_cancel_in_flight(BlockDriverState *bs);

#endif /* BLOCK_NBD_INT_H */
