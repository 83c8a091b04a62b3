/*
 * libqtest: one QMP connection (send, read with deadlines, replies and
 * the event queue).  See libqtest.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest-int.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- connections: low level ---- */

QTestConn *qtest_conn_new(QTestState *q, int fd)
{
    QTestConn *c = g_new0(QTestConn, 1);

    c->q = q;
    c->fd = fd;
    c->in = g_string_new(NULL);
    g_queue_init(&c->events);
    q->conns = g_list_prepend(q->conns, c);
    return c;
}

void qtest_conn_free(QTestConn *c)
{
    if (!c) {
        return;
    }
    c->q->conns = g_list_remove(c->q->conns, c);
    if (c->q->conn == c) {
        c->q->conn = NULL;
    }
    close(c->fd);
    g_string_free(c->in, TRUE);
    g_queue_clear_full(&c->events, (GDestroyNotify)json_object_unref);
    if (c->greeting) {
        json_object_unref(c->greeting);
    }
    g_free(c);
}

bool qtest_conn_send_raw(QTestConn *c, const char *data, size_t len)
{
    gint64 deadline = g_get_monotonic_time() +
                      QTEST_REPLY_TIMEOUT_S * G_USEC_PER_SEC;

    while (len) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
        int left = (deadline - g_get_monotonic_time()) / 1000;
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, left) <= 0) {
            return false;
        }
        n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n < 0) {
            return false;
        }
        data += n;
        len -= n;
    }
    return true;
}

/*
 * Read more bytes into c->in before @deadline.  Returns 1 on data, 0 on
 * EOF (or a reset), -1 on timeout.
 */
static int qtest_conn_fill(QTestConn *c, gint64 deadline)
{
    for (;;) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int left = (deadline - g_get_monotonic_time()) / 1000;
        char buf[65536];
        ssize_t n;
        int r;

        if (left < 0) {
            return -1;
        }
        r = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r == 0) {
            return -1;
        }
        n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            return 0;
        }
        g_string_append_len(c->in, buf, n);
        return 1;
    }
}

JsonObject *qtest_conn_read_deadline(QTestConn *c, gint64 deadline)
{
    for (;;) {
        char *nl = memchr(c->in->str, '\n', c->in->len);

        if (nl) {
            g_autofree char *line = g_strndup(c->in->str, nl - c->in->str);
            g_autoptr(JsonParser) p = json_parser_new();
            g_autoptr(GError) err = NULL;
            JsonNode *root;

            g_string_erase(c->in, 0, nl - c->in->str + 1);
            g_strstrip(line);
            if (!*line) {
                continue;
            }
            if (!json_parser_load_from_data(p, line, -1, &err) ||
                !(root = json_parser_get_root(p)) ||
                !JSON_NODE_HOLDS_OBJECT(root)) {
                qtest_die(c->q, "the server sent a line that is not a "
                          "JSON object: %s", line);
            }
            return json_object_ref(json_node_get_object(root));
        }
        if (qtest_conn_fill(c, deadline) <= 0) {
            return NULL;
        }
    }
}

char *qtest_conn_read_line(QTestConn *c, int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;

    for (;;) {
        char *nl = memchr(c->in->str, '\n', c->in->len);

        if (nl) {
            size_t len = nl - c->in->str;
            char *line = g_strndup(c->in->str, len);

            g_string_erase(c->in, 0, len + 1);
            if (len && line[len - 1] == '\r') {
                line[len - 1] = 0;
            }
            return line;
        }
        if (qtest_conn_fill(c, deadline) <= 0) {
            return NULL;
        }
    }
}

JsonObject *qtest_conn_read(QTestConn *c, int timeout_s)
{
    return qtest_conn_read_deadline(c, g_get_monotonic_time() +
                                    timeout_s * G_USEC_PER_SEC);
}

bool qtest_conn_wait_eof(QTestConn *c, int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;

    for (;;) {
        int r;

        g_string_truncate(c->in, 0);
        r = qtest_conn_fill(c, deadline);
        if (r <= 0) {
            return r == 0;
        }
    }
}

JsonObject *qtest_conn_greeting(QTestConn *c)
{
    return c->greeting;
}

/* The next reply before @deadline, queueing events; NULL: none came. */
static JsonObject *qtest_conn_reply_deadline(QTestConn *c, gint64 deadline)
{
    for (;;) {
        JsonObject *msg = qtest_conn_read_deadline(c, deadline);

        if (!msg) {
            return NULL;
        }
        if (json_object_has_member(msg, "return") ||
            json_object_has_member(msg, "error")) {
            return msg;
        }
        if (json_object_has_member(msg, "event")) {
            g_queue_push_tail(&c->events, msg);
            continue;
        }
        qtest_die(c->q, "unexpected message: %s",
                  qtest_json_to_string(msg));
    }
}

JsonObject *qtest_conn_read_reply(QTestConn *c, int timeout_s)
{
    JsonObject *r = qtest_conn_reply_deadline(c, g_get_monotonic_time() +
                                                 timeout_s * G_USEC_PER_SEC);

    if (!r) {
        qtest_die(c->q, "no reply within %d s (connection closed or "
                  "timed out)", timeout_s);
    }
    return r;
}

char *qtest_conn_read_reply_line(QTestConn *c, int timeout_s)
{
    for (;;) {
        char *line = qtest_conn_read_line(c, timeout_s);
        g_autoptr(JsonParser) p = NULL;
        JsonNode *root;

        if (!line) {
            qtest_die(c->q, "no reply line within %d s (connection closed "
                      "or timed out)", timeout_s);
        }
        if (!g_str_has_prefix(line, "{\"event\"")) {
            return line;
        }
        p = json_parser_new();
        if (!json_parser_load_from_data(p, line, -1, NULL) ||
            !(root = json_parser_get_root(p)) ||
            !JSON_NODE_HOLDS_OBJECT(root)) {
            qtest_die(c->q, "the server sent an event that is not a JSON "
                      "object: %s", line);
        }
        g_queue_push_tail(&c->events,
                          json_object_ref(json_node_get_object(root)));
        g_free(line);
    }
}

JsonObject *qtest_conn_qmp_raw(QTestConn *c, const char *line)
{
    g_autofree char *text = g_strdup_printf("%s\n", line);
    JsonObject *r;

    if (!qtest_conn_send_raw(c, text, strlen(text))) {
        qtest_die(c->q, "cannot send '%s': %s", line, g_strerror(errno));
    }
    r = qtest_conn_reply_deadline(c, g_get_monotonic_time() +
                                     QTEST_REPLY_TIMEOUT_S * G_USEC_PER_SEC);
    if (!r) {
        qtest_die(c->q, "no reply to '%s' (connection closed or "
                  "%d s passed)", line, QTEST_REPLY_TIMEOUT_S);
    }
    return r;
}

char *qtest_request_vprintf(const char *cmd, const char *fmt,
                                   va_list ap)
{
    g_autofree char *args = NULL;

    if (!fmt) {
        return g_strdup_printf("{\"execute\": \"%s\"}", cmd);
    }
    args = g_strdup_vprintf(fmt, ap);
    return g_strdup_printf("{\"execute\": \"%s\", \"arguments\": %s}", cmd,
                           args);
}

JsonObject *qtest_conn_qmp(QTestConn *c, const char *cmd, const char *fmt,
                           ...)
{
    g_autofree char *req = NULL;
    va_list ap;

    va_start(ap, fmt);
    req = qtest_request_vprintf(cmd, fmt, ap);
    va_end(ap);
    return qtest_conn_qmp_raw(c, req);
}

JsonObject *qtest_conn_take_event(QTestConn *c, const char *name)
{
    for (GList *l = c->events.head; l; l = l->next) {
        JsonObject *ev = l->data;

        if (!strcmp(json_object_get_string_member(ev, "event"), name)) {
            g_queue_delete_link(&c->events, l);
            return ev;
        }
    }
    return NULL;
}

void qtest_conn_clear_events(QTestConn *c)
{
    g_queue_clear_full(&c->events, (GDestroyNotify)json_object_unref);
    g_queue_init(&c->events);
}

JsonObject *qtest_conn_wait_event(QTestConn *c, const char *name,
                                  int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;
    JsonObject *ev = qtest_conn_take_event(c, name);

    while (!ev) {
        JsonObject *msg = qtest_conn_read_deadline(c, deadline);

        if (!msg) {
            qtest_die(c->q, "no %s event within %d s (connection %s)", name,
                      timeout_s, g_get_monotonic_time() < deadline
                                 ? "closed" : "open");
        }
        if (!json_object_has_member(msg, "event")) {
            qtest_die(c->q, "a reply nobody asked for: %s",
                      qtest_json_to_string(msg));
        }
        if (!strcmp(json_object_get_string_member(msg, "event"), name)) {
            ev = msg;
        } else {
            g_queue_push_tail(&c->events, msg);
        }
    }
    return ev;
}
