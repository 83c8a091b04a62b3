/*
 * Helpers for the NBD export tests: an in-process server (NbdServer on a
 * UNIX socket in a scratch directory) over a raw image or a null node,
 * clients that run on a thread while the main thread runs the loop, a
 * blocking raw-protocol client for hostile requests, and a libnbd client
 * that checks the export still serves the expected bytes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TEST_EXPORT_FIXTURE_H
#define TEST_EXPORT_FIXTURE_H

#include <glib.h>
#include "block/export/nbd-server.h"

#define FIX_SIZE  (16 * 1024 * 1024)

typedef struct ExportFixture {
    char *dir;
    char *image;        /* raw image file, or NULL for a driver spec */
    char *sock;
    BlockDriverState *bs;
    NbdServer *srv;
    int64_t size;
    uint8_t *model;     /* expected content of a raw image */
} ExportFixture;

/*
 * A FIX_SIZE raw image with random data in [0, 1M), [4M, 6M) and
 * [15M, 16M), holes elsewhere, exported as "" (or @name) on a UNIX socket.
 */
ExportFixture *fixture_new_raw(const char *name, bool read_only);

/* The same with @size bytes (at least FIX_SIZE; holes after 16M). */
ExportFixture *fixture_new_raw_size(const char *name, bool read_only,
                                    int64_t size);

/* A node opened from @spec (e.g. "null:size=16M,latency-ns=1000000"). */
ExportFixture *fixture_new_spec(const char *spec, bool read_only);

void fixture_free(ExportFixture *f);

/* The file holds exactly the model. */
void fixture_assert_file(ExportFixture *f);

/*
 * Run @fn(@data) on a thread while this thread iterates the main loop;
 * returns what @fn returned.  Fails the test after 60 s.
 */
typedef int ClientFunc(void *data);
int run_client(ClientFunc *fn, void *data);

/* Iterate the main loop until @cond(@data), failing after @timeout_s. */
void run_loop_until(bool (*cond)(void *data), void *data, int timeout_s);

/*
 * A libnbd client (structured replies, base:allocation) reads the whole
 * export and compares it with the model, writes and reads back a pattern
 * in [8M, 8M+64K) and restores it.  0 on success, else a line number.
 */
int normal_client(void *fixture);

/* run_client(normal_client) must succeed. */
void assert_normal_client(ExportFixture *f);

/* ---- the raw protocol client (blocking; use it on client threads) ---- */

/* Connect to @sock with 10 s send and receive timeouts; -1 on error. */
int raw_connect(const char *sock);

bool raw_read(int fd, void *buf, size_t len);
bool raw_write(int fd, const void *buf, size_t len);

/* Read and check the greeting, then send @client_flags. */
bool raw_greeting(int fd, uint32_t client_flags);

/* Send an option; read one option reply (data owned by the caller). */
bool raw_opt(int fd, uint32_t opt, const void *data, uint32_t len);

typedef struct RawOptReply {
    uint32_t opt;
    uint32_t type;
    uint32_t len;
    uint8_t *data;
} RawOptReply;

bool raw_opt_reply(int fd, RawOptReply *r);

/* NBD_OPT_GO for @name with optional structured replies and meta
 * context; reads replies up to the final one.  True on NBD_REP_ACK. */
bool raw_go(int fd, const char *name, bool structured, bool meta);

/* Connect, greet (fixed newstyle, no zeroes) and go; -1 on error. */
int raw_open(const char *sock, bool structured, bool meta);

bool raw_request(int fd, uint16_t flags, uint16_t type, uint64_t cookie,
                 uint64_t offset, uint32_t len, const void *payload);

typedef struct RawReply {
    uint64_t cookie;
    uint32_t error;         /* NBD error value, 0 on success */
    bool structured;
    uint8_t *data;          /* read data or block status payload */
    size_t len;
    uint32_t chunks;
} RawReply;

/*
 * Read one whole reply.  A simple reply carries @simple_len bytes of data
 * when it is a successful read (the client must know).  Structured
 * replies are read chunk by chunk up to the one flagged done.
 */
bool raw_reply(int fd, bool structured, size_t simple_len, RawReply *r);

void raw_reply_clear(RawReply *r);

/* Wait (up to 10 s) for the server to close the connection. */
bool raw_wait_closed(int fd);


/* Client-thread helpers: fail the client function with its line number. */
#define FAIL_IF(cond)                                               \
    do {                                                            \
        if (cond) {                                                 \
            g_printerr("client: line %d: %s\n", __LINE__, #cond);   \
            return __LINE__;                                        \
        }                                                           \
    } while (0)

/* The same for clients that are libnbd handles: says what libnbd
 * reported too (the test includes libnbd.h). */
#define NBD_FAIL_IF(cond)                                           \
    do {                                                            \
        if (cond) {                                                 \
            g_printerr("client: line %d: %s (%s)\n", __LINE__,      \
                       #cond, nbd_get_error());                     \
            return __LINE__;                                        \
        }                                                           \
    } while (0)

/* A main-loop callback run every 5 ms until it returns true. */
typedef struct Monitor {
    bool (*fn)(void *data);
    void *data;
    guint id;
} Monitor;

/* Run @fn(@data) from the main loop every 5 ms until it returns true. */
void monitor_start(Monitor *m, bool (*fn)(void *), void *data);

/* Stop a monitor that has not finished yet. */
void monitor_stop(Monitor *m);

/* For client threads: wait until @flag is set, at most 30 s; its value. */
bool wait_flag(gint *flag);

/* A monitor condition: the fixture's server has no client and no request. */
bool no_clients(void *fixture);

/* After an attack: nobody left, a normal client works, the data intact. */
void assert_recovered(ExportFixture *f);

#endif /* TEST_EXPORT_FIXTURE_H */
