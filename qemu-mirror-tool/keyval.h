/*
 * QEMU's keyval syntax, as qemu-storage-daemon's --blockdev, --object,
 * --nbd-server and --export take it (QEMU's util/keyval.c), turned into
 * the JSON arguments of the QMP command the option stands for:
 *
 *   driver=file,node-name=f,filename=/x   {"driver": "file", ...}
 *   file.driver=file,file.filename=/x     {"file": {"driver": "file", ...}}
 *   data=a,,b                             {"data": "a,b"} (",," is a comma)
 *   rules.0.match=x,rules.1.match=y       {"rules": [{...}, {...}]}
 *   secret,id=s                           {"qom-type": "secret", ...} with
 *                                         the implied key "qom-type"
 *
 * Every value is a string: the command converts it by its schema as QEMU
 * does (qmp_args_set_keyval() in qmp.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef KEYVAL_H
#define KEYVAL_H

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdbool.h>

#define KEYVAL_ERROR (keyval_error_quark())
GQuark keyval_error_quark(void);

/*
 * Parse @str, "KEY=VALUE,KEY=VALUE...", into a new object whose members
 * are strings, objects (dotted keys: "a.b=x") and arrays (objects whose
 * keys are all indexes 0..N-1: "a.0=x,a.1=y").  A key is a QAPI name (a
 * letter, then letters, digits, '-' and '_'; a fragment after a dot may
 * be an index instead); a value runs to the next single ',' (",," is a
 * comma in it).  A key given twice takes its last value.  If the first
 * element has no '=', it is the value of @implied_key (NULL: none; then
 * it is an error), up to the first ','.  NULL with @errp set as QEMU
 * words it: "Invalid parameter '1a'", "Expected '=' after parameter 'x'",
 * "Parameters 'a.*' used inconsistently", "Parameter 'a.1' missing",
 * "Parameter 'KEY' is too long".
 */
JsonObject *keyval_parse(const char *str, const char *implied_key,
                         GError **errp);

/*
 * A command-line option's value as qemu-storage-daemon reads it: JSON if
 * it starts with '{' (a JSON object, strictly typed), else keyval_parse()
 * with @implied_key.  *@is_keyval says which (the caller runs a keyval
 * command with qmp_args_set_keyval() on).  NULL with @errp set.
 */
JsonObject *keyval_parse_option(const char *str, const char *implied_key,
                                bool *is_keyval, GError **errp);

#endif /* KEYVAL_H */
