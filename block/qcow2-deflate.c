/*
 * qcow2-lite: deflating one cluster for a compressed write, in QEMU's
 * format (raw deflate whose matches reach back at most 4 KiB, so that
 * QEMU's inflate with a 4 KiB window reads it), and the cheap test that
 * spares incompressible clusters a full deflate.
 *
 * With ISA-L (libisal, found at build time) a cluster is deflated by
 * igzip at its level 1 with hist_bits = 12; without it, by zlib at level 1
 * with a 4 KiB window.  Both streams are plain deflate: any inflate reads
 * either.  On 64 KiB clusters of text igzip took a seventh of the CPU time
 * of zlib's fastest level, for output 7% smaller: as small as zlib's level
 * 6, QEMU's (docs/qcow2-lite.md); and deflate was most of the CPU time of
 * `convert -c`.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <errno.h>
#include <zlib.h>
#ifdef HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

/* ---- is it worth it? ---- */

/*
 * Incompressible data (random, already compressed) costs a full deflate
 * for nothing: before compressing a cluster larger than 4 KiB, deflate
 * four 1 KiB samples spread over it at zlib's fastest level.  If none of
 * them shrinks by an eighth, the cluster is stored normally.  This only
 * ever gives up compression, never correctness; it can miss a cluster
 * whose samples look random while the rest would compress.
 */
#define QCOW2_PROBE_SAMPLES     4
#define QCOW2_PROBE_BYTES       1024

static void qcow2_zstream_free(gpointer p)
{
    z_stream *z = p;

    deflateEnd(z);
    g_free(z);
}

/*
 * This thread's z_stream in @key, deflating at zlib's level 1 with QEMU's
 * window and @mem_level, ready for a new stream; NULL if zlib failed.
 */
static z_stream *qcow2_zstream(GPrivate *key, int mem_level)
{
    z_stream *z = g_private_get(key);

    if (z) {
        return deflateReset(z) == Z_OK ? z : NULL;
    }
    z = g_new0(z_stream, 1);
    if (deflateInit2(z, Z_BEST_SPEED, Z_DEFLATED, -QCOW2_DEFLATE_WINDOW_BITS,
                     mem_level, Z_DEFAULT_STRATEGY) != Z_OK) {
        g_free(z);
        return NULL;
    }
    g_private_set(key, z);
    return z;
}

static GPrivate qcow2_probe_key = G_PRIVATE_INIT(qcow2_zstream_free);

bool qcow2_worth_compressing(const uint8_t *in, int64_t cs)
{
    uint8_t out[QCOW2_PROBE_BYTES];

    if (cs <= 4096) {
        return true;
    }
    for (int i = 0; i < QCOW2_PROBE_SAMPLES; i++) {
        /* memLevel 4: a 2048-entry hash (each reset clears it) and room
         * for one 1 KiB sample in one block. */
        z_stream *z = qcow2_zstream(&qcow2_probe_key, 4);

        if (!z) {
            return true;
        }
        z->next_in = (Bytef *)in + i * (cs / QCOW2_PROBE_SAMPLES);
        z->avail_in = QCOW2_PROBE_BYTES;
        z->next_out = out;
        z->avail_out = sizeof(out);
        if (deflate(z, Z_FINISH) == Z_STREAM_END &&
            sizeof(out) - z->avail_out < QCOW2_PROBE_BYTES * 7 / 8) {
            return true;
        }
    }
    return false;
}

/* ---- deflate ---- */

#ifdef HAVE_ISAL

/* igzip's level 1 working memory, one per worker thread. */
static GPrivate qcow2_isal_buf_key = G_PRIVATE_INIT(g_free);

static int64_t qcow2_deflate_isal(const uint8_t *in, int64_t cs,
                                  uint8_t *out)
{
    uint8_t *level_buf = g_private_get(&qcow2_isal_buf_key);
    struct isal_zstream z;
    int ret;

    if (!level_buf) {
        level_buf = g_malloc(ISAL_DEF_LVL1_DEFAULT);
        g_private_set(&qcow2_isal_buf_key, level_buf);
    }
    isal_deflate_stateless_init(&z);
    z.level = 1;
    z.level_buf = level_buf;
    z.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
    z.hist_bits = QCOW2_DEFLATE_WINDOW_BITS;
    z.gzip_flag = IGZIP_DEFLATE;
    z.end_of_stream = 1;
    z.flush = NO_FLUSH;
    z.next_in = (uint8_t *)in;
    z.avail_in = cs;
    z.next_out = out;
    z.avail_out = cs - 1;
    ret = isal_deflate_stateless(&z);
    if (ret == STATELESS_OVERFLOW) {
        return 0;       /* did not fit in cs - 1 bytes */
    }
    return ret == COMP_OK ? (int64_t)z.total_out : -EIO;
}

#else

/*
 * zlib's level 1 runs its fast matcher (no lazy matching, short hash
 * chains): on 64 KiB clusters of text and of program binaries it
 * compresses 1.3x to 1.6x faster than QEMU's level 6 for output 3% to 7%
 * larger.  One z_stream per worker thread, reset between clusters.
 */
static GPrivate qcow2_deflate_key = G_PRIVATE_INIT(qcow2_zstream_free);

static int64_t qcow2_deflate_zlib(const uint8_t *in, int64_t cs,
                                  uint8_t *out)
{
    z_stream *z = qcow2_zstream(&qcow2_deflate_key, 9);

    if (!z) {
        return -ENOMEM;
    }
    z->next_in = (Bytef *)in;
    z->avail_in = cs;
    z->next_out = out;
    z->avail_out = cs - 1;
    if (deflate(z, Z_FINISH) != Z_STREAM_END) {
        return 0;       /* did not fit in cs - 1 bytes */
    }
    return cs - 1 - z->avail_out;
}

#endif

int64_t qcow2_deflate(const uint8_t *in, int64_t cs, uint8_t *out)
{
#ifdef HAVE_ISAL
    return qcow2_deflate_isal(in, cs, out);
#else
    return qcow2_deflate_zlib(in, cs, out);
#endif
}

const char *qcow2_deflate_backend(void)
{
#ifdef HAVE_ISAL
    return "isa-l";
#else
    return "zlib";
#endif
}
