/*
 * The daemon's node registry (daemon.h): blockdev-add, blockdev-del,
 * query-named-block-nodes, object-add and object-del.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "block/mirror/mirror-top.h"

static void daemon_node_free(DaemonNode *n)
{
    bdrv_unref(n->top);
    bdrv_unref(n->bs);
    g_free(n->blocker);
    g_free(n->driver);
    g_free(n->name);
    g_free(n);
}

void daemon_block_register(Daemon *d)
{
    d->nodes = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                     (GDestroyNotify)daemon_node_free);
    d->objects = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                       NULL);
}

DaemonNode *daemon_node_find(Daemon *d, const char *name, const char *what,
                             GError **errp)
{
    DaemonNode *n = g_hash_table_lookup(d->nodes, name);

    if (!n) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Cannot find device='%s' nor node-name='%s'", name, name);
    }
    return n;
}

void daemon_node_use(DaemonNode *n, DaemonNodeUse use)
{
    n->uses[use]++;
}

void daemon_node_unuse(DaemonNode *n, DaemonNodeUse use)
{
    g_assert(n->uses[use] > 0);
    n->uses[use]--;
}

void daemon_node_block(DaemonNode *n, const char *blocker)
{
    g_free(n->blocker);
    n->blocker = g_strdup(blocker);
}

BlockDriverState *daemon_node_top(DaemonNode *n, GError **errp)
{
    if (!n->top) {
        n->top = mirror_top_new(n->bs, errp);
    }
    return n->top;
}

void daemon_node_move_top(DaemonNode *from, DaemonNode *to)
{
    g_assert(!to->top);
    to->top = from->top;
    from->top = NULL;
    daemon_exports_moved(from->daemon, from, to);
}

void *daemon_object_find_tls(Daemon *d, const char *id, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "No TLS credentials with id '%s'", id);
    return NULL;
}
