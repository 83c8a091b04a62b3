/*
 * bench/views.c - what a view of an in-memory file costs against a read
 * into a buffer, per operation size: the choice behind raw-map.c's
 * raw_views_pay().  A 64 MiB file on /dev/shm; per size, ROUNDS passes
 * over it, alternating: "view" maps each piece with MAP_POPULATE, reads
 * every cache line, unmaps; "read" preads it into one buffer (huge pages,
 * touched beforehand, as the mirror's pool) and reads every cache line.
 * Prints the median and best microseconds per MiB of each.
 *
 *   cc -O2 -o views bench/views.c && ./views [DIR]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES  (64L << 20)
#define ROUNDS      9

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t touch(const uint8_t *p, size_t n)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i += 64) {
        sum += ((const volatile uint8_t *)p)[i];
    }
    return sum;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = { 256 << 10, 1 << 20, 4 << 20 };
    char path[4096];
    uint8_t *buf;
    uint64_t sink = 0;
    int fd;

    snprintf(path, sizeof(path), "%s/views-XXXXXX",
             argc > 1 ? argv[1] : "/dev/shm");
    fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    unlink(path);
    buf = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(buf, 4 << 20, MADV_HUGEPAGE);
    memset(buf, 0xa5, 4 << 20);
    for (long off = 0; off < FILE_BYTES; off += 4 << 20) {
        if (pwrite(fd, buf, 4 << 20, off) != 4 << 20) {
            perror("pwrite");
            return 1;
        }
    }
    printf("%-8s %14s %14s %14s %14s\n", "size", "view_med_us/M",
           "view_best", "read_med_us/M", "read_best");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t sz = sizes[k];
        int64_t tv[ROUNDS], tr[ROUNDS];

        for (int r = 0; r < ROUNDS; r++) {
            int64_t t0 = now_ns();

            for (long off = 0; off < FILE_BYTES; off += sz) {
                void *p = mmap(NULL, sz, PROT_READ,
                               MAP_SHARED | MAP_POPULATE, fd, off);

                if (p == MAP_FAILED) {
                    perror("mmap");
                    return 1;
                }
                sink += touch(p, sz);
                munmap(p, sz);
            }
            tv[r] = now_ns() - t0;
            t0 = now_ns();
            for (long off = 0; off < FILE_BYTES; off += sz) {
                if (pread(fd, buf, sz, off) != (ssize_t)sz) {
                    perror("pread");
                    return 1;
                }
                sink += touch(buf, sz);
            }
            tr[r] = now_ns() - t0;
        }
        qsort(tv, ROUNDS, sizeof(tv[0]), cmp64);
        qsort(tr, ROUNDS, sizeof(tr[0]), cmp64);
        printf("%-8zu %14.0f %14.0f %14.0f %14.0f\n", sz >> 10,
               tv[ROUNDS / 2] / 1000.0 / (FILE_BYTES >> 20),
               tv[0] / 1000.0 / (FILE_BYTES >> 20),
               tr[ROUNDS / 2] / 1000.0 / (FILE_BYTES >> 20),
               tr[0] / 1000.0 / (FILE_BYTES >> 20));
    }
    close(fd);
    return sink == 42;  /* keeps the reads; never 42 in practice */
}
