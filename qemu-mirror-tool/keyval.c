/*
 * QEMU's keyval syntax into JSON arguments (keyval.h).  The grammar and
 * the error messages are QEMU's (util/keyval.c); the parser is ours.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/keyval.h"
#include "qemu-mirror-tool/qmp-json.h"

#include <string.h>

/* QEMU's limit on one key fragment (key_in_cur[128]). */
#define KEYVAL_MAX_FRAGMENT     127

G_DEFINE_QUARK(keyval-error-quark, keyval_error)

/*
 * The length of the QAPI name at @s (QEMU's parse_qapi_name(): an
 * optional downstream prefix "__RFQDN_", a letter, then letters, digits,
 * '-' and '_'), 0 if there is none.
 */
static size_t keyval_name_len(const char *s)
{
    const char *p = s;

    if (*p == '_') {
        if (*++p != '_') {
            return 0;
        }
        while (*++p && (g_ascii_isalnum(*p) || *p == '-' || *p == '.')) {
            /* the downstream prefix's domain */
        }
        if (*p != '_') {
            return 0;
        }
        p++;
    }
    if (!g_ascii_isalpha(*p)) {
        return 0;
    }
    while (*++p && (g_ascii_isalnum(*p) || *p == '-' || *p == '_')) {
        /* the rest of the name */
    }
    return p - s;
}

/* Is @key an index (a fragment of decimal digits)? */
static bool keyval_is_index(const char *key)
{
    return *key && strspn(key, "0123456789") == strlen(key);
}

/*
 * Put @value (NULL: an object, unless one is there already) as member
 * @name of @cur, where the key so far is @key..@key_end (for the error).
 * Returns the member's node, or NULL with @errp set when a string and an
 * object meet at one key.
 */
static JsonNode *keyval_put(JsonObject *cur, const char *name,
                            const char *value, const char *key,
                            const char *key_end, GError **errp)
{
    JsonNode *old = json_object_get_member(cur, name);

    if (old && JSON_NODE_HOLDS_OBJECT(old) == (value != NULL)) {
        g_set_error(errp, KEYVAL_ERROR, 0,
                    "Parameters '%.*s.*' used inconsistently",
                    (int)(key_end - key), key);
        return NULL;
    }
    if (old && !value) {
        return old;
    }
    if (value) {
        json_object_set_string_member(cur, name, value);
    } else {
        json_object_set_object_member(cur, name, json_object_new());
    }
    return json_object_get_member(cur, name);
}

/*
 * Parse one KEY=VALUE (or the implied key's value) at @params into @obj.
 * Returns where the next one starts, or NULL with @errp set.
 */
static const char *keyval_parse_one(JsonObject *obj, const char *params,
                                    const char *implied_key, GError **errp)
{
    size_t len = strcspn(params, "=,");
    const char *key = params, *key_end, *val_end = NULL, *s;
    char name[KEYVAL_MAX_FRAGMENT + 1];
    JsonObject *cur = obj;
    g_autoptr(GString) val = NULL;

    if (len && params[len] != '=' && implied_key) {
        key = implied_key;
        val_end = params + len;
        len = strlen(implied_key);
    }
    key_end = key + len;

    /* Each fragment of the key, @name the one before. */
    for (s = key;;) {
        size_t n = s != key && g_ascii_isdigit(*s) ? strspn(s, "0123456789")
                                                   : keyval_name_len(s);

        if (!n || (s + n < key_end && s[n] != '.')) {
            g_set_error(errp, KEYVAL_ERROR, 0, "Invalid parameter '%.*s'",
                        (int)(key_end - key), key);
            return NULL;
        }
        if (n > KEYVAL_MAX_FRAGMENT) {
            g_set_error(errp, KEYVAL_ERROR, 0, "Parameter%s '%.*s' is too "
                        "long", s != key || s + n != key_end ?
                        " fragment" : "", (int)n, s);
            return NULL;
        }
        if (s != key) {
            JsonNode *next = keyval_put(cur, name, NULL, key, s - 1, errp);

            if (!next) {
                return NULL;
            }
            cur = json_node_get_object(next);
        }
        memcpy(name, s, n);
        name[n] = '\0';
        s += n;
        if (*s != '.') {
            break;
        }
        s++;
    }

    if (val_end) {
        /* The implied key's value: up to the first ',', no escapes. */
        val = g_string_new_len(params, val_end - params);
        s = val_end + (*val_end == ',');
    } else {
        if (*s != '=') {
            g_set_error(errp, KEYVAL_ERROR, 0,
                        "Expected '=' after parameter '%.*s'",
                        (int)(s - key), key);
            return NULL;
        }
        val = g_string_new(NULL);
        for (s++; *s; s++) {
            if (*s == ',' && *++s != ',') {
                break;
            }
            g_string_append_c(val, *s);
        }
    }
    return keyval_put(cur, name, val->str, key, key_end, errp) ? s : NULL;
}

/*
 * Turn the objects under @node whose keys are all indexes into arrays,
 * depth first; @prefix is the key down to @node ("a.b.", or "").  Returns
 * @node or its array (a new node), or NULL with @errp set.
 */
static JsonNode *keyval_listify(JsonNode *node, const char *prefix,
                                GError **errp)
{
    JsonObject *obj = json_node_get_object(node);
    g_autoptr(GList) members = json_object_get_members(obj);
    g_autoptr(JsonArray) array = NULL;
    g_autofree JsonNode **elt = NULL;
    bool has_index = false, has_member = false;
    guint n = json_object_get_size(obj);
    guint64 max = 0;
    JsonNode *ret;

    for (GList *l = members; l; l = l->next) {
        const char *key = l->data;
        JsonNode *child = json_object_get_member(obj, key);

        if (keyval_is_index(key)) {
            has_index = true;
        } else {
            has_member = true;
        }
        if (JSON_NODE_HOLDS_OBJECT(child)) {
            g_autofree char *sub = g_strconcat(prefix, key, ".", NULL);
            JsonNode *now = keyval_listify(child, sub, errp);

            if (!now) {
                return NULL;
            }
            if (now != child) {
                json_object_set_member(obj, key, now);
            }
        }
    }
    if (has_index && has_member) {
        g_set_error(errp, KEYVAL_ERROR, 0,
                    "Parameters '%s*' used inconsistently", prefix);
        return NULL;
    }
    if (!has_index) {
        return node;
    }

    /*
     * Elements 0..n-1 must all be there.  With an index of n or more,
     * one below n is missing (or, were none, element n is): the first
     * missing one is named.
     */
    elt = g_new0(JsonNode *, n + 1);
    for (GList *l = members; l; l = l->next) {
        guint64 i = g_ascii_strtoull(l->data, NULL, 10);

        max = MAX(max, i);
        if (i < n) {
            elt[i] = json_object_get_member(obj, l->data);
        }
    }
    array = json_array_new();
    for (guint64 i = 0; i <= n && i <= max; i++) {
        if (!elt[i]) {
            g_set_error(errp, KEYVAL_ERROR, 0,
                        "Parameter '%s%" G_GUINT64_FORMAT "' missing",
                        prefix, i);
            return NULL;
        }
        json_array_add_element(array, json_node_copy(elt[i]));
    }
    ret = json_node_new(JSON_NODE_ARRAY);
    json_node_set_array(ret, array);
    return ret;
}

JsonObject *keyval_parse(const char *str, const char *implied_key,
                         GError **errp)
{
    g_autoptr(JsonNode) root = json_node_new(JSON_NODE_OBJECT);
    g_autoptr(JsonObject) obj = json_object_new();
    JsonNode *list;
    const char *s = str;

    json_node_set_object(root, obj);
    while (*s) {
        s = keyval_parse_one(obj, s, implied_key, errp);
        if (!s) {
            return NULL;
        }
        implied_key = NULL;
    }
    /* The top level has names, never indexes: it stays an object. */
    list = keyval_listify(root, "", errp);
    if (!list) {
        return NULL;
    }
    g_assert(list == root);
    return g_steal_pointer(&obj);
}

JsonObject *keyval_parse_option(const char *str, const char *implied_key,
                                bool *is_keyval, GError **errp)
{
    g_autoptr(JsonNode) root = NULL;

    *is_keyval = str[0] != '{';
    if (*is_keyval) {
        return keyval_parse(str, implied_key, errp);
    }
    root = qmp_json_parse(str, strlen(str), errp);
    if (!root) {
        return NULL;
    }
    /* Starting with '{', it can only be an object. */
    return json_object_ref(json_node_get_object(root));
}
