/*
 * bench/copy-floor.c - the least a copy of a sparse raw file can cost: its
 * data extents (SEEK_DATA/SEEK_HOLE) copied into a new file of the same size
 * with pread + pwrite of 1 MiB pieces, one thread per CPU, each thread
 * writing straight from the buffer it just read into, then fdatasync.  No
 * image format, no main loop, no zero detection, nothing in flight beyond
 * one piece per thread.
 *
 * bench/qcow2.sh runs it beside the tools on Q1 and Q2 (the same data
 * bytes reach a new file in both) as the "copy floor" row: how far a tool
 * is from what the kernel and the memory of the machine allow.
 *
 *   cc -O2 -pthread -o copy-floor bench/copy-floor.c
 *   copy-floor SRC DST
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE (1 << 20)

typedef struct Piece {
    off_t offset;
    size_t bytes;
} Piece;

static int src_fd, dst_fd;
static Piece *pieces;
static size_t nb_pieces;
static atomic_size_t next_piece;

static void die(const char *what)
{
    fprintf(stderr, "copy-floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void add_piece(off_t offset, size_t bytes)
{
    static size_t alloc;

    if (nb_pieces == alloc) {
        alloc = alloc ? alloc * 2 : 1024;
        pieces = realloc(pieces, alloc * sizeof(*pieces));
        if (!pieces) {
            die("realloc");
        }
    }
    pieces[nb_pieces++] = (Piece) { offset, bytes };
}

/* Every data extent of the source, cut into pieces of at most PIECE. */
static void plan(off_t size)
{
    off_t data = 0, hole;

    while (data < size) {
        data = lseek(src_fd, data, SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO) {
                break;                  /* only a hole is left */
            }
            die("SEEK_DATA");
        }
        hole = lseek(src_fd, data, SEEK_HOLE);
        if (hole < 0) {
            die("SEEK_HOLE");
        }
        while (data < hole) {
            size_t bytes = hole - data < PIECE ? hole - data : PIECE;

            add_piece(data, bytes);
            data += bytes;
        }
    }
}

/* All of [@offset, @offset + @bytes) read (@write false) or written. */
static void full_io(bool write, char *buf, size_t bytes, off_t offset)
{
    for (size_t done = 0; done < bytes;) {
        ssize_t n = write ? pwrite(dst_fd, buf + done, bytes - done,
                                   offset + done)
                          : pread(src_fd, buf + done, bytes - done,
                                  offset + done);
        if (n <= 0) {
            die(write ? "pwrite" : "pread");
        }
        done += n;
    }
}

static void *worker(void *arg)
{
    char *buf;
    size_t i;

    (void)arg;
    if (posix_memalign((void **)&buf, 4096, PIECE)) {
        die("posix_memalign");
    }
    while ((i = atomic_fetch_add(&next_piece, 1)) < nb_pieces) {
        full_io(false, buf, pieces[i].bytes, pieces[i].offset);
        full_io(true, buf, pieces[i].bytes, pieces[i].offset);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t threads[64];
    struct stat st;

    if (argc != 3) {
        fprintf(stderr, "usage: copy-floor SRC DST\n");
        return 2;
    }
    src_fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (src_fd < 0 || fstat(src_fd, &st) < 0) {
        die(argv[1]);
    }
    dst_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (dst_fd < 0 || ftruncate(dst_fd, st.st_size) < 0) {
        die(argv[2]);
    }
    plan(st.st_size);
    nthreads = nthreads < 1 ? 1 : nthreads > 64 ? 64 : nthreads;
    for (long i = 0; i < nthreads; i++) {
        errno = pthread_create(&threads[i], NULL, worker, NULL);
        if (errno) {
            die("pthread_create");
        }
    }
    for (long i = 0; i < nthreads; i++) {
        pthread_join(threads[i], NULL);
    }
    if (fdatasync(dst_fd) < 0) {
        die("fdatasync");
    }
    return 0;
}
