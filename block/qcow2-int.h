/*
 * qcow2-lite internals shared by the block/qcow2*.c files.
 *
 * One BDRVQcow2State per opened image layer (the top image and each qcow2
 * backing file).  Requests run whole on a worker of the shared thread pool
 * (io.c's blocking adapter runs them): they take s->lock for every look at
 * or change of metadata (L1, L2 cache, refcounts, allocation state) and
 * drop it around data I/O, so requests on distinct clusters transfer data
 * in parallel.  Metadata I/O (cache misses, write-back) happens under the lock
 * on the worker, never on the main loop.
 *
 * On-disk ordering (docs/qcow2-lite.md): refcount increments and data are
 * durable before an L2 entry that references them is written; new L2 tables
 * before the L1 entry; an L2 change that drops a reference is durable before
 * the refcount decrement.  The caches hold dirty tables; qcow2-cache.c
 * writes them back in that order.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_INT_H
#define BLOCK_QCOW2_INT_H

#include "block/block-int.h"
#include "util/cutils.h"
#include "block/qcow2-cache.h"      /* L2 / refcount block caches */
#include "block/qcow2-debug.h"      /* test builds: the crash test */
#include "block/qcow2-refcount.h"   /* refcounts, allocation, frees */

#include <sys/uio.h>

/* ---- Format constants ---- */

#define QCOW2_MAGIC                 0x514649fbU     /* "QFI\xfb" */
#define QCOW2_MIN_CLUSTER_BITS      9
#define QCOW2_MAX_CLUSTER_BITS      21
#define QCOW2_V2_HEADER_LENGTH      72
#define QCOW2_V3_MIN_HEADER_LENGTH  104
#define QCOW2_V3_HEADER_LENGTH      112             /* what we write */
#define QCOW2_MAX_L1_BYTES          (32 * MiB)
#define QCOW2_MAX_REFTABLE_BYTES    (8 * MiB)
#define QCOW2_MAX_SNAPSHOTS         65536
#define QCOW2_MAX_BACKING_NAME      1023
#define QCOW2_MAX_BACKING_FMT       15
#define QCOW2_MAX_BACKING_DEPTH     16
#define QCOW2_REFCOUNT_ORDER        4               /* the only one we write */
#define QCOW2_REFCOUNT_MAX          0xffff

/* Header feature bits */
#define QCOW2_INCOMPAT_DIRTY        (1ULL << 0)
#define QCOW2_INCOMPAT_CORRUPT      (1ULL << 1)
#define QCOW2_INCOMPAT_DATA_FILE    (1ULL << 2)
#define QCOW2_INCOMPAT_COMPRESSION  (1ULL << 3)
#define QCOW2_INCOMPAT_EXTL2        (1ULL << 4)
#define QCOW2_COMPAT_LAZY_REFCOUNTS (1ULL << 0)
#define QCOW2_AUTOCLEAR_BITMAPS     (1ULL << 0)

/* Header field offsets we poke (cluster 0 is never rewritten whole) */
#define QCOW2_HDR_REFTABLE_OFFSET   48  /* be64 offset + be32 clusters */
#define QCOW2_HDR_INCOMPAT          72
#define QCOW2_HDR_AUTOCLEAR         88

/* Header extensions */
#define QCOW2_EXT_END               0x00000000U
#define QCOW2_EXT_BACKING_FORMAT    0xe2792acaU
#define QCOW2_EXT_FEATURE_TABLE     0x6803f857U
#define QCOW2_EXT_BITMAPS           0x23852875U
#define QCOW2_EXT_CRYPTO            0x0537be77U
#define QCOW2_EXT_DATA_FILE         0x44415441U

/* L1 / L2 / reftable entries */
#define QCOW_OFLAG_COPIED           (1ULL << 63)
#define QCOW_OFLAG_COMPRESSED       (1ULL << 62)
#define QCOW_OFLAG_ZERO             (1ULL << 0)
#define L1E_OFFSET_MASK             0x00fffffffffffe00ULL
#define L1E_RESERVED_MASK           0x7f000000000001ffULL
#define L2E_OFFSET_MASK             0x00fffffffffffe00ULL
#define L2E_STD_RESERVED_MASK       0x3f000000000001feULL
#define REFT_OFFSET_MASK            0xfffffffffffffe00ULL

typedef enum Qcow2ClusterType {
    QCOW2_CLUSTER_UNALLOCATED,
    QCOW2_CLUSTER_ZERO_PLAIN,
    QCOW2_CLUSTER_ZERO_ALLOC,
    QCOW2_CLUSTER_NORMAL,
    QCOW2_CLUSTER_COMPRESSED,
} Qcow2ClusterType;

/* Kinds of metadata clusters (the overlap map) */
typedef enum Qcow2MetaType {
    QCOW2_META_NONE,
    QCOW2_META_HEADER,
    QCOW2_META_L1,
    QCOW2_META_REFTABLE,
    QCOW2_META_REFBLOCK,
    QCOW2_META_L2,
} Qcow2MetaType;

/* One entry of the feature name table extension */
typedef struct Qcow2FeatureName {
    uint8_t type;           /* 0 incompatible, 1 compatible, 2 autoclear */
    uint8_t bit;
    char name[47];          /* NUL-terminated copy of the 46 bytes */
} Qcow2FeatureName;

/* The header, its extensions and the backing file name, parsed. */
typedef struct Qcow2Header {
    uint32_t version;
    uint64_t backing_file_offset;
    uint32_t backing_file_size;
    uint32_t cluster_bits;
    uint64_t size;
    uint32_t crypt_method;
    uint32_t l1_size;
    uint64_t l1_table_offset;
    uint64_t refcount_table_offset;
    uint32_t refcount_table_clusters;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    uint64_t incompatible_features;
    uint64_t compatible_features;
    uint64_t autoclear_features;
    uint32_t refcount_order;
    uint32_t header_length;
    uint8_t compression_type;

    char *backing_file;     /* NULL when there is none */
    char *backing_format;   /* from the extension, or NULL */
    bool has_bitmaps_ext;
    bool has_crypto_ext;        /* refused */
    bool has_data_file_ext;     /* refused */
    uint64_t bitmap_dir_offset;
    uint64_t bitmap_dir_size;
    uint32_t nb_bitmaps;
    GArray *features;       /* Qcow2FeatureName */
} Qcow2Header;

/* ---- qcow2-header.c: pure functions over buffers ---- */

/*
 * Parse the first cluster of an image: @buf holds @len bytes from offset 0
 * (the whole first cluster, or the whole file when it is shorter).  Checks
 * everything that can be checked without the file: magic, version, cluster
 * size, header length, backing name, compression type, feature bits,
 * refcount width, encryption, extensions.  Refuses unsupported features
 * with a message naming them.  On success fills @h (free it with
 * qcow2_header_clear()); on failure sets @errp and leaves @h cleared.
 */
bool qcow2_header_parse(const uint8_t *buf, size_t len, Qcow2Header *h,
                        GError **errp);

void qcow2_header_clear(Qcow2Header *h);

/*
 * Check the header's tables against a file of @file_size bytes: sizes
 * within QEMU's limits (computed without overflow), offsets aligned and
 * inside the file, L1 large enough for the virtual size, header, L1 and
 * refcount table not overlapping.
 */
bool qcow2_header_check_layout(const Qcow2Header *h, int64_t file_size,
                               GError **errp);

/*
 * Why @h must not be opened read-write (a sentence naming the reason), or
 * NULL when it may be.
 */
const char *qcow2_header_rw_refusal(const Qcow2Header *h);

/* The name of feature @bit of @type from the table, or NULL. */
const char *qcow2_header_feature_name(const Qcow2Header *h, int type,
                                      int bit);

/*
 * Check the refcount table (@rt, @rt_entries host-order entries) and the
 * L1 table (@l1, @l1_size entries) of the image described by @h in a file
 * of @file_size bytes: every refcount block and L2 table offset aligned,
 * inside the file and not overlapping any other metadata.  Fills @meta
 * (host cluster index -> Qcow2MetaType) with the header, L1, refcount
 * table, refcount blocks and L2 tables.
 */
bool qcow2_check_tables(const Qcow2Header *h, const uint64_t *rt,
                        int64_t rt_entries, const uint64_t *l1,
                        int64_t file_size, GHashTable *meta, GError **errp);

/* A GHashTable for qcow2_check_tables() (guint64 keys in pointers). */
GHashTable *qcow2_meta_new(void);

/* "the refcount table", "an L2 table", ... for messages */
const char *qcow2_meta_name(Qcow2MetaType type);

/*
 * Build a v3 header cluster in @buf (@cs bytes, zeroed by the caller): the
 * fixed fields of @h (version 3, refcount order 4, header length 112), the
 * backing format extension, the feature name table (clusters above 4 KiB,
 * as QEMU), the end marker and the backing file name.  Fails when they do
 * not fit in one cluster.
 */
bool qcow2_header_build(uint8_t *buf, int64_t cs, const Qcow2Header *h,
                        GError **errp);

/* ---- Big-endian helpers ---- */

static inline uint64_t qcow2_be64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, 8);
    return GUINT64_FROM_BE(v);
}

static inline uint32_t qcow2_be32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return GUINT32_FROM_BE(v);
}

static inline uint16_t qcow2_be16(const uint8_t *p)
{
    uint16_t v;

    memcpy(&v, p, 2);
    return GUINT16_FROM_BE(v);
}

static inline void qcow2_put_be64(uint8_t *p, uint64_t v)
{
    v = GUINT64_TO_BE(v);
    memcpy(p, &v, 8);
}

static inline void qcow2_put_be32(uint8_t *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, 4);
}

static inline void qcow2_put_be16(uint8_t *p, uint16_t v)
{
    v = GUINT16_TO_BE(v);
    memcpy(p, &v, 2);
}

/* ---- The state of one opened layer ---- */

typedef struct Qcow2Cache Qcow2Cache;
typedef struct BDRVQcow2State BDRVQcow2State;

/* A backing file: raw (our own descriptor) or qcow2 (an opened layer). */
typedef struct Qcow2Backing {
    char *filename;             /* resolved path */
    char *format;               /* "raw" or "qcow2" */
    int fd;                     /* raw: read-only descriptor; else -1 */
    int64_t size;               /* bytes readable; beyond reads zeroes */
    BDRVQcow2State *qcow2;      /* qcow2: the layer; else NULL */
} Qcow2Backing;

/* Guest clusters [start, end) whose L2 entries a request is changing. */
typedef struct Qcow2AllocRecord {
    int64_t start;
    int64_t end;
    GList link;
} Qcow2AllocRecord;

/* A data transfer on host clusters in flight (see pending frees). */
typedef struct Qcow2IoTrack {
    uint64_t seq;
    GList link;
} Qcow2IoTrack;

/* A host range to decrement once the L2 change that dropped it is durable
 * and no transfer that started before it is still in flight. */
typedef struct Qcow2PendingFree {
    int64_t offset;
    int64_t length;
    uint64_t seq;
} Qcow2PendingFree;

struct BDRVQcow2State {
    char *filename;
    int fd;
    bool writable;
    bool in_memory;             /* the file is on tmpfs: fused copies */
    int depth;                  /* 0: the top image; n: n-th backing */
    OnOffAuto locking;          /* the node's locking=, for the chain */
    bool force_share;           /* share every permission, down the chain */
    bool read_perm;             /* the user reads: backing files too */
    Qcow2Header header;

    int cluster_bits;
    int64_t cluster_size;
    int l2_bits;                /* log2 of the entries per L2 table */
    int64_t size;               /* virtual size, a multiple of 512 */

    uint64_t *l1;               /* host order */
    uint32_t l1_size;
    int64_t l1_offset;
    uint8_t *l1_dirty;          /* bitmap: dirty 512-byte L1 sectors */
    bool l1_any_dirty;

    uint64_t *reftable;         /* host order */
    int64_t reftable_size;      /* entries */
    int64_t reftable_offset;
    int64_t reftable_clusters;
    int refblock_bits;          /* log2 of the entries per refcount block */

    GHashTable *meta;           /* host cluster index -> Qcow2MetaType */
    Qcow2Cache *l2_cache;
    Qcow2Cache *rb_cache;       /* NULL when read-only */

    /* Everything above that changes, and all of this, under @lock. */
    GMutex lock;
    GCond cond;                 /* an allocation record went away */
    GQueue allocs;              /* Qcow2AllocRecord */
    GQueue io;                  /* Qcow2IoTrack, ascending seq */
    uint64_t io_seq;
    GArray *pending_frees;      /* Qcow2PendingFree */
    int64_t pending_free_bytes;
    bool need_sync;             /* data or refcounts written since the last
                                 * sync that a dirty L2 entry depends on */
    int64_t free_cluster_index; /* no free cluster below this */
    int64_t free_byte_offset;   /* compressed packing: next byte, 0 = none */
    int64_t fresh_start;        /* host bytes from here read as zero */
    int64_t alloc_end;          /* end of the highest allocation so far */
    int64_t file_size;          /* at open, then grown by allocations */
    bool corrupt;               /* fail all I/O (the image is corrupt) */
    char *corrupt_reason;

    /* The write guard (qcow2-guard.c), read-write only, fixed at open. */
    GHashTable *guard;          /* sparse bitmap of the clusters whose
                                 * refcount is below their references;
                                 * NULL when there is none */
    int64_t guard_beyond;       /* lowest cluster past the end of the file
                                 * at open that is mapped, or INT64_MAX */

    Qcow2Backing *backing;      /* or NULL */

    /* Counters for tests (under @lock): the L1 and L2 entries block status
     * has looked at, the L2 entries write-zeroes and discard have. */
    int64_t status_l1_entries;
    int64_t status_l2_entries;
    int64_t zero_l2_entries;

    /* Test instrumentation (atomics): data transfers in flight. */
    gint data_io_in_flight;
    gint max_data_io_in_flight;
    gint data_delay_us;
};

/* The node's opaque: the top layer. */
typedef struct Qcow2Node {
    BDRVQcow2State *s;
} Qcow2Node;

/* ---- qcow2.c ---- */

/*
 * Open @filename as a qcow2 layer (@depth 0 = top).  @chain holds
 * "dev:ino" keys of the layers above, for loop detection.  The layer
 * locks its file (@locking: the node's locking= option) for a user that
 * holds @perm (BLK_PERM_*) and shares everything, or with @force_share
 * for none of its own either.  Blocking.
 */
BDRVQcow2State *qcow2_state_open(const char *filename, bool writable,
                                 int depth, GHashTable *chain,
                                 OnOffAuto locking, uint64_t perm,
                                 bool force_share, GError **errp);

/* Flush (read-write), close and free @s and its backing chain. */
void qcow2_state_close(BDRVQcow2State *s);

/*
 * The image is corrupt: remember why (first reason wins), stop all I/O
 * and, when read-write, set the corrupt bit.  Lock held.  Returns -EIO.
 */
int qcow2_signal_corruption(BDRVQcow2State *s, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);

/* ---- Helpers (inline) ---- */

static inline int64_t qcow2_offset_in_cluster(const BDRVQcow2State *s,
                                              int64_t offset)
{
    return offset & (s->cluster_size - 1);
}

static inline int64_t qcow2_cluster_start(const BDRVQcow2State *s,
                                          int64_t offset)
{
    return offset & ~(s->cluster_size - 1);
}

static inline Qcow2ClusterType qcow2_l2_type(uint64_t entry)
{
    if (entry & QCOW_OFLAG_COMPRESSED) {
        return QCOW2_CLUSTER_COMPRESSED;
    }
    if (entry & QCOW_OFLAG_ZERO) {
        return entry & L2E_OFFSET_MASK ? QCOW2_CLUSTER_ZERO_ALLOC
                                       : QCOW2_CLUSTER_ZERO_PLAIN;
    }
    if (!(entry & L2E_OFFSET_MASK)) {
        return QCOW2_CLUSTER_UNALLOCATED;
    }
    return QCOW2_CLUSTER_NORMAL;
}

/* Bytes of the file we may read metadata and data from. */
static inline int64_t qcow2_file_end(const BDRVQcow2State *s)
{
    return MAX(s->file_size, s->alloc_end);
}

/* ---- qcow2-guard.c: the write guard ---- */

/*
 * Count every reference of the image opened for writing (header, refcount
 * table and blocks, L1, L2 tables and what they map) and remember the
 * host clusters whose refcount is below their references.  Reads every L2
 * table and refcount block.  At open.
 */
bool qcow2_guard_build(BDRVQcow2State *s, GError **errp);

/* The bit of host cluster @c in s->guard (which is not NULL). */
bool qcow2_guard_test(const BDRVQcow2State *s, int64_t c);

/* Is host cluster @c one that must be neither reused nor written in place
 * (a mapping uses it more often than its refcount says)? */
static inline bool qcow2_guarded(const BDRVQcow2State *s, int64_t c)
{
    if (c >= s->guard_beyond) {
        return true;
    }
    return s->guard && qcow2_guard_test(s, c);
}

/*
 * 0 when host cluster @c is not guarded; else marks the image corrupt
 * ("preventing @what cluster ...") and returns -EIO.  Lock held.
 */
int qcow2_guard_check(BDRVQcow2State *s, int64_t c, const char *what);

/* ---- qcow2-file.c: file I/O and request bookkeeping ---- */

/* Read exactly @bytes at @offset (metadata: a short read is -EIO). */
int qcow2_pread(BDRVQcow2State *s, int64_t offset, void *buf,
                int64_t bytes);

/* Data: whatever lies past the end of the file reads as zero. */
int qcow2_pread_data(BDRVQcow2State *s, int64_t offset, void *buf,
                     int64_t bytes);

/* Write all of @iov (@niov pieces) at @offset. */
int qcow2_pwritev(BDRVQcow2State *s, int64_t offset, struct iovec *iov,
                  int niov);

/* Write all of @buf at @offset; with retries on EINTR. */
int qcow2_pwrite(BDRVQcow2State *s, int64_t offset, const void *buf,
                 int64_t bytes);

/* fdatasync() */
int qcow2_sync(BDRVQcow2State *s);

/*
 * Is [@offset, @offset + @bytes) free of metadata (header, L1, L2 tables,
 * refcount table and blocks) and of guarded clusters (qcow2-guard.c)?  If
 * not, the image is corrupt (a write would destroy metadata or another
 * mapping's data): signals it.  Lock held.
 */
int qcow2_check_overlap(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                        const char *what);

/* Register a data transfer in flight / its end.  Lock held. */
void qcow2_io_begin(BDRVQcow2State *s, Qcow2IoTrack *t);
void qcow2_io_end(BDRVQcow2State *s, Qcow2IoTrack *t);

/*
 * Wait (lock held) until no allocation record overlaps the guest clusters
 * of [@offset, @offset + @bytes).
 */
void qcow2_wait_allocs(BDRVQcow2State *s, int64_t offset, int64_t bytes);
void qcow2_alloc_record_add(BDRVQcow2State *s, Qcow2AllocRecord *r,
                            int64_t start, int64_t end);
void qcow2_alloc_record_remove(BDRVQcow2State *s, Qcow2AllocRecord *r);

/* ---- qcow2-io.c: reads, writes ---- */

/*
 * Read the guest range [@offset, @offset + @bytes), which lies inside one
 * guest cluster whose L2 entry is @entry, into @buf: from the host, the
 * backing file, zeroes or a decompressed cluster.  No lock held.
 */
int qcow2_read_cluster_part(BDRVQcow2State *s, uint64_t entry,
                            int64_t offset, int64_t bytes, uint8_t *buf);

/*
 * One step of a request: do a prefix of [@offset, @offset + @bytes), which
 * starts @done bytes into the request (and its buffer, in @opaque), and
 * return its length (> 0) or -errno.
 */
typedef int64_t Qcow2StepFunc(BDRVQcow2State *s, int64_t offset,
                              int64_t bytes, int64_t done, void *opaque);

/* Run @step over [@offset, @offset + @bytes) until it is all done; 0 or
 * the first -errno. */
int qcow2_run_steps(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                    Qcow2StepFunc *step, void *opaque);

/* The data path, synchronous, on a worker thread; 0 or -errno. */
int qcow2_do_read(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                  uint8_t *buf);
int qcow2_do_write(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                   const uint8_t *buf, BdrvRequestFlags flags);
int qcow2_do_flush(BDRVQcow2State *s);

/* ---- qcow2-cluster.c: L1/L2 mapping ---- */

/*
 * Copy the L2 entries of up to @max guest clusters from the one holding
 * @offset, stopping at the end of its L2 table, into @entries; *@n gets
 * the count.  No L2 table reads as unallocated.  Lock held.
 */
int qcow2_l2_lookup(BDRVQcow2State *s, int64_t offset, int64_t max,
                    uint64_t *entries, int64_t *n);

/*
 * The start of a change to the guest range [@offset, @offset + @bytes):
 * take the lock, refuse a corrupt image (-EIO), qcow2_wait_allocs(), then
 * qcow2_l2_lookup() of up to @max clusters from @offset.  0 with the lock
 * held, or -errno with it released.
 */
int qcow2_lock_lookup(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                      int64_t max, uint64_t *entries, int64_t *n);

/*
 * Set the L2 entries of @n guest clusters from the one holding @offset
 * (inside one L2 table), allocating the L2 table or copying it when it is
 * shared.  The change is in the cache: durable at the next flush.  Lock
 * held.
 */
int qcow2_l2_set(BDRVQcow2State *s, int64_t offset, int64_t n,
                 const uint64_t *entries);

/*
 * Make sure the L2 table of @offset exists and may be changed, before
 * allocating the clusters it will point at (so that it comes first in the
 * file, as with QEMU, and does not split runs of data).  Lock held.
 */
int qcow2_l2_prepare(BDRVQcow2State *s, int64_t offset);

/*
 * Check an L2 entry before using it (lock held): the host cluster of a
 * NORMAL / ZERO_ALLOC entry aligned and inside the file, no zero flag in
 * a version 2 image.  *@host gets the host offset (0 for other kinds).
 * Signals the corruption and returns -EIO when bad.
 */
int qcow2_entry_host(BDRVQcow2State *s, uint64_t entry, int64_t *host);

/* May the data of @entry be overwritten where it is (NORMAL, COPIED,
 * refcount 1)?  Lock held. */
bool qcow2_entry_in_place(BDRVQcow2State *s, uint64_t entry);

/* write-zeroes and discard, synchronous. */
int qcow2_do_zeroes(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                    BdrvRequestFlags flags);
int qcow2_do_discard(BDRVQcow2State *s, int64_t offset, int64_t bytes);

/* Block status of [@offset, ...), extents appended to @out (depth 0 is
 * this layer).  Synchronous. */
int qcow2_do_block_status(BDRVQcow2State *s, int64_t offset, int64_t bytes,
                          GArray *out);

/* ---- qcow2-compress.c ---- */

/* Decompress one cluster of @s from the compressed @entry into @out. */
int qcow2_read_compressed(BDRVQcow2State *s, uint64_t entry, uint8_t *out);

/* Host range of a compressed entry: where the data starts, how many bytes
 * (the sectors it names) the refcounts cover. */
void qcow2_compressed_range(const BDRVQcow2State *s, uint64_t entry,
                            int64_t *offset, int64_t *length);

/*
 * A compressed write: each whole cluster (the last may end at the image
 * end) is stored compressed.  Clusters that are allocated already, that
 * do not shrink, or that the range only partly covers are written
 * normally.
 */
int qcow2_do_write_compressed(BDRVQcow2State *s, int64_t offset,
                              int64_t bytes, const uint8_t *buf);

/* ---- qcow2-deflate.c: thread-safe, for pool workers ---- */

/* Compressed clusters are raw deflate whose matches reach back at most
 * 2^12 bytes: QEMU inflates them with inflateInit2(-12). */
#define QCOW2_DEFLATE_WINDOW_BITS   12

/* Is the cluster @in (@cs bytes) worth a full deflate?  False when samples
 * of it do not shrink (random or already compressed data). */
bool qcow2_worth_compressing(const uint8_t *in, int64_t cs);

/*
 * Deflate the cluster @in (@cs bytes) into @out (room for @cs - 1 bytes)
 * as QEMU reads compressed clusters: raw deflate, matches at most 4 KiB
 * back.  Returns the compressed size, 0 when it does not shrink, or
 * -errno.
 */
int64_t qcow2_deflate(const uint8_t *in, int64_t cs, uint8_t *out);

/* "isa-l" or "zlib": what qcow2_deflate() runs (for info and tests). */
const char *qcow2_deflate_backend(void);

/* ---- qcow2-backing.c ---- */

/* Open the backing file named in @s's header (if any) into s->backing. */
bool qcow2_backing_open(BDRVQcow2State *s, GHashTable *chain,
                        GError **errp);
void qcow2_backing_close(Qcow2Backing *b);

/* Read through the backing file; past its end reads zeroes. */
int qcow2_backing_read(Qcow2Backing *b, int64_t offset, int64_t bytes,
                       uint8_t *buf);

/* Block status of the backing file over [@offset, @offset + @bytes),
 * which starts inside it; depth 0 = the backing file itself. */
int qcow2_backing_status(Qcow2Backing *b, int64_t offset, int64_t bytes,
                         GArray *out);

/* Append an extent, merging it into the last one when it continues it. */
void qcow2_extent_append(GArray *out, int64_t offset, int64_t length,
                         unsigned flags, int depth, int64_t host);

/* ---- qcow2-check.c, qcow2-repair.c ---- */

/* What a check counted, per host cluster of the file. */
typedef struct Qcow2Counts {
    int64_t nb;                 /* host clusters */
    uint32_t *refs;             /* references found (g_free) */
    uint32_t *rc;               /* refcounts on disk (g_free) */
} Qcow2Counts;

/*
 * qcow2_check() on the layer @s; with @counts non-NULL, also hands over
 * the references and refcounts it counted.
 */
bool qcow2_check_state(BDRVQcow2State *s, BdrvCheckResult *res,
                       Qcow2Counts *counts, GError **errp);

/*
 * Open @filename (its top layer only, without the backing file) for a
 * repair: read-write when @writable, where the dirty and corrupt bits are
 * no reason to refuse and no write guard is built.  Blocking.
 */
BDRVQcow2State *qcow2_state_open_repair(const char *filename, bool writable,
                                        GError **errp);

/* ---- qcow2-create.c ---- */

typedef struct Qcow2CreateParams {
    int64_t size;               /* rounded up to 512 */
    int cluster_bits;
    bool prealloc_metadata;
    const char *backing_file;
    const char *backing_format;
    bool small_reftable;        /* tests: one reftable cluster, as qemu-img
                                 * does, so that writes must grow it */
} Qcow2CreateParams;

bool qcow2_create_file(const char *filename, const Qcow2CreateParams *p,
                       GError **errp);
bool qcow2_create(const char *filename, int64_t size, GHashTable *options,
                  GError **errp);

#endif /* BLOCK_QCOW2_INT_H */
