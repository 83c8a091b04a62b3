/*
 * Helpers for the NBD tests: nbdkit servers and small request helpers.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/block-int.h"
#include "block/nbd.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

/* ---- nbdkit servers ---- */


bool  have_nbdkit(void)
{
    g_autofree char *path = g_find_program_in_path("nbdkit");

    if (!path) {
        g_test_skip("nbdkit is not installed");
    }
    return path != NULL;
}

void  server_reap(Server *srv)
{
    if (srv->pid) {
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, NULL, 0);
        g_spawn_close_pid(srv->pid);
        srv->pid = 0;
    }
}

/*
 * Start "nbdkit -f -U SOCK -P PIDFILE --exit-with-parent ARGS..." (ARGS:
 * filters, plugin, parameters; NULL-terminated) and wait until it
 * listens: nbdkit writes the pid file once the socket is ready.
 */
Server * server_start(const char *first, ...)
{
    Server *srv = g_new0(Server, 1);
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autofree char *pidfile = NULL;
    g_autoptr(GError) err = NULL;
    const char *arg;
    va_list ap;

    srv->dir = g_dir_make_tmp("test-nbd-XXXXXX", &err);
    g_assert_no_error(err);
    srv->sock = g_build_filename(srv->dir, "sock", NULL);
    pidfile = g_build_filename(srv->dir, "pid", NULL);
    srv->uri = g_strdup_printf("nbd+unix:///?socket=%s", srv->sock);

    g_ptr_array_add(argv, "nbdkit");
    g_ptr_array_add(argv, "-f");
    g_ptr_array_add(argv, "--exit-with-parent");
    g_ptr_array_add(argv, "-U");
    g_ptr_array_add(argv, srv->sock);
    g_ptr_array_add(argv, "-P");
    g_ptr_array_add(argv, pidfile);
    va_start(ap, first);
    for (arg = first; arg; arg = va_arg(ap, const char *)) {
        g_ptr_array_add(argv, (char *)arg);
    }
    va_end(ap);
    g_ptr_array_add(argv, NULL);

    g_spawn_async(NULL, (char **)argv->pdata, NULL,
                  G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                  G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, &srv->pid, &err);
    g_assert_no_error(err);

    /* Wait for an event (the pid file), bounded; not a fixed delay. */
    for (int i = 0; i < 2000; i++) {
        gsize len = 0;
        g_autofree char *text = NULL;

        if (g_file_get_contents(pidfile, &text, &len, NULL) && len > 0 &&
            text[len - 1] == '\n') {
            return srv;
        }
        g_assert_cmpint(waitpid(srv->pid, NULL, WNOHANG), ==, 0);
        g_usleep(10 * 1000);
    }
    g_error("nbdkit did not start within 20 s");
}

void  server_free(Server *srv)
{
    GDir *dir;
    const char *name;

    server_reap(srv);
    dir = g_dir_open(srv->dir, 0, NULL);
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(srv->dir, name, NULL);

        g_remove(path);
    }
    if (dir) {
        g_dir_close(dir);
    }
    g_rmdir(srv->dir);
    g_free(srv->dir);
    g_free(srv->sock);
    g_free(srv->uri);
    g_free(srv);
}


/* ---- helpers ---- */

BlockDriverState * open_nbd(const char *uri, int flags,
                                  const char *connections, GError **errp)
{
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);

    if (connections) {
        g_hash_table_insert(opts, "connections", (char *)connections);
    }
    return bdrv_open(uri, NULL, flags, opts, errp);
}

BlockDriverState * must_open(const char *uri, int flags,
                                   const char *connections)
{
    g_autoptr(GError) err = NULL;
    BlockDriverState *bs = open_nbd(uri, flags, connections, &err);

    g_assert_no_error(err);
    g_assert_nonnull(bs);
    g_assert_cmpstr(bdrv_get_format_name(bs), ==, "nbd");
    return bs;
}


void  pending_cb(void *opaque, int ret)
{
    Pending *p = opaque;

    g_assert_false(p->done);
    p->done = true;
    p->ret = ret;
    p->done_us = g_get_monotonic_time();
}

void  run_until_all(Pending *p, int n, int timeout_s)
{
    for (int i = 0; i < n; i++) {
        test_run_until(&p[i].done, timeout_s);
    }
}

static gboolean flag_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

/* Let the loop run for @ms (requests get sent, servers receive them). */
void  run_for_ms(int ms)
{
    bool flag = false;

    g_timeout_add(ms, flag_cb, &flag);
    test_run_until(&flag, 60);
}

int  pwrite_flags(BlockDriverState *bs, int64_t off, int64_t bytes,
                        const void *buf, BdrvRequestFlags flags)
{
    Pending p = { 0 };

    bdrv_aio_pwrite(bs, off, bytes, buf, flags, pending_cb, &p);
    test_run_until(&p.done, 60);
    return p.ret;
}

/* Is "key: value" among the `info` lines of @bs? */
bool  info_has(BlockDriverState *bs, const char *line)
{
    BlockImageInfo info;
    bool found = false;

    g_assert_true(bdrv_get_info(bs, &info, NULL));
    g_assert_cmpstr(info.format, ==, "nbd");
    g_assert_cmpint(info.actual_size, ==, -1);
    for (guint i = 0; info.specific && i < info.specific->len; i++) {
        found |= !strcmp(g_ptr_array_index(info.specific, i), line);
    }
    bdrv_image_info_clear(&info);
    return found;
}

void  assert_zero(const uint8_t *buf, int64_t len)
{
    g_assert_true(buffer_is_zero(buf, len));
}

/* Count lines of @file that contain every string in @needles (NULL
 * terminated); the nbdkit log filter writes one line per event. */
int  count_lines(const char *file, const char *const *needles)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    int n = 0;

    g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
    lines = g_strsplit(text, "\n", -1);
    for (int i = 0; lines[i]; i++) {
        bool all = true;

        for (int j = 0; needles[j]; j++) {
            all &= strstr(lines[i], needles[j]) != NULL;
        }
        n += all;
    }
    return n;
}
