/*
 * A libqtest-like helper: spawn mirror-tool with a QMP socket, connect,
 * and the shortcuts on the main connection.  See libqtest.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest-int.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- failing with context ---- */

void qtest_die(QTestState *q, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (q) {
        g_test_message("mirror-tool stderr:\n%s", qtest_stderr(q));
    }
    g_assertion_message(G_LOG_DOMAIN, __FILE__, __LINE__, G_STRFUNC, msg);
    abort();
}

/* ---- the process ---- */

const char *qtest_tool_path(void)
{
    static char *path;

    if (!path) {
        const char *env = g_getenv("MIRROR_TOOL");

        if (env && *env) {
            /* The tool runs in the scratch directory: make it absolute. */
            path = g_canonicalize_filename(env, NULL);
        } else {
            g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);
            g_autofree char *dir = g_path_get_dirname(exe ? exe : ".");

            path = g_build_filename(dir, "..", "..", "qemu-mirror-tool",
                                    "mirror-tool", NULL);
        }
    }
    return path;
}

static void qtest_child_setup(gpointer opaque)
{
    /* Die with the test: a failed assertion must not leave tools behind. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static void qtest_exited_cb(GObject *obj, GAsyncResult *res, gpointer opaque)
{
    QTestState *q = opaque;
    GSubprocess *proc = G_SUBPROCESS(obj);

    g_subprocess_wait_finish(proc, res, NULL);
    if (g_subprocess_get_if_exited(proc)) {
        q->exit_code = g_subprocess_get_exit_status(proc);
    } else if (g_subprocess_get_if_signaled(proc)) {
        q->exit_code = 128 + g_subprocess_get_term_sig(proc);
    } else {
        q->exit_code = -1;
    }
    q->exited = true;
}

bool qtest_exited(QTestState *q)
{
    while (g_main_context_iteration(NULL, FALSE)) {
        /* deliver the exit notification if it is there */
    }
    return q->exited;
}

int qtest_pid(QTestState *q)
{
    return qtest_exited(q) ? 0 : q->pid;
}

static gboolean qtest_flag_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

/* Iterate the main context until the tool exits or @timeout_ms pass. */
static bool qtest_wait_exit_ms(QTestState *q, int timeout_ms)
{
    bool timed_out = false;
    guint id = g_timeout_add(timeout_ms, qtest_flag_cb, &timed_out);

    while (!q->exited && !timed_out) {
        g_main_context_iteration(NULL, TRUE);
    }
    if (!timed_out) {
        g_source_remove(id);
    }
    return q->exited;
}

int qtest_wait_exit(QTestState *q, int timeout_s)
{
    if (!qtest_wait_exit_ms(q, timeout_s * 1000)) {
        g_subprocess_force_exit(q->proc);
        qtest_wait_exit_ms(q, 10000);
        qtest_die(q, "mirror-tool did not exit within %d s (killed)",
                  timeout_s);
    }
    return q->exit_code;
}

static const char *qtest_read_output(const char *path, char **buf)
{
    g_free(*buf);
    *buf = NULL;
    if (!g_file_get_contents(path, buf, NULL, NULL)) {
        *buf = g_strdup("");
    }
    return *buf;
}

const char *qtest_stderr(QTestState *q)
{
    return qtest_read_output(q->stderr_path, &q->stderr_buf);
}

const char *qtest_stdout(QTestState *q)
{
    return qtest_read_output(q->stdout_path, &q->stdout_buf);
}

/* ---- connecting ---- */

static int qtest_try_connect(const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(strlen(path), <, sizeof(addr.sun_path));
    strcpy(addr.sun_path, path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

QTestConn *qtest_connect_raw(QTestState *q)
{
    gint64 deadline = g_get_monotonic_time() +
                      QTEST_REPLY_TIMEOUT_S * G_USEC_PER_SEC;
    int fd;

    /* Bounded polling for the socket: it appears when the tool listens. */
    while ((fd = qtest_try_connect(q->sock_path)) < 0) {
        if (qtest_exited(q)) {
            qtest_die(q, "mirror-tool exited with %d before listening on "
                      "'%s'", q->exit_code, q->sock_path);
        }
        if (g_get_monotonic_time() > deadline) {
            qtest_die(q, "'%s' did not accept connections within %d s",
                      q->sock_path, QTEST_REPLY_TIMEOUT_S);
        }
        g_usleep(5000);
    }
    return qtest_conn_new(q, fd);
}

QTestConn *qtest_connect(QTestState *q, bool negotiate)
{
    gint64 deadline = g_get_monotonic_time() +
                      QTEST_REPLY_TIMEOUT_S * G_USEC_PER_SEC;
    QTestConn *c;

    c = qtest_connect_raw(q);
    c->greeting = qtest_conn_read_deadline(c, deadline);
    if (!c->greeting || !json_object_has_member(c->greeting, "QMP")) {
        qtest_die(q, "no QMP greeting");
    }
    if (negotiate) {
        g_autoptr(JsonObject) r = qtest_conn_qmp(c, "qmp_capabilities",
                                                 NULL);

        if (!json_object_has_member(r, "return")) {
            qtest_die(q, "qmp_capabilities failed: %s",
                      qtest_json_to_string(r));
        }
    }
    return c;
}

QTestState *qtest_startv(const char *dir, QTestFlags flags,
                         const char *const *args)
{
    static int counter;
    g_autoptr(GSubprocessLauncher) l = NULL;
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autoptr(GError) err = NULL;
    QTestState *q = g_new0(QTestState, 1);
    int n = counter++;

    q->sock_path = g_strdup_printf("%s/qmp-%d.sock", dir, n);
    q->stdout_path = g_strdup_printf("%s/tool-%d.stdout", dir, n);
    q->stderr_path = g_strdup_printf("%s/tool-%d.stderr", dir, n);

    g_ptr_array_add(argv, (char *)qtest_tool_path());
    g_ptr_array_add(argv, "start");
    if (!(flags & QTEST_NO_QMP)) {
        g_ptr_array_add(argv, "--qmp");
        g_ptr_array_add(argv, q->sock_path);
        if (flags & QTEST_QMP_WAIT) {
            g_ptr_array_add(argv, "--qmp-wait");
        }
    }
    for (int i = 0; args[i]; i++) {
        g_ptr_array_add(argv, (char *)args[i]);
    }
    g_ptr_array_add(argv, NULL);

    l = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_NONE);
    g_subprocess_launcher_set_cwd(l, dir);
    g_subprocess_launcher_set_stdout_file_path(l, q->stdout_path);
    g_subprocess_launcher_set_stderr_file_path(l, q->stderr_path);
    g_subprocess_launcher_set_child_setup(l, qtest_child_setup, NULL, NULL);
    q->proc = g_subprocess_launcher_spawnv(l,
                                           (const char *const *)argv->pdata,
                                           &err);
    g_assert_no_error(err);
    q->pid = atoi(g_subprocess_get_identifier(q->proc));
    g_subprocess_wait_async(q->proc, NULL, qtest_exited_cb, q);

    if (!(flags & QTEST_NO_QMP)) {
        q->conn = qtest_connect(q, !(flags & QTEST_NO_NEGOTIATE));
    }
    return q;
}

QTestState *qtest_start(const char *dir, QTestFlags flags, ...)
{
    g_autoptr(GPtrArray) args = g_ptr_array_new();
    const char *a;
    va_list ap;

    va_start(ap, flags);
    while ((a = va_arg(ap, const char *))) {
        g_ptr_array_add(args, (char *)a);
    }
    va_end(ap);
    g_ptr_array_add(args, NULL);
    return qtest_startv(dir, flags, (const char *const *)args->pdata);
}

void qtest_free(QTestState *q)
{
    if (!q) {
        return;
    }
    while (q->conns) {
        qtest_conn_free(q->conns->data);
    }
    if (!qtest_exited(q)) {
        g_subprocess_force_exit(q->proc);
    }
    /* The exit callback uses @q: let it run before freeing. */
    qtest_wait_exit_ms(q, 60000);
    g_assert_true(q->exited);
    g_object_unref(q->proc);
    g_free(q->sock_path);
    g_free(q->stdout_path);
    g_free(q->stderr_path);
    g_free(q->stdout_buf);
    g_free(q->stderr_buf);
    g_free(q);
}

QTestConn *qtest_conn(QTestState *q)
{
    return q->conn;
}

const char *qtest_socket_path(QTestState *q)
{
    return q->sock_path;
}

/* ---- shortcuts ---- */

static QTestConn *qtest_main_conn(QTestState *q)
{
    g_assert_nonnull(q->conn);
    return q->conn;
}

JsonObject *qtest_qmp(QTestState *q, const char *cmd, const char *fmt, ...)
{
    g_autofree char *req = NULL;
    va_list ap;

    va_start(ap, fmt);
    req = qtest_request_vprintf(cmd, fmt, ap);
    va_end(ap);
    return qtest_conn_qmp_raw(qtest_main_conn(q), req);
}

void qtest_qmp_assert_success(QTestState *q, const char *cmd,
                              const char *fmt, ...)
{
    g_autofree char *req = NULL;
    g_autoptr(JsonObject) r = NULL;
    va_list ap;

    va_start(ap, fmt);
    req = qtest_request_vprintf(cmd, fmt, ap);
    va_end(ap);
    r = qtest_conn_qmp_raw(qtest_main_conn(q), req);
    if (!json_object_has_member(r, "return")) {
        qtest_die(q, "%s failed: %s", req, qtest_json_to_string(r));
    }
}

void qtest_qmp_assert_error(QTestState *q, const char *cls,
                            const char *desc, const char *cmd,
                            const char *fmt, ...)
{
    g_autofree char *req = NULL;
    g_autoptr(JsonObject) r = NULL;
    va_list ap;

    va_start(ap, fmt);
    req = qtest_request_vprintf(cmd, fmt, ap);
    va_end(ap);
    r = qtest_conn_qmp_raw(qtest_main_conn(q), req);
    if (!json_object_has_member(r, "error")) {
        qtest_die(q, "%s: expected an error, got %s", req,
                  qtest_json_to_string(r));
    }
    g_assert_cmpstr(qtest_json_str(r, "error/class"), ==, cls);
    g_assert_cmpstr(qtest_json_str(r, "error/desc"), ==, desc);
}

JsonObject *qtest_wait_event(QTestState *q, const char *name, int timeout_s)
{
    return qtest_conn_wait_event(qtest_main_conn(q), name, timeout_s);
}

JsonObject *qtest_take_event(QTestState *q, const char *name)
{
    return qtest_conn_take_event(qtest_main_conn(q), name);
}

void qtest_wait_status(QTestState *q, const char *status, int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;

    for (;;) {
        int left = (deadline - g_get_monotonic_time()) / G_USEC_PER_SEC;
        g_autoptr(JsonObject) ev = qtest_wait_event(q, "JOB_STATUS_CHANGE",
                                                    MAX(left, 1));

        if (!strcmp(qtest_json_str(ev, "data/status"), status)) {
            return;
        }
    }
}

JsonObject *qtest_query_job(QTestState *q)
{
    g_autoptr(JsonObject) r = qtest_qmp(q, "query-block-jobs", NULL);
    JsonArray *list;

    if (!json_object_has_member(r, "return")) {
        qtest_die(q, "query-block-jobs failed: %s", qtest_json_to_string(r));
    }
    list = json_object_get_array_member(r, "return");
    if (json_array_get_length(list) == 0) {
        return NULL;
    }
    return json_object_ref(json_array_get_object_element(list, 0));
}

/* Poll query-block-jobs until @done(entry, @key, @want) holds. */
static JsonObject *qtest_wait_job(QTestState *q, const char *key,
                                  bool (*done)(JsonObject *, const char *,
                                               const void *),
                                  const void *want, const char *what,
                                  int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;

    for (;;) {
        JsonObject *job = qtest_query_job(q);

        if (job && done(job, key, want)) {
            return job;
        }
        if (g_get_monotonic_time() > deadline) {
            qtest_die(q, "query-block-jobs: '%s' did not become %s "
                      "within %d s (last: %s)", key, what, timeout_s,
                      job ? qtest_json_to_string(job) : "no job");
        }
        if (job) {
            json_object_unref(job);
        }
        g_usleep(2000);
    }
}

static bool qtest_job_str_is(JsonObject *job, const char *key,
                             const void *want)
{
    return !g_strcmp0(qtest_json_str(job, key), want);
}

static bool qtest_job_int_reaches(JsonObject *job, const char *key,
                                  const void *want)
{
    return qtest_json_int(job, key) >= *(const int64_t *)want;
}

JsonObject *qtest_wait_job_str(QTestState *q, const char *key,
                               const char *value, int timeout_s)
{
    g_autofree char *what = g_strdup_printf("'%s'", value);

    return qtest_wait_job(q, key, qtest_job_str_is, value, what, timeout_s);
}

JsonObject *qtest_wait_job_int(QTestState *q, const char *key, int64_t min,
                               int timeout_s)
{
    g_autofree char *what = g_strdup_printf(">= %" G_GINT64_FORMAT, min);

    return qtest_wait_job(q, key, qtest_job_int_reaches, &min, what,
                          timeout_s);
}
