/*
 * libFuzzer target: the input is what a QMP client sends.
 *
 * The QMP server (qemu-mirror-tool/qmp.c, compiled in) runs without a
 * listening socket and a stub command table instead of a job: replies of
 * several shapes, commands that emit events synchronously (the path of
 * issue 28's use-after-free), an error, and quit.  Two clients on
 * socketpairs: the first sends the input and reads everything; the second
 * negotiates and never reads, so that events pile up for it.  The output
 * limits are lowered to a few KiB so that pausing a client and dropping
 * it, in the middle of a line or of a command, happen all the time.  The
 * input also goes straight to qmp_json_parse().  A crash, a leak, a hang
 * (the server must let both clients go once their peers close) or a
 * reply that is not one JSON object per line is a bug.
 *
 * Run with G_SLICE=always-malloc (meson does): GSlice's caches keep what
 * the main loop frees, so every input would look like a leak to libFuzzer
 * and pay for a leak scan (12 inputs/s instead of hundreds).
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzzing=true.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qemu-mirror-tool/qmp.h"

/* Output limits: pause, drop one client, drop the biggest of all. */
#define FUZZ_PAUSE_OUTPUT       2048
#define FUZZ_CLIENT_OUTPUT      8192
#define FUZZ_TOTAL_OUTPUT       12288
/* Main loop turns before a server that does not let go is a hang. */
#define FUZZ_MAX_TURNS          200000
/* Events one "emit" may send. */
#define FUZZ_MAX_EVENTS         16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool fuzz_quit;

static JsonNode *fuzz_query_version(JsonObject *args, void *opaque,
                                    GError **errp)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    if (!qmp_check_args(args, (const char *const[]) { NULL }, errp)) {
        return NULL;
    }
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "qemu");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "major");
    json_builder_add_int_value(b, 0);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "package");
    json_builder_add_string_value(b, "fuzz");
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

/* Its arguments back, as a reply. */
static JsonNode *fuzz_echo(JsonObject *args, void *opaque, GError **errp)
{
    return json_node_init_object(json_node_alloc(), args);
}

/*
 * {"n": N, "name": S}: N events (default 1) named S (default FUZZ),
 * emitted to every client before the reply, as block-job-resume does.
 */
static JsonNode *fuzz_emit(JsonObject *args, void *opaque, GError **errp)
{
    static const char *const allowed[] = { "n", "name", "data", NULL };
    QmpServer *srv = opaque;
    int64_t n = 1;
    const char *name = "FUZZ";
    JsonNode *data;

    if (!qmp_check_args(args, allowed, errp) ||
        !qmp_arg_int(args, "n", false, &n, errp) ||
        !qmp_arg_str(args, "name", false, &name, errp)) {
        return NULL;
    }
    if (n < 0 || n > FUZZ_MAX_EVENTS) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter 'n' expects 0 to %d", FUZZ_MAX_EVENTS);
        return NULL;
    }
    data = json_object_get_member(args, "data");
    for (int64_t i = 0; i < n; i++) {
        qmp_server_emit_event(srv, name, data ? json_node_copy(data) : NULL);
    }
    return NULL;
}

static JsonNode *fuzz_fail(JsonObject *args, void *opaque, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                "Device 'fuzz' not found");
    return json_node_init_int(json_node_alloc(), 1);  /* dropped */
}

static JsonNode *fuzz_quit_cmd(JsonObject *args, void *opaque,
                               GError **errp)
{
    fuzz_quit = true;
    qmp_server_emit_event(opaque, "SHUTDOWN", NULL);
    return NULL;
}

/* Every line the server sent is one JSON object. */
static void fuzz_check_output(GString *out)
{
    char *nl;

    while ((nl = memchr(out->str, '\n', out->len))) {
        size_t len = nl - out->str;
        g_autoptr(GError) err = NULL;
        g_autoptr(JsonNode) msg = qmp_json_parse(out->str, len, &err);

        if (!msg || !JSON_NODE_HOLDS_OBJECT(msg)) {
            fprintf(stderr, "fuzz-qmp: the server sent a bad line: %.*s\n",
                    (int)MIN(len, 200), out->str);
            abort();
        }
        g_string_erase(out, 0, len + 1);
    }
}

/* Read what is there from @fd into @out. */
static void fuzz_drain(int fd, GString *out)
{
    char buf[65536];
    ssize_t n;

    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        g_string_append_len(out, buf, n);
    }
    fuzz_check_output(out);
}

static void fuzz_server(const uint8_t *data, size_t size)
{
    static const char negotiate[] = "{\"execute\": \"qmp_capabilities\"}\n";
    g_autoptr(GError) err = NULL;
    g_autoptr(GString) out = g_string_new(NULL);
    QmpServer *srv = qmp_server_new(NULL, 2, &err);
    int a[2], b[2];
    size_t off = 0;
    int turns = 0;

    g_assert(srv);
    qmp_server_set_output_limits(srv, FUZZ_PAUSE_OUTPUT, FUZZ_CLIENT_OUTPUT,
                                 FUZZ_TOTAL_OUTPUT);
    qmp_server_register(srv, "query-version", fuzz_query_version, srv);
    qmp_server_register(srv, "echo", fuzz_echo, srv);
    qmp_server_register(srv, "emit", fuzz_emit, srv);
    qmp_server_register(srv, "fail", fuzz_fail, srv);
    qmp_server_register(srv, "quit", fuzz_quit_cmd, srv);
    g_assert(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a));
    g_assert(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b));
    g_assert(qmp_server_add_client(srv, a[0]));
    g_assert(qmp_server_add_client(srv, b[0]));
    /* A third is refused (at most 2). */
    {
        int c[2];

        g_assert(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c));
        g_assert(!qmp_server_add_client(srv, c[0]));
        close(c[1]);
    }
    g_assert(send(b[1], negotiate, sizeof(negotiate) - 1, MSG_NOSIGNAL) ==
             sizeof(negotiate) - 1);

    /* Feed the input, read the replies, turn the loop. */
    while (off < size) {
        ssize_t n = send(a[1], data + off, size - off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n > 0) {
            off += n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break;                  /* dropped by the server */
        }
        fuzz_drain(a[1], out);
        g_main_context_iteration(NULL, FALSE);
        if (++turns > FUZZ_MAX_TURNS) {
            fprintf(stderr, "fuzz-qmp: the server stopped reading\n");
            abort();
        }
    }
    /* Both peers go: the server must let both clients go. */
    shutdown(a[1], SHUT_WR);
    close(b[1]);
    while (qmp_server_client_count(srv)) {
        fuzz_drain(a[1], out);
        g_main_context_iteration(NULL, FALSE);
        if (++turns > FUZZ_MAX_TURNS) {
            fprintf(stderr, "fuzz-qmp: %u clients never closed\n",
                    qmp_server_client_count(srv));
            abort();
        }
    }
    close(a[1]);
    qmp_server_free(srv);
    /* Nothing of the server is left in the loop. */
    while (g_main_context_iteration(NULL, FALSE)) {
    }
}

/*
 * The parser alone: a value or an error, never both; what it parsed,
 * written back, parses again to the same text.
 */
static void fuzz_parser(const uint8_t *data, size_t size)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *id = NULL;
    size_t pos = 0;
    g_autoptr(JsonNode) n = qmp_json_parse_value((const char *)data, size,
                                                 &pos, &id, &err);
    g_autofree char *text = NULL;
    g_autofree char *again = NULL;
    g_autoptr(JsonNode) n2 = NULL;

    g_assert((n != NULL) != (err != NULL));
    if (!n) {
        return;
    }
    g_assert(pos <= size);
    text = qmp_json_to_string(n);
    n2 = qmp_json_parse(text, strlen(text), &err);
    if (!n2) {
        fprintf(stderr, "fuzz-qmp: our own output does not parse: %s: "
                "%.200s\n", err->message, text);
        abort();
    }
    again = qmp_json_to_string(n2);
    g_assert_cmpstr(text, ==, again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quit = false;
    fuzz_parser(data, size);
    fuzz_server(data, size);
    return 0;
}
