/*
 * qcow2-lite backing files: open the chain (raw or qcow2, read-only),
 * read through it and report its block status, all synchronously on the
 * worker that carries the request.
 *
 * A relative backing name is resolved against the directory of the image
 * that names it.  The format comes from the backing format extension, or
 * is probed (qcow2 magic, else raw).  The chain is at most
 * QCOW2_MAX_BACKING_DEPTH deep, and a file that appears twice in it (same
 * device and inode) is a loop: both are refused at open.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "block/file-lock.h"
#include "util/file-io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

void qcow2_extent_append(GArray *out, int64_t offset, int64_t length,
                         unsigned flags, int depth, int64_t host)
{
    BlockExtent e = {
        .offset = offset,
        .length = length,
        .flags = flags,
        .depth = depth,
        .host_offset = (flags & BDRV_BLOCK_OFFSET_VALID) ? host : 0,
    };

    if (length <= 0) {
        return;
    }
    if (out->len) {
        BlockExtent *last = &g_array_index(out, BlockExtent, out->len - 1);

        if (last->offset + last->length == offset && last->flags == flags &&
            last->depth == depth &&
            (!(flags & BDRV_BLOCK_OFFSET_VALID) ||
             last->host_offset + last->length == host)) {
            last->length += length;
            return;
        }
    }
    g_array_append_val(out, e);
}

/* The path of @name as seen from the image @overlay. */
static char *qcow2_backing_path(const char *overlay, const char *name)
{
    const char *slash = strrchr(overlay, '/');

    if (g_path_is_absolute(name) || !slash) {
        return g_strdup(name);
    }
    return g_strdup_printf("%.*s%s", (int)(slash - overlay + 1), overlay,
                           name);
}

/* qcow2 magic at the start of @fd? */
static bool qcow2_backing_probe(int fd)
{
    uint8_t buf[4];

    return pread(fd, buf, 4, 0) == 4 && qcow2_be32(buf) == QCOW2_MAGIC;
}

bool qcow2_backing_open(BDRVQcow2State *s, GHashTable *chain,
                        GError **errp)
{
    const char *name = s->header.backing_file;
    const char *fmt = s->header.backing_format;
    g_autofree char *path = NULL;
    g_autofree char *key = NULL;
    Qcow2Backing *b;
    struct stat st;
    int fd;

    if (!name) {
        return true;
    }
    if (g_str_has_prefix(name, "json:")) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "backing file '%s': json: file names are not "
                    "supported", name);
        return false;
    }
    if (fmt && strcmp(fmt, "raw") && strcmp(fmt, "qcow2")) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "backing file '%s': backing format '%s' is not "
                    "supported (raw or qcow2 only)", name, fmt);
        return false;
    }
    if (s->depth + 1 > QCOW2_MAX_BACKING_DEPTH) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "backing file '%s': the backing chain is deeper than "
                    "%d images", name, QCOW2_MAX_BACKING_DEPTH);
        return false;
    }
    path = qcow2_backing_path(s->filename, name);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Could not open backing file '%s': %s", path,
                    g_strerror(errno));
        return false;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "backing file '%s' is not a regular file", path);
        close(fd);
        return false;
    }
    key = g_strdup_printf("%ju:%ju", (uintmax_t)st.st_dev,
                          (uintmax_t)st.st_ino);
    if (g_hash_table_contains(chain, key)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "backing file '%s' creates a loop in the backing chain",
                    path);
        close(fd);
        return false;
    }
    if (!fmt) {
        fmt = qcow2_backing_probe(fd) ? "qcow2" : "raw";
    }

    b = g_new0(Qcow2Backing, 1);
    b->filename = g_steal_pointer(&path);
    b->format = g_strdup(fmt);
    b->fd = -1;
    if (!strcmp(fmt, "raw")) {
        b->fd = fd;
        b->size = st.st_size;
        /* QEMU's raw backing node: reads, shares everything. */
        if (!file_lock_take(fd, s->locking,
                            s->read_perm ? BLK_PERM_CONSISTENT_READ : 0,
                            BLK_PERM_ALL, b->filename, errp)) {
            qcow2_backing_close(b);
            return false;
        }
    } else {
        close(fd);
        b->qcow2 = qcow2_state_open(b->filename, false, s->depth + 1, chain,
                                    s->locking,
                                    s->read_perm ? BLK_PERM_CONSISTENT_READ
                                                 : 0,
                                    s->force_share, errp);
        if (!b->qcow2) {
            g_prefix_error(errp, "backing file '%s': ", b->filename);
            qcow2_backing_close(b);
            return false;
        }
        b->size = b->qcow2->size;
    }
    s->backing = b;
    return true;
}

void qcow2_backing_close(Qcow2Backing *b)
{
    if (!b) {
        return;
    }
    if (b->fd >= 0) {
        close(b->fd);
    }
    if (b->qcow2) {
        qcow2_state_close(b->qcow2);
    }
    g_free(b->filename);
    g_free(b->format);
    g_free(b);
}

int qcow2_backing_read(Qcow2Backing *b, int64_t offset, int64_t bytes,
                       uint8_t *buf)
{
    int64_t inside = offset < b->size ? MIN(bytes, b->size - offset) : 0;
    int64_t done = 0;
    int ret = 0;

    if (b->qcow2 && inside > 0) {
        ret = qcow2_do_read(b->qcow2, offset, inside, buf);
        done = inside;
    }
    if (b->fd >= 0 && done < inside) {
        /* Short when the file shrank: the rest reads as zeroes. */
        done = file_pread_full(b->fd, buf, inside, offset, 0);
        if (done < 0) {
            return done;
        }
    }
    memset(buf + done, 0, bytes - done);
    return ret;
}

/* A raw file: data and holes from SEEK_DATA / SEEK_HOLE (all data when
 * the file system cannot tell). */
static int qcow2_raw_status(Qcow2Backing *b, int64_t offset, int64_t bytes,
                            GArray *out)
{
    const unsigned data = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    const unsigned hole = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED |
                          BDRV_BLOCK_OFFSET_VALID;
    int64_t end = offset + bytes;
    off_t d, h;

    d = lseek(b->fd, offset, SEEK_DATA);
    if (d < 0 && errno == ENXIO) {
        qcow2_extent_append(out, offset, bytes, hole, 0, offset);
        return 0;
    }
    if (d < 0) {
        qcow2_extent_append(out, offset, bytes, data, 0, offset);
        return 0;
    }
    if (d > offset) {
        qcow2_extent_append(out, offset, MIN(d, end) - offset, hole, 0,
                            offset);
        return 0;
    }
    h = lseek(b->fd, offset, SEEK_HOLE);
    if (h <= offset) {
        h = end;
    }
    qcow2_extent_append(out, offset, MIN(h, end) - offset, data, 0, offset);
    return 0;
}

int qcow2_backing_status(Qcow2Backing *b, int64_t offset, int64_t bytes,
                         GArray *out)
{
    g_assert(offset < b->size);
    bytes = MIN(bytes, b->size - offset);
    if (b->qcow2) {
        return qcow2_do_block_status(b->qcow2, offset, bytes, out);
    }
    return qcow2_raw_status(b, offset, bytes, out);
}
