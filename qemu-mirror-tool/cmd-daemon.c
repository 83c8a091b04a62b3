/*
 * mirror-tool daemon: serve QMP and do what it is told, as
 * qemu-storage-daemon does (daemon.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "qemu-mirror-tool/tool.h"

int cmd_daemon(int argc, char **argv)
{
    g_autofree char *qmp = NULL;
    g_autoptr(GError) err = NULL;
    Daemon *d;
    int ret;
    GOptionEntry entries[] = {
        { "qmp", 0, 0, G_OPTION_ARG_FILENAME, &qmp,
          "serve QMP on this UNIX socket", "PATH" },
        { NULL },
    };
    static const char summary[] =
        "Serve QMP and make nodes, exports and mirror jobs as told, as\n"
        "qemu-storage-daemon does.";

    if (!tool_parse_options("", summary, entries, &argc, &argv) ||
        !tool_expect_args("daemon", argc, 0, "no argument")) {
        return TOOL_EXIT_USAGE;
    }
    if (!qmp) {
        tool_error("daemon needs --qmp PATH");
        return TOOL_EXIT_USAGE;
    }
    d = daemon_new(qmp, QMP_DEFAULT_MAX_CLIENTS, &err);
    if (!d) {
        tool_error("--qmp '%s': %s", qmp, err->message);
        return TOOL_EXIT_USAGE;
    }
    ret = daemon_run(d);
    daemon_free(d);
    return ret;
}
