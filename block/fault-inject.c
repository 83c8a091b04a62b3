/*
 * Fault injection rules for the test doubles.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/fault-inject.h"
#include "block/block.h"
#include "util/cutils.h"

#include <errno.h>
#include <unistd.h>

static const char *const fault_op_names[FAULT_OP_ANY] = {
    [BDRV_OP_READ] = "read",
    [BDRV_OP_WRITE] = "write",
    [BDRV_OP_ZERO] = "zero",
    [BDRV_OP_DISCARD] = "discard",
    [BDRV_OP_FLUSH] = "flush",
    [BDRV_OP_STATUS] = "status",
};

bool fault_opt_bool(GHashTable *opts, const char *driver, const char *key,
                    bool def, bool *out, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, key);

    *out = def;
    if (!v) {
        return true;
    }
    if (!strcmp(v, "on") || !strcmp(v, "true")) {
        *out = true;
    } else if (!strcmp(v, "off") || !strcmp(v, "false")) {
        *out = false;
    } else {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "%s: '%s=%s': expected on or off", driver, key, v);
        return false;
    }
    g_hash_table_remove(opts, key);
    return true;
}

bool fault_opt_size(GHashTable *opts, const char *driver, const char *key,
                    int64_t def, int64_t *out, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, key);
    g_autofree char *what = g_strdup_printf("%s: %s", driver, key);

    *out = def;
    if (!v) {
        return true;
    }
    if (!parse_size(what, v, out, errp)) {
        return false;
    }
    g_hash_table_remove(opts, key);
    return true;
}

/* error-op: a BdrvOp name, or "any" (FAULT_OP_ANY); -1 if neither. */
static int fault_lookup_op(const char *name)
{
    if (!strcmp(name, "any")) {
        return FAULT_OP_ANY;
    }
    for (int i = 0; i < FAULT_OP_ANY; i++) {
        if (!strcmp(name, fault_op_names[i])) {
            return i;
        }
    }
    return -1;
}

/* error-errno: an errno name, in any case; its value, or -1. */
static int fault_lookup_errno(const char *name)
{
    static const struct { const char *name; int err; } errnos[] = {
        { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EPERM", EPERM },
        { "EINVAL", EINVAL }, { "ENOMEM", ENOMEM },
        { "ESHUTDOWN", ESHUTDOWN }, { "ENOTSUP", ENOTSUP },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(errnos); i++) {
        if (!g_ascii_strcasecmp(name, errnos[i].name)) {
            return errnos[i].err;
        }
    }
    return -1;
}

/*
 * The value @lookup gives the option @key of @opts into *@out, which is
 * left alone when @key is absent; an unknown name is refused ("DRIVER:
 * unknown KEY 'NAME'").  Removes @key.
 */
static bool fault_opt_name(GHashTable *opts, const char *driver,
                           const char *key, int (*lookup)(const char *name),
                           int *out, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, key);
    int value;

    if (!v) {
        return true;
    }
    value = lookup(v);
    if (value < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "%s: unknown %s '%s'", driver, key, v);
        return false;
    }
    *out = value;
    g_hash_table_remove(opts, key);
    return true;
}

bool fault_rule_parse(FaultRule *rule, GHashTable *opts, const char *driver,
                      GError **errp)
{
    const char *file = g_hash_table_lookup(opts, "error-file");

    *rule = (FaultRule) { .op = -1, .err = EIO };
    if (!fault_opt_name(opts, driver, "error-op", fault_lookup_op,
                        &rule->op, errp) ||
        !fault_opt_name(opts, driver, "error-errno", fault_lookup_errno,
                        &rule->err, errp)) {
        return false;
    }
    if (file) {
        rule->trigger_file = g_strdup(file);
        g_hash_table_remove(opts, "error-file");
    }
    return fault_opt_size(opts, driver, "error-offset", 0, &rule->offset,
                          errp) &&
           fault_opt_size(opts, driver, "error-length", 1, &rule->length,
                          errp) &&
           fault_opt_bool(opts, driver, "error-once", false, &rule->once,
                          errp);
}

void fault_rule_clear(FaultRule *rule)
{
    g_free(rule->trigger_file);
    rule->trigger_file = NULL;
}

int fault_rule_check(FaultRule *rule, BdrvOp op, int64_t offset,
                     int64_t bytes)
{
    bool overlap;

    if (rule->op < 0 || (rule->op != FAULT_OP_ANY && rule->op != (int)op)) {
        return 0;
    }
    overlap = op == BDRV_OP_FLUSH ||
              (offset < rule->offset + rule->length &&
               rule->offset < offset + bytes);
    if (!overlap) {
        return 0;
    }
    if (rule->trigger_file && access(rule->trigger_file, F_OK) != 0) {
        return 0;
    }
    if (rule->once) {
        rule->op = -1;
    }
    rule->injected++;
    return -rule->err;
}
