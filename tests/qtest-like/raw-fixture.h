/*
 * Helpers for the raw driver tests: scratch-directory fixtures (a
 * g_dir_make_tmp() directory, or one under /dev/shm), opening nodes, and
 * synchronous calls of the bdrv_raw table's members.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_RAW_FIXTURE_H
#define TEST_RAW_FIXTURE_H

#include <glib.h>
#include "block/block-int.h"

#define KIB 1024
#define MIB (1024 * 1024)

typedef struct Fixture {
    char *dir;                  /* scratch directory, NULL when unavailable */
} Fixture;

typedef struct Completion {
    bool done;
    int ret;
} Completion;

/* A scratch directory from g_dir_make_tmp(). */
void fixture_setup(Fixture *f, gconstpointer data);

/* A scratch directory on tmpfs, or none (the test skips). */
void fixture_setup_shm(Fixture *f, gconstpointer data);

void fixture_teardown(Fixture *f, gconstpointer data);

bool fixture_missing(Fixture *f);

/* Create @name in the scratch directory as a sparse file of @size bytes. */
char *make_file(Fixture *f, const char *name, int64_t size);

GHashTable *options_new(const char *key, const char *value);

BlockDriverState *open_raw(const char *path, int flags,
                           GHashTable *opts);

/* Expect bdrv_open() to fail with a message containing @expected. */
void open_fails(const char *path, int flags, GHashTable *opts,
                const char *expected);

void completion_cb(void *opaque, int ret);

int completion_wait(Completion *c);

/* Wait for a request just submitted: it must not have completed inside the
 * submitting call. */
int wait_fresh(Completion *c);

int drv_read(BlockDriverState *bs, int64_t offset, int64_t bytes,
             void *buf);

int drv_write(BlockDriverState *bs, int64_t offset, int64_t bytes,
              const void *buf, BdrvRequestFlags flags);

int drv_zeroes(BlockDriverState *bs, int64_t offset, int64_t bytes,
               BdrvRequestFlags flags);

int drv_discard(BlockDriverState *bs, int64_t offset, int64_t bytes);

int drv_flush(BlockDriverState *bs);

/*
 * Block status of [offset, offset + bytes); checks that the extents are
 * contiguous from @offset, well formed, and end by @limit.
 */
GArray *drv_status(BlockDriverState *bs, int64_t offset,
                   int64_t bytes, int64_t limit);

/* The flags of the extent covering @offset, which must exist. */
unsigned status_at(GArray *ext, int64_t offset);

int64_t extents_end(GArray *ext);

void fill_pattern(uint8_t *buf, int64_t bytes, unsigned seed);

bool is_zero(const uint8_t *buf, int64_t bytes);

#endif /* TEST_RAW_FIXTURE_H */
