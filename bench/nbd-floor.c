/*
 * bench/nbd-floor.c - the least a copy of a local file into an NBD server
 * can cost on this machine: the whole file written from offset 0 in 1 MiB
 * requests, N of them in flight, over a plain (non-TLS) UNIX socket, then
 * NBD_CMD_FLUSH.  No library, no main loop, no block status, no zero
 * detection.  Two ways to move the data:
 *
 *   read    pread into one buffer, then send it: the buffer is free again
 *           as soon as send() returns (the kernel copied it), so it stays
 *           in the CPU caches.  Two copies on our side, as any client with
 *           a buffer (mirror-tool, qemu-img, nbdcopy) makes.
 *   splice  splice(2) file -> pipe -> socket: the socket takes references
 *           to the file's pages, no copy on our side at all.  Only the
 *           server copies (receive, then write).
 *
 * bench/nbd.sh runs both beside the tools on W2 and W3 as "floor" rows: how
 * far a tool is from what the kernel allows, not a peer; no verdict is
 * taken on them.  A reply thread reads the server's simple replies (no
 * structured replies are negotiated; writes need none).
 *
 *   cc -O2 -pthread -o nbd-floor bench/nbd-floor.c
 *   nbd-floor read|splice FILE SOCKET|URI [IN_FLIGHT]
 *
 * URI: nbd+unix:// with a socket= parameter (nbdkit's $uri for -U);
 * the export is always the default one, "".
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define PIECE               (1 << 20)
#define NBD_OPT_GO          7
#define NBD_REP_ACK         1
#define NBD_REP_FLAG_ERROR  (1u << 31)
#define NBD_REQUEST_MAGIC   0x25609513u
#define NBD_REPLY_MAGIC     0x67446698u
#define NBD_CMD_WRITE       1
#define NBD_CMD_DISC        2
#define NBD_CMD_FLUSH       3
#define NBD_FLAG_C_FIXED_NEWSTYLE 1
#define NBD_FLAG_C_NO_ZEROES      2

static int sock;
static sem_t window;
static uint64_t nb_replies;

static void die(const char *what)
{
    fprintf(stderr, "nbd-floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void dief(const char *what)
{
    fprintf(stderr, "nbd-floor: %s\n", what);
    exit(1);
}

static void recv_all(void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = read(sock, (char *)buf + done, len - done);

        if (n == 0) {
            dief("the server closed the connection");
        }
        if (n < 0 && errno != EINTR) {
            die("read");
        }
        done += n > 0 ? n : 0;
    }
}

static void send_all(const void *buf, size_t len, int flags)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = send(sock, (const char *)buf + done, len - done, flags);

        if (n < 0 && errno != EINTR) {
            die("send");
        }
        done += n > 0 ? n : 0;
    }
}

/* Fixed newstyle handshake: NBD_OPT_GO for the default export "". */
static void handshake(void)
{
    uint8_t greeting[18], opt[22] = "IHAVEOPT";
    uint32_t v = htobe32(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);

    recv_all(greeting, sizeof(greeting));
    if (memcmp(greeting, "NBDMAGICIHAVEOPT", 16)) {
        dief("not a newstyle NBD server");
    }
    send_all(&v, 4, 0);
    v = htobe32(NBD_OPT_GO);
    memcpy(opt + 8, &v, 4);
    v = htobe32(6);             /* name length (0), name, 0 info requests */
    memcpy(opt + 12, &v, 4);
    memset(opt + 16, 0, 6);
    send_all(opt, sizeof(opt), 0);
    for (;;) {
        uint8_t head[20], data[1024];
        uint32_t type, len;

        recv_all(head, sizeof(head));
        memcpy(&type, head + 12, 4);
        memcpy(&len, head + 16, 4);
        type = be32toh(type);
        len = be32toh(len);
        while (len > 0) {
            uint32_t n = len < sizeof(data) ? len : sizeof(data);

            recv_all(data, n);
            len -= n;
        }
        if (type == NBD_REP_ACK) {
            return;
        }
        if (type & NBD_REP_FLAG_ERROR) {
            dief("the server refused NBD_OPT_GO");
        }
    }
}

static void send_request(uint16_t type, uint64_t handle, uint64_t offset,
                         uint32_t len, int flags)
{
    uint8_t req[28];
    uint32_t magic = htobe32(NBD_REQUEST_MAGIC), l = htobe32(len);
    uint16_t f = 0, t = htobe16(type);
    uint64_t h = htobe64(handle), o = htobe64(offset);

    memcpy(req, &magic, 4);
    memcpy(req + 4, &f, 2);
    memcpy(req + 6, &t, 2);
    memcpy(req + 8, &h, 8);
    memcpy(req + 16, &o, 8);
    memcpy(req + 24, &l, 4);
    send_all(req, sizeof(req), flags);
}

static void *reply_thread(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < nb_replies; i++) {
        uint8_t rep[16];
        uint32_t magic, err;

        recv_all(rep, sizeof(rep));
        memcpy(&magic, rep, 4);
        memcpy(&err, rep + 4, 4);
        if (be32toh(magic) != NBD_REPLY_MAGIC) {
            dief("bad reply magic (structured reply?)");
        }
        if (err) {
            fprintf(stderr, "nbd-floor: reply %" PRIu64 ": NBD error %u\n",
                    i, be32toh(err));
            exit(1);
        }
        sem_post(&window);
    }
    return NULL;
}

/* Move @len bytes of @fd at @offset into the socket through @pipefd. */
static void splice_piece(int fd, int pipefd[2], uint64_t offset, size_t len)
{
    size_t done = 0;

    while (done < len) {
        loff_t off = offset + done;
        ssize_t in = splice(fd, &off, pipefd[1], NULL, len - done,
                            SPLICE_F_MOVE);

        if (in <= 0) {
            in < 0 ? die("splice from the file") : dief("short file");
        }
        for (ssize_t out = 0; out < in;) {
            ssize_t n = splice(pipefd[0], NULL, sock, NULL, in - out,
                               SPLICE_F_MOVE |
                               (done + in < len ? SPLICE_F_MORE : 0));

            if (n <= 0) {
                die("splice to the socket");
            }
            out += n;
        }
        done += in;
    }
}

int main(int argc, char **argv)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    pthread_t replies;
    struct stat st;
    const char *path;
    bool use_splice;
    int depth, fd, pipefd[2], sndbuf = 4 << 20;
    uint64_t pieces;
    char *buf;

    if (argc < 4 || argc > 5 ||
        (strcmp(argv[1], "read") && strcmp(argv[1], "splice"))) {
        fprintf(stderr, "usage: nbd-floor read|splice FILE SOCKET|URI "
                "[IN_FLIGHT]\n");
        return 2;
    }
    use_splice = !strcmp(argv[1], "splice");
    depth = argc == 5 ? atoi(argv[4]) : 16;
    path = strstr(argv[3], "socket=");
    path = path ? path + 7 : argv[3];
    if (depth < 1 || strcspn(path, "&") >= sizeof(sa.sun_path)) {
        fprintf(stderr, "nbd-floor: bad IN_FLIGHT or SOCKET\n");
        return 2;
    }
    fd = open(argv[2], O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        die(argv[2]);
    }
    memcpy(sa.sun_path, path, strcspn(path, "&"));
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        die(sa.sun_path);
    }
    /* As mirror-tool does (util/sockets.c). */
    if (setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, 4) < 0) {
        setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, 4);
    }
    handshake();

    pieces = (st.st_size + PIECE - 1) / PIECE;
    nb_replies = pieces + 1;    /* and the flush */
    sem_init(&window, 0, depth);
    if (pthread_create(&replies, NULL, reply_thread, NULL)) {
        dief("pthread_create failed");
    }
    buf = use_splice ? NULL : aligned_alloc(4096, PIECE);
    if (use_splice && (pipe(pipefd) < 0 ||
                       fcntl(pipefd[1], F_SETPIPE_SZ, PIECE) < 0)) {
        die("pipe");
    }
    for (uint64_t i = 0; i < pieces; i++) {
        uint64_t offset = i * PIECE;
        size_t len = st.st_size - offset < PIECE ? st.st_size - offset : PIECE;

        sem_wait(&window);
        send_request(NBD_CMD_WRITE, i, offset, len, MSG_MORE);
        if (use_splice) {
            splice_piece(fd, pipefd, offset, len);
        } else {
            if (pread(fd, buf, len, offset) != (ssize_t)len) {
                die("pread");
            }
            send_all(buf, len, 0);
        }
    }
    /* A flush covers the writes answered before it: wait for all. */
    for (int i = 0; i < depth; i++) {
        sem_wait(&window);
    }
    send_request(NBD_CMD_FLUSH, pieces, 0, 0, 0);
    pthread_join(replies, NULL);
    send_request(NBD_CMD_DISC, pieces + 1, 0, 0, 0);
    return 0;
}
