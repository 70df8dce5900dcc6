/*
 * quantize.c - `wgllm quantize`: per-tensor type choice (a port of the rules
 * of llama.cpp's llama-quant.cpp: tensor_allows_quantization,
 * llama_tensor_get_type_impl, tensor_type_fallback) and the streaming
 * converter that writes the new file one tensor at a time.
 *
 * Why mirror llama.cpp so closely, down to its tensor order: its counters
 * (the i-th attn_v, the i-th ffn_down) decide which layers get more bits, and
 * they count in the order it visits tensors (sorted by layer number, then by
 * name). Visiting in the same order and quantizing each row with the same
 * reference quantizer makes the output's tensor bytes equal llama.cpp's.
 */
#include "model/quantize.h"

#include "base/threadpool.h"
#include "quant/quant.h"

#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
 * presets (llama.cpp's LLAMA_FTYPE values)
 * ------------------------------------------------------------------------- */

enum {
    FT_ALL_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27, FT_IQ4_XS = 30,
    FT_BF16 = 32,
    FT_TQ1_0 = 36, FT_TQ2_0 = 37, FT_MXFP4_MOE = 38, FT_Q1_0 = 40,
    /* wgllm's own: MXFP4 for a dense model too (llama.cpp's MXFP4_MOE turns
     * only expert tensors to MXFP4, a dense model all to Q8_0). Every matrix
     * MXFP4_MOE would keep in Q8_0 becomes MXFP4 but token_embd and output,
     * which stay Q8_0 as there. Written as general.file_type 38. */
    FT_MXFP4 = 0x100 | FT_MXFP4_MOE,
};

/* The LLAMA_FTYPE a file of this preset declares. */
static int file_type_of(int ftype) { return ftype == FT_MXFP4 ? FT_MXFP4_MOE : ftype; }

static const struct {
    const char *name;
    int ftype;
    uint32_t type; /* llama_ftype_get_default_type */
} presets[] = {
    {"Q4_0", FT_Q4_0, WGLLM_TYPE_Q4_0},       {"Q4_1", FT_Q4_1, WGLLM_TYPE_Q4_1},
    {"Q5_0", FT_Q5_0, WGLLM_TYPE_Q5_0},       {"Q5_1", FT_Q5_1, WGLLM_TYPE_Q5_1},
    {"IQ4_NL", FT_IQ4_NL, WGLLM_TYPE_IQ4_NL}, {"IQ4_XS", FT_IQ4_XS, WGLLM_TYPE_IQ4_XS},
    {"Q2_K", FT_Q2_K, WGLLM_TYPE_Q2_K},       {"Q3_K_S", FT_Q3_K_S, WGLLM_TYPE_Q3_K},
    {"Q3_K_M", FT_Q3_K_M, WGLLM_TYPE_Q3_K},   {"Q3_K_L", FT_Q3_K_L, WGLLM_TYPE_Q3_K},
    {"Q4_K_S", FT_Q4_K_S, WGLLM_TYPE_Q4_K},   {"Q4_K_M", FT_Q4_K_M, WGLLM_TYPE_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, WGLLM_TYPE_Q5_K},   {"Q5_K_M", FT_Q5_K_M, WGLLM_TYPE_Q5_K},
    {"Q6_K", FT_Q6_K, WGLLM_TYPE_Q6_K},       {"Q8_0", FT_Q8_0, WGLLM_TYPE_Q8_0},
    {"F16", FT_F16, WGLLM_TYPE_F16},          {"BF16", FT_BF16, WGLLM_TYPE_BF16},
    {"F32", FT_ALL_F32, WGLLM_TYPE_F32},
    {"TQ1_0", FT_TQ1_0, WGLLM_TYPE_TQ1_0},     {"TQ2_0", FT_TQ2_0, WGLLM_TYPE_TQ2_0},
    {"MXFP4_MOE", FT_MXFP4_MOE, WGLLM_TYPE_MXFP4}, {"MXFP4", FT_MXFP4, WGLLM_TYPE_MXFP4},
    {"Q1_0", FT_Q1_0, WGLLM_TYPE_Q1_0},
    {"IQ3_S", FT_IQ3_S, WGLLM_TYPE_IQ3_S},     {"IQ3_M", FT_IQ3_M, WGLLM_TYPE_IQ3_S},
    /* llama.cpp's quantize tool takes these as aliases */
    {"Q3_K", FT_Q3_K_M, WGLLM_TYPE_Q3_K},     {"Q4_K", FT_Q4_K_M, WGLLM_TYPE_Q4_K},
    {"Q5_K", FT_Q5_K_M, WGLLM_TYPE_Q5_K},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))
#define N_CANONICAL (N_PRESETS - 3)

/* llama.cpp's I-quant presets that wgllm cannot write: llama.cpp's quantizer
 * refuses them without an importance matrix (tensor_requires_imatrix: any
 * matrix of IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S or IQ3_XXS but token_embd /
 * output), and wgllm quantize takes none. IQ3_S and IQ3_M need none: they
 * are presets above. */
static const char *const imatrix_presets[] = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS",
                                              "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS"};

/* Why a name that is no preset cannot be one: an I-quant's reason, or NULL. */
static const char *iq_preset_reason(const char *name, char *buf, size_t cap) {
    for (size_t i = 0; name && i < sizeof imatrix_presets / sizeof *imatrix_presets; i++) {
        if (strcasecmp(name, imatrix_presets[i])) continue;
        snprintf(buf, cap, "the %s preset needs an importance matrix (llama.cpp's llama-quantize --imatrix), "
                 "which wgllm quantize does not take; quantize with llama.cpp, wgllm runs the file",
                 imatrix_presets[i]);
        return buf;
    }
    return NULL;
}

int wgllm_quantize_ftype_from_name(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcasecmp(name, presets[i].name)) return presets[i].ftype;
    return -1;
}

const char *wgllm_quantize_ftype_name(int ftype) {
    for (size_t i = 0; i < N_CANONICAL; i++)
        if (presets[i].ftype == ftype) return presets[i].name;
    return NULL;
}

int wgllm_quantize_ftype_default_type(int ftype) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (presets[i].ftype == ftype) return (int)presets[i].type;
    return -1;
}

const char *wgllm_quantize_preset_list(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t n = 0;
        for (size_t i = 0; i < N_CANONICAL; i++)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? " " : "", presets[i].name);
    }
    return buf;
}

struct wgllm_quantize_params wgllm_quantize_default_params(void) {
    struct wgllm_quantize_params p = {
        .type = WGLLM_TYPE_Q8_0, .preset = NULL, .n_threads = 0,
        .allow_requantize = false, .pure = false, .progress = NULL, .user = NULL,
    };
    return p;
}

/* ---------------------------------------------------------------------------
 * per-tensor type choice
 * ------------------------------------------------------------------------- */

enum cat { CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B,
           CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER };

struct qstate {
    int ftype;
    bool pure, falcon, is_70b;
    int n_layer, n_expert, n_gqa;
    int n_attention_wv, i_attention_wv;
    int i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied;
};

static enum cat category(const char *n) {
    if (!strcmp(n, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (strstr(n, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (strstr(n, "attn_v.weight")) return CAT_ATTN_V;
    if (strstr(n, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(n, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(n, "ffn_up")) return CAT_FFN_UP;
    if (strstr(n, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(n, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool cat_is_attn_v(enum cat c) {
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

/* ggml_n_dims: trailing dimensions of size 1 do not count */
static int n_dims_of(const struct wgllm_gguf_tensor *t) {
    for (int i = WGLLM_GGUF_MAX_DIMS - 1; i >= 1; i--)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !memcmp(s + a - b, suf, b);
}

static bool allows_quantization(const char *name, int n_dims) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
        ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        if (strstr(name, never[i])) return false;
    return strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
}

static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int64_t blck(uint32_t t) { return wgllm_type_traits(t)->blck_size; }

/* llama_tensor_get_type_impl for the presets wgllm offers */
static enum wgllm_status type_impl(struct qstate *qs, const char *name, enum cat c, uint64_t ne0,
                                   uint64_t ne2, uint32_t *io, struct wgllm_error *err) {
    uint32_t t = *io;
    const int ft = qs->ftype;
    if (c == CAT_OUTPUT || (qs->tied && c == CAT_TOKEN_EMBD)) {
        if (ft == FT_MXFP4_MOE || ft == FT_MXFP4 || qs->falcon || ne0 % (uint64_t)blck(t) != 0) t = WGLLM_TYPE_Q8_0;
        else if (t != WGLLM_TYPE_Q8_0) t = WGLLM_TYPE_Q6_K;
    } else if (ft == FT_MXFP4_MOE) {
        /* experts (3-d: one matrix per expert) MXFP4, the rest Q8_0 */
        t = ne2 > 1 ? WGLLM_TYPE_MXFP4 : WGLLM_TYPE_Q8_0;
    } else if (ft == FT_MXFP4) {
        t = c == CAT_TOKEN_EMBD ? WGLLM_TYPE_Q8_0 : WGLLM_TYPE_MXFP4;
    } else if (c == CAT_TOKEN_EMBD) {
        /* only the IQ1/IQ2/IQ3/TQ presets change it */
        if (ft == FT_TQ1_0 || ft == FT_TQ2_0) t = WGLLM_TYPE_Q4_K;
    } else if (cat_is_attn_v(c)) {
        if (ft == FT_Q2_K) t = qs->n_gqa >= 4 ? WGLLM_TYPE_Q4_K : WGLLM_TYPE_Q3_K;
        else if (ft == FT_IQ3_S && qs->n_gqa >= 4) t = WGLLM_TYPE_Q4_K;
        else if (ft == FT_IQ3_M) t = WGLLM_TYPE_Q4_K;
        else if (ft == FT_Q3_K_M) t = qs->i_attention_wv < 2 ? WGLLM_TYPE_Q5_K : WGLLM_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = WGLLM_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && qs->n_gqa >= 4) t = WGLLM_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) &&
                 use_more_bits(qs->i_attention_wv, qs->n_attention_wv))
            t = WGLLM_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && qs->i_attention_wv < 4) t = WGLLM_TYPE_Q5_K;
        /* 70B: 8 heads share attn_v, so more bits cost little */
        if (qs->is_70b && (t == WGLLM_TYPE_Q3_K || t == WGLLM_TYPE_Q4_K)) t = WGLLM_TYPE_Q5_K;
        if (qs->n_expert == 8) t = WGLLM_TYPE_Q8_0;
        qs->i_attention_wv++;
    } else if (c == CAT_ATTN_K) {
        if (qs->n_expert == 8) t = WGLLM_TYPE_Q8_0;
    } else if (c == CAT_ATTN_Q) {
        /* only IQ3 presets */
    } else if (c == CAT_FFN_DOWN) {
        int il = qs->i_ffn_down, nl = qs->n_layer;
        if (qs->n_expert > 1) {
            /* experts are not stored consecutively: the layer comes from the name */
            if (sscanf(name, "blk.%d.", &il) != 1)
                return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                       "quantize: cannot tell the layer of tensor '%s'", name);
            if (il < 0 || il >= nl)
                return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                       "quantize: tensor '%s' names layer %d of %d", name, il, nl);
        }
        const bool more = use_more_bits(il, nl);
        if (ft == FT_Q2_K) t = WGLLM_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = il < nl / 16 ? WGLLM_TYPE_Q5_K
                : (!qs->falcon || more) ? WGLLM_TYPE_Q4_K : WGLLM_TYPE_Q3_K;
        else if (ft == FT_IQ3_M && (il < nl / 8 || (qs->n_expert == 8 && more))) t = WGLLM_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = qs->falcon ? WGLLM_TYPE_Q4_K : WGLLM_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (qs->falcon)
                t = il < nl / 16 ? WGLLM_TYPE_Q6_K : more ? WGLLM_TYPE_Q5_K : WGLLM_TYPE_Q4_K;
            else if (more)
                t = WGLLM_TYPE_Q6_K;
        } else if (il < nl / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS))
            t = WGLLM_TYPE_Q5_K; /* no importance matrix here */
        else if (ft == FT_Q5_K_M && more) t = WGLLM_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !qs->falcon && il < nl / 8) t = WGLLM_TYPE_Q5_K;
        qs->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (!qs->falcon) {
            if (qs->n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL ||
                    ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ3_S || ft == FT_IQ3_M || ft == FT_IQ4_XS)
                    t = WGLLM_TYPE_Q5_K;
            } else {
                if (ft == FT_Q2_K) t = WGLLM_TYPE_Q3_K;
                else if (ft == FT_Q3_K_M) t = WGLLM_TYPE_Q4_K;
                else if (ft == FT_Q3_K_L) t = WGLLM_TYPE_Q5_K;
                else if (ft == FT_IQ3_M) t = WGLLM_TYPE_Q4_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = WGLLM_TYPE_Q4_K;
        }
    } else if (c == CAT_FFN_GATE) {
        qs->i_ffn_gate++;
    } else if (c == CAT_FFN_UP) {
        qs->i_ffn_up++;
    }
    *io = t;
    return WGLLM_STATUS_OK;
}

/* tensor_type_fallback: a row length the block size does not divide */
static enum wgllm_status fallback(const char *name, uint64_t ne0, uint32_t *io,
                                  struct wgllm_error *err) {
    uint32_t t = *io;
    if (ne0 % (uint64_t)blck(t) == 0) return WGLLM_STATUS_OK;
    switch (t) {
    case WGLLM_TYPE_IQ3_S:
    case WGLLM_TYPE_IQ4_XS: t = WGLLM_TYPE_IQ4_NL; break;
    case WGLLM_TYPE_Q2_K:
    case WGLLM_TYPE_Q3_K:
    case WGLLM_TYPE_TQ1_0:
    case WGLLM_TYPE_TQ2_0: t = WGLLM_TYPE_Q4_0; break;
    case WGLLM_TYPE_Q4_K: t = WGLLM_TYPE_Q5_0; break;
    case WGLLM_TYPE_Q5_K: t = WGLLM_TYPE_Q5_1; break;
    case WGLLM_TYPE_Q6_K: t = WGLLM_TYPE_Q8_0; break;
    default:
        if (blck(t) > 32)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "quantize: no fallback type for %s (tensor '%s', row %llu)",
                                   wgllm_type_name(t), name, (unsigned long long)ne0);
    }
    if (ne0 % (uint64_t)blck(t) != 0) t = WGLLM_TYPE_F16;
    *io = t;
    return WGLLM_STATUS_OK;
}

static bool kv_u32(const struct wgllm_gguf *g, const char *arch, const char *suffix, int *out) {
    char k[160];
    snprintf(k, sizeof(k), "%s.%s", arch, suffix);
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, k);
    if (!v) return false;
    if (v->type == WGLLM_GGUF_TYPE_ARRAY) { /* per-layer values: llama.cpp's n_head() is layer 0's */
        if (v->v.arr.n == 0 || v->v.arr.type == WGLLM_GGUF_TYPE_STRING ||
            v->v.arr.type == WGLLM_GGUF_TYPE_ARRAY)
            return false;
        *out = (int)wgllm_gguf_arr_int(v, 0);
        return true;
    }
    uint32_t u;
    struct wgllm_error e;
    if (wgllm_gguf_get_u32(g, k, &u, &e) != WGLLM_STATUS_OK) return false;
    *out = (int)u;
    return true;
}

static int tensor_layer(const struct wgllm_gguf_tensor *t) {
    int l = -1;
    if (t->name.len > 4 && !memcmp(t->name.data, "blk.", 4)) {
        l = 0;
        uint64_t i = 4;
        bool digits = false;
        while (i < t->name.len && t->name.data[i] >= '0' && t->name.data[i] <= '9' && l < 100000000) {
            l = l * 10 + (t->name.data[i++] - '0');
            digits = true;
        }
        if (!digits || i >= t->name.len || t->name.data[i] != '.') l = -1;
    }
    return l;
}

static const struct wgllm_gguf *sort_g;
static int cmp_tensor(const void *a, const void *b) {
    const struct wgllm_gguf_tensor *x = wgllm_gguf_tensor_at(sort_g, *(const int64_t *)a);
    const struct wgllm_gguf_tensor *y = wgllm_gguf_tensor_at(sort_g, *(const int64_t *)b);
    int lx = tensor_layer(x), ly = tensor_layer(y);
    if (lx != ly) return lx < ly ? -1 : 1;
    uint64_t n = WGLLM_MIN(x->name.len, y->name.len);
    int c = memcmp(x->name.data, y->name.data, (size_t)n);
    if (c) return c;
    return x->name.len < y->name.len ? -1 : x->name.len > y->name.len ? 1 : 0;
}

enum wgllm_status wgllm_quantize_plan(const struct wgllm_gguf *g, int ftype, bool pure,
                                      uint32_t *types, int64_t *order_out,
                                      struct wgllm_error *err) {
    const int dtype = wgllm_quantize_ftype_default_type(ftype);
    if (dtype < 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "quantize: file type %d is not one of %s", ftype,
                               wgllm_quantize_preset_list());
    struct wgllm_gguf_str as;
    struct wgllm_error e;
    if (wgllm_gguf_get_str(g, "general.architecture", &as, &e) != WGLLM_STATUS_OK)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "quantize: the model has no general.architecture string");
    char arch[64];
    snprintf(arch, sizeof(arch), "%.*s", (int)WGLLM_MIN(as.len, 63), as.data);

    struct qstate qs = {.ftype = ftype, .pure = pure, .tied = true};
    qs.falcon = !strcmp(arch, "falcon");
    if (!kv_u32(g, arch, "block_count", &qs.n_layer) || qs.n_layer <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "quantize: the model has no %s.block_count", arch);
    int n_head = 0, n_head_kv = 0;
    kv_u32(g, arch, "attention.head_count", &n_head);
    if (!kv_u32(g, arch, "attention.head_count_kv", &n_head_kv)) n_head_kv = n_head;
    qs.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
    if (!kv_u32(g, arch, "expert_count", &qs.n_expert)) qs.n_expert = 0;
    /* llama.cpp's LLM_TYPE_70B: an 80-layer llama with grouped-query attention */
    qs.is_70b = !strcmp(arch, "llama") && qs.n_layer == 80 && n_head != n_head_kv;

    const int64_t nt = wgllm_gguf_n_tensors(g);
    int64_t *order = malloc((size_t)WGLLM_MAX(nt, 1) * sizeof(int64_t));
    if (!order) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "quantize: no memory");
    for (int64_t i = 0; i < nt; i++) order[i] = i;
    sort_g = g;
    qsort(order, (size_t)nt, sizeof(int64_t), cmp_tensor);

    char name[256];
    for (int64_t i = 0; i < nt; i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        snprintf(name, sizeof(name), "%.*s", (int)WGLLM_MIN(t->name.len, 255), t->name.data);
        enum cat c = category(name);
        if (cat_is_attn_v(c)) qs.n_attention_wv++;
        if (c == CAT_OUTPUT) qs.tied = false;
    }
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (int64_t k = 0; k < nt && st == WGLLM_STATUS_OK; k++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, order[k]);
        snprintf(name, sizeof(name), "%.*s", (int)WGLLM_MIN(t->name.len, 255), t->name.data);
        uint32_t nt_type = t->type;
        if (allows_quantization(name, n_dims_of(t))) {
            nt_type = (uint32_t)dtype;
            if (wgllm_type_traits(nt_type)->is_quantized) {
                if (!pure) st = type_impl(&qs, name, category(name), t->ne[0], t->ne[2], &nt_type, err);
                if (st == WGLLM_STATUS_OK) st = fallback(name, t->ne[0], &nt_type, err);
            }
        }
        types[order[k]] = nt_type;
    }
    if (order_out && st == WGLLM_STATUS_OK) memcpy(order_out, order, (size_t)nt * sizeof(int64_t));
    free(order);
    return st;
}

/* ---------------------------------------------------------------------------
 * conversion
 * ------------------------------------------------------------------------- */

struct qjob {
    const struct wgllm_gguf *g;
    const uint32_t *types;
    const int64_t *order;
    struct wgllm_threadpool *tp;
    float *f32;           /* slab of dequantized rows */
    int64_t slab_floats;
    uint64_t bytes_total, bytes_done;
    const struct wgllm_quantize_params *p;
    bool cancelled;
    /* the current slab, for the workers */
    const uint8_t *src;
    uint8_t *dst;
    int64_t ne0, nrows;
    size_t src_row, dst_row;
    uint32_t src_type, dst_type;
};

static void convert_rows(void *arg, int ith, int nth) {
    struct qjob *j = arg;
    int64_t lo, hi;
    wgllm_split_range(j->nrows, ith, nth, 1, &lo, &hi);
    const struct wgllm_type_traits *st = wgllm_type_traits(j->src_type);
    const struct wgllm_type_traits *dt = wgllm_type_traits(j->dst_type);
    for (int64_t r = lo; r < hi; r++) {
        const uint8_t *s = j->src + (size_t)r * j->src_row;
        uint8_t *d = j->dst + (size_t)r * j->dst_row;
        const float *x;
        if (j->src_type == WGLLM_TYPE_F32) {
            x = (const float *)(const void *)s;
        } else {
            float *y = j->f32 + (size_t)r * (size_t)j->ne0;
            st->to_float(s, y, j->ne0);
            x = y;
        }
        if (j->dst_type == WGLLM_TYPE_F16) /* ggml_fp32_to_fp16_row: round to nearest even */
            wgllm_fp32_to_fp16_row(x, (wgllm_fp16 *)(void *)d, j->ne0);
        else
            dt->from_float_ref(x, d, j->ne0);
    }
}

static bool quant_fill(int64_t index, void *buf, uint64_t size, void *user) {
    struct qjob *j = user;
    const int64_t ti = j->order[index];
    const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(j->g, ti);
    const uint32_t to = j->types[ti];
    if (to == t->type) {
        memcpy(buf, t->data, (size_t)size);
    } else {
        const int64_t ne0 = (int64_t)t->ne[0];
        const int64_t rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        j->ne0 = ne0;
        j->src_type = t->type;
        j->dst_type = to;
        j->src_row = wgllm_row_size(t->type, ne0);
        j->dst_row = wgllm_row_size(to, ne0);
        int64_t slab = WGLLM_MAX(1, j->slab_floats / WGLLM_MAX(1, ne0));
        for (int64_t r0 = 0; r0 < rows; r0 += slab) {
            j->nrows = WGLLM_MIN(slab, rows - r0);
            j->src = (const uint8_t *)t->data + (size_t)r0 * j->src_row;
            j->dst = (uint8_t *)buf + (size_t)r0 * j->dst_row;
            if (j->tp) wgllm_threadpool_run(j->tp, convert_rows, j);
            else convert_rows(j, 0, 1);
            if (j->p->progress) {
                uint64_t part = t->size * (uint64_t)(r0 + j->nrows) / (uint64_t)rows;
                if (!j->p->progress((float)((double)(j->bytes_done + part) /
                                            (double)WGLLM_MAX(1, j->bytes_total)),
                                    j->p->user)) {
                    j->cancelled = true;
                    return false;
                }
            }
        }
    }
    j->bytes_done += t->size;
    if (j->p->progress &&
        !j->p->progress((float)((double)j->bytes_done / (double)WGLLM_MAX(1, j->bytes_total)), j->p->user)) {
        j->cancelled = true;
        return false;
    }
    return true;
}

enum wgllm_status wgllm_quantize_file(const char *in, const char *out,
                                      const struct wgllm_quantize_params *params,
                                      struct wgllm_error *err) {
    struct wgllm_quantize_params p = params ? *params : wgllm_quantize_default_params();
    wgllm_quant_init();
    int ftype;
    if (p.preset) {
        ftype = wgllm_quantize_ftype_from_name(p.preset);
        char why[256];
        if (ftype < 0 && iq_preset_reason(p.preset, why, sizeof why))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "quantize: %s", why);
        if (ftype < 0)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "quantize: unknown type '%s' (one of: %s)", p.preset,
                                   wgllm_quantize_preset_list());
    } else {
        ftype = wgllm_quantize_ftype_from_name(wgllm_type_traits(p.type)->name);
        char why[256];
        if (ftype < 0 && iq_preset_reason(wgllm_type_traits(p.type)->name, why, sizeof why))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "quantize: %s", why);
        if (ftype < 0)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "quantize: cannot quantize to %s (one of: %s)",
                                   wgllm_type_name(p.type), wgllm_quantize_preset_list());
    }

    struct wgllm_gguf *g = NULL;
    enum wgllm_status st = wgllm_gguf_open(in, &g, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_error_prefix(err, "quantize: reading '%s': ", in);
        return st;
    }
    const int64_t nt = wgllm_gguf_n_tensors(g);
    uint32_t *types = malloc((size_t)WGLLM_MAX(nt, 1) * sizeof(uint32_t));
    int64_t *order = malloc((size_t)WGLLM_MAX(nt, 1) * sizeof(int64_t));
    struct wgllm_gguf_writer *w = NULL;
    struct qjob j = {.g = g, .types = types, .order = order, .p = &p};
    if (!types || !order) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "quantize: no memory");
        goto done;
    }
    st = wgllm_quantize_plan(g, ftype, p.pure, types, order, err);
    if (st != WGLLM_STATUS_OK) goto done;

    /* check every conversion before writing a byte */
    int64_t max_ne0 = 1;
    for (int64_t i = 0; i < nt; i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        j.bytes_total += t->size;
        if (types[i] == t->type) continue;
        const struct wgllm_type_traits *src = wgllm_type_traits(t->type);
        const struct wgllm_type_traits *dst = wgllm_type_traits(types[i]);
        const char *nm = t->name.data;
        const int nl = (int)WGLLM_MIN(t->name.len, 200);
        if (src->is_quantized && !p.allow_requantize) {
            st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                 "quantize: tensor '%.*s' is already quantized (%s); requantizing "
                                 "loses quality: pass --allow-requantize to do it anyway, or start "
                                 "from an F32/F16/BF16 file",
                                 nl, nm, wgllm_type_name(t->type));
            goto done;
        }
        if (!src->to_float || (t->type != WGLLM_TYPE_F32 && src->blck_size > 0 &&
                               t->ne[0] % (uint64_t)src->blck_size != 0)) {
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                 "quantize: tensor '%.*s' of type %s cannot be converted", nl, nm,
                                 wgllm_type_name(t->type));
            goto done;
        }
        if (!dst->from_float_ref) {
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                 "quantize: wgllm has no quantizer for %s (tensor '%.*s')",
                                 wgllm_type_name(types[i]), nl, nm);
            goto done;
        }
        max_ne0 = WGLLM_MAX(max_ne0, (int64_t)t->ne[0]);
    }

    w = wgllm_gguf_writer_init();
    char key[256];
    for (int64_t i = 0; i < wgllm_gguf_n_kv(g); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, i);
        if (kv->key.len >= sizeof(key)) continue;
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
        /* llama.cpp's gguf_set_* removes a key before adding it: these two come last, in this order */
        if (!strcmp(key, "split.no") || !strcmp(key, "split.count") || !strcmp(key, "split.tensors.count") ||
            !strcmp(key, "general.quantization_version") || !strcmp(key, "general.file_type"))
            continue;
        wgllm_gguf_writer_set_value(w, key, &kv->value);
    }
    wgllm_gguf_writer_set_u32(w, "general.quantization_version", 2);
    wgllm_gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_of(ftype));
    for (int64_t k = 0; k < nt; k++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, order[k]);
        snprintf(key, sizeof(key), "%.*s", (int)WGLLM_MIN(t->name.len, 255), t->name.data);
        wgllm_gguf_writer_add_tensor(w, key, types[order[k]], t->n_dims, t->ne);
    }

    /* a slab of at most 16M dequantized floats (64 MiB) at a time */
    j.slab_floats = (int64_t)1 << 24;
    j.f32 = malloc((size_t)WGLLM_MAX(j.slab_floats, max_ne0) * sizeof(float));
    if (!j.f32) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "quantize: no memory for a slab");
        goto done;
    }
    j.slab_floats = WGLLM_MAX(j.slab_floats, max_ne0);
    int nth = p.n_threads > 0 ? p.n_threads : wgllm_n_cores();
    if (nth > 1) j.tp = wgllm_threadpool_init(nth); /* NULL: one thread */
    st = wgllm_gguf_writer_write(w, out, quant_fill, &j, err);
    if (st != WGLLM_STATUS_OK) {
        if (j.cancelled) st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "quantize: cancelled");
        else wgllm_error_prefix(err, "quantize: writing '%s': ", out);
    }

done:
    if (j.tp) wgllm_threadpool_free(j.tp);
    free(j.f32);
    wgllm_gguf_writer_free(w);
    free(order);
    free(types);
    wgllm_gguf_free(g);
    return st;
}
