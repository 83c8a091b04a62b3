/*
 * image-compare: the first difference between two images, found with
 * image-scan (block status first, parallel reads), reported the way
 * qemu-img compare reports it.  compare and --verify use it.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef IMAGE_COMPARE_H
#define IMAGE_COMPARE_H

#include "qemu-mirror-tool/image-scan.h"
#include "util/hbitmap.h"

typedef struct ImageCompare {
    BlockDriverState *bs[2];
    int64_t start;              /* compare [start, end); an image shorter */
    int64_t end;                /* than end reads as zero past its end */
    int64_t chunk_size;         /* 0: default (image-scan.h) */
    int max_in_flight;          /* 0: default */
    bool strict;                /* a block status difference counts */
    const bool *interrupt;      /* true: stop early; NULL: never */
    /*
     * Bytes not to compare (items are bytes; size at least @end), or
     * NULL.  Read on the main loop only, when a chunk differs: it may grow
     * while the compare runs.
     */
    const HBitmap *skip;
} ImageCompare;

typedef enum ImageCompareOutcome {
    IMAGE_COMPARE_SAME,
    IMAGE_COMPARE_CONTENT,      /* the contents differ at @offset */
    IMAGE_COMPARE_STATUS,       /* strict: block status differs at @offset */
    IMAGE_COMPARE_ERROR,        /* a request failed first: @err */
} ImageCompareOutcome;

typedef struct ImageCompareResult {
    ImageCompareOutcome outcome;
    /*
     * CONTENT: where qemu-img compare says "Content mismatch at offset
     * N!": the start of the first differing 512-byte sector (counted
     * from the start of the status run, as qemu-img does).  STATUS:
     * the start of the status run that differs.
     */
    int64_t offset;
    int64_t byte;               /* CONTENT: the first differing byte */
    ImageScanError err;         /* ERROR */
} ImageCompareResult;

/* Compare as @cmp says, iterating the main loop; fills @res. */
void image_compare_run(const ImageCompare *cmp, ImageCompareResult *res);

#endif /* IMAGE_COMPARE_H */
