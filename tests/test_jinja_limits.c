/*
 * test_jinja_limits.c - hostile chat templates (issue #15). A template comes
 * with the GGUF file and is rendered on every chat request, so: each budget of
 * wgllm_chat_params (steps, output, memory, depth) stops the attack it is for
 * with an error that names it, and quickly; 64-bit integer arithmetic never
 * wraps, traps or indexes out of bounds; lexing and parsing are linear in the
 * template's length; and the optimisations that keep loops cheap do not
 * change what templates render. Inputs the fuzzer (fuzz/fuzz_jinja.c) found
 * are at the end. An alarm turns a hang into a failure.
 */
#include "test.h"

#include "chat/chat.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

/* CPU time, not wall time: the bounds below are about the work done, and a
 * busy machine must not fail them */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *MSGS = "[{\"role\":\"user\",\"content\":\"hi\"}]";

/* Parses and renders src (len bytes) under p (NULL: defaults); the output
 * (caller frees) or NULL with *st and err set. */
static char *render_n(const char *src, size_t len, const struct wgllm_chat_params *p, const char *msgs,
                      enum wgllm_status *st, struct wgllm_error *err) {
    struct wgllm_chat_template *t = NULL;
    char *out = NULL;
    *st = wgllm_chat_template_init(src, len, p, &t, err);
    if (*st == WGLLM_STATUS_OK)
        *st = wgllm_chat_template_render_json(t, msgs ? msgs : MSGS, NULL, true, "<s>", "</s>", &out, err);
    wgllm_chat_template_free(t);
    if ((*st == WGLLM_STATUS_OK) != (out != NULL)) {
        fprintf(stderr, "  status %d but output %p\n", (int)*st, (void *)out);
        test_checks_failed_in_current++;
    }
    return out;
}

static void check_ok(const char *src, const char *expect, int line) {
    enum wgllm_status st;
    struct wgllm_error err = {0};
    char *out = render_n(src, strlen(src), NULL, NULL, &st, &err);
    if (!out || strcmp(out, expect) != 0) {
        fprintf(stderr, "  line %d: %.200s\n    got      \"%.300s\" (%s)\n    expected \"%s\"\n", line, src,
                out ? out : "(null)", err.message, expect);
        test_checks_failed_in_current++;
    }
    free(out);
}
#define OK(src, expect) check_ok(src, expect, __LINE__)

/* src (len bytes) must fail, within max_s seconds, with a message holding needle. */
static void check_fail_n(const char *src, size_t len, const struct wgllm_chat_params *p, const char *msgs,
                         const char *needle, double max_s, int line) {
    enum wgllm_status st;
    struct wgllm_error err = {0};
    double t0 = now_s();
    char *out = render_n(src, len, p, msgs, &st, &err);
    double dt = now_s() - t0;
    if (out || st == WGLLM_STATUS_OK || !strstr(err.message, needle) || dt > max_s) {
        fprintf(stderr, "  line %d: %.120s%s\n    status %d after %.2f s (at most %.1f), message \"%s\", wanted \"%s\"\n",
                line, src, len > 120 ? "..." : "", (int)st, dt, max_s, err.message, needle);
        test_checks_failed_in_current++;
    }
    free(out);
}
#define FAIL(src, needle) check_fail_n(src, strlen(src), NULL, NULL, needle, 10.0, __LINE__)
#define FAIL_P(src, p, needle) check_fail_n(src, strlen(src), p, NULL, needle, 10.0, __LINE__)

/* pre + count copies of rep + post, malloc'd */
static char *repeat(const char *pre, const char *rep, size_t count, const char *post) {
    size_t lp = strlen(pre), lr = strlen(rep), lq = strlen(post);
    char *s = malloc(lp + lr * count + lq + 1);
    if (!s) return NULL;
    memcpy(s, pre, lp);
    for (size_t i = 0; i < count; i++) memcpy(s + lp + i * lr, rep, lr);
    memcpy(s + lp + lr * count, post, lq + 1);
    return s;
}

TEST(default_params) {
    struct wgllm_chat_params p = wgllm_chat_default_params();
    CHECK_EQ_INT(p.max_steps, 10000000);
    CHECK_EQ_INT(p.max_output, 64 << 20);
    CHECK_EQ_INT(p.max_memory, 256 << 20);
    CHECK_EQ_INT(p.max_depth, 256);
    /* parse with NULL params is parse with the defaults: the same budget in the same words */
    FAIL("{% for i in range(100000000) %}{% endfor %}", "step budget (10000000 steps) at line 1");
}

/* 'abc'[1::9223372036854775807] used to add the step to the index and read far past the string */
TEST(slices_and_range_never_overflow) {
    OK("{{ 'abc'[1::9223372036854775807] }}|{{ 'abcdef'[::-9223372036854775807 - 1] }}", "b|f");
    OK("{{ [1,2,3][::9223372036854775807] }}|{{ [1,2,3][1::-9223372036854775807] }}", "[1]|[2]");
    OK("{{ 'abcdef'[::2] }}|{{ 'abcdef'[5:1:-2] }}|{{ 'abcdef'[-2:] }}|{{ 'abcdef'[:-9223372036854775807] }}|"
       "{{ 'abc'[9223372036854775807:] }}|{{ [1,2,3][::-1] }}|{{ 'abc'[::-1] }}",
       "ace|fd|ef|||[3, 2, 1]|cba");
    OK("{{ range(0, 9223372036854775807, 4611686018427387904) }}", "[0, 4611686018427387904]");
    OK("{{ range(9223372036854775807, 0, -9223372036854775807 - 1) }}", "[9223372036854775807]");
    OK("{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807) }}",
       "[-9223372036854775808, -1, 9223372036854775806]");
    OK("{{ range(3) }}{{ range(1, 3) }}{{ range(5, 0, -2) }}{{ range(0) }}{{ range(2, 1) }}",
       "[0, 1, 2][1, 2][5, 3, 1][][]");
    FAIL("{{ range(1, 2, 0) }}", "step cannot be zero");
    FAIL("{{ 'abc'[::0] }}", "step cannot be zero");
}

TEST(integer_arithmetic_is_checked) {
    OK("{{ -7 // 2 }} {{ 7 // -2 }} {{ 7 // 2 }} {{ -6 // 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ (-9223372036854775807 - 1) % -1 }}",
       "-4 -4 3 -2 -1 1 0");
    OK("{{ 9223372036854775806 + 1 }} {{ -9223372036854775807 - 1 }} {{ 3037000499 * 3037000499 }} {{ -(-9223372036854775807) }}",
       "9223372036854775807 -9223372036854775808 9223372030926249001 9223372036854775807");
    OK("{{ (-5) | abs }} {{ 2.5 | int }} {{ '-12' | int }} {{ 7.5 // 2 }} {{ 1 / 4 }}", "5 2 -12 3.0 0.25");
    FAIL("{{ 9223372036854775807 + 1 }}", "integer overflow in 9223372036854775807 + 1");
    FAIL("{{ -9223372036854775807 - 2 }}", "integer overflow");
    FAIL("{{ 4294967296 * 4294967296 }}", "integer overflow");
    FAIL("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow");
    FAIL("{{ -(-9223372036854775807 - 1) }}", "integer overflow");
    FAIL("{{ (-9223372036854775807 - 1) | abs }}", "integer overflow in abs");
    FAIL("{{ 1 // 0 }}", "division by zero");
    FAIL("{{ 1 % 0 }}", "modulo by zero");
    FAIL("{{ '1e300' | float | int }}", "does not fit in a 64-bit integer");
    FAIL("{{ 'nan' | float | int }}", "does not fit in a 64-bit integer");
    FAIL("{{ '99999999999999999999' | int }}", "does not fit in a 64-bit integer");
    FAIL("{{ 99999999999999999999 }}", "integer literal out of range");
    /* strings do not repeat (nor in the reference): an error, not a 1 GB string */
    FAIL("{{ 'x' * 1000000000 }}", "unsupported operation: string * integer");
}

TEST(step_budget) {
    /* two nested range(1000000) loops: 10^12 iterations before budgets */
    FAIL("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
         "template exceeds its step budget (10000000 steps) at line 1");
    struct wgllm_chat_params p = wgllm_chat_default_params();
    p.max_steps = 2000;
    FAIL_P("{% for i in range(1000) %}{{ i }}{% endfor %}", &p, "step budget (2000 steps)");
    enum wgllm_status st;
    struct wgllm_error err = {0};
    const char *small = "{% for i in range(100) %}{{ i % 10 }}{% endfor %}";
    char *out = render_n(small, strlen(small), &p, NULL, &st, &err);
    CHECK(out != NULL && strlen(out) == 100);
    free(out);
    /* work inside one expression counts too: a quadratic filter, a wide DAG to print */
    FAIL("{{ range(100000) | unique | length }}", "step budget");
    FAIL("{% set ns = namespace(a=[1]) %}{% for i in range(100) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}"
         "{{ ns.a | tojson }}", "step budget");
    FAIL("{% set ns = namespace(a=[1]) %}{% for i in range(100) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}"
         "{{ ns.a }}", "step budget");
    FAIL("{% set s = range(100000) | join(',') %}{% for i in range(100000) %}{% if s | length %}{% endif %}{% endfor %}",
         "step budget");
    FAIL("{% set s = range(100000) | join(',') %}{% for i in range(100000) %}{% if 'q' in s %}{% endif %}{% endfor %}",
         "step budget");
    /* a long scope chain (nested loops) makes each lookup long */
    char *deep = repeat("", "{% for a in [1] %}", 200, "{% for i in range(1000000) %}{{ x }}{% endfor %}");
    char *deep2 = deep ? repeat(deep, "{% endfor %}", 200, "") : NULL;
    CHECK(deep2 != NULL);
    if (deep2) {
        p = wgllm_chat_default_params();
        p.max_depth = 1024;
        check_fail_n(deep2, strlen(deep2), &p, NULL, "step budget", 10.0, __LINE__);
    }
    free(deep);
    free(deep2);
}

TEST(memory_budget) {
    FAIL("{% set s = 'ab' %}{% for i in range(64) %}{% set s = s + s %}{% endfor %}{{ s | length }}",
         "template exceeds its memory budget (268435456 bytes) at line 1");
    FAIL("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "memory budget");
    FAIL("{% set l = [1] %}{% for i in range(64) %}{% set l = l + l %}{% endfor %}", "budget");
    FAIL("{{ 'a\nb' | indent(1000000000000) }}", "memory budget");
    FAIL("{{ 'abc' | indent(1000000000000, true) }}", "memory budget");
    FAIL("{% set s = range(100000) | join(',') %}{{ s | replace('', s) }}", "budget");
    /* the messages count: a 2 MiB message under a 1 MiB budget */
    struct wgllm_chat_params p = wgllm_chat_default_params();
    p.max_memory = 1 << 20;
    char *msgs = repeat("[{\"role\":\"user\",\"content\":\"", "x", 2 << 20, "\"}]");
    CHECK(msgs != NULL);
    if (msgs) {
        const char *src = "{{ messages[0].content | length }}";
        check_fail_n(src, strlen(src), &p, msgs, "memory budget (1048576 bytes)", 10.0, __LINE__);
        p = wgllm_chat_default_params();
        enum wgllm_status st;
        struct wgllm_error err = {0};
        char *out = render_n(src, strlen(src), &p, msgs, &st, &err);
        CHECK(out && !strcmp(out, "2097152"));
        free(out);
    }
    free(msgs);
    /* and the parse: a template's tokens and AST */
    p = wgllm_chat_default_params();
    p.max_memory = 1 << 20;
    char *big = repeat("", "{{ x }}", 100000, "");
    CHECK(big != NULL);
    if (big) check_fail_n(big, strlen(big), &p, NULL, "memory budget (1048576 bytes)", 10.0, __LINE__);
    free(big);
}

TEST(output_budget) {
    struct wgllm_chat_params p = wgllm_chat_default_params();
    p.max_output = 100000;
    FAIL_P("{% for i in range(100000) %}0123456789{% endfor %}", &p,
           "template exceeds its output budget (100000 bytes) at line 1");
    FAIL_P("{% macro m() %}{% for i in range(20000) %}0123456789{% endfor %}{% endmacro %}{{ m() }}", &p,
           "output budget (100000 bytes)");
    /* the default takes a megabyte easily */
    enum wgllm_status st;
    struct wgllm_error err = {0};
    const char *src = "{% for i in range(100000) %}0123456789{% endfor %}";
    char *out = render_n(src, strlen(src), NULL, NULL, &st, &err);
    CHECK(out && strlen(out) == 1000000);
    free(out);
    /* past the default 64 MiB */
    FAIL("{% set s = range(1000) | join('') %}{% for i in range(30000) %}{{ s }}{% endfor %}", "output budget");
}

/* Each 100k deep; the parser recursion is what would overflow the C stack. */
TEST(depth_budget) {
    static const struct { const char *pre, *rep, *mid, *rep2, *post; } cases[] = {
        {"{{ ", "(", "1", ")", " }}"},
        {"{{ ", "[", "1", "]", " }}"},
        {"{{ ", "{'a': ", "1", "}", " }}"},
        {"{{ ", "not ", "1", "", " }}"},
        {"{{ ", "- ", "1", "", " }}"},
        {"{{ ", "f(", "1", ")", " }}"},
        {"{{ ", "1 if 1 else ", "1", "", " }}"},
        {"", "{% if true %}", "x", "{% endif %}", ""},
        {"", "{% for a in [1] %}", "x", "{% endfor %}", ""},
        {"", "{% set x %}", "x", "{% endset %}", ""},
        {"{% if false %}", "{% elif false %}", "", "", "{% endif %}"},
        /* chains parse flat but nest in the AST: the interpreter's depth stops them */
        {"{{ 1", " + 1", "", "", " }}"},
        {"{{ x", ".a", "", "", " }}"},
        {"{{ x", "[0]", "", "", " }}"},
        {"{{ 'a'", " | trim", "", "", " }}"},
        {"{{ 1", " ~ 1", "", "", " }}"},
        {"{{ 1", " and 1", "", "", " }}"},
        {"{{ 1", " < 1", "", "", " }}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *a = repeat(cases[i].pre, cases[i].rep, 100000, cases[i].mid);
        char *b = a ? repeat(a, cases[i].rep2, 100000, cases[i].post) : NULL;
        CHECK(b != NULL);
        if (b) check_fail_n(b, strlen(b), NULL, NULL, "depth budget (256 levels)", 10.0, __LINE__);
        free(a);
        free(b);
    }
    FAIL("{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", "depth budget (256 levels)");
    FAIL("{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", "macro recursion");
    FAIL("{% macro m(x) %}{% if x %}{{ m(x - 1) }}{% endif %}{% endmacro %}{{ m(1000) }}", "macro recursion");
    OK("{% macro m(x) %}{% if x %}{{ x }}{{ m(x - 1) }}{% endif %}{% endmacro %}{{ m(5) }}", "54321");
    /* a caller may raise the depth to 1024 (not beyond: the stack), and it holds */
    struct wgllm_chat_params p = wgllm_chat_default_params();
    p.max_depth = 1 << 30;
    char *a = repeat("{{ ", "[", 5000, "1");
    char *b = a ? repeat(a, "]", 5000, " }}") : NULL;
    CHECK(b != NULL);
    if (b) check_fail_n(b, strlen(b), &p, NULL, "depth budget (1024 levels)", 10.0, __LINE__);
    free(a);
    free(b);
    FAIL_P("{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", &p, "depth budget (1024 levels)");
    p.max_depth = 8;
    enum wgllm_status st;
    struct wgllm_error err = {0};
    char *out = render_n("{{ [[1]] }}", 11, &p, NULL, &st, &err);
    CHECK(out && !strcmp(out, "[[1]]"));
    free(out);
    FAIL_P("{{ [[[[[[1]]]]]] }}", &p, "depth budget (8 levels)");
}

/* a list that holds itself: printing it must stop, not recurse forever */
TEST(self_reference) {
    const char *mk = "{% set a = [] %}{% set _ = a.append(a) %}{% set _ = a.append(a) %}";
    static const char *uses[] = {"{{ a | tojson }}", "{{ a }}", "{{ a | string }}", "{{ a | tojson(indent=2) }}"};
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++) {
        char src[256];
        snprintf(src, sizeof src, "%s%s", mk, uses[i]);
        check_fail_n(src, strlen(src), NULL, NULL, "nesting deeper than 200", 10.0, __LINE__);
    }
    OK("{% set ns = namespace(x=1) %}{% set ns.me = ns %}{{ ns.me.me.me.x }}{{ ns.me == ns }}", "1true");
    FAIL("{% set ns = namespace(x=1) %}{% set ns.me = ns %}{{ ns | tojson }}", "nesting deeper than 200");
}

static void time_parse(const char *what, const char *src, size_t len, const struct wgllm_chat_params *p,
                       double max_s) {
    struct wgllm_chat_template *t = NULL;
    struct wgllm_error err = {0};
    double t0 = now_s();
    enum wgllm_status st = wgllm_chat_template_init(src, len, p, &t, &err);
    double dt = now_s() - t0;
    printf("  parse %-28s %5.2f MiB in %.3f s (CPU)\n", what, (double)len / (1 << 20), dt);
    if (st != WGLLM_STATUS_OK || dt > max_s) {
        fprintf(stderr, "  %s: status %d (%s) after %.3f s (at most %.1f)\n", what, (int)st, err.message, dt, max_s);
        test_checks_failed_in_current++;
    }
    wgllm_chat_template_free(t);
}

/* The lexer found each token's line by scanning from the start: quadratic.
 * A 4 MiB template took minutes; now each of these takes a fraction of a
 * second of CPU (a few times that under AddressSanitizer). */
#if defined(__SANITIZE_ADDRESS__)
#define PARSE_S 4.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARSE_S 4.0
#endif
#endif
#ifndef PARSE_S
#define PARSE_S 1.0
#endif
TEST(lex_parse_linear) {
    size_t len = 0;
    char *real = test_read_file(test_shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), &len);
    CHECK(real != NULL);
    if (real) {
        char *big = repeat("", real, (4 << 20) / len + 1, "");
        CHECK(big != NULL);
        if (big) time_parse("real template x1700", big, strlen(big), NULL, PARSE_S);
        free(big);
    }
    free(real);
    char *dense = repeat("", "{{ x }}", (4 << 20) / 7, "");
    char *text = repeat("", "{ a { b } c } hello world\n", (4 << 20) / 26, "");
    char *comment = repeat("{#", " { % } # ", (4 << 20) / 9, "#}");
    char *str = repeat("{{ '", "abc\\n", (4 << 20) / 5, "' }}");
    char *lines = repeat("", "\n", 4 << 20, "{{ 1 + }}");
    CHECK(dense && text && comment && str && lines);
    if (dense && text && comment && str && lines) {
        time_parse("dense {{ x }} tags", dense, strlen(dense), NULL, PARSE_S);
        time_parse("text with braces", text, strlen(text), NULL, PARSE_S);
        time_parse("one long comment", comment, strlen(comment), NULL, PARSE_S);
        time_parse("one long string literal", str, strlen(str), NULL, PARSE_S);
        /* an error after 4M lines still names its line, at once */
        double t0 = now_s();
        struct wgllm_chat_template *t = NULL;
        struct wgllm_error err = {0};
        CHECK(wgllm_chat_template_parse(lines, strlen(lines), &t, &err) == WGLLM_STATUS_BAD_FORMAT);
        CHECK(strstr(err.message, "line 4194305, column 8") != NULL);
        CHECK(now_s() - t0 < PARSE_S);
    }
    free(dense);
    free(text);
    free(comment);
    free(str);
    free(lines);
}

/* What keeps long loops cheap (no `loop` object unless the body names it, no
 * copy of the walked list, O(1) dict keys) must not change any rendering. */
TEST(loop_and_dict_semantics) {
    OK("{% for x in 'ab' | list %}{% for y in [1, 2] %}{{ loop.index }}{{ x }}{% endfor %}{% endfor %}", "1a2a1b2b");
    OK("{% for x in [1, 2] %}{% for y in [5] %}{{ y }}{% endfor %}{{ loop.index }}{{ loop.length }}{% endfor %}",
       "512522");
    OK("{% for x in [1, 2] %}{% set loop.q = x %}{% endfor %}ok", "ok");
    OK("{% for x in [1, 2, 3] %}{{ loop.previtem }}{{ x }}{{ loop.nextitem }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }};{% endfor %}",
       "123truefalse;1232falsefalse;231falsetrue;");
    OK("{% set l = [1, 2] %}{% for x in l %}{% set _ = l.append(x) %}{{ x }}{% endfor %}{{ l | length }}", "124");
    OK("{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}{{ x }}{% endfor %}", "1224");
    OK("{% for x in [1, 2] %}{% set loop.index = 9 %}{{ loop.index }}{% set loop.q = 1 %}{{ loop.q }}{% endfor %}",
       "9191");
    /* a macro called through a namespace: the namespace expression is evaluated once */
    OK("{% macro m(x) %}<{{ x }}>{% endmacro %}{% set l = [] %}"
       "{{ namespace(f=m, _=l.append(1)).f(2) }}{{ l | length }}",
       "<2>1");
    OK("{% macro m(x) %}{{ x }}{% endmacro %}{% set ns = namespace(f=m) %}{{ ns.f(ns.f(3)) }}", "3");
    /* a JSON object of 100k keys: lookups and the last duplicate winning */
    size_t n = 100000;
    char *msgs = malloc(n * 24 + 100);
    CHECK(msgs != NULL);
    if (!msgs) return;
    size_t k = (size_t)sprintf(msgs, "[{\"role\":\"user\",\"content\":\"c\",\"d\":{");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(msgs + k, "\"k%zu\":%zu,", i, i);
    sprintf(msgs + k, "\"k7\":\"last\"}}]");
    const char *src = "{{ messages[0].d.k99999 }} {{ messages[0].d['k7'] }} {{ messages[0].d | length }}";
    enum wgllm_status st;
    struct wgllm_error err = {0};
    double t0 = now_s();
    char *out = render_n(src, strlen(src), NULL, msgs, &st, &err);
    CHECK(out && !strcmp(out, "99999 last 100000"));
    CHECK(now_s() - t0 < 2.0);
    free(out);
    free(msgs);
}

int main(void) {
    alarm(600); /* a hang is a failure, not a stuck test run */
    RUN(default_params);
    RUN(slices_and_range_never_overflow);
    RUN(integer_arithmetic_is_checked);
    RUN(step_budget);
    RUN(memory_budget);
    RUN(output_budget);
    RUN(depth_budget);
    RUN(self_reference);
    RUN(lex_parse_linear);
    RUN(loop_and_dict_semantics);
    return test_summary("test_jinja_limits");
}
