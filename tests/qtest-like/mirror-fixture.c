/*
 * Helpers for the mirror job's unit tests on the null driver
 * (mirror-fixture.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/mirror-fixture.h"

void mirror_fixture_init(MirrorFixture *f, const char *src_spec,
                         const char *dst_spec, const MirrorParams *p)
{
    g_autoptr(GError) err = NULL;

    f->src = test_open(src_spec, NULL, 0);
    f->dst = test_open(dst_spec, NULL, BDRV_O_RDWR);
    null_share_stats(f->dst, f->src);
    f->job = mirror_job_new("job0", f->src, f->dst, p, &err);
    g_assert_no_error(err);
    test_job_events_attach(&f->ev, f->job);
}

void mirror_fixture_run(MirrorFixture *f)
{
    job_start(f->job);
    test_run_until(&f->ev.concluded, 120);
}

void mirror_fixture_destroy(MirrorFixture *f)
{
    job_unref(f->job);
    test_job_events_clear(&f->ev);
    bdrv_unref(f->src);
    bdrv_unref(f->dst);
}

MirrorParams mirror_fixture_params(int max_in_flight, int64_t chunk,
                                   int64_t buf)
{
    MirrorParams p;

    mirror_params_init(&p);
    p.max_in_flight = max_in_flight;
    p.chunk_size = chunk;
    p.buf_size = buf;
    p.auto_complete = true;
    return p;
}

int64_t mirror_fixture_op_bytes(BlockDriverState *bs, NullOp op)
{
    GArray *recs = null_get_records(bs);
    int64_t sum = 0;

    for (guint i = 0; i < recs->len; i++) {
        NullRecord *r = &g_array_index(recs, NullRecord, i);

        if (r->op == op) {
            sum += r->bytes;
        }
    }
    return sum;
}
