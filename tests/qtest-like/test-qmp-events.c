/*
 * QMP events and the daemon's clients (qmp.c): an event emitted while no
 * client is there, or while a client has not negotiated, goes nowhere
 * (as in QEMU, whose monitors in negotiation get no events) and is not
 * sent later; a negotiated client gets the next one.  After
 * qmp_server_close_input() no request is read any more, but events still
 * go out.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qemu-mirror-tool/qmp.h"

/* Run the main loop until @fd has a whole line, and return it. */
static char *read_line(int fd)
{
    GString *line = g_string_new(NULL);
    gint64 end = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;

    while (!strchr(line->str, '\n')) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);

        if (n == 1) {
            g_string_append_c(line, c);
            continue;
        }
        g_assert_cmpint(g_get_monotonic_time(), <, end);
        g_main_context_iteration(NULL, TRUE);
    }
    return g_string_free(line, FALSE);
}

/* Run what the main loop has to do now. */
static void settle(void)
{
    while (g_main_context_iteration(NULL, FALSE)) {
        /* dispatch */
    }
}

/* Nothing is waiting on @fd (after the server has run). */
static void assert_nothing(int fd)
{
    char c;

    settle();
    g_assert_cmpint(recv(fd, &c, 1, MSG_DONTWAIT), ==, -1);
}

static void send_line(int fd, const char *line)
{
    g_assert_cmpint(write(fd, line, strlen(line)), ==, (ssize_t)strlen(line));
}

static void test_dropped(void)
{
    g_autoptr(GError) err = NULL;
    QmpServer *srv = qmp_server_new(NULL, 4, &err);
    g_autofree char *greeting = NULL;
    g_autofree char *reply = NULL;
    g_autofree char *event = NULL;
    int sv[2];

    g_assert_no_error(err);
    /* No client at all: the event goes nowhere. */
    qmp_server_emit_event(srv, "EARLY", NULL);

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                    ==, 0);
    g_assert_true(qmp_server_add_client(srv, sv[0]));
    greeting = read_line(sv[1]);
    g_assert_nonnull(strstr(greeting, "\"QMP\""));
    /* Connected, not negotiated: nothing, now or later. */
    qmp_server_emit_event(srv, "BEFORE", NULL);
    assert_nothing(sv[1]);
    send_line(sv[1], "{\"execute\": \"qmp_capabilities\"}\n");
    reply = read_line(sv[1]);
    g_assert_cmpstr(reply, ==, "{\"return\":{}}\r\n");
    assert_nothing(sv[1]);

    /* Negotiated: the next event, even with input closed. */
    qmp_server_close_input(srv);
    send_line(sv[1], "{\"execute\": \"qmp_capabilities\"}\n");
    qmp_server_emit_event(srv, "AFTER", NULL);
    event = read_line(sv[1]);
    g_assert_true(g_str_has_prefix(event, "{\"event\":\"AFTER\","));
    /* The request sent after close_input was not read. */
    assert_nothing(sv[1]);

    qmp_server_free(srv);
    close(sv[1]);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/events/dropped", test_dropped);
    return g_test_run();
}
