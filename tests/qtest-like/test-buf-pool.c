/*
 * The buffer pool (util/buf-pool.c): exactly @count buffers, aligned,
 * disjoint and writable end to end; handed out lowest first and reused
 * last-in first-out, so a job with few in flight touches few; huge pages
 * asked for a pool of 2 MiB or more (where the kernel has them); and, in an
 * ASan build, buffers that are not out are poisoned.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/buf-pool.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define KIB 1024
#define MIB (1024 * 1024)

/* THP exists on this kernel (any mode: madvise() accepts the advice). */
static bool have_thp(void)
{
    return g_file_test("/sys/kernel/mm/transparent_hugepage",
                       G_FILE_TEST_IS_DIR);
}

static void test_count_align(void)
{
    /* 1000-byte buffers at 512-byte alignment: stride 1024. */
    BufPool *pool = buf_pool_new(1000, 5, 512);
    uint8_t *b[5];

    for (int i = 0; i < 5; i++) {
        b[i] = buf_pool_get(pool);
        g_assert_nonnull(b[i]);
        g_assert_cmpuint((uintptr_t)b[i] % 512, ==, 0);
        memset(b[i], i + 1, 1000);
        g_assert_cmpint(buf_pool_in_use(pool), ==, i + 1);
    }
    g_assert_null(buf_pool_get(pool));
    for (int i = 0; i < 5; i++) {
        /* Lowest first, and no buffer ran into another. */
        g_assert_true(i == 0 || b[i] >= b[i - 1] + 1000);
        for (int j = 0; j < 1000; j++) {
            g_assert_cmpint(b[i][j], ==, i + 1);
        }
    }
    buf_pool_put(pool, b[2]);
    g_assert_cmpint(buf_pool_in_use(pool), ==, 4);
    g_assert_true(buf_pool_get(pool) == b[2]);
    g_assert_null(buf_pool_get(pool));
    for (int i = 0; i < 5; i++) {
        buf_pool_put(pool, b[i]);
    }
    g_assert_cmpint(buf_pool_in_use(pool), ==, 0);
    g_assert_cmpint(buf_pool_used_ever(pool), ==, 5);
    buf_pool_free(pool);
}

/* One at a time in flight: the same buffer again, nothing else touched. */
static void test_reuse_lifo(void)
{
    BufPool *pool = buf_pool_new(MIB, 16, 4096);
    uint8_t *first = buf_pool_get(pool), *a, *b;

    buf_pool_put(pool, first);
    for (int i = 0; i < 100; i++) {
        a = buf_pool_get(pool);
        g_assert_true(a == first);
        buf_pool_put(pool, a);
    }
    g_assert_cmpint(buf_pool_used_ever(pool), ==, 1);
    a = buf_pool_get(pool);
    b = buf_pool_get(pool);
    g_assert_true(a == first && b == first + MIB);
    buf_pool_put(pool, a);
    buf_pool_put(pool, b);
    g_assert_true(buf_pool_get(pool) == b);     /* last in, first out */
    g_assert_cmpint(buf_pool_used_ever(pool), ==, 2);
    buf_pool_put(pool, b);
    buf_pool_free(pool);
}

static void test_huge(void)
{
    BufPool *pool;
    uint8_t *b;

    pool = buf_pool_new(MIB, 16, 4096);
    g_assert_cmpint(buf_pool_huge(pool), ==, have_thp());
    b = buf_pool_get(pool);
    if (buf_pool_huge(pool)) {
        /* The first buffer starts a huge page. */
        g_assert_cmpuint((uintptr_t)b % (2 * MIB), ==, 0);
    }
    memset(b, 0x5a, MIB);
    buf_pool_put(pool, b);
    buf_pool_free(pool);

    /* Smaller than a huge page: not asked for. */
    pool = buf_pool_new(64 * KIB, 4, 4096);
    g_assert_false(buf_pool_huge(pool));
    buf_pool_free(pool);
}

/* Pages of [@p, @p + @len) resident in memory (mincore()). */
static size_t resident_bytes(const uint8_t *p, size_t len)
{
    size_t page = sysconf(_SC_PAGESIZE);
    size_t step = 64 * MIB, n = 0;
    g_autofree unsigned char *vec = g_malloc(step / page);

    g_assert_cmpuint((uintptr_t)p % page, ==, 0);
    for (size_t off = 0; off < len; off += step) {
        size_t chunk = MIN(step, len - off);

        g_assert_cmpint(mincore((void *)(p + off), chunk, vec), ==, 0);
        for (size_t i = 0; i < chunk / page; i++) {
            n += (vec[i] & 1) * page;
        }
    }
    return n;
}

/*
 * A pool larger than memory reserves address space only: creating it
 * touches nothing, a buffer that is handed out costs only the pages
 * written (at most a huge page each), and the buffers never handed out
 * stay untouched.
 */
static void test_reserve_only(void)
{
    const size_t size = 64 * MIB;
    const int count = 1024;                                 /* 64 GiB */
    BufPool *pool = buf_pool_new(size, count, 4096);
    uint8_t *b = buf_pool_get(pool);
    uint8_t *c;

    g_assert_nonnull(b);
    g_assert_cmpuint(resident_bytes(b, size), ==, 0);
    b[0] = 1;
    b[size - 1] = 2;
    /* The two pages written, whatever their size, and nothing between. */
    g_assert_cmpuint(resident_bytes(b, size), >=,
                     2 * (size_t)sysconf(_SC_PAGESIZE));
    g_assert_cmpuint(resident_bytes(b, size), <=, 2 * 2 * MIB);
    /* The other 1023 buffers (63 GiB): not a page. */
    g_assert_cmpuint(resident_bytes(b + size, (count - 1) * size), ==, 0);
    g_assert_cmpint(buf_pool_used_ever(pool), ==, 1);
    buf_pool_put(pool, b);

    /* Handing the next one out still touches none of it. */
    c = buf_pool_get(pool);
    g_assert_true(c == b);
    c = buf_pool_get(pool);
    g_assert_true(c == b + size);
    g_assert_cmpuint(resident_bytes(c, size), ==, 0);
    buf_pool_put(pool, c);
    buf_pool_put(pool, b);
    g_assert_cmpint(buf_pool_in_use(pool), ==, 0);
    buf_pool_free(pool);
}

#ifdef TEST_ASAN
static void test_poison(void)
{
    BufPool *pool = buf_pool_new(64 * KIB, 4, 4096);
    uint8_t *b = buf_pool_get(pool);

    g_assert_false(__asan_region_is_poisoned(b, 64 * KIB));
    g_assert_true(__asan_address_is_poisoned(b + 64 * KIB));   /* next */
    buf_pool_put(pool, b);
    g_assert_true(__asan_address_is_poisoned(b));
    buf_pool_free(pool);
}
#endif

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/buf-pool/count-align", test_count_align);
    g_test_add_func("/buf-pool/reuse-lifo", test_reuse_lifo);
    g_test_add_func("/buf-pool/huge", test_huge);
    g_test_add_func("/buf-pool/reserve-only", test_reserve_only);
#ifdef TEST_ASAN
    g_test_add_func("/buf-pool/poison", test_poison);
#endif
    return g_test_run();
}
