/*
 * The job's QMP face: the block-job-* and job-* commands, query-block-jobs
 * and query-jobs (with QEMU's members plus our convergence numbers), quit,
 * and the translation of job events into QEMU's event messages.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef QMP_JOB_H
#define QMP_JOB_H

#include "block/mirror/job.h"
#include "block/mirror/mirror.h"
#include "qemu-mirror-tool/qmp.h"

/*
 * The QAPI names of the job's enums, indexed by the enum and ended by
 * NULL (for tool_parse_choice()): QMP and the command line spell them
 * alike.
 */
extern const char *const qmp_sync_mode_names[];     /* MirrorSyncMode */
extern const char *const qmp_on_error_names[];      /* BlockdevOnError */
extern const char *const qmp_copy_mode_names[];     /* MirrorCopyMode */
extern const char *const qmp_error_action_names[];  /* BlockErrorAction */

/*
 * The enum argument @name of @args as the index of its value in @names
 * (NULL-terminated): QEMU's "Parameter 'NAME' does not accept value
 * 'V'" for another value.  Optional ones leave *@out unchanged.
 */
bool qmp_arg_enum(JsonObject *args, const char *name, bool required,
                  const char *const *names, int *out, GError **errp);

/* The commands that only apply one verb to the job (job-pause, ...). */
#define QMP_JOB_VERB_COMMANDS 11

typedef struct QmpJobVerb QmpJobVerb;
typedef struct QmpJobHost QmpJobHost;

/* The opaque of one of those commands: its verb and host. */
typedef struct QmpJobVerbCall {
    const QmpJobVerb *verb;
    QmpJobHost *host;
} QmpJobVerbCall;

/*
 * What the commands act on: every job of `start` (one) or of the daemon
 * (any number), by id.
 */
struct QmpJobHost {
    /* Job *, newest first (QEMU's order in query-jobs); a reference each.
     * Jobs in the NULL state are not seen by the commands. */
    GQueue jobs;
    /* `quit`: stop the program in order; NULL: the host registers no
     * quit (the daemon has its own). */
    void (*quit)(void *opaque);
    void *opaque;
    /* Set by qmp_job_register(), which the host must outlive. */
    QmpJobVerbCall verb_calls[QMP_JOB_VERB_COMMANDS];
};

/* Let the commands see @job (a reference is taken). */
void qmp_job_host_add(QmpJobHost *host, Job *job);

/* Forget @job (its reference is dropped); it need not be there. */
void qmp_job_host_remove(QmpJobHost *host, Job *job);

/* The job with id @id that is not NULL yet, or NULL. */
Job *qmp_job_host_find(QmpJobHost *host, const char *id);

/* Drop every job's reference (before the host goes). */
void qmp_job_host_clear(QmpJobHost *host);

/* Register the job commands on @srv. */
void qmp_job_register(QmpServer *srv, QmpJobHost *host);

/*
 * The QMP event for @ev of @job: its name in *@name and its "data"
 * (a new node).  Returns NULL for events QMP does not show.
 */
JsonNode *qmp_job_event_data(Job *job, const JobEvent *ev,
                             const char **name);

/* The query-block-jobs entry of @job (a new node), or NULL once it is
 * gone (NULL state). */
JsonNode *qmp_job_block_info(Job *job);

#endif /* QMP_JOB_H */
