/*
 * Progress meter text.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/progress.h"
#include "util/cutils.h"

void progress_render(GString *out, int64_t done, int64_t total,
                     int64_t elapsed_ns, int width)
{
    double frac = total > 0 ? (double)done / total : 1.0;
    double secs = elapsed_ns / 1e9;
    double rate = secs > 0 ? done / secs : 0;
    g_autofree char *sdone = size_to_str(done);
    g_autofree char *stotal = size_to_str(total);
    g_autofree char *srate = size_to_str((int64_t)rate);
    g_autoptr(GString) tail = g_string_new(NULL);
    int bar;

    frac = CLAMP(frac, 0.0, 1.0);
    g_string_printf(tail, " %5.1f%%  %s / %s  %s/s", frac * 100, sdone,
                    stotal, srate);
    if (rate > 0 && done < total) {
        int64_t eta = (int64_t)((total - done) / rate + 0.5);

        g_string_append_printf(tail, "  ETA %" G_GINT64_FORMAT ":%02d",
                               eta / 60, (int)(eta % 60));
    }
    bar = width - 2 - (int)tail->len;
    g_string_truncate(out, 0);
    if (bar >= 10) {
        int fill = (int)(frac * bar);

        g_string_append_c(out, '[');
        for (int i = 0; i < bar; i++) {
            g_string_append_c(out, i < fill ? '=' : (i == fill ? '>' : ' '));
        }
        g_string_append_c(out, ']');
    }
    g_string_append(out, tail->str);
}
