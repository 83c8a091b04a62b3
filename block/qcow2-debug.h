/*
 * qcow2-lite test instrumentation, built only with -Dtest-hooks=true
 * (config-host.h's CONFIG_TEST_HOOKS: CI's test builds): the crash test
 * kills the process before a chosen change to an image file.  In any
 * other build qcow2_debug_change() is an empty inline and the binary has
 * no trace of it.  Implemented in qcow2-file.c.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef BLOCK_QCOW2_DEBUG_H
#define BLOCK_QCOW2_DEBUG_H

#include "config-host.h"

#ifdef CONFIG_TEST_HOOKS
/*
 * Off unless the environment variable QCOW2_DEBUG_ENV holds
 * comma-separated keys (tests/qtest-like/test-tool-qcow2-crash.sh sets
 * it):
 *   kill-at=N    SIGKILL the process just before its N-th change to an
 *                image file (a write, a sync or a truncate, counted over
 *                all images and threads), as a crash would stop it;
 *   count=PATH   write the kinds of the changes to PATH at exit, one
 *                letter per change: W write, S sync, T truncate.
 * A bad value aborts (it is for tests).  qcow2_debug_change(KIND) is
 * called before every such change.
 */
#define QCOW2_DEBUG_ENV "QEMU_MIRROR_QCOW2_DEBUG"
void qcow2_debug_change(char kind);
#else
static inline void qcow2_debug_change(char kind)
{
}
#endif

#endif /* BLOCK_QCOW2_DEBUG_H */
