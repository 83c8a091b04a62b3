/*
 * libqtest: JSON access by path, image files and scratch directories.
 * See libqtest.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "tests/qtest-like/libqtest-int.h"
#include "tests/qtest-like/test-util.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <unistd.h>

/* ---- JSON paths ---- */

JsonNode *qtest_json_get(JsonObject *o, const char *path)
{
    g_auto(GStrv) parts = g_strsplit(path, "/", -1);
    JsonNode *n = NULL;

    for (int i = 0; parts[i]; i++) {
        if (i == 0) {
            n = json_object_get_member(o, parts[i]);
        } else if (JSON_NODE_HOLDS_OBJECT(n)) {
            n = json_object_get_member(json_node_get_object(n), parts[i]);
        } else if (JSON_NODE_HOLDS_ARRAY(n)) {
            JsonArray *a = json_node_get_array(n);
            guint64 idx = g_ascii_strtoull(parts[i], NULL, 10);

            n = idx < json_array_get_length(a)
                ? json_array_get_element(a, idx) : NULL;
        } else {
            n = NULL;
        }
        if (!n) {
            return NULL;
        }
    }
    return n;
}

bool qtest_json_has(JsonObject *o, const char *path)
{
    return qtest_json_get(o, path) != NULL;
}

static JsonNode *qtest_json_typed(JsonObject *o, const char *path,
                                  GType type)
{
    JsonNode *n = qtest_json_get(o, path);

    if (!n || !JSON_NODE_HOLDS_VALUE(n) ||
        json_node_get_value_type(n) != type) {
        g_autofree char *text = qtest_json_to_string(o);

        qtest_die(NULL, "'%s' missing or not a %s in %s", path,
                  g_type_name(type), text);
    }
    return n;
}

const char *qtest_json_str(JsonObject *o, const char *path)
{
    return json_node_get_string(qtest_json_typed(o, path, G_TYPE_STRING));
}

int64_t qtest_json_int(JsonObject *o, const char *path)
{
    return json_node_get_int(qtest_json_typed(o, path, G_TYPE_INT64));
}

bool qtest_json_bool(JsonObject *o, const char *path)
{
    return json_node_get_boolean(qtest_json_typed(o, path, G_TYPE_BOOLEAN));
}

char *qtest_json_to_string(JsonObject *o)
{
    g_autoptr(JsonNode) n = json_node_init_object(json_node_alloc(), o);

    return json_to_string(n, FALSE);
}

/* ---- files ---- */

void qtest_write_random_file(const char *path, int64_t bytes, uint32_t seed)
{
    g_autoptr(GRand) r = g_rand_new_with_seed(seed);
    g_autofree uint32_t *buf = g_new(uint32_t, (bytes + 3) / 4 + 1);
    g_autoptr(GError) err = NULL;

    for (int64_t i = 0; i < (bytes + 3) / 4; i++) {
        buf[i] = g_rand_int(r);
    }
    g_file_set_contents(path, (const char *)buf, bytes, &err);
    g_assert_no_error(err);
}

void qtest_write_sparse_file(const char *path, int64_t bytes)
{
    FILE *f = fopen(path, "w");

    g_assert_nonnull(f);
    g_assert_cmpint(ftruncate(fileno(f), bytes), ==, 0);
    fclose(f);
}

void qtest_assert_files_equal(const char *a, const char *b)
{
    g_autofree char *da = NULL;
    g_autofree char *db = NULL;
    gsize la, lb;
    g_autoptr(GError) err = NULL;

    g_file_get_contents(a, &da, &la, &err);
    g_assert_no_error(err);
    g_file_get_contents(b, &db, &lb, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(la, ==, lb);
    for (gsize i = 0; i < la; i++) {
        if (da[i] != db[i]) {
            qtest_die(NULL, "'%s' and '%s' differ first at byte %"
                      G_GSIZE_FORMAT, a, b, i);
        }
    }
}

QTestImages *qtest_images_new(int64_t size)
{
    static uint32_t seed = 1;
    QTestImages *im = g_new0(QTestImages, 1);

    im->dir = test_scratch_new();
    im->src = g_build_filename(im->dir, "src.raw", NULL);
    im->dst = g_build_filename(im->dir, "dst.raw", NULL);
    im->trigger = g_build_filename(im->dir, "trigger", NULL);
    im->size = size;
    qtest_write_random_file(im->src, size, seed++);
    qtest_write_sparse_file(im->dst, size);
    return im;
}

void qtest_images_free(QTestImages *im)
{
    if (!im) {
        return;
    }
    test_scratch_free(im->dir);
    g_free(im->src);
    g_free(im->dst);
    g_free(im->trigger);
    g_free(im);
}

void qtest_images_set_trigger(QTestImages *im, bool on)
{
    if (on) {
        g_autoptr(GError) err = NULL;

        g_file_set_contents(im->trigger, "", 0, &err);
        g_assert_no_error(err);
    } else {
        g_assert_cmpint(g_unlink(im->trigger), ==, 0);
    }
}
