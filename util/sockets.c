/*
 * Socket tuning; see util/sockets.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/sockets.h"

#include <sys/socket.h>

void socket_unix_tune_sndbuf(int fd)
{
    int v = SOCKET_UNIX_SNDBUF;

    if (fd < 0) {
        return;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
}
