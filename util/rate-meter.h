/*
 * A rate meter: bytes per second, averaged over recent half-second
 * windows (exponentially weighted, so a few seconds of history count).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef UTIL_RATE_METER_H
#define UTIL_RATE_METER_H

#include <stdint.h>

typedef struct RateMeter {
    int64_t window_start_ns;    /* 0: not started */
    int64_t window_bytes;       /* counted in the current window */
    double rate;                /* bytes per second */
} RateMeter;

/* Start (or restart) measuring at @now_ns. */
void rate_meter_reset(RateMeter *m, int64_t now_ns);

/* Count @bytes at time @now_ns. */
void rate_meter_add(RateMeter *m, int64_t now_ns, int64_t bytes);

/* The rate in bytes per second at @now_ns (decays while idle). */
double rate_meter_get(RateMeter *m, int64_t now_ns);

#endif /* UTIL_RATE_METER_H */
