/*
 * mirror-tool serve: export an image over NBD until SIGINT, SIGTERM or
 * SIGHUP.
 *
 * On a signal the server stops listening, lets connected clients receive
 * the replies to what they sent (up to 5 s; a second signal cuts this
 * short), drops them, waits for the block layer to finish the requests it
 * was given, flushes a writable image and exits 0.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "block/export/nbd-server.h"
#include "util/cutils.h"

#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>

#define SERVE_DRAIN_MS  5000

typedef struct ServeState {
    int signals;            /* SIGINT/SIGTERM received */
    bool deadline;          /* the graceful drain took too long */
    bool flushed;
    int flush_ret;
} ServeState;

static gboolean serve_signal_cb(gpointer opaque)
{
    ((ServeState *)opaque)->signals++;
    return G_SOURCE_CONTINUE;
}

static gboolean serve_deadline_cb(gpointer opaque)
{
    ((ServeState *)opaque)->deadline = true;
    return G_SOURCE_REMOVE;
}

static void serve_flush_cb(void *opaque, int ret)
{
    ServeState *s = opaque;

    s->flush_ret = ret;
    s->flushed = true;
}

/* Stop serving: graceful first, then drop whoever is left. */
static void serve_stop(NbdServer *srv, ServeState *s)
{
    int signals = s->signals;
    guint deadline = g_timeout_add(SERVE_DRAIN_MS, serve_deadline_cb, s);

    nbdsrv_shutdown(srv);
    while (!nbdsrv_is_drained(srv) && !s->deadline &&
           s->signals == signals) {
        g_main_context_iteration(NULL, TRUE);
    }
    if (!s->deadline) {
        g_source_remove(deadline);
    }
    /* Requests already submitted still complete; wait for them. */
    nbdsrv_disconnect_all(srv);
    while (!nbdsrv_is_drained(srv)) {
        g_main_context_iteration(NULL, TRUE);
    }
    nbdsrv_free(srv);
}

int cmd_serve(int argc, char **argv)
{
    g_autofree char *format = NULL;
    g_autofree char *export_name = NULL;
    g_autofree char *open_opts = NULL;
    g_autoptr(GHashTable) user_opts = NULL;
    g_autoptr(GHashTable) opts = NULL;
    g_auto(ToolExportOpts) eo = { 0 };
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GError) err = NULL;
    gboolean read_only = FALSE;
    ServeState s = { 0 };
    NbdServer *srv;
    guint sigint, sigterm, sighup;
    GOptionEntry entries[] = {
        TOOL_IMAGE_ENTRIES(&format, &open_opts),
        { "export-name", 'x', 0, G_OPTION_ARG_STRING, &export_name,
          "export name (default: \"\", the default export)", "NAME" },
        { "read-only", 'r', 0, G_OPTION_ARG_NONE, &read_only,
          "open the image read-only and refuse writes", NULL },
        TOOL_EXPORT_OPTS_ENTRIES(&eo, "", 'e'),
        TOOL_THREADS_ENTRY,
        { NULL },
    };
    static const char summary[] =
        "Export an image over NBD until SIGINT, SIGTERM or SIGHUP.\n\n"
        "ADDR is unix:PATH or tcp:HOST:PORT (PORT 0 picks a free port).\n"
        "Once listening, \"serving on ADDR\" is printed on stdout.\n"
        "A client that stops reading or sending stalls only itself: see\n"
        "docs/security.md for the limits.  --tls-creds or --tls-psk-file\n"
        "serve TLS (required of every client unless --tls=on); without\n"
        "it (or with --tls=on) an address other hosts reach needs\n"
        "--insecure.";

    if (!tool_parse_options("ADDR IMG", summary, entries, &argc, &argv) ||
        !tool_expect_args("serve", argc, 2, "an address and an image") ||
        !tool_parse_open_options("--open-opts", open_opts, &user_opts)) {
        return TOOL_EXIT_USAGE;
    }
    /* Credentials too, before the image is opened. */
    if (!tool_export_opts_check(&eo, "--", argv[1])) {
        return TOOL_EXIT_USAGE;
    }
    if (!tool_check_format("-f", format)) {
        return TOOL_EXIT_USAGE;
    }
    opts = tool_open_options(argv[2], NULL, user_opts);
    bs = tool_open_image(NULL, argv[2], format,
                         read_only ? 0 : BDRV_O_RDWR, opts);
    if (!bs) {
        return TOOL_EXIT_USAGE;
    }
    srv = nbdsrv_new(bs, argv[1], export_name, read_only, &err);
    if (!srv) {
        tool_error("%s", err->message);
        return err->code == BLOCK_ERROR_INVALID ? TOOL_EXIT_USAGE
                                                : TOOL_EXIT_FAILURE;
    }
    tool_export_opts_apply(&eo, "--", srv);        /* checked above */
    sigint = g_unix_signal_add(SIGINT, serve_signal_cb, &s);
    sigterm = g_unix_signal_add(SIGTERM, serve_signal_cb, &s);
    /* A dropped ssh session: stop as on SIGTERM, flushing what we served. */
    sighup = g_unix_signal_add(SIGHUP, serve_signal_cb, &s);
    printf("serving on %s\n", nbdsrv_get_address(srv));
    fflush(stdout);

    while (!s.signals) {
        g_main_context_iteration(NULL, TRUE);
    }
    serve_stop(srv, &s);
    g_source_remove(sigint);
    g_source_remove(sigterm);
    g_source_remove(sighup);

    if (!read_only) {
        bdrv_aio_flush(bs, serve_flush_cb, &s);
        tool_run_until(&s.flushed);
        if (s.flush_ret < 0) {
            tool_error("flush '%s': %s", argv[2], g_strerror(-s.flush_ret));
            return TOOL_EXIT_FAILURE;
        }
    }
    return TOOL_EXIT_OK;
}
