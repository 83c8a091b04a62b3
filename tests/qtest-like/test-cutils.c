/*
 * cutils tests: table-driven size and count parsing (accepted values,
 * rejected values with their error codes, exact messages for a few),
 * size formatting, buffer_is_zero at every length/offset/position for
 * small buffers, the clock, key=value lists and auto/on/off switches.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <inttypes.h>
#include <string.h>

#include "util/cutils.h"

#define SENTINEL INT64_C(-42)

typedef struct SizeCase {
    const char *str;
    int64_t value;      /* when accepted */
    int code;           /* 0 = accepted, else a CutilsError */
} SizeCase;

static const SizeCase size_cases[] = {
    { "0", 0, 0 },
    { "1", 1, 0 },
    { "512", 512, 0 },
    { "512B", 512, 0 },
    { "512b", 512, 0 },
    { "64K", 64 * KiB, 0 },
    { "64k", 64 * KiB, 0 },
    { "0K", 0, 0 },
    { "0064K", 64 * KiB, 0 },
    { "1M", MiB, 0 },
    { "1m", MiB, 0 },
    { "3M", 3 * MiB, 0 },
    { "2G", 2 * GiB, 0 },
    { "2g", 2 * GiB, 0 },
    { "1T", TiB, 0 },
    { "1P", 1024 * TiB, 0 },
    { "1E", INT64_C(1) << 60, 0 },
    { "7E", INT64_C(7) << 60, 0 },
    { "8191P", INT64_C(8191) << 50, 0 },
    { "9223372036854775807", INT64_MAX, 0 },
    { "9007199254740991K", INT64_MAX - 1023, 0 },

    { "", 0, CUTILS_ERROR_INVALID },
    { " 1M", 0, CUTILS_ERROR_INVALID },
    { "1M ", 0, CUTILS_ERROR_INVALID },
    { "1 M", 0, CUTILS_ERROR_INVALID },
    { "\t1", 0, CUTILS_ERROR_INVALID },
    { "1\n", 0, CUTILS_ERROR_INVALID },
    { "-1", 0, CUTILS_ERROR_INVALID },
    { "+1", 0, CUTILS_ERROR_INVALID },
    { "-0", 0, CUTILS_ERROR_INVALID },
    { "1.5M", 0, CUTILS_ERROR_INVALID },
    { "1.", 0, CUTILS_ERROR_INVALID },
    { ".5", 0, CUTILS_ERROR_INVALID },
    { "0x100000", 0, CUTILS_ERROR_INVALID },
    { "0X10", 0, CUTILS_ERROR_INVALID },
    { "1e6", 0, CUTILS_ERROR_INVALID },
    { "1MiB", 0, CUTILS_ERROR_INVALID },
    { "1KB", 0, CUTILS_ERROR_INVALID },
    { "1Q", 0, CUTILS_ERROR_INVALID },
    { "M", 0, CUTILS_ERROR_INVALID },
    { "K1", 0, CUTILS_ERROR_INVALID },
    { "one", 0, CUTILS_ERROR_INVALID },
    { "99999999999999999999X", 0, CUTILS_ERROR_INVALID },

    { "99999999999999999999", 0, CUTILS_ERROR_RANGE },
    { "9223372036854775808", 0, CUTILS_ERROR_RANGE },
    { "18446744073709551616", 0, CUTILS_ERROR_RANGE },
    { "8E", 0, CUTILS_ERROR_RANGE },
    { "16E", 0, CUTILS_ERROR_RANGE },
    { "8192P", 0, CUTILS_ERROR_RANGE },
    { "9007199254740992K", 0, CUTILS_ERROR_RANGE },
    { "99999999999999999999E", 0, CUTILS_ERROR_RANGE },
};

/* "'STR' -> VALUE" or "'STR' -> error CODE", so failures name the case. */
static char *describe(const char *str, int64_t value, int code)
{
    g_autofree char *quoted = g_strescape(str, NULL);

    if (code) {
        return g_strdup_printf("'%s' -> error %d", quoted, code);
    }
    return g_strdup_printf("'%s' -> %" PRId64, quoted, value);
}

static void test_parse_size_table(void)
{
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(size_cases); i++) {
        const SizeCase *c = &size_cases[i];
        g_autoptr(GError) err = NULL;
        g_autofree char *expect = describe(c->str, c->value, c->code);
        g_autofree char *actual = NULL;
        int64_t value = SENTINEL;
        bool ok;

        ok = parse_size("--size", c->str, &value, &err);
        g_assert_true(ok == !err);
        g_assert_true(!err || err->domain == CUTILS_ERROR);
        actual = describe(c->str, value, err ? err->code : 0);
        g_assert_cmpstr(actual, ==, expect);
        if (err) {
            /* Failure leaves *value alone; one line naming the option. */
            g_assert_cmpint(value, ==, SENTINEL);
            g_assert_null(strchr(err->message, '\n'));
            g_assert_true(g_str_has_prefix(err->message, "--size '"));
        }
        /* A NULL errp is allowed. */
        g_assert_cmpint(parse_size("--size", c->str, &value, NULL), ==, ok);
    }
}

/* The exact message for @str, or NULL if it parses. */
static char *size_error(const char *what, const char *str)
{
    g_autoptr(GError) err = NULL;
    int64_t value;

    if (parse_size(what, str, &value, &err)) {
        return NULL;
    }
    return g_strdup(err->message);
}

static char *size_range_error(const char *what, const char *str, int64_t min,
                              int64_t max, bool pow2)
{
    g_autoptr(GError) err = NULL;
    int64_t value = SENTINEL;

    if (parse_size_range(what, str, min, max, pow2, &value, &err)) {
        g_assert_no_error(err);
        return NULL;
    }
    g_assert_cmpint(value, ==, SENTINEL);
    return g_strdup(err->message);
}

static char *count_error(const char *what, const char *str, int64_t min,
                         int64_t max)
{
    g_autoptr(GError) err = NULL;
    int64_t value = SENTINEL;

    if (parse_count(what, str, min, max, &value, &err)) {
        g_assert_no_error(err);
        return NULL;
    }
    g_assert_cmpint(value, ==, SENTINEL);
    return g_strdup(err->message);
}

#define ASSERT_MSG(expr, expected)                                         \
    do {                                                                   \
        g_autofree char *msg_ = (expr);                                    \
        g_assert_cmpstr(msg_, ==, (expected));                             \
    } while (0)

static void test_parse_size_messages(void)
{
    ASSERT_MSG(size_error("--chunk-size", "-1"),
               "--chunk-size '-1': invalid size (use e.g. 512, 64K, 1M, 2G)");
    ASSERT_MSG(size_error("--chunk-size", "3X"),
               "--chunk-size '3X': invalid size (use e.g. 512, 64K, 1M, 2G)");
    ASSERT_MSG(size_error("--buf-size", "99999999999999999999"),
               "--buf-size '99999999999999999999': value too large");
    ASSERT_MSG(size_error("--buf-size", "16E"),
               "--buf-size '16E': value too large");
    ASSERT_MSG(size_error("--buf-size", ""),
               "--buf-size '': invalid size (use e.g. 512, 64K, 1M, 2G)");
    /* Without an option name; control characters escaped. */
    ASSERT_MSG(size_error(NULL, "1M\n"),
               "'1M\\n': invalid size (use e.g. 512, 64K, 1M, 2G)");
    /* UTF-8 and backslashes are quoted as typed. */
    ASSERT_MSG(size_error("-b", "1\xc2\xb5"),
               "-b '1\xc2\xb5': invalid size (use e.g. 512, 64K, 1M, 2G)");
    ASSERT_MSG(size_error("-b", "1\\"),
               "-b '1\\': invalid size (use e.g. 512, 64K, 1M, 2G)");
    ASSERT_MSG(size_error(NULL, "1M"), NULL);
}

static void test_parse_size_range(void)
{
    int64_t value = SENTINEL;

    /* Powers of 2 between 4K and 64M. */
    ASSERT_MSG(size_range_error("--chunk-size", "3M", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '3M': must be a power of 2 between 4K and 64M");
    ASSERT_MSG(size_range_error("--chunk-size", "128M", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '128M': must be a power of 2 between 4K and 64M");
    ASSERT_MSG(size_range_error("--chunk-size", "2K", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '2K': must be a power of 2 between 4K and 64M");
    ASSERT_MSG(size_range_error("--chunk-size", "0", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '0': must be a power of 2 between 4K and 64M");
    ASSERT_MSG(size_range_error("--chunk-size", "4K", 4 * KiB, 64 * MiB,
                                true), NULL);
    ASSERT_MSG(size_range_error("--chunk-size", "64M", 4 * KiB, 64 * MiB,
                                true), NULL);
    ASSERT_MSG(size_range_error("--chunk-size", "65536", 4 * KiB, 64 * MiB,
                                true), NULL);
    ASSERT_MSG(size_range_error("-g", "3", 0, INT64_MAX, true),
               "-g '3': must be a power of 2");
    ASSERT_MSG(size_range_error("-g", "3K", 0, 64 * MiB, true),
               "-g '3K': must be a power of 2 at most 64M");
    ASSERT_MSG(size_range_error("-g", "3K", 512, INT64_MAX, true),
               "-g '3K': must be a power of 2 at least 512");

    /* Plain ranges. */
    ASSERT_MSG(size_range_error("--buf-size", "1K", 64 * KiB, 1 * GiB, false),
               "--buf-size '1K': must be between 64K and 1G");
    ASSERT_MSG(size_range_error("--buf-size", "1K", 64 * KiB, INT64_MAX,
                                false),
               "--buf-size '1K': must be at least 64K");
    ASSERT_MSG(size_range_error("--speed", "2G", 0, 1 * GiB, false),
               "--speed '2G': must be at most 1G");
    ASSERT_MSG(size_range_error("--buf-size", "100000", 1000, 100000, false),
               NULL);
    ASSERT_MSG(size_range_error("--buf-size", "100001", 1000, 100000, false),
               "--buf-size '100001': must be between 1000 and 100000");

    /* Parse errors come first and keep their wording. */
    ASSERT_MSG(size_range_error("--chunk-size", "1.5M", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '1.5M': invalid size (use e.g. 512, 64K, 1M, "
               "2G)");
    ASSERT_MSG(size_range_error("--chunk-size", "8E", 4 * KiB, 64 * MiB,
                                true),
               "--chunk-size '8E': value too large");

    g_assert_true(parse_size_range("--chunk-size", "1m", 4 * KiB, 64 * MiB,
                                   true, &value, NULL));
    g_assert_cmpint(value, ==, MiB);
}

static void test_parse_size_range_codes(void)
{
    g_autoptr(GError) e1 = NULL;
    g_autoptr(GError) e2 = NULL;
    int64_t value;

    g_assert_false(parse_size_range("-x", "3M", 0, 64 * MiB, true, &value,
                                    &e1));
    g_assert_error(e1, CUTILS_ERROR, CUTILS_ERROR_RANGE);
    g_assert_false(parse_size_range("-x", "3Q", 0, 64 * MiB, true, &value,
                                    &e2));
    g_assert_error(e2, CUTILS_ERROR, CUTILS_ERROR_INVALID);
}

static void test_parse_count(void)
{
    g_autoptr(GError) err = NULL;
    int64_t value = SENTINEL;

    ASSERT_MSG(count_error("-m", "0", 1, 16),
               "-m '0': must be between 1 and 16");
    ASSERT_MSG(count_error("-m", "17", 1, 16),
               "-m '17': must be between 1 and 16");
    ASSERT_MSG(count_error("-m", "-1", 1, 16),
               "-m '-1': must be between 1 and 16");
    ASSERT_MSG(count_error("-m", "99999999999999999999", 1, 16),
               "-m '99999999999999999999': must be between 1 and 16");
    ASSERT_MSG(count_error("-m", "0", 1, INT64_MAX),
               "-m '0': must be at least 1");
    ASSERT_MSG(count_error("-m", "x", 1, 16),
               "-m 'x': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "", 1, 16),
               "-m '': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "4K", 1, 16),
               "-m '4K': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", " 4", 1, 16),
               "-m ' 4': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "4 ", 1, 16),
               "-m '4 ': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "1.0", 1, 16),
               "-m '1.0': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "-", 1, 16),
               "-m '-': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "+1", 1, 16),
               "-m '+1': invalid number (use a decimal integer)");
    ASSERT_MSG(count_error("-m", "1", 1, 16), NULL);
    ASSERT_MSG(count_error("-m", "16", 1, 16), NULL);

    g_assert_true(parse_count("-m", "016", 1, 16, &value, &err));
    g_assert_cmpint(value, ==, 16);
    g_assert_true(parse_count("-n", "-9223372036854775808", INT64_MIN,
                              INT64_MAX, &value, &err));
    g_assert_cmpint(value, ==, INT64_MIN);
    g_assert_true(parse_count("-n", "9223372036854775807", INT64_MIN,
                              INT64_MAX, &value, &err));
    g_assert_cmpint(value, ==, INT64_MAX);
    g_assert_no_error(err);
    g_assert_false(parse_count("-n", "9223372036854775808", INT64_MIN,
                               INT64_MAX, &value, &err));
    g_assert_error(err, CUTILS_ERROR, CUTILS_ERROR_RANGE);
    g_assert_cmpint(value, ==, INT64_MAX);
}

static void test_size_to_str(void)
{
    static const struct {
        int64_t bytes;
        const char *str;
    } cases[] = {
        { 0, "0 B" },
        { 1, "1 B" },
        { 512, "512 B" },
        { 999, "999 B" },
        { 1000, "0.977 KiB" },
        { 1024, "1 KiB" },
        { 1536, "1.5 KiB" },
        { 4096, "4 KiB" },
        { 100 * MiB, "100 MiB" },
        { 1023 * MiB, "0.999 GiB" },
        { 3 * GiB / 2, "1.5 GiB" },
        { 10 * GiB, "10 GiB" },
        { 1256277934, "1.17 GiB" },
        { TiB, "1 TiB" },
        { 1024 * TiB, "1 PiB" },
        { INT64_C(1) << 60, "1 EiB" },
        { INT64_MAX, "8 EiB" },
        { -4096, "-4 KiB" },
        { -1, "-1 B" },
    };
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *s = size_to_str(cases[i].bytes);

        g_assert_cmpstr(s, ==, cases[i].str);
    }
}

static void test_size_to_short_str(void)
{
    static const struct {
        int64_t bytes;
        const char *str;
    } cases[] = {
        { 0, "0" },
        { 1, "1" },
        { 512, "512" },
        { 1023, "1023" },
        { 1024, "1K" },
        { 1536, "1536" },
        { 3000, "3000" },
        { 4096, "4K" },
        { 1025 * KiB, "1025K" },
        { 3145728, "3M" },
        { 64 * MiB, "64M" },
        { 5 * GiB, "5G" },
        { TiB, "1T" },
        { 1024 * TiB, "1P" },
        { INT64_C(1) << 60, "1E" },
        { INT64_C(1) << 62, "4E" },
        { INT64_MAX, "9223372036854775807" },
        { -4096, "-4K" },
        { INT64_MIN, "-8E" },
    };
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *s = size_to_short_str(cases[i].bytes);

        g_assert_cmpstr(s, ==, cases[i].str);
    }
}

/*
 * Every length up to 300 at every alignment, with one non-zero byte at
 * every position.  Each buffer ends exactly at the end of its allocation,
 * so a sanitizer build catches reads past the end.
 */
static void test_buffer_is_zero_small(void)
{
    size_t len, off, pos;

    for (len = 0; len <= 300; len++) {
        for (off = 0; off < 16; off++) {
            g_autofree unsigned char *mem = g_malloc0(off + len + 1);
            unsigned char *buf = mem + 1 + off;

            /* A dirty byte just before the buffer must not be seen. */
            mem[off] = 0xff;
            g_assert_true(buffer_is_zero(buf, len));
            for (pos = 0; pos < len; pos++) {
                buf[pos] = pos & 1 ? 0x80 : 0x01;
                g_assert_false(buffer_is_zero(buf, len));
                buf[pos] = 0;
            }
        }
    }
}

static void test_buffer_is_zero_large(void)
{
    const size_t len = 4 * MiB + 3;
    g_autofree unsigned char *mem = g_malloc0(len + 1);
    const size_t positions[] = {
        0, 1, 7, 8, 15, 16, 63, 64, 65, 4095, 4096, len / 2, len - 65,
        len - 17, len - 16, len - 9, len - 8, len - 1,
    };
    size_t i, off;

    for (off = 0; off <= 1; off++) {
        unsigned char *buf = mem + off;
        size_t n = len + 1 - off;

        g_assert_true(buffer_is_zero(buf, n));
        for (i = 0; i < G_N_ELEMENTS(positions); i++) {
            if (positions[i] >= n) {
                continue;
            }
            buf[positions[i]] = 0x40;
            g_assert_false(buffer_is_zero(buf, n));
            buf[positions[i]] = 0;
        }
    }
}

static void test_clock_ns(void)
{
    int64_t t0 = clock_ns();
    int64_t t1;

    g_assert_cmpint(t0, >, 0);
    g_usleep(2000);
    t1 = clock_ns();
    g_assert_cmpint(t1 - t0, >=, 2000000);
    g_assert_cmpint(clock_ns(), >=, t1);
}

/* key=value lists: pairs added, a later key wins, malformed pairs named
 * with or without the option's name. */
static void test_parse_key_values(void)
{
    static const struct {
        const char *what, *str, *error;
    } bad[] = {
        { "-o", "a", "-o 'a': expected key=value" },
        { "-o", "a=1,", "-o '': expected key=value" },
        { "-o", "=1", "-o '=1': expected key=value" },
        { NULL, "a=1,,b=2", "Invalid option '': expected key=value" },
    };
    g_autoptr(GHashTable) t = g_hash_table_new_full(g_str_hash, g_str_equal,
                                                    g_free, g_free);
    GError *err = NULL;

    g_assert_true(parse_key_values(NULL, "", t, &err));
    g_assert_cmpuint(g_hash_table_size(t), ==, 0);
    g_assert_true(parse_key_values("-o", "a=1,b=,c=x=y,a=2", t, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(g_hash_table_size(t), ==, 3);
    g_assert_cmpstr(g_hash_table_lookup(t, "a"), ==, "2");
    g_assert_cmpstr(g_hash_table_lookup(t, "b"), ==, "");
    g_assert_cmpstr(g_hash_table_lookup(t, "c"), ==, "x=y");
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_assert_false(parse_key_values(bad[i].what, bad[i].str, t, &err));
        g_assert_error(err, CUTILS_ERROR, CUTILS_ERROR_INVALID);
        g_assert_cmpstr(err->message, ==, bad[i].error);
        g_clear_error(&err);
    }
}

/* auto|on|off: taken out of the table when good, left alone when absent,
 * refused (and left in) otherwise. */
static void test_take_on_off_auto(void)
{
    static const struct {
        const char *str;
        OnOffAuto value;
    } good[] = {
        { "auto", ON_OFF_AUTO_AUTO }, { "on", ON_OFF_AUTO_ON },
        { "off", ON_OFF_AUTO_OFF },
    };
    static const char *const bad[] = { "", "ON", "yes", "1", "of", "auto " };
    g_autoptr(GHashTable) t = g_hash_table_new(g_str_hash, g_str_equal);
    GError *err = NULL;
    OnOffAuto v = ON_OFF_AUTO_ON;

    g_assert_true(take_on_off_auto(t, "views", &v, &err));
    g_assert_cmpint(v, ==, ON_OFF_AUTO_ON);
    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        g_hash_table_insert(t, "views", (char *)good[i].str);
        g_assert_true(take_on_off_auto(t, "views", &v, &err));
        g_assert_no_error(err);
        g_assert_cmpint(v, ==, good[i].value);
        g_assert_false(g_hash_table_contains(t, "views"));
    }
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *want = g_strdup_printf("copy-offload '%s': "
                                                "expected auto, on or off",
                                                bad[i]);

        g_hash_table_insert(t, "copy-offload", (char *)bad[i]);
        v = ON_OFF_AUTO_ON;
        g_assert_false(take_on_off_auto(t, "copy-offload", &v, &err));
        g_assert_error(err, CUTILS_ERROR, CUTILS_ERROR_INVALID);
        g_assert_cmpstr(err->message, ==, want);
        g_assert_cmpint(v, ==, ON_OFF_AUTO_ON);
        g_assert_true(g_hash_table_contains(t, "copy-offload"));
        g_clear_error(&err);
    }
}

static void test_error_quark(void)
{
    g_assert_cmpuint(CUTILS_ERROR, !=, 0);
    g_assert_cmpuint(CUTILS_ERROR, ==,
                     g_quark_from_static_string("cutils-error-quark"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    g_test_add_func("/cutils/parse-size/table", test_parse_size_table);
    g_test_add_func("/cutils/parse-size/messages", test_parse_size_messages);
    g_test_add_func("/cutils/parse-size-range/messages",
                    test_parse_size_range);
    g_test_add_func("/cutils/parse-size-range/codes",
                    test_parse_size_range_codes);
    g_test_add_func("/cutils/parse-count", test_parse_count);
    g_test_add_func("/cutils/size-to-str", test_size_to_str);
    g_test_add_func("/cutils/size-to-short-str", test_size_to_short_str);
    g_test_add_func("/cutils/buffer-is-zero/small",
                    test_buffer_is_zero_small);
    g_test_add_func("/cutils/buffer-is-zero/large",
                    test_buffer_is_zero_large);
    g_test_add_func("/cutils/clock-ns", test_clock_ns);
    g_test_add_func("/cutils/parse-key-values", test_parse_key_values);
    g_test_add_func("/cutils/take-on-off-auto", test_take_on_off_auto);
    g_test_add_func("/cutils/error-quark", test_error_quark);

    return g_test_run();
}
