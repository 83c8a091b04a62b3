/*
 * Progress meter text: a bar with percentage, amounts, rate and ETA.
 *
 * util/ never prints; callers write the rendered line where they like
 * (mirror-tool draws it on stderr, rewriting one line with '\r').
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_PROGRESS_H
#define UTIL_PROGRESS_H

#include <glib.h>
#include <stdint.h>

/*
 * Render one progress line of at most @width columns into @out (replacing
 * its contents): "[=======>      ]  45.0%  1.8 GiB / 4.0 GiB  900 MiB/s
 * ETA 0:03".  @done <= @total; @elapsed_ns is the time since the start.
 */
void progress_render(GString *out, int64_t done, int64_t total,
                     int64_t elapsed_ns, int width);

#endif /* UTIL_PROGRESS_H */
