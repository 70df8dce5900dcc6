/*
 * test_hostile_tokenize.c - tokenizers on inputs chosen to hurt: 8 MiB of
 * one repeated character (a single "word" that no pre-tokenizer splits, the
 * classic quadratic case of BPE merge loops) and 8 MiB of random bytes
 * (WGLLM_HOSTILE_MIB=N: N MiB, e.g. 256 for the long run; the default keeps
 * the suite's time: 16x the input of the small run, where a quadratic loop
 * would cost 256x, is what the test needs),
 * with each tokenizer family that synth models carry (SentencePiece: the
 * llama vocabulary of "tiny"; byte-level BPE: the GPT-2 vocabulary of
 * "tiny-qwen2"). Each must finish in seconds, in time and memory linear in
 * the input; and the merge loop that makes that possible (vocab/merge.c)
 * must merge exactly what the plain definition merges.
 */
#include "test.h"

#include "model/synth.h"
#include "gguf/gguf.h"
#include "vocab/merge.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"

#include <sys/resource.h>

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static long max_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* ---- the merge loop against its definition --------------------------------- */

/* A deterministic priority from the pair's text: few distinct keys (ties
 * everywhere, which is where the order matters) and many missing pairs. */
static uint32_t toy_key(const void *ctx, const char *text, uint32_t a, uint32_t b, uint32_t c) {
    (void)ctx;
    uint64_t h = 1469598103934665603ull ^ (b - a);
    for (uint32_t i = a; i < c; i++) h = (h ^ (uint8_t)text[i]) * 1099511628211ull;
    if (c - a > 12 || h % 5 == 0) return WGLLM_MERGE_NONE;
    return (uint32_t)(h % 4);
}

/* The definition: merge the pair with the lowest key, the leftmost of
 * equals, until none is left; boundaries[] are the symbols' starts. */
static int reference_merge(const char *text, uint32_t len, uint32_t *start) {
    int n = 0;
    for (uint32_t off = 0; off < len; off += WGLLM_MIN((uint32_t)wgllm_unicode_len_utf8(text[off]), len - off))
        start[n++] = off;
    start[n] = len;
    for (;;) {
        int best = -1;
        uint32_t bk = WGLLM_MERGE_NONE;
        for (int i = 0; i + 1 < n; i++) {
            uint32_t k = toy_key(NULL, text, start[i], start[i + 1], start[i + 2]);
            if (k < bk) bk = k, best = i;
        }
        if (best < 0) return n;
        memmove(&start[best + 1], &start[best + 2], (size_t)(n - best - 1) * sizeof *start);
        n--;
    }
}

TEST(merge_loop_matches_definition) {
    static const char *const pieces[] = {"a", "b", "c", "\xc3\xa9", "\xe2\x96\x81", "\xf0\x9f\x98\x80", "\x80", "\xff"};
    struct wgllm_merge mg = {0};
    char text[400];
    uint32_t start[402];
    int bad = 0;
    for (int round = 0; round < 3000 && !bad; round++) {
        uint32_t len = 0, want = 1 + next_rand() % 380;
        /* mostly runs of one piece, where ties are densest */
        while (len < want) {
            const char *p = pieces[next_rand() % (round % 3 ? 2 : 8)];
            size_t pl = strlen(p);
            if (len + pl > sizeof text) break;
            memcpy(text + len, p, pl);
            len += (uint32_t)pl;
        }
        if (round % 7 == 0 && len > 1) len--; /* a cut character at the end */
        int n = reference_merge(text, len, start);
        CHECK(wgllm_merge_run(&mg, text, len, toy_key, NULL));
        int k = 0;
        for (int32_t i = 0; i >= 0; i = mg.next[i], k++) {
            if (k >= n || wgllm_merge_begin(&mg, i) != start[k] || wgllm_merge_end(&mg, i) != start[k + 1]) {
                bad = 1;
                break;
            }
        }
        if (k != n) bad = 1;
        if (bad) fprintf(stderr, "  round %d: merge.c differs from the definition (%d symbols)\n", round, n);
    }
    CHECK(!bad);
    wgllm_merge_free(&mg);
}

/* ---- huge inputs ----------------------------------------------------------- */

static struct wgllm_model *synth_vocab_model(const char *shape) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = shape;
    sp.n_layer = 1;
    return test_synth_model(&sp);
}

static char *make_input(int kind, size_t n) {
    char *t = malloc(n);
    if (!t) return NULL;
    rng = 12345;
    for (size_t i = 0; i < n; i++) t[i] = kind == 0 ? 'a' : (char)next_rand();
    return t;
}

/* Tokenizes n bytes of input `kind` (0: one letter, 1: random bytes);
 * returns the token count and the CPU seconds it took in *secs. */
static int32_t timed_tokenize(const struct wgllm_model *m, int kind, size_t n, double *secs, int32_t **toks) {
    char *t = make_input(kind, n);
    if (!t) return -1;
    struct wgllm_error err = {0};
    /* one pass (wgllm_tokenize_alloc counts first): no tokenizer here makes
     * more than one token per byte of these inputs */
    const int32_t cap = (int32_t)n + 16;
    *toks = malloc(sizeof(int32_t) * (size_t)cap);
    const double t0 = cpu_seconds();
    int32_t r = *toks ? wgllm_tokenize(m, t, n, *toks, cap, false, false, &err) : -1;
    *secs = cpu_seconds() - t0;
    if (r < 0) fprintf(stderr, "  tokenize: %d %s\n", r, err.message);
    free(t);
    return r;
}

static void huge_inputs(const char *shape) {
    struct wgllm_model *m = synth_vocab_model(shape);
    CHECK(m != NULL);
    if (!m) return;
    static const char *const kinds[2] = {"one repeated character", "random bytes"};
    const char *env = getenv("WGLLM_HOSTILE_MIB");
    const long mib = env && atol(env) >= 1 && atol(env) <= 4096 ? atol(env) : 8;
    const size_t big = (size_t)mib << 20, small = big / 16;
    for (int kind = 0; kind < 2; kind++) {
        double ts, tb;
        int32_t *toks = NULL;
        int32_t ns = timed_tokenize(m, kind, small, &ts, &toks);
        free(toks);
        const long rss0 = max_rss_mb();
        toks = NULL;
        int32_t nb = timed_tokenize(m, kind, big, &tb, &toks);
        const long rss = max_rss_mb() - rss0;
        printf("  %s, %s: %ld MiB -> %d tokens in %.2f s CPU (%ld KiB: %.2f s), peak memory +%ld MiB\n", shape,
               kinds[kind], mib, nb, tb, mib * 64, ts, rss);
        CHECK(ns > 0 && nb > 0);
        /* linear: 16x the input may cost 16x (with a log factor and cache
         * misses: up to 40x here), not the 256x of a quadratic loop;
         * and some seconds, even under the sanitizers */
        CHECK(tb < 40.0 * ts + 2.0);
        CHECK(tb < 120.0);
        /* memory: a few dozen bytes per input byte at most */
        CHECK(rss < 48 * mib);
        if (kind == 0 && nb > 0 && toks) {
            /* the repeated letter comes back, piece by piece */
            char piece[64];
            size_t total = 0;
            bool same = true;
            for (int32_t i = 0; i < nb && same; i++) {
                int32_t k = wgllm_token_to_piece(m, toks[i], piece, sizeof piece, false);
                for (int32_t j = 0; j < k; j++) same = same && (piece[j] == 'a' || (piece[j] == ' ' && total == 0 && j == 0));
                total += k > 0 ? (size_t)k : 0;
            }
            CHECK(same);
            CHECK(total == big || total == big + 1); /* SentencePiece adds its leading space */
        }
        free(toks);
    }
    wgllm_model_free(m);
}

TEST(huge_inputs_spm) { huge_inputs("tiny"); }
TEST(huge_inputs_bpe) { huge_inputs("tiny-qwen2"); }

/* ---- many special tokens ---------------------------------------------------- */

/* 20000 special tokens (Gemma has ~6k): llama.cpp's partition searches the
 * text once per special token, so 8 MiB of text cost 20000 x 8 MiB of
 * searching (minutes); here one automaton pass finds them all. The text is
 * the tokens themselves between letters and spaces, tokenized with
 * parse_special, and must come back byte for byte. */
TEST(many_special_tokens) {
    enum { N_SP = 20000 };
    static char store[N_SP][12];
    const char *texts[N_SP];
    static int32_t types[N_SP];
    rng = 777;
    for (int i = 0; i < N_SP; i++) {
        const int n = 3 + (int)(next_rand() % 8);
        store[i][0] = '<';
        for (int j = 1; j < n - 1; j++) store[i][j] = (char)('a' + next_rand() % 26);
        store[i][n - 1] = '>';
        store[i][n] = 0;
        texts[i] = store[i];
        types[i] = i % 2 ? WGLLM_TOKEN_TYPE_CONTROL : WGLLM_TOKEN_TYPE_USER_DEFINED;
    }
    struct wgllm_vocab *v = test_byte_vocab(texts, types, N_SP, "many specials", "gpt-2");
    CHECK(v != NULL);
    if (!v) return;
    double secs[2] = {0, 0};
    const size_t sizes[2] = {(size_t)1 << 20, (size_t)8 << 20};
    for (int r = 0; r < 2; r++) {
        const size_t n = sizes[r];
        char *t = malloc(n);
        size_t len = 0;
        while (len < n) {
            const char *sp = texts[next_rand() % N_SP];
            const size_t k = strlen(sp);
            if (len + k + 1 > n) break;
            memcpy(t + len, sp, k);
            len += k;
            t[len++] = next_rand() % 2 ? ' ' : 'x';
        }
        int32_t *toks = malloc(sizeof(int32_t) * (len + 1));
        const double t0 = cpu_seconds();
        const int32_t nt = wgllm_vocab_tokenize(v, t, len, toks, (int32_t)len + 1, false, true);
        secs[r] = cpu_seconds() - t0;
        CHECK(nt > 0);
        /* every special token is found: the pieces give the text back */
        size_t at = 0;
        bool same = nt > 0;
        char piece[64];
        for (int32_t i = 0; i < nt && same; i++) {
            const int32_t k = wgllm_vocab_token_to_piece(v, toks[i], piece, sizeof piece, true);
            same = k > 0 && at + (size_t)k <= len && memcmp(t + at, piece, (size_t)k) == 0;
            at += k > 0 ? (size_t)k : 0;
        }
        CHECK(same && at == len);
        CHECK(nt < (int32_t)(len / 3)); /* the tokens were found, not spelled out byte by byte */
        printf("  %d special tokens, %zu bytes of text -> %d tokens in %.2f s CPU\n", N_SP, len, nt, secs[r]);
        free(toks);
        free(t);
    }
    /* linear: 8x the text, not 8x times the number of special tokens */
    CHECK(secs[1] < 40.0 * secs[0] + 2.0);
    CHECK(secs[1] < 60.0);
    wgllm_vocab_free(v);
}

/* A WordPiece token longer than the longest-match walk allows is refused by name. */
TEST(wordpiece_token_too_long) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    static char longtok[1100];
    memset(longtok, 'a', sizeof longtok - 1);
    const char *toks[] = {"[UNK]", "a", longtok};
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    struct wgllm_gguf *g = NULL;
    struct wgllm_vocab *v = NULL;
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, NULL, NULL, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        CHECK_EQ_INT(wgllm_vocab_init(g, &v, &err), WGLLM_STATUS_UNSUPPORTED);
        CHECK(strstr(err.message, "WordPiece token") != NULL);
        printf("  %s\n", err.message);
        wgllm_gguf_free(g);
    }
    longtok[1000] = 0; /* 1000 bytes: accepted */
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, NULL, NULL, &err), WGLLM_STATUS_OK);
    g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        CHECK_EQ_INT(wgllm_vocab_init(g, &v, &err), WGLLM_STATUS_OK);
        wgllm_vocab_free(v);
        wgllm_gguf_free(g);
    }
    remove(path);
    wgllm_gguf_writer_free(w);
}

int main(void) {
    wgllm_base_init();
    RUN(merge_loop_matches_definition);
    RUN(huge_inputs_spm);
    RUN(huge_inputs_bpe);
    RUN(many_special_tokens);
    RUN(wordpiece_token_too_long);
    return test_summary("test_hostile_tokenize");
}
