/*
 * qcow2-lite image creation: version 3, 16-bit refcounts, any cluster
 * size, an optional backing file (with its format in the header
 * extension), preallocation=off or metadata.
 *
 * Layout, as qemu-img writes it: the header cluster, the refcount table,
 * the refcount blocks, the L1 table; with preallocation=metadata every L2
 * table and then every data cluster (NORMAL, COPIED, refcount 1), the file
 * truncated past the last one.  The refcount table is sized for the
 * largest file the image can grow to (within QEMU's 8 MiB limit), so that
 * writes rarely need to grow it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Qcow2Layout {
    int64_t cs;
    int64_t l1_entries;
    int64_t l1_clusters;
    int64_t n_l2;               /* preallocated L2 tables */
    int64_t n_data;             /* preallocated data clusters */
    int64_t rt_clusters;
    int64_t refblocks;
    int64_t used;               /* clusters in use */
    /* first cluster of each area */
    int64_t rt0, rb0, l10, l20, data0;
} Qcow2Layout;

static bool qcow2_layout(const Qcow2CreateParams *p, Qcow2Layout *l,
                         GError **errp)
{
    int64_t cs = INT64_C(1) << p->cluster_bits;
    int64_t per_rb = cs / 2;                /* 16-bit refcounts */
    int64_t l2_span = cs * (cs / 8);
    int64_t max_rt = QCOW2_MAX_REFTABLE_BYTES / cs;
    int64_t base, biggest;

    *l = (Qcow2Layout) { .cs = cs };
    l->l1_entries = DIV_ROUND_UP(p->size, l2_span);
    if (l->l1_entries > QCOW2_MAX_L1_BYTES / 8) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Image size %" PRId64 " is too big for %" PRId64
                    "-byte clusters", p->size, cs);
        return false;
    }
    l->l1_clusters = DIV_ROUND_UP(l->l1_entries * 8, cs);
    if (p->prealloc_metadata) {
        l->n_l2 = l->l1_entries;
        l->n_data = DIV_ROUND_UP(p->size, cs);
    }
    base = 1 + l->l1_clusters + l->n_l2 + l->n_data;
    /* The file when every cluster is written. */
    biggest = 1 + l->l1_clusters + l->l1_entries + DIV_ROUND_UP(p->size, cs);

    l->rt_clusters = 1;
    l->refblocks = 1;
    for (int i = 0; i < 64; i++) {
        int64_t used = base + l->rt_clusters + l->refblocks;
        int64_t rb = DIV_ROUND_UP(used, per_rb);
        int64_t target = p->small_reftable ? used
                         : MAX(used, biggest + l->rt_clusters +
                               DIV_ROUND_UP(biggest, per_rb));
        int64_t rt = DIV_ROUND_UP(DIV_ROUND_UP(target, per_rb) * 8, cs);

        rt = MAX(MIN(rt, max_rt), DIV_ROUND_UP(rb * 8, cs));
        if (rb == l->refblocks && rt == l->rt_clusters) {
            break;
        }
        l->refblocks = rb;
        l->rt_clusters = rt;
    }
    if (l->rt_clusters > max_rt) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Image size %" PRId64 " is too big for %" PRId64
                    "-byte clusters", p->size, cs);
        return false;
    }
    l->rt0 = 1;
    l->rb0 = l->rt0 + l->rt_clusters;
    l->l10 = l->rb0 + l->refblocks;
    l->l20 = l->l10 + l->l1_clusters;
    l->data0 = l->l20 + l->n_l2;
    l->used = l->data0 + l->n_data;
    return true;
}

static int qcow2_create_write(int fd, int64_t offset, const void *buf,
                              int64_t bytes)
{
    int64_t done = 0;

    while (done < bytes) {
        ssize_t n = pwrite(fd, (const uint8_t *)buf + done, bytes - done,
                           offset + done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? -errno : -ENOSPC;
        }
        done += n;
    }
    return 0;
}

/* Refcount table, refcount blocks, L1 and (preallocated) L2 tables. */
static int qcow2_create_tables(int fd, const Qcow2Layout *l)
{
    int64_t cs = l->cs;
    int64_t per_rb = cs / 2;
    int64_t per_l2 = cs / 8;
    g_autofree uint8_t *buf = g_malloc(MAX(l->rt_clusters, l->l1_clusters) *
                                       cs);
    int ret;

    memset(buf, 0, l->rt_clusters * cs);
    for (int64_t k = 0; k < l->refblocks; k++) {
        qcow2_put_be64(buf + k * 8, (l->rb0 + k) * cs);
    }
    ret = qcow2_create_write(fd, l->rt0 * cs, buf, l->rt_clusters * cs);
    for (int64_t k = 0; ret == 0 && k < l->refblocks; k++) {
        memset(buf, 0, cs);
        for (int64_t c = k * per_rb; c < MIN((k + 1) * per_rb, l->used);
             c++) {
            qcow2_put_be16(buf + (c - k * per_rb) * 2, 1);
        }
        ret = qcow2_create_write(fd, (l->rb0 + k) * cs, buf, cs);
    }
    if (ret < 0) {
        return ret;
    }
    memset(buf, 0, l->l1_clusters * cs);
    for (int64_t i = 0; i < l->n_l2; i++) {
        qcow2_put_be64(buf + i * 8, (uint64_t)(l->l20 + i) * cs |
                       QCOW_OFLAG_COPIED);
    }
    ret = qcow2_create_write(fd, l->l10 * cs, buf, l->l1_clusters * cs);
    for (int64_t i = 0; ret == 0 && i < l->n_l2; i++) {
        memset(buf, 0, cs);
        for (int64_t j = 0; j < per_l2 && i * per_l2 + j < l->n_data; j++) {
            qcow2_put_be64(buf + j * 8, (uint64_t)(l->data0 + i * per_l2 +
                                                   j) * cs |
                           QCOW_OFLAG_COPIED);
        }
        ret = qcow2_create_write(fd, (l->l20 + i) * cs, buf, cs);
    }
    return ret;
}

bool qcow2_create_file(const char *filename, const Qcow2CreateParams *p,
                       GError **errp)
{
    Qcow2Layout l;
    Qcow2Header h = { 0 };
    g_autofree uint8_t *hdr = NULL;
    int fd, ret;

    if (!qcow2_layout(p, &l, errp)) {
        return false;
    }
    h.cluster_bits = p->cluster_bits;
    h.size = p->size;
    h.l1_size = l.l1_entries;
    h.l1_table_offset = l.l1_clusters ? l.l10 * l.cs : 0;
    h.refcount_table_offset = l.rt0 * l.cs;
    h.refcount_table_clusters = l.rt_clusters;
    h.backing_file = (char *)p->backing_file;
    h.backing_format = (char *)p->backing_format;
    hdr = g_malloc0(l.cs);
    if (!qcow2_header_build(hdr, l.cs, &h, errp)) {
        return false;
    }
    fd = bdrv_create_file(filename, O_RDWR, false, errp);
    if (fd < 0) {
        return false;
    }
    ret = qcow2_create_write(fd, 0, hdr, l.cs);
    if (ret == 0) {
        ret = qcow2_create_tables(fd, &l);
    }
    if (ret == 0 && ftruncate(fd, l.used * l.cs) < 0) {
        ret = -errno;
    }
    if (ret == 0 && fsync(fd) < 0) {
        ret = -errno;
    }
    if (close(fd) < 0 && ret == 0) {
        ret = -errno;
    }
    if (ret < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO,
                    "Could not create '%s': %s", filename, g_strerror(-ret));
        return false;
    }
    return true;
}

/* The backing file must exist, be readable in its format, and not be the
 * image about to be created. */
static bool qcow2_create_check_backing(const char *filename,
                                       const Qcow2CreateParams *p,
                                       GError **errp)
{
    g_autofree char *dir = g_path_get_dirname(filename);
    g_autofree char *path = g_path_is_absolute(p->backing_file)
                            ? g_strdup(p->backing_file)
                            : g_build_filename(dir, p->backing_file, NULL);
    g_autoptr(GHashTable) chain = g_hash_table_new_full(g_str_hash,
                                                        g_str_equal,
                                                        g_free, NULL);
    struct stat st, target;
    BDRVQcow2State *b;

    if (stat(path, &st) < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Could not open backing file '%s': %s", path,
                    g_strerror(errno));
        return false;
    }
    if (stat(filename, &target) == 0 && target.st_dev == st.st_dev &&
        target.st_ino == st.st_ino) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "'%s' cannot be its own backing file", filename);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing file '%s' is not a regular file", path);
        return false;
    }
    if (!strcmp(p->backing_format, "qcow2")) {
        /* Only its size and format are read: no locks (QEMU opens it
         * with force-share and no I/O). */
        b = qcow2_state_open(path, false, 1, chain, ON_OFF_AUTO_OFF, 0, true,
                             errp);
        if (!b) {
            g_prefix_error(errp, "backing file '%s': ", path);
            return false;
        }
        qcow2_state_close(b);
    }
    return true;
}

bool qcow2_create(const char *filename, int64_t size, GHashTable *options,
                  GError **errp)
{
    Qcow2CreateParams p = { .cluster_bits = 16 };
    const char *v;
    int64_t n;

    v = g_hash_table_lookup(options, "cluster_size");
    if (v) {
        if (!parse_size(NULL, v, &n, NULL) || n < 512 ||
            n > (INT64_C(1) << QCOW2_MAX_CLUSTER_BITS) || !is_power_of_2(n)) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                        "cluster_size '%s': must be a power of 2 between "
                        "512 and 2M", v);
            return false;
        }
        p.cluster_bits = __builtin_ctzll(n);
    }
    v = g_hash_table_lookup(options, "preallocation");
    if (v && strcmp(v, "off") && strcmp(v, "metadata")) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "preallocation '%s': qcow2 supports off and metadata",
                    v);
        return false;
    }
    p.prealloc_metadata = v && !strcmp(v, "metadata");
    p.backing_file = g_hash_table_lookup(options, "backing_file");
    p.backing_format = g_hash_table_lookup(options, "backing_fmt");
    if (p.backing_format && !p.backing_file) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing_fmt needs backing_file");
        return false;
    }
    if (p.backing_file && !p.backing_format) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Backing file specified without backing format "
                    "(add backing_fmt=raw or backing_fmt=qcow2)");
        return false;
    }
    if (p.backing_format && strcmp(p.backing_format, "raw") &&
        strcmp(p.backing_format, "qcow2")) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing_fmt '%s': raw or qcow2 only", p.backing_format);
        return false;
    }
    if (p.backing_file && (!*p.backing_file ||
                           strlen(p.backing_file) > QCOW2_MAX_BACKING_NAME)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "backing_file: the name must have 1 to %d bytes",
                    QCOW2_MAX_BACKING_NAME);
        return false;
    }
    if (p.backing_file && p.prealloc_metadata) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "preallocation=metadata cannot be used with a backing "
                    "file (it would hide the backing file's data)");
        return false;
    }
    if (size > INT64_MAX - 511) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Image size %" PRId64 " is too big", size);
        return false;
    }
    p.size = QEMU_ALIGN_UP(size, 512);
    if (p.backing_file && !qcow2_create_check_backing(filename, &p, errp)) {
        return false;
    }
    return qcow2_create_file(filename, &p, errp);
}
