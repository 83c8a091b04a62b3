/*
 * The QMP server: UNIX socket, clients, negotiation, dispatch, events;
 * and the JSON reader and writer it uses instead of json-glib's (see
 * "---- JSON ----" for why).
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu-mirror-tool/qmp.h"
#include "util/sockets.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <math.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- JSON output ---- */

/*
 * Why not json_generator_to_data(): it writes 1e20 as "1e+20.0" and
 * strings as they are, invalid UTF-8 included: not JSON.
 */

static void qmp_json_write_string(GString *out, const char *str)
{
    g_autofree char *valid = g_utf8_make_valid(str, -1);

    g_string_append_c(out, '"');
    for (const char *p = valid; *p; p++) {
        unsigned char c = *p;

        switch (c) {
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\b':
            g_string_append(out, "\\b");
            break;
        case '\f':
            g_string_append(out, "\\f");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '\r':
            g_string_append(out, "\\r");
            break;
        case '\t':
            g_string_append(out, "\\t");
            break;
        default:
            if (c < 0x20) {
                g_string_append_printf(out, "\\u%04x", c);
            } else {
                g_string_append_c(out, c);
            }
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


/* After EMFILE/ENFILE, accept() again after this long (no busy loop). */
#define QMP_ACCEPT_BACKOFF_MS   100

G_DEFINE_QUARK(qmp-error-quark, qmp_error)

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

static bool qmp_json_is_ws(char c)
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
        switch (c) {
        case '"':
        case '\\':
        case '/':
            g_string_append_c(out, c);
            break;
        case 'b':
            g_string_append_c(out, '\b');
            break;
        case 'f':
            g_string_append_c(out, '\f');
            break;
        case 'n':
            g_string_append_c(out, '\n');
            break;
        case 'r':
            g_string_append_c(out, '\r');
            break;
        case 't':
            g_string_append_c(out, '\t');
            break;
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

typedef struct QmpCommand {
    QmpCommandFunc *fn;
    void *opaque;
} QmpCommand;

/*
 * A client lives until the server's idle callback frees it.  Whatever
 * must end it (a write error, the output cap, end of file) only marks it
 * dead: its callers up the stack (the line being handled, a command that
 * emits an event to every client) still hold it.
 */
typedef struct QmpClient {
    QmpServer *srv;
    int fd;
    guint in_watch;         /* 0 while paused, after EOF, once dead */
    guint out_watch;
    guint handshake_timer;  /* drops it unless it negotiates in time */
    GString *in;
    size_t in_scanned;      /* bytes of @in known to hold no newline */
    GString *out;
    int busy;               /* handling its requests: not to be freed */
    bool negotiated;
    bool paused;            /* too much unread output: requests wait */
    bool eof;               /* the peer sent all; close once out is sent */
    bool dead;              /* closed and freed by qmp_server_idle() */
} QmpClient;

struct QmpServer {
    SocketUnixListener listener;
    guint watch;                /* the listening socket; 0 in back-off */
    guint backoff;              /* re-enables watch after EMFILE */
    guint idle;                 /* frees dead clients, resumes paused */
    GHashTable *commands;       /* name -> QmpCommand */
    GList *clients;             /* QmpClient */
    int max_clients;
    unsigned handshake_limit_s; /* 0: no limit */
    size_t pause_output;
    size_t max_client_output;
    size_t max_total_output;
    size_t total_output;        /* queued for all live clients */
    void (*negotiated_cb)(void *opaque);
    void *negotiated_opaque;
};

static const char *const qmp_class_names[] = {
    [QMP_ERROR_GENERIC] = "GenericError",
    [QMP_ERROR_COMMAND_NOT_FOUND] = "CommandNotFound",
    [QMP_ERROR_DEVICE_NOT_ACTIVE] = "DeviceNotActive",
    [QMP_ERROR_DEVICE_NOT_FOUND] = "DeviceNotFound",
};

/* ---- client lifetime ---- */

static gboolean qmp_server_idle(gpointer opaque);

static void qmp_server_kick(QmpServer *srv)
{
    if (!srv->idle) {
        srv->idle = g_idle_add(qmp_server_idle, srv);
    }
}

/* Stop serving @c; it is freed from the main loop. */
static void qmp_client_kill(QmpClient *c, const char *why)
{
    if (c->dead) {
        return;
    }
    g_debug("qmp: dropping a client: %s", why);
    c->dead = true;
    c->srv->total_output -= c->out->len;
    g_string_truncate(c->out, 0);
    g_string_truncate(c->in, 0);
    c->in_scanned = 0;
    if (c->in_watch) {
        g_source_remove(c->in_watch);
        c->in_watch = 0;
    }
    if (c->out_watch) {
        g_source_remove(c->out_watch);
        c->out_watch = 0;
    }
    if (c->handshake_timer) {
        g_source_remove(c->handshake_timer);
        c->handshake_timer = 0;
    }
    shutdown(c->fd, SHUT_RDWR);
    qmp_server_kick(c->srv);
}

static void qmp_client_free(QmpClient *c)
{
    if (!c->dead) {
        qmp_client_kill(c, "server closing");
    }
    c->srv->clients = g_list_remove(c->srv->clients, c);
    close(c->fd);
    g_string_free(c->in, TRUE);
    g_string_free(c->out, TRUE);
    g_free(c);
}

/* ---- output ---- */

static gboolean qmp_client_writable(gint fd, GIOCondition cond,
                                    gpointer opaque)
{
    QmpClient *c = opaque;

    while (c->out->len) {
        ssize_t n = send(c->fd, c->out->str, c->out->len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return G_SOURCE_CONTINUE;
        }
        if (n < 0) {
            c->out_watch = 0;
            qmp_client_kill(c, g_strerror(errno));
            return G_SOURCE_REMOVE;
        }
        g_string_erase(c->out, 0, n);
        c->srv->total_output -= n;
    }
    c->out_watch = 0;
    if (c->eof) {
        qmp_client_kill(c, "end of file, all sent");
    } else if (c->paused) {
        qmp_server_kick(c->srv);    /* resume reading it */
    }
    return G_SOURCE_REMOVE;
}

/* The live client with the most unread output. */
static QmpClient *qmp_server_biggest(QmpServer *srv)
{
    QmpClient *big = NULL;

    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (!c->dead && (!big || c->out->len > big->out->len)) {
            big = c;
        }
    }
    return big;
}

/* Queue @text (a message without its line end) for @c. */
static void qmp_client_queue(QmpClient *c, const char *text, size_t len)
{
    QmpServer *srv = c->srv;

    if (c->dead) {
        return;
    }
    if (c->out->len + len + 2 > srv->max_client_output) {
        qmp_client_kill(c, "it does not read its replies");
        return;
    }
    g_string_append_len(c->out, text, len);
    g_string_append(c->out, "\r\n");
    srv->total_output += len + 2;
    if (!c->out_watch) {
        c->out_watch = g_unix_fd_add(c->fd, G_IO_OUT, qmp_client_writable,
                                     c);
    }
    while (srv->total_output > srv->max_total_output) {
        qmp_client_kill(qmp_server_biggest(srv),
                        "the clients together do not read");
    }
}

/* Send @msg (consumed), with "id": @id_text (JSON text) if not NULL. */
static void qmp_client_send(QmpClient *c, JsonNode *msg, const char *id_text)
{
    g_autofree char *text = qmp_json_to_string(msg);
    size_t len = strlen(text);

    json_node_unref(msg);
    if (id_text) {
        /* The object's closing brace is last: the id goes before it. */
        g_autofree char *with_id = NULL;

        g_assert(len >= 2 && text[len - 1] == '}');
        with_id = g_strdup_printf("%.*s%s\"id\":%s}", (int)(len - 1), text,
                                  len > 2 ? "," : "", id_text);
        qmp_client_queue(c, with_id, strlen(with_id));
        return;
    }
    qmp_client_queue(c, text, len);
}

static JsonNode *qmp_error_reply(GError *err)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    QmpErrorClass cls = err->domain == QMP_ERROR ? err->code
                                                 : QMP_ERROR_GENERIC;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "error");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "class");
    json_builder_add_string_value(b, qmp_class_names[cls]);
    json_builder_set_member_name(b, "desc");
    json_builder_add_string_value(b, err->message);
    json_builder_end_object(b);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

static JsonNode *qmp_return_reply(JsonNode *ret)
{
    JsonObject *o = json_object_new();
    JsonNode *msg = json_node_new(JSON_NODE_OBJECT);

    if (!ret) {
        /* {}: the node takes the object's only reference. */
        ret = json_node_new(JSON_NODE_OBJECT);
        json_node_take_object(ret, json_object_new());
    }
    json_object_set_member(o, "return", ret);
    json_node_take_object(msg, o);
    return msg;
}

/* ---- input ---- */

/*
 * qmp_capabilities: QEMU's arguments ("enable", a list of capabilities);
 * we offer none, so asking for one (QEMU's only one is "oob") fails and
 * negotiation stays open.
 */
static bool qmp_capabilities(QmpClient *c, JsonObject *args, GError **errp)
{
    static const char *const allowed[] = { "enable", NULL };
    JsonNode *enable;

    if (!qmp_check_args(args, allowed, errp)) {
        return false;
    }
    enable = json_object_get_member(args, "enable");
    if (enable && !JSON_NODE_HOLDS_ARRAY(enable)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid parameter type for 'enable', expected: array");
        return false;
    }
    if (enable && json_array_get_length(json_node_get_array(enable))) {
        JsonArray *a = json_node_get_array(enable);
        JsonNode *cap = json_array_get_element(a, 0);

        if (JSON_NODE_HOLDS_VALUE(cap) &&
            json_node_get_value_type(cap) == G_TYPE_STRING) {
            const char *name = json_node_get_string(cap);

            if (!strcmp(name, "oob")) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "Capability oob not available");
            } else {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "Parameter 'enable[0]' does not accept value "
                            "'%s'", name);
            }
        } else {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Invalid parameter type for 'enable[0]', expected: "
                        "string");
        }
        return false;
    }
    if (c->negotiated) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Capabilities negotiation is already complete, "
                    "command ignored");
        return false;
    }
    return true;
}

/* Run one request (consumed); a reply is always sent. */
static void qmp_client_dispatch(QmpClient *c, JsonNode *root,
                                const char *id_text)
{
    g_autoptr(JsonNode) request = root;
    g_autoptr(GError) err = NULL;
    g_autoptr(JsonObject) empty = json_object_new();
    JsonObject *req, *args = NULL;
    JsonNode *ret, *exec;
    const char *name;
    QmpCommand *cmd;

    if (!JSON_NODE_HOLDS_OBJECT(request)) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input must be a JSON object");
        goto out_error;
    }
    req = json_node_get_object(request);
    exec = json_object_get_member(req, "execute");
    if (!exec || !JSON_NODE_HOLDS_VALUE(exec) ||
        json_node_get_value_type(exec) != G_TYPE_STRING) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input lacks member 'execute'");
        goto out_error;
    }
    name = json_node_get_string(exec);
    if (json_object_has_member(req, "arguments")) {
        JsonNode *a = json_object_get_member(req, "arguments");

        if (!JSON_NODE_HOLDS_OBJECT(a)) {
            g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC,
                        "QMP input member 'arguments' must be an object");
            goto out_error;
        }
        args = json_node_get_object(a);
    }
    if (!args) {
        args = empty;
    }

    if (!strcmp(name, "qmp_capabilities")) {
        if (!qmp_capabilities(c, args, &err)) {
            goto out_error;
        }
        c->negotiated = true;
        if (c->handshake_timer) {
            g_source_remove(c->handshake_timer);
            c->handshake_timer = 0;
        }
        qmp_client_send(c, qmp_return_reply(NULL), id_text);
        if (c->srv->negotiated_cb) {
            c->srv->negotiated_cb(c->srv->negotiated_opaque);
        }
        return;
    }
    if (!c->negotiated) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Expecting capabilities negotiation with "
                    "'qmp_capabilities'");
        goto out_error;
    }
    cmd = g_hash_table_lookup(c->srv->commands, name);
    if (!cmd) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "The command %s has not been found", name);
        goto out_error;
    }
    /* The command may emit events, which may drop @c: it stays. */
    ret = cmd->fn(args, cmd->opaque, &err);
    if (err) {
        if (ret) {
            json_node_unref(ret);
        }
        goto out_error;
    }
    qmp_client_send(c, qmp_return_reply(ret), id_text);
    return;

out_error:
    qmp_client_send(c, qmp_error_reply(err), id_text);
}

/*
 * Handle one line (@len bytes, NUL bytes included): each JSON value on
 * it in turn.  A value that does not parse is answered with the error
 * and ends the line: where the next value starts is unknown.
 */
static void qmp_client_handle_line(QmpClient *c, const char *line,
                                   size_t len)
{
    size_t pos = 0;

    while (!c->dead) {
        g_autoptr(GError) err = NULL;
        g_autofree char *id_text = NULL;
        JsonNode *root;

        while (pos < len && qmp_json_is_ws(line[pos])) {
            pos++;
        }
        if (pos == len) {
            return;
        }
        root = qmp_json_parse_value(line, len, &pos, &id_text, &err);
        if (!root) {
            qmp_client_send(c, qmp_error_reply(err), NULL);
            return;
        }
        qmp_client_dispatch(c, root, id_text);
    }
}

/*
 * Handle the complete lines in c->in, until the client has
 * QMP_PAUSE_OUTPUT unread: then it is paused (not read) until its output
 * is sent.
 */
static void qmp_client_process(QmpClient *c)
{
    c->busy++;
    while (!c->dead && c->out->len < c->srv->pause_output) {
        /* What was searched already has no newline: a long line costs
         * one pass, not one per read. */
        char *nl = memchr(c->in->str + c->in_scanned, '\n',
                          c->in->len - c->in_scanned);
        size_t len;
        g_autofree char *line = NULL;

        if (!nl) {
            c->in_scanned = c->in->len;
            break;
        }
        len = nl - c->in->str;
        line = g_memdup2(c->in->str, len + 1);
        g_string_erase(c->in, 0, len + 1);
        c->in_scanned = 0;
        qmp_client_handle_line(c, line, len);
    }
    c->busy--;
    if (c->dead) {
        qmp_server_kick(c->srv);
        return;
    }
    if (c->in_scanned > QMP_MAX_LINE) {
        qmp_client_kill(c, "request line too long");
        return;
    }
    c->paused = c->out->len >= c->srv->pause_output;
    if (c->paused && c->in_watch) {
        g_source_remove(c->in_watch);
        c->in_watch = 0;
    }
}

static gboolean qmp_client_readable(gint fd, GIOCondition cond,
                                    gpointer opaque);

static void qmp_client_watch_input(QmpClient *c)
{
    if (!c->in_watch && !c->dead && !c->eof && !c->paused) {
        c->in_watch = g_unix_fd_add(c->fd, G_IO_IN | G_IO_HUP | G_IO_ERR,
                                    qmp_client_readable, c);
    }
}

static gboolean qmp_client_readable(gint fd, GIOCondition cond,
                                    gpointer opaque)
{
    QmpClient *c = opaque;
    char buf[4096];
    ssize_t n;

    if (c->busy) {
        return G_SOURCE_CONTINUE;   /* a nested main loop: later */
    }
    n = recv(c->fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    if (n < 0) {
        c->in_watch = 0;
        qmp_client_kill(c, g_strerror(errno));
        return G_SOURCE_REMOVE;
    }
    if (n == 0) {
        /* Replies to what it sent still go out (socat, echo | nc). */
        c->in_watch = 0;
        c->eof = true;
        if (!c->out->len) {
            qmp_client_kill(c, "end of file");
        }
        return G_SOURCE_REMOVE;
    }
    g_string_append_len(c->in, buf, n);
    qmp_client_process(c);
    return c->in_watch ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* Free dead clients; go on with paused ones whose output went out. */
static gboolean qmp_server_idle(gpointer opaque)
{
    QmpServer *srv = opaque;
    GList *l = srv->clients;

    srv->idle = 0;
    while (l) {
        QmpClient *c = l->data;

        l = l->next;
        if (c->dead && !c->busy) {
            qmp_client_free(c);
        }
    }
    for (l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->paused && !c->dead && !c->busy && !c->out->len) {
            c->paused = false;
            qmp_client_process(c);
            qmp_client_watch_input(c);
        }
    }
    return G_SOURCE_REMOVE;
}

static void qmp_client_greet(QmpClient *c)
{
    g_autofree char *package = g_strdup_printf("qemu-mirror %s",
                                               QEMU_MIRROR_VERSION);
    g_autoptr(JsonBuilder) b = json_builder_new();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "QMP");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "version");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "qemu");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "micro");
    json_builder_add_int_value(b, 0);
    json_builder_set_member_name(b, "minor");
    json_builder_add_int_value(b, 1);
    json_builder_set_member_name(b, "major");
    json_builder_add_int_value(b, 0);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "package");
    json_builder_add_string_value(b, package);
    json_builder_end_object(b);
    /* No capability offered: "oob" needs a monitor thread. */
    json_builder_set_member_name(b, "capabilities");
    json_builder_begin_array(b);
    json_builder_end_array(b);
    json_builder_end_object(b);
    json_builder_end_object(b);
    qmp_client_send(c, json_builder_get_root(b), NULL);
}

static unsigned qmp_server_live_clients(QmpServer *srv)
{
    unsigned n = 0;

    for (GList *l = srv->clients; l; l = l->next) {
        n += !((QmpClient *)l->data)->dead;
    }
    return n;
}

static gboolean qmp_client_handshake_expired(gpointer opaque)
{
    QmpClient *c = opaque;

    c->handshake_timer = 0;
    qmp_client_kill(c, "no qmp_capabilities in time");
    return G_SOURCE_REMOVE;
}

bool qmp_server_add_client(QmpServer *srv, int fd)
{
    QmpClient *c;

    if (qmp_server_live_clients(srv) >= (unsigned)srv->max_clients) {
        g_autofree char *msg = g_strdup_printf(
            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"Too many "
            "QMP clients (at most %d, --qmp-max-clients)\"}}\r\n",
            srv->max_clients);

        /* Best effort, never blocking: the socket buffer is empty. */
        if (send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            g_debug("qmp: refusing a client: %s", g_strerror(errno));
        }
        close(fd);
        return false;
    }
    g_unix_set_fd_nonblocking(fd, TRUE, NULL);
    c = g_new0(QmpClient, 1);
    c->srv = srv;
    c->fd = fd;
    c->in = g_string_new(NULL);
    c->out = g_string_new(NULL);
    srv->clients = g_list_append(srv->clients, c);
    if (srv->handshake_limit_s) {
        c->handshake_timer = g_timeout_add_seconds(
            srv->handshake_limit_s, qmp_client_handshake_expired, c);
    }
    qmp_client_watch_input(c);
    qmp_client_greet(c);
    return true;
}

unsigned qmp_server_client_count(QmpServer *srv)
{
    return g_list_length(srv->clients);
}

static gboolean qmp_server_accept(gint fd, GIOCondition cond,
                                  gpointer opaque);

static gboolean qmp_server_backoff_done(gpointer opaque)
{
    QmpServer *srv = opaque;

    srv->backoff = 0;
    srv->watch = g_unix_fd_add(srv->listener.fd, G_IO_IN, qmp_server_accept,
                               srv);
    return G_SOURCE_REMOVE;
}

static gboolean qmp_server_accept(gint fd, GIOCondition cond,
                                  gpointer opaque)
{
    QmpServer *srv = opaque;
    int cfd = accept4(srv->listener.fd, NULL, NULL,
                      SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (cfd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            /* The connection stays queued; poll() would say so at once,
             * forever: stop looking for a while. */
            g_debug("qmp: accept: %s; retrying in %d ms",
                    g_strerror(errno), QMP_ACCEPT_BACKOFF_MS);
            srv->watch = 0;
            srv->backoff = g_timeout_add(QMP_ACCEPT_BACKOFF_MS,
                                         qmp_server_backoff_done, srv);
            return G_SOURCE_REMOVE;
        }
        return G_SOURCE_CONTINUE;
    }
    qmp_server_add_client(srv, cfd);
    return G_SOURCE_CONTINUE;
}

/* ---- server ---- */

QmpServer *qmp_server_new(const char *path, int max_clients, GError **errp)
{
    g_autoptr(GError) err = NULL;
    QmpServer *srv;

    if (max_clients < 1 || max_clients > QMP_MAX_MAX_CLIENTS) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "--qmp-max-clients '%d': expected 1 to %d", max_clients,
                    QMP_MAX_MAX_CLIENTS);
        return NULL;
    }
    srv = g_new0(QmpServer, 1);
    srv->listener.fd = -1;
    if (path && !socket_unix_listen(&srv->listener, "--qmp", path,
                                    64, &err)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "%s", err->message);
        g_free(srv);
        return NULL;
    }
    srv->max_clients = max_clients;
    srv->handshake_limit_s = QMP_DEFAULT_HANDSHAKE_LIMIT;
    srv->pause_output = QMP_PAUSE_OUTPUT;
    srv->max_client_output = QMP_MAX_CLIENT_OUTPUT;
    srv->max_total_output = QMP_MAX_TOTAL_OUTPUT;
    srv->commands = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                          g_free);
    if (path) {
        srv->watch = g_unix_fd_add(srv->listener.fd, G_IO_IN,
                                   qmp_server_accept, srv);
    }
    return srv;
}

void qmp_server_set_output_limits(QmpServer *srv, size_t pause,
                                  size_t per_client, size_t total)
{
    srv->pause_output = pause;
    srv->max_client_output = per_client;
    srv->max_total_output = total;
}

void qmp_server_set_handshake_limit(QmpServer *srv, unsigned seconds)
{
    srv->handshake_limit_s = seconds;
}

void qmp_server_free(QmpServer *srv)
{
    if (!srv) {
        return;
    }
    while (srv->clients) {
        qmp_client_free(srv->clients->data);
    }
    if (srv->idle) {
        g_source_remove(srv->idle);
    }
    if (srv->watch) {
        g_source_remove(srv->watch);
    }
    if (srv->backoff) {
        g_source_remove(srv->backoff);
    }
    socket_unix_listener_close(&srv->listener);
    g_hash_table_unref(srv->commands);
    g_free(srv);
}

void qmp_server_register(QmpServer *srv, const char *name,
                         QmpCommandFunc *fn, void *opaque)
{
    QmpCommand *cmd = g_new(QmpCommand, 1);

    cmd->fn = fn;
    cmd->opaque = opaque;
    g_hash_table_replace(srv->commands, g_strdup(name), cmd);
}

static JsonNode *qmp_event_new(const char *event, JsonNode *data)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    gint64 now = g_get_real_time();

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "event");
    json_builder_add_string_value(b, event);
    if (data) {
        json_builder_set_member_name(b, "data");
        json_builder_add_value(b, data);
    }
    json_builder_set_member_name(b, "timestamp");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "seconds");
    json_builder_add_int_value(b, now / G_USEC_PER_SEC);
    json_builder_set_member_name(b, "microseconds");
    json_builder_add_int_value(b, now % G_USEC_PER_SEC);
    json_builder_end_object(b);
    json_builder_end_object(b);
    return json_builder_get_root(b);
}

char *qmp_event_to_string(const char *event, JsonNode *data)
{
    JsonNode *msg = qmp_event_new(event, data);
    char *text = qmp_json_to_string(msg);

    json_node_unref(msg);
    return text;
}

void qmp_server_emit_event(QmpServer *srv, const char *event,
                           JsonNode *data)
{
    g_autofree char *text = qmp_event_to_string(event, data);
    size_t len = strlen(text);

    /* Queueing never frees a client: the list stays as it is. */
    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->negotiated) {
            qmp_client_queue(c, text, len);
        }
    }
}

bool qmp_server_has_client(QmpServer *srv)
{
    for (GList *l = srv->clients; l; l = l->next) {
        QmpClient *c = l->data;

        if (c->negotiated && !c->dead) {
            return true;
        }
    }
    return false;
}

void qmp_server_set_negotiated_cb(QmpServer *srv, void (*fn)(void *),
                                  void *opaque)
{
    srv->negotiated_cb = fn;
    srv->negotiated_opaque = opaque;
}

void qmp_server_flush(QmpServer *srv, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + timeout_ms * 1000LL;
    g_autofree struct pollfd *pfd = NULL;
    g_autofree QmpClient **who = NULL;
    unsigned max = g_list_length(srv->clients);

    pfd = g_new(struct pollfd, max ? max : 1);
    who = g_new(QmpClient *, max ? max : 1);
    for (;;) {
        unsigned n = 0;
        int left;

        for (GList *l = srv->clients; l; l = l->next) {
            QmpClient *c = l->data;

            if (!c->dead && c->out->len) {
                pfd[n] = (struct pollfd) { .fd = c->fd, .events = POLLOUT };
                who[n++] = c;
            }
        }
        left = (deadline - g_get_monotonic_time()) / 1000;
        if (!n || left <= 0) {
            return;
        }
        if (poll(pfd, n, left) < 0 && errno != EINTR) {
            return;
        }
        for (unsigned i = 0; i < n; i++) {
            QmpClient *c = who[i];
            ssize_t sent;

            if (!pfd[i].revents) {
                continue;
            }
            sent = send(c->fd, c->out->str, c->out->len,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
            if (sent > 0) {
                g_string_erase(c->out, 0, sent);
                srv->total_output -= sent;
            } else if (sent < 0 && errno != EINTR && errno != EAGAIN) {
                qmp_client_kill(c, g_strerror(errno));
            } else if (pfd[i].revents & (POLLERR | POLLHUP)) {
                qmp_client_kill(c, "hung up");
            }
        }
    }
}

/* ---- arguments ---- */

bool qmp_check_args(JsonObject *args, const char *const *allowed,
                    GError **errp)
{
    g_autoptr(GList) members = json_object_get_members(args);

    for (GList *l = members; l; l = l->next) {
        if (!g_strv_contains(allowed, l->data)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is unexpected",
                        (const char *)l->data);
            return false;
        }
    }
    return true;
}

static JsonNode *qmp_arg(JsonObject *args, const char *name, bool required,
                         GType type, const char *type_name, GError **errp)
{
    JsonNode *n = json_object_get_member(args, name);

    if (!n) {
        if (required) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is missing", name);
        }
        return NULL;
    }
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != type) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Invalid parameter type for '%s', expected: %s", name,
                    type_name);
        return NULL;
    }
    return n;
}

bool qmp_arg_str(JsonObject *args, const char *name, bool required,
                 const char **out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_STRING, "string",
                          &err);

    if (n) {
        *out = json_node_get_string(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}

bool qmp_arg_int(JsonObject *args, const char *name, bool required,
                 int64_t *out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_INT64, "integer",
                          &err);

    if (n) {
        *out = json_node_get_int(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}

bool qmp_arg_bool(JsonObject *args, const char *name, bool required,
                  bool *out, GError **errp)
{
    GError *err = NULL;
    JsonNode *n = qmp_arg(args, name, required, G_TYPE_BOOLEAN, "boolean",
                          &err);

    if (n) {
        *out = json_node_get_boolean(n);
    }
    if (err) {
        g_propagate_error(errp, err);
        return false;
    }
    return true;
}
