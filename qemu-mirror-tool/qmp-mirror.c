/*
 * The daemon's jobs (daemon.h): blockdev-mirror, drive-mirror, and the
 * job commands over every job of the daemon.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"

void daemon_mirror_register(Daemon *d)
{
}

void daemon_jobs_stop(Daemon *d)
{
}
