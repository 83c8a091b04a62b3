/*
 * Small helpers: parsing user-given sizes and counts, formatting sizes,
 * zero detection and the monotonic clock.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/cutils.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

G_DEFINE_QUARK(cutils-error-quark, cutils_error)

/* Binary suffixes; the index times 10 is the shift. */
static const char size_suffixes[] = "BKMGTPE";

/*
 * @str made safe to quote on one line: control characters are escaped,
 * UTF-8 and backslashes are kept as typed.  Free with g_free().
 */
static char *quote_value(const char *str)
{
    char keep[131];
    int i, n = 0;

    keep[n++] = '\\';
    keep[n++] = '"';
    for (i = 0x80; i <= 0xff; i++) {
        keep[n++] = (char)i;
    }
    keep[n] = '\0';
    return g_strescape(str ? str : "", keep);
}

/*
 * Set @errp to "WHAT 'STR': MESSAGE", or "'STR': MESSAGE" without @what.
 */
static void G_GNUC_PRINTF(5, 6)
set_value_error(GError **errp, CutilsError code, const char *what,
                const char *str, const char *fmt, ...)
{
    g_autofree char *quoted = NULL;
    g_autofree char *msg = NULL;
    va_list ap;

    if (!errp) {
        return;
    }
    quoted = quote_value(str);
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(errp, CUTILS_ERROR, code, "%s%s'%s': %s",
                what ? what : "", what ? " " : "", quoted, msg);
}

/*
 * Parse decimal digits followed by an optional suffix.  Returns 0 and
 * stores the value, -EINVAL for bad syntax, -ERANGE above INT64_MAX.
 */
static int parse_size_value(const char *str, int64_t *value)
{
    const char *p = str;
    const char *suffix;
    uint64_t v = 0;
    bool overflow = false;
    int shift = 0;

    if (!p || !g_ascii_isdigit(*p)) {
        return -EINVAL;
    }
    for (; g_ascii_isdigit(*p); p++) {
        unsigned digit = *p - '0';

        if (v > ((uint64_t)INT64_MAX - digit) / 10) {
            overflow = true;
        } else {
            v = v * 10 + digit;
        }
    }
    if (*p) {
        suffix = strchr(size_suffixes, g_ascii_toupper(*p));
        if (!suffix) {
            return -EINVAL;
        }
        shift = (suffix - size_suffixes) * 10;
        p++;
    }
    if (*p) {
        return -EINVAL;
    }
    if (overflow || v > ((uint64_t)INT64_MAX >> shift)) {
        return -ERANGE;
    }
    *value = (int64_t)(v << shift);
    return 0;
}

bool parse_size(const char *what, const char *str, int64_t *value,
                GError **errp)
{
    int ret = parse_size_value(str, value);

    if (ret == -EINVAL) {
        set_value_error(errp, CUTILS_ERROR_INVALID, what, str,
                        "invalid size (use e.g. 512, 64K, 1M, 2G)");
        return false;
    }
    if (ret == -ERANGE) {
        set_value_error(errp, CUTILS_ERROR_RANGE, what, str,
                        "value too large");
        return false;
    }
    return true;
}

/*
 * "between LO and HI", "at least LO", "at most HI", or "" when neither
 * bound applies.  @sep goes in front of a non-empty phrase: " " so that it
 * can follow "must be a power of 2", "" after "must be".
 */
static char *range_phrase(bool has_min, bool has_max, const char *lo,
                          const char *hi, const char *sep)
{
    if (has_min && has_max) {
        return g_strdup_printf("%sbetween %s and %s", sep, lo, hi);
    }
    if (has_min) {
        return g_strdup_printf("%sat least %s", sep, lo);
    }
    if (has_max) {
        return g_strdup_printf("%sat most %s", sep, hi);
    }
    return g_strdup("");
}

bool parse_size_range(const char *what, const char *str, int64_t min,
                      int64_t max, bool pow2, int64_t *value, GError **errp)
{
    g_autofree char *lo = NULL;
    g_autofree char *hi = NULL;
    g_autofree char *phrase = NULL;
    int64_t v;

    g_assert(min <= max);
    if (!parse_size(what, str, &v, errp)) {
        return false;
    }
    if (v >= min && v <= max && (!pow2 || is_power_of_2(v))) {
        *value = v;
        return true;
    }

    lo = size_to_short_str(min);
    hi = size_to_short_str(max);
    if (pow2) {
        /* Powers of 2 are >= 1, so only a minimum above 1 is a rule. */
        phrase = range_phrase(min > 1, max < INT64_MAX, lo, hi, " ");
        set_value_error(errp, CUTILS_ERROR_RANGE, what, str,
                        "must be a power of 2%s", phrase);
    } else {
        phrase = range_phrase(min > 0, max < INT64_MAX, lo, hi, "");
        set_value_error(errp, CUTILS_ERROR_RANGE, what, str, "must be %s",
                        phrase);
    }
    return false;
}

bool parse_count(const char *what, const char *str, int64_t min, int64_t max,
                 int64_t *value, GError **errp)
{
    g_autofree char *lo = NULL;
    g_autofree char *hi = NULL;
    g_autofree char *phrase = NULL;
    const char *p = str;
    bool negative = false;
    bool overflow = false;
    int64_t v = 0;

    g_assert(min <= max);
    if (p && *p == '-') {
        negative = true;
        p++;
    }
    if (!p || !g_ascii_isdigit(*p)) {
        goto invalid;
    }
    /* Accumulate towards the sign so INT64_MIN is representable. */
    for (; g_ascii_isdigit(*p); p++) {
        int digit = *p - '0';

        if (negative ? v < (INT64_MIN + digit) / 10
                     : v > (INT64_MAX - digit) / 10) {
            overflow = true;
        } else {
            v = negative ? v * 10 - digit : v * 10 + digit;
        }
    }
    if (*p) {
        goto invalid;
    }
    if (!overflow && v >= min && v <= max) {
        *value = v;
        return true;
    }

    lo = g_strdup_printf("%" PRId64, min);
    hi = g_strdup_printf("%" PRId64, max);
    phrase = range_phrase(min > INT64_MIN, max < INT64_MAX, lo, hi, "");
    set_value_error(errp, CUTILS_ERROR_RANGE, what, str, "must be %s",
                    phrase);
    return false;

invalid:
    set_value_error(errp, CUTILS_ERROR_INVALID, what, str,
                    "invalid number (use a decimal integer)");
    return false;
}

char *size_to_str(int64_t bytes)
{
    static const char *const units[] = {
        "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB",
    };
    uint64_t mag = bytes < 0 ? -(uint64_t)bytes : (uint64_t)bytes;
    const char *sign = bytes < 0 ? "-" : "";
    char num[G_ASCII_DTOSTR_BUF_SIZE];
    double v = (double)mag;
    int i = 0;

    /* Three significant digits at most, so move up before 1000. */
    while (v >= 999.5 && i < (int)G_N_ELEMENTS(units) - 1) {
        v /= 1024;
        i++;
    }
    if (i == 0) {
        return g_strdup_printf("%s%" PRIu64 " B", sign, mag);
    }
    g_ascii_formatd(num, sizeof(num), "%.3g", v);
    return g_strdup_printf("%s%s %s", sign, num, units[i]);
}

char *size_to_short_str(int64_t bytes)
{
    uint64_t mag = bytes < 0 ? -(uint64_t)bytes : (uint64_t)bytes;
    const char *sign = bytes < 0 ? "-" : "";
    int i = 0;

    while (mag && !(mag & 1023) && i < (int)strlen(size_suffixes) - 1) {
        mag >>= 10;
        i++;
    }
    if (i == 0) {
        return g_strdup_printf("%s%" PRIu64, sign, mag);
    }
    return g_strdup_printf("%s%" PRIu64 "%c", sign, mag, size_suffixes[i]);
}

/*
 * Two words that may alias any buffer; the OR below compiles to one vector
 * instruction (SSE2 on x86-64) and to word pairs where there are none.
 */
typedef uint64_t ZeroVec __attribute__((vector_size(16), may_alias));

static inline uint64_t load_word(const unsigned char *p)
{
    uint64_t w;

    memcpy(&w, p, sizeof(w));
    return w;
}

bool buffer_is_zero(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    const ZeroVec *v, *vend;
    ZeroVec acc;
    size_t i;

    if (len < 8) {
        unsigned char bits = 0;

        for (i = 0; i < len; i++) {
            bits |= p[i];
        }
        return bits == 0;
    }

    /* Cheap rejection of typical data; covers all of a short buffer. */
    if (load_word(p) | load_word(p + len - 8)) {
        return false;
    }
    if (len <= 16) {
        return true;
    }
    /* The unaligned head and tail fall within the first and last 16 bytes. */
    if (load_word(p + 8) | load_word(p + len - 16)) {
        return false;
    }
    v = (const ZeroVec *)(((uintptr_t)p + 15) & ~(uintptr_t)15);
    vend = (const ZeroVec *)(((uintptr_t)p + len) & ~(uintptr_t)15);

    /* 64 bytes per test: the branch stays rare, the ORs stay in vectors. */
    while (vend - v >= 4) {
        acc = (v[0] | v[1]) | (v[2] | v[3]);
        if (acc[0] | acc[1]) {
            return false;
        }
        v += 4;
    }
    acc = (ZeroVec){ 0, 0 };
    while (v < vend) {
        acc |= *v++;
    }
    return (acc[0] | acc[1]) == 0;
}

int64_t clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool fd_in_memory(int fd)
{
    struct statfs sfs;
    struct stat st;
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || (fl & O_DIRECT) || fstat(fd, &st) < 0 ||
        !S_ISREG(st.st_mode)) {
        return false;
    }
    return fstatfs(fd, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
}

bool parse_key_values(const char *what, const char *str, GHashTable *options,
                      GError **errp)
{
    g_auto(GStrv) parts = NULL;

    if (!*str) {
        return true;
    }
    parts = g_strsplit(str, ",", -1);
    for (int i = 0; parts[i]; i++) {
        char *eq = strchr(parts[i], '=');

        if (!eq || eq == parts[i]) {
            if (what) {
                g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                            "%s '%s': expected key=value", what, parts[i]);
            } else {
                g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                            "Invalid option '%s': expected key=value",
                            parts[i]);
            }
            return false;
        }
        *eq = '\0';
        g_hash_table_replace(options, g_strdup(parts[i]), g_strdup(eq + 1));
    }
    return true;
}

bool take_on_off_auto(GHashTable *options, const char *key,
                      OnOffAuto *value, GError **errp)
{
    static const char *const names[] = { "auto", "on", "off" };
    const char *v = g_hash_table_lookup(options, key);

    if (!v) {
        return true;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        if (!strcmp(v, names[i])) {
            *value = (OnOffAuto)i;
            g_hash_table_remove(options, key);
            return true;
        }
    }
    g_set_error(errp, CUTILS_ERROR, CUTILS_ERROR_INVALID,
                "%s '%s': expected auto, on or off", key, v);
    return false;
}
