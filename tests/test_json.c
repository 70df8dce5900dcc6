/*
 * test_json.c - the core's JSON reader and writer (src/base/json.c): cases in
 * the spirit of JSONTestSuite (y_ must parse, n_ must not), the budgets
 * (depth, values, bytes) with the offset they name, UTF-8 and surrogate
 * escapes, numbers and the integral flag, linear time on big inputs, the
 * writer's escaping and cJSON-compatible numbers, and parse -> write -> parse
 * round trips.
 */
#include "test.h"

#include "base/json.h"
#include "wgllm.h"

#include <stdint.h>
#include <time.h>

static bool parses(const char *s, size_t n) {
    struct wgllm_json_doc d;
    struct wgllm_json_error e;
    const bool ok = wgllm_json_parse(s, n, NULL, &d, &e);
    wgllm_json_doc_free(&d);
    return ok;
}

TEST(accepts) {
    static const char *const Y[] = {
        "{}", "[]", "0", "-0", "1.5e3", "-1E-2", "0.0", "1e+2", "\"\"", "true", "false", "null", " \t\r\n[1] \n",
        "[1,[2,[3]],{\"a\":{}}]", "{\"a\":1,\"a\":2}", "\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "[1e400]", "[-123456789012345678901234567890]", "\"\\u0000\"",
        "{\"\":null}", "[\"a\" , \"b\"]",
    };
    for (size_t i = 0; i < sizeof(Y) / sizeof(*Y); i++) {
        const bool ok = parses(Y[i], strlen(Y[i]));
        if (!ok) fprintf(stderr, "  refused: %s\n", Y[i]);
        CHECK(ok);
    }
}

TEST(refuses) {
    static const char *const N[] = {
        "", " ", "[", "]", "{", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\"}", "{\"a\" 1}", "{1:2}", "{'a':1}", "['a']",
        "01", "-01", "1.", ".5", "1e", "1e+", "+1", "-", "0x10", "NaN", "Infinity", "-Infinity", "tru", "nul",
        "truex", "[1] [2]", "[1]x", "\"abc", "\"a\tb\"", "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\ud800\"",
        "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"", "/* c */ 1", "[1 2]", "{\"a\":1 \"b\":2}", "\"\xff\"",
        "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xe2\x82\"", "[\"a\"]\xc3",
    };
    for (size_t i = 0; i < sizeof(N) / sizeof(*N); i++) {
        const bool ok = parses(N[i], strlen(N[i]));
        if (ok) fprintf(stderr, "  accepted: %s\n", N[i]);
        CHECK(!ok);
    }
    /* a NUL byte is not the end of the text */
    CHECK(!parses("[1]\0", 4));
    CHECK(!parses("\"a\0b\"", 5));
}

TEST(dom) {
    const char *s = "{\"n\":-2.5,\"i\":3,\"e\":1e2,\"s\":\"x\\u0000y\",\"a\":[true,false,null,{\"k\":[]}],\"n\":7}";
    struct wgllm_json_doc d;
    struct wgllm_json_error e;
    CHECK(wgllm_json_parse(s, strlen(s), NULL, &d, &e));
    const struct wgllm_json *r = wgllm_json_root(&d);
    CHECK_EQ_INT(r->type, WGLLM_JSON_OBJECT);
    CHECK_EQ_INT(r->count, 6);
    CHECK_EQ_INT(r->size, d.n_nodes);
    const struct wgllm_json *n = wgllm_json_get(r, "n");
    CHECK(n && n->num == -2.5 && !n->integral); /* the first of two "n" */
    CHECK(wgllm_json_get(r, "i")->integral && wgllm_json_get(r, "e")->integral);
    CHECK_NEAR(wgllm_json_get(r, "e")->num, 100, 0);
    const struct wgllm_json *str = wgllm_json_get(r, "s");
    CHECK(str->len == 3 && !memcmp(str->str, "x\0y", 4));
    const struct wgllm_json *a = wgllm_json_get(r, "a");
    CHECK_EQ_INT(a->count, 4);
    CHECK_EQ_INT(wgllm_json_at(a, 0)->type, WGLLM_JSON_TRUE);
    CHECK_EQ_INT(wgllm_json_at(a, 2)->type, WGLLM_JSON_NULL);
    const struct wgllm_json *k = wgllm_json_get(wgllm_json_at(a, 3), "k");
    CHECK(k && k->type == WGLLM_JSON_ARRAY && k->count == 0 && !wgllm_json_first(k));
    CHECK(wgllm_json_at(a, 4) == NULL);
    CHECK(wgllm_json_get(a, "k") == NULL); /* not an object */
    CHECK(wgllm_json_get(r, "missing") == NULL);
    /* members in order */
    const char *order[] = {"n", "i", "e", "s", "a", "n"};
    int i = 0;
    for (const struct wgllm_json *c = wgllm_json_first(r); c; c = wgllm_json_next(r, c), i++)
        CHECK(i < 6 && !strcmp(c->key, order[i]));
    CHECK_EQ_INT(i, 6);
    wgllm_json_doc_free(&d);
}

static struct wgllm_json_error parse_err(const char *s, size_t n, const struct wgllm_json_limits *lim) {
    struct wgllm_json_doc d;
    struct wgllm_json_error e;
    CHECK(!wgllm_json_parse(s, n, lim, &d, &e));
    CHECK(d.nodes == NULL);
    return e;
}

TEST(errors_name_problem_and_offset) {
    struct wgllm_json_error e = parse_err("[1,2,,3]", 8, NULL);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_SYNTAX);
    CHECK_EQ_INT(e.offset, 5);
    e = parse_err("{\"a\":1 \"b\"}", 11, NULL);
    CHECK_EQ_INT(e.offset, 7);
    CHECK(strstr(e.message, "expected ',' or '}'") != NULL);
    e = parse_err("[\"ab\xff\"]", 7, NULL);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_UTF8);
    CHECK_EQ_INT(e.offset, 4);
    e = parse_err("[\"\\ud800\"]", 10, NULL);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_SYNTAX); /* what cJSON refused too: invalid_json, not invalid_utf8 */
    CHECK_EQ_INT(e.offset, 2);
    e = parse_err("[1", 2, NULL);
    CHECK(strstr(e.message, "ends inside an array") != NULL);
}

TEST(budgets) {
    struct wgllm_json_limits lim = {.max_depth = 32, .max_nodes = 100, .max_bytes = 1000};
    char deep[80];
    memset(deep, '[', 33);
    memset(deep + 33, ']', 33);
    struct wgllm_json_error e = parse_err(deep, 66, &lim);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_DEPTH);
    CHECK_EQ_INT(e.offset, 32); /* the 33rd '[' */
    struct wgllm_json_doc d;
    CHECK(wgllm_json_parse(deep + 1, 64, &lim, &d, &e)); /* exactly 32 deep */
    wgllm_json_doc_free(&d);
    /* values: 101 numbers (+ the array) */
    struct wgllm_strbuf sb = {0};
    wgllm_strbuf_putc(&sb, '[');
    for (int i = 0; i < 101; i++) wgllm_strbuf_puts(&sb, i ? ",1" : "1");
    wgllm_strbuf_putc(&sb, ']');
    e = parse_err(sb.data, sb.len, &lim);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_NODES);
    lim.max_nodes = 102;
    CHECK(wgllm_json_parse(sb.data, sb.len, &lim, &d, &e));
    wgllm_json_doc_free(&d);
    lim.max_bytes = sb.len - 1;
    e = parse_err(sb.data, sb.len, &lim);
    CHECK_EQ_INT(e.problem, WGLLM_JSON_ERR_BYTES);
    wgllm_strbuf_free(&sb);
    /* very deep without a depth budget: no recursion, so no stack to run out of */
    const size_t D = 200000;
    char *big = malloc(2 * D);
    memset(big, '[', D);
    memset(big + D, ']', D);
    CHECK(wgllm_json_parse(big, 2 * D, NULL, &d, &e));
    CHECK_EQ_INT(d.n_nodes, D);
    wgllm_json_doc_free(&d);
    free(big);
}

/* Time of parsing a body that is a k-fold repetition: the per-byte cost must
 * not grow with k (quadratic behaviour would show as ~8x per 8x more). */
/* CPU time, not wall time: the suite runs tests side by side, and the bound is about the work. */
static int64_t cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double parse_ns_per_byte(const char *piece, size_t k, const char *open, const char *close) {
    struct wgllm_strbuf sb = {0};
    wgllm_strbuf_puts(&sb, open);
    for (size_t i = 0; i < k; i++) {
        if (i) wgllm_strbuf_putc(&sb, ',');
        wgllm_strbuf_puts(&sb, piece);
    }
    wgllm_strbuf_puts(&sb, close);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const int64_t t0 = cpu_us();
        struct wgllm_json_doc d;
        struct wgllm_json_error e;
        CHECK(wgllm_json_parse(sb.data, sb.len, NULL, &d, &e));
        const double ns = (double)(cpu_us() - t0) * 1000.0 / (double)sb.len;
        wgllm_json_doc_free(&d);
        if (ns < best) best = ns;
    }
    wgllm_strbuf_free(&sb);
    return best;
}

TEST(linear_time) {
    const struct {
        const char *piece, *open, *close;
    } cases[] = {
        {"{\"key\":\"value \\u00e9\\n\",\"n\":-12.5e3}", "[", "]"},
        {"\"k\":[1,2,3]", "{", "}"}, /* many members under one key: lookups are not part of parsing */
        {"\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"", "[", "]"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
        const double small = parse_ns_per_byte(cases[c].piece, 20000, cases[c].open, cases[c].close);
        const double large = parse_ns_per_byte(cases[c].piece, 160000, cases[c].open, cases[c].close);
        printf("  json parse case %zu: %.2f ns/byte at 20k pieces, %.2f at 160k\n", c, small, large);
        CHECK(large < 4 * small + 2);
    }
}

static char *written(double d) {
    struct wgllm_strbuf sb = {0};
    wgllm_json_put_number(&sb, d);
    return wgllm_strbuf_take(&sb);
}

TEST(writer_numbers_as_cjson) {
    /* what cJSON 1.7.15's cJSON_PrintUnformatted gives for these (float logprobs included) */
    const struct {
        double d;
        const char *want;
    } cases[] = {
        {0, "0"}, {-0.0, "-0"}, {42, "42"}, {-7, "-7"}, {2147483647.0, "2147483647"}, {2147483648.0, "2147483648"},
        {1e20, "1e+20"}, {0.5, "0.5"}, {0.1, "0.1"}, {1.0 / 3, "0.33333333333333331"}, {(double)-0.25f, "-0.25"},
        {(double)-1.2345678f, "-1.2345677614212036"}, {1e-7, "1e-07"}, {NAN, "null"}, {INFINITY, "null"},
        {-INFINITY, "null"}, {123456.789, "123456.789"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char *s = written(cases[i].d);
        CHECK_STR(s, cases[i].want);
        free(s);
    }
}

/* An exact writer passes numbers on unchanged: each text reads back as the
 * same double, in no more digits than that takes (an upstream's embeddings,
 * printed with 17 digits, are cut to 15 by cJSON's rule). */
TEST(writer_numbers_exact) {
    const struct {
        double d;
        const char *want;
    } cases[] = {
        {0, "0"}, {42, "42"}, {0.1, "0.1"}, {1.0 / 3, "0.3333333333333333"}, {-0.07736420631408691, "-0.07736420631408691"},
        {(double)-1.2345678f, "-1.2345677614212036"}, {1e-7, "1e-07"}, {NAN, "null"}, {5e-324, "4.94065645841247e-324"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct wgllm_strbuf sb = {0};
        wgllm_json_put_number_exact(&sb, cases[i].d);
        CHECK_STR(sb.data, cases[i].want);
        wgllm_strbuf_free(&sb);
    }
    /* cJSON's rule loses the last bit of this one; the exact writer keeps it, through w_value too */
    char *lossy = written(-0.07736420631408691);
    CHECK(strtod(lossy, NULL) != -0.07736420631408691);
    free(lossy);
    static const char DOC[] = "{\"e\":[-0.07736420631408691,0.027385389432311058,1e-05]}";
    struct wgllm_json_doc d;
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {0};
    CHECK(wgllm_json_parse(DOC, sizeof DOC - 1, &lim, &d, &je));
    struct wgllm_strbuf sb = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &sb);
    w.exact = true;
    wgllm_json_w_value(&w, NULL, wgllm_json_root(&d));
    CHECK_STR(sb.data, DOC);
    wgllm_strbuf_free(&sb);
    wgllm_json_doc_free(&d);
}

TEST(writer_strings_and_structure) {
    struct wgllm_strbuf sb = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &sb);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_str(&w, "s", "q\"b\\s/\b\f\n\r\t\x01\x1f\xc3\xa9");
    wgllm_json_w_string(&w, "bad", "a\xff" "b\0c\xe2\x82", 7);
    wgllm_json_w_array(&w, "a");
    wgllm_json_w_number(&w, NULL, 1);
    wgllm_json_w_bool(&w, NULL, true);
    wgllm_json_w_null(&w, NULL);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
    CHECK(!sb.oom);
    CHECK_STR(sb.data, "{\"s\":\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\xc3\xa9\","
                       "\"bad\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\",\"a\":[1,true,null,{}]}");
    wgllm_strbuf_free(&sb);
}

static char *rewrite(const char *s, size_t n) {
    struct wgllm_json_doc d;
    struct wgllm_json_error e;
    if (!wgllm_json_parse(s, n, NULL, &d, &e)) return NULL;
    struct wgllm_strbuf sb = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &sb);
    wgllm_json_w_value(&w, NULL, wgllm_json_root(&d));
    wgllm_json_doc_free(&d);
    return wgllm_strbuf_take(&sb);
}

TEST(round_trip) {
    const char *in = " { \"a\" : [ 1 , -2.5 , 1e2 , 0.1 , \"\\u00e9\\n\\u0001\" , true , false , null , { } , [ ] ] ,"
                     " \"b\" : { \"c\" : \"\\ud83d\\ude00\" } } ";
    char *once = rewrite(in, strlen(in));
    CHECK(once != NULL);
    if (!once) return;
    CHECK_STR(once, "{\"a\":[1,-2.5,100,0.1,\"\xc3\xa9\\n\\u0001\",true,false,null,{},[]],\"b\":{\"c\":\"\xf0\x9f\x98\x80\"}}");
    char *twice = rewrite(once, strlen(once));
    CHECK(twice && !strcmp(once, twice));
    free(once);
    free(twice);
    /* every double survives the trip: 17 digits when 15 do not read back */
    const double vals[] = {0.1, 1.0 / 3, 2.0 / 3, 1e-300, 1.7976931348623157e308, 5e-324, -123.456, 3.14159265358979};
    for (size_t i = 0; i < sizeof(vals) / sizeof(*vals); i++) {
        char *s = written(vals[i]);
        struct wgllm_json_doc d;
        struct wgllm_json_error e;
        CHECK(wgllm_json_parse(s, strlen(s), NULL, &d, &e));
        if (d.nodes) CHECK(fabs(d.nodes[0].num - vals[i]) <= fabs(vals[i]) * 2.3e-16);
        wgllm_json_doc_free(&d);
        free(s);
    }
}

TEST(utf8_helpers) {
    CHECK_EQ_INT(wgllm_json_utf8_check("ab\xc3\xa9", 4), 4);
    CHECK_EQ_INT(wgllm_json_utf8_check("ab\xc3", 3), 2);
    CHECK_EQ_INT(wgllm_json_utf8_check("\xed\xbf\xbf", 3), 0); /* an encoded surrogate */
    struct wgllm_strbuf sb = {0};
    CHECK(wgllm_json_utf8_clean(&sb, "\xe2\x82\xac\xe2\x82", 5));
    CHECK_STR(sb.data, "\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd");
    wgllm_strbuf_free(&sb);
}

int main(void) {
    RUN(accepts);
    RUN(refuses);
    RUN(dom);
    RUN(errors_name_problem_and_offset);
    RUN(budgets);
    RUN(linear_time);
    RUN(writer_numbers_as_cjson);
    RUN(writer_numbers_exact);
    RUN(writer_strings_and_structure);
    RUN(round_trip);
    RUN(utf8_helpers);
    return test_summary("test_json");
}
