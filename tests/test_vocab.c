/*
 * test_vocab.c - tokenizer conformance against llama.cpp's own test pairs
 * (../shared/vocab/ggml-vocab-*.gguf + .inp/.out, produced by llama.cpp's
 * test-tokenizer-0 with add_special=false, parse_special=false), plus
 * detokenization round trips, the buffer contract, special tokens and the
 * regex pre-tokenizer engine.
 */
#include "test.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"

#include <ctype.h>
#include <limits.h>

static struct wgllm_vocab *open_vocab(const char *name, struct wgllm_gguf **gout) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    struct wgllm_error err = {0};
    struct wgllm_gguf *g = NULL;
    if (wgllm_gguf_open(test_shared_path(rel), &g, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  cannot open %s: %s\n", rel, err.message);
        return NULL;
    }
    struct wgllm_vocab *v = NULL;
    if (wgllm_vocab_init(g, &v, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  vocab_init %s: %s\n", rel, err.message);
        v = NULL;
    }
    if (gout) *gout = g;
    else wgllm_gguf_free(g);
    return v;
}

/* Detokenizes ids[0..n) into a malloc'ed string (pieces concatenated). */
static char *detok(const struct wgllm_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, o = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        int32_t k = wgllm_vocab_token_to_piece(v, ids[i], s + o, (int32_t)(cap - o), false);
        if (k < 0) {
            cap = (cap + (size_t)-k) * 2;
            s = realloc(s, cap);
            k = wgllm_vocab_token_to_piece(v, ids[i], s + o, (int32_t)(cap - o), false);
        }
        o += (size_t)k;
    }
    *len = o;
    return s;
}

/* Runs one vocab's .inp/.out pairs; returns the number of mismatching cases. */
static int conformance(const char *name, bool spm) {
    struct wgllm_vocab *v = open_vocab(name, NULL);
    CHECK(v != NULL);
    if (!v) return -1;
    char rel[256];
    size_t ilen = 0, olen = 0;
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    char *inp = test_read_file(test_shared_path(rel), &ilen);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    char *outp = test_read_file(test_shared_path(rel), &olen);
    CHECK(inp && outp);
    if (!inp || !outp) { free(inp); free(outp); wgllm_vocab_free(v); return -1; }

    /* test-tokenizer-0: cases end with "\n__ggml_vocab_test__\n" */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outp;
    int cases = 0, bad = 0, roundtrip_bad = 0;
    int32_t ids[4096], want[4096];
    for (;;) {
        char *e = memmem(p, ilen - (size_t)(p - inp), sep, sizeof sep - 1);
        if (!e) break;
        size_t tl = (size_t)(e - p);
        char *nl = strchr(o, '\n');
        if (!nl) { CHECK(nl != NULL); break; }
        int nw = 0;
        for (char *q = o; q < nl;) {
            char *end;
            long x = strtol(q, &end, 10);
            if (end == q) break;
            want[nw++] = (int32_t)x;
            q = end;
        }
        int32_t n = wgllm_vocab_tokenize(v, p, tl, ids, 4096, false, false);
        bool same = n == nw && memcmp(ids, want, (size_t)nw * sizeof *ids) == 0;
        if (!same) {
            bad++;
            fprintf(stderr, "  %s case %d '%.*s': got %d tokens:", name, cases, (int)WGLLM_MIN(tl, 60), p, n);
            for (int i = 0; i < n && i < 24; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n      want %d:", nw);
            for (int i = 0; i < nw && i < 24; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n");
        } else if (n > 0 && wgllm_vocab_type(v) != WGLLM_VOCAB_TYPE_WPM) {
            /* round trip (not WordPiece: it lowercases and drops accents): the pieces give the text back (SPM: after the added space) */
            size_t dl;
            char *d = detok(v, ids, n, &dl);
            const char *dd = d;
            if (spm && dl > 0 && d[0] == ' ') { dd++; dl--; }
            if (!(dl == tl && memcmp(dd, p, tl) == 0)) {
                /* invalid UTF-8 or unknown chars cannot round-trip; only flag valid text */
                bool ascii_or_valid = true;
                for (size_t i = 0; i < tl; i++) ascii_or_valid &= (uint8_t)p[i] < 0x80;
                if (ascii_or_valid) {
                    roundtrip_bad++;
                    fprintf(stderr, "  %s case %d: round trip '%.*s' != '%.*s'\n", name, cases, (int)dl, dd, (int)tl, p);
                }
            }
            free(d);
        }
        cases++;
        p = e + sizeof sep - 1;
        o = nl + 1;
    }
    CHECK(cases > 30);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(roundtrip_bad, 0);
    fprintf(stderr, "  %s: %d cases, %d mismatches\n", name, cases, bad);
    free(inp);
    free(outp);
    wgllm_vocab_free(v);
    return bad;
}

TEST(conformance_llama_spm) { conformance("llama-spm", true); }
TEST(conformance_phi3) { conformance("phi-3", true); }
TEST(conformance_gpt2) { conformance("gpt-2", false); }
TEST(conformance_deepseek_coder) { conformance("deepseek-coder", false); }
TEST(conformance_bert_bge) { conformance("bert-bge", false); }

/* WordPiece details the .inp file does not pin down: [CLS]/[SEP] with
 * add_special, "##" continuations, accents stripped, [UNK] for a word
 * with no match, and pieces that detokenize with the word-start space. */
TEST(wpm_rules) {
    struct wgllm_vocab *v = open_vocab("bert-bge", NULL);
    CHECK(v != NULL);
    if (!v) return;
    CHECK_EQ_INT(wgllm_vocab_type(v), WGLLM_VOCAB_TYPE_WPM);
    int32_t ids[64], ids2[64];
    int32_t n = wgllm_vocab_tokenize(v, "Hello world!", 12, ids, 64, true, false);
    CHECK_EQ_INT(n, 5);
    if (n == 5) {
        CHECK_EQ_INT(ids[0], 101);
        CHECK_EQ_INT(ids[1], 7592);
        CHECK_EQ_INT(ids[2], 2088);
        CHECK_EQ_INT(ids[3], 999);
        CHECK_EQ_INT(ids[4], 102);
    }
    /* "Café" == "cafe" after NFD-first + lowercase */
    n = wgllm_vocab_tokenize(v, "Caf\xc3\xa9", 5, ids, 64, false, false);
    int32_t n2 = wgllm_vocab_tokenize(v, "cafe", 4, ids2, 64, false, false);
    CHECK(n > 0 && n == n2 && memcmp(ids, ids2, (size_t)n * sizeof *ids) == 0);
    /* a multi-piece word: every piece after the first is a continuation (no U+2581) */
    n = wgllm_vocab_tokenize(v, "tokenization", 12, ids, 64, false, false);
    CHECK(n >= 2);
    for (int32_t i = 0; i < n; i++) {
        const char *t = wgllm_vocab_token_text(v, ids[i]);
        CHECK((i == 0) == (strncmp(t, "\xe2\x96\x81", 3) == 0));
    }
    /* no piece matches U+0378 (unassigned): the word is [UNK] */
    n = wgllm_vocab_tokenize(v, "\xcd\xb8", 2, ids, 64, false, false);
    CHECK_EQ_INT(n, 1);
    if (n == 1) CHECK_EQ_INT(ids[0], 100);
    char buf[32];
    int32_t k = wgllm_vocab_token_to_piece(v, 7592, buf, sizeof buf, false);
    CHECK(k == 6 && memcmp(buf, " hello", 6) == 0);
    wgllm_vocab_free(v);
}

TEST(buffer_contract) {
    struct wgllm_vocab *v = open_vocab("llama-spm", NULL);
    CHECK(v != NULL);
    if (!v) return;
    const char *t = "Hello world, this is a test";
    int32_t all[64];
    int32_t n = wgllm_vocab_tokenize(v, t, strlen(t), all, 64, true, false);
    CHECK(n > 3);
    CHECK_EQ_INT(all[0], wgllm_vocab_bos(v)); /* add_bos for SPM */
    int32_t small[64];
    for (int i = 0; i < 64; i++) small[i] = 12345;
    int32_t m = wgllm_vocab_tokenize(v, t, strlen(t), small, 2, true, false);
    CHECK_EQ_INT(m, -n);
    CHECK_EQ_INT(small[2], 12345); /* nothing written past max_tokens */
    CHECK_EQ_INT(wgllm_vocab_tokenize(v, t, strlen(t), small, n, true, false), n);
    CHECK(memcmp(small, all, (size_t)n * sizeof *all) == 0);
    CHECK_EQ_INT(wgllm_vocab_tokenize(v, "", 0, small, 0, false, false), 0);
    CHECK_EQ_INT(wgllm_vocab_tokenize(v, "", 0, small, 4, true, false), 1); /* just BOS */
    /* piece buffer */
    char buf[4];
    int32_t id = all[1];
    int32_t need = wgllm_vocab_token_to_piece(v, id, buf, 0, false);
    CHECK(need < 0);
    char big[64];
    CHECK_EQ_INT(wgllm_vocab_token_to_piece(v, id, big, 64, false), -need);
    wgllm_vocab_free(v);
}

TEST(spm_special_tokens) {
    struct wgllm_vocab *v = open_vocab("llama-spm", NULL);
    CHECK(v != NULL);
    if (!v) return;
    CHECK_EQ_INT(wgllm_vocab_bos(v), 1);
    CHECK_EQ_INT(wgllm_vocab_eos(v), 2);
    CHECK(wgllm_vocab_is_eog(v, 2));
    CHECK(!wgllm_vocab_is_eog(v, 1));
    CHECK_STR(wgllm_vocab_token_text(v, 1), "<s>");
    int32_t ids[32];
    /* parse_special: "<s>" is the control token; otherwise it is plain text */
    int32_t n = wgllm_vocab_tokenize(v, "<s>hi", 5, ids, 32, false, true);
    CHECK(n >= 2);
    CHECK_EQ_INT(ids[0], 1);
    n = wgllm_vocab_tokenize(v, "<s>hi", 5, ids, 32, false, false);
    CHECK(n >= 2);
    for (int i = 0; i < n; i++) CHECK(ids[i] != 1);
    /* control tokens render empty unless special */
    char buf[16];
    CHECK_EQ_INT(wgllm_vocab_token_to_piece(v, 1, buf, 16, false), 0);
    CHECK_EQ_INT(wgllm_vocab_token_to_piece(v, 1, buf, 16, true), 3);
    CHECK(memcmp(buf, "<s>", 3) == 0);
    /* byte tokens: <0x0A> is a newline */
    n = wgllm_vocab_tokenize(v, "\n", 1, ids, 32, false, false);
    CHECK(n >= 1);
    int32_t k = wgllm_vocab_token_to_piece(v, ids[n - 1], buf, 16, false);
    CHECK_EQ_INT(k, 1);
    CHECK_EQ_INT(buf[0], '\n');
    wgllm_vocab_free(v);
}

TEST(bpe_special_and_eog) {
    struct wgllm_vocab *v = open_vocab("gpt-2", NULL);
    CHECK(v != NULL);
    if (!v) return;
    int32_t eot = -1;
    for (int32_t i = 0; i < wgllm_vocab_n_tokens(v); i++)
        if (strcmp(wgllm_vocab_token_text(v, i), "<|endoftext|>") == 0) eot = i;
    CHECK(eot >= 0);
    CHECK(wgllm_vocab_is_eog(v, eot));
    int32_t ids[32];
    const char *t = "a<|endoftext|>b";
    int32_t n = wgllm_vocab_tokenize(v, t, strlen(t), ids, 32, false, true);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[1], eot);
    n = wgllm_vocab_tokenize(v, t, strlen(t), ids, 32, false, false);
    CHECK(n > 3);
    /* BPE piece: "Ġworld" -> " world" */
    n = wgllm_vocab_tokenize(v, " world", 6, ids, 32, false, false);
    CHECK_EQ_INT(n, 1);
    char buf[16];
    CHECK_EQ_INT(wgllm_vocab_token_to_piece(v, ids[0], buf, 16, false), 6);
    CHECK(memcmp(buf, " world", 6) == 0);
    wgllm_vocab_free(v);
}

static int split_words(const char *expr, const char *text, char out[][64], int max) {
    struct wgllm_pretok *p = NULL;
    struct wgllm_error err = {0};
    if (wgllm_pretok_init(&expr, 1, &p, &err) != WGLLM_STATUS_OK) return -1;
    size_t len = strlen(text);
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    size_t n = wgllm_unicode_decode(text, len, cp);
    size_t *lens = NULL;
    size_t nw = wgllm_pretok_split(p, cp, n, &lens);
    size_t start = 0;
    int k = 0;
    for (size_t w = 0; w < nw && k < max; w++, k++) {
        size_t o = 0;
        for (size_t i = start; i < start + lens[w] && o < 56; i++) o += (size_t)wgllm_unicode_encode(cp[i], out[k] + o);
        out[k][o] = 0;
        start += lens[w];
    }
    free(lens);
    free(cp);
    wgllm_pretok_free(p);
    return k;
}

TEST(regex_engine) {
    char w[16][64];
    /* qwen2's regex runs on the general engine: digits one by one, (?!\S) backtracking */
    const char *qwen2 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    int n = split_words(qwen2, "I'M 123  héllo!!\n", w, 16);
    CHECK_EQ_INT(n, 9);
    if (n == 9) {
        CHECK_STR(w[0], "I");
        CHECK_STR(w[1], "'M");
        CHECK_STR(w[2], " ");
        CHECK_STR(w[3], "1");
        CHECK_STR(w[5], "3");
        CHECK_STR(w[6], " ");
        CHECK_STR(w[7], " héllo");
        CHECK_STR(w[8], "!!\n");
    }
    /* unmatched text between matches stays a word of its own */
    n = split_words("[0-9][0-9][0-9]", "ab12345c", w, 16);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_STR(w[0], "ab");
        CHECK_STR(w[1], "123");
        CHECK_STR(w[2], "45c");
    }
    n = split_words("\\s+$", "a  b  ", w, 16);
    CHECK_EQ_INT(n, 2);
    if (n == 2) CHECK_STR(w[1], "  ");
    /* bad regexes fail cleanly */
    struct wgllm_pretok *p = NULL;
    const char *badre = "(abc";
    CHECK(wgllm_pretok_init(&badre, 1, &p, NULL) != WGLLM_STATUS_OK);
    CHECK(p == NULL);
}

TEST(unicode_tables) {
    CHECK(wgllm_unicode_flags('a') & WGLLM_UCF_LETTER);
    CHECK(wgllm_unicode_flags(0x00E9) & WGLLM_UCF_LETTER);
    CHECK(wgllm_unicode_flags('7') & WGLLM_UCF_NUMBER);
    CHECK(wgllm_unicode_flags(0x3000) & WGLLM_UCF_WHITESPACE);
    CHECK(wgllm_unicode_flags(' ') & WGLLM_UCF_WHITESPACE);
    CHECK(!(wgllm_unicode_flags(0x1C) & WGLLM_UCF_WHITESPACE));
    CHECK(wgllm_unicode_flags('!') & WGLLM_UCF_PUNCTUATION);
    CHECK_EQ_INT(wgllm_unicode_flags(0x0378), WGLLM_UCF_UNDEFINED);
    CHECK_EQ_INT(wgllm_unicode_tolower('K'), 'k');
    CHECK_EQ_INT(wgllm_unicode_tolower(0x212A), 'k');
    CHECK_EQ_INT(wgllm_unicode_byte_to_cpt(' '), 0x120); /* 'Ġ' */
    for (int b = 0; b < 256; b++) CHECK_EQ_INT(wgllm_unicode_cpt_to_byte(wgllm_unicode_byte_to_cpt((uint8_t)b)), b);
    uint32_t cp[8];
    CHECK_EQ_INT(wgllm_unicode_decode("a\xff\xc3", 3, cp), 3);
    CHECK_EQ_INT(cp[1], 0xFFFD);
    CHECK_EQ_INT(cp[2], 0xFFFD);
}

TEST(unsupported_and_hostile) {
    struct wgllm_gguf *g = NULL;
    struct wgllm_vocab *v = NULL;
    /* unknown pre-tokenizer names itself */
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    const char *toks[] = {"a", "b", "ab"};
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const char *merges[] = {"a b"};
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, NULL, NULL, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        CHECK_EQ_INT(wgllm_vocab_init(g, &v, &err), WGLLM_STATUS_UNSUPPORTED);
        CHECK(strstr(err.message, "no-such-pre") != NULL);
        wgllm_gguf_free(g);
        g = NULL;
    }
    /* the same with a known pre-tokenizer works, and merges apply */
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, NULL, NULL, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        v = NULL;
        CHECK_EQ_INT(wgllm_vocab_init(g, &v, &err), WGLLM_STATUS_OK);
        if (v) {
            int32_t ids[8];
            /* one word "abab" -> merge "a b" twice -> "ab" "ab" */
            CHECK_EQ_INT(wgllm_vocab_tokenize(v, "abab", 4, ids, 8, false, false), 2);
            CHECK_EQ_INT(ids[0], 2);
            CHECK_EQ_INT(ids[1], 2);
            /* invalid UTF-8 and unmapped bytes do not crash */
            CHECK(wgllm_vocab_tokenize(v, "\xff\x00z", 3, ids, 8, true, true) >= 0);
            wgllm_vocab_free(v);
        }
        wgllm_gguf_free(g);
    }
    wgllm_gguf_writer_free(w);
}

/* Cases checked against the node-llama-cpp peer: phi-3's "</s>" is user-defined
 * in the file but llama.cpp makes it control (EOG list), and phi-3's special
 * tokens strip the spaces after them (RSTRIP). */
TEST(phi3_special_rules) {
    struct wgllm_vocab *v = open_vocab("phi-3", NULL);
    CHECK(v != NULL);
    if (!v) return;
    const char *t = "Hello <s> world</s>  ok";
    int32_t ids[64];
    static const int32_t plain[] = {15043, 529, 29879, 29958, 3186, 829, 29879, 29958, 29871, 3431};
    static const int32_t special[] = {15043, 29871, 1, 29871, 3186, 2, 3431};
    int32_t n = wgllm_vocab_tokenize(v, t, strlen(t), ids, 64, false, false);
    CHECK_EQ_INT(n, 10);
    if (n == 10) CHECK(memcmp(ids, plain, sizeof plain) == 0);
    n = wgllm_vocab_tokenize(v, t, strlen(t), ids, 64, false, true);
    CHECK_EQ_INT(n, 7);
    if (n == 7) CHECK(memcmp(ids, special, sizeof special) == 0);
    CHECK(wgllm_vocab_is_eog(v, 32007)); /* <|end|> */
    CHECK(wgllm_vocab_is_eog(v, 32000)); /* <|endoftext|> */
    wgllm_vocab_free(v);
}

/* ------------------------------------------------------------------------
 * The special-token partition against llama.cpp's rule, written here the
 * way llama.cpp runs it (tokenizer_st_partition: one search of the text per
 * special token, longest first). The vocabulary is byte-level BPE whose
 * tokens 0..255 are the 256 bytes and which has no merge that applies, so
 * raw text becomes one token per byte and the expected ids follow from the
 * fragments alone.
 * ---------------------------------------------------------------------- */

struct ref_special {
    char text[8];
    int32_t id;
    bool control, lstrip, rstrip;
};

static uint64_t ref_rng = 0x2545f4914f6cdd1dull;
static uint32_t ref_rand(uint32_t n) {
    ref_rng ^= ref_rng << 13;
    ref_rng ^= ref_rng >> 7;
    ref_rng ^= ref_rng << 17;
    return (uint32_t)(ref_rng >> 11) % n;
}

static bool ref_space(char c) { return (unsigned char)c < 0x80 && isspace((unsigned char)c); }

static bool ref_in_plain(const struct wgllm_text_span *sp, size_t n_sp, size_t off, size_t n) {
    for (size_t i = 0; i < n_sp; i++)
        if (sp[i].off < off + n && off < sp[i].off + sp[i].len) return true;
    return false;
}

struct ref_frag {
    int32_t token;
    size_t off, len;
};

/* Expected ids of text under llama.cpp's rule; returns the count. */
static int ref_partition(const struct ref_special *sp, int n_sp, const char *text, size_t len, bool parse_special,
                         const struct wgllm_text_span *plain, size_t n_plain, int32_t *ids) {
    struct ref_frag cur[512], next[512];
    int nc = 0, nn;
    if (len) cur[nc++] = (struct ref_frag){-1, 0, len};
    for (int s = 0; s < n_sp; s++) { /* sp is in priority order */
        const struct ref_special *t = &sp[s];
        const size_t tl = strlen(t->text);
        if (!parse_special && t->control) continue;
        nn = 0;
        for (int i = 0; i < nc; i++) {
            if (cur[i].token >= 0) { next[nn++] = cur[i]; continue; }
            size_t off = cur[i].off, flen = cur[i].len, from = off;
            for (;;) {
                const char *m = memmem(text + from, off + flen - from, t->text, tl);
                if (m && t->control && ref_in_plain(plain, n_plain, (size_t)(m - text), tl)) {
                    from = (size_t)(m - text) + 1;
                    continue;
                }
                if (!m) {
                    if (flen > 0) next[nn++] = (struct ref_frag){-1, off, flen};
                    break;
                }
                const size_t mpos = (size_t)(m - text);
                if (mpos > off) {
                    size_t llen = mpos - off;
                    if (t->lstrip)
                        while (llen > 0 && ref_space(text[off + llen - 1])) llen--;
                    if (llen > 0) next[nn++] = (struct ref_frag){-1, off, llen};
                }
                next[nn++] = (struct ref_frag){t->id, 0, 0};
                size_t roff = mpos + tl, rlen = off + flen - roff;
                if (t->rstrip)
                    while (rlen > 0 && ref_space(text[roff])) { roff++; rlen--; }
                if (rlen == 0) break;
                off = from = roff;
                flen = rlen;
            }
        }
        memcpy(cur, next, sizeof next[0] * (size_t)nn);
        nc = nn;
    }
    int n = 0;
    for (int i = 0; i < nc; i++) {
        if (cur[i].token >= 0) ids[n++] = cur[i].token;
        else
            for (size_t j = 0; j < cur[i].len; j++) ids[n++] = (uint8_t)text[cur[i].off + j];
    }
    return n;
}

/* kind 0: plain types; 1: named phi-3 (every special rstrips); 2: jina (<mask> lstrips) */
static void partition_round(int kind) {
    static const char alpha[] = "ab <>\n";
    enum { N_SP = 12 };
    struct ref_special sp[N_SP];
    const char *texts[N_SP];
    int32_t types[N_SP];
    for (int i = 0; i < N_SP; i++) {
        struct ref_special *t = &sp[i];
        memset(t, 0, sizeof *t);
        if (kind == 2 && i == 0) strcpy(t->text, "<mask>");
        else if (i > 1 && ref_rand(6) == 0) /* a duplicate; not of <mask>, whose lstrip goes to its last id */
            strcpy(t->text, sp[1 + ref_rand((uint32_t)i - 1)].text);
        else {
            const uint32_t n = 2 + ref_rand(4);
            for (uint32_t j = 0; j < n; j++) t->text[j] = alpha[ref_rand(sizeof alpha - 1)];
        }
        t->id = 256 + i;
        t->control = ref_rand(2);
        t->rstrip = kind == 1;
        t->lstrip = kind == 2 && i == 0;
        texts[i] = t->text;
        types[i] = t->control ? WGLLM_TOKEN_TYPE_CONTROL : WGLLM_TOKEN_TYPE_USER_DEFINED;
    }
    struct wgllm_vocab *v = test_byte_vocab(texts, types, N_SP, kind == 1 ? "phi-3 partition test" : "partition test",
                                            kind == 2 ? "jina-v2-code" : "gpt-2");
    CHECK(v != NULL);
    if (!v) return;

    /* llama.cpp's priority: longest text first, ties by id */
    struct ref_special order[N_SP];
    memcpy(order, sp, sizeof sp);
    for (int i = 1; i < N_SP; i++)
        for (int j = i; j > 0 && strlen(order[j].text) > strlen(order[j - 1].text); j--) {
            struct ref_special x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    int mismatches = 0;
    for (int round = 0; round < 3000; round++) {
        char text[80];
        size_t len = 0;
        const size_t target = ref_rand(60);
        while (len < target) {
            if (ref_rand(3) == 0) {
                const char *t = sp[ref_rand(N_SP)].text;
                const size_t n = strlen(t);
                if (len + n > sizeof text) break;
                memcpy(text + len, t, n);
                len += n;
            } else {
                text[len++] = alpha[ref_rand(sizeof alpha - 1)];
            }
        }
        struct wgllm_text_span plain[4];
        size_t n_plain = 0, at = 0;
        while (n_plain < 4 && len && at < len && ref_rand(2)) {
            at += ref_rand((uint32_t)(len - at));
            const size_t n = 1 + ref_rand(8);
            if (at >= len) break;
            plain[n_plain++] = (struct wgllm_text_span){at, at + n > len ? len - at : n};
            at += n + 1;
        }
        for (int mode = 0; mode < 3; mode++) { /* parse_special off, on, on with plain spans */
            int32_t want[160], got[160];
            const int nw = ref_partition(order, N_SP, text, len, mode > 0, plain, mode == 2 ? n_plain : 0, want);
            const int32_t ng = mode == 2 ? wgllm_vocab_tokenize_spans(v, text, len, got, 160, false, plain, n_plain)
                                         : wgllm_vocab_tokenize(v, text, len, got, 160, false, mode == 1);
            if (ng != nw || memcmp(want, got, sizeof want[0] * (size_t)nw) != 0) {
                if (mismatches++ < 3) {
                    fprintf(stderr, "  kind %d mode %d: %d ids, want %d; text \"", kind, mode, (int)ng, nw);
                    for (size_t q = 0; q < len; q++) fprintf(stderr, text[q] == '\n' ? "\\n" : "%c", text[q]);
                    fprintf(stderr, "\"\n");
                }
            }
        }
    }
    CHECK_EQ_INT(mismatches, 0);
    wgllm_vocab_free(v);
}

TEST(special_partition_matches_llama_rule) {
    for (int vocab = 0; vocab < 8; vocab++) partition_round(vocab % 3);
}

int main(void) {
    RUN(unicode_tables);
    RUN(regex_engine);
    RUN(conformance_llama_spm);
    RUN(conformance_phi3);
    RUN(conformance_gpt2);
    RUN(conformance_deepseek_coder);
    RUN(conformance_bert_bge);
    RUN(wpm_rules);
    RUN(buffer_contract);
    RUN(spm_special_tokens);
    RUN(bpe_special_and_eog);
    RUN(phi3_special_rules);
    RUN(unsupported_and_hostile);
    RUN(special_partition_matches_llama_rule);
    return test_summary("test_vocab");
}
