/*
 * The daemon's NBD server and exports (daemon.h): nbd-server-start,
 * nbd-server-stop, block-export-add, block-export-del,
 * query-block-exports, with qemu-storage-daemon's argument names,
 * defaults, errors and BLOCK_EXPORT_DELETED event.
 *
 * One server (block/export/nbd-server.h) at a time, any number of exports
 * on it.  An export serves its node's filter (daemon_node_top()), so that
 * a job on the node sees every guest write and, after a switch-over, the
 * export serves the target (daemon_exports_moved()); it counts a
 * DAEMON_USE_BLK use of its node until it is gone.  Removing an export
 * (block-export-del, nbd-server-stop) unlists it at once; it is gone,
 * with BLOCK_EXPORT_DELETED, once its requests in flight completed: before
 * the command returns when none was, as QEMU does.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "qemu-mirror-tool/tool.h"
#include "block/export/nbd-server.h"

#include <stdarg.h>

/* Milliseconds the exports' clients have to finish at exit. */
#define DAEMON_EXPORT_STOP_MS       5000

/* One block-export-add. */
typedef struct DaemonExport {
    Daemon *d;
    char *id;
    DaemonNode *node;           /* a DAEMON_USE_BLK use */
    NbdExport *exp;             /* until it is gone */
    bool shutting_down;         /* block-export-del or nbd-server-stop */
} DaemonExport;

/* d->exports. */
typedef struct DaemonExports {
    NbdServer *srv;             /* NULL: not running */
    GQueue list;                /* DaemonExport, oldest first */
} DaemonExports;

static DaemonExports *qexp_state(Daemon *d)
{
    if (!d->exports) {
        d->exports = g_new0(DaemonExports, 1);
    }
    return d->exports;
}

static GError *qexp_error_new(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

/* A GenericError. */
static GError *qexp_error_new(const char *fmt, ...)
{
    GError *err;
    va_list ap;

    va_start(ap, fmt);
    err = g_error_new_valist(QMP_ERROR, QMP_ERROR_GENERIC, fmt, ap);
    va_end(ap);
    return err;
}

/*
 * An argument error about a member of the object at @path ("addr",
 * "addr.data"): QEMU names the member by its full path, "Parameter
 * 'addr.data.path' is missing".  The qmp_arg_*() and qmp_check_args()
 * messages quote the member's name first: the path goes in front of it.
 */
static void qexp_prefix_arg_error(GError **errp, const char *path)
{
    GError *err = errp ? *errp : NULL;
    const char *quote = err ? strchr(err->message, '\'') : NULL;
    char *msg;

    if (!quote) {
        return;
    }
    msg = g_strdup_printf("%.*s%s.%s", (int)(quote - err->message + 1),
                          err->message, path, quote + 1);
    g_free(err->message);
    err->message = msg;
}

/* The object member @name of @args (required), or NULL with @errp set as
 * QEMU words it for the member path @path. */
static JsonObject *qexp_arg_object(JsonObject *args, const char *name,
                                   const char *path, GError **errp)
{
    JsonNode *n = json_object_get_member(args, name);

    if (!n) {
        g_propagate_error(errp, qexp_error_new("Parameter '%s' is missing",
                                               path));
        return NULL;
    }
    if (!JSON_NODE_HOLDS_OBJECT(n)) {
        g_propagate_error(errp, qexp_error_new(
            "Invalid parameter type for '%s', expected: object", path));
        return NULL;
    }
    return json_node_get_object(n);
}

/* Refuse the optional boolean @name of @obj (at @path) when true: a
 * feature of QEMU's we do not have. */
static bool qexp_refuse_true(JsonObject *obj, const char *path,
                             const char *name, GError **errp)
{
    bool on = false;

    if (!qmp_arg_bool(obj, name, false, &on, errp)) {
        if (path) {
            qexp_prefix_arg_error(errp, path);
        }
        return false;
    }
    if (on) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter '%s%s%s' is not supported by mirror-tool",
            path ? path : "",
            path ? "." : "", name));
        return false;
    }
    return true;
}

/* ---- nbd-server-start ---- */

/*
 * The address members of @o, at the member path @path ("addr.data" in
 * QMP's SocketAddressLegacy, "addr" in the flat SocketAddress of
 * --nbd-server, whose "type" is among them), for type "unix", as the
 * server's "unix:PATH".
 */
static char *qexp_addr_unix(JsonObject *o, const char *path, GError **errp)
{
    static const char *const allowed[] = { "type", "path", "abstract",
                                           "tight", NULL };
    const char *file;
    bool tight;

    if (!qmp_arg_str(o, "path", true, &file, errp) ||
        !qmp_arg_bool(o, "tight", false, &tight, errp)) {
        qexp_prefix_arg_error(errp, path);
        return NULL;
    }
    if (!qexp_refuse_true(o, path, "abstract", errp)) {
        return NULL;
    }
    /* "type" is @o's only in the flat form (checked by the caller). */
    if (!qmp_check_args(o, allowed, errp)) {
        qexp_prefix_arg_error(errp, path);
        return NULL;
    }
    /* tight matters only to abstract sockets. */
    return g_strdup_printf("unix:%s", file);
}

/* As qexp_addr_unix(), for type "inet": "tcp:HOST:PORT". */
static char *qexp_addr_inet(JsonObject *o, const char *path, GError **errp)
{
    static const char *const allowed[] = {
        "type", "host", "port", "numeric", "to", "ipv4", "ipv6",
        "keep-alive", NULL,
    };
    const char *host, *port;
    int64_t to;
    bool numeric;

    if (!qmp_arg_str(o, "host", true, &host, errp) ||
        !qmp_arg_str(o, "port", true, &port, errp) ||
        !qmp_arg_bool(o, "numeric", false, &numeric, errp) ||
        !qmp_arg_int(o, "to", false, &to, errp)) {
        qexp_prefix_arg_error(errp, path);
        return NULL;
    }
    if (json_object_has_member(o, "to")) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter '%s.to' is not supported by mirror-tool", path));
        return NULL;
    }
    if (!qexp_refuse_true(o, path, "ipv4", errp) ||
        !qexp_refuse_true(o, path, "ipv6", errp) ||
        !qexp_refuse_true(o, path, "keep-alive", errp)) {
        return NULL;
    }
    if (!qmp_check_args(o, allowed, errp)) {
        qexp_prefix_arg_error(errp, path);
        return NULL;
    }
    /* An IPv6 address in brackets, as the server's parser takes it. */
    return g_strdup_printf(strchr(host, ':') && host[0] != '['
                           ? "tcp:[%s]:%s" : "tcp:%s:%s", host, port);
}

/*
 * @addr as the server's address string.  Over QMP it is QEMU's
 * SocketAddressLegacy, {"type": "unix", "data": {"path": ...}} or
 * {"type": "inet", "data": {"host": ..., "port": ...}}; qsd's
 * --nbd-server takes the flat SocketAddress, {"type": "unix", "path":
 * ...}: there an @addr without "data" is read so.  NULL with @errp set as
 * QEMU words it.
 */
static char *qexp_addr(JsonObject *addr, GError **errp)
{
    static const char *const allowed[] = { "type", "data", NULL };
    bool flat = qmp_args_are_keyval() &&
                !json_object_has_member(addr, "data");
    const char *path = flat ? "addr" : "addr.data";
    const char *type;
    JsonObject *o = addr;

    if (!qmp_arg_str(addr, "type", true, &type, errp)) {
        qexp_prefix_arg_error(errp, "addr");
        return NULL;
    }
    if (strcmp(type, "unix") && strcmp(type, "inet") &&
        strcmp(type, "vsock") && strcmp(type, "fd")) {
        /* QEMU names the enum without its path. */
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'type' does not accept value '%s'", type));
        return NULL;
    }
    if (!flat) {
        o = qexp_arg_object(addr, "data", "addr.data", errp);
        if (!o) {
            return NULL;
        }
        if (!qmp_check_args(addr, allowed, errp)) {
            qexp_prefix_arg_error(errp, "addr");
            return NULL;
        }
        if (json_object_has_member(o, "type")) {
            g_propagate_error(errp, qexp_error_new(
                "Parameter 'addr.data.type' is unexpected"));
            return NULL;
        }
    }
    if (!strcmp(type, "unix")) {
        return qexp_addr_unix(o, path, errp);
    }
    if (!strcmp(type, "inet")) {
        return qexp_addr_inet(o, path, errp);
    }
    if (!strcmp(type, "fd")) {
        /* qemu-storage-daemon's own answer. */
        g_propagate_error(errp, qexp_error_new(
            "only QEMU supports file descriptor passing"));
        return NULL;
    }
    g_propagate_error(errp, qexp_error_new(
        "Parameter 'addr.type' value 'vsock' is not supported by "
        "mirror-tool (it supports: unix, inet)"));
    return NULL;
}

/*
 * The credentials of the tls-creds object @id for a server, loaded now
 * from the files it names (the object may go with object-del while the
 * server runs, as QEMU allows), or NULL with @errp set.  Every client
 * must use TLS, as with QEMU's tls-creds.
 */
static NbdTlsCreds *qexp_tls_creds(Daemon *d, const char *id, GError **errp)
{
    DaemonTlsCreds *c = daemon_object_find_tls(d, id, errp);
    NbdTlsConfig cfg = { .require = true };

    if (!c || !daemon_tls_check_endpoint(c, DAEMON_TLS_SERVER, errp)) {
        return NULL;
    }
    if (c->kind == DAEMON_TLS_X509) {
        cfg.x509_dir = c->dir;
        cfg.verify_peer = c->verify_peer;
    } else {
        cfg.psk_file = c->psk_file;
    }
    return nbdsrv_tls_creds_new(&cfg, errp);
}

/* The max-connections argument: QEMU's uint32, 0 meaning our default. */
static bool qexp_max_connections(JsonObject *args, unsigned *out,
                                 GError **errp)
{
    int64_t v = 0;

    if (!qmp_arg_int(args, "max-connections", false, &v, NULL)) {
        /* QEMU's words for an unsigned member. */
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'max-connections' expects uint64"));
        return false;
    }
    if (v < 0 || v > G_MAXUINT32) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'max-connections' expects uint32_t"));
        return false;
    }
    if (v > NBDSRV_MAX_SHARED) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'max-connections' must be at most %d",
            NBDSRV_MAX_SHARED));
        return false;
    }
    *out = v ? v : NBDSRV_DEFAULT_SHARED;
    return true;
}

static JsonNode *qexp_server_start(JsonObject *args, void *opaque,
                                   GError **errp)
{
    static const char *const allowed[] = {
        "addr", "tls-creds", "tls-authz", "max-connections", NULL,
    };
    Daemon *d = opaque;
    DaemonExports *st = qexp_state(d);
    g_autoptr(NbdTlsCreds) creds = NULL;
    g_autofree char *addr = NULL;
    const char *tls_id = NULL, *authz = NULL;
    JsonObject *a;
    unsigned max;

    a = qexp_arg_object(args, "addr", "addr", errp);
    if (!a || !(addr = qexp_addr(a, errp)) ||
        !qmp_arg_str(args, "tls-creds", false, &tls_id, errp) ||
        !qmp_arg_str(args, "tls-authz", false, &authz, errp) ||
        !qexp_max_connections(args, &max, errp) ||
        !qmp_check_args(args, allowed, errp)) {
        return NULL;
    }
    if (st->srv) {
        g_propagate_error(errp, qexp_error_new("NBD server already running"));
        return NULL;
    }
    if (authz) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'tls-authz' is not supported by mirror-tool"));
        return NULL;
    }
    if (tls_id && !(creds = qexp_tls_creds(d, tls_id, errp))) {
        return NULL;
    }
    st->srv = nbdsrv_listen(addr, errp);
    if (!st->srv) {
        return NULL;
    }
    nbdsrv_set_shared(st->srv, max);
    nbdsrv_set_tls(st->srv, g_steal_pointer(&creds));
    /* As `start --export`: the exports' clients are the guests, whose
     * requests go ahead of the jobs'. */
    nbdsrv_set_guest_priority(st->srv, true);
    return NULL;
}

/* ---- exports ---- */

static DaemonExport *qexp_find(DaemonExports *st, const char *id)
{
    for (GList *l = st ? st->list.head : NULL; l; l = l->next) {
        DaemonExport *e = l->data;

        if (!strcmp(e->id, id)) {
            return e;
        }
    }
    return NULL;
}

/* The export is gone: tell the clients, free it. */
static void qexp_gone_cb(void *opaque)
{
    DaemonExport *e = opaque;
    DaemonExports *st = e->d->exports;
    JsonObject *data = json_object_new();
    JsonNode *node = json_node_new(JSON_NODE_OBJECT);

    json_object_set_string_member(data, "id", e->id);
    json_node_take_object(node, data);
    g_queue_remove(&st->list, e);
    daemon_node_unuse(e->node, DAEMON_USE_BLK);
    qmp_server_emit_event(e->d->qmp, "BLOCK_EXPORT_DELETED", node);
    g_free(e->id);
    g_free(e);
}

/* Remove @e (its clients dropped with @hard): gone once its requests
 * completed (qexp_gone_cb()). */
static void qexp_remove(DaemonExport *e, bool hard)
{
    e->shutting_down = true;
    nbdsrv_export_remove(e->exp, hard);
}

/* The members of block-export-add that only other export types have. */
static const char *const qexp_other_types[] = {
    "vhost-user-blk", "fuse", "vduse-blk", NULL,
};

/* The arguments of block-export-add, type "nbd". */
typedef struct QexpAddArgs {
    const char *id;
    const char *node_name;
    const char *name;
    const char *description;
    const char *iothread;
    bool writable;
    bool fixed_iothread;
} QexpAddArgs;

/* Fetch and check the types of block-export-add's arguments, in the
 * order QEMU's visitor does, then the features we do not have. */
static bool qexp_add_args(JsonObject *args, QexpAddArgs *a, GError **errp)
{
    static const char *const allowed[] = {
        "type", "id", "fixed-iothread", "iothread", "node-name", "writable",
        "writethrough", "name", "description", "bitmaps",
        "allocation-depth", NULL,
    };
    const char *type;
    JsonNode *bitmaps;

    if (!qmp_arg_str(args, "type", true, &type, errp)) {
        return false;
    }
    if (g_strv_contains(qexp_other_types, type)) {
        /* QEMU built without that export driver. */
        g_propagate_error(errp, qexp_error_new(
            "No driver found for the requested export type"));
        return false;
    }
    if (strcmp(type, "nbd")) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'type' does not accept value '%s'", type));
        return false;
    }
    if (!qmp_arg_str(args, "id", true, &a->id, errp) ||
        !qmp_arg_bool(args, "fixed-iothread", false, &a->fixed_iothread,
                      errp) ||
        !qmp_arg_str(args, "iothread", false, &a->iothread, errp) ||
        !qmp_arg_str(args, "node-name", true, &a->node_name, errp) ||
        !qmp_arg_bool(args, "writable", false, &a->writable, errp) ||
        !qexp_refuse_true(args, NULL, "writethrough", errp) ||
        !qmp_arg_str(args, "name", false, &a->name, errp) ||
        !qmp_arg_str(args, "description", false, &a->description, errp)) {
        return false;
    }
    bitmaps = json_object_get_member(args, "bitmaps");
    if (bitmaps && !JSON_NODE_HOLDS_ARRAY(bitmaps)) {
        g_propagate_error(errp, qexp_error_new(
            "Invalid parameter type for 'bitmaps', expected: array"));
        return false;
    }
    if (!qexp_refuse_true(args, NULL, "allocation-depth", errp) ||
        !qmp_check_args(args, allowed, errp)) {
        return false;
    }
    if (bitmaps && json_array_get_length(json_node_get_array(bitmaps))) {
        JsonNode *b = json_array_get_element(json_node_get_array(bitmaps),
                                             0);

        /* No node of ours has a dirty bitmap to export. */
        g_propagate_error(errp, qexp_error_new(
            "Bitmap '%s' is not found",
            JSON_NODE_HOLDS_VALUE(b) &&
            json_node_get_value_type(b) == G_TYPE_STRING
            ? json_node_get_string(b) : ""));
        return false;
    }
    a->name = a->name ? a->name : a->node_name;
    return true;
}

static JsonNode *qexp_export_add(JsonObject *args, void *opaque,
                                 GError **errp)
{
    Daemon *d = opaque;
    DaemonExports *st = d->exports;
    QexpAddArgs a = { 0 };
    BlockDriverState *top;
    DaemonExport *e;
    DaemonNode *node;
    NbdExport *exp;

    if (!qexp_add_args(args, &a, errp)) {
        return NULL;
    }
    if (!daemon_id_wellformed(a.id)) {
        g_propagate_error(errp, qexp_error_new("Invalid block export id"));
        return NULL;
    }
    if (qexp_find(st, a.id)) {
        g_propagate_error(errp, qexp_error_new(
            "Block export id '%s' is already in use", a.id));
        return NULL;
    }
    /* QEMU's blk_exp_add() looks the node up with no device name. */
    node = daemon_node_find(d, a.node_name, "node-name", NULL);
    if (!node) {
        g_propagate_error(errp, qexp_error_new(
            "Cannot find device='' nor node-name='%s'", a.node_name));
        return NULL;
    }
    if (a.iothread) {
        /* We have no iothreads. */
        g_propagate_error(errp, qexp_error_new("iothread \"%s\" not found",
                                               a.iothread));
        return NULL;
    }
    if (a.writable && node->read_only) {
        g_propagate_error(errp, qexp_error_new(
            "Cannot export read-only node as writable"));
        return NULL;
    }
    if (!st || !st->srv) {
        g_propagate_error(errp, qexp_error_new("NBD server not running"));
        return NULL;
    }
    if (daemon_node_is_job_target(node)) {
        /* The job alone writes its target until the switch-over, and
         * what it holds is no image yet. */
        g_propagate_error(errp, qexp_error_new(
            "Permission conflict on node '%s': permissions 'consistent "
            "read%s' are both required by an unnamed block device (uses "
            "node '%s' as 'root' child) and unshared by block device "
            "'%s'.", node->name, a.writable ? ", write" : "", node->name,
            node->name));
        return NULL;
    }
    if (a.writable && !daemon_node_check_writer(d, node, errp)) {
        return NULL;
    }
    top = daemon_node_top(node, errp);
    exp = top ? nbdsrv_export_add(st->srv, top, a.name, a.description,
                                  a.writable, errp) : NULL;
    if (!exp) {
        return NULL;
    }
    e = g_new0(DaemonExport, 1);
    e->d = d;
    e->id = g_strdup(a.id);
    e->node = node;
    e->exp = exp;
    daemon_node_use(node, DAEMON_USE_BLK);
    nbdsrv_export_set_gone_cb(exp, qexp_gone_cb, e);
    g_queue_push_tail(&st->list, e);
    return NULL;
}

static JsonNode *qexp_export_del(JsonObject *args, void *opaque,
                                 GError **errp)
{
    static const char *const allowed[] = { "id", "mode", NULL };
    Daemon *d = opaque;
    const char *id, *mode = "safe";
    DaemonExport *e;

    if (!qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_arg_str(args, "mode", false, &mode, errp)) {
        return NULL;
    }
    if (strcmp(mode, "safe") && strcmp(mode, "hard")) {
        g_propagate_error(errp, qexp_error_new(
            "Parameter 'mode' does not accept value '%s'", mode));
        return NULL;
    }
    if (!qmp_check_args(args, allowed, errp)) {
        return NULL;
    }
    e = qexp_find(d->exports, id);
    if (!e) {
        g_propagate_error(errp, qexp_error_new("Export '%s' is not found",
                                               id));
        return NULL;
    }
    if (e->shutting_down) {
        g_propagate_error(errp, qexp_error_new(
            "Export '%s' is already shutting down", id));
        return NULL;
    }
    if (!strcmp(mode, "safe") && nbdsrv_export_in_use(e->exp)) {
        g_propagate_error(errp, qexp_error_new("export '%s' still in use",
                                               id));
        return NULL;
    }
    qexp_remove(e, true);
    return NULL;
}

/* Remove every export and free the server (nbd-server-stop). */
static void qexp_server_free(DaemonExports *st)
{
    GList *l = st->list.head;

    while (l) {
        DaemonExport *e = l->data;

        l = l->next;    /* may be gone at once */
        if (!e->shutting_down) {
            qexp_remove(e, true);
        }
    }
    g_clear_pointer(&st->srv, nbdsrv_free);
}

static JsonNode *qexp_server_stop(JsonObject *args, void *opaque,
                                  GError **errp)
{
    static const char *const none[] = { NULL };
    Daemon *d = opaque;
    DaemonExports *st = d->exports;

    if (!qmp_check_args(args, none, errp)) {
        return NULL;
    }
    if (!st || !st->srv) {
        g_propagate_error(errp, qexp_error_new("NBD server not running"));
        return NULL;
    }
    qexp_server_free(st);
    return NULL;
}

static JsonNode *qexp_query(JsonObject *args, void *opaque, GError **errp)
{
    static const char *const none[] = { NULL };
    Daemon *d = opaque;
    DaemonExports *st = d->exports;
    JsonArray *arr;
    JsonNode *ret;

    if (!qmp_check_args(args, none, errp)) {
        return NULL;
    }
    arr = json_array_new();
    /* Newest first, as QEMU lists them. */
    for (GList *l = st ? st->list.tail : NULL; l; l = l->prev) {
        DaemonExport *e = l->data;
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "type", "nbd");
        json_object_set_string_member(o, "id", e->id);
        json_object_set_string_member(o, "node-name", e->node->name);
        json_object_set_boolean_member(o, "shutting-down", e->shutting_down);
        json_array_add_object_element(arr, o);
    }
    ret = json_node_new(JSON_NODE_ARRAY);
    json_node_take_array(ret, arr);
    return ret;
}

void daemon_export_register(Daemon *d)
{
    qmp_server_register(d->qmp, "nbd-server-start", qexp_server_start, d);
    qmp_server_register(d->qmp, "nbd-server-stop", qexp_server_stop, d);
    qmp_server_register(d->qmp, "block-export-add", qexp_export_add, d);
    qmp_server_register(d->qmp, "block-export-del", qexp_export_del, d);
    qmp_server_register(d->qmp, "query-block-exports", qexp_query, d);
}

void daemon_exports_moved(Daemon *d, DaemonNode *from, DaemonNode *to)
{
    DaemonExports *st = d->exports;

    for (GList *l = st ? st->list.head : NULL; l; l = l->next) {
        DaemonExport *e = l->data;

        if (e->node == from) {
            daemon_node_unuse(from, DAEMON_USE_BLK);
            daemon_node_use(to, DAEMON_USE_BLK);
            e->node = to;
        }
    }
}

typedef struct QexpStop {
    bool done;
    int ret;
} QexpStop;

static void qexp_stop_cb(void *opaque, int ret)
{
    QexpStop *s = opaque;

    s->ret = ret;
    s->done = true;
}

int daemon_exports_stop(Daemon *d)
{
    DaemonExports *st = d->exports;
    QexpStop s = { 0 };

    if (!st) {
        return 0;
    }
    if (st->srv) {
        nbdsrv_close(g_steal_pointer(&st->srv), DAEMON_EXPORT_STOP_MS,
                     qexp_stop_cb, &s);
        tool_run_until(&s.done);
    }
    /* Exports of a server stopped before still finish their requests. */
    while (!g_queue_is_empty(&st->list)) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_clear_pointer(&d->exports, g_free);
    return s.ret;
}
