/*
 * One NBD server, several exports (nbdsrv_listen(), nbdsrv_export_add()),
 * with libnbd clients on a thread:
 *  - list: NBD_OPT_LIST lists every export in the order they were added,
 *    with their descriptions; each name picks its own image (size,
 *    read-only flag, bytes), writes land in that image only, and an
 *    unknown name or, without an export named "", the empty name gets
 *    NBD_REP_ERR_UNKNOWN;
 *  - remove: a safe removal is refused while a client has the export
 *    (nbdsrv_export_in_use()); a hard one drops that client while a
 *    request of it is in flight, the export goes only when that request
 *    completed, and a client of another export goes on reading;
 *  - remove-idle: an export nobody uses is gone before the removal
 *    returns, and its name is unknown from then on;
 *  - close: nbdsrv_close() lets a writer finish, flushes every export's
 *    node and releases everything;
 *  - single: with one connection allowed, no multi-conn (as QEMU's
 *    max-connections=1).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/block-int.h"
#include "util/cutils.h"

#include <errno.h>
#include <fcntl.h>
#include <libnbd.h>
#include <unistd.h>

#define DISKS 3

/* A server with raw images "a" (1 MiB of 'a', writable), "b" (2 MiB of
 * 'b', read-only, described) and "c" (3 MiB of 'c', writable). */
typedef struct Multi {
    char *dir;
    char *sock;
    char *image[DISKS];
    BlockDriverState *bs[DISKS];
    NbdServer *srv;
    NbdExport *exp[DISKS];
    int gone[DISKS];
} Multi;

static const char *const multi_name[DISKS] = { "a", "b", "c" };

static void multi_gone_cb(void *opaque)
{
    (*(int *)opaque)++;
}

static Multi *multi_new(void)
{
    Multi *m = g_new0(Multi, 1);
    g_autofree char *addr = NULL;
    g_autoptr(GError) err = NULL;

    m->dir = test_scratch_new();
    m->sock = g_build_filename(m->dir, "nbd.sock", NULL);
    addr = g_strdup_printf("unix:%s", m->sock);
    m->srv = nbdsrv_listen(addr, &err);
    g_assert_no_error(err);
    for (int i = 0; i < DISKS; i++) {
        size_t size = (size_t)(i + 1) * MiB;
        g_autofree char *data = g_malloc(size);

        memset(data, 'a' + i, size);
        m->image[i] = g_strdup_printf("%s/%s.raw", m->dir, multi_name[i]);
        g_assert_true(g_file_set_contents(m->image[i], data, size, NULL));
        m->bs[i] = test_open(m->image[i], "raw", i == 1 ? 0 : BDRV_O_RDWR);
        m->exp[i] = nbdsrv_export_add(m->srv, m->bs[i], multi_name[i],
                                      i == 1 ? "disk b" : NULL, i != 1,
                                      &err);
        g_assert_no_error(err);
        nbdsrv_export_set_gone_cb(m->exp[i], multi_gone_cb, &m->gone[i]);
    }
    return m;
}

static bool multi_all_gone(void *opaque)
{
    Multi *m = opaque;

    for (int i = 0; i < DISKS; i++) {
        if (m->gone[i] != 1) {
            return false;
        }
    }
    return true;
}

static void multi_free(Multi *m)
{
    if (m->srv) {
        nbdsrv_free(m->srv);
        run_loop_until(multi_all_gone, m, 30);
    }
    for (int i = 0; i < DISKS; i++) {
        g_assert_cmpint(m->bs[i]->refcnt, ==, 1);
        bdrv_unref(m->bs[i]);
        g_free(m->image[i]);
    }
    test_scratch_free(m->dir);
    g_free(m->sock);
    g_free(m);
}

/* The byte at @off of the image file @i. */
static char multi_file_byte(Multi *m, int i, off_t off)
{
    int fd = open(m->image[i], O_RDONLY);
    char c = 0;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, &c, 1, off), ==, 1);
    close(fd);
    return c;
}

/* ---- clients ---- */

typedef struct Listed {
    GPtrArray *names;
    GPtrArray *descs;
} Listed;

static int list_cb(void *opaque, const char *name, const char *desc)
{
    Listed *l = opaque;

    g_ptr_array_add(l->names, g_strdup(name));
    g_ptr_array_add(l->descs, g_strdup(desc));
    return 0;
}

/* NBD_OPT_LIST of @sock into @l (names, descriptions "" when none). */
static int list_exports(const char *sock, Listed *l)
{
    struct nbd_handle *h = nbd_create();
    int ret = 0;

    if (!h || nbd_set_opt_mode(h, true) < 0 ||
        nbd_connect_unix(h, sock) < 0 ||
        nbd_opt_list(h, (nbd_list_callback) { .callback = list_cb,
                                              .user_data = l }) < 0) {
        g_printerr("list: %s\n", nbd_get_error());
        ret = __LINE__;
    } else {
        nbd_opt_abort(h);
    }
    nbd_close(h);
    return ret;
}

/* A handle connected to export @name of @sock, or NULL. */
static struct nbd_handle *connect_export(const char *sock, const char *name)
{
    struct nbd_handle *h = nbd_create();

    if (!h) {
        return NULL;
    }
    if (nbd_set_export_name(h, name) < 0 || nbd_connect_unix(h, sock) < 0) {
        nbd_close(h);
        return NULL;
    }
    return h;
}

static int list_client(void *opaque)
{
    Multi *m = opaque;
    Listed l = {
        g_ptr_array_new_with_free_func(g_free),
        g_ptr_array_new_with_free_func(g_free),
    };
    struct nbd_handle *h;
    char buf[512];
    int ret = list_exports(m->sock, &l);

    NBD_FAIL_IF(ret);
    NBD_FAIL_IF(l.names->len != DISKS);
    for (int i = 0; i < DISKS; i++) {
        NBD_FAIL_IF(strcmp(l.names->pdata[i], multi_name[i]));
    }
    NBD_FAIL_IF(strcmp(l.descs->pdata[0], "") ||
                strcmp(l.descs->pdata[1], "disk b"));
    g_ptr_array_unref(l.names);
    g_ptr_array_unref(l.descs);

    for (int i = 0; i < DISKS; i++) {
        h = connect_export(m->sock, multi_name[i]);
        NBD_FAIL_IF(!h);
        NBD_FAIL_IF(nbd_get_size(h) != (int64_t)(i + 1) * MiB);
        NBD_FAIL_IF(nbd_is_read_only(h) != (i == 1));
        NBD_FAIL_IF(nbd_pread(h, buf, sizeof(buf), 0, 0) < 0);
        NBD_FAIL_IF(buf[0] != 'a' + i || buf[511] != 'a' + i);
        if (i == 1) {
            /* Read-only: the write is refused with EPERM. */
            NBD_FAIL_IF(nbd_pwrite(h, buf, sizeof(buf), 0, 0) != -1 ||
                        nbd_get_errno() != EPERM);
        } else {
            memset(buf, 'A' + i, sizeof(buf));
            NBD_FAIL_IF(nbd_pwrite(h, buf, sizeof(buf), 4096,
                                   LIBNBD_CMD_FLAG_FUA) < 0);
        }
        nbd_shutdown(h, 0);
        nbd_close(h);
    }
    /* An unknown name, and "" without an export named "". */
    NBD_FAIL_IF(connect_export(m->sock, "d"));
    NBD_FAIL_IF(connect_export(m->sock, ""));
    return 0;
}

static void test_list(void)
{
    Multi *m = multi_new();

    g_assert_cmpint(run_client(list_client, m), ==, 0);
    for (int i = 0; i < DISKS; i++) {
        g_assert_cmpint(multi_file_byte(m, i, 0), ==, 'a' + i);
        g_assert_cmpint(multi_file_byte(m, i, 4096), ==,
                        i == 1 ? 'b' : 'A' + i);
    }
    g_assert_null(nbdsrv_export_find(m->srv, "d"));
    g_assert_true(nbdsrv_export_find(m->srv, "b") == m->exp[1]);
    multi_free(m);
}

/* ---- removal while in use ---- */

typedef struct RemoveRun {
    Multi *m;
    gint sent;          /* client: connected, the slow read sent */
    GAsyncQueue *removed;   /* main: the slow export was removed */
    gint done;
    int ret;
} RemoveRun;

static bool remove_sent(void *opaque)
{
    return g_atomic_int_get(&((RemoveRun *)opaque)->sent);
}

static bool remove_done(void *opaque)
{
    return g_atomic_int_get(&((RemoveRun *)opaque)->done);
}

static int remove_client(RemoveRun *r)
{
    struct nbd_handle *slow = connect_export(r->m->sock, "slow");
    struct nbd_handle *b = connect_export(r->m->sock, "b");
    g_autofree char *buf = g_malloc(4096);
    int64_t cookie;
    int rc;

    NBD_FAIL_IF(!slow || !b);
    cookie = nbd_aio_pread(slow, buf, 4096, 0, NBD_NULL_COMPLETION, 0);
    NBD_FAIL_IF(cookie < 0);
    g_atomic_int_set(&r->sent, 1);
    g_main_context_wakeup(NULL);
    g_async_queue_pop(r->removed);
    /* The connection was dropped under the request. */
    do {
        rc = nbd_aio_command_completed(slow, cookie);
    } while (rc == 0 && nbd_poll(slow, -1) >= 0);
    NBD_FAIL_IF(rc != -1);
    /* The other export goes on serving. */
    NBD_FAIL_IF(nbd_pread(b, buf, 4096, 0, 0) < 0 || buf[0] != 'b');
    nbd_shutdown(b, 0);
    nbd_close(b);
    nbd_close(slow);
    return 0;
}

static gpointer remove_thread(gpointer opaque)
{
    RemoveRun *r = opaque;

    r->ret = remove_client(r);
    g_atomic_int_set(&r->done, 1);
    g_main_context_wakeup(NULL);
    return NULL;
}

static bool remove_in_flight(void *opaque)
{
    return nbdsrv_export_get_in_flight(opaque) == 1;
}

static bool remove_slow_gone(void *opaque)
{
    return *(int *)opaque == 1;
}

static void test_remove(void)
{
    Multi *m = multi_new();
    BlockDriverState *null = test_open("null:size=1M,latency-ns=300000000",
                                       NULL, BDRV_O_RDWR);
    g_autoptr(GError) err = NULL;
    RemoveRun r = { .m = m, .removed = g_async_queue_new() };
    NbdExport *slow;
    int slow_gone = 0;
    GThread *t;

    slow = nbdsrv_export_add(m->srv, null, "slow", NULL, true, &err);
    g_assert_no_error(err);
    nbdsrv_export_set_gone_cb(slow, multi_gone_cb, &slow_gone);
    g_assert_false(nbdsrv_export_in_use(slow));

    t = g_thread_new("client", remove_thread, &r);
    run_loop_until(remove_sent, &r, 60);
    run_loop_until(remove_in_flight, slow, 60);
    g_assert_true(nbdsrv_export_in_use(slow));
    g_assert_true(nbdsrv_export_in_use(m->exp[1]));
    g_assert_false(nbdsrv_export_in_use(m->exp[0]));
    g_assert_cmpuint(nbdsrv_export_get_client_count(slow), ==, 1);

    /* Hard: the client is dropped, the export waits for its read. */
    nbdsrv_export_remove(slow, true);
    g_assert_true(nbdsrv_export_is_removed(slow));
    g_assert_cmpuint(nbdsrv_export_get_client_count(slow), ==, 0);
    g_assert_cmpuint(nbdsrv_export_get_in_flight(slow), ==, 1);
    g_assert_cmpint(slow_gone, ==, 0);
    g_assert_null(nbdsrv_export_find(m->srv, "slow"));
    g_assert_cmpint(null->refcnt, ==, 2);
    run_loop_until(remove_slow_gone, &slow_gone, 30);
    g_assert_cmpint(null->refcnt, ==, 1);

    g_async_queue_push(r.removed, GINT_TO_POINTER(1));
    run_loop_until(remove_done, &r, 60);
    g_thread_join(t);
    g_assert_cmpint(r.ret, ==, 0);
    g_async_queue_unref(r.removed);
    bdrv_unref(null);
    multi_free(m);
}

/* ---- removal of an export nobody uses ---- */

static int unknown_client(void *opaque)
{
    Multi *m = opaque;
    struct nbd_handle *h;
    Listed l = {
        g_ptr_array_new_with_free_func(g_free),
        g_ptr_array_new_with_free_func(g_free),
    };

    NBD_FAIL_IF(connect_export(m->sock, "a"));
    NBD_FAIL_IF(list_exports(m->sock, &l));
    NBD_FAIL_IF(l.names->len != 2 || strcmp(l.names->pdata[0], "b") ||
                strcmp(l.names->pdata[1], "c"));
    g_ptr_array_unref(l.names);
    g_ptr_array_unref(l.descs);
    h = connect_export(m->sock, "c");
    NBD_FAIL_IF(!h);
    nbd_shutdown(h, 0);
    nbd_close(h);
    return 0;
}

static void test_remove_idle(void)
{
    Multi *m = multi_new();

    g_assert_false(nbdsrv_export_in_use(m->exp[0]));
    nbdsrv_export_remove(m->exp[0], false);
    g_assert_cmpint(m->gone[0], ==, 1);     /* before it returned */
    g_assert_cmpint(m->bs[0]->refcnt, ==, 1);
    g_assert_cmpint(run_client(unknown_client, m), ==, 0);
    /* The name is free again. */
    m->exp[0] = nbdsrv_export_add(m->srv, m->bs[0], "a", NULL, false,
                                  NULL);
    g_assert_nonnull(m->exp[0]);
    m->gone[0] = 0;
    nbdsrv_export_set_gone_cb(m->exp[0], multi_gone_cb, &m->gone[0]);
    multi_free(m);
}

/* ---- nbdsrv_close() ---- */

typedef struct CloseRun {
    bool done;
    int ret;
} CloseRun;

static void close_cb(void *opaque, int ret)
{
    CloseRun *c = opaque;

    c->ret = ret;
    c->done = true;
}

static int write_client(void *opaque)
{
    Multi *m = opaque;
    char buf[4096];

    for (int i = 0; i < DISKS; i += 2) {
        struct nbd_handle *h = connect_export(m->sock, multi_name[i]);

        NBD_FAIL_IF(!h);
        memset(buf, 'x', sizeof(buf));
        NBD_FAIL_IF(nbd_pwrite(h, buf, sizeof(buf), 0, 0) < 0);
        nbd_shutdown(h, 0);
        nbd_close(h);
    }
    return 0;
}

static void test_close(void)
{
    Multi *m = multi_new();
    CloseRun c = { 0 };

    g_assert_cmpint(run_client(write_client, m), ==, 0);
    nbdsrv_close(g_steal_pointer(&m->srv), 30000, close_cb, &c);
    test_run_until(&c.done, 30);
    g_assert_cmpint(c.ret, ==, 0);
    g_assert_true(multi_all_gone(m));
    g_assert_false(g_file_test(m->sock, G_FILE_TEST_EXISTS));
    g_assert_cmpint(multi_file_byte(m, 0, 0), ==, 'x');
    g_assert_cmpint(multi_file_byte(m, 1, 0), ==, 'b');
    g_assert_cmpint(multi_file_byte(m, 2, 0), ==, 'x');
    multi_free(m);
}

/* ---- one connection: no multi-conn ---- */

static int single_client(void *opaque)
{
    Multi *m = opaque;
    struct nbd_handle *h = connect_export(m->sock, "c");

    NBD_FAIL_IF(!h);
    NBD_FAIL_IF(nbd_can_multi_conn(h) != 0);
    nbd_shutdown(h, 0);
    nbd_close(h);
    return 0;
}

static void test_single(void)
{
    Multi *m = multi_new();

    nbdsrv_set_shared(m->srv, 1);
    g_assert_cmpint(run_client(single_client, m), ==, 0);
    multi_free(m);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/export-multi/list", test_list);
    g_test_add_func("/export-multi/remove", test_remove);
    g_test_add_func("/export-multi/remove-idle", test_remove_idle);
    g_test_add_func("/export-multi/close", test_close);
    g_test_add_func("/export-multi/single", test_single);
    return g_test_run();
}
