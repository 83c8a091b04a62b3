/*
 * NBD server: the export table.  A server serves any number of named
 * exports; a connection picks one by name (NBD_OPT_GO, NBD_OPT_EXPORT_NAME)
 * and keeps it until it is freed.  Removing an export unlists it at once
 * (the others go on serving); it is gone, its node released, once the
 * requests of the connections that selected it have completed.  See
 * block/export/nbd-server-int.h for the reference counting.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/export/nbd-server-int.h"

/* The block sizes advertised for @exp's node. */
static void nbdsrv_export_set_limits(NbdExport *exp)
{
    uint32_t align = bdrv_get_request_alignment(exp->bs);
    int64_t opt = bdrv_get_opt_transfer(exp->bs);

    /* io.c pads anything, so the minimum is only a hint of efficiency;
     * the protocol caps it at 64 KiB. */
    exp->min_block = is_power_of_2(align) && align <= 64 * KiB ? align : 1;
    exp->pref_block = MAX(4096, exp->min_block);
    if (is_power_of_2(opt) && opt <= 2 * MiB) {
        exp->pref_block = MAX(exp->pref_block, opt);
    }
    exp->max_block = NBDSRV_MAX_PAYLOAD;
}

NbdExport *nbdsrv_export_add(NbdServer *srv, BlockDriverState *bs,
                             const char *name, const char *description,
                             bool writable, GError **errp)
{
    NbdExport *exp;
    int64_t size;

    name = name ? name : "";
    if (strlen(name) > NBD_MAX_STRING || !g_utf8_validate(name, -1, NULL)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "export name '%s' too long", name);
        return NULL;
    }
    if (description && (strlen(description) > NBD_MAX_STRING ||
                        !g_utf8_validate(description, -1, NULL))) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "description '%s' too long", description);
        return NULL;
    }
    if (nbdsrv_export_find(srv, name)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "NBD server already has export named '%s'", name);
        return NULL;
    }
    if (writable && !bdrv_is_writable(bs)) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_INVALID,
                    "Cannot export read-only node as writable");
        return NULL;
    }
    size = bdrv_getlength(bs);
    if (size < 0) {
        g_set_error(errp, BLOCK_ERROR, BLOCK_ERROR_IO, "'%s': %s",
                    bdrv_get_filename(bs), g_strerror(-size));
        return NULL;
    }
    exp = g_new0(NbdExport, 1);
    exp->srv = srv;
    exp->refcnt = 1;
    exp->listed = true;
    exp->link.data = exp;
    exp->name = g_strdup(name);
    exp->description = g_strdup(description);
    exp->bs = bdrv_ref(bs);
    exp->read_only = !writable;
    exp->size = size;
    nbdsrv_export_set_limits(exp);
    g_queue_push_tail_link(&srv->exports, &exp->link);
    return exp;
}

NbdExport *nbdsrv_export_lookup(NbdServer *srv, const uint8_t *name,
                                uint32_t len)
{
    for (GList *l = srv->exports.head; l; l = l->next) {
        NbdExport *exp = l->data;

        if (strlen(exp->name) == len && !memcmp(exp->name, name, len)) {
            return exp;
        }
    }
    /* nbdsrv_new()'s single export is also the default one. */
    return len == 0 ? srv->default_exp : NULL;
}

NbdExport *nbdsrv_export_find(NbdServer *srv, const char *name)
{
    for (GList *l = srv->exports.head; l; l = l->next) {
        NbdExport *exp = l->data;

        if (!strcmp(exp->name, name)) {
            return exp;
        }
    }
    return NULL;
}

void nbdsrv_export_set_gone_cb(NbdExport *exp, void (*fn)(void *opaque),
                               void *opaque)
{
    exp->gone = fn;
    exp->gone_opaque = opaque;
}

void nbdsrv_export_ref(NbdExport *exp)
{
    exp->refcnt++;
}

static gboolean nbdsrv_export_reap_cb(gpointer opaque)
{
    nbdsrv_export_reap(opaque);
    return G_SOURCE_REMOVE;
}

void nbdsrv_export_unref(NbdExport *exp)
{
    NbdServer *srv = exp->srv;

    g_assert(exp->refcnt > 0);
    if (--exp->refcnt) {
        return;
    }
    g_assert(!exp->listed && !exp->clients && !exp->in_flight);
    g_queue_push_tail_link(&srv->dead, &exp->link);
    if (!srv->reap_src) {
        /* We may be inside a completion of its node: release it from
         * the main loop. */
        srv->reap_src = nbdsrv_timer(srv, G_PRIORITY_DEFAULT, 0,
                                     nbdsrv_export_reap_cb, srv);
    }
}

void nbdsrv_export_reap(NbdServer *srv)
{
    GList *l;

    nbdsrv_source_clear(&srv->reap_src);
    while ((l = g_queue_pop_head_link(&srv->dead))) {
        NbdExport *exp = l->data;

        bdrv_unref(exp->bs);
        if (exp->gone) {
            exp->gone(exp->gone_opaque);
        }
        g_free(exp->name);
        g_free(exp->description);
        g_free(exp);
    }
}

/* Take @exp out of the table: no new client selects it. */
static void nbdsrv_export_unlist(NbdExport *exp)
{
    NbdServer *srv = exp->srv;

    exp->listed = false;
    g_queue_unlink(&srv->exports, &exp->link);
    if (srv->default_exp == exp) {
        srv->default_exp = NULL;
    }
    nbdsrv_export_unref(exp);   /* the table's reference */
}

void nbdsrv_export_remove(NbdExport *exp, bool hard)
{
    NbdServer *srv = exp->srv;
    GList *l = srv->clients.head;

    if (!exp->listed) {
        return;
    }
    while (hard && l) {
        NbdClient *c = l->data;

        l = l->next;    /* closing may free c */
        if (c->exp == exp) {
            nbdsrv_client_close(c, false);
        }
    }
    nbdsrv_export_unlist(exp);
    if (!g_queue_is_empty(&srv->dead)) {
        /* The control path: nothing of the block layer is on the stack,
         * so the export goes now if nothing was in flight. */
        nbdsrv_export_reap(srv);
    }
}

void nbdsrv_export_remove_all(NbdServer *srv)
{
    while (!g_queue_is_empty(&srv->exports)) {
        nbdsrv_export_unlist(g_queue_peek_head(&srv->exports));
    }
}

bool nbdsrv_export_in_use(NbdExport *exp)
{
    return exp->refcnt > (exp->listed ? 1 : 0);
}

bool nbdsrv_export_is_removed(NbdExport *exp)
{
    return !exp->listed;
}

unsigned nbdsrv_export_get_client_count(NbdExport *exp)
{
    return exp->clients;
}

uint64_t nbdsrv_export_get_in_flight(NbdExport *exp)
{
    return exp->in_flight;
}
