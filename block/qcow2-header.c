/*
 * qcow2-lite: the header and its extensions, parsed from and written to
 * buffers (no file access), so that a fuzz target can call them directly.
 * Every size that comes from the image is checked against QEMU's limits in
 * 64-bit arithmetic before anything is allocated from it; the checks
 * against the file and between tables are in qcow2-layout.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

#include <inttypes.h>

void qcow2_header_clear(Qcow2Header *h)
{
    g_free(h->backing_file);
    g_free(h->backing_format);
    if (h->features) {
        g_array_unref(h->features);
    }
    memset(h, 0, sizeof(*h));
}

const char *qcow2_header_feature_name(const Qcow2Header *h, int type,
                                      int bit)
{
    for (guint i = 0; h->features && i < h->features->len; i++) {
        const Qcow2FeatureName *f = &g_array_index(h->features,
                                                   Qcow2FeatureName, i);
        if (f->type == type && f->bit == bit && f->name[0]) {
            return f->name;
        }
    }
    return NULL;
}

static void qcow2_parse_fixed(const uint8_t *buf, Qcow2Header *h)
{
    h->version = qcow2_be32(buf + 4);
    h->backing_file_offset = qcow2_be64(buf + 8);
    h->backing_file_size = qcow2_be32(buf + 16);
    h->cluster_bits = qcow2_be32(buf + 20);
    h->size = qcow2_be64(buf + 24);
    h->crypt_method = qcow2_be32(buf + 32);
    h->l1_size = qcow2_be32(buf + 36);
    h->l1_table_offset = qcow2_be64(buf + 40);
    h->refcount_table_offset = qcow2_be64(buf + 48);
    h->refcount_table_clusters = qcow2_be32(buf + 56);
    h->nb_snapshots = qcow2_be32(buf + 60);
    h->snapshots_offset = qcow2_be64(buf + 64);
}

/* Version, cluster size, header length and the v3 fields. */
static bool qcow2_parse_version(const uint8_t *buf, size_t len,
                                Qcow2Header *h, GError **errp)
{
    int64_t cs;

    if (h->version != 2 && h->version != 3) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Unsupported qcow2 version %" PRIu32, h->version);
        return false;
    }
    if (h->cluster_bits < QCOW2_MIN_CLUSTER_BITS ||
        h->cluster_bits > QCOW2_MAX_CLUSTER_BITS) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Unsupported cluster size: 2^%" PRIu32
                    " (must be 2^9..2^21)", h->cluster_bits);
        return false;
    }
    cs = INT64_C(1) << h->cluster_bits;
    if (h->version == 2) {
        h->header_length = QCOW2_V2_HEADER_LENGTH;
        h->refcount_order = 4;
        return true;
    }
    if (len < QCOW2_V3_MIN_HEADER_LENGTH) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header truncated (%zu bytes)", len);
        return false;
    }
    h->incompatible_features = qcow2_be64(buf + 72);
    h->compatible_features = qcow2_be64(buf + 80);
    h->autoclear_features = qcow2_be64(buf + 88);
    h->refcount_order = qcow2_be32(buf + 96);
    h->header_length = qcow2_be32(buf + 100);
    if (h->header_length < QCOW2_V3_MIN_HEADER_LENGTH) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header too short (header length %" PRIu32 ")",
                    h->header_length);
        return false;
    }
    if (h->header_length > cs) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header exceeds cluster size (header length %"
                    PRIu32 ")", h->header_length);
        return false;
    }
    if (h->header_length % 8) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header length %" PRIu32 " is not a multiple "
                    "of 8", h->header_length);
        return false;
    }
    if (h->header_length > len) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header truncated (%zu of %" PRIu32 " bytes)",
                    len, h->header_length);
        return false;
    }
    if (h->header_length > QCOW2_V3_MIN_HEADER_LENGTH) {
        h->compression_type = buf[104];
    }
    return true;
}

/* The incompatible feature bits (the dirty and corrupt bits are only
 * refused for writing, later). */
static bool qcow2_parse_features(Qcow2Header *h, GError **errp)
{
    uint64_t incompat = h->incompatible_features;
    uint64_t unknown;

    if (h->compression_type != 0 ||
        (incompat & QCOW2_INCOMPAT_COMPRESSION)) {
        if (h->compression_type == 1 &&
            (incompat & QCOW2_INCOMPAT_COMPRESSION)) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "qcow2 feature not supported: zstd compression");
        } else if (h->compression_type > 1) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Unknown qcow2 compression type %u",
                        h->compression_type);
        } else if (h->compression_type == 0) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Invalid qcow2 header: the compression type bit is "
                        "set but the compression type is zlib");
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Invalid qcow2 header: compression type %u without "
                        "the compression type bit", h->compression_type);
        }
        return false;
    }
    if ((incompat & QCOW2_INCOMPAT_DATA_FILE) || h->has_data_file_ext) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 feature not supported: external data file");
        return false;
    }
    if (incompat & QCOW2_INCOMPAT_EXTL2) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 feature not supported: extended L2 entries "
                    "(subclusters)");
        return false;
    }
    unknown = incompat & ~(QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT);
    if (unknown) {
        int bit = __builtin_ctzll(unknown);
        const char *name = qcow2_header_feature_name(h, 0, bit);

        if (name) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "qcow2 feature not supported: %s (incompatible "
                        "feature bit %d)", name, bit);
        } else {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "qcow2 feature not supported: unknown incompatible "
                        "feature bit %d", bit);
        }
        return false;
    }
    if (h->refcount_order > 6) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Reference count entry width too large: 2^%" PRIu32
                    " bits (may not exceed 64 bits)", h->refcount_order);
        return false;
    }
    switch (h->crypt_method) {
    case 0:
        if (h->has_crypto_ext) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "qcow2 feature not supported: encryption (a LUKS "
                        "header extension without an encryption method)");
            return false;
        }
        return true;
    case 1:
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 feature not supported: encryption (AES)");
        return false;
    case 2:
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 feature not supported: encryption (LUKS)");
        return false;
    default:
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Unsupported qcow2 encryption method %" PRIu32,
                    h->crypt_method);
        return false;
    }
}

/* One header extension of @elen bytes at @data. */
static bool qcow2_parse_extension(Qcow2Header *h, uint32_t type,
                                  const uint8_t *data, uint32_t elen,
                                  GError **errp)
{
    switch (type) {
    case QCOW2_EXT_BACKING_FORMAT:
        if (elen > QCOW2_MAX_BACKING_FMT) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Invalid backing format extension: %" PRIu32
                        " bytes (at most %d)", elen, QCOW2_MAX_BACKING_FMT);
            return false;
        }
        g_free(h->backing_format);
        h->backing_format = g_strndup((const char *)data, elen);
        return true;
    case QCOW2_EXT_FEATURE_TABLE:
        for (uint32_t i = 0; i + 48 <= elen; i += 48) {
            Qcow2FeatureName f = { .type = data[i], .bit = data[i + 1] };

            memcpy(f.name, data + i + 2, 46);
            f.name[46] = '\0';
            g_array_append_val(h->features, f);
        }
        return true;
    case QCOW2_EXT_BITMAPS:
        if (elen < 24) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Invalid bitmaps extension: %" PRIu32 " bytes",
                        elen);
            return false;
        }
        h->has_bitmaps_ext = true;
        h->nb_bitmaps = qcow2_be32(data);
        h->bitmap_dir_size = qcow2_be64(data + 8);
        h->bitmap_dir_offset = qcow2_be64(data + 16);
        return true;
    case QCOW2_EXT_CRYPTO:
        h->has_crypto_ext = true;       /* refused with the features */
        return true;
    case QCOW2_EXT_DATA_FILE:
        h->has_data_file_ext = true;
        return true;
    default:
        return true;    /* unknown: skipped (and kept: never rewritten) */
    }
}

/*
 * Walk the extensions between the header and the backing file name (or
 * the end of the first cluster).  Bytes past @len (a file shorter than a
 * cluster) read as zero, that is as the end marker.
 */
static bool qcow2_parse_extensions(const uint8_t *buf, size_t len,
                                   Qcow2Header *h, GError **errp)
{
    uint64_t cs = UINT64_C(1) << h->cluster_bits;
    uint64_t end = h->backing_file_offset ? h->backing_file_offset : cs;
    uint64_t pos = h->header_length;

    while (pos < end) {
        uint32_t type, elen;

        if (end - pos < 8) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Header extension too large (at offset %" PRIu64
                        ")", pos);
            return false;
        }
        if (pos + 8 > len) {
            return true;    /* zeroes: the end marker */
        }
        type = qcow2_be32(buf + pos);
        elen = qcow2_be32(buf + pos + 4);
        pos += 8;
        if (type == QCOW2_EXT_END) {
            return true;
        }
        if (elen > end - pos || pos + elen > len) {
            g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                        "Header extension too large (0x%08" PRIx32 ", %"
                        PRIu32 " bytes at offset %" PRIu64 ")", type, elen,
                        pos - 8);
            return false;
        }
        if (!qcow2_parse_extension(h, type, buf + pos, elen, errp)) {
            return false;
        }
        pos += QEMU_ALIGN_UP((uint64_t)elen, 8);
    }
    return true;
}

static bool qcow2_parse_backing_name(const uint8_t *buf, size_t len,
                                     Qcow2Header *h, GError **errp)
{
    uint64_t cs = UINT64_C(1) << h->cluster_bits;
    uint64_t off = h->backing_file_offset;
    uint32_t n = h->backing_file_size;

    if (!off) {
        return true;
    }
    if (off > cs || off < h->header_length) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Invalid backing file offset 0x%" PRIx64, off);
        return false;
    }
    if (n > QCOW2_MAX_BACKING_NAME || n > cs - off) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Backing file name too long (%" PRIu32 " bytes)", n);
        return false;
    }
    if (n == 0) {
        return true;
    }
    if (off + n > len) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 image truncated inside the backing file name");
        return false;
    }
    if (memchr(buf + off, '\0', n)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Invalid backing file name: it contains a NUL byte");
        return false;
    }
    h->backing_file = g_strndup((const char *)buf + off, n);
    return true;
}

bool qcow2_header_parse(const uint8_t *buf, size_t len, Qcow2Header *h,
                        GError **errp)
{
    memset(h, 0, sizeof(*h));
    if (len < QCOW2_V2_HEADER_LENGTH) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "qcow2 header truncated (%zu bytes)", len);
        return false;
    }
    if (qcow2_be32(buf) != QCOW2_MAGIC) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_OPEN,
                    "Not a qcow2 image (bad magic)");
        return false;
    }
    qcow2_parse_fixed(buf, h);
    h->features = g_array_new(FALSE, FALSE, sizeof(Qcow2FeatureName));
    /* The extensions come first: the feature table names refused bits. */
    if (!qcow2_parse_version(buf, len, h, errp) ||
        !qcow2_parse_backing_name(buf, len, h, errp) ||
        !qcow2_parse_extensions(buf, len, h, errp) ||
        !qcow2_parse_features(h, errp)) {
        qcow2_header_clear(h);
        return false;
    }
    return true;
}

const char *qcow2_header_rw_refusal(const Qcow2Header *h)
{
    if (h->incompatible_features & QCOW2_INCOMPAT_CORRUPT) {
        return "the image is marked corrupt (repair it with 'mirror-tool "
               "check -r all' or 'qemu-img check -r all')";
    }
    if (h->incompatible_features & QCOW2_INCOMPAT_DIRTY) {
        return "the image is marked dirty: its refcounts may be stale "
               "(repair it with 'mirror-tool check -r all' or 'qemu-img "
               "check -r all')";
    }
    if (h->version < 3) {
        return "writing qcow2 version 2 (compat=0.10) images is not "
               "supported";
    }
    if (h->refcount_order != QCOW2_REFCOUNT_ORDER) {
        return "only 16-bit refcounts can be written";
    }
    if (h->nb_snapshots) {
        return "the image has internal snapshots";
    }
    if (h->has_bitmaps_ext ||
        (h->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return "the image has persistent dirty bitmaps";
    }
    return NULL;
}

/* ---- Writing a header (create) ---- */

static const struct {
    uint8_t type;
    uint8_t bit;
    const char *name;
} qcow2_known_features[] = {
    { 0, 0, "dirty bit" },
    { 0, 1, "corrupt bit" },
    { 0, 2, "external data file" },
    { 0, 3, "compression type" },
    { 0, 4, "extended L2 entries" },
    { 1, 0, "lazy refcounts" },
    { 2, 0, "bitmaps" },
    { 2, 1, "raw external data" },
};

bool qcow2_header_build(uint8_t *buf, int64_t cs, const Qcow2Header *h,
                        GError **errp)
{
    size_t fmt_len = h->backing_format ? strlen(h->backing_format) : 0;
    size_t name_len = h->backing_file ? strlen(h->backing_file) : 0;
    bool table = cs > 4096;
    size_t need = QCOW2_V3_HEADER_LENGTH + 8 + name_len;
    size_t pos;

    if (h->backing_format) {
        need += 8 + QEMU_ALIGN_UP(fmt_len, 8);
    }
    if (table) {
        need += 8 + 48 * G_N_ELEMENTS(qcow2_known_features);
    }
    if (name_len > QCOW2_MAX_BACKING_NAME || fmt_len > QCOW2_MAX_BACKING_FMT
        || need > (size_t)cs) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "The backing file name is too long for a %" PRId64
                    "-byte cluster", cs);
        return false;
    }
    qcow2_put_be32(buf, QCOW2_MAGIC);
    qcow2_put_be32(buf + 4, 3);
    qcow2_put_be32(buf + 20, h->cluster_bits);
    qcow2_put_be64(buf + 24, h->size);
    qcow2_put_be32(buf + 36, h->l1_size);
    qcow2_put_be64(buf + 40, h->l1_table_offset);
    qcow2_put_be64(buf + 48, h->refcount_table_offset);
    qcow2_put_be32(buf + 56, h->refcount_table_clusters);
    qcow2_put_be32(buf + 96, QCOW2_REFCOUNT_ORDER);
    qcow2_put_be32(buf + 100, QCOW2_V3_HEADER_LENGTH);

    pos = QCOW2_V3_HEADER_LENGTH;
    if (h->backing_format) {
        qcow2_put_be32(buf + pos, QCOW2_EXT_BACKING_FORMAT);
        qcow2_put_be32(buf + pos + 4, fmt_len);
        memcpy(buf + pos + 8, h->backing_format, fmt_len);
        pos += 8 + QEMU_ALIGN_UP(fmt_len, 8);
    }
    if (table) {
        qcow2_put_be32(buf + pos, QCOW2_EXT_FEATURE_TABLE);
        qcow2_put_be32(buf + pos + 4,
                       48 * G_N_ELEMENTS(qcow2_known_features));
        pos += 8;
        for (size_t i = 0; i < G_N_ELEMENTS(qcow2_known_features); i++) {
            buf[pos] = qcow2_known_features[i].type;
            buf[pos + 1] = qcow2_known_features[i].bit;
            memcpy(buf + pos + 2, qcow2_known_features[i].name,
                   strlen(qcow2_known_features[i].name));
            pos += 48;
        }
    }
    pos += 8;       /* the end marker: zeroes */
    if (name_len) {
        qcow2_put_be64(buf + 8, pos);
        qcow2_put_be32(buf + 16, name_len);
        memcpy(buf + pos, h->backing_file, name_len);
    }
    return true;
}
