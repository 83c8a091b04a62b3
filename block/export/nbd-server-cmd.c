/*
 * NBD server: transmission requests.
 *
 * Every request is checked before anything is allocated: magic (else the
 * connection is dropped: framing is lost), command, flags, read-only,
 * length, bounds, alignment (when the client agreed to our block sizes),
 * meta context.  A refused WRITE's payload is still read and dropped (up
 * to 64 MiB; beyond that the connection ends after the error reply).
 * Valid requests go to block/io.c; each completes on its own, so replies
 * leave in completion order.  Reads are answered with one data chunk
 * (structured replies) or a simple reply; errors with an error chunk
 * carrying a message, or a simple reply.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"
#include "util/cutils.h"

#include <errno.h>

uint16_t nbdsrv_cmd_transmission_flags(NbdClient *c, NbdExport *exp)
{
    uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH;

    /* One node: a flush covers every connection. */
    if (c->srv->max_clients > 1 || c->srv->multi_conn_always) {
        f |= NBD_FLAG_CAN_MULTI_CONN;
    }
    if (exp->read_only) {
        f |= NBD_FLAG_READ_ONLY;
    } else {
        f |= NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM |
             NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    if (c->structured) {
        f |= NBD_FLAG_SEND_DF;  /* reads always come in one chunk */
    }
    return f;
}

/* A positive errno as an NBD error value. */
static uint32_t nbdsrv_errno_to_nbd(int err)
{
    switch (err) {
    case EPERM:
    case EACCES:
    case EROFS:
        return NBD_EPERM;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
        return NBD_EINVAL;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

/* ---- replies ---- */

static void nbdsrv_reply_simple(NbdClient *c, uint64_t cookie, uint32_t err,
                                void *data, size_t len)
{
    uint8_t hdr[NBD_SIMPLE_REPLY_SIZE];

    nbdsrv_put32(hdr, NBD_MAGIC_SIMPLE_REPLY);
    nbdsrv_put32(hdr + 4, err);
    nbdsrv_put64(hdr + 8, cookie);
    nbdsrv_client_queue(c, hdr, sizeof(hdr), data, len, qemu_vfree);
}

/*
 * A final structured chunk: @extra (up to 12 bytes, copied) and @len bytes
 * of @data (owned, freed with @free_data) form its payload.
 */
static void nbdsrv_reply_chunk(NbdClient *c, uint64_t cookie, uint16_t type,
                               const void *extra, size_t extra_len,
                               void *data, size_t len,
                               GDestroyNotify free_data)
{
    uint8_t hdr[NBD_CHUNK_HEADER_SIZE + 12];

    g_assert(extra_len <= 12);
    nbdsrv_put32(hdr, NBD_MAGIC_STRUCTURED);
    nbdsrv_put16(hdr + 4, NBD_REPLY_FLAG_DONE);
    nbdsrv_put16(hdr + 6, type);
    nbdsrv_put64(hdr + 8, cookie);
    nbdsrv_put32(hdr + 16, extra_len + len);
    if (extra_len) {
        memcpy(hdr + NBD_CHUNK_HEADER_SIZE, extra, extra_len);
    }
    nbdsrv_client_queue(c, hdr, NBD_CHUNK_HEADER_SIZE + extra_len, data,
                        len, free_data);
}

/* Answer @h with the error @err (positive errno) and a message. */
static void nbdsrv_reply_error(NbdClient *c, const NbdRequestHeader *h,
                               int err, const char *why)
{
    c->srv->stats.errors++;
    if (c->structured) {
        g_autofree char *msg = g_strdup_printf("%s: %s", g_strerror(err),
                                               why);
        size_t len = MIN(strlen(msg), NBD_MAX_STRING);
        uint8_t extra[6];

        nbdsrv_put32(extra, nbdsrv_errno_to_nbd(err));
        nbdsrv_put16(extra + 4, len);
        nbdsrv_reply_chunk(c, h->cookie, NBD_REPLY_TYPE_ERROR, extra,
                           sizeof(extra), g_memdup2(msg, len), len, g_free);
    } else {
        nbdsrv_reply_simple(c, h->cookie, nbdsrv_errno_to_nbd(err), NULL,
                            0);
    }
}

static void nbdsrv_reply_read(NbdClient *c, NbdRequest *req)
{
    void *buf = g_steal_pointer(&req->buf);
    uint8_t off[8];

    if (!c->structured) {
        nbdsrv_reply_simple(c, req->h.cookie, 0, buf, req->h.len);
    } else if (!req->h.len) {
        nbdsrv_reply_chunk(c, req->h.cookie, NBD_REPLY_TYPE_NONE, NULL, 0,
                           NULL, 0, NULL);
    } else {
        nbdsrv_put64(off, req->h.offset);
        nbdsrv_reply_chunk(c, req->h.cookie, NBD_REPLY_TYPE_OFFSET_DATA,
                           off, sizeof(off), buf, req->h.len, qemu_vfree);
    }
}

/* base:allocation from our block status: no data stored means a hole
 * (as QEMU reports it: a raw file hole, an unallocated cluster). */
static uint32_t nbdsrv_status_flags(unsigned flags)
{
    return (flags & BDRV_BLOCK_DATA ? 0 : NBD_STATE_HOLE) |
           (flags & BDRV_BLOCK_ZERO ? NBD_STATE_ZERO : 0);
}

static void nbdsrv_reply_status(NbdClient *c, NbdRequest *req)
{
    NbdExport *exp = c->exp;
    GArray *ext = req->extents;
    bool one = req->h.flags & NBD_CMD_FLAG_REQ_ONE;
    uint64_t *len = g_new(uint64_t, NBDSRV_MAX_EXTENTS);
    uint32_t *state = g_new(uint32_t, NBDSRV_MAX_EXTENTS);
    uint64_t end = req->h.offset;
    unsigned n = 0;
    uint8_t *d, ctx[4];

    /* Merge runs of one state; REQ_ONE keeps the first run only. */
    for (guint i = 0; i < ext->len; i++) {
        BlockExtent *e = &g_array_index(ext, BlockExtent, i);
        uint32_t st = nbdsrv_status_flags(e->flags);

        if (n && state[n - 1] == st) {
            len[n - 1] += e->length;
            continue;
        }
        if (n == NBDSRV_MAX_EXTENTS || (one && n == 1)) {
            break;
        }
        len[n] = e->length;
        state[n++] = st;
    }
    /* A client that agreed to our minimum block size gets aligned
     * extents (the last may end at the unaligned end of the export). */
    for (unsigned i = 0; c->check_align && i < n; i++) {
        end += len[i];
        if (end % exp->min_block && end != exp->size) {
            if (i == 0) {
                len[0] = MIN(QEMU_ALIGN_UP(end, exp->min_block), exp->size) -
                         req->h.offset;
                state[0] = 0;   /* "allocated, contents unknown": safe */
                n = 1;
            } else {
                n = i;
            }
            break;
        }
    }
    d = g_malloc(8 * n);
    for (unsigned i = 0; i < n; i++) {
        g_assert(len[i] > 0 && len[i] <= UINT32_MAX);
        nbdsrv_put32(d + 8 * i, len[i]);
        nbdsrv_put32(d + 8 * i + 4, state[i]);
    }
    nbdsrv_put32(ctx, NBDSRV_META_BASE_ALLOCATION);
    nbdsrv_reply_chunk(c, req->h.cookie, NBD_REPLY_TYPE_BLOCK_STATUS, ctx,
                       sizeof(ctx), d, 8 * n, g_free);
    g_free(len);
    g_free(state);
}

/* ---- completions ---- */

static void nbdsrv_gate_next(NbdServer *srv);

/* @req is done with @ret (0 or -errno): answer it (if the client is still
 * there) and free it. */
static void nbdsrv_cmd_done(NbdRequest *req, int ret)
{
    NbdClient *c = req->client;
    NbdServer *srv = c->srv;
    bool gated = req->gated;

    if (gated) {
        srv->gate_bytes -= req->h.len;
    }

    if (c->closed) {
        /* Nobody to answer: the completion only releases memory. */
    } else if (ret < 0) {
        nbdsrv_reply_error(c, &req->h, -ret, "request failed");
    } else if (req->h.type == NBD_CMD_READ) {
        nbdsrv_reply_read(c, req);
    } else if (req->h.type == NBD_CMD_BLOCK_STATUS) {
        nbdsrv_reply_status(c, req);
    } else {
        nbdsrv_reply_simple(c, req->h.cookie, 0, NULL, 0);
    }
    nbdsrv_req_free(req);
    if (gated) {
        nbdsrv_gate_next(srv);
    }
}

static void nbdsrv_cmd_done_cb(void *opaque, int ret)
{
    nbdsrv_cmd_done(opaque, ret);
}

/* TRIM with FUA: a flush makes the discard durable. */
static void nbdsrv_cmd_trim_cb(void *opaque, int ret)
{
    NbdRequest *req = opaque;

    if (ret == 0 && (req->h.flags & NBD_CMD_FLAG_FUA) &&
        !req->client->closed) {
        NbdClient *c = req->client;

        bdrv_aio_submit(c->exp->bs, BDRV_OP_FLUSH, 0, 0, NULL,
                        nbdsrv_req_flags(c->srv), NULL, nbdsrv_cmd_done_cb,
                        req);
        return;
    }
    nbdsrv_cmd_done(req, ret);
}

/* ---- requests ---- */

/* 0 when @h may run, else a positive errno with the reason in *@why. */
static int nbdsrv_cmd_check(NbdClient *c, const NbdRequestHeader *h,
                            const char **why)
{
    NbdExport *exp = c->exp;
    uint16_t allowed = NBD_CMD_FLAG_FUA;    /* valid on any command */
    bool write_like = false;
    bool rw = h->type == NBD_CMD_READ || h->type == NBD_CMD_WRITE;

    switch (h->type) {
    case NBD_CMD_READ:
        allowed |= c->structured ? NBD_CMD_FLAG_DF : 0;
        break;
    case NBD_CMD_WRITE:
    case NBD_CMD_TRIM:
        write_like = true;
        break;
    case NBD_CMD_WRITE_ZEROES:
        allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        write_like = true;
        break;
    case NBD_CMD_FLUSH:
        break;
    case NBD_CMD_BLOCK_STATUS:
        allowed |= NBD_CMD_FLAG_REQ_ONE;
        break;
    default:
        *why = "unknown command";
        return EINVAL;
    }
    if (h->flags & ~allowed) {
        *why = "invalid command flags";
        return EINVAL;
    }
    if (write_like && exp->read_only) {
        *why = "the export is read-only";
        return EPERM;
    }
    if (rw && h->len > exp->max_block) {
        *why = "request larger than the maximum block size";
        return h->flags & NBD_CMD_FLAG_DF ? EOVERFLOW : EINVAL;
    }
    if (h->type == NBD_CMD_FLUSH) {
        *why = "flush with a nonzero offset or length";
        return h->offset || h->len ? EINVAL : 0;
    }
    if (h->offset > exp->size || h->len > exp->size - h->offset) {
        *why = "request beyond the end of the export";
        return h->type == NBD_CMD_WRITE || h->type == NBD_CMD_WRITE_ZEROES
               ? ENOSPC : EINVAL;
    }
    if (c->check_align && (h->offset % exp->min_block ||
                           (h->len % exp->min_block &&
                            h->offset + h->len != exp->size))) {
        *why = "request not aligned to the minimum block size";
        return EINVAL;
    }
    if (h->type == NBD_CMD_BLOCK_STATUS && !c->meta_base_alloc) {
        *why = "no meta context was selected";
        return EINVAL;
    }
    if (h->type == NBD_CMD_BLOCK_STATUS && !h->len) {
        *why = "block status of zero bytes";
        return EINVAL;
    }
    return 0;
}

/* ---- the gate (see NBDSRV_GATE_MAX) ---- */

/* Send a READ (its buffer allocated) or a complete WRITE to the block
 * layer. */
static void nbdsrv_gate_submit(NbdServer *srv, NbdRequest *req)
{
    const NbdRequestHeader *h = &req->h;
    BlockDriverState *bs = req->client->exp->bs;

    if (h->len > NBDSRV_GATE_MIN) {
        req->gated = true;
        srv->gate_bytes += h->len;
        req->client->gate_seq = ++srv->gate_seq;
    }
    if (h->type == NBD_CMD_READ) {
        bdrv_aio_pread(bs, h->offset, h->len, req->buf,
                       nbdsrv_req_flags(srv), nbdsrv_cmd_done_cb, req);
    } else {
        bdrv_aio_pwrite(bs, h->offset, h->len, req->buf,
                        (h->flags & NBD_CMD_FLAG_FUA ? BDRV_REQ_FUA : 0) |
                        nbdsrv_req_flags(srv),
                        nbdsrv_cmd_done_cb, req);
    }
}

static bool nbdsrv_gate_fits(NbdServer *srv, NbdRequest *req)
{
    return !srv->gate_bytes ||
           srv->gate_bytes + req->h.len <= NBDSRV_GATE_MAX;
}

/* Submit @req now, or queue it behind the gate. */
static void nbdsrv_gate(NbdServer *srv, NbdRequest *req)
{
    if (req->h.len <= NBDSRV_GATE_MIN ||
        (g_queue_is_empty(&srv->gate_wait) && nbdsrv_gate_fits(srv, req))) {
        nbdsrv_gate_submit(srv, req);
        return;
    }
    req->gate_link.data = req;
    g_queue_push_tail_link(&srv->gate_wait, &req->gate_link);
}

/* Let waiting requests through while they fit: each time the first one of
 * the connection that got one through longest ago. */
static void nbdsrv_gate_next(NbdServer *srv)
{
    while (!g_queue_is_empty(&srv->gate_wait)) {
        GList *best = srv->gate_wait.head;
        NbdRequest *req;

        for (GList *l = best->next; l; l = l->next) {
            NbdRequest *r = l->data, *b = best->data;

            if (r->client->gate_seq < b->client->gate_seq) {
                best = l;
            }
        }
        req = best->data;
        if (!nbdsrv_gate_fits(srv, req)) {
            return;
        }
        g_queue_unlink(&srv->gate_wait, best);
        nbdsrv_gate_submit(srv, req);
    }
}

void nbdsrv_cmd_drop_waiting(NbdClient *c)
{
    GList *l = c->srv->gate_wait.head;

    while (l) {
        NbdRequest *req = l->data;

        l = l->next;
        if (req->client == c) {
            g_queue_unlink(&c->srv->gate_wait, &req->gate_link);
            nbdsrv_req_free(req);   /* never submitted */
        }
    }
}

static BdrvRequestFlags nbdsrv_zero_flags(uint16_t flags)
{
    BdrvRequestFlags f = 0;

    if (!(flags & NBD_CMD_FLAG_NO_HOLE)) {
        f |= BDRV_REQ_MAY_UNMAP;
    }
    if (flags & NBD_CMD_FLAG_FUA) {
        f |= BDRV_REQ_FUA;
    }
    if (flags & NBD_CMD_FLAG_FAST_ZERO) {
        f |= BDRV_REQ_NO_FALLBACK;  /* -ENOTSUP rather than slow zeroes */
    }
    return f;
}

/* Send a checked request with a nonzero length to the block layer. */
static void nbdsrv_cmd_submit(NbdClient *c, NbdRequest *req)
{
    BlockDriverState *bs = c->exp->bs;
    BdrvRequestFlags prio = nbdsrv_req_flags(c->srv);
    const NbdRequestHeader *h = &req->h;

    switch (h->type) {
    case NBD_CMD_READ:
        req->buf = bdrv_blockalign(bs, h->len);
        nbdsrv_gate(c->srv, req);
        break;
    case NBD_CMD_WRITE:
        /* Submitted by nbdsrv_cmd_payload_done() */
        req->buf = bdrv_blockalign(bs, h->len);
        c->payload_req = req;
        c->payload_since_us = g_get_monotonic_time();
        c->rstate = NBDR_PAYLOAD;
        break;
    case NBD_CMD_TRIM:
        bdrv_aio_submit(bs, BDRV_OP_DISCARD, h->offset, h->len, NULL, prio,
                        NULL, nbdsrv_cmd_trim_cb, req);
        break;
    case NBD_CMD_WRITE_ZEROES:
        bdrv_aio_pwrite_zeroes(bs, h->offset, h->len,
                               nbdsrv_zero_flags(h->flags) | prio,
                               nbdsrv_cmd_done_cb, req);
        break;
    case NBD_CMD_BLOCK_STATUS:
        req->extents = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
        bdrv_aio_submit(bs, BDRV_OP_STATUS, h->offset, h->len, NULL, prio,
                        req->extents, nbdsrv_cmd_done_cb, req);
        break;
    default:
        g_assert_not_reached();
    }
}

bool nbdsrv_cmd_start(NbdClient *c, const NbdRequestHeader *h)
{
    NbdServer *srv = c->srv;
    const char *why = NULL;
    NbdRequest *req;
    uint64_t need;
    int err;

    if (h->magic != NBD_MAGIC_REQUEST) {
        nbdsrv_client_close(c, true);   /* framing is lost */
        return true;
    }
    if (h->type == NBD_CMD_DISC) {
        /* Answer what is in flight, then close. */
        nbdsrv_client_finish(c);
        return true;
    }
    err = nbdsrv_cmd_check(c, h, &why);
    need = !err && (h->type == NBD_CMD_READ || h->type == NBD_CMD_WRITE)
           ? h->len : 0;
    if (!nbdsrv_client_reserve(c, need)) {
        return false;
    }
    srv->stats.requests++;
    req = nbdsrv_req_new(c, h);
    req->held = need;

    if (err) {
        nbdsrv_reply_error(c, h, err, why);
        nbdsrv_req_free(req);
        if (h->type == NBD_CMD_WRITE && h->len > NBDSRV_MAX_SKIP) {
            nbdsrv_client_finish(c);    /* not worth reading */
        } else if (h->type == NBD_CMD_WRITE && h->len) {
            c->skip_left = h->len;
            c->skip_then = NBDSKIP_REQ_HEADER;
            c->payload_since_us = g_get_monotonic_time();
            c->rstate = NBDR_SKIP;
        }
        return true;
    }
    if (h->type == NBD_CMD_FLUSH) {
        bdrv_aio_submit(c->exp->bs, BDRV_OP_FLUSH, 0, 0, NULL,
                        nbdsrv_req_flags(srv), NULL, nbdsrv_cmd_done_cb,
                        req);
    } else if (!h->len) {
        nbdsrv_cmd_done(req, 0);        /* nothing to do */
    } else {
        nbdsrv_cmd_submit(c, req);
    }
    return true;
}

void nbdsrv_cmd_payload_done(NbdClient *c)
{
    NbdRequest *req = c->payload_req;

    c->payload_req = NULL;
    c->rstate = NBDR_REQ_HEADER;
    nbdsrv_gate(c->srv, req);
}
