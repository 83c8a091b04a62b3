/*
 * The NBD client's reconnect (reconnect-delay, block/nbd-reconnect.c)
 * against real servers: nbdkit killed with requests in flight and started
 * again on the same UNIX socket or TCP port (the requests complete, the
 * bytes are right), started again with another size (the node fails for
 * good), not started again (the delay runs out: the requests fail with
 * the error), reconnect-delay=0 (they fail at once); our own NBD server
 * over a recording null node cutting every connection mid-way (no write
 * lost, none elsewhere, each with its bytes); a mirror job whose target
 * restarts (events, complete, identical).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/export/nbd-server.h"
#include "block/mirror/mirror.h"
#include "block/nbd.h"
#include "block/null.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#define DISK_SIZE   (8 * MiB)
#define WRITE_SIZE  (128 * KiB)
#define NR_WRITES   (DISK_SIZE / WRITE_SIZE)

/* ---- waiting for conditions ---- */

typedef struct Waiter {
    bool (*cond)(void *data);
    void *data;
    bool met;
} Waiter;

static gboolean waiter_check(gpointer opaque)
{
    Waiter *w = opaque;

    if (w->cond(w->data)) {
        w->met = true;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

/* Run the loop until @cond(@data), looked at every 5 ms; fail after
 * @timeout_s. */
static void wait_for(bool (*cond)(void *), void *data, int timeout_s)
{
    Waiter w = { .cond = cond, .data = data };
    guint id;

    if (cond(data)) {
        return;
    }
    id = g_timeout_add(5, waiter_check, &w);
    test_run_until(&w.met, timeout_s);
    if (!w.met) {
        g_source_remove(id);
    }
}

/* ---- node events ---- */

typedef struct Seen {
    int reconnecting;
    int reconnected;
    int failed;
    int error;                  /* FAILED's */
    char *reason;               /* RECONNECTING's, then FAILED's */
    unsigned held;              /* requests waiting at RECONNECTING */
} Seen;

static void seen_cb(void *opaque, BlockDriverState *bs, const BdrvEvent *ev)
{
    Seen *seen = opaque;

    switch (ev->type) {
    case BDRV_EVENT_RECONNECTING:
        seen->reconnecting++;
        g_assert_true(bdrv_is_reconnecting(bs));
        break;
    case BDRV_EVENT_RECONNECTED:
        seen->reconnected++;
        break;
    case BDRV_EVENT_RECONNECT_FAILED:
        seen->failed++;
        seen->error = ev->error;
        break;
    }
    g_free(seen->reason);
    seen->reason = g_strdup(ev->reason);
}

static bool seen_lost(void *opaque)
{
    return ((Seen *)opaque)->reconnecting > 0;
}

/* ---- an nbdkit that can be killed and started again on one address ---- */

typedef struct Kit {
    char *dir;
    char *sock;                 /* UNIX; NULL: TCP */
    char *port;                 /* TCP */
    char *pidfile;
    char *disk;                 /* a file for the file plugin */
    char *uri;
    GPid pid;
} Kit;

/* A TCP port nothing listens on now. */
static char *free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof(a)), ==, 0);
    g_assert_cmpint(getsockname(fd, (struct sockaddr *)&a, &len), ==, 0);
    close(fd);
    return g_strdup_printf("%d", ntohs(a.sin_port));
}

static Kit *kit_new(bool tcp)
{
    Kit *k = g_new0(Kit, 1);

    k->dir = test_scratch_new();
    k->pidfile = g_build_filename(k->dir, "pid", NULL);
    k->disk = g_build_filename(k->dir, "disk.img", NULL);
    if (tcp) {
        k->port = free_port();
        k->uri = g_strdup_printf("nbd://127.0.0.1:%s/", k->port);
    } else {
        k->sock = g_build_filename(k->dir, "sock", NULL);
        k->uri = g_strdup_printf("nbd+unix:///?socket=%s", k->sock);
    }
    return k;
}

/* In the child: die with the test (qemu-nbd has no --exit-with-parent). */
static void kit_child_setup(gpointer data)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* Run @argv (NULL-terminated) and wait for the kit's pid file (written
 * once the server listens). */
static void kit_spawn(Kit *k, GPtrArray *argv)
{
    g_autoptr(GError) err = NULL;

    g_spawn_async(NULL, (char **)argv->pdata, NULL,
                  G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                  G_SPAWN_STDOUT_TO_DEV_NULL, kit_child_setup, NULL,
                  &k->pid, &err);
    g_assert_no_error(err);
    for (int i = 0; i < 2000; i++) {
        g_autofree char *text = NULL;
        gsize len = 0;

        if (g_file_get_contents(k->pidfile, &text, &len, NULL) && len &&
            text[len - 1] == '\n') {
            return;
        }
        g_assert_cmpint(waitpid(k->pid, NULL, WNOHANG), ==, 0);
        g_usleep(10 * 1000);    /* polling the pid file, bounded */
    }
    g_error("%s did not start within 20 s",
            (char *)g_ptr_array_index(argv, 0));
}

/* Start nbdkit ARGS... (NULL-terminated) on the kit's address. */
static void kit_start(Kit *k, const char *first, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    va_list ap;

    g_remove(k->pidfile);
    g_ptr_array_add(argv, "nbdkit");
    g_ptr_array_add(argv, "-f");
    g_ptr_array_add(argv, "--exit-with-parent");
    if (k->sock) {
        g_ptr_array_add(argv, "-U");
        g_ptr_array_add(argv, k->sock);
    } else {
        g_ptr_array_add(argv, "-i");
        g_ptr_array_add(argv, "127.0.0.1");
        g_ptr_array_add(argv, "-p");
        g_ptr_array_add(argv, k->port);
    }
    g_ptr_array_add(argv, "-P");
    g_ptr_array_add(argv, k->pidfile);
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        g_ptr_array_add(argv, (char *)a);
    }
    va_end(ap);
    g_ptr_array_add(argv, NULL);
    kit_spawn(k, argv);
}

/* Start qemu-nbd on the kit's UNIX socket, serving the kit's disk to up
 * to 4 clients. */
static void kit_start_qemu_nbd(Kit *k)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autofree char *pidfile = g_strdup_printf("--pid-file=%s", k->pidfile);

    g_remove(k->pidfile);
    g_ptr_array_add(argv, "qemu-nbd");
    g_ptr_array_add(argv, "-f");
    g_ptr_array_add(argv, "raw");
    if (k->port) {
        g_ptr_array_add(argv, "-b");
        g_ptr_array_add(argv, "127.0.0.1");
        g_ptr_array_add(argv, "-p");
        g_ptr_array_add(argv, k->port);
    } else {
        g_ptr_array_add(argv, "-k");
        g_ptr_array_add(argv, k->sock);
    }
    g_ptr_array_add(argv, "--shared=4");
    g_ptr_array_add(argv, "--persistent");
    g_ptr_array_add(argv, pidfile);
    g_ptr_array_add(argv, k->disk);
    g_ptr_array_add(argv, NULL);
    kit_spawn(k, argv);
}

/* Send @sig and reap; the socket file goes. */
static void kit_stop(Kit *k, int sig)
{
    if (k->pid) {
        kill(k->pid, sig);
        waitpid(k->pid, NULL, 0);
        g_spawn_close_pid(k->pid);
        k->pid = 0;
    }
    if (k->sock) {
        g_remove(k->sock);
    }
}

/* SIGKILL: no goodbye to the clients. */
static void kit_kill(Kit *k)
{
    kit_stop(k, SIGKILL);
}

static void kit_free(Kit *k)
{
    if (!k) {
        return;
    }
    kit_kill(k);
    test_scratch_free(k->dir);
    g_free(k->sock);
    g_free(k->port);
    g_free(k->pidfile);
    g_free(k->disk);
    g_free(k->uri);
    g_free(k);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Kit, kit_free)

/* A zeroed disk file of @size for the file plugin; "file=PATH". */
static char *kit_disk(Kit *k, int64_t size)
{
    g_autoptr(GError) err = NULL;
    int fd = g_open(k->disk, O_RDWR | O_CREAT | O_TRUNC, 0644);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    return g_strdup_printf("file=%s", k->disk);
}

/* Open @uri with "reconnect-delay" @delay (and "connections" @conns). */
static BlockDriverState *open_rc(const char *uri, const char *delay,
                                 const char *conns)
{
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs;

    g_hash_table_insert(opts, "reconnect-delay", (char *)delay);
    if (conns) {
        g_hash_table_insert(opts, "connections", (char *)conns);
    }
    bs = bdrv_open(uri, NULL, BDRV_O_RDWR, opts, &err);
    g_assert_no_error(err);
    return bs;
}

/* ---- a batch of writes, each of its own pattern ---- */

typedef struct Batch {
    BlockDriverState *bs;
    int n;
    int64_t stride;             /* write i goes to i * stride */
    uint8_t *data;              /* n * WRITE_SIZE */
    Pending p[NR_WRITES];
    int done;
    int wait_done;              /* batch_reached(): done >= this */
} Batch;

typedef struct BatchSlot {
    Batch *b;
    int i;
} BatchSlot;

static BatchSlot batch_slots[NR_WRITES];

static void batch_cb(void *opaque, int ret)
{
    BatchSlot *slot = opaque;

    pending_cb(&slot->b->p[slot->i], ret);
    slot->b->done++;
}

static bool batch_reached(void *opaque)
{
    Batch *b = opaque;

    return b->done >= b->wait_done;
}

static void batch_submit(Batch *b, BlockDriverState *bs, int n,
                         int64_t stride, uint32_t seed)
{
    *b = (Batch) { .bs = bs, .n = n, .stride = stride };
    b->data = g_malloc(n * WRITE_SIZE);
    test_fill_pattern(b->data, 0, n * WRITE_SIZE, seed);
    for (int i = 0; i < n; i++) {
        batch_slots[i] = (BatchSlot) { .b = b, .i = i };
        bdrv_aio_pwrite(bs, i * stride, WRITE_SIZE, b->data + i * WRITE_SIZE,
                        0, batch_cb, &batch_slots[i]);
    }
}

/* Run until @k of them are done. */
static void batch_wait(Batch *b, int k, int timeout_s)
{
    b->wait_done = k;
    wait_for(batch_reached, b, timeout_s);
    g_assert_cmpint(b->done, >=, k);
}

/* The disk file holds every write (stride WRITE_SIZE: the whole disk). */
static void batch_assert_disk(Batch *b, const char *disk)
{
    g_autofree char *text = NULL;
    gsize len = 0;

    g_assert_true(g_file_get_contents(disk, &text, &len, NULL));
    g_assert_cmpint(len, ==, (gsize)b->n * WRITE_SIZE);
    g_assert_true(memcmp(text, b->data, len) == 0);
}

/* ---- the tests ---- */

/*
 * A node on a fresh nbdkit (file plugin on a zeroed DISK_SIZE file,
 * writes delayed 250 ms), opened with reconnect-delay @delay (and
 * connections @conns; @uri_tail appended to the URI), its node events in
 * seen, and NR_WRITES writes submitted (pattern @seed), @k of them done.
 */
typedef struct Scene {
    Kit *k;
    char *file;                 /* "file=PATH" */
    BlockDriverState *bs;
    Seen seen;
    Batch b;
} Scene;

static bool scene_start(Scene *sc, bool tcp, const char *uri_tail,
                        const char *delay, const char *conns, uint32_t seed,
                        int k)
{
    g_autofree char *uri = NULL;

    *sc = (Scene) { 0 };
    if (!have_nbdkit()) {
        return false;
    }
    sc->k = kit_new(tcp);
    sc->file = kit_disk(sc->k, DISK_SIZE);
    kit_start(sc->k, "--filter=delay", "file", sc->file, "wdelay=250ms",
              NULL);
    uri = g_strconcat(sc->k->uri, uri_tail, NULL);
    sc->bs = open_rc(uri, delay, conns);
    bdrv_add_event_listener(sc->bs, seen_cb, &sc->seen);
    batch_submit(&sc->b, sc->bs, NR_WRITES, WRITE_SIZE, seed);
    batch_wait(&sc->b, k, 60);
    g_assert_cmpint(sc->b.done, <, NR_WRITES);
    return true;
}

static void scene_end(Scene *sc)
{
    bdrv_remove_event_listener(sc->bs, seen_cb, &sc->seen);
    bdrv_unref(sc->bs);
    kit_free(sc->k);
    g_free(sc->file);
    g_free(sc->b.data);
    g_free(sc->seen.reason);
}

/* Every write of the batch done; the later ones all with @ret, the
 * earlier ones with 0 or @ret. */
static void scene_assert_writes(Scene *sc, int ret)
{
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_true(sc->b.p[i].ret == 0 || sc->b.p[i].ret == ret);
    }
    g_assert_cmpint(sc->b.p[NR_WRITES - 1].ret, ==, ret);
}

static int want_conns;

static bool all_active(void *opaque)
{
    return nbdblk_get_active_connections(opaque) == want_conns;
}

/*
 * nbdkit killed with writes in flight, started again on the same address
 * while the node holds them: every write succeeds, the node says
 * RECONNECTING then RECONNECTED, and the file holds every byte.
 */
static void restart_in_flight(bool tcp, const char *conns, int sig)
{
    g_autofree char *info = NULL;
    Scene sc;

    if (!scene_start(&sc, tcp, "", "30", conns, 1, 4)) {
        return;
    }
    kit_stop(sc.k, sig);
    wait_for(seen_lost, &sc.seen, 30);
    g_assert_cmpint(sc.seen.reconnected + sc.seen.failed, ==, 0);
    g_assert_true(bdrv_is_reconnecting(sc.bs));
    g_test_message("lost: %s", sc.seen.reason);
    info = g_strdup_printf("state: reconnecting (%s)", sc.seen.reason);
    g_assert_true(info_has(sc.bs, info));
    /* Nothing failed meanwhile: the rest are held. */
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_true(!sc.b.p[i].done || sc.b.p[i].ret == 0);
    }
    kit_start(sc.k, "file", sc.file, NULL);
    batch_wait(&sc.b, NR_WRITES, 60);
    scene_assert_writes(&sc, 0);
    g_assert_cmpint(sc.seen.reconnected, ==, 1);
    g_assert_cmpint(sc.seen.failed, ==, 0);
    g_assert_false(bdrv_is_reconnecting(sc.bs));
    g_assert_cmpuint(bdrv_get_reconnects(sc.bs), ==, 1);
    g_assert_cmpint(test_flush(sc.bs), ==, 0);
    batch_assert_disk(&sc.b, sc.k->disk);
    /* The other connections are made again in the background. */
    want_conns = nbdblk_get_connections(sc.bs);
    wait_for(all_active, sc.bs, 30);
    scene_end(&sc);
}

static void test_restart_unix(void)
{
    restart_in_flight(false, "1", SIGKILL);
}

static void test_restart_unix_multiconn(void)
{
    restart_in_flight(false, "2", SIGKILL);
}

static void test_restart_tcp(void)
{
    restart_in_flight(true, NULL, SIGKILL);
}

/* SIGTERM: nbdkit answers what it holds with NBD_ESHUTDOWN, then goes. */
static void test_restart_sigterm(void)
{
    restart_in_flight(false, "2", SIGTERM);
}

/* Started again with another size: a hard error, no retry. */
static void test_size_changed(void)
{
    g_autofree char *line = NULL;
    g_autofree char *info = NULL;
    uint8_t buf[4096] = { 0 };
    Scene sc;

    if (!scene_start(&sc, false, "", "30", "1", 2, 2)) {
        return;
    }
    kit_kill(sc.k);
    wait_for(seen_lost, &sc.seen, 30);
    g_free(kit_disk(sc.k, DISK_SIZE * 2));
    kit_start(sc.k, "file", sc.file, NULL);
    batch_wait(&sc.b, NR_WRITES, 60);
    scene_assert_writes(&sc, -EIO);
    g_assert_cmpint(sc.seen.failed, ==, 1);
    g_assert_cmpint(sc.seen.reconnected, ==, 0);
    g_assert_cmpint(sc.seen.error, ==, EIO);
    line = g_strdup_printf("export size changed from %d to %d",
                           (int)DISK_SIZE, (int)DISK_SIZE * 2);
    g_assert_cmpstr(sc.seen.reason, ==, line);
    info = g_strdup_printf("state: failed (%s)", line);
    g_assert_true(info_has(sc.bs, info));
    /* For good: later requests fail too, with no new attempt. */
    g_assert_cmpint(test_pread(sc.bs, 0, sizeof(buf), buf), ==, -EIO);
    g_assert_cmpint(sc.seen.reconnecting, ==, 1);
    scene_end(&sc);
}

/* Nobody comes back: past the delay the held requests fail with the
 * error that broke the connection, and so does every later one. */
static void test_delay_expires(void)
{
    uint8_t buf[4096] = { 0 };
    gint64 t0;
    Scene sc;

    if (!scene_start(&sc, false, "", "1", "1", 3, 2)) {
        return;
    }
    kit_kill(sc.k);
    wait_for(seen_lost, &sc.seen, 30);
    t0 = g_get_monotonic_time();
    batch_wait(&sc.b, NR_WRITES, 60);
    /* The delay (1 s) went by first; generous on a busy machine. */
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 900 * 1000);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 20 * G_USEC_PER_SEC);
    scene_assert_writes(&sc, -ENOTCONN);
    g_assert_cmpint(sc.seen.failed, ==, 1);
    g_assert_cmpint(sc.seen.error, ==, ENOTCONN);
    g_assert_nonnull(strstr(sc.seen.reason, "no connection within 1 s "
                            "(reconnect-delay)"));
    g_assert_false(bdrv_is_reconnecting(sc.bs));
    g_assert_cmpint(test_pread(sc.bs, 0, sizeof(buf), buf), ==, -ENOTCONN);
    scene_end(&sc);
}

/* reconnect-delay=0: as before, the requests fail at once, no event. */
static void test_delay_zero(void)
{
    gint64 t0;
    Scene sc;

    if (!scene_start(&sc, false, "", "0", "1", 4, 2)) {
        return;
    }
    t0 = g_get_monotonic_time();
    kit_kill(sc.k);
    batch_wait(&sc.b, NR_WRITES, 60);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
    scene_assert_writes(&sc, -ENOTCONN);
    g_assert_cmpint(sc.seen.reconnecting + sc.seen.reconnected +
                    sc.seen.failed, ==, 0);
    /* A server there again changes nothing. */
    kit_start(sc.k, "file", sc.file, NULL);
    g_assert_cmpint(test_flush(sc.bs), ==, -ENOTCONN);
    scene_end(&sc);
}

/* The URI's reconnect-delay= wins over the node option. */
static void test_uri_wins(void)
{
    Scene sc;

    if (!scene_start(&sc, false, "&reconnect-delay=0", "30", "1", 5, 2)) {
        return;
    }
    kit_kill(sc.k);
    batch_wait(&sc.b, NR_WRITES, 60);
    scene_assert_writes(&sc, -ENOTCONN);
    g_assert_cmpint(sc.seen.reconnecting, ==, 0);
    scene_end(&sc);
}

/*
 * A server that stops answering (SIGSTOP): io-timeout shuts the
 * connection down and the node reconnects (ETIMEDOUT, not a failure);
 * once the server runs again, the held writes complete.  qemu-nbd: the
 * nbdkit of Debian 12 may abort (raw_send_socket: sock >= 0) when it
 * replies on a connection the client shut down.
 */
static void test_io_timeout_stall(void)
{
    g_autoptr(Kit) k = NULL;
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GError) err = NULL;
    g_autofree char *qemu_nbd = g_find_program_in_path("qemu-nbd");
    BlockDriverState *bs;
    Seen seen = { 0 };
    Batch b;

    if (!qemu_nbd) {
        g_test_skip("qemu-nbd is not installed");
        return;
    }
    k = kit_new(false);
    g_free(kit_disk(k, DISK_SIZE));
    kit_start_qemu_nbd(k);
    g_hash_table_insert(opts, "reconnect-delay", "60");
    g_hash_table_insert(opts, "io-timeout", "1");
    g_hash_table_insert(opts, "connections", "1");
    bs = bdrv_open(k->uri, NULL, BDRV_O_RDWR, opts, &err);
    g_assert_no_error(err);
    bdrv_add_event_listener(bs, seen_cb, &seen);

    g_assert_cmpint(kill(k->pid, SIGSTOP), ==, 0);
    batch_submit(&b, bs, NR_WRITES, WRITE_SIZE, 8);
    wait_for(seen_lost, &seen, 30);
    g_assert_cmpstr(seen.reason, ==, "no reply for 1 s, io-timeout");
    g_assert_cmpint(b.done, ==, 0);
    g_assert_cmpint(kill(k->pid, SIGCONT), ==, 0);
    batch_wait(&b, NR_WRITES, 60);
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_cmpint(b.p[i].ret, ==, 0);
    }
    g_assert_cmpint(seen.reconnected, ==, 1);
    g_assert_cmpint(test_flush(bs), ==, 0);
    batch_assert_disk(&b, k->disk);

    bdrv_remove_event_listener(bs, seen_cb, &seen);
    bdrv_unref(bs);
    g_free(b.data);
    g_free(seen.reason);
}

/*
 * The IPv4 TCP sockets of this host from local port @a (-1: any) to
 * remote port @b, in any state (TIME_WAIT and orphans included): how
 * many; the local port of the last one in *@local when not NULL.
 */
static int tcp_sockets_between(int a, int b, int *local)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    int n = 0;

    g_assert_true(g_file_get_contents("/proc/net/tcp", &text, NULL, NULL));
    lines = g_strsplit(text, "\n", -1);
    for (int i = 1; lines[i]; i++) {
        unsigned l, r;

        if (sscanf(lines[i], " %*d: %*x:%x %*x:%x", &l, &r) == 2 &&
            (a < 0 || (int)l == a) && (int)r == b) {
            n++;
            if (local) {
                *local = l;
            }
        }
    }
    return n;
}

/*
 * A connection io-timeout declared dead against a stalled server (over
 * TCP) is reset, not closed politely: by the time the node reports the
 * loss, neither end of it is left in the kernel (no orphan holding our
 * unsent writes to deliver later, no FIN_WAIT, no TIME_WAIT), and the
 * held writes still complete once the server runs again.  A FIN close
 * would leave the client's end in FIN_WAIT2 and the stopped server's in
 * CLOSE_WAIT.
 */
static void test_io_timeout_reset(void)
{
    g_autoptr(Kit) k = NULL;
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GError) err = NULL;
    g_autofree char *qemu_nbd = g_find_program_in_path("qemu-nbd");
    BlockDriverState *bs;
    Seen seen = { 0 };
    int port, old;
    Batch b;

    if (!qemu_nbd) {
        g_test_skip("qemu-nbd is not installed");
        return;
    }
    if (!g_file_test("/proc/net/tcp", G_FILE_TEST_EXISTS)) {
        g_test_skip("no /proc/net/tcp");
        return;
    }
    k = kit_new(true);
    g_free(kit_disk(k, DISK_SIZE));
    kit_start_qemu_nbd(k);
    port = atoi(k->port);
    g_hash_table_insert(opts, "reconnect-delay", "60");
    g_hash_table_insert(opts, "io-timeout", "1");
    g_hash_table_insert(opts, "connections", "1");
    bs = bdrv_open(k->uri, NULL, BDRV_O_RDWR, opts, &err);
    g_assert_no_error(err);
    bdrv_add_event_listener(bs, seen_cb, &seen);
    g_assert_cmpint(tcp_sockets_between(-1, port, &old), ==, 1);

    g_assert_cmpint(kill(k->pid, SIGSTOP), ==, 0);
    batch_submit(&b, bs, NR_WRITES, WRITE_SIZE, 8);
    wait_for(seen_lost, &seen, 30);
    g_assert_cmpstr(seen.reason, ==, "no reply for 1 s, io-timeout");
    g_assert_cmpint(tcp_sockets_between(old, port, NULL), ==, 0);
    g_assert_cmpint(tcp_sockets_between(port, old, NULL), ==, 0);
    g_assert_cmpint(kill(k->pid, SIGCONT), ==, 0);
    batch_wait(&b, NR_WRITES, 60);
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_cmpint(b.p[i].ret, ==, 0);
    }
    g_assert_cmpint(seen.reconnected, ==, 1);
    g_assert_cmpint(test_flush(bs), ==, 0);
    batch_assert_disk(&b, k->disk);
    g_assert_cmpint(tcp_sockets_between(old, port, NULL), ==, 0);

    bdrv_remove_event_listener(bs, seen_cb, &seen);
    bdrv_unref(bs);
    g_free(b.data);
    g_free(seen.reason);
}

/* ---- counting, through our own server over a recording null node ---- */

/* While the NBD open blocks: serve its handshake from this loop. */
static bool serve_while_opening(void *opaque)
{
    while (g_main_context_iteration(NULL, FALSE)) {
        /* dispatch */
    }
    return false;
}

static bool null_has_writes(void *opaque)
{
    NullStats st;

    null_get_stats(opaque, &st);
    return st.requests[NULL_OP_WRITE] >= NR_WRITES / 2;
}

/* Our NBD server over a null node, and a node connected to it. */
typedef struct OwnServer {
    char *dir;
    BlockDriverState *null;     /* what the server exports */
    NbdServer *srv;
    BlockDriverState *bs;       /* the NBD node, reconnect-delay 30 */
} OwnServer;

static void own_start(OwnServer *o, const char *null_spec, const char *conns)
{
    g_autofree char *addr = NULL;
    g_autofree char *uri = NULL;
    g_autoptr(GError) err = NULL;

    o->dir = test_scratch_new();
    addr = g_strdup_printf("unix:%s/sock", o->dir);
    uri = g_strdup_printf("nbd+unix:///?socket=%s/sock", o->dir);
    o->null = test_open(null_spec, NULL, BDRV_O_RDWR);
    o->srv = nbdsrv_new(o->null, addr, NULL, false, &err);
    g_assert_no_error(err);
    nbdblk_set_interrupt_func(serve_while_opening, NULL);
    o->bs = open_rc(uri, "30", conns);
    nbdblk_set_interrupt_func(NULL, NULL);
}

static void own_end(OwnServer *o)
{
    bdrv_unref(o->bs);
    nbdsrv_free(o->srv);
    bdrv_unref(o->null);
    test_scratch_free(o->dir);
}

/*
 * Every connection cut by the server mid-way (nbdsrv_disconnect_all()),
 * which keeps listening: after the reconnect, every write reached the
 * null node at its offset with its bytes (some twice: their replies were
 * lost), nothing was written anywhere else, and a flush came before the
 * writes issued again.
 */
static void test_count_null(void)
{
    g_autofree int *count = g_new0(int, NR_WRITES);
    const int64_t stride = 3 * WRITE_SIZE;      /* gaps between writes */
    OwnServer o;
    Seen seen = { 0 };
    GArray *rec;
    guint flush_at = G_MAXUINT, first_again = G_MAXUINT;
    int again = 0;
    Batch b;

    own_start(&o, "null:size=64M,latency-ns=1000000000,"
              "jitter-ns=300000000,record=on", NULL);
    bdrv_add_event_listener(o.bs, seen_cb, &seen);

    batch_submit(&b, o.bs, NR_WRITES, stride, 6);
    /* Cut while the server holds half of them (each for 1-1.3 s). */
    wait_for(null_has_writes, o.null, 60);
    g_assert_cmpint(b.done, <, NR_WRITES);
    nbdsrv_disconnect_all(o.srv);
    batch_wait(&b, NR_WRITES, 60);
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_cmpint(b.p[i].ret, ==, 0);
    }
    g_assert_cmpint(seen.reconnecting, ==, 1);
    g_assert_cmpint(seen.reconnected, ==, 1);

    rec = null_get_records(o.null);
    for (guint r = 0; r < rec->len; r++) {
        NullRecord *e = &g_array_index(rec, NullRecord, r);
        int i = e->offset / stride;

        if (e->op == NULL_OP_FLUSH) {
            flush_at = MIN(flush_at, r);
            continue;
        }
        /* Nothing but our writes: the probe read of open aside. */
        if (e->op == NULL_OP_READ) {
            g_assert_cmpint(e->offset, ==, 0);
            continue;
        }
        g_assert_cmpint(e->op, ==, NULL_OP_WRITE);
        g_assert_cmpint(e->offset % stride, ==, 0);
        g_assert_cmpint(i, <, NR_WRITES);
        g_assert_cmpint(e->bytes, ==, WRITE_SIZE);
        g_assert_cmpuint(e->data_hash, ==,
                         null_data_hash(b.data + i * WRITE_SIZE,
                                        WRITE_SIZE));
        if (count[i]++ && first_again == G_MAXUINT) {
            first_again = r;
        }
        again += count[i] > 1;
    }
    for (int i = 0; i < NR_WRITES; i++) {
        g_assert_cmpint(count[i], >=, 1);
    }
    /* The reconnect flushed before it issued anything again. */
    g_assert_cmpuint(flush_at, <, rec->len);
    g_assert_true(first_again == G_MAXUINT || flush_at < first_again);
    g_test_message("%d writes, %d of them written again after the cut",
                   (int)NR_WRITES, again);

    bdrv_remove_event_listener(o.bs, seen_cb, &seen);
    own_end(&o);
    g_free(b.data);
    g_free(seen.reason);
}

/* ---- a mirror job whose target restarts ---- */

typedef struct JobWatch {
    Job *job;
    TestJobEvents *ev;
    int64_t progress;
    int reconnects;
} JobWatch;

static bool job_progressed(void *opaque)
{
    JobWatch *w = opaque;

    return w->job->progress_current >= w->progress;
}

static bool job_reconnect_events(void *opaque)
{
    JobWatch *w = opaque;

    return w->ev->reconnect_count >= w->reconnects;
}

static bool job_is_ready(void *opaque)
{
    JobWatch *w = opaque;

    return w->ev->ready_count > 0;
}

static void test_mirror_target_restart(void)
{
    g_autoptr(Kit) k = NULL;
    g_autofree char *file = NULL;
    g_autofree char *src_path = NULL;
    g_autofree uint8_t *data = g_malloc(DISK_SIZE);
    g_autofree char *out = NULL;
    g_autoptr(GError) err = NULL;
    BlockDriverState *src, *dst;
    TestJobEvents ev = { 0 };
    MirrorParams p;
    MirrorStats st;
    JobWatch w;
    JobEvent *e;
    gsize len;
    Job *job;

    if (!have_nbdkit()) {
        return;
    }
    k = kit_new(false);
    file = kit_disk(k, DISK_SIZE);
    src_path = g_build_filename(k->dir, "src.img", NULL);
    test_fill_pattern(data, 0, DISK_SIZE, 7);
    g_assert_true(g_file_set_contents(src_path, (char *)data, DISK_SIZE,
                                      NULL));
    kit_start(k, "--filter=delay", "file", file, "wdelay=100ms", NULL);
    src = test_open(src_path, "raw", 0);
    dst = open_rc(k->uri, "30", "1");
    mirror_params_init(&p);
    p.auto_complete = true;
    p.chunk_size = 256 * KiB;
    job = mirror_job_new("job0", src, dst, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&ev, job);
    job_start(job);

    w = (JobWatch) { .job = job, .ev = &ev, .progress = MiB,
                     .reconnects = 1 };
    wait_for(job_progressed, &w, 60);
    kit_kill(k);
    wait_for(job_reconnect_events, &w, 30);
    mirror_get_stats(job, &st);
    g_assert_true(st.reconnecting);
    g_assert_cmpstr(st.io_status, ==, "reconnecting");
    e = &g_array_index(ev.events, JobEvent, ev.events->len - 1);
    g_assert_cmpint(e->type, ==, JOB_EVENT_RECONNECTING);
    g_assert_cmpstr(e->node, ==, "target");
    g_assert_true(e->reconnecting);
    g_assert_cmpint(e->delay_s, ==, 30);

    kit_start(k, "file", file, NULL);
    test_run_until(&ev.concluded, 120);
    g_assert_cmpint(job->ret, ==, 0);
    g_assert_cmpint(ev.reconnect_count, ==, 2);
    g_assert_cmpint(ev.error_count, ==, 0);
    for (guint i = 0; i < ev.events->len; i++) {
        e = &g_array_index(ev.events, JobEvent, i);
        if (e->type == JOB_EVENT_RECONNECTING && !e->reconnecting) {
            g_assert_cmpint(e->error, ==, 0);
            g_assert_cmpint(e->elapsed_ns, >, 0);
        }
    }
    g_assert_true(g_file_get_contents(k->disk, &out, &len, NULL));
    g_assert_cmpint(len, ==, DISK_SIZE);
    g_assert_true(memcmp(out, data, DISK_SIZE) == 0);

    job_unref(job);
    test_job_events_clear(&ev);
    bdrv_unref(src);
    bdrv_unref(dst);
}

/* ---- the job flushes again after its target reconnected ---- */

typedef struct FlushWatch {
    BlockDriverState *null;     /* the target's storage, recording */
    int flushes_at_ready;       /* FLUSH records when READY came */
} FlushWatch;

static int count_flushes(BlockDriverState *null)
{
    GArray *rec = null_get_records(null);
    int n = 0;

    for (guint i = 0; i < rec->len; i++) {
        n += g_array_index(rec, NullRecord, i).op == NULL_OP_FLUSH;
    }
    return n;
}

static void flush_watch_event(Job *job, const JobEvent *ev, void *opaque)
{
    FlushWatch *fw = opaque;

    if (ev->type == JOB_EVENT_READY) {
        fw->flushes_at_ready = count_flushes(fw->null);
    }
}

static bool target_flushing(void *opaque)
{
    NullStats st;

    null_get_stats(opaque, &st);
    return st.requests[NULL_OP_FLUSH] > 0;
}

/*
 * The connection is cut while the job's READY flush is in flight on the
 * server: the driver reconnects, flushes, and sends the job's flush
 * again; that one succeeds, but the target reconnected since it began,
 * so the job flushes once more before READY: four flushes reached the
 * storage by then (the first, cut; the driver's; the job's again; the
 * job's next), three without the rule.
 */
static void test_mirror_flush_after_reconnect(void)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *src;
    TestJobEvents ev = { 0 };
    FlushWatch fw = { 0 };
    OwnServer o;
    MirrorParams p;
    JobWatch w;
    Job *job;

    own_start(&o, "null:size=8M,latency-ns=100000000,record=on", "1");
    src = test_open("null:size=8M", NULL, 0);
    fw.null = o.null;
    mirror_params_init(&p);
    p.auto_complete = false;
    job = mirror_job_new("job0", src, o.bs, &p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&ev, job);
    job_add_listener(job, flush_watch_event, &fw);
    job_start(job);

    wait_for(target_flushing, o.null, 60);
    g_assert_cmpint(ev.ready_count, ==, 0);
    nbdsrv_disconnect_all(o.srv);
    w = (JobWatch) { .job = job, .ev = &ev, .reconnects = 2 };
    wait_for(job_reconnect_events, &w, 30);
    wait_for(job_is_ready, &w, 60);
    g_assert_cmpint(fw.flushes_at_ready, ==, 4);
    g_assert_true(job_complete(job, &err));
    g_assert_no_error(err);
    test_run_until(&ev.concluded, 60);
    g_assert_cmpint(job->ret, ==, 0);

    job_unref(job);
    test_job_events_clear(&ev);
    bdrv_unref(src);
    own_end(&o);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/reconnect/restart-unix", test_restart_unix);
    g_test_add_func("/nbd/reconnect/restart-unix-multiconn",
                    test_restart_unix_multiconn);
    g_test_add_func("/nbd/reconnect/restart-tcp", test_restart_tcp);
    g_test_add_func("/nbd/reconnect/restart-sigterm", test_restart_sigterm);
    g_test_add_func("/nbd/reconnect/size-changed", test_size_changed);
    g_test_add_func("/nbd/reconnect/delay-expires", test_delay_expires);
    g_test_add_func("/nbd/reconnect/delay-zero", test_delay_zero);
    g_test_add_func("/nbd/reconnect/uri-wins", test_uri_wins);
    g_test_add_func("/nbd/reconnect/io-timeout", test_io_timeout_stall);
    g_test_add_func("/nbd/reconnect/io-timeout-reset",
                    test_io_timeout_reset);
    g_test_add_func("/nbd/reconnect/count-null", test_count_null);
    g_test_add_func("/nbd/reconnect/mirror-target",
                    test_mirror_target_restart);
    g_test_add_func("/nbd/reconnect/mirror-flush-again",
                    test_mirror_flush_after_reconnect);
    return g_test_run();
}
