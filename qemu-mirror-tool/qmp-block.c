/*
 * The daemon's node registry (daemon.h): blockdev-add, blockdev-del,
 * query-named-block-nodes, object-add and object-del, with QEMU 7.2's
 * argument names, defaults and error messages.
 *
 * QEMU stacks one node per layer (a qcow2 node over a file node); our
 * block layer opens a format and its file together.  The mapping:
 *
 * - file, host_device: a raw node on the file (bdrv_open(.., "raw")),
 *   holding the locks of a reader, or a writer unless read-only;
 * - raw over a file node: the same BlockDriverState (a reference): raw
 *   without offset/size passes every byte through, as QEMU's does, and
 *   QEMU's raw node passes its permissions down to the file unchanged;
 * - qcow2 over a file node: the qcow2 driver opens the file's name
 *   itself and takes QEMU's qcow2 locks on it; the file node's own
 *   BlockDriverState is reopened without locks while the qcow2 node
 *   exists ("lends" them, DaemonNode.lock_holder), since two opens of one
 *   file in one process see each other's locks as another user's.  The
 *   file node stays as the child record (query, blockdev-del's checks);
 * - nbd, null-co: one node each, no child.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "qemu-mirror-tool/tool.h"
#include "block/mirror/mirror-top.h"
#include "util/cutils.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

/* QEMU's node names and object ids: a letter, then letters, digits and
 * "-._", at most 31 characters for a node name (BlockDriverState's
 * node_name[32]). */
#define DAEMON_NODE_NAME_MAX    31

/* QEMU's default user name of a PSK client (tls-creds-psk username). */
#define DAEMON_PSK_DEFAULT_USER "qemu"

/* The options every driver has (QEMU's BlockdevOptions base), with what
 * a node made from a parent's inline dict inherits from it. */
typedef struct NodeOpts {
    bool read_only;
    bool auto_read_only;
    bool force_share;
    bool direct;                /* cache.direct */
    bool no_flush;              /* cache.no-flush */
} NodeOpts;

typedef struct NodeDriver NodeDriver;

/*
 * Open @n (name, driver and args set; @n is not registered yet) as its
 * driver does: set n->bs and n->read_only, and n->file / n->backing with
 * a DAEMON_USE_CHILD use of each.  False with @errp set, having released
 * everything it took (the caller frees @n; children it made are the
 * caller's to delete: see node_add()).
 */
typedef bool NodeOpenFunc(DaemonNode *n, JsonObject *args,
                          const NodeOpts *o, GError **errp);

struct NodeDriver {
    const char *name;                   /* QAPI BlockdevDriver */
    const char *const *members;         /* QEMU's members beyond the base */
    const char *const *supported;       /* of those, the ones we take */
    NodeOpenFunc *open;
};

/* An object of object-add. */
typedef struct DaemonObject {
    char *qom_type;
    DaemonTlsCreds *tls;        /* tls-creds-x509, tls-creds-psk */
    GBytes *secret;             /* secret: the decoded data */
} DaemonObject;

static uint64_t daemon_node_seq;
static uint64_t daemon_block_ids;

/* ---- Errors ---- */

/*
 * A member of the inline dict @prefix ("file") is named as QEMU names it
 * ("Parameter 'file.bogus' is unexpected"): put "@prefix." before the
 * first quoted name of the argument errors qmp.c words.
 */
static void node_prefix_error(GError **errp, const char *prefix)
{
    static const char *const heads[] = {
        "Parameter '", "Invalid parameter type for '",
    };
    GError *err = errp ? *errp : NULL;

    if (!err || !prefix) {
        return;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(heads); i++) {
        size_t len = strlen(heads[i]);

        if (g_str_has_prefix(err->message, heads[i])) {
            char *msg = g_strdup_printf("%s%s.%s", heads[i], prefix,
                                        err->message + len);

            g_free(err->message);
            err->message = msg;
            return;
        }
    }
}

static void node_error(GError **errp, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);

static void node_error(GError **errp, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(errp, QMP_ERROR, QMP_ERROR_GENERIC, msg);
}

bool daemon_id_wellformed(const char *id)
{
    if (!g_ascii_isalpha(id[0])) {
        return false;
    }
    for (const char *p = id + 1; *p; p++) {
        if (!g_ascii_isalnum(*p) && !strchr("-._", *p)) {
            return false;
        }
    }
    return true;
}

/*
 * The enum member @name of @args (optional) into *@out: one of
 * @values (QEMU's enum), of which we take @supported ones; QEMU's error
 * for another string, ours naming what we take for one we do not.
 */
static bool node_arg_enum(JsonObject *args, const char *name,
                          const char *const *values,
                          const char *const *supported, const char **out,
                          GError **errp)
{
    const char *v = NULL;

    if (!qmp_arg_str(args, name, false, &v, errp)) {
        return false;
    }
    if (!v) {
        return true;
    }
    if (!g_strv_contains(values, v)) {
        node_error(errp, "Parameter '%s' does not accept value '%s'", name,
                   v);
        return false;
    }
    if (!g_strv_contains(supported, v)) {
        g_autofree char *list = g_strjoinv(", ", (char **)supported);

        node_error(errp, "Parameter '%s' value '%s' is not supported by "
                   "mirror-tool (it supports: %s)", name, v, list);
        return false;
    }
    *out = v;
    return true;
}

/*
 * The integer members @names (NULL-terminated) of @args, those present,
 * as driver options in @opts (keys static, values g_free'd): QEMU's
 * sizes and counts, so a negative one is refused as QEMU words it.
 */
static bool node_take_sizes(JsonObject *args, const char *const *names,
                            GHashTable *opts, GError **errp)
{
    for (size_t i = 0; names[i]; i++) {
        int64_t v = -1;

        if (!qmp_arg_int(args, names[i], false, &v, errp)) {
            return false;
        }
        if (!json_object_has_member(args, names[i])) {
            continue;
        }
        if (v < 0) {
            node_error(errp, "Parameter '%s' expects a non-negative number "
                       "below 2^64", names[i]);
            return false;
        }
        g_hash_table_insert(opts, (char *)names[i],
                            g_strdup_printf("%" G_GINT64_FORMAT, v));
    }
    return true;
}

/* Refuse the members of @args in @members that are not in @supported:
 * QEMU has them, we do not. */
static bool node_check_supported(JsonObject *args,
                                 const char *const *members,
                                 const char *const *supported,
                                 GError **errp)
{
    for (size_t i = 0; members[i]; i++) {
        if (json_object_has_member(args, members[i]) &&
            !g_strv_contains(supported, members[i])) {
            node_error(errp, "Parameter '%s' is not supported by "
                       "mirror-tool", members[i]);
            return false;
        }
    }
    return true;
}

/* ---- The registry ---- */

static void daemon_node_free(DaemonNode *n)
{
    bdrv_unref(n->top);
    bdrv_unref(n->bs);
    g_free(n->blocker);
    g_free(n->driver);
    g_free(n->name);
    if (n->args) {
        json_object_unref(n->args);
    }
    g_free(n);
}

static void daemon_object_free(DaemonObject *o)
{
    if (o->tls) {
        g_free(o->tls->id);
        g_free(o->tls->dir);
        g_free(o->tls->psk_file);
        g_free(o->tls->username);
        g_free(o->tls);
    }
    if (o->secret) {
        g_bytes_unref(o->secret);
    }
    g_free(o->qom_type);
    g_free(o);
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
    bdrv_unref(to->top);
    to->top = from->top;
    from->top = NULL;
    daemon_exports_moved(from->daemon, from, to);
}

bool daemon_node_is_job_target(const DaemonNode *n)
{
    /* A job blocks both its nodes; only its source has the job's filter
     * as a parent (a source may have no other parent node). */
    return n->blocker && !n->uses[DAEMON_USE_CHILD];
}

bool daemon_node_check_writer(Daemon *d, DaemonNode *n, GError **errp)
{
    GHashTableIter it;
    DaemonNode *p;

    if (n->blocker) {
        return true;            /* a job's source or target: the callers' */
    }
    g_hash_table_iter_init(&it, d->nodes);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&p)) {
        if (p->file == n || p->backing == n || n->lock_holder == p) {
            node_error(errp, "Permission conflict on node '%s': permissions "
                       "'write' are both required by an unnamed block "
                       "device (uses node '%s' as 'root' child) and "
                       "unshared by node '%s' (uses node '%s' as '%s' "
                       "child).", n->name, n->name, p->name, n->name,
                       p->backing == n ? "backing" : "file");
            return false;
        }
    }
    return true;
}

typedef struct NodeFlush {
    int pending;
    int ret;
    const char *failed;
} NodeFlush;

typedef struct NodeFlushOne {
    NodeFlush *all;
    const char *name;
} NodeFlushOne;

static void node_flush_cb(void *opaque, int ret)
{
    NodeFlushOne *one = opaque;

    if (ret < 0 && !one->all->ret) {
        one->all->ret = ret;
        one->all->failed = one->name;
    }
    one->all->pending--;
    g_free(one);
}

int daemon_nodes_flush(Daemon *d, const char **failed)
{
    NodeFlush f = { 0 };
    GHashTableIter it;
    DaemonNode *n;

    g_hash_table_iter_init(&it, d->nodes);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&n)) {
        NodeFlushOne *one;

        if (n->read_only || !n->bs) {
            continue;
        }
        one = g_new(NodeFlushOne, 1);
        *one = (NodeFlushOne) { .all = &f, .name = n->name };
        f.pending++;
        bdrv_aio_flush(n->bs, node_flush_cb, one);
    }
    while (f.pending) {
        g_main_context_iteration(NULL, TRUE);
    }
    *failed = f.failed;
    return f.ret;
}

/* ---- Opening nodes ---- */

static bool node_is_file(const DaemonNode *n)
{
    return !strcmp(n->driver, "file") || !strcmp(n->driver, "host_device");
}

/* The file name QEMU shows for @n ("null-co://" for null-co). */
static const char *node_filename(DaemonNode *n)
{
    return !strcmp(n->driver, "null-co") ? "null-co://"
                                         : bdrv_get_filename(n->bs);
}

/* What @n's driver knows of its image, as QEMU names it ("format" is the
 * node's driver: "file" for a file node).  Clear @info after. */
static void node_get_info(DaemonNode *n, BlockImageInfo *info)
{
    *info = (BlockImageInfo) { 0 };
    if (!bdrv_get_info(n->bs, info, NULL)) {
        /* The node is open: only its file's stat can fail. */
        info->virtual_size = bdrv_getlength(n->bs);
        info->actual_size = -1;
    }
    if (node_is_file(n) && info->virtual_size > 0) {
        /* QEMU's file driver counts whole 512-byte sectors. */
        info->virtual_size = DIV_ROUND_UP(info->virtual_size, 512) * 512;
    }
    info->format = n->driver;
    if (!strcmp(n->driver, "null-co")) {
        info->actual_size = 0;
    }
}

/* The options of n->args (stored with what it inherited, see node_add()):
 * the cache.* members. */
static bool node_cache_member(const DaemonNode *n, const char *name)
{
    JsonNode *cache = json_object_get_member(n->args, "cache");

    return cache && JSON_NODE_HOLDS_OBJECT(cache) &&
           json_object_get_boolean_member_with_default(
               json_node_get_object(cache), name, false);
}

/* The file node @n's image opened as a raw node, writable unless
 * @read_only, with QEMU's locks unless @lend (its parent takes them). */
static BlockDriverState *node_file_bs(DaemonNode *n, bool read_only,
                                      bool lend, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    const char *filename = json_object_get_string_member(n->args,
                                                         "filename");
    const char *locking = json_object_get_string_member_with_default(
        n->args, "locking", "auto");
    int flags = BDRV_O_NO_PROBE;

    g_hash_table_insert(opts, "locking", lend ? "off" : (char *)locking);
    if (node_cache_member(n, "direct")) {
        g_hash_table_insert(opts, "cache", "none");
    }
    if (!read_only) {
        flags |= BDRV_O_RDWR;
    } else if (json_object_get_boolean_member_with_default(
                   n->args, "force-share", false)) {
        flags |= BDRV_O_FORCE_SHARE;
    }
    return bdrv_open(filename, "raw", flags, opts, errp);
}

/* Give the file node @f's locks to @holder, a parent that takes them
 * itself, or (@holder NULL) take them back when it is gone. */
static bool node_file_lend(DaemonNode *f, DaemonNode *holder, GError **errp)
{
    BlockDriverState *bs;

    if (!f->lock_holder == !holder) {
        f->lock_holder = holder;
        return true;
    }
    bs = node_file_bs(f, f->read_only, holder != NULL, errp);
    if (!bs) {
        return false;
    }
    bdrv_unref(f->bs);
    f->bs = bs;
    f->lock_holder = holder;
    return true;
}

/* QEMU's host_device check: @filename is a block or character device. */
static bool node_is_device(const char *filename, GError **errp)
{
    GStatBuf st;

    if (g_stat(filename, &st) == 0 && !S_ISBLK(st.st_mode) &&
        !S_ISCHR(st.st_mode)) {
        node_error(errp, "'host_device' driver requires '%s' to be either "
                   "a character or block device", filename);
        return false;
    }
    return true;
}

static bool node_open_file(DaemonNode *n, JsonObject *args,
                           const NodeOpts *o, GError **errp)
{
    static const char *const lockings[] = { "auto", "on", "off", NULL };
    static const char *const aios[] = {
        "threads", "native", "io_uring", NULL,
    };
    static const char *const threads[] = { "threads", NULL };
    const char *filename = NULL, *v = NULL;
    g_autoptr(GError) err = NULL;

    if (!qmp_arg_str(args, "filename", true, &filename, errp) ||
        !node_arg_enum(args, "locking", lockings, lockings, &v, errp) ||
        !node_arg_enum(args, "aio", aios, threads, &v, errp)) {
        return false;
    }
    if (!strcmp(n->driver, "host_device") &&
        !node_is_device(filename, errp)) {
        return false;
    }
    n->read_only = o->read_only;
    n->bs = node_file_bs(n, n->read_only, false, &err);
    if (!n->bs && !n->read_only && o->auto_read_only &&
        g_error_matches(err, BLOCK_ERROR, BLOCK_ERROR_OPEN)) {
        g_clear_error(&err);
        n->read_only = true;
        n->bs = node_file_bs(n, true, false, &err);
    }
    if (!n->bs) {
        g_propagate_error(errp, g_steal_pointer(&err));
        return false;
    }
    return true;
}

/* The image file under @n (a file node's name), or NULL (nbd, null-co). */
static const char *node_image_file(const DaemonNode *n)
{
    while (n->file) {
        n = n->file;
    }
    return node_is_file(n) ? json_object_get_string_member(n->args,
                                                           "filename")
                           : NULL;
}

static DaemonNode *node_add(Daemon *d, JsonObject *args, const char *prefix,
                            const NodeOpts *inherit, GError **errp);
static void node_close(DaemonNode *n);

/*
 * The child @n's member @name names: a node-name or an inline dict (made
 * now as an implicit node, inheriting @o); NULL with @errp set.  The
 * child is the caller's: on failure the caller deletes an implicit one.
 */
static DaemonNode *node_child(DaemonNode *n, JsonObject *args,
                              const char *name, const NodeOpts *o,
                              GError **errp)
{
    JsonNode *ref = json_object_get_member(args, name);

    if (!ref) {
        node_error(errp, "Parameter '%s' is missing", name);
        return NULL;
    }
    if (JSON_NODE_HOLDS_OBJECT(ref)) {
        return node_add(n->daemon, json_node_get_object(ref), name, o, errp);
    }
    if (!JSON_NODE_HOLDS_VALUE(ref) ||
        json_node_get_value_type(ref) != G_TYPE_STRING) {
        node_error(errp, "Invalid parameter type for '%s', expected: "
                   "BlockdevRef", name);
        return NULL;
    }
    return daemon_node_find(n->daemon, json_node_get_string(ref), name,
                            errp);
}

/* Can @child be @n's child?  False with @errp set if not. */
typedef bool NodeChildCheck(DaemonNode *n, DaemonNode *child,
                            GError **errp);

/*
 * Attach the child @name of @args to @n as *@slot (a DAEMON_USE_CHILD
 * use) once @check allows it.  An implicit child made here goes again
 * when this fails; once attached, node_close() releases it.
 */
static DaemonNode *node_attach(DaemonNode *n, JsonObject *args,
                               const char *name, const NodeOpts *o,
                               NodeChildCheck *check, DaemonNode **slot,
                               GError **errp)
{
    DaemonNode *c = node_child(n, args, name, o, errp);

    if (!c) {
        return NULL;
    }
    if (!check(n, c, errp)) {
        if (c->implicit) {
            node_close(c);
        }
        return NULL;
    }
    *slot = c;
    daemon_node_use(c, DAEMON_USE_CHILD);
    return c;
}

/* A file child: no writer over a read-only one (n->read_only set). */
static bool node_check_file(DaemonNode *n, DaemonNode *f, GError **errp)
{
    if (!n->read_only && f->read_only) {
        node_error(errp, "Block node is read-only");
        return false;
    }
    return true;
}

static bool node_open_raw(DaemonNode *n, JsonObject *args,
                          const NodeOpts *o, GError **errp)
{
    DaemonNode *f;

    n->read_only = o->read_only;
    f = node_attach(n, args, "file", o, node_check_file, &n->file, errp);
    if (!f) {
        return false;
    }
    if (f->lock_holder && !n->read_only) {
        node_error(errp, "Conflicts with use by '%s': node '%s' is the file "
                   "of a format node, which does not share 'write'",
                   n->name, f->name);
        return false;
    }
    n->bs = bdrv_ref(f->bs);
    return true;
}

/* A backing child: the node of the image's backing file, which the
 * qcow2 driver opened itself (n->bs). */
static bool node_check_backing(DaemonNode *n, DaemonNode *b, GError **errp)
{
    const char *file = node_image_file(b);
    int depth;

    if (!file || !bdrv_chain_contains(n->bs, file, &depth, NULL) ||
        depth != 1) {
        node_error(errp, "Parameter 'backing': node '%s' is not the "
                   "image's backing file, which mirror-tool's qcow2 "
                   "driver opens itself", b->name);
        return false;
    }
    return true;
}

/*
 * Absent "backing": QEMU opens the backing file the image names as
 * implicit nodes, a format node over a file node, read-only.  Our qcow2
 * driver reads it through a chain of its own; these are read-only opens
 * of the same files, so that the query shows what QEMU's does and a user
 * that names them reads what the chain reads.  Made in QEMU's order:
 * after @n (node_reseq()), each over its own backing in turn.
 */
static bool node_add_backing_chain(DaemonNode *n, GError **errp)
{
    g_autoptr(BlockDriverState) probe = NULL;
    g_autoptr(JsonObject) args = json_object_new();
    g_autoptr(JsonObject) file = json_object_new();
    NodeOpts o = { .read_only = true };
    BlockImageInfo info;
    const char *layer, *fmt;
    DaemonNode *b = NULL;

    node_get_info(n, &info);
    if (!info.layers || info.layers->len < 2) {
        bdrv_image_info_clear(&info);
        return true;
    }
    layer = g_ptr_array_index(info.layers, 1);
    fmt = info.backing_format;
    if (!fmt) {
        /* The driver probed it: so do we, as QEMU does. */
        probe = bdrv_open(layer, NULL, BDRV_O_NO_IO | BDRV_O_FORCE_SHARE,
                          NULL, errp);
        fmt = probe ? bdrv_get_format_name(probe) : NULL;
    }
    if (fmt) {
        json_object_set_string_member(file, "driver", "file");
        json_object_set_string_member(file, "filename", layer);
        json_object_set_string_member(args, "driver", fmt);
        json_object_set_object_member(args, "file", json_object_ref(file));
        b = node_add(n->daemon, args, "backing", &o, errp);
    }
    bdrv_image_info_clear(&info);
    if (!b) {
        return false;
    }
    n->backing = b;
    daemon_node_use(b, DAEMON_USE_CHILD);
    return true;
}

/* Is the BlockdevRefOrNull @ref null: JSON null, or the command line's
 * empty value ("backing=", as QEMU's keyval has it; no node-name is
 * empty)? */
static bool node_ref_is_null(JsonNode *ref)
{
    return JSON_NODE_HOLDS_NULL(ref) ||
           (JSON_NODE_HOLDS_VALUE(ref) &&
            json_node_get_value_type(ref) == G_TYPE_STRING &&
            !*json_node_get_string(ref));
}

static bool node_open_qcow2(DaemonNode *n, JsonObject *args,
                            const NodeOpts *o, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal, NULL,
                                                       g_free);
    static const char *const sizes[] = {
        "l2-cache-size", "refcount-cache-size", NULL,
    };
    JsonNode *backing;
    DaemonNode *f;
    int flags;

    if (!node_take_sizes(args, sizes, opts, errp)) {
        return false;
    }
    backing = json_object_get_member(args, "backing");
    if (backing && JSON_NODE_HOLDS_OBJECT(backing)) {
        node_error(errp, "Parameter 'backing' as an inline dict is not "
                   "supported by mirror-tool (give a node-name, null, or "
                   "leave it out)");
        return false;
    }
    if (backing && node_ref_is_null(backing)) {
        g_hash_table_insert(opts, "backing", g_strdup("none"));
    }
    if (o->direct) {
        node_error(errp, "Parameter 'cache.direct' is not supported by "
                   "mirror-tool for qcow2 images");
        return false;
    }
    n->read_only = o->read_only;
    f = node_attach(n, args, "file", o, node_check_file, &n->file, errp);
    if (!f) {
        return false;
    }
    if (!node_is_file(f)) {
        node_error(errp, "The file of a qcow2 node must be a file or "
                   "host_device node in mirror-tool, not '%s' (%s)",
                   f->name, f->driver);
        return false;
    }
    if (f->lock_holder || f->uses[DAEMON_USE_BLK] ||
        f->uses[DAEMON_USE_CHILD] > 1 || f->top) {
        node_error(errp, "Conflicts with use by '%s': node '%s' has "
                   "another user, and a qcow2 node does not share 'write' "
                   "on its file", n->name, f->name);
        return false;
    }
    if (!node_file_lend(f, n, errp)) {
        return false;
    }
    g_hash_table_insert(opts, "locking",
                        g_strdup(json_object_get_string_member_with_default(
                                     f->args, "locking", "auto")));
    flags = n->read_only ? 0 : BDRV_O_RDWR;
    if (n->read_only && o->force_share) {
        flags |= BDRV_O_FORCE_SHARE;
    }
    n->bs = bdrv_open(node_image_file(f), "qcow2", flags, opts, errp);
    /* "backing": absent, the image's own backing file, opened by the
     * driver with its chain (and as implicit nodes); null, none
     * (backing=none above); or a node-name, which must be that backing
     * file's node. */
    if (!n->bs) {
        return false;
    }
    if (!backing) {
        return node_add_backing_chain(n, errp);
    }
    return node_ref_is_null(backing) ||
           node_attach(n, args, "backing", NULL, node_check_backing,
                       &n->backing, errp);
}

/* host:port as an NBD URI's authority (IPv6 literals in brackets). */
static char *node_nbd_authority(const char *host, const char *port)
{
    return g_strdup_printf(strchr(host, ':') ? "[%s]:%s" : "%s:%s", host,
                           port);
}

/* QEMU's SocketAddress @server as the start of an NBD URI (scheme and
 * authority; @tls: nbds), and for a UNIX socket its path in *@socket. */
static char *node_nbd_server(JsonObject *args, bool tls,
                             const char **socket, GError **errp)
{
    static const char *const types[] = {
        "inet", "unix", "vsock", "fd", NULL,
    };
    static const char *const ours[] = { "inet", "unix", NULL };
    static const char *const inet[] = {
        "type", "host", "port", "numeric", "to", "ipv4", "ipv6",
        "keep-alive", "mptcp", NULL,
    };
    static const char *const inet_ours[] = { "type", "host", "port", NULL };
    static const char *const unix_[] = {
        "type", "path", "abstract", "tight", NULL,
    };
    static const char *const unix_ours[] = { "type", "path", NULL };
    JsonNode *srv = json_object_get_member(args, "server");
    const char *type = NULL, *host = NULL, *port = NULL;
    g_autofree char *authority = NULL;
    JsonObject *s;

    if (!srv) {
        node_error(errp, "Parameter 'server' is missing");
        return NULL;
    }
    if (!JSON_NODE_HOLDS_OBJECT(srv)) {
        node_error(errp, "Invalid parameter type for 'server', expected: "
                   "object");
        return NULL;
    }
    s = json_node_get_object(srv);
    /* QEMU names the discriminator without its prefix. */
    if (!qmp_arg_str(s, "type", true, &type, errp) ||
        !node_arg_enum(s, "type", types, ours, &type, errp)) {
        return NULL;
    }
    if (!strcmp(type, "unix")) {
        if (!qmp_arg_str(s, "path", true, socket, errp) ||
            !qmp_check_args(s, unix_, errp) ||
            !node_check_supported(s, unix_, unix_ours, errp)) {
            node_prefix_error(errp, "server");
            return NULL;
        }
        return g_strdup(tls ? "nbds+unix://" : "nbd+unix://");
    }
    if (!qmp_arg_str(s, "host", true, &host, errp) ||
        !qmp_arg_str(s, "port", true, &port, errp) ||
        !qmp_check_args(s, inet, errp) ||
        !node_check_supported(s, inet, inet_ours, errp)) {
        node_prefix_error(errp, "server");
        return NULL;
    }
    authority = node_nbd_authority(host, port);
    return g_strdup_printf("%s://%s", tls ? "nbds" : "nbd", authority);
}

static bool node_open_nbd(DaemonNode *n, JsonObject *args,
                          const NodeOpts *o, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal, NULL,
                                                       g_free);
    const char *export = NULL, *tls_id = NULL, *socket = NULL;
    int64_t delay = 0;
    DaemonTlsCreds *creds = NULL;
    g_autofree char *base = NULL;
    g_autofree char *path = NULL;
    g_autoptr(GString) uri = NULL;
    char sep = '?';

    if (!qmp_arg_str(args, "export", false, &export, errp) ||
        !qmp_arg_str(args, "tls-creds", false, &tls_id, errp) ||
        !qmp_arg_int(args, "reconnect-delay", false, &delay, errp)) {
        return false;
    }
    if (delay < 0 || delay > G_MAXUINT32) {
        node_error(errp, "Parameter 'reconnect-delay' expects uint32_t");
        return false;
    }
    if (tls_id) {
        creds = daemon_object_find_tls(n->daemon, tls_id, errp);
        if (!creds ||
            !daemon_tls_check_endpoint(creds, DAEMON_TLS_CLIENT, errp)) {
            return false;
        }
    }
    base = node_nbd_server(args, creds != NULL, &socket, errp);
    if (!base) {
        return false;
    }
    uri = g_string_new(base);
    if (export) {
        /* Without an export name QEMU names the node "nbd+unix://?..." or
         * "nbd://HOST:PORT", with no path: so do we (the default export
         * either way). */
        path = g_uri_escape_string(export, NULL, false);
        g_string_append_printf(uri, "/%s", path);
    }
    if (socket) {
        g_autofree char *esc = g_uri_escape_string(socket, "/", false);

        g_string_append_printf(uri, "%csocket=%s", sep, esc);
        sep = '&';
    }
    if (creds && creds->kind == DAEMON_TLS_X509) {
        g_autofree char *esc = g_uri_escape_string(creds->dir, "/", false);

        g_string_append_printf(uri, "%ctls-certificates=%s", sep, esc);
        if (!creds->verify_peer) {
            g_string_append(uri, "&tls-verify-peer=false");
        }
    } else if (creds) {
        g_autofree char *file = g_uri_escape_string(creds->psk_file, "/",
                                                    false);
        g_autofree char *user = g_uri_escape_string(creds->username, NULL,
                                                    false);

        g_string_append_printf(uri, "%ctls-psk-file=%s&tls-username=%s",
                               sep, file, user);
    }
    /* QEMU's default: no reconnect (ours is 60 s for other nodes). */
    g_hash_table_insert(opts, "reconnect-delay",
                        g_strdup_printf("%" G_GINT64_FORMAT, delay));
    n->read_only = o->read_only;
    n->bs = bdrv_open(uri->str, "nbd", n->read_only ? 0 : BDRV_O_RDWR, opts,
                      errp);
    return n->bs;
}

static bool node_open_null(DaemonNode *n, JsonObject *args,
                           const NodeOpts *o, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal, NULL,
                                                       g_free);
    static const char *const sizes[] = { "size", "latency-ns", NULL };
    bool zeroes;

    if (!node_take_sizes(args, sizes, opts, errp)) {
        return false;
    }
    /* Reads always return zeroes: what read-zeroes=false allows too. */
    if (!qmp_arg_bool(args, "read-zeroes", false, &zeroes, errp)) {
        return false;
    }
    n->read_only = o->read_only;
    n->bs = bdrv_open("null:", "null", n->read_only ? 0 : BDRV_O_RDWR, opts,
                      errp);
    return n->bs;
}

static const char *const file_members[] = {
    "filename", "pr-manager", "locking", "aio", "aio-max-batch",
    "drop-cache", "x-check-cache-dropped", NULL,
};
static const char *const file_supported[] = {
    "filename", "locking", "aio", NULL,
};
static const char *const raw_members[] = { "file", "offset", "size", NULL };
static const char *const raw_supported[] = { "file", NULL };
static const char *const qcow2_members[] = {
    "file", "backing", "lazy-refcounts", "pass-discard-request",
    "pass-discard-snapshot", "pass-discard-other", "discard-no-unref",
    "overlap-check", "cache-size", "l2-cache-size", "l2-cache-entry-size",
    "refcount-cache-size", "cache-clean-interval", "encrypt", "data-file",
    NULL,
};
static const char *const qcow2_supported[] = {
    "file", "backing", "l2-cache-size", "refcount-cache-size", NULL,
};
static const char *const nbd_members[] = {
    "server", "export", "tls-creds", "tls-hostname", "x-dirty-bitmap",
    "reconnect-delay", "open-timeout", NULL,
};
static const char *const nbd_supported[] = {
    "server", "export", "tls-creds", "reconnect-delay", NULL,
};
static const char *const null_members[] = {
    "size", "latency-ns", "read-zeroes", NULL,
};

static const NodeDriver node_drivers[] = {
    { "file", file_members, file_supported, node_open_file },
    { "host_device", file_members, file_supported, node_open_file },
    { "raw", raw_members, raw_supported, node_open_raw },
    { "qcow2", qcow2_members, qcow2_supported, node_open_qcow2 },
    { "nbd", nbd_members, nbd_supported, node_open_nbd },
    { "null-co", null_members, null_members, node_open_null },
};

/* QEMU 7.2's other BlockdevDriver values: valid, not ours. */
static const char *const node_other_drivers[] = {
    "blkdebug", "blklogwrites", "blkreplay", "blkverify", "bochs", "cloop",
    "compress", "copy-before-write", "copy-on-read", "dmg",
    "snapshot-access", "ftp", "ftps", "gluster", "host_cdrom", "http",
    "https", "iscsi", "luks", "nfs", "null-aio", "nvme", "nvme-io_uring",
    "parallels", "preallocate", "qcow", "qed", "quorum", "rbd",
    "replication", "ssh", "throttle", "vdi", "vhdx", "virtio-blk-vfio-pci",
    "virtio-blk-vhost-user", "virtio-blk-vhost-vdpa", "vmdk", "vpc",
    "vvfat", NULL,
};

static const NodeDriver *node_driver_find(const char *name, GError **errp)
{
    for (size_t i = 0; i < G_N_ELEMENTS(node_drivers); i++) {
        if (!strcmp(node_drivers[i].name, name)) {
            return &node_drivers[i];
        }
    }
    if (g_strv_contains(node_other_drivers, name)) {
        node_error(errp, "Parameter 'driver' value '%s' is not supported by "
                   "mirror-tool (it supports: file, host_device, raw, "
                   "qcow2, nbd, null-co)", name);
    } else {
        node_error(errp, "Parameter 'driver' does not accept value '%s'",
                   name);
    }
    return NULL;
}

/*
 * The base options of @args into @o (starting from what @inherit, the
 * parent's, passes down), checked; and written back into @args, so that
 * the node's stored args say what it got.
 */
static bool node_parse_base(JsonObject *args, const NodeOpts *inherit,
                            NodeOpts *o, GError **errp)
{
    static const char *const detect[] = { "off", "on", "unmap", NULL };
    static const char *const detect_ours[] = { "off", NULL };
    static const char *const discard[] = { "ignore", "unmap", NULL };
    static const char *const cache_members[] = {
        "direct", "no-flush", NULL,
    };
    JsonNode *cache = json_object_get_member(args, "cache");
    g_autoptr(JsonObject) out = json_object_new();
    const char *v = NULL;

    *o = inherit ? *inherit : (NodeOpts) { 0 };
    if (!qmp_arg_bool(args, "read-only", false, &o->read_only, errp) ||
        !qmp_arg_bool(args, "auto-read-only", false, &o->auto_read_only,
                      errp) ||
        !qmp_arg_bool(args, "force-share", false, &o->force_share, errp) ||
        !node_arg_enum(args, "detect-zeroes", detect, detect_ours, &v,
                       errp) ||
        !node_arg_enum(args, "discard", discard, discard, &v, errp)) {
        return false;
    }
    if (cache) {
        if (!JSON_NODE_HOLDS_OBJECT(cache)) {
            node_error(errp, "Invalid parameter type for 'cache', "
                       "expected: object");
            return false;
        }
        if (!qmp_arg_bool(json_node_get_object(cache), "direct", false,
                          &o->direct, errp) ||
            !qmp_arg_bool(json_node_get_object(cache), "no-flush", false,
                          &o->no_flush, errp) ||
            !qmp_check_args(json_node_get_object(cache), cache_members,
                            errp)) {
            node_prefix_error(errp, "cache");
            return false;
        }
    }
    if (o->no_flush) {
        node_error(errp, "Parameter 'cache.no-flush' value true is not "
                   "supported by mirror-tool");
        return false;
    }
    if (o->force_share && !o->read_only) {
        node_error(errp, "force-share=on can only be used with read-only "
                   "images");
        return false;
    }
    json_object_set_boolean_member(args, "read-only", o->read_only);
    json_object_set_boolean_member(args, "force-share", o->force_share);
    json_object_set_boolean_member(out, "direct", o->direct);
    json_object_set_boolean_member(out, "no-flush", o->no_flush);
    json_object_set_object_member(args, "cache", json_object_ref(out));
    return true;
}

/* A shallow copy of @o (members are shared, so that the copy's own
 * members can be replaced). */
static JsonObject *node_args_copy(JsonObject *o)
{
    JsonObject *copy = json_object_new();
    g_autoptr(GList) members = json_object_get_members(o);

    for (GList *l = members; l; l = l->next) {
        json_object_set_member(copy, l->data,
                               json_node_copy(json_object_get_member(
                                                  o, l->data)));
    }
    return copy;
}

/*
 * Close @n (registered: blockdev-del's checks passed; or not yet: a
 * failed blockdev-add) and free it, then release its children: the
 * implicit ones are closed too, a file node whose locks a qcow2 node
 * took gets them back.
 */
static void node_close(DaemonNode *n)
{
    Daemon *d = n->daemon;
    DaemonNode *file = n->file, *backing = n->backing;
    bool lent = file && file->lock_holder == n;

    if (g_hash_table_lookup(d->nodes, n->name) == n) {
        g_hash_table_remove(d->nodes, n->name);
    } else {
        daemon_node_free(n);
    }
    if (backing) {
        daemon_node_unuse(backing, DAEMON_USE_CHILD);
        if (backing->implicit) {
            node_close(backing);
        }
    }
    if (!file) {
        return;
    }
    daemon_node_unuse(file, DAEMON_USE_CHILD);
    if (file->implicit) {
        node_close(file);
    } else if (lent && (file->uses[DAEMON_USE_BLK] || file->top)) {
        /* An export or a job took the file node meanwhile: its node
         * stays, without locks (reopening it would pull it away). */
        file->lock_holder = NULL;
        g_warning("node '%s' keeps no image locks: it is in use",
                  file->name);
    } else if (lent) {
        g_autoptr(GError) err = NULL;

        if (!node_file_lend(file, NULL, &err)) {
            g_warning("node '%s' keeps no image locks: %s", file->name,
                      err->message);
        }
    }
}

/* Number the implicit backing node @b (made while its parent opened)
 * after its parent, as QEMU makes it: its file, itself, its backing. */
static void node_reseq(DaemonNode *b)
{
    if (b->file && b->file->implicit) {
        b->file->seq = daemon_node_seq++;
    }
    b->seq = daemon_node_seq++;
    if (b->backing && b->backing->implicit) {
        node_reseq(b->backing);
    }
}

static DaemonNode *node_add(Daemon *d, JsonObject *args, const char *prefix,
                            const NodeOpts *inherit, GError **errp)
{
    static const char *const base[] = {
        "driver", "node-name", "discard", "cache", "read-only",
        "auto-read-only", "force-share", "detect-zeroes",
    };
    g_autoptr(GPtrArray) allowed = g_ptr_array_new();
    g_autoptr(JsonObject) node_args = NULL;
    const char *name = NULL, *driver = NULL;
    const NodeDriver *drv;
    DaemonNode *n;
    NodeOpts o;

    if (!qmp_arg_str(args, "driver", true, &driver, errp) ||
        !(drv = node_driver_find(driver, errp)) ||
        !qmp_arg_str(args, "node-name", false, &name, errp)) {
        node_prefix_error(errp, prefix);
        return NULL;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(base); i++) {
        g_ptr_array_add(allowed, (char *)base[i]);
    }
    for (size_t i = 0; drv->members[i]; i++) {
        g_ptr_array_add(allowed, (char *)drv->members[i]);
    }
    g_ptr_array_add(allowed, NULL);
    if (!qmp_check_args(args, (const char *const *)allowed->pdata, errp)) {
        node_prefix_error(errp, prefix);
        return NULL;
    }
    if (!name && !inherit) {
        node_error(errp, "'node-name' must be specified for the root node");
        return NULL;
    }
    /* The node's args, with what it inherits; checked before its name,
     * as QEMU does. */
    node_args = node_args_copy(args);
    if (!node_parse_base(node_args, inherit, &o, errp) ||
        !node_check_supported(args, drv->members, drv->supported, errp)) {
        node_prefix_error(errp, prefix);
        return NULL;
    }
    if (name && !daemon_id_wellformed(name)) {
        node_error(errp, "Invalid node-name: '%s'", name);
        return NULL;
    }
    if (name && strlen(name) > DAEMON_NODE_NAME_MAX) {
        node_error(errp, "Node name too long");
        return NULL;
    }
    if (name && g_hash_table_contains(d->nodes, name)) {
        node_error(errp, "Duplicate nodes with node-name='%s'", name);
        return NULL;
    }

    n = g_new0(DaemonNode, 1);
    n->daemon = d;
    n->driver = g_strdup(driver);
    n->implicit = inherit != NULL;
    n->name = name ? g_strdup(name)
                   : g_strdup_printf("#block%" G_GUINT64_FORMAT "%02d",
                                     daemon_block_ids++,
                                     g_random_int_range(0, 100));
    n->args = g_steal_pointer(&node_args);
    if (!drv->open(n, n->args, &o, errp)) {
        node_prefix_error(errp, prefix);
        node_close(n);
        return NULL;
    }
    /* An inline child may have taken the name meanwhile. */
    if (g_hash_table_contains(d->nodes, n->name)) {
        node_error(errp, "Duplicate nodes with node-name='%s'", n->name);
        node_close(n);
        return NULL;
    }
    n->seq = daemon_node_seq++;
    g_hash_table_insert(d->nodes, n->name, n);
    if (n->backing && n->backing->implicit) {
        node_reseq(n->backing);
    }
    return n;
}

/* ---- Commands ---- */

static JsonNode *qmp_blockdev_add(JsonObject *args, void *opaque,
                                  GError **errp)
{
    node_add(opaque, args, NULL, NULL, errp);
    return NULL;
}

static JsonNode *qmp_blockdev_del(JsonObject *args, void *opaque,
                                  GError **errp)
{
    static const char *const allowed[] = { "node-name", NULL };
    Daemon *d = opaque;
    const char *name;
    DaemonNode *n;

    if (!qmp_arg_str(args, "node-name", true, &name, errp) ||
        !qmp_check_args(args, allowed, errp)) {
        return NULL;
    }
    n = g_hash_table_lookup(d->nodes, name);
    if (!n) {
        node_error(errp, "Failed to find node with node-name='%s'", name);
    } else if (n->uses[DAEMON_USE_BLK] &&
               !(n->blocker && n->uses[DAEMON_USE_CHILD])) {
        /* A job's source: QEMU's mirror filter took over its exports'
         * BlockBackends, the node has none of its own. */
        node_error(errp, "Node %s is in use", name);
    } else if (n->blocker) {
        node_error(errp, "Node '%s' is busy: %s", name, n->blocker);
    } else if (n->implicit) {
        node_error(errp, "Node %s is not owned by the monitor", name);
    } else if (n->uses[DAEMON_USE_CHILD]) {
        node_error(errp, "Block device %s is in use", name);
    } else {
        node_close(n);
    }
    return NULL;
}

/* QEMU's ImageInfo of @n from @info, with the backing node's as
 * "backing-image" unless @flat. */
static JsonNode *node_image_json(DaemonNode *n, BlockImageInfo *info,
                                 bool flat)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    JsonNode *root;

    json_builder_begin_object(b);
    tool_image_info_json(b, node_filename(n), info);
    json_builder_end_object(b);
    root = json_builder_get_root(b);
    /* Where the backing file is, also when it was not opened (backing:
     * null), as QEMU shows it. */
    if (info->backing_file && !(info->layers && info->layers->len > 1)) {
        g_autofree char *dir = g_path_get_dirname(node_filename(n));
        g_autofree char *full = g_path_is_absolute(info->backing_file)
            ? g_strdup(info->backing_file)
            : g_build_filename(dir, info->backing_file, NULL);

        json_object_set_string_member(json_node_get_object(root),
                                      "full-backing-filename", full);
    }
    /* QEMU's drivers without bdrv_get_info() have no dirty flag, and
     * its nbd driver shows nothing specific. */
    if (!strcmp(n->driver, "null-co") || !strcmp(n->driver, "nbd")) {
        json_object_remove_member(json_node_get_object(root), "dirty-flag");
        json_object_remove_member(json_node_get_object(root),
                                  "format-specific");
    }
    if (!flat && n->backing) {
        BlockImageInfo binfo;

        node_get_info(n->backing, &binfo);
        json_object_set_member(json_node_get_object(root), "backing-image",
                               node_image_json(n->backing, &binfo, flat));
        bdrv_image_info_clear(&binfo);
    }
    return root;
}

/* One BlockDeviceInfo (QEMU 7.2's members) for @n. */
static void node_info_json(JsonBuilder *b, DaemonNode *n, bool flat)
{
    static const char *const zeros[] = {
        "bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr",
        "write_threshold",
    };
    BlockImageInfo info;
    int depth = 0;

    node_get_info(n, &info);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "file");
    json_builder_add_string_value(b, node_filename(n));
    json_builder_set_member_name(b, "node-name");
    json_builder_add_string_value(b, n->name);
    json_builder_set_member_name(b, "ro");
    json_builder_add_boolean_value(b, n->read_only);
    json_builder_set_member_name(b, "drv");
    json_builder_add_string_value(b, n->driver);
    if (info.backing_file && info.layers && info.layers->len > 1) {
        depth = info.layers->len - 1;
        json_builder_set_member_name(b, "backing_file");
        json_builder_add_string_value(b, g_ptr_array_index(info.layers, 1));
    }
    json_builder_set_member_name(b, "backing_file_depth");
    json_builder_add_int_value(b, depth);
    json_builder_set_member_name(b, "encrypted");
    json_builder_add_boolean_value(b, false);
    json_builder_set_member_name(b, "detect_zeroes");
    json_builder_add_string_value(b, "off");
    for (size_t i = 0; i < G_N_ELEMENTS(zeros); i++) {
        json_builder_set_member_name(b, zeros[i]);
        json_builder_add_int_value(b, 0);
    }
    json_builder_set_member_name(b, "image");
    json_builder_add_value(b, node_image_json(n, &info, flat));
    bdrv_image_info_clear(&info);
    json_builder_set_member_name(b, "cache");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "writeback");
    json_builder_add_boolean_value(b, true);
    json_builder_set_member_name(b, "direct");
    json_builder_add_boolean_value(b, node_cache_member(n, "direct"));
    json_builder_set_member_name(b, "no-flush");
    json_builder_add_boolean_value(b, false);
    json_builder_end_object(b);
    json_builder_end_object(b);
}

/* Newest first, as QEMU lists them. */
static gint node_cmp_newest(gconstpointer a, gconstpointer b)
{
    const DaemonNode *x = *(DaemonNode *const *)a;
    const DaemonNode *y = *(DaemonNode *const *)b;

    return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

static JsonNode *qmp_query_named_block_nodes(JsonObject *args,
                                             void *opaque, GError **errp)
{
    static const char *const allowed[] = { "flat", NULL };
    Daemon *d = opaque;
    g_autoptr(JsonBuilder) b = json_builder_new();
    g_autoptr(GPtrArray) nodes = g_ptr_array_new();
    GHashTableIter it;
    gpointer value;
    bool flat = false;

    if (!qmp_arg_bool(args, "flat", false, &flat, errp) ||
        !qmp_check_args(args, allowed, errp)) {
        return NULL;
    }
    g_hash_table_iter_init(&it, d->nodes);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        g_ptr_array_add(nodes, value);
    }
    g_ptr_array_sort(nodes, node_cmp_newest);
    json_builder_begin_array(b);
    for (guint i = 0; i < nodes->len; i++) {
        node_info_json(b, g_ptr_array_index(nodes, i), flat);
    }
    json_builder_end_array(b);
    return json_builder_get_root(b);
}

/* ---- Objects ---- */

/* QEMU's check that the credential file @dir/@name exists. */
static bool object_tls_file(const char *dir, const char *name,
                            GError **errp)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);

    if (access(path, R_OK) < 0) {
        node_error(errp, "Unable to access credentials %s: %s", path,
                   g_strerror(errno));
        return false;
    }
    return true;
}

static bool object_add_tls(DaemonObject *obj, const char *id,
                           JsonObject *args, bool psk, GError **errp)
{
    static const char *const ends[] = { "client", "server", NULL };
    static const char *const x509[] = {
        "qom-type", "id", "dir", "endpoint", "verify-peer", "priority",
        "sanity-check", "passwordid", NULL,
    };
    static const char *const x509_ours[] = {
        "qom-type", "id", "dir", "endpoint", "verify-peer", NULL,
    };
    static const char *const psk_members[] = {
        "qom-type", "id", "dir", "endpoint", "verify-peer", "priority",
        "username", NULL,
    };
    static const char *const psk_ours[] = {
        "qom-type", "id", "dir", "endpoint", "verify-peer", "username",
        NULL,
    };
    const char *const *members = psk ? psk_members : x509;
    const char *endpoint = "client", *dir = NULL;
    const char *username = DAEMON_PSK_DEFAULT_USER;
    DaemonTlsCreds *c;
    bool verify = true;

    if (!qmp_arg_str(args, "dir", false, &dir, errp) ||
        !node_arg_enum(args, "endpoint", ends, ends, &endpoint, errp) ||
        !qmp_arg_bool(args, "verify-peer", false, &verify, errp) ||
        !qmp_arg_str(args, "username", false, &username, errp) ||
        !qmp_check_args(args, members, errp) ||
        !node_check_supported(args, members, psk ? psk_ours : x509_ours,
                              errp)) {
        return false;
    }
    if (!dir) {
        node_error(errp, "Missing 'dir' property value");
        return false;
    }
    if (psk) {
        if (!object_tls_file(dir, "keys.psk", errp)) {
            return false;
        }
    } else if (!object_tls_file(dir, "ca-cert.pem", errp) ||
               (!strcmp(endpoint, "server") &&
                (!object_tls_file(dir, "server-cert.pem", errp) ||
                 !object_tls_file(dir, "server-key.pem", errp)))) {
        return false;
    }
    c = obj->tls = g_new0(DaemonTlsCreds, 1);
    c->id = g_strdup(id);
    c->kind = psk ? DAEMON_TLS_PSK : DAEMON_TLS_X509;
    c->endpoint = !strcmp(endpoint, "server") ? DAEMON_TLS_SERVER
                                              : DAEMON_TLS_CLIENT;
    c->dir = g_strdup(dir);
    c->verify_peer = verify;
    if (psk) {
        c->psk_file = g_build_filename(dir, "keys.psk", NULL);
        if (c->endpoint == DAEMON_TLS_CLIENT) {
            c->username = g_strdup(username);
        }
    }
    return true;
}

/* Is @s QEMU's base64 (qbase64_decode): the alphabet, padded to 4? */
static bool object_base64_ok(const char *s)
{
    size_t len = strlen(s);

    return len % 4 == 0 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                  "0123456789+/=") == len;
}

static bool object_add_secret(DaemonObject *obj, JsonObject *args,
                              GError **errp)
{
    static const char *const members[] = {
        "qom-type", "id", "data", "file", "format", "keyid", "iv",
        "loaded", NULL,
    };
    static const char *const ours[] = {
        "qom-type", "id", "data", "file", "format", NULL,
    };
    static const char *const formats[] = { "raw", "base64", NULL };
    const char *data = NULL, *file = NULL, *format = "raw";
    g_autofree char *content = NULL;
    gsize len;

    if (!qmp_arg_str(args, "data", false, &data, errp) ||
        !qmp_arg_str(args, "file", false, &file, errp) ||
        !node_arg_enum(args, "format", formats, formats, &format, errp) ||
        !qmp_check_args(args, members, errp) ||
        !node_check_supported(args, members, ours, errp)) {
        return false;
    }
    if (data && file) {
        node_error(errp, "'file' and 'data' are mutually exclusive");
        return false;
    }
    if (!data && !file) {
        node_error(errp, "Either 'file' or 'data' must be provided");
        return false;
    }
    if (file) {
        g_autoptr(GError) err = NULL;

        if (!g_file_get_contents(file, &content, &len, &err)) {
            node_error(errp, "Unable to read %s: %s", file, err->message);
            return false;
        }
        data = content;
    } else {
        len = strlen(data);
    }
    if (!strcmp(format, "base64")) {
        g_autofree char *text = g_strndup(data, len);
        guchar *raw;

        if (!object_base64_ok(text)) {
            node_error(errp, "Base64 data contains invalid characters");
            return false;
        }
        raw = g_base64_decode(text, &len);
        obj->secret = g_bytes_new_take(raw, len);
    } else {
        obj->secret = g_bytes_new(data, len);
    }
    return true;
}

static JsonNode *qmp_object_add(JsonObject *args, void *opaque,
                                GError **errp)
{
    static const char *const types[] = {
        "secret", "tls-creds-x509", "tls-creds-psk", NULL,
    };
    Daemon *d = opaque;
    const char *type = NULL, *id = NULL;
    DaemonObject *obj;
    bool ok;

    if (!qmp_arg_str(args, "qom-type", true, &type, errp) ||
        !qmp_arg_str(args, "id", true, &id, errp)) {
        return NULL;
    }
    if (!g_strv_contains(types, type)) {
        node_error(errp, "Parameter 'qom-type' does not accept value '%s'",
                   type);
        return NULL;
    }
    if (!daemon_id_wellformed(id)) {
        node_error(errp, "Parameter 'id' expects an identifier");
        return NULL;
    }
    obj = g_new0(DaemonObject, 1);
    obj->qom_type = g_strdup(type);
    if (!strcmp(type, "secret")) {
        ok = object_add_secret(obj, args, errp);
    } else {
        ok = object_add_tls(obj, id, args, !strcmp(type, "tls-creds-psk"),
                            errp);
    }
    if (ok && g_hash_table_contains(d->objects, id)) {
        node_error(errp, "attempt to add duplicate property '%s' to object "
                   "(type 'container')", id);
        ok = false;
    }
    if (!ok) {
        daemon_object_free(obj);
        return NULL;
    }
    g_hash_table_insert(d->objects, g_strdup(id), obj);
    return NULL;
}

static JsonNode *qmp_object_del(JsonObject *args, void *opaque,
                                GError **errp)
{
    static const char *const allowed[] = { "id", NULL };
    Daemon *d = opaque;
    const char *id;

    if (!qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_check_args(args, allowed, errp)) {
        return NULL;
    }
    /* QEMU deletes credentials in use too: their users keep copies. */
    if (!g_hash_table_remove(d->objects, id)) {
        node_error(errp, "object '%s' not found", id);
    }
    return NULL;
}

DaemonTlsCreds *daemon_object_find_tls(Daemon *d, const char *id,
                                       GError **errp)
{
    DaemonObject *obj = g_hash_table_lookup(d->objects, id);

    if (!obj) {
        node_error(errp, "No TLS credentials with id '%s'", id);
        return NULL;
    }
    if (!obj->tls) {
        node_error(errp, "Object with id '%s' is not TLS credentials", id);
        return NULL;
    }
    return obj->tls;
}

bool daemon_tls_check_endpoint(const DaemonTlsCreds *creds,
                               DaemonTlsEndpoint endpoint, GError **errp)
{
    if (creds->endpoint != endpoint) {
        node_error(errp, "Expected TLS credentials for a %s endpoint",
                   endpoint == DAEMON_TLS_SERVER ? "server" : "client");
        return false;
    }
    return true;
}

void daemon_block_register(Daemon *d)
{
    d->nodes = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                     (GDestroyNotify)daemon_node_free);
    d->objects = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                       (GDestroyNotify)daemon_object_free);
    qmp_server_register(d->qmp, "blockdev-add", qmp_blockdev_add, d);
    qmp_server_register(d->qmp, "blockdev-del", qmp_blockdev_del, d);
    qmp_server_register(d->qmp, "query-named-block-nodes",
                        qmp_query_named_block_nodes, d);
    qmp_server_register(d->qmp, "object-add", qmp_object_add, d);
    qmp_server_register(d->qmp, "object-del", qmp_object_del, d);
}
