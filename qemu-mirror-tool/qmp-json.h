/*
 * JSON for QMP: a strict, non-recursive reader and a writer that always
 * writes JSON, in place of json-glib's parser and generator (see
 * qmp-json.c for what those get wrong).  Errors are in QMP_ERROR
 * (qmp.h), worded as QEMU's.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef QMP_JSON_H
#define QMP_JSON_H

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdbool.h>

/* QEMU's limit on nested arrays and objects (MAX_NESTING in
 * qobject/json-streamer.c). */
#define QMP_JSON_MAX_DEPTH          1024

/*
 * Parse one JSON value from @text (@len bytes, NUL bytes included) at
 * *@pos, strictly as RFC 8259 says, without recursion: at most
 * QMP_JSON_MAX_DEPTH nested arrays and objects, no duplicate key in an
 * object, no \u0000 in strings, valid UTF-8.  Integers that do not fit
 * int64 become doubles (as QEMU does for integers beyond uint64); one
 * beyond a double's range (1e400) is an error, as JSON cannot say inf.  On
 * success *@pos is just past the value; if @id_text is not NULL and the
 * value is an object with an "id" member, *@id_text is that member's
 * JSON text with whitespace outside strings removed (caller frees).
 * Errors are worded as QEMU's ("JSON parse error, duplicate key").
 */
JsonNode *qmp_json_parse_value(const char *text, size_t len, size_t *pos,
                               char **id_text, GError **errp);

/* One JSON value making up all of @text (whitespace aside). */
JsonNode *qmp_json_parse(const char *text, size_t len, GError **errp);

/*
 * @node as compact JSON text (caller frees), unlike json-glib's generator
 * always JSON: doubles as %.17g (1e+20, not 1e+20.0), invalid UTF-8 in
 * strings replaced (U+FFFD), inf and NaN as null.
 */
char *qmp_json_to_string(JsonNode *node);

/* Is @c JSON whitespace (space, tab, LF, CR)? */
bool qmp_json_is_ws(char c);

#endif /* QMP_JSON_H */
