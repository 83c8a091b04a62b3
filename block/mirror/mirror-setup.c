/*
 * Setting up a mirror job and looking at it: parameter checks and
 * defaults, creation, the counters behind query-block-jobs, attaching the
 * mirror-top filter, changing the copy mode.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-int.h"
#include "block/mirror/mirror-top.h"

#include <errno.h>
#include <inttypes.h>

static MirrorJob *mirror_job(Job *job)
{
    return container_of(job, MirrorJob, common);
}

bool mirror_check_params(BlockDriverState *src, BlockDriverState *dst,
                         const MirrorParams *p, int64_t granularity,
                         int64_t chunk, int64_t buf_size, int max_in_flight,
                         GError **errp)
{
    int64_t src_len = bdrv_getlength(src);
    int64_t dst_len = bdrv_getlength(dst);

    if (src == dst) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Can't mirror node into itself");
        return false;
    }
    if (!bdrv_is_writable(dst)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Target '%s' is read-only", bdrv_get_filename(dst));
        return false;
    }
    if (dst_len < src_len || (dst_len != src_len && !p->allow_larger_target)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Source and target image have different sizes "
                    "(%" PRId64 " and %" PRId64 " bytes)", src_len, dst_len);
        return false;
    }
    if (granularity < MIRROR_MIN_GRANULARITY ||
        granularity > MIRROR_MAX_GRANULARITY) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'granularity' expects a value in range "
                    "[512B, 64MB]");
        return false;
    }
    if (!is_power_of_2(granularity)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'granularity' expects a power of 2");
        return false;
    }
    if (chunk < MIRROR_MIN_CHUNK_SIZE || chunk > MIRROR_MAX_CHUNK_SIZE ||
        !is_power_of_2(chunk)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'chunk-size' expects a power of 2 in range "
                    "[4KB, 64MB]");
        return false;
    }
    if (buf_size < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Invalid parameter 'buf-size'");
        return false;
    }
    if (max_in_flight < 1 || max_in_flight > MIRROR_MAX_IN_FLIGHT_LIMIT) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'max-in-flight' expects a value in range "
                    "[1, %d]", MIRROR_MAX_IN_FLIGHT_LIMIT);
        return false;
    }
    if (!job_check_speed(p->speed, errp) ||
        !mirror_check_converge_ms(p->auto_converge_ms ?
                                  p->auto_converge_ms :
                                  MIRROR_CONVERGE_DEFAULT_MS, errp) ||
        !mirror_check_converge_passes(p->auto_converge_passes, errp)) {
        return false;
    }
    /* As qemu-img's -S: any multiple of 512 (its sectors) up to 16 MiB. */
    if (p->sparse_size < 0 || p->sparse_size % 512 ||
        p->sparse_size > MIRROR_MAX_SPARSE_SIZE) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Parameter 'sparse-size' expects a multiple of 512 up "
                    "to 16MB");
        return false;
    }
    return true;
}

/* The largest power of 2 not above @n (n > 0). */
static int64_t mirror_pow2_floor(int64_t n)
{
    return INT64_C(1) << (63 - __builtin_clzll((uint64_t)n));
}

static int64_t mirror_default_granularity(BlockDriverState *dst)
{
    int64_t cs = bdrv_get_cluster_size(dst);

    if (cs <= 0) {
        return 64 * KiB;
    }
    return MIN(MAX(cs, 4 * KiB), 64 * KiB);
}

/*
 * The default chunk-size: QEMU's 1 MiB, or less where the source's driver
 * prefers smaller copy operations (NBD: bdrv_get_copy_transfer()).
 */
static int64_t mirror_default_chunk(BlockDriverState *src)
{
    int64_t pref = bdrv_get_copy_transfer(src);

    if (pref <= 0 || !is_power_of_2(pref)) {
        return MIRROR_DEFAULT_CHUNK_SIZE;
    }
    return MIN(MAX(pref, MIRROR_MIN_CHUNK_SIZE), MIRROR_DEFAULT_CHUNK_SIZE);
}

/* What either end asks for per channel (@a, @b), at most
 * MIRROR_MAX_WINDOW_BYTES; 0 when neither asks. */
static int64_t mirror_asked_unit(int64_t a, int64_t b)
{
    int64_t asked = MAX(a, b);

    return asked > 0 ? MIN(asked, MIRROR_MAX_WINDOW_BYTES) : 0;
}

void mirror_window_refresh(MirrorJob *s)
{
    int ch = MIN(MAX(bdrv_get_active_channels(s->src),
                     bdrv_get_active_channels(s->dst)),
                 MIRROR_MAX_WINDOW_CHANNELS);
    int64_t unit = s->win_unit_bytes;

    if (s->win_asked) {
        unit = mirror_asked_unit(bdrv_get_window_bytes(s->src),
                                 bdrv_get_window_bytes(s->dst));
    }
    if (ch == s->win_channels && unit == s->win_unit_bytes) {
        return;
    }
    s->win_channels = ch;
    if (s->win_asked) {
        s->win_unit_bytes = unit;
        s->win_unit_ops = MAX(unit / s->win_op_size, 1);
    }
    s->win_buf_size = s->buf_size;
    if (s->win_unit_bytes) {
        s->win_buf_size = MIN(MAX(QEMU_ALIGN_UP(s->win_unit_bytes * ch,
                                                s->granularity),
                                  s->buf_elem_size),
                              s->buf_size);
    }
    s->win_max_bufs = MAX(1, s->win_buf_size / s->buf_elem_size);
    s->win_max_in_flight = s->win_unit_ops
                           ? MIN(s->win_unit_ops * ch, s->max_in_flight)
                           : s->max_in_flight;
    g_debug("mirror: window for %d channel(s): %d operations, %" PRId64
            " bytes", ch, s->win_max_in_flight, s->win_buf_size);
}

Job *mirror_job_new(const char *id, BlockDriverState *src,
                    BlockDriverState *dst, const MirrorParams *p,
                    GError **errp)
{
    MirrorJob *s;
    int64_t granularity = p->granularity ? p->granularity
                                         : mirror_default_granularity(dst);
    int64_t chunk = p->chunk_size ? p->chunk_size : mirror_default_chunk(src);
    /*
     * The default window grows with the channels of either end: each NBD
     * connection has its own server workers (nbdkit: 16), and a window of
     * 16 requests spread over two connections left a 10 ms-latency target
     * waiting (bench/nbd.sh W2: 0.96 s against 0.72 s with 32).  Per
     * channel it is QEMU's 16 MiB, or what an end asks for
     * (window_bytes) when neither buf-size nor max-in-flight was given:
     * one given keeps the other at QEMU's.  These are its largest, from
     * the most the ends may ask for; it follows the channels taking
     * requests and what they ask for now (mirror_window_refresh()).
     */
    int64_t asked = mirror_asked_unit(bdrv_get_max_window_bytes(src),
                                      bdrv_get_max_window_bytes(dst));
    bool use_asked = asked && !p->buf_size && !p->max_in_flight;
    int64_t unit = use_asked ? asked : MIRROR_DEFAULT_BUF_SIZE;
    /* At most 4 channels' worth, and at most MIRROR_MAX_WINDOW_BYTES. */
    int channels = MIN(MIN(MAX(bdrv_get_channels(src),
                               bdrv_get_channels(dst)),
                           MIRROR_MAX_WINDOW_CHANNELS),
                       MAX(MIRROR_MAX_WINDOW_BYTES / unit, 1));
    int64_t unit_bytes = p->buf_size ? 0 : unit;
    /* As many operations as fill it; 16 for QEMU's 16 MiB of 1 MiB ones.
     * Smaller default operations: more of them, the same bytes. */
    int64_t op_size = p->chunk_size ? MIRROR_DEFAULT_CHUNK_SIZE : chunk;
    int unit_ops = p->max_in_flight ? 0 : MAX(unit / op_size, 1);
    int64_t buf_size = p->buf_size ? p->buf_size : unit_bytes * channels;
    int max_in_flight = p->max_in_flight ? p->max_in_flight
                                         : unit_ops * channels;

    if (!mirror_check_params(src, dst, p, granularity, chunk, buf_size,
                             max_in_flight, errp)) {
        return NULL;
    }

    s = (MirrorJob *)job_create(&mirror_job_driver, sizeof(MirrorJob), id);
    s->src = bdrv_ref(src);
    s->dst = bdrv_ref(dst);
    s->len = bdrv_getlength(src);
    s->len_dst = bdrv_getlength(dst);
    s->sync = p->sync;
    s->granularity = granularity;
    s->chunk_size = chunk;
    s->max_in_flight = max_in_flight;
    s->on_source_error = p->on_source_error;
    s->on_target_error = p->on_target_error;
    s->copy_mode = p->copy_mode;
    s->in_order = p->in_order;
    s->auto_complete = p->auto_complete;
    s->sparse_size = p->sparse_size;
    s->allocate_zeroes = p->allocate_zeroes;
    s->compress = p->compress;
    s->auto_converge = p->auto_converge;
    s->auto_converge_ms = p->auto_converge_ms;
    s->auto_converge_passes = p->auto_converge_passes;
    if (p->compress && bdrv_get_cluster_size(dst) > 0) {
        /* A compressed write covers whole clusters: so do operations and
         * the data pieces between zero runs. */
        int64_t cs = bdrv_get_cluster_size(dst);

        s->granularity = granularity = MAX(granularity, cs);
        s->chunk_size = chunk = MAX(chunk, cs);
        if (s->sparse_size) {
            s->sparse_size = QEMU_ALIGN_UP(s->sparse_size, cs);
        }
    }
    if (s->sparse_size) {
        /*
         * Pieces of data and zeroes end on multiples of the largest power
         * of 2 in sparse-size, or of the target's request alignment when
         * that is larger, so that no write needs a read-modify-write: as
         * qemu-img convert (its s->alignment).
         */
        s->sparse_align = MAX(mirror_pow2_floor(s->sparse_size),
                              (int64_t)bdrv_get_request_alignment(dst));
        /*
         * Each operation is scanned on its own, and one all of zeroes is
         * a zero write: operations as long as sparse-size at least (as a
         * buffer of qemu-img's, 2 MiB, covers its -S up to that), so that
         * the runs left as data between them are the ones shorter than
         * sparse-size, whatever the chunk-size.
         */
        s->chunk_size = chunk = MAX(chunk, QEMU_ALIGN_UP(s->sparse_size,
                                                         granularity));
    }
    s->target_zero = p->target_is_zero || bdrv_has_zero_init(dst);

    /* One buffer holds one operation: at least one granule. */
    s->buf_elem_size = MAX(chunk, granularity);
    s->buf_size = MAX(QEMU_ALIGN_UP(buf_size, granularity), s->buf_elem_size);
    s->max_bufs = MAX(1, s->buf_size / s->buf_elem_size);
    s->buf_align = MAX(MAX(bdrv_get_mem_alignment(src),
                           bdrv_get_mem_alignment(dst)), 4096);
    /* Only the buffers the window uses are ever touched. */
    s->bufs = buf_pool_new(s->buf_elem_size, s->max_bufs, s->buf_align);
    s->win_unit_bytes = unit_bytes;
    s->win_unit_ops = unit_ops;
    s->win_asked = use_asked;
    s->win_op_size = op_size;
    mirror_window_refresh(s);
    /*
     * Between two in-memory files a COPY is one pool job that reads and
     * writes (bdrv_aio_copy); views stay for the other cases, where they
     * save a copy (an NBD target sends from the view).  Not in order, nor
     * compressed: those writes wait for the main loop.
     */
    s->fuse = !s->in_order && !s->compress && bdrv_can_copy(src, dst);
    s->map_src = !s->fuse && bdrv_can_map(src);
    g_queue_init(&s->ops);
    g_queue_init(&s->order);
    g_queue_init(&s->active_waiting);
    g_queue_init(&s->active_ops);
    s->common.speed = p->speed;
    ratelimit_set_speed(&s->limit, p->speed, RATELIMIT_SLICE_NS);
    return &s->common;
}

void mirror_get_stats(Job *job, MirrorStats *st)
{
    MirrorJob *s = mirror_job(job);
    int64_t now = clock_ns();

    *st = (MirrorStats) {
        .len = s->len,
        .bytes_copied = s->stats_copied,
        .bytes_zeroed = s->stats_zeroed,
        .bytes_skipped = s->stats_skipped,
        .dirty_bytes = s->dirty ? dirty_bitmap_count(s->dirty) : s->len,
        .in_flight_bytes = s->op_bytes_in_flight,
        .in_flight = s->in_flight,
        .granularity = s->granularity,
        .chunk_size = s->chunk_size,
        .buf_size = s->win_buf_size,
        .max_in_flight = s->win_max_in_flight,
        .dirty_rate = s->dirty ? dirty_bitmap_rate(s->dirty, now) : 0,
        .copy_rate = rate_meter_get(&s->copy_rate, now),
        .eta_ms = -1,
        .io_status = s->iostatus_nospace ? "nospace" :
                     s->iostatus_failed ? "failed" : "ok",
        .copy_mode = s->copy_mode,
        .passes = s->passes,
        .errors = s->errors,
    };
    st->in_sync = s->dirty && st->dirty_bytes == 0 && st->in_flight == 0;
    st->actively_synced = s->actively_synced;
    if (st->in_sync) {
        st->eta_ms = 0;
    } else if (st->copy_rate > st->dirty_rate) {
        st->eta_ms = (st->dirty_bytes + st->in_flight_bytes) * 1000.0 /
                     (st->copy_rate - st->dirty_rate);
    }
}

void mirror_job_set_top(Job *job, BlockDriverState *top)
{
    MirrorJob *s = mirror_job(job);

    g_assert(job->status == JOB_STATUS_CREATED);
    g_assert(mirror_top_child(top) == s->src);
    s->top = top;
    mirror_top_set_job(top, job);
}

bool mirror_change_copy_mode(Job *job, MirrorCopyMode mode, GError **errp)
{
    MirrorJob *s = mirror_job(job);

    if (!job_apply_verb(job, JOB_VERB_CHANGE, errp)) {
        return false;
    }
    if (mode == s->copy_mode) {
        return true;
    }
    if (mode != MIRROR_COPY_MODE_WRITE_BLOCKING) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Change to copy mode 'background' is not implemented");
        return false;
    }
    /* From now on guest writes through the filter are mirrored at once;
     * what is dirty already is copied in the background. */
    s->copy_mode = mode;
    s->actively_synced = false;
    mirror_kick(s);
    return true;
}

const char *mirror_get_error_detail(Job *job)
{
    return mirror_job(job)->error_detail;
}
