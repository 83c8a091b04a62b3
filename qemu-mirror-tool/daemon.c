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
#include <unistd.h>

static bool daemon_no_args(JsonObject *args, GError **errp)
{
    static const char *const none[] = { NULL };

    return qmp_check_args(args, none, errp);
}

/* Leave the main loop; no request is read from now on. */
static void daemon_quit(Daemon *d)
{
    d->quit = true;
    qmp_server_close_input(d->qmp);
}

/* quit: the reply goes out, then daemon_run() stops in order. */
static JsonNode *daemon_qmp_quit(JsonObject *args, void *opaque,
                                 GError **errp)
{
    if (!daemon_no_args(args, errp)) {
        return NULL;
    }
    daemon_quit(opaque);
    return NULL;
}

/* query-version: QEMU's VersionInfo, with mirror-tool's version. */
static JsonNode *daemon_qmp_query_version(JsonObject *args, void *opaque,
                                          GError **errp)
{
    return daemon_no_args(args, errp) ? qmp_version_info() : NULL;
}

static gint daemon_strcmp(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* query-commands: [{"name": NAME}, ...], every command, sorted. */
static JsonNode *daemon_qmp_query_commands(JsonObject *args, void *opaque,
                                           GError **errp)
{
    Daemon *d = opaque;
    g_autoptr(GPtrArray) names = NULL;
    g_autoptr(JsonBuilder) b = NULL;

    if (!daemon_no_args(args, errp)) {
        return NULL;
    }
    names = qmp_server_command_names(d->qmp);
    g_ptr_array_sort(names, daemon_strcmp);
    b = json_builder_new();
    json_builder_begin_array(b);
    for (guint i = 0; i < names->len; i++) {
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "name");
        json_builder_add_string_value(b, g_ptr_array_index(names, i));
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return json_builder_get_root(b);
}

static const char *daemon_signame(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* The first signal stops the daemon in order; one more, at once. */
static gboolean daemon_signal(gpointer opaque)
{
    DaemonSignal *s = opaque;
    const char *name = daemon_signame(s->signum);

    if (s->daemon->quit) {
        tool_error("interrupted again by %s; exiting without stopping the "
                   "jobs and flushing the exports", name);
        _exit(128 + s->signum);
    }
    tool_error("%s: stopping (interrupt again to stop at once)", name);
    daemon_quit(s->daemon);
    return G_SOURCE_CONTINUE;
}

Daemon *daemon_new(const char *qmp_path, int max_clients, GError **errp)
{
    static const int signums[] = { SIGINT, SIGTERM, SIGHUP };
    Daemon *d = g_new0(Daemon, 1);

    G_STATIC_ASSERT(G_N_ELEMENTS(signums) == G_N_ELEMENTS(d->signals));
    d->qmp = qmp_server_new(qmp_path, max_clients, errp);
    if (!d->qmp) {
        g_free(d);
        return NULL;
    }
    d->jobs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                    (GDestroyNotify)job_unref);
    qmp_server_register(d->qmp, "quit", daemon_qmp_quit, d);
    qmp_server_register(d->qmp, "query-version", daemon_qmp_query_version,
                        d);
    qmp_server_register(d->qmp, "query-commands", daemon_qmp_query_commands,
                        d);
    daemon_block_register(d);
    daemon_export_register(d);
    daemon_mirror_register(d);
    /* From now on: a signal during the command line stops it in order. */
    for (size_t i = 0; i < G_N_ELEMENTS(signums); i++) {
        DaemonSignal *s = &d->signals[i];

        s->daemon = d;
        s->signum = signums[i];
        s->source = g_unix_signal_add(signums[i], daemon_signal, s);
    }
    return d;
}

JsonNode *daemon_execute(Daemon *d, const char *name, JsonObject *args,
                         GError **errp)
{
    return qmp_server_execute(d->qmp, name, args, errp);
}

JsonNode *daemon_execute_keyval(Daemon *d, const char *name,
                                JsonObject *args, GError **errp)
{
    JsonNode *ret;

    qmp_args_set_keyval(true);
    ret = daemon_execute(d, name, args, errp);
    qmp_args_set_keyval(false);
    return ret;
}

int daemon_stop(Daemon *d)
{
    int ret;

    if (d->stopped) {
        return 0;
    }
    d->stopped = true;
    qmp_server_close_input(d->qmp);
    daemon_jobs_stop(d);
    ret = daemon_exports_stop(d);
    if (d->nodes) {
        const char *failed = NULL;
        int flush_ret = daemon_nodes_flush(d, &failed);

        /* What removed exports served, too: no node closes unflushed. */
        if (flush_ret < 0) {
            tool_error("flush of node '%s' failed: %s", failed,
                       g_strerror(-flush_ret));
            ret = ret < 0 ? ret : flush_ret;
        }
        g_hash_table_remove_all(d->nodes);
    }
    return ret;
}

int daemon_run(Daemon *d)
{
    int ret;

    tool_run_until(&d->quit);
    qmp_server_flush(d->qmp, 1000);     /* the reply to quit */
    ret = daemon_stop(d);
    if (ret < 0) {
        tool_error("a flush failed (%s): the guests' last writes may be "
                   "lost", g_strerror(-ret));
    }
    qmp_server_flush(d->qmp, 1000);     /* the jobs' last events */
    return ret < 0 ? TOOL_EXIT_FAILURE : TOOL_EXIT_OK;
}

void daemon_free(Daemon *d)
{
    if (!d) {
        return;
    }
    daemon_stop(d);
    for (size_t i = 0; i < G_N_ELEMENTS(d->signals); i++) {
        g_clear_handle_id(&d->signals[i].source, g_source_remove);
    }
    g_clear_pointer(&d->jobs, g_hash_table_unref);
    g_clear_pointer(&d->nodes, g_hash_table_unref);
    g_clear_pointer(&d->objects, g_hash_table_unref);
    qmp_server_free(d->qmp);
    g_free(d);
}
