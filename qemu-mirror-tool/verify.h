/*
 * --verify of convert and start: after the job, compare the target with
 * the source through image-compare (block status first, parallel reads),
 * re-reading both.
 *
 * What start --verify proves: every byte of the target equals the byte
 * of the source at the switch-over instant, except the bytes guests
 * wrote to the target through the export after it (those rightly
 * differ; exactly those bytes, not the sectors around them).  Guest
 * writes to the target are watched from the switch-over
 * on (a write notifier added in the same main-loop turn, before any
 * guest write sent to the target completes); the source has no writer
 * after the switch-over, so it still holds its switch-over bytes.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef TOOL_VERIFY_H
#define TOOL_VERIFY_H

#include "block/block.h"
#include "block/mirror/job.h"
#include "util/hbitmap.h"
#include <stdio.h>

typedef struct ToolVerify {
    BlockDriverState *src;
    BlockDriverState *dst;
    BlockDriverState *top;      /* start --export's filter, or NULL */
    HBitmap *rewritten;         /* the 512-byte sectors guests wrote
                                 * whole since the switch-over (not
                                 * compared), or NULL */
    GHashTable *partial;        /* sector number -> VERIFY_SECTOR bits:
                                 * the bytes they wrote of sectors they
                                 * wrote in part */
    bool switched;              /* the target took over from the source */
    const bool *interrupt;      /* true: stop (a signal), or NULL */
    int64_t chunk_size;         /* 0: image-scan's default */
    int max_in_flight;          /* 0: image-scan's default */
    int64_t bytes;              /* compared: the source's length */
    double seconds;
} ToolVerify;

/*
 * Prepare to verify a copy of @src onto @dst by @job.  With @top (start
 * --export), watch the target for guest writes from the switch-over on.
 */
void tool_verify_init(ToolVerify *v, BlockDriverState *src,
                      BlockDriverState *dst, BlockDriverState *top,
                      Job *job);

/*
 * Verify that the target equals the source (start: see above).  Returns
 * TOOL_EXIT_OK, or TOOL_EXIT_FAILURE having printed "verify failed at
 * offset N: ..." (the first differing byte), the request that failed, or
 * that *@interrupt stopped it.  Iterates the main loop: an export keeps
 * serving.
 */
int tool_verify_run(ToolVerify *v);

/* "verified: ..." on @out, a JSON object with @json. */
void tool_verify_print(ToolVerify *v, FILE *out, bool json);

/* Stop watching and free (g_auto(ToolVerify) calls it). */
void tool_verify_clear(ToolVerify *v);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(ToolVerify, tool_verify_clear)

#endif /* TOOL_VERIFY_H */
