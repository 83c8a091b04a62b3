/*
 * The daemon's command-line syntax (keyval.c): QEMU's keyval strings into
 * the JSON arguments of a QMP command, with QEMU's error messages (each
 * checked against qemu-storage-daemon 7.2's); and the QMP argument
 * helpers in keyval mode (qmp_args_set_keyval()), which convert those
 * strings as QEMU's keyval visitor does.
 *
 * Copyright (C) 2026 qemu-mirror authors
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <string.h>

#include "qemu-mirror-tool/keyval.h"
#include "qemu-mirror-tool/qmp-json.h"
#include "qemu-mirror-tool/qmp.h"

/* @str parsed with @implied as compact JSON (NULL: an error, in *@msg). */
static char *parse(const char *str, const char *implied, char **msg)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(JsonObject) obj = keyval_parse(str, implied, &err);
    g_autoptr(JsonNode) node = NULL;

    if (!obj) {
        *msg = g_strdup(err->message);
        return NULL;
    }
    node = json_node_new(JSON_NODE_OBJECT);
    json_node_set_object(node, obj);
    return qmp_json_to_string(node);
}

/* A keyval string, its implied key, and what it gives: JSON or an error. */
typedef struct KeyvalCase {
    const char *str, *implied, *json, *msg;
} KeyvalCase;

#define OK(str, implied, json)  { (str), (implied), (json), NULL }
#define BAD(str, implied, msg)  { (str), (implied), NULL, (msg) }

static const KeyvalCase keyval_cases[] = {
    OK("", NULL, "{}"),
    OK("driver=file,node-name=f,filename=/x", "driver",
       "{\"driver\":\"file\",\"node-name\":\"f\",\"filename\":\"/x\"}"),
    /* The implied key: the first element only, up to its ','. */
    OK("secret,id=s,data=x", "qom-type",
       "{\"qom-type\":\"secret\",\"id\":\"s\",\"data\":\"x\"}"),
    OK("nbd", "type", "{\"type\":\"nbd\"}"),
    OK("type=nbd,id=e", "type", "{\"type\":\"nbd\",\"id\":\"e\"}"),
    /* ",," is a comma; '=' in a value is a character. */
    OK("data=a,,b,,,id=s", NULL, "{\"data\":\"a,b,\",\"id\":\"s\"}"),
    OK("data=a=b", NULL, "{\"data\":\"a=b\"}"),
    OK("data=", NULL, "{\"data\":\"\"}"),
    /* Dotted keys: nested objects, in the order first seen. */
    OK("driver=raw,file.driver=file,file.filename=/x,node-name=r", "driver",
       "{\"driver\":\"raw\",\"file\":{\"driver\":\"file\","
       "\"filename\":\"/x\"},\"node-name\":\"r\"}"),
    OK("addr.type=unix,addr.path=/s", NULL,
       "{\"addr\":{\"type\":\"unix\",\"path\":\"/s\"}}"),
    OK("a.b.c=1,a.d=2", NULL,
       "{\"a\":{\"b\":{\"c\":\"1\"},\"d\":\"2\"}}"),
    /* A key given twice: the last value. */
    OK("id=a,id=b", NULL, "{\"id\":\"b\"}"),
    /* Index fragments: lists, in index order. */
    OK("x.1=b,x.0=a", NULL, "{\"x\":[\"a\",\"b\"]}"),
    OK("r.0.m=a,r.1.m=b", NULL, "{\"r\":[{\"m\":\"a\"},{\"m\":\"b\"}]}"),
    /* Names: '-', '_', digits after the first letter; downstream. */
    OK("a_b-c9=1,__com.x_y=2", NULL,
       "{\"a_b-c9\":\"1\",\"__com.x_y\":\"2\"}"),

    /* The errors, each as qemu-storage-daemon 7.2 words it. */
    BAD("driver=null-co,node-name=n,x", "driver",
        "Expected '=' after parameter 'x'"),
    BAD("nbd", NULL, "Expected '=' after parameter 'nbd'"),
    BAD("driver=null-co,1a=2", "driver", "Invalid parameter '1a'"),
    BAD(",driver=null-co", "driver", "Invalid parameter ''"),
    BAD("driver=null-co,=2", "driver", "Invalid parameter ''"),
    BAD("a.=1", NULL, "Invalid parameter 'a.'"),
    BAD("0=1", NULL, "Invalid parameter '0'"),
    BAD("a b=1", NULL, "Invalid parameter 'a b'"),
    BAD("a.b=1,a=2", NULL, "Parameters 'a.*' used inconsistently"),
    BAD("a=2,a.b=1", NULL, "Parameters 'a.*' used inconsistently"),
    BAD("a.b.c=1,a.b=2", NULL, "Parameters 'a.b.*' used inconsistently"),
    BAD("x.0=a,x.2=b", NULL, "Parameter 'x.1' missing"),
    BAD("x.1=a", NULL, "Parameter 'x.0' missing"),
    BAD("x.0=a,x.b=b", NULL, "Parameters 'x.*' used inconsistently"),
    BAD("y.x.0=a,y.x.b=b", NULL, "Parameters 'y.x.*' used inconsistently"),
    BAD("x.0=a,x.99999999999999999999=b", NULL, "Parameter 'x.1' missing"),
};

static void test_cases(void)
{
    for (size_t i = 0; i < G_N_ELEMENTS(keyval_cases); i++) {
        const KeyvalCase *c = &keyval_cases[i];
        g_autofree char *msg = NULL;
        g_autofree char *json = parse(c->str, c->implied, &msg);

        g_test_message("%s", c->str);
        g_assert_cmpstr(json, ==, c->json);
        g_assert_cmpstr(msg, ==, c->msg);
    }
}

/* QEMU's limit: a key fragment of 127 characters, not 128. */
static void test_long_key(void)
{
    g_autofree char *k127 = g_strnfill(127, 'k');
    g_autofree char *k128 = g_strnfill(128, 'k');
    g_autofree char *ok = g_strdup_printf("%s=1", k127);
    g_autofree char *whole = g_strdup_printf("%s=1", k128);
    g_autofree char *frag = g_strdup_printf("a.%s=1", k128);
    g_autofree char *want_whole = g_strdup_printf("Parameter '%s' is too "
                                                  "long", k128);
    g_autofree char *want_frag = g_strdup_printf("Parameter fragment '%s' "
                                                 "is too long", k128);
    g_autofree char *msg1 = NULL;
    g_autofree char *msg2 = NULL;
    g_autofree char *msg3 = NULL;
    g_autofree char *json = parse(ok, NULL, &msg1);
    g_autofree char *bad1 = parse(whole, NULL, &msg2);
    g_autofree char *bad2 = parse(frag, NULL, &msg3);

    g_assert_nonnull(json);
    g_assert_null(bad1);
    g_assert_cmpstr(msg2, ==, want_whole);
    g_assert_null(bad2);
    g_assert_cmpstr(msg3, ==, want_frag);
}

/* JSON when the value starts with '{' (strictly typed), else keyval. */
static void test_option(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(JsonObject) json = NULL;
    g_autoptr(JsonObject) kv = NULL;
    g_autoptr(JsonObject) kv2 = NULL;
    JsonObject *bad;
    bool keyval = true;

    json = keyval_parse_option("{\"driver\": \"null-co\", \"size\": 5}",
                               "driver", &keyval, &err);
    g_assert_no_error(err);
    g_assert_false(keyval);
    g_assert_cmpint(json_object_get_int_member(json, "size"), ==, 5);

    kv = keyval_parse_option("null-co,size=5", "driver", &keyval, &err);
    g_assert_no_error(err);
    g_assert_true(keyval);
    g_assert_cmpstr(json_object_get_string_member(kv, "driver"), ==,
                    "null-co");
    g_assert_cmpstr(json_object_get_string_member(kv, "size"), ==, "5");

    bad = keyval_parse_option("{\"driver\": ", "driver", &keyval, &err);
    g_assert_null(bad);
    g_assert_nonnull(strstr(err->message, "JSON parse error"));
    g_clear_error(&err);
    /* '[' is no JSON start: the implied key's value, as in QEMU. */
    kv2 = keyval_parse_option("[1]", "driver", &keyval, &err);
    g_assert_no_error(err);
    g_assert_true(keyval);
    g_assert_cmpstr(json_object_get_string_member(kv2, "driver"), ==,
                    "[1]");
}

/*
 * The helpers in keyval mode: strings become integers and booleans as
 * QEMU's keyval visitor converts them; out of it, strings are refused.
 */
static void test_args(void)
{
    g_autoptr(JsonObject) args = NULL;
    g_autoptr(GError) err = NULL;
    int64_t i = -1;
    bool b = false;
    static const struct {
        const char *str;
        int64_t value;
    } ints[] = {
        { "0", 0 }, { "42", 42 }, { "-7", -7 }, { "0x10", 16 },
        { "010", 8 }, { "9223372036854775807", INT64_MAX },
    };
    static const char *const bad_ints[] = {
        "", "x", "1k", "1.5", "9223372036854775808", "0x", "1 ",
    };
    static const char *const yes[] = { "on", "yes", "true", "y" };
    static const char *const no[] = { "off", "no", "false", "n" };

    args = json_object_new();
    json_object_set_string_member(args, "n", "42");
    json_object_set_string_member(args, "b", "on");
    json_object_set_int_member(args, "j", 3);

    /* Off (QMP's JSON): the JSON type only. */
    g_assert_false(qmp_arg_int(args, "n", true, &i, &err));
    g_assert_cmpstr(err->message, ==,
                    "Invalid parameter type for 'n', expected: integer");
    g_clear_error(&err);
    g_assert_false(qmp_arg_bool(args, "b", true, &b, &err));
    g_assert_cmpstr(err->message, ==,
                    "Invalid parameter type for 'b', expected: boolean");
    g_clear_error(&err);

    qmp_args_set_keyval(true);
    for (size_t k = 0; k < G_N_ELEMENTS(ints); k++) {
        json_object_set_string_member(args, "n", ints[k].str);
        g_assert_true(qmp_arg_int(args, "n", true, &i, &err));
        g_assert_no_error(err);
        g_assert_cmpint(i, ==, ints[k].value);
    }
    for (size_t k = 0; k < G_N_ELEMENTS(bad_ints); k++) {
        json_object_set_string_member(args, "n", bad_ints[k]);
        i = -1;
        g_assert_false(qmp_arg_int(args, "n", true, &i, &err));
        g_assert_cmpstr(err->message, ==, "Parameter 'n' expects integer");
        g_assert_cmpint(i, ==, -1);
        g_clear_error(&err);
    }
    for (size_t k = 0; k < G_N_ELEMENTS(yes); k++) {
        json_object_set_string_member(args, "b", yes[k]);
        b = false;
        g_assert_true(qmp_arg_bool(args, "b", true, &b, &err));
        g_assert_true(b);
        json_object_set_string_member(args, "b", no[k]);
        g_assert_true(qmp_arg_bool(args, "b", true, &b, &err));
        g_assert_false(b);
    }
    json_object_set_string_member(args, "b", "maybe");
    g_assert_false(qmp_arg_bool(args, "b", true, &b, &err));
    g_assert_cmpstr(err->message, ==,
                    "Parameter 'b' expects 'on' or 'off'");
    g_clear_error(&err);
    /* JSON values still do; a string stays a string. */
    g_assert_true(qmp_arg_int(args, "j", true, &i, &err));
    g_assert_cmpint(i, ==, 3);
    {
        const char *s = NULL;

        json_object_set_string_member(args, "s", "010");
        g_assert_true(qmp_arg_str(args, "s", true, &s, &err));
        g_assert_cmpstr(s, ==, "010");
    }
    qmp_args_set_keyval(false);
    json_object_set_string_member(args, "n", "42");
    g_assert_false(qmp_arg_int(args, "n", true, &i, &err));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/keyval/cases", test_cases);
    g_test_add_func("/keyval/long-key", test_long_key);
    g_test_add_func("/keyval/option", test_option);
    g_test_add_func("/keyval/args", test_args);
    return g_test_run();
}
