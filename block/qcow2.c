/*
 * qcow2-lite: the driver table, open and close, probing, info, and the
 * asynchronous members, which run each request whole on a worker of the
 * shared thread pool (see block/qcow2-int.h for the locking).
 *
 * Why the driver does its own file I/O instead of stacking on a raw node:
 * a write is a sequence (allocate and count, write data and copy-on-write,
 * sync, update L2) with a lock held over its metadata steps; as blocking
 * code on a worker it stays a straight line, metadata I/O never touches
 * the main loop, the backing chain is read in the same worker, and
 * compression runs on as many cores as requests are in flight.  On a raw
 * node each step would be a callback on the main loop and compression
 * would need a second hop to the pool anyway.
 *
 * The supported subset, the refusals and the write ordering are in
 * docs/qcow2-lite.md.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "block/file-lock.h"
#include "block/qcow2.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

/* Metadata cache sizes (bytes of tables): the defaults of
 * l2-cache-size (the top layer; backing layers have the smaller one) and
 * refcount-cache-size, and the most either may be (QEMU's bound). */
#define QCOW2_L2_CACHE_BYTES        (8 * MiB)
#define QCOW2_RB_CACHE_BYTES        (2 * MiB)
#define QCOW2_BACKING_L2_CACHE      (2 * MiB)
#define QCOW2_MAX_CACHE_BYTES       INT32_MAX

#define QCOW2_MAX_TRANSFER          (64 * MiB)

/* ---- Opening one layer ---- */

/* The open options of a layer (docs/mirror-tool.md, IMAGES). */
typedef struct Qcow2OpenOptions {
    int64_t l2_cache_size;          /* bytes of L2 tables cached */
    int64_t refcount_cache_size;    /* bytes of refcount blocks cached */
    bool copy_offload;              /* fused copies where they apply */
    OnOffAuto locking;              /* QEMU's image locks (file-lock.h) */
    /* backing=none: the backing file the header names is not opened, and
     * what the image does not have reads as zeroes (QEMU's backing: null,
     * the daemon's); the header keeps its name.  Top layer only. */
    bool no_backing;
    uint64_t perm;                  /* BLK_PERM_* the layer's user holds */
    uint64_t shared;                /* and shares */
    bool force_share;               /* share all, down the chain (-U) */
} Qcow2OpenOptions;

/* The defaults, for a layer at @depth (0: the top image). */
static Qcow2OpenOptions qcow2_default_options(int depth)
{
    return (Qcow2OpenOptions) {
        .l2_cache_size = depth ? QCOW2_BACKING_L2_CACHE
                               : QCOW2_L2_CACHE_BYTES,
        .refcount_cache_size = QCOW2_RB_CACHE_BYTES,
        .copy_offload = true,
        .perm = BLK_PERM_CONSISTENT_READ,
        .shared = BLK_PERM_ALL,
    };
}

/* Take the size option @key out of @options into *@value. */
static bool qcow2_take_cache_size(GHashTable *options, const char *key,
                                  int64_t *value, GError **errp)
{
    const char *v = g_hash_table_lookup(options, key);

    if (!v) {
        return true;
    }
    if (!parse_size_range(key, v, 0, QCOW2_MAX_CACHE_BYTES, false, value,
                          errp)) {
        return false;
    }
    g_hash_table_remove(options, key);
    return true;
}

/* Take the options of Qcow2OpenOptions out of @options into @o. */
static bool qcow2_parse_options(GHashTable *options, const char *spec,
                                Qcow2OpenOptions *o, GError **errp)
{
    g_autoptr(GError) err = NULL;
    OnOffAuto copy = ON_OFF_AUTO_AUTO;
    const char *v;

    if (!qcow2_take_cache_size(options, "l2-cache-size", &o->l2_cache_size,
                               &err) ||
        !qcow2_take_cache_size(options, "refcount-cache-size",
                               &o->refcount_cache_size, &err) ||
        !take_on_off_auto(options, "copy-offload", &copy, &err)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "'%s': %s", spec,
                    err->message);
        return false;
    }
    o->copy_offload = copy != ON_OFF_AUTO_OFF;
    v = g_hash_table_lookup(options, "backing");
    if (v) {
        if (strcmp(v, "none")) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "'%s': backing '%s': expected none", spec, v);
            return false;
        }
        o->no_backing = true;
        g_hash_table_remove(options, "backing");
    }
    return file_lock_take_option(options, spec, &o->locking, errp);
}

/*
 * Lock @s's file as QEMU's qcow2 node locks its file child (its
 * bdrv_default_perms_for_storage(): metadata): what its user holds, plus
 * write and resize when writable; never sharing write or resize, unless
 * force-shared.
 */
static bool qcow2_lock(BDRVQcow2State *s, const Qcow2OpenOptions *o,
                       GError **errp)
{
    uint64_t perm = o->perm;
    uint64_t shared;

    if (s->writable) {
        perm |= BLK_PERM_WRITE | BLK_PERM_RESIZE;
    }
    shared = o->force_share ? BLK_PERM_ALL
                            : o->shared & ~(BLK_PERM_WRITE | BLK_PERM_RESIZE);
    return file_lock_take(s->fd, o->locking, perm, shared, s->filename,
                          errp);
}

int qcow2_signal_corruption(BDRVQcow2State *s, const char *fmt, ...)
{
    va_list ap;
    char *msg;
    uint8_t buf[8];

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (!s->writable || s->corrupt) {
        g_debug("qcow2 '%s' is corrupt: %s", s->filename, msg);
        g_free(msg);
        return -EIO;
    }
    /* Once per image (then all I/O fails), as QEMU says it. */
    g_warning("qcow2 '%s': marking the image as corrupt: %s; further "
              "corruption events will be suppressed", s->filename, msg);
    s->corrupt = true;
    s->corrupt_reason = msg;
    s->header.incompatible_features |= QCOW2_INCOMPAT_CORRUPT;
    qcow2_put_be64(buf, s->header.incompatible_features);
    if (qcow2_pwrite(s, QCOW2_HDR_INCOMPAT, buf, 8) == 0) {
        qcow2_sync(s);
    }
    return -EIO;
}

/* Read @n big-endian entries at @offset into a host-order table. */
static uint64_t *qcow2_read_table(BDRVQcow2State *s, int64_t offset,
                                  int64_t n, GError **errp)
{
    g_autofree uint64_t *t = g_new(uint64_t, MAX(n, 1));
    int ret = qcow2_pread(s, offset, t, n * 8);

    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not read the table at 0x%" PRIx64 ": %s", offset,
                    g_strerror(-ret));
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        t[i] = GUINT64_FROM_BE(t[i]);
    }
    return g_steal_pointer(&t);
}

/* Open the file itself; refuse what is not a regular file or loops. */
static bool qcow2_open_file(BDRVQcow2State *s, const Qcow2OpenOptions *o,
                            GHashTable *chain, GError **errp)
{
    struct stat st;
    char *key;

    s->fd = open(s->filename, (s->writable ? O_RDWR : O_RDONLY) |
                 O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN, "%s",
                    g_strerror(errno));
        return false;
    }
    if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "a qcow2 image must be a regular file");
        return false;
    }
    /* Before anything is written (the autoclear bits, a dirty flag). */
    if (!qcow2_lock(s, o, errp)) {
        return false;
    }
    s->in_memory = fd_in_memory(s->fd) && o->copy_offload;
    key = g_strdup_printf("%ju:%ju", (uintmax_t)st.st_dev,
                          (uintmax_t)st.st_ino);
    if (g_hash_table_contains(chain, key)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "the image is its own backing file (a loop)");
        g_free(key);
        return false;
    }
    g_hash_table_add(chain, key);
    s->file_size = st.st_size;
    return true;
}

/* Read and check the header. */
static bool qcow2_load_header(BDRVQcow2State *s, GError **errp)
{
    int64_t want = MIN(s->file_size, INT64_C(1) << QCOW2_MAX_CLUSTER_BITS);
    g_autofree uint8_t *buf = g_malloc(MAX(want, 1));
    int64_t len = want;
    int ret = qcow2_pread(s, 0, buf, want);

    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not read the header: %s", g_strerror(-ret));
        return false;
    }
    if (len >= 24) {
        uint32_t cb = qcow2_be32(buf + 20);

        if (cb >= QCOW2_MIN_CLUSTER_BITS && cb <= QCOW2_MAX_CLUSTER_BITS) {
            len = MIN(len, INT64_C(1) << cb);
        }
    }
    return qcow2_header_parse(buf, len, &s->header, errp) &&
           qcow2_header_check_layout(&s->header, s->file_size, errp);
}

/* Geometry, tables, metadata map, caches (of whole tables: a size below
 * one table caches the least qcow2_cache_new() allows). */
static bool qcow2_load_tables(BDRVQcow2State *s, const Qcow2OpenOptions *o,
                              GError **errp)
{
    Qcow2Header *h = &s->header;
    int64_t l1_sectors;

    s->cluster_bits = h->cluster_bits;
    s->cluster_size = INT64_C(1) << h->cluster_bits;
    s->l2_bits = h->cluster_bits - 3;
    s->size = h->size / 512 * 512;
    s->refblock_bits = h->cluster_bits + 3 - h->refcount_order;

    s->l1_size = h->l1_size;
    s->l1_offset = h->l1_table_offset;
    s->l1 = qcow2_read_table(s, s->l1_offset, s->l1_size, errp);
    s->reftable_offset = h->refcount_table_offset;
    s->reftable_clusters = h->refcount_table_clusters;
    s->reftable_size = s->reftable_clusters * s->cluster_size / 8;
    s->reftable = s->l1 ? qcow2_read_table(s, s->reftable_offset,
                                           s->reftable_size, errp) : NULL;
    if (!s->reftable) {
        return false;
    }
    s->meta = qcow2_meta_new();
    if (!qcow2_check_tables(h, s->reftable, s->reftable_size, s->l1,
                            s->file_size, s->meta, errp)) {
        return false;
    }
    l1_sectors = DIV_ROUND_UP((int64_t)s->l1_size * 8, 512);
    s->l1_dirty = g_malloc0(DIV_ROUND_UP(l1_sectors, 8) + 1);
    s->l2_cache = qcow2_cache_new(true, o->l2_cache_size / s->cluster_size,
                                  s->cluster_size);
    if (s->writable) {
        s->rb_cache = qcow2_cache_new(false, o->refcount_cache_size /
                                      s->cluster_size, s->cluster_size);
    }
    s->fresh_start = QEMU_ALIGN_UP(s->file_size, s->cluster_size);
    return true;
}

/* Read-write: clear the autoclear bits we do not know, before writing. */
static bool qcow2_clear_autoclear(BDRVQcow2State *s, GError **errp)
{
    uint8_t buf[8] = { 0 };
    int ret;

    if (!s->header.autoclear_features) {
        return true;
    }
    ret = qcow2_pwrite(s, QCOW2_HDR_AUTOCLEAR, buf, 8);
    if (ret == 0) {
        ret = qcow2_sync(s);
    }
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not update the header: %s", g_strerror(-ret));
        return false;
    }
    s->header.autoclear_features = 0;
    return true;
}

/* Why @h may not be written (NULL when it may); @repair: the dirty and
 * corrupt bits are what a repair is for. */
static const char *qcow2_open_refusal(const Qcow2Header *h, bool repair)
{
    Qcow2Header copy = *h;      /* shallow: only the bits change */

    if (repair) {
        copy.incompatible_features &= ~(QCOW2_INCOMPAT_DIRTY |
                                        QCOW2_INCOMPAT_CORRUPT);
    }
    return qcow2_header_rw_refusal(&copy);
}

static BDRVQcow2State *qcow2_state_open_mode(const char *filename,
                                             bool writable, bool repair,
                                             int depth,
                                             const Qcow2OpenOptions *o,
                                             GHashTable *chain,
                                             GError **errp)
{
    BDRVQcow2State *s = g_new0(BDRVQcow2State, 1);
    const char *refusal;

    s->filename = g_strdup(filename);
    s->fd = -1;
    s->writable = writable;
    s->depth = depth;
    s->locking = o->locking;
    s->force_share = o->force_share;
    s->read_perm = o->perm & BLK_PERM_CONSISTENT_READ;
    g_mutex_init(&s->lock);
    g_cond_init(&s->cond);
    g_queue_init(&s->allocs);
    g_queue_init(&s->io);
    s->pending_frees = g_array_new(FALSE, FALSE, sizeof(Qcow2PendingFree));
    s->guard_beyond = INT64_MAX;

    if (!qcow2_open_file(s, o, chain, errp) || !qcow2_load_header(s, errp)) {
        goto out_close;
    }
    refusal = writable ? qcow2_open_refusal(&s->header, repair) : NULL;
    if (refusal) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "read-write access refused: %s", refusal);
        goto out_close;
    }
    if (!qcow2_load_tables(s, o, errp)) {
        goto out_close;
    }
    if (!repair && !o->no_backing && !qcow2_backing_open(s, chain, errp)) {
        goto out_close;
    }
    if (writable && !repair && !qcow2_guard_build(s, errp)) {
        goto out_close;
    }
    if (writable && !qcow2_clear_autoclear(s, errp)) {
        goto out_close;
    }
    return s;

out_close:
    s->writable = false;        /* nothing to flush */
    qcow2_state_close(s);
    return NULL;
}

BDRVQcow2State *qcow2_state_open(const char *filename, bool writable,
                                 int depth, GHashTable *chain,
                                 OnOffAuto locking, uint64_t perm,
                                 bool force_share, GError **errp)
{
    Qcow2OpenOptions o = qcow2_default_options(depth);

    o.locking = locking;
    o.perm = perm;
    o.force_share = force_share;

    return qcow2_state_open_mode(filename, writable, false, depth, &o, chain,
                                 errp);
}

BDRVQcow2State *qcow2_state_open_repair(const char *filename, bool writable,
                                        GError **errp)
{
    g_autoptr(GHashTable) chain = g_hash_table_new_full(g_str_hash,
                                                        g_str_equal,
                                                        g_free, NULL);
    Qcow2OpenOptions o = qcow2_default_options(0);

    /* The node being repaired holds the locks for the repair's opens. */
    o.locking = ON_OFF_AUTO_OFF;
    return qcow2_state_open_mode(filename, writable, true, 0, &o, chain,
                                 errp);
}

void qcow2_state_close(BDRVQcow2State *s)
{
    if (!s) {
        return;
    }
    if (s->writable && s->fd >= 0) {
        g_mutex_lock(&s->lock);
        if (qcow2_flush_metadata(s) < 0) {
            g_debug("qcow2 '%s': flush at close failed", s->filename);
        }
        g_mutex_unlock(&s->lock);
    }
    qcow2_backing_close(s->backing);
    qcow2_cache_free(s->l2_cache);
    qcow2_cache_free(s->rb_cache);
    if (s->meta) {
        g_hash_table_destroy(s->meta);
    }
    if (s->fd >= 0) {
        close(s->fd);
    }
    g_array_unref(s->pending_frees);
    qcow2_header_clear(&s->header);
    g_free(s->l1);
    g_free(s->l1_dirty);
    g_free(s->reftable);
    g_free(s->corrupt_reason);
    if (s->guard) {
        g_hash_table_destroy(s->guard);
    }
    g_free(s->filename);
    g_mutex_clear(&s->lock);
    g_cond_clear(&s->cond);
    g_free(s);
}

/* ---- The driver table's control path ---- */

static BDRVQcow2State *qcow2_state(BlockDriverState *bs)
{
    return ((Qcow2Node *)bs->opaque)->s;
}

/*
 * The magic alone claims the file, whatever the version: an unsupported
 * version is then refused by the open ("Unsupported qcow2 version 4", as
 * qemu-img says), not probed as raw and copied as its container bytes.
 * (QEMU's qcow driver takes version 1; we have none, so qcow2 refuses it.)
 */
static int qcow2_probe(const uint8_t *buf, int buf_size,
                       const char *filename)
{
    if (buf_size >= 8 && qcow2_be32(buf) == QCOW2_MAGIC) {
        return 100;
    }
    return 0;
}

static bool qcow2_open(BlockDriverState *bs, const char *spec, int flags,
                       GHashTable *options, GError **errp)
{
    Qcow2Node *node = bs->opaque;
    g_autoptr(GHashTable) chain = g_hash_table_new_full(g_str_hash,
                                                        g_str_equal,
                                                        g_free, NULL);
    Qcow2OpenOptions o = qcow2_default_options(0);

    if (!qcow2_parse_options(options, spec, &o, errp)) {
        return false;
    }
    o.perm = bs->perm;
    o.shared = bs->shared_perm;
    o.force_share = flags & BDRV_O_FORCE_SHARE;
    if (flags & BDRV_O_NOCACHE) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Could not open '%s': cache=none is not supported for "
                    "qcow2 images", spec);
        return false;
    }
    node->s = qcow2_state_open_mode(spec, flags & BDRV_O_RDWR, false, 0, &o,
                                    chain, errp);
    if (!node->s) {
        /* A lock error names the image already, as QEMU's does. */
        if (!g_error_matches(*errp, BLOCK_ERROR, BLOCK_ERROR_LOCKED)) {
            g_prefix_error(errp, "Could not open '%s': ", spec);
        }
        return false;
    }
    /* What the open options came to (the tests read it). */
    g_debug("qcow2 '%s': L2 cache of %" PRId64 " tables, refcount cache of "
            "%" PRId64 " tables, fused copies %s", spec,
            qcow2_cache_max_entries(node->s->l2_cache),
            node->s->rb_cache ? qcow2_cache_max_entries(node->s->rb_cache)
                              : 0,
            node->s->in_memory ? "on" : "off");
    return true;
}

static void qcow2_close(BlockDriverState *bs)
{
    Qcow2Node *node = bs->opaque;

    qcow2_state_close(node->s);
    node->s = NULL;
}

static int64_t qcow2_get_length(BlockDriverState *bs)
{
    return qcow2_state(bs)->size;
}

static void qcow2_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    BDRVQcow2State *s = qcow2_state(bs);

    bl->request_alignment = 1;
    bl->max_transfer = QCOW2_MAX_TRANSFER;
    /* No limit: zeroing and discard walk one L2 table at a time (a run of
     * L1 entries without one at once), taking the lock for each. */
    bl->max_pwrite_zeroes = 0;
    bl->max_pdiscard = 0;
    bl->opt_transfer = s->cluster_size;
}

static bool qcow2_get_info(BlockDriverState *bs, BlockImageInfo *info,
                           GError **errp)
{
    BDRVQcow2State *s = qcow2_state(bs);
    const Qcow2Header *h = &s->header;
    struct stat st;

    if (fstat(s->fd, &st) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not stat '%s': %s", bs->filename,
                    g_strerror(errno));
        return false;
    }
    info->actual_size = (int64_t)st.st_blocks * 512;
    info->cluster_size = s->cluster_size;
    info->backing_file = g_strdup(h->backing_file);
    info->backing_format = g_strdup(h->backing_format);
    info->dirty_flag = h->incompatible_features & QCOW2_INCOMPAT_DIRTY;
    info->specific = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(info->specific, g_strdup(h->version >= 3 ?
                                             "compat: 1.1" :
                                             "compat: 0.10"));
    g_ptr_array_add(info->specific, g_strdup("compression type: zlib"));
    if (h->version >= 3) {
        g_ptr_array_add(info->specific,
                        g_strdup_printf("lazy refcounts: %s",
                                        h->compatible_features &
                                        QCOW2_COMPAT_LAZY_REFCOUNTS ?
                                        "true" : "false"));
    }
    g_ptr_array_add(info->specific,
                    g_strdup_printf("refcount bits: %d",
                                    1 << h->refcount_order));
    if (h->version >= 3) {
        g_ptr_array_add(info->specific,
                        g_strdup_printf("corrupt: %s",
                                        h->incompatible_features &
                                        QCOW2_INCOMPAT_CORRUPT ?
                                        "true" : "false"));
        g_ptr_array_add(info->specific, g_strdup("extended l2: false"));
    }
    info->layers = g_ptr_array_new_with_free_func(g_free);
    for (int d = 0;; d++) {
        char *name = qcow2_layer_filename(bs, d);

        if (!name) {
            break;
        }
        g_ptr_array_add(info->layers, name);
    }
    return true;
}

/*
 * ---- The data path: blocking members, each request run whole on a pool
 * worker by io.c's adapter (block/io-blocking.c) ----
 */

static int qcow2_pread_member(BlockDriverState *bs, int64_t offset,
                              int64_t bytes, void *buf)
{
    return qcow2_do_read(qcow2_state(bs), offset, bytes, buf);
}

static int qcow2_pwrite_member(BlockDriverState *bs, int64_t offset,
                               int64_t bytes, const void *buf,
                               BdrvRequestFlags flags)
{
    BDRVQcow2State *s = qcow2_state(bs);
    int ret;

    if (!(flags & BDRV_REQ_WRITE_COMPRESSED)) {
        return qcow2_do_write(s, offset, bytes, buf, flags);
    }
    ret = qcow2_do_write_compressed(s, offset, bytes, buf);
    return ret == 0 && (flags & BDRV_REQ_FUA) ? qcow2_do_flush(s) : ret;
}

static int qcow2_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                               int64_t bytes, BdrvRequestFlags flags)
{
    return qcow2_do_zeroes(qcow2_state(bs), offset, bytes, flags);
}

static int qcow2_pdiscard(BlockDriverState *bs, int64_t offset,
                          int64_t bytes)
{
    return qcow2_do_discard(qcow2_state(bs), offset, bytes);
}

static int qcow2_flush(BlockDriverState *bs)
{
    return qcow2_do_flush(qcow2_state(bs));
}

static int qcow2_block_status(BlockDriverState *bs, int64_t offset,
                              int64_t bytes, GArray *extents)
{
    return qcow2_do_block_status(qcow2_state(bs), offset, bytes, extents);
}

/* Fused copies only for an image in memory (page-cache copies). */
static bool qcow2_can_copy(BlockDriverState *bs)
{
    return qcow2_state(bs)->in_memory;
}

static const char *const qcow2_create_opts[] = {
    "cluster_size", "preallocation", "backing_file", "backing_fmt", NULL,
};

const BlockDriver bdrv_qcow2 = {
    .format_name        = "qcow2",
    .instance_size      = sizeof(Qcow2Node),
    .supported_write_flags = BDRV_REQ_WRITE_COMPRESSED,
    .probe              = qcow2_probe,
    .open               = qcow2_open,
    .close              = qcow2_close,
    .create             = qcow2_create,
    .create_opts        = qcow2_create_opts,
    .get_length         = qcow2_get_length,
    .refresh_limits     = qcow2_refresh_limits,
    .get_info           = qcow2_get_info,
    .check              = qcow2_check_node,
    .pread              = qcow2_pread_member,
    .pwrite             = qcow2_pwrite_member,
    .pwrite_zeroes      = qcow2_pwrite_zeroes,
    .pdiscard           = qcow2_pdiscard,
    .flush              = qcow2_flush,
    .block_status       = qcow2_block_status,
    .can_copy           = qcow2_can_copy,
};

/* ---- Public helpers (block/qcow2.h) ---- */

bool qcow2_is_node(BlockDriverState *bs)
{
    return bs->drv == &bdrv_qcow2;
}

char *qcow2_layer_filename(BlockDriverState *bs, int depth)
{
    BDRVQcow2State *s = qcow2_state(bs);

    for (int i = 0; i < depth && s; i++) {
        Qcow2Backing *b = s->backing;

        if (!b) {
            return NULL;
        }
        if (i == depth - 1) {
            return g_strdup(b->filename);
        }
        s = b->qcow2;
    }
    return s ? g_strdup(s->filename) : NULL;
}

void qcow2_get_stats(BlockDriverState *bs, Qcow2Stats *st)
{
    BDRVQcow2State *s = qcow2_state(bs);

    st->max_data_io_in_flight =
        g_atomic_int_get(&s->max_data_io_in_flight);
    g_mutex_lock(&s->lock);
    st->reftable_offset = s->reftable_offset;
    st->reftable_clusters = s->reftable_clusters;
    st->corrupt = s->corrupt;
    st->status_l1_entries = s->status_l1_entries;
    st->status_l2_entries = s->status_l2_entries;
    st->zero_l2_entries = s->zero_l2_entries;
    g_mutex_unlock(&s->lock);
}

void qcow2_set_debug_delay(BlockDriverState *bs, int delay_us)
{
    g_atomic_int_set(&qcow2_state(bs)->data_delay_us, delay_us);
}
