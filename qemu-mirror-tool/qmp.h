/*
 * A QMP server on a UNIX socket, speaking QEMU's protocol so that existing
 * QMP clients work unchanged: a greeting, `qmp_capabilities` negotiation,
 * then {"execute": NAME, "arguments": {...}, "id": ANY} requests answered
 * by {"return": ...} or {"error": {"class": ..., "desc": ...}} (with the
 * request's id), and asynchronous {"event": ..., "data": ...,
 * "timestamp": {"seconds": ..., "microseconds": ...}} messages.
 *
 * Messages are JSON objects, one per line (several objects on one line
 * are handled in turn, as QEMU's JSON streamer does).  Every client is
 * served from the main loop with non-blocking sockets.  No client can
 * crash or stall the process (docs/security.md): requests are parsed by
 * our own strict parser with QEMU's nesting limit and a duplicate-key
 * check; a client that sends more than it reads is paused, then dropped
 * past an output cap; the number of clients is limited; a client that
 * must go is closed from the main loop, never under a caller.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef QMP_H
#define QMP_H

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "qemu-mirror-tool/qmp-json.h"

typedef struct QmpServer QmpServer;

/* QMP error classes (ErrorClass in QEMU's qapi/error.json). */
typedef enum QmpErrorClass {
    QMP_ERROR_GENERIC,              /* GenericError */
    QMP_ERROR_COMMAND_NOT_FOUND,    /* CommandNotFound */
    QMP_ERROR_DEVICE_NOT_ACTIVE,    /* DeviceNotActive */
    QMP_ERROR_DEVICE_NOT_FOUND,     /* DeviceNotFound */
} QmpErrorClass;

#define QMP_ERROR (qmp_error_quark())
GQuark qmp_error_quark(void);

/*
 * A command: @args is the "arguments" object (empty when absent).  Return
 * the value of "return" (owned by the caller; NULL means {}), or set @errp
 * (domain QMP_ERROR, code the class; other domains are GenericError).
 */
typedef JsonNode *QmpCommandFunc(JsonObject *args, void *opaque,
                                 GError **errp);

/* Clients at a time unless --qmp-max-clients says otherwise. */
#define QMP_DEFAULT_MAX_CLIENTS     16
#define QMP_MAX_MAX_CLIENTS         1024

/* Seconds a client has to send qmp_capabilities (--qmp-handshake-limit,
 * 0: forever); a client that does not holds one of the client places. */
#define QMP_DEFAULT_HANDSHAKE_LIMIT 10
#define QMP_MAX_HANDSHAKE_LIMIT     86400

/* A request line longer than this drops its client. */
#define QMP_MAX_LINE                (1 << 20)
/* Output one client may leave unread before it is dropped
 * (--qmp-max-output)... */
#define QMP_MAX_CLIENT_OUTPUT       (16 << 20)
/* ...and all clients together, the largest backlog dropped first
 * (--qmp-max-total-output). */
#define QMP_MAX_TOTAL_OUTPUT        (64 << 20)
/* What those options accept: from 64 KiB (above any message but the reply
 * to a request whose long id it echoes: a cap below the reply drops that
 * client) up to 1 GiB for one client, 16 GiB for all. */
#define QMP_MIN_OUTPUT_LIMIT        ((int64_t)64 << 10)
#define QMP_MAX_OUTPUT_LIMIT        ((int64_t)1 << 30)
#define QMP_MAX_TOTAL_OUTPUT_LIMIT  ((int64_t)16 << 30)
/* Past this much unread output, a client's requests wait (not read). */
#define QMP_PAUSE_OUTPUT            (1 << 20)

/*
 * Listen on the UNIX socket @path (replacing a stale socket file) and
 * serve at most @max_clients (1..QMP_MAX_MAX_CLIENTS) clients at a time;
 * a client beyond that gets one error line and is closed.  @path NULL:
 * no socket yet (qmp_server_listen() may add it later); until then
 * clients come from qmp_server_add_client() only (fuzzing), and commands
 * run through qmp_server_execute() (the daemon's command line).
 */
QmpServer *qmp_server_new(const char *path, int max_clients, GError **errp);

/*
 * Start listening on the UNIX socket @path, for a server made without
 * one (qmp_server_new() with @path NULL): the daemon runs its command
 * line first, so that no client sees it half made and a bad option
 * leaves no socket file behind.  False with @errp set ("--qmp 'PATH':
 * ...") on failure.
 */
bool qmp_server_listen(QmpServer *srv, const char *path, GError **errp);

/*
 * Serve the connected stream socket @fd (taken over, made non-blocking)
 * as a client, greeting it.  False (and @fd closed) when the server has
 * @max_clients already.
 */
bool qmp_server_add_client(QmpServer *srv, int fd);

/* Clients, including those closing but not yet freed by the main loop. */
unsigned qmp_server_client_count(QmpServer *srv);

/*
 * Change the output caps (defaults QMP_MAX_CLIENT_OUTPUT and
 * QMP_MAX_TOTAL_OUTPUT, see docs/security.md) and the pause threshold
 * (QMP_PAUSE_OUTPUT: past it a client's requests are not read until it
 * reads its output; keep it well below @per_client, so that a client
 * sending faster than it reads is paused before it is dropped).  Takes
 * effect for output queued from now on.  `start --qmp-max-output` and
 * `--qmp-max-total-output` set the caps; the fuzzer lowers all three to
 * reach the drop paths.
 */
void qmp_server_set_output_limits(QmpServer *srv, size_t pause,
                                  size_t per_client, size_t total);

/*
 * Drop a client that has not negotiated (qmp_capabilities) within
 * @seconds of connecting, 0: never (QMP_DEFAULT_HANDSHAKE_LIMIT until
 * called).  Applies to clients accepted from now on.  Without it, clients
 * that connect and say nothing hold every place --qmp-max-clients allows
 * and lock the operator out of the job.
 */
void qmp_server_set_handshake_limit(QmpServer *srv, unsigned seconds);

/*
 * Stop listening (the socket file is removed) and reading requests, the
 * rest of a line being handled included; what is queued and the events
 * emitted from now on still go out, until qmp_server_free().  For `quit`
 * and the daemon's shutdown: no command runs while it stops.
 */
void qmp_server_close_input(QmpServer *srv);

/* Close every connection, stop listening and remove the socket file. */
void qmp_server_free(QmpServer *srv);

/* Add a command. */
void qmp_server_register(QmpServer *srv, const char *name,
                         QmpCommandFunc *fn, void *opaque);

/*
 * Run the registered command @name with @args (NULL: none) as a client's
 * request would, for callers that are no client (the daemon's command
 * line).  Returns the "return" value (NULL: {}) or NULL with @errp set
 * (CommandNotFound for an unknown @name).
 */
JsonNode *qmp_server_execute(QmpServer *srv, const char *name,
                             JsonObject *args, GError **errp);

/* The names of every command a negotiated client may run, in no order
 * (for query-commands): a new array of new strings. */
GPtrArray *qmp_server_command_names(QmpServer *srv);

/*
 * Send an event to every client that completed negotiation.  @data is
 * consumed (NULL: no "data" member).
 */
void qmp_server_emit_event(QmpServer *srv, const char *event,
                           JsonNode *data);

/* Build the event message (with timestamp) as one line, for --json. */
char *qmp_event_to_string(const char *event, JsonNode *data);

/*
 * QEMU's VersionInfo with mirror-tool's own version (not QEMU's):
 * {"qemu": {"major", "minor", "micro"}, "package": "qemu-mirror X.Y.Z"}.
 * The greeting's "version" and the reply to query-version.
 */
JsonNode *qmp_version_info(void);

/* Has any client completed negotiation yet? */
bool qmp_server_has_client(QmpServer *srv);

/*
 * Call @fn(@opaque) whenever a client completes negotiation, right after
 * its reply is queued and before the server reads its next request (so
 * that whatever @fn starts is visible to that request).
 */
void qmp_server_set_negotiated_cb(QmpServer *srv, void (*fn)(void *),
                                  void *opaque);

/*
 * Write what is queued for every client, all at once, waiting at most
 * @timeout_ms (before exiting, so that the last events reach their
 * readers): a client that does not read delays no other one.
 */
void qmp_server_flush(QmpServer *srv, int timeout_ms);


/*
 * The options of the QMP server of `start --qmp` and `daemon`, as typed
 * (GOptionEntry targets, NULL when not given), and their values once
 * qmp_server_opts_parse() has checked them (the defaults otherwise).
 */
typedef struct QmpServerOpts {
    char *max_clients_str;
    char *max_output_str;
    char *max_total_output_str;
    char *handshake_limit_str;
    int64_t max_clients;
    int64_t max_output;
    int64_t max_total_output;
    int64_t handshake_limit;
} QmpServerOpts;

/* --qmp-max-clients, --qmp-max-output, --qmp-max-total-output and
 * --qmp-handshake-limit into QmpServerOpts *@o. */
#define QMP_SERVER_OPTS_ENTRIES(o) \
    { "qmp-max-clients", 0, 0, G_OPTION_ARG_STRING, &(o)->max_clients_str, \
      "QMP clients at a time, 1..1024 (default 16)", "N" }, \
    { "qmp-max-output", 0, 0, G_OPTION_ARG_STRING, &(o)->max_output_str, \
      "drop a QMP client that leaves more than SIZE of output unread, " \
      "64K..1G (default 16M)", "SIZE" }, \
    { "qmp-max-total-output", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->max_total_output_str, \
      "unread QMP output of all clients together, 64K..16G; above it " \
      "the client with the most is dropped (default 64M)", "SIZE" }, \
    { "qmp-handshake-limit", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->handshake_limit_str, \
      "drop a QMP client that has not sent qmp_capabilities SECONDS " \
      "after connecting, 0..86400, 0: never (default 10)", "SECONDS" }

/* The first of @o's options that was given ("--qmp-max-clients"), for
 * "... needs --qmp PATH"; NULL if none was. */
const char *qmp_server_opts_given(const QmpServerOpts *o);

/*
 * Check the options given in @o and set its values (the defaults for
 * those not given).  False with @errp naming the first bad value as typed
 * ("--qmp-max-clients '0': must be between 1 and 1024").
 */
bool qmp_server_opts_parse(QmpServerOpts *o, GError **errp);

/* Set @o's output caps and handshake limit (checked by
 * qmp_server_opts_parse()) on @srv; max_clients goes to qmp_server_new(). */
void qmp_server_opts_apply(const QmpServerOpts *o, QmpServer *srv);

/* Free @o's strings (g_auto(QmpServerOpts) calls it). */
void qmp_server_opts_clear(QmpServerOpts *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(QmpServerOpts, qmp_server_opts_clear)


/* ---- argument helpers for command implementations ---- */

/*
 * Every command reads its arguments through these helpers; that is what
 * lets one handler serve both QMP (JSON: every member has its JSON type)
 * and the daemon's command line in QEMU's keyval syntax (every value a
 * string, converted by the command's schema as QEMU does).  Nested
 * objects (BlockdevRef, SocketAddress) are read with the same helpers
 * on the member's JsonObject.  A command must not read an integer or a
 * boolean with json_object_get_*_member() directly: a keyval string
 * would be refused.
 */

/*
 * While on (set around a command run for the command line: see
 * daemon_execute_keyval()), qmp_arg_int() and qmp_arg_bool() also take
 * a string: an integer as C's strtoll() with base 0 reads it (decimal,
 * 0x hex, 0 octal; QEMU's qemu_strtoi64()), a boolean as on/yes/true/y or
 * off/no/false/n; anything else fails as QEMU words it ("Parameter 'NAME'
 * expects integer", "... expects 'on' or 'off'").  Off by default.
 */
void qmp_args_set_keyval(bool on);

/* Is a command running for the command line (keyval mode, above)?  For
 * the few arguments whose form differs there (qsd's --nbd-server takes
 * a flat SocketAddress where nbd-server-start takes the legacy one). */
bool qmp_args_are_keyval(void);

/* Fail if @args has a member not in @allowed (NULL-terminated). */
bool qmp_check_args(JsonObject *args, const char *const *allowed,
                    GError **errp);

/*
 * Fetch a member; a missing required one or a wrong type is an error
 * worded as QEMU does ("Parameter 'NAME' is missing", "Invalid parameter
 * type for 'NAME', expected: integer").  Optional ones leave *@out
 * unchanged.  A string stays owned by @args.  In keyval mode
 * (qmp_args_set_keyval()) integers and booleans may be strings.
 */
bool qmp_arg_str(JsonObject *args, const char *name, bool required,
                 const char **out, GError **errp);
bool qmp_arg_int(JsonObject *args, const char *name, bool required,
                 int64_t *out, GError **errp);
bool qmp_arg_bool(JsonObject *args, const char *name, bool required,
                  bool *out, GError **errp);

#endif /* QMP_H */
