/*
 * The QMP protocol of `mirror-tool start --qmp`, as QEMU speaks it: the
 * greeting, capabilities negotiation, errors with QEMU's classes and
 * wording, "id" echoing, bad input that must not break the connection,
 * several clients, clients that go away, and quit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest.h"
#include "util/cutils.h"

#include <string.h>
#include <sys/wait.h>

#define IMAGE_SIZE (4 * MiB)

/* A tool mirroring a 4 MiB image; it stays in the sync stage after READY
 * until told otherwise. */
static QTestState *start_tool(QTestImages *im, QTestFlags flags)
{
    return qtest_start(im->dir, flags, im->src, im->dst, NULL);
}

/* The reply is an error of @cls with description @desc. */
static void assert_error(JsonObject *r, const char *cls, const char *desc)
{
    g_autofree char *text = qtest_json_to_string(r);

    g_test_message("reply: %s", text);
    g_assert_true(json_object_has_member(r, "error"));
    g_assert_cmpstr(qtest_json_str(r, "error/class"), ==, cls);
    if (desc) {
        g_assert_cmpstr(qtest_json_str(r, "error/desc"), ==, desc);
    }
}

/* Finish the job and check that the tool exits cleanly with a copy. */
static void complete_and_exit(QTestState *q, QTestImages *im)
{
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 30);
    g_autoptr(JsonObject) done = NULL;

    qtest_qmp_assert_success(q, "block-job-complete",
                             "{\"device\": \"mirror\"}");
    done = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    g_assert_false(qtest_json_has(done, "data/error"));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

static void test_greeting(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT |
                                         QTEST_NO_NEGOTIATE);
    JsonObject *g = qtest_conn_greeting(qtest_conn(q));
    JsonNode *caps;
    g_autoptr(JsonObject) r = NULL;

    g_assert_cmpint(json_object_get_size(g), ==, 1);
    g_assert_cmpint(qtest_json_int(g, "QMP/version/qemu/major"), >=, 0);
    g_assert_cmpint(qtest_json_int(g, "QMP/version/qemu/minor"), >=, 0);
    g_assert_cmpint(qtest_json_int(g, "QMP/version/qemu/micro"), >=, 0);
    g_assert_true(g_str_has_prefix(qtest_json_str(g, "QMP/version/package"),
                                   "qemu-mirror"));
    caps = qtest_json_get(g, "QMP/capabilities");
    g_assert_nonnull(caps);
    g_assert_true(JSON_NODE_HOLDS_ARRAY(caps));
    g_assert_cmpuint(json_array_get_length(json_node_get_array(caps)), ==, 0);

    /* Negotiation: {"return": {}}. */
    r = qtest_conn_qmp(qtest_conn(q), "qmp_capabilities", NULL);
    g_assert_cmpint(json_object_get_size(r), ==, 1);
    g_assert_true(JSON_NODE_HOLDS_OBJECT(qtest_json_get(r, "return")));
    g_assert_cmpint(json_object_get_size(
                        json_object_get_object_member(r, "return")), ==, 0);
    complete_and_exit(q, im);
}

static void test_negotiation(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT |
                                         QTEST_NO_NEGOTIATE);
    QTestConn *c = qtest_conn(q);
    g_autoptr(JsonObject) r1 = NULL;
    g_autoptr(JsonObject) r2 = NULL;
    g_autoptr(JsonObject) r3 = NULL;
    g_autoptr(JsonObject) job = NULL;

    /* Commands before negotiation are refused, and the job waits. */
    r1 = qtest_conn_qmp(c, "query-block-jobs", NULL);
    assert_error(r1, "CommandNotFound",
                 "Expecting capabilities negotiation with "
                 "'qmp_capabilities'");
    g_assert_null(qtest_conn_take_event(c, "JOB_STATUS_CHANGE"));

    r2 = qtest_conn_qmp(c, "qmp_capabilities", NULL);
    g_assert_true(json_object_has_member(r2, "return"));

    /* Twice is an error, and harmless. */
    r3 = qtest_conn_qmp(c, "qmp_capabilities", NULL);
    assert_error(r3, "CommandNotFound",
                 "Capabilities negotiation is already complete, command "
                 "ignored");
    job = qtest_query_job(q);
    g_assert_nonnull(job);
    g_assert_cmpstr(qtest_json_str(job, "device"), ==, "mirror");
    g_assert_cmpstr(qtest_json_str(job, "type"), ==, "mirror");
    complete_and_exit(q, im);
}

static void test_errors(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    static const struct {
        const char *cmd, *args, *cls, *desc;
    } cases[] = {
        { "no-such-command", NULL, "CommandNotFound",
          "The command no-such-command has not been found" },
        { "block-job-set-speed", "{\"device\": \"mirror\"}",
          "GenericError", "Parameter 'speed' is missing" },
        { "block-job-set-speed", "{\"device\": \"mirror\", \"speed\": "
          "\"fast\"}", "GenericError",
          "Invalid parameter type for 'speed', expected: integer" },
        { "block-job-set-speed", "{\"device\": \"mirror\", \"speed\": 1, "
          "\"bogus\": 1}", "GenericError",
          "Parameter 'bogus' is unexpected" },
        { "block-job-set-speed", "{\"speed\": 1}", "GenericError",
          "Parameter 'device' is missing" },
        { "block-job-cancel", "{\"device\": \"mirror\", \"force\": 1}",
          "GenericError",
          "Invalid parameter type for 'force', expected: boolean" },
        { "block-job-cancel", "{\"device\": \"nope\"}", "DeviceNotActive",
          "Block job 'nope' not found" },
        { "block-job-pause", "{\"device\": 7}", "GenericError",
          "Invalid parameter type for 'device', expected: string" },
        { "job-pause", "{\"id\": \"nope\"}", "GenericError",
          "Job not found" },
        { "job-dismiss", "{\"id\": \"mirror\"}", "GenericError",
          "Job 'mirror' in state 'ready' cannot accept command verb "
          "'dismiss'" },
        { "job-finalize", "{\"id\": \"mirror\"}", "GenericError",
          "Job 'mirror' in state 'ready' cannot accept command verb "
          "'finalize'" },
        { "block-job-resume", "{\"device\": \"mirror\"}", "GenericError",
          "Can't resume a job that was not paused" },
        { "query-block-jobs", "{\"x\": 1}", "GenericError",
          "Parameter 'x' is unexpected" },
        { "query-jobs", "{\"x\": 1}", "GenericError",
          "Parameter 'x' is unexpected" },
        { "quit", "{\"now\": true}", "GenericError",
          "Parameter 'now' is unexpected" },
    };

    /* In READY, so that the verb errors name a known state. */
    g_autoptr(JsonObject) ready = qtest_wait_event(q, "BLOCK_JOB_READY", 30);

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(JsonObject) r = NULL;

        if (cases[i].args) {
            r = qtest_qmp(q, cases[i].cmd, "%s", cases[i].args);
        } else {
            r = qtest_qmp(q, cases[i].cmd, NULL);
        }
        assert_error(r, cases[i].cls, cases[i].desc);
    }
    qtest_qmp_assert_success(q, "block-job-complete",
                             "{\"device\": \"mirror\"}");
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);
    qtest_assert_files_equal(im->src, im->dst);
}

static void test_bad_input(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_conn(q);
    static const struct {
        const char *line, *desc;
    } cases[] = {
        { "{\"execute\": ", "JSON parse error" },
        { "{nonsense}", "JSON parse error" },
        { "[1, 2]", "QMP input must be a JSON object" },
        { "42", "QMP input must be a JSON object" },
        { "\"query-jobs\"", "QMP input must be a JSON object" },
        { "{\"arguments\": {}}", "QMP input lacks member 'execute'" },
        { "{\"execute\": 3}",
          "QMP input member 'execute' must be a string" },
        { "{\"execute\": \"query-jobs\", \"arguments\": [1]}",
          "QMP input member 'arguments' must be an object" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(JsonObject) r = qtest_conn_qmp_raw(c, cases[i].line);
        g_autoptr(JsonObject) ok = NULL;

        assert_error(r, "GenericError", NULL);
        g_assert_nonnull(strstr(qtest_json_str(r, "error/desc"),
                                cases[i].desc));
        /* The connection still works. */
        ok = qtest_conn_qmp(c, "query-jobs", NULL);
        g_assert_true(json_object_has_member(ok, "return"));
    }
    complete_and_exit(q, im);
}

static void test_id(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_conn(q);
    g_autoptr(JsonObject) r1 = NULL;
    g_autoptr(JsonObject) r2 = NULL;
    g_autoptr(JsonObject) r3 = NULL;
    g_autoptr(JsonObject) r4 = NULL;

    r1 = qtest_conn_qmp_raw(c, "{\"execute\": \"query-jobs\", "
                            "\"id\": \"abc\"}");
    g_assert_true(json_object_has_member(r1, "return"));
    g_assert_cmpstr(qtest_json_str(r1, "id"), ==, "abc");

    r2 = qtest_conn_qmp_raw(c, "{\"execute\": \"nope\", \"id\": 42}");
    assert_error(r2, "CommandNotFound", "The command nope has not been "
                 "found");
    g_assert_cmpint(qtest_json_int(r2, "id"), ==, 42);

    /* Any JSON value is echoed as it came. */
    r3 = qtest_conn_qmp_raw(c, "{\"id\": {\"a\": [1, \"x\"]}, \"execute\": "
                            "\"block-job-set-speed\", \"arguments\": "
                            "{\"device\": \"mirror\", \"speed\": -5}}");
    assert_error(r3, "GenericError",
                 "Parameter 'speed' expects a non-negative value");
    g_assert_cmpint(qtest_json_int(r3, "id/a/0"), ==, 1);
    g_assert_cmpstr(qtest_json_str(r3, "id/a/1"), ==, "x");

    /* No id, no "id" member. */
    r4 = qtest_conn_qmp(c, "query-jobs", NULL);
    g_assert_false(json_object_has_member(r4, "id"));
    complete_and_exit(q, im);
}

static void test_two_clients(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c2, *raw;
    g_autoptr(JsonObject) ready = NULL;
    g_autoptr(JsonObject) e1 = NULL;
    g_autoptr(JsonObject) e2 = NULL;
    g_autoptr(JsonObject) n1 = NULL;
    JsonObject *msg;

    ready = qtest_wait_event(q, "BLOCK_JOB_READY", 30);
    c2 = qtest_connect(q, true);
    /* Connected but not negotiated: no events for this one. */
    raw = qtest_connect(q, false);

    /* A command on the second connection, events on both. */
    {
        g_autoptr(JsonObject) r = qtest_conn_qmp(c2, "block-job-complete",
                                                 "{\"device\": "
                                                 "\"mirror\"}");
        g_assert_true(json_object_has_member(r, "return"));
    }
    e1 = qtest_wait_event(q, "BLOCK_JOB_COMPLETED", 30);
    e2 = qtest_conn_wait_event(c2, "BLOCK_JOB_COMPLETED", 30);
    g_assert_cmpstr(qtest_json_str(e1, "data/device"), ==,
                    qtest_json_str(e2, "data/device"));
    g_assert_cmpint(qtest_json_int(e1, "data/offset"), ==, IMAGE_SIZE);
    g_assert_cmpint(qtest_json_int(e2, "data/offset"), ==, IMAGE_SIZE);
    n1 = qtest_conn_wait_event(c2, "JOB_STATUS_CHANGE", 30);
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 0);

    /* The tool is gone: the raw connection got nothing but EOF. */
    msg = qtest_conn_read(raw, 30);
    g_assert_null(msg);
    qtest_assert_files_equal(im->src, im->dst);
}

static void test_client_disconnects(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--speed", "8M", im->src, im->dst,
                                          NULL);
    g_autoptr(JsonObject) job = NULL;

    /* One leaves with a request unanswered, one in the middle of a line,
     * one before negotiating; the job goes on. */
    for (int i = 0; i < 3; i++) {
        QTestConn *c = qtest_connect(q, i != 2);
        const char *req = i == 0 ? "{\"execute\": \"query-block-jobs\"}\n"
                                 : "{\"execute\": \"query-";

        g_assert_true(qtest_conn_send_raw(c, req, strlen(req)));
        qtest_conn_free(c);
    }
    job = qtest_query_job(q);
    g_assert_cmpstr(qtest_json_str(job, "status"), ==, "running");
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    complete_and_exit(q, im);
}

static void test_long_line(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_connect(q, true);
    size_t len = 2 * MiB;
    g_autofree char *junk = g_malloc(len);
    g_autoptr(JsonObject) r = NULL;

    /* More than 1 MiB without a newline: that client is dropped. */
    memset(junk, ' ', len);
    qtest_conn_send_raw(c, junk, len);
    g_assert_true(qtest_conn_wait_eof(c, 30));
    qtest_conn_free(c);

    r = qtest_qmp(q, "query-jobs", NULL);
    g_assert_true(json_object_has_member(r, "return"));
    g_assert_false(qtest_exited(q));
    complete_and_exit(q, im);
}

/*
 * Commands in the same packet as qmp_capabilities reach a job that has
 * not started yet (--qmp-wait starts it after negotiation): verbs
 * allowed in CREATED must work there and not crash the tool.
 */
static void test_pipelined(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT |
                                         QTEST_NO_NEGOTIATE);
    QTestConn *c = qtest_conn(q);
    const char *batch =
        "{\"execute\": \"qmp_capabilities\"}\n"
        "{\"execute\": \"block-job-set-speed\", \"arguments\": "
        "{\"device\": \"mirror\", \"speed\": 1048576}}\n"
        "{\"execute\": \"block-job-pause\", \"arguments\": "
        "{\"device\": \"mirror\"}}\n";
    g_autoptr(JsonObject) job = NULL;

    g_assert_true(qtest_conn_send_raw(c, batch, strlen(batch)));
    for (int i = 0; i < 3; i++) {
        g_autoptr(JsonObject) r = qtest_conn_read_reply(c, 30);

        g_assert_true(json_object_has_member(r, "return"));
    }
    job = qtest_wait_job_str(q, "status", "paused", 30);
    g_assert_cmpint(qtest_json_int(job, "speed"), ==, 1 * MiB);
    qtest_qmp_assert_success(q, "block-job-set-speed",
                             "{\"device\": \"mirror\", \"speed\": 0}");
    qtest_qmp_assert_success(q, "block-job-resume",
                             "{\"device\": \"mirror\"}");
    complete_and_exit(q, im);
}

/* Cancelled before it started: the tool ends cleanly. */
static void test_pipelined_cancel(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT |
                                         QTEST_NO_NEGOTIATE);
    QTestConn *c = qtest_conn(q);
    const char *batch =
        "{\"execute\": \"qmp_capabilities\"}\n"
        "{\"execute\": \"block-job-cancel\", \"arguments\": "
        "{\"device\": \"mirror\"}}\n";

    g_assert_true(qtest_conn_send_raw(c, batch, strlen(batch)));
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
    g_assert_nonnull(strstr(qtest_stderr(q), "cancelled"));
}

static void test_quit(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(16 * MiB);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--speed", "1M", im->src, im->dst,
                                          NULL);
    g_autoptr(JsonObject) ev = NULL;

    qtest_qmp_assert_success(q, "quit", NULL);
    /* The job is cancelled on the way out; the events still arrive. */
    ev = qtest_wait_event(q, "BLOCK_JOB_CANCELLED", 30);
    g_assert_cmpint(qtest_json_int(ev, "data/offset"), <, 16 * MiB);
    qtest_wait_status(q, "null", 30);
    g_assert_cmpint(qtest_wait_exit(q, 30), ==, 1);
    g_assert_nonnull(strstr(qtest_stderr(q), "cancelled"));
}

/* The next reply on @c, events kept for qtest_conn_wait_event(). */
static JsonObject *read_reply(QTestConn *c)
{
    return qtest_conn_read_reply(c, QTEST_REPLY_TIMEOUT_S);
}

/* The next reply line on @c as sent, events kept likewise. */
static char *read_reply_line(QTestConn *c)
{
    return qtest_conn_read_reply_line(c, QTEST_REPLY_TIMEOUT_S);
}

/*
 * Our own JSON parser (issue 28): QEMU's nesting limit, duplicate keys,
 * NUL bytes, strict RFC 8259, numbers beyond int64; each error worded as
 * QEMU's and the connection still serving.
 */
static void test_json_limits(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_conn(q);
    g_autofree char *open1024 = g_strnfill(1024, '[');
    g_autofree char *close1024 = g_strnfill(1024, ']');
    g_autofree char *deep_ok = NULL;
    g_autofree char *deep_bad = NULL;
    g_autofree char *deep_open = NULL;
    static const struct {
        const char *line, *desc;
    } cases[] = {
        { "{\"execute\": \"query-jobs\", \"execute\": \"quit\"}",
          "JSON parse error, duplicate key" },
        { "{\"execute\": \"query-jobs\", \"\\u0065xecute\": \"quit\"}",
          "JSON parse error, duplicate key" },
        { "{\"execute\": \"query-jobs\", \"arguments\": {\"a\": 1, "
          "\"a\": 2}}", "JSON parse error, duplicate key" },
        { "{\"execute\": \"query-jobs\", \"id\": \"a\\u0000b\"}",
          "JSON parse error, \\u0000 is not supported" },
        { "{'execute': 'query-jobs'}", "JSON parse error, key is not a "
          "string in object" },
        { "{\"execute\": \"query-jobs\",}", "JSON parse error, key is not "
          "a string in object" },
        { "{\"execute\": \"query-jobs\" /* c */}", "JSON parse error, "
          "expected separator in dict" },
        { "{\"execute\": \"query-jobs\", \"id\": 0x10}", "JSON parse "
          "error, expected separator in dict" },
        { "{\"execute\": \"query-jobs\", \"id\": [1,]}", "JSON parse "
          "error, expecting value" },
        { "{\"execute\": \"query-jobs\", \"id\": \"\\ud800\"}", "JSON parse "
          "error, invalid \\u escape (lone surrogate)" },
        { "{\"execute\": \"query-jobs\", \"id\": tru}", "JSON parse error, "
          "stray 't'" },
        { "}", "JSON parse error, expecting value" },
        { "{\"execute\": \"query-jobs\", \"id\": 1e400}",
          "JSON parse error, number out of range" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(JsonObject) r = qtest_conn_qmp_raw(c, cases[i].line);

        assert_error(r, "GenericError", cases[i].desc);
    }
    /* 1024 levels are fine, 1025 are not (QEMU's MAX_NESTING). */
    deep_ok = g_strdup_printf("%s%s", open1024, close1024);
    deep_bad = g_strdup_printf("[%s%s]", open1024, close1024);
    deep_open = g_strnfill(100000, '[');
    {
        g_autoptr(JsonObject) r1 = qtest_conn_qmp_raw(c, deep_ok);
        g_autoptr(JsonObject) r2 = qtest_conn_qmp_raw(c, deep_bad);
        g_autoptr(JsonObject) r3 = qtest_conn_qmp_raw(c, deep_open);

        assert_error(r1, "GenericError", "QMP input must be a JSON object");
        assert_error(r2, "GenericError",
                     "JSON nesting depth limit exceeded");
        assert_error(r3, "GenericError",
                     "JSON nesting depth limit exceeded");
    }
    /* A line that starts with NUL is answered, not skipped. */
    {
        static const char nul[] = "\0{\"execute\": \"quit\"}\n";
        g_autoptr(JsonObject) r = NULL;

        g_assert_true(qtest_conn_send_raw(c, nul, sizeof(nul) - 1));
        r = read_reply(c);
        assert_error(r, "GenericError", "JSON parse error, stray byte 0x00");
    }
    /* Beyond int64 is not an integer (json-glib wrapped it to -1). */
    {
        g_autoptr(JsonObject) r = qtest_conn_qmp_raw(
            c, "{\"execute\": \"block-job-set-speed\", \"arguments\": "
            "{\"device\": \"mirror\", \"speed\": "
            "99999999999999999999999999999}}");

        assert_error(r, "GenericError",
                     "Invalid parameter type for 'speed', expected: "
                     "integer");
    }
    complete_and_exit(q, im);
}

/* Every object on a line is handled, in order (QEMU's streamer). */
static void test_multi_object_line(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_conn(q);
    const char *line = "{\"execute\": \"query-jobs\", \"id\": 1} "
                       "{\"execute\": \"nope\", \"id\": 2}{\"execute\": "
                       "\"query-block-jobs\", \"id\": 3}\n";
    const char *bad = "{\"execute\": \"query-jobs\", \"id\": 4} {\"x\" 1} "
                      "{\"execute\": \"quit\"}\n";
    g_autoptr(JsonObject) r1 = NULL;
    g_autoptr(JsonObject) r2 = NULL;
    g_autoptr(JsonObject) r3 = NULL;
    g_autoptr(JsonObject) r4 = NULL;
    g_autoptr(JsonObject) r5 = NULL;
    g_autoptr(JsonObject) r6 = NULL;

    g_assert_true(qtest_conn_send_raw(c, line, strlen(line)));
    r1 = read_reply(c);
    r2 = read_reply(c);
    r3 = read_reply(c);
    g_assert_true(json_object_has_member(r1, "return"));
    g_assert_cmpint(qtest_json_int(r1, "id"), ==, 1);
    assert_error(r2, "CommandNotFound", NULL);
    g_assert_cmpint(qtest_json_int(r2, "id"), ==, 2);
    g_assert_true(json_object_has_member(r3, "return"));
    g_assert_cmpint(qtest_json_int(r3, "id"), ==, 3);

    /* An error ends the line: the rest is not run (no quit). */
    g_assert_true(qtest_conn_send_raw(c, bad, strlen(bad)));
    r4 = read_reply(c);
    r5 = read_reply(c);
    g_assert_cmpint(qtest_json_int(r4, "id"), ==, 4);
    assert_error(r5, "GenericError",
                 "JSON parse error, missing : in object pair");
    r6 = qtest_conn_qmp(c, "query-jobs", NULL);
    g_assert_true(json_object_has_member(r6, "return"));
    g_assert_false(qtest_exited(q));
    complete_and_exit(q, im);
}

/* qmp_capabilities "enable": nothing is offered, as the greeting says. */
static void test_capabilities_enable(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT |
                                         QTEST_NO_NEGOTIATE);
    QTestConn *c = qtest_conn(q);
    static const struct {
        const char *args, *cls, *desc;
    } cases[] = {
        { "{\"enable\": [\"oob\"]}", "GenericError",
          "Capability oob not available" },
        { "{\"enable\": [\"bogus\"]}", "GenericError",
          "Parameter 'null' does not accept value 'bogus'" },
        { "{\"enable\": \"oob\"}", "GenericError",
          "Invalid parameter type for 'enable', expected: array" },
        { "{\"enable\": [1]}", "GenericError",
          "Invalid parameter type for 'enable[0]', expected: string" },
        { "{\"x\": 1}", "GenericError", "Parameter 'x' is unexpected" },
    };
    g_autoptr(JsonObject) ok = NULL;

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(JsonObject) r = qtest_conn_qmp(c, "qmp_capabilities",
                                                 "%s", cases[i].args);
        g_autoptr(JsonObject) still = NULL;

        assert_error(r, cases[i].cls, cases[i].desc);
        /* Negotiation did not happen. */
        still = qtest_conn_qmp(c, "query-jobs", NULL);
        assert_error(still, "CommandNotFound", NULL);
    }
    ok = qtest_conn_qmp(c, "qmp_capabilities", "{\"enable\": []}");
    g_assert_true(json_object_has_member(ok, "return"));
    complete_and_exit(q, im);
}

/* Ids come back as their JSON text (a 100-digit number stays itself). */
static void test_id_exact(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = start_tool(im, QTEST_QMP_WAIT);
    QTestConn *c = qtest_conn(q);
    g_autofree char *digits = g_strnfill(100, '7');
    g_autofree char *req = g_strdup_printf(
        "{\"execute\": \"query-jobs\", \"id\": %s}\n", digits);
    g_autofree char *want = g_strdup_printf("\"id\":%s}", digits);
    const char *req2 = "{\"id\" : [ 1.50 , \"a \\\" b\" , {\"k\": -0} , "
                       "1e300 ], \"execute\": \"nope\"}\n";
    g_autofree char *line = NULL;
    g_autofree char *line2 = NULL;

    g_assert_true(qtest_conn_send_raw(c, req, strlen(req)));
    line = read_reply_line(c);
    g_test_message("reply: %s", line);
    g_assert_true(g_str_has_prefix(line, "{\"return\":"));
    g_assert_true(g_str_has_suffix(line, want));

    g_assert_true(qtest_conn_send_raw(c, req2, strlen(req2)));
    line2 = read_reply_line(c);
    g_test_message("reply: %s", line2);
    g_assert_true(g_str_has_suffix(
        line2, ",\"id\":[1.50,\"a \\\" b\",{\"k\":-0},1e300]}"));
    complete_and_exit(q, im);
}

/* --qmp-max-clients: one more client is refused with an error line. */
static void test_max_clients(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autoptr(QTestState) q = qtest_start(im->dir, QTEST_QMP_WAIT,
                                          "--qmp-max-clients", "2",
                                          im->src, im->dst, NULL);
    QTestConn *c2 = qtest_connect(q, true);
    QTestConn *c3 = qtest_connect_raw(q);
    g_autofree char *line = qtest_conn_read_line(c3, QTEST_REPLY_TIMEOUT_S);
    g_autoptr(JsonObject) r = NULL;

    g_assert_nonnull(line);
    g_assert_cmpstr(line, ==, "{\"error\": {\"class\": \"GenericError\", "
                    "\"desc\": \"Too many QMP clients (at most 2, "
                    "--qmp-max-clients)\"}}");
    g_assert_true(qtest_conn_wait_eof(c3, QTEST_REPLY_TIMEOUT_S));
    qtest_conn_free(c3);

    /* mirror-tool qmp says why. */
    {
        const char *argv[] = {
            qtest_tool_path(), "qmp", qtest_socket_path(q), "query-jobs",
            NULL,
        };
        g_autofree char *out = NULL;
        g_autofree char *err = NULL;
        g_autoptr(GError) gerr = NULL;
        int status;

        g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                                   G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                                   &status, &gerr));
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 1);
        g_assert_nonnull(strstr(err, "Too many QMP clients (at most 2, "
                                "--qmp-max-clients)"));
    }

    /* A place frees up when a client leaves. */
    qtest_conn_free(c2);
    for (int i = 0; i < 2; i++) {
        /* The server may not have seen c2's close yet: try again. */
        c2 = qtest_connect_raw(q);
        g_free(line);
        line = qtest_conn_read_line(c2, QTEST_REPLY_TIMEOUT_S);
        g_assert_nonnull(line);
        if (g_str_has_prefix(line, "{\"QMP\"")) {
            break;
        }
        qtest_conn_free(c2);
        c2 = NULL;
        qtest_qmp_assert_success(q, "query-jobs", NULL);
    }
    g_assert_nonnull(c2);
    g_assert_true(g_str_has_prefix(line, "{\"QMP\""));
    r = qtest_qmp(q, "query-jobs", NULL);
    g_assert_true(json_object_has_member(r, "return"));
    complete_and_exit(q, im);
}

/* A bad --qmp-max-clients: exit 2, one line naming it, no socket. */
static void test_max_clients_bad(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autofree char *sock = g_build_filename(im->dir, "qmp.sock", NULL);
    static const char *const values[] = { "0", "1025", "-1", "many" };

    for (size_t i = 0; i < G_N_ELEMENTS(values); i++) {
        const char *argv[] = {
            qtest_tool_path(), "start", "--qmp", sock, "--qmp-max-clients",
            values[i], im->src, im->dst, NULL,
        };
        g_autofree char *out = NULL;
        g_autofree char *err = NULL;
        g_autoptr(GError) gerr = NULL;
        int status;

        g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                                   G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                                   &status, &gerr));
        g_test_message("--qmp-max-clients %s: %s", values[i], err);
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 2);
        g_assert_nonnull(strstr(err, values[i]));
        g_assert_nonnull(strstr(err, "--qmp-max-clients"));
        g_assert_false(g_file_test(sock, G_FILE_TEST_EXISTS));
    }
}

/*
 * `mirror-tool qmp` checks its ARGS with the server's parser: 100,000 '['
 * overflowed json-glib's stack; a duplicate key would reach the server.
 */
static void test_client_args(void)
{
    g_autoptr(QTestImages) im = qtest_images_new(IMAGE_SIZE);
    g_autofree char *sock = g_build_filename(im->dir, "none.sock", NULL);
    g_autofree char *deep = g_strnfill(100000, '[');
    const struct {
        const char *args, *msg;
    } cases[] = {
        { deep, "JSON nesting depth limit exceeded" },
        { "{\"device\": \"a\", \"device\": \"b\"}",
          "arguments '{\"device\": \"a\", \"device\": \"b\"}': JSON "
          "parse error, duplicate key" },
        { "{\"device\": \"a\"} {}", "unexpected text after the value" },
        { "[]", "expected a JSON object" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const char *argv[] = {
            qtest_tool_path(), "qmp", sock, "query-jobs", cases[i].args,
            NULL,
        };
        g_autofree char *out = NULL;
        g_autofree char *err = NULL;
        g_autoptr(GError) gerr = NULL;
        int status;

        g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                                   G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                                   &status, &gerr));
        g_test_message("%.80s", err);
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 2);
        g_assert_nonnull(strstr(err, cases[i].msg));
        /* One line, the value cut short when long. */
        g_assert_cmpint(strlen(err), <, 200);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/protocol/greeting", test_greeting);
    g_test_add_func("/qmp/protocol/negotiation", test_negotiation);
    g_test_add_func("/qmp/protocol/errors", test_errors);
    g_test_add_func("/qmp/protocol/bad-input", test_bad_input);
    g_test_add_func("/qmp/protocol/id", test_id);
    g_test_add_func("/qmp/protocol/two-clients", test_two_clients);
    g_test_add_func("/qmp/protocol/client-disconnects",
                    test_client_disconnects);
    g_test_add_func("/qmp/protocol/long-line", test_long_line);
    g_test_add_func("/qmp/protocol/pipelined", test_pipelined);
    g_test_add_func("/qmp/protocol/pipelined-cancel",
                    test_pipelined_cancel);
    g_test_add_func("/qmp/protocol/quit", test_quit);
    g_test_add_func("/qmp/protocol/json-limits", test_json_limits);
    g_test_add_func("/qmp/protocol/multi-object-line",
                    test_multi_object_line);
    g_test_add_func("/qmp/protocol/capabilities-enable",
                    test_capabilities_enable);
    g_test_add_func("/qmp/protocol/id-exact", test_id_exact);
    g_test_add_func("/qmp/protocol/max-clients", test_max_clients);
    g_test_add_func("/qmp/protocol/max-clients-bad", test_max_clients_bad);
    g_test_add_func("/qmp/protocol/client-args", test_client_args);
    return g_test_run();
}
