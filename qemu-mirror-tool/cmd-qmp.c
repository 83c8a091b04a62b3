/*
 * mirror-tool qmp: a small QMP client for scripts.
 *
 *   mirror-tool qmp PATH CMD ['ARGS-JSON']    run one command
 *   mirror-tool qmp --wait-event NAME PATH    wait for an event
 *
 * It negotiates capabilities, sends the command, prints the "return"
 * value as one JSON line (exit 0) or the error (exit 1), and with
 * --wait-event then waits for that event and prints it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp.h"
#include "qemu-mirror-tool/tool.h"
#include "util/cutils.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A server message longer than this is not a QMP server's. */
#define QMP_CLIENT_MAX_LINE     (64 << 20)

typedef struct QmpConn {
    int fd;
    GString *in;
    gint64 deadline_us;
} QmpConn;

static bool qmp_conn_open(QmpConn *c, const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };

    if (strlen(path) >= sizeof(addr.sun_path)) {
        tool_error("'%s': socket path too long", path);
        return false;
    }
    strcpy(addr.sun_path, path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 ||
        connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        tool_error("cannot connect to '%s': %s", path, g_strerror(errno));
        return false;
    }
    c->in = g_string_new(NULL);
    return true;
}

/*
 * The next message (a parsed JSON object), or NULL on EOF or timeout.
 * Lines that are not JSON objects are skipped; the server's lines are
 * parsed with the server's own limits (nesting, duplicate keys).
 */
static JsonObject *qmp_conn_read(QmpConn *c)
{
    for (;;) {
        char *nl = memchr(c->in->str, '\n', c->in->len);
        char buf[65536];
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int left;
        ssize_t n;

        if (nl) {
            size_t len = nl - c->in->str;
            g_autoptr(JsonNode) root = qmp_json_parse(c->in->str, len,
                                                      NULL);

            g_string_erase(c->in, 0, len + 1);
            if (root && JSON_NODE_HOLDS_OBJECT(root)) {
                return json_object_ref(json_node_get_object(root));
            }
            continue;
        }
        if (c->in->len > QMP_CLIENT_MAX_LINE) {
            tool_error("the server sent a line longer than %d MiB",
                       QMP_CLIENT_MAX_LINE >> 20);
            return NULL;
        }
        left = (c->deadline_us - g_get_monotonic_time()) / 1000;
        if (left <= 0 || poll(&pfd, 1, left) <= 0) {
            return NULL;
        }
        n = recv(c->fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            return NULL;
        }
        g_string_append_len(c->in, buf, n);
    }
}

static bool qmp_conn_send(QmpConn *c, const char *text)
{
    g_autofree char *line = g_strdup_printf("%s\n", text);
    size_t len = strlen(line);

    while (len) {
        ssize_t n = send(c->fd, line + (strlen(line) - len), len,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            tool_error("send: %s", g_strerror(errno));
            return false;
        }
        len -= n;
    }
    return true;
}

static void print_node(JsonNode *node)
{
    g_autofree char *text = qmp_json_to_string(node);

    printf("%s\n", text);
    fflush(stdout);
}

/* Send @request and wait for its reply; events in between are checked
 * against @event and remembered in *@seen. */
static int qmp_conn_execute(QmpConn *c, const char *request, bool print,
                            const char *event, bool *seen)
{
    if (!qmp_conn_send(c, request)) {
        return TOOL_EXIT_FAILURE;
    }
    for (;;) {
        g_autoptr(JsonObject) msg = qmp_conn_read(c);

        if (!msg) {
            tool_error("no reply (connection closed or timed out)");
            return TOOL_EXIT_FAILURE;
        }
        if (json_object_has_member(msg, "return")) {
            if (print) {
                print_node(json_object_get_member(msg, "return"));
            }
            return TOOL_EXIT_OK;
        }
        if (json_object_has_member(msg, "error")) {
            JsonObject *e = json_object_get_object_member(msg, "error");

            tool_error("%s: %s",
                       json_object_get_string_member_with_default(
                           e, "class", "GenericError"),
                       json_object_get_string_member_with_default(
                           e, "desc", "(no description)"));
            return TOOL_EXIT_FAILURE;
        }
        if (event && json_object_has_member(msg, "event") &&
            !strcmp(json_object_get_string_member(msg, "event"), event)) {
            JsonNode *n = json_node_init_object(json_node_alloc(), msg);

            *seen = true;
            print_node(n);
            json_node_unref(n);
        }
    }
}

int cmd_qmp(int argc, char **argv)
{
    g_autofree char *event = NULL;
    g_autofree char *timeout = NULL;
    g_autoptr(GError) err = NULL;
    g_autofree char *request = NULL;
    QmpConn c = { .fd = -1 };
    int64_t secs = 60;
    bool seen = false;
    int ret;
    GOptionEntry entries[] = {
        { "wait-event", 0, 0, G_OPTION_ARG_STRING, &event,
          "then wait for this event and print it", "NAME" },
        { "timeout", 0, 0, G_OPTION_ARG_STRING, &timeout,
          "give up after SECS seconds (default 60)", "SECS" },
        { NULL },
    };
    static const char summary[] =
        "Send one QMP command to `mirror-tool start --qmp PATH` or\n"
        "`mirror-tool daemon --qmp PATH` and print its return value as\n"
        "JSON; or wait for an event.";

    if (!tool_parse_options("PATH [COMMAND ['ARGUMENTS-JSON']]", summary,
                            entries, &argc, &argv)) {
        return TOOL_EXIT_USAGE;
    }
    if (argc < 2 || argc > 4 || (argc == 2 && !event)) {
        tool_error("qmp: expected a socket and a command, or --wait-event "
                   "(try 'mirror-tool qmp --help')");
        return TOOL_EXIT_USAGE;
    }
    if (!*argv[1]) {
        tool_error("qmp: socket path missing");
        return TOOL_EXIT_USAGE;
    }
    if (timeout && !parse_count("--timeout", timeout, 1, 86400, &secs,
                                &err)) {
        tool_error("%s", err->message);
        return TOOL_EXIT_USAGE;
    }
    if (argc >= 3) {
        g_autoptr(JsonBuilder) b = json_builder_new();

        json_builder_begin_object(b);
        json_builder_set_member_name(b, "execute");
        json_builder_add_string_value(b, argv[2]);
        if (argc == 4) {
            /* The server's parser and limits: what it would refuse, and
             * what would overflow json-glib's stack, fails here. */
            size_t len = strlen(argv[3]);
            g_autofree char *shown = len > 64
                ? g_strdup_printf("%.64s...", argv[3]) : g_strdup(argv[3]);
            g_autoptr(JsonNode) a = NULL;

            if (len > QMP_MAX_LINE) {
                tool_error("arguments '%s': longer than %d KiB", shown,
                           QMP_MAX_LINE >> 10);
                return TOOL_EXIT_USAGE;
            }
            a = qmp_json_parse(argv[3], len, &err);
            if (!a) {
                tool_error("arguments '%s': %s", shown, err->message);
                return TOOL_EXIT_USAGE;
            }
            if (!JSON_NODE_HOLDS_OBJECT(a)) {
                tool_error("arguments '%s': expected a JSON object", shown);
                return TOOL_EXIT_USAGE;
            }
            json_builder_set_member_name(b, "arguments");
            json_builder_add_value(b, g_steal_pointer(&a));
        }
        json_builder_end_object(b);
        {
            g_autoptr(JsonNode) root = json_builder_get_root(b);

            request = qmp_json_to_string(root);
        }
    }

    c.deadline_us = g_get_monotonic_time() + secs * G_USEC_PER_SEC;
    if (!qmp_conn_open(&c, argv[1])) {
        return TOOL_EXIT_FAILURE;
    }
    {
        g_autoptr(JsonObject) greeting = qmp_conn_read(&c);

        JsonNode *e = greeting ? json_object_get_member(greeting, "error")
                               : NULL;

        if (e && JSON_NODE_HOLDS_OBJECT(e)) {
            /* Refused (too many clients). */
            tool_error("'%s': %s", argv[1],
                       json_object_get_string_member_with_default(
                           json_node_get_object(e), "desc", "refused"));
            ret = TOOL_EXIT_FAILURE;
            goto out;
        }
        if (!greeting || !json_object_has_member(greeting, "QMP")) {
            tool_error("'%s' did not greet like a QMP server", argv[1]);
            ret = TOOL_EXIT_FAILURE;
            goto out;
        }
    }
    ret = qmp_conn_execute(&c, "{\"execute\": \"qmp_capabilities\"}",
                           false, NULL, NULL);
    if (ret == TOOL_EXIT_OK && request) {
        ret = qmp_conn_execute(&c, request, true, event, &seen);
    }
    while (ret == TOOL_EXIT_OK && event && !seen) {
        g_autoptr(JsonObject) msg = qmp_conn_read(&c);

        if (!msg) {
            tool_error("no %s event within %" G_GINT64_FORMAT " s", event,
                       secs);
            ret = TOOL_EXIT_FAILURE;
        } else if (json_object_has_member(msg, "event") &&
                   !strcmp(json_object_get_string_member(msg, "event"),
                           event)) {
            JsonNode *n = json_node_init_object(json_node_alloc(), msg);

            print_node(n);
            json_node_unref(n);
            seen = true;
        }
    }
out:
    close(c.fd);
    if (c.in) {
        g_string_free(c.in, TRUE);
    }
    return ret;
}
