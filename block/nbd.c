/*
 * NBD client driver on libnbd: the driver table, open and close, limits
 * and `info`.  Opening parses the URI (block/nbd-uri.c), connects one
 * handle synchronously (the control path may block), reads the export's
 * size, flags and block size constraints, and when the server advertises
 * multi-conn opens up to "connections" handles (default: one per CPU, at
 * most 4; with the default count the others only when the server does not
 * answer an idle read within 2 ms, block/nbd-spread.c).  From then on
 * every handle is driven asynchronously by its GSource on the main loop
 * (block/nbd-source.c, block/nbd-io.c).
 *
 * Open options: connections=N (1..16), connect-timeout=SECS (0..86400,
 * default 10; 0: none), io-timeout=SECS (0..86400, default 600; 0: none),
 * reconnect-delay=SECS (0..86400, default 60; 0: none; the URI's
 * reconnect-delay= wins over it; block/nbd-reconnect.c).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/nbd-int.h"
#include "util/cutils.h"

#include <errno.h>
#include <unistd.h>

static bool nbdblk_recognize_spec(const char *spec)
{
    return nbdblk_spec_is_uri(spec);
}

int nbdblk_default_connections(void)
{
    return CLAMP((int)g_get_num_processors(), 1, 4);
}

/* The connections=N option, or the default count (*@asked false). */
static bool nbdblk_parse_connections(GHashTable *options, int *n,
                                     bool *asked, GError **errp)
{
    const char *v = g_hash_table_lookup(options, "connections");
    g_autoptr(GError) err = NULL;
    int64_t count;

    *n = nbdblk_default_connections();
    *asked = v != NULL;
    if (!v) {
        return true;
    }
    if (!parse_count("nbd: connections", v, 1, NBDBLK_MAX_CONNECTIONS,
                     &count, &err)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "%s",
                    err->message);
        return false;
    }
    *n = count;
    g_hash_table_remove(options, "connections");
    return true;
}

/* A timeout option NAME=SECS into *@secs, or @def. */
static bool nbdblk_parse_timeout(GHashTable *options, const char *name,
                                 int def, int *secs, GError **errp)
{
    const char *v = g_hash_table_lookup(options, name);
    g_autofree char *what = g_strdup_printf("nbd: %s", name);
    g_autoptr(GError) err = NULL;
    int64_t n;

    *secs = def;
    if (!v) {
        return true;
    }
    if (!parse_count(what, v, 0, NBDBLK_MAX_TIMEOUT, &n, &err)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "%s",
                    err->message);
        return false;
    }
    *secs = n;
    g_hash_table_remove(options, name);
    return true;
}

/* The TLS files named by the URI, checked before connecting. */
static bool nbdblk_check_tls_files(NbdBlkState *s, GError **errp)
{
    const NbdBlkUri *uri = s->uri;

    if (uri->tls_certificates &&
        !g_file_test(uri->tls_certificates, G_FILE_TEST_IS_DIR)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': tls-certificates '%s' is not a directory",
                    s->display, uri->tls_certificates);
        return false;
    }
    if (uri->tls_psk_file && access(uri->tls_psk_file, R_OK) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': tls-psk-file '%s': %s", s->display,
                    uri->tls_psk_file, g_strerror(errno));
        return false;
    }
    return true;
}

/* A block size constraint: 0 (none) or a power of 2 up to @max. */
static bool nbdblk_block_size(NbdBlkState *s, int which, const char *what,
                              int64_t max, uint32_t *out, GError **errp)
{
    int64_t v = nbd_get_block_size(s->conns[0].h, which);

    if (v < 0 || v > max || (v && which != LIBNBD_SIZE_MAXIMUM &&
                             !is_power_of_2(v))) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': the server advertises an invalid %s block size "
                    "(%" G_GINT64_FORMAT ")", s->display, what, v);
        return false;
    }
    *out = v;
    return true;
}

/* Size, flags and block size constraints of the first connection. */
static bool nbdblk_read_export(NbdBlkState *s, int flags, GError **errp)
{
    struct nbd_handle *h = s->conns[0].h;

    s->read_only = nbd_is_read_only(h) == 1;
    if (s->read_only && (flags & BDRV_O_RDWR)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': the NBD export is read-only", s->display);
        return false;
    }
    s->size = nbd_get_size(h);
    if (s->size < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN, "'%s': %s",
                    s->display, nbd_get_error());
        return false;
    }
    if (!nbdblk_block_size(s, LIBNBD_SIZE_MINIMUM, "minimum", 64 * KiB,
                           &s->min_block, errp) ||
        !nbdblk_block_size(s, LIBNBD_SIZE_PREFERRED, "preferred",
                           UINT32_MAX, &s->pref_block, errp) ||
        !nbdblk_block_size(s, LIBNBD_SIZE_MAXIMUM, "maximum", UINT32_MAX,
                           &s->max_block, errp)) {
        return false;
    }
    if (s->min_block && s->size % s->min_block) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "'%s': the export size %" G_GINT64_FORMAT " is not a "
                    "multiple of the minimum block size %u", s->display,
                    s->size, s->min_block);
        return false;
    }
    s->can_multi_conn = nbd_can_multi_conn(h) == 1;
    s->can_flush = nbd_can_flush(h) == 1;
    s->can_fua = nbd_can_fua(h) == 1;
    s->can_zero = nbd_can_zero(h) == 1;
    s->can_fast_zero = s->can_zero && nbd_can_fast_zero(h) == 1;
    s->can_trim = nbd_can_trim(h) == 1;
    s->can_status = nbd_can_meta_context(h,
                                         LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
    return true;
}

static void nbdblk_close(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    for (int i = 0; i < s->nr_conns; i++) {
        nbdblk_source_destroy(&s->conns[i]);
        nbdblk_sender_stop(&s->conns[i]);
    }
    for (int i = 0; i < s->nr_conns; i++) {
        nbdblk_conn_close(&s->conns[i]);
    }
    nbdblk_reconnect_stop(s, "the node was closed");
    for (int i = 0; i < s->nr_conns; i++) {
        g_free(s->conns[i].lost_why);
    }
    nbdblk_drop_requests(s);
    g_free(s->fail_reason);
    g_mutex_clear(&s->done_lock);
    g_free(s->probe_buf);
    nbdblk_uri_free(s->uri);
    g_free(s->display);
}

static bool nbdblk_open(BlockDriverState *bs, const char *spec, int flags,
                        GHashTable *options, GError **errp)
{
    NbdBlkState *s = bs->opaque;
    bool asked;
    int want;

    s->bs = bs;
    g_queue_init(&s->queued);
    g_queue_init(&s->done);
    g_mutex_init(&s->done_lock);
    s->display = nbdblk_uri_redact(spec);
    /* What `info`, `check`, QMP and messages show: no TLS user name. */
    g_free(bs->filename);
    bs->filename = g_strdup(s->display);
    s->uri = nbdblk_uri_parse(spec, errp);
    if (!s->uri || !nbdblk_parse_connections(options, &want, &asked, errp) ||
        !nbdblk_parse_timeout(options, "connect-timeout",
                              NBDBLK_DEFAULT_CONNECT_TIMEOUT,
                              &s->connect_timeout, errp) ||
        !nbdblk_parse_timeout(options, "io-timeout",
                              NBDBLK_DEFAULT_IO_TIMEOUT, &s->io_timeout,
                              errp) ||
        !nbdblk_parse_timeout(options, "reconnect-delay",
                              NBDBLK_DEFAULT_RECONNECT_DELAY,
                              &s->reconnect_delay, errp) ||
        !nbdblk_check_tls_files(s, errp)) {
        goto out_free;
    }
    if (s->uri->reconnect_delay >= 0) {
        s->reconnect_delay = s->uri->reconnect_delay;
    }
    s->conns[0].index = 0;
    if (!nbdblk_conn_connect(s, &s->conns[0], errp)) {
        goto out_free;
    }
    s->nr_conns = 1;
    if (!nbdblk_read_export(s, flags, errp)) {
        goto out_close;
    }
    s->nr_planned = s->can_multi_conn ? want : 1;
    nbdblk_spread_open(s, asked);
    for (int i = 0; i < s->nr_conns; i++) {
        nbdblk_source_attach(&s->conns[i]);
        if (s->latency_bound) {
            nbdblk_sender_start(&s->conns[i]);
        }
    }
    return true;

out_close:
    nbdblk_conn_close(&s->conns[0]);
    s->nr_conns = 0;
out_free:
    nbdblk_uri_free(s->uri);
    g_free(s->display);
    g_mutex_clear(&s->done_lock);
    return false;
}

static int64_t nbdblk_get_length(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    return s->size;
}

static void nbdblk_refresh_limits(BlockDriverState *bs, BlockLimits *bl)
{
    NbdBlkState *s = bs->opaque;
    int64_t align = s->min_block ? s->min_block : 1;
    int64_t max = NBDBLK_MAX_TRANSFER;

    if (s->max_block) {
        max = MIN(max, s->max_block);
    }
    bl->request_alignment = align;
    bl->max_transfer = MAX(QEMU_ALIGN_DOWN(max, align), align);
    bl->opt_transfer = MIN(s->pref_block, bl->max_transfer);
    /*
     * Copying from an NBD server, every byte is received into a buffer
     * and sent on from it: requests of nbdcopy's 256 KiB keep it in the
     * CPU caches in between, on our side and the server's (bench/nbd.sh
     * W1; bench/README.md).
     */
    bl->copy_transfer = MIN(MAX(NBDBLK_COPY_TRANSFER, bl->opt_transfer),
                            bl->max_transfer);
    bl->max_pwrite_zeroes = NBDBLK_MAX_LENGTH;
    bl->max_pdiscard = bl->max_pwrite_zeroes;
    bl->channels = s->nr_planned;
    /*
     * Per connection.  A latency-bound server's workers (nbdkit: 16 per
     * connection) sit out the latency with a request each; one more
     * queued behind each starts the moment it finishes, and more than
     * that only waits.  A server that answers within a millisecond needs
     * a few MiB in flight at a few GB/s; more only spreads the data over
     * more cache and more first touches, ours and its workers'
     * (bench/README.md, "The window follows the server").  Which of the
     * two is decided at open (nbd-spread.c).
     */
    bl->window_bytes = s->latency_bound ? NBDBLK_WINDOW_LATENCY
                                        : NBDBLK_WINDOW_FAST;
    bl->writes_off_loop = s->latency_bound;
}

/* The window of open (refresh_limits()): decided there for good. */
static int64_t nbdblk_get_window_bytes(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    return s->latency_bound ? NBDBLK_WINDOW_LATENCY : NBDBLK_WINDOW_FAST;
}

/*
 * The connections taking requests: a window sized for all of them against
 * a server that answers at once on one would only cost.
 */
static uint32_t nbdblk_get_active_channels(BlockDriverState *bs)
{
    return nbdblk_get_active_connections(bs);
}

static void nbdblk_info_add(GPtrArray *specific, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);

static void nbdblk_info_add(GPtrArray *specific, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_ptr_array_add(specific, g_strdup_vprintf(fmt, ap));
    va_end(ap);
}

static bool nbdblk_get_info(BlockDriverState *bs, BlockImageInfo *info,
                            GError **errp)
{
    NbdBlkState *s = bs->opaque;
    const NbdBlkUri *uri = s->uri;
    GPtrArray *sp = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *export = g_strescape(uri->export_name, NULL);

    info->actual_size = -1;
    info->cluster_size = 0;
    nbdblk_info_add(sp, "export: \"%s\"", export);
    if (uri->transport == NBDBLK_TRANSPORT_UNIX) {
        nbdblk_info_add(sp, "transport: unix (%s)", uri->socket);
    } else {
        nbdblk_info_add(sp, "transport: tcp (%s port %s)", uri->host,
                        uri->port);
    }
    nbdblk_info_add(sp, "tls: %s", uri->tls ? "yes" : "no");
    nbdblk_info_add(sp, "read-only: %s", s->read_only ? "yes" : "no");
    if (s->nr_conns < s->nr_planned) {
        nbdblk_info_add(sp, "connections: %d (up to %d)", s->nr_conns,
                        s->nr_planned);
    } else {
        nbdblk_info_add(sp, "connections: %d", s->nr_conns);
    }
    nbdblk_info_add(sp, "connections taking requests: %d",
                    nbdblk_get_active_connections(bs));
    nbdblk_info_add(sp, "latency-bound: %s",
                    s->latency_bound ? "yes (deep window)" : "no");
    nbdblk_info_add(sp, "multi-conn: %s", s->can_multi_conn ? "yes" : "no");
    nbdblk_info_add(sp, "block size: minimum %u, preferred %u, maximum %u "
                    "(0: not advertised)", s->min_block, s->pref_block,
                    s->max_block);
    nbdblk_info_add(sp, "features:%s%s%s%s%s%s",
                    s->can_flush ? " flush" : "", s->can_fua ? " fua" : "",
                    s->can_zero ? " zero" : "",
                    s->can_fast_zero ? " fast-zero" : "",
                    s->can_trim ? " trim" : "",
                    s->can_status ? " base:allocation" : "");
    if (s->nr_retired) {
        nbdblk_info_add(sp, "connections retired: %d (their requests, %"
                        G_GINT64_FORMAT ", went to the others)",
                        s->nr_retired, s->nr_retried);
    }
    if (s->nr_reconnects) {
        nbdblk_info_add(sp, "connections made again: %" G_GUINT64_FORMAT,
                        s->nr_reconnects);
    }
    if (s->dead_errno) {
        nbdblk_info_add(sp, "state: failed (%s)", s->fail_reason ?
                        s->fail_reason : g_strerror(s->dead_errno));
    } else if (nbdblk_reconnecting(s)) {
        nbdblk_info_add(sp, "state: reconnecting (%s)", s->rc.why);
    }
    if (info->specific) {
        g_ptr_array_unref(info->specific);
    }
    info->specific = sp;
    return true;
}

int nbdblk_get_connections(BlockDriverState *bs)
{
    NbdBlkState *s = bs->opaque;

    if (bs->drv != &bdrv_nbd) {
        return 0;
    }
    return s->nr_conns;
}

void nbdblk_get_counts(BlockDriverState *bs, unsigned *in_flight,
                       unsigned *queued)
{
    NbdBlkState *s = bs->opaque;

    g_assert(bs->drv == &bdrv_nbd);
    *in_flight = 0;
    for (int i = 0; i < s->nr_conns; i++) {
        *in_flight += s->conns[i].in_flight;
    }
    *queued = g_queue_get_length(&s->queued);
}

const BlockDriver bdrv_nbd = {
    .format_name        = "nbd",
    .instance_size      = sizeof(NbdBlkState),
    .recognize_spec     = nbdblk_recognize_spec,
    .open               = nbdblk_open,
    .close              = nbdblk_close,
    .get_length         = nbdblk_get_length,
    .refresh_limits     = nbdblk_refresh_limits,
    .get_active_channels = nbdblk_get_active_channels,
    .get_window_bytes   = nbdblk_get_window_bytes,
    .get_info           = nbdblk_get_info,
    .request_size       = sizeof(NbdBlkReq),
    .aio_submit         = nbdblk_aio_submit,
    .cancel_in_flight   = nbdblk_cancel_in_flight,
};
