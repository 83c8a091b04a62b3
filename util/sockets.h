/*
 * Sockets shared by the NBD client (block/nbd-conn.c), the NBD server
 * (block/export/nbd-server.c) and the QMP server (qemu-mirror-tool/qmp.c):
 * send-buffer tuning, and the one rule for every UNIX socket we listen on.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_SOCKETS_H
#define UTIL_SOCKETS_H

#include <glib.h>
#include <stdbool.h>
#include <sys/types.h>

/*
 * Send buffer asked for on UNIX stream sockets that carry bulk data.  With
 * the kernel's default (about 208 KiB) every 1 MiB request takes five or
 * more send() calls, each waking the peer; bench/nbd.sh W3 ran 20-25%
 * faster with this (2 MiB and more all gave the same).
 */
#define SOCKET_UNIX_SNDBUF (4 << 20)

/*
 * Raise the send buffer of @fd, a connected UNIX stream socket, to
 * SOCKET_UNIX_SNDBUF: past net.core.wmem_max when the process may
 * (CAP_NET_ADMIN, SO_SNDBUFFORCE), else as far as wmem_max allows.
 * Best effort: failures are ignored.  Not for TCP, whose send buffer the
 * kernel sizes itself unless told a fixed value.
 */
void socket_unix_tune_sndbuf(int fd);

/*
 * A UNIX socket we listen on, and the identity of the file we bound, so
 * that only that file is ever removed.
 */
typedef struct SocketUnixListener {
    int fd;             /* listening, non-blocking, close-on-exec; or -1 */
    char *path;         /* as given; NULL when not listening */
    dev_t dev;          /* device and inode of the socket file we made */
    ino_t ino;
} SocketUnixListener;

/*
 * Listen on the UNIX socket @path with @backlog, the one rule for every
 * listening path (QMP, --export, serve):
 * - an empty path, or one longer than sun_path, is refused;
 * - an existing file that is not a socket (a regular file, an image, a
 *   directory) is refused and left alone;
 * - a socket with a live listener behind it (another job's QMP socket,
 *   this job's own --export) is refused and left alone;
 * - a stale socket (nothing accepts on it) is replaced.
 * @what names the option in errors ("--qmp"): "--qmp 'src.raw': exists
 * and is not a socket"; NULL leaves it out ("'src.raw': ...").  Refusals are CUTILS_ERROR_INVALID
 * (bad usage: exit 2); system call failures are CUTILS_ERROR_IO.  On
 * success *@l holds the socket; on failure *@l is { .fd = -1 } and nothing
 * on disk was changed (but a stale socket's removal).
 */
bool socket_unix_listen(SocketUnixListener *l, const char *what,
                        const char *path, int backlog, GError **errp);

/*
 * Close @l's socket and remove its file if the file at the path is still
 * the one we bound (same device and inode): a socket someone else put
 * there since is left alone.  Safe on a listener that never listened or
 * was closed already.
 */
void socket_unix_listener_close(SocketUnixListener *l);

#endif /* UTIL_SOCKETS_H */
