/*
 * qcow2-lite test instrumentation: the QEMU_MIRROR_QCOW2_DEBUG knob that
 * the crash test uses to kill the process before a chosen change to an
 * image file and to shrink the metadata caches.  Implemented in
 * qcow2-file.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_DEBUG_H
#define BLOCK_QCOW2_DEBUG_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Test instrumentation, off unless the environment variable
 * QCOW2_DEBUG_ENV holds comma-separated keys (the crash test,
 * tests/qtest-like/test-tool-qcow2-crash.sh, sets it):
 *   kill-at=N    SIGKILL the process just before its N-th change to an
 *                image file (a write, a sync or a truncate, counted over
 *                all images and threads), as a crash would stop it;
 *   count=PATH   write the kinds of the changes to PATH at exit, one
 *                letter per change: W write, S sync, T truncate;
 *   l2-cache=N, rb-cache=N   cache sizes in tables (at least 4), so
 *                that small images evict, and so write metadata, early.
 * qcow2_debug_change(KIND) is called before every such change.
 */
#define QCOW2_DEBUG_ENV "QEMU_MIRROR_QCOW2_DEBUG"
void qcow2_debug_change(char kind);
int64_t qcow2_debug_cache_tables(bool is_l2, int64_t def);

#endif /* BLOCK_QCOW2_DEBUG_H */
