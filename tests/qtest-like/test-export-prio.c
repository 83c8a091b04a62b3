/*
 * The export's guest priority (nbdsrv_set_guest_priority()): a guest
 * request that arrives while the loop has a mirror job's completions
 * ready is read and submitted to the node before those completions run,
 * and it carries BDRV_REQ_PRIO.  Off (the default), the loop serves its
 * sources in their usual order, the job's first.  And a client that keeps
 * its sources ready still lets the job's sources run (NBDSRV_PRIO_TURNS).
 *
 * No timing: the job's completions are default-priority fd sources
 * (like the thread pool's and an NBD node's), attached before the client
 * connects and made ready by the test; the client's request is on the
 * server's socket before the loop runs again; the null node records the
 * requests as they are submitted, and each job callback looks at that
 * record.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "block/block-int.h"
#include "block/export/nbd-server-int.h"
#include "block/null.h"
#include "util/cutils.h"

#include <glib-unix.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define JOBS         8
#define GUEST_OFFSET (8 * MiB)
#define GUEST_BYTES  4096

typedef struct PrioTest {
    ExportFixture *f;
    GMutex lock;
    GCond cond;
    gint connected;             /* the client is in transmission */
    bool go;                    /* the client may send its request */
    bool sent;                  /* ... it did */
    int ret;                    /* the client's: 0 or a line number */
    gint client_done;
    int efd[JOBS];
    guint job_src[JOBS];
    int jobs_run;
    int jobs_after_guest;       /* job callbacks that found the guest's
                                 * request submitted already */
} PrioTest;

/* The guest's request among the node's records: its flags, or -1. */
static int guest_record_flags(PrioTest *t)
{
    GArray *rec = null_get_records(t->f->bs);

    for (guint i = 0; i < rec->len; i++) {
        NullRecord *r = &g_array_index(rec, NullRecord, i);

        if (r->op == NULL_OP_READ && r->offset == GUEST_OFFSET) {
            return r->flags;
        }
    }
    return -1;
}

/* A job's completion: did the guest's request reach the node first? */
static gboolean job_cb(gint fd, GIOCondition cond, gpointer opaque)
{
    PrioTest *t = opaque;
    uint64_t n;

    g_assert_cmpint(read(fd, &n, sizeof(n)), ==, sizeof(n));
    t->jobs_run++;
    if (guest_record_flags(t) >= 0) {
        t->jobs_after_guest++;
    }
    return G_SOURCE_CONTINUE;
}

static int guest_client(PrioTest *t)
{
    RawReply r;
    int fd = raw_open(t->f->sock, true, false);

    FAIL_IF(fd < 0);
    g_atomic_int_set(&t->connected, 1);
    g_mutex_lock(&t->lock);
    while (!t->go) {
        g_cond_wait(&t->cond, &t->lock);
    }
    g_mutex_unlock(&t->lock);
    /* A UNIX socket: once sent, the server's socket is readable. */
    FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, 1, GUEST_OFFSET, GUEST_BYTES,
                         NULL));
    g_mutex_lock(&t->lock);
    t->sent = true;
    g_cond_broadcast(&t->cond);
    g_mutex_unlock(&t->lock);
    FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error ||
            r.len != GUEST_BYTES);
    raw_reply_clear(&r);
    close(fd);
    return 0;
}

static gpointer guest_thread(gpointer opaque)
{
    PrioTest *t = opaque;

    t->ret = guest_client(t);
    g_atomic_int_set(&t->client_done, 1);
    return NULL;
}

static bool connected(void *opaque)
{
    return g_atomic_int_get(&((PrioTest *)opaque)->connected) ||
           g_atomic_int_get(&((PrioTest *)opaque)->client_done);
}

static bool all_done(void *opaque)
{
    PrioTest *t = opaque;

    return g_atomic_int_get(&t->client_done) && t->jobs_run == JOBS;
}

/*
 * The job's completions are ready and the guest's request waits on the
 * socket when the loop runs again; returns how many job callbacks ran
 * after the request was submitted, and the request's flags at the node.
 */
static void run_prio(bool guest_priority, int *jobs_after_guest,
                     int *guest_flags)
{
    PrioTest t = { 0 };
    GThread *th;
    uint64_t one = 1;

    t.f = fixture_new_spec("null:size=16M,record=on", false);
    nbdsrv_set_guest_priority(t.f->srv, guest_priority);
    g_mutex_init(&t.lock);
    g_cond_init(&t.cond);
    /* The job's completion sources, older than the client's. */
    for (int i = 0; i < JOBS; i++) {
        t.efd[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        g_assert_cmpint(t.efd[i], >=, 0);
        t.job_src[i] = g_unix_fd_add_full(G_PRIORITY_DEFAULT, t.efd[i],
                                          G_IO_IN, job_cb, &t, NULL);
    }

    th = g_thread_new("guest", guest_thread, &t);
    run_loop_until(connected, &t, 30);
    g_assert_cmpint(t.ret, ==, 0);

    /* Without the loop running: the job's completions become ready, then
     * the guest's request arrives. */
    for (int i = 0; i < JOBS; i++) {
        g_assert_cmpint(write(t.efd[i], &one, sizeof(one)), ==,
                        sizeof(one));
    }
    g_mutex_lock(&t.lock);
    t.go = true;
    g_cond_broadcast(&t.cond);
    while (!t.sent && !g_atomic_int_get(&t.client_done)) {
        g_cond_wait(&t.cond, &t.lock);
    }
    g_mutex_unlock(&t.lock);

    run_loop_until(all_done, &t, 30);
    g_thread_join(th);
    g_assert_cmpint(t.ret, ==, 0);
    *jobs_after_guest = t.jobs_after_guest;
    *guest_flags = guest_record_flags(&t);

    for (int i = 0; i < JOBS; i++) {
        g_source_remove(t.job_src[i]);
        close(t.efd[i]);
    }
    g_mutex_clear(&t.lock);
    g_cond_clear(&t.cond);
    fixture_free(t.f);
}

/* On: the guest's request reaches the node before any job callback. */
static void test_guest_first(void)
{
    int after, flags;

    run_prio(true, &after, &flags);
    g_assert_cmpint(after, ==, JOBS);
    g_assert_cmpint(flags, >=, 0);
    g_assert_true(flags & BDRV_REQ_PRIO);
}

/* Off: the older sources, the job's, run first; no flag. */
static void test_off_in_order(void)
{
    int after, flags;

    run_prio(false, &after, &flags);
    g_assert_cmpint(after, ==, 0);
    g_assert_cmpint(flags, >=, 0);
    g_assert_false(flags & BDRV_REQ_PRIO);
}

/* ---- no starvation ---- */

#define FLOOD_BATCHES 200
#define FLOOD_DEPTH   64

typedef struct Flood {
    ExportFixture *f;
    gint job_ran;
    int seen_at;                /* the batch that saw job_ran, or -1 */
    int ret;
    gint done;
} Flood;

static gboolean flood_job_cb(gint fd, GIOCondition cond, gpointer opaque)
{
    Flood *fl = opaque;

    g_atomic_int_set(&fl->job_ran, 1);
    return G_SOURCE_REMOVE;
}

/* Batches of empty reads, answered without the block layer. */
static int flood_client(Flood *fl)
{
    int fd = raw_open(fl->f->sock, true, false);

    FAIL_IF(fd < 0);
    for (int b = 0; b < FLOOD_BATCHES; b++) {
        for (int i = 0; i < FLOOD_DEPTH; i++) {
            FAIL_IF(!raw_request(fd, 0, NBD_CMD_READ, i, 0, 0, NULL));
        }
        for (int i = 0; i < FLOOD_DEPTH; i++) {
            RawReply r;

            FAIL_IF(!raw_reply(fd, true, 0, &r) || r.error);
            raw_reply_clear(&r);
        }
        if (fl->seen_at < 0 && g_atomic_int_get(&fl->job_ran)) {
            fl->seen_at = b;
        }
    }
    close(fd);
    return 0;
}

static gpointer flood_thread(gpointer opaque)
{
    Flood *fl = opaque;

    fl->ret = flood_client(fl);
    g_atomic_int_set(&fl->done, 1);
    return NULL;
}

static bool flood_done(void *opaque)
{
    return g_atomic_int_get(&((Flood *)opaque)->done);
}

/*
 * A client whose requests all complete at once keeps its sources ready;
 * at guest priority it still yields to a ready default-priority source
 * (the job's) within NBDSRV_PRIO_TURNS dispatches.  Each batch needs at
 * least one dispatch (the client waits for its replies).
 */
static void test_yield(void)
{
    Flood fl = { .seen_at = -1 };
    NbdServerStats st;
    GThread *th;
    uint64_t one = 1;
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

    g_assert_cmpint(efd, >=, 0);
    fl.f = fixture_new_spec("null:size=16M", false);
    nbdsrv_set_guest_priority(fl.f->srv, true);
    g_assert_cmpint(write(efd, &one, sizeof(one)), ==, sizeof(one));
    g_unix_fd_add_full(G_PRIORITY_DEFAULT, efd, G_IO_IN, flood_job_cb, &fl,
                       NULL);
    th = g_thread_new("flood", flood_thread, &fl);
    run_loop_until(flood_done, &fl, 60);
    g_thread_join(th);
    g_assert_cmpint(fl.ret, ==, 0);
    g_assert_cmpint(fl.seen_at, >=, 0);
    g_assert_cmpint(fl.seen_at, <=, NBDSRV_PRIO_TURNS + 1);
    nbdsrv_get_stats(fl.f->srv, &st);
    g_assert_cmpuint(st.prio_yields, >=,
                     FLOOD_BATCHES / NBDSRV_PRIO_TURNS - 1);
    close(efd);
    fixture_free(fl.f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export/prio/guest-first", test_guest_first);
    g_test_add_func("/export/prio/off", test_off_in_order);
    g_test_add_func("/export/prio/yield", test_yield);
    return g_test_run();
}
