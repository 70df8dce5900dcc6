/*
 * vocab_bpe.c - the byte-level BPE tokenizer (tokenizer.ggml.model "gpt2"):
 * the pre-tokenizer regexes chosen by tokenizer.ggml.pre, the merge table
 * (tokenizer.ggml.merges, looked up by pair) and the merge of each
 * pre-tokenized word after mapping its bytes to GPT-2's printable
 * codepoints, as llama.cpp's llm_tokenizer_bpe(_session).
 */
#include "vocab/vocab_internal.h"

/* ------------------------------------------------------------------------
 * the merge table
 * ---------------------------------------------------------------------- */

/* The pair (p[0, split), p[split, n)): its bytes, with the split as tweak. */
static uint64_t pair_hash(const struct wgllm_vocab *v, const char *p, size_t split, size_t n) {
    return wgllm_hash(&v->hkey, (uint64_t)split + 1, p, n);
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

/* ------------------------------------------------------------------------
 * pre-tokenizers
 * ---------------------------------------------------------------------- */

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

/* The byte map, the merges and the pre-tokenizer; what it allocated is freed
 * by wgllm_vocab_free, also when it fails. */
enum wgllm_status wgllm_vocab_bpe_init(struct wgllm_vocab *v, const struct wgllm_gguf *g, struct wgllm_error *err) {
    enum wgllm_status st;
    for (int b = 0; b < 256; b++) {
        char u[4] = {0};
        v->bmap[b].n = (uint8_t)wgllm_unicode_encode(wgllm_unicode_byte_to_cpt((uint8_t)b), u);
        memcpy(v->bmap[b].c, u, 2);
    }
    if ((st = load_merges(v, g, err)) != WGLLM_STATUS_OK) return st;
    struct wgllm_gguf_str pre = {"default", 7};
    const struct wgllm_gguf_value *pv = wgllm_gguf_find(g, "tokenizer.ggml.pre");
    if (pv) {
        if ((st = wgllm_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err)) != WGLLM_STATUS_OK) return st;
    }
    int def = -1;
    for (size_t i = 0; i < sizeof k_pre_defs / sizeof k_pre_defs[0] && def < 0; i++)
        if (name_in(k_pre_defs[i].names, pre)) def = (int)i;
    if (def < 0)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tokenizer.ggml.pre '%.*s' is not a supported pre-tokenizer",
                               (int)WGLLM_MIN(pre.len, 64), pre.data);
    v->ignore_merges = k_pre_defs[def].ignore_merges;
    v->add_bos = k_pre_defs[def].add_bos;
    const char *exprs[MAX_RE];
    int n = pre_exprs(def, exprs);
    return wgllm_pretok_init(exprs, n, &v->pretok, err);
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

/* A byte of a byte-encoded word as the token of that one-byte text. */
static int32_t bpe_byte_to_token(const struct wgllm_vocab *v, uint8_t ch) {
    const char c = (char)ch;
    return text_to_token(v, &c, 1);
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
    emit_symbols(v, w, mg, out, bpe_byte_to_token);
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

static bool bpe_text(const struct wgllm_vocab *v, const char *text, size_t len, struct wgllm_merge *mg,
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

bool wgllm_vocab_bpe_tokenize(const struct wgllm_vocab *v, const char *text, const struct wgllm_frags *fr,
                              bool add_special, struct ids *out) {
    struct wgllm_merge mg = {0};
    bool ok = true;
    if (add_special && v->add_bos && v->bos >= 0) ids_push(out, v->bos);
    for (size_t i = 0; ok && i < fr->n; i++) {
        if (fr->v[i].token >= 0) ids_push(out, fr->v[i].token);
        else ok = bpe_text(v, text + fr->v[i].off, fr->v[i].len, &mg, out);
    }
    if (ok && add_special && v->add_eos && v->eos >= 0) ids_push(out, v->eos);
    wgllm_merge_free(&mg);
    return ok;
}
