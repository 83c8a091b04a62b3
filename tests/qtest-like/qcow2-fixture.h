/*
 * Helpers for the qcow2-lite tests: make images (block/qcow2-create.c,
 * with the layout qemu-img uses), poke header and table bytes, expect an
 * open to be refused without the file changing.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_QCOW2_FIXTURE_H
#define TEST_QCOW2_FIXTURE_H

#include <glib.h>
#include "block/block.h"

#define Q_KIB 1024
#define Q_MIB (1024 * 1024)

/*
 * Create @dir/@name: a qcow2 image of @size bytes with 2^@cluster_bits
 * clusters and an optional backing file (@backing_fmt "raw"/"qcow2").
 * @small_reftable: one refcount table cluster, as qemu-img makes it.
 * Returns the path (g_free).
 */
char *q_make_image(const char *dir, const char *name, int64_t size,
                   int cluster_bits, const char *backing,
                   const char *backing_fmt, bool small_reftable);

/* A file of @size bytes filled with test_fill_pattern(seed). */
char *q_make_raw(const char *dir, const char *name, int64_t size,
                 uint32_t seed);

/* Overwrite bytes of @path. */
void q_poke(const char *path, int64_t offset, const void *buf, size_t len);
void q_poke_be64(const char *path, int64_t offset, uint64_t v);
void q_poke_be32(const char *path, int64_t offset, uint32_t v);
void q_poke_be16(const char *path, int64_t offset, uint16_t v);
uint64_t q_peek_be64(const char *path, int64_t offset);
uint16_t q_peek_be16(const char *path, int64_t offset);

/* Open @path as qcow2 with @flags, or fail the test. */
BlockDriverState *q_open(const char *path, int flags);

/*
 * Opening @path as qcow2 with @flags fails with a message containing
 * @msg, and the file is left byte for byte as it was.
 */
void q_open_refused(const char *path, int flags, const char *msg);

/* The qcow2 consistency check reports no corruption and no leak. */
void q_assert_clean(BlockDriverState *bs);

#endif /* TEST_QCOW2_FIXTURE_H */
