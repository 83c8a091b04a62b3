/*
 * A rate meter over half-second windows.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "util/rate-meter.h"

#define RATE_WINDOW_NS  (500 * 1000 * 1000LL)
#define RATE_WEIGHT     0.25

void rate_meter_reset(RateMeter *m, int64_t now_ns)
{
    m->window_start_ns = now_ns;
    m->window_bytes = 0;
    m->rate = 0;
}

/* Close every full window before @now_ns. */
static void rate_meter_advance(RateMeter *m, int64_t now_ns)
{
    if (!m->window_start_ns) {
        rate_meter_reset(m, now_ns);
        return;
    }
    while (now_ns - m->window_start_ns >= RATE_WINDOW_NS) {
        double w = m->window_bytes * 1e9 / RATE_WINDOW_NS;

        m->rate = m->rate * (1 - RATE_WEIGHT) + w * RATE_WEIGHT;
        m->window_bytes = 0;
        m->window_start_ns += RATE_WINDOW_NS;
        if (now_ns - m->window_start_ns > 20 * RATE_WINDOW_NS) {
            /* Idle for long: the average has decayed to nothing. */
            rate_meter_reset(m, now_ns);
        }
    }
}

void rate_meter_add(RateMeter *m, int64_t now_ns, int64_t bytes)
{
    rate_meter_advance(m, now_ns);
    m->window_bytes += bytes;
}

double rate_meter_get(RateMeter *m, int64_t now_ns)
{
    rate_meter_advance(m, now_ns);
    return m->rate;
}
