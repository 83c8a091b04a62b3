/*
 * qcow2-lite compressed clusters (zlib, raw deflate with a 4 KiB window,
 * as QEMU writes them): reading, and compressed writes for
 * `convert -c`.
 *
 * Compression runs on the thread-pool worker that carries the request,
 * with the lock dropped, so that the requests in flight compress on as
 * many cores as the pool has threads.  Only the byte allocation and the L2
 * update take the lock.  Chunks are packed back to back; a chunk spills
 * into the next host cluster only when that one is free, and every host
 * cluster a chunk touches gets one reference for it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"
#include "util/file-io.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>
#include <zlib.h>

void qcow2_compressed_range(const BDRVQcow2State *s, uint64_t entry,
                            int64_t *offset, int64_t *length)
{
    int x = 62 - (s->cluster_bits - 8);
    uint64_t sectors = ((entry >> x) &
                        ((UINT64_C(1) << (s->cluster_bits - 8)) - 1)) + 1;

    *offset = entry & ((UINT64_C(1) << x) - 1);
    *length = sectors * 512 - (*offset & 511);
}

/* Inflate @in (@in_len bytes) into exactly @out_len bytes. */
static int qcow2_inflate(const uint8_t *in, int64_t in_len, uint8_t *out,
                         int64_t out_len)
{
    z_stream z = { 0 };
    int ret;

    if (inflateInit2(&z, -QCOW2_DEFLATE_WINDOW_BITS) != Z_OK) {
        return -ENOMEM;
    }
    z.next_in = (Bytef *)in;
    z.avail_in = in_len;
    z.next_out = out;
    z.avail_out = out_len;
    ret = inflate(&z, Z_FINISH);
    inflateEnd(&z);
    /* Trailing input is allowed; the output must be a whole cluster. */
    if ((ret == Z_STREAM_END || ret == Z_BUF_ERROR) && z.avail_out == 0) {
        return 0;
    }
    return -EIO;
}

int qcow2_read_compressed(BDRVQcow2State *s, uint64_t entry, uint8_t *out)
{
    int64_t off, len, end;
    g_autofree uint8_t *in = NULL;
    int64_t n;

    qcow2_compressed_range(s, entry, &off, &len);
    g_mutex_lock(&s->lock);
    end = qcow2_file_end(s);
    g_mutex_unlock(&s->lock);
    /* Never inside the header, never past the end of the file. */
    if (off < s->cluster_size || off >= end ||
        (uint64_t)off > L2E_OFFSET_MASK) {
        return -EIO;
    }
    len = MIN(len, end - off);      /* a short last chunk is fine */
    in = g_malloc(len);
    n = file_pread_full(s->fd, in, len, off, 0);
    if (n < 0) {
        return n;
    }
    return qcow2_inflate(in, n, out, s->cluster_size);
}

/*
 * At most one compression per CPU at a time: more pool workers than CPUs
 * compressing only fight for the CPUs and their caches, and keep the
 * workers that would read the source busy.
 */
static GMutex qcow2_compress_lock;
static GCond qcow2_compress_cond;
static int qcow2_compress_running;

static void qcow2_compress_enter(void)
{
    int max = MAX(1, (int)g_get_num_processors());

    g_mutex_lock(&qcow2_compress_lock);
    while (qcow2_compress_running >= max) {
        g_cond_wait(&qcow2_compress_cond, &qcow2_compress_lock);
    }
    qcow2_compress_running++;
    g_mutex_unlock(&qcow2_compress_lock);
}

static void qcow2_compress_leave(void)
{
    g_mutex_lock(&qcow2_compress_lock);
    qcow2_compress_running--;
    g_cond_signal(&qcow2_compress_cond);
    g_mutex_unlock(&qcow2_compress_lock);
}

/*
 * Store @clen bytes of compressed data for the guest cluster at @guest,
 * whose allocation record the caller holds.
 */
static int qcow2_store_compressed(BDRVQcow2State *s, int64_t guest,
                                  const uint8_t *data, int64_t clen)
{
    int x = 62 - (s->cluster_bits - 8);
    int64_t host;
    uint64_t entry;
    int ret;

    g_mutex_lock(&s->lock);
    ret = s->corrupt ? -EIO : qcow2_l2_prepare(s, guest);
    if (ret == 0) {
        ret = qcow2_alloc_bytes(s, clen, &host);
    }
    if (ret == 0) {
        ret = qcow2_check_overlap(s, host, clen, "compressed data");
        if (ret < 0) {
            qcow2_update_refcount(s, host, clen, -1);
        }
    }
    g_mutex_unlock(&s->lock);
    if (ret < 0) {
        return ret;
    }

    ret = qcow2_pwrite(s, host, data, clen);

    g_mutex_lock(&s->lock);
    if (ret == 0) {
        uint64_t extra = (host + clen - 1) / 512 - host / 512;

        entry = QCOW_OFLAG_COMPRESSED | (extra << x) | (uint64_t)host;
        ret = qcow2_l2_set(s, guest, 1, &entry);
        s->need_sync = true;
    }
    if (ret < 0) {
        qcow2_update_refcount(s, host, clen, -1);
    }
    g_mutex_unlock(&s->lock);
    return ret;
}

/*
 * One guest cluster at @guest: compressed when it is unallocated and
 * shrinks, else written normally.  @bytes < cs for the last data of an
 * image: the rest of the cluster must read as zero already (no backing
 * data there), since it is stored as zeroes.
 */
static int qcow2_write_one_compressed(BDRVQcow2State *s, int64_t guest,
                                      int64_t bytes, const uint8_t *buf,
                                      uint8_t *padded, uint8_t *out)
{
    int64_t cs = s->cluster_size;
    Qcow2AllocRecord rec;
    uint64_t entry;
    int64_t n, clen;
    int ret;

    ret = qcow2_lock_lookup(s, guest, cs, 1, &entry, &n);
    if (ret < 0) {
        return ret;
    }
    if (qcow2_l2_type(entry) != QCOW2_CLUSTER_UNALLOCATED ||
        (bytes < cs && s->backing && guest + bytes < s->backing->size)) {
        g_mutex_unlock(&s->lock);
        return qcow2_do_write(s, guest, bytes, buf, 0);
    }
    qcow2_alloc_record_add(s, &rec, guest, guest + cs);
    g_mutex_unlock(&s->lock);

    if (bytes < cs) {
        memcpy(padded, buf, bytes);
        memset(padded + bytes, 0, cs - bytes);
        buf = padded;
    }
    qcow2_compress_enter();
    clen = qcow2_worth_compressing(buf, cs) ? qcow2_deflate(buf, cs, out)
                                            : 0;
    qcow2_compress_leave();
    ret = clen < 0 ? clen : 0;
    if (clen > 0) {
        ret = qcow2_store_compressed(s, guest, out, clen);
    }

    g_mutex_lock(&s->lock);
    qcow2_alloc_record_remove(s, &rec);
    g_mutex_unlock(&s->lock);
    if (ret == 0 && clen == 0) {
        /* Incompressible: a normal cluster. */
        ret = qcow2_do_write(s, guest, bytes, buf, 0);
    }
    return ret;
}

/* The buffers of a compressed write: the data, and scratch clusters. */
typedef struct Qcow2CompressedWrite {
    const uint8_t *buf;
    uint8_t *padded;
    uint8_t *out;
} Qcow2CompressedWrite;

/* One cluster, or the piece of one, of a compressed write. */
static int64_t qcow2_compressed_step(BDRVQcow2State *s, int64_t offset,
                                     int64_t bytes, int64_t done,
                                     void *opaque)
{
    Qcow2CompressedWrite *w = opaque;
    int64_t cs = s->cluster_size;
    int64_t in = qcow2_offset_in_cluster(s, offset);
    int64_t len = MIN(bytes, cs - in);
    int ret;

    if (in || (len < cs && len < bytes)) {
        /* Not a whole cluster, nor the end of the data. */
        ret = qcow2_do_write(s, offset, len, w->buf + done, 0);
    } else {
        ret = qcow2_write_one_compressed(s, offset, len, w->buf + done,
                                         w->padded, w->out);
    }
    return ret < 0 ? ret : len;
}

int qcow2_do_write_compressed(BDRVQcow2State *s, int64_t offset,
                              int64_t bytes, const uint8_t *buf)
{
    g_autofree uint8_t *padded = g_malloc(s->cluster_size);
    g_autofree uint8_t *out = g_malloc(s->cluster_size);
    Qcow2CompressedWrite w = { .buf = buf, .padded = padded, .out = out };

    return qcow2_run_steps(s, offset, bytes, qcow2_compressed_step, &w);
}
