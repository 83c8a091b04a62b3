/*
 * The null driver: a test double with latency, error injection, request
 * recording and invariant counters.  See block/null.h for the options.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/null.h"
#include "util/cutils.h"

#include <errno.h>

typedef enum NullExtents {
    NULL_EXTENTS_DATA,
    NULL_EXTENTS_ZERO,
    NULL_EXTENTS_ALTERNATE,
} NullExtents;

typedef struct NullShared {
    int refcnt;
    NullStats stats;
} NullShared;

typedef struct NullState {
    int64_t size;
    int64_t latency_ns;
    int64_t jitter_ns;
    GRand *rand;
    uint32_t align;
    int64_t max_transfer;
    bool zeroes;
    NullExtents extents;
    int64_t run;                /* alternate run length */

    int error_op;               /* NullOp, NULL_OP__MAX = any, -1 = none */
    int64_t error_offset;
    int64_t error_length;
    int error_errno;
    bool error_once;

    GArray *records;            /* NullRecord, or NULL */
    NullShared *shared;
    GList *in_flight;           /* NullRequest, this node only */
} NullState;

typedef struct NullRequest {
    BlockDriverState *bs;
    NullOp op;
    int64_t offset;
    int64_t bytes;
    int ret;
    guint record;               /* index + 1 in records, or 0 */
    BlockCompletionFunc *cb;
    void *opaque;
} NullRequest;

static const char *const null_op_names[] = {
    [NULL_OP_READ] = "read",
    [NULL_OP_WRITE] = "write",
    [NULL_OP_ZERO] = "zero",
    [NULL_OP_DISCARD] = "discard",
    [NULL_OP_FLUSH] = "flush",
    [NULL_OP_STATUS] = "status",
};

static bool null_recognize_spec(const char *spec)
{
    return g_str_has_prefix(spec, "null:") || !strcmp(spec, "null");
}

static bool null_is_write_like(NullOp op)
{
    return op == NULL_OP_WRITE || op == NULL_OP_ZERO ||
           op == NULL_OP_DISCARD;
}

static bool null_opt_bool(GHashTable *opts, const char *key, bool def,
                          bool *out, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, key);

    *out = def;
    if (!v) {
        return true;
    }
    if (!strcmp(v, "on") || !strcmp(v, "true")) {
        *out = true;
    } else if (!strcmp(v, "off") || !strcmp(v, "false")) {
        *out = false;
    } else {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "null: '%s=%s': expected on or off", key, v);
        return false;
    }
    g_hash_table_remove(opts, key);
    return true;
}

static bool null_opt_size(GHashTable *opts, const char *key, int64_t def,
                          int64_t *out, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, key);
    g_autofree char *what = g_strdup_printf("null: %s", key);

    *out = def;
    if (!v) {
        return true;
    }
    if (!parse_size(what, v, out, errp)) {
        return false;
    }
    g_hash_table_remove(opts, key);
    return true;
}

static int null_parse_errno(const char *name)
{
    static const struct { const char *name; int err; } errnos[] = {
        { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EPERM", EPERM },
        { "EINVAL", EINVAL }, { "ENOMEM", ENOMEM },
        { "ESHUTDOWN", ESHUTDOWN }, { "ENOTSUP", ENOTSUP },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(errnos); i++) {
        if (!g_ascii_strcasecmp(name, errnos[i].name)) {
            return errnos[i].err;
        }
    }
    return 0;
}

static bool null_parse_error_opts(NullState *s, GHashTable *opts,
                                  GError **errp)
{
    const char *op = g_hash_table_lookup(opts, "error-op");
    const char *err = g_hash_table_lookup(opts, "error-errno");

    s->error_op = -1;
    if (op) {
        if (!strcmp(op, "any")) {
            s->error_op = NULL_OP__MAX;
        }
        for (int i = 0; i < NULL_OP__MAX; i++) {
            if (!strcmp(op, null_op_names[i])) {
                s->error_op = i;
            }
        }
        if (s->error_op < 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "null: unknown error-op '%s'", op);
            return false;
        }
        g_hash_table_remove(opts, "error-op");
    }
    s->error_errno = EIO;
    if (err) {
        s->error_errno = null_parse_errno(err);
        if (!s->error_errno) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "null: unknown error-errno '%s'", err);
            return false;
        }
        g_hash_table_remove(opts, "error-errno");
    }
    return null_opt_size(opts, "error-offset", 0, &s->error_offset, errp) &&
           null_opt_size(opts, "error-length", 1, &s->error_length, errp) &&
           null_opt_bool(opts, "error-once", false, &s->error_once, errp);
}

static bool null_parse_extents(NullState *s, GHashTable *opts, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, "extents");

    s->extents = NULL_EXTENTS_DATA;
    if (!v || !strcmp(v, "data")) {
        /* default */
    } else if (!strcmp(v, "zero")) {
        s->extents = NULL_EXTENTS_ZERO;
    } else if (g_str_has_prefix(v, "alternate:")) {
        s->extents = NULL_EXTENTS_ALTERNATE;
        if (!parse_size_range("null: extents=alternate", v + 10, 1,
                              INT64_MAX, false, &s->run, errp)) {
            return false;
        }
    } else {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "null: unknown extents '%s'", v);
        return false;
    }
    g_hash_table_remove(opts, "extents");
    return true;
}

static bool null_open(BlockDriverState *bs, const char *spec, int flags,
                      GHashTable *opts, GError **errp)
{
    NullState *s = bs->opaque;
    int64_t align;
    bool record;

    if (g_str_has_prefix(spec, "null:") &&
        !bdrv_parse_spec_options(spec + 5, opts, errp)) {
        return false;
    }
    if (!null_opt_size(opts, "size", GiB, &s->size, errp) ||
        !null_opt_size(opts, "latency-ns", 0, &s->latency_ns, errp) ||
        !null_opt_size(opts, "jitter-ns", 0, &s->jitter_ns, errp) ||
        !null_opt_size(opts, "align", 1, &align, errp) ||
        !null_opt_size(opts, "max-transfer", 0, &s->max_transfer, errp) ||
        !null_opt_bool(opts, "zeroes", true, &s->zeroes, errp) ||
        !null_opt_bool(opts, "record", false, &record, errp) ||
        !null_parse_extents(s, opts, errp) ||
        !null_parse_error_opts(s, opts, errp)) {
        return false;
    }
    if (!is_power_of_2(align) || align > 64 * KiB) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "null: align must be a power of 2 up to 64K");
        return false;
    }
    s->align = align;
    s->rand = g_rand_new_with_seed(1);
    if (record) {
        s->records = g_array_new(FALSE, TRUE, sizeof(NullRecord));
    }
    s->shared = g_new0(NullShared, 1);
    s->shared->refcnt = 1;
    return true;
}

static void null_close(BlockDriverState *bs)
{
    NullState *s = bs->opaque;

    g_assert(!s->in_flight);
    g_rand_free(s->rand);
    if (s->records) {
        g_array_unref(s->records);
    }
    if (--s->shared->refcnt == 0) {
        g_free(s->shared);
    }
}

static int64_t null_get_length(BlockDriverState *bs)
{
    NullState *s = bs->opaque;

    return s->size;
}

static void null_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    NullState *s = bs->opaque;

    bl->request_alignment = s->align;
    bl->max_transfer = s->max_transfer;
}

/* ---- requests ---- */

static gboolean null_request_done(gpointer data)
{
    NullRequest *r = data;
    NullState *s = r->bs->opaque;
    NullStats *st = &s->shared->stats;

    s->in_flight = g_list_remove(s->in_flight, r);
    st->in_flight--;
    if (r->op == NULL_OP_READ || r->op == NULL_OP_WRITE) {
        st->data_bytes_in_flight -= r->bytes;
    }
    if (r->record) {
        NullRecord *rec = &g_array_index(s->records, NullRecord,
                                         r->record - 1);
        rec->end_ns = clock_ns();
        rec->ret = r->ret;
    }
    r->cb(r->opaque, r->ret);
    g_free(r);
    return G_SOURCE_REMOVE;
}

static int null_injected_error(NullState *s, NullOp op, int64_t offset,
                               int64_t bytes)
{
    bool overlap;

    if (s->error_op < 0 || (s->error_op != NULL_OP__MAX &&
                            s->error_op != (int)op)) {
        return 0;
    }
    overlap = op == NULL_OP_FLUSH ||
              (offset < s->error_offset + s->error_length &&
               s->error_offset < offset + bytes);
    if (!overlap) {
        return 0;
    }
    if (s->error_once) {
        s->error_op = -1;
    }
    s->shared->stats.injected_errors++;
    return -s->error_errno;
}

/* Account for a new request, check the contract, schedule completion. */
static void null_submit(BlockDriverState *bs, NullOp op, int64_t offset,
                        int64_t bytes, unsigned flags, int ret,
                        BlockCompletionFunc *cb, void *opaque)
{
    NullState *s = bs->opaque;
    NullStats *st = &s->shared->stats;
    NullRequest *r = g_new0(NullRequest, 1);
    GSource *src;

    *r = (NullRequest) {
        .bs = bs, .op = op, .offset = offset, .bytes = bytes,
        .cb = cb, .opaque = opaque,
    };

    if (op != NULL_OP_FLUSH && op != NULL_OP_STATUS &&
        ((offset % s->align) ||
         ((offset + bytes) % s->align && offset + bytes != s->size) ||
         bytes <= 0 || offset + bytes > s->size ||
         (s->max_transfer && bytes > s->max_transfer &&
          (op == NULL_OP_READ || op == NULL_OP_WRITE)))) {
        st->misaligned++;
    }
    if (null_is_write_like(op)) {
        for (GList *l = s->in_flight; l; l = l->next) {
            NullRequest *o = l->data;

            if (null_is_write_like(o->op) && o->offset < offset + bytes &&
                offset < o->offset + o->bytes) {
                st->overlapping_writes++;
                break;
            }
        }
    }
    st->requests[op]++;
    st->bytes[op] += bytes;
    st->in_flight++;
    st->max_in_flight = MAX(st->max_in_flight, st->in_flight);
    if (op == NULL_OP_READ || op == NULL_OP_WRITE) {
        st->data_bytes_in_flight += bytes;
        st->max_data_bytes_in_flight = MAX(st->max_data_bytes_in_flight,
                                           st->data_bytes_in_flight);
        st->max_data_request = MAX(st->max_data_request, bytes);
    }
    s->in_flight = g_list_prepend(s->in_flight, r);

    r->ret = ret ? ret : null_injected_error(s, op, offset, bytes);
    if (s->records) {
        NullRecord rec = {
            .op = op, .offset = offset, .bytes = bytes, .flags = flags,
            .start_ns = clock_ns(),
        };
        g_array_append_val(s->records, rec);
        r->record = s->records->len;
    }

    src = bdrv_timer_new(s->latency_ns +
                         (s->jitter_ns ? g_rand_int_range(s->rand, 0,
                                         MIN(s->jitter_ns, G_MAXINT32)) : 0),
                         null_request_done, r);
    g_source_unref(src);
}

static void null_aio_preadv(BlockDriverState *bs, int64_t offset,
                            int64_t bytes, void *buf, BdrvRequestFlags flags,
                            BlockCompletionFunc *cb, void *opaque)
{
    memset(buf, 0, bytes);
    null_submit(bs, NULL_OP_READ, offset, bytes, flags, 0, cb, opaque);
}

static void null_aio_pwritev(BlockDriverState *bs, int64_t offset,
                             int64_t bytes, const void *buf,
                             BdrvRequestFlags flags,
                             BlockCompletionFunc *cb, void *opaque)
{
    null_submit(bs, NULL_OP_WRITE, offset, bytes, flags, 0, cb, opaque);
}

static void null_aio_pwrite_zeroes(BlockDriverState *bs, int64_t offset,
                                   int64_t bytes, BdrvRequestFlags flags,
                                   BlockCompletionFunc *cb, void *opaque)
{
    NullState *s = bs->opaque;

    if (!s->zeroes) {
        bdrv_complete_later(cb, opaque, -ENOTSUP);
        return;
    }
    null_submit(bs, NULL_OP_ZERO, offset, bytes, flags, 0, cb, opaque);
}

static void null_aio_pdiscard(BlockDriverState *bs, int64_t offset,
                              int64_t bytes, BlockCompletionFunc *cb,
                              void *opaque)
{
    null_submit(bs, NULL_OP_DISCARD, offset, bytes, 0, 0, cb, opaque);
}

static void null_aio_flush(BlockDriverState *bs, BlockCompletionFunc *cb,
                           void *opaque)
{
    null_submit(bs, NULL_OP_FLUSH, 0, 0, 0, 0, cb, opaque);
}

static void null_aio_block_status(BlockDriverState *bs, int64_t offset,
                                  int64_t bytes, GArray *extents,
                                  BlockCompletionFunc *cb, void *opaque)
{
    NullState *s = bs->opaque;
    int64_t end = offset + bytes;
    int64_t pos = offset;

    while (pos < end && extents->len < 1024) {
        BlockExtent e = { .offset = pos };
        bool data;
        int64_t next;

        switch (s->extents) {
        case NULL_EXTENTS_DATA:
            data = true;
            next = end;
            break;
        case NULL_EXTENTS_ZERO:
            data = false;
            next = end;
            break;
        default:
            data = (pos / s->run) % 2 == 0;
            next = MIN((pos / s->run + 1) * s->run, end);
            break;
        }
        e.length = next - pos;
        e.flags = data ? BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED
                       : BDRV_BLOCK_ZERO;
        g_array_append_val(extents, e);
        pos = next;
    }
    null_submit(bs, NULL_OP_STATUS, offset, bytes, 0, 0, cb, opaque);
}

void null_get_stats(BlockDriverState *bs, NullStats *stats)
{
    NullState *s = bs->opaque;

    g_assert(bs->drv == &bdrv_null);
    *stats = s->shared->stats;
}

void null_share_stats(BlockDriverState *bs, BlockDriverState *other)
{
    NullState *s = bs->opaque;
    NullState *o = other->opaque;

    g_assert(bs->drv == &bdrv_null && other->drv == &bdrv_null);
    g_assert(!s->in_flight);
    if (--s->shared->refcnt == 0) {
        g_free(s->shared);
    }
    s->shared = o->shared;
    s->shared->refcnt++;
}

GArray *null_get_records(BlockDriverState *bs)
{
    NullState *s = bs->opaque;

    g_assert(bs->drv == &bdrv_null);
    return s->records;
}

const BlockDriver bdrv_null = {
    .format_name        = "null",
    .instance_size      = sizeof(NullState),
    .recognize_spec     = null_recognize_spec,
    .open               = null_open,
    .close              = null_close,
    .get_length         = null_get_length,
    .refresh_limits     = null_refresh_limits,
    .aio_preadv         = null_aio_preadv,
    .aio_pwritev        = null_aio_pwritev,
    .aio_pwrite_zeroes  = null_aio_pwrite_zeroes,
    .aio_pdiscard       = null_aio_pdiscard,
    .aio_flush          = null_aio_flush,
    .aio_block_status   = null_aio_block_status,
};
