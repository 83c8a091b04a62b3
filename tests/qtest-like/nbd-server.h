/*
 * Helpers for the NBD tests: real nbdkit servers on UNIX sockets in a
 * scratch directory (started and waited for, killed at the end), opening
 * NBD nodes, and a few request and assertion helpers.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_NBD_SERVER_H
#define TEST_NBD_SERVER_H

#include <glib.h>
#include "block/block.h"

typedef struct Server {
    char *dir;          /* scratch directory */
    char *sock;
    char *uri;          /* nbd+unix:///?socket=SOCK */
    GPid pid;           /* 0 once reaped */
} Server;

/* Is nbdkit installed?  If not, the test is marked skipped. */
bool have_nbdkit(void);

/*
 * Start "nbdkit -f -U SOCK -P PIDFILE --exit-with-parent ARGS..." (ARGS:
 * filters, plugin, parameters; NULL-terminated) and wait until it listens.
 */
Server *server_start(const char *first, ...) G_GNUC_NULL_TERMINATED;

/* Kill the server now (it stays allocated). */
void server_reap(Server *srv);

/* Kill the server and remove its directory. */
void server_free(Server *srv);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Server, server_free)

/* Open @uri with the "connections" option when not NULL. */
BlockDriverState *open_nbd(const char *uri, int flags,
                           const char *connections, GError **errp);

/* open_nbd() that must succeed. */
BlockDriverState *must_open(const char *uri, int flags,
                            const char *connections);

/* One asynchronous request's outcome. */
typedef struct Pending {
    bool done;
    int ret;
    gint64 done_us;
} Pending;

/* A BlockCompletionFunc filling a Pending. */
void pending_cb(void *opaque, int ret);

/* Run the loop until all @n requests of @p are done. */
void run_until_all(Pending *p, int n, int timeout_s);

/* Let the loop run for @ms. */
void run_for_ms(int ms);

/* A synchronous write with request flags. */
int pwrite_flags(BlockDriverState *bs, int64_t off, int64_t bytes,
                 const void *buf, BdrvRequestFlags flags);

/* Is "key: value" among the `info` lines of @bs? */
bool info_has(BlockDriverState *bs, const char *line);

void assert_zero(const uint8_t *buf, int64_t len);

/* Lines of @file containing every string of @needles (NULL-terminated). */
int count_lines(const char *file, const char *const *needles);

#endif /* TEST_NBD_SERVER_H */
