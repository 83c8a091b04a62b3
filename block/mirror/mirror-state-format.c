/*
 * The state file's format (see mirror-state-format.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block.h"
#include "block/mirror/mirror-state-format.h"

#include <inttypes.h>
#include <string.h>
#include <zlib.h>

static const char *const mirror_state_sync_names[] = { "full", "top",
                                                       "none" };

void mirror_state_identity_clear(MirrorStateIdentity *id)
{
    g_clear_pointer(&id->source, g_free);
    g_clear_pointer(&id->target, g_free);
}

void mirror_state_identity_copy(MirrorStateIdentity *dst,
                                const MirrorStateIdentity *src)
{
    *dst = *src;
    dst->source = g_strdup(src->source);
    dst->target = g_strdup(src->target);
}

static void put_u32(GByteArray *b, uint32_t v)
{
    uint8_t x[4];

    for (int i = 0; i < 4; i++) {
        x[i] = v >> (8 * i);
    }
    g_byte_array_append(b, x, 4);
}

static void put_u64(GByteArray *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static uint32_t mirror_state_crc(uint32_t seed, const uint8_t *p, size_t n)
{
    return crc32(seed, p, n);
}

GByteArray *mirror_state_encode(const MirrorStateIdentity *id, uint64_t seq,
                                const MirrorExtents *good,
                                int64_t switched_us)
{
    GByteArray *b = g_byte_array_new();
    size_t slen = strlen(id->source), tlen = strlen(id->target);
    guint n = mirror_extents_count(good);
    uint32_t hcrc;
    size_t hlen;

    g_byte_array_append(b, (const uint8_t *)MIRROR_STATE_MAGIC, 8);
    put_u32(b, MIRROR_STATE_VERSION);
    put_u32(b, MIRROR_STATE_HEADER_FIXED + slen + tlen + 4);
    put_u64(b, seq);
    put_u64(b, id->size);
    put_u64(b, id->granularity);
    put_u32(b, id->sync);
    put_u32(b, slen);
    put_u32(b, tlen);
    put_u32(b, switched_us > 0 ? MIRROR_STATE_F_SWITCHED : 0);
    put_u64(b, n);
    put_u64(b, good->bytes);
    put_u64(b, switched_us > 0 ? switched_us : 0);
    g_assert(b->len == MIRROR_STATE_HEADER_FIXED);
    g_byte_array_append(b, (const uint8_t *)id->source, slen);
    g_byte_array_append(b, (const uint8_t *)id->target, tlen);
    hcrc = mirror_state_crc(0, b->data, b->len);
    put_u32(b, hcrc);
    hlen = b->len;
    for (guint i = 0; i < n; i++) {
        const MirrorExtent *x = mirror_extents_get(good, i);

        put_u64(b, x->start);
        put_u64(b, x->end - x->start);
    }
    /* Seeded with the header's CRC: the two records belong together. */
    put_u32(b, mirror_state_crc(hcrc, b->data + hlen, b->len - hlen));
    return b;
}

static bool mirror_state_bad(GError **errp, const char *what)
{
    g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID, "%s", what);
    return false;
}

/* Check and collect the @n extents at @p into @f->good. */
static bool mirror_state_decode_extents(const uint8_t *p, uint64_t n,
                                        uint64_t total, MirrorStateFile *f,
                                        GError **errp)
{
    int64_t size = f->id.size, g = f->id.granularity;
    int64_t prev_end = -1;

    for (uint64_t i = 0; i < n; i++, p += 16) {
        uint64_t start = get_u64(p), len = get_u64(p + 8);

        if (len == 0 || start >= (uint64_t)size ||
            len > (uint64_t)size - start) {
            return mirror_state_bad(errp, "an extent is outside the image");
        }
        if ((int64_t)start <= prev_end || start % g ||
            ((start + len) % g && start + len != (uint64_t)size)) {
            return mirror_state_bad(errp, "the extents are not sorted, "
                                    "disjoint and granule aligned");
        }
        prev_end = start + len;
        mirror_extents_add(&f->good, start, start + len);
    }
    if ((uint64_t)f->good.bytes != total) {
        return mirror_state_bad(errp, "the known-good byte count does not "
                                "match the extents");
    }
    return true;
}

bool mirror_state_decode(const uint8_t *buf, size_t len, MirrorStateFile *f,
                         GError **errp)
{
    uint32_t hlen, slen, tlen, sync, hcrc, version, flags, fixed;
    uint64_t n, total, switched = 0;
    int64_t size, g;

    memset(f, 0, sizeof(*f));
    mirror_extents_init(&f->good);
    if (len < MIRROR_STATE_HEADER_FIXED_V1 + 4 ||
        memcmp(buf, MIRROR_STATE_MAGIC, 8)) {
        return mirror_state_bad(errp, "not a mirror-tool state file (bad "
                                "magic or truncated)");
    }
    version = get_u32(buf + 8);
    if (version != 1 && version != MIRROR_STATE_VERSION) {
        return mirror_state_bad(errp, "unsupported version");
    }
    fixed = version == 1 ? MIRROR_STATE_HEADER_FIXED_V1 :
            MIRROR_STATE_HEADER_FIXED;
    hlen = get_u32(buf + 12);
    slen = get_u32(buf + 44);
    tlen = get_u32(buf + 48);
    if (slen > MIRROR_STATE_MAX_ID || tlen > MIRROR_STATE_MAX_ID ||
        hlen != fixed + slen + tlen + 4 || hlen > len) {
        return mirror_state_bad(errp, "truncated or bad header length");
    }
    hcrc = mirror_state_crc(0, buf, hlen - 4);
    if (get_u32(buf + hlen - 4) != hcrc) {
        return mirror_state_bad(errp, "bad header checksum");
    }
    n = get_u64(buf + 56);
    total = get_u64(buf + 64);
    if (n > (len - hlen) / 16 || len != hlen + 16 * n + 4) {
        return mirror_state_bad(errp, "truncated or bad length");
    }
    if (get_u32(buf + len - 4) !=
        mirror_state_crc(hcrc, buf + hlen, 16 * n)) {
        return mirror_state_bad(errp, "bad extent checksum");
    }
    size = get_u64(buf + 24);
    g = get_u64(buf + 32);
    sync = get_u32(buf + 40);
    flags = get_u32(buf + 52);
    if (version != 1) {
        switched = get_u64(buf + 72);
    }
    if (size < 0 || g < 512 || (g & (g - 1)) ||
        sync >= G_N_ELEMENTS(mirror_state_sync_names) ||
        (flags & ~(uint32_t)MIRROR_STATE_F_SWITCHED) ||
        (version == 1 && flags) ||
        !(flags & MIRROR_STATE_F_SWITCHED) != !switched ||
        switched > INT64_MAX) {
        return mirror_state_bad(errp, "bad header values");
    }
    f->seq = get_u64(buf + 16);
    f->switched_us = switched;
    f->id.size = size;
    f->id.granularity = g;
    f->id.sync = sync;
    f->id.source = g_strndup((const char *)buf + fixed, slen);
    f->id.target = g_strndup((const char *)buf + fixed + slen, tlen);
    if (strlen(f->id.source) != slen || strlen(f->id.target) != tlen) {
        return mirror_state_bad(errp, "bad identity");
    }
    return mirror_state_decode_extents(buf + hlen, n, total, f, errp);
}

void mirror_state_file_clear(MirrorStateFile *f)
{
    mirror_state_identity_clear(&f->id);
    mirror_extents_destroy(&f->good);
}

bool mirror_state_identity_check(const MirrorStateIdentity *recorded,
                                 const MirrorStateIdentity *now,
                                 GError **errp)
{
    if (strcmp(recorded->source, now->source)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the source differs (recorded '%s', now '%s')",
                    recorded->source, now->source);
        return false;
    }
    if (strcmp(recorded->target, now->target)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the target differs (recorded '%s', now '%s')",
                    recorded->target, now->target);
        return false;
    }
    if (recorded->size != now->size) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the size differs (recorded %" PRId64 ", now %" PRId64
                    ")", recorded->size, now->size);
        return false;
    }
    if (recorded->granularity != now->granularity) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the granularity differs (recorded %" PRId64 ", now %"
                    PRId64 ")", recorded->granularity, now->granularity);
        return false;
    }
    if (recorded->sync != now->sync) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "the sync mode differs (recorded %s, now %s)",
                    mirror_state_sync_names[recorded->sync],
                    mirror_state_sync_names[now->sync]);
        return false;
    }
    return true;
}
