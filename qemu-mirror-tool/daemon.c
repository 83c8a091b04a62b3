/*
 * The daemon (daemon.h): its QMP server with every part's commands, the
 * main loop, signals and `quit`, query-version and query-commands.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "qemu-mirror-tool/tool.h"

#include <glib-unix.h>
#include <signal.h>

static JsonNode *daemon_qmp_quit(JsonObject *args, void *opaque,
                                 GError **errp)
{
    static const char *const none[] = { NULL };
    Daemon *d = opaque;

    if (!qmp_check_args(args, none, errp)) {
        return NULL;
    }
    d->quit = true;
    return NULL;
}

static gboolean daemon_signal_cb(gpointer opaque)
{
    ((Daemon *)opaque)->quit = true;
    return G_SOURCE_CONTINUE;
}

Daemon *daemon_new(const char *qmp_path, int max_clients, GError **errp)
{
    Daemon *d = g_new0(Daemon, 1);

    d->qmp = qmp_server_new(qmp_path, max_clients, errp);
    if (!d->qmp) {
        g_free(d);
        return NULL;
    }
    d->jobs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                    (GDestroyNotify)job_unref);
    qmp_server_register(d->qmp, "quit", daemon_qmp_quit, d);
    daemon_block_register(d);
    daemon_export_register(d);
    daemon_mirror_register(d);
    return d;
}

JsonNode *daemon_execute(Daemon *d, const char *name, JsonObject *args,
                         GError **errp)
{
    return qmp_server_execute(d->qmp, name, args, errp);
}

int daemon_run(Daemon *d)
{
    guint sigs[] = {
        g_unix_signal_add(SIGINT, daemon_signal_cb, d),
        g_unix_signal_add(SIGTERM, daemon_signal_cb, d),
        g_unix_signal_add(SIGHUP, daemon_signal_cb, d),
    };
    int ret = TOOL_EXIT_OK;

    tool_run_until(&d->quit);
    qmp_server_flush(d->qmp, 1000);     /* the reply to quit */
    daemon_jobs_stop(d);
    if (daemon_exports_stop(d) < 0) {
        ret = TOOL_EXIT_FAILURE;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(sigs); i++) {
        g_source_remove(sigs[i]);
    }
    return ret;
}

void daemon_free(Daemon *d)
{
    if (!d) {
        return;
    }
    g_clear_pointer(&d->jobs, g_hash_table_unref);
    g_clear_pointer(&d->nodes, g_hash_table_unref);
    g_clear_pointer(&d->objects, g_hash_table_unref);
    qmp_server_free(d->qmp);
    g_free(d);
}
