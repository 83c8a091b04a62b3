/*
 * Unit tests of the mirror job's limits with the null driver: operations
 * and bytes in flight, the window that follows the channels of either end
 * and what they ask for, and the chunk cap.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/mirror-fixture.h"
#include "util/cutils.h"

static void test_limits_in_flight(void)
{
    MirrorParams p = mirror_fixture_params(4, 64 * KiB, MiB);
    MirrorFixture f;
    NullStats st;

    mirror_fixture_init(&f, "null:size=16M,latency-ns=200000,jitter-ns=300000",
                        "null:size=16M,latency-ns=200000,jitter-ns=300000", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpuint(st.max_in_flight, ==, 4);     /* reached, never more */
    g_assert_cmpint(st.max_data_request, ==, 64 * KiB);
    g_assert_cmpint(st.max_data_bytes_in_flight, <=, MiB);
    g_assert_cmpuint(st.overlapping_writes, ==, 0);
    g_assert_cmpuint(st.misaligned, ==, 0);
    g_assert_cmpuint(st.bytes[NULL_OP_READ], ==, 16 * MiB);
    g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 16 * MiB);
    mirror_fixture_destroy(&f);
}

static void test_limits_buf_size(void)
{
    MirrorParams p = mirror_fixture_params(16, MiB, 2 * MiB);
    MirrorFixture f;
    NullStats st;

    mirror_fixture_init(&f, "null:size=32M,latency-ns=100000,jitter-ns=200000",
                        "null:size=32M,latency-ns=100000", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    /* buf-size allows two 1 MiB operations, whatever max-in-flight says. */
    g_assert_cmpint(st.max_data_bytes_in_flight, ==, 2 * MiB);
    g_assert_cmpuint(st.max_in_flight, ==, 2);
    g_assert_cmpint(st.max_data_request, ==, MiB);
    mirror_fixture_destroy(&f);
}

/*
 * Left at their defaults, max-in-flight and buf-size grow with the request
 * channels (NBD connections) of either end taking requests, up to four,
 * from QEMU's 16 and 16 MiB per channel or the window an end asks for
 * now (the pool is sized for the most it may ask for).  A source whose
 * driver prefers smaller copy operations (NBD: 256 KiB) sets the default
 * chunk-size, and the default max-in-flight grows to keep the bytes in
 * flight; an explicit chunk-size keeps max-in-flight at 16.
 */
static void test_limits_window(void)
{
    static const struct {
        const char *src;
        const char *dst;
        int64_t chunk;
        uint64_t window;
        int64_t window_bytes;
        int64_t largest;
    } cases[] = {
        { "null:size=128M", "null:size=128M,latency-ns=2000000",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M", "null:size=128M,latency-ns=2000000,channels=2",
          0, 32, 32 * MiB, MiB },
        { "null:size=128M", "null:size=128M,latency-ns=2000000,channels=9",
          0, 64, 64 * MiB, MiB },
        /* Four opened, one taking requests: one channel's window. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,active-channels=1",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M,channels=4,active-channels=3",
          "null:size=128M,latency-ns=2000000,channels=2",
          0, 48, 48 * MiB, MiB },
        /* An end that asks for its window per channel (NBD: 8 MiB against
         * a fast server, 32 MiB against a latency-bound one). */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=8M",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M",
          0, 64, 64 * MiB, MiB },
        { "null:size=128M,copy-transfer=256K,window=8M",
          "null:size=128M,latency-ns=2000000", 0, 32, 8 * MiB, 256 * KiB },
        /* An end that asks for 8 MiB now and may ask for 32 MiB later
         * (NBD: a trial found the server slow at writing): the window
         * follows what it asks for now, and grows when it asks more. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M,"
          "window-first=8M,active-channels-after=1G",
          0, 16, 16 * MiB, MiB },
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=2,window=32M,"
          "window-first=8M,active-channels-after=32M",
          0, 64, 64 * MiB, MiB },
        /* At most 64 MiB, however many channels ask. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,window=32M",
          0, 64, 64 * MiB, MiB },
        /* Four until 32 MiB are written, then one: the window shrinks
         * below what is in flight, and drains down to it. */
        { "null:size=128M",
          "null:size=128M,latency-ns=2000000,channels=4,active-channels=1,"
          "active-channels-after=32M", 0, 64, 64 * MiB, MiB },
        { "null:size=128M,copy-transfer=256K",
          "null:size=128M,latency-ns=2000000", 0, 64, 16 * MiB, 256 * KiB },
        { "null:size=128M,copy-transfer=256K",
          "null:size=128M,latency-ns=2000000", MiB, 16, 16 * MiB, MiB },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        MirrorParams p = mirror_fixture_params(0, cases[i].chunk, 0);
        MirrorFixture f;
        NullStats st;

        mirror_fixture_init(&f, cases[i].src, cases[i].dst, &p);
        mirror_fixture_run(&f);
        g_assert_cmpint(f.job->ret, ==, 0);
        null_get_stats(f.dst, &st);
        g_assert_cmpuint(st.max_in_flight, ==, cases[i].window);
        g_assert_cmpint(st.max_data_bytes_in_flight, ==,
                        cases[i].window_bytes);
        g_assert_cmpint(st.max_data_request, ==, cases[i].largest);
        g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 128 * MiB);
        mirror_fixture_destroy(&f);
    }
}

static void test_chunk_cap_large_granularity(void)
{
    /* A granule larger than the chunk: io.c still caps each I/O. */
    MirrorParams p = mirror_fixture_params(4, 64 * KiB, 0);
    MirrorFixture f;
    NullStats st;

    p.granularity = 256 * KiB;
    mirror_fixture_init(&f, "null:size=4M", "null:size=4M", &p);
    mirror_fixture_run(&f);
    g_assert_cmpint(f.job->ret, ==, 0);
    null_get_stats(f.src, &st);
    g_assert_cmpint(st.max_data_request, ==, 64 * KiB);
    g_assert_cmpuint(st.bytes[NULL_OP_WRITE], ==, 4 * MiB);
    mirror_fixture_destroy(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mirror/limits/in-flight", test_limits_in_flight);
    g_test_add_func("/mirror/limits/buf-size", test_limits_buf_size);
    g_test_add_func("/mirror/limits/window", test_limits_window);
    g_test_add_func("/mirror/limits/chunk-cap-large-granularity",
                    test_chunk_cap_large_granularity);
    return g_test_run();
}
