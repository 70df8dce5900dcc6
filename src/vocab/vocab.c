/*
 * vocab.c - the tokenizer common to every family, built from a GGUF's
 * `tokenizer.ggml.*` metadata: loading the tokens, scores and types, the
 * text -> id table, special-token detection and the EOG set, the tokenize
 * dispatch (special-token partition, then the family's tokenizer) and
 * token_to_piece. The families are vocab_spm.c (SentencePiece), vocab_bpe.c
 * (byte-level BPE and its pre-tokenizers) and vocab_wpm.c (WordPiece); what
 * they share is vocab_internal.h. Every rule follows llama.cpp's
 * llama-vocab.cpp so that token ids agree with it exactly; where llama.cpp
 * has a quirk, so do we.
 */
#include "vocab/vocab_internal.h"

#include <ctype.h>
#include <math.h>

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

    if (v->type == WGLLM_VOCAB_TYPE_BPE && (st = wgllm_vocab_bpe_init(v, g, err)) != WGLLM_STATUS_OK) goto fail;

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

    if (v->type == WGLLM_VOCAB_TYPE_WPM && (st = wgllm_vocab_wpm_init(v, err)) != WGLLM_STATUS_OK) goto fail;
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
 * tokenize
 * ---------------------------------------------------------------------- */

static int32_t tokenize(const struct wgllm_vocab *v, const char *text, size_t len, int32_t *tokens,
                        int32_t max_tokens, bool add_special, bool parse_special,
                        const struct wgllm_text_span *plain, size_t n_plain) {
    if (v->type == WGLLM_VOCAB_TYPE_NONE) return INT32_MIN;
    if ((!text && len > 0) || max_tokens < 0 || len > INT32_MAX) return INT32_MIN;
    struct ids out = {0};
    struct wgllm_frags fr = {0};
    bool ok = len == 0 || wgllm_special_partition(&v->specials, text, len, parse_special, plain, n_plain, &fr);

    if (ok && v->type == WGLLM_VOCAB_TYPE_SPM)
        ok = wgllm_vocab_spm_tokenize(v, text, len, &fr, add_special, &out);
    else if (ok && v->type == WGLLM_VOCAB_TYPE_WPM)
        ok = wgllm_vocab_wpm_tokenize(v, text, &fr, add_special, &out);
    else if (ok)
        ok = wgllm_vocab_bpe_tokenize(v, text, &fr, add_special, &out);
    free(fr.v);
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

