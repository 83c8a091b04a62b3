/*
 * libqtest internals shared by libqtest.c (the process, connecting, the
 * shortcuts) and libqtest-conn.c (one QMP connection).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef LIBQTEST_INT_H
#define LIBQTEST_INT_H

#include "tests/qtest-like/libqtest.h"

#include <gio/gio.h>
#include <stdarg.h>

struct QTestConn {
    QTestState *q;
    int fd;
    GString *in;
    GQueue events;          /* JsonObject, oldest first */
    JsonObject *greeting;
};

struct QTestState {
    GSubprocess *proc;
    int pid;
    bool exited;
    int exit_code;
    char *sock_path;
    char *stdout_path;
    char *stderr_path;
    char *stdout_buf;
    char *stderr_buf;
    QTestConn *conn;
    GList *conns;           /* every open QTestConn */
};

/* Fail the test with a message (and the tool's stderr if @q). */
void G_GNUC_NORETURN G_GNUC_PRINTF(2, 3)
qtest_die(QTestState *q, const char *fmt, ...);

/* A connection on @fd, added to @q's list. */
QTestConn *qtest_conn_new(QTestState *q, int fd);

/* The next message before @deadline (monotonic us), or NULL. */
JsonObject *qtest_conn_read_deadline(QTestConn *c, gint64 deadline);

/* {"execute": @cmd[, "arguments": vprintf(@fmt)]} */
char *qtest_request_vprintf(const char *cmd, const char *fmt, va_list ap)
    G_GNUC_PRINTF(2, 0);

#endif /* LIBQTEST_INT_H */
