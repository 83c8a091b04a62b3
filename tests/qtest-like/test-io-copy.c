/*
 * Fused copies (bdrv_aio_copy, block/io-copy.c) and the CPU-bound jobs of
 * the thread pool (thread_pool_submit_cpu) under them: which nodes can do
 * them; the ranges that fit in one job; the bytes land as a read would
 * have them; a check that says no leaves the target alone; a write that
 * fails (the file size limit) and one refused (a read-only target) report
 * the right side; a copy waits behind a read-modify-write of its source;
 * no more CPU-bound jobs run at once than there are CPUs; the mirror job
 * on top reports a failed fused write as a write error.  Its copies are
 * covered by test-tool-convert.sh (tmpfs to tmpfs).
 *
 * Files live under /dev/shm (the tests skip without it), or in a
 * g_dir_make_tmp() directory for the "not tmpfs" case.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/io-int.h"
#include "block/mirror/mirror.h"
#include "block/thread-pool.h"
#include "tests/qtest-like/raw-fixture.h"
#include "tests/qtest-like/test-util.h"

#define IMG_SIZE (3 * MIB + 1000)  /* an unaligned end */

/* A file of IMG_SIZE: pattern @seed everywhere (0: a hole). */
static char *make_img(Fixture *f, const char *name, uint32_t seed)
{
    char *path = make_file(f, name, IMG_SIZE);

    if (seed) {
        g_autofree uint8_t *buf = g_malloc(IMG_SIZE);
        int fd = open(path, O_WRONLY);

        g_assert_cmpint(fd, >=, 0);
        test_fill_pattern(buf, 0, IMG_SIZE, seed);
        g_assert_cmpint(pwrite(fd, buf, IMG_SIZE, 0), ==, IMG_SIZE);
        close(fd);
    }
    return path;
}

/* A source file "a" (pattern @seed) and an empty target file "b". */
typedef struct Pair {
    char *a, *b;
    BlockDriverState *src, *dst;
} Pair;

static void pair_open(Pair *p, Fixture *f, uint32_t seed, int src_flags,
                      GHashTable *src_opts, int dst_flags)
{
    p->a = make_img(f, "a", seed);
    p->b = make_img(f, "b", 0);
    p->src = open_raw(p->a, src_flags, src_opts);
    p->dst = open_raw(p->b, dst_flags, NULL);
}

static void pair_close(Pair *p)
{
    bdrv_unref(p->dst);
    bdrv_unref(p->src);
    g_free(p->a);
    g_free(p->b);
}

typedef struct CopyCall {
    Completion c;
    BdrvCopyResult res;
    bool answer;                /* what the check says */
    int checks;
    int64_t checked_bytes;
    uint8_t first;              /* first byte the check saw */
} CopyCall;

static bool check_cb(void *opaque, const uint8_t *buf, int64_t bytes)
{
    CopyCall *call = opaque;

    call->checks++;
    call->checked_bytes = bytes;
    call->first = buf[0];
    return call->answer;
}

/* Copy and wait; the copy is in flight on both nodes meanwhile. */
static int copy_range(BlockDriverState *src, BlockDriverState *dst,
                      int64_t offset, int64_t bytes, void *buf,
                      CopyCall *call)
{
    int ret;

    bdrv_aio_copy(src, dst, offset, bytes, buf, check_cb, &call->res,
                  completion_cb, call);
    g_assert_cmpuint(bdrv_get_in_flight(src), ==, 1);
    g_assert_cmpuint(bdrv_get_in_flight(dst), ==, 1);
    ret = wait_fresh(&call->c);
    g_assert_cmpuint(bdrv_get_in_flight(src), ==, 0);
    g_assert_cmpuint(bdrv_get_in_flight(dst), ==, 0);
    return ret;
}

static void assert_file_range(const char *path, int64_t offset,
                              int64_t bytes, uint32_t seed)
{
    g_autofree uint8_t *want = g_malloc(bytes);
    g_autofree uint8_t *got = g_malloc(bytes);
    int fd = open(path, O_RDONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, got, bytes, offset), ==, bytes);
    close(fd);
    if (seed) {
        test_fill_pattern(want, offset, bytes, seed);
    } else {
        memset(want, 0, bytes);
    }
    g_assert_true(memcmp(want, got, bytes) == 0);
}

/* ---- Which nodes ---- */

static void test_can_copy(Fixture *f, gconstpointer data)
{
    g_autofree char *a = NULL, *b = NULL, *q = NULL;
    BlockDriverState *src, *dst, *nocache, *qcow2;
    g_autoptr(GHashTable) copy_off = NULL;
    g_autoptr(GError) err = NULL;

    if (fixture_missing(f)) {
        return;
    }
    a = make_img(f, "a", 1);
    b = make_img(f, "b", 0);
    q = g_build_filename(f->dir, "q.qcow2", NULL);
    g_assert_true(bdrv_create("qcow2", q, IMG_SIZE - 1000, NULL, &err));
    src = open_raw(a, 0, NULL);
    dst = open_raw(b, BDRV_O_RDWR, NULL);
    qcow2 = bdrv_open(q, "qcow2", BDRV_O_RDWR, NULL, &err);
    g_assert_no_error(err);
    g_assert_true(bdrv_can_copy(src, dst));
    g_assert_true(bdrv_can_copy(src, qcow2));
    g_assert_true(bdrv_can_copy(qcow2, dst));
    bdrv_unref(qcow2);
    /* copy-offload=off on qcow2: a node that says no. */
    copy_off = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(copy_off, "copy-offload", "off");
    qcow2 = bdrv_open(q, "qcow2", BDRV_O_RDWR, copy_off, &err);
    g_assert_no_error(err);
    g_assert_false(bdrv_can_copy(src, qcow2));
    g_assert_false(bdrv_can_copy(qcow2, dst));
    bdrv_unref(qcow2);

    /* O_DIRECT is not page-cache work (tmpfs may refuse it: then skip). */
    nocache = bdrv_open(b, "raw", BDRV_O_RDWR | BDRV_O_NOCACHE, NULL,
                        NULL);
    if (nocache) {
        g_assert_false(bdrv_can_copy(src, nocache));
        bdrv_unref(nocache);
    }
    bdrv_unref(dst);

    dst = open_raw(b, BDRV_O_RDWR, copy_off);
    g_assert_false(bdrv_can_copy(src, dst));
    g_assert_false(bdrv_can_copy(dst, src));
    bdrv_unref(dst);
    bdrv_unref(src);
}

static void test_can_copy_not_tmpfs(Fixture *f, gconstpointer data)
{
    g_autofree char *a = make_img(f, "a", 1);
    g_autofree char *b = make_img(f, "b", 0);
    BlockDriverState *src, *dst;
    int fd = open(a, O_RDONLY | O_CLOEXEC);
    bool in_memory;

    g_assert_cmpint(fd, >=, 0);
    in_memory = fd_in_memory(fd);
    close(fd);
    if (in_memory) {
        g_test_skip("the scratch directory is on tmpfs");
        return;
    }
    src = open_raw(a, 0, NULL);
    dst = open_raw(b, BDRV_O_RDWR, NULL);
    g_assert_false(bdrv_can_copy(src, dst));
    bdrv_unref(dst);
    bdrv_unref(src);
}

/* ---- Which ranges ---- */

static void test_fits(Fixture *f, gconstpointer data)
{
    Pair p;
    g_autofree uint8_t *buf = NULL;
    BlockDriverState *src, *dst;

    if (fixture_missing(f)) {
        return;
    }
    buf = qemu_memalign(4096, IMG_SIZE + 4096);
    pair_open(&p, f, 1, 0, options_new("align", "4096"), BDRV_O_RDWR);
    src = p.src;
    dst = p.dst;

    g_assert_true(bdrv_copy_fits(src, dst, 0, 4096, buf));
    g_assert_true(bdrv_copy_fits(src, dst, 1 * MIB, 1 * MIB, buf));
    /* The unaligned end of both images. */
    g_assert_true(bdrv_copy_fits(src, dst, 3 * MIB, 1000, buf));
    g_assert_false(bdrv_copy_fits(src, dst, 512, 4096, buf));
    g_assert_false(bdrv_copy_fits(src, dst, 0, 1000, buf));
    g_assert_false(bdrv_copy_fits(src, dst, 3 * MIB, 1001, buf));
    g_assert_false(bdrv_copy_fits(src, dst, 0, 0, buf));
    g_assert_false(bdrv_copy_fits(src, dst, -4096, 4096, buf));
    /* Buffered files take any memory alignment. */
    g_assert_true(bdrv_copy_fits(src, dst, 0, 4096, buf + 1));
    g_assert_false(bdrv_copy_fits(src, dst, 0,
                                  bdrv_max_rw(src) + 4096, buf));
    pair_close(&p);
}

/* ---- The bytes ---- */

static void test_copy_data(Fixture *f, gconstpointer data)
{
    static const struct { int64_t offset, bytes; } ranges[] = {
        { 0, 4096 }, { 4096, 64 * KIB }, { 1, 1 }, { 12345, 100000 },
        { 1 * MIB, 1 * MIB }, { 3 * MIB, 1000 }, { IMG_SIZE - 1, 1 },
    };
    Pair p;
    g_autofree uint8_t *buf = g_malloc(IMG_SIZE);
    BlockDriverState *src, *dst;

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 7, 0, NULL, BDRV_O_RDWR);
    src = p.src;
    dst = p.dst;

    for (size_t i = 0; i < G_N_ELEMENTS(ranges); i++) {
        int64_t off = ranges[i].offset, bytes = ranges[i].bytes;
        CopyCall call = { .answer = true };

        g_assert_true(bdrv_copy_fits(src, dst, off, bytes, buf));
        g_assert_cmpint(copy_range(src, dst, off, bytes, buf, &call), ==, 0);
        g_assert_cmpint(call.res.read_ret, ==, 0);
        g_assert_cmpint(call.res.write_ret, ==, 0);
        g_assert_true(call.res.written);
        g_assert_cmpint(call.checks, ==, 1);
        g_assert_cmpint(call.checked_bytes, ==, bytes);
        assert_file_range(p.b, off, bytes, 7);
    }
    /* Nothing outside the ranges was touched. */
    assert_file_range(p.b, 2 * MIB, 1 * MIB, 0);
    pair_close(&p);
}

static void test_copy_check_no(Fixture *f, gconstpointer data)
{
    Pair p;
    g_autofree uint8_t *buf = g_malloc(1 * MIB);
    g_autofree uint8_t *want = g_malloc(1 * MIB);
    BlockDriverState *src, *dst;
    CopyCall call = { .answer = false };

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 9, 0, NULL, BDRV_O_RDWR);
    src = p.src;
    dst = p.dst;

    g_assert_cmpint(copy_range(src, dst, 1 * MIB, 1 * MIB, buf, &call), ==,
                    0);
    g_assert_false(call.res.written);
    g_assert_cmpint(call.res.write_ret, ==, 0);
    g_assert_cmpint(call.checks, ==, 1);
    /* The caller has the bytes; the target has nothing. */
    test_fill_pattern(want, 1 * MIB, 1 * MIB, 9);
    g_assert_cmpint(call.first, ==, want[0]);
    g_assert_true(memcmp(buf, want, 1 * MIB) == 0);
    assert_file_range(p.b, 0, IMG_SIZE, 0);
    pair_close(&p);
}

/* ---- Errors say which side ---- */

/* Writes at or past @limit fail with EFBIG (and raise no SIGXFSZ) until
 * file_limit_end(). */
typedef struct FileLimit {
    struct rlimit old;
    void (*old_handler)(int);
} FileLimit;

static void file_limit_begin(FileLimit *fl, rlim_t limit)
{
    struct rlimit lim;

    fl->old_handler = signal(SIGXFSZ, SIG_IGN);
    g_assert_cmpint(getrlimit(RLIMIT_FSIZE, &fl->old), ==, 0);
    lim = (struct rlimit) { .rlim_cur = limit, .rlim_max = fl->old.rlim_max };
    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &lim), ==, 0);
}

static void file_limit_end(FileLimit *fl)
{
    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &fl->old), ==, 0);
    signal(SIGXFSZ, fl->old_handler);
}

/* The read went through, the write failed with @err, the target is as it
 * was; then close the pair. */
static void assert_write_failed(Pair *p, CopyCall *call, int err)
{
    g_assert_cmpint(call->res.read_ret, ==, 0);
    g_assert_cmpint(call->res.write_ret, ==, err);
    g_assert_false(call->res.written);
    assert_file_range(p->b, 0, IMG_SIZE, 0);
    pair_close(p);
}

static void test_copy_write_error(Fixture *f, gconstpointer data)
{
    Pair p;
    g_autofree uint8_t *buf = g_malloc(1 * MIB);
    BlockDriverState *src, *dst;
    CopyCall call = { .answer = true };
    FileLimit fl;

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 3, 0, NULL, BDRV_O_RDWR);
    src = p.src;
    dst = p.dst;

    file_limit_begin(&fl, 1 * MIB);
    g_assert_cmpint(copy_range(src, dst, 2 * MIB, 64 * KIB, buf, &call), ==,
                    -EFBIG);
    file_limit_end(&fl);

    assert_write_failed(&p, &call, -EFBIG);
}

static void test_copy_read_only_target(Fixture *f, gconstpointer data)
{
    Pair p;
    g_autofree uint8_t *buf = g_malloc(64 * KIB);
    BlockDriverState *src, *dst;
    CopyCall call = { .answer = true };

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 3, 0, NULL, 0);
    src = p.src;
    dst = p.dst;
    g_assert_cmpint(copy_range(src, dst, 0, 64 * KIB, buf, &call), ==,
                    -EPERM);
    g_assert_cmpint(call.checks, ==, 0);
    assert_write_failed(&p, &call, -EPERM);
}

/*
 * The mirror job over fused copies: a target write that fails is a write
 * error (on-target-error=report), the job fails with it, and what was
 * written before the limit is the source's bytes.
 */
static void test_mirror_write_error(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    const char *detail;
    TestJobEvents ev;
    MirrorParams mp;
    FileLimit fl;
    Job *job;
    Pair p;

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 11, 0, NULL, BDRV_O_RDWR);
    g_assert_true(bdrv_can_copy(p.src, p.dst));
    mirror_params_init(&mp);
    mp.auto_complete = true;
    job = mirror_job_new("job0", p.src, p.dst, &mp, &err);
    g_assert_no_error(err);
    test_job_events_attach(&ev, job);
    file_limit_begin(&fl, 2 * MIB);
    job_start(job);
    test_run_until(&ev.concluded, 60);
    file_limit_end(&fl);

    g_assert_cmpint(job->ret, ==, -EFBIG);
    g_assert_cmpint(ev.error_count, >=, 1);
    for (guint i = 0; i < ev.events->len; i++) {
        JobEvent *e = &g_array_index(ev.events, JobEvent, i);

        if (e->type == JOB_EVENT_ERROR) {
            g_assert_false(e->is_read);
            g_assert_cmpint(e->action, ==, BLOCK_ERROR_ACTION_REPORT);
        }
    }
    detail = mirror_get_error_detail(job);
    g_assert_nonnull(detail);
    g_assert_nonnull(strstr(detail, "write"));
    job_unref(job);
    test_job_events_clear(&ev);
    assert_file_range(p.b, 0, 2 * MIB, 11);
    pair_close(&p);
}

/* ---- Tracking ---- */

/*
 * An unaligned write to a source with align=4096 is a read-modify-write,
 * serialising: a copy of an overlapping range submitted while it is in
 * flight waits for it, and so copies the new bytes.
 */
static void test_copy_waits_for_rmw(Fixture *f, gconstpointer data)
{
    Pair p;
    g_autofree uint8_t *buf = qemu_memalign(4096, 64 * KIB);
    g_autofree uint8_t *news = g_malloc(100);
    BlockDriverState *src, *dst;
    Completion w = { 0 };
    CopyCall call = { .answer = true };

    if (fixture_missing(f)) {
        return;
    }
    pair_open(&p, f, 5, BDRV_O_RDWR, options_new("align", "4096"), BDRV_O_RDWR);
    src = p.src;
    dst = p.dst;
    memset(news, 0xee, 100);

    bdrv_aio_pwrite(src, 4196, 100, news, 0, completion_cb, &w);
    bdrv_aio_copy(src, dst, 0, 64 * KIB, buf, check_cb, &call.res,
                  completion_cb, &call);
    g_assert_cmpint(completion_wait(&call.c), ==, 0);
    g_assert_true(w.done);
    g_assert_cmpint(w.ret, ==, 0);
    g_assert_cmpint(buf[4196], ==, 0xee);
    g_assert_cmpint(buf[4295], ==, 0xee);
    assert_file_range(p.b, 0, 4196, 5);
    assert_file_range(p.b, 4296, 64 * KIB - 4296, 5);
    pair_close(&p);
}

/* ---- CPU-bound jobs: at most one per CPU at once ---- */

static int cpu_running, cpu_max_seen, cpu_done;

static int cpu_job(void *arg)
{
    int n = g_atomic_int_add(&cpu_running, 1) + 1;
    int seen = g_atomic_int_get(&cpu_max_seen);
    gint64 until = g_get_monotonic_time() + 2000;

    while (n > seen &&
           !g_atomic_int_compare_and_exchange(&cpu_max_seen, seen, n)) {
        seen = g_atomic_int_get(&cpu_max_seen);
    }
    while (g_get_monotonic_time() < until) {
        /* keep the CPU busy, so that others would overlap */
    }
    g_atomic_int_add(&cpu_running, -1);
    return GPOINTER_TO_INT(arg);
}

static void cpu_job_done(void *opaque, int ret)
{
    g_assert_cmpint(ret, ==, GPOINTER_TO_INT(opaque));
    cpu_done++;
}

static void test_cpu_jobs_limited(void)
{
    ThreadPool *pool = thread_pool_get();
    int ncpu = MAX(1, (int)g_get_num_processors());
    bool all = false;

    for (int i = 0; i < 40; i++) {
        thread_pool_submit_cpu(pool, cpu_job, GINT_TO_POINTER(i),
                               cpu_job_done, GINT_TO_POINTER(i));
    }
    while (!all) {
        g_main_context_iteration(NULL, TRUE);
        all = cpu_done == 40;
    }
    g_assert_cmpint(cpu_max_seen, >=, 1);
    g_assert_cmpint(cpu_max_seen, <=, ncpu);
    g_assert_cmpint(g_atomic_int_get(&cpu_running), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

#define ADD(path, setup, fn) \
    g_test_add(path, Fixture, NULL, setup, fn, fixture_teardown)

    ADD("/io/copy/can", fixture_setup_shm, test_can_copy);
    ADD("/io/copy/can/not-tmpfs", fixture_setup, test_can_copy_not_tmpfs);
    ADD("/io/copy/fits", fixture_setup_shm, test_fits);
    ADD("/io/copy/data", fixture_setup_shm, test_copy_data);
    ADD("/io/copy/check-no", fixture_setup_shm, test_copy_check_no);
    ADD("/io/copy/error/write", fixture_setup_shm, test_copy_write_error);
    ADD("/io/copy/error/read-only-target", fixture_setup_shm,
        test_copy_read_only_target);
    ADD("/io/copy/waits-for-rmw", fixture_setup_shm,
        test_copy_waits_for_rmw);
    ADD("/io/copy/mirror/write-error", fixture_setup_shm,
        test_mirror_write_error);
#undef ADD
    g_test_add_func("/io/copy/cpu-jobs-limited", test_cpu_jobs_limited);

    return g_test_run();
}
