/*
 * The null driver: a test double with latency, error injection, request
 * recording and invariant counters.  See block/null.h for the options.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block-int.h"
#include "block/fault-inject.h"
#include "block/null.h"
#include "util/cutils.h"

#include <errno.h>
#include <zlib.h>

typedef enum NullExtents {
    NULL_EXTENTS_DATA,
    NULL_EXTENTS_ZERO,
    NULL_EXTENTS_ALTERNATE,
    NULL_EXTENTS_SPARSE,
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
    int64_t max_zero;           /* BlockLimits.max_pwrite_zeroes */
    int64_t channels;           /* BlockLimits.channels */
    int64_t active_channels;    /* get_active_channels(); 0: all */
    int64_t active_after;       /* ... from this many bytes written */
    int64_t window_bytes;       /* BlockLimits.window_bytes */
    int64_t window_first;       /* get_window_bytes() before active_after;
                                 * 0: window_bytes */
    int64_t copy_transfer;      /* BlockLimits.copy_transfer */
    bool zeroes;
    NullExtents extents;
    int64_t run;                /* alternate run length; sparse: the
                                 * data run at the start of ... */
    int64_t period;             /* ... every period bytes */

    FaultRule fault;

    GArray *records;            /* NullRecord, or NULL */
    NullShared *shared;
    GList *in_flight;           /* BdrvRequest, this node only */
} NullState;

/* Per-request state (bdrv_req_priv()). */
typedef struct NullRequest {
    int ret;
    guint record;               /* index + 1 in records, or 0 */
} NullRequest;

static bool null_recognize_spec(const char *spec)
{
    return g_str_has_prefix(spec, "null:") || !strcmp(spec, "null");
}

static bool null_is_write_like(NullOp op)
{
    return op == NULL_OP_WRITE || op == NULL_OP_ZERO ||
           op == NULL_OP_DISCARD;
}

static bool null_parse_extents(NullState *s, GHashTable *opts, GError **errp)
{
    const char *v = g_hash_table_lookup(opts, "extents");

    s->extents = NULL_EXTENTS_DATA;
    if (!v || !strcmp(v, "data")) {
        /* default */
    } else if (!strcmp(v, "zero")) {
        s->extents = NULL_EXTENTS_ZERO;
    } else if (g_str_has_prefix(v, "sparse:")) {
        g_auto(GStrv) parts = g_strsplit(v + 7, ":", -1);

        s->extents = NULL_EXTENTS_SPARSE;
        if (g_strv_length(parts) != 2) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "null: extents '%s': expected sparse:DATA:PERIOD", v);
            return false;
        }
        if (!parse_size_range("null: extents=sparse PERIOD", parts[1], 1,
                              INT64_MAX, false, &s->period, errp) ||
            !parse_size_range("null: extents=sparse DATA", parts[0], 1,
                              s->period, false, &s->run, errp)) {
            return false;
        }
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
    if (!fault_opt_size(opts, "null", "size", GiB, &s->size, errp) ||
        !fault_opt_size(opts, "null", "latency-ns", 0, &s->latency_ns, errp) ||
        !fault_opt_size(opts, "null", "jitter-ns", 0, &s->jitter_ns, errp) ||
        !fault_opt_size(opts, "null", "align", 1, &align, errp) ||
        !fault_opt_size(opts, "null", "max-transfer", 0, &s->max_transfer, errp) ||
        !fault_opt_size(opts, "null", "max-zero", 0, &s->max_zero, errp) ||
        !fault_opt_size(opts, "null", "channels", 1, &s->channels, errp) ||
        !fault_opt_size(opts, "null", "active-channels", 0,
                        &s->active_channels, errp) ||
        !fault_opt_size(opts, "null", "active-channels-after", 0,
                        &s->active_after, errp) ||
        !fault_opt_size(opts, "null", "window", 0, &s->window_bytes, errp) ||
        !fault_opt_size(opts, "null", "window-first", 0, &s->window_first,
                        errp) ||
        !fault_opt_size(opts, "null", "copy-transfer", 0, &s->copy_transfer,
                        errp) ||
        !fault_opt_bool(opts, "null", "zeroes", true, &s->zeroes, errp) ||
        !fault_opt_bool(opts, "null", "record", false, &record, errp) ||
        !null_parse_extents(s, opts, errp) ||
        !fault_rule_parse(&s->fault, opts, "null", errp)) {
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
    fault_rule_clear(&s->fault);
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
    bl->max_pwrite_zeroes = QEMU_ALIGN_DOWN(s->max_zero, s->align);
    bl->channels = MIN(s->channels, 64);
    bl->copy_transfer = s->copy_transfer;
    bl->window_bytes = s->window_bytes;
}

/* Whether active-channels-after bytes were written. */
static bool null_after(NullState *s)
{
    return s->shared->stats.bytes[NULL_OP_WRITE] >= (uint64_t)s->active_after;
}

static uint32_t null_get_active_channels(BlockDriverState *bs)
{
    NullState *s = bs->opaque;
    bool now = s->active_channels && null_after(s);

    return MIN(now ? s->active_channels : s->channels, 64);
}

static int64_t null_get_window_bytes(BlockDriverState *bs)
{
    NullState *s = bs->opaque;

    return s->window_first && !null_after(s) ? s->window_first
                                             : s->window_bytes;
}

/* ---- requests ---- */

static gboolean null_request_done(gpointer data)
{
    BdrvRequest *req = data;
    NullRequest *r = bdrv_req_priv(req);
    NullState *s = req->bs->opaque;
    NullStats *st = &s->shared->stats;

    s->in_flight = g_list_remove(s->in_flight, req);
    st->in_flight--;
    if (req->op == BDRV_OP_READ || req->op == BDRV_OP_WRITE) {
        st->data_bytes_in_flight -= req->bytes;
    }
    if (r->record) {
        NullRecord *rec = &g_array_index(s->records, NullRecord,
                                         r->record - 1);
        rec->end_ns = clock_ns();
        rec->ret = r->ret;
    }
    bdrv_req_complete(req, r->ret);
    return G_SOURCE_REMOVE;
}

/* Account for a new request, check the contract, schedule completion. */
static void null_account(BlockDriverState *bs, BdrvRequest *req)
{
    NullState *s = bs->opaque;
    NullStats *st = &s->shared->stats;
    NullRequest *r = bdrv_req_priv(req);
    NullOp op = (NullOp)req->op;
    int64_t offset = req->offset;
    int64_t bytes = req->bytes;
    GSource *src;

    if (op != NULL_OP_FLUSH && op != NULL_OP_STATUS &&
        ((offset % s->align) ||
         ((offset + bytes) % s->align && offset + bytes != s->size) ||
         bytes <= 0 || offset + bytes > s->size ||
         (s->max_transfer && bytes > s->max_transfer &&
          (op == NULL_OP_READ || op == NULL_OP_WRITE)) ||
         (s->max_zero && bytes > s->max_zero && op == NULL_OP_ZERO))) {
        st->misaligned++;
    }
    if (null_is_write_like(op)) {
        for (GList *l = s->in_flight; l; l = l->next) {
            BdrvRequest *o = l->data;

            if (null_is_write_like((NullOp)o->op) &&
                o->offset < offset + bytes &&
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
    s->in_flight = g_list_prepend(s->in_flight, req);

    r->ret = fault_rule_check(&s->fault, (BdrvOp)op, offset, bytes);
    if (r->ret) {
        st->injected_errors++;
    }
    if (s->records) {
        NullRecord rec = {
            .op = op, .offset = offset, .bytes = bytes, .flags = req->flags,
            .start_ns = clock_ns(),
        };

        if (op == NULL_OP_WRITE) {
            rec.data_hash = null_data_hash(req->buf, bytes);
        }
        g_array_append_val(s->records, rec);
        r->record = s->records->len;
    }

    src = bdrv_timer_new(s->latency_ns +
                         (s->jitter_ns ? g_rand_int_range(s->rand, 0,
                                         MIN(s->jitter_ns, G_MAXINT32)) : 0),
                         null_request_done, req);
    g_source_unref(src);
}

/* The extents of [offset, offset + bytes) as the extents= option says. */
static void null_block_status(NullState *s, BdrvRequest *req)
{
    GArray *extents = req->extents;
    int64_t end = req->offset + req->bytes;
    int64_t pos = req->offset;

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
        case NULL_EXTENTS_SPARSE: {
            int64_t base = pos - pos % s->period;

            data = pos - base < s->run;
            next = MIN(data ? base + s->run : base + s->period, end);
            break;
        }
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
}

static void null_submit(BlockDriverState *bs, BdrvRequest *req)
{
    NullState *s = bs->opaque;

    switch (req->op) {
    case BDRV_OP_READ:
        memset(req->buf, 0, req->bytes);
        break;
    case BDRV_OP_ZERO:
        if (!s->zeroes) {
            bdrv_req_complete_later(req, -ENOTSUP);
            return;
        }
        break;
    case BDRV_OP_STATUS:
        null_block_status(s, req);
        break;
    default:
        break;
    }
    null_account(bs, req);
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

uint32_t null_data_hash(const void *buf, int64_t bytes)
{
    uLong crc = crc32(0, Z_NULL, 0);
    const Bytef *p = buf;

    while (bytes > 0) {
        uInt n = MIN(bytes, (int64_t)1 << 30);

        crc = crc32(crc, p, n);
        p += n;
        bytes -= n;
    }
    return crc;
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
    .get_active_channels = null_get_active_channels,
    .get_window_bytes   = null_get_window_bytes,
    .request_size       = sizeof(NullRequest),
    .aio_submit         = null_submit,
};
