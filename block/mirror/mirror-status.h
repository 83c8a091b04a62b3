/*
 * The source's block status, as the mirror job sees it: fetched lazily,
 * one window of up to MIRROR_STATUS_WINDOW at a time, and cached.  The
 * window is large (a whole thin disk is one fetch) and the driver
 * answers for less when the range is fragmented (the answer's extents
 * are bounded); the cache keeps at most MIRROR_STATUS_MAX_EXTENTS of
 * them, so its memory is bounded whatever the size and the layout.
 *
 * The cache also decides what an extent means to the job
 * (mirror_status_copies()), since that decides which writes make it
 * stale: an extent that is copied whatever its length stays right
 * whatever is written there later (a write can only turn a range into
 * data, or by discarding into zeroes, which copying reads correctly), so
 * guest writes cut the cache only at extents that are not copied.
 * Writes that land while a fetch is in flight are remembered (up to
 * MIRROR_STATUS_MAX_WRITES; beyond, only the lowest offset of the rest)
 * and the answer is cut before the first extent of it that one of them
 * may have changed: an extent that is not copied, or any from that
 * lowest offset on.
 *
 * A leaf: it knows the source node, and tells its owner through one
 * callback that an answer came (or was dropped).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_STATUS_H
#define BLOCK_MIRROR_STATUS_H

#include "block/block.h"
#include "util/cutils.h"

/* How much block status to ask for at once: more than any disk. */
#define MIRROR_STATUS_WINDOW    (INT64_MAX / 2)
/* Extents the cache keeps of an answer; the rest is asked again. */
#define MIRROR_STATUS_MAX_EXTENTS 2048
/* Writes remembered while a fetch is pending; beyond, the answer is
 * cut at the lowest offset of the rest. */
#define MIRROR_STATUS_MAX_WRITES 4096

typedef struct MirrorStatus {
    /* Fixed at mirror_status_init(). */
    BlockDriverState *src;
    int64_t len;
    int64_t fallback_bytes;     /* an extent of data, when a fetch fails */
    bool skip_backing;          /* sync=top: extents from below: skipped */
    bool allocate_zeroes;       /* zero extents copied as data */
    void (*fetched)(void *opaque);
    void *opaque;

    /* The cache: BlockExtent over [start, end), sorted, contiguous. */
    GArray *extents;
    int64_t start;
    int64_t end;
    guint idx;                  /* the last hit */

    /* The fetch in flight. */
    bool pending;
    int64_t fetch_offset;
    GArray *fetched_extents;
    GArray *writes;             /* BlockExtent: written while pending */
    int64_t stale_from;         /* too many of them: the lowest offset
                                 * of the rest (INT64_MAX: none) */
} MirrorStatus;

/*
 * Set up @st for @src (of @len bytes).  @fetched_bytes: the length of
 * data assumed where a fetch fails (the read then reports a real
 * failure); @skip_backing: sync=top, extents from a backing file are not
 * copied; @allocate_zeroes: zero extents are copied as data.
 * @fetched(@opaque) runs on the main loop after every fetch, with the
 * answer in the cache or dropped; the owner looks up again.
 */
void mirror_status_init(MirrorStatus *st, BlockDriverState *src, int64_t len,
                        int64_t fallback_bytes, bool skip_backing,
                        bool allocate_zeroes, void (*fetched)(void *opaque),
                        void *opaque);

/* Release the cache; no fetch may be in flight. */
void mirror_status_free(MirrorStatus *st);

/*
 * The cached extent that holds @offset, or NULL when the cache does not
 * cover it: then start a fetch with mirror_status_fetch() (unless one is
 * pending) and look again after the callback.
 */
const BlockExtent *mirror_status_lookup(MirrorStatus *st, int64_t offset);

/* Ask for the block status of up to MIRROR_STATUS_WINDOW from @offset;
 * none may be pending. */
void mirror_status_fetch(MirrorStatus *st, int64_t offset);

/*
 * Once the lookups have passed half of the cached extents (or the last
 * one), ask for the status after the cache (unless a fetch is pending or
 * the cache reaches the end): its answer is appended, so that the job
 * never waits for a window's status while it has work before it.
 */
void mirror_status_read_ahead(MirrorStatus *st);

/* Is a fetch in flight? */
bool mirror_status_pending(const MirrorStatus *st);

/* Is what @e describes copied (COPY), whatever its length?  Otherwise it
 * is skipped (sync=top, from below) or zeroed. */
bool mirror_status_copies(const MirrorStatus *st, const BlockExtent *e);

/* Is @e provided by a backing file that sync=top leaves alone? */
bool mirror_status_from_backing(const MirrorStatus *st, const BlockExtent *e);

/* Heap bytes the cache and the fetch in flight take now. */
size_t mirror_status_memory(const MirrorStatus *st);

/* Forget the cache. */
void mirror_status_invalidate(MirrorStatus *st);

/* The source was written at [offset, offset + bytes): what is cached, or
 * about to be, may be stale there. */
void mirror_status_written(MirrorStatus *st, int64_t offset, int64_t bytes);

#endif /* BLOCK_MIRROR_STATUS_H */
