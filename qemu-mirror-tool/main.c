/*
 * mirror-tool: the command table.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "config-host.h"
#include "qemu-mirror-tool/tool.h"

#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct ToolCommand {
    const char *name;
    const char *summary;
    ToolCommandFunc *run;
} ToolCommand;

static const ToolCommand tool_commands[] = {
    { "convert", "copy an image, like qemu-img convert", cmd_convert },
    { "create", "create an image, like qemu-img create", cmd_create },
    { "start", "mirror an image and keep it in sync (QMP control)",
      cmd_start },
    { "qmp", "send one QMP command to a running mirror-tool", cmd_qmp },
    { "info", "show an image's format and sizes", cmd_info },
    { "map", "show which parts of an image hold data", cmd_map },
    { "compare", "compare two images' contents, like qemu-img compare",
      cmd_compare },
    { "checksum", "print a digest of an image's contents",
      cmd_checksum },
    { "serve", "export an image over NBD until stopped", cmd_serve },
    { "daemon", "serve QMP: nodes, exports and jobs made on demand, "
      "like qemu-storage-daemon", cmd_daemon },
    { "check", "check a qcow2 image for leaks and corruptions", cmd_check },
};

static void tool_print_usage(FILE *out)
{
    fprintf(out, "Usage: mirror-tool [--version] COMMAND [OPTIONS] ...\n\n"
                 "Commands:\n");
    for (size_t i = 0; i < G_N_ELEMENTS(tool_commands); i++) {
        fprintf(out, "  %-10s %s\n", tool_commands[i].name,
                tool_commands[i].summary);
    }
    fprintf(out, "\n'mirror-tool COMMAND --help' describes a command.\n"
                 "Set G_MESSAGES_DEBUG=all (or mirror-block, mirror-tool) "
                 "for debug messages.\n");
}

/*
 * block/ reports what a user must see but that fails no call (a qcow2
 * image marked corrupt) with g_warning(); say it as the tool's other
 * messages are said ("mirror-tool: warning: ..."), not in GLib's debug
 * format.  Other levels (criticals are bugs, debug output) keep GLib's
 * writer.
 */
static GLogWriterOutput main_log_writer(GLogLevelFlags level,
                                        const GLogField *fields,
                                        gsize n_fields, gpointer data)
{
    if (level & G_LOG_LEVEL_WARNING) {
        for (gsize i = 0; i < n_fields; i++) {
            if (!strcmp(fields[i].key, "MESSAGE") && fields[i].length < 0) {
                fprintf(stderr, "mirror-tool: warning: %s\n",
                        (const char *)fields[i].value);
                return G_LOG_WRITER_HANDLED;
            }
        }
    }
    return g_log_writer_default(level, fields, n_fields, data);
}

int main(int argc, char **argv)
{
    const char *name;

    setlocale(LC_ALL, "");
    g_log_set_writer_func(main_log_writer, NULL, NULL);
    /*
     * A reader that goes away (`| head`, a closed log pipe, a dropped ssh
     * session) must not kill a job or the export guests depend on: writes
     * to it fail with EPIPE instead, and the output stops (job-runner.c).
     * Sockets are covered too, whatever flags a send() forgets.
     */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        tool_print_usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") ||
        !strcmp(name, "help")) {
        tool_print_usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
        printf("mirror-tool %s\n", QEMU_MIRROR_VERSION);
#ifdef CONFIG_TEST_HOOKS
        /* What the tests look for (test-tool-options.sh): a build that
         * can be told to kill itself is no release. */
        printf("test hooks: built in (-Dtest-hooks=true), not for "
               "production\n");
#endif
        return TOOL_EXIT_OK;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(tool_commands); i++) {
        if (!strcmp(name, tool_commands[i].name)) {
            return tool_commands[i].run(argc - 1, argv + 1);
        }
    }
    tool_error("unknown command '%s' (try 'mirror-tool --help')", name);
    return TOOL_EXIT_USAGE;
}
