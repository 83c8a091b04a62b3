/*
 * mirror-tool daemon: serve QMP and do what it is told, as
 * qemu-storage-daemon does (daemon.h).  Its command line: --blockdev,
 * --object, --nbd-server and --export, each the QMP command of that name
 * with arguments in JSON or QEMU's keyval syntax (keyval.h), run in
 * command-line order before the QMP socket (--qmp) serves.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "qemu-mirror-tool/keyval.h"
#include "qemu-mirror-tool/tool.h"

#include <string.h>

/* A command-line option that stands for a QMP command. */
typedef struct DaemonOption {
    const char *option;         /* "--blockdev" */
    const char *command;        /* "blockdev-add" */
    const char *implied_key;    /* of its keyval form, or NULL */
} DaemonOption;

/* qemu-storage-daemon's, with its implied keys. */
static const DaemonOption daemon_options[] = {
    { "--blockdev", "blockdev-add", "driver" },
    { "--object", "object-add", "qom-type" },
    { "--nbd-server", "nbd-server-start", NULL },
    { "--export", "block-export-add", "type" },
};

/* One of those options as given: its arguments, parsed. */
typedef struct DaemonArg {
    const DaemonOption *opt;
    char *value;                /* as typed, for messages */
    JsonObject *args;
    bool keyval;
} DaemonArg;

static void daemon_arg_free(DaemonArg *a)
{
    g_free(a->value);
    json_object_unref(a->args);
    g_free(a);
}

/* The options given, in command-line order (DaemonArg *): GOption
 * passes main entries' callbacks no data of ours. */
static GPtrArray *daemon_cmdline;

/*
 * GOptionArgFunc of the options above: parse the value now (a syntax
 * error stops the command line before anything starts) and keep it in
 * daemon_cmdline.
 */
static gboolean daemon_opt_cb(const gchar *name, const gchar *value,
                              gpointer data, GError **errp)
{
    g_autoptr(GError) err = NULL;
    DaemonArg *a;

    for (size_t i = 0; i < G_N_ELEMENTS(daemon_options); i++) {
        const DaemonOption *opt = &daemon_options[i];
        JsonObject *args;
        bool keyval;

        if (strcmp(name, opt->option)) {
            continue;
        }
        args = keyval_parse_option(value, opt->implied_key, &keyval, &err);
        if (!args) {
            g_set_error(errp, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "%s '%s': %s", name, value, err->message);
            return FALSE;
        }
        a = g_new(DaemonArg, 1);
        *a = (DaemonArg) {
            .opt = opt, .value = g_strdup(value), .args = args,
            .keyval = keyval,
        };
        g_ptr_array_add(daemon_cmdline, a);
        return TRUE;
    }
    g_assert_not_reached();
}

/* Run @a's command on @d; false with a message naming the option. */
static bool daemon_arg_run(Daemon *d, DaemonArg *a)
{
    g_autoptr(GError) err = NULL;
    JsonNode *ret;

    ret = a->keyval ? daemon_execute_keyval(d, a->opt->command, a->args,
                                            &err)
                    : daemon_execute(d, a->opt->command, a->args, &err);
    if (err) {
        tool_error("%s '%s': %s", a->opt->option, a->value, err->message);
        return false;
    }
    if (ret) {
        json_node_unref(ret);
    }
    return true;
}

int cmd_daemon(int argc, char **argv)
{
    g_autofree char *qmp = NULL;
    g_auto(QmpServerOpts) qmp_opts = { 0 };
    g_autoptr(GError) err = NULL;
    g_autoptr(GPtrArray) cmdline =
        g_ptr_array_new_with_free_func((GDestroyNotify)daemon_arg_free);
    Daemon *d;
    int ret;
    GOptionEntry entries[] = {
        { "qmp", 0, 0, G_OPTION_ARG_FILENAME, &qmp,
          "serve QMP on this UNIX socket (default: none; the command "
          "line alone drives the daemon until a signal)", "PATH" },
        { "blockdev", 0, 0, G_OPTION_ARG_CALLBACK, daemon_opt_cb,
          "blockdev-add with these arguments (JSON or "
          "[driver=]DRIVER,node-name=NAME,...; repeatable)", "OPTS" },
        { "object", 0, 0, G_OPTION_ARG_CALLBACK, daemon_opt_cb,
          "object-add (JSON or [qom-type=]TYPE,id=ID,...; repeatable)",
          "OPTS" },
        { "nbd-server", 0, 0, G_OPTION_ARG_CALLBACK, daemon_opt_cb,
          "nbd-server-start (JSON or addr.type=unix,addr.path=PATH,...)",
          "OPTS" },
        { "export", 0, 0, G_OPTION_ARG_CALLBACK, daemon_opt_cb,
          "block-export-add (JSON or [type=]nbd,id=ID,node-name=NAME,...; "
          "repeatable)", "OPTS" },
        QMP_SERVER_OPTS_ENTRIES(&qmp_opts),
        { NULL },
    };
    static const char summary[] =
        "Serve QMP and make nodes, exports and mirror jobs as told, as\n"
        "qemu-storage-daemon does.  --blockdev, --object, --nbd-server and\n"
        "--export run first, in command-line order.  Runs until QMP quit,\n"
        "SIGINT, SIGTERM or SIGHUP.";

    daemon_cmdline = cmdline;
    if (!tool_parse_options("", summary, entries, &argc, &argv) ||
        !tool_expect_args("daemon", argc, 0, "no argument")) {
        return TOOL_EXIT_USAGE;
    }
    if (!qmp && qmp_server_opts_given(&qmp_opts)) {
        tool_error("%s needs --qmp PATH", qmp_server_opts_given(&qmp_opts));
        return TOOL_EXIT_USAGE;
    }
    if (!qmp_server_opts_parse(&qmp_opts, &err)) {
        tool_error("%s", err->message);
        return TOOL_EXIT_USAGE;
    }
    d = daemon_new(NULL, (int)qmp_opts.max_clients, &err);
    if (!d) {
        tool_error("%s", err->message);
        return TOOL_EXIT_USAGE;
    }
    qmp_server_opts_apply(&qmp_opts, d->qmp);
    for (guint i = 0; i < cmdline->len; i++) {
        if (!daemon_arg_run(d, g_ptr_array_index(cmdline, i))) {
            daemon_free(d);
            return TOOL_EXIT_USAGE;
        }
    }
    /* Made as the command line says: now clients may see it. */
    if (qmp && !qmp_server_listen(d->qmp, qmp, &err)) {
        tool_error("%s", err->message);
        daemon_free(d);
        return TOOL_EXIT_USAGE;
    }
    ret = daemon_run(d);
    daemon_free(d);
    return ret;
}
