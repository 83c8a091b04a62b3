/*
 * bench/compare-floor.c - the least a compare of two files in memory can
 * cost on this machine: the data runs of A (SEEK_DATA/SEEK_HOLE; the
 * bench's B is a sparse copy of A, with the same runs) compared with the
 * same bytes of B by memcmp, in 4 MiB pieces handed out to one thread per
 * CPU.  Default: both files mapped whole (mmap), each piece's pages
 * dropped after its memcmp (MADV_DONTNEED), as image-scan does; --pread:
 * each piece read into two buffers per thread first.  No block layer, no
 * main loop, no status beyond the runs of A: what is left is the kernel's
 * work per page and the memory traffic.  Prints "identical" or "differ".
 *
 * Build: cc -O2 -pthread -o compare-floor bench/compare-floor.c
 * (bench/compare.sh builds it into its scratch directory.)
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PIECE (4 << 20)

typedef struct Run {
    int64_t start, end;
} Run;

static int fd[2];
static const char *map[2];
static bool use_pread;
static Run *runs;
static int nruns;
static int64_t npieces;
static int64_t next_piece;
static int64_t *piece_off;
static bool differ;

static void *worker(void *arg)
{
    char *buf[2] = { NULL, NULL };

    (void)arg;
    if (use_pread) {
        buf[0] = aligned_alloc(4096, PIECE);
        buf[1] = aligned_alloc(4096, PIECE);
    }
    for (;;) {
        int64_t k = __atomic_fetch_add(&next_piece, 1, __ATOMIC_RELAXED);
        int64_t off, n;
        int r;

        if (k >= npieces) {
            break;
        }
        off = piece_off[2 * k];
        n = piece_off[2 * k + 1];
        if (use_pread) {
            if (pread(fd[0], buf[0], n, off) != n ||
                pread(fd[1], buf[1], n, off) != n) {
                perror("pread");
                exit(2);
            }
            r = memcmp(buf[0], buf[1], n);
        } else {
            int64_t a = off & ~(int64_t)4095;

            r = memcmp(map[0] + off, map[1] + off, n);
            madvise((void *)(map[0] + a), off + n - a, MADV_DONTNEED);
            madvise((void *)(map[1] + a), off + n - a, MADV_DONTNEED);
        }
        if (r) {
            __atomic_store_n(&differ, true, __ATOMIC_RELAXED);
        }
    }
    free(buf[0]);
    free(buf[1]);
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t size, cap = 0;
    pthread_t th[64];
    int i = 1;

    if (argc > 1 && !strcmp(argv[1], "--pread")) {
        use_pread = true;
        i++;
    }
    if (argc - i != 2) {
        fprintf(stderr, "usage: compare-floor [--pread] A B\n");
        return 2;
    }
    for (int j = 0; j < 2; j++) {
        fd[j] = open(argv[i + j], O_RDONLY);
        if (fd[j] < 0) {
            perror(argv[i + j]);
            return 2;
        }
    }
    size = lseek(fd[0], 0, SEEK_END);
    if (size != lseek(fd[1], 0, SEEK_END)) {
        puts("differ");
        return 1;
    }
    for (int64_t o = 0;;) {
        int64_t d = lseek(fd[0], o, SEEK_DATA), h;

        if (d < 0) {
            break;
        }
        h = lseek(fd[0], d, SEEK_HOLE);
        runs = realloc(runs, (nruns + 1) * sizeof(*runs));
        runs[nruns++] = (Run) { d, h };
        o = h;
    }
    for (int r = 0; r < nruns; r++) {
        for (int64_t o = runs[r].start; o < runs[r].end; o += PIECE) {
            if (npieces == cap) {
                cap = cap ? 2 * cap : 1024;
                piece_off = realloc(piece_off, 2 * cap * sizeof(int64_t));
            }
            piece_off[2 * npieces] = o;
            piece_off[2 * npieces + 1] =
                runs[r].end - o < PIECE ? runs[r].end - o : PIECE;
            npieces++;
        }
    }
    if (!use_pread && size > 0) {
        for (int j = 0; j < 2; j++) {
            map[j] = mmap(NULL, size, PROT_READ, MAP_SHARED, fd[j], 0);
            if (map[j] == MAP_FAILED) {
                perror("mmap");
                return 2;
            }
        }
    }
    if (nthreads > 64) {
        nthreads = 64;
    }
    for (int t = 0; t < nthreads; t++) {
        pthread_create(&th[t], NULL, worker, NULL);
    }
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
    }
    puts(differ ? "differ" : "identical");
    return differ;
}
