/*
 * `mirror-tool daemon`: one long-running process whose nodes, exports and
 * jobs are all made and removed over QMP (and its command line), as
 * qemu-storage-daemon's are.  This header is what the daemon's parts
 * share:
 *
 *   daemon.c      the Daemon: its QMP server, main loop, signals, `quit`,
 *                 query-version, query-commands (cmd-daemon.c parses the
 *                 command line: --qmp, --blockdev, --object, --nbd-server,
 *                 --export, which run the same handlers as QMP does);
 *   qmp-block.c   the node registry: blockdev-add, blockdev-del,
 *                 query-named-block-nodes, object-add, object-del;
 *   qmp-export.c  nbd-server-start/stop, block-export-add/del,
 *                 query-block-exports;
 *   qmp-mirror.c  blockdev-mirror, drive-mirror, and the jobs
 *                 (qmp-job.c's commands over every job of the daemon).
 *
 * Everything runs on the main loop; nothing here is thread-safe.  QEMU's
 * names, argument names, defaults, error classes and error messages are
 * the reference (../shared/reference/, qemu-storage-daemon 7.2 in CI).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef DAEMON_H
#define DAEMON_H

#include <glib.h>
#include <stdbool.h>

#include "block/block.h"
#include "block/mirror/job.h"
#include "qemu-mirror-tool/qmp.h"
#include "qemu-mirror-tool/qmp-job.h"

typedef struct Daemon Daemon;
typedef struct DaemonNode DaemonNode;

/* Why a node cannot be deleted (QEMU's checks in blockdev-del, in order). */
typedef enum DaemonNodeUse {
    /* An export or a job accesses the node itself (QEMU: a BlockBackend
     * on it): "Node NAME is in use". */
    DAEMON_USE_BLK,
    /* Another node has it as a child (file, backing), or a job's filter
     * sits over it (QEMU: refcnt > 1): "Block device NAME is in use". */
    DAEMON_USE_CHILD,
    DAEMON_USE__MAX,
} DaemonNodeUse;

/* A node made by blockdev-add (or --blockdev). */
struct DaemonNode {
    Daemon *daemon;
    char *name;                 /* node-name, unique in the daemon */
    char *driver;               /* QAPI BlockdevDriver: "file", "raw", ... */
    BlockDriverState *bs;       /* one reference held by the node */
    /* The node's own: its @bs may be writable all the same (a read-only
     * raw node shares its file node's), so users check this. */
    bool read_only;
    unsigned uses[DAEMON_USE__MAX];
    /* Set while a job blocks the node (QEMU's op blocker): blockdev-del
     * fails with "Node 'NAME' is busy: BLOCKER".  Owned; NULL: none. */
    char *blocker;
    /*
     * The filter guests reach the node through (mirror-top.h): made by
     * daemon_node_top() for the first export or job that needs it, owned
     * by the node (NULL until then).  A job on the node attaches to it, so
     * guest writes through any export of the node are seen by the job;
     * at a switch-over its child becomes the target (the filter then
     * moves to the target's node: daemon_node_move_top()).
     */
    BlockDriverState *top;

    /* ---- qmp-block.c's (read them, never change them) ---- */
    /* The children blockdev-add gave the node (a DAEMON_USE_CHILD use of
     * each), NULL: none.  @backing is only set for a backing node given
     * by node-name; the images a qcow2 node names itself are opened by
     * its driver and have no node (see docs/mirror-tool.md). */
    DaemonNode *file;
    DaemonNode *backing;
    /* Made for a parent's inline dict (named "#blockNNN" as QEMU does
     * when the dict has no node-name): not the monitor's, deleted with
     * its parent. */
    bool implicit;
    /* The qcow2 node whose driver locks this file node's image itself:
     * @bs was reopened without locks until that parent goes (and is not
     * reopened with them while an export or a job uses the node then);
     * NULL: none.  Only a node without users gets a qcow2 parent. */
    DaemonNode *lock_holder;
    uint64_t seq;               /* creation order, for the queries */
    JsonObject *args;           /* the blockdev-add arguments (a ref) */
};

/* A signal that stops the daemon (SIGINT, SIGTERM, SIGHUP). */
typedef struct DaemonSignal {
    Daemon *daemon;
    int signum;
    guint source;               /* its g_unix_signal_add() source */
} DaemonSignal;

/* TLS credentials kinds and ends (QEMU's tls-creds-x509, tls-creds-psk). */
typedef enum DaemonTlsKind {
    DAEMON_TLS_X509,
    DAEMON_TLS_PSK,
} DaemonTlsKind;

typedef enum DaemonTlsEndpoint {
    DAEMON_TLS_CLIENT,
    DAEMON_TLS_SERVER,
} DaemonTlsEndpoint;

/*
 * An object-add tls-creds-x509 or tls-creds-psk.  Valid until its
 * object-del, which QEMU allows while the credentials are in use: a user
 * copies what it keeps (nbd-server-start loads the files into its
 * NbdTlsCreds; an nbd node copies the paths into its URI).
 */
typedef struct DaemonTlsCreds {
    char *id;
    DaemonTlsKind kind;
    DaemonTlsEndpoint endpoint; /* endpoint, default "client" */
    char *dir;                  /* dir, as given (required) */
    /* X.509 (verify-peer, default true): the peer must present a
     * certificate signed by dir/ca-cert.pem. */
    bool verify_peer;
    /* PSK: dir/keys.psk ("username:hexkey" lines), and the client's user
     * name (username, default "qemu"; NULL for a server). */
    char *psk_file;
    char *username;
} DaemonTlsCreds;

struct Daemon {
    QmpServer *qmp;
    GHashTable *nodes;          /* node-name -> DaemonNode * (owned) */
    GHashTable *objects;        /* id -> object (qmp-block.c's, owned) */
    GHashTable *jobs;           /* id -> Job * (a reference each) */
    QmpJobHost job_host;        /* qmp-mirror.c's: the same jobs, newest
                                 * first, for the job commands */
    void *exports;              /* qmp-export.c's state, or NULL */
    bool quit;                  /* `quit` or a signal: leave the loop */
    bool stopped;               /* daemon_stop() ran */
    DaemonSignal signals[3];
};

/* ---- daemon.c ---- */

/*
 * A daemon serving QMP on the UNIX socket @qmp_path (NULL: none; the
 * command line alone then drives it), with every command of the parts
 * above registered.  NULL with @errp set on failure.
 */
Daemon *daemon_new(const char *qmp_path, int max_clients, GError **errp);

/*
 * Run the main loop until `quit`, SIGINT, SIGTERM or SIGHUP; then stop
 * (daemon_stop()).  A further signal while it stops exits at once
 * (128 + the signal's number), as `start` does.  Returns the exit code:
 * TOOL_EXIT_OK, or TOOL_EXIT_FAILURE when an image's flush failed.
 */
int daemon_run(Daemon *d);

/*
 * Stop in order, once: no more QMP requests (qmp_server_close_input()),
 * the jobs cancelled (daemon_jobs_stop()), the exports drained and their
 * images flushed (daemon_exports_stop()), every node closed.  Returns 0
 * or the first flush error (-errno); 0 when it ran before.
 */
int daemon_stop(Daemon *d);

/* Stop (daemon_stop()) if not done yet, and free @d (NULL is ignored). */
void daemon_free(Daemon *d);

/*
 * Run the QMP command @name with @args on @d as a client's request would
 * (for the command line's --blockdev, --export, ...).  Returns the
 * "return" value (NULL: {}) or NULL with @errp set.
 */
JsonNode *daemon_execute(Daemon *d, const char *name, JsonObject *args,
                         GError **errp);

/*
 * As daemon_execute(), for @args in QEMU's keyval syntax (keyval.h):
 * every value a string, which qmp_arg_int() and qmp_arg_bool() convert
 * while the command runs (qmp_args_set_keyval()).
 */
JsonNode *daemon_execute_keyval(Daemon *d, const char *name,
                                JsonObject *args, GError **errp);

/* ---- qmp-block.c: the node registry ---- */

/* Register blockdev-add, blockdev-del, query-named-block-nodes,
 * object-add and object-del. */
void daemon_block_register(Daemon *d);

/*
 * The node named @name, or NULL with @errp set as QEMU words a missing
 * node for a command's argument @what (e.g. "Cannot find device='X' nor
 * node-name='X'", class GenericError or DeviceNotFound as QEMU has it
 * for that command: @what is the argument's name).
 */
DaemonNode *daemon_node_find(Daemon *d, const char *name, const char *what,
                             GError **errp);

/*
 * QEMU's id_wellformed(), the rule for node names, job ids and object
 * ids: a letter, then letters, digits, '-', '.' and '_'.
 */
bool daemon_id_wellformed(const char *id);

/* Count a use of @n (until daemon_node_unuse()). */
void daemon_node_use(DaemonNode *n, DaemonNodeUse use);
void daemon_node_unuse(DaemonNode *n, DaemonNodeUse use);

/* Set (@blocker non-NULL, copied) or clear @n's op blocker. */
void daemon_node_block(DaemonNode *n, const char *blocker);

/*
 * The filter over @n guests and jobs go through (see DaemonNode.top),
 * made now if it does not exist.  The node keeps it; NULL with @errp set
 * on failure.
 */
BlockDriverState *daemon_node_top(DaemonNode *n, GError **errp);

/*
 * After a switch-over: @from's filter now reads and writes @to's image;
 * it becomes @to's, and the exports that served @from now serve @to
 * (daemon_exports_moved()).  A filter @to had (from an earlier export
 * or job: filters are kept) is idle, since a job's target has no export
 * and no other job: it is dropped.
 */
void daemon_node_move_top(DaemonNode *from, DaemonNode *to);

/*
 * May a new writer (a writable export, or a mirror job's target) use
 * @n?  Not while another node has it as a child (a qcow2's file, a
 * backing node): the parent's data would be overwritten under it.  False
 * with @errp set as QEMU words the permission conflict.
 */
bool daemon_node_check_writer(Daemon *d, DaemonNode *n, GError **errp);

/* Is @n a running job's target (no export or other writer may use it
 * until the switch-over)? */
bool daemon_node_is_job_target(const DaemonNode *n);

/*
 * Flush every node's image (at exit, after the exports and jobs are gone;
 * QEMU flushes each node it closes), waiting on the main loop.  Returns 0
 * or the first error (-errno), with the node's name in *@failed.
 */
int daemon_nodes_flush(Daemon *d, const char **failed);

/*
 * The TLS credentials object @id (object-add tls-creds-x509/-psk), or
 * NULL with @errp set as QEMU words it: "No TLS credentials with id 'X'",
 * "Object with id 'X' is not TLS credentials".  See DaemonTlsCreds for
 * how long it lives.
 */
DaemonTlsCreds *daemon_object_find_tls(Daemon *d, const char *id,
                                       GError **errp);

/* Are @creds for the end @endpoint?  False with @errp set as QEMU words
 * it: "Expected TLS credentials for a server endpoint" (or client). */
bool daemon_tls_check_endpoint(const DaemonTlsCreds *creds,
                               DaemonTlsEndpoint endpoint, GError **errp);

/* ---- qmp-export.c ---- */

/* Register nbd-server-start, nbd-server-stop, block-export-add,
 * block-export-del and query-block-exports. */
void daemon_export_register(Daemon *d);

/* The exports that served @from's filter now serve @to (names change in
 * query-block-exports). */
void daemon_exports_moved(Daemon *d, DaemonNode *from, DaemonNode *to);

/* At exit: stop the server, let clients finish (bounded), flush what the
 * exports served.  Returns 0 or the first flush error (-errno). */
int daemon_exports_stop(Daemon *d);

/* ---- qmp-mirror.c ---- */

/* Register blockdev-mirror, drive-mirror and the job commands
 * (block-job-*, job-*, query-block-jobs, query-jobs) over d->jobs. */
void daemon_mirror_register(Daemon *d);

/* At exit: cancel every job and wait until each is gone. */
void daemon_jobs_stop(Daemon *d);

#endif /* DAEMON_H */
