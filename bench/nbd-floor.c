/*
 * bench/nbd-floor.c - the least a copy of a local file into an NBD server
 * can cost on this machine: the whole file written from offset 0 in 1 MiB
 * requests, N of them in flight on each of C connections (piece i on
 * connection i mod C, one thread each), over plain (non-TLS) UNIX sockets,
 * then NBD_CMD_FLUSH on each.  No library, no main loop, no block status, no zero
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
 * taken on them.  A reply thread per connection reads the server's simple
 * replies (no structured replies are negotiated; writes need none).
 *
 *   cc -O2 -pthread -o nbd-floor bench/nbd-floor.c
 *   nbd-floor read|splice FILE SOCKET|URI [IN_FLIGHT [CONNECTIONS]]
 *
 * IN_FLIGHT is per connection (default 16), CONNECTIONS default 1.
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

/* One connection: its socket, its window and the thread that sends. */
typedef struct Conn {
    int sock;
    sem_t window;
    uint64_t nb_replies;
    int index;
    pthread_t sender, replies;
} Conn;

static const char *file_name;
static int file_fd, depth, nr_conns;
static bool use_splice;
static off_t file_size;
static struct sockaddr_un sa = { .sun_family = AF_UNIX };

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

static void recv_all(int sock, void *buf, size_t len)
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

static void send_all(int sock, const void *buf, size_t len, int flags)
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
static void handshake(int sock)
{
    uint8_t greeting[18], opt[22] = "IHAVEOPT";
    uint32_t v = htobe32(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);

    recv_all(sock, greeting, sizeof(greeting));
    if (memcmp(greeting, "NBDMAGICIHAVEOPT", 16)) {
        dief("not a newstyle NBD server");
    }
    send_all(sock, &v, 4, 0);
    v = htobe32(NBD_OPT_GO);
    memcpy(opt + 8, &v, 4);
    v = htobe32(6);             /* name length (0), name, 0 info requests */
    memcpy(opt + 12, &v, 4);
    memset(opt + 16, 0, 6);
    send_all(sock, opt, sizeof(opt), 0);
    for (;;) {
        uint8_t head[20], data[1024];
        uint32_t type, len;

        recv_all(sock, head, sizeof(head));
        memcpy(&type, head + 12, 4);
        memcpy(&len, head + 16, 4);
        type = be32toh(type);
        len = be32toh(len);
        while (len > 0) {
            uint32_t n = len < sizeof(data) ? len : sizeof(data);

            recv_all(sock, data, n);
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

static void send_request(int sock, uint16_t type, uint64_t handle,
                         uint64_t offset, uint32_t len, int flags)
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
    send_all(sock, req, sizeof(req), flags);
}

static void *reply_thread(void *arg)
{
    Conn *c = arg;

    for (uint64_t i = 0; i < c->nb_replies; i++) {
        uint8_t rep[16];
        uint32_t magic, err;

        recv_all(c->sock, rep, sizeof(rep));
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
        sem_post(&c->window);
    }
    return NULL;
}

/* Move @len bytes of @fd at @offset into the socket through @pipefd. */
static void splice_piece(int sock, int fd, int pipefd[2], uint64_t offset,
                         size_t len)
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

/* Connect, then send this connection's pieces and its flush. */
static void *send_thread(void *arg)
{
    Conn *c = arg;
    int sndbuf = 4 << 20, pipefd[2];
    uint64_t pieces = (file_size + PIECE - 1) / PIECE, mine = 0;
    char *buf;

    c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->sock < 0 ||
        connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        die(sa.sun_path);
    }
    /* As mirror-tool does (util/sockets.c). */
    if (setsockopt(c->sock, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, 4) < 0) {
        setsockopt(c->sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, 4);
    }
    handshake(c->sock);

    for (uint64_t i = c->index; i < pieces; i += nr_conns) {
        mine++;
    }
    c->nb_replies = mine + 1;   /* and the flush */
    sem_init(&c->window, 0, depth);
    if (pthread_create(&c->replies, NULL, reply_thread, c)) {
        dief("pthread_create failed");
    }
    buf = use_splice ? NULL : aligned_alloc(4096, PIECE);
    if (use_splice && (pipe(pipefd) < 0 ||
                       fcntl(pipefd[1], F_SETPIPE_SZ, PIECE) < 0)) {
        die("pipe");
    }
    for (uint64_t i = c->index; i < pieces; i += nr_conns) {
        uint64_t offset = i * PIECE;
        size_t len = file_size - offset < PIECE ? file_size - offset : PIECE;

        sem_wait(&c->window);
        send_request(c->sock, NBD_CMD_WRITE, i, offset, len, MSG_MORE);
        if (use_splice) {
            splice_piece(c->sock, file_fd, pipefd, offset, len);
        } else {
            if (pread(file_fd, buf, len, offset) != (ssize_t)len) {
                die("pread");
            }
            send_all(c->sock, buf, len, 0);
        }
    }
    /* A flush covers the writes answered before it: wait for all. */
    for (int i = 0; i < depth; i++) {
        sem_wait(&c->window);
    }
    send_request(c->sock, NBD_CMD_FLUSH, pieces, 0, 0, 0);
    pthread_join(c->replies, NULL);
    send_request(c->sock, NBD_CMD_DISC, pieces + 1, 0, 0, 0);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    struct stat st;
    const char *path;
    Conn *conns;

    if (argc < 4 || argc > 6 ||
        (strcmp(argv[1], "read") && strcmp(argv[1], "splice"))) {
        fprintf(stderr, "usage: nbd-floor read|splice FILE SOCKET|URI "
                "[IN_FLIGHT [CONNECTIONS]]\n");
        return 2;
    }
    use_splice = !strcmp(argv[1], "splice");
    depth = argc >= 5 ? atoi(argv[4]) : 16;
    nr_conns = argc >= 6 ? atoi(argv[5]) : 1;
    path = strstr(argv[3], "socket=");
    path = path ? path + 7 : argv[3];
    if (depth < 1 || nr_conns < 1 || nr_conns > 64 ||
        strcspn(path, "&") >= sizeof(sa.sun_path)) {
        fprintf(stderr, "nbd-floor: bad IN_FLIGHT, CONNECTIONS or SOCKET\n");
        return 2;
    }
    file_name = argv[2];
    file_fd = open(file_name, O_RDONLY);
    if (file_fd < 0 || fstat(file_fd, &st) < 0) {
        die(file_name);
    }
    file_size = st.st_size;
    memcpy(sa.sun_path, path, strcspn(path, "&"));
    conns = calloc(nr_conns, sizeof(*conns));
    for (int i = 0; i < nr_conns; i++) {
        conns[i].index = i;
        if (pthread_create(&conns[i].sender, NULL, send_thread, &conns[i])) {
            dief("pthread_create failed");
        }
    }
    for (int i = 0; i < nr_conns; i++) {
        pthread_join(conns[i].sender, NULL);
    }
    free(conns);
    return 0;
}
