/*
 * A libqtest-like helper: run `mirror-tool start --qmp SOCK ...` as a
 * child process and talk QMP to it, as QEMU's tests/qtest/libqtest.c does
 * with a QEMU process.
 *
 * qtest_start() spawns the tool (stdout and stderr go to files in the
 * test's scratch directory, readable at any time), waits until the socket
 * accepts connections, reads the greeting and negotiates capabilities.
 * With QTEST_QMP_WAIT the tool starts the job only after that, so no event
 * is missed.  Replies are matched to requests; events that arrive in
 * between are queued per connection and qtest_wait_event() looks in the
 * queue first.
 *
 * Everything has a deadline: a tool that hangs or dies makes the test fail
 * (with the tool's stderr in the log) instead of hanging CI.  The child is
 * killed when the test process dies (PR_SET_PDEATHSIG).
 *
 * The binary is $MIRROR_TOOL (meson sets it), else
 * ../../qemu-mirror-tool/mirror-tool relative to the test program.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef LIBQTEST_H
#define LIBQTEST_H

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdbool.h>
#include <stdint.h>

/* Default deadline for a reply, seconds. */
#define QTEST_REPLY_TIMEOUT_S   30

typedef enum QTestFlags {
    QTEST_QMP_WAIT      = 1 << 0,   /* --qmp-wait */
    QTEST_NO_NEGOTIATE  = 1 << 1,   /* connect, read the greeting, stop */
    QTEST_NO_QMP        = 1 << 2,   /* no --qmp, no connection at all */
} QTestFlags;

typedef struct QTestConn QTestConn;
typedef struct QTestState QTestState;

/* The mirror-tool binary. */
const char *qtest_tool_path(void);

/*
 * Run `mirror-tool start --qmp DIR/qmp.sock [--qmp-wait] ARGS...` (ARGS
 * NULL-terminated; with QTEST_NO_QMP: `mirror-tool start ARGS...`), with
 * the working directory @dir, and connect.  Fails the test if the socket
 * does not come up within QTEST_REPLY_TIMEOUT_S.
 */
QTestState *qtest_start(const char *dir, QTestFlags flags, ...)
    G_GNUC_NULL_TERMINATED;
QTestState *qtest_startv(const char *dir, QTestFlags flags,
                         const char *const *args);

/* Kill the tool if it still runs, close every connection, free. */
void qtest_free(QTestState *q);

/* The tool's pid (0 once it exited). */
int qtest_pid(QTestState *q);

/* The connection made by qtest_start (NULL with QTEST_NO_QMP). */
QTestConn *qtest_conn(QTestState *q);

/* The socket path. */
const char *qtest_socket_path(QTestState *q);

/*
 * ---- one connection ----
 */

/* Another connection: greeting read; negotiated if @negotiate. */
QTestConn *qtest_connect(QTestState *q, bool negotiate);

/* Another connection, nothing read (a refused client: no greeting). */
QTestConn *qtest_connect_raw(QTestState *q);
void qtest_conn_free(QTestConn *c);

/* The greeting ({"QMP": ...}), owned by the connection. */
JsonObject *qtest_conn_greeting(QTestConn *c);

/* Send raw bytes.  False if the peer is gone (EPIPE, reset) or the
 * deadline passed. */
bool qtest_conn_send_raw(QTestConn *c, const char *data, size_t len);

/*
 * The next message of any kind, not looking at the event queue; NULL on
 * end of file or after @timeout_s.  Caller unrefs.
 */
JsonObject *qtest_conn_read(QTestConn *c, int timeout_s);

/*
 * The next line as sent (without its CR LF), for what a JSON parser
 * would change (a 100-digit id); NULL on end of file or after
 * @timeout_s.  Caller frees.
 */
char *qtest_conn_read_line(QTestConn *c, int timeout_s);

/*
 * The next reply ("return" or "error"), queueing the events that come
 * before it for qtest_conn_wait_event(); fails the test after
 * @timeout_s.  Caller unrefs.
 */
JsonObject *qtest_conn_read_reply(QTestConn *c, int timeout_s);

/*
 * The next reply line as sent (qtest_conn_read_line()), queueing the
 * events that come before it; fails the test after @timeout_s.  Caller
 * frees.
 */
char *qtest_conn_read_reply_line(QTestConn *c, int timeout_s);

/* Did the server close the connection (EOF within @timeout_s)? */
bool qtest_conn_wait_eof(QTestConn *c, int timeout_s);

/*
 * Send one raw request line (a newline is added) and return the reply
 * ("return" or "error"), queueing events that arrive before it.  Fails
 * the test without a reply.  Caller unrefs.
 */
JsonObject *qtest_conn_qmp_raw(QTestConn *c, const char *line);

/* {"execute": @cmd, "arguments": printf(@fmt, ...)}; @fmt NULL: none. */
JsonObject *qtest_conn_qmp(QTestConn *c, const char *cmd, const char *fmt,
                           ...) G_GNUC_PRINTF(3, 4);

/*
 * Wait for event @name: from the queue first, then from the socket
 * (queueing other events).  Fails the test after @timeout_s.  Caller
 * unrefs.
 */
JsonObject *qtest_conn_wait_event(QTestConn *c, const char *name,
                                  int timeout_s);

/* Take event @name from the queue if it is there (no I/O), else NULL. */
JsonObject *qtest_conn_take_event(QTestConn *c, const char *name);

/* Drop every queued event. */
void qtest_conn_clear_events(QTestConn *c);

/*
 * ---- shortcuts on the main connection ----
 */

JsonObject *qtest_qmp(QTestState *q, const char *cmd, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* Fail the test unless the reply is a "return". */
void qtest_qmp_assert_success(QTestState *q, const char *cmd,
                              const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* Fail the test unless the reply is an error of @cls whose "desc" is
 * @desc (exactly). */
void qtest_qmp_assert_error(QTestState *q, const char *cls,
                            const char *desc, const char *cmd,
                            const char *fmt, ...) G_GNUC_PRINTF(5, 6);

JsonObject *qtest_wait_event(QTestState *q, const char *name, int timeout_s);
JsonObject *qtest_take_event(QTestState *q, const char *name);

/* Wait for JOB_STATUS_CHANGE with data.status == @status (the queue
 * first; earlier status changes are consumed). */
void qtest_wait_status(QTestState *q, const char *status, int timeout_s);

/* The query-block-jobs entry of the job, or NULL when there is none.
 * Caller unrefs. */
JsonObject *qtest_query_job(QTestState *q);

/*
 * Poll query-block-jobs until member @key (a string) is @value, failing
 * the test after @timeout_s.  Returns the last entry (caller unrefs).
 */
JsonObject *qtest_wait_job_str(QTestState *q, const char *key,
                               const char *value, int timeout_s);

/* The same until member @key (an integer) is at least @min. */
JsonObject *qtest_wait_job_int(QTestState *q, const char *key, int64_t min,
                               int timeout_s);

/*
 * ---- the process ----
 */

/* Wait until the tool exits and return its exit code (128 + signal for a
 * signal).  Kills it and fails the test after @timeout_s. */
int qtest_wait_exit(QTestState *q, int timeout_s);

/* Has the tool exited? (no waiting) */
bool qtest_exited(QTestState *q);

/* What the tool wrote so far (owned by @q, valid until the next call). */
const char *qtest_stderr(QTestState *q);
const char *qtest_stdout(QTestState *q);

/*
 * ---- JSON access by path ("data/status", "return/0/offset") ----
 */

bool qtest_json_has(JsonObject *o, const char *path);
JsonNode *qtest_json_get(JsonObject *o, const char *path);  /* or NULL */
/* These fail the test if the member is missing or of another type. */
const char *qtest_json_str(JsonObject *o, const char *path);
int64_t qtest_json_int(JsonObject *o, const char *path);
bool qtest_json_bool(JsonObject *o, const char *path);

/* The whole object as JSON text (for messages; caller frees). */
char *qtest_json_to_string(JsonObject *o);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(QTestState, qtest_free)

/*
 * ---- files ----
 */

/* Write @bytes of random data (fixed seed per call) to @path. */
void qtest_write_random_file(const char *path, int64_t bytes,
                             uint32_t seed);

/* Create an empty (sparse) file of @bytes. */
void qtest_write_sparse_file(const char *path, int64_t bytes);

/* Fail the test unless the two files have the same contents. */
void qtest_assert_files_equal(const char *a, const char *b);

/*
 * A scratch directory with src.raw (@size bytes of random data) and
 * dst.raw (@size bytes, sparse), and room for more files (trigger files,
 * sockets).  Removed with everything in it by qtest_images_free().
 */
typedef struct QTestImages {
    char *dir;
    char *src;
    char *dst;
    char *trigger;          /* dir/trigger (not created) */
    int64_t size;
} QTestImages;

QTestImages *qtest_images_new(int64_t size);
void qtest_images_free(QTestImages *im);

/* Create / remove the trigger file (blkdebug error-file=). */
void qtest_images_set_trigger(QTestImages *im, bool on);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(QTestImages, qtest_images_free)

#endif /* LIBQTEST_H */
