/*
 * bench/hash-speed.c - single-thread speed of the hashes `checksum` could
 * use, on 64 KiB blocks of random bytes (what it hashes): the choice of
 * GnuTLS's SHA-256 in qemu-mirror-tool/cmd-checksum.c.  ROUNDS passes of
 * TOTAL bytes per hash; prints the best MB/s of each.
 *
 *   cc -O2 -o hash-speed bench/hash-speed.c \
 *       $(pkg-config --cflags --libs glib-2.0 gnutls) [-DWITH_OPENSSL -lcrypto]
 */
#include <glib.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#ifdef WITH_OPENSSL
#include <openssl/sha.h>
#endif

#define BLOCK   (64 * 1024)
#define TOTAL   (512u << 20)
#define ROUNDS  5

static guint8 block[BLOCK];

static void glib_sha256(guint8 *out)
{
    GChecksum *c = g_checksum_new(G_CHECKSUM_SHA256);
    gsize len = 32;

    g_checksum_update(c, block, BLOCK);
    g_checksum_get_digest(c, out, &len);
    g_checksum_free(c);
}

static void gnutls_sha256(guint8 *out)
{
    gnutls_hash_fast(GNUTLS_DIG_SHA256, block, BLOCK, out);
}

static void gnutls_sha512(guint8 *out)
{
    gnutls_hash_fast(GNUTLS_DIG_SHA512, block, BLOCK, out);
}

#ifdef WITH_OPENSSL
static void openssl_sha256(guint8 *out)
{
    SHA256(block, BLOCK, out);
}
#endif

static void run(const char *name, void (*fn)(guint8 *out))
{
    double best = 0;
    guint8 out[64];

    for (int r = 0; r < ROUNDS; r++) {
        gint64 t = g_get_monotonic_time();

        for (size_t done = 0; done < TOTAL; done += BLOCK) {
            fn(out);
        }
        best = MAX(best, TOTAL / 1e6 /
                         ((g_get_monotonic_time() - t) / 1e6));
    }
    printf("%-16s %6.0f MB/s\n", name, best);
}

int main(void)
{
    for (int i = 0; i < BLOCK; i++) {
        block[i] = g_random_int();
    }
    run("glib sha256", glib_sha256);
    run("gnutls sha256", gnutls_sha256);
    run("gnutls sha512", gnutls_sha512);
#ifdef WITH_OPENSSL
    run("openssl sha256", openssl_sha256);
#endif
    return 0;
}
