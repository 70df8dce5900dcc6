/*
 * vocab.c - tokenizers built from a GGUF's `tokenizer.ggml.*` metadata:
 * SentencePiece (bigram merges by score, byte fallback), byte-level BPE
 * (pre-tokenizer regexes + merge ranks), WordPiece (BERT: first-codepoint
 * NFD, lowercase, greedy longest match), special-token partitioning, EOG set
 * and token_to_piece. Every rule follows llama.cpp's llama-vocab.cpp so that
 * token ids agree with it exactly; where llama.cpp has a quirk, so do we.
 */
#include "vocab/vocab.h"
#include "base/strbuf.h"
#include "vocab/merge.h"
#include "vocab/special.h"
#include "vocab/unicode.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
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
static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n * 2) c *= 2;
    return c;
}

static uint64_t text_hash(const struct wgllm_vocab *v, const char *s, size_t n) {
    return wgllm_hash(&v->hkey, 0, s, n);
}
/* The pair (p[0, split), p[split, n)): its bytes, with the split as tweak. */
static uint64_t pair_hash(const struct wgllm_vocab *v, const char *p, size_t split, size_t n) {
    return wgllm_hash(&v->hkey, (uint64_t)split + 1, p, n);
}

static int32_t text_to_token(const struct wgllm_vocab *v, const char *s, size_t n) {
    const uint64_t h = text_hash(v, s, n);
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->tok_hash_mask;; i = (i + 1) & v->tok_hash_mask) {
        const struct slot e = v->tok_hash[i];
        if (e.id < 0) return -1;
        if (e.tag == tag && v->toks[e.id].len == n && memcmp(v->toks[e.id].text, s, n) == 0) return e.id;
    }
}

/* The rank of merging p[0, split) with p[split, n), or -1. */
static int32_t find_rank(const struct wgllm_vocab *v, const char *p, size_t split, size_t n) {
    if (!v->merge_hash) return -1;
    const uint64_t h = pair_hash(v, p, split, n);
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->merge_hash_mask;; i = (i + 1) & v->merge_hash_mask) {
        const struct slot e = v->merge_hash[i];
        if (e.id < 0) return -1;
        const struct merge *m = &v->merges[e.id];
        if (e.tag == tag && m->first_len == split && m->first_len + m->second_len == n &&
            memcmp(m->first, p, n) == 0)
            return e.id;
    }
}

/* ------------------------------------------------------------------------
 * loading
 * ---------------------------------------------------------------------- */

static bool str_is(struct wgllm_gguf_str s, const char *c) { return wgllm_gguf_str_eq(s, c); }

/* Optional scalar keys: absent keeps the default; a wrong type is an error. */
static enum wgllm_status opt_bool(const struct wgllm_gguf *g, const char *key, bool *out,
                                  struct wgllm_error *err) {
    if (!wgllm_gguf_find(g, key)) return WGLLM_STATUS_OK;
    return wgllm_gguf_get_bool(g, key, out, err);
}

static enum wgllm_status opt_id(const struct wgllm_gguf *g, const char *key, int32_t n_tokens,
                                int32_t *out, struct wgllm_error *err) {
    if (!wgllm_gguf_find(g, key)) return WGLLM_STATUS_OK;
    uint32_t id;
    enum wgllm_status st = wgllm_gguf_get_u32(g, key, &id, err);
    if (st != WGLLM_STATUS_OK) return st;
    if (id >= (uint32_t)n_tokens) {
        /* llama.cpp warns and keeps the default */
        wgllm_log(WGLLM_LOG_WARN, "vocab: bad special token %s = %u (n_tokens %d), using default %d",
                  key, id, n_tokens, *out);
        return WGLLM_STATUS_OK;
    }
    *out = (int32_t)id;
    return WGLLM_STATUS_OK;
}

static const char *const k_re_gpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char *const k_re_llama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const k_re_qwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const k_re_deepseek_llm_letters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-"
    "\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F"
    "\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D"
    "\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17"
    "\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+";
static const char *const k_re_cjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
/* tekken and gpt-4o as llama.cpp rewrote them: \p{Lu}.. would collapse to \p{L},
 * so upper/lower case is told apart by ASCII only, via lookaheads. */
static const char *const k_re_tekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const k_re_gpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#define MAX_RE 6
struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *re[MAX_RE];
    bool ignore_merges, add_bos;
};

/* Pre-tokenizers chosen by tokenizer.ggml.pre, as llama.cpp's llm_tokenizer_bpe. */
static const struct pre_def k_pre_defs[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", NULL, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", {NULL}, true, true},
    {"dbrx|smaug-bpe", {NULL}, false, false},
    {"deepseek-llm", {"[\r\n]", NULL, "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", "\\s+$", NULL, "\\p{N}+"}, false, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", NULL, "\\p{N}"}, false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", NULL, "[0-9][0-9][0-9]"}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", {"\\p{N}", NULL}, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|mpt|olmo|jais|gigachat|"
     "a.x-4.0|mellum|modern-bert|roberta-bpe|exaone4|trillion|granite-docling",
     {NULL}, false, false},
    {"qwen2|deepseek-r1-qwen|stablelm2|megrez|kormo|f2llmv2|hunyuan|solar-open|grok-2", {NULL}, false, false},
    {"tekken", {NULL}, true, true},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", {NULL}, false, false},
};

static bool name_in(const char *names, struct wgllm_gguf_str s) {
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == s.len && memcmp(p, s.data, n) == 0) return true;
        p += n + (e ? 1 : 0);
    }
    return false;
}

/* Fills the NULL holes of a definition (written so above to keep the table short). */
static int pre_exprs(int def, const char **out) {
    const struct pre_def *d = &k_pre_defs[def];
    int n = 0;
    switch (def) {
    case 0: case 5: /* default, falcon: gpt2 regex in slot 1 */
    case 6:         /* starcoder family */
        for (; n < MAX_RE && (d->re[n] || n == 1); n++) out[n] = d->re[n] ? d->re[n] : k_re_gpt2;
        return n;
    case 1: case 2: out[0] = k_re_llama3; return 1;
    case 3:
        for (; n < 6; n++) out[n] = d->re[n] ? d->re[n] : (n == 1 ? k_re_deepseek_llm_letters : k_re_cjk);
        return n;
    case 4:
        for (; n < 5; n++) out[n] = d->re[n] ? d->re[n] : k_re_cjk;
        return n;
    case 7: out[0] = k_re_gpt2; return 1;
    case 8: out[0] = k_re_qwen2; return 1;
    case 9: out[0] = k_re_tekken; return 1;
    case 10: out[0] = k_re_gpt4o; return 1;
    }
    return 0;
}

static void set_control(struct wgllm_vocab *v, int32_t id) {
    if (!(v->toks[id].attr & ATTR_CONTROL)) {
        wgllm_log(WGLLM_LOG_DEBUG, "vocab: control-looking token %d '%s' was not control-type; overriding",
                  id, v->toks[id].text);
        v->toks[id].attr |= ATTR_CONTROL;
    }
}

static bool text_in(const char *t, const char *const *list) {
    for (; *list; list++)
        if (strcmp(t, *list) == 0) return true;
    return false;
}

/* longest text first; ties by id (llama.cpp uses an unstable std::sort) */
struct special_key {
    uint32_t len;
    int32_t id;
};

static int cmp_special(const void *a, const void *b) {
    const struct special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t id_of(const struct wgllm_vocab *v, const char *t) { return text_to_token(v, t, strlen(t)); }

/* The partition's index of the special tokens, once their attributes are final. */
static bool build_special_set(struct wgllm_vocab *v) {
    struct wgllm_special *sp = wgllm_malloc_array((uint64_t)v->n_special + 1, sizeof *sp);
    const char **texts = wgllm_malloc_array((uint64_t)v->n_special + 1, sizeof *texts);
    bool ok = sp && texts;
    for (int32_t i = 0; ok && i < v->n_special; i++) {
        const struct tok *t = &v->toks[v->special[i]];
        sp[i] = (struct wgllm_special){.id = v->special[i],
                                       .len = t->len,
                                       .control = t->attr & (ATTR_CONTROL | ATTR_UNKNOWN),
                                       .lstrip = t->attr & ATTR_LSTRIP,
                                       .rstrip = t->attr & ATTR_RSTRIP};
        texts[i] = t->text;
    }
    ok = ok && wgllm_special_set_init(&v->specials, sp, texts, v->n_special);
    free(sp);
    free(texts);
    free(v->special); /* the set holds the ids now */
    v->special = NULL;
    return ok;
}

/* Detects special tokens by text and builds the EOG set: llama.cpp's
 * load_vocab tail. The lists are llama.cpp's recent ones plus the DeepSeek
 * names that the node-llama-cpp 3.21.1 peer still treats as control. */
static bool finish_specials(struct wgllm_vocab *v, const struct wgllm_gguf *g) {
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                            "<｜end▁of▁sentence｜>", "<end_of_utterance>", NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const pre_names[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const suf_names[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const mid_names[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const sep_names[] = {"<|file_sep|>", NULL};
    static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                            "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                            "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                            "<turn|>", "<|tool_response>", NULL};
    struct {
        int32_t *id;
        const char *const *names;
    } finds[] = {{&v->eot, eot_names},     {&v->eom, eom_names},     {&v->fim_pre, pre_names},
                 {&v->fim_suf, suf_names}, {&v->fim_mid, mid_names}, {&v->fim_pad, pad_names},
                 {&v->fim_rep, rep_names}, {&v->fim_sep, sep_names}};
    /* llama.cpp walks an unordered map here; we take the lowest id, the
     * only sane deterministic choice when a vocab has two candidates */
    for (size_t f = 0; f < sizeof finds / sizeof finds[0]; f++) {
        if (*finds[f].id >= 0) continue;
        for (int32_t id = 0; id < v->n_tokens; id++) {
            if (text_to_token(v, v->toks[id].text, v->toks[id].len) != id) continue;
            if (text_in(v->toks[id].text, finds[f].names)) {
                *finds[f].id = id;
                set_control(v, id);
                break;
            }
        }
    }
    for (int32_t id = 0; id < v->n_tokens; id++) /* control tokens named "unused" */
        if ((v->toks[id].attr & ATTR_CONTROL) && strstr(v->toks[id].text, "unused")) v->toks[id].attr |= ATTR_UNUSED;
    int32_t eogs[] = {v->fim_pad, v->fim_rep, v->fim_sep, v->eos, v->eot, v->eom};
    for (size_t i = 0; i < sizeof eogs / sizeof eogs[0]; i++)
        if (eogs[i] >= 0) v->is_eog[eogs[i]] = 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (text_to_token(v, v->toks[id].text, v->toks[id].len) != id) continue;
        if (text_in(v->toks[id].text, eog_names)) {
            v->is_eog[id] = 1;
            set_control(v, id);
        }
    }
    static const char *const always_render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (int i = 0; i < 4; i++) {
        int32_t id = id_of(v, always_render[i]);
        if (id >= 0) v->toks[id].attr = ATTR_USER_DEFINED;
    }
    /* harmony / solar-open: "<|end|>" is not EOG there; gemma4: "</s>" is text */
    int32_t ret = id_of(v, "<|return|>"), call = id_of(v, "<|call|>"), calls = id_of(v, "<|calls|>");
    int32_t flush = id_of(v, "<|flush|>"), end = id_of(v, "<|end|>");
    bool has_call = (call >= 0 && v->is_eog[call]) || (calls >= 0 && v->is_eog[calls]);
    if (end >= 0 && v->is_eog[end] && has_call && ((ret >= 0 && v->is_eog[ret]) || (flush >= 0 && v->is_eog[flush]))) {
        v->is_eog[end] = 0;
        v->toks[end].attr = ATTR_USER_DEFINED;
    }
    int32_t tool = id_of(v, "<|tool_response>"), s_end = id_of(v, "</s>");
    if (tool >= 0 && v->is_eog[tool] && s_end >= 0 && v->is_eog[s_end]) {
        v->is_eog[s_end] = 0;
        v->toks[s_end].attr = ATTR_NORMAL;
    }

    v->special = wgllm_malloc_array((uint64_t)v->n_tokens + 1, sizeof *v->special);
    if (!v->special) return false;
    struct special_key *keys = wgllm_malloc_array((uint64_t)v->n_tokens + 1, sizeof *keys);
    if (!keys) return false;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->toks[id].attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
            keys[v->n_special++] = (struct special_key){v->toks[id].len, id};
    qsort(keys, (size_t)v->n_special, sizeof *keys, cmp_special);
    for (int32_t i = 0; i < v->n_special; i++) v->special[i] = keys[i].id;
    free(keys);

    /* per-model attribute fixes (llama.cpp: "set attributes by model/tokenizer name") */
    char name[256] = "";
    const struct wgllm_gguf_value *nv = wgllm_gguf_find(g, "general.name");
    if (nv && nv->type == WGLLM_GGUF_TYPE_STRING) {
        size_t n = nv->v.str.len < sizeof name - 1 ? (size_t)nv->v.str.len : sizeof name - 1;
        for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)nv->v.str.data[i]);
        name[n] = 0;
    }
    const struct wgllm_gguf_value *pv = wgllm_gguf_find(g, "tokenizer.ggml.pre");
    bool jina = false;
    if (pv && pv->type == WGLLM_GGUF_TYPE_STRING) {
        static const char *const j[] = {"jina-v2-de", "jina-v2-es", "jina-v2-code"};
        for (int i = 0; i < 3; i++)
            if (memmem(pv->v.str.data, pv->v.str.len, j[i], strlen(j[i]))) jina = true;
    }
    if (jina) {
        int32_t id = text_to_token(v, "<mask>", 6);
        if (id >= 0) v->toks[id].attr |= ATTR_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int32_t i = 0; i < v->n_special; i++) v->toks[v->special[i]].attr |= ATTR_RSTRIP;
        int32_t id = text_to_token(v, "</s>", 4);
        if (id >= 0) v->toks[id].attr |= ATTR_RSTRIP;
        static const char *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int i = 0; i < 3; i++) {
            id = text_to_token(v, off[i], strlen(off[i]));
            if (id >= 0) v->toks[id].attr &= ~(uint32_t)ATTR_RSTRIP;
        }
    }
    return build_special_set(v);
}

/* An optional array that runs parallel to tokenizer.ggml.tokens: n entries
 * of a float type (scores) or of an integer type (token_type). */
static enum wgllm_status check_parallel(const struct wgllm_gguf_value *a, const char *key, int32_t n, bool floats,
                                        struct wgllm_error *err) {
    if (!a) return WGLLM_STATUS_OK;
    if (a->type != WGLLM_GGUF_TYPE_ARRAY)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s has type %s, expected an array", key,
                               wgllm_gguf_type_name(a->type));
    const enum wgllm_gguf_type t = a->v.arr.type;
    const bool is_float = t == WGLLM_GGUF_TYPE_FLOAT32 || t == WGLLM_GGUF_TYPE_FLOAT64;
    const bool is_int = t != WGLLM_GGUF_TYPE_STRING && t != WGLLM_GGUF_TYPE_ARRAY && !is_float;
    if (floats ? !is_float : !is_int)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s is an array of %s, expected %s", key,
                               wgllm_gguf_type_name(t), floats ? "f32" : "integers");
    if (a->v.arr.n != (uint64_t)n)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s has %llu entries but tokenizer.ggml.tokens has %d",
                               key, (unsigned long long)a->v.arr.n, n);
    return WGLLM_STATUS_OK;
}

static enum wgllm_status load_merges(struct wgllm_vocab *v, const struct wgllm_gguf *g,
                                     struct wgllm_error *err) {
    const struct wgllm_gguf_value *mv = wgllm_gguf_find(g, "tokenizer.ggml.merges");
    if (!mv) return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tokenizer.ggml.merges: missing (needed by gpt2 tokenizer)");
    if (mv->type != WGLLM_GGUF_TYPE_ARRAY || mv->v.arr.type != WGLLM_GGUF_TYPE_STRING)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tokenizer.ggml.merges: not an array of strings");
    if (mv->v.arr.n > VOCAB_MAX_ENTRIES)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tokenizer.ggml.merges has %llu entries, more than %d",
                               (unsigned long long)mv->v.arr.n, VOCAB_MAX_ENTRIES);
    int32_t n = (int32_t)mv->v.arr.n;
    uint64_t total = 0; /* each length is bounded: no overflow */
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = mv->v.arr.items[i].v.str.len;
        if (len > VOCAB_MAX_TEXT)
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "tokenizer.ggml.merges[%d] is %llu bytes long, more than %d", i,
                                   (unsigned long long)len, VOCAB_MAX_TEXT);
        total += len + 1;
    }
    v->merges = wgllm_calloc_array((uint64_t)n + 1, sizeof *v->merges);
    v->merge_arena = wgllm_malloc_array(total + 1, 1);
    uint32_t cap = pow2_at_least((uint64_t)n);
    v->merge_hash = wgllm_malloc_array(cap, sizeof *v->merge_hash);
    if (!v->merges || !v->merge_arena || !v->merge_hash)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "tokenizer.ggml.merges: out of memory");
    memset(v->merge_hash, 0xFF, (size_t)cap * sizeof *v->merge_hash);
    v->merge_hash_mask = cap - 1;
    char *a = v->merge_arena;
    for (int32_t i = 0; i < n; i++) {
        struct wgllm_gguf_str s = mv->v.arr.items[i].v.str;
        /* llama.cpp splits at the first space after index 0; no space -> ("", "") */
        const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL;
        struct merge *m = &v->merges[i];
        if (sp) { /* stored without the space, so that a pair is one run of bytes */
            m->first_len = (uint32_t)(sp - s.data);
            m->second_len = (uint32_t)(s.len - m->first_len - 1);
            memcpy(a, s.data, m->first_len);
            memcpy(a + m->first_len, sp + 1, m->second_len);
            a[m->first_len + m->second_len] = 0;
            m->first = a;
            m->second = a + m->first_len;
        } else {
            a[0] = 0;
            m->first = m->second = a;
        }
        a += m->first_len + m->second_len + 1;
        v->max_merge_len = WGLLM_MAX(v->max_merge_len, m->first_len + m->second_len);
        if (find_rank(v, m->first, m->first_len, m->first_len + m->second_len) >= 0) continue;
        uint64_t h = pair_hash(v, m->first, m->first_len, m->first_len + m->second_len);
        uint32_t k = (uint32_t)h & v->merge_hash_mask;
        while (v->merge_hash[k].id >= 0) k = (k + 1) & v->merge_hash_mask;
        v->merge_hash[k] = (struct slot){i, (uint32_t)(h >> 32)};
    }
    v->n_merges = n;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_vocab_init(const struct wgllm_gguf *g, struct wgllm_vocab **out,
                                   struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_gguf_str model;
    enum wgllm_status st = wgllm_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != WGLLM_STATUS_OK) return st;

    struct wgllm_vocab *v = calloc(1, sizeof *v);
    if (!v) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "vocab: out of memory");
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = v->sep = -1;
    v->hkey = wgllm_hash_key_new();
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;

    if (str_is(model, "no_vocab") || str_is(model, "none")) {
        v->type = WGLLM_VOCAB_TYPE_NONE;
        *out = v;
        return WGLLM_STATUS_OK;
    }
    if (str_is(model, "llama")) {
        v->type = WGLLM_VOCAB_TYPE_SPM;
        v->bos = 1; v->eos = 2; v->unk = 0;
        v->add_space_prefix = true;
        v->add_bos = true;
    } else if (str_is(model, "gpt2")) {
        v->type = WGLLM_VOCAB_TYPE_BPE;
        v->bos = 11; v->eos = 11;
    } else if (str_is(model, "bert")) {
        /* llama.cpp's defaults: [CLS] = 101 as BOS, [SEP] = 102 appended, [UNK] = 100 */
        v->type = WGLLM_VOCAB_TYPE_WPM;
        v->bos = 101; v->unk = 100; v->sep = 102; v->pad = 0;
        v->add_bos = true;
        v->add_sep = true;
    } else {
        free(v);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, bert)",
                               (int)WGLLM_MIN(model.len, 64), model.data);
    }

    /* tokens, scores, types */
    const struct wgllm_gguf_value *tv = wgllm_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tv || tv->type != WGLLM_GGUF_TYPE_ARRAY || tv->v.arr.type != WGLLM_GGUF_TYPE_STRING || tv->v.arr.n == 0) {
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tokenizer.ggml.tokens: %s",
                             tv ? "not a non-empty array of strings" : "missing");
        goto fail;
    }
    if (tv->v.arr.n > VOCAB_MAX_ENTRIES) {
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tokenizer.ggml.tokens has %llu entries, more than %d",
                             (unsigned long long)tv->v.arr.n, VOCAB_MAX_ENTRIES);
        goto fail;
    }
    v->n_tokens = (int32_t)tv->v.arr.n;
    const struct wgllm_gguf_value *sv = wgllm_gguf_find(g, "tokenizer.ggml.scores");
    const struct wgllm_gguf_value *yv = wgllm_gguf_find(g, "tokenizer.ggml.token_type");
    if ((st = check_parallel(sv, "tokenizer.ggml.scores", v->n_tokens, true, err)) ||
        (st = check_parallel(yv, "tokenizer.ggml.token_type", v->n_tokens, false, err)))
        goto fail;
    uint64_t total = 0; /* each length is bounded: no overflow */
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint64_t len = tv->v.arr.items[i].v.str.len;
        if (len > VOCAB_MAX_TEXT) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                 "tokenizer.ggml.tokens[%d] is %llu bytes long, more than %d", i,
                                 (unsigned long long)len, VOCAB_MAX_TEXT);
            goto fail;
        }
        total += len + 24; /* room for "[EMPTY_%d]" and the NUL */
    }
    v->toks = wgllm_calloc_array((uint64_t)v->n_tokens, sizeof *v->toks);
    v->text_arena = wgllm_malloc_array(total, 1);
    v->is_eog = wgllm_calloc_array((uint64_t)v->n_tokens, 1);
    uint32_t cap = pow2_at_least((uint64_t)v->n_tokens);
    v->tok_hash = wgllm_malloc_array(cap, sizeof *v->tok_hash);
    if (!v->toks || !v->text_arena || !v->is_eog || !v->tok_hash) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "vocab: out of memory for %d tokens", v->n_tokens);
        goto fail;
    }
    memset(v->tok_hash, 0xFF, (size_t)cap * sizeof *v->tok_hash);
    v->tok_hash_mask = cap - 1;
    char *a = v->text_arena;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        struct wgllm_gguf_str s = tv->v.arr.items[i].v.str;
        struct tok *t = &v->toks[i];
        t->text = a;
        if (s.len == 0) { /* llama.cpp renames empty tokens */
            t->len = (uint32_t)sprintf(a, "[EMPTY_%d]", i);
        } else {
            memcpy(a, s.data, s.len);
            a[s.len] = 0;
            t->len = (uint32_t)s.len;
        }
        a += t->len + 1;
        if (t->len > v->max_token_len) v->max_token_len = t->len;
        t->score = sv ? (float)wgllm_gguf_arr_float(sv, (uint64_t)i) : 0.0f;
        if (isnan(t->score)) t->score = -INFINITY; /* a NaN has no place in SentencePiece's order */
        t->attr = ATTR_NORMAL;
        if (yv) {
            switch (wgllm_gguf_arr_int(yv, (uint64_t)i)) {
            case WGLLM_TOKEN_TYPE_UNKNOWN: t->attr = ATTR_UNKNOWN; break;
            case WGLLM_TOKEN_TYPE_UNUSED: t->attr = ATTR_UNUSED; break;
            case WGLLM_TOKEN_TYPE_NORMAL: t->attr = ATTR_NORMAL; break;
            case WGLLM_TOKEN_TYPE_CONTROL: t->attr = ATTR_CONTROL; break;
            case WGLLM_TOKEN_TYPE_USER_DEFINED: t->attr = ATTR_USER_DEFINED; break;
            case WGLLM_TOKEN_TYPE_BYTE: t->attr = ATTR_BYTE; break;
            default: t->attr = ATTR_UNDEFINED; break;
            }
        }
        /* insert or overwrite: token_to_id[word] = i */
        const uint64_t h = text_hash(v, t->text, t->len);
        for (uint32_t k = (uint32_t)h & v->tok_hash_mask;; k = (k + 1) & v->tok_hash_mask) {
            int32_t id = v->tok_hash[k].id;
            if (id < 0 || (v->toks[id].len == t->len && memcmp(v->toks[id].text, t->text, t->len) == 0)) {
                v->tok_hash[k] = (struct slot){i, (uint32_t)(h >> 32)};
                break;
            }
        }
    }

    if (v->type == WGLLM_VOCAB_TYPE_BPE) {
        for (int b = 0; b < 256; b++) {
            char u[4] = {0};
            v->bmap[b].n = (uint8_t)wgllm_unicode_encode(wgllm_unicode_byte_to_cpt((uint8_t)b), u);
            memcpy(v->bmap[b].c, u, 2);
        }
        if ((st = load_merges(v, g, err)) != WGLLM_STATUS_OK) goto fail;
        struct wgllm_gguf_str pre = {"default", 7};
        const struct wgllm_gguf_value *pv = wgllm_gguf_find(g, "tokenizer.ggml.pre");
        if (pv) {
            if ((st = wgllm_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err)) != WGLLM_STATUS_OK) goto fail;
        }
        int def = -1;
        for (size_t i = 0; i < sizeof k_pre_defs / sizeof k_pre_defs[0] && def < 0; i++)
            if (name_in(k_pre_defs[i].names, pre)) def = (int)i;
        if (def < 0) {
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tokenizer.ggml.pre '%.*s' is not a supported pre-tokenizer",
                                 (int)WGLLM_MIN(pre.len, 64), pre.data);
            goto fail;
        }
        v->ignore_merges = k_pre_defs[def].ignore_merges;
        v->add_bos = k_pre_defs[def].add_bos;
        const char *exprs[MAX_RE];
        int n = pre_exprs(def, exprs);
        if ((st = wgllm_pretok_init(exprs, n, &v->pretok, err)) != WGLLM_STATUS_OK) goto fail;
    }

    if ((st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) != WGLLM_STATUS_OK) goto fail;
    if ((st = opt_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &v->remove_extra_whitespaces, err)) != WGLLM_STATUS_OK) goto fail;
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct wgllm_vocab, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct wgllm_vocab, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct wgllm_vocab, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct wgllm_vocab, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct wgllm_vocab, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct wgllm_vocab, sep)},
        {"tokenizer.ggml.cls_token_id", offsetof(struct wgllm_vocab, bos)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct wgllm_vocab, pad)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(struct wgllm_vocab, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(struct wgllm_vocab, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(struct wgllm_vocab, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(struct wgllm_vocab, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(struct wgllm_vocab, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(struct wgllm_vocab, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(struct wgllm_vocab, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(struct wgllm_vocab, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(struct wgllm_vocab, fim_mid)},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int32_t *p = (int32_t *)((char *)v + ids[i].off);
        if ((st = opt_id(g, ids[i].key, v->n_tokens, p, err)) != WGLLM_STATUS_OK) goto fail;
    }
    if ((st = opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) != WGLLM_STATUS_OK) goto fail;
    if ((st = opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) != WGLLM_STATUS_OK) goto fail;
    if ((st = opt_bool(g, "tokenizer.ggml.add_sep_token", &v->add_sep, err)) != WGLLM_STATUS_OK) goto fail;

    /* type defaults (bos = 11 for gpt2, ...) may not exist in a small vocab */
    int32_t *all_ids[] = {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->pad, &v->sep, &v->fim_pre,
                          &v->fim_suf, &v->fim_mid, &v->fim_pad, &v->fim_rep, &v->fim_sep};
    for (size_t i = 0; i < sizeof all_ids / sizeof all_ids[0]; i++)
        if (*all_ids[i] >= v->n_tokens) *all_ids[i] = -1;

    if (v->type == WGLLM_VOCAB_TYPE_WPM) {
        /* the longest-match walk costs up to this many steps per input byte */
        if (v->max_token_len > VOCAB_WPM_MAX_TEXT) {
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                 "vocab: a WordPiece token is %u bytes long; at most %d are supported",
                                 v->max_token_len, VOCAB_WPM_MAX_TEXT);
            goto fail;
        }
        const char **texts = wgllm_malloc_array((uint64_t)v->n_tokens, sizeof *texts);
        uint32_t *lens = wgllm_malloc_array((uint64_t)v->n_tokens, sizeof *lens);
        bool built = texts && lens;
        for (int32_t i = 0; built && i < v->n_tokens; i++) {
            texts[i] = v->toks[i].text;
            lens[i] = v->toks[i].len;
        }
        built = built && wgllm_trie_init(&v->wpm_trie, texts, lens, v->n_tokens, false);
        free(texts);
        free(lens);
        if (!built) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "vocab: out of memory for %d tokens", v->n_tokens);
            goto fail;
        }
    }
    if (!finish_specials(v, g)) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "vocab: out of memory for %d tokens", v->n_tokens);
        goto fail;
    }
    *out = v;
    return WGLLM_STATUS_OK;
fail:
    wgllm_vocab_free(v);
    return st;
}

void wgllm_vocab_free(struct wgllm_vocab *v) {
    if (!v) return;
    free(v->toks);
    free(v->text_arena);
    free(v->tok_hash);
    free(v->merges);
    free(v->merge_arena);
    free(v->merge_hash);
    free(v->special);
    wgllm_special_set_free(&v->specials);
    wgllm_trie_free(&v->wpm_trie);
    free(v->is_eog);
    wgllm_pretok_free(v->pretok);
    free(v);
}

enum wgllm_vocab_type wgllm_vocab_type(const struct wgllm_vocab *v) { return v->type; }
int32_t wgllm_vocab_n_tokens(const struct wgllm_vocab *v) { return v->n_tokens; }
uint32_t wgllm_vocab_max_token_len(const struct wgllm_vocab *v) { return v->max_token_len; }
int32_t wgllm_vocab_bos(const struct wgllm_vocab *v) { return v->bos; }
int32_t wgllm_vocab_eos(const struct wgllm_vocab *v) { return v->eos; }
int32_t wgllm_vocab_eot(const struct wgllm_vocab *v) { return v->eot; }
bool wgllm_vocab_add_bos(const struct wgllm_vocab *v) { return v->add_bos; }
bool wgllm_vocab_add_eos(const struct wgllm_vocab *v) { return v->add_eos; }

bool wgllm_vocab_is_eog(const struct wgllm_vocab *v, int32_t token) {
    return token >= 0 && token < v->n_tokens && v->is_eog[token];
}

const char *wgllm_vocab_token_text(const struct wgllm_vocab *v, int32_t token) {
    if (token < 0 || token >= v->n_tokens) return NULL;
    return v->toks[token].text;
}

bool wgllm_vocab_is_control(const struct wgllm_vocab *v, int32_t token) {
    return token >= 0 && token < v->n_tokens && (v->toks[token].attr & ATTR_CONTROL);
}

/* ------------------------------------------------------------------------
 * growable output buffer
 * ---------------------------------------------------------------------- */

struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
};

static void ids_push(struct ids *o, int32_t id) {
    if (o->n == o->cap && !wgllm_grow((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v)) {
        o->oom = true;
        return;
    }
    o->v[o->n++] = id;
}

/* ------------------------------------------------------------------------
 * SentencePiece (llama.cpp's llm_tokenizer_spm_session)
 *
 * Pairs merge when their text is a token, best score first. llama.cpp also
 * keeps a map from merged text to the pair (rev_merge) to resegment symbols
 * that are not tokens; it is left out because it cannot be reached: every
 * merged symbol is a token by construction, and a symbol that is not one
 * (a single character) is never a key of that map, whose keys are tokens.
 * ---------------------------------------------------------------------- */

/* A score as a heap key: higher scores merge first, and equal scores (-0.0
 * and 0.0 included; NaNs were replaced at load) get equal keys. */
static uint32_t score_key(float f) {
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* orders like the floats */
    return ~asc;
}

static uint32_t spm_key(const void *ctx, const char *text, uint32_t a, uint32_t b, uint32_t c) {
    (void)b;
    const struct wgllm_vocab *v = ctx;
    if (c - a > v->max_token_len) return WGLLM_MERGE_NONE;
    int32_t id = text_to_token(v, text + a, c - a);
    return id < 0 ? WGLLM_MERGE_NONE : score_key(v->toks[id].score);
}

static int32_t spm_byte_to_token(const struct wgllm_vocab *v, uint8_t ch) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
    int32_t id = text_to_token(v, buf, 6);
    if (id >= 0) return id;
    char c = (char)ch;
    id = text_to_token(v, &c, 1);
    return id >= 0 ? id : v->unk; /* llama.cpp throws here; unk is the gentle choice */
}

static bool spm_tokenize(const struct wgllm_vocab *v, const char *text, size_t len, struct wgllm_merge *mg,
                         struct ids *out) {
    if (len == 0) return true;
    if (!wgllm_merge_run(mg, text, len, spm_key, v)) return false;
    for (int32_t i = 0; i >= 0; i = mg->next[i]) {
        const uint32_t a = wgllm_merge_begin(mg, i), n = wgllm_merge_end(mg, i) - a;
        int32_t id = text_to_token(v, text + a, n);
        if (id >= 0) {
            ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < n; j++) { /* symbols that did not form tokens, as bytes */
            int32_t b = spm_byte_to_token(v, (uint8_t)text[a + j]);
            if (b >= 0) ids_push(out, b);
        }
    }
    return true;
}

/* ------------------------------------------------------------------------
 * byte-level BPE (llama.cpp's llm_tokenizer_bpe_session)
 * ---------------------------------------------------------------------- */

static uint32_t bpe_key(const void *ctx, const char *text, uint32_t a, uint32_t b, uint32_t c) {
    const struct wgllm_vocab *v = ctx;
    if (c - a > v->max_merge_len) return WGLLM_MERGE_NONE;
    int32_t rank = find_rank(v, text + a, b - a, c - a);
    return rank < 0 ? WGLLM_MERGE_NONE : (uint32_t)rank;
}

/* Merges one byte-encoded word and appends its tokens. */
static bool bpe_word(const struct wgllm_vocab *v, const char *w, size_t wlen, struct wgllm_merge *mg,
                     struct ids *out) {
    if (wlen == 0) return true;
    if (v->ignore_merges) {
        int32_t id = text_to_token(v, w, wlen);
        if (id >= 0) {
            ids_push(out, id);
            return true;
        }
    }
    if (!wgllm_merge_run(mg, w, wlen, bpe_key, v)) return false;
    for (int32_t i = 0; i >= 0; i = mg->next[i]) {
        const uint32_t a = wgllm_merge_begin(mg, i), n = wgllm_merge_end(mg, i) - a;
        int32_t id = text_to_token(v, w + a, n);
        if (id >= 0) {
            ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < n; j++) {
            int32_t b = text_to_token(v, w + a + j, 1);
            if (b >= 0) ids_push(out, b);
        }
    }
    return true;
}

/* Bytes of cpt once each of its UTF-8 bytes is mapped to GPT-2's printable
 * codepoint (each of those takes 1 or 2 bytes); written at w when not NULL. */
static size_t bpe_map(const struct wgllm_vocab *v, uint32_t cpt, char *w) {
    char u[4];
    int k = wgllm_unicode_encode(cpt, u);
    size_t n = 0;
    for (int j = 0; j < k; j++) {
        const uint8_t b = (uint8_t)u[j];
        if (w) memcpy(w + n, v->bmap[b].c, 2);
        n += v->bmap[b].n;
    }
    return n;
}

static bool bpe_tokenize(const struct wgllm_vocab *v, const char *text, size_t len, struct wgllm_merge *mg,
                         struct ids *out) {
    if (len == 0) return true;
    uint32_t *cpts = wgllm_malloc_array(len, sizeof *cpts);
    if (!cpts) return false;
    size_t *lens = NULL;
    char *word = NULL;
    size_t word_cap = 0;
    const size_t n = wgllm_unicode_decode(text, len, cpts);
    const size_t nw = wgllm_pretok_split(v->pretok, cpts, n, &lens);
    bool ok = nw != (size_t)-1;
    size_t start = 0;
    for (size_t w = 0; ok && w < nw; w++) {
        /* the word's buffer grows to the longest word, not to the input */
        size_t wl = 0;
        for (size_t i = start; i < start + lens[w]; i++) wl += bpe_map(v, cpts[i], NULL);
        /* +1: bpe_map writes 2 bytes for a 1-byte mapping */
        if (!wgllm_grow((void **)&word, &word_cap, wl + 1, 1)) {
            ok = false;
            break;
        }
        wl = 0;
        for (size_t i = start; i < start + lens[w]; i++) wl += bpe_map(v, cpts[i], word + wl);
        start += lens[w];
        ok = bpe_word(v, word, wl, mg, out);
    }
    free(cpts);
    free(word);
    free(lens);
    return ok;
}

/* ------------------------------------------------------------------------
 * WordPiece (llama.cpp's llm_tokenizer_wpm_session)
 * ---------------------------------------------------------------------- */

/* BERT's "Chinese character" blocks (with the HF quirk 0x2B920, not 0x2B820) */
static bool wpm_is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word (already prefixed with U+2581, the GGUF
 * form of a word start; "##" continuations are stored without prefix). A
 * word with any unmatched position becomes a single [UNK]. */
static void wpm_word(const struct wgllm_vocab *v, const char *w, size_t n, struct ids *out) {
    const struct wgllm_trie *t = &v->wpm_trie;
    size_t start = out->n;
    for (size_t i = 0; i < n;) {
        int32_t id = -1;
        size_t end = i;
        uint32_t u = 0;
        for (size_t q = i; q < n && (u = wgllm_trie_child(t, u, (uint8_t)w[q])) != WGLLM_TRIE_NONE; q++)
            if (t->key[u] >= 0) {
                id = t->key[u];
                while (t->key_next[id] >= 0) id = t->key_next[id]; /* the last id with a text wins */
                end = q + 1;
            }
        if (id < 0) { out->n = start; break; }
        ids_push(out, id);
        i = end;
    }
    if (out->n == start && v->unk >= 0) ids_push(out, v->unk);
}

/* Splits on whitespace; punctuation, ASCII symbols and CJK ideographs are
 * words of their own; NUL, U+FFFD and controls vanish; all else is
 * first-codepoint-NFD'd and lowercased. */
static bool wpm_tokenize(const struct wgllm_vocab *v, const char *text, size_t len, struct ids *out) {
    if (len == 0) return true;
    uint32_t *cpts = wgllm_malloc_array(len, sizeof *cpts);
    char *word = wgllm_malloc_array((uint64_t)len * 4 + 8, 1);
    if (!cpts || !word) { free(cpts); free(word); return false; }
    size_t n = wgllm_unicode_decode(text, len, cpts);
    size_t wl = 3;
    memcpy(word, "\xe2\x96\x81", 3);
    for (size_t i = 0; i <= n; i++) {
        uint32_t c = i < n ? wgllm_unicode_nfd_first(cpts[i]) : ' ';
        uint32_t f = wgllm_unicode_flags(c);
        bool alone = (f & WGLLM_UCF_PUNCTUATION) || (c < 0x7F && (f & WGLLM_UCF_SYMBOL)) || wpm_is_chinese(c);
        if ((f & WGLLM_UCF_WHITESPACE) || alone) {
            if (wl > 3) wpm_word(v, word, wl, out);
            wl = 3;
        }
        if (f & WGLLM_UCF_WHITESPACE) continue;
        if (c == 0 || c == 0xFFFD || (f & WGLLM_UCF_CONTROL)) continue;
        wl += (size_t)wgllm_unicode_encode(wgllm_unicode_tolower(c), word + wl);
        if (alone) {
            wpm_word(v, word, wl, out);
            wl = 3;
        }
    }
    free(cpts);
    free(word);
    return !out->oom;
}

/* ------------------------------------------------------------------------
 * tokenize
 * ---------------------------------------------------------------------- */

static int32_t tokenize(const struct wgllm_vocab *v, const char *text, size_t len, int32_t *tokens,
                        int32_t max_tokens, bool add_special, bool parse_special,
                        const struct wgllm_text_span *plain, size_t n_plain) {
    if (v->type == WGLLM_VOCAB_TYPE_NONE) return INT32_MIN;
    if ((!text && len > 0) || max_tokens < 0 || len > INT32_MAX) return INT32_MIN;
    struct ids out = {0};
    struct wgllm_frags fr = {0};
    struct wgllm_merge mg = {0};
    bool ok = len == 0 || wgllm_special_partition(&v->specials, text, len, parse_special, plain, n_plain, &fr);
    char *buf = NULL;

    if (ok && v->type == WGLLM_VOCAB_TYPE_SPM) {
        bool prev_special = true; /* so the first text gets the space prefix */
        if (add_special && v->add_bos && v->bos >= 0) ids_push(&out, v->bos);
        buf = wgllm_malloc_array((uint64_t)len * 3 + 4, 1); /* ' ' becomes 3 bytes */
        ok = buf != NULL;
        for (size_t i = 0; ok && i < fr.n; i++) {
            if (fr.v[i].token >= 0) {
                ids_push(&out, fr.v[i].token);
                prev_special = true;
                continue;
            }
            /* escape whitespace: ' ' -> U+2581 */
            size_t bl = 0;
            if (v->add_space_prefix && prev_special) { memcpy(buf, "\xe2\x96\x81", 3); bl = 3; }
            for (size_t j = 0; j < fr.v[i].len; j++) {
                char c = text[fr.v[i].off + j];
                if (c == ' ') { memcpy(buf + bl, "\xe2\x96\x81", 3); bl += 3; }
                else buf[bl++] = c;
            }
            ok = spm_tokenize(v, buf, bl, &mg, &out);
            prev_special = false;
        }
        if (ok && add_special && v->add_eos && v->eos >= 0) ids_push(&out, v->eos);
    } else if (ok && v->type == WGLLM_VOCAB_TYPE_WPM) {
        if (add_special && v->add_bos && v->bos >= 0) ids_push(&out, v->bos);
        for (size_t i = 0; ok && i < fr.n; i++) {
            if (fr.v[i].token >= 0) ids_push(&out, fr.v[i].token);
            else ok = wpm_tokenize(v, text + fr.v[i].off, fr.v[i].len, &out);
        }
        if (ok && add_special && v->add_sep && v->sep >= 0) ids_push(&out, v->sep);
    } else if (ok) {
        if (add_special && v->add_bos && v->bos >= 0) ids_push(&out, v->bos);
        for (size_t i = 0; ok && i < fr.n; i++) {
            if (fr.v[i].token >= 0) ids_push(&out, fr.v[i].token);
            else ok = bpe_tokenize(v, text + fr.v[i].off, fr.v[i].len, &mg, &out);
        }
        if (ok && add_special && v->add_eos && v->eos >= 0) ids_push(&out, v->eos);
    }
    free(buf);
    free(fr.v);
    wgllm_merge_free(&mg);
    int32_t ret;
    if (!ok || out.oom || out.n > INT32_MAX) ret = INT32_MIN;
    else if (out.n > (size_t)max_tokens) ret = -(int32_t)out.n;
    else {
        if (out.n) memcpy(tokens, out.v, out.n * sizeof *tokens);
        ret = (int32_t)out.n;
    }
    free(out.v);
    return ret;
}

int32_t wgllm_vocab_tokenize(const struct wgllm_vocab *v, const char *text, size_t len,
                             int32_t *tokens, int32_t max_tokens, bool add_special,
                             bool parse_special) {
    return tokenize(v, text, len, tokens, max_tokens, add_special, parse_special, NULL, 0);
}

int32_t wgllm_vocab_tokenize_spans(const struct wgllm_vocab *v, const char *text, size_t len,
                                   int32_t *tokens, int32_t max_tokens, bool add_special,
                                   const struct wgllm_text_span *plain, size_t n_plain) {
    if (n_plain && !plain) return INT32_MIN;
    for (size_t i = 0, end = 0; i < n_plain; i++) { /* sorted, disjoint, inside the text */
        if ((i && plain[i].off < end) || plain[i].off > len || plain[i].len > len - plain[i].off) return INT32_MIN;
        end = plain[i].off + plain[i].len;
    }
    return tokenize(v, text, len, tokens, max_tokens, add_special, true, plain, n_plain);
}

/* ------------------------------------------------------------------------
 * token_to_piece
 * ---------------------------------------------------------------------- */

static int32_t copy_piece(const char *s, size_t n, char *buf, int32_t size) {
    if (n > (size_t)INT32_MAX) return INT32_MIN;
    if ((size_t)size < n || size < 0) return -(int32_t)n;
    if (n) memcpy(buf, s, n);
    return (int32_t)n;
}

int32_t wgllm_vocab_token_to_piece(const struct wgllm_vocab *v, int32_t token, char *buf,
                                   int32_t size, bool special) {
    if (token < 0 || token >= v->n_tokens) return 0;
    const struct tok *t = &v->toks[token];
    if (!special && (t->attr & (ATTR_UNKNOWN | ATTR_CONTROL))) return 0;
    if (t->attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) return copy_piece(t->text, t->len, buf, size);
    if (v->type == WGLLM_VOCAB_TYPE_SPM || v->type == WGLLM_VOCAB_TYPE_WPM) {
        if (t->attr & ATTR_NORMAL) {
            /* unescape U+2581 -> ' ' */
            size_t n = 0;
            for (size_t i = 0; i < t->len; i++) {
                if (i + 2 < t->len && memcmp(t->text + i, "\xe2\x96\x81", 3) == 0) i += 2;
                n++;
            }
            if (n > (size_t)size) return -(int32_t)n;
            size_t o = 0;
            for (size_t i = 0; i < t->len; i++) {
                if (i + 2 < t->len && memcmp(t->text + i, "\xe2\x96\x81", 3) == 0) {
                    buf[o++] = ' ';
                    i += 2;
                } else {
                    buf[o++] = t->text[i];
                }
            }
            return (int32_t)o;
        }
        if (t->attr & ATTR_BYTE) {
            /* "<0xXX>": strtol of the text after "<0x" */
            char b = (char)strtol(t->text + (t->len > 3 ? 3 : t->len), NULL, 16);
            return copy_piece(&b, 1, buf, size);
        }
        return 0;
    }
    if (v->type == WGLLM_VOCAB_TYPE_BPE && (t->attr & ATTR_NORMAL)) {
        /* map each codepoint back to its byte; llama.cpp writes unknown ones as a marker */
        uint32_t cpts[256];
        uint32_t *cp = t->len <= 256 ? cpts : wgllm_malloc_array(t->len, sizeof *cp);
        if (!cp) return INT32_MIN;
        size_t nc = wgllm_unicode_decode(t->text, t->len, cp);
        size_t need = 0;
        char tmp[4];
        for (int pass = 0; pass < 2; pass++) {
            size_t o = 0;
            for (size_t i = 0; i < nc; i++) {
                int b = wgllm_unicode_cpt_to_byte(cp[i]);
                if (b >= 0) {
                    if (pass) buf[o] = (char)b;
                    o++;
                } else {
                    char mark[64 + 16];
                    int k = wgllm_unicode_encode(cp[i], tmp);
                    int m = snprintf(mark, sizeof mark, "[UNK_BYTE_0x");
                    for (int j = 0; j < k; j++) m += snprintf(mark + m, sizeof mark - (size_t)m, "%02x", (uint8_t)tmp[j]);
                    size_t ml = (size_t)m + t->len + 1;
                    if (pass) {
                        memcpy(buf + o, mark, (size_t)m);
                        memcpy(buf + o + m, t->text, t->len);
                        buf[o + ml - 1] = ']';
                    }
                    o += ml;
                }
            }
            if (!pass) {
                need = o;
                if (need > (size_t)size) break;
            }
        }
        if (cp != cpts) free(cp);
        if (need > (size_t)INT32_MAX) return INT32_MIN;
        return need > (size_t)size ? -(int32_t)need : (int32_t)need;
    }
    return 0;
}
