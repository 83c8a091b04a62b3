/*
 * The daemon's NBD server and exports (daemon.h): nbd-server-start,
 * nbd-server-stop, block-export-add, block-export-del,
 * query-block-exports.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/daemon.h"

void daemon_export_register(Daemon *d)
{
}

void daemon_exports_moved(Daemon *d, DaemonNode *from, DaemonNode *to)
{
}

int daemon_exports_stop(Daemon *d)
{
    return 0;
}
