/*
 * The persisted state of a mirror job (--state-file): which granules of
 * the target are known good, kept durably in a small checksummed file so
 * that a rerun after a crash copies only the rest.
 *
 * Known good: written to the target, and a target flush that began after
 * the write completed has succeeded; nothing dirtied it since.  The job
 * reports what it makes clean (mirror_state_clean()) and its flushes
 * (mirror_state_flush_begin/end()); a flush's success promotes what was
 * clean before it began, and the state is written (in the background).
 * Dirtying (mirror_state_dirtied(), through the dirty bitmap's notifier)
 * takes granules out again.
 *
 * Guest writes through the mirror-top filter pass a gate first
 * (mirror_state_guest_write()): their granules stop being known good at
 * once, and when the file on disk (or the write of it in flight) says
 * one of them is known good, the guest's write waits until a state that
 * says otherwise is on disk.  Granules guests write stay out of the
 * known-good set for a while (MIRROR_STATE_HOT_NS, "hot"), so that a
 * guest rewriting them does not wait again at every copy.  Waiters share
 * one state write (group commit); writes to granules the file already
 * calls not good go on at once.  Between the gate and
 * mirror_state_guest_done() the granules are held: no flush promotes
 * them.
 *
 * Writing the file: the whole state into PATH.tmp, fsync, rename over
 * PATH, fsync of the directory; on a worker thread.  A crash leaves the
 * old or the new file whole.  A write that fails removes the file
 * instead, on the worker too (a rerun then starts over, until a later
 * write succeeds); if even that fails, the guest writes waiting for it
 * fail with the error.  Removing the file at completion
 * (mirror_state_complete(), mirror_state_remove()) is synchronous: the
 * switch-over waits for it anyway, and it happens once per job.
 *
 * All on the main loop.  Every function accepts a NULL state and then
 * does nothing (a job without --state-file).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_STATE_H
#define BLOCK_MIRROR_STATE_H

#include "block/block.h"
#include "block/mirror/dirty-bitmap.h"
#include "block/mirror/mirror-state-format.h"

typedef struct MirrorState MirrorState;

/* A flush is due after this many bytes of data were copied since the
 * last one began ... */
#define MIRROR_STATE_FLUSH_BYTES    (64 * 1024 * 1024)
/* ... or this long after the first range became clean, whichever comes
 * first ... */
#define MIRROR_STATE_FLUSH_NS       (2 * 1000000000LL)
/* ... or, once as many bytes were made clean by zeroing or skipping
 * (cheap to redo), this long after the last flush began: on a thin disk
 * whose data is scattered between large holes, a flush per 64 MiB made
 * clean was a flush and a state-file write per extent. */
#define MIRROR_STATE_ZERO_FLUSH_NS  (100 * 1000000LL)
/* A granule a guest wrote becomes known good again only once no guest
 * wrote it for between one and two of these. */
#define MIRROR_STATE_HOT_NS         (10 * 1000000000LL)

/*
 * Read the state file @path: false with @errp set when it exists but
 * cannot be read or is not a valid state file (BLOCK_ERROR_INVALID for
 * a corrupt one); true otherwise, *@exists saying whether it exists.
 */
bool mirror_state_probe(const char *path, bool *exists, GError **errp);

/*
 * Open the state of the job @id at @path: when the file exists it must
 * be valid and of this job (else NULL with @errp set,
 * BLOCK_ERROR_INVALID naming what differs) and the state resumes from
 * it; else the file is created, with nothing known good (for sync=none,
 * everything: the target is taken as a copy of the source, as the job
 * takes it), and written before this returns.
 */
MirrorState *mirror_state_open(const char *path,
                               const MirrorStateIdentity *id, GError **errp);

/* Free @st; call it when mirror_state_busy() is false. */
void mirror_state_free(MirrorState *st);

/* Is a write of the file still to finish? */
bool mirror_state_busy(MirrorState *st);

/* Call @cb(@opaque) whenever the writes end (busy turns false); NULL:
 * no more. */
void mirror_state_set_idle_cb(MirrorState *st, void (*cb)(void *opaque),
                              void *opaque);

/* Did @st load an existing file? */
bool mirror_state_resumed(MirrorState *st);

/*
 * > 0: the file is a switched-over record (a loaded one, or written by
 * mirror_state_complete()): the job completed and the target took over
 * at that time (µs since the epoch); its source is stale, so a job must
 * not resume from it.  0: not (or a NULL state).
 */
int64_t mirror_state_switched_us(MirrorState *st);

/*
 * @on: at completion, mirror_state_complete() writes a switched-over
 * record instead of removing the file, for a job whose target guests
 * write after the switch-over (start --export); the caller removes it
 * with mirror_state_remove() once they are done (a clean exit).  Off by
 * default.
 */
void mirror_state_set_switch_record(MirrorState *st, bool on);

/* The known-good extents now (bytes: ->bytes). */
const MirrorExtents *mirror_state_good(MirrorState *st);

/* Heap bytes its extent sets take now (0 for a NULL state). */
size_t mirror_state_memory(MirrorState *st);

/* Bytes known good now; -1 for a NULL state. */
int64_t mirror_state_good_bytes(MirrorState *st);

/* The granules of [offset, offset + bytes) that are clean in @dirty now
 * were written (or need no write): a flush beginning later makes them
 * known good. */
void mirror_state_clean(MirrorState *st, DirtyBitmap *dirty, int64_t offset,
                        int64_t bytes);

/* The same for a range zeroed or skipped, not copied as data: it does not
 * count towards MIRROR_STATE_FLUSH_BYTES. */
void mirror_state_clean_zero(MirrorState *st, DirtyBitmap *dirty,
                             int64_t offset, int64_t bytes);

/* [offset, offset + bytes) is dirty again: not known good any more. */
void mirror_state_dirtied(MirrorState *st, int64_t offset, int64_t bytes);

/* A target flush begins / ended with @ret. */
void mirror_state_flush_begin(MirrorState *st);
void mirror_state_flush_end(MirrorState *st, int ret);

/*
 * When should the job flush the target next: 0 now, > 0 in that many
 * ns, -1 not (nothing waits for a flush).  @now_ns: clock_ns().
 */
int64_t mirror_state_flush_due(MirrorState *st, int64_t now_ns);

/*
 * A guest write to [offset, offset + bytes) is about to reach the source
 * (see above).  True: it may go now.  False: @cb(@opaque, ret) runs later
 * (0: go; < 0: the state could not be written, fail the guest's write).
 * Either way call mirror_state_guest_done() once the write completed.
 */
bool mirror_state_guest_write(MirrorState *st, int64_t offset,
                              int64_t bytes, BlockCompletionFunc *cb,
                              void *opaque);
void mirror_state_guest_done(MirrorState *st, int64_t offset, int64_t bytes);

/*
 * The hot period (MIRROR_STATE_HOT_NS by default); 0: a granule a guest
 * wrote is known good again as soon as it is copied and flushed.
 */
void mirror_state_set_hot_ns(MirrorState *st, int64_t ns);

/*
 * Remove the file, synchronously (when mirror_state_busy() is false),
 * also a switched-over record.  Then guest writes no longer wait and
 * everything counts as known good; 0.  When it cannot be removed:
 * -errno with @errp set ("cannot remove the state file 'PATH': REASON"),
 * and nothing changes (the file and the gate stay).
 */
int mirror_state_remove(MirrorState *st, GError **errp);

/*
 * The job completed (the job calls it when mirror_state_busy() is false,
 * before guests reach the target): mirror_state_remove(), or with
 * mirror_state_set_switch_record() write a switched-over record (all
 * known good, the time now), synchronously; then as after a removal.
 * On an error (-errno, @errp set: "cannot remove the state file 'PATH':
 * REASON" or "cannot write the state file 'PATH': REASON") nothing
 * changes: the job must not switch over, else a rerun after a crash
 * would copy the stale source over what guests write to the target.
 */
int mirror_state_complete(MirrorState *st, GError **errp);

#endif /* BLOCK_MIRROR_STATE_H */
