/*
 * NBD server internals, shared by nbd-server.c (listening, timeouts,
 * the API), nbd-server-conn.c (a connection's buffering, backpressure and
 * lifetime), nbd-server-opts.c (handshake and options) and
 * nbd-server-cmd.c (transmission requests), nbd-server-tls.c (TLS
 * credentials, sessions, handshake and record I/O).
 *
 * Lifetimes: a connection (NbdClient) is reference counted: one reference
 * for the open socket, one per request in flight, and a temporary one while
 * its callbacks run.  Closing the socket drops the first; a request's
 * completion drops its own, so a completion arriving after the socket died
 * finds its client still allocated (marked closed) and only frees memory.
 * The server (NbdServer) lives until nbdsrv_free() was called and the last
 * client is gone; that final release runs from an idle callback when it is
 * triggered by a completion, so the block layer never sees its node closed
 * under its own callback.
 *
 * An export (NbdExport) is reference counted too: one reference while it
 * is in the server's table (from nbdsrv_export_add() until it is removed)
 * and one per connection that selected it (NBD_OPT_GO or
 * NBD_OPT_EXPORT_NAME), held until that connection is freed, so after
 * its last request completed.  The last reference releases the export's
 * node and runs its gone callback, from an idle callback (or at once when
 * the control path dropped it): the same rule as the server's.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_EXPORT_NBD_INT_H
#define BLOCK_EXPORT_NBD_INT_H

#include "block/export/nbd-server.h"
#include "util/cutils.h"
#include "util/sockets.h"

#include <glib-unix.h>
#include <sys/types.h>

/* ---- protocol constants (doc/proto.md) ---- */

#define NBD_MAGIC_INIT          UINT64_C(0x4e42444d41474943) /* NBDMAGIC */
#define NBD_MAGIC_OPTS          UINT64_C(0x49484156454f5054) /* IHAVEOPT */
#define NBD_MAGIC_OPT_REPLY     UINT64_C(0x0003e889045565a9)
#define NBD_MAGIC_REQUEST       0x25609513u
#define NBD_MAGIC_SIMPLE_REPLY  0x67446698u
#define NBD_MAGIC_STRUCTURED    0x668e33efu

/* Handshake flags (server) and client flags */
#define NBD_FLAG_FIXED_NEWSTYLE     (1u << 0)
#define NBD_FLAG_NO_ZEROES          (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE   (1u << 0)
#define NBD_FLAG_C_NO_ZEROES        (1u << 1)

/* Transmission flags */
#define NBD_FLAG_HAS_FLAGS          (1u << 0)
#define NBD_FLAG_READ_ONLY          (1u << 1)
#define NBD_FLAG_SEND_FLUSH         (1u << 2)
#define NBD_FLAG_SEND_FUA           (1u << 3)
#define NBD_FLAG_SEND_TRIM          (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES  (1u << 6)
#define NBD_FLAG_SEND_DF            (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN     (1u << 8)
#define NBD_FLAG_SEND_FAST_ZERO     (1u << 11)

/* Options */
#define NBD_OPT_EXPORT_NAME         1
#define NBD_OPT_ABORT               2
#define NBD_OPT_LIST                3
#define NBD_OPT_STARTTLS            5
#define NBD_OPT_INFO                6
#define NBD_OPT_GO                  7
#define NBD_OPT_STRUCTURED_REPLY    8
#define NBD_OPT_LIST_META_CONTEXT   9
#define NBD_OPT_SET_META_CONTEXT    10

/* Option replies */
#define NBD_REP_ACK                 1
#define NBD_REP_SERVER              2
#define NBD_REP_INFO                3
#define NBD_REP_META_CONTEXT        4
#define NBD_REP_ERR_UNSUP           (0x80000000u + 1)
#define NBD_REP_ERR_POLICY          (0x80000000u + 2)
#define NBD_REP_ERR_INVALID         (0x80000000u + 3)
#define NBD_REP_ERR_TLS_REQD        (0x80000000u + 5)
#define NBD_REP_ERR_UNKNOWN         (0x80000000u + 6)
#define NBD_REP_ERR_SHUTDOWN        (0x80000000u + 7)
#define NBD_REP_ERR_TOO_BIG         (0x80000000u + 9)

/* NBD_REP_INFO types */
#define NBD_INFO_EXPORT             0
#define NBD_INFO_NAME               1
#define NBD_INFO_DESCRIPTION        2
#define NBD_INFO_BLOCK_SIZE         3

/* Commands and command flags */
#define NBD_CMD_READ                0
#define NBD_CMD_WRITE               1
#define NBD_CMD_DISC                2
#define NBD_CMD_FLUSH               3
#define NBD_CMD_TRIM                4
#define NBD_CMD_WRITE_ZEROES        6
#define NBD_CMD_BLOCK_STATUS        7

#define NBD_CMD_FLAG_FUA            (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE        (1u << 1)
#define NBD_CMD_FLAG_DF             (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE        (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO      (1u << 4)

/* Structured reply flags and chunk types */
#define NBD_REPLY_FLAG_DONE         (1u << 0)
#define NBD_REPLY_TYPE_NONE         0
#define NBD_REPLY_TYPE_OFFSET_DATA  1
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_ERROR        0x8001

/* base:allocation */
#define NBD_STATE_HOLE              (1u << 0)
#define NBD_STATE_ZERO              (1u << 1)

/* Error values */
#define NBD_EPERM                   1
#define NBD_EIO                     5
#define NBD_ENOMEM                  12
#define NBD_EINVAL                  22
#define NBD_ENOSPC                  28
#define NBD_EOVERFLOW               75
#define NBD_ENOTSUP                 95
#define NBD_ESHUTDOWN               108

/* Strings (export names, queries, messages) are at most this long. */
#define NBD_MAX_STRING              4096

/* Sizes of fixed messages */
#define NBD_REQUEST_SIZE            28
#define NBD_OPT_HEADER_SIZE         16
#define NBD_OPT_REPLY_HEADER_SIZE   20
#define NBD_SIMPLE_REPLY_SIZE       16
#define NBD_CHUNK_HEADER_SIZE       20

/* The id we give base:allocation in NBD_OPT_SET_META_CONTEXT. */
#define NBDSRV_META_BASE_ALLOCATION 1

/* ---- server limits ---- */

/*
 * The byte budget (request buffers plus unsent replies, see
 * NBDSRV_OUT_HELD).  Every open connection is guaranteed
 * NBDSRV_CLIENT_MIN_BYTES, enough for one request of the largest size and
 * its small replies, that no other connection can take: the server admits
 * a connection only when that guarantee fits in the budget, and a
 * connection takes more than its guarantee only from what the guarantees
 * of the open connections and of those --shared still allows leave free.
 * Beyond the guarantee a connection holds at most its share, budget / open
 * connections, and never more than NBDSRV_CLIENT_MAX_BYTES.  The budget is
 * the larger of NBDSRV_SERVER_MAX_BYTES (or what nbdsrv_set_budget() set)
 * and --shared x NBDSRV_CLIENT_MIN_BYTES.
 */
#define NBDSRV_CLIENT_MAX_BYTES     (64 * MiB)
#define NBDSRV_CLIENT_MIN_BYTES     NBDSRV_CLIENT_GUARANTEE
#define NBDSRV_SERVER_MAX_BYTES     NBDSRV_DEFAULT_BUDGET
/*
 * The gate: READs and WRITEs above NBDSRV_GATE_MIN go to the block layer
 * only while less than NBDSRV_GATE_MAX bytes of them are there, the
 * connection served longest ago first; smaller ones go at once.  Without
 * it, 40 connections' 32 MiB reads queued in the block layer's thread
 * pool ahead of another connection's 4 KiB read, which waited for all
 * of them (bench/attack.sh measures it).
 */
#define NBDSRV_GATE_MIN             (1 * MiB)
#define NBDSRV_GATE_MAX             (64 * MiB)
/* Option data we buffer; longer options are skipped and refused. */
#define NBDSRV_MAX_OPTION           (64 * KiB)
/* Bytes held by unsent option replies (their bookkeeping included) after
 * which we stop reading options until the client reads. */
#define NBDSRV_MAX_OPTION_OUTPUT    (64 * KiB)
/* A refused WRITE payload up to this long is read and dropped; a longer
 * one ends the connection after the error reply. */
#define NBDSRV_MAX_SKIP             (2 * (int64_t)NBDSRV_MAX_PAYLOAD)
#define NBDSRV_MAX_EXTENTS          1024
#define NBDSRV_RBUF_SIZE            (64 * KiB)
/* Bytes one readable dispatch takes in at most, before the loop's other
 * sources (the job) get their turn. */
#define NBDSRV_READ_BUDGET          (4 * MiB)
#define NBDSRV_READ_MAX_REQUESTS    256

/* ---- state ---- */

/* What the receive side expects next. */
typedef enum NbdRecvState {
    NBDR_CLIENT_FLAGS,      /* 32-bit client flags */
    NBDR_OPT_HEADER,        /* IHAVEOPT, option, length */
    NBDR_OPT_DATA,          /* option data into opt_data */
    NBDR_REQ_HEADER,        /* a transmission request */
    NBDR_PAYLOAD,           /* WRITE payload into payload_req->buf */
    NBDR_SKIP,              /* bytes to drop (skip_left), then skip_then */
    NBDR_TLS_HANDSHAKE,     /* after STARTTLS: the ACK, then the TLS
                             * handshake; nothing is parsed */
    NBDR_STOPPED,           /* read nothing more */
} NbdRecvState;

/* What follows a skipped run of input. */
typedef enum NbdSkipThen {
    NBDSKIP_REQ_HEADER,     /* a refused WRITE payload: next request */
    NBDSKIP_OPT_TOO_BIG,    /* an oversized option: refuse it */
} NbdSkipThen;

typedef struct NbdServer NbdServer;
typedef struct NbdClient NbdClient;
typedef struct NbdExport NbdExport;
typedef struct NbdTlsSession NbdTlsSession;

/* A transmission request header, decoded. */
typedef struct NbdRequestHeader {
    uint32_t magic;
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t len;
} NbdRequestHeader;

/* One request from when its header is read until its reply is queued. */
typedef struct NbdRequest {
    NbdClient *client;
    NbdRequestHeader h;
    uint8_t *buf;           /* READ/WRITE data (bdrv_blockalign) */
    uint64_t held;          /* bytes of buf counted in the held budget */
    uint32_t got;           /* WRITE payload bytes received */
    GArray *extents;        /* BLOCK_STATUS */
    bool gated;             /* counted in srv->gate_bytes */
    GList gate_link;        /* in srv->gate_wait */
} NbdRequest;

/* One export of a server (nbd-server-export.c). */
struct NbdExport {
    NbdServer *srv;
    GList link;             /* in srv->exports while listed, then in
                             * srv->dead once released */
    int refcnt;             /* see the lifetime rules above */
    bool listed;            /* in srv->exports: clients can select it */
    char *name;
    char *description;      /* NULL: no NBD_INFO_DESCRIPTION */
    BlockDriverState *bs;   /* one reference */
    bool read_only;
    uint64_t size;
    uint32_t min_block, pref_block, max_block;
    unsigned clients;       /* open connections that selected it */
    uint64_t in_flight;     /* their requests not yet completed */
    void (*gone)(void *opaque);
    void *gone_opaque;
};

struct NbdClient {
    NbdServer *srv;
    NbdExport *exp;         /* selected (a reference), or NULL */
    GList link;             /* in srv->clients */
    int refcnt;
    int fd;
    bool closed;            /* socket gone; requests may still complete */
    GSource *in_src;
    GSource *out_src;
    GSource *kick_src;      /* idle: resume parsing buffered input */
    bool yielded;           /* at the default priority until srv's
                             * fair_src ran */

    /* TLS (nbd-server-tls.c): a session from NBD_OPT_STARTTLS on; all
     * I/O goes through it once tls_ready. */
    NbdTlsSession *tls;
    bool tls_ready;         /* handshake done and the client authorized */
    bool tls_want_write;    /* the handshake waits for the socket to
                             * take data (else to have some) */
    uint8_t *tls_stage;     /* NBDSRV_TLS_RECORD: small pieces of output
                             * gathered into one record */

    /* receive side */
    NbdRecvState rstate;
    uint8_t *rbuf;          /* NBDSRV_RBUF_SIZE, allocated on first read */
    size_t rpos, rlen;      /* unparsed input is rbuf[rpos, rlen) */
    uint64_t skip_left;
    NbdSkipThen skip_then;
    NbdRequest *payload_req;    /* WRITE receiving its payload */
    gint64 payload_since_us;    /* when the WRITE payload (or a refused
                                 * one being skipped) was announced */
    bool paused;            /* stopped parsing at a limit */
    bool wait_global;       /* ... the server-wide byte limit */
    bool finishing;         /* close once in flight == 0 and output sent */

    /* negotiation */
    bool transmission;      /* handshake done */
    bool no_zeroes;
    bool structured;
    bool meta_base_alloc;   /* base:allocation selected */
    bool check_align;       /* the client agreed to our block sizes */
    uint32_t opt;
    uint32_t opt_len;
    uint8_t *opt_data;
    uint32_t opt_got;
    gint64 connected_us;

    /* transmission */
    uint64_t gate_seq;      /* when it last got a large request through */
    unsigned in_flight;     /* requests holding a reference */
    uint64_t held;          /* request buffers + unsent output bytes */

    /* send side */
    GQueue out;             /* NbdOut */
    uint64_t out_bytes;
    gint64 out_since_us;    /* last progress while output was pending */
};

struct NbdServer {
    GMainContext *ctx;
    GQueue exports;         /* NbdExport, listed, oldest first */
    /* nbdsrv_new()'s export: the empty name selects it too.  NULL: only
     * an export named "" answers to the empty name. */
    NbdExport *default_exp;
    /* Advertise multi-conn even with one connection allowed
     * (nbdsrv_new()'s, as before); else only with more, as QEMU. */
    bool multi_conn_always;
    GQueue dead;            /* NbdExport whose last reference is gone */
    GSource *reap_src;      /* idle: release srv->dead */

    int listen_fd;
    GSource *listen_src;
    GSource *accept_retry_src;  /* accept paused after EMFILE */
    GSource *tick_src;
    GSource *final_src;
    SocketUnixListener unix_listener;   /* unix:PATH; fd -1 for TCP */
    int port;               /* TCP port, or -1 */

    GQueue clients;         /* every NbdClient still allocated */
    unsigned live_clients;  /* ... with an open socket */
    unsigned max_clients;   /* --shared */
    uint64_t budget_base;   /* nbdsrv_set_budget() */
    uint64_t in_flight;
    uint64_t held;
    uint64_t committed;     /* sum of nbdsrv_client_commit() */
    GQueue gate_wait;       /* large requests waiting for the gate */
    uint64_t gate_bytes;    /* large requests' bytes in the block layer */
    uint64_t gate_seq;
    unsigned global_waiters;
    bool shutting_down;
    bool freed;
    struct NbdClose *closing;   /* nbdsrv_close() in progress, or NULL */
    GSource *drained_src;       /* idle: ... its connections are gone */
    int64_t handshake_timeout_ms;
    int64_t stall_timeout_ms;
    int64_t payload_timeout_ms;
    char *addr;             /* as given, PORT 0 replaced by the port */
    NbdTlsCreds *tls;       /* NULL: no TLS */
    bool guest_priority;    /* nbdsrv_set_guest_priority() */
    unsigned prio_turns;    /* dispatches at guest priority since the
                             * default-priority sources last had a turn */
    GSource *fair_src;      /* idle: yielded connections back to guest
                             * priority */
    NbdServerStats stats;
};

/*
 * The priority of @c's sources (read and write watches, idle kick).  With
 * guest priority it is NBDSRV_GUEST_PRIORITY, above the default priority
 * of every other source of the loop (the block layer's completions, the
 * job's timers, the listening socket, QMP), so that a guest request that
 * arrives while job completions are ready is read and submitted first.
 * It cannot starve the rest: a connection stops reading at its request
 * and byte limits, and its requests complete, and free those limits, only
 * through the block layer's default-priority sources; a connection with
 * nothing to read or send has no source ready at all.  Requests answered
 * without the block layer (errors, empty ones) hold no limit, so a client
 * sending nothing else could keep its sources ready; so every
 * NBDSRV_PRIO_TURNS dispatches at guest priority, of all connections
 * together, every connection yields, at the default priority, until the
 * default-priority sources had a turn (nbdsrv_client_turn()).
 */
static inline int nbdsrv_client_priority(NbdClient *c)
{
    return c->srv->guest_priority && !c->yielded ? NBDSRV_GUEST_PRIORITY
                                                 : G_PRIORITY_DEFAULT;
}

/* Count a dispatch of @c's sources (see nbdsrv_client_priority()). */
void nbdsrv_client_turn(NbdClient *c);

/* The request flags of @srv's requests to its nodes. */
static inline BdrvRequestFlags nbdsrv_req_flags(NbdServer *srv)
{
    return srv->guest_priority ? BDRV_REQ_PRIO : 0;
}

/* ---- block/export/nbd-server.c: the server ---- */

/* An fd watch / a timer (0 ms: an idle) at GLib @priority on the
 * server's context; the caller owns the returned reference. */
GSource *nbdsrv_fd_watch(NbdServer *srv, int priority, int fd,
                         GIOCondition cond, GUnixFDSourceFunc fn,
                         void *opaque);
GSource *nbdsrv_timer(NbdServer *srv, int priority, guint ms,
                      GSourceFunc fn, void *opaque);
/* Destroy and unref *@src (if any); safe inside its own dispatch. */
void nbdsrv_source_clear(GSource **src);

/* Release the server: no client is left. */
void nbdsrv_finalize(NbdServer *srv);

/* A connection was freed: when nbdsrv_close() waits and none is left, it
 * goes on (from an idle callback). */
void nbdsrv_check_drained(NbdServer *srv);

/* ---- nbd-server-export.c: the export table ---- */

/* The listed export named @name (@len bytes, not NUL-terminated), with
 * the empty name also selecting srv->default_exp; NULL if none. */
NbdExport *nbdsrv_export_lookup(NbdServer *srv, const uint8_t *name,
                                uint32_t len);

/* Take / drop a reference on @exp (see the lifetime rules above).  The
 * last one goes through srv->dead, released from an idle callback. */
void nbdsrv_export_ref(NbdExport *exp);
void nbdsrv_export_unref(NbdExport *exp);

/* Release every export on srv->dead now (their nodes, gone callbacks). */
void nbdsrv_export_reap(NbdServer *srv);

/* Unlist every export (as a hard removal) for nbdsrv_free(). */
void nbdsrv_export_remove_all(NbdServer *srv);

/* Accept connections only while there is room for one more (a slot and
 * its guarantee); call when either may have changed. */
void nbdsrv_update_listen(NbdServer *srv);

/* The byte budget: MAX(budget_base, max_clients x CLIENT_MIN_BYTES). */
uint64_t nbdsrv_budget(NbdServer *srv);

/* ---- nbd-server-conn.c: connections ---- */

/* A connection accepted on @fd (non-blocking): greet it. */
void nbdsrv_client_new(NbdServer *srv, int fd);

void nbdsrv_client_ref(NbdClient *c);
void nbdsrv_client_unref(NbdClient *c);

/* Drop the connection now (hard disconnect); @protocol_error counts it. */
void nbdsrv_client_close(NbdClient *c, bool protocol_error);

/*
 * Queue @hdr_len bytes of @hdr (copied) followed by @data_len bytes of
 * @data (owned from now on, freed with @free_data) for sending.  A closed
 * client frees @data at once.
 */
void nbdsrv_client_queue(NbdClient *c, const void *hdr, size_t hdr_len,
                         void *data, size_t data_len,
                         GDestroyNotify free_data);

/*
 * Take @bytes of the connection and server buffer budget for a new
 * request.  Returns false when a limit is reached: the client is paused
 * and resumed when budget frees up.
 */
bool nbdsrv_client_reserve(NbdClient *c, uint64_t bytes);

/* Bytes of the budget @c accounts for: what it holds, and while its
 * socket is open at least its guarantee (NBDSRV_CLIENT_MIN_BYTES). */
uint64_t nbdsrv_client_commit(NbdClient *c);

/* Most bytes @c may hold when taking more: its share of the budget. */
uint64_t nbdsrv_client_share(NbdClient *c);

/* Give back budget taken by nbdsrv_client_reserve(). */
void nbdsrv_client_release(NbdClient *c, uint64_t bytes);

/* Close once nothing is in flight and all output is sent (DISC, ABORT,
 * a fatal error reply); nothing more is read. */
void nbdsrv_client_finish(NbdClient *c);

/* Re-evaluate the fd watches after a state change. */
void nbdsrv_client_update(NbdClient *c);

/* A request starts (takes a client reference) / ends (drops it). */
NbdRequest *nbdsrv_req_new(NbdClient *c, const NbdRequestHeader *h);
void nbdsrv_req_free(NbdRequest *req);

/* ---- nbd-server-opts.c: handshake ---- */

/* Queue the greeting (NBDMAGIC, IHAVEOPT, handshake flags). */
void nbdsrv_opts_greet(NbdClient *c);
/* The client flags arrived. */
void nbdsrv_opts_client_flags(NbdClient *c, uint32_t flags);
/* An option header arrived: set up receiving (or skipping) its data. */
void nbdsrv_opts_header(NbdClient *c, uint64_t magic, uint32_t opt,
                        uint32_t len);
/* The option's data is in c->opt_data (or was skipped: @too_big). */
void nbdsrv_opts_handle(NbdClient *c, bool too_big);

/* ---- nbd-server-tls.c: TLS ---- */

/* Plaintext bytes of one TLS record at most (the protocol's maximum): what
 * one nbdsrv_tls_send() takes at most. */
#define NBDSRV_TLS_RECORD           (16 * KiB)

/*
 * Start a server TLS session on @c's socket with the server's credentials
 * (c->tls); nothing is sent or read yet.  False on failure (out of memory
 * in GnuTLS): close the client.
 */
bool nbdsrv_tls_start(NbdClient *c);

/*
 * Advance the handshake of @c as far as the socket allows.  Returns 1 when
 * it is done and the client passed the authorization list (c->tls_ready
 * set), 0 when it must wait for the socket (c->tls_want_write says which
 * way), -1 when it failed or the client is refused (counted in the
 * server's stats): close the client.
 */
int nbdsrv_tls_handshake(NbdClient *c);

/*
 * Like recv() on a non-blocking socket, through TLS: the bytes read (at
 * most @len, at most one record), 0 at the end of the stream, or -1 with
 * errno EAGAIN (nothing now) or another error (close the client).
 */
ssize_t nbdsrv_tls_recv(NbdClient *c, void *buf, size_t len);

/*
 * Send at most one record of @buf (@len > 0 bytes) through TLS.  Returns
 * the bytes sent, or -1 with errno EAGAIN when the socket is full: the
 * record is then encrypted and held inside GnuTLS (one record at most, a
 * copy of bytes the caller still holds), and the next call must pass data
 * that starts with the same bytes; it returns the count of the first call.
 * -1 with another errno: close the client.
 */
ssize_t nbdsrv_tls_send(NbdClient *c, const void *buf, size_t len);

/*
 * Whether input is buffered past the socket (decrypted inside GnuTLS, or
 * read from the socket and not yet decrypted): the fd does not show it,
 * so the reader must run without waiting for the fd to become readable.
 */
bool nbdsrv_tls_pending(NbdClient *c);

/* End @c's session (a best-effort close_notify) and free it; before the
 * socket is closed. */
void nbdsrv_tls_stop(NbdClient *c);

/* ---- nbd-server-cmd.c: transmission ---- */

/*
 * A request header is at the front of the input.  Returns false, leaving
 * it there, when the client had to pause for budget; otherwise the header
 * is handled (the caller consumes it).
 */
bool nbdsrv_cmd_start(NbdClient *c, const NbdRequestHeader *h);
/* The WRITE payload of c->payload_req is complete. */
void nbdsrv_cmd_payload_done(NbdClient *c);
/* @c is closing: drop its requests still waiting for the gate. */
void nbdsrv_cmd_drop_waiting(NbdClient *c);
/* Transmission flags for @c on @exp. */
uint16_t nbdsrv_cmd_transmission_flags(NbdClient *c, NbdExport *exp);

/* ---- byte order helpers ---- */

static inline void nbdsrv_put16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v;
}

static inline void nbdsrv_put32(uint8_t *p, uint32_t v)
{
    nbdsrv_put16(p, v >> 16);
    nbdsrv_put16(p + 2, v);
}

static inline void nbdsrv_put64(uint8_t *p, uint64_t v)
{
    nbdsrv_put32(p, v >> 32);
    nbdsrv_put32(p + 4, v);
}

static inline uint16_t nbdsrv_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t nbdsrv_get32(const uint8_t *p)
{
    return (uint32_t)nbdsrv_get16(p) << 16 | nbdsrv_get16(p + 2);
}

static inline uint64_t nbdsrv_get64(const uint8_t *p)
{
    return (uint64_t)nbdsrv_get32(p) << 32 | nbdsrv_get32(p + 4);
}

#endif /* BLOCK_EXPORT_NBD_INT_H */
