/*
 * The mirror job's window: how many operations and how many bytes of COPY
 * data may be in flight, and the COPY slots (pool buffers or views) that
 * hold that data.
 *
 * The defaults follow the request channels of either end and the bytes
 * per channel they ask for (QEMU's 16 operations and 16 MiB per channel,
 * at most MIRROR_MAX_WINDOW_CHANNELS channels and MIRROR_MAX_WINDOW_BYTES);
 * a buf-size or max-in-flight the user gave stays.  The pool is sized for
 * the largest window; mirror_window_refresh() resizes the window itself
 * to the channels taking requests now.
 *
 * A leaf: it knows the two nodes it sizes itself for, nothing of the job.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_MIRROR_WINDOW_H
#define BLOCK_MIRROR_WINDOW_H

#include "block/block.h"
#include "block/mirror/mirror.h"
#include "util/buf-pool.h"

/* The defaults of the window, resolved from the parameters and the ends
 * (mirror_window_defaults()), before the parameters are checked. */
typedef struct MirrorWindowDefaults {
    int64_t buf_size;           /* the most bytes of COPY data in flight */
    int max_in_flight;          /* the most operations in flight */
    int64_t unit_bytes;         /* per channel (0: buf-size was given) */
    int unit_ops;               /* per channel (0: max-in-flight given) */
    bool asked;                 /* the unit is what the ends ask for now */
    int64_t op_size;            /* ... in operations of this size */
} MirrorWindowDefaults;

typedef struct MirrorWindow {
    /* Fixed at mirror_window_init(). */
    MirrorWindowDefaults cfg;
    int64_t granularity;
    BufPool *bufs;              /* max_bufs buffers of elem_size bytes */
    int max_bufs;
    int64_t elem_size;

    /* The window now (mirror_window_refresh()). */
    int channels;
    int64_t cur_buf_size;
    int cur_max_in_flight;
    int cur_max_bufs;
    int64_t max_op;             /* COPY operations of at most this (the
                                 * guests' share, mirror-guest.h) */

    /* What is in flight. */
    int in_flight;              /* operations */
    int64_t bytes_in_flight;    /* COPY bytes: the buf-size budget */
    int nb_views;               /* slots taken without a pool buffer */
} MirrorWindow;

/*
 * The window's defaults for the parameters @p (0 fields: defaults) with
 * operations of @chunk bytes between @src and @dst.
 */
void mirror_window_defaults(BlockDriverState *src, BlockDriverState *dst,
                            const MirrorParams *p, int64_t chunk,
                            MirrorWindowDefaults *d);

/*
 * Set up @w from @d (checked) for operations of at most @elem_size bytes
 * over granules of @granularity: allocates the pool (buffers aligned for
 * both ends) and sizes the window for the channels of @src and @dst now.
 */
void mirror_window_init(MirrorWindow *w, const MirrorWindowDefaults *d,
                        int64_t granularity, int64_t elem_size,
                        BlockDriverState *src, BlockDriverState *dst);

/* Release the pool; nothing may be in flight. */
void mirror_window_free(MirrorWindow *w);

/* Size the window for the channels of either end taking requests now;
 * cheap when they did not change. */
void mirror_window_refresh(MirrorWindow *w, BlockDriverState *src,
                           BlockDriverState *dst);

/* Cap each COPY operation at @max_op (rounded down to whole granules,
 * at least one); INT64_MAX: no cap. */
void mirror_window_set_max_op(MirrorWindow *w, int64_t max_op);

/* May another operation start (fewer in flight than the window allows)? */
bool mirror_window_has_room(const MirrorWindow *w);

/*
 * The most COPY bytes that may start now, from @want: @want (at most
 * the largest operation set), or what the byte budget leaves, rounded down to whole granules; 0 when nothing may
 * (a window that just shrank may be overdrawn).
 */
int64_t mirror_window_fit(const MirrorWindow *w, int64_t want);

/* An operation starts / ends; @copy_bytes: its COPY bytes (0 for others). */
void mirror_window_op_begin(MirrorWindow *w, int64_t copy_bytes);
void mirror_window_op_end(MirrorWindow *w, int64_t copy_bytes);

/*
 * A COPY slot, at most as many as the window allows: with @want_buf, a
 * pool buffer in *@buf, else a slot without a buffer (a view) and NULL
 * there.  False when all are taken.  mirror_window_slot_put() gives it
 * back (@buf as returned).
 */
bool mirror_window_slot_get(MirrorWindow *w, bool want_buf, uint8_t **buf);
void mirror_window_slot_put(MirrorWindow *w, uint8_t *buf);

/* A slot without a buffer becomes a pool buffer (a view that could not be
 * made); the buffer is returned. */
uint8_t *mirror_window_slot_to_buf(MirrorWindow *w);

/* For query-block-jobs: operations and COPY bytes in flight, and the
 * window's limits now. */
int mirror_window_in_flight(const MirrorWindow *w);
int64_t mirror_window_bytes_in_flight(const MirrorWindow *w);
int64_t mirror_window_buf_size(const MirrorWindow *w);
int mirror_window_max_in_flight(const MirrorWindow *w);

#endif /* BLOCK_MIRROR_WINDOW_H */
