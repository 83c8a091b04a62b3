/*
 * A QMP server on a UNIX socket, speaking QEMU's protocol so that existing
 * QMP clients work unchanged: a greeting, `qmp_capabilities` negotiation,
 * then {"execute": NAME, "arguments": {...}, "id": ANY} requests answered
 * by {"return": ...} or {"error": {"class": ..., "desc": ...}} (with the
 * request's id), and asynchronous {"event": ..., "data": ...,
 * "timestamp": {"seconds": ..., "microseconds": ...}} messages.
 *
 * Messages are JSON objects, one per line.  Every client is served from
 * the main loop with non-blocking sockets; a client that does not read its
 * replies is dropped rather than allowed to stall the job.
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

/* Listen on the UNIX socket @path (replacing a stale socket file). */
QmpServer *qmp_server_new(const char *path, GError **errp);

/* Close every connection, stop listening and remove the socket file. */
void qmp_server_free(QmpServer *srv);

/* Add a command. */
void qmp_server_register(QmpServer *srv, const char *name,
                         QmpCommandFunc *fn, void *opaque);

/*
 * Send an event to every client that completed negotiation.  @data is
 * consumed (NULL: no "data" member).
 */
void qmp_server_emit_event(QmpServer *srv, const char *event,
                           JsonNode *data);

/* Build the event message (with timestamp) as one line, for --json. */
char *qmp_event_to_string(const char *event, JsonNode *data);

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
 * Write what is queued for every client, waiting at most @timeout_ms in
 * total (before exiting, so that the last events reach their readers).
 */
void qmp_server_flush(QmpServer *srv, int timeout_ms);

/* ---- argument helpers for command implementations ---- */

/* Fail if @args has a member not in @allowed (NULL-terminated). */
bool qmp_check_args(JsonObject *args, const char *const *allowed,
                    GError **errp);

/* Fetch a member; a missing required one or a wrong type is an error
 * worded as QEMU does.  Optional ones leave *@out unchanged. */
bool qmp_arg_str(JsonObject *args, const char *name, bool required,
                 const char **out, GError **errp);
bool qmp_arg_int(JsonObject *args, const char *name, bool required,
                 int64_t *out, GError **errp);
bool qmp_arg_bool(JsonObject *args, const char *name, bool required,
                  bool *out, GError **errp);

#endif /* QMP_H */
