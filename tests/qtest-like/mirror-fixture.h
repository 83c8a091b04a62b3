/*
 * Helpers for the mirror job's unit tests on the null driver: a source
 * and a target sharing statistics, a job between them, and its events.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_MIRROR_FIXTURE_H
#define TEST_MIRROR_FIXTURE_H

#include "block/mirror/mirror.h"
#include "block/null.h"
#include "tests/qtest-like/test-util.h"

typedef struct MirrorFixture {
    BlockDriverState *src;
    BlockDriverState *dst;
    Job *job;
    TestJobEvents ev;
} MirrorFixture;

/* Open @src_spec and @dst_spec (null nodes sharing statistics) and create
 * a job with @p between them; events are recorded in f->ev. */
void mirror_fixture_init(MirrorFixture *f, const char *src_spec,
                         const char *dst_spec, const MirrorParams *p);

/* Start the job and run the main loop until it concludes (120 s at most). */
void mirror_fixture_run(MirrorFixture *f);

/* Drop the job and both nodes. */
void mirror_fixture_destroy(MirrorFixture *f);

/* Defaults, with these three (0: the default) and auto-complete on. */
MirrorParams mirror_fixture_params(int max_in_flight, int64_t chunk,
                                   int64_t buf);

/* Bytes of the operations @op that a node with record=on saw. */
int64_t mirror_fixture_op_bytes(BlockDriverState *bs, NullOp op);

#endif
