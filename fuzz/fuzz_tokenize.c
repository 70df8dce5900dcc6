/*
 * fuzz_tokenize.c - libFuzzer target for the tokenizers on real
 * vocabularies: SentencePiece (llama-spm, phi-3), byte-level BPE with the
 * hand-written GPT-2 splitter (gpt-2) and with the regex engine
 * (deepseek-coder), and WordPiece (bert-bge), read once from
 * $WGLLM_SHARED/vocab (fuzz/run.sh sets it; default ../shared).
 *
 * Input: byte 0 picks the vocabulary (bits 0-2), parse_special (bit 3) and
 * add_special (bit 4); the rest is the text. Each input is tokenized, the
 * output-buffer contract is checked on short texts (too small a buffer
 * returns minus the count, and the count does not change), every id must be in the
 * vocabulary, every token is detokenized through the same contract (the
 * first time its id comes up: the result depends on the id alone), and
 * for GPT-2's byte-level BPE on valid UTF-8 the pieces must give the text
 * back byte for byte.
 */
#include "gguf/gguf.h"
#include "vocab/vocab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "bert-bge"};
#define N_VOCABS (int)(sizeof names / sizeof names[0])
#define GPT2 2
static struct wgllm_vocab *vocabs[N_VOCABS];
static uint8_t *checked[N_VOCABS]; /* per token id: bit s set once token_to_piece(special = s) passed */

static void load_vocabs(void) {
    setenv("WGLLM_LOG", "error", 0);
    const char *root = getenv("WGLLM_SHARED");
    if (!root || !root[0]) root = "../shared";
    for (int i = 0; i < N_VOCABS; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", root, names[i]);
        struct wgllm_gguf *g = NULL;
        struct wgllm_error err = {0};
        if (wgllm_gguf_open(path, &g, &err) || wgllm_vocab_init(g, &vocabs[i], &err)) {
            fprintf(stderr, "fuzz_tokenize: %s: %s (set WGLLM_SHARED)\n", path, err.message);
            abort();
        }
        wgllm_gguf_free(g); /* the vocabulary keeps copies */
    }
}

/* Strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF):
 * what the byte-level BPE gives back exactly. */
static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1fu) : k == 3 ? (c & 0x0fu) : (c & 0x07u);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vocabs[0]) load_vocabs();
    if (size < 1) return 0;
    const int vi = (data[0] & 7) % N_VOCABS;
    const bool parse_special = data[0] & 8, add_special = data[0] & 16;
    const struct wgllm_vocab *v = vocabs[vi];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    /* One call with room for any output (at most 2 tokens per byte, as when
     * WordPiece splits "\xe2\x96\x81" off a one-byte word, plus BOS/EOS/SEP);
     * the too-small-buffer contract on short inputs only,
     * where a second call is cheap (the fuzzer's speed is in the long ones). */
    size_t cap = 2 * len + 8;
    int32_t *toks = malloc(sizeof(int32_t) * cap);
    if (!toks) return 0;
    int32_t n = wgllm_vocab_tokenize(v, text, len, toks, (int32_t)cap, add_special, parse_special);
    if (n < 0 && n != INT32_MIN) { /* more than the bound: the buffer it asks for must do */
        const int32_t want = -n;
        free(toks);
        cap = (size_t)want;
        if (!(toks = malloc(sizeof(int32_t) * cap))) return 0;
        n = wgllm_vocab_tokenize(v, text, len, toks, want, add_special, parse_special);
        if (n != want && n != INT32_MIN) __builtin_trap();
    }
    if (n == INT32_MIN) { /* out of memory: allowed, but only as that */
        free(toks);
        return 0;
    }
    if (len <= 24) {
        int32_t one;
        const int32_t probe = wgllm_vocab_tokenize(v, text, len, &one, 0, add_special, parse_special);
        if (probe != (n ? -n : 0)) __builtin_trap(); /* the same text, minus the same count */
    }

    /* token_to_piece is a function of (vocabulary, token, special) alone:
     * its contract is checked once per token id and process (detokenizing
     * every token of every input, twice each way, was a quarter of the
     * time), and only GPT-2's round trip below needs the pieces */
    const int32_t n_vocab = wgllm_vocab_n_tokens(v);
    const bool round_trip = vi == GPT2 && !add_special && !parse_special && valid_utf8((const uint8_t *)text, len);
    char *back = round_trip ? malloc(len + 1) : NULL, piece[512];
    size_t back_len = 0;
    bool exact = back != NULL;
    for (int32_t i = 0; i < n; i++) {
        if (toks[i] < 0 || toks[i] >= n_vocab) __builtin_trap();
        if (!checked[vi]) checked[vi] = calloc((size_t)n_vocab, 1);
        if (!checked[vi]) abort();
        for (int special = 0; special < 2; special++) {
            if (checked[vi][toks[i]] & (1 << special)) continue;
            const int32_t need = wgllm_vocab_token_to_piece(v, toks[i], piece, 0, special);
            const int32_t k = wgllm_vocab_token_to_piece(v, toks[i], piece, sizeof piece, special);
            /* size 0 gives minus the length (0 when empty); a buffer of that length, the piece */
            if (k == INT32_MIN || (need < 0 && k != -need && k != need) || (need >= 0 && k != need))
                __builtin_trap();
            checked[vi][toks[i]] |= (uint8_t)(1 << special);
        }
        if (exact) {
            const int32_t k = wgllm_vocab_token_to_piece(v, toks[i], piece, sizeof piece, false);
            if (k < 0 || back_len + (size_t)k > len) exact = false; /* a piece longer than the buffer: not compared */
            else memcpy(back + back_len, piece, (size_t)k), back_len += (size_t)k;
        }
    }
    if (round_trip) {
        if (!exact || back_len != len || memcmp(back, text, len) != 0) {
            fprintf(stderr, "fuzz_tokenize: gpt-2 did not give %zu bytes of valid UTF-8 back (%zu bytes)\n", len,
                    back_len);
            __builtin_trap();
        }
    }
    free(back);
    free(toks);
    return 0;
}
