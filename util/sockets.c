/*
 * Socket tuning and UNIX listeners; see util/sockets.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/sockets.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/cutils.h"

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

/* Is there a live listener behind the UNIX socket @addr? */
static bool socket_unix_in_use(const struct sockaddr_un *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool in_use;

    if (fd < 0) {
        return false;
    }
    in_use = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0
             || errno == EAGAIN || errno == EINPROGRESS;
    close(fd);
    return in_use;
}

bool socket_unix_listen(SocketUnixListener *l, const char *what,
                        const char *path, int backlog, GError **errp)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    struct stat st;
    int fd;

    g_autofree char *name = what ? g_strdup_printf("%s '%s'", what, path)
                                 : g_strdup_printf("'%s'", path);

    *l = (SocketUnixListener) { .fd = -1 };
    if (!*path) {
        g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                    "%s: socket path missing", name);
        return false;
    }
    if (strlen(path) >= sizeof(addr.sun_path)) {
        g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                    "%s: socket path too long (at most %zu bytes)",
                    name, sizeof(addr.sun_path) - 1);
        return false;
    }
    strcpy(addr.sun_path, path);
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                        "%s: exists and is not a socket", name);
            return false;
        }
        if (socket_unix_in_use(&addr)) {
            g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                        "%s: a server is already listening there", name);
            return false;
        }
        unlink(path);   /* left behind by a dead server */
    } else if (errno != ENOENT) {
        g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_IO, "%s: %s", name,
                    g_strerror(errno));
        return false;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(fd, backlog) < 0 || lstat(path, &st) < 0) {
        int err = errno;

        g_set_error(errp, CUTILS_ERROR,
                    err == EADDRINUSE ? CUTILS_ERROR_INVALID : CUTILS_ERROR_IO,
                    "%s: %s", name, g_strerror(err));
        if (fd >= 0) {
            close(fd);
        }
        return false;
    }
    l->fd = fd;
    l->path = g_strdup(path);
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    return true;
}

void socket_unix_listener_close(SocketUnixListener *l)
{
    struct stat st;

    if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
    }
    if (l->path && lstat(l->path, &st) == 0 && st.st_dev == l->dev &&
        st.st_ino == l->ino) {
        unlink(l->path);
    }
    g_clear_pointer(&l->path, g_free);
}
