/*
 * Fault injection for the test doubles (the null driver, the blkdebug
 * filter): one rule "fail operation OP on requests overlapping
 * [offset, offset + length) with errno E", optionally only once, or only
 * while a trigger file exists (so a test can switch faults on and off at
 * the exact moment it wants).  Also the small option parsers those
 * drivers share.
 *
 * Keys: error-op=read|write|zero|discard|flush|status|any,
 * error-offset=SIZE (default 0), error-length=SIZE (default 1),
 * error-errno=EIO|ENOSPC|EPERM|EINVAL|ENOMEM|ESHUTDOWN|ENOTSUP (default
 * EIO), error-once=on|off, error-file=PATH.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_FAULT_INJECT_H
#define BLOCK_FAULT_INJECT_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block.h"

/* The number of BdrvOp kinds; as error-op, "any". */
#define FAULT_OP_ANY (BDRV_OP_STATUS + 1)

typedef struct FaultRule {
    int op;                 /* BdrvOp, FAULT_OP_ANY, -1 = none */
    int64_t offset;
    int64_t length;
    int err;                /* positive errno */
    bool once;
    char *trigger_file;     /* inject only while it exists, or NULL */
    uint64_t injected;      /* errors injected so far */
} FaultRule;

/*
 * Parse the error-* keys of @opts into @rule, removing them; @driver
 * prefixes messages.  Without error-op the rule never fires.
 */
bool fault_rule_parse(FaultRule *rule, GHashTable *opts, const char *driver,
                      GError **errp);

void fault_rule_clear(FaultRule *rule);

/* The error to inject into a request (-errno), or 0.  Counts it. */
int fault_rule_check(FaultRule *rule, BdrvOp op, int64_t offset,
                     int64_t bytes);

/* Option helpers: parse and remove @key, or leave *@out = @def. */
bool fault_opt_bool(GHashTable *opts, const char *driver, const char *key,
                    bool def, bool *out, GError **errp);
bool fault_opt_size(GHashTable *opts, const char *driver, const char *key,
                    int64_t def, int64_t *out, GError **errp);

#endif /* BLOCK_FAULT_INJECT_H */
