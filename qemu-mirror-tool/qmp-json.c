/*
 * The JSON reader and writer of the QMP server and client, in place of
 * json-glib's parser and generator; see qmp-json.h.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp.h"

#include <math.h>
#include <string.h>

/* ---- JSON output ---- */

/*
 * Why not json_generator_to_data(): it writes 1e20 as "1e+20.0" and
 * strings as they are, invalid UTF-8 included: not JSON.
 */

/*
 * JSON's two-character escapes: the letter after the backslash and the
 * character it stands for.  Both directions use this table; "\\/" is
 * read but '/' is written as it is.
 */
static const char qmp_json_escapes[][2] = {
    { '"', '"' }, { '\\', '\\' }, { 'b', '\b' }, { 'f', '\f' },
    { 'n', '\n' }, { 'r', '\r' }, { 't', '\t' }, { '/', '/' },
};

/* The letter that escapes @c on output, or 0 when @c is written as is. */
static char qmp_json_escape_letter(unsigned char c)
{
    for (size_t i = 0; i < G_N_ELEMENTS(qmp_json_escapes); i++) {
        if (qmp_json_escapes[i][1] == c && c != '/') {
            return qmp_json_escapes[i][0];
        }
    }
    return 0;
}

/* The character that the escape "\\@letter" stands for, or 0. */
static char qmp_json_escape_char(unsigned char letter)
{
    for (size_t i = 0; i < G_N_ELEMENTS(qmp_json_escapes); i++) {
        if (qmp_json_escapes[i][0] == letter) {
            return qmp_json_escapes[i][1];
        }
    }
    return 0;
}

static void qmp_json_write_string(GString *out, const char *str)
{
    g_autofree char *valid = g_utf8_make_valid(str, -1);

    g_string_append_c(out, '"');
    for (const char *p = valid; *p; p++) {
        unsigned char c = *p;
        char letter = qmp_json_escape_letter(c);

        if (letter) {
            g_string_append_c(out, '\\');
            g_string_append_c(out, letter);
        } else if (c < 0x20) {
            g_string_append_printf(out, "\\u%04x", c);
        } else {
            g_string_append_c(out, c);
        }
    }
    g_string_append_c(out, '"');
}

static void qmp_json_write(GString *out, JsonNode *node)
{
    switch (json_node_get_node_type(node)) {
    case JSON_NODE_OBJECT: {
        JsonObject *o = json_node_get_object(node);
        g_autoptr(GList) names = json_object_get_members(o);

        g_string_append_c(out, '{');
        for (GList *l = names; l; l = l->next) {
            if (l != names) {
                g_string_append_c(out, ',');
            }
            qmp_json_write_string(out, l->data);
            g_string_append_c(out, ':');
            qmp_json_write(out, json_object_get_member(o, l->data));
        }
        g_string_append_c(out, '}');
        break;
    }
    case JSON_NODE_ARRAY: {
        JsonArray *a = json_node_get_array(node);
        guint n = json_array_get_length(a);

        g_string_append_c(out, '[');
        for (guint i = 0; i < n; i++) {
            if (i) {
                g_string_append_c(out, ',');
            }
            qmp_json_write(out, json_array_get_element(a, i));
        }
        g_string_append_c(out, ']');
        break;
    }
    case JSON_NODE_NULL:
        g_string_append(out, "null");
        break;
    case JSON_NODE_VALUE:
        switch (json_node_get_value_type(node)) {
        case G_TYPE_INT64:
            g_string_append_printf(out, "%" G_GINT64_FORMAT,
                                   json_node_get_int(node));
            break;
        case G_TYPE_DOUBLE: {
            char buf[G_ASCII_DTOSTR_BUF_SIZE];
            double d = json_node_get_double(node);

            if (isfinite(d)) {
                g_string_append(out, g_ascii_formatd(buf, sizeof(buf),
                                                     "%.17g", d));
            } else {
                g_string_append(out, "null");
            }
            break;
        }
        case G_TYPE_BOOLEAN:
            g_string_append(out, json_node_get_boolean(node) ? "true"
                                                             : "false");
            break;
        case G_TYPE_STRING:
            qmp_json_write_string(out, json_node_get_string(node));
            break;
        default:
            g_string_append(out, "null");
        }
        break;
    }
}

char *qmp_json_to_string(JsonNode *node)
{
    GString *out = g_string_new(NULL);

    qmp_json_write(out, node);
    return g_string_free(out, FALSE);
}

/* ---- JSON ---- */

/*
 * Why not json_parser_load_from_data(): json-glib recurses once per
 * nesting level (100,000 '[' overflow the stack), keeps the last of
 * duplicate keys ({"execute": "query-jobs", "execute": "quit"} quits),
 * parses only the first of two values on a line, wraps integers beyond
 * int64 (a 100-digit id comes back as -1) and accepts what is not JSON
 * (single quotes, comments, hex numbers).  This parser keeps its own
 * stack of open containers and builds the tree with a JsonBuilder.
 */

#define QMP_JSON_ERROR(errp, ...) \
    g_set_error((errp), QMP_ERROR, QMP_ERROR_GENERIC, __VA_ARGS__)

typedef struct QmpJsonLevel {
    bool is_object;
    GHashTable *keys;           /* an object's keys so far, or NULL */
} QmpJsonLevel;

typedef struct QmpJsonParser {
    const char *s;
    size_t len;
    size_t pos;
    JsonBuilder *b;
    QmpJsonLevel *stack;        /* open containers, @cap allocated */
    int cap;
    int depth;
    /* The top-level object's "id": where its value starts, or SIZE_MAX. */
    size_t id_start;
    size_t id_end;
    bool in_id;
    JsonNode *scalar;           /* a top-level scalar (not in builder) */
} QmpJsonParser;

/* Add a scalar: to its container, or as the whole value. */
static void qmp_json_add(QmpJsonParser *p, JsonNode *n)
{
    if (p->depth) {
        json_builder_add_value(p->b, n);
    } else {
        p->scalar = n;
    }
}

bool qmp_json_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void qmp_json_skip_ws(QmpJsonParser *p)
{
    while (p->pos < p->len && qmp_json_is_ws(p->s[p->pos])) {
        p->pos++;
    }
}

/* "stray 'x'" for what cannot start a value; bytes as \xNN. */
static void qmp_json_stray(QmpJsonParser *p, GError **errp)
{
    unsigned char c = p->s[p->pos];

    if (c > 0x20 && c < 0x7f) {
        QMP_JSON_ERROR(errp, "JSON parse error, stray '%c'", c);
    } else {
        QMP_JSON_ERROR(errp, "JSON parse error, stray byte 0x%02x", c);
    }
}

static int qmp_json_hex4(const char *s)
{
    int v = 0;

    for (int i = 0; i < 4; i++) {
        int d = g_ascii_xdigit_value(s[i]);

        if (d < 0) {
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

/* A string at p->pos (the opening quote); the unescaped text. */
static char *qmp_json_string(QmpJsonParser *p, GError **errp)
{
    g_autoptr(GString) out = g_string_new(NULL);

    p->pos++;
    for (;;) {
        size_t run = p->pos;
        unsigned char c;

        while (run < p->len) {
            c = p->s[run];
            if (c == '"' || c == '\\' || c < 0x20) {
                break;
            }
            run++;
        }
        if (run > p->pos) {
            if (!g_utf8_validate_len(p->s + p->pos, run - p->pos, NULL)) {
                QMP_JSON_ERROR(errp, "JSON parse error, invalid UTF-8 "
                               "sequence in string");
                return NULL;
            }
            g_string_append_len(out, p->s + p->pos, run - p->pos);
            p->pos = run;
        }
        if (p->pos >= p->len) {
            QMP_JSON_ERROR(errp, "JSON parse error, missing closing quote");
            return NULL;
        }
        c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return g_string_free(g_steal_pointer(&out), FALSE);
        }
        if (c < 0x20) {
            QMP_JSON_ERROR(errp, "JSON parse error, control character "
                           "0x%02x in string", c);
            return NULL;
        }
        /* An escape. */
        if (p->pos + 1 >= p->len) {
            QMP_JSON_ERROR(errp, "JSON parse error, missing closing quote");
            return NULL;
        }
        c = p->s[p->pos + 1];
        p->pos += 2;
        if (qmp_json_escape_char(c)) {
            g_string_append_c(out, qmp_json_escape_char(c));
            continue;
        }
        switch (c) {
        case 'u': {
            int cp = p->pos + 4 <= p->len ? qmp_json_hex4(p->s + p->pos)
                                          : -1;

            if (cp < 0) {
                QMP_JSON_ERROR(errp, "JSON parse error, invalid hex escape "
                               "sequence in string");
                return NULL;
            }
            p->pos += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                int lo = p->pos + 6 <= p->len && p->s[p->pos] == '\\' &&
                         p->s[p->pos + 1] == 'u'
                         ? qmp_json_hex4(p->s + p->pos + 2) : -1;

                if (lo < 0xdc00 || lo > 0xdfff) {
                    QMP_JSON_ERROR(errp, "JSON parse error, invalid "
                                   "\\u escape (lone surrogate)");
                    return NULL;
                }
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                QMP_JSON_ERROR(errp, "JSON parse error, invalid \\u escape "
                               "(lone surrogate)");
                return NULL;
            } else if (cp == 0) {
                QMP_JSON_ERROR(errp, "JSON parse error, \\u0000 is not "
                               "supported");
                return NULL;
            }
            g_string_append_unichar(out, cp);
            break;
        }
        default:
            QMP_JSON_ERROR(errp, "JSON parse error, invalid escape sequence "
                           "in string");
            return NULL;
        }
    }
}

static bool qmp_json_digits(QmpJsonParser *p)
{
    size_t start = p->pos;

    while (p->pos < p->len && g_ascii_isdigit(p->s[p->pos])) {
        p->pos++;
    }
    return p->pos > start;
}

/* A number at p->pos, added to the builder. */
static bool qmp_json_number(QmpJsonParser *p, GError **errp)
{
    size_t start = p->pos;
    bool neg = false, is_int = true;
    uint64_t mag = 0;
    bool overflow = false;

    if (p->s[p->pos] == '-') {
        neg = true;
        p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '0') {
        p->pos++;
    } else if (!qmp_json_digits(p)) {
        QMP_JSON_ERROR(errp, "JSON parse error, invalid number");
        return false;
    }
    for (size_t i = start + neg; i < p->pos; i++) {
        unsigned d = p->s[i] - '0';

        if (mag > (UINT64_MAX - d) / 10) {
            overflow = true;
            break;
        }
        mag = mag * 10 + d;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        is_int = false;
        if (!qmp_json_digits(p)) {
            QMP_JSON_ERROR(errp, "JSON parse error, invalid number");
            return false;
        }
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        is_int = false;
        if (p->pos < p->len && (p->s[p->pos] == '+' ||
                                p->s[p->pos] == '-')) {
            p->pos++;
        }
        if (!qmp_json_digits(p)) {
            QMP_JSON_ERROR(errp, "JSON parse error, invalid number");
            return false;
        }
    }
    if (is_int && !overflow &&
        mag <= (uint64_t)INT64_MAX + (neg ? 1 : 0)) {
        qmp_json_add(p, json_node_init_int(json_node_alloc(),
                                           neg ? (int64_t)(0 - mag)
                                               : (int64_t)mag));
    } else {
        g_autofree char *tok = g_strndup(p->s + start, p->pos - start);
        double d = g_ascii_strtod(tok, NULL);

        /* QEMU keeps 1e400 as inf, which JSON cannot write back. */
        if (!isfinite(d)) {
            QMP_JSON_ERROR(errp, "JSON parse error, number out of range");
            return false;
        }
        qmp_json_add(p, json_node_init_double(json_node_alloc(), d));
    }
    return true;
}

static bool qmp_json_literal(QmpJsonParser *p, GError **errp)
{
    static const char *const words[] = { "true", "false", "null" };

    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);

        if (p->len - p->pos >= n && !memcmp(p->s + p->pos, words[i], n)) {
            p->pos += n;
            qmp_json_add(p, i == 2 ? json_node_init_null(json_node_alloc())
                                   : json_node_init_boolean(
                                         json_node_alloc(), i == 0));
            return true;
        }
    }
    qmp_json_stray(p, errp);
    return false;
}

static bool qmp_json_push(QmpJsonParser *p, bool is_object, GError **errp)
{
    if (p->depth >= QMP_JSON_MAX_DEPTH) {
        QMP_JSON_ERROR(errp, "JSON nesting depth limit exceeded");
        return false;
    }
    if (p->depth == p->cap) {
        p->cap = MIN(p->cap * 4, QMP_JSON_MAX_DEPTH);
        p->stack = g_renew(QmpJsonLevel, p->stack, p->cap);
    }
    p->stack[p->depth++] = (QmpJsonLevel) { .is_object = is_object };
    if (is_object) {
        json_builder_begin_object(p->b);
    } else {
        json_builder_begin_array(p->b);
    }
    return true;
}

static void qmp_json_pop(QmpJsonParser *p)
{
    QmpJsonLevel *l = &p->stack[--p->depth];

    if (l->keys) {
        g_hash_table_unref(l->keys);
        l->keys = NULL;
    }
    if (l->is_object) {
        json_builder_end_object(p->b);
    } else {
        json_builder_end_array(p->b);
    }
}

/* A member name at p->pos (a quote expected), then the colon. */
static bool qmp_json_key(QmpJsonParser *p, GError **errp)
{
    QmpJsonLevel *l = &p->stack[p->depth - 1];
    char *key;

    if (p->pos >= p->len) {
        QMP_JSON_ERROR(errp, "JSON parse error, premature end of input");
        return false;
    }
    if (p->s[p->pos] != '"') {
        QMP_JSON_ERROR(errp, "JSON parse error, key is not a string in "
                       "object");
        return false;
    }
    key = qmp_json_string(p, errp);
    if (!key) {
        return false;
    }
    if (!l->keys) {
        l->keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                        NULL);
    }
    if (g_hash_table_contains(l->keys, key)) {
        g_free(key);
        QMP_JSON_ERROR(errp, "JSON parse error, duplicate key");
        return false;
    }
    json_builder_set_member_name(p->b, key);
    p->in_id = p->depth == 1 && !strcmp(key, "id");
    g_hash_table_add(l->keys, key);
    qmp_json_skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != ':') {
        QMP_JSON_ERROR(errp, "JSON parse error, missing : in object pair");
        return false;
    }
    p->pos++;
    return true;
}

/*
 * The loop: read a value; after it, a separator or the end of its
 * container; a container that ends is a value read.
 */
static bool qmp_json_run(QmpJsonParser *p, GError **errp)
{
    for (;;) {
        bool id_value;

        /* A value. */
        qmp_json_skip_ws(p);
        if (p->pos >= p->len) {
            QMP_JSON_ERROR(errp, "JSON parse error, premature end of input");
            return false;
        }
        id_value = p->in_id;
        p->in_id = false;
        if (id_value) {
            p->id_start = p->pos;
        }
        switch (p->s[p->pos]) {
        case '{':
        case '[': {
            bool obj = p->s[p->pos] == '{';
            char close = obj ? '}' : ']';

            if (!qmp_json_push(p, obj, errp)) {
                return false;
            }
            p->pos++;
            qmp_json_skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == close) {
                p->pos++;
                qmp_json_pop(p);
                break;          /* an empty container: a value read */
            }
            if (obj && !qmp_json_key(p, errp)) {
                return false;
            }
            continue;           /* its first value */
        }
        case '"': {
            char *str = qmp_json_string(p, errp);

            if (!str) {
                return false;
            }
            qmp_json_add(p, json_node_init_string(json_node_alloc(), str));
            g_free(str);
            break;
        }
        case '-':
        case '0' ... '9':
            if (!qmp_json_number(p, errp)) {
                return false;
            }
            break;
        case ']':
        case '}':
        case ',':
        case ':':
            QMP_JSON_ERROR(errp, "JSON parse error, expecting value");
            return false;
        default:
            if (!qmp_json_literal(p, errp)) {
                return false;
            }
        }

        /* After a value: close containers, or go on to the next value. */
        for (;;) {
            QmpJsonLevel *l;
            char c;

            if (p->depth == 1 && p->id_start != SIZE_MAX &&
                p->id_end == SIZE_MAX) {
                p->id_end = p->pos;
            }
            if (!p->depth) {
                return true;
            }
            l = &p->stack[p->depth - 1];
            qmp_json_skip_ws(p);
            if (p->pos >= p->len) {
                QMP_JSON_ERROR(errp, "JSON parse error, premature end of "
                               "input");
                return false;
            }
            c = p->s[p->pos++];
            if (c == (l->is_object ? '}' : ']')) {
                qmp_json_pop(p);
                continue;
            }
            if (c != ',') {
                QMP_JSON_ERROR(errp, "JSON parse error, expected separator "
                               "in %s", l->is_object ? "dict" : "list");
                return false;
            }
            if (l->is_object) {
                qmp_json_skip_ws(p);
                if (!qmp_json_key(p, errp)) {
                    return false;
                }
            }
            break;
        }
    }
}

/* @text[@start, @end) without whitespace outside strings. */
static char *qmp_json_compact(const char *text, size_t start, size_t end)
{
    GString *out = g_string_sized_new(end - start);
    bool in_str = false;

    for (size_t i = start; i < end; i++) {
        char c = text[i];

        if (in_str) {
            g_string_append_c(out, c);
            if (c == '\\') {
                g_string_append_c(out, text[++i]);
            } else if (c == '"') {
                in_str = false;
            }
        } else if (!qmp_json_is_ws(c)) {
            g_string_append_c(out, c);
            in_str = c == '"';
        }
    }
    return g_string_free(out, FALSE);
}

JsonNode *qmp_json_parse_value(const char *text, size_t len, size_t *pos,
                               char **id_text, GError **errp)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    QmpJsonParser p = {
        .s = text, .len = len, .pos = *pos, .b = b,
        .stack = g_new(QmpJsonLevel, 16), .cap = 16,
        .id_start = SIZE_MAX, .id_end = SIZE_MAX,
    };
    bool ok = qmp_json_run(&p, errp);
    JsonNode *root = NULL;

    while (p.depth) {
        QmpJsonLevel *l = &p.stack[--p.depth];

        if (l->keys) {
            g_hash_table_unref(l->keys);
        }
    }
    g_free(p.stack);
    if (ok) {
        root = p.scalar ? p.scalar : json_builder_get_root(b);
        *pos = p.pos;
        if (id_text) {
            *id_text = p.id_end != SIZE_MAX
                       ? qmp_json_compact(text, p.id_start, p.id_end)
                       : NULL;
        }
    }
    return root;
}

JsonNode *qmp_json_parse(const char *text, size_t len, GError **errp)
{
    size_t pos = 0;
    JsonNode *root = qmp_json_parse_value(text, len, &pos, NULL, errp);

    while (root && pos < len && qmp_json_is_ws(text[pos])) {
        pos++;
    }
    if (root && pos < len) {
        json_node_unref(root);
        QMP_JSON_ERROR(errp, "JSON parse error, unexpected text after the "
                       "value");
        return NULL;
    }
    return root;
}
