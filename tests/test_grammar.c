/*
 * test_grammar.c - the GBNF reader and the matcher (src/grammar): which
 * texts a grammar accepts (vectors in the spirit of llama.cpp's grammar
 * integration tests, worked out from the language's definition), the
 * errors for bad grammars (line, column, rule), the budgets, and the token
 * mask checked against its definition: token t is in the mask exactly when
 * accepting t succeeds, over vocabularies with shared prefixes, multi-byte
 * and split code points, end-of-generation and <[id]> tokens.
 */
#include "grammar/grammar.h"
#include "test.h"

static struct wgllm_grammar *parse(const char *text) {
    struct wgllm_grammar *g = NULL;
    struct wgllm_error err = {0};
    if (wgllm_grammar_parse(text, strlen(text), NULL, &g, &err) != WGLLM_STATUS_OK)
        fprintf(stderr, "  parse failed: %s\n", err.message);
    return g;
}

/* 1: the whole text is accepted and the grammar can end there; 0: not */
static int accepts(const struct wgllm_grammar *g, const char *text) {
    struct wgllm_grammar_state *st = NULL;
    if (wgllm_grammar_state_init(g, &st, NULL) != WGLLM_STATUS_OK) return -1;
    int r = wgllm_grammar_state_accept_text(st, text, strlen(text), NULL) == WGLLM_STATUS_OK &&
            wgllm_grammar_state_can_end(st);
    wgllm_grammar_state_free(st);
    return r;
}

static void check_vectors(const char *grammar, const char *const *pass, const char *const *fail) {
    struct wgllm_grammar *g = parse(grammar);
    CHECK(g != NULL);
    if (!g) return;
    for (size_t i = 0; pass[i]; i++) {
        if (accepts(g, pass[i]) != 1) fprintf(stderr, "  grammar %s\n  should accept '%s'\n", grammar, pass[i]);
        CHECK(accepts(g, pass[i]) == 1);
    }
    for (size_t i = 0; fail[i]; i++) {
        if (accepts(g, fail[i]) != 0) fprintf(stderr, "  grammar %s\n  should refuse '%s'\n", grammar, fail[i]);
        CHECK(accepts(g, fail[i]) == 0);
    }
    wgllm_grammar_free(g);
}

TEST(literals_alternatives_classes) {
    check_vectors("root ::= \"a\" | \"bc\"\n", (const char *[]){"a", "bc", NULL},
                  (const char *[]){"", "b", "ab", "c", "bcc", NULL});
    check_vectors("root ::= [a-z]+", (const char *[]){"a", "hello", "zz", NULL},
                  (const char *[]){"", "A", "hello!", "a b", NULL});
    check_vectors("root ::= [^\"\\\\]*", (const char *[]){"", "abc", "é ü", NULL},
                  (const char *[]){"\"", "a\\b", NULL});
    check_vectors("root ::= [a-cx-z0] .", (const char *[]){"ab", "y\xc3\xa9", "0.", NULL},
                  (const char *[]){"d1", "w", "a", NULL});
    /* escapes */
    check_vectors("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\\[\\]\"",
                  (const char *[]){"A\xc3\xa9\xf0\x9f\x98\x80\t\n\\\"[]", NULL}, (const char *[]){"A", NULL});
    /* a class of multi-byte code points */
    check_vectors("root ::= [α-ω]{2}", (const char *[]){"αβ", "ωω", NULL}, (const char *[]){"α", "ab", "αβγ", NULL});
}

TEST(repetitions) {
    check_vectors("root ::= \"a\"{3}", (const char *[]){"aaa", NULL}, (const char *[]){"aa", "aaaa", "", NULL});
    check_vectors("root ::= \"a\"{2,4}", (const char *[]){"aa", "aaa", "aaaa", NULL},
                  (const char *[]){"a", "aaaaa", NULL});
    check_vectors("root ::= \"a\"{2,}", (const char *[]){"aa", "aaaaaaa", NULL}, (const char *[]){"a", "", NULL});
    check_vectors("root ::= \"a\"{0,2} \"b\"", (const char *[]){"b", "ab", "aab", NULL},
                  (const char *[]){"aaab", "a", NULL});
    check_vectors("root ::= (\"ab\" | \"c\")* \"d\"?", (const char *[]){"", "ab", "cabc", "abd", "d", NULL},
                  (const char *[]){"a", "dd", "abdc", NULL});
    check_vectors("root ::= \"x\"+ \"y\"{0}", (const char *[]){"x", "xxx", NULL}, (const char *[]){"xy", "", NULL});
}

TEST(rules_comments_newlines) {
    const char *g = "# numbers and lists\n"
                    "root ::= \"[\" ws ( num ( ws \",\" ws num )* )? ws \"]\"   # a list\n"
                    "num  ::= \"-\"? [0-9]+\n"
                    "ws   ::= [ \\t\\n]*\n";
    check_vectors(g, (const char *[]){"[]", "[1]", "[ 1, -22 ,3 ]", "[\n1\n]", NULL},
                  (const char *[]){"[", "[1,]", "[,1]", "[--1]", "1", NULL});
    /* alternatives may continue on the next line after '|', and a group spans lines */
    check_vectors("root ::= \"a\" |\n  \"b\"\nx ::= (\n \"q\"\n | \"r\" )\n", (const char *[]){"a", "b", NULL},
                  (const char *[]){"q", NULL});
    /* right recursion is fine */
    check_vectors("root ::= \"(\" root \")\" | \"\"", (const char *[]){"", "()", "((()))", NULL},
                  (const char *[]){"(", "())", NULL});
    /* names are letters, digits and '-' (generated rules are name_N, so they cannot clash) */
    check_vectors("root ::= x-1 2y\nx-1 ::= \"a\"\n2y ::= \"b\"", (const char *[]){"ab", NULL}, (const char *[]){"a", NULL});
    /* CRLF line ends */
    check_vectors("root ::= a\r\na ::= \"z\"\r\n", (const char *[]){"z", NULL}, (const char *[]){"a", NULL});
}

TEST(json_grammar) {
    /* llama.cpp's grammars/json.gbnf, in substance */
    const char *g =
        "root   ::= object\n"
        "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
        "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
        "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
        "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
        "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
        "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    check_vectors(g,
                  (const char *[]){"{}", "{\"a\": 1}", "{\"a\": [1, 2.5, -3e+7], \"b\": {\"c\": null}}",
                                   "{\"s\": \"x\\\"y\\u00e9\"}", "{\"t\": true, \"f\": false}", NULL},
                  (const char *[]){"", "[]", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": \"\n\"}", "{\"a\": tru}",
                                   "{'a': 1}", "{\"a\": 1,}", NULL});
}

static void check_error(const char *grammar, const char *needle) {
    struct wgllm_grammar *g = NULL;
    struct wgllm_error err = {0};
    const enum wgllm_status s = wgllm_grammar_parse(grammar, strlen(grammar), NULL, &g, &err);
    CHECK(s != WGLLM_STATUS_OK);
    CHECK(g == NULL);
    if (!strstr(err.message, needle)) fprintf(stderr, "  '%s': message '%s' lacks '%s'\n", grammar, err.message, needle);
    CHECK(strstr(err.message, needle) != NULL);
    wgllm_grammar_free(g);
}

TEST(bad_grammars_are_named_errors) {
    check_error("", "no rule named 'root'");
    check_error("rot ::= \"a\"", "no rule named 'root'");
    check_error("root ::= foo", "rule 'foo' is used but never defined");
    check_error("root ::= \"a\"\nroot2 ::= [a-", "unexpected end");
    check_error("root ::= \"abc", "unexpected end");
    check_error("root ::= \"\\q\"", "unknown escape '\\q'");
    check_error("root ::= \"\\x4\"", "hex digits");
    check_error("root = \"a\"", "line 1 column 6 (rule 'root'): expecting '::='");
    check_error("root ::= \"a\"\n\nx ::= (\"b\"", "line 3");
    check_error("root ::= (\"b\"", "expecting ')'");
    check_error("root ::= * \"a\"", "repetition with nothing before it");
    check_error("root ::= \"a\"{3,2}", "max < min");
    check_error("root ::= \"a\"{2001}", "repetition count above 2000");
    check_error("root ::= \"a\" ) ", "expecting the end of the line");
    check_error("root ::= a_b\na_b ::= \"x\"", "expecting the end of the line");
    check_error("root ::= \"a\xff\"", "invalid UTF-8");
    check_error("root ::= <|im_end|>", "needs a vocabulary");
    /* left recursion, direct, through a nullable prefix, and through a chain */
    check_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    check_error("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "rule 'x' is left-recursive");
    check_error("root ::= a\na ::= b\nb ::= c \"z\"\nc ::= a | \"q\"", "left-recursive");
    check_error("root ::= (\"a\"?)*", "left-recursive");
}

TEST(budgets) {
    struct wgllm_grammar_params p = wgllm_grammar_default_params();
    struct wgllm_grammar *g = NULL;
    struct wgllm_error err = {0};
    /* a 600-character literal 2000 times: 1.2 M elements */
    char big[700];
    size_t nb = (size_t)snprintf(big, sizeof big, "root ::= \"");
    for (int i = 0; i < 600; i++) big[nb++] = 'a';
    nb += (size_t)snprintf(big + nb, sizeof big - nb, "\"{2000}");
    CHECK(wgllm_grammar_parse(big, nb, &p, &g, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "more than 1048576 elements") != NULL);
    /* nesting */
    char deep[2400];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 1000; i++) deep[n++] = '(';
    deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"';
    for (int i = 0; i < 1000; i++) deep[n++] = ')';
    CHECK(wgllm_grammar_parse(deep, n, &p, &g, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "nested deeper than 256") != NULL);
    /* an ambiguous grammar: after n a's, a parse for each count of b's still owed */
    const char *amb = "root ::= x\nx ::= \"a\" x | \"a\" x \"b\" | \"\"";
    p.max_stacks = 64;
    CHECK(wgllm_grammar_parse(amb, strlen(amb), &p, &g, &err) == WGLLM_STATUS_OK);
    struct wgllm_grammar_state *st = NULL;
    CHECK(wgllm_grammar_state_init(g, &st, &err) == WGLLM_STATUS_OK);
    enum wgllm_status s = WGLLM_STATUS_OK;
    for (int i = 0; i < 200 && s == WGLLM_STATUS_OK; i++) s = wgllm_grammar_state_accept_text(st, "a", 1, &err);
    CHECK(s == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "too many parses") != NULL);
    wgllm_grammar_state_free(st);
    wgllm_grammar_free(g);
    /* a long chain of rules is read without deep recursion */
    size_t cap = 40 * 50000 + 64;
    char *chain = malloc(cap);
    size_t m = (size_t)snprintf(chain, cap, "root ::= r0\n");
    for (int i = 0; i < 50000; i++) m += (size_t)snprintf(chain + m, cap - m, "r%d ::= r%d\n", i, i + 1);
    m += (size_t)snprintf(chain + m, cap - m, "r50000 ::= \"z\"\n");
    g = NULL;
    if (wgllm_grammar_parse(chain, m, NULL, &g, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  chain: %s\n", err.message);
    CHECK(g != NULL);
    CHECK(g && accepts(g, "z") == 1);
    CHECK(g && accepts(g, "zz") == 0);
    wgllm_grammar_free(g);
    free(chain);
}

/* ---- masks against their definition ---------------------------------------- */

struct toyvocab {
    const char *piece[64];
    uint32_t len[64];
    bool eog[64];
    int32_t n;
};

static void toy_add(struct toyvocab *v, const char *s, bool eog) {
    v->piece[v->n] = s, v->len[v->n] = (uint32_t)strlen(s), v->eog[v->n] = eog;
    v->n++;
}

/* reference: a fresh state, the prefix, then the token */
static bool allowed_ref(const struct wgllm_grammar *g, const struct wgllm_grammar_vocab *gv, const char *prefix,
                        const int32_t *prefix_toks, int n_prefix_toks, int32_t t) {
    struct wgllm_grammar_state *st = NULL;
    if (wgllm_grammar_state_init(g, &st, NULL) != WGLLM_STATUS_OK) return false;
    bool ok = wgllm_grammar_state_accept_text(st, prefix, strlen(prefix), NULL) == WGLLM_STATUS_OK;
    for (int i = 0; ok && i < n_prefix_toks; i++)
        ok = wgllm_grammar_state_accept_token(st, gv, prefix_toks[i], NULL) == WGLLM_STATUS_OK;
    ok = ok && wgllm_grammar_state_accept_token(st, gv, t, NULL) == WGLLM_STATUS_OK;
    wgllm_grammar_state_free(st);
    return ok;
}

static int mask_matches_definition(const char *grammar, const struct toyvocab *v, const char *prefix,
                                   const int32_t *toks, int n_toks) {
    struct wgllm_grammar *g = parse(grammar);
    if (!g) return -1;
    struct wgllm_grammar_vocab *gv = wgllm_grammar_vocab_init(v->piece, v->len, v->eog, v->n);
    struct wgllm_grammar_state *st = NULL;
    int bad = -1;
    if (gv && wgllm_grammar_state_init(g, &st, NULL) == WGLLM_STATUS_OK &&
        wgllm_grammar_state_accept_text(st, prefix, strlen(prefix), NULL) == WGLLM_STATUS_OK) {
        bool ok = true;
        for (int i = 0; ok && i < n_toks; i++) ok = wgllm_grammar_state_accept_token(st, gv, toks[i], NULL) == WGLLM_STATUS_OK;
        uint8_t mask[64];
        if (ok && wgllm_grammar_state_mask(st, gv, mask, NULL) == WGLLM_STATUS_OK) {
            bad = 0;
            for (int32_t t = 0; t < v->n; t++) {
                const bool ref = allowed_ref(g, gv, prefix, toks, n_toks, t);
                if (ref != (mask[t] != 0)) {
                    fprintf(stderr, "  %s | prefix '%s': token %d '%s' mask %d, definition %d\n", grammar, prefix, t,
                            v->piece[t], mask[t], ref);
                    bad++;
                }
            }
            /* the same state again comes from the cache, identical */
            uint8_t again[64];
            const uint64_t hits = wgllm_grammar_state_mask_cache_hits(st);
            if (wgllm_grammar_state_mask(st, gv, again, NULL) != WGLLM_STATUS_OK || memcmp(mask, again, (size_t)v->n) ||
                wgllm_grammar_state_mask_cache_hits(st) != hits + 1)
                bad++;
        }
    }
    wgllm_grammar_state_free(st);
    wgllm_grammar_vocab_free(gv);
    wgllm_grammar_free(g);
    return bad;
}

TEST(mask_is_the_set_of_acceptable_tokens) {
    struct toyvocab v = {0};
    const char *pieces[] = {"a", "ab", "abc", "b", "ba", "{", "{\"", "\"", "\":", " ", " \"", "1", "12", "-1",
                            "é", "\xc3", "\xa9", "\xc3\xa9x", "x\xc3", "}", "\"}", "null", "nu", "true", ",", ", \"",
                            "ab", "", "<|im_end|>", "\xe2\x82", "\xac", "\xff"};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) toy_add(&v, pieces[i], false);
    toy_add(&v, "</s>", true); /* end of generation, with a piece that is never text */
    const char *json = "root ::= \"{\" ws ( str \":\" ws val ( \",\" ws str \":\" ws val )* )? \"}\"\n"
                       "val ::= str | [0-9-] [0-9]* | \"null\" | \"true\"\n"
                       "str ::= \"\\\"\" [^\"]* \"\\\"\"\nws ::= \" \"?\n";
    const char *prefixes[] = {"", "{", "{ ", "{\"", "{\"ab", "{\"a\":", "{\"a\": ", "{\"a\": 1", "{\"a\": n", "{\"a\": \"x"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        CHECK_EQ_INT(mask_matches_definition(json, &v, prefixes[i], NULL, 0), 0);
    /* a finished text: only the end of generation */
    CHECK_EQ_INT(mask_matches_definition(json, &v, "{}", NULL, 0), 0);
    /* code points split across tokens: after the token "\xc3" only a continuation fits */
    const char *utf = "root ::= [a-zé€]+";
    CHECK_EQ_INT(mask_matches_definition(utf, &v, "", NULL, 0), 0);
    const int32_t half[] = {15}; /* "\xc3" */
    CHECK_EQ_INT(mask_matches_definition(utf, &v, "", half, 1), 0);
    const int32_t euro_half[] = {29}; /* "\xe2\x82" */
    CHECK_EQ_INT(mask_matches_definition(utf, &v, "a", euro_half, 1), 0);
    CHECK_EQ_INT(mask_matches_definition("root ::= [^a]+", &v, "", NULL, 0), 0);
    /* token terminals */
    CHECK_EQ_INT(mask_matches_definition("root ::= \"a\" <[28]> \"b\" | \"ab\" !<[3]> ", &v, "a", NULL, 0), 0);
    CHECK_EQ_INT(mask_matches_definition("root ::= \"a\" <[28]> \"b\" | \"ab\" !<[3]> ", &v, "ab", NULL, 0), 0);
    CHECK_EQ_INT(mask_matches_definition("root ::= .*", &v, "", NULL, 0), 0);
    /* a <[id]> naming the end-of-generation token: that token still only ends (found by fuzz_gbnf) */
    CHECK_EQ_INT(mask_matches_definition("root ::= \"a\" <[32]> \"b\"", &v, "a", NULL, 0), 0);
}

TEST(mask_on_a_large_random_vocabulary) {
    /* 4000 random pieces over a small alphabet (many shared prefixes), and the
     * JSON-ish grammar: the walk against the definition, token by token */
    enum { N = 4000 };
    static char buf[N][8];
    static const char *pieces[N];
    static uint32_t lens[N];
    static bool eog[N];
    const char alpha[] = "ab{}\":, 0123n\xc3\xa9";
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int len = 1 + (int)((s >> 33) % 6);
        for (int k = 0; k < len; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[i][k] = alpha[(s >> 33) % (sizeof alpha - 1)];
        }
        buf[i][len] = 0;
        pieces[i] = buf[i], lens[i] = (uint32_t)len, eog[i] = i == 7;
    }
    const char *gtext = "root ::= \"{\" ( str \":\" \" \"? val ( \", \" str \":\" \" \"? val )* )? \"}\"\n"
                        "val ::= str | [0-9]+ | \"null\"\nstr ::= \"\\\"\" [^\"]* \"\\\"\"\n";
    struct wgllm_grammar *g = parse(gtext);
    struct wgllm_grammar_vocab *gv = wgllm_grammar_vocab_init(pieces, lens, eog, N);
    CHECK(g && gv);
    if (!g || !gv) return;
    const char *prefixes[] = {"", "{", "{\"", "{\"a\xc3\xa9", "{\"a\":", "{\"a\": 1", "{\"a\": \"b\", "};
    static uint8_t mask[N];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        struct wgllm_grammar_state *st = NULL;
        CHECK(wgllm_grammar_state_init(g, &st, NULL) == WGLLM_STATUS_OK);
        CHECK(wgllm_grammar_state_accept_text(st, prefixes[i], strlen(prefixes[i]), NULL) == WGLLM_STATUS_OK);
        CHECK(wgllm_grammar_state_mask(st, gv, mask, NULL) == WGLLM_STATUS_OK);
        int bad = 0, n_allowed = 0;
        for (int t = 0; t < N; t++) {
            n_allowed += mask[t];
            bad += allowed_ref(g, gv, prefixes[i], NULL, 0, t) != (mask[t] != 0);
        }
        if (bad) fprintf(stderr, "  prefix '%s': %d tokens differ (%d allowed)\n", prefixes[i], bad, n_allowed);
        CHECK_EQ_INT(bad, 0);
        CHECK(n_allowed > 0);
        wgllm_grammar_state_free(st);
    }
    /* a generation: always pick the first allowed token; the text stays valid and ends */
    struct wgllm_grammar_state *st = NULL;
    CHECK(wgllm_grammar_state_init(g, &st, NULL) == WGLLM_STATUS_OK);
    int steps = 0;
    bool ended = false;
    for (; steps < 200 && !ended; steps++) {
        CHECK(wgllm_grammar_state_mask(st, gv, mask, NULL) == WGLLM_STATUS_OK);
        /* prefer closing once the text is long, so it ends */
        int pick = -1;
        if (steps > 20 && mask[7]) pick = 7;
        for (int t = 0; t < N && pick < 0 && steps > 20; t++)
            if (mask[t] && t != 7 && strchr(pieces[t], '"')) pick = t;
        for (int t = 0; t < N && pick < 0; t++)
            if (mask[t] && t != 7) pick = t;
        for (int t = 0; t < N && pick < 0; t++)
            if (mask[t]) pick = t;
        CHECK(pick >= 0);
        if (pick < 0) break;
        if (pick == 7) ended = true;
        if (getenv("GRAMMAR_VERBOSE")) fprintf(stderr, "%s|", pieces[pick]);
        CHECK(wgllm_grammar_state_accept_token(st, gv, pick, NULL) == WGLLM_STATUS_OK);
    }
    CHECK(ended);
    CHECK(wgllm_grammar_state_mask_cache_hits(st) > 0);
    wgllm_grammar_state_free(st);
    wgllm_grammar_vocab_free(gv);
    wgllm_grammar_free(g);
}


/* Each character class's ASCII row (the matcher's fast table) agrees with the
 * class's definition for every byte 1..127: random classes of single
 * characters, ranges (empty, reversed, and ones that run past ASCII),
 * negated or not, written with \x escapes. */
TEST(ascii_rows_of_random_classes) {
    for (int trial = 0; trial < 300; trial++) {
        bool negated = rng_u32() % 2, in[128] = {0};
        char text[512];
        int at = snprintf(text, sizeof text, "root ::= [%s", negated ? "^" : "");
        const int n_items = 1 + (int)(rng_u32() % 6);
        for (int k = 0; k < n_items; k++) {
            uint32_t lo = rng_u32() % 128, hi = lo;
            const uint32_t kind = rng_u32() % 4;
            if (kind == 1) hi = lo + rng_u32() % 40;
            if (kind == 2) hi = 100 + rng_u32() % 400; /* past ASCII */
            if (kind == 3) hi = lo / 2;                    /* reversed: matches nothing */
            if (hi == lo || kind == 0)
                at += snprintf(text + at, sizeof text - (size_t)at, "\\x%02X", lo);
            else
                at += snprintf(text + at, sizeof text - (size_t)at, "\\x%02X-\\u%04X", lo, hi);
            for (uint32_t c = lo; c <= hi && c < 128; c++) in[c] = true;
        }
        snprintf(text + at, sizeof text - (size_t)at, "]");
        struct wgllm_grammar *g = parse(text);
        CHECK(g != NULL);
        if (!g) return;
        int bad = 0;
        /* from 1: text is a C string to llama.cpp's matcher, so NUL is never accepted */
        for (uint32_t c = 1; c < 128; c++) {
            struct wgllm_grammar_state *st = NULL;
            CHECK(wgllm_grammar_state_init(g, &st, NULL) == WGLLM_STATUS_OK);
            const char byte = (char)c;
            const bool got = wgllm_grammar_state_accept_text(st, &byte, 1, NULL) == WGLLM_STATUS_OK;
            wgllm_grammar_state_free(st);
            if (got != (in[c] != negated) && bad++ == 0) fprintf(stderr, "  %s: byte 0x%02X\n", text, c);
        }
        CHECK(bad == 0);
        wgllm_grammar_free(g);
    }
}

int main(void) {
    RUN(literals_alternatives_classes);
    RUN(ascii_rows_of_random_classes);
    RUN(repetitions);
    RUN(rules_comments_newlines);
    RUN(json_grammar);
    RUN(bad_grammars_are_named_errors);
    RUN(budgets);
    RUN(mask_is_the_set_of_acceptable_tokens);
    RUN(mask_on_a_large_random_vocabulary);
    return test_summary("test_grammar");
}
