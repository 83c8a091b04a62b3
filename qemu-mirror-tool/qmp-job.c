/*
 * The job's QMP commands, queries and events.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp-job.h"
#include "block/mirror/mirror.h"

#include <string.h>

const char *const qmp_sync_mode_names[] = {
    [MIRROR_SYNC_MODE_FULL] = "full",
    [MIRROR_SYNC_MODE_TOP] = "top",
    [MIRROR_SYNC_MODE_NONE] = "none",
    NULL,
};
const char *const qmp_on_error_names[] = {
    [BLOCKDEV_ON_ERROR_REPORT] = "report",
    [BLOCKDEV_ON_ERROR_IGNORE] = "ignore",
    [BLOCKDEV_ON_ERROR_STOP] = "stop",
    [BLOCKDEV_ON_ERROR_ENOSPC] = "enospc",
    NULL,
};
const char *const qmp_copy_mode_names[] = {
    [MIRROR_COPY_MODE_BACKGROUND] = "background",
    [MIRROR_COPY_MODE_WRITE_BLOCKING] = "write-blocking",
    NULL,
};
const char *const qmp_error_action_names[] = {
    [BLOCK_ERROR_ACTION_IGNORE] = "ignore",
    [BLOCK_ERROR_ACTION_REPORT] = "report",
    [BLOCK_ERROR_ACTION_STOP] = "stop",
    NULL,
};

static bool qmp_job_is_mirror(Job *job)
{
    return !strcmp(job->driver->job_type, "mirror");
}

static void add_int(JsonBuilder *b, const char *name, int64_t v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_int_value(b, v);
}

static void add_str(JsonBuilder *b, const char *name, const char *v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_string_value(b, v);
}

static void add_bool(JsonBuilder *b, const char *name, bool v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_boolean_value(b, v);
}

/* type, device, len, offset, speed: common to the BLOCK_JOB_* events. */
static void qmp_job_add_basics(JsonBuilder *b, Job *job)
{
    add_str(b, "type", job->driver->job_type);
    add_str(b, "device", job->id);
    add_int(b, "len", MAX(job->progress_total, job->progress_current));
    add_int(b, "offset", job->progress_current);
    add_int(b, "speed", job->speed);
}

JsonNode *qmp_job_block_info(Job *job)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    if (!job || job->status == JOB_STATUS_NULL) {
        return NULL;
    }
    json_builder_begin_object(b);
    qmp_job_add_basics(b, job);
    if (qmp_job_is_mirror(job)) {
        MirrorStats st;

        /* Busy: working now, not idle in sync nor paused. */
        mirror_get_stats(job, &st);
        add_bool(b, "busy", !job_is_paused(job) && !job_is_completed(job) &&
                 !st.in_sync);
    } else {
        add_bool(b, "busy", !job_is_paused(job) && !job_is_completed(job));
    }
    /*
     * As QEMU: from the end of the copy until finalize its mirror keeps
     * the source drained, which pauses the job; "ready" is READY or
     * STANDBY now.
     */
    add_bool(b, "paused", job->pause_count > 0 ||
             job->status == JOB_STATUS_WAITING ||
             job->status == JOB_STATUS_PENDING);
    add_bool(b, "ready", job->status == JOB_STATUS_READY ||
             job->status == JOB_STATUS_STANDBY);
    add_str(b, "status", job_status_str(job->status));
    add_bool(b, "auto-finalize", job->auto_finalize);
    add_bool(b, "auto-dismiss", job->auto_dismiss);
    if (job->error) {
        add_str(b, "error", job->error);
    }
    if (qmp_job_is_mirror(job)) {
        MirrorStats st;

        mirror_get_stats(job, &st);
        add_str(b, "io-status", st.io_status);
        add_bool(b, "actively-synced", st.actively_synced);
        /* Beyond QEMU: is the target keeping up right now? */
        add_int(b, "dirty-bytes", st.dirty_bytes);
        add_int(b, "in-flight-bytes", st.in_flight_bytes);
        add_int(b, "dirty-rate", (int64_t)st.dirty_rate);
        add_int(b, "copy-rate", (int64_t)st.copy_rate);
        add_int(b, "eta-ms", st.eta_ms);
        add_bool(b, "in-sync", st.in_sync);
        /* Ours: the source or the target lost its server and is
         * reconnecting (io-status says "reconnecting" too). */
        add_bool(b, "reconnecting", st.reconnecting);
        if (st.known_good_bytes >= 0) {         /* --state-file */
            add_int(b, "known-good-bytes", st.known_good_bytes);
        }
        /* Ours: guest-first (docs/architecture.md), the guests as the
         * job sees them and the job's window now. */
        add_bool(b, "guest-priority", st.guest_priority);
        add_int(b, "guest-requests", (int64_t)st.guest_requests);
        add_int(b, "guest-request-rate", (int64_t)st.guest_request_rate);
        add_int(b, "guest-rate", (int64_t)st.guest_byte_rate);
        add_int(b, "guest-latency-ns", st.guest_latency_ns);
        add_int(b, "guest-base-latency-ns", st.guest_base_latency_ns);
        add_int(b, "guest-pace", (int64_t)st.guest_pace);
        add_int(b, "window-bytes", st.buf_size);
    } else {
        add_str(b, "io-status", "ok");
    }
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

JsonNode *qmp_job_event_data(Job *job, const JobEvent *ev,
                             const char **name)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    switch (ev->type) {
    case JOB_EVENT_STATUS_CHANGE:
        *name = "JOB_STATUS_CHANGE";
        add_str(b, "id", job->id);
        add_str(b, "status", job_status_str(ev->status));
        break;
    case JOB_EVENT_READY:
        *name = "BLOCK_JOB_READY";
        qmp_job_add_basics(b, job);
        break;
    case JOB_EVENT_PENDING:
        *name = "BLOCK_JOB_PENDING";
        add_str(b, "type", job->driver->job_type);
        add_str(b, "id", job->id);
        break;
    case JOB_EVENT_COMPLETED:
        *name = "BLOCK_JOB_COMPLETED";
        qmp_job_add_basics(b, job);
        if (job->error) {
            add_str(b, "error", job->error);
        }
        break;
    case JOB_EVENT_CANCELLED:
        *name = "BLOCK_JOB_CANCELLED";
        qmp_job_add_basics(b, job);
        break;
    case JOB_EVENT_COPY_MODE:
        /* Ours: auto-converge switched the copy mode. */
        *name = "MIRROR_COPY_MODE_CHANGED";
        add_str(b, "device", job->id);
        add_str(b, "copy-mode",
                qmp_copy_mode_names[MIRROR_COPY_MODE_WRITE_BLOCKING]);
        add_str(b, "reason", ev->reason ? ev->reason : "");
        break;
    case JOB_EVENT_RECONNECTING:
        /* Ours: a node began (true) or ended (false) a reconnect; the
         * error says why it gave up. */
        *name = "BLOCK_JOB_RECONNECTING";
        add_str(b, "type", job->driver->job_type);
        add_str(b, "device", job->id);
        add_str(b, "node", ev->node);
        add_bool(b, "reconnecting", ev->reconnecting);
        if (!ev->reconnecting && ev->error) {
            add_str(b, "error", ev->reason ? ev->reason
                                           : g_strerror(ev->error));
        }
        break;
    case JOB_EVENT_ERROR:
        *name = "BLOCK_JOB_ERROR";
        add_str(b, "device", job->id);
        add_str(b, "operation", ev->is_read ? "read" : "write");
        add_str(b, "action", qmp_error_action_names[ev->action]);
        break;
    default:
        return NULL;
    }
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

bool qmp_arg_enum(JsonObject *args, const char *name, bool required,
                  const char *const *names, int *out, GError **errp)
{
    const char *value = NULL;

    if (!qmp_arg_str(args, name, required, &value, errp)) {
        return false;
    }
    if (!value) {
        return true;
    }
    for (int i = 0; names[i]; i++) {
        if (!strcmp(value, names[i])) {
            *out = i;
            return true;
        }
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "Parameter '%s' does not accept value '%s'", name, value);
    return false;
}

/* ---- the jobs ---- */

void qmp_job_host_add(QmpJobHost *host, Job *job)
{
    job_ref(job);
    g_queue_push_head(&host->jobs, job);
}

void qmp_job_host_remove(QmpJobHost *host, Job *job)
{
    if (g_queue_remove(&host->jobs, job)) {
        job_unref(job);
    }
}

Job *qmp_job_host_find(QmpJobHost *host, const char *id)
{
    for (GList *l = host->jobs.head; l; l = l->next) {
        Job *job = l->data;

        if (job->status != JOB_STATUS_NULL && !strcmp(job->id, id)) {
            return job;
        }
    }
    return NULL;
}

void qmp_job_host_clear(QmpJobHost *host)
{
    g_queue_clear_full(&host->jobs, (GDestroyNotify)job_unref);
}

/* The job named by "device" (block-job-*): DeviceNotActive if none. */
static Job *qmp_job_by_device(QmpJobHost *host, JsonObject *args,
                              const char *const *allowed, GError **errp)
{
    const char *device = NULL;
    Job *job;

    if (!qmp_check_args(args, allowed, errp) ||
        !qmp_arg_str(args, "device", true, &device, errp)) {
        return NULL;
    }
    job = qmp_job_host_find(host, device);
    if (!job) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_ACTIVE,
                    "Block job '%s' not found", device);
    }
    return job;
}

/*
 * The job named by "id" (job-*, and block-job-finalize/-dismiss with
 * @block_error: QEMU's block-job-* lookup error then).
 */
static Job *qmp_job_by_id(QmpJobHost *host, JsonObject *args,
                          const char *const *allowed, bool block_error,
                          GError **errp)
{
    const char *id = NULL;
    Job *job;

    if (!qmp_check_args(args, allowed, errp) ||
        !qmp_arg_str(args, "id", true, &id, errp)) {
        return NULL;
    }
    job = qmp_job_host_find(host, id);
    if (!job && block_error) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_ACTIVE,
                    "Block job '%s' not found", id);
    } else if (!job) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Job not found");
    }
    return job;
}

static const char *const device_only[] = { "device", NULL };
static const char *const id_only[] = { "id", NULL };
static const char *const no_args[] = { NULL };

/* ---- commands ---- */

static JsonNode *qmp_query_block_jobs(JsonObject *args, void *opaque,
                                      GError **errp)
{
    QmpJobHost *host = opaque;
    JsonArray *list;
    JsonNode *ret;

    if (!qmp_check_args(args, no_args, errp)) {
        return NULL;
    }
    list = json_array_new();
    ret = json_node_new(JSON_NODE_ARRAY);
    for (GList *l = host->jobs.head; l; l = l->next) {
        JsonNode *info = qmp_job_block_info(l->data);

        if (info) {
            json_array_add_element(list, info);
        }
    }
    json_node_take_array(ret, list);
    return ret;
}

static JsonNode *qmp_query_jobs(JsonObject *args, void *opaque,
                                GError **errp)
{
    QmpJobHost *host = opaque;
    g_autoptr(JsonBuilder) b = NULL;

    if (!qmp_check_args(args, no_args, errp)) {
        return NULL;
    }
    b = json_builder_new();
    json_builder_begin_array(b);
    for (GList *l = host->jobs.head; l; l = l->next) {
        Job *job = l->data;

        if (job->status == JOB_STATUS_NULL) {
            continue;
        }
        json_builder_begin_object(b);
        add_str(b, "id", job->id);
        add_str(b, "type", job->driver->job_type);
        add_str(b, "status", job_status_str(job->status));
        add_int(b, "current-progress", job->progress_current);
        add_int(b, "total-progress",
                MAX(job->progress_total, job->progress_current));
        if (job->error) {
            add_str(b, "error", job->error);
        }
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return json_builder_get_root(b);
}

static JsonNode *qmp_block_job_set_speed(JsonObject *args, void *opaque,
                                         GError **errp)
{
    static const char *const allowed[] = { "device", "speed", NULL };
    Job *job = qmp_job_by_device(opaque, args, allowed, errp);
    int64_t speed = 0;

    if (job && qmp_arg_int(args, "speed", true, &speed, errp)) {
        job_set_speed(job, speed, errp);
    }
    return NULL;
}

static JsonNode *qmp_block_job_cancel(JsonObject *args, void *opaque,
                                      GError **errp)
{
    static const char *const allowed[] = { "device", "force", NULL };
    Job *job = qmp_job_by_device(opaque, args, allowed, errp);
    bool force = false;

    if (job && qmp_arg_bool(args, "force", false, &force, errp)) {
        job_user_cancel(job, force, errp);
    }
    return NULL;
}

/*
 * A command that applies one verb to the job, named by "device"
 * (block-job-*, QEMU's older names) or by "id" (job-*).
 */
typedef enum QmpJobKey {
    QMP_JOB_BY_DEVICE,          /* "device" (block-job-*) */
    QMP_JOB_BY_BLOCK_ID,        /* "id", block-job-*'s lookup error */
    QMP_JOB_BY_ID,              /* "id" (job-*) */
} QmpJobKey;

struct QmpJobVerb {
    const char *name;
    QmpJobKey key;
    bool (*apply)(Job *job, GError **errp);
};

/* job-cancel: QEMU's job-cancel always forces. */
static bool qmp_job_force_cancel(Job *job, GError **errp)
{
    return job_user_cancel(job, true, errp);
}

static const QmpJobVerb qmp_job_verbs[] = {
    { "block-job-pause", QMP_JOB_BY_DEVICE, job_user_pause },
    { "block-job-resume", QMP_JOB_BY_DEVICE, job_user_resume },
    { "block-job-complete", QMP_JOB_BY_DEVICE, job_complete },
    { "block-job-finalize", QMP_JOB_BY_BLOCK_ID, job_finalize },
    { "block-job-dismiss", QMP_JOB_BY_BLOCK_ID, job_dismiss },
    { "job-pause", QMP_JOB_BY_ID, job_user_pause },
    { "job-resume", QMP_JOB_BY_ID, job_user_resume },
    { "job-cancel", QMP_JOB_BY_ID, qmp_job_force_cancel },
    { "job-complete", QMP_JOB_BY_ID, job_complete },
    { "job-finalize", QMP_JOB_BY_ID, job_finalize },
    { "job-dismiss", QMP_JOB_BY_ID, job_dismiss },
};
G_STATIC_ASSERT(G_N_ELEMENTS(qmp_job_verbs) == QMP_JOB_VERB_COMMANDS);

static JsonNode *qmp_job_verb(JsonObject *args, void *opaque, GError **errp)
{
    QmpJobVerbCall *call = opaque;
    QmpJobKey key = call->verb->key;
    Job *job = key == QMP_JOB_BY_DEVICE
        ? qmp_job_by_device(call->host, args, device_only, errp)
        : qmp_job_by_id(call->host, args, id_only,
                        key == QMP_JOB_BY_BLOCK_ID, errp);

    if (job) {
        call->verb->apply(job, errp);
    }
    return NULL;
}

/*
 * block-job-change {id, type: "mirror", copy-mode} as QEMU (only
 * background -> write-blocking), plus our "auto-converge" (bool),
 * "auto-converge-ms" and "auto-converge-passes".
 */
static JsonNode *qmp_block_job_change(JsonObject *args, void *opaque,
                                      GError **errp)
{
    static const char *const allowed[] = {
        "id", "type", "copy-mode", "auto-converge", "auto-converge-ms",
        "auto-converge-passes", NULL,
    };
    QmpJobHost *host = opaque;
    const char *id = NULL, *type = NULL, *mode = NULL;
    bool converge = false, has_converge, has_after, has_passes;
    int m = MIRROR_COPY_MODE_BACKGROUND;
    int64_t after = -1, passes = -1;
    Job *job;

    if (!qmp_check_args(args, allowed, errp) ||
        !qmp_arg_str(args, "id", true, &id, errp) ||
        !qmp_arg_str(args, "type", true, &type, errp) ||
        !qmp_arg_str(args, "copy-mode", false, &mode, errp) ||
        !qmp_arg_bool(args, "auto-converge", false, &converge, errp) ||
        !qmp_arg_int(args, "auto-converge-ms", false, &after, errp) ||
        !qmp_arg_int(args, "auto-converge-passes", false, &passes, errp)) {
        return NULL;
    }
    job = qmp_job_host_find(host, id);
    if (!job) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Job not found");
        return NULL;
    }
    if (strcmp(type, job->driver->job_type)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Job type does not match specified job type");
        return NULL;
    }
    /* Every value is checked (as the CLI's) before anything changes. */
    has_converge = json_object_has_member(args, "auto-converge");
    has_after = json_object_has_member(args, "auto-converge-ms");
    has_passes = json_object_has_member(args, "auto-converge-passes");
    if ((has_after && !mirror_check_converge_ms(after, errp)) ||
        (has_passes && !mirror_check_converge_passes(passes, errp))) {
        return NULL;
    }
    if (mode && !qmp_arg_enum(args, "copy-mode", false, qmp_copy_mode_names,
                              &m, errp)) {
        return NULL;
    }
    if ((has_converge || has_after || has_passes) &&
        !job_apply_verb(job, JOB_VERB_CHANGE, errp)) {
        return NULL;
    }
    if (mode && !mirror_change_copy_mode(job, m, errp)) {
        return NULL;
    }
    if (has_converge || has_after || has_passes) {
        mirror_set_auto_converge(job, has_converge ? converge : -1,
                                 has_after ? after : -1,
                                 has_passes ? passes : -1);
    }
    return NULL;
}

static JsonNode *qmp_quit(JsonObject *args, void *opaque, GError **errp)
{
    QmpJobHost *host = opaque;

    if (qmp_check_args(args, no_args, errp)) {
        host->quit(host->opaque);
    }
    return NULL;
}

void qmp_job_register(QmpServer *srv, QmpJobHost *host)
{
    static const struct {
        const char *name;
        QmpCommandFunc *fn;
    } cmds[] = {
        { "query-block-jobs", qmp_query_block_jobs },
        { "query-jobs", qmp_query_jobs },
        { "block-job-set-speed", qmp_block_job_set_speed },
        { "block-job-cancel", qmp_block_job_cancel },
        { "block-job-change", qmp_block_job_change },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cmds); i++) {
        qmp_server_register(srv, cmds[i].name, cmds[i].fn, host);
    }
    if (host->quit) {
        qmp_server_register(srv, "quit", qmp_quit, host);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(qmp_job_verbs); i++) {
        host->verb_calls[i] = (QmpJobVerbCall) { &qmp_job_verbs[i], host };
        qmp_server_register(srv, qmp_job_verbs[i].name, qmp_job_verb,
                            &host->verb_calls[i]);
    }
}
