/*
 * mirror-tool checksum: a digest of an image's guest-visible bytes.
 *
 * The digest (the contract, docs/mirror-tool.md "checksum"): cut the
 * image of S bytes into blocks of 64 KiB (the last one shorter when S is
 * not a multiple); h[i] = SHA-256 of block i's bytes; the digest is
 * SHA-256 of h[0] || h[1] || ... || h[n-1] || S as 8 bytes little-endian.
 * It depends only on the bytes a guest reads: a hole, a zero cluster and
 * written zeroes hash alike, so a raw file, its qcow2 copy and an NBD
 * export of either give the same digest.
 *
 * Blocks that block status says read as zero are not read: their hash is
 * known.  The others are read with image-scan, and hashed on the pool's
 * workers (blocks of read zeroes skip SHA-256 too); the block hashes go
 * into the outer hash in offset order as the chunks in front finish.
 * SHA-256 is GnuTLS's (nettle's, with the CPU's SHA instructions where it
 * has them): bench/README.md says why.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "qemu-mirror-tool/image-scan.h"
#include "util/cutils.h"

#include <gnutls/crypto.h>
#include <stdio.h>
#include <string.h>

#define CHECKSUM_BLOCK  (64 * KiB)
#define CHECKSUM_HASH   32              /* SHA-256 */

/* One planned piece, in offset order: a chunk read (its block hashes),
 * or a zero run (hashes NULL). */
typedef struct ChecksumPiece {
    int64_t offset;
    int64_t bytes;
    uint8_t *hashes;
    bool done;
} ChecksumPiece;

typedef struct ChecksumState {
    int64_t size;
    GQueue pieces;              /* planned, not yet hashed in */
    gnutls_hash_hd_t outer;
    uint8_t zero[CHECKSUM_HASH];  /* of a block of zeroes */
    uint8_t *zeroes;            /* a run of copies of @zero, to hash in */
} ChecksumState;

#define CHECKSUM_ZEROES_RUN 1024

static void checksum_piece_free(gpointer p)
{
    g_free(((ChecksumPiece *)p)->hashes);
    g_free(p);
}

/* SHA-256 of @len zero bytes. */
static void checksum_zero_hash(int64_t len, uint8_t *out)
{
    g_autofree uint8_t *z = g_malloc0(len);

    gnutls_hash_fast(GNUTLS_DIG_SHA256, z, len, out);
}

/* Hash in the pieces in front that are done. */
static void checksum_feed(ChecksumState *st)
{
    ChecksumPiece *p;

    while ((p = g_queue_peek_head(&st->pieces)) && p->done) {
        int64_t full = p->bytes / CHECKSUM_BLOCK;
        int64_t tail = p->bytes % CHECKSUM_BLOCK;

        g_queue_pop_head(&st->pieces);
        if (p->hashes) {
            gnutls_hash(st->outer, p->hashes,
                        (full + !!tail) * CHECKSUM_HASH);
        } else {
            uint8_t h[CHECKSUM_HASH];

            while (full > 0) {
                int64_t n = MIN(full, CHECKSUM_ZEROES_RUN);

                gnutls_hash(st->outer, st->zeroes, n * CHECKSUM_HASH);
                full -= n;
            }
            if (tail) {
                /* Only the image's last block is short. */
                checksum_zero_hash(tail, h);
                gnutls_hash(st->outer, h, CHECKSUM_HASH);
            }
        }
        checksum_piece_free(p);
    }
}

static void checksum_plan(void *opaque, ImageScanChunk *c)
{
    ChecksumState *st = opaque;
    ChecksumPiece *p = g_new0(ChecksumPiece, 1);

    p->offset = c->offset;
    p->bytes = c->bytes;
    if (c->zero_run) {
        p->done = true;
    } else {
        p->hashes = g_malloc(DIV_ROUND_UP(c->bytes, CHECKSUM_BLOCK) *
                             CHECKSUM_HASH);
        c->user = p;
    }
    g_queue_push_tail(&st->pieces, p);
    checksum_feed(st);
}

/* On a pool worker: the hash of every block of the chunk. */
static void checksum_work(void *opaque, ImageScanChunk *c)
{
    ChecksumState *st = opaque;
    ChecksumPiece *p = c->user;

    for (int64_t i = 0; i * CHECKSUM_BLOCK < c->bytes; i++) {
        const uint8_t *b = c->data[0] + i * CHECKSUM_BLOCK;
        int64_t len = MIN(CHECKSUM_BLOCK, c->bytes - i * CHECKSUM_BLOCK);
        uint8_t *out = p->hashes + i * CHECKSUM_HASH;

        if (len == CHECKSUM_BLOCK && buffer_is_zero(b, len)) {
            memcpy(out, st->zero, CHECKSUM_HASH);
        } else {
            gnutls_hash_fast(GNUTLS_DIG_SHA256, b, len, out);
        }
    }
}

static void checksum_done(void *opaque, ImageScanChunk *c)
{
    ChecksumPiece *p = c->user;

    p->done = true;
    checksum_feed(opaque);
}

int cmd_checksum(int argc, char **argv)
{
    g_autofree char *format = NULL;
    g_autofree char *open_opts = NULL;
    g_auto(ImageScanOpts) so = { 0 };
    int64_t chunk_size;
    int max_in_flight;
    g_autoptr(GHashTable) user_opts = NULL;
    g_autoptr(GHashTable) opts = NULL;
    g_autoptr(GHashTable) nbd_opts = g_hash_table_new_full(
        g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(BlockDriverState) bs = NULL;
    gboolean force_share = FALSE;
    ChecksumState st = { 0 };
    ImageScanConfig cfg = { 0 };
    ImageScanError serr;
    uint8_t digest[CHECKSUM_HASH];
    uint8_t size_le[8];
    GOptionEntry entries[] = {
        TOOL_IMAGE_ENTRIES(&format, &open_opts),
        TOOL_FORCE_SHARE_ENTRY(&force_share),
        IMAGE_SCAN_ENTRIES(&so, "64K"),
        TOOL_NBD_TIMEOUT_ENTRIES,
        TOOL_THREADS_ENTRY,
        { NULL },
    };
    static const char summary[] =
        "Print a digest of the bytes IMG reads as, then IMG, as sha256sum\n"
        "does: SHA-256 over the SHA-256 of every 64 KiB block and the size\n"
        "(docs: checksum).  Holes, zero clusters and written zeroes hash\n"
        "alike: an image, its copies in other formats and NBD exports of\n"
        "them give the same digest.";

    if (!tool_parse_options("IMG", summary, entries, &argc, &argv) ||
        !tool_expect_args("checksum", argc, 1, "one image") ||
        !tool_check_format("-f", format) ||
        !tool_parse_open_options("--open-opts", open_opts, &user_opts)) {
        return TOOL_EXIT_USAGE;
    }
    if (!image_scan_parse_opts(&so, nbd_opts, &chunk_size,
                               &max_in_flight)) {
        return TOOL_EXIT_USAGE;
    }
    if (so.chunk && chunk_size < CHECKSUM_BLOCK) {
        tool_error("--chunk-size '%s': must be at least 64K (the block "
                   "the digest hashes)", so.chunk);
        return TOOL_EXIT_USAGE;
    }
    opts = tool_open_options(argv[1], nbd_opts, user_opts);
    bs = tool_open_image(NULL, argv[1], format,
                         force_share ? BDRV_O_FORCE_SHARE : 0, opts);
    if (!bs) {
        return TOOL_EXIT_USAGE;
    }

    st.size = bdrv_getlength(bs);
    g_queue_init(&st.pieces);
    checksum_zero_hash(CHECKSUM_BLOCK, st.zero);
    st.zeroes = g_malloc(CHECKSUM_ZEROES_RUN * CHECKSUM_HASH);
    for (int i = 0; i < CHECKSUM_ZEROES_RUN; i++) {
        memcpy(st.zeroes + i * CHECKSUM_HASH, st.zero, CHECKSUM_HASH);
    }
    if (gnutls_hash_init(&st.outer, GNUTLS_DIG_SHA256) < 0) {
        g_error("SHA-256 is not available from GnuTLS");
    }
    cfg = (ImageScanConfig) {
        .bs = { bs },
        .n = 1,
        .end = st.size,
        .chunk_size = chunk_size ? MAX(chunk_size, CHECKSUM_BLOCK) : 0,
        .max_in_flight = max_in_flight,
        .align = CHECKSUM_BLOCK,
        .plan = checksum_plan,
        .work = checksum_work,
        .done = checksum_done,
        .opaque = &st,
    };
    image_scan_run(&cfg, &serr);
    g_free(st.zeroes);
    if (serr.ret < 0) {
        g_queue_clear_full(&st.pieces, checksum_piece_free);
        gnutls_hash_deinit(st.outer, NULL);
        tool_error("%s of '%s' failed at offset %" G_GINT64_FORMAT ": %s",
                   serr.status ? "block status" : "read", argv[1],
                   serr.offset, g_strerror(-serr.ret));
        return TOOL_EXIT_FAILURE;
    }
    g_assert(g_queue_is_empty(&st.pieces));
    for (int i = 0; i < 8; i++) {
        size_le[i] = (uint64_t)st.size >> (8 * i);
    }
    gnutls_hash(st.outer, size_le, sizeof(size_le));
    gnutls_hash_deinit(st.outer, digest);
    for (int i = 0; i < CHECKSUM_HASH; i++) {
        printf("%02x", digest[i]);
    }
    printf("  %s\n", argv[1]);
    return tool_finish_stdout(TOOL_EXIT_OK);
}
