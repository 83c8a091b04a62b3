/*
 * mirror-tool: what every subcommand shares.
 *
 * Each subcommand lives in its own cmd-*.c, owns its GOptionContext and
 * returns an exit code:
 *   0    done (and verified where the command verifies)
 *   1    an I/O or job failure
 *   2    bad usage or bad input; nothing was written
 *   129  stopped by SIGHUP after an orderly cancel
 *   130  stopped by SIGINT after an orderly cancel
 *   143  stopped by SIGTERM after an orderly cancel
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TOOL_H
#define TOOL_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block.h"
#include "block/export/nbd-server.h"

enum {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAILURE = 1,
    TOOL_EXIT_USAGE = 2,
    TOOL_EXIT_SIGHUP = 129,
    TOOL_EXIT_SIGINT = 130,
    TOOL_EXIT_SIGTERM = 143,
};

/* A subcommand: runs with argv[0] = its name; returns an exit code. */
typedef int ToolCommandFunc(int argc, char **argv);

/* Print "mirror-tool: MESSAGE" on stderr. */
void tool_error(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

/*
 * Parse @argv with the options @entries (NULL-terminated) of a command
 * whose --help shows "Usage: ... [OPTION...] @params" and @summary.  On
 * failure print the error and a hint to use --help, and return false (the
 * caller exits with TOOL_EXIT_USAGE).
 */
bool tool_parse_options(const char *params, const char *summary,
                        GOptionEntry *entries, int *argc, char ***argv);

/*
 * Check that exactly @n positional arguments are left (argv[1..n]);
 * otherwise print "COMMAND: expected ..." and return false.
 */
bool tool_expect_args(const char *command, int argc, int n,
                      const char *what);

/* "human" or "json" from --output; false with a message otherwise. */
bool tool_parse_output_format(const char *value, bool *json);

/* Iterate the default main context until *@done becomes true. */
void tool_run_until(bool *done);

/*
 * Parse "key=value,key=value" (-o) into a new table; NULL with a message
 * on a malformed pair.
 */
GHashTable *tool_parse_kv_options(const char *what, const char *str);

/*
 * Open an image for a subcommand.  A failure is printed, prefixed by
 * @role ("source", "target") when not NULL.
 */
BlockDriverState *tool_open_image(const char *role, const char *spec,
                                  const char *format, int flags,
                                  GHashTable *options);

/*
 * The command line of a command that reads one image (info, map):
 * [-f FMT] [--open-opts OPTS] [--output=human|json] [-U] IMG.  Parses it,
 * opens the image read-only with @flags (BDRV_O_*; -U adds
 * BDRV_O_FORCE_SHARE) and returns it with *@json set; or prints why not
 * and returns NULL with *@exit_code set (TOOL_EXIT_USAGE: bad input, or
 * an image locked by another user).
 */
BlockDriverState *tool_open_one_image(const char *command,
                                      const char *summary, int flags,
                                      int argc, char **argv, bool *json,
                                      int *exit_code);

/* The -U option of the commands that read an image (qemu-img's). */
#define TOOL_FORCE_SHARE_ENTRY(force_share) \
    { "force-share", 'U', 0, G_OPTION_ARG_NONE, (force_share), \
      "open the image even if another process uses it: lock nothing " \
      "others could mind (see docs: Locking)", NULL }

/*
 * Parse @value as one of @choices (NULL-terminated) into *@index;
 * otherwise print "OPT 'value': expected a, b or c" and return false.
 * A NULL @value (the option was not given) leaves *@index as it is.
 */
bool tool_parse_choice(const char *opt, const char *value,
                       const char *const *choices, int *index);

/*
 * The copy-engine options convert and start share: --chunk-size and
 * --buf-size into @p, --connections into @nbd_opts ("connections").  A
 * NULL value leaves the default.  False with @errp set naming the bad
 * value.
 */
typedef struct MirrorParams MirrorParams;
bool tool_parse_engine_options(const char *chunk_size, const char *buf_size,
                               const char *connections, MirrorParams *p,
                               GHashTable *nbd_opts, GError **errp);

/*
 * The open options of the image @spec, a new table: for an NBD URI
 * @nbd_opts (--connections) and the timeouts of TOOL_NBD_TIMEOUT_ENTRIES;
 * then @user (NULL: none), the node options the user typed
 * (--source-opts, --target-opts, --open-opts), which win.  The driver
 * refuses what it does not know or accept when the image is opened.
 */
GHashTable *tool_open_options(const char *spec, GHashTable *nbd_opts,
                              GHashTable *user);

/* --source-opts and --target-opts (convert, start), into the strings
 * @src and @dst. */
#define TOOL_NODE_OPTS_ENTRIES(src, dst) \
    { "source-opts", 0, 0, G_OPTION_ARG_STRING, (src), \
      "source node options, e.g. views=off (see docs: IMAGES)", "OPTS" }, \
    { "target-opts", 0, 0, G_OPTION_ARG_STRING, (dst), \
      "target node options, e.g. copy-offload=off (see docs: IMAGES)", \
      "OPTS" }

/*
 * -f/--format and --open-opts of a command that serves or reads one image
 * IMG (serve, info, map), into the strings @format and @open_opts.
 */
#define TOOL_IMAGE_ENTRIES(format, open_opts) \
    { "format", 'f', 0, G_OPTION_ARG_STRING, (format), \
      "image format (default: probe)", "FMT" }, \
    { "open-opts", 0, 0, G_OPTION_ARG_STRING, (open_opts), \
      "node options of IMG, e.g. l2-cache-size=1M (see docs: IMAGES)", \
      "OPTS" }

/*
 * Parse the node options @str of option @opt ("--source-opts") into a new
 * table; NULL (no options) when @str is NULL.  False with a message on a
 * malformed pair.
 */
bool tool_parse_open_options(const char *opt, const char *str,
                             GHashTable **options);

/*
 * The node options of the two images of convert and start: the NBD
 * options of the copy engine (--connections, see
 * tool_parse_engine_options()), --source-opts and --target-opts as typed,
 * and the open options of each image made from them.
 */
typedef struct ToolNodeOpts {
    GHashTable *nbd;
    GHashTable *src_user;       /* NULL: none given */
    GHashTable *dst_user;
    GHashTable *src_open;       /* set by tool_node_opts_resolve() */
    GHashTable *dst_open;
} ToolNodeOpts;

/* A new ToolNodeOpts with an empty @nbd table and nothing else. */
ToolNodeOpts tool_node_opts_init(void);

/*
 * Parse --source-opts @src and --target-opts @dst (NULL: not given) into
 * @n; false with a message on a malformed pair.
 */
bool tool_node_opts_parse(ToolNodeOpts *n, const char *src,
                          const char *dst);

/* The open options of the source @src_spec and the target @dst_spec
 * (tool_open_options()). */
void tool_node_opts_resolve(ToolNodeOpts *n, const char *src_spec,
                            const char *dst_spec);

/* Free @n's tables (g_auto(ToolNodeOpts) calls it). */
void tool_node_opts_clear(ToolNodeOpts *n);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(ToolNodeOpts, tool_node_opts_clear)

/*
 * Refuse a @target that is one of the files the opened @src reads: the
 * source image itself or a file of its backing chain (same device and
 * inode, bdrv_chain_contains()).  Writing it would destroy what the copy
 * reads.  Prints "target 'T' is in the backing chain of the source ..." and
 * returns false (the caller exits with TOOL_EXIT_USAGE before creating,
 * truncating or opening the target); true when @target is none of them.
 */
bool tool_check_target_chain(BlockDriverState *src, const char *target);

/*
 * Is @format (given with option @opt, e.g. "-f"; NULL: none given, probe)
 * a driver we have?  Prints "-f 'FMT': unknown image format" and returns
 * false when not.
 */
bool tool_check_format(const char *opt, const char *format);

/*
 * The end of a command that printed its results on stdout: flush stdout.
 * If that or an earlier write failed (a full disk, a closed pipe), print
 * "mirror-tool: stdout: REASON" and return TOOL_EXIT_FAILURE; otherwise
 * return @ret.  Call it on every path that printed something.
 */
int tool_finish_stdout(int ret);

/*
 * GOptionArgFunc of --connect-timeout, --io-timeout and --reconnect-delay:
 * check the value (0..86400 seconds) and keep it for tool_open_options()
 * (the NBD open option of the same name).
 */
gboolean tool_opt_nbd_seconds(const gchar *name, const gchar *value,
                              gpointer data, GError **errp);

/* The NBD timeout options of convert and start, one GOptionEntry each. */
#define TOOL_NBD_TIMEOUT_ENTRIES \
    { "connect-timeout", 0, 0, G_OPTION_ARG_CALLBACK, tool_opt_nbd_seconds, \
      "give up connecting to an NBD server after SECS (default 10; " \
      "0: never)", "SECS" }, \
    { "io-timeout", 0, 0, G_OPTION_ARG_CALLBACK, tool_opt_nbd_seconds, \
      "an NBD connection with no reply for SECS is dead (default 600; " \
      "0: never)", "SECS" }, \
    { "reconnect-delay", 0, 0, G_OPTION_ARG_CALLBACK, tool_opt_nbd_seconds, \
      "when an NBD server is lost, hold its requests and reconnect for up " \
      "to SECS (default 60; 0: fail at once)", "SECS" }

/*
 * GOptionArgFunc of --threads: check the value (1..THREAD_POOL_MAX_THREADS)
 * and give the I/O thread pool that many workers.
 */
gboolean tool_opt_threads(const gchar *name, const gchar *value,
                          gpointer data, GError **errp);

/* --threads, of the commands that run I/O (convert, start, serve). */
#define TOOL_THREADS_ENTRY \
    { "threads", 0, 0, G_OPTION_ARG_CALLBACK, tool_opt_threads, \
      "worker threads for file I/O, 1..256 (default 16)", "N" }

/*
 * The NBD export's options as typed: serve's --shared, --payload-timeout,
 * --handshake-limit, --reply-timeout, --budget, --insecure and the --tls*
 * options, or start's --export-* spelling of the same.  The strings are
 * GOptionEntry targets, NULL when not given (the export's defaults hold).
 */
typedef struct ToolExportOpts {
    /* limits */
    char *shared;
    char *payload_timeout;
    char *handshake_limit;
    char *reply_timeout;
    char *budget;
    gboolean insecure;          /* serve plain clients where other hosts
                                 * reach it: tool_export_opts_check() */
    /* TLS */
    char *tls_creds;            /* X.509 directory */
    char *tls_psk_file;
    char *tls;                  /* on | require */
    char *tls_verify_peer;      /* on | off */
    char **tls_authz;
    NbdTlsCreds *creds;         /* loaded by tool_export_opts_check() */
} ToolExportOpts;

/*
 * The options of ToolExportOpts *@o, named @prefix ("" for serve,
 * "export-" for start) and the rest, @shared_short the short name of the
 * first (0: none).  @prefix must be a string literal.
 */
#define TOOL_EXPORT_OPTS_ENTRIES(o, prefix, shared_short) \
    { prefix "shared", (shared_short), 0, G_OPTION_ARG_STRING, \
      &(o)->shared, \
      "the export serves at most N connections at once, 1..1024 " \
      "(default 16)", "N" }, \
    { prefix "payload-timeout", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->payload_timeout, \
      "the export drops a client whose WRITE payload has not arrived " \
      "SECONDS after its header, 0..86400, 0: never (default 30)", \
      "SECONDS" }, \
    { prefix "handshake-limit", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->handshake_limit, \
      "the export drops a client that has not finished the handshake " \
      "(TLS included) SECONDS after connecting, 0..86400, 0: never " \
      "(default 10)", "SECONDS" }, \
    { prefix "reply-timeout", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->reply_timeout, \
      "the export drops a client whose unsent replies make no progress " \
      "for SECONDS, 0..86400, 0: never (default 30)", "SECONDS" }, \
    { prefix "budget", 0, 0, G_OPTION_ARG_STRING, &(o)->budget, \
      "bytes of request buffers and unsent replies of the export over " \
      "all clients, at least --" prefix "shared x 33M, at most 1T " \
      "(default: 1G, or --" prefix "shared x 33M if more)", "SIZE" }, \
    { prefix "insecure", 0, 0, G_OPTION_ARG_NONE, &(o)->insecure, \
      "serve on an address other hosts can reach (not loopback, not a " \
      "UNIX socket) although the export serves clients without TLS: " \
      "whoever reaches it can read and write the disk", NULL }, \
    { prefix "tls-creds", 0, 0, G_OPTION_ARG_FILENAME, &(o)->tls_creds, \
      "TLS with X.509 certificates from DIR: ca-cert.pem, " \
      "server-cert.pem, server-key.pem, ca-crl.pem if present " \
      "(qemu-nbd's layout)", "DIR" }, \
    { prefix "tls-psk-file", 0, 0, G_OPTION_ARG_FILENAME, \
      &(o)->tls_psk_file, \
      "TLS with the pre-shared keys of FILE, lines username:hexkey " \
      "(nbdkit's format, psktool makes it)", "FILE" }, \
    { prefix "tls", 0, 0, G_OPTION_ARG_STRING, &(o)->tls, \
      "require: clients must start TLS before any other option " \
      "(default with credentials); on: plain clients are served too", \
      "on|require" }, \
    { prefix "tls-verify-peer", 0, 0, G_OPTION_ARG_STRING, \
      &(o)->tls_verify_peer, \
      "with --" prefix "tls-creds: on (default): a client needs a " \
      "certificate signed by ca-cert.pem and valid now; off: none is " \
      "asked for", "on|off" }, \
    { prefix "tls-authz", 0, 0, G_OPTION_ARG_STRING_ARRAY, \
      &(o)->tls_authz, \
      "only these clients may connect (repeatable): with --" prefix \
      "tls-creds one certificate subject DN as certtool -i prints it, " \
      "e.g. CN=client,O=Example; with --" prefix "tls-psk-file user " \
      "names separated by commas (default: whoever the credentials " \
      "authenticate)", "NAME" }

/*
 * The first option of @o that was given, spelt with @prefix ("--" or
 * "--export-"), for "... needs --export ADDR"; NULL if none was.  Caller
 * frees.
 */
char *tool_export_opts_given(const ToolExportOpts *o, const char *prefix);

/*
 * Check every option of @o, naming each with @prefix, before anything is
 * opened: the limits, the TLS options, whose credentials are loaded into
 * @o->creds, and the address @addr (NULL: no export, only the limits are
 * checked).  An address other hosts reach (nbdsrv_addr_is_remote()) is
 * refused unless TLS is required of every client or @prefix@"insecure"
 * was given.  Prints the first bad value, e.g. "--budget '1M': must be
 * between ..." or "--tls-creds 'DIR': server-key.pem: No such file or
 * directory", and returns false (bad usage).
 */
bool tool_export_opts_check(ToolExportOpts *o, const char *prefix,
                            const char *addr);

/* Set the options of @o, checked by tool_export_opts_check(), on @srv;
 * the credentials go to @srv. */
void tool_export_opts_apply(ToolExportOpts *o, const char *prefix,
                            NbdServer *srv);

/* Free @o's strings and credentials (g_auto(ToolExportOpts) calls it). */
void tool_export_opts_clear(ToolExportOpts *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(ToolExportOpts, tool_export_opts_clear)

/* Print the JSON node @node (consumed) on stdout, pretty when @pretty. */
typedef struct _JsonNode JsonNode;
void tool_print_json(JsonNode *node, bool pretty);

/*
 * Add the members of QEMU's ImageInfo for @info (an image named
 * @filename) to the object @b is building, as qemu-img info
 * --output=json shows them (info, and the daemon's
 * query-named-block-nodes).
 */
typedef struct _JsonBuilder JsonBuilder;
void tool_image_info_json(JsonBuilder *b, const char *filename,
                          BlockImageInfo *info);

ToolCommandFunc cmd_convert;
ToolCommandFunc cmd_start;
ToolCommandFunc cmd_qmp;
ToolCommandFunc cmd_info;
ToolCommandFunc cmd_map;
ToolCommandFunc cmd_serve;
ToolCommandFunc cmd_daemon;
ToolCommandFunc cmd_create;
ToolCommandFunc cmd_check;
ToolCommandFunc cmd_compare;
ToolCommandFunc cmd_checksum;

#endif /* TOOL_H */
