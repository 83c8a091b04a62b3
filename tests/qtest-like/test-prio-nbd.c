/*
 * The NBD client serves a guest's requests (BDRV_REQ_PRIO) first: a PRIO
 * request that finds every slot of the connection taken waits ahead of
 * the requests queued before it, which a real nbdkit sees in the order
 * requests arrive (one server thread, the log filter).  And the flag
 * never reaches the wire: PRIO requests of every kind go through
 * libnbd's strict flag checks and nbdkit's.  Skips without nbdkit.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <inttypes.h>

#include "block/block.h"
#include "block/nbd.h"
#include "tests/qtest-like/nbd-server.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#define REQ_BYTES   4096
#define QUEUED      16              /* normal requests waiting for a slot */
#define NORMAL      (NBDBLK_MAX_IN_FLIGHT + QUEUED)
#define PRIO_OFFSET (NORMAL * REQ_BYTES)

typedef struct LogServer {
    Server *srv;
    char *dir;
    char *log;
} LogServer;

/* nbdkit with one thread (requests logged in arrival order). */
static void log_server_start(LogServer *ls)
{
    g_autofree char *logarg = NULL;

    ls->dir = g_dir_make_tmp("test-prio-nbd-XXXXXX", NULL);
    ls->log = g_build_filename(ls->dir, "log", NULL);
    logarg = g_strdup_printf("logfile=%s", ls->log);
    ls->srv = server_start("-t", "1", "--filter=log", "memory", "64M",
                           logarg, NULL);
}

static void log_server_stop(LogServer *ls)
{
    server_free(ls->srv);
    g_unlink(ls->log);
    g_rmdir(ls->dir);
    g_free(ls->log);
    g_free(ls->dir);
}

/* The line number in @lines of the request at @offset of @kind. */
static int log_position(char **lines, const char *kind, int64_t offset)
{
    g_autofree char *at = g_strdup_printf(" offset=0x%" PRIx64 " ",
                                          (uint64_t)offset);

    for (int i = 0; lines[i]; i++) {
        if (strstr(lines[i], kind) && strstr(lines[i], at)) {
            return i;
        }
    }
    g_test_message("no %s at %" PRId64 " in the log", kind, offset);
    g_assert_not_reached();
}

/*
 * One connection: NBDBLK_MAX_IN_FLIGHT reads take its slots, QUEUED more
 * wait, then a PRIO read comes, all in one turn of the loop.  The server
 * gets the PRIO read before every queued one.
 */
static void test_queue_prio_first(void)
{
    LogServer ls = { 0 };
    g_autoptr(BlockDriverState) bs = NULL;
    g_autofree uint8_t *buf = NULL;
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    Pending p[NORMAL + 1] = { 0 };
    int prio_at;

    if (!have_nbdkit()) {
        return;
    }
    log_server_start(&ls);
    bs = must_open(ls.srv->uri, BDRV_O_RDWR, "1");
    buf = g_malloc((NORMAL + 1) * REQ_BYTES);
    for (int i = 0; i < NORMAL; i++) {
        bdrv_aio_pread(bs, i * REQ_BYTES, REQ_BYTES, buf + i * REQ_BYTES, 0,
                       pending_cb, &p[i]);
    }
    bdrv_aio_pread(bs, PRIO_OFFSET, REQ_BYTES, buf + PRIO_OFFSET,
                   BDRV_REQ_PRIO, pending_cb, &p[NORMAL]);
    run_until_all(p, NORMAL + 1, 60);
    for (int i = 0; i <= NORMAL; i++) {
        g_assert_cmpint(p[i].ret, ==, 0);
    }

    g_assert_true(g_file_get_contents(ls.log, &text, NULL, NULL));
    lines = g_strsplit(text, "\n", -1);
    prio_at = log_position(lines, " Read id=", PRIO_OFFSET);
    /* Behind the requests that had slots, ahead of those that waited. */
    for (int i = 0; i < NBDBLK_MAX_IN_FLIGHT; i++) {
        g_assert_cmpint(log_position(lines, " Read id=", i * REQ_BYTES), <,
                        prio_at);
    }
    for (int i = NBDBLK_MAX_IN_FLIGHT; i < NORMAL; i++) {
        g_assert_cmpint(log_position(lines, " Read id=", i * REQ_BYTES), >,
                        prio_at);
    }
    /* FIFO within the class. */
    for (int i = NBDBLK_MAX_IN_FLIGHT + 1; i < NORMAL; i++) {
        g_assert_cmpint(log_position(lines, " Read id=", i * REQ_BYTES), >,
                        log_position(lines, " Read id=",
                                     (i - 1) * REQ_BYTES));
    }
    g_clear_pointer(&bs, bdrv_unref);
    log_server_stop(&ls);
}

/*
 * Every kind of request with BDRV_REQ_PRIO: accepted, served, and sent
 * with no flag of its own (libnbd and nbdkit refuse unknown flags).
 */
static void test_prio_every_kind(void)
{
    LogServer ls = { 0 };
    g_autoptr(BlockDriverState) bs = NULL;
    g_autoptr(GArray) ext = g_array_new(FALSE, FALSE, sizeof(BlockExtent));
    uint8_t w[REQ_BYTES], r[REQ_BYTES];
    Pending p[6] = { 0 };

    if (!have_nbdkit()) {
        return;
    }
    memset(w, 0x5a, sizeof(w));
    log_server_start(&ls);
    bs = must_open(ls.srv->uri, BDRV_O_RDWR, "1");
    bdrv_aio_pwrite(bs, 0, sizeof(w), w, BDRV_REQ_PRIO, pending_cb, &p[0]);
    run_until_all(&p[0], 1, 30);
    bdrv_aio_pread(bs, 0, sizeof(r), r, BDRV_REQ_PRIO, pending_cb, &p[1]);
    bdrv_aio_submit(bs, BDRV_OP_ZERO, MiB, MiB, NULL, BDRV_REQ_PRIO, NULL,
                    pending_cb, &p[2]);
    bdrv_aio_submit(bs, BDRV_OP_DISCARD, 2 * MiB, MiB, NULL, BDRV_REQ_PRIO,
                    NULL, pending_cb, &p[3]);
    bdrv_aio_submit(bs, BDRV_OP_FLUSH, 0, 0, NULL, BDRV_REQ_PRIO, NULL,
                    pending_cb, &p[4]);
    bdrv_aio_submit(bs, BDRV_OP_STATUS, 0, MiB, NULL, BDRV_REQ_PRIO, ext,
                    pending_cb, &p[5]);
    run_until_all(p, 6, 30);
    for (int i = 0; i < 6; i++) {
        g_assert_cmpint(p[i].ret, ==, 0);
    }
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    g_assert_cmpuint(ext->len, >=, 1);
    g_assert_cmpint(count_lines(ls.log, (const char *[]){ " Write id=",
                                "fua=0", NULL }), ==, 1);
    g_assert_cmpint(count_lines(ls.log, (const char *[]){ " Zero id=",
                                "trim=0 fua=0 fast=0", NULL }), ==, 1);
    g_assert_cmpint(count_lines(ls.log, (const char *[]){ " Trim id=",
                                "fua=0", NULL }), ==, 1);
    g_assert_cmpint(count_lines(ls.log, (const char *[]){ " Flush id=",
                                NULL }), ==, 1);
    g_clear_pointer(&bs, bdrv_unref);
    log_server_stop(&ls);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/nbd/prio/queue-first", test_queue_prio_first);
    g_test_add_func("/nbd/prio/every-kind", test_prio_every_kind);
    return g_test_run();
}
