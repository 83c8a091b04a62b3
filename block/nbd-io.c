/*
 * NBD client driver, data path: requests onto connections.
 *
 * A request goes to the live connection with the fewest requests in
 * flight (ties rotate) among those that take requests (nbd-spread.c), at
 * most NBDBLK_MAX_IN_FLIGHT per connection; the rest wait in s->queued,
 * first in first out, and start as others finish; except that a guest's
 * requests (BDRV_REQ_PRIO) and retried ones wait ahead of the others, in
 * their own order (nbdblk_queue_push()), in s->queued and in a
 * connection's send_queue alike.
 * Nothing here blocks.
 *
 * Each connection's sender thread (nbd-sender.c) hands its requests to
 * libnbd and writes them out; the main loop reads the replies
 * (nbd-source.c).  libnbd's completion callback only stores the result
 * and moves the request to s->done, under s->done_lock: it runs on the
 * main loop as replies are read, or on a sender thread when libnbd fails
 * commands there.  A dispatch of any connection's GSource then settles
 * s->done: follow-up commands (a flush after a write that needed FUA),
 * flush parts, slots, the queue, and last the upper completions.  All
 * else here is the main loop's.
 *
 * When one connection of several dies (the server dropped it, a proxy cut
 * it, or io-timeout found it stalled and shut it down), it is retired: it
 * takes no more requests, and what it had in flight is issued again on
 * the live ones (reads, writes, zeroes, trims, block status and flushes
 * may all be repeated: a write sent twice leaves the same bytes; a flush
 * on any connection of a multi-conn server covers the writes completed on
 * all of them), and made again in the background (nbd-reconnect.c).  When
 * the last one dies, the node holds its requests and reconnects for up to
 * reconnect-delay (nbd-reconnect.c).  When that is 0 or runs out, or
 * cancel_in_flight() shut the sockets, the whole node is dead: the other
 * sockets are shut down so their commands fail at once, queued requests
 * fail, and every later request fails with the same error (ENOTCONN,
 * ECANCELED, ETIMEDOUT when io-timeout shut the last one down, or EIO
 * when the server came back with another export).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"

#include <errno.h>
#include <string.h>

/* Set up @req (zeroed) for @op on [@offset, @offset + @bytes). */
static NbdBlkReq *nbdblk_req_init(NbdBlkReq *req, NbdBlkState *s,
                                  BdrvRequest *up, NbdBlkOp op,
                                  int64_t offset, int64_t bytes)
{
    req->s = s;
    req->up = up;
    req->op = op;
    req->offset = offset;
    req->bytes = bytes;
    req->link.data = req;
    return req;
}

/* Put @req on s->done (any thread). */
static void nbdblk_done_push(NbdBlkReq *req)
{
    NbdBlkState *s = req->s;

    g_mutex_lock(&s->done_lock);
    g_queue_push_tail_link(&s->done, &req->link);
    g_mutex_unlock(&s->done_lock);
}

bool nbdblk_done_pending(NbdBlkState *s)
{
    bool pending;

    g_mutex_lock(&s->done_lock);
    pending = !g_queue_is_empty(&s->done);
    g_mutex_unlock(&s->done_lock);
    return pending;
}

/* Finish @req with @ret from the next dispatch (never synchronously). */
static void nbdblk_req_done_later(NbdBlkReq *req, int ret)
{
    req->ret = ret;
    nbdblk_done_push(req);
}

/*
 * The request this thread is handing to libnbd (nbdblk_send()), and
 * whether its callback has run in the call: once the callback has queued
 * it, the request is the main loop's, and the caller must not look at it
 * again, not even at a field.
 */
static __thread NbdBlkReq *nbdblk_sending;
static __thread bool nbdblk_sending_done;

/* ---- libnbd callbacks: the handle lock is held, no nbd_* calls; on
 * the main loop or a sender thread ---- */

static int nbdblk_cmd_done(void *opaque, int *error)
{
    NbdBlkReq *req = opaque;

    if (req == nbdblk_sending) {
        nbdblk_sending_done = true;
    }
    req->ret = *error ? -*error : 0;
    nbdblk_conn_set_quiet(req->conn, clock_ns());
    nbdblk_spread_done(req);
    nbdblk_done_push(req);
    return 1;                   /* retire the command */
}

/* base:allocation -> BDRV_BLOCK_*: ZERO skips the read, HOLE alone does
 * not (an unallocated range need not read as zero). */
static unsigned nbdblk_status_flags(uint32_t state)
{
    if (state & LIBNBD_STATE_ZERO) {
        return BDRV_BLOCK_ZERO |
               (state & LIBNBD_STATE_HOLE ? 0 : BDRV_BLOCK_ALLOCATED);
    }
    if (state & LIBNBD_STATE_HOLE) {
        return BDRV_BLOCK_DATA;
    }
    return BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED;
}

static void nbdblk_add_extent(GArray *extents, guint first, int64_t offset,
                              int64_t length, unsigned flags)
{
    BlockExtent e = { .offset = offset, .length = length, .flags = flags };

    if (extents->len > first) {
        BlockExtent *last = &g_array_index(extents, BlockExtent,
                                           extents->len - 1);

        if (last->flags == flags && last->offset + last->length == offset) {
            last->length += length;
            return;
        }
    }
    g_array_append_val(extents, e);
}

static int nbdblk_extent_cb(void *opaque, const char *metacontext,
                            uint64_t offset, uint32_t *entries,
                            size_t nr_entries, int *error)
{
    NbdBlkReq *req = opaque;
    int64_t end = req->offset + req->bytes;
    int64_t pos = offset;

    if (strcmp(metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) ||
        req->status_seen || pos > req->offset) {
        return 0;
    }
    req->status_seen = true;
    /*
     * The extents are contiguous from the aligned start we asked for;
     * keep their parts inside [offset, end).  Nothing kept means the
     * reply was unusable: nbdblk_status_finish() reports data.
     */
    for (size_t i = 0; i + 1 < nr_entries && pos < end; i += 2) {
        int64_t from = MAX(pos, req->offset);
        int64_t to = MIN(pos + (int64_t)entries[i], end);

        if (entries[i] == 0) {
            break;
        }
        if (to > from) {
            nbdblk_add_extent(req->up->extents, req->first_extent, from,
                              to - from, nbdblk_status_flags(entries[i + 1]));
        }
        pos += entries[i];
    }
    return 0;
}

/* ---- issuing ---- */

void nbdblk_send(NbdBlkConn *c, NbdBlkReq *req)
{
    nbd_completion_callback done = {
        .callback = nbdblk_cmd_done,
        .user_data = req,
    };
    int64_t cookie = -1;

    nbdblk_sending = req;
    nbdblk_sending_done = false;
    switch (req->op) {
    case NBDBLK_OP_READ:
        cookie = nbd_aio_pread(c->h, req->up->buf, req->bytes, req->offset,
                               done, 0);
        break;
    case NBDBLK_OP_WRITE:
        cookie = nbd_aio_pwrite(c->h, req->up->buf, req->bytes,
                                req->offset, done, req->nbd_flags);
        break;
    case NBDBLK_OP_ZERO:
        cookie = nbd_aio_zero(c->h, req->bytes, req->offset, done,
                              req->nbd_flags);
        break;
    case NBDBLK_OP_TRIM:
        cookie = nbd_aio_trim(c->h, req->bytes, req->offset, done, 0);
        break;
    case NBDBLK_OP_FLUSH:
        cookie = nbd_aio_flush(c->h, done, 0);
        break;
    case NBDBLK_OP_STATUS: {
        nbd_extent_callback ext = {
            .callback = nbdblk_extent_cb,
            .user_data = req,
        };

        cookie = nbd_aio_block_status(c->h, req->status_len,
                                      req->status_start, ext, done, 0);
        break;
    }
    }
    nbdblk_sending = NULL;
    if (cookie < 0 && !nbdblk_sending_done) {
        /*
         * Refused before anything was queued: no callback will come.
         * libnbd 1.14 also fails a command it did queue when the kick
         * of its state machine finds the connection dead (a server gone
         * the moment a retried request goes out); then it has called
         * back already, in this call, and the request is on s->done.
         */
        int err = nbd_get_errno();

        if (nbd_aio_is_dead(c->h) == 1 || nbd_aio_is_closed(c->h) == 1) {
            /* libnbd says EINVAL (a handle in the wrong state): the
             * connection is gone, and the request may go elsewhere. */
            err = ENOTCONN;
        }
        nbdblk_req_done_later(req, -(err > 0 ? err : EIO));
    }
}

/* Hand @req to libnbd on @c: through its sender thread, or here when it
 * has none (a quick server's node). */
static void nbdblk_issue(NbdBlkConn *c, NbdBlkReq *req)
{
    req->conn = c;
    req->issued_ns = clock_ns();
    if (nbd_aio_in_flight(c->h) == 0) {
        /* the io-timeout starts */
        nbdblk_conn_set_quiet(c, req->issued_ns);
    }
    if (c->sender) {
        nbdblk_sender_push(c, req);
        return;
    }
    nbdblk_send(c, req);
    nbdblk_conn_check(c);
}

void nbdblk_queue_push(GQueue *q, NbdBlkReq *req)
{
    GList *l = NULL;

    if (req->ahead) {
        l = q->head;
        while (l && ((NbdBlkReq *)l->data)->ahead) {
            l = l->next;
        }
    }
    g_queue_insert_before_link(q, l, &req->link);   /* NULL: at the tail */
}

/* Start @req now on the least busy connection, or queue it. */
static void nbdblk_submit(NbdBlkState *s, NbdBlkReq *req)
{
    NbdBlkConn *c;

    if (s->dead_errno && !nbdblk_reconnect_revive(s)) {
        nbdblk_req_done_later(req, -s->dead_errno);
        return;
    }
    c = nbdblk_pick_conn(s);
    /* None while reconnecting (all dead otherwise sets dead_errno). */
    if (!c || !g_queue_is_empty(&s->queued) ||
        c->in_flight >= NBDBLK_MAX_IN_FLIGHT) {
        nbdblk_queue_push(&s->queued, req);
        return;
    }
    req->counted = true;
    c->in_flight++;
    nbdblk_issue(c, req);
}

void nbdblk_pump(NbdBlkState *s)
{
    while (!g_queue_is_empty(&s->queued) && !s->dead_errno) {
        NbdBlkConn *c = nbdblk_pick_conn(s);
        NbdBlkReq *req;

        if (!c || c->in_flight >= NBDBLK_MAX_IN_FLIGHT) {
            return;
        }
        req = g_queue_pop_head_link(&s->queued)->data;
        req->counted = true;
        c->in_flight++;
        nbdblk_issue(c, req);
    }
}

/* ---- death ---- */

void nbdblk_set_dead(NbdBlkState *s, int err)
{
    GList *l;

    if (s->dead_errno) {
        return;
    }
    s->dead_errno = s->cancelling ? ECANCELED : err;
    nbdblk_reconnect_stop(s, s->fail_reason ? s->fail_reason :
                          s->cancelling ? "cancelled" :
                          g_strerror(s->dead_errno));
    for (int i = 0; i < s->nr_conns; i++) {
        nbdblk_conn_abort(&s->conns[i]);
    }
    while ((l = g_queue_pop_head_link(&s->queued))) {
        nbdblk_req_done_later(l->data, -s->dead_errno);
    }
}

int64_t nbdblk_conn_stall_left(NbdBlkConn *c)
{
    NbdBlkState *s = c->s;

    if (!s->io_timeout || c->dead || !c->h || c->fail_errno ||
        nbd_aio_in_flight(c->h) <= 0) {
        return INT64_MAX;
    }
    return nbdblk_conn_quiet_since(c) +
           (int64_t)s->io_timeout * 1000 * 1000 * 1000 - clock_ns();
}

void nbdblk_conn_check(NbdBlkConn *c)
{
    NbdBlkState *s = c->s;
    int err = c->fail_errno ? c->fail_errno : ENOTCONN;
    int live = 0;

    if (c->dead || !c->h) {
        return;
    }
    if (nbd_aio_is_dead(c->h) != 1 && nbd_aio_is_closed(c->h) != 1) {
        return;
    }
    c->dead = true;
    /* What its sender thread still had fails now (to s->done): nothing
     * of this connection comes back after its requests are settled. */
    nbdblk_sender_stop(c);
    for (int i = 0; i < s->nr_conns; i++) {
        live += !s->conns[i].dead;
    }
    if (s->cancelling ||
        (live == 0 && !nbdblk_reconnect_begin(s, err, c->lost_why))) {
        nbdblk_set_dead(s, err);
        return;
    }
    /* Its requests come back failed; nbdblk_settle() issues them again,
     * or holds them while the node reconnects. */
    if (live > 0) {
        s->nr_retired++;
        g_debug("nbd: %s: connection %d died; %d left", s->display,
                c->index, live);
        nbdblk_reconnect_retired(s, c);
    }
}

/*
 * @req failed on a connection that died: issue it again on a live one
 * (the node is not dead: there is one, or it is reconnecting).  A flush
 * part goes out at once when a connection is live; the others (and all
 * of them while reconnecting) wait in @retry, ahead of the queue.
 */
static void nbdblk_retry(NbdBlkState *s, NbdBlkReq *req, GQueue *retry)
{
    if (req->counted) {
        req->conn->in_flight--;
        req->counted = false;
    }
    req->conn = NULL;
    req->ret = 0;
    req->ahead = true;
    s->nr_retried++;
    if (req->op == NBDBLK_OP_STATUS) {
        /* What the dead connection's reply added goes. */
        g_array_set_size(req->up->extents, req->first_extent);
        req->status_seen = false;
    }
    if (req->parent && nbdblk_pick_conn(s)) {
        nbdblk_issue(nbdblk_pick_conn(s), req);
        return;
    }
    g_queue_push_tail_link(retry, &req->link);
}

void nbdblk_drop_requests(NbdBlkState *s)
{
    GList *l;

    g_mutex_lock(&s->done_lock);
    while ((l = g_queue_pop_head_link(&s->queued)) ||
           (l = g_queue_pop_head_link(&s->done))) {
        NbdBlkReq *req = l->data;

        if (req->parent) {
            g_free(req);        /* a flush part; the others are io.c's */
        }
    }
    g_mutex_unlock(&s->done_lock);
}

/* ---- completion ---- */

/* A successful block status: make sure at least one extent is there. */
static void nbdblk_status_finish(NbdBlkReq *req)
{
    if (req->up->extents->len == req->first_extent) {
        /* No (usable) base:allocation answer: all of it is data. */
        nbdblk_add_extent(req->up->extents, req->first_extent, req->offset,
                          req->bytes,
                          BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
    }
}

/*
 * One request came back.  Either it needs another command (then it is
 * issued again), or it is a flush part, or it is finished: then it moves
 * to @finished.
 */
static void nbdblk_settle(NbdBlkState *s, NbdBlkReq *req, GQueue *finished,
                          GQueue *retry)
{
    NbdBlkReq *parent = req->parent;

    if (req->ret < 0 && req->conn) {
        /* It may have failed in a sender thread as its connection died,
         * before the main loop looked at that connection. */
        nbdblk_conn_check(req->conn);
    }
    if (req->ret == -ESHUTDOWN && req->conn && s->reconnect_delay &&
        !s->dead_errno) {
        /* NBD_ESHUTDOWN: the server is going away.  Its connection
         * takes nothing more and is shut down (the death is seen as
         * usual); the request waits for another one, or the reconnect. */
        NbdBlkConn *c = req->conn;

        if (!c->fail_errno) {
            c->fail_errno = ESHUTDOWN;
            g_free(c->lost_why);
            c->lost_why = g_strdup("the server is shutting down");
            nbdblk_conn_abort(c);
        }
        nbdblk_retry(s, req, retry);
        return;
    }
    if (req->ret < 0 && req->conn && req->conn->dead && !s->dead_errno) {
        nbdblk_retry(s, req, retry);
        return;
    }
    if (s->dead_errno && req->ret == -ENOTCONN) {
        req->ret = -s->dead_errno;      /* ECANCELED, ETIMEDOUT */
    }
    if (req->flush_after && req->ret == 0) {
        /* The write is done; now the flush that makes it durable, on the
         * same connection and in the same slot. */
        req->flush_after = false;
        req->op = NBDBLK_OP_FLUSH;
        if (s->dead_errno) {
            req->ret = -s->dead_errno;
        } else {
            nbdblk_issue(req->conn, req);
            return;
        }
    }
    if (req->counted) {
        req->conn->in_flight--;
        req->counted = false;
    }
    if (parent) {
        if (req->ret < 0 && parent->ret == 0) {
            parent->ret = req->ret;
        }
        g_free(req);
        if (--parent->parts == 0) {
            g_queue_push_tail_link(finished, &parent->link);
        }
        return;
    }
    if (req->op == NBDBLK_OP_STATUS && req->ret == 0) {
        nbdblk_status_finish(req);
    }
    g_queue_push_tail_link(finished, &req->link);
}

void nbdblk_process_done(NbdBlkState *s)
{
    GQueue finished = G_QUEUE_INIT;
    GQueue retry = G_QUEUE_INIT;
    GQueue done;
    GList *l;

    for (;;) {
        g_mutex_lock(&s->done_lock);
        done = s->done;
        g_queue_init(&s->done);
        g_mutex_unlock(&s->done_lock);
        if (g_queue_is_empty(&done)) {
            break;
        }
        while ((l = g_queue_pop_head_link(&done))) {
            nbdblk_settle(s, l->data, &finished, &retry);
        }
    }
    /* Requests of a retired connection go first, in their order. */
    while ((l = g_queue_pop_tail_link(&retry))) {
        g_queue_push_head_link(&s->queued, l);
    }
    nbdblk_pump(s);

    /*
     * Upper completions last, from a local list: one of them may close
     * the node (once nothing else is in flight), so @s is not touched
     * after the loop starts.
     */
    while ((l = g_queue_pop_head_link(&finished))) {
        NbdBlkReq *req = l->data;

        bdrv_req_complete(req->up, req->ret);
    }
}

/* ---- the driver's data path members ---- */

/* FUA: the server's flag when it has one, else write then flush. */
static void nbdblk_set_fua(NbdBlkState *s, NbdBlkReq *req,
                           BdrvRequestFlags flags)
{
    if (!(flags & BDRV_REQ_FUA)) {
        return;
    }
    if (s->can_fua) {
        req->nbd_flags |= LIBNBD_CMD_FLAG_FUA;
    } else if (s->can_flush) {
        req->flush_after = true;
    }
}

/* Flush every connection; the flush is done when all parts are. */
static void nbdblk_flush(NbdBlkState *s, NbdBlkReq *req)
{
    if (!s->can_flush || s->dead_errno) {
        nbdblk_req_done_later(req, s->dead_errno ? -s->dead_errno : 0);
        return;
    }
    if (nbdblk_reconnecting(s)) {
        /* Held like the rest, one part: after the reconnect's own flush
         * it goes out behind the writes held before it. */
        NbdBlkReq *part = nbdblk_req_init(g_new0(NbdBlkReq, 1), s, NULL,
                                          NBDBLK_OP_FLUSH, 0, 0);

        part->parent = req;
        part->ahead = req->ahead;
        req->parts = 1;
        nbdblk_queue_push(&s->queued, part);
        return;
    }
    /* Parts hold no slot: a flush must not wait behind a full queue. */
    req->parts = 1;
    for (int i = 0; i < s->nr_conns && !s->dead_errno; i++) {
        NbdBlkReq *part;

        if (s->conns[i].dead) {
            continue;
        }
        part = nbdblk_req_init(g_new0(NbdBlkReq, 1), s, NULL,
                               NBDBLK_OP_FLUSH, 0, 0);
        part->parent = req;
        req->parts++;
        nbdblk_issue(&s->conns[i], part);
    }
    /* Drop the guard part: when every part failed or finished before
     * this line (they only finish from a dispatch), complete now. */
    if (--req->parts == 0) {
        nbdblk_req_done_later(req, s->dead_errno ? -s->dead_errno : 0);
    }
}

static void nbdblk_block_status(NbdBlkState *s, NbdBlkReq *req)
{
    int64_t align = s->min_block ? s->min_block : 1;
    int64_t offset = req->offset;
    int64_t end;

    req->first_extent = req->up->extents->len;
    if (!s->can_status) {
        nbdblk_status_finish(req);
        nbdblk_req_done_later(req, 0);
        return;
    }
    /* The server wants aligned ranges of at most 32 bits. */
    req->status_start = QEMU_ALIGN_DOWN(offset, align);
    end = MIN(QEMU_ALIGN_UP(offset + req->bytes, align), s->size);
    req->status_len = MIN(end - req->status_start, NBDBLK_MAX_LENGTH);
    req->bytes = MIN(offset + req->bytes,
                     req->status_start + req->status_len) - offset;
    nbdblk_submit(s, req);
}

void nbdblk_aio_submit(BlockDriverState *bs, BdrvRequest *breq)
{
    static const NbdBlkOp ops[] = {
        [BDRV_OP_READ] = NBDBLK_OP_READ,
        [BDRV_OP_WRITE] = NBDBLK_OP_WRITE,
        [BDRV_OP_ZERO] = NBDBLK_OP_ZERO,
        [BDRV_OP_DISCARD] = NBDBLK_OP_TRIM,
        [BDRV_OP_FLUSH] = NBDBLK_OP_FLUSH,
        [BDRV_OP_STATUS] = NBDBLK_OP_STATUS,
    };
    NbdBlkState *s = bs->opaque;
    BdrvRequestFlags flags = breq->flags;
    NbdBlkReq *req = nbdblk_req_init(bdrv_req_priv(breq), s, breq,
                                     ops[breq->op], breq->offset,
                                     breq->bytes);

    req->ahead = flags & BDRV_REQ_PRIO;
    switch (breq->op) {
    case BDRV_OP_READ:
        break;
    case BDRV_OP_WRITE:
        nbdblk_set_fua(s, req, flags);
        break;
    case BDRV_OP_ZERO:
        if (!s->can_zero ||
            ((flags & BDRV_REQ_NO_FALLBACK) && !s->can_fast_zero)) {
            /* io.c writes zero buffers instead (unless NO_FALLBACK). */
            nbdblk_req_done_later(req, -ENOTSUP);
            return;
        }
        if (flags & BDRV_REQ_NO_FALLBACK) {
            req->nbd_flags |= LIBNBD_CMD_FLAG_FAST_ZERO;
        }
        if (!(flags & BDRV_REQ_MAY_UNMAP)) {
            req->nbd_flags |= LIBNBD_CMD_FLAG_NO_HOLE;
        }
        nbdblk_set_fua(s, req, flags);
        break;
    case BDRV_OP_DISCARD:
        if (!s->can_trim) {
            nbdblk_req_done_later(req, 0);      /* discard is advisory */
            return;
        }
        break;
    case BDRV_OP_FLUSH:
        nbdblk_flush(s, req);
        return;
    case BDRV_OP_STATUS:
        nbdblk_block_status(s, req);
        return;
    }
    nbdblk_submit(s, req);
}

void nbdblk_cancel_in_flight(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    s->cancelling = true;
    nbdblk_set_dead(s, ECANCELED);
}
