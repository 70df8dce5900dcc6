/*
 * vocab_internal.h - what the parts of the tokenizer share: vocab.c (loading
 * tokenizer.ggml.*, token lookup, special tokens and the EOG set, the
 * tokenize dispatch, token_to_piece) and one file per tokenizer family:
 * vocab_spm.c (SentencePiece, "llama"), vocab_bpe.c (byte-level BPE, "gpt2":
 * merges and the pre-tokenizers of tokenizer.ggml.pre) and vocab_wpm.c
 * (WordPiece, "bert"). Internal to src/vocab. What one file defines for the
 * others is named wgllm_vocab_*; the static inlines are defined here (the
 * token lookup runs once per merge candidate, so it stays inlinable).
 */
#ifndef WGLLM_VOCAB_INTERNAL_H
#define WGLLM_VOCAB_INTERNAL_H

#include "vocab/vocab.h"
#include "base/strbuf.h"
#include "vocab/merge.h"
#include "vocab/special.h"
#include "vocab/unicode.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on what a vocabulary may hold, far above any real one (the largest
 * have 262k tokens of at most a few hundred bytes): a file past them is
 * refused before anything is sized from it, and they keep each tokenizer's
 * work per input byte bounded (WordPiece tries every length up to the
 * longest token at each position). */
#define VOCAB_MAX_ENTRIES (1 << 24) /* tokens, and merges */
#define VOCAB_MAX_TEXT (1 << 16)    /* bytes of one token or merge */
#define VOCAB_WPM_MAX_TEXT 1024     /* of a WordPiece token (BERT's are a few dozen) */

/* llama.cpp's token attributes (bit flags) */
enum {
    ATTR_UNDEFINED = 0,
    ATTR_UNKNOWN = 1 << 0,
    ATTR_UNUSED = 1 << 1,
    ATTR_NORMAL = 1 << 2,
    ATTR_CONTROL = 1 << 3,
    ATTR_USER_DEFINED = 1 << 4,
    ATTR_BYTE = 1 << 5,
    ATTR_LSTRIP = 1 << 7,
    ATTR_RSTRIP = 1 << 8,
};

struct tok {
    const char *text; /* NUL-terminated, in v->text_arena */
    uint32_t len;
    float score;
    uint32_t attr;
};

struct merge {
    const char *first, *second; /* into v->merge_arena, where second follows first */
    uint32_t first_len, second_len;
};

/* A hash table slot: the entry (-1: empty) and 32 more bits of its hash,
 * compared before the entry's text is read (one cache miss, not two). */
struct slot {
    int32_t id;
    uint32_t tag;
};

struct wgllm_vocab {
    enum wgllm_vocab_type type;
    int32_t n_tokens;
    struct tok *toks;
    char *text_arena;

    /* text -> id (open addressing; the last id with a text wins, as in
     * llama.cpp), hashed under this vocabulary's own random key (base.h):
     * the texts come from the file, which must not be able to make every
     * lookup probe the same chain */
    struct wgllm_hash_key hkey;
    struct slot *tok_hash;
    uint32_t tok_hash_mask;

    /* (first, second) -> rank (the first rank of a pair wins) */
    struct merge *merges;
    int32_t n_merges;
    char *merge_arena;
    struct slot *merge_hash;
    uint32_t merge_hash_mask;
    uint32_t max_merge_len; /* bytes of the longest merge's two parts together */

    int32_t bos, eos, eot, eom, unk, pad, sep;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_sep, add_space_prefix, remove_extra_whitespaces, ignore_merges;
    uint32_t max_token_len; /* bytes */
    struct wgllm_trie wpm_trie; /* WordPiece: every token's text, walked for the longest match */

    int32_t *special; /* control/user-defined/unknown ids, longest text first (during init) */
    int32_t n_special;
    struct wgllm_special_set specials; /* the same, indexed for the partition */
    uint8_t *is_eog;

    struct wgllm_pretok *pretok;
    /* BPE: each byte's GPT-2 codepoint as UTF-8 (1 or 2 bytes) */
    struct {
        uint8_t n;
        char c[2];
    } bmap[256];
};

/* ------------------------------------------------------------------------
 * hashing
 * ---------------------------------------------------------------------- */

/* Table size for n entries: a power of two at least 2n (n <= VOCAB_MAX_ENTRIES). */
static inline uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n * 2) c *= 2;
    return c;
}

static inline uint64_t text_hash(const struct wgllm_vocab *v, const char *s, size_t n) {
    return wgllm_hash(&v->hkey, 0, s, n);
}

static inline int32_t text_to_token(const struct wgllm_vocab *v, const char *s, size_t n) {
    const uint64_t h = text_hash(v, s, n);
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->tok_hash_mask;; i = (i + 1) & v->tok_hash_mask) {
        const struct slot e = v->tok_hash[i];
        if (e.id < 0) return -1;
        if (e.tag == tag && v->toks[e.id].len == n && memcmp(v->toks[e.id].text, s, n) == 0) return e.id;
    }
}

/* ------------------------------------------------------------------------
 * growable output buffer
 * ---------------------------------------------------------------------- */

struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
};

static inline void ids_push(struct ids *o, int32_t id) {
    if (o->n == o->cap && !wgllm_grow((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v)) {
        o->oom = true;
        return;
    }
    o->v[o->n++] = id;
}

/* After a merge run over text (SentencePiece, BPE): each symbol's token, or,
 * for a symbol that is not a token, its bytes one by one as byte_token maps
 * them (none where it gives -1). */
static inline void emit_symbols(const struct wgllm_vocab *v, const char *text, const struct wgllm_merge *mg,
                                struct ids *out, int32_t (*byte_token)(const struct wgllm_vocab *, uint8_t)) {
    for (int32_t i = 0; i >= 0; i = mg->next[i]) {
        const uint32_t a = wgllm_merge_begin(mg, i), n = wgllm_merge_end(mg, i) - a;
        int32_t id = text_to_token(v, text + a, n);
        if (id >= 0) {
            ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < n; j++) {
            int32_t b = byte_token(v, (uint8_t)text[a + j]);
            if (b >= 0) ids_push(out, b);
        }
    }
}

/* ------------------------------------------------------------------------
 * the tokenizer families
 *
 * Each one tokenizes the fragments of a partitioned text (raw text, or a
 * special token taken as is) into `out`, adding its BOS / EOS / SEP when
 * add_special asks; false when out of memory. `text` is what the fragments'
 * offsets point into, `len` its length.
 * ---------------------------------------------------------------------- */

/* vocab_spm.c */
bool wgllm_vocab_spm_tokenize(const struct wgllm_vocab *v, const char *text, size_t len,
                              const struct wgllm_frags *fr, bool add_special, struct ids *out);
/* vocab_bpe.c: the byte map, the merges and the pre-tokenizer of tokenizer.ggml.pre */
enum wgllm_status wgllm_vocab_bpe_init(struct wgllm_vocab *v, const struct wgllm_gguf *g, struct wgllm_error *err);
bool wgllm_vocab_bpe_tokenize(const struct wgllm_vocab *v, const char *text, const struct wgllm_frags *fr,
                              bool add_special, struct ids *out);
/* vocab_wpm.c: the trie of every token's text (after the tokens are loaded) */
enum wgllm_status wgllm_vocab_wpm_init(struct wgllm_vocab *v, struct wgllm_error *err);
bool wgllm_vocab_wpm_tokenize(const struct wgllm_vocab *v, const char *text, const struct wgllm_frags *fr,
                              bool add_special, struct ids *out);

#endif
