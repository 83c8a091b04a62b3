/*
 * qcow2-lite deferred frees: a reference that an L2 change drops is only
 * queued, tagged with the current data transfer sequence number.  After a
 * metadata flush has made the L2 change durable, a queued range is
 * decremented once no transfer that may still touch it is in flight (so a
 * cluster is never reused under an old transfer, and never freed on disk
 * before the reference to it is gone).  Too many bytes queued trigger a
 * flush.  All of it runs under the layer's lock.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/qcow2-int.h"

/* Past this many bytes of pending frees, flush to apply them. */
#define QCOW2_PENDING_FREE_LIMIT   (64 * MiB)

void qcow2_free_deferred(BDRVQcow2State *s, int64_t offset, int64_t length)
{
    Qcow2PendingFree p = {
        .offset = offset, .length = length, .seq = s->io_seq,
    };

    g_array_append_val(s->pending_frees, p);
    s->pending_free_bytes += length;
    if (s->pending_free_bytes > QCOW2_PENDING_FREE_LIMIT) {
        /* Errors surface at the next flush, which redoes this. */
        qcow2_flush_metadata(s);
    }
}

void qcow2_free_entry_deferred(BDRVQcow2State *s, uint64_t entry)
{
    int64_t off, len;

    switch (qcow2_l2_type(entry)) {
    case QCOW2_CLUSTER_NORMAL:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        qcow2_free_deferred(s, entry & L2E_OFFSET_MASK, s->cluster_size);
        break;
    case QCOW2_CLUSTER_COMPRESSED:
        qcow2_compressed_range(s, entry, &off, &len);
        qcow2_free_deferred(s, off, len);
        break;
    default:
        break;
    }
}

int qcow2_apply_pending_frees(BDRVQcow2State *s)
{
    uint64_t oldest = UINT64_MAX;
    guint i = 0;

    if (s->io.head) {
        oldest = ((Qcow2IoTrack *)s->io.head->data)->seq;
    }
    while (i < s->pending_frees->len) {
        Qcow2PendingFree p = g_array_index(s->pending_frees,
                                           Qcow2PendingFree, i);
        int ret;

        if (p.seq >= oldest) {
            i++;        /* a transfer that may still touch it is running */
            continue;
        }
        g_array_remove_index(s->pending_frees, i);
        s->pending_free_bytes -= p.length;
        ret = qcow2_update_refcount(s, p.offset, p.length, -1);
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}
