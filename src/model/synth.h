/*
 * synth.h - synthetic GGUF models: real architectures and real vocabularies
 * with seeded random weights, for tests and benchmarks (no trained weights
 * can be downloaded here).
 *
 * The files follow llama.cpp's conventions exactly (metadata keys, tensor
 * names, shapes, which tensors are F32), so llama.cpp loads them too and the
 * two engines can be compared on the same file.
 */
#ifndef WGLLM_SYNTH_H
#define WGLLM_SYNTH_H

#include "base/base.h"

struct wgllm_synth_params {
    const char *shape;          /* one of wgllm_synth_shape_names(); default "tiny" */
    uint32_t type;              /* weight type (ggml id): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 */
    uint64_t seed;              /* same seed + shape + type -> identical bytes */
    const char *vocab_path;     /* NULL: $WGLLM_SHARED/vocab/<shape's vocab> ($WGLLM_SHARED
                                   defaults to ../shared, relative to the cwd) */
    const char *name;           /* general.name; NULL: the shape name */
    int n_layer;                /* 0: the shape's layer count; else override (smaller tests) */
    uint64_t max_split_bytes;   /* 0: one file at `path`; else shards `path`-0000i-of-0000N.gguf
                                   (path is then the prefix) of at most this much tensor data */
};

struct wgllm_synth_params wgllm_synth_default_params(void);

/* The shapes, NULL-terminated: "tiny", "tiny-qwen2", "tiny-qwen3",
 * "tiny-gemma2", "tiny-gemma3", ..., "tinyllama-1.1b", "qwen2-0.5b",
 * "gemma2-2b", "gemma3-1b", "tiny-granite", "tiny-olmo2", "tiny-smollm3",
 * "granite-3-2b", "olmo2-1b", "smollm3-3b", "tiny-gptoss", and the encoders "tiny-bert",
 * "bge-small", "tiny-nomic-bert". */
const char *const *wgllm_synth_shape_names(void);

/* Hyper-parameters of a shape, for callers that build inputs to match. */
struct wgllm_synth_shape {
    const char *name;
    const char *arch;       /* "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "granite", "olmo2", "smollm3", "gpt-oss", "bert" */
    const char *vocab_file; /* file name under vocab/ */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    float rope_freq_base, rms_eps;
    bool qkv_bias;          /* qwen2: attn_{q,k,v}.bias */
    bool qk_norm;           /* qwen3: attn_{q,k}_norm.weight (olmo2: over the whole projection) */
    bool tied_output;       /* no output.weight: the output projection is token_embd */
    /* RoPE variants that real files carry: 0 plain; 1 a `rope_freqs.weight`
     * tensor of per-pair frequency divisors (Llama 3.1 style; random values in
     * about [0.8, 4.2] here so that every pair, not only the slow ones, shows
     * whether they are applied); 2 linear scaling (`rope.scaling.type` linear,
     * factor 4); 3 LongRoPE (phi3: rope_factors_short/long.weight, an
     * attention factor, original context = n_ctx, so the short factors
     * apply); 4 the same with an original context of 32, so that a context
     * of more positions uses the long factors (the tests' contexts: llama.cpp's
     * 256, `wgllm logits`' as many as its tokens, 64); 5 YaRN (factor 4,
     * original context n_ctx / 4); 6 mistral3's YaRN (factor 16, original
     * context 16, betas, log multiplier) and attention temperature. */
    int rope_variant;
    /* gemma (arch gemma2/gemma3: post-norms, GeGLU, q/k norms for gemma3) */
    int n_swa;              /* attention.sliding_window; 0: not written */
    int swa_pattern;        /* attention.sliding_window_pattern; 0: not written (the arch's default) */
    float attn_softcap;     /* attn_logit_softcapping; 0: not written */
    float final_softcap;    /* final_logit_softcapping; 0: not written */
    const char *template_file; /* tokenizer.chat_template from templates/<this>; NULL: the vocab's */
    /* mixture of experts (qwen3moe, olmoe, llama as Mixtral): 0 experts: a dense FFN */
    int n_expert, n_expert_used, n_ff_exp;
    int n_ff_shexp; /* > 0: a shared expert of this length (granitemoe; qwen2moe's has a sigmoid gate) */
};
/* bert shapes (encoders, bert and nomic-bert): rms_eps is their LayerNorms'
 * epsilon, rope_freq_base nomic-bert's RoPE base (0: none, bert's learned
 * positions), qkv_bias means every projection has a bias (else nomic's fused
 * attn_qkv without any); their pooling is synth.c's (bge-small cls, the
 * others mean). */
/* NULL when the name is unknown. */
const struct wgllm_synth_shape *wgllm_synth_shape(const char *name);

/* llama.cpp's LLAMA_FTYPE for a weight type (ALL_F32=0, MOSTLY_F16=1, ...); -1 if none. */
int wgllm_synth_file_type(uint32_t type);

/* Writes the model. Errors: INVALID_ARGUMENT for an unknown shape or a type
 * that is not a supported weight type; IO/BAD_FORMAT (naming the path) when
 * the vocabulary cannot be read; IO when the output cannot be written. */
enum wgllm_status wgllm_synth_write(const struct wgllm_synth_params *p, const char *path,
                                    struct wgllm_error *err);

#endif
