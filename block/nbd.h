/*
 * NBD client driver: the parts other code (and tests) may use.
 *
 * Image specs are NBD URIs (doc/uri.md of the NBD project):
 *   nbd://HOST[:PORT]/EXPORT          TCP, port 10809 by default
 *   nbd+unix:///EXPORT?socket=PATH    UNIX domain socket
 *   nbds://..., nbds+unix://...       the same, TLS required
 * TLS query parameters (nbds only): tls-certificates=DIR (X.509),
 * tls-psk-file=FILE with optional tls-username=NAME (PSK),
 * tls-verify-peer=0|1.  Any URI may carry reconnect-delay=SECS (0..86400,
 * the "reconnect-delay" open option for this image; the URI's wins).
 * Every other parameter is an error.
 *
 * The parser is pure: it never touches the network or the file system, so
 * a malformed URI is refused before anything connects.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_NBD_H
#define BLOCK_NBD_H

#include "block/block.h"

/* Longest export name the NBD protocol allows, in bytes. */
#define NBDBLK_MAX_EXPORT_NAME  4096

/* Range of the "connections" open option. */
#define NBDBLK_MAX_CONNECTIONS      16

/*
 * The default of the "connections" open option: one per CPU, at most 4.
 * Each connection costs the server a reader and threads, and client and
 * server share the CPUs when both run on one machine: more connections
 * than CPUs only compete for them (bench/nbd.sh, W1 and W2).
 */
int nbdblk_default_connections(void);

/*
 * The "connect-timeout" open option, in seconds: how long opening a node
 * waits for each connection's connect and handshake before it gives up
 * (the first connection: the open fails; more connections: the node
 * keeps those it has).  0 waits as long as the server takes.  The default
 * is the handshake limit of QEMU's NBD server (qemu-nbd --handshake-limit,
 * nbd-server-start handshake-max-seconds): a QEMU server drops a client
 * that has not finished by then anyway.
 */
#define NBDBLK_DEFAULT_CONNECT_TIMEOUT  10
#define NBDBLK_MAX_TIMEOUT              (24 * 60 * 60)

/*
 * The "io-timeout" open option, in seconds: a connection with commands in
 * flight that gets no reply for that long is stalled.  It is shut down:
 * retired when the node has other live connections (its requests go to
 * them), else the node fails and its requests with ETIMEDOUT.  0: no
 * bound.  Neither QEMU's NBD client nor nbdcopy has one.  The default is
 * generous: a working server answers something well within it even at
 * our deepest queues (64 requests of up to 32 MiB per connection, or 16
 * zeroes of 2 GiB sharing one disk at 100 MB/s: 340 s for the first).
 */
#define NBDBLK_DEFAULT_IO_TIMEOUT       600

/*
 * The "reconnect-delay" open option (and URI parameter), in seconds: when
 * the last live connection of a node breaks (the server was killed or
 * restarted, the network dropped it, io-timeout found it stalled), the
 * node holds its requests and reconnects, with backoff, for up to that
 * long; then re-negotiates (the same export: size, read-only flag and the
 * features the node uses, else the node fails for good), flushes, and
 * issues again what was in flight and held, in order.  Past the delay
 * every held request fails with the error that broke the connection, as
 * with 0 (QEMU's default: no reconnect).  The default covers a server
 * restart or a failover of tens of seconds, while a peer that is truly
 * gone still fails a job within a minute; guest writes that must reach an
 * NBD source wait meanwhile.
 */
#define NBDBLK_DEFAULT_RECONNECT_DELAY  60

/*
 * Opening an NBD node blocks its caller while it connects (the control
 * path).  While it waits, @func(@opaque) is called at least every 100 ms
 * and whenever a signal interrupts the wait; when it returns true the open
 * fails at once ("interrupted while connecting").  For a program whose
 * signals are handled from its main loop: @func can dispatch what is
 * pending and say whether a signal asked it to stop.  NULL (the default)
 * removes it.  Process-wide; main loop thread only.
 */
typedef bool NbdBlkInterruptFunc(void *opaque);
void nbdblk_set_interrupt_func(NbdBlkInterruptFunc *func, void *opaque);

/* Requests in flight per connection (libnbd's advice); more wait in the
 * driver. */
#define NBDBLK_MAX_IN_FLIGHT  64
/* Preferred size of a copy operation reading an NBD node. */
#define NBDBLK_COPY_TRANSFER  (256 * 1024)

typedef enum NbdBlkTransport {
    NBDBLK_TRANSPORT_TCP,
    NBDBLK_TRANSPORT_UNIX,
} NbdBlkTransport;

/* A parsed, validated NBD URI.  Strings are decoded and owned. */
typedef struct NbdBlkUri {
    NbdBlkTransport transport;
    bool tls;                   /* nbds: TLS required, never downgraded */
    char *host;                 /* TCP: name or address, no brackets */
    char *port;                 /* TCP: decimal 1..65535 ("10809") */
    char *socket;               /* UNIX: socket path */
    char *export_name;          /* may be "" (the default export) */
    char *tls_certificates;     /* directory, or NULL */
    char *tls_psk_file;         /* file, or NULL */
    char *tls_username;         /* or NULL */
    int tls_verify_peer;        /* -1: libnbd's default, 0 or 1 */
    int reconnect_delay;        /* seconds; -1: not given */
} NbdBlkUri;

/*
 * Does @spec look like a URI this driver should answer for: any scheme
 * starting with "nbd", or any "scheme://" (so that a malformed or unknown
 * URI gets a URI error instead of "no such file")?
 */
bool nbdblk_spec_is_uri(const char *spec);

/*
 * Parse and validate @spec.  Returns a new NbdBlkUri, or NULL with @errp
 * set (BLOCK_ERROR_INVALID, one line naming the problem, quoting the spec
 * with user names redacted).
 */
NbdBlkUri *nbdblk_uri_parse(const char *spec, GError **errp);

void nbdblk_uri_free(NbdBlkUri *uri);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(NbdBlkUri, nbdblk_uri_free)

/*
 * @spec for messages: the values of tls-username= and any user info are
 * replaced by "xxx".  Returns a new string.
 */
char *nbdblk_uri_redact(const char *spec);

/*
 * Introspection for tests and `info`: the number of NBD connections @bs
 * (an open "nbd" node) uses.
 */
int nbdblk_get_connections(BlockDriverState *bs);

/*
 * How many of them take requests right now: all of them (block/nbd-spread.c
 * decides at open how many to make), less those retired since (dead, their
 * requests moved to the others).  0 if @bs is not an NBD node.
 */
int nbdblk_get_active_connections(BlockDriverState *bs);

/*
 * Introspection for tests: requests answered on connection @index of @bs
 * (an open "nbd" node), in the order the connections were made; 0 for an
 * index past them.
 */
uint64_t nbdblk_get_replies(BlockDriverState *bs, int index);

/*
 * Introspection for tests: requests of @bs issued to libnbd and holding a
 * slot (at most NBDBLK_MAX_IN_FLIGHT per connection), and requests waiting
 * in the driver for a slot.
 */
void nbdblk_get_counts(BlockDriverState *bs, unsigned *in_flight,
                       unsigned *queued);

#endif /* BLOCK_NBD_H */
