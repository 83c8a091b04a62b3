/*
 * The QMP server: UNIX socket, clients, negotiation, dispatch, events.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp.h"
#include "util/sockets.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A request line longer than this is a broken or hostile client. */
#define QMP_MAX_LINE        (1 << 20)
/* Replies and events a client may leave unread before it is dropped. */
#define QMP_MAX_OUTBUF      (16 << 20)

G_DEFINE_QUARK(qmp-error-quark, qmp_error)

typedef struct QmpCommand {
    QmpCommandFunc *fn;
    void *opaque;
} QmpCommand;

typedef struct QmpClient {
    QmpServer *srv;
    int fd;
    guint in_watch;
    guint out_watch;
    GString *in;
    GString *out;
    bool negotiated;
} QmpClient;

struct QmpServer {
    SocketUnixListener listener;
    guint watch;
    GHashTable *commands;       /* name -> QmpCommand */
    GList *clients;             /* QmpClient */
    void (*negotiated_cb)(void *opaque);
    void *negotiated_opaque;
};

static const char *const qmp_class_names[] = {
    [QMP_ERROR_GENERIC] = "GenericError",
    [QMP_ERROR_COMMAND_NOT_FOUND] = "CommandNotFound",
    [QMP_ERROR_DEVICE_NOT_ACTIVE] = "DeviceNotActive",
    [QMP_ERROR_DEVICE_NOT_FOUND] = "DeviceNotFound",
};

/* ---- output ---- */

static void qmp_client_free(QmpClient *c);

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
            qmp_client_free(c);
            return G_SOURCE_REMOVE;
        }
        g_string_erase(c->out, 0, n);
    }
    c->out_watch = 0;
    return G_SOURCE_REMOVE;
}

static void qmp_client_send(QmpClient *c, JsonNode *msg)
{
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autofree char *text = NULL;

    json_generator_set_root(gen, msg);
    text = json_generator_to_data(gen, NULL);
    json_node_unref(msg);
    if (c->out->len + strlen(text) > QMP_MAX_OUTBUF) {
        g_debug("qmp: dropping a client that does not read");
        qmp_client_free(c);
        return;
    }
    g_string_append(c->out, text);
    g_string_append(c->out, "\r\n");
    if (!c->out_watch) {
        c->out_watch = g_unix_fd_add(c->fd, G_IO_OUT, qmp_client_writable,
                                     c);
    }
}

static JsonNode *qmp_error_reply(GError *err, JsonNode *id)
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
    if (id) {
        json_builder_set_member_name(b, "id");
        json_builder_add_value(b, json_node_copy(id));
    }
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

static JsonNode *qmp_return_reply(JsonNode *ret, JsonNode *id)
{
    JsonObject *o = json_object_new();
    JsonNode *msg = json_node_new(JSON_NODE_OBJECT);

    json_object_set_member(o, "return",
                           ret ? ret : json_node_init_object(
                               json_node_alloc(), json_object_new()));
    if (id) {
        json_object_set_member(o, "id", json_node_copy(id));
    }
    json_node_take_object(msg, o);
    return msg;
}

/* ---- input ---- */

/* Run one request line; a reply is always sent. */
static void qmp_client_handle(QmpClient *c, const char *line)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) err = NULL;
    JsonObject *req, *args = NULL;
    JsonNode *root, *id = NULL, *ret;
    g_autoptr(JsonObject) empty = json_object_new();
    const char *name;
    QmpCommand *cmd;

    if (!json_parser_load_from_data(parser, line, -1, &err)) {
        g_clear_error(&err);
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC, "JSON parse error");
        goto out_error;
    }
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input must be a JSON object");
        goto out_error;
    }
    req = json_node_get_object(root);
    id = json_object_get_member(req, "id");
    if (!json_object_has_member(req, "execute") ||
        json_node_get_value_type(json_object_get_member(req, "execute")) !=
        G_TYPE_STRING) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input lacks member 'execute'");
        goto out_error;
    }
    name = json_object_get_string_member(req, "execute");
    if (json_object_has_member(req, "arguments")) {
        JsonNode *a = json_object_get_member(req, "arguments");

        if (!JSON_NODE_HOLDS_OBJECT(a)) {
            g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                        "QMP input member 'arguments' must be an object");
            goto out_error;
        }
        args = json_node_get_object(a);
    }
    if (!args) {
        args = empty;
    }

    if (!strcmp(name, "qmp_capabilities")) {
        if (c->negotiated) {
            g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                        "Capabilities negotiation is already complete, "
                        "command ignored");
            goto out_error;
        }
        c->negotiated = true;
        qmp_client_send(c, qmp_return_reply(NULL, id));
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
    cmd = g_hash_table_lookup(c->srv->commands, name);
    if (!cmd) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "The command %s has not been found", name);
        goto out_error;
    }
    ret = cmd->fn(args, cmd->opaque, &err);
    if (err) {
        if (ret) {
            json_node_unref(ret);
        }
        goto out_error;
    }
    qmp_client_send(c, qmp_return_reply(ret, id));
    return;

out_error:
    qmp_client_send(c, qmp_error_reply(err, id));
}

static gboolean qmp_client_readable(gint fd, GIOCondition cond,
                                    gpointer opaque)
{
    QmpClient *c = opaque;
    QmpServer *srv = c->srv;
    char buf[4096];
    ssize_t n;
    char *nl;

    n = recv(c->fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    if (n <= 0) {
        c->in_watch = 0;
        qmp_client_free(c);
        return G_SOURCE_REMOVE;
    }
    g_string_append_len(c->in, buf, n);
    /* One request per line; handling may free the client (it stops). */
    while ((nl = memchr(c->in->str, '\n', c->in->len))) {
        g_autofree char *line = g_strndup(c->in->str, nl - c->in->str);
        g_string_erase(c->in, 0, nl - c->in->str + 1);
        g_strstrip(line);
        if (!*line) {
            continue;
        }
        qmp_client_handle(c, line);
        if (!g_list_find(srv->clients, c)) {
            return G_SOURCE_REMOVE;     /* dropped while sending */
        }
    }
    if (c->in->len > QMP_MAX_LINE) {
        g_debug("qmp: request line too long, dropping the client");
        c->in_watch = 0;
        qmp_client_free(c);
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void qmp_client_free(QmpClient *c)
{
    c->srv->clients = g_list_remove(c->srv->clients, c);
    if (c->in_watch) {
        g_source_remove(c->in_watch);
    }
    if (c->out_watch) {
        g_source_remove(c->out_watch);
    }
    close(c->fd);
    g_string_free(c->in, TRUE);
    g_string_free(c->out, TRUE);
    g_free(c);
}

static void qmp_client_greet(QmpClient *c)
{
    g_autofree char *package = g_strdup_printf("qemu-mirror %s",
                                               QEMU_MIRROR_VERSION);
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "QMP");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "version");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "qemu");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "micro");
    json_builder_add_int_value(b, 0);
    json_builder_set_member_name(b, "minor");
    json_builder_add_int_value(b, 1);
    json_builder_set_member_name(b, "major");
    json_builder_add_int_value(b, 0);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "package");
    json_builder_add_string_value(b, package);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "capabilities");
    json_builder_begin_array(b);
    json_builder_end_array(b);
    json_builder_end_object(b);
    json_builder_end_object(b);
    qmp_client_send(c, json_builder_get_root(b));
}

static gboolean qmp_server_accept(gint fd, GIOCondition cond,
                                  gpointer opaque)
{
    QmpServer *srv = opaque;
    QmpClient *c;
    int cfd = accept4(srv->listener.fd, NULL, NULL,
                      SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (cfd < 0) {
        return G_SOURCE_CONTINUE;
    }
    c = g_new0(QmpClient, 1);
    c->srv = srv;
    c->fd = cfd;
    c->in = g_string_new(NULL);
    c->out = g_string_new(NULL);
    srv->clients = g_list_append(srv->clients, c);
    c->in_watch = g_unix_fd_add(cfd, G_IO_IN | G_IO_HUP | G_IO_ERR,
                                qmp_client_readable, c);
    qmp_client_greet(c);
    return G_SOURCE_CONTINUE;
}

/* ---- server ---- */

QmpServer *qmp_server_new(const char *path, GError **errp)
{
    g_autoptr(GError) err = NULL;
    QmpServer *srv = g_new0(QmpServer, 1);

    if (!socket_unix_listen(&srv->listener, "--qmp", path, 16, &err)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "%s", err->message);
        g_free(srv);
        return NULL;
    }
    srv->commands = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                          g_free);
    srv->watch = g_unix_fd_add(srv->listener.fd, G_IO_IN, qmp_server_accept,
                               srv);
    return srv;
}

void qmp_server_free(QmpServer *srv)
{
    if (!srv) {
        return;
    }
    while (srv->clients) {
        qmp_client_free(srv->clients->data);
    }
    g_source_remove(srv->watch);
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
    g_autoptr(JsonGenerator) gen = json_generator_new();
    JsonNode *msg = qmp_event_new(event, data);
    char *text;

    json_generator_set_root(gen, msg);
    text = json_generator_to_data(gen, NULL);
    json_node_unref(msg);
    return text;
}

void qmp_server_emit_event(QmpServer *srv, const char *event,
                           JsonNode *data)
{
    JsonNode *msg = qmp_event_new(event, data);
    GList *l = srv->clients;

    while (l) {
        QmpClient *c = l->data;

        l = l->next;    /* sending may drop the client */
        if (c->negotiated) {
            qmp_client_send(c, json_node_copy(msg));
        }
    }
    json_node_unref(msg);
}

bool qmp_server_has_client(QmpServer *srv)
{
    for (GList *l = srv->clients; l; l = l->next) {
        if (((QmpClient *)l->data)->negotiated) {
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

    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        while (c->out->len) {
            struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
            int left = (deadline - g_get_monotonic_time()) / 1000;
            ssize_t n;

            if (left <= 0 || poll(&pfd, 1, left) <= 0) {
                return;
            }
            n = send(c->fd, c->out->str, c->out->len, MSG_NOSIGNAL);
            if (n < 0 && errno != EINTR && errno != EAGAIN) {
                break;
            }
            if (n > 0) {
                g_string_erase(c->out, 0, n);
            }
        }
    }
}

/* ---- arguments ---- */

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

static JsonNode *qmp_arg(JsonObject *args, const char *name, bool required,
                         GType type, const char *type_name, GError **errp)
{
    JsonNode *n = json_object_get_member(args, name);

    if (!n) {
        if (required) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is missing", name);
        }
        return NULL;
    }
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != type) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid parameter type for '%s', expected: %s", name,
                    type_name);
        return NULL;
    }
    return n;
}

bool qmp_arg_str(JsonObject *args, const char *name, bool required,
                 const char **out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_STRING, "string",
                          &err);

    if (n) {
        *out = json_node_get_string(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}

bool qmp_arg_int(JsonObject *args, const char *name, bool required,
                 int64_t *out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_INT64, "integer",
                          &err);

    if (n) {
        *out = json_node_get_int(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}

bool qmp_arg_bool(JsonObject *args, const char *name, bool required,
                  bool *out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_BOOLEAN, "boolean",
                          &err);

    if (n) {
        *out = json_node_get_boolean(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}
