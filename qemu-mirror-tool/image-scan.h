/*
 * image-scan: read one or two images side by side, in parallel, the way
 * the mirror's copy loop reads its source (compare, checksum, --verify).
 *
 * The range is cut into chunks in offset order from block status: a run
 * where every image reads as zero is no chunk and reads nothing; any
 * other run is read in chunks of at most chunk-size bytes, only from the
 * images whose status does not say zero, with up to max-in-flight chunks
 * at once (an NBD node spreads them over its connections).  When a
 * chunk's reads are done, the caller's work function runs on the I/O
 * thread pool as CPU work (both CPUs compare or hash), then its done
 * function on the main loop.  Chunks are planned in order but finish in
 * any order.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef IMAGE_SCAN_H
#define IMAGE_SCAN_H

#include "block/block.h"

#define IMAGE_SCAN_MAX_IMAGES 2

/*
 * Defaults of --chunk-size and -m: the mirror's chunk and window; but
 * when every image is a file in memory (page-cache copies, CPU work) 4
 * chunks in flight, which keep the buffers in the CPUs' caches between
 * the read and the comparison (bench/README.md, "Compare and checksum").
 */
#define IMAGE_SCAN_DEFAULT_CHUNK     (1 * 1024 * 1024)
#define IMAGE_SCAN_DEFAULT_IN_FLIGHT 16
#define IMAGE_SCAN_MEMORY_IN_FLIGHT  4

typedef struct ImageScan ImageScan;

/* One unit of the scan. */
typedef struct ImageScanChunk {
    int64_t offset;
    int64_t bytes;
    /*
     * The bytes of each image at [offset, offset + bytes), or NULL where
     * that image reads as zero by its block status or lies past its end
     * (nothing was read).  NULL for every image in the plan hook.
     */
    const uint8_t *data[IMAGE_SCAN_MAX_IMAGES];
    /* The BDRV_BLOCK_* status of each image here; 0 past its end.  A
     * chunk lies inside one status run of every image, except a chunk
     * widened to the alignment (then the status of its first byte). */
    unsigned flags[IMAGE_SCAN_MAX_IMAGES];
    bool zero_run;              /* every image reads as zero here: nothing
                                 * is read, no work or done follows */
    void *user;                 /* the caller's, set by its plan hook */
    int64_t result;             /* the caller's, set by its work */

    /* private */
    ImageScan *scan;
    void *buf[IMAGE_SCAN_MAX_IMAGES];
    BdrvMapping map[IMAGE_SCAN_MAX_IMAGES];
    int pending;
    int ret;
    int err_image;
} ImageScanChunk;

/* Called on the main loop for every chunk and zero run, in offset order,
 * before anything of it is read. */
typedef void ImageScanPlanFunc(void *opaque, ImageScanChunk *c);
/* Called on a pool worker for every chunk that was read; it may only
 * read @c's data and set @c->result (and what @c->user points to). */
typedef void ImageScanWorkFunc(void *opaque, ImageScanChunk *c);
/* Called on the main loop after the work of every chunk read, in any
 * order; @c's data is released afterwards. */
typedef void ImageScanDoneFunc(void *opaque, ImageScanChunk *c);

typedef struct ImageScanConfig {
    BlockDriverState *bs[IMAGE_SCAN_MAX_IMAGES];
    int n;                      /* images: 1 or 2 */
    int64_t start;              /* scan [start, end); images shorter */
    int64_t end;                /* than end read as zero past theirs */
    int64_t chunk_size;         /* 0: IMAGE_SCAN_DEFAULT_CHUNK */
    int max_in_flight;          /* chunks; 0: the default (above) */
    /*
     * Chunk and zero-run boundaries fall on multiples of @align (or at
     * @end); a block of @align bytes that is partly zero and partly not
     * is read whole.  1 (or 0): any boundary.
     */
    int64_t align;
    const bool *interrupt;      /* true: plan nothing more (a signal
                                 * arrived); NULL: never */
    ImageScanPlanFunc *plan;    /* optional */
    ImageScanWorkFunc *work;
    ImageScanDoneFunc *done;    /* optional */
    void *opaque;
} ImageScanConfig;

/* Where the scan failed. */
typedef struct ImageScanError {
    int ret;                    /* 0 or -errno */
    int image;                  /* index of the image that failed */
    bool status;                /* block status failed, not a read */
    int64_t offset;             /* the failed request's offset */
} ImageScanError;

/*
 * Scan as @cfg says, iterating the main loop (which keeps serving
 * everything else) until every planned chunk is done.  A failed request
 * stops planning; the one with the lowest offset goes to @err.  Returns
 * 0 or the error's -errno.
 */
int image_scan_run(const ImageScanConfig *cfg, ImageScanError *err);

/* From a callback: plan nothing more at or past @offset (chunks in flight
 * still finish). */
void image_scan_stop_at(ImageScan *s, int64_t offset);

/*
 * The engine options of the commands that scan (compare, checksum) as
 * typed: -m, --chunk-size, --connections; NULL when not given.
 */
typedef struct ImageScanOpts {
    char *parallel;
    char *chunk;
    char *connections;
} ImageScanOpts;

void image_scan_opts_clear(ImageScanOpts *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(ImageScanOpts, image_scan_opts_clear)

/* Their GOptionEntry lines; @chunk_min: the smallest --chunk-size, as
 * the help says it ("4K"). */
#define IMAGE_SCAN_ENTRIES(o, chunk_min) \
    { "parallel", 'm', 0, G_OPTION_ARG_STRING, &(o)->parallel, \
      "chunks read at once, 1..1024 (default 4 when every image is " \
      "a file in memory, else 16)", "N" }, \
    { "chunk-size", 0, 0, G_OPTION_ARG_STRING, &(o)->chunk, \
      "largest single read, power of 2 in " chunk_min "..64M " \
      "(default 1M)", "SIZE" }, \
    { "connections", 0, 0, G_OPTION_ARG_STRING, &(o)->connections, \
      "NBD connections per NBD image, 1..16 (default: CPUs up to 4)", \
      "N" }

/*
 * Check @o: *@chunk_size and *@max_in_flight for ImageScanConfig (0: the
 * defaults), the connection count into @nbd_opts.  False after printing
 * one line naming the bad value.
 */
bool image_scan_parse_opts(const ImageScanOpts *o, GHashTable *nbd_opts,
                           int64_t *chunk_size, int *max_in_flight);

#endif /* IMAGE_SCAN_H */
