/*
 * The daemon's jobs (qmp-mirror.c, qmp-job.c, job.c) in process: a Daemon
 * without a socket, nodes over raw files put straight into its registry
 * (daemon.h), and a QMP client on a socket pair that sees every reply and
 * event in the order the server sends them.
 *
 * The event sequences and error messages asserted here are those
 * qemu-storage-daemon 7.2 gives for the same conversation.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "block/mirror/mirror-top.h"
#include "tests/qtest-like/libqtest.h"
#include "tests/qtest-like/test-util.h"
#include "util/cutils.h"

#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_S 60

/* A QMP client of the daemon, served by its main loop. */
typedef struct TestClient {
    int fd;
    guint watch;
    GString *in;
    GPtrArray *msgs;            /* JsonObject *, every message in order */
    guint reply_at;             /* index of the last reply read */
} TestClient;

typedef struct TestDaemon {
    char *dir;
    Daemon *d;
    TestClient c;
} TestDaemon;

static gboolean client_readable(gint fd, GIOCondition cond, gpointer opaque)
{
    TestClient *c = opaque;
    char buf[65536];
    ssize_t n;
    char *nl;

    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        g_string_append_len(c->in, buf, n);
    }
    while ((nl = strchr(c->in->str, '\n'))) {
        g_autoptr(JsonParser) p = json_parser_new();
        g_autoptr(GError) err = NULL;

        *nl = '\0';
        g_assert_true(json_parser_load_from_data(p, c->in->str, -1, &err));
        g_ptr_array_add(c->msgs,
                        json_object_ref(json_node_get_object(
                                            json_parser_get_root(p))));
        g_string_erase(c->in, 0, nl + 1 - c->in->str);
    }
    return G_SOURCE_CONTINUE;
}

static gboolean deadline_cb(gpointer opaque)
{
    g_error("timed out waiting for the daemon");
    return G_SOURCE_REMOVE;
}

/* Run the main loop until @c has more than @count messages. */
static void client_wait_count(TestClient *c, guint count)
{
    guint deadline = g_timeout_add_seconds(TIMEOUT_S, deadline_cb, NULL);

    while (c->msgs->len <= count) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_source_remove(deadline);
}

/* Send one request (JSON text) and return its reply (not owned). */
static JsonObject *client_cmd(TestClient *c, const char *json)
{
    guint i = c->msgs->len;

    g_assert_cmpint(write(c->fd, json, strlen(json)), ==, strlen(json));
    g_assert_cmpint(write(c->fd, "\n", 1), ==, 1);
    for (;;) {
        client_wait_count(c, i);
        for (; i < c->msgs->len; i++) {
            JsonObject *m = c->msgs->pdata[i];

            if (json_object_has_member(m, "return") ||
                json_object_has_member(m, "error")) {
                c->reply_at = i;
                return m;
            }
        }
    }
}

static void client_ok(TestClient *c, const char *json)
{
    JsonObject *r = client_cmd(c, json);

    if (!json_object_has_member(r, "return")) {
        g_error("%s: %s", json, qtest_json_str(r, "error/desc"));
    }
}

static void client_error(TestClient *c, const char *json, const char *cls,
                         const char *desc)
{
    JsonObject *r = client_cmd(c, json);

    g_assert_true(json_object_has_member(r, "error"));
    g_assert_cmpstr(qtest_json_str(r, "error/class"), ==, cls);
    g_assert_cmpstr(qtest_json_str(r, "error/desc"), ==, desc);
}

/* Run @name {@key: @id} (a job command), returning its reply. */
static JsonObject *client_job_cmd(TestClient *c, const char *name,
                                  const char *key, const char *id)
{
    g_autofree char *cmd = g_strdup_printf(
        "{\"execute\": \"%s\", \"arguments\": {\"%s\": \"%s\"}}", name, key,
        id);

    return client_cmd(c, cmd);
}

static void client_job_ok(TestClient *c, const char *name, const char *key,
                          const char *id)
{
    JsonObject *r = client_job_cmd(c, name, key, id);

    g_assert_true(json_object_has_member(r, "return"));
}

/* The list query @name returns, of @len entries (not owned). */
static JsonArray *client_list(TestClient *c, const char *name, guint len)
{
    g_autofree char *cmd = g_strdup_printf("{\"execute\": \"%s\"}", name);
    JsonArray *list = json_object_get_array_member(client_cmd(c, cmd),
                                                   "return");

    g_assert_cmpuint(json_array_get_length(list), ==, len);
    return list;
}

/* Which job @m is about, or NULL for no job event. */
static const char *event_job(JsonObject *m)
{
    const char *ev = json_object_get_string_member_with_default(m, "event",
                                                                NULL);

    if (!ev) {
        return NULL;
    }
    if (qtest_json_has(m, "data/id")) {
        return qtest_json_str(m, "data/id");
    }
    return qtest_json_has(m, "data/device")
           ? qtest_json_str(m, "data/device") : NULL;
}

/*
 * The events of job @id among the first @upto messages, as one string:
 * status changes by their status, BLOCK_JOB_X as X ("READY", ...).
 */
static char *client_trace(TestClient *c, const char *id, guint upto)
{
    g_autoptr(GString) s = g_string_new(NULL);

    for (guint i = 0; i < MIN(upto, c->msgs->len); i++) {
        JsonObject *m = c->msgs->pdata[i];
        const char *job = event_job(m);
        const char *ev;

        if (!job || strcmp(job, id)) {
            continue;
        }
        ev = json_object_get_string_member(m, "event");
        g_string_append(s, s->len ? " " : "");
        if (!strcmp(ev, "JOB_STATUS_CHANGE")) {
            g_string_append(s, qtest_json_str(m, "data/status"));
        } else {
            g_assert_true(g_str_has_prefix(ev, "BLOCK_JOB_"));
            g_string_append(s, ev + strlen("BLOCK_JOB_"));
        }
    }
    return g_string_free(g_steal_pointer(&s), FALSE);
}

/* Run the main loop until job @id has emitted the events @trace. */
static void client_wait_trace(TestClient *c, const char *id,
                              const char *trace)
{
    for (;;) {
        g_autofree char *now = client_trace(c, id, G_MAXUINT);

        if (!strcmp(now, trace)) {
            return;
        }
        g_assert_true(g_str_has_prefix(trace, now));
        client_wait_count(c, c->msgs->len);
    }
}

/* The last event @name of job @id (not owned). */
static JsonObject *client_event(TestClient *c, const char *name,
                                const char *id)
{
    for (guint i = c->msgs->len; i-- > 0;) {
        JsonObject *m = c->msgs->pdata[i];
        const char *job = event_job(m);

        if (job && !strcmp(job, id) &&
            !strcmp(json_object_get_string_member(m, "event"), name)) {
            return m;
        }
    }
    g_error("no %s event of job %s", name, id);
}

/* The members of @o, sorted, comma-separated. */
static char *members(JsonObject *o)
{
    g_autoptr(GList) l = g_list_sort(json_object_get_members(o),
                                     (GCompareFunc)strcmp);
    g_autoptr(GString) s = g_string_new(NULL);

    for (GList *i = l; i; i = i->next) {
        g_string_append_printf(s, "%s%s", s->len ? "," : "",
                               (char *)i->data);
    }
    return g_string_free(g_steal_pointer(&s), FALSE);
}

static char *client_event_members(TestClient *c, const char *name,
                                  const char *id)
{
    JsonObject *ev = client_event(c, name, id);

    return members(json_object_get_object_member(ev, "data"));
}

/*
 * A raw node named @name over a new file of @size bytes: random ones
 * from @seed, or a hole (@seed 0); read-only with @ro.
 */
static void add_node_full(TestDaemon *t, const char *name, int64_t size,
                          uint32_t seed, bool ro)
{
    g_autofree char *path = g_strdup_printf("%s/%s.raw", t->dir, name);
    DaemonNode *n = g_new0(DaemonNode, 1);

    if (seed) {
        qtest_write_random_file(path, size, seed);
    } else {
        qtest_write_sparse_file(path, size);
    }
    n->daemon = t->d;
    n->name = g_strdup(name);
    n->driver = g_strdup("raw");
    n->bs = test_open(path, "raw", ro ? 0 : BDRV_O_RDWR);
    n->read_only = ro;
    g_hash_table_insert(t->d->nodes, n->name, n);
}

static void add_node(TestDaemon *t, const char *name, int64_t size,
                     uint32_t seed)
{
    add_node_full(t, name, size, seed, false);
}

static char *node_path(TestDaemon *t, const char *name)
{
    return g_strdup_printf("%s/%s.raw", t->dir, name);
}

static void assert_nodes_equal(TestDaemon *t, const char *a, const char *b)
{
    g_autofree char *pa = node_path(t, a);
    g_autofree char *pb = node_path(t, b);

    qtest_assert_files_equal(pa, pb);
}

static TestDaemon *test_daemon_new(void)
{
    TestDaemon *t = g_new0(TestDaemon, 1);
    g_autoptr(GError) err = NULL;
    int sv[2];

    t->dir = test_scratch_new();
    t->d = daemon_new(NULL, QMP_DEFAULT_MAX_CLIENTS, &err);
    g_assert_no_error(err);
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
    g_assert_true(qmp_server_add_client(t->d->qmp, sv[0]));
    t->c.fd = sv[1];
    g_assert_cmpint(fcntl(sv[1], F_SETFL, O_NONBLOCK), ==, 0);
    t->c.in = g_string_new(NULL);
    t->c.msgs = g_ptr_array_new_with_free_func(
        (GDestroyNotify)json_object_unref);
    t->c.watch = g_unix_fd_add(sv[1], G_IO_IN, client_readable, &t->c);
    client_wait_count(&t->c, 0);                /* the greeting */
    client_ok(&t->c, "{\"execute\": \"qmp_capabilities\"}");
    return t;
}

static void test_daemon_free(TestDaemon *t)
{
    daemon_jobs_stop(t->d);
    g_assert_cmpuint(g_hash_table_size(t->d->jobs), ==, 0);
    g_assert_true(g_queue_is_empty(&t->d->job_host.jobs));
    g_source_remove(t->c.watch);
    close(t->c.fd);
    daemon_free(t->d);
    g_ptr_array_unref(t->c.msgs);
    g_string_free(t->c.in, TRUE);
    test_scratch_free(t->dir);
    g_free(t);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(TestDaemon, test_daemon_free)

#define MIRROR_MANUAL(id, dev, dst) \
    "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"job-id\": \"" id \
    "\", \"device\": \"" dev "\", \"target\": \"" dst "\", \"sync\": " \
    "\"full\", \"auto-finalize\": false, \"auto-dismiss\": false}}"

/* Job b of src2 onto dst2 (sync full) with the arguments @more. */
#define MIRROR_B(more) \
    "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"job-id\": " \
    "\"b\", \"device\": \"src2\", \"target\": \"dst2\", \"sync\": " \
    "\"full\", " more "}}"

static const char *const jobs3[] = { "a", "b", "c" };

/*
 * Three disks of different sizes, each with a job that waits for
 * finalize: all READY, complete all, all PENDING, finalize all, dismiss
 * all, with qemu-storage-daemon's events in its order, and copies.
 */
static void test_three_jobs(void)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;
    static const char *const mirror[] = {
        MIRROR_MANUAL("a", "sa", "ta"),
        MIRROR_MANUAL("b", "sb", "tb"),
        MIRROR_MANUAL("c", "sc", "tc"),
    };
    static const int64_t sizes[] = { 4 * MiB, 1 * MiB + 512, 8 * MiB };
    JsonArray *list;

    for (int i = 0; i < 3; i++) {
        g_autofree char *s = g_strdup_printf("s%s", jobs3[i]);
        g_autofree char *d = g_strdup_printf("t%s", jobs3[i]);

        add_node(t, s, sizes[i], 11 + i);
        add_node(t, d, sizes[i], 0);
    }
    for (int i = 0; i < 3; i++) {
        g_autofree char *before = NULL;

        client_ok(c, mirror[i]);
        /* Created and running come before the reply, as QEMU's. */
        before = client_trace(c, jobs3[i], c->reply_at);
        g_assert_cmpstr(before, ==, "created running");
    }
    for (int i = 0; i < 3; i++) {
        client_wait_trace(c, jobs3[i], "created running ready READY");
    }
    list = client_list(c, "query-block-jobs", 3);
    for (int i = 0; i < 3; i++) {
        JsonObject *info = json_array_get_object_element(list, i);

        /* Newest first, as QEMU lists them. */
        g_assert_cmpstr(qtest_json_str(info, "device"), ==, jobs3[2 - i]);
        g_assert_cmpstr(qtest_json_str(info, "status"), ==, "ready");
        g_assert_false(qtest_json_bool(info, "auto-finalize"));
        g_assert_false(qtest_json_bool(info, "auto-dismiss"));
    }
    client_error(c, "{\"execute\": \"job-finalize\", \"arguments\": "
                 "{\"id\": \"a\"}}", "GenericError",
                 "Job 'a' in state 'ready' cannot accept command verb "
                 "'finalize'");
    for (int i = 0; i < 3; i++) {
        client_job_ok(c, "block-job-complete", "device", jobs3[i]);
    }
    for (int i = 0; i < 3; i++) {
        client_wait_trace(c, jobs3[i], "created running ready READY "
                          "waiting pending PENDING");
    }
    {
        g_autofree char *m = client_event_members(c, "BLOCK_JOB_PENDING",
                                                  "a");

        g_assert_cmpstr(m, ==, "id,type");
    }
    list = client_list(c, "query-jobs", 3);
    for (int i = 0; i < 3; i++) {
        JsonObject *info = json_array_get_object_element(list, i);
        g_autofree char *m = members(info);

        g_assert_cmpstr(m, ==,
                        "current-progress,id,status,total-progress,type");
        g_assert_cmpstr(qtest_json_str(info, "id"), ==, jobs3[2 - i]);
        g_assert_cmpstr(qtest_json_str(info, "status"), ==, "pending");
        g_assert_cmpint(qtest_json_int(info, "current-progress"), ==,
                        sizes[2 - i]);
    }
    list = client_list(c, "query-block-jobs", 3);
    {
        JsonObject *info = json_array_get_object_element(list, 0);

        /* QEMU's drained source pauses the job until finalize. */
        g_assert_true(qtest_json_bool(info, "paused"));
        g_assert_false(qtest_json_bool(info, "ready"));
        g_assert_false(qtest_json_bool(info, "busy"));
    }
    client_error(c, "{\"execute\": \"job-dismiss\", \"arguments\": "
                 "{\"id\": \"b\"}}", "GenericError",
                 "Job 'b' in state 'pending' cannot accept command verb "
                 "'dismiss'");
    client_error(c, "{\"execute\": \"block-job-complete\", \"arguments\": "
                 "{\"device\": \"b\"}}", "GenericError",
                 "Job 'b' in state 'pending' cannot accept command verb "
                 "'complete'");
    for (int i = 0; i < 3; i++) {
        g_autofree char *trace = NULL;

        client_job_ok(c, i == 1 ? "block-job-finalize" : "job-finalize",
                      "id", jobs3[i]);
        /* Completed and concluded before the reply, as QEMU's. */
        trace = client_trace(c, jobs3[i], c->reply_at);
        g_assert_cmpstr(trace, ==, "created running ready READY waiting "
                        "pending PENDING COMPLETED concluded");
    }
    {
        JsonObject *done = client_event(c, "BLOCK_JOB_COMPLETED", "c");
        g_autofree char *m = client_event_members(c, "BLOCK_JOB_COMPLETED",
                                                  "c");

        g_assert_cmpstr(m, ==, "device,len,offset,speed,type");
        g_assert_cmpint(qtest_json_int(done, "data/len"), ==, 8 * MiB);
        g_assert_cmpint(qtest_json_int(done, "data/offset"), ==, 8 * MiB);
    }
    for (int i = 0; i < 3; i++) {
        g_autofree char *s = g_strdup_printf("s%s", jobs3[i]);
        g_autofree char *d = g_strdup_printf("t%s", jobs3[i]);
        DaemonNode *src = g_hash_table_lookup(t->d->nodes, s);
        DaemonNode *dst = g_hash_table_lookup(t->d->nodes, d);

        assert_nodes_equal(t, s, d);
        /* The switch-over: the filter reads the target now, and is the
         * target's; nothing holds the nodes any more. */
        g_assert_null(src->top);
        g_assert_true(mirror_top_child(dst->top) == dst->bs);
        g_assert_null(src->blocker);
        g_assert_null(dst->blocker);
        g_assert_cmpuint(src->uses[DAEMON_USE_CHILD], ==, 0);
        g_assert_cmpuint(dst->uses[DAEMON_USE_BLK], ==, 0);
    }
    list = client_list(c, "query-jobs", 3);
    g_assert_cmpstr(qtest_json_str(json_array_get_object_element(list, 0),
                                   "status"), ==, "concluded");
    for (int i = 0; i < 3; i++) {
        g_autofree char *trace = NULL;

        client_job_ok(c, "job-dismiss", "id", jobs3[i]);
        trace = client_trace(c, jobs3[i], c->reply_at);
        g_assert_cmpstr(trace, ==, "created running ready READY waiting "
                        "pending PENDING COMPLETED concluded null");
    }
    client_list(c, "query-jobs", 0);
    client_error(c, "{\"execute\": \"job-dismiss\", \"arguments\": "
                 "{\"id\": \"a\"}}", "GenericError", "Job not found");
    g_assert_cmpuint(g_hash_table_size(t->d->jobs), ==, 0);
}

static void write_done(void *opaque, int ret)
{
    g_assert_cmpint(ret, ==, 0);
    *(bool *)opaque = true;
}

static gboolean flag_cb(gpointer opaque)
{
    *(bool *)opaque = true;
    return G_SOURCE_REMOVE;
}

/* Run the main loop for @ms milliseconds. */
static void run_for(int ms)
{
    bool done = false;

    g_timeout_add(ms, flag_cb, &done);
    while (!done) {
        g_main_context_iteration(NULL, TRUE);
    }
}

/*
 * Between the end of the copy and finalize the source stays quiesced:
 * a guest write through the filter waits, then goes to the target
 * (finalize) or the source (cancel in PENDING: no switch-over).
 */
static void test_pending_holds_guests(gconstpointer cancel)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    g_autofree uint8_t *back = g_malloc(64 * KiB);
    DaemonNode *src, *dst;
    bool done = false;

    add_node(t, "src", 2 * MiB, 5);
    add_node(t, "dst", 2 * MiB, 0);
    src = g_hash_table_lookup(t->d->nodes, "src");
    dst = g_hash_table_lookup(t->d->nodes, "dst");
    client_ok(c, MIRROR_MANUAL("j", "src", "dst"));
    client_wait_trace(c, "j", "created running ready READY");
    client_ok(c, "{\"execute\": \"block-job-complete\", \"arguments\": "
              "{\"device\": \"j\"}}");
    client_wait_trace(c, "j", "created running ready READY waiting "
                      "pending PENDING");
    memset(buf, 0xa5, 64 * KiB);
    bdrv_aio_pwrite(src->top, 128 * KiB, 64 * KiB, buf, 0, write_done,
                    &done);
    run_for(200);
    g_assert_false(done);
    if (cancel) {
        g_autofree char *trace = NULL;
        JsonObject *info;

        client_job_ok(c, "block-job-cancel", "device", "j");
        trace = client_trace(c, "j", c->reply_at);
        g_assert_cmpstr(trace, ==, "created running ready READY waiting "
                        "pending PENDING aborting CANCELLED concluded");
        info = json_array_get_object_element(client_list(c, "query-jobs", 1),
                                             0);
        g_assert_cmpstr(qtest_json_str(info, "error"), ==,
                        "Operation canceled");
        info = json_array_get_object_element(
            client_list(c, "query-block-jobs", 1), 0);
        g_assert_cmpstr(qtest_json_str(info, "status"), ==, "concluded");
        g_assert_false(qtest_json_bool(info, "paused"));
        g_assert_cmpstr(qtest_json_str(info, "error"), ==,
                        "Operation canceled");
        client_error(c, "{\"execute\": \"block-job-cancel\", \"arguments\": "
                     "{\"device\": \"j\"}}", "GenericError",
                     "Job 'j' in state 'concluded' cannot accept command "
                     "verb 'cancel'");
    } else {
        client_ok(c, "{\"execute\": \"job-finalize\", \"arguments\": "
                  "{\"id\": \"j\"}}");
    }
    test_run_until(&done, TIMEOUT_S);
    /* The write went where the filter reads now, and only there. */
    g_assert_cmpint(test_pread(cancel ? src->bs : dst->bs, 128 * KiB,
                               64 * KiB, back), ==, 0);
    g_assert_cmpmem(back, 64 * KiB, buf, 64 * KiB);
    g_assert_cmpint(test_pread(cancel ? dst->bs : src->bs, 128 * KiB,
                               64 * KiB, back), ==, 0);
    g_assert_true(memcmp(back, buf, 64 * KiB) != 0);
    g_assert_true(cancel ? src->top != NULL : dst->top != NULL);
    client_ok(c, "{\"execute\": \"job-dismiss\", \"arguments\": "
              "{\"id\": \"j\"}}");
}

/* A soft cancel after READY: PENDING too, then COMPLETED, no switch. */
static void test_soft_cancel(void)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;
    DaemonNode *src;

    add_node(t, "src", 1 * MiB, 6);
    add_node(t, "dst", 1 * MiB, 0);
    src = g_hash_table_lookup(t->d->nodes, "src");
    client_ok(c, MIRROR_MANUAL("j", "src", "dst"));
    client_wait_trace(c, "j", "created running ready READY");
    client_ok(c, "{\"execute\": \"block-job-cancel\", \"arguments\": "
              "{\"device\": \"j\"}}");
    client_wait_trace(c, "j", "created running ready READY waiting "
                      "pending PENDING");
    client_ok(c, "{\"execute\": \"job-finalize\", \"arguments\": "
              "{\"id\": \"j\"}}");
    client_wait_trace(c, "j", "created running ready READY waiting "
                      "pending PENDING COMPLETED concluded");
    g_assert_true(mirror_top_child(src->top) == src->bs);
    assert_nodes_equal(t, "src", "dst");
    /* job-cancel is a force cancel: CANCELLED, as QEMU. */
    client_ok(c, "{\"execute\": \"job-dismiss\", \"arguments\": "
              "{\"id\": \"j\"}}");
    client_ok(c, MIRROR_MANUAL("k", "src", "dst"));
    client_wait_trace(c, "k", "created running ready READY");
    client_ok(c, "{\"execute\": \"job-cancel\", \"arguments\": "
              "{\"id\": \"k\"}}");
    client_wait_trace(c, "k", "created running ready READY aborting "
                      "CANCELLED concluded");
}

/* Bad requests: QEMU's classes and messages, and nothing changes. */
static void test_errors(void)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;
    static const struct {
        const char *cmd;
        const char *cls;
        const char *desc;
    } cases[] = {
        { "{\"execute\": \"job-finalize\", \"arguments\": "
          "{\"id\": \"nosuch\"}}", "GenericError", "Job not found" },
        { "{\"execute\": \"block-job-finalize\", \"arguments\": "
          "{\"id\": \"nosuch\"}}", "DeviceNotActive",
          "Block job 'nosuch' not found" },
        { "{\"execute\": \"block-job-complete\", \"arguments\": "
          "{\"device\": \"nosuch\"}}", "DeviceNotActive",
          "Block job 'nosuch' not found" },
        { "{\"execute\": \"job-pause\", \"arguments\": "
          "{\"id\": \"nosuch\"}}", "GenericError", "Job not found" },
        { "{\"execute\": \"block-job-set-speed\", \"arguments\": "
          "{\"device\": \"nosuch\", \"speed\": 1}}", "DeviceNotActive",
          "Block job 'nosuch' not found" },
        { MIRROR_MANUAL("a", "src2", "dst2"), "GenericError",
          "Job ID 'a' already in use" },
        { MIRROR_MANUAL("b", "src", "dst2"), "GenericError",
          "Need a root block node" },
        { MIRROR_MANUAL("b", "dst", "dst2"), "GenericError",
          "Need a root block node" },
        { MIRROR_MANUAL("b", "src2", "dst"), "GenericError",
          "Node 'dst' is busy: block device is in use by block job: "
          "mirror" },
        { MIRROR_MANUAL("b", "nosuch", "dst2"), "GenericError",
          "Cannot find device='nosuch' nor node-name='nosuch'" },
        { MIRROR_MANUAL("b", "src2", "nosuch"), "GenericError",
          "Cannot find device='nosuch' nor node-name='nosuch'" },
        { MIRROR_MANUAL("b", "src2", "src2"), "GenericError",
          "Can't mirror node into itself" },
        { MIRROR_MANUAL("1x", "src2", "dst2"), "GenericError",
          "Invalid job ID '1x'" },
        { "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"device\": "
          "\"src2\", \"target\": \"dst2\", \"sync\": \"full\"}}",
          "GenericError", "Invalid job ID ''" },
        { "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"job-id\": "
          "\"b\", \"device\": \"src2\", \"target\": \"dst2\", \"sync\": "
          "\"bogus\"}}", "GenericError",
          "Parameter 'sync' does not accept value 'bogus'" },
        { "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"job-id\": "
          "\"b\", \"device\": \"src2\", \"target\": \"dst2\", \"sync\": "
          "\"incremental\"}}", "GenericError",
          "Sync mode 'incremental' not supported" },
        { "{\"execute\": \"blockdev-mirror\", \"arguments\": {\"job-id\": "
          "\"b\", \"device\": \"src2\", \"target\": \"dst2\"}}",
          "GenericError", "Parameter 'sync' is missing" },
        { MIRROR_B("\"granularity\": 1000"), "GenericError",
          "Parameter 'granularity' expects a power of 2" },
        { MIRROR_B("\"granularity\": 256"), "GenericError",
          "Parameter 'granularity' expects a value in range [512B, 64MB]" },
        { MIRROR_B("\"granularity\": -512"), "GenericError",
          "Parameter 'granularity' expects uint32_t" },
        { MIRROR_B("\"buf-size\": -1"), "GenericError",
          "Invalid parameter 'buf-size'" },
        { MIRROR_B("\"on-source-error\": \"bogus\""), "GenericError",
          "Parameter 'on-source-error' does not accept value 'bogus'" },
        { MIRROR_B("\"unmap\": true"), "GenericError",
          "Parameter 'unmap' is unexpected" },
        { MIRROR_B("\"auto-finalize\": \"no\""), "GenericError",
          "Invalid parameter type for 'auto-finalize', expected: boolean" },
        { MIRROR_B("\"replaces\": \"nosuch\""), "GenericError",
          "Failed to find node with node-name='nosuch'" },
        { MIRROR_B("\"filter-node-name\": \"9bad\""), "GenericError",
          "Invalid node-name: '9bad'" },
        { MIRROR_B("\"filter-node-name\": \"dst\""), "GenericError",
          "Duplicate nodes with node-name='dst'" },
    };

    add_node(t, "src", 1 * MiB, 7);
    add_node(t, "dst", 1 * MiB, 0);
    add_node(t, "src2", 1 * MiB, 8);
    add_node(t, "dst2", 1 * MiB, 0);
    client_ok(c, MIRROR_MANUAL("a", "src", "dst"));
    /* The job's nodes cannot go, with or without an export of the
     * source (an export's use of the node, here without one). */
    for (int exported = 0; exported < 2; exported++) {
        DaemonNode *src = g_hash_table_lookup(t->d->nodes, "src");

        if (exported) {
            daemon_node_use(src, DAEMON_USE_BLK);
        }
        client_error(c, "{\"execute\": \"blockdev-del\", \"arguments\": "
                     "{\"node-name\": \"src\"}}", "GenericError",
                     "Node 'src' is busy: block device is in use by block "
                     "job: mirror");
        client_error(c, "{\"execute\": \"blockdev-del\", \"arguments\": "
                     "{\"node-name\": \"dst\"}}", "GenericError",
                     "Node dst is in use");
        if (exported) {
            daemon_node_unuse(src, DAEMON_USE_BLK);
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        client_error(c, cases[i].cmd, cases[i].cls, cases[i].desc);
    }
    /* A bad speed: created, then gone at once, as QEMU's. */
    client_error(c, "{\"execute\": \"blockdev-mirror\", \"arguments\": "
                 "{\"job-id\": \"s\", \"device\": \"src2\", \"target\": "
                 "\"dst2\", \"sync\": \"full\", \"speed\": -1}}",
                 "GenericError",
                 "Parameter 'speed' expects a non-negative value");
    {
        g_autofree char *trace = client_trace(c, "s", c->reply_at);

        g_assert_cmpstr(trace, ==, "created null");
    }
    /* So do a read-only target and one a guest uses (an export). */
    add_node_full(t, "ro", 1 * MiB, 0, true);
    client_error(c, MIRROR_MANUAL("r", "src2", "ro"), "GenericError",
                 "Block node is read-only");
    {
        g_autofree char *trace = client_trace(c, "r", c->reply_at);

        g_assert_cmpstr(trace, ==, "created null");
    }
    daemon_node_use(g_hash_table_lookup(t->d->nodes, "dst2"),
                    DAEMON_USE_BLK);
    client_error(c, MIRROR_MANUAL("x", "src2", "dst2"), "GenericError",
                 "Permission conflict on node 'dst2': permissions "
                 "'consistent read' are both required by an unnamed block "
                 "device (uses node 'dst2' as 'root' child) and unshared by "
                 "an unnamed block device (uses node 'dst2' as 'root' "
                 "child).");
    g_assert_null(((DaemonNode *)g_hash_table_lookup(t->d->nodes,
                                                     "src2"))->blocker);
    /* Only job a, unchanged by all that. */
    g_assert_cmpuint(g_hash_table_size(t->d->jobs), ==, 1);
    client_wait_trace(c, "a", "created running ready READY");
}

/*
 * Two jobs in one main loop: when one is READY, the other has done a
 * fair part of its copy too (neither starves the other).
 */
static void test_fair(void)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;
    const int64_t size = 64 * MiB;
    int64_t other;
    const char *first;

    add_node(t, "s1", size, 21);
    add_node(t, "t1", size, 0);
    add_node(t, "s2", size, 22);
    add_node(t, "t2", size, 0);
    client_ok(c, MIRROR_MANUAL("j1", "s1", "t1"));
    client_ok(c, MIRROR_MANUAL("j2", "s2", "t2"));
    for (;;) {
        g_autofree char *t1 = client_trace(c, "j1", G_MAXUINT);
        g_autofree char *t2 = client_trace(c, "j2", G_MAXUINT);

        if (g_str_has_suffix(t1, "READY") || g_str_has_suffix(t2, "READY")) {
            first = g_str_has_suffix(t1, "READY") ? "j1" : "j2";
            break;
        }
        client_wait_count(c, c->msgs->len);
    }
    other = ((Job *)g_hash_table_lookup(t->d->jobs,
                                        !strcmp(first, "j1") ? "j2" : "j1"))
            ->progress_current;
    g_test_message("%s READY; the other job at %" G_GINT64_FORMAT " of %"
                   G_GINT64_FORMAT,
                   first, other, size);
    g_assert_cmpint(other, >=, size / 4);
    for (int i = 1; i <= 2; i++) {
        g_autofree char *id = g_strdup_printf("j%d", i);

        client_wait_trace(c, id, "created running ready READY");
        client_job_ok(c, "block-job-complete", "device", id);
        client_wait_trace(c, id, "created running ready READY waiting "
                          "pending PENDING");
    }
    client_ok(c, "{\"execute\": \"job-finalize\", \"arguments\": "
              "{\"id\": \"j1\"}}");
    client_ok(c, "{\"execute\": \"job-finalize\", \"arguments\": "
              "{\"id\": \"j2\"}}");
    assert_nodes_equal(t, "s1", "t1");
    assert_nodes_equal(t, "s2", "t2");
}

/* At exit every job is cancelled and gone, whatever its state. */
static void test_stop(void)
{
    g_autoptr(TestDaemon) t = test_daemon_new();
    TestClient *c = &t->c;

    add_node(t, "s1", 1 * MiB, 31);
    add_node(t, "t1", 1 * MiB, 0);
    add_node(t, "s2", 1 * MiB, 32);
    add_node(t, "t2", 1 * MiB, 0);
    add_node(t, "s3", 64 * MiB, 33);
    add_node(t, "t3", 64 * MiB, 0);
    client_ok(c, MIRROR_MANUAL("p", "s1", "t1"));
    client_ok(c, MIRROR_MANUAL("e", "s2", "t2"));
    client_ok(c, "{\"execute\": \"blockdev-mirror\", \"arguments\": "
              "{\"job-id\": \"r\", \"device\": \"s3\", \"target\": \"t3\", "
              "\"sync\": \"full\", \"speed\": 1048576}}");
    client_wait_trace(c, "p", "created running ready READY");
    client_wait_trace(c, "e", "created running ready READY");
    client_ok(c, "{\"execute\": \"block-job-complete\", \"arguments\": "
              "{\"device\": \"p\"}}");
    client_wait_trace(c, "p", "created running ready READY waiting "
                      "pending PENDING");
    client_ok(c, "{\"execute\": \"job-cancel\", \"arguments\": "
              "{\"id\": \"e\"}}");
    client_wait_trace(c, "e", "created running ready READY aborting "
                      "CANCELLED concluded");
    daemon_jobs_stop(t->d);
    client_wait_trace(c, "p", "created running ready READY waiting "
                      "pending PENDING aborting CANCELLED concluded null");
    client_wait_trace(c, "e", "created running ready READY aborting "
                      "CANCELLED concluded null");
    client_wait_trace(c, "r", "created running aborting CANCELLED "
                      "concluded null");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/daemon-jobs/three", test_three_jobs);
    g_test_add_data_func("/daemon-jobs/pending-holds-guests/finalize",
                         NULL, test_pending_holds_guests);
    g_test_add_data_func("/daemon-jobs/pending-holds-guests/cancel",
                         "cancel", test_pending_holds_guests);
    g_test_add_func("/daemon-jobs/soft-cancel", test_soft_cancel);
    g_test_add_func("/daemon-jobs/errors", test_errors);
    g_test_add_func("/daemon-jobs/fair", test_fair);
    g_test_add_func("/daemon-jobs/stop", test_stop);
    return g_test_run();
}
