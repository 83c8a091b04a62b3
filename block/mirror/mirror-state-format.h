/*
 * The state file's format (docs/mirror-tool.md, "State file format"):
 * a header record with the job's identity and a record of known-good
 * extents, each with its CRC-32, all little-endian.  Pure functions,
 * no I/O: mirror-state.c reads and writes the files.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_STATE_FORMAT_H
#define BLOCK_MIRROR_STATE_FORMAT_H

#include "block/mirror/mirror-extents.h"

#include <glib.h>
#include <stdint.h>

#define MIRROR_STATE_MAGIC          "QMIRSTAT"
#define MIRROR_STATE_VERSION        2
/* Fixed part of the header, before the identity strings (version 1, read
 * still: 72, without the switch-over time). */
#define MIRROR_STATE_HEADER_FIXED   80
#define MIRROR_STATE_HEADER_FIXED_V1 72
/* Header flags (offset 52). */
#define MIRROR_STATE_F_SWITCHED     1   /* completed; the target took over */
/* Longest identity string accepted. */
#define MIRROR_STATE_MAX_ID         4096

/* Whose state a file is: a state file of another job is refused. */
typedef struct MirrorStateIdentity {
    char *source;               /* "FORMAT NAME [ino=N] size=N" */
    char *target;
    int64_t size;               /* bytes copied: the source's size */
    int64_t granularity;
    uint32_t sync;              /* MirrorSyncMode */
} MirrorStateIdentity;

/* What a state file holds. */
typedef struct MirrorStateFile {
    uint64_t seq;               /* the write's sequence number */
    MirrorStateIdentity id;
    MirrorExtents good;         /* the known-good extents */
    int64_t switched_us;        /* > 0: the job completed and the target
                                 * took over then (µs since the epoch) */
} MirrorStateFile;

/* Free the strings of @id (the struct itself is the caller's). */
void mirror_state_identity_clear(MirrorStateIdentity *id);

/* Copy @src into @dst (strings duplicated). */
void mirror_state_identity_copy(MirrorStateIdentity *dst,
                                const MirrorStateIdentity *src);

/* The file's bytes for @id, sequence number @seq and the known-good
 * extents @good (inside [0, id->size), granule aligned but the end);
 * @switched_us > 0: a switched-over record (MIRROR_STATE_F_SWITCHED),
 * the target took over at that time (µs since the epoch). */
GByteArray *mirror_state_encode(const MirrorStateIdentity *id, uint64_t seq,
                                const MirrorExtents *good,
                                int64_t switched_us);

/*
 * Parse and check @len bytes at @buf: magic, version, lengths, both
 * CRCs, and extents sorted, disjoint, granule aligned and inside the
 * size.  False with @errp set (BLOCK_ERROR_INVALID, a message saying
 * what is wrong) when any check fails: nothing of a bad file is used.
 * On success @f holds the contents (mirror_state_file_clear() frees).
 */
bool mirror_state_decode(const uint8_t *buf, size_t len, MirrorStateFile *f,
                         GError **errp);

void mirror_state_file_clear(MirrorStateFile *f);

/*
 * Is @recorded (from a file) the identity of the job @now?  False with
 * @errp set (BLOCK_ERROR_INVALID) naming the first member that differs
 * and both values.
 */
bool mirror_state_identity_check(const MirrorStateIdentity *recorded,
                                 const MirrorStateIdentity *now,
                                 GError **errp);

#endif /* BLOCK_MIRROR_STATE_FORMAT_H */
