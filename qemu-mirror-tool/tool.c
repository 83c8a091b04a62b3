/*
 * mirror-tool: helpers shared by the subcommands.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "block/export/nbd-server.h"
#include "block/mirror/mirror.h"
#include "block/nbd.h"
#include "block/thread-pool.h"
#include "util/cutils.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <stdarg.h>
#include <stdio.h>

void tool_error(const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fprintf(stderr, "mirror-tool: %s\n", msg);
}

bool tool_parse_options(const char *params, const char *summary,
                        GOptionEntry *entries, int *argc, char ***argv)
{
    g_autoptr(GOptionContext) ctx = g_option_context_new(params);
    g_autoptr(GError) err = NULL;

    g_option_context_set_summary(ctx, summary);
    g_option_context_add_main_entries(ctx, entries, NULL);

    if (!g_option_context_parse(ctx, argc, argv, &err)) {
        tool_error("%s (try '%s --help')", err->message, (*argv)[0]);
        return false;
    }
    return true;
}

bool tool_expect_args(const char *command, int argc, int n,
                      const char *what)
{
    if (argc - 1 == n) {
        return true;
    }
    tool_error("%s: expected %s (try 'mirror-tool %s --help')", command,
               what, command);
    return false;
}

bool tool_parse_output_format(const char *value, bool *json)
{
    if (!value || !strcmp(value, "human")) {
        *json = false;
    } else if (!strcmp(value, "json")) {
        *json = true;
    } else {
        tool_error("--output '%s': expected human or json", value);
        return false;
    }
    return true;
}

void tool_run_until(bool *done)
{
    while (!*done) {
        g_main_context_iteration(NULL, TRUE);
    }
}

GHashTable *tool_parse_kv_options(const char *what, const char *str)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal,
                                                       g_free, g_free);
    g_autoptr(GError) err = NULL;

    if (!parse_key_values(what, str, opts, &err)) {
        tool_error("%s", err->message);
        return NULL;
    }
    return g_steal_pointer(&opts);
}

BlockDriverState *tool_open_image(const char *role, const char *spec,
                                  const char *format, int flags,
                                  GHashTable *options)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = bdrv_open(spec, format, flags, options, &err);

    if (!bs) {
        if (role) {
            tool_error("%s: %s", role, err->message);
        } else {
            tool_error("%s", err->message);
        }
    }
    return bs;
}

void tool_print_json(JsonNode *node, bool pretty)
{
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autofree char *text = NULL;

    json_generator_set_root(gen, node);
    json_generator_set_pretty(gen, pretty);
    json_generator_set_indent(gen, 4);
    text = json_generator_to_data(gen, NULL);
    printf("%s\n", text);
    json_node_unref(node);
}

BlockDriverState *tool_open_one_image(const char *command,
                                      const char *summary, int flags,
                                      int argc, char **argv, bool *json,
                                      int *exit_code)
{
    gboolean force_share = FALSE;
    g_autofree char *format = NULL;
    g_autofree char *output = NULL;
    g_autofree char *open_opts = NULL;
    g_autoptr(GHashTable) user_opts = NULL;
    g_autoptr(GHashTable) opts = NULL;
    BlockDriverState *bs;
    GOptionEntry entries[] = {
        TOOL_IMAGE_ENTRIES(&format, &open_opts),
        { "output", 0, 0, G_OPTION_ARG_STRING, &output,
          "output format: human (default) or json", "FMT" },
        TOOL_FORCE_SHARE_ENTRY(&force_share),
        { NULL },
    };

    *exit_code = TOOL_EXIT_USAGE;
    if (!tool_parse_options("IMG", summary, entries, &argc, &argv) ||
        !tool_parse_output_format(output, json) ||
        !tool_expect_args(command, argc, 1, "one image") ||
        !tool_parse_open_options("--open-opts", open_opts, &user_opts)) {
        return NULL;
    }
    if (!tool_check_format("-f", format)) {
        return NULL;
    }
    opts = tool_open_options(argv[1], NULL, user_opts);
    bs = tool_open_image(NULL, argv[1], format,
                         flags | (force_share ? BDRV_O_FORCE_SHARE : 0),
                         opts);
    if (bs) {
        *exit_code = TOOL_EXIT_OK;
    }
    return bs;
}

bool tool_parse_choice(const char *opt, const char *value,
                       const char *const *choices, int *index)
{
    g_autoptr(GString) list = g_string_new(NULL);
    int n = g_strv_length((char **)choices);

    if (!value) {
        return true;
    }
    for (int i = 0; i < n; i++) {
        if (!strcmp(value, choices[i])) {
            *index = i;
            return true;
        }
        g_string_append_printf(list, "%s%s", i == 0 ? "" :
                               i == n - 1 ? " or " : ", ", choices[i]);
    }
    tool_error("%s '%s': expected %s", opt, value, list->str);
    return false;
}

/* What TOOL_NBD_TIMEOUT_ENTRIES were given: open option -> seconds. */
static GHashTable *tool_nbd_timeouts;

gboolean tool_opt_nbd_seconds(const gchar *name, const gchar *value,
                              gpointer data, GError **errp)
{
    int64_t v;

    if (!parse_count(name, value, 0, NBDBLK_MAX_TIMEOUT, &v, errp)) {
        return FALSE;
    }
    if (!tool_nbd_timeouts) {
        tool_nbd_timeouts = g_hash_table_new_full(g_str_hash, g_str_equal,
                                                  g_free, g_free);
    }
    /* "--connect-timeout" -> "connect-timeout" */
    g_hash_table_replace(tool_nbd_timeouts, g_strdup(name + 2),
                         g_strdup_printf("%" G_GINT64_FORMAT, v));
    return TRUE;
}

gboolean tool_opt_threads(const gchar *name, const gchar *value,
                          gpointer data, GError **errp)
{
    int64_t v;

    if (!parse_count(name, value, 1, THREAD_POOL_MAX_THREADS, &v, errp)) {
        return FALSE;
    }
    thread_pool_set_threads(v);
    return TRUE;
}

/* Copy every pair of @from into @to, replacing what @to had. */
static void tool_merge_options(GHashTable *to, GHashTable *from)
{
    GHashTableIter it;
    gpointer key, value;

    if (!from) {
        return;
    }
    g_hash_table_iter_init(&it, from);
    while (g_hash_table_iter_next(&it, &key, &value)) {
        g_hash_table_replace(to, g_strdup(key), g_strdup(value));
    }
}

GHashTable *tool_open_options(const char *spec, GHashTable *nbd_opts,
                              GHashTable *user)
{
    const char *drv = bdrv_spec_driver(spec);
    GHashTable *opts = g_hash_table_new_full(g_str_hash, g_str_equal,
                                             g_free, g_free);

    if (drv && !strcmp(drv, "nbd")) {
        tool_merge_options(opts, nbd_opts);
        tool_merge_options(opts, tool_nbd_timeouts);
    }
    tool_merge_options(opts, user);
    return opts;
}

bool tool_parse_open_options(const char *opt, const char *str,
                             GHashTable **options)
{
    *options = NULL;
    if (!str) {
        return true;
    }
    *options = tool_parse_kv_options(opt, str);
    return *options != NULL;
}

ToolNodeOpts tool_node_opts_init(void)
{
    return (ToolNodeOpts) {
        .nbd = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                     g_free),
    };
}

bool tool_node_opts_parse(ToolNodeOpts *n, const char *src, const char *dst)
{
    return tool_parse_open_options("--source-opts", src, &n->src_user) &&
           tool_parse_open_options("--target-opts", dst, &n->dst_user);
}

void tool_node_opts_resolve(ToolNodeOpts *n, const char *src_spec,
                            const char *dst_spec)
{
    n->src_open = tool_open_options(src_spec, n->nbd, n->src_user);
    n->dst_open = tool_open_options(dst_spec, n->nbd, n->dst_user);
}

void tool_node_opts_clear(ToolNodeOpts *n)
{
    g_clear_pointer(&n->nbd, g_hash_table_unref);
    g_clear_pointer(&n->src_user, g_hash_table_unref);
    g_clear_pointer(&n->dst_user, g_hash_table_unref);
    g_clear_pointer(&n->src_open, g_hash_table_unref);
    g_clear_pointer(&n->dst_open, g_hash_table_unref);
}

bool tool_parse_engine_options(const char *chunk_size, const char *buf_size,
                               const char *connections, MirrorParams *p,
                               GHashTable *nbd_opts, GError **errp)
{
    int64_t v;

    if (chunk_size) {
        if (!parse_size_range("--chunk-size", chunk_size,
                              MIRROR_MIN_CHUNK_SIZE, MIRROR_MAX_CHUNK_SIZE,
                              true, &v, errp)) {
            return false;
        }
        p->chunk_size = v;
    }
    if (buf_size) {
        if (!parse_size_range("--buf-size", buf_size, 4 * KiB, 4 * GiB,
                              false, &v, errp)) {
            return false;
        }
        p->buf_size = v;
    }
    if (connections) {
        if (!parse_count("--connections", connections, 1, 16, &v, errp)) {
            return false;
        }
        g_hash_table_insert(nbd_opts, g_strdup("connections"),
                            g_strdup_printf("%" G_GINT64_FORMAT, v));
    }
    return true;
}

bool tool_check_format(const char *opt, const char *format)
{
    if (format && !bdrv_find_format(format)) {
        tool_error("%s '%s': unknown image format", opt, format);
        return false;
    }
    return true;
}

bool tool_check_target_chain(BlockDriverState *src, const char *target)
{
    g_autofree char *member = NULL;
    int depth;

    if (!bdrv_chain_contains(src, target, &depth, &member)) {
        return true;
    }
    if (depth == 0) {
        tool_error("target '%s' is the source image '%s'", target,
                   bdrv_get_filename(src));
    } else {
        tool_error("target '%s' is in the backing chain of the source "
                   "'%s' (backing file '%s', depth %d)", target,
                   bdrv_get_filename(src), member, depth);
    }
    return false;
}

int tool_finish_stdout(int ret)
{
    int err = 0;

    if (fflush(stdout) == EOF) {
        err = errno;
    } else if (ferror(stdout)) {
        err = EIO;      /* an earlier write failed; its errno is gone */
    }
    if (!err) {
        return ret;
    }
    tool_error("stdout: %s", g_strerror(err));
    return ret == TOOL_EXIT_OK ? TOOL_EXIT_FAILURE : ret;
}

char *tool_export_opts_given(const ToolExportOpts *o, const char *prefix)
{
    const char *name = o->shared ? "shared" :
                       o->payload_timeout ? "payload-timeout" :
                       o->handshake_limit ? "handshake-limit" :
                       o->reply_timeout ? "reply-timeout" :
                       o->budget ? "budget" :
                       o->insecure ? "insecure" :
                       o->tls_creds ? "tls-creds" :
                       o->tls_psk_file ? "tls-psk-file" :
                       o->tls ? "tls" :
                       o->tls_verify_peer ? "tls-verify-peer" :
                       o->tls_authz ? "tls-authz" : NULL;

    return name ? g_strconcat(prefix, name, NULL) : NULL;
}

/* Refuse @addr where other hosts reach it while plain clients are served
 * (no TLS, or --tls=on) and --insecure was not given. */
static bool tool_export_check_addr(const ToolExportOpts *o,
                                   const char *prefix, const char *addr)
{
    g_autoptr(GError) err = NULL;
    bool remote;

    if (!nbdsrv_addr_is_remote(addr, &remote, &err)) {
        tool_error("%s", err->message);
        return false;
    }
    if (!remote || o->insecure ||
        (o->creds && nbdsrv_tls_creds_required(o->creds))) {
        return true;
    }
    if (o->creds) {
        tool_error("'%s' can be reached from other hosts, and %stls=on "
                   "serves clients without TLS too: anyone who reaches it "
                   "could read and write the disk; drop %stls=on (TLS is "
                   "then required), or give %sinsecure", addr, prefix,
                   prefix, prefix);
    } else {
        tool_error("'%s' can be reached from other hosts, and the export "
                   "has no TLS: anyone who reaches it could read and write "
                   "the disk; give %stls-creds or %stls-psk-file, serve on "
                   "a loopback address or a UNIX socket, or give %sinsecure",
                   addr, prefix, prefix, prefix);
    }
    return false;
}

/* The TLS options of @o: checked, and the credentials loaded. */
static bool tool_export_tls_load(ToolExportOpts *o, const char *prefix)
{
    static const char *const tls_modes[] = { "on", "require", NULL };
    static const char *const on_off[] = { "on", "off", NULL };
    g_autofree char *tls_opt = g_strconcat(prefix, "tls", NULL);
    g_autofree char *verify_opt = g_strconcat(prefix, "tls-verify-peer",
                                              NULL);
    g_autoptr(GError) err = NULL;
    int mode = 1, peer = 0;      /* require; on */
    NbdTlsConfig cfg;

    if (o->tls_creds && o->tls_psk_file) {
        tool_error("%stls-creds and %stls-psk-file: give one kind of "
                   "credentials", prefix, prefix);
        return false;
    }
    if (!o->tls_creds && !o->tls_psk_file) {
        const char *name = o->tls ? "tls" :
                           o->tls_verify_peer ? "tls-verify-peer" :
                           o->tls_authz ? "tls-authz" : NULL;

        if (name) {
            tool_error("%s%s needs %stls-creds or %stls-psk-file", prefix,
                       name, prefix, prefix);
            return false;
        }
        return true;
    }
    if (!tool_parse_choice(tls_opt, o->tls, tls_modes, &mode) ||
        !tool_parse_choice(verify_opt, o->tls_verify_peer, on_off,
                           &peer)) {
        return false;
    }
    if (o->tls_psk_file && o->tls_verify_peer) {
        tool_error("%s needs %stls-creds: a pre-shared key authenticates "
                   "both ends", verify_opt, prefix);
        return false;
    }
    for (char **a = o->tls_authz; o->tls_creds && a && *a; a++) {
        if (peer == 1) {
            tool_error("%stls-authz needs %s=on: a certificate that is not "
                       "verified proves no name", prefix, verify_opt);
            return false;
        }
        if (!strchr(*a, '=')) {
            /* Not echoed: it may be a PSK user name given by mistake. */
            tool_error("%stls-authz: entry %d is not a distinguished name "
                       "such as CN=client,O=Example", prefix,
                       (int)(a - o->tls_authz) + 1);
            return false;
        }
    }
    cfg = (NbdTlsConfig) {
        .x509_dir = o->tls_creds,
        .psk_file = o->tls_psk_file,
        .verify_peer = peer == 0,
        .require = mode == 1,
        .authz = (const char *const *)o->tls_authz,
    };
    o->creds = nbdsrv_tls_creds_new(&cfg, &err);
    if (!o->creds) {
        tool_error("%s%s %s", prefix,
                   o->tls_creds ? "tls-creds" : "tls-psk-file",
                   err->message);
        return false;
    }
    return true;
}

/* Parse @value of option @prefix@name as a count in [@min, @max]. */
static bool tool_export_count(const char *prefix, const char *name,
                              const char *value, int64_t min, int64_t max,
                              int64_t *out)
{
    g_autofree char *opt = g_strconcat(prefix, name, NULL);
    g_autoptr(GError) err = NULL;

    if (value && !parse_count(opt, value, min, max, out, &err)) {
        tool_error("%s", err->message);
        return false;
    }
    return true;
}

/* Check the limits of @o and, with @srv, set them on it. */
static bool tool_export_limits_apply(const ToolExportOpts *l,
                                     const char *prefix, NbdServer *srv)
{
    int64_t shared = NBDSRV_DEFAULT_SHARED;
    int64_t payload_s = NBDSRV_DEFAULT_PAYLOAD_MS / 1000;
    int64_t handshake_s = NBDSRV_DEFAULT_HANDSHAKE_MS / 1000;
    int64_t reply_s = NBDSRV_DEFAULT_STALL_MS / 1000;
    int64_t budget = 0;

    if (!tool_export_count(prefix, "shared", l->shared, 1,
                           NBDSRV_MAX_SHARED, &shared) ||
        !tool_export_count(prefix, "payload-timeout", l->payload_timeout, 0,
                           86400, &payload_s) ||
        !tool_export_count(prefix, "handshake-limit", l->handshake_limit, 0,
                           86400, &handshake_s) ||
        !tool_export_count(prefix, "reply-timeout", l->reply_timeout, 0,
                           86400, &reply_s)) {
        return false;
    }
    if (l->budget) {
        g_autofree char *opt = g_strconcat(prefix, "budget", NULL);
        g_autoptr(GError) err = NULL;

        if (!parse_size_range(opt, l->budget,
                              shared * NBDSRV_CLIENT_GUARANTEE,
                              NBDSRV_MAX_BUDGET, false, &budget, &err)) {
            tool_error("%s", err->message);
            return false;
        }
    }
    if (srv) {
        nbdsrv_set_shared(srv, shared);
        nbdsrv_set_payload_timeout(srv, payload_s * 1000);
        nbdsrv_set_timeouts(srv, handshake_s * 1000, reply_s * 1000);
        if (l->budget) {
            nbdsrv_set_budget(srv, budget);
        }
    }
    return true;
}

bool tool_export_opts_check(ToolExportOpts *o, const char *prefix,
                            const char *addr)
{
    return tool_export_limits_apply(o, prefix, NULL) &&
           (!addr || (tool_export_tls_load(o, prefix) &&
                      tool_export_check_addr(o, prefix, addr)));
}

void tool_export_opts_apply(ToolExportOpts *o, const char *prefix,
                            NbdServer *srv)
{
    tool_export_limits_apply(o, prefix, srv);      /* checked before */
    nbdsrv_set_tls(srv, g_steal_pointer(&o->creds));
}

void tool_export_opts_clear(ToolExportOpts *o)
{
    g_free(o->shared);
    g_free(o->payload_timeout);
    g_free(o->handshake_limit);
    g_free(o->reply_timeout);
    g_free(o->budget);
    g_free(o->tls_creds);
    g_free(o->tls_psk_file);
    g_free(o->tls);
    g_free(o->tls_verify_peer);
    g_strfreev(o->tls_authz);
    nbdsrv_tls_creds_free(o->creds);
    *o = (ToolExportOpts) { 0 };
}
