/*
 * mirror-tool compare: are two images' contents the same?  The output and
 * exit codes of qemu-img compare, read with image-compare (block status
 * first, both images in parallel, several requests in flight).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/tool.h"
#include "qemu-mirror-tool/image-compare.h"
#include "util/cutils.h"

#include <stdio.h>

/* qemu-img compare's exit codes beyond 0 (same), 1 (different) and 2
 * (an image could not be opened, or bad usage). */
enum {
    COMPARE_EXIT_STATUS_ERROR = 3,
    COMPARE_EXIT_READ_ERROR = 4,
};

int cmd_compare(int argc, char **argv)
{
    g_autofree char *fmt_a = NULL;
    g_autofree char *fmt_b = NULL;
    g_auto(ImageScanOpts) so = { 0 };
    g_autoptr(GHashTable) nbd_opts = g_hash_table_new_full(
        g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(BlockDriverState) bs0 = NULL;
    g_autoptr(BlockDriverState) bs1 = NULL;
    gboolean strict = FALSE, quiet = FALSE, force_share = FALSE;
    ImageCompare cmp = { 0 };
    ImageCompareResult res;
    int64_t len[2];
    const char *name[2];
    int over;
    GOptionEntry entries[] = {
        { "a-format", 'f', 0, G_OPTION_ARG_STRING, &fmt_a,
          "format of A (default: probe)", "FMT" },
        { "b-format", 'F', 0, G_OPTION_ARG_STRING, &fmt_b,
          "format of B (default: probe)", "FMT" },
        { "strict", 's', 0, G_OPTION_ARG_NONE, &strict,
          "strict: images of different sizes, or with different "
          "allocation (block status), differ", NULL },
        { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
          "print nothing but errors: the exit code says", NULL },
        TOOL_FORCE_SHARE_ENTRY(&force_share),
        IMAGE_SCAN_ENTRIES(&so, "4K"),
        TOOL_NBD_TIMEOUT_ENTRIES,
        TOOL_THREADS_ENTRY,
        { NULL },
    };
    static const char summary[] =
        "Compare the contents of images A and B, as qemu-img compare:\n"
        "\"Images are identical.\" and exit 0, \"Content mismatch at offset\n"
        "N!\" and exit 1; 2: bad usage or an image could not be opened; 3: a\n"
        "block status request failed; 4: a read failed.  Images of\n"
        "different sizes compare the longer one's tail with zeroes, unless\n"
        "-s.";

    if (!tool_parse_options("A B", summary, entries, &argc, &argv) ||
        !tool_expect_args("compare", argc, 2, "two images") ||
        !tool_check_format("-f", fmt_a) ||
        !tool_check_format("-F", fmt_b) ||
        !image_scan_parse_opts(&so, nbd_opts, &cmp.chunk_size,
                               &cmp.max_in_flight)) {
        return TOOL_EXIT_USAGE;
    }
    for (int i = 0; i < 2; i++) {
        g_autoptr(GHashTable) opts = tool_open_options(argv[i + 1],
                                                       nbd_opts, NULL);
        BlockDriverState *bs = tool_open_image(
            NULL, argv[i + 1], i ? fmt_b : fmt_a,
            force_share ? BDRV_O_FORCE_SHARE : 0, opts);

        if (!bs) {
            return TOOL_EXIT_USAGE;
        }
        *(i ? &bs1 : &bs0) = bs;
        name[i] = argv[i + 1];
        len[i] = bdrv_getlength(bs);
    }
    if (strict && len[0] != len[1]) {
        if (!quiet) {
            printf("Strict mode: Image size mismatch!\n");
        }
        return tool_finish_stdout(TOOL_EXIT_FAILURE);
    }
    cmp.bs[0] = bs0;
    cmp.bs[1] = bs1;
    cmp.end = MAX(len[0], len[1]);
    cmp.strict = strict;
    image_compare_run(&cmp, &res);
    over = len[0] > len[1] ? 0 : 1;
    /* As qemu-img: the warning once the common part compared equal. */
    if (!quiet && len[0] != len[1] &&
        (res.outcome == IMAGE_COMPARE_SAME ||
         (res.outcome == IMAGE_COMPARE_CONTENT &&
          res.offset >= len[!over]) ||
         (res.outcome == IMAGE_COMPARE_ERROR &&
          res.err.offset >= len[!over]))) {
        printf("Warning: Image size mismatch!\n");
    }
    switch (res.outcome) {
    case IMAGE_COMPARE_SAME:
        if (!quiet) {
            printf("Images are identical.\n");
        }
        return tool_finish_stdout(TOOL_EXIT_OK);
    case IMAGE_COMPARE_CONTENT:
        if (!quiet) {
            printf("Content mismatch at offset %" G_GINT64_FORMAT "!\n",
                   res.offset);
        }
        return tool_finish_stdout(TOOL_EXIT_FAILURE);
    case IMAGE_COMPARE_STATUS:
        if (!quiet) {
            printf("Strict mode: Offset %" G_GINT64_FORMAT
                   " block status mismatch!\n", res.offset);
        }
        return tool_finish_stdout(TOOL_EXIT_FAILURE);
    case IMAGE_COMPARE_ERROR:
        break;
    }
    tool_finish_stdout(TOOL_EXIT_OK);
    if (res.err.status) {
        tool_error("block status of '%s' failed at offset %" G_GINT64_FORMAT
                   ": %s", name[res.err.image], res.err.offset,
                   g_strerror(-res.err.ret));
        return COMPARE_EXIT_STATUS_ERROR;
    }
    tool_error("error while reading offset %" G_GINT64_FORMAT " of '%s': %s",
               res.err.offset, name[res.err.image], g_strerror(-res.err.ret));
    return COMPARE_EXIT_READ_ERROR;
}
