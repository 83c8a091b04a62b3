/*
 * The daemon's jobs (daemon.h): blockdev-mirror, and the job commands
 * (qmp-job.c's) over every job of the daemon.
 *
 * A job copies its device's node onto its target's node through the
 * device's filter (daemon_node_top()), so that guests writing through any
 * export of the device are seen by the job.  While it exists, the device
 * is used as a child (its filter sits over it: "Need a root block node"
 * for another job on it) and the target as a block device; both carry
 * QEMU's op blocker.  All of that is released when the job concludes; a
 * switch-over (at finalize) moves the filter, and the exports with it,
 * from the device to the target (daemon_node_move_top()).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"
#include "block/mirror/mirror-top.h"

#include <string.h>

/* What blockdev-del of a job's node says (QEMU's op blocker reason). */
#define DAEMON_JOB_BLOCKER "block device is in use by block job: mirror"

/* One job of the daemon: what it holds of the registry. */
typedef struct DaemonJob {
    Daemon *d;
    DaemonNode *source;
    DaemonNode *target;
    BlockDriverState *top;      /* the source's filter (the node's) */
    bool holding;               /* the nodes' uses and blockers */
} DaemonJob;

/* The uses and blockers end (the job concluded, or never ran). */
static void daemon_job_release(DaemonJob *dj)
{
    if (!dj->holding) {
        return;
    }
    dj->holding = false;
    daemon_node_unuse(dj->source, DAEMON_USE_CHILD);
    daemon_node_unuse(dj->target, DAEMON_USE_BLK);
    daemon_node_block(dj->source, NULL);
    daemon_node_block(dj->target, NULL);
}

/*
 * Every event of a job: to the QMP clients, and the registry follows
 * (the switch-over, the end of the job's uses, the job's end).
 */
static void daemon_job_event(Job *job, const JobEvent *ev, void *opaque)
{
    DaemonJob *dj = opaque;
    Daemon *d = dj->d;
    const char *name = NULL;
    JsonNode *data;

    if (ev->type == JOB_EVENT_COMPLETED && job->ret == 0 &&
        mirror_top_child(dj->top) == dj->target->bs) {
        /* Finalized after a complete: the target took over. */
        daemon_node_move_top(dj->source, dj->target);
    }
    data = qmp_job_event_data(job, ev, &name);
    if (data) {
        qmp_server_emit_event(d->qmp, name, data);
    }
    if (ev->type != JOB_EVENT_STATUS_CHANGE) {
        return;
    }
    if (ev->status == JOB_STATUS_CONCLUDED) {
        daemon_job_release(dj);
    } else if (ev->status == JOB_STATUS_NULL) {
        daemon_job_release(dj);
        g_hash_table_remove(d->jobs, job->id);
        qmp_job_host_remove(&d->job_host, job);
        g_free(dj);
    }
}

/* A uint32 argument (granularity): QEMU's words for what is not one. */
static bool daemon_arg_uint32(JsonObject *args, const char *name,
                              int64_t *out, GError **errp)
{
    JsonNode *n = json_object_get_member(args, name);
    int64_t v;

    if (!n) {
        return true;
    }
    if (!JSON_NODE_HOLDS_VALUE(n) ||
        json_node_get_value_type(n) != G_TYPE_INT64) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter '%s' expects uint64", name);
        return false;
    }
    v = json_node_get_int(n);
    if (v < 0 || v > UINT32_MAX) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter '%s' expects uint32_t", name);
        return false;
    }
    *out = v;
    return true;
}

/* blockdev-mirror's arguments, parsed (QAPI's checks only). */
typedef struct DaemonMirrorArgs {
    const char *job_id;
    const char *device;
    const char *target;
    const char *replaces;
    const char *filter_node_name;
    int64_t speed;
    bool auto_finalize;
    bool auto_dismiss;
    MirrorParams p;
} DaemonMirrorArgs;

/* QAPI's part of blockdev-mirror: members, types and enum values. */
static bool daemon_mirror_parse(JsonObject *args, DaemonMirrorArgs *a,
                                GError **errp)
{
    static const char *const allowed[] = {
        "job-id", "device", "target", "replaces", "sync", "speed",
        "granularity", "buf-size", "on-source-error", "on-target-error",
        "filter-node-name", "copy-mode", "auto-finalize", "auto-dismiss",
        "target-is-zero", NULL,
    };
    /* MirrorSyncMode has backup's modes too, refused later as QEMU. */
    static const char *const backup_sync[] = {
        "incremental", "bitmap", NULL,
    };
    const char *sync = NULL;
    int on_source, on_target, copy_mode, mode;

    *a = (DaemonMirrorArgs) { .auto_finalize = true, .auto_dismiss = true };
    mirror_params_init(&a->p);
    on_source = a->p.on_source_error;
    on_target = a->p.on_target_error;
    copy_mode = a->p.copy_mode;
    if (!qmp_check_args(args, allowed, errp) ||
        !qmp_arg_str(args, "job-id", false, &a->job_id, errp) ||
        !qmp_arg_str(args, "device", true, &a->device, errp) ||
        !qmp_arg_str(args, "target", true, &a->target, errp) ||
        !qmp_arg_str(args, "replaces", false, &a->replaces, errp) ||
        !qmp_arg_str(args, "sync", true, &sync, errp) ||
        !qmp_arg_int(args, "speed", false, &a->speed, errp) ||
        !daemon_arg_uint32(args, "granularity", &a->p.granularity, errp) ||
        !qmp_arg_int(args, "buf-size", false, &a->p.buf_size, errp) ||
        !qmp_arg_enum(args, "on-source-error", false, qmp_on_error_names,
                      &on_source, errp) ||
        !qmp_arg_enum(args, "on-target-error", false, qmp_on_error_names,
                      &on_target, errp) ||
        !qmp_arg_str(args, "filter-node-name", false, &a->filter_node_name,
                     errp) ||
        !qmp_arg_enum(args, "copy-mode", false, qmp_copy_mode_names,
                      &copy_mode, errp) ||
        !qmp_arg_bool(args, "auto-finalize", false, &a->auto_finalize,
                      errp) ||
        !qmp_arg_bool(args, "auto-dismiss", false, &a->auto_dismiss, errp) ||
        !qmp_arg_bool(args, "target-is-zero", false, &a->p.target_is_zero,
                      errp)) {
        return false;
    }
    if (g_strv_contains(backup_sync, sync)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Sync mode '%s' not supported", sync);
        return false;
    }
    if (!qmp_arg_enum(args, "sync", true, qmp_sync_mode_names, &mode,
                      errp)) {
        return false;
    }
    a->p.sync = mode;
    a->p.on_source_error = on_source;
    a->p.on_target_error = on_target;
    a->p.copy_mode = copy_mode;
    return true;
}

/*
 * The nodes and names of a blockdev-mirror, checked in QEMU's order;
 * the checks of the values themselves are mirror_job_new()'s.
 */
static bool daemon_mirror_check(Daemon *d, const DaemonMirrorArgs *a,
                                DaemonNode **source, DaemonNode **target,
                                GError **errp)
{
    DaemonNode *src = daemon_node_find(d, a->device, "device", errp);
    DaemonNode *dst;

    if (!src) {
        return false;
    }
    if (src->uses[DAEMON_USE_CHILD] || src->blocker) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Need a root block node");
        return false;
    }
    dst = daemon_node_find(d, a->target, "target", errp);
    if (!dst) {
        return false;
    }
    if (dst->blocker) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Node '%s' is busy: %s", dst->name, dst->blocker);
        return false;
    }
    if (a->replaces && strcmp(a->replaces, src->name)) {
        /* QEMU's default is the device itself: so is ours, always. */
        if (daemon_node_find(d, a->replaces, "replaces", NULL)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter 'replaces' naming another node than "
                        "the device is not supported");
        } else {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Failed to find node with node-name='%s'",
                        a->replaces);
        }
        return false;
    }
    if (src == dst) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Can't mirror node into itself");
        return false;
    }
    if (a->filter_node_name &&
        !daemon_id_wellformed(a->filter_node_name)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid node-name: '%s'", a->filter_node_name);
        return false;
    }
    /* At most 31 characters, as every node name (qmp-block.c). */
    if (a->filter_node_name && strlen(a->filter_node_name) > 31) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Node name too long");
        return false;
    }
    if (a->filter_node_name &&
        g_hash_table_contains(d->nodes, a->filter_node_name)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Duplicate nodes with node-name='%s'",
                    a->filter_node_name);
        return false;
    }
    /* As QEMU's block_job_create(): the id defaults to the device's
     * BlockBackend name, which a daemon's node never has. */
    if (!daemon_id_wellformed(a->job_id ? a->job_id : "")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid job ID '%s'", a->job_id ? a->job_id : "");
        return false;
    }
    if (g_hash_table_contains(d->jobs, a->job_id)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Job ID '%s' already in use", a->job_id);
        return false;
    }
    *source = src;
    *target = dst;
    return true;
}

/* JOB_STATUS_CHANGE @status of job @id, as a QMP event. */
static void daemon_job_status_event(Daemon *d, const char *id,
                                    JobStatus status)
{
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "status");
    json_builder_add_string_value(b, job_status_str(status));
    json_builder_end_object(b);
    qmp_server_emit_event(d->qmp, "JOB_STATUS_CHANGE",
                          json_builder_get_root(b));
}

/*
 * What QEMU checks once it has created the job (which it then drops:
 * "created" and "null" go out before the error): the speed, and the
 * target's permissions (read-only, or exported: a guest uses it).
 */
static bool daemon_mirror_check_created(Daemon *d, const DaemonMirrorArgs *a,
                                        DaemonNode *target, GError **errp)
{
    g_autoptr(GError) err = NULL;

    if (!job_check_speed(a->speed, &err)) {
        /* job_check_speed()'s words are QEMU's */
    } else if (target->read_only) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Block node is read-only");
    } else if (!daemon_node_check_writer(d, target, &err)) {
        /* another node's file or backing */
    } else if (target->uses[DAEMON_USE_BLK]) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Permission conflict on node '%s': permissions "
                    "'consistent read' are both required by an unnamed "
                    "block device (uses node '%s' as 'root' child) and "
                    "unshared by an unnamed block device (uses node '%s' "
                    "as 'root' child).", target->name, target->name,
                    target->name);
    } else {
        return true;
    }
    daemon_job_status_event(d, a->job_id, JOB_STATUS_CREATED);
    daemon_job_status_event(d, a->job_id, JOB_STATUS_NULL);
    g_propagate_error(errp, g_steal_pointer(&err));
    return false;
}

/*
 * blockdev-mirror: QEMU 10's arguments but "replaces" naming another
 * node; the job starts at once (created and running before the reply).
 */
static JsonNode *daemon_qmp_blockdev_mirror(JsonObject *args, void *opaque,
                                            GError **errp)
{
    Daemon *d = opaque;
    DaemonMirrorArgs a;
    DaemonNode *source, *target;
    BlockDriverState *top;
    DaemonJob *dj;
    Job *job;

    if (!daemon_mirror_parse(args, &a, errp) ||
        !daemon_mirror_check(d, &a, &source, &target, errp) ||
        !daemon_mirror_check_created(d, &a, target, errp)) {
        return NULL;
    }
    a.p.speed = a.speed;
    top = daemon_node_top(source, errp);
    if (!top) {
        return NULL;
    }
    job = mirror_job_new(a.job_id, mirror_top_child(top), target->bs, &a.p,
                         errp);
    if (!job) {
        return NULL;
    }
    job->auto_finalize = a.auto_finalize;
    job->auto_dismiss = a.auto_dismiss;
    mirror_job_set_top(job, top);
    dj = g_new0(DaemonJob, 1);
    *dj = (DaemonJob) {
        .d = d, .source = source, .target = target, .top = top,
    };
    job_add_listener(job, daemon_job_event, dj);
    job_announce(job);
    g_hash_table_insert(d->jobs, g_strdup(job->id), job);
    qmp_job_host_add(&d->job_host, job);
    dj->holding = true;
    daemon_node_use(source, DAEMON_USE_CHILD);
    daemon_node_use(target, DAEMON_USE_BLK);
    daemon_node_block(source, DAEMON_JOB_BLOCKER);
    daemon_node_block(target, DAEMON_JOB_BLOCKER);
    job_start(job);
    return NULL;
}

void daemon_mirror_register(Daemon *d)
{
    qmp_server_register(d->qmp, "blockdev-mirror",
                        daemon_qmp_blockdev_mirror, d);
    qmp_job_register(d->qmp, &d->job_host);
}

void daemon_jobs_stop(Daemon *d)
{
    Job *job;

    /* As QEMU at exit: cancel each job (dismiss a concluded one) and
     * wait until it is gone. */
    while ((job = g_queue_peek_head(&d->job_host.jobs))) {
        job_ref(job);
        if (job->status == JOB_STATUS_CONCLUDED) {
            job_dismiss(job, NULL);
        } else if (!job_is_completed(job) ||
                   job->status == JOB_STATUS_PENDING) {
            job_user_cancel(job, true, NULL);
        }
        while (job->status != JOB_STATUS_CONCLUDED &&
               job->status != JOB_STATUS_NULL) {
            g_main_context_iteration(NULL, TRUE);
        }
        if (job->status == JOB_STATUS_NULL) {
            qmp_job_host_remove(&d->job_host, job);
        }
        job_unref(job);
    }
}
