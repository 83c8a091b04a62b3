/*
 * Setting up a mirror job: the parameters' defaults, resolved from the
 * two nodes, their checks, and the creation of the job with its parts.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-core.h"
#include "block/mirror/mirror-plan.h"

#include <inttypes.h>

void mirror_params_init(MirrorParams *p)
{
    *p = (MirrorParams) {
        .sync = MIRROR_SYNC_MODE_FULL,
        .copy_mode = MIRROR_COPY_MODE_BACKGROUND,
        .on_source_error = BLOCKDEV_ON_ERROR_REPORT,
        .on_target_error = BLOCKDEV_ON_ERROR_REPORT,
        .guest_priority = true,
        .min_copy_rate = MIRROR_DEFAULT_MIN_COPY_RATE,
    };
}

/* Validate the resolved parameters and the two nodes. */
static bool mirror_check_params(BlockDriverState *src, BlockDriverState *dst,
                                const MirrorParams *p, int64_t granularity,
                                int64_t chunk, int64_t buf_size,
                                int max_in_flight, GError **errp)
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

/*
 * The configuration from @p, whose granularity and chunk-size are
 * resolved already (@granularity, @chunk); *@sparse_size: the
 * sparse-size the operations are scanned with.
 */
static void mirror_resolve_config(MirrorConfig *cfg, BlockDriverState *src,
                                  BlockDriverState *dst,
                                  const MirrorParams *p, int64_t granularity,
                                  int64_t chunk, int64_t *sparse_size)
{
    int64_t cs = bdrv_get_cluster_size(dst);

    *cfg = (MirrorConfig) {
        .len = bdrv_getlength(src),
        .sync = p->sync,
        .on_source_error = p->on_source_error,
        .on_target_error = p->on_target_error,
        .in_order = p->in_order,
        .auto_complete = p->auto_complete,
        .allocate_zeroes = p->allocate_zeroes,
        .compress = p->compress,
        .target_zero = p->target_is_zero || bdrv_has_zero_init(dst),
    };
    *sparse_size = p->sparse_size;
    if (p->compress && cs > 0) {
        /* A compressed write covers whole clusters: so do operations and
         * the data pieces between zero runs. */
        granularity = MAX(granularity, cs);
        chunk = MAX(chunk, cs);
        if (*sparse_size) {
            *sparse_size = QEMU_ALIGN_UP(*sparse_size, cs);
        }
    }
    if (*sparse_size) {
        /*
         * Each operation is scanned on its own, and one all of zeroes is
         * a zero write: operations as long as sparse-size at least (as a
         * buffer of qemu-img's, 2 MiB, covers its -S up to that), so that
         * the runs left as data between them are the ones shorter than
         * sparse-size, whatever the chunk-size.
         */
        chunk = MAX(chunk, QEMU_ALIGN_UP(*sparse_size, granularity));
    }
    cfg->granularity = granularity;
    cfg->chunk_size = chunk;
}

/* A block status fetch ended: what it held back may start now. */
static void mirror_status_fetched(void *opaque)
{
    mirror_pump(opaque);
}

Job *mirror_job_new(const char *id, BlockDriverState *src,
                    BlockDriverState *dst, const MirrorParams *p,
                    GError **errp)
{
    MirrorJob *s;
    int64_t granularity = p->granularity ? p->granularity
                                         : mirror_default_granularity(dst);
    int64_t chunk = p->chunk_size ? p->chunk_size : mirror_default_chunk(src);
    MirrorWindowDefaults win;
    int64_t sparse_size;

    mirror_window_defaults(src, dst, p, chunk, &win);
    if (!mirror_check_params(src, dst, p, granularity, chunk, win.buf_size,
                             win.max_in_flight, errp)) {
        return NULL;
    }

    s = (MirrorJob *)job_create(&mirror_job_driver, sizeof(MirrorJob), id);
    s->src = bdrv_ref(src);
    s->dst = bdrv_ref(dst);
    mirror_resolve_config(&s->cfg, src, dst, p, granularity, chunk,
                          &sparse_size);
    s->copy_mode = p->copy_mode;
    mirror_sparse_init(&s->sparse, sparse_size,
                       bdrv_get_request_alignment(dst));
    /* One buffer holds one operation: at least one granule. */
    mirror_window_init(&s->win, &win, s->cfg.granularity,
                       MAX(s->cfg.chunk_size, s->cfg.granularity), src, dst);
    mirror_status_init(&s->status, src, s->cfg.len, s->cfg.chunk_size,
                       s->cfg.sync == MIRROR_SYNC_MODE_TOP,
                       s->cfg.allocate_zeroes, mirror_status_fetched, s);
    mirror_plan_init(s, &mirror_plan_owner);
    mirror_ops_init(s, &mirror_op_owner);
    mirror_copy_path_init(&s->copy, src, dst, &s->win, s->cfg.in_order,
                          s->cfg.compress, mirror_op_copy_check,
                          mirror_op_copy_done);
    mirror_active_init(&s->active, src, dst, s->cfg.granularity, s->cfg.len,
                       &s->track, &s->status, &mirror_active_owner, s);
    mirror_converge_init(&s->converge, p->auto_converge, p->auto_converge_ms,
                         p->auto_converge_passes, &mirror_converge_owner, s);
    mirror_guest_init(&s->guest, p->guest_priority, p->min_copy_rate,
                      &mirror_guest_owner, s, clock_ns());
    s->common.speed = p->speed;
    ratelimit_set_speed(&s->limit, p->speed, RATELIMIT_SLICE_NS);
    return &s->common;
}
