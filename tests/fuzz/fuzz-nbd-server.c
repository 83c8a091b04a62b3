/*
 * libFuzzer target: the input is what an NBD client sends to our server.
 *
 * Each input but its two framing bytes (below) goes, byte for byte, into
 * one end of a socketpair whose other end is a connection of an
 * in-process NbdServer (block/export/nbd-server*.c) exporting a null
 * node: the handshake (client flags, options) and then the transmission
 * phase (requests, WRITE payloads), exactly as they would arrive from a
 * socket.  The main context is pumped while the input is written and the
 * server's output is read and dropped (a client that reads everything),
 * then the write side is shut down, and pumping goes on until the server
 * has closed the connection and every request it submitted has completed.
 *
 * The input is framed by two leading bytes, then the client's bytes:
 *   byte 0  the export: bit 0 clear writable, set read-only;
 *   byte 1  how the bytes are written: 0 as much as the socket takes at
 *           a time, N > 0 at most N bytes, then one main-loop iteration,
 *           so that the server sees headers, options and payloads split
 *           across reads at every point.
 * tests/fuzz/record-nbd-sessions.sh and make-corpus-nbd.py write seeds in
 * this framing.
 *
 * A crash, a leak, an assertion or a connection that never ends (the
 * pump gives up after FUZZ_MAX_ITERATIONS and aborts) is a bug.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzzing=true.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "block/block.h"
#include "block/export/nbd-server-int.h"
#include "tests/qtest-like/test-util.h"

/* A small export: reads and writes stay cheap; requests beyond it still
 * reach every check. */
#define FUZZ_EXPORT_SPEC        "null:size=4M"
#define FUZZ_MAX_ITERATIONS     1000000
/* The framing bytes before the client's (see the top of this file). */
#define FUZZ_HEADER_SIZE        2

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *fuzz_dir;
static BlockDriverState *fuzz_bs[2];
static NbdServer *fuzz_srv[2];

static void fuzz_cleanup(void)
{
    for (int i = 0; i < 2; i++) {
        nbdsrv_free(g_steal_pointer(&fuzz_srv[i]));
        g_clear_pointer(&fuzz_bs[i], bdrv_unref);
    }
    test_scratch_free(g_steal_pointer(&fuzz_dir));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = g_getenv("FUZZ_TMPDIR") ? g_getenv("FUZZ_TMPDIR") :
                       g_file_test("/dev/shm", G_FILE_TEST_IS_DIR) ?
                       "/dev/shm" : g_get_tmp_dir();
    g_autofree char *tmpl = g_build_filename(base, "fuzz-nbd-XXXXXX", NULL);

    /* As in fuzz-qcow2.c: no thread churn for LeakSanitizer to see. */
    g_setenv("G_SLICE", "always-malloc", TRUE);
    g_thread_pool_set_max_unused_threads(-1);
    g_thread_pool_set_max_idle_time(0);

    fuzz_dir = g_mkdtemp(g_steal_pointer(&tmpl));
    g_assert(fuzz_dir);
    for (int i = 0; i < 2; i++) {
        g_autofree char *addr = g_strdup_printf("unix:%s/nbd%d.sock",
                                                fuzz_dir, i);
        g_autoptr(GError) err = NULL;

        fuzz_bs[i] = test_open(FUZZ_EXPORT_SPEC, NULL,
                               i ? 0 : BDRV_O_RDWR);
        /* Named, so that the name checks matter; "" selects it too. */
        fuzz_srv[i] = nbdsrv_new(fuzz_bs[i], addr, "exp", i == 1, &err);
        g_assert_no_error(err);
    }
    atexit(fuzz_cleanup);
    return 0;
}

/* Read and drop whatever the server sent. */
static void fuzz_drain(int fd)
{
    uint8_t buf[64 * 1024];

    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        /* a client that reads everything */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    NbdServer *srv;
    size_t off = 0;
    bool shut = false;
    size_t split;
    int fds[2];
    int iter;

    if (size < FUZZ_HEADER_SIZE) {
        return -1;
    }
    srv = fuzz_srv[data[0] & 1];
    split = data[1] ? data[1] : size;
    data += FUZZ_HEADER_SIZE;
    size -= FUZZ_HEADER_SIZE;
    g_assert(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        0, fds) == 0);
    nbdsrv_client_new(srv, fds[0]);     /* the server owns fds[0] now */

    for (iter = 0; iter < FUZZ_MAX_ITERATIONS; iter++) {
        if (off < size) {
            ssize_t n = send(fds[1], data + off, MIN(size - off, split),
                             MSG_DONTWAIT | MSG_NOSIGNAL);

            if (n > 0) {
                off += n;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR) {
                off = size;     /* the server hung up */
            }
        }
        if (off == size && !shut) {
            shutdown(fds[1], SHUT_WR);
            shut = true;
        }
        fuzz_drain(fds[1]);
        g_main_context_iteration(NULL, FALSE);
        if (nbdsrv_is_drained(srv)) {
            break;
        }
    }
    /* End of input always ends the connection: not ending is a hang. */
    g_assert(nbdsrv_is_drained(srv));
    g_assert(nbdsrv_get_held_bytes(srv) == 0);
    close(fds[1]);
    return 0;
}
