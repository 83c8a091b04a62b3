/*
 * The mirror job's cost follows the extents, not the disk's size (issue
 * #21), counted without a clock: between null nodes of 1, 16 and 64 TiB,
 * empty or with scattered data, the requests each end sees, the bitmap
 * nodes the job's searches visit (MirrorStats.tracking_visits) and the
 * heap its tracking holds (MirrorStats.tracking_bytes_peak) must not grow
 * with the size.
 *
 * A watchdog stops a job whose work runs past the bounds (it cancels the
 * job): a regression fails on the counts, not on the test's timeout.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror-op.h"
#include "block/mirror/mirror-state.h"
#include "block/mirror/mirror-status.h"
#include "tests/qtest-like/mirror-fixture.h"
#include "util/cutils.h"

#include <inttypes.h>

/* Bitmap nodes the job may visit per operation it starts (a dozen
 * searches and changes, each a path down a tree of at most 6 levels). */
#define SCALE_VISITS_PER_OP     200
/* Heap the job's tracking may hold for an empty disk of any size. */
#define SCALE_EMPTY_PEAK        (64 * KiB)
/* ... and with data scattered all over it. */
#define SCALE_SPARSE_PEAK       (1 * MiB)

typedef struct ScaleRun {
    BlockDriverState *src;
    BlockDriverState *dst;
    Job *job;
    TestJobEvents ev;
    uint64_t max_visits;        /* the watchdog's bounds */
    uint64_t max_requests;
    guint watchdog;             /* its source, until it stopped the job */
    bool stopped;               /* ... were passed: the job was cancelled */
    MirrorStats stats;          /* when it concluded */
    NullStats src_st;
    NullStats dst_st;
} ScaleRun;

static uint64_t scale_requests(const NullStats *st)
{
    uint64_t n = 0;

    for (int i = 0; i < NULL_OP__MAX; i++) {
        n += st->requests[i];
    }
    return n;
}

/* Every few ms: past a bound, stop the job (it fails the test). */
static gboolean scale_watchdog(gpointer opaque)
{
    ScaleRun *r = opaque;
    MirrorStats ms;
    NullStats a, b;

    mirror_get_stats(r->job, &ms);
    null_get_stats(r->src, &a);
    null_get_stats(r->dst, &b);
    if (ms.tracking_visits > r->max_visits ||
        scale_requests(&a) + scale_requests(&b) > r->max_requests) {
        g_test_message("stopped: %" PRIu64 " visits, %" PRIu64 " requests",
                       ms.tracking_visits,
                       scale_requests(&a) + scale_requests(&b));
        r->stopped = true;
        r->watchdog = 0;
        job_user_cancel(r->job, true, NULL);
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

/*
 * Set up mirroring @src_spec onto @dst_spec (separate statistics) with
 * the defaults but @max_in_flight (0: the default), @target_zero,
 * auto-complete, the state file @state (or none); once started, the
 * watchdog stops it past @max_ops operations' worth of requests or
 * visits.
 */
static void scale_create(ScaleRun *r, const char *src_spec,
                         const char *dst_spec, bool target_zero,
                         int max_in_flight, MirrorState *state,
                         uint64_t max_ops)
{
    MirrorParams p = mirror_fixture_params(max_in_flight, 0, 0);
    g_autoptr(GError) err = NULL;

    *r = (ScaleRun) {
        .max_visits = SCALE_VISITS_PER_OP * (max_ops + 1),
        .max_requests = 4 * (max_ops + 8),
    };
    p.target_is_zero = target_zero;
    r->src = test_open(src_spec, NULL, BDRV_O_RDWR);
    r->dst = test_open(dst_spec, NULL, BDRV_O_RDWR);
    r->job = mirror_job_new("job0", r->src, r->dst, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&r->ev, r->job);
    if (state) {
        mirror_job_set_state(r->job, state);
    }
}

/* Start the job set up by scale_create(), and its watchdog. */
static void scale_go(ScaleRun *r)
{
    r->watchdog = g_timeout_add(2, scale_watchdog, r);
    job_start(r->job);
}

static void scale_start(ScaleRun *r, const char *src_spec,
                        const char *dst_spec, bool target_zero,
                        int max_in_flight, MirrorState *state,
                        uint64_t max_ops)
{
    scale_create(r, src_spec, dst_spec, target_zero, max_in_flight, state,
                 max_ops);
    scale_go(r);
}

/* Run the job started by scale_start() until it concludes, and check
 * that it succeeded within the bounds. */
static void scale_finish(ScaleRun *r, const char *src_spec,
                         const char *dst_spec, bool target_zero)
{
    test_run_until(&r->ev.concluded, 280);
    if (r->watchdog) {
        g_source_remove(r->watchdog);
    }
    mirror_get_stats(r->job, &r->stats);
    null_get_stats(r->src, &r->src_st);
    null_get_stats(r->dst, &r->dst_st);
    g_test_message("%s -> %s%s: status %" PRIu64 ", read %" PRIu64
                   ", write %" PRIu64 ", zero %" PRIu64 ", flush %" PRIu64
                   ", visits %" PRIu64 ", peak %" PRId64 " B",
                   src_spec, dst_spec, target_zero ? " (zero)" : "",
                   r->src_st.requests[NULL_OP_STATUS],
                   r->src_st.requests[NULL_OP_READ],
                   r->dst_st.requests[NULL_OP_WRITE],
                   r->dst_st.requests[NULL_OP_ZERO],
                   r->dst_st.requests[NULL_OP_FLUSH],
                   r->stats.tracking_visits, r->stats.tracking_bytes_peak);
    g_assert_false(r->stopped);
    g_assert_cmpint(r->job->ret, ==, 0);
    g_assert_cmpuint(r->src_st.misaligned + r->dst_st.misaligned, ==, 0);
    g_assert_cmpuint(r->dst_st.overlapping_writes, ==, 0);
}

static void scale_run(ScaleRun *r, const char *src_spec,
                      const char *dst_spec, bool target_zero,
                      uint64_t max_ops)
{
    scale_start(r, src_spec, dst_spec, target_zero, 0, NULL, max_ops);
    scale_finish(r, src_spec, dst_spec, target_zero);
}

static void scale_free(ScaleRun *r)
{
    job_unref(r->job);
    test_job_events_clear(&r->ev);
    bdrv_unref(r->src);
    bdrv_unref(r->dst);
}

static const int64_t scale_sizes[] = { 1 * TiB, 16 * TiB, 64 * TiB };

/*
 * An empty source onto a target known to read as zero: one block status
 * request, nothing written, one skip; the same counts at every size.
 */
static void test_scale_empty_known_zero(void)
{
    for (size_t i = 0; i < G_N_ELEMENTS(scale_sizes); i++) {
        int64_t size = scale_sizes[i];
        g_autofree char *src = g_strdup_printf(
            "null:size=%" PRId64 ",extents=zero", size);
        g_autofree char *dst = g_strdup_printf("null:size=%" PRId64, size);
        ScaleRun r;

        scale_run(&r, src, dst, true, 1);
        g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==, 1);
        g_assert_cmpuint(r.src_st.requests[NULL_OP_READ], ==, 0);
        g_assert_cmpuint(r.dst_st.requests[NULL_OP_WRITE], ==, 0);
        g_assert_cmpuint(r.dst_st.requests[NULL_OP_ZERO], ==, 0);
        g_assert_cmpint(r.stats.bytes_skipped, ==, size);
        g_assert_cmpint(r.stats.tracking_bytes_peak, <, SCALE_EMPTY_PEAK);
        g_assert_cmpuint(r.stats.tracking_visits, <=, SCALE_VISITS_PER_OP);
        scale_free(&r);
    }
}

/*
 * An empty source onto a target of unknown contents: zeroed in
 * operations as large as the zero cap allows (one request each, the
 * target taking zeroes of any length), not in GiB pieces.
 */
static void test_scale_empty(void)
{
    for (size_t i = 0; i < G_N_ELEMENTS(scale_sizes); i++) {
        int64_t size = scale_sizes[i];
        uint64_t zeroes = DIV_ROUND_UP(size, MIRROR_MAX_ZERO_BYTES);
        g_autofree char *src = g_strdup_printf(
            "null:size=%" PRId64 ",extents=zero", size);
        g_autofree char *dst = g_strdup_printf(
            "null:size=%" PRId64 ",max-zero=%" PRId64, size, size);
        ScaleRun r;

        scale_run(&r, src, dst, false, zeroes);
        g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==, 1);
        g_assert_cmpuint(r.src_st.requests[NULL_OP_READ], ==, 0);
        g_assert_cmpuint(r.dst_st.requests[NULL_OP_WRITE], ==, 0);
        g_assert_cmpuint(r.dst_st.requests[NULL_OP_ZERO], ==, zeroes);
        g_assert_cmpuint(r.dst_st.bytes[NULL_OP_ZERO], ==, size);
        g_assert_cmpint(r.stats.bytes_zeroed, ==, size);
        g_assert_cmpuint(r.stats.tracking_visits, <=,
                         SCALE_VISITS_PER_OP * zeroes);
        g_assert_cmpint(r.stats.tracking_bytes_peak, <, SCALE_EMPTY_PEAK);
        scale_free(&r);
    }
}

/*
 * The same 16384 data extents of 64 KiB, 64 MiB apart at 1 TiB and
 * 4 GiB apart at 64 TiB: the same requests, the writes exactly on the
 * data, and the tracking's heap bounded although the copy clears the
 * target's zero knowledge at every extent.  @target_zero: the holes
 * are skipped, else zeroed (one operation each, under the cap).
 */
static void scale_sparse(bool target_zero)
{
    const int64_t data = 64 * KiB;
    const uint64_t extents = 16384;
    uint64_t status_1t = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(scale_sizes); i++) {
        int64_t size = scale_sizes[i];
        int64_t period = size / extents;
        g_autofree char *src = g_strdup_printf(
            "null:size=%" PRId64 ",extents=sparse:%" PRId64 ":%" PRId64,
            size, data, period);
        g_autofree char *dst = g_strdup_printf(
            "null:size=%" PRId64 ",max-zero=%" PRId64 ",record=on", size,
            size);
        GArray *recs;
        uint64_t writes = 0;
        ScaleRun r;

        scale_run(&r, src, dst, target_zero, 2 * extents);
        g_assert_cmpuint(r.src_st.requests[NULL_OP_READ], ==, extents);
        g_assert_cmpuint(r.src_st.bytes[NULL_OP_READ], ==, extents * data);
        g_assert_cmpuint(r.dst_st.requests[NULL_OP_ZERO], ==,
                         target_zero ? 0 : extents);
        g_assert_cmpint(r.stats.bytes_copied, ==, extents * data);
        /* Exactly the data runs were written. */
        recs = null_get_records(r.dst);
        for (guint j = 0; j < recs->len; j++) {
            NullRecord *rec = &g_array_index(recs, NullRecord, j);

            if (rec->op == NULL_OP_WRITE) {
                g_assert_cmpint(rec->offset % period, ==, 0);
                g_assert_cmpint(rec->bytes, ==, data);
                writes++;
            }
        }
        g_assert_cmpuint(writes, ==, extents);
        /* The driver answers 1024 extents at a time, whatever the size. */
        if (i == 0) {
            status_1t = r.src_st.requests[NULL_OP_STATUS];
        }
        g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==, status_1t);
        g_assert_cmpuint(r.stats.tracking_visits, <=,
                         SCALE_VISITS_PER_OP * 2 * extents);
        g_assert_cmpint(r.stats.tracking_bytes_peak, <, SCALE_SPARSE_PEAK);
        scale_free(&r);
    }
}

static void test_scale_sparse_known_zero(void)
{
    scale_sparse(true);
}

static void test_scale_sparse(void)
{
    scale_sparse(false);
}

/*
 * A guest writing into holes ahead of the cursor while the bulk copy
 * runs (one operation at a time, slowed down by latency, so that the
 * job plans again between two writes): the block status cache, which
 * covers far more than the cursor's neighbourhood, is cut at the first
 * hole written, not dropped, so the job asks for the status a few times
 * more, not once per write.
 */
static void test_scale_writes_ahead(void)
{
    const char *src = "null:size=64G,extents=sparse:64K:64M,"
                      "latency-ns=1000000";
    const char *dst = "null:size=64G,latency-ns=1000000";
    const uint64_t extents = 2048;
    uint8_t buf[4096] = { 1 };
    MirrorStats ms;
    ScaleRun r;
    int64_t done;

    scale_start(&r, src, dst, true, 1, NULL, extents);
    do {
        g_main_context_iteration(NULL, TRUE);
        mirror_get_stats(r.job, &ms);
    } while (ms.bytes_copied < 64 * KiB);
    done = ms.bytes_copied + ms.bytes_zeroed + ms.bytes_skipped;
    for (int k = 0; k < 100; k++) {
        int64_t off = QEMU_ALIGN_DOWN(done, 64 * MiB) + 12 * GiB +
                      k * 64 * MiB + MiB;

        g_assert_cmpint(test_pwrite(r.src, off, sizeof(buf), buf), ==, 0);
    }
    scale_finish(&r, src, dst, true);
    g_assert_cmpuint(r.src_st.requests[NULL_OP_WRITE], ==, 100);
    /* 1024 extents an answer; a few more for the cuts. */
    g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], <=,
                     extents / 1024 + 4);
    scale_free(&r);
}

static void scale_write_done(void *opaque, int ret)
{
    int *left = opaque;

    g_assert_cmpint(ret, ==, 0);
    (*left)--;
}

/*
 * More guest writes than the job remembers land while its first block
 * status request is in flight, all beyond what the answer covers: the
 * answer is kept (cut at the lowest offset of those it could not
 * remember), not dropped and asked again.
 */
static void test_scale_writes_while_asking(void)
{
    const char *src = "null:size=64G,extents=sparse:64K:64M,"
                      "latency-ns=20000000";
    const char *dst = "null:size=64G";
    const int n = MIRROR_STATUS_MAX_WRITES + 1000;
    static const uint8_t buf[4096];
    int left = n;
    ScaleRun r;

    scale_create(&r, src, dst, true, 0, NULL, 2048);
    /* Submitted first, they complete (and reach the job) while its first
     * request, the block status of [0, 64G), is in flight; they land
     * beyond the 32 GiB its answer covers. */
    for (int k = 0; k < n; k++) {
        bdrv_aio_pwrite(r.src, 40 * GiB + MiB + k * 4096, 4096, buf, 0,
                        scale_write_done, &left);
    }
    scale_go(&r);
    while (left) {
        g_main_context_iteration(NULL, TRUE);
    }
    scale_finish(&r, src, dst, true);
    g_assert_cmpuint(r.src_st.requests[NULL_OP_WRITE], ==, n);
    /* 2048 extents, 1024 an answer. */
    g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==, 2);
    scale_free(&r);
}

/*
 * A source whose block status fails: every answer is an extent of data
 * of chunk-size, copied, one status request per chunk (the read reports
 * a real failure; here there is none).
 */
static void test_scale_status_error(void)
{
    const char *src = "null:size=64M,extents=zero,error-op=status,"
                      "error-length=64M";
    const char *dst = "null:size=64M";
    ScaleRun r;

    scale_run(&r, src, dst, true, 64);
    g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==, 64);
    g_assert_cmpuint(r.src_st.bytes[NULL_OP_READ], ==, 64 * MiB);
    g_assert_cmpint(r.stats.bytes_copied, ==, 64 * MiB);
    scale_free(&r);
}

/*
 * With a state file (--state-file), on the 64 TiB disk with 16384 data
 * extents: the known-good set stays an extent or a few (the copy is in
 * order), so the tracking's heap and work stay as without one, and the
 * file is gone once the job completed.
 */
static void test_scale_state_file(void)
{
    const int64_t size = 64 * TiB;
    const uint64_t extents = 16384;
    g_autofree char *src = g_strdup_printf(
        "null:size=%" PRId64 ",extents=sparse:64K:%" PRId64, size,
        size / (int64_t)extents);
    g_autofree char *dst = g_strdup_printf("null:size=%" PRId64, size);
    char *dir = test_scratch_new();
    g_autofree char *path = g_build_filename(dir, "state", NULL);
    MirrorStateIdentity id = {
        .source = (char *)"null src",
        .target = (char *)"null dst",
        .size = size,
        .granularity = 64 * KiB,
        .sync = MIRROR_SYNC_MODE_FULL,
    };
    g_autoptr(GError) err = NULL;
    MirrorState *st = mirror_state_open(path, &id, &err);
    ScaleRun r;

    gint64 t0, elapsed_ms;

    g_assert_no_error(err);
    t0 = g_get_monotonic_time();
    scale_start(&r, src, dst, true, 0, st, 2 * extents);
    scale_finish(&r, src, dst, true);
    elapsed_ms = (g_get_monotonic_time() - t0) / 1000;
    g_assert_cmpuint(r.src_st.requests[NULL_OP_STATUS], ==,
                     2 * extents / 1024);
    g_assert_cmpuint(r.src_st.requests[NULL_OP_READ], ==, extents);
    g_assert_cmpuint(r.dst_st.requests[NULL_OP_WRITE], ==, extents);
    /*
     * A flush per 64 MiB of data copied (1 GiB here), and for what
     * zeroes and skips made clean at most one per 100 ms of the run, not
     * one per extent (2049 before).  Not a timing assertion: the bound
     * follows the run's own length.
     */
    g_assert_cmpuint(r.dst_st.requests[NULL_OP_FLUSH], <=,
                     extents * 64 * KiB / MIRROR_STATE_FLUSH_BYTES +
                     elapsed_ms / (MIRROR_STATE_ZERO_FLUSH_NS / 1000000) + 4);
    g_assert_cmpuint(r.stats.tracking_visits, <=,
                     SCALE_VISITS_PER_OP * 2 * extents);
    g_assert_cmpint(r.stats.tracking_bytes_peak, <, SCALE_SPARSE_PEAK);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    scale_free(&r);
    mirror_state_free(st);
    test_scratch_free(dir);
}

/*
 * Block status is read ahead: once the job has passed half of what it
 * knows, it asks for the next extents while it goes on copying, so reads
 * start while a status request is in flight (every request of the source
 * takes 1 ms); a job that waits for each answer starts none then.
 */
static void test_scale_status_read_ahead(void)
{
    const char *src = "null:size=1T,extents=sparse:64K:256M,"
                      "latency-ns=1000000,record=on";
    const char *dst = "null:size=1T";
    GArray *rec;
    uint64_t statuses = 0, overlapped = 0;
    ScaleRun r;

    scale_run(&r, src, dst, true, 2 * 4096);
    rec = null_get_records(r.src);
    for (guint i = 0; i < rec->len; i++) {
        const NullRecord *st = &g_array_index(rec, NullRecord, i);

        if (st->op != NULL_OP_STATUS) {
            continue;
        }
        statuses++;
        for (guint j = i + 1; j < rec->len; j++) {
            const NullRecord *rd = &g_array_index(rec, NullRecord, j);

            if (rd->start_ns >= st->end_ns) {
                break;
            }
            if (rd->op == NULL_OP_READ) {
                overlapped++;
                break;
            }
        }
    }
    /* 8192 extents, 1024 an answer: 8; all but the first overlapped. */
    g_assert_cmpuint(statuses, ==, 8);
    g_assert_cmpuint(overlapped, ==, statuses - 1);
    scale_free(&r);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror/scale/empty-known-zero",
                    test_scale_empty_known_zero);
    g_test_add_func("/mirror/scale/empty", test_scale_empty);
    g_test_add_func("/mirror/scale/sparse-known-zero",
                    test_scale_sparse_known_zero);
    g_test_add_func("/mirror/scale/sparse", test_scale_sparse);
    g_test_add_func("/mirror/scale/writes-ahead", test_scale_writes_ahead);
    g_test_add_func("/mirror/scale/status-error", test_scale_status_error);
    g_test_add_func("/mirror/scale/writes-while-asking",
                    test_scale_writes_while_asking);
    g_test_add_func("/mirror/scale/state-file", test_scale_state_file);
    g_test_add_func("/mirror/scale/status-read-ahead",
                    test_scale_status_read_ahead);
    return g_test_run();
}
