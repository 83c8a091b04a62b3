/*
 * NBD server exporting block nodes (guest I/O enters the block layer
 * here): one server, one listening socket, any number of named exports.
 *
 * The server speaks the fixed newstyle protocol of the NBD project's
 * doc/proto.md: NBD_OPT_EXPORT_NAME, ABORT, LIST, INFO, GO (export, name,
 * description and block size information), STRUCTURED_REPLY, STARTTLS
 * (with nbdsrv_set_tls(): X.509 or PSK through GnuTLS) and the
 * base:allocation meta context; READ, WRITE (with FUA), FLUSH, TRIM,
 * WRITE_ZEROES (NO_HOLE, FAST_ZERO), BLOCK_STATUS (REQ_ONE) and DISC.  It
 * runs entirely on the thread-default main context of the caller of
 * nbdsrv_new(): non-blocking sockets, one fd watch per direction, requests
 * through block/io.c, no threads.  A misbehaving client only ever loses its
 * own connection.
 *
 * Limits (per connection unless said otherwise): 64 requests in flight;
 * reads and writes of at most 32 MiB; 16 connections (nbdsrv_set_shared());
 * a byte budget for request buffers plus unsent replies of 1 GiB (or
 * connections x 33 MiB if more) over all connections, of which every
 * connection is guaranteed 33 MiB (one request of the largest size) and
 * may hold at most its share (budget / connections, 64 MiB at most); 64 KiB
 * of unsent handshake replies; with TLS, 128 KiB of ciphertext read
 * ahead, 16 KiB of replies gathered into a record and one encrypted record
 * GnuTLS holds while the socket is full (a copy of replies still counted);
 * READs and WRITEs above 1 MiB enter the block layer only while less than
 * 64 MiB of them are there (the connection served longest ago first).  At a limit the server stops
 * reading from that socket until replies are sent and requests complete,
 * so a client that stops reading or sending only stalls itself.  A client
 * that leaves replies unread for the stall timeout (30 s), has not
 * finished the handshake after the handshake timeout (10 s) or has not
 * sent a WRITE payload within the payload timeout (30 s) of its header is
 * disconnected.  These limits are the server's, shared by all its exports.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_EXPORT_NBD_H
#define BLOCK_EXPORT_NBD_H

#include "block/block.h"

/* Largest READ or WRITE payload accepted (the advertised maximum block
 * size). */
#define NBDSRV_MAX_PAYLOAD          (32 * 1024 * 1024)

/* Requests one connection may have in flight before the server stops
 * reading from it. */
#define NBDSRV_MAX_CLIENT_REQUESTS  64

/* Connections served at once (qemu-nbd's --shared): default and maximum. */
#define NBDSRV_DEFAULT_SHARED       16
#define NBDSRV_MAX_SHARED           1024

/* Default payload timeout (see nbdsrv_set_payload_timeout()). */
#define NBDSRV_DEFAULT_PAYLOAD_MS   30000

/* Default handshake and stall timeouts (see nbdsrv_set_timeouts()). */
#define NBDSRV_DEFAULT_HANDSHAKE_MS 10000
#define NBDSRV_DEFAULT_STALL_MS     30000

/*
 * Default byte budget (see nbdsrv_set_budget()), and the part of it every
 * open connection is guaranteed: one request of the largest size and its
 * small replies.  The budget is never below --shared guarantees.
 */
#define NBDSRV_DEFAULT_BUDGET       ((uint64_t)1024 * 1024 * 1024)
#define NBDSRV_CLIENT_GUARANTEE     ((uint64_t)NBDSRV_MAX_PAYLOAD + \
                                     1024 * 1024)
/* Largest budget the command line takes (a sanity bound, 1 TiB). */
#define NBDSRV_MAX_BUDGET           ((int64_t)1 << 40)

typedef struct NbdServer NbdServer;

/* Counters since nbdsrv_new(), for tests and diagnostics. */
typedef struct NbdServerStats {
    uint64_t accepted;          /* connections accepted */
    uint64_t full;              /* times accepting stopped for lack of
                                 * room: --shared connections are open, or
                                 * the budget has no guarantee left */
    uint64_t protocol_errors;   /* connections dropped for breaking the
                                 * protocol (bad magic, flags, framing) */
    uint64_t timeouts;          /* dropped by the handshake, stall or
                                 * payload timeout */
    uint64_t requests;          /* transmission requests received */
    uint64_t errors;            /* ... answered with an error */
    uint64_t max_client_in_flight;  /* most requests one connection had in
                                     * flight at once */
    uint64_t max_held_bytes;    /* most bytes of request buffers and unsent
                                 * replies held at once, all connections */
    uint64_t tls_handshakes;    /* TLS handshakes completed (authorized or
                                 * not) */
    uint64_t tls_failures;      /* TLS handshakes that failed: an alert, a
                                 * bad record, a client certificate that
                                 * does not verify, an unknown PSK user */
    uint64_t tls_refused;       /* clients dropped after the handshake by
                                 * the --tls-authz list */
    uint64_t tls_required;      /* options answered NBD_REP_ERR_TLS_REQD
                                 * (or NBD_OPT_EXPORT_NAME closed) for want
                                 * of TLS */
    uint64_t prio_yields;       /* times the connections, at guest
                                 * priority, let the default-priority
                                 * sources run (NBDSRV_PRIO_TURNS) */
} NbdServerStats;

/*
 * Start serving @bs on @addr, which is "unix:PATH" or "tcp:HOST:PORT"
 * (HOST a name or a numeric address such as 127.0.0.1, ::1, [::1] or
 * 0.0.0.0; PORT 0 picks a free port, see nbdsrv_get_port()).  A UNIX
 * socket left behind by a dead server is replaced; a live one, or any
 * other file at PATH, is an error.
 *
 * @export_name (NULL means "") is the name clients ask for; the empty name
 * (the default export) always selects this export too.  With @read_only
 * the export refuses writes (EPERM) and says so; otherwise @bs must be
 * writable.
 *
 * Takes a reference on @bs.  Control path: may block (name resolution).
 * Returns NULL with @errp set on failure.
 */
NbdServer *nbdsrv_new(BlockDriverState *bs, const char *addr,
                      const char *export_name, bool read_only,
                      GError **errp);

/*
 * Start listening on @addr (as nbdsrv_new() takes it) with no export yet:
 * until nbdsrv_export_add(), every export name is unknown
 * (NBD_REP_ERR_UNKNOWN) and NBD_OPT_LIST is empty.  Unlike nbdsrv_new()'s
 * export, the empty name selects only an export named "", and with
 * nbdsrv_set_shared() at 1 the exports do not advertise multi-conn (as
 * QEMU's max-connections=1; nbdsrv_new()'s always does).  Control path:
 * may block (name resolution).  NULL with @errp set on failure.
 */
NbdServer *nbdsrv_listen(const char *addr, GError **errp);

typedef struct NbdExport NbdExport;

/*
 * Serve @bs (a reference taken) as the export @name (at most 4096 bytes of
 * UTF-8, "" allowed) of @srv from now on, writable when @writable (@bs
 * must then be writable), with the NBD_INFO_DESCRIPTION @description (NULL:
 * none; at most 4096 bytes of UTF-8).  NULL with @errp set
 * (BLOCK_ERROR_INVALID, worded as QEMU's block-export-add: "NBD server
 * already has export named 'NAME'", "export name 'NAME' too long",
 * "description 'TEXT' too long", "Cannot export read-only node as
 * writable"; BLOCK_ERROR_IO when the size of @bs cannot be read).  The
 * export is @srv's: it stays valid until its gone callback ran (see
 * nbdsrv_export_set_gone_cb()).
 */
NbdExport *nbdsrv_export_add(NbdServer *srv, BlockDriverState *bs,
                             const char *name, const char *description,
                             bool writable, GError **errp);

/* The export of @srv clients select by @name (not one being removed), or
 * NULL. */
NbdExport *nbdsrv_export_find(NbdServer *srv, const char *name);

/*
 * Call @fn(@opaque) once when @exp is gone: removed (or its server freed),
 * its last request completed and its node's reference dropped.  @exp is
 * freed right after @fn returns.  It runs from the main loop, or inside
 * nbdsrv_export_remove() / nbdsrv_free() when nothing was in flight.
 */
void nbdsrv_export_set_gone_cb(NbdExport *exp, void (*fn)(void *opaque),
                               void *opaque);

/*
 * Remove @exp (QEMU's block-export-del): clients can no longer select it
 * and it leaves NBD_OPT_LIST; the other exports go on serving.  With
 * @hard the connections that selected it are dropped at once; without,
 * they go on until they disconnect (QEMU's "safe" mode refuses instead:
 * check nbdsrv_export_in_use() first).  @exp is gone (its gone callback
 * runs) once those connections are freed, so after their requests in
 * flight completed: before this returns if none is left.  Removing it
 * again is a no-op.
 */
void nbdsrv_export_remove(NbdExport *exp, bool hard);

/* Whether a connection (open, or closed with requests still in flight)
 * has @exp selected: what QEMU's safe block-export-del refuses. */
bool nbdsrv_export_in_use(NbdExport *exp);

/* Whether @exp was removed (it is gone once its requests completed). */
bool nbdsrv_export_is_removed(NbdExport *exp);

/* Open connections that selected @exp. */
unsigned nbdsrv_export_get_client_count(NbdExport *exp);

/* Requests to @exp received and not yet completed, including those of
 * connections already closed. */
uint64_t nbdsrv_export_get_in_flight(NbdExport *exp);

/*
 * TLS credentials (GnuTLS inside; nothing of it in this header).  One kind
 * per server, as qemu-nbd and nbdkit: X.509 certificates or pre-shared
 * keys.  A server with credentials answers NBD_OPT_STARTTLS with
 * NBD_REP_ACK and a TLS handshake (doc/proto.md "TLS support"); with
 * @require it is in FORCEDTLS mode: every option before STARTTLS but
 * NBD_OPT_ABORT gets NBD_REP_ERR_TLS_REQD, and NBD_OPT_EXPORT_NAME closes
 * the connection.  Without @require plain clients are served too.
 */
typedef struct NbdTlsConfig {
    /*
     * X.509: a directory in qemu-nbd's layout: ca-cert.pem (the CA that
     * signs client certificates), server-cert.pem, server-key.pem, and
     * ca-crl.pem if present.  NULL: not X.509.
     */
    const char *x509_dir;
    /* PSK: a file of "username:hexkey" lines (nbdkit's and psktool's
     * format; empty lines are ignored).  NULL: not PSK. */
    const char *psk_file;
    /* X.509: ask for a client certificate and drop a client whose
     * certificate is missing, not signed by ca-cert.pem, revoked, expired
     * or not yet valid.  Ignored for PSK (the key authenticates both). */
    bool verify_peer;
    bool require;               /* FORCEDTLS, see above */
    /*
     * NULL-terminated; NULL or empty: every authenticated client may
     * connect.  Otherwise only these: for X.509 each entry is one subject
     * distinguished name exactly as GnuTLS prints it (RFC 4514, e.g.
     * "CN=client,O=Example", what `certtool -i` shows after "Subject:"),
     * which needs @verify_peer; for PSK each entry is a comma-separated
     * list of user names.
     */
    const char *const *authz;
} NbdTlsConfig;

typedef struct NbdTlsCreds NbdTlsCreds;

/*
 * Load and check everything @cfg names (exactly one of x509_dir and
 * psk_file): the files are read now and never again.  Returns NULL with
 * @errp set (BLOCK_ERROR_INVALID) naming the file, and for a PSK file the
 * line number, and what is wrong, e.g. "'DIR': server-key.pem: No such
 * file or directory" or "'FILE': line 3: the key is not hexadecimal"; no
 * message ever contains a key, a user name or a file's content.  Control
 * path: blocks on file I/O.  Free with nbdsrv_tls_creds_free().
 */
NbdTlsCreds *nbdsrv_tls_creds_new(const NbdTlsConfig *cfg, GError **errp);

/* Free @creds, zeroing the key material it holds.  NULL is ignored. */
void nbdsrv_tls_creds_free(NbdTlsCreds *creds);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(NbdTlsCreds, nbdsrv_tls_creds_free)

/*
 * Serve TLS with @creds (owned by @srv from now on; NULL: no TLS, the
 * default, which answers NBD_OPT_STARTTLS with NBD_REP_ERR_UNSUP).  Call
 * it right after nbdsrv_new(), before the main loop runs: connections
 * already open keep the mode they started with.
 */
void nbdsrv_set_tls(NbdServer *srv, NbdTlsCreds *creds);

/* Whether @creds make their server refuse plain clients (@require). */
bool nbdsrv_tls_creds_required(const NbdTlsCreds *creds);

/*
 * Whether a server on @addr (as nbdsrv_new() takes it) would be reachable
 * from other hosts: *@remote is true for a tcp:HOST:PORT whose HOST
 * resolves to any address but a loopback one (0.0.0.0 and :: listen on
 * every interface); false for loopback addresses and unix:PATH.  Callers
 * refuse a remote address to a server that serves plain clients unless
 * told otherwise (--insecure).  Control path: may block (name resolution).
 * False with @errp set (BLOCK_ERROR_INVALID) when a TCP address is
 * malformed or does not resolve.
 */
bool nbdsrv_addr_is_remote(const char *addr, bool *remote, GError **errp);

/*
 * Stop listening (a UNIX socket file is removed) and drop every
 * connection at once.  Requests already submitted to @bs keep running:
 * their completions arrive later and only release memory, and the last one
 * drops the reference on @bs from an idle callback on the main context.
 * When nothing is in flight (see nbdsrv_is_drained()) everything, the
 * reference on @bs included, is released before this returns.  NULL is
 * ignored.
 */
void nbdsrv_free(NbdServer *srv);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(NbdServer, nbdsrv_free)

/*
 * Graceful stop: stop listening (removing a UNIX socket file), close
 * connections still negotiating, and let every connection in transmission
 * finish the requests it sent (no new ones are read) and receive their
 * replies; then it is closed.  Run the main loop until nbdsrv_is_drained(),
 * with a deadline of your choice, then call nbdsrv_disconnect_all() or
 * nbdsrv_free().  Idempotent.
 */
void nbdsrv_shutdown(NbdServer *srv);

/*
 * Drop every connection now, without waiting for replies.  Requests in
 * flight still complete later (see nbdsrv_free()).  The server keeps
 * listening unless nbdsrv_shutdown() was called.
 */
void nbdsrv_disconnect_all(NbdServer *srv);

/* True when no connection is open and no request is in flight. */
bool nbdsrv_is_drained(NbdServer *srv);

/*
 * Stop @srv at exit, as the last user of the images it serves: shut down
 * (nbdsrv_shutdown()), let the connections finish for at most
 * @timeout_ms, then drop the rest; once every request completed, flush
 * the node of each export and free @srv (taken over).  Then @cb(@opaque,
 * ret) runs from the main loop with 0 or the first flush error (-errno):
 * the caller runs the loop until then.  Guests need not have flushed
 * their last writes; this flush makes them durable.
 */
void nbdsrv_close(NbdServer *srv, unsigned timeout_ms,
                  void (*cb)(void *opaque, int ret), void *opaque);

/* The TCP port the server listens on (useful with PORT 0), or -1 for a
 * UNIX socket. */
int nbdsrv_get_port(NbdServer *srv);

/* Open connections (negotiating or in transmission). */
unsigned nbdsrv_get_client_count(NbdServer *srv);

/* Requests received and not yet completed by the block layer, including
 * those of connections already closed. */
uint64_t nbdsrv_get_in_flight(NbdServer *srv);

/* Bytes of request buffers and unsent replies held now. */
uint64_t nbdsrv_get_held_bytes(NbdServer *srv);

void nbdsrv_get_stats(NbdServer *srv, NbdServerStats *stats);

/*
 * Change the handshake timeout (a connection must reach transmission
 * within it) and the stall timeout (a connection whose unsent replies make
 * no progress for that long is dropped), in milliseconds; 0 disables one.
 * Defaults: 10000 and 30000.
 */
void nbdsrv_set_timeouts(NbdServer *srv, int64_t handshake_ms,
                         int64_t stall_ms);

/*
 * The payload timeout in milliseconds (0 disables it): a connection that
 * has not sent the whole payload of a WRITE this long after its header is
 * dropped, and the buffer reserved for it is freed.  Default 30000.
 */
void nbdsrv_set_payload_timeout(NbdServer *srv, int64_t payload_ms);

/*
 * Serve at most @shared connections at once (1..NBDSRV_MAX_SHARED, default
 * NBDSRV_DEFAULT_SHARED).  At the limit the server stops accepting, as
 * qemu-nbd does: new connections wait in the listen backlog until one
 * ends.  Connections already open stay.  Raising it above 31 raises the byte
 * budget to @shared x 33 MiB (see block/export/nbd-server-int.h).
 */
void nbdsrv_set_shared(NbdServer *srv, unsigned shared);

/*
 * The byte budget over all connections (default NBDSRV_DEFAULT_BUDGET,
 * 1 GiB); the server uses the larger of @bytes and shared x
 * NBDSRV_CLIENT_GUARANTEE (33 MiB), so that every connection keeps its
 * guarantee.  `serve --budget` and `start --export-budget` set it.
 */
void nbdsrv_set_budget(NbdServer *srv, uint64_t bytes);

/* The address clients use: the ADDR given to nbdsrv_new() with a TCP
 * PORT 0 replaced by the bound port.  Owned by the server. */
const char *nbdsrv_get_address(NbdServer *srv);

/* GLib priority of the connections' sources with guest priority. */
#define NBDSRV_GUEST_PRIORITY       (G_PRIORITY_DEFAULT - 10)

/* Every so many dispatches of the connections' sources at guest
 * priority (all connections together), the default-priority sources get
 * a turn before the next one. */
#define NBDSRV_PRIO_TURNS           64

/*
 * Guest priority (default off): the export's clients are the guest, and
 * their requests go ahead of the node's other I/O (a mirror job's).  When
 * on, every request the server submits carries BDRV_REQ_PRIO (served
 * first at every queue of the block layer), and the connections' sources
 * (socket watches, idle kicks) run at NBDSRV_GUEST_PRIORITY, above the
 * default priority of the loop's other sources, so that a request that
 * arrives while completions of the job are ready is read and submitted
 * before they run.  The listening socket and the server's timers stay at
 * the default priority.  Call it right after nbdsrv_new(), before the
 * main loop runs.
 */
void nbdsrv_set_guest_priority(NbdServer *srv, bool on);

/* The NBD_INFO_DESCRIPTION text of nbdsrv_new()'s export (default
 * "qemu-mirror export (FORMAT)").  At most 4096 bytes of UTF-8; returns
 * false otherwise. */
bool nbdsrv_set_description(NbdServer *srv, const char *description);

#endif /* BLOCK_EXPORT_NBD_H */
