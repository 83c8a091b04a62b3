/*
 * Randomized race tests of the live mirror: guest writes through the
 * mirror-top filter race with the job's copies, in every stage.
 *
 * Each iteration draws an image (sparse or not, odd lengths), a
 * granularity, chunk size and in-flight limit, a copy mode (and maybe a
 * switch to write-blocking half-way), latencies on both ends (blkdebug
 * filters over raw files, so windows are wide), then lets a writer issue
 * random unaligned writes and write-zeroes through the filter: during the
 * bulk stage, over in-flight copies, while the job is paused, in the sync
 * stage after READY, and during the completion (drain, final flush,
 * switch-over).  Concurrent guest writes never overlap each other, so the
 * final disk content is defined: the model applies every write.  After
 * the switch-over the target must equal the model, byte for byte.
 *
 * MIRROR_RACE_ITERATIONS (default 200) and MIRROR_RACE_SEED override.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/mirror/mirror.h"
#include "block/mirror/mirror-top.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#define RACE_MAX_GUEST_IN_FLIGHT 4

typedef struct GuestWrite {
    struct Race *r;
    int64_t offset;
    int64_t bytes;
    uint8_t *buf;               /* NULL: write-zeroes */
} GuestWrite;

typedef struct Race {
    GRand *rand;
    char *dir;
    char *src_path;
    char *dst_path;
    int64_t size;
    uint8_t *model;
    BlockDriverState *src;
    BlockDriverState *dst;
    BlockDriverState *top;
    Job *job;

    int writes_total;           /* guest writes to issue */
    int writes_issued;
    int writes_done;
    GList *in_flight;           /* GuestWrite */
    int switch_at;              /* change to write-blocking at this count */
    int pause_at;               /* pause (then resume) at this count */
    int complete_at;            /* complete at this count (after READY) */
    bool ready;
    bool completing;
    bool paused;
    bool concluded;
    GSource *timer;
} Race;

static int64_t pick(Race *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(g_rand_double(r->rand) * (hi - lo + 1));
}

static bool overlaps_in_flight(Race *r, int64_t off, int64_t len)
{
    for (GList *l = r->in_flight; l; l = l->next) {
        GuestWrite *w = l->data;

        if (off < w->offset + w->bytes && w->offset < off + len) {
            return true;
        }
    }
    return false;
}

static void race_step(Race *r);

static void guest_write_done(void *opaque, int ret)
{
    GuestWrite *w = opaque;
    Race *r = w->r;

    g_assert_cmpint(ret, ==, 0);
    r->in_flight = g_list_remove(r->in_flight, w);
    r->writes_done++;
    g_free(w->buf);
    g_free(w);
    race_step(r);
}

/* Issue one guest write through the filter, if there is room. */
static void guest_write(Race *r)
{
    int64_t off, len;
    GuestWrite *w;

    for (int tries = 0; tries < 8; tries++) {
        len = pick(r, 1, MIN(r->size, 96 * KiB));
        off = pick(r, 0, r->size - len);
        if (!overlaps_in_flight(r, off, len)) {
            break;
        }
        len = 0;
    }
    if (!len) {
        return;
    }
    w = g_new0(GuestWrite, 1);
    w->r = r;
    w->offset = off;
    w->bytes = len;
    r->in_flight = g_list_prepend(r->in_flight, w);
    r->writes_issued++;
    if (g_rand_int_range(r->rand, 0, 5) == 0) {
        memset(r->model + off, 0, len);
        bdrv_aio_pwrite_zeroes(r->top, off, len,
                               g_rand_boolean(r->rand) ? BDRV_REQ_MAY_UNMAP
                                                       : 0,
                               guest_write_done, w);
    } else {
        w->buf = g_malloc(len);
        test_fill_pattern(w->buf, off, len, g_rand_int(r->rand));
        memcpy(r->model + off, w->buf, len);
        bdrv_aio_pwrite(r->top, off, len, w->buf, 0, guest_write_done, w);
    }
}

static gboolean race_timer_cb(gpointer opaque)
{
    Race *r = opaque;

    g_source_unref(r->timer);
    r->timer = NULL;
    race_step(r);
    return G_SOURCE_REMOVE;
}

/* Drive the scenario: writes, a mode switch, a pause, the completion. */
static void race_step(Race *r)
{
    g_autoptr(GError) err = NULL;

    if (r->writes_issued == r->switch_at && !job_is_completed(r->job)) {
        r->switch_at = -1;
        if (!mirror_change_copy_mode(r->job, MIRROR_COPY_MODE_WRITE_BLOCKING,
                                     &err)) {
            g_error("block-job-change: %s", err->message);
        }
    }
    if (r->writes_issued >= r->pause_at && !r->paused && r->pause_at >= 0 &&
        !job_is_completed(r->job)) {
        r->paused = true;
        g_assert_true(job_user_pause(r->job, &err));
    } else if (r->paused && r->writes_issued >= r->pause_at + 5) {
        r->paused = false;
        r->pause_at = -1;
        g_assert_true(job_user_resume(r->job, &err));
    }
    if (r->ready && !r->completing && !r->paused &&
        r->writes_issued >= r->complete_at) {
        r->completing = true;
        g_assert_true(job_complete(r->job, &err));
    }
    while (r->writes_issued < r->writes_total &&
           g_list_length(r->in_flight) < RACE_MAX_GUEST_IN_FLIGHT) {
        int before = r->writes_issued;

        guest_write(r);
        if (r->writes_issued == before || g_rand_boolean(r->rand)) {
            break;      /* leave some room for timing variety */
        }
    }
    if (!r->timer && (r->writes_issued < r->writes_total || r->paused)) {
        r->timer = bdrv_timer_new(pick(r, 0, 400) * 1000, race_timer_cb, r);
    }
}

static void race_event(Job *job, const JobEvent *e, void *opaque)
{
    Race *r = opaque;

    if (e->type == JOB_EVENT_READY) {
        r->ready = true;
        race_step(r);
    }
    if (e->type == JOB_EVENT_STATUS_CHANGE &&
        e->status == JOB_STATUS_CONCLUDED) {
        r->concluded = true;
    }
}

/* Source: random data runs and holes; target: zero or garbage. */
static bool race_files(Race *r)
{
    g_autofree uint8_t *buf = g_malloc0(r->size);
    g_autofree uint8_t *junk = g_malloc(r->size);
    bool target_zero = g_rand_boolean(r->rand);
    g_autoptr(GError) err = NULL;

    for (int i = 0; i < 6; i++) {
        int64_t len = pick(r, 1, r->size / 4);
        int64_t off = pick(r, 0, r->size - len);

        test_fill_pattern(buf + off, off, len, g_rand_int(r->rand));
    }
    memcpy(r->model, buf, r->size);
    g_file_set_contents(r->src_path, (char *)buf, r->size, &err);
    g_assert_no_error(err);
    /* Holes where the source is zero: block status matters. */
    for (int64_t off = 0; off + 4096 <= r->size; off += 4096) {
        if (buffer_is_zero(buf + off, 4096)) {
            int fd = open(r->src_path, O_WRONLY);

            g_assert_cmpint(fd, >=, 0);
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                      4096);
            close(fd);
        }
    }
    if (target_zero) {
        memset(junk, 0, r->size);
    } else {
        test_fill_pattern(junk, 0, r->size, 99);
    }
    g_file_set_contents(r->dst_path, (char *)junk, r->size, &err);
    g_assert_no_error(err);
    return target_zero;
}

static void race_one(GRand *rand, const char *dir, int iteration)
{
    Race r = { .rand = rand, .dir = (char *)dir };
    static const int64_t grans[] = { 4 * KiB, 16 * KiB, 64 * KiB };
    static const int64_t chunks[] = { 4 * KiB, 64 * KiB, 256 * KiB };
    static const int in_flights[] = { 1, 4, 16 };
    g_autofree char *src_spec = NULL;
    g_autofree char *dst_spec = NULL;
    g_autofree char *result = NULL;
    g_autoptr(GError) err = NULL;
    MirrorParams p;
    gsize len;

    r.size = pick(&r, 256 * KiB, 2 * MiB) + pick(&r, 0, 1) * pick(&r, 1, 777);
    r.model = g_malloc(r.size);
    r.src_path = g_build_filename(dir, "src.raw", NULL);
    r.dst_path = g_build_filename(dir, "dst.raw", NULL);

    mirror_params_init(&p);
    p.target_is_zero = race_files(&r);
    p.granularity = grans[g_rand_int_range(rand, 0, 3)];
    p.chunk_size = chunks[g_rand_int_range(rand, 0, 3)];
    p.max_in_flight = in_flights[g_rand_int_range(rand, 0, 3)];
    p.copy_mode = g_rand_int_range(rand, 0, 3) == 0
                  ? MIRROR_COPY_MODE_WRITE_BLOCKING
                  : MIRROR_COPY_MODE_BACKGROUND;
    r.writes_total = pick(&r, 10, 60);
    r.switch_at = p.copy_mode == MIRROR_COPY_MODE_BACKGROUND &&
                  g_rand_boolean(rand) ? pick(&r, 0, r.writes_total) : -1;
    r.pause_at = g_rand_boolean(rand) ? pick(&r, 0, r.writes_total / 2) : -1;
    r.complete_at = pick(&r, 0, r.writes_total);

    src_spec = g_strdup_printf("blkdebug:latency-ns=%" G_GINT64_FORMAT ":%s",
                               pick(&r, 0, 300) * 1000, r.src_path);
    dst_spec = g_strdup_printf("blkdebug:latency-ns=%" G_GINT64_FORMAT ":%s",
                               pick(&r, 0, 300) * 1000, r.dst_path);
    r.src = test_open(src_spec, NULL, BDRV_O_RDWR);
    r.dst = test_open(dst_spec, NULL, BDRV_O_RDWR);
    r.top = mirror_top_new(r.src, &err);
    g_assert_no_error(err);
    r.job = mirror_job_new("race", r.src, r.dst, &p, &err);
    g_assert_no_error(err);
    mirror_job_set_top(r.job, r.top);
    job_add_listener(r.job, race_event, &r);

    job_start(r.job);
    race_step(&r);
    while (!r.concluded || r.in_flight || r.writes_done < r.writes_issued ||
           r.writes_issued < r.writes_total) {
        g_main_context_iteration(NULL, TRUE);
    }
    if (r.timer) {
        g_source_destroy(r.timer);
        g_source_unref(r.timer);
    }
    g_assert_cmpint(r.job->ret, ==, 0);
    g_assert_true(mirror_top_child(r.top) == r.dst);

    bdrv_unref(r.top);
    job_unref(r.job);
    bdrv_unref(r.src);
    bdrv_unref(r.dst);
    g_assert_true(g_file_get_contents(r.dst_path, &result, &len, NULL));
    g_assert_cmpuint(len, ==, r.size);
    if (memcmp(result, r.model, r.size)) {
        for (int64_t i = 0; i < r.size; i++) {
            if (result[i] != (char)r.model[i]) {
                g_error("iteration %d: target differs at byte %" G_GINT64_FORMAT
                        " (size %" G_GINT64_FORMAT ", granularity %"
                        G_GINT64_FORMAT ", chunk %" G_GINT64_FORMAT
                        ", in flight %d, mode %d)", iteration, i, r.size,
                        p.granularity, p.chunk_size, p.max_in_flight,
                        p.copy_mode);
            }
        }
    }
    g_unlink(r.src_path);
    g_unlink(r.dst_path);
    g_free(r.src_path);
    g_free(r.dst_path);
    g_free(r.model);
}

static void test_race(void)
{
    const char *env_iter = g_getenv("MIRROR_RACE_ITERATIONS");
    const char *env_seed = g_getenv("MIRROR_RACE_SEED");
    int iterations = env_iter ? atoi(env_iter) : 200;
    guint32 seed = env_seed ? (guint32)atoll(env_seed) : 20261202;
    g_autoptr(GError) err = NULL;
    char *dir = NULL;
    GRand *rand;

    /* tmpfs when there is one: holes and fast I/O. */
    if (g_file_test("/dev/shm", G_FILE_TEST_IS_DIR)) {
        dir = g_strdup("/dev/shm/mirror-race-XXXXXX");
        if (!g_mkdtemp(dir)) {
            g_clear_pointer(&dir, g_free);
        }
    }
    if (!dir) {
        dir = test_scratch_new();
    }
    g_test_message("seed %u, %d iterations", seed, iterations);
    rand = g_rand_new_with_seed(seed);
    for (int i = 0; i < iterations; i++) {
        race_one(rand, dir, i);
    }
    g_rand_free(rand);
    test_scratch_free(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror/race/random", test_race);
    return g_test_run();
}
