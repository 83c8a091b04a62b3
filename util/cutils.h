/*
 * Small helpers: parsing sizes, rates and counts given by users, and
 * formatting sizes for people.
 *
 * Sizes accept a decimal number with an optional binary suffix:
 * B (bytes), K, M, G, T, P, E (powers of 1024), case-insensitive; "512",
 * "64K", "1M", "2G".  Rejected, with a message that quotes the value: empty
 * strings, signs, spaces, fractions, hex, unknown suffixes, anything that
 * does not fit in int64_t.  Rates are sizes per second.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_CUTILS_H
#define UTIL_CUTILS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#define KiB (INT64_C(1) << 10)
#define MiB (INT64_C(1) << 20)
#define GiB (INT64_C(1) << 30)
#define TiB (INT64_C(1) << 40)

#define QEMU_IS_ALIGNED(n, m) (((n) % (m)) == 0)
#define QEMU_ALIGN_DOWN(n, m) ((n) / (m) * (m))
#define QEMU_ALIGN_UP(n, m) QEMU_ALIGN_DOWN((n) + (m) - 1, (m))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))

/* Error domain for parse errors */
#define CUTILS_ERROR (cutils_error_quark())
GQuark cutils_error_quark(void);

/* Error codes in CUTILS_ERROR */
typedef enum {
    CUTILS_ERROR_INVALID = 1,   /* malformed: not a size or number at all */
    CUTILS_ERROR_RANGE,         /* well-formed, but too large or out of range */
    CUTILS_ERROR_IO,            /* a system call failed (util/sockets.c) */
} CutilsError;

/*
 * Parse @str as a size in bytes into *@value.  @what names the option in
 * the error ("--chunk-size"; NULL leaves it out); errors read
 * "--chunk-size '3X': invalid size (use e.g. 512, 64K, 1M, 2G)"
 * (CUTILS_ERROR_INVALID) or "--buf-size '16E': value too large"
 * (CUTILS_ERROR_RANGE).  The value is quoted as typed, control characters
 * escaped.  Returns false with @errp set on failure, leaving *@value
 * untouched; 0 is accepted here.
 */
bool parse_size(const char *what, const char *str, int64_t *value,
                GError **errp);

/*
 * parse_size() plus range checks: @min <= value <= @max and, when
 * @pow2 is true, a power of two.  The error (CUTILS_ERROR_RANGE) names the
 * rule, e.g. "--chunk-size '3M': must be a power of 2 between 4K and 64M";
 * a bound that excludes nothing is left out ("must be at least 64K",
 * "must be a power of 2 at most 64M").  Bounds print as size_to_short_str().
 */
bool parse_size_range(const char *what, const char *str, int64_t min,
                      int64_t max, bool pow2, int64_t *value, GError **errp);

/*
 * A plain decimal count in [@min, @max], optionally with a leading '-'.
 * Errors: "-m 'x': invalid number (use a decimal integer)"
 * (CUTILS_ERROR_INVALID); "-m '0': must be between 1 and 64"
 * (CUTILS_ERROR_RANGE, also for values beyond int64_t).  *@value is
 * untouched on failure.  Safe on any thread: it never looks at errno.
 * Use it (or parse_size()) rather than g_ascii_string_to_signed() and
 * friends, which fail spuriously ("'105' is not a signed number") when
 * two threads use them for the first time at once: GLib makes its C
 * locale under a g_once, whose futex wait can leave errno set.
 */
bool parse_count(const char *what, const char *str, int64_t min, int64_t max,
                 int64_t *value, GError **errp);

/* Is @n a power of two (n > 0)? */
static inline bool is_power_of_2(uint64_t n)
{
    return n && !(n & (n - 1));
}

/*
 * Format @bytes for people ("1.5 GiB", "512 B"): at most 3 significant
 * digits, in the unit that keeps the number below 1000 (so 1000 bytes is
 * "0.977 KiB"), like qemu-img.  Locale-independent; free with g_free().
 */
char *size_to_str(int64_t bytes);

/* Format a short size for messages ("4K", "64M", "3000"): exact value,
 * largest suffix that divides it.  Free with g_free(). */
char *size_to_short_str(int64_t bytes);

/*
 * True when the @len bytes at @buf are all zero.  Fast on data that is not
 * zero (it stops at the first non-zero word), vectorised otherwise.
 */
bool buffer_is_zero(const void *buf, size_t len);

/*
 * Is @fd a regular file on tmpfs, opened buffered?  Its pages are in
 * memory: reading and writing it are CPU work that never waits for a disk
 * nor meets an I/O error.
 */
bool fd_in_memory(int fd);

/*
 * Add the pairs of "key=value,key=value" @str to @options (string keys and
 * values, g_free'd by the table); a later key replaces an earlier one.  An
 * empty @str adds nothing.  A pair without '=' or with an empty key is
 * refused (CUTILS_ERROR_INVALID): "WHAT 'pair': expected key=value", or
 * "Invalid option 'pair': expected key=value" when @what is NULL; pairs
 * before it may have been added.
 */
bool parse_key_values(const char *what, const char *str, GHashTable *options,
                      GError **errp);

/* A switch that is on, off, or left to the program (QEMU's OnOffAuto). */
typedef enum OnOffAuto {
    ON_OFF_AUTO_AUTO,
    ON_OFF_AUTO_ON,
    ON_OFF_AUTO_OFF,
} OnOffAuto;

/*
 * Take the option @key out of @options as auto, on or off into *@value
 * (left alone when @key is absent).  A bad value is refused
 * (CUTILS_ERROR_INVALID): "KEY 'VALUE': expected auto, on or off".
 */
bool take_on_off_auto(GHashTable *options, const char *key,
                      OnOffAuto *value, GError **errp);

/* Monotonic time in nanoseconds. */
int64_t clock_ns(void);

#endif /* UTIL_CUTILS_H */
