/*
 * Socket tuning shared by the NBD client (block/nbd-conn.c) and the NBD
 * server (block/export-nbd.c).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_SOCKETS_H
#define UTIL_SOCKETS_H

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

#endif /* UTIL_SOCKETS_H */
