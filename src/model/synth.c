/*
 * synth.c - writes synthetic GGUF models (see synth.h): the shape table,
 * llama.cpp's metadata and tensor layout, the vocabulary copied from a real
 * vocab-only GGUF, and seeded weights generated tensor by tensor while the
 * file is written.
 */
#include "model/synth.h"

#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <math.h>

/* ---------------------------------------------------------------------------
 * shapes
 * ------------------------------------------------------------------------- */

/* The real Qwen2 vocabulary (151k tokens) is not available here; the qwen2
 * shapes use GPT-2's byte-level BPE vocabulary instead, which is tokenized by
 * the same kind of tokenizer. */
static const struct wgllm_synth_shape synth_shapes[] = {
    /* name              arch     vocab file                  L   embd head kv hdim  ff    ctx    rope   eps   bias   qknorm tied   rope variant, swa, swa pattern, attn cap, final cap, template */
    {"tiny",           "llama", "ggml-vocab-llama-spm.gguf", 2,  256,  8,  4, 32,  512,  512,   1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-qwen2",     "qwen2", "ggml-vocab-gpt-2.gguf",     2,  256,  4,  2, 64,  512,  512,   1e6f, 1e-6f, true,  false, true, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-qwen3",     "qwen3", "ggml-vocab-gpt-2.gguf",     2,  256,  4,  2, 64,  512,  512,   1e6f, 1e-6f, false, true,  true, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-ropefreqs", "llama", "ggml-vocab-llama-spm.gguf", 2,  256,  8,  4, 32,  512,  512,   5e5f, 1e-5f, false, false, false, 1, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-ropescale", "llama", "ggml-vocab-llama-spm.gguf", 2,  256,  8,  4, 32,  512,  512,   1e4f, 1e-5f, false, false, false, 2, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    /* YaRN (factor 4 from an original context of 128, llama); mistral3 with
     * Ministral 3's YaRN keys (factor 16, log multiplier 1) and attention
     * temperature from an original context of 16 */
    {"tiny-yarn",      "llama", "ggml-vocab-llama-spm.gguf", 2,  256,  8,  4, 32,  512,  512,   1e4f, 1e-5f, false, false, false, 5, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-mistral3", "mistral3", "ggml-vocab-llama-spm.gguf", 2, 256, 8,  4, 32,  512,  512,   1e6f, 1e-5f, false, false, false, 6, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    /* mixture of experts: 8 experts, 2 used (qwen3moe: an expert FFN of its
     * own length, GPT-2's vocabulary as tiny-qwen3); Mixtral's (llama with
     * experts: 4 experts of n_ff); olmoe's (no GQA, as llama.cpp reads its k norm as n_embd long; q/k norms over the whole
     * projection, weights not renormalized); and a realistic 16-expert,
     * 2-active qwen3moe of ~2B parameters (~0.4B active) for the benchmark */
    {"tiny-qwen3moe", "qwen3moe", "ggml-vocab-gpt-2.gguf", 2, 256, 4,  2, 64,  512,  512,   1e6f, 1e-6f, false, true,  true,  0, 0, 0, 0.0f, 0.0f, NULL, 8, 2, 256, 0},
    {"tiny-mixtral",  "llama",    "ggml-vocab-llama-spm.gguf", 2, 256, 8, 4, 32, 256, 512,  1e6f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 4, 2, 256, 0},
    {"tiny-olmoe",    "olmoe",    "ggml-vocab-llama-spm.gguf", 2, 256, 8, 8, 32, 256, 512,  1e4f, 1e-5f, false, true,  false, 0, 0, 0, 0.0f, 0.0f, NULL, 8, 2, 256, 0},
    /* qwen2moe's sigmoid-gated shared expert (and qwen2's q/k/v biases);
     * granitemoe's scales with a plain shared expert (Granite MoE Shared) */
    {"tiny-qwen2moe", "qwen2moe", "ggml-vocab-gpt-2.gguf", 2, 256, 4, 2, 64, 512, 512, 1e6f, 1e-6f, true, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 8, 2, 256, 512},
    {"tiny-granitemoe", "granitemoe", "ggml-vocab-llama-spm.gguf", 2, 256, 4, 2, 64, 256, 512, 1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 4, 2, 256, 256},
    /* gpt-oss (GPT-2's vocabulary: its own o200k one is not available here):
     * biases on q/k/v, the attention output, the router and every expert,
     * attention sinks, YaRN (factor 4 from 128, as the real files' 32 from
     * 4096), a sliding window of 8 on the even layers, 8 experts with 2 used;
     * heads x head dim (512) is not n_embd, as in the real models */
    {"tiny-gptoss",   "gpt-oss",  "ggml-vocab-gpt-2.gguf", 2, 256, 8,  2, 64,  512,  512,   1.5e5f, 1e-5f, true, false, false, 5, 8, 0, 0.0f, 0.0f, NULL, 8, 2, 256, 0},
    {"qwen3moe-16x2", "qwen3moe", "ggml-vocab-gpt-2.gguf", 24, 1536, 16, 4, 128, 8192, 32768, 1e6f, 1e-6f, false, true, true, 0, 0, 0, 0.0f, 0.0f, NULL, 16, 2, 1024, 0},
    {"tinyllama-1.1b", "llama", "ggml-vocab-llama-spm.gguf", 22, 2048, 32, 4, 64,  5632, 2048,  1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"qwen2-0.5b",     "qwen2", "ggml-vocab-gpt-2.gguf",     24, 896,  14, 2, 64,  4864, 32768, 1e6f, 1e-6f, true,  false, true, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    /* gemma: Gemma's own vocabulary (256k tokens) is not available here; they use
     * LLaMA's SentencePiece one (the same kind of tokenizer, BOS added) with
     * Gemma's chat template. The tiny ones have a sliding window of 8, so a
     * 64-token test sequence sees it, and layers of both kinds: gemma2
     * alternates local/global by default; tiny-gemma3 has 2 local layers per
     * global one (sliding_window_pattern 3, not the default 6) so that 3 layers
     * have both kinds. Few layers because GeGLU rounds its input to f16 (ggml's
     * table): a float-noise difference that moves a value across an f16
     * rounding boundary becomes an f16-sized one, and each layer multiplies
     * such differences, so two engines that agree to 1e-12 on one layer differ
     * by ~1e-6 (f32) and ~4e-3 (q8_0, scalar kernels) after six. Their head dim
     * is not n_embd / n_head (as in the real models), and tiny-gemma2's
     * attention cap (5) is small enough to change the scores measurably. */
    {"tiny-gemma3",    "gemma3", "ggml-vocab-llama-spm.gguf", 3, 256, 4,  2, 128, 512,  512,   1e6f, 1e-6f, false, true,  true, 0, 8, 3,   0.0f,  0.0f, "google-gemma-2-2b-it.jinja", 0, 0, 0, 0},
    {"tiny-gemma2",    "gemma2", "ggml-vocab-llama-spm.gguf", 4, 256, 4,  2, 128, 512,  512,   1e4f, 1e-6f, false, false, true, 0, 8, 0,   5.0f, 30.0f, "google-gemma-2-2b-it.jinja", 0, 0, 0, 0},
    /* phi3: fused attn_qkv and ffn_up (gate rows, then up rows), as llama.cpp's
     * converter writes Phi-3; no LongRoPE factors (Phi-3-mini-4k style) */
    {"tiny-phi3",      "phi3",   "ggml-vocab-phi-3.gguf",     2, 256, 8,  4, 32,  512,  4096,  1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, "microsoft-Phi-3.5-mini-instruct.jinja", 0, 0, 0, 0},
    {"tiny-phi3-longrope", "phi3", "ggml-vocab-phi-3.gguf",  2, 256, 8,  4, 32,  512,  4096,  1e4f, 1e-5f, false, false, false, 3, 0, 0, 0.0f, 0.0f, "microsoft-Phi-3.5-mini-instruct.jinja", 0, 0, 0, 0},
    {"tiny-phi3-longctx",  "phi3", "ggml-vocab-phi-3.gguf",  2, 256, 8,  4, 32,  512,  8192,  1e4f, 1e-5f, false, false, false, 4, 0, 0, 0.0f, 0.0f, "microsoft-Phi-3.5-mini-instruct.jinja", 0, 0, 0, 0},
    {"phi3-mini",      "phi3",   "ggml-vocab-phi-3.gguf",     32, 3072, 32, 32, 96, 8192, 4096,  1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, "microsoft-Phi-3.5-mini-instruct.jinja", 0, 0, 0, 0},
    /* granite, olmo2, smollm3: their own vocabularies (49k, 100k, 128k byte-level
     * BPE tokens) are not available here: the realistic shapes use GPT-2's (the
     * same kind), the tiny ones LLaMA's SentencePiece one (32k tokens: the
     * peer tests' cost is mostly the vocabulary's size); none of their chat
     * templates is in shared/templates, so the vocabulary's (none) applies.
     * tiny-granite carries Granite 3.0's scales (synth_granite: all far
     * from 1 and from each other, so a missing or swapped one shows);
     * tiny-olmo2 has fewer K/V heads than heads, so its whole-projection k norm
     * is shorter than its q norm; tiny-smollm3 has 4 layers, the last of
     * which has no RoPE. The tiny ones have an output.weight (the real
     * granite and smollm3 tie it): a tied tiny model's logits follow the
     * last hidden state so closely (output_norm's gain) that the float-order
     * differences between kernel levels, grown through 4 layers, come near
     * the q8_0 bound (tiny-smollm3 with GPT-2's vocabulary, mean KL against
     * llama.cpp: 3.5e-3 on the scalar kernels, 3.6e-5 on the best; untied:
     * 3.8e-4). */
    {"tiny-granite",   "granite", "ggml-vocab-llama-spm.gguf", 2, 256, 4,  2, 64,  512,  512,   1e4f, 1e-5f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-olmo2",     "olmo2",   "ggml-vocab-llama-spm.gguf", 2, 256, 4,  2, 64,  512,  512,   5e5f, 1e-6f, false, true, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"tiny-smollm3",   "smollm3", "ggml-vocab-llama-spm.gguf", 4, 256, 4,  2, 64,  512,  512,   1e4f, 1e-6f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"granite-3-2b",   "granite", "ggml-vocab-gpt-2.gguf",    40, 2048, 32, 8, 64, 8192, 4096, 1e4f, 1e-5f, false, false, true, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"olmo2-1b",       "olmo2",   "ggml-vocab-gpt-2.gguf",    16, 2048, 16, 16, 128, 8192, 4096, 5e5f, 1e-6f, false, true, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"smollm3-3b",     "smollm3", "ggml-vocab-gpt-2.gguf",    36, 2048, 16, 4, 128, 11008, 65536, 5e6f, 1e-6f, false, false, true, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"gemma3-1b",      "gemma3", "ggml-vocab-llama-spm.gguf", 26, 1152, 4, 1, 256, 6912, 32768, 1e6f, 1e-6f, false, true, true, 0, 512, 0, 0.0f,  0.0f, "google-gemma-2-2b-it.jinja", 0, 0, 0, 0},
    {"gemma2-2b",      "gemma2", "ggml-vocab-llama-spm.gguf", 26, 2304, 8, 4, 256, 9216, 8192,  1e4f, 1e-6f, false, false, true, 0, 4096, 0, 50.0f, 30.0f, "google-gemma-2-2b-it.jinja", 0, 0, 0, 0},
    /* bert encoders with the real BGE WordPiece vocabulary: tiny-bert (mean
     * pooling, a position table of 128 so that a longer input is refused
     * cheaply) for tests, and bge-small-en-v1.5's shape (CLS pooling) */
    {"tiny-bert",      "bert",   "ggml-vocab-bert-bge.gguf",  2, 128, 4, 4, 32, 512, 128, 0.0f, 1e-12f, true, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    {"bge-small",      "bert",   "ggml-vocab-bert-bge.gguf", 12, 384, 12, 12, 32, 1536, 512, 0.0f, 1e-12f, true, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
    /* nomic-embed-text's block (nomic-bert): fused attn_qkv, no biases but the
     * LayerNorms', neox RoPE (base 1000) instead of a position table, SwiGLU */
    {"tiny-nomic-bert", "nomic-bert", "ggml-vocab-bert-bge.gguf", 2, 128, 4, 4, 32, 256, 256, 1000.0f, 1e-12f, false, false, false, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, 0, 0},
};
#define SYNTH_N_SHAPES (sizeof(synth_shapes) / sizeof(synth_shapes[0]))

const char *const *wgllm_synth_shape_names(void) {
    static const char *names[SYNTH_N_SHAPES + 1];
    for (size_t i = 0; i < SYNTH_N_SHAPES; i++) names[i] = synth_shapes[i].name;
    names[SYNTH_N_SHAPES] = NULL;
    return names;
}

const struct wgllm_synth_shape *wgllm_synth_shape(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < SYNTH_N_SHAPES; i++)
        if (strcmp(synth_shapes[i].name, name) == 0) return &synth_shapes[i];
    return NULL;
}

int wgllm_synth_file_type(uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_F32: return 0;   /* LLAMA_FTYPE_ALL_F32 */
    case WGLLM_TYPE_F16: return 1;   /* LLAMA_FTYPE_MOSTLY_F16 */
    case WGLLM_TYPE_Q4_0: return 2;  /* LLAMA_FTYPE_MOSTLY_Q4_0 */
    case WGLLM_TYPE_Q4_1: return 3;  /* LLAMA_FTYPE_MOSTLY_Q4_1 */
    case WGLLM_TYPE_Q8_0: return 7;  /* LLAMA_FTYPE_MOSTLY_Q8_0 */
    case WGLLM_TYPE_Q5_0: return 8;  /* LLAMA_FTYPE_MOSTLY_Q5_0 */
    case WGLLM_TYPE_Q5_1: return 9;  /* LLAMA_FTYPE_MOSTLY_Q5_1 */
    case WGLLM_TYPE_BF16: return 32; /* LLAMA_FTYPE_MOSTLY_BF16 */
    /* a file all in one K-quant is llama.cpp's "_S" variant of that size */
    case WGLLM_TYPE_Q2_K: return 10;   /* LLAMA_FTYPE_MOSTLY_Q2_K */
    case WGLLM_TYPE_Q3_K: return 11;   /* LLAMA_FTYPE_MOSTLY_Q3_K_S */
    case WGLLM_TYPE_Q4_K: return 14;   /* LLAMA_FTYPE_MOSTLY_Q4_K_S */
    case WGLLM_TYPE_Q5_K: return 16;   /* LLAMA_FTYPE_MOSTLY_Q5_K_S */
    case WGLLM_TYPE_Q6_K: return 18;   /* LLAMA_FTYPE_MOSTLY_Q6_K */
    case WGLLM_TYPE_IQ4_NL: return 25; /* LLAMA_FTYPE_MOSTLY_IQ4_NL */
    case WGLLM_TYPE_IQ4_XS: return 30; /* LLAMA_FTYPE_MOSTLY_IQ4_XS */
    case WGLLM_TYPE_TQ1_0: return 36;  /* LLAMA_FTYPE_MOSTLY_TQ1_0 */
    case WGLLM_TYPE_TQ2_0: return 37;  /* LLAMA_FTYPE_MOSTLY_TQ2_0 */
    /* llama.cpp's only MXFP4 file type (its preset writes MXFP4 experts only) */
    case WGLLM_TYPE_MXFP4: return 38;  /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE */
    case WGLLM_TYPE_NVFP4: return 39;  /* LLAMA_FTYPE_MOSTLY_NVFP4 */
    case WGLLM_TYPE_Q1_0: return 40;   /* LLAMA_FTYPE_MOSTLY_Q1_0 */
    default: return -1;
    }
}

struct wgllm_synth_params wgllm_synth_default_params(void) {
    struct wgllm_synth_params p = {
        .shape = "tiny",
        .type = WGLLM_TYPE_F32,
        .seed = 1234,
        .vocab_path = NULL,
        .name = NULL,
        .n_layer = 0,
        .max_split_bytes = 0,
    };
    return p;
}

/* ---------------------------------------------------------------------------
 * weight scales
 *
 * Chosen so that a forward pass stays well-conditioned and next-token
 * distributions are peaked (std of the final logits about 8), like a trained
 * model's, which makes argmax/sampling comparisons between engines
 * meaningful. Every tensor is N(mean, std^2) with:
 * ------------------------------------------------------------------------- */
static const struct {
    float embd_std;      /* token_embd (untied): N(0, 1); the first RMSNorm rescales it */
    float proj_gain;     /* attn_q/k/v, ffn_gate/up: N(0, gain^2 / n_in) keeps activations ~unit */
    float out_proj_gain; /* attn_output, ffn_down: N(0, gain^2 / n_in); 0.5 keeps the residual
                            stream bounded as layers add to it */
    float norm_noise;    /* RMSNorm weights: 1 + N(0, noise^2) */
    float logit_std;     /* output.weight: N(0, logit_std^2 / n_embd), so logits have std ~8 */
    float tied_out_gain; /* tied models (no output.weight): output_norm weights are this times
                            (1 + noise) and token_embd is N(0, (logit_std / gain)^2 / n_embd), so
                            logits still have std ~8 while the embedding that enters the
                            residual stream is small; with gain 1 the input token's own row
                            dominates the final hidden state and every model just repeats
                            its last token with probability ~1 */
    float bias_std;      /* qwen2 q/k/v biases: N(0, bias_std^2) */
    float qk_norm_noise; /* qwen3 per-head q/k RMSNorm weights: 1 + N(0, noise^2) */
} SYNTH_SCALES = {
    .embd_std = 1.0f,
    .proj_gain = 1.0f,
    .out_proj_gain = 0.5f,
    .norm_noise = 0.05f,
    .logit_std = 8.0f,
    .tied_out_gain = 10.0f,
    .bias_std = 0.1f,
    .qk_norm_noise = 0.05f,
};

/* ---------------------------------------------------------------------------
 * random numbers
 *
 * Counter-based: element i of a tensor is a pure function of (seed, tensor
 * name, i), so tensors are independent of the order and number of others
 * (an n_layer override keeps the remaining layers' weights), and the same
 * values come out for every weight type (a Q8_0 file is the F32 file,
 * quantized). The normal approximation is Irwin-Hall with 4 uniforms from one
 * 64-bit hash: cheap, branch-free, tails cut at 3.46 sigma.
 * ------------------------------------------------------------------------- */

static inline uint64_t synth_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t synth_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return synth_mix64(synth_mix64(seed) ^ h);
}

static void synth_gen(float *y, int64_t n, uint64_t key, uint64_t first, float mean, float std) {
    const float k = std * 1.7320508f / 65536.0f; /* sum of 4 U[0,65536) has std 65536/sqrt(3) */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = synth_mix64(key + (first + (uint64_t)i) * 0x9e3779b97f4a7c15ull);
        uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                     (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
        y[i] = mean + k * ((float)s - 131070.0f);
    }
}

/* ---------------------------------------------------------------------------
 * the tensor list
 * ------------------------------------------------------------------------- */

struct synth_tensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3]; /* a 3-D tensor (a stack of experts) is ne[1] * ne[2] rows */
    float mean, std;
    uint64_t key;
};

struct synth_ctx {
    struct synth_tensor *t;
    int n;
    size_t cap;
    float *scratch; /* one row of f32 before conversion */
    int64_t scratch_n;
};

static void synth_add(struct synth_ctx *c, const char *name, uint32_t type, uint64_t ne0,
                      uint64_t ne1, float mean, float std, uint64_t seed) {
    if (!wgllm_grow((void **)&c->t, &c->cap, (size_t)c->n + 1, sizeof *c->t)) WGLLM_ABORT("synth: out of memory");
    struct synth_tensor *t = &c->t[c->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type;
    t->n_dims = ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    t->ne[2] = 1;
    t->mean = mean;
    t->std = std;
    t->key = synth_key(seed, name);
    if ((int64_t)ne0 > c->scratch_n) c->scratch_n = (int64_t)ne0;
}

/* blk.L.NAME: a stack of n experts' [ne0, ne1] matrices, N(0, std^2) */
static void synth_add_experts(struct synth_ctx *c, int l, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                              uint64_t n, float std, uint64_t seed) {
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, name);
    synth_add(c, nm, type, ne0, ne1, 0.0f, std, seed);
    struct synth_tensor *t = &c->t[c->n - 1];
    t->n_dims = 3;
    t->ne[2] = n;
}

static bool synth_is_gemma(const struct wgllm_synth_shape *s) { return strncmp(s->arch, "gemma", 5) == 0; }
static bool synth_is_olmo2(const struct wgllm_synth_shape *s) { return strcmp(s->arch, "olmo2") == 0; }
static bool synth_is_gptoss(const struct wgllm_synth_shape *s) { return strcmp(s->arch, "gpt-oss") == 0; }

/* Granite 3.0 2B's scales, which every granite shape writes:
 * granite.embedding_scale, .residual_scale, .attention.scale, .logit_scale */
static const struct {
    float embedding, residual, attention, logit;
} synth_granite = {12.0f, 0.22f, 0.015625f, 8.0f};
/* phi3 stores q/k/v as one attn_qkv matrix and gate/up as one ffn_up */
static bool synth_is_fused(const struct wgllm_synth_shape *s) { return strcmp(s->arch, "phi3") == 0; }

static bool synth_is_bert(const struct wgllm_synth_shape *s) {
    return strcmp(s->arch, "bert") == 0 || strcmp(s->arch, "nomic-bert") == 0;
}

/* bert.pooling_type (llama.cpp's LLAMA_POOLING_TYPE): BGE pools the CLS
 * token's state (2); tiny-bert the mean (1), so both are covered */
static uint32_t synth_bert_pooling(const struct wgllm_synth_shape *s) { return strcmp(s->name, "bge-small") ? 1 : 2; }

/* bert's tensors (llama.cpp's LLM_ARCH_BERT list): post-LayerNorms (weights
 * 1 + noise, biases small) keep the stream at unit scale whatever the
 * projections add; attn_output and ffn_down have the decoders' out_proj_gain,
 * so that each block adds less than the stream holds: with gain 1 a block
 * amplifies the float-order noise of its input more (bge-small at q8_0,
 * where each matrix product rounds its input to 8 bits: cosine 0.99989 to
 * llama.cpp and between wgllm's own kernel levels, against 0.99995 with
 * 0.5). Positions and the token type are smaller than the token's own row. */
static void synth_build_bert(struct synth_ctx *c, const struct wgllm_synth_shape *s, int n_layer, uint64_t n_vocab,
                             uint32_t wt, uint64_t seed) {
    const uint64_t E = (uint64_t)s->n_embd, F = (uint64_t)s->n_ff, Q = (uint64_t)s->head_dim * (uint64_t)s->n_head;
    const uint32_t F32 = WGLLM_TYPE_F32;
    const float noise = SYNTH_SCALES.norm_noise, bias = SYNTH_SCALES.bias_std, g_out = SYNTH_SCALES.out_proj_gain;
    char nm[64];
    synth_add(c, "token_embd.weight", wt, E, n_vocab, 0.0f, SYNTH_SCALES.embd_std, seed);
    const bool nomic = strcmp(s->arch, "nomic-bert") == 0;
    synth_add(c, "token_types.weight", F32, E, 2, 0.0f, 0.5f, seed);
    if (!nomic) synth_add(c, "position_embd.weight", wt, E, (uint64_t)s->n_ctx, 0.0f, 0.5f, seed);
    synth_add(c, "token_embd_norm.weight", F32, E, 0, 1.0f, noise, seed);
    synth_add(c, "token_embd_norm.bias", F32, E, 0, 0.0f, bias, seed);
    for (int l = 0; l < n_layer; l++) {
#define BLK(suffix, type, ne0, ne1, mean, std)                                            \
    snprintf(nm, sizeof(nm), "blk.%d.%s", l, suffix);                                     \
    synth_add(c, nm, type, ne0, ne1, mean, std, seed)
        if (s->qkv_bias) {
            BLK("attn_q.weight", wt, E, Q, 0.0f, 1.0f / sqrtf((float)E));
            BLK("attn_q.bias", F32, Q, 0, 0.0f, bias);
            BLK("attn_k.weight", wt, E, Q, 0.0f, 1.0f / sqrtf((float)E));
            BLK("attn_k.bias", F32, Q, 0, 0.0f, bias);
            BLK("attn_v.weight", wt, E, Q, 0.0f, 1.0f / sqrtf((float)E));
            BLK("attn_v.bias", F32, Q, 0, 0.0f, bias);
        } else {
            BLK("attn_qkv.weight", wt, E, 3 * Q, 0.0f, 1.0f / sqrtf((float)E));
        }
        BLK("attn_output.weight", wt, Q, E, 0.0f, g_out / sqrtf((float)Q));
        if (s->qkv_bias) { BLK("attn_output.bias", F32, E, 0, 0.0f, bias); }
        BLK("attn_output_norm.weight", F32, E, 0, 1.0f, noise);
        BLK("attn_output_norm.bias", F32, E, 0, 0.0f, bias);
        if (nomic) { BLK("ffn_gate.weight", wt, E, F, 0.0f, 1.0f / sqrtf((float)E)); }
        BLK("ffn_up.weight", wt, E, F, 0.0f, 1.0f / sqrtf((float)E));
        if (!nomic) { BLK("ffn_up.bias", F32, F, 0, 0.0f, bias); }
        BLK("ffn_down.weight", wt, F, E, 0.0f, g_out / sqrtf((float)F));
        if (!nomic) { BLK("ffn_down.bias", F32, E, 0, 0.0f, bias); }
        BLK("layer_output_norm.weight", F32, E, 0, 1.0f, noise);
        BLK("layer_output_norm.bias", F32, E, 0, 0.0f, bias);
#undef BLK
    }
}

/* llama.cpp's tensors for the shape; ggml shapes: a map n_in -> n_out is {n_in, n_out}. */
static void synth_build(struct synth_ctx *c, const struct wgllm_synth_shape *s, int n_layer,
                        uint64_t n_vocab, uint32_t wt, uint64_t seed) {
    const uint64_t E = (uint64_t)s->n_embd, F = (uint64_t)s->n_ff;
    const uint64_t Q = (uint64_t)s->head_dim * (uint64_t)s->n_head;
    const uint64_t KV = (uint64_t)s->head_dim * (uint64_t)s->n_head_kv;
    const uint32_t F32 = WGLLM_TYPE_F32;
    const float g_in = SYNTH_SCALES.proj_gain, g_out = SYNTH_SCALES.out_proj_gain;
    const float logit = SYNTH_SCALES.logit_std / sqrtf((float)E);
    const bool gemma = synth_is_gemma(s), fused = synth_is_fused(s), olmo2 = synth_is_olmo2(s);
    const bool gptoss = synth_is_gptoss(s);
    const bool granite = strncmp(s->arch, "granite", 7) == 0; /* granite, granitemoe */
    /* granite's scales are undone in its weights, so that its stream, scores
     * and logits are as large as a llama's: the embeddings are multiplied by
     * embedding_scale as they enter, what a block adds by residual_scale, the
     * scores by attention.scale instead of 1/sqrt(head_dim) (the queries make
     * up for it), the logits divided by logit_scale (output_norm makes up) */
    const float in_mul = granite ? synth_granite.embedding : 1.0f, res = granite ? synth_granite.residual : 1.0f;
    const float q_mul = granite ? 1.0f / (sqrtf((float)s->head_dim) * synth_granite.attention) : 1.0f;
    const float logit_div = granite ? synth_granite.logit : 1.0f;
    /* gemma multiplies the embeddings by sqrt(n_embd) as they enter: a tied
     * gemma model's token_embd is that much smaller again (and output_norm that
     * much larger), so the stream starts as small as a tied llama's */
    const float out_gain =
        s->tied_output ? SYNTH_SCALES.tied_out_gain * (gemma ? sqrtf((float)E) : in_mul) : 1.0f;
    char nm[64];

    synth_add(c, "token_embd.weight", wt, E, n_vocab, 0.0f,
              s->tied_output ? logit / out_gain : SYNTH_SCALES.embd_std / in_mul, seed);
    for (int l = 0; l < n_layer; l++) {
#define BLK(suffix, type, ne0, ne1, mean, std)                                            \
    snprintf(nm, sizeof(nm), "blk.%d.%s", l, suffix);                                     \
    synth_add(c, nm, type, ne0, ne1, mean, std, seed)
        if (!olmo2) { BLK("attn_norm.weight", F32, E, 0, 1.0f, SYNTH_SCALES.norm_noise); }
        if (fused) {
            BLK("attn_qkv.weight", wt, E, Q + 2 * KV, 0.0f, g_in / sqrtf((float)E));
        } else {
            BLK("attn_q.weight", wt, E, Q, 0.0f, g_in * q_mul / sqrtf((float)E));
            if (s->qkv_bias) { BLK("attn_q.bias", F32, Q, 0, 0.0f, SYNTH_SCALES.bias_std); }
            BLK("attn_k.weight", wt, E, KV, 0.0f, g_in / sqrtf((float)E));
            if (s->qkv_bias) { BLK("attn_k.bias", F32, KV, 0, 0.0f, SYNTH_SCALES.bias_std); }
            BLK("attn_v.weight", wt, E, KV, 0.0f, g_in / sqrtf((float)E));
            if (s->qkv_bias) { BLK("attn_v.bias", F32, KV, 0, 0.0f, SYNTH_SCALES.bias_std); }
        }
        BLK("attn_output.weight", wt, Q, E, 0.0f, g_out / sqrtf((float)Q) / res);
        if (gptoss) {
            /* sinks near the scores' scale (about unit here), so that they take
             * a share of the mass, most on the local layers' 8 positions */
            BLK("attn_output.bias", F32, E, 0, 0.0f, SYNTH_SCALES.bias_std);
            BLK("attn_sinks.weight", F32, (uint64_t)s->n_head, 0, 2.0f, 1.0f);
        }
        if (s->qk_norm && (olmo2 || strcmp(s->arch, "olmoe") == 0)) { /* over the whole q and k projections */
            BLK("attn_q_norm.weight", F32, Q, 0, 1.0f, SYNTH_SCALES.qk_norm_noise);
            BLK("attn_k_norm.weight", F32, KV, 0, 1.0f, SYNTH_SCALES.qk_norm_noise);
        } else if (s->qk_norm) {
            BLK("attn_q_norm.weight", F32, (uint64_t)s->head_dim, 0, 1.0f, SYNTH_SCALES.qk_norm_noise);
            BLK("attn_k_norm.weight", F32, (uint64_t)s->head_dim, 0, 1.0f, SYNTH_SCALES.qk_norm_noise);
        }
        /* gemma's post-norms (as GGUF stores them: 1 + the checkpoint's weight)
         * scale what each block adds to the residual stream; out_proj_gain
         * keeps it below the stream, as the projections' gain does without them */
        if (gemma || olmo2) { BLK("post_attention_norm.weight", F32, E, 0, g_out, g_out * SYNTH_SCALES.norm_noise); }
        /* gpt-oss's pre-FFN norm is named post_attention_norm */
        if (gptoss) { BLK("post_attention_norm.weight", F32, E, 0, 1.0f, SYNTH_SCALES.norm_noise); }
        else if (!olmo2) { BLK("ffn_norm.weight", F32, E, 0, 1.0f, SYNTH_SCALES.norm_noise); }
        if (fused) {
            BLK("ffn_up.weight", wt, E, 2 * F, 0.0f, g_in / sqrtf((float)E));
        } else if (s->n_expert > 0) {
            /* the router's logits have std ~3 so that the chosen experts are
             * well apart from the next (no near-ties for float noise to
             * flip); it stays f32 in every type, as llama.cpp's quantizer
             * keeps ffn_gate_inp */
            const uint64_t X = (uint64_t)s->n_expert, FE = (uint64_t)s->n_ff_exp;
            BLK("ffn_gate_inp.weight", F32, E, X, 0.0f, 3.0f / sqrtf((float)E));
            /* gpt-oss: gate and up 3x larger, so that SwiGLU-OAI's limit of 7
             * clips a few percent of them, and down smaller by about what
             * that makes the activation larger; biases on all three and the
             * router, stored [len, n_expert] */
            const float g_exp = gptoss ? 3.0f * g_in : g_in, d_exp = gptoss ? 1.0f / 6.0f : 1.0f;
            synth_add_experts(c, l, "ffn_gate_exps.weight", wt, E, FE, X, g_exp / sqrtf((float)E), seed);
            synth_add_experts(c, l, "ffn_up_exps.weight", wt, E, FE, X, g_exp / sqrtf((float)E), seed);
            synth_add_experts(c, l, "ffn_down_exps.weight", wt, FE, E, X, d_exp * g_out / sqrtf((float)FE) / res, seed);
            if (gptoss) {
                BLK("ffn_gate_inp.bias", F32, X, 0, 0.0f, 1.0f);
                BLK("ffn_gate_exps.bias", F32, FE, X, 0.0f, 0.5f);
                BLK("ffn_up_exps.bias", F32, FE, X, 0.0f, 0.5f);
                BLK("ffn_down_exps.bias", F32, E, X, 0.0f, SYNTH_SCALES.bias_std);
            }
            if (s->n_ff_shexp > 0) {
                const uint64_t FS = (uint64_t)s->n_ff_shexp;
                if (strcmp(s->arch, "qwen2moe") == 0) { BLK("ffn_gate_inp_shexp.weight", F32, E, 0, 0.0f, 1.0f / sqrtf((float)E)); }
                BLK("ffn_gate_shexp.weight", wt, E, FS, 0.0f, g_in / sqrtf((float)E));
                BLK("ffn_up_shexp.weight", wt, E, FS, 0.0f, g_in / sqrtf((float)E));
                BLK("ffn_down_shexp.weight", wt, FS, E, 0.0f, g_out / sqrtf((float)FS) / res);
            }
        } else {
            BLK("ffn_gate.weight", wt, E, F, 0.0f, g_in / sqrtf((float)E));
            BLK("ffn_up.weight", wt, E, F, 0.0f, g_in / sqrtf((float)E));
        }
        if (s->n_expert == 0) { BLK("ffn_down.weight", wt, F, E, 0.0f, g_out / sqrtf((float)F) / res); }
        if (gemma || olmo2) { BLK("post_ffw_norm.weight", F32, E, 0, g_out, g_out * SYNTH_SCALES.norm_noise); }
#undef BLK
    }
    synth_add(c, "output_norm.weight", F32, E, 0, out_gain * logit_div, out_gain * logit_div * SYNTH_SCALES.norm_noise,
              seed);
    if (s->rope_variant == 1) synth_add(c, "rope_freqs.weight", F32, (uint64_t)s->head_dim / 2, 0, 2.5f, 0.5f, seed);
    if (s->rope_variant == 3 || s->rope_variant == 4) { /* LongRoPE: short factors near 1, long ones larger (as Phi-3.5's) */
        synth_add(c, "rope_factors_short.weight", F32, (uint64_t)s->head_dim / 2, 0, 1.5f, 0.25f, seed);
        synth_add(c, "rope_factors_long.weight", F32, (uint64_t)s->head_dim / 2, 0, 6.0f, 1.5f, seed);
    }
    if (!s->tied_output) synth_add(c, "output.weight", wt, E, n_vocab, 0.0f, logit, seed);
}

static bool synth_fill(int64_t index, void *buf, uint64_t size, void *user) {
    struct synth_ctx *c = user;
    const struct synth_tensor *t = &c->t[index];
    const struct wgllm_type_traits *tt = wgllm_type_traits(t->type);
    const int64_t ne0 = (int64_t)t->ne[0];
    const size_t row = (size_t)(ne0 / tt->blck_size) * tt->type_size;
    WGLLM_ASSERT((uint64_t)row * t->ne[1] * t->ne[2] == size);
    for (uint64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
        uint8_t *dst = (uint8_t *)buf + r * row;
        if (t->type == WGLLM_TYPE_F32) {
            synth_gen((float *)(void *)dst, ne0, t->key, r * (uint64_t)ne0, t->mean, t->std);
        } else {
            if (!tt->from_float_ref) return false;
            synth_gen(c->scratch, ne0, t->key, r * (uint64_t)ne0, t->mean, t->std);
            tt->from_float_ref(c->scratch, dst, ne0);
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * writing
 * ------------------------------------------------------------------------- */

static void synth_key_name(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
}

enum wgllm_status wgllm_synth_write(const struct wgllm_synth_params *p, const char *path,
                                    struct wgllm_error *err) {
    const struct wgllm_synth_shape *s = wgllm_synth_shape(p->shape);
    if (!s)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "synth: unknown shape '%s' (try tiny, tiny-qwen2, tiny-qwen3, tiny-gemma2, "
                               "tiny-gemma3, tiny-phi3, tiny-gptoss, tiny-granite, tiny-olmo2, tiny-smollm3, tinyllama-1.1b, qwen2-0.5b, "
                               "phi3-mini, gemma2-2b, gemma3-1b, granite-3-2b, olmo2-1b, smollm3-3b, tiny-bert, "
                               "bge-small, tiny-nomic-bert)",
                               p->shape ? p->shape : "(null)");
    int ftype = wgllm_synth_file_type(p->type);
    const struct wgllm_type_traits *tt = wgllm_type_traits(p->type);
    if (ftype < 0 || !tt->name || (p->type != WGLLM_TYPE_F32 && !tt->from_float_ref))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "synth: weight type %s is not one of f32, f16, bf16, q8_0, q4_0, "
                               "q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, nvfp4, tq1_0, tq2_0, q1_0",
                               wgllm_type_name(p->type));
    if (s->n_embd % tt->blck_size != 0 || s->n_ff % tt->blck_size != 0 ||
        (s->head_dim * s->n_head) % tt->blck_size != 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "synth: shape '%s' rows are not a multiple of %s's block size %lld",
                               s->name, tt->name, (long long)tt->blck_size);
    int n_layer = p->n_layer > 0 ? p->n_layer : s->n_layer;

    char vpath[1024];
    if (p->vocab_path) {
        snprintf(vpath, sizeof(vpath), "%s", p->vocab_path);
    } else {
        const char *root = getenv("WGLLM_SHARED");
        snprintf(vpath, sizeof(vpath), "%s/vocab/%s", root && *root ? root : "../shared",
                 s->vocab_file);
    }
    struct wgllm_gguf *vocab = NULL;
    enum wgllm_status st = wgllm_gguf_open(vpath, &vocab, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_error_prefix(err, "synth: reading the vocabulary: ");
        return st;
    }
    const struct wgllm_gguf_value *tokens = wgllm_gguf_find(vocab, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != WGLLM_GGUF_TYPE_ARRAY ||
        tokens->v.arr.type != WGLLM_GGUF_TYPE_STRING || tokens->v.arr.n == 0 ||
        tokens->v.arr.n > (uint64_t)INT32_MAX) {
        wgllm_gguf_free(vocab);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "synth: vocabulary '%s' has no tokenizer.ggml.tokens string array",
                               vpath);
    }
    uint64_t n_vocab = tokens->v.arr.n;

    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    const char *A = s->arch;
    char k[128];
    wgllm_gguf_writer_set_str(w, "general.architecture", A);
    wgllm_gguf_writer_set_str(w, "general.name", p->name ? p->name : s->name);
    wgllm_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);
    wgllm_gguf_writer_set_u32(w, "general.quantization_version", 2);
    const struct {
        const char *name;
        uint32_t v;
    } hparams[] = { /* written in this order, so the file is the same from run to run */
        {"vocab_size", (uint32_t)n_vocab},
        {"context_length", (uint32_t)s->n_ctx},
        {"embedding_length", (uint32_t)s->n_embd},
        {"block_count", (uint32_t)n_layer},
        {"feed_forward_length", (uint32_t)s->n_ff},
        {"attention.head_count", (uint32_t)s->n_head},
        {"attention.head_count_kv", (uint32_t)s->n_head_kv},
    };
    for (size_t i = 0; i < sizeof hparams / sizeof hparams[0]; i++) {
        synth_key_name(k, sizeof(k), A, hparams[i].name);
        wgllm_gguf_writer_set_u32(w, k, hparams[i].v);
    }
    if (synth_is_bert(s)) { /* the keys llama.cpp's bert reads (no RoPE, no RMSNorm) */
        synth_key_name(k, sizeof(k), A, "attention.layer_norm_epsilon");
        wgllm_gguf_writer_set_f32(w, k, s->rms_eps);
        synth_key_name(k, sizeof(k), A, "attention.causal");
        wgllm_gguf_writer_set_bool(w, k, false);
        synth_key_name(k, sizeof(k), A, "pooling_type");
        wgllm_gguf_writer_set_u32(w, k, synth_bert_pooling(s));
        if (s->rope_freq_base > 0.0f) { /* nomic-bert's RoPE */
            synth_key_name(k, sizeof(k), A, "rope.freq_base");
            wgllm_gguf_writer_set_f32(w, k, s->rope_freq_base);
        }
    } else {
        synth_key_name(k, sizeof(k), A, "attention.layer_norm_rms_epsilon");
        wgllm_gguf_writer_set_f32(w, k, s->rms_eps);
        synth_key_name(k, sizeof(k), A, "rope.freq_base");
        wgllm_gguf_writer_set_f32(w, k, s->rope_freq_base);
        synth_key_name(k, sizeof(k), A, "rope.dimension_count");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->head_dim);
    }
    if (s->rope_variant == 3 || s->rope_variant == 4) {
        /* Phi-3.5's: sqrt(1 + ln(32) / ln(4096)) */
        synth_key_name(k, sizeof(k), A, "rope.scaling.attn_factor");
        wgllm_gguf_writer_set_f32(w, k, 1.1902f);
        synth_key_name(k, sizeof(k), A, "rope.scaling.original_context_length");
        wgllm_gguf_writer_set_u32(w, k, s->rope_variant == 3 ? (uint32_t)s->n_ctx : 32u);
    }
    if (s->n_expert > 0) {
        synth_key_name(k, sizeof(k), A, "expert_count");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->n_expert);
        synth_key_name(k, sizeof(k), A, "expert_used_count");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->n_expert_used);
        if (strncmp(s->arch, "qwen", 4) == 0 || synth_is_gptoss(s)) {
            synth_key_name(k, sizeof(k), A, "expert_feed_forward_length");
            wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->n_ff_exp);
        }
        if (s->n_ff_shexp > 0) {
            synth_key_name(k, sizeof(k), A, "expert_shared_feed_forward_length");
            wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->n_ff_shexp);
        }
    }
    if (s->rope_variant == 2 || s->rope_variant == 5 || s->rope_variant == 6) {
        synth_key_name(k, sizeof(k), A, "rope.scaling.type");
        wgllm_gguf_writer_set_str(w, k, s->rope_variant == 2 ? "linear" : "yarn");
        synth_key_name(k, sizeof(k), A, "rope.scaling.factor");
        wgllm_gguf_writer_set_f32(w, k, s->rope_variant == 6 ? 16.0f : 4.0f);
    }
    if (s->rope_variant == 5 || s->rope_variant == 6) {
        /* an original context the tests' 64-token sequences pass (mistral3's:
         * the attention temperature's floor), and, for mistral3, Ministral 3's
         * YaRN keys and Llama 4 scaling beta */
        synth_key_name(k, sizeof(k), A, "rope.scaling.original_context_length");
        wgllm_gguf_writer_set_u32(w, k, s->rope_variant == 5 ? (uint32_t)s->n_ctx / 4 : 16u);
    }
    if (s->rope_variant == 6) {
        static const struct { const char *name; float v; } yk[] = {
            {"rope.scaling.yarn_beta_fast", 32.0f}, {"rope.scaling.yarn_beta_slow", 1.0f},
            {"rope.scaling.yarn_log_multiplier", 1.0f}, {"attention.temperature_scale", 0.1f}};
        for (size_t i = 0; i < sizeof yk / sizeof yk[0]; i++) {
            synth_key_name(k, sizeof(k), A, yk[i].name);
            wgllm_gguf_writer_set_f32(w, k, yk[i].v);
        }
    }
    if (s->n_swa > 0) {
        synth_key_name(k, sizeof(k), A, "attention.sliding_window");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->n_swa);
    }
    if (s->swa_pattern > 0) {
        synth_key_name(k, sizeof(k), A, "attention.sliding_window_pattern");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->swa_pattern);
    }
    if (s->attn_softcap > 0.0f) {
        synth_key_name(k, sizeof(k), A, "attn_logit_softcapping");
        wgllm_gguf_writer_set_f32(w, k, s->attn_softcap);
    }
    if (s->final_softcap > 0.0f) {
        synth_key_name(k, sizeof(k), A, "final_logit_softcapping");
        wgllm_gguf_writer_set_f32(w, k, s->final_softcap);
    }
    if (strncmp(A, "granite", 7) == 0) {
        const struct {
            const char *suffix;
            float v;
        } g[] = {{"embedding_scale", synth_granite.embedding},
                 {"residual_scale", synth_granite.residual},
                 {"attention.scale", synth_granite.attention},
                 {"logit_scale", synth_granite.logit}};
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
            synth_key_name(k, sizeof(k), A, g[i].suffix);
            wgllm_gguf_writer_set_f32(w, k, g[i].v);
        }
    }
    if (s->head_dim * s->n_head != s->n_embd) {
        /* llama.cpp assumes n_embd / n_head unless these say otherwise */
        synth_key_name(k, sizeof(k), A, "attention.key_length");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->head_dim);
        synth_key_name(k, sizeof(k), A, "attention.value_length");
        wgllm_gguf_writer_set_u32(w, k, (uint32_t)s->head_dim);
    }
    for (int64_t i = 0; i < wgllm_gguf_n_kv(vocab); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(vocab, i);
        if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10) != 0 ||
            kv->key.len >= sizeof(k))
            continue;
        memcpy(k, kv->key.data, (size_t)kv->key.len);
        k[kv->key.len] = '\0';
        wgllm_gguf_writer_set_value(w, k, &kv->value);
    }
    if (s->template_file) {
        char tpath[1024];
        const char *root = getenv("WGLLM_SHARED");
        snprintf(tpath, sizeof(tpath), "%s/templates/%s", root && *root ? root : "../shared", s->template_file);
        char *tmpl = NULL;
        st = wgllm_read_file(tpath, 1 << 20, &tmpl, NULL, err);
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "synth: reading the chat template: ");
            wgllm_gguf_writer_free(w);
            wgllm_gguf_free(vocab);
            return st;
        }
        wgllm_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
        free(tmpl);
    }

    struct synth_ctx c = {0};
    if (synth_is_bert(s))
        synth_build_bert(&c, s, n_layer, n_vocab, p->type, p->seed);
    else
        synth_build(&c, s, n_layer, n_vocab, p->type, p->seed);
    int bad = -1; /* a row the type's blocks do not divide (e.g. Q4_K's 256 in a 128-wide expert) */
    for (int i = 0; i < c.n && bad < 0; i++)
        if (c.t[i].ne[0] % (uint64_t)wgllm_type_traits(c.t[i].type)->blck_size) bad = i;
    if (bad < 0)
        for (int i = 0; i < c.n; i++)
            wgllm_gguf_writer_add_tensor(w, c.t[i].name, c.t[i].type, c.t[i].n_dims, c.t[i].ne);
    c.scratch = bad >= 0 ? NULL : malloc((size_t)c.scratch_n * sizeof(float));
    if (bad >= 0) {
        st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                             "shape '%s' cannot be written in %s: tensor '%s' has rows of %llu, not a "
                             "multiple of the type's block of %d", s->name, wgllm_type_name(p->type), c.t[bad].name,
                             (unsigned long long)c.t[bad].ne[0], (int)wgllm_type_traits(c.t[bad].type)->blck_size);
    } else if (!c.scratch) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "synth: no memory");
    } else if (p->max_split_bytes > 0) {
        st = wgllm_gguf_writer_write_split(w, path, p->max_split_bytes, synth_fill, &c, err);
    } else {
        st = wgllm_gguf_writer_write(w, path, synth_fill, &c, err);
    }
    if (st != WGLLM_STATUS_OK) wgllm_error_prefix(err, "synth: ");
    free(c.scratch);
    free(c.t);
    wgllm_gguf_writer_free(w);
    wgllm_gguf_free(vocab);
    return st;
}
