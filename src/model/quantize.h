/*
 * quantize.h - `wgllm quantize`: rewrite a GGUF model's weights in another
 * format, choosing each tensor's type exactly as llama.cpp's
 * llama_model_quantize does (its presets Q4_K_M, Q5_K_M, Q3_K_M, ... and
 * their per-tensor rules, the row-length fallbacks, which tensors stay F32),
 * so that a file quantized here holds the same tensor bytes as one quantized
 * by llama.cpp from the same input (no importance matrix).
 */
#ifndef WGLLM_QUANTIZE_H
#define WGLLM_QUANTIZE_H

#include "base/base.h"
#include "gguf/gguf.h"
#include "wgllm.h"

struct wgllm_quantize_params {
    uint32_t type;          /* ggml type when preset is NULL (Q4_K means Q4_K_M, as llama.cpp's CLI) */
    const char *preset;     /* "Q4_K_M", "q8_0", "IQ4_XS", ... (wgllm_quantize_ftype_from_name); wins over type */
    int n_threads;          /* <= 0: all cores */
    bool allow_requantize;  /* accept already-quantized input tensors (quality suffers) */
    bool pure;              /* every quantizable tensor gets the default type (llama.cpp --pure) */
    wgllm_progress_fn progress; /* fraction of tensor bytes done; return false to cancel */
    void *user;
};

struct wgllm_quantize_params wgllm_quantize_default_params(void);

/* llama.cpp's LLAMA_FTYPE for a preset or type name, case-insensitive
 * ("Q4_K_M" -> 15, "q8_0" -> 7, "Q4_K" -> 15, "f16" -> 1); -1 when unknown. */
int wgllm_quantize_ftype_from_name(const char *name);
/* The canonical preset name of an ftype ("Q4_K_M"); NULL when unknown. */
const char *wgllm_quantize_ftype_name(int ftype);
/* The default tensor type of an ftype (llama_ftype_get_default_type); -1 when
 * wgllm cannot produce it. */
int wgllm_quantize_ftype_default_type(int ftype);
/* Space-separated list of the preset names, for usage messages. */
const char *wgllm_quantize_preset_list(void);

/* The type each tensor of `g` gets under `ftype` (types[i] for tensor index
 * i of g) and the order llama.cpp writes them in (order[k] = tensor index;
 * may be NULL). Fails with INVALID_ARGUMENT naming the preset when no rule
 * exists, BAD_FORMAT when the hyper-parameters it needs are missing. */
enum wgllm_status wgllm_quantize_plan(const struct wgllm_gguf *g, int ftype, bool pure,
                                      uint32_t *types, int64_t *order,
                                      struct wgllm_error *err);

/* Reads `in` (any GGUF model wgllm reads, split or not), writes `out`: all
 * key/values kept (general.file_type set to the preset's LLAMA_FTYPE,
 * general.quantization_version 2, split.* dropped), each tensor converted as
 * wgllm_quantize_plan says, one tensor in memory at a time. A quantized input
 * tensor that would need converting is refused unless allow_requantize. */
enum wgllm_status wgllm_quantize_file(const char *in, const char *out,
                                      const struct wgllm_quantize_params *params,
                                      struct wgllm_error *err);

#endif
