/*
 * The QMP server: UNIX socket, clients, negotiation, dispatch, events.
 * Its JSON reader and writer are in qmp-json.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp.h"
#include "util/cutils.h"
#include "util/sockets.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* After EMFILE/ENFILE, accept() again after this long (no busy loop). */
#define QMP_ACCEPT_BACKOFF_MS   100

G_DEFINE_QUARK(qmp-error-quark, qmp_error)

typedef struct QmpCommand {
    QmpCommandFunc *fn;
    void *opaque;
} QmpCommand;

/*
 * A client lives until the server's idle callback frees it.  Whatever
 * must end it (a write error, the output cap, end of file) only marks it
 * dead: its callers up the stack (the line being handled, a command that
 * emits an event to every client) still hold it.
 */
typedef struct QmpClient {
    QmpServer *srv;
    int fd;
    guint in_watch;         /* 0 while paused, after EOF, once dead */
    guint out_watch;
    guint handshake_timer;  /* drops it unless it negotiates in time */
    GString *in;
    size_t in_scanned;      /* bytes of @in known to hold no newline */
    GString *out;
    int busy;               /* handling its requests: not to be freed */
    bool negotiated;
    bool paused;            /* too much unread output: requests wait */
    bool eof;               /* the peer sent all; close once out is sent */
    bool dead;              /* closed and freed by qmp_server_idle() */
} QmpClient;

struct QmpServer {
    SocketUnixListener listener;
    guint watch;                /* the listening socket; 0 in back-off */
    guint backoff;              /* re-enables watch after EMFILE */
    guint idle;                 /* frees dead clients, resumes paused */
    GHashTable *commands;       /* name -> QmpCommand */
    GList *clients;             /* QmpClient */
    int max_clients;
    unsigned handshake_limit_s; /* 0: no limit */
    size_t pause_output;
    size_t max_client_output;
    size_t max_total_output;
    size_t total_output;        /* queued for all live clients */
    bool input_closed;          /* qmp_server_close_input() */
    void (*negotiated_cb)(void *opaque);
    void *negotiated_opaque;
};

static const char *const qmp_class_names[] = {
    [QMP_ERROR_GENERIC] = "GenericError",
    [QMP_ERROR_COMMAND_NOT_FOUND] = "CommandNotFound",
    [QMP_ERROR_DEVICE_NOT_ACTIVE] = "DeviceNotActive",
    [QMP_ERROR_DEVICE_NOT_FOUND] = "DeviceNotFound",
};

/* ---- client lifetime ---- */

static gboolean qmp_server_idle(gpointer opaque);

static void qmp_server_kick(QmpServer *srv)
{
    if (!srv->idle) {
        srv->idle = g_idle_add(qmp_server_idle, srv);
    }
}

/* Stop serving @c; it is freed from the main loop. */
static void qmp_client_kill(QmpClient *c, const char *why)
{
    if (c->dead) {
        return;
    }
    g_debug("qmp: dropping a client: %s", why);
    c->dead = true;
    c->srv->total_output -= c->out->len;
    g_string_truncate(c->out, 0);
    g_string_truncate(c->in, 0);
    c->in_scanned = 0;
    if (c->in_watch) {
        g_source_remove(c->in_watch);
        c->in_watch = 0;
    }
    if (c->out_watch) {
        g_source_remove(c->out_watch);
        c->out_watch = 0;
    }
    if (c->handshake_timer) {
        g_source_remove(c->handshake_timer);
        c->handshake_timer = 0;
    }
    shutdown(c->fd, SHUT_RDWR);
    qmp_server_kick(c->srv);
}

static void qmp_client_free(QmpClient *c)
{
    if (!c->dead) {
        qmp_client_kill(c, "server closing");
    }
    c->srv->clients = g_list_remove(c->srv->clients, c);
    close(c->fd);
    g_string_free(c->in, TRUE);
    g_string_free(c->out, TRUE);
    g_free(c);
}

/* ---- output ---- */

static gboolean qmp_client_writable(gint fd, GIOCondition cond,
                                    gpointer opaque)
{
    QmpClient *c = opaque;

    while (c->out->len) {
        ssize_t n = send(c->fd, c->out->str, c->out->len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return G_SOURCE_CONTINUE;
        }
        if (n < 0) {
            c->out_watch = 0;
            qmp_client_kill(c, g_strerror(errno));
            return G_SOURCE_REMOVE;
        }
        g_string_erase(c->out, 0, n);
        c->srv->total_output -= n;
    }
    c->out_watch = 0;
    if (c->eof) {
        qmp_client_kill(c, "end of file, all sent");
    } else if (c->paused) {
        qmp_server_kick(c->srv);    /* resume reading it */
    }
    return G_SOURCE_REMOVE;
}

/* The live client with the most unread output. */
static QmpClient *qmp_server_biggest(QmpServer *srv)
{
    QmpClient *big = NULL;

    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (!c->dead && (!big || c->out->len > big->out->len)) {
            big = c;
        }
    }
    return big;
}

/* Queue @text (a message without its line end) for @c. */
static void qmp_client_queue(QmpClient *c, const char *text, size_t len)
{
    QmpServer *srv = c->srv;

    if (c->dead) {
        return;
    }
    if (c->out->len + len + 2 > srv->max_client_output) {
        qmp_client_kill(c, "it does not read its replies");
        return;
    }
    g_string_append_len(c->out, text, len);
    g_string_append(c->out, "\r\n");
    srv->total_output += len + 2;
    if (!c->out_watch) {
        c->out_watch = g_unix_fd_add(c->fd, G_IO_OUT, qmp_client_writable,
                                     c);
    }
    while (srv->total_output > srv->max_total_output) {
        qmp_client_kill(qmp_server_biggest(srv),
                        "the clients together do not read");
    }
}

/* Send @msg (consumed), with "id": @id_text (JSON text) if not NULL. */
static void qmp_client_send(QmpClient *c, JsonNode *msg, const char *id_text)
{
    g_autofree char *text = qmp_json_to_string(msg);
    size_t len = strlen(text);

    json_node_unref(msg);
    if (id_text) {
        /* The object's closing brace is last: the id goes before it. */
        g_autofree char *with_id = NULL;

        g_assert(len >= 2 && text[len - 1] == '}');
        with_id = g_strdup_printf("%.*s%s\"id\":%s}", (int)(len - 1), text,
                                  len > 2 ? "," : "", id_text);
        qmp_client_queue(c, with_id, strlen(with_id));
        return;
    }
    qmp_client_queue(c, text, len);
}

static JsonNode *qmp_error_reply(GError *err)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    QmpErrorClass cls = err->domain == QMP_ERROR ? err->code
                                                 : QMP_ERROR_GENERIC;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "error");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "class");
    json_builder_add_string_value(b, qmp_class_names[cls]);
    json_builder_set_member_name(b, "desc");
    json_builder_add_string_value(b, err->message);
    json_builder_end_object(b);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

static JsonNode *qmp_return_reply(JsonNode *ret)
{
    JsonObject *o = json_object_new();
    JsonNode *msg = json_node_new(JSON_NODE_OBJECT);

    if (!ret) {
        /* {}: the node takes the object's only reference. */
        ret = json_node_new(JSON_NODE_OBJECT);
        json_node_take_object(ret, json_object_new());
    }
    json_object_set_member(o, "return", ret);
    json_node_take_object(msg, o);
    return msg;
}

/* ---- input ---- */

/*
 * qmp_capabilities: QEMU's arguments ("enable", a list of capabilities)
 * checked in QEMU's order: the arguments as its QAPI visitor checks them
 * (each element's type and enum value, then unexpected members), then
 * "already complete", then the capabilities asked for: we offer none, so
 * asking for one (QEMU's only one is "oob") fails and negotiation stays
 * open.
 */
static bool qmp_capabilities(QmpClient *c, JsonObject *args, GError **errp)
{
    static const char *const allowed[] = { "enable", NULL };
    JsonNode *enable = json_object_get_member(args, "enable");
    g_autoptr(GString) asked = g_string_new(NULL);

    if (enable && !JSON_NODE_HOLDS_ARRAY(enable)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid parameter type for 'enable', expected: array");
        return false;
    }
    for (guint i = 0; enable &&
         i < json_array_get_length(json_node_get_array(enable)); i++) {
        JsonNode *cap = json_array_get_element(json_node_get_array(enable),
                                               i);
        const char *name;

        if (!JSON_NODE_HOLDS_VALUE(cap) ||
            json_node_get_value_type(cap) != G_TYPE_STRING) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Invalid parameter type for 'enable[%u]', "
                        "expected: string", i);
            return false;
        }
        name = json_node_get_string(cap);
        if (strcmp(name, "oob")) {
            /* QEMU names a list element's enum "null" (its visitor has
             * no name for it). */
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter 'null' does not accept value '%s'", name);
            return false;
        }
        g_string_append_printf(asked, "%s%s", asked->len ? ", " : "", name);
    }
    if (!qmp_check_args(args, allowed, errp)) {
        return false;
    }
    if (c->negotiated) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Capabilities negotiation is already complete, "
                    "command ignored");
        return false;
    }
    if (asked->len) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Capability %s not available", asked->str);
        return false;
    }
    return true;
}

/*
 * The request's members as QEMU checks them (qmp_dispatch_check_obj()):
 * "execute" a string, "arguments" an object, "id" anything, nothing else.
 * "exec-oob" is unexpected too, as in QEMU while "oob" is not enabled
 * (it never is here).  The command's name, or NULL with @errp set.
 */
static const char *qmp_request_check(JsonObject *req, GError **errp)
{
    g_autoptr(GList) members = json_object_get_members(req);
    const char *name = NULL;

    for (GList *l = members; l; l = l->next) {
        const char *key = l->data;
        JsonNode *v = json_object_get_member(req, key);

        if (!strcmp(key, "execute")) {
            if (!JSON_NODE_HOLDS_VALUE(v) ||
                json_node_get_value_type(v) != G_TYPE_STRING) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "QMP input member 'execute' must be a string");
                return NULL;
            }
            name = json_node_get_string(v);
        } else if (!strcmp(key, "arguments")) {
            if (!JSON_NODE_HOLDS_OBJECT(v)) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "QMP input member 'arguments' must be an "
                            "object");
                return NULL;
            }
        } else if (strcmp(key, "id")) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "QMP input member '%s' is unexpected", key);
            return NULL;
        }
    }
    if (!name) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input lacks member 'execute'");
    }
    return name;
}

/* Run one request (consumed); a reply is always sent. */
static void qmp_client_dispatch(QmpClient *c, JsonNode *root,
                                const char *id_text)
{
    g_autoptr(JsonNode) request = root;
    g_autoptr(GError) err = NULL;
    g_autoptr(JsonObject) empty = json_object_new();
    JsonObject *req, *args;
    JsonNode *ret;
    const char *name;

    if (!JSON_NODE_HOLDS_OBJECT(request)) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input must be a JSON object");
        goto out_error;
    }
    req = json_node_get_object(request);
    name = qmp_request_check(req, &err);
    if (!name) {
        goto out_error;
    }
    args = json_object_has_member(req, "arguments") ?
           json_object_get_object_member(req, "arguments") : empty;

    if (!strcmp(name, "qmp_capabilities")) {
        if (!qmp_capabilities(c, args, &err)) {
            goto out_error;
        }
        c->negotiated = true;
        if (c->handshake_timer) {
            g_source_remove(c->handshake_timer);
            c->handshake_timer = 0;
        }
        qmp_client_send(c, qmp_return_reply(NULL), id_text);
        if (c->srv->negotiated_cb) {
            c->srv->negotiated_cb(c->srv->negotiated_opaque);
        }
        return;
    }
    if (!c->negotiated) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Expecting capabilities negotiation with "
                    "'qmp_capabilities'");
        goto out_error;
    }
    /* The command may emit events, which may drop @c: it stays. */
    ret = qmp_server_execute(c->srv, name, args, &err);
    if (err) {
        goto out_error;
    }
    qmp_client_send(c, qmp_return_reply(ret), id_text);
    return;

out_error:
    qmp_client_send(c, qmp_error_reply(err), id_text);
}

/*
 * Handle one line (@len bytes, NUL bytes included): each JSON value on
 * it in turn.  A value that does not parse is answered with the error
 * and ends the line: where the next value starts is unknown.
 */
static void qmp_client_handle_line(QmpClient *c, const char *line,
                                   size_t len)
{
    size_t pos = 0;

    while (!c->dead) {
        g_autoptr(GError) err = NULL;
        g_autofree char *id_text = NULL;
        JsonNode *root;

        while (pos < len && qmp_json_is_ws(line[pos])) {
            pos++;
        }
        if (pos == len) {
            return;
        }
        root = qmp_json_parse_value(line, len, &pos, &id_text, &err);
        if (!root) {
            qmp_client_send(c, qmp_error_reply(err), NULL);
            return;
        }
        qmp_client_dispatch(c, root, id_text);
    }
}

/*
 * Handle the complete lines in c->in, until the client has
 * QMP_PAUSE_OUTPUT unread: then it is paused (not read) until its output
 * is sent.
 */
static void qmp_client_process(QmpClient *c)
{
    c->busy++;
    while (!c->dead && !c->srv->input_closed &&
           c->out->len < c->srv->pause_output) {
        /* What was searched already has no newline: a long line costs
         * one pass, not one per read. */
        char *nl = memchr(c->in->str + c->in_scanned, '\n',
                          c->in->len - c->in_scanned);
        size_t len;
        g_autofree char *line = NULL;

        if (!nl) {
            c->in_scanned = c->in->len;
            break;
        }
        len = nl - c->in->str;
        line = g_memdup2(c->in->str, len + 1);
        g_string_erase(c->in, 0, len + 1);
        c->in_scanned = 0;
        qmp_client_handle_line(c, line, len);
    }
    c->busy--;
    if (c->dead) {
        qmp_server_kick(c->srv);
        return;
    }
    if (c->in_scanned > QMP_MAX_LINE) {
        qmp_client_kill(c, "request line too long");
        return;
    }
    c->paused = c->out->len >= c->srv->pause_output;
    if (c->paused && c->in_watch) {
        g_source_remove(c->in_watch);
        c->in_watch = 0;
    }
}

static gboolean qmp_client_readable(gint fd, GIOCondition cond,
                                    gpointer opaque);

static void qmp_client_watch_input(QmpClient *c)
{
    if (!c->in_watch && !c->dead && !c->eof && !c->paused &&
        !c->srv->input_closed) {
        c->in_watch = g_unix_fd_add(c->fd, G_IO_IN | G_IO_HUP | G_IO_ERR,
                                    qmp_client_readable, c);
    }
}

static gboolean qmp_client_readable(gint fd, GIOCondition cond,
                                    gpointer opaque)
{
    QmpClient *c = opaque;
    char buf[4096];
    ssize_t n;

    if (c->busy) {
        return G_SOURCE_CONTINUE;   /* a nested main loop: later */
    }
    n = recv(c->fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    if (n < 0) {
        c->in_watch = 0;
        qmp_client_kill(c, g_strerror(errno));
        return G_SOURCE_REMOVE;
    }
    if (n == 0) {
        /* Replies to what it sent still go out (socat, echo | nc). */
        c->in_watch = 0;
        c->eof = true;
        if (!c->out->len) {
            qmp_client_kill(c, "end of file");
        }
        return G_SOURCE_REMOVE;
    }
    g_string_append_len(c->in, buf, n);
    qmp_client_process(c);
    return c->in_watch ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* Free dead clients; go on with paused ones whose output went out. */
static gboolean qmp_server_idle(gpointer opaque)
{
    QmpServer *srv = opaque;
    GList *l = srv->clients;

    srv->idle = 0;
    while (l) {
        QmpClient *c = l->data;

        l = l->next;
        if (c->dead && !c->busy) {
            qmp_client_free(c);
        }
    }
    for (l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->paused && !c->dead && !c->busy && !c->out->len) {
            c->paused = false;
            qmp_client_process(c);
            qmp_client_watch_input(c);
        }
    }
    return G_SOURCE_REMOVE;
}

JsonNode *qmp_version_info(void)
{
    g_autofree char *package = g_strdup_printf("qemu-mirror %s",
                                               QEMU_MIRROR_VERSION);
    g_autoptr(JsonBuilder) b = json_builder_new();
    unsigned major = 0, minor = 0, micro = 0;

    /* "MAJOR.MINOR.MICRO" (meson's project version). */
    sscanf(QEMU_MIRROR_VERSION, "%u.%u.%u", &major, &minor, &micro);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "qemu");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "micro");
    json_builder_add_int_value(b, micro);
    json_builder_set_member_name(b, "minor");
    json_builder_add_int_value(b, minor);
    json_builder_set_member_name(b, "major");
    json_builder_add_int_value(b, major);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "package");
    json_builder_add_string_value(b, package);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

static void qmp_client_greet(QmpClient *c)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "QMP");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "version");
    json_builder_add_value(b, qmp_version_info());
    /* No capability offered: "oob" needs a monitor thread. */
    json_builder_set_member_name(b, "capabilities");
    json_builder_begin_array(b);
    json_builder_end_array(b);
    json_builder_end_object(b);
    json_builder_end_object(b);
    qmp_client_send(c, json_builder_get_root(b), NULL);
}

static unsigned qmp_server_live_clients(QmpServer *srv)
{
    unsigned n = 0;

    for (GList *l = srv->clients; l; l = l->next) {
        n += !((QmpClient *)l->data)->dead;
    }
    return n;
}

static gboolean qmp_client_handshake_expired(gpointer opaque)
{
    QmpClient *c = opaque;

    c->handshake_timer = 0;
    qmp_client_kill(c, "no qmp_capabilities in time");
    return G_SOURCE_REMOVE;
}

bool qmp_server_add_client(QmpServer *srv, int fd)
{
    QmpClient *c;

    if (qmp_server_live_clients(srv) >= (unsigned)srv->max_clients) {
        g_autofree char *msg = g_strdup_printf(
            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"Too many "
            "QMP clients (at most %d, --qmp-max-clients)\"}}\r\n",
            srv->max_clients);

        /* Best effort, never blocking: the socket buffer is empty. */
        if (send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            g_debug("qmp: refusing a client: %s", g_strerror(errno));
        }
        close(fd);
        return false;
    }
    g_unix_set_fd_nonblocking(fd, TRUE, NULL);
    c = g_new0(QmpClient, 1);
    c->srv = srv;
    c->fd = fd;
    c->in = g_string_new(NULL);
    c->out = g_string_new(NULL);
    srv->clients = g_list_append(srv->clients, c);
    if (srv->handshake_limit_s) {
        c->handshake_timer = g_timeout_add_seconds(
            srv->handshake_limit_s, qmp_client_handshake_expired, c);
    }
    qmp_client_watch_input(c);
    qmp_client_greet(c);
    return true;
}

unsigned qmp_server_client_count(QmpServer *srv)
{
    return g_list_length(srv->clients);
}

static gboolean qmp_server_accept(gint fd, GIOCondition cond,
                                  gpointer opaque);

static gboolean qmp_server_backoff_done(gpointer opaque)
{
    QmpServer *srv = opaque;

    srv->backoff = 0;
    srv->watch = g_unix_fd_add(srv->listener.fd, G_IO_IN, qmp_server_accept,
                               srv);
    return G_SOURCE_REMOVE;
}

static gboolean qmp_server_accept(gint fd, GIOCondition cond,
                                  gpointer opaque)
{
    QmpServer *srv = opaque;
    int cfd = accept4(srv->listener.fd, NULL, NULL,
                      SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (cfd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            /* The connection stays queued; poll() would say so at once,
             * forever: stop looking for a while. */
            g_debug("qmp: accept: %s; retrying in %d ms",
                    g_strerror(errno), QMP_ACCEPT_BACKOFF_MS);
            srv->watch = 0;
            srv->backoff = g_timeout_add(QMP_ACCEPT_BACKOFF_MS,
                                         qmp_server_backoff_done, srv);
            return G_SOURCE_REMOVE;
        }
        return G_SOURCE_CONTINUE;
    }
    qmp_server_add_client(srv, cfd);
    return G_SOURCE_CONTINUE;
}

/* ---- server ---- */

QmpServer *qmp_server_new(const char *path, int max_clients, GError **errp)
{
    QmpServer *srv;

    if (max_clients < 1 || max_clients > QMP_MAX_MAX_CLIENTS) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "--qmp-max-clients '%d': expected 1 to %d", max_clients,
                    QMP_MAX_MAX_CLIENTS);
        return NULL;
    }
    srv = g_new0(QmpServer, 1);
    srv->listener.fd = -1;
    srv->max_clients = max_clients;
    srv->handshake_limit_s = QMP_DEFAULT_HANDSHAKE_LIMIT;
    srv->pause_output = QMP_PAUSE_OUTPUT;
    srv->max_client_output = QMP_MAX_CLIENT_OUTPUT;
    srv->max_total_output = QMP_MAX_TOTAL_OUTPUT;
    srv->commands = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                          g_free);
    if (path && !qmp_server_listen(srv, path, errp)) {
        qmp_server_free(srv);
        return NULL;
    }
    return srv;
}

bool qmp_server_listen(QmpServer *srv, const char *path, GError **errp)
{
    g_autoptr(GError) err = NULL;

    g_assert(srv->listener.fd < 0);
    if (!socket_unix_listen(&srv->listener, "--qmp", path, 64, &err)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "%s", err->message);
        return false;
    }
    srv->watch = g_unix_fd_add(srv->listener.fd, G_IO_IN, qmp_server_accept,
                               srv);
    return true;
}

void qmp_server_close_input(QmpServer *srv)
{
    srv->input_closed = true;
    g_clear_handle_id(&srv->watch, g_source_remove);
    g_clear_handle_id(&srv->backoff, g_source_remove);
    socket_unix_listener_close(&srv->listener);
    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        g_clear_handle_id(&c->in_watch, g_source_remove);
    }
}

void qmp_server_set_output_limits(QmpServer *srv, size_t pause,
                                  size_t per_client, size_t total)
{
    srv->pause_output = pause;
    srv->max_client_output = per_client;
    srv->max_total_output = total;
}

void qmp_server_set_handshake_limit(QmpServer *srv, unsigned seconds)
{
    srv->handshake_limit_s = seconds;
}

void qmp_server_free(QmpServer *srv)
{
    if (!srv) {
        return;
    }
    while (srv->clients) {
        qmp_client_free(srv->clients->data);
    }
    g_clear_handle_id(&srv->idle, g_source_remove);
    g_clear_handle_id(&srv->watch, g_source_remove);
    g_clear_handle_id(&srv->backoff, g_source_remove);
    socket_unix_listener_close(&srv->listener);
    g_hash_table_unref(srv->commands);
    g_free(srv);
}

void qmp_server_register(QmpServer *srv, const char *name,
                         QmpCommandFunc *fn, void *opaque)
{
    QmpCommand *cmd = g_new(QmpCommand, 1);

    cmd->fn = fn;
    cmd->opaque = opaque;
    g_hash_table_replace(srv->commands, g_strdup(name), cmd);
}

JsonNode *qmp_server_execute(QmpServer *srv, const char *name,
                             JsonObject *args, GError **errp)
{
    QmpCommand *cmd = g_hash_table_lookup(srv->commands, name);
    g_autoptr(JsonObject) empty = NULL;
    GError *err = NULL;
    JsonNode *ret;

    if (!cmd) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "The command %s has not been found", name);
        return NULL;
    }
    if (!args) {
        args = empty = json_object_new();
    }
    ret = cmd->fn(args, cmd->opaque, &err);
    if (err) {
        if (ret) {
            json_node_unref(ret);
        }
        g_propagate_error(errp, err);
        return NULL;
    }
    return ret;
}

GPtrArray *qmp_server_command_names(QmpServer *srv)
{
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    GHashTableIter it;
    gpointer key;

    g_ptr_array_add(names, g_strdup("qmp_capabilities"));
    g_hash_table_iter_init(&it, srv->commands);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        g_ptr_array_add(names, g_strdup(key));
    }
    return names;
}

static JsonNode *qmp_event_new(const char *event, JsonNode *data)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    gint64 now = g_get_real_time();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "event");
    json_builder_add_string_value(b, event);
    if (data) {
        json_builder_set_member_name(b, "data");
        json_builder_add_value(b, data);
    }
    json_builder_set_member_name(b, "timestamp");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "seconds");
    json_builder_add_int_value(b, now / G_USEC_PER_SEC);
    json_builder_set_member_name(b, "microseconds");
    json_builder_add_int_value(b, now % G_USEC_PER_SEC);
    json_builder_end_object(b);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

char *qmp_event_to_string(const char *event, JsonNode *data)
{
    JsonNode *msg = qmp_event_new(event, data);
    char *text = qmp_json_to_string(msg);

    json_node_unref(msg);
    return text;
}

void qmp_server_emit_event(QmpServer *srv, const char *event,
                           JsonNode *data)
{
    g_autofree char *text = qmp_event_to_string(event, data);
    size_t len = strlen(text);

    /* Queueing never frees a client: the list stays as it is. */
    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->negotiated) {
            qmp_client_queue(c, text, len);
        }
    }
}

bool qmp_server_has_client(QmpServer *srv)
{
    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->negotiated && !c->dead) {
            return true;
        }
    }
    return false;
}

void qmp_server_set_negotiated_cb(QmpServer *srv, void (*fn)(void *),
                                  void *opaque)
{
    srv->negotiated_cb = fn;
    srv->negotiated_opaque = opaque;
}

void qmp_server_flush(QmpServer *srv, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + timeout_ms * 1000LL;
    g_autofree struct pollfd *pfd = NULL;
    g_autofree QmpClient **who = NULL;
    unsigned max = g_list_length(srv->clients);

    pfd = g_new(struct pollfd, max ? max : 1);
    who = g_new(QmpClient *, max ? max : 1);
    for (;;) {
        unsigned n = 0;
        int left;

        for (GList *l = srv->clients; l; l = l->next) {
            QmpClient *c = l->data;

            if (!c->dead && c->out->len) {
                pfd[n] = (struct pollfd) { .fd = c->fd, .events = POLLOUT };
                who[n++] = c;
            }
        }
        left = (deadline - g_get_monotonic_time()) / 1000;
        if (!n || left <= 0) {
            return;
        }
        if (poll(pfd, n, left) < 0 && errno != EINTR) {
            return;
        }
        for (unsigned i = 0; i < n; i++) {
            QmpClient *c = who[i];
            ssize_t sent;

            if (!pfd[i].revents) {
                continue;
            }
            sent = send(c->fd, c->out->str, c->out->len,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
            if (sent > 0) {
                g_string_erase(c->out, 0, sent);
                srv->total_output -= sent;
            } else if (sent < 0 && errno != EINTR && errno != EAGAIN) {
                qmp_client_kill(c, g_strerror(errno));
            } else if (pfd[i].revents & (POLLERR | POLLHUP)) {
                qmp_client_kill(c, "hung up");
            }
        }
    }
}

/* ---- the server's options ---- */

const char *qmp_server_opts_given(const QmpServerOpts *o)
{
    return o->max_clients_str ? "--qmp-max-clients" :
           o->max_output_str ? "--qmp-max-output" :
           o->max_total_output_str ? "--qmp-max-total-output" :
           o->handshake_limit_str ? "--qmp-handshake-limit" : NULL;
}

bool qmp_server_opts_parse(QmpServerOpts *o, GError **errp)
{
    o->max_clients = QMP_DEFAULT_MAX_CLIENTS;
    o->max_output = QMP_MAX_CLIENT_OUTPUT;
    o->max_total_output = QMP_MAX_TOTAL_OUTPUT;
    o->handshake_limit = QMP_DEFAULT_HANDSHAKE_LIMIT;
    return (!o->max_clients_str ||
            parse_count("--qmp-max-clients", o->max_clients_str, 1,
                        QMP_MAX_MAX_CLIENTS, &o->max_clients, errp)) &&
           (!o->max_output_str ||
            parse_size_range("--qmp-max-output", o->max_output_str,
                             QMP_MIN_OUTPUT_LIMIT, QMP_MAX_OUTPUT_LIMIT,
                             false, &o->max_output, errp)) &&
           (!o->max_total_output_str ||
            parse_size_range("--qmp-max-total-output",
                             o->max_total_output_str, QMP_MIN_OUTPUT_LIMIT,
                             QMP_MAX_TOTAL_OUTPUT_LIMIT, false,
                             &o->max_total_output, errp)) &&
           (!o->handshake_limit_str ||
            parse_count("--qmp-handshake-limit", o->handshake_limit_str, 0,
                        QMP_MAX_HANDSHAKE_LIMIT, &o->handshake_limit, errp));
}

void qmp_server_opts_apply(const QmpServerOpts *o, QmpServer *srv)
{
    /* Paused well before dropped (qmp_server_set_output_limits()). */
    qmp_server_set_output_limits(srv, MIN(QMP_PAUSE_OUTPUT,
                                          o->max_output / 4),
                                 o->max_output, o->max_total_output);
    qmp_server_set_handshake_limit(srv, o->handshake_limit);
}

void qmp_server_opts_clear(QmpServerOpts *o)
{
    g_clear_pointer(&o->max_clients_str, g_free);
    g_clear_pointer(&o->max_output_str, g_free);
    g_clear_pointer(&o->max_total_output_str, g_free);
    g_clear_pointer(&o->handshake_limit_str, g_free);
}

/* ---- arguments ---- */

/* Integers and booleans may be strings (qmp_args_set_keyval()). */
static bool qmp_args_keyval;

void qmp_args_set_keyval(bool on)
{
    qmp_args_keyval = on;
}

bool qmp_args_are_keyval(void)
{
    return qmp_args_keyval;
}

/*
 * The keyval string @str of argument @name as a @type (G_TYPE_INT64 or
 * G_TYPE_BOOLEAN) into *@out, as QEMU's keyval input visitor converts it.
 */
static bool qmp_arg_from_keyval(const char *name, const char *str,
                                GType type, void *out, GError **errp)
{
    if (type == G_TYPE_INT64) {
        char *end;
        long long v;

        errno = 0;
        v = strtoll(str, &end, 0);
        if (*str && !*end && !errno) {
            *(int64_t *)out = v;
            return true;
        }
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter '%s' expects integer", name);
        return false;
    }
    if (!strcmp(str, "on") || !strcmp(str, "yes") ||
        !strcmp(str, "true") || !strcmp(str, "y")) {
        *(bool *)out = true;
        return true;
    }
    if (!strcmp(str, "off") || !strcmp(str, "no") ||
        !strcmp(str, "false") || !strcmp(str, "n")) {
        *(bool *)out = false;
        return true;
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "Parameter '%s' expects 'on' or 'off'", name);
    return false;
}

bool qmp_check_args(JsonObject *args, const char *const *allowed,
                    GError **errp)
{
    g_autoptr(GList) members = json_object_get_members(args);

    for (GList *l = members; l; l = l->next) {
        if (!g_strv_contains(allowed, l->data)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is unexpected",
                        (const char *)l->data);
            return false;
        }
    }
    return true;
}

/*
 * Argument @name of @args, of JSON type @type (G_TYPE_STRING, G_TYPE_INT64
 * or G_TYPE_BOOLEAN) into *@out (a const char *, int64_t or bool): true
 * with *@out set, or untouched when it is absent and not @required; false
 * with @errp set when it is missing or of another type.
 */
static bool qmp_arg(JsonObject *args, const char *name, bool required,
                    GType type, void *out, GError **errp)
{
    JsonNode *n = json_object_get_member(args, name);

    if (!n) {
        if (required) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is missing", name);
            return false;
        }
        return true;
    }
    if (qmp_args_keyval && type != G_TYPE_STRING &&
        JSON_NODE_HOLDS_VALUE(n) &&
        json_node_get_value_type(n) == G_TYPE_STRING) {
        return qmp_arg_from_keyval(name, json_node_get_string(n), type, out,
                                   errp);
    }
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != type) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid parameter type for '%s', expected: %s", name,
                    type == G_TYPE_STRING ? "string" :
                    type == G_TYPE_INT64 ? "integer" : "boolean");
        return false;
    }
    if (type == G_TYPE_STRING) {
        *(const char **)out = json_node_get_string(n);
    } else if (type == G_TYPE_INT64) {
        *(int64_t *)out = json_node_get_int(n);
    } else {
        *(bool *)out = json_node_get_boolean(n);
    }
    return true;
}

bool qmp_arg_str(JsonObject *args, const char *name, bool required,
                 const char **out, GError **errp)
{
    return qmp_arg(args, name, required, G_TYPE_STRING, out, errp);
}

bool qmp_arg_int(JsonObject *args, const char *name, bool required,
                 int64_t *out, GError **errp)
{
    return qmp_arg(args, name, required, G_TYPE_INT64, out, errp);
}

bool qmp_arg_bool(JsonObject *args, const char *name, bool required,
                  bool *out, GError **errp)
{
    return qmp_arg(args, name, required, G_TYPE_BOOLEAN, out, errp);
}
