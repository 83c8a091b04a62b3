/*
 * Helpers for the NBD export tests (see export-fixture.h).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/export-fixture.h"
#include "tests/qtest-like/test-util.h"
#include "block/block-int.h"
#include "block/export/nbd-server-int.h"

#include <errno.h>
#include <fcntl.h>
#include <libnbd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- fixtures ---- */

static ExportFixture *fixture_serve(ExportFixture *f, const char *name,
                                    bool read_only)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *addr = g_strdup_printf("unix:%s", f->sock);

    f->srv = nbdsrv_new(f->bs, addr, name, read_only, &err);
    g_assert_no_error(err);
    f->size = bdrv_getlength(f->bs);
    return f;
}

ExportFixture *fixture_new_raw(const char *name, bool read_only)
{
    return fixture_new_raw_size(name, read_only, FIX_SIZE);
}

ExportFixture *fixture_new_raw_size(const char *name, bool read_only,
                                    int64_t size)
{
    ExportFixture *f = g_new0(ExportFixture, 1);
    static const struct { int64_t off, len; } data[] = {
        { 0, 1 * MiB }, { 4 * MiB, 2 * MiB }, { 15 * MiB, 1 * MiB },
    };
    int fd;

    f->dir = test_scratch_new();
    f->image = g_build_filename(f->dir, "img.raw", NULL);
    f->sock = g_build_filename(f->dir, "nbd.sock", NULL);
    g_assert_cmpint(size, >=, FIX_SIZE);
    f->model = g_malloc0(size);
    fd = open(f->image, O_RDWR | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    for (size_t i = 0; i < G_N_ELEMENTS(data); i++) {
        test_fill_pattern(f->model + data[i].off, data[i].off, data[i].len,
                          (uint32_t)i + 7);
        g_assert_cmpint(pwrite(fd, f->model + data[i].off, data[i].len,
                               data[i].off), ==, data[i].len);
    }
    close(fd);
    f->bs = test_open(f->image, "raw", read_only ? 0 : BDRV_O_RDWR);
    return fixture_serve(f, name, read_only);
}

ExportFixture *fixture_new_spec(const char *spec, bool read_only)
{
    ExportFixture *f = g_new0(ExportFixture, 1);

    f->dir = test_scratch_new();
    f->sock = g_build_filename(f->dir, "nbd.sock", NULL);
    f->bs = test_open(spec, NULL, read_only ? 0 : BDRV_O_RDWR);
    return fixture_serve(f, NULL, read_only);
}

static bool fixture_released(void *opaque)
{
    ExportFixture *f = opaque;

    return f->bs->refcnt == 1 && bdrv_get_in_flight(f->bs) == 0;
}

void fixture_free(ExportFixture *f)
{
    if (f->srv) {
        nbdsrv_free(f->srv);
        /* A late completion drops the server's reference from an idle
         * callback: wait for it, so that nothing leaks. */
        run_loop_until(fixture_released, f, 30);
    }
    bdrv_unref(f->bs);
    test_scratch_free(f->dir);
    g_free(f->image);
    g_free(f->sock);
    g_free(f->model);
    g_free(f);
}

void fixture_assert_file(ExportFixture *f)
{
    g_autofree char *buf = NULL;
    gsize len;

    g_assert_true(g_file_get_contents(f->image, &buf, &len, NULL));
    g_assert_cmpuint(len, ==, f->size);
    g_assert_true(memcmp(buf, f->model, f->size) == 0);
}

/* ---- running clients ---- */

typedef struct ClientRun {
    ClientFunc *fn;
    void *data;
    int ret;
    gint done;
} ClientRun;

static gpointer client_thread(gpointer opaque)
{
    ClientRun *r = opaque;

    r->ret = r->fn(r->data);
    g_atomic_int_set(&r->done, 1);
    g_main_context_wakeup(NULL);
    return NULL;
}

static gboolean tick_cb(gpointer opaque)
{
    return G_SOURCE_CONTINUE;
}

static bool client_done(void *opaque)
{
    return g_atomic_int_get(&((ClientRun *)opaque)->done);
}

int run_client(ClientFunc *fn, void *data)
{
    ClientRun r = { .fn = fn, .data = data };
    GThread *t = g_thread_new("client", client_thread, &r);

    run_loop_until(client_done, &r, 60);
    g_thread_join(t);
    return r.ret;
}

void run_loop_until(bool (*cond)(void *data), void *data, int timeout_s)
{
    gint64 deadline = g_get_monotonic_time() + timeout_s * G_USEC_PER_SEC;
    guint tick = g_timeout_add(10, tick_cb, NULL);

    while (!cond(data)) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_main_context_iteration(NULL, TRUE);
    }
    g_source_remove(tick);
}

/* ---- the normal client ---- */

#define CHECK(cond)                                         \
    do {                                                    \
        if (!(cond)) {                                      \
            g_printerr("normal client: line %d: %s (%s)\n", \
                       __LINE__, #cond, nbd_get_error());   \
            ret = __LINE__;                                 \
            goto out;                                       \
        }                                                   \
    } while (0)

int normal_client(void *opaque)
{
    ExportFixture *f = opaque;
    struct nbd_handle *h = nbd_create();
    g_autofree uint8_t *buf = g_malloc(f->size);
    g_autofree uint8_t *pat = g_malloc(64 * KiB);
    int64_t off = 8 * MiB;
    int ret = 0;

    CHECK(h);
    CHECK(nbd_add_meta_context(h, "base:allocation") == 0);
    CHECK(nbd_connect_unix(h, f->sock) == 0);
    CHECK(nbd_get_size(h) == f->size);
    for (int64_t pos = 0; pos < f->size; pos += 4 * MiB) {
        size_t n = MIN(4 * MiB, f->size - pos);

        CHECK(nbd_pread(h, buf + pos, n, pos, 0) == 0);
    }
    if (f->model) {
        CHECK(memcmp(buf, f->model, f->size) == 0);
    }
    if (f->model && !nbd_is_read_only(h)) {
        memset(pat, 0x5a, 64 * KiB);
        CHECK(nbd_pwrite(h, pat, 64 * KiB, off, 0) == 0);
        memset(pat, 0, 64 * KiB);
        CHECK(nbd_pread(h, pat, 64 * KiB, off, 0) == 0);
        for (int i = 0; i < 64 * KiB; i++) {
            CHECK(pat[i] == 0x5a);
        }
        CHECK(nbd_pwrite(h, f->model + off, 64 * KiB, off,
                         LIBNBD_CMD_FLAG_FUA) == 0);
        CHECK(nbd_flush(h, 0) == 0);
    }
    CHECK(nbd_shutdown(h, 0) == 0);
out:
    if (h) {
        nbd_close(h);
    }
    return ret;
}

void assert_normal_client(ExportFixture *f)
{
    g_assert_cmpint(run_client(normal_client, f), ==, 0);
}

/* ---- raw protocol client ---- */

int raw_connect(const char *sock)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    struct timeval tv = { .tv_sec = 10 };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_strlcpy(addr.sun_path, sock, sizeof(addr.sun_path));
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool raw_read(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len) {
        ssize_t n = recv(fd, p, len, 0);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        p += n;
        len -= n;
    }
    return true;
}

bool raw_write(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        p += n;
        len -= n;
    }
    return true;
}

bool raw_greeting(int fd, uint32_t client_flags)
{
    uint8_t g[18], cf[4];

    if (!raw_read(fd, g, sizeof(g)) ||
        nbdsrv_get64(g) != NBD_MAGIC_INIT ||
        nbdsrv_get64(g + 8) != NBD_MAGIC_OPTS ||
        nbdsrv_get16(g + 16) !=
        (NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES)) {
        return false;
    }
    nbdsrv_put32(cf, client_flags);
    return raw_write(fd, cf, sizeof(cf));
}

bool raw_opt(int fd, uint32_t opt, const void *data, uint32_t len)
{
    uint8_t h[16];

    nbdsrv_put64(h, NBD_MAGIC_OPTS);
    nbdsrv_put32(h + 8, opt);
    nbdsrv_put32(h + 12, len);
    return raw_write(fd, h, sizeof(h)) && (!len || raw_write(fd, data, len));
}

bool raw_opt_reply(int fd, RawOptReply *r)
{
    uint8_t h[20];

    *r = (RawOptReply) { 0 };
    if (!raw_read(fd, h, sizeof(h)) ||
        nbdsrv_get64(h) != NBD_MAGIC_OPT_REPLY) {
        return false;
    }
    r->opt = nbdsrv_get32(h + 8);
    r->type = nbdsrv_get32(h + 12);
    r->len = nbdsrv_get32(h + 16);
    if (r->len > 64 * KiB) {
        return false;
    }
    r->data = g_malloc(r->len + 1);
    r->data[r->len] = 0;
    return raw_read(fd, r->data, r->len);
}

/* Read option replies up to the final one; true on NBD_REP_ACK. */
static bool raw_opt_final(int fd)
{
    for (;;) {
        RawOptReply r;
        bool ok = raw_opt_reply(fd, &r);
        uint32_t type = r.type;

        g_free(r.data);
        if (!ok || type & 0x80000000u) {
            return false;
        }
        if (type == NBD_REP_ACK) {
            return true;
        }
    }
}

bool raw_go(int fd, const char *name, bool structured, bool meta)
{
    static const char ctx[] = "base:allocation";
    size_t n = strlen(name);
    g_autofree uint8_t *d = g_malloc(4 + n + 8 + sizeof(ctx));

    if (structured && (!raw_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0) ||
                       !raw_opt_final(fd))) {
        return false;
    }
    if (meta) {
        nbdsrv_put32(d, n);
        memcpy(d + 4, name, n);
        nbdsrv_put32(d + 4 + n, 1);
        nbdsrv_put32(d + 8 + n, strlen(ctx));
        memcpy(d + 12 + n, ctx, strlen(ctx));
        if (!raw_opt(fd, NBD_OPT_SET_META_CONTEXT, d,
                     12 + n + strlen(ctx)) || !raw_opt_final(fd)) {
            return false;
        }
    }
    nbdsrv_put32(d, n);
    memcpy(d + 4, name, n);
    nbdsrv_put16(d + 4 + n, 0);
    return raw_opt(fd, NBD_OPT_GO, d, 6 + n) && raw_opt_final(fd);
}

int raw_open(const char *sock, bool structured, bool meta)
{
    int fd = raw_connect(sock);

    if (fd < 0) {
        return -1;
    }
    if (!raw_greeting(fd, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)
        || !raw_go(fd, "", structured, meta)) {
        close(fd);
        return -1;
    }
    return fd;
}

bool raw_request(int fd, uint16_t flags, uint16_t type, uint64_t cookie,
                 uint64_t offset, uint32_t len, const void *payload)
{
    uint8_t h[NBD_REQUEST_SIZE];

    nbdsrv_put32(h, NBD_MAGIC_REQUEST);
    nbdsrv_put16(h + 4, flags);
    nbdsrv_put16(h + 6, type);
    nbdsrv_put64(h + 8, cookie);
    nbdsrv_put64(h + 16, offset);
    nbdsrv_put32(h + 24, len);
    return raw_write(fd, h, sizeof(h)) &&
           (!payload || !len || raw_write(fd, payload, len));
}

bool raw_reply(int fd, bool structured, size_t simple_len, RawReply *r)
{
    uint8_t h[20];

    *r = (RawReply) { 0 };
    if (!raw_read(fd, h, 4)) {
        return false;
    }
    if (nbdsrv_get32(h) == NBD_MAGIC_SIMPLE_REPLY) {
        if (!raw_read(fd, h + 4, 12)) {
            return false;
        }
        r->error = nbdsrv_get32(h + 4);
        r->cookie = nbdsrv_get64(h + 8);
        if (!r->error && simple_len) {
            r->data = g_malloc(simple_len);
            r->len = simple_len;
            return raw_read(fd, r->data, simple_len);
        }
        return true;
    }
    r->structured = true;
    for (;;) {
        uint16_t flags, type;
        uint32_t len;
        g_autofree uint8_t *p = NULL;

        if (nbdsrv_get32(h) != NBD_MAGIC_STRUCTURED ||
            !raw_read(fd, h + 4, 16)) {
            return false;
        }
        flags = nbdsrv_get16(h + 4);
        type = nbdsrv_get16(h + 6);
        r->cookie = nbdsrv_get64(h + 8);
        len = nbdsrv_get32(h + 16);
        if (len > 33 * MiB) {
            return false;
        }
        p = g_malloc(len + 1);
        if (!raw_read(fd, p, len)) {
            return false;
        }
        r->chunks++;
        if (type == NBD_REPLY_TYPE_ERROR && len >= 6) {
            r->error = nbdsrv_get32(p);
        } else if (type == NBD_REPLY_TYPE_OFFSET_DATA && len > 8) {
            g_free(r->data);
            r->len = len - 8;
            r->data = g_memdup2(p + 8, r->len);
        } else if (type == NBD_REPLY_TYPE_BLOCK_STATUS) {
            g_free(r->data);
            r->len = len;
            r->data = g_steal_pointer(&p);
        }
        if (flags & NBD_REPLY_FLAG_DONE) {
            return true;
        }
        if (!raw_read(fd, h, 4)) {
            return false;
        }
    }
}

void raw_reply_clear(RawReply *r)
{
    g_clear_pointer(&r->data, g_free);
}

bool raw_wait_closed(int fd)
{
    uint8_t buf[4096];

    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);

        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            return true;
        }
        if (n < 0 && errno != EINTR) {
            return false;       /* timed out */
        }
    }
}

/* ---- waiting for the server (shared by the hostile and limits tests) ---- */

static gboolean monitor_cb(gpointer opaque)
{
    Monitor *m = opaque;

    if (m->fn(m->data)) {
        m->id = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

void monitor_start(Monitor *m, bool (*fn)(void *), void *data)
{
    *m = (Monitor) { .fn = fn, .data = data };
    m->id = g_timeout_add(5, monitor_cb, m);
}

void monitor_stop(Monitor *m)
{
    if (m->id) {
        g_source_remove(m->id);
        m->id = 0;
    }
}

/* For client threads: wait for @flag, at most 30 s. */
bool wait_flag(gint *flag)
{
    for (int i = 0; i < 6000 && !g_atomic_int_get(flag); i++) {
        g_usleep(5000);
    }
    return g_atomic_int_get(flag);
}

bool no_clients(void *opaque)
{
    ExportFixture *f = opaque;

    return nbdsrv_get_client_count(f->srv) == 0 &&
           nbdsrv_get_in_flight(f->srv) == 0;
}

/* After an attack: nobody left, a normal client works, data intact. */
void assert_recovered(ExportFixture *f)
{
    run_loop_until(no_clients, f, 30);
    assert_normal_client(f);
    if (f->image) {
        fixture_assert_file(f);
    }
}
