/*
 * backend.h - what the engine needs from a context beyond the public
 * single-sequence API of wgllm.h: batches that mix tokens of several
 * sequences (continuous batching), per-sequence KV-cache operations, hidden
 * states for embeddings, and generation on the device. backend/context.c
 * implements them once, over whichever backend the context runs on (the
 * interface between the two: backend_impl.h).
 */
#ifndef WGLLM_BACKEND_H
#define WGLLM_BACKEND_H

#include "base/base.h"

/* One forward pass over tokens of any sequences. Tokens of the same sequence
 * must come in increasing positions, and every earlier position of that
 * sequence must already be in the cache (or earlier in this batch). */
struct wgllm_batch {
    int n;                /* tokens, at most the context's n_batch */
    const int32_t *token; /* token ids */
    const int32_t *pos;   /* position of each token within its sequence */
    const int32_t *seq;   /* sequence slot of each token, < n_seq */
    const bool *output;   /* keep this token's logits (or embedding); NULL = only the last token */
    /* optional: how much of the pass is done, during it (done of total, the
     * backend's units: backend_impl.h, wgllm_ubatch.progress) */
    void (*progress)(int done, int total, void *user);
    void *progress_user;
};

/* Number of sequence slots of the context (wgllm_context_params.n_seq). */
int wgllm_context_n_seq(const struct wgllm_context *ctx);
int wgllm_context_n_batch(const struct wgllm_context *ctx);

/* Runs the batch. Outputs are numbered in batch order of the tokens whose
 * `output` is set; read them with wgllm_context_output_logits/_embd. With
 * `embeddings`, the final normalized hidden states are kept instead of logits
 * (the vocabulary projection is skipped). Nothing changes on failure. */
enum wgllm_status wgllm_context_decode_batch(struct wgllm_context *ctx, const struct wgllm_batch *b,
                                             bool embeddings, struct wgllm_error *err);
int wgllm_context_n_outputs(const struct wgllm_context *ctx);
const float *wgllm_context_output_logits(const struct wgllm_context *ctx, int j); /* n_vocab floats */
const float *wgllm_context_output_embd(const struct wgllm_context *ctx, int j);   /* n_embd floats */

/* The sliding-window ring (backend/kv_window.h). With swa_full unset, a
 * sliding-window layer keeps only a ring of n_swa + n_batch cells per
 * sequence, so a sequence that went past it has forgotten its oldest
 * positions there: seq_pos_min is the oldest it still holds (0 without a
 * ring or before it wraps), state_pos_min the same for a snapshot of n
 * positions once restored, and can_continue whether a sequence holding
 * positions from pos_min on can go on at position n (reuse its prefix
 * [0, n)): only then may a pass, a seq_copy or a snapshot restore of that
 * prefix be used; else the prefix is computed again from 0 (a pass that
 * would read forgotten cells is refused, INVALID_ARGUMENT). */
int wgllm_context_seq_pos_min(const struct wgllm_context *ctx, int seq);
int wgllm_context_state_pos_min(const struct wgllm_context *ctx, int n);
bool wgllm_context_can_continue(const struct wgllm_context *ctx, int pos_min, int n);

/* Copies positions [0, n) of sequence src into sequence dst (prefix sharing);
 * dst then holds what src does (the same pos_min). */
void wgllm_context_seq_copy(struct wgllm_context *ctx, int src, int dst, int n);
/* Bytes that positions [0, n) of one sequence occupy in a snapshot. */
size_t wgllm_context_seq_state_size(const struct wgllm_context *ctx, int n);
/* Saves / restores positions [0, n) of a sequence to / from host memory (a
 * ring: its last min(n, ring) positions, whole only when seq_pos_min <=
 * state_pos_min(n); a restored sequence has pos_min state_pos_min(n)). */
void wgllm_context_seq_save(const struct wgllm_context *ctx, int seq, int n, void *dst);
void wgllm_context_seq_load(struct wgllm_context *ctx, int seq, int n, const void *src);
/* Context shift of one sequence holding n positions, as llama.cpp's: keeps
 * positions [0, keep), drops [keep, keep + discard) and moves the rest down
 * by `discard`, re-rotating their keys for the new positions (RoPE of the
 * delta, with the model's frequency scale and factors); the sequence then
 * holds n - discard positions. The moved tokens keep what they attended to
 * before (an approximation, as in llama.cpp), so only [0, keep) stays equal to
 * a fresh evaluation. INVALID_ARGUMENT when keep + discard > n; UNSUPPORTED
 * with a ring (swa_full unset). Does not change the single-sequence n_past. */
enum wgllm_status wgllm_context_seq_shift(struct wgllm_context *ctx, int seq, int n, int keep, int discard,
                                          struct wgllm_error *err);

struct wgllm_sampler_params;
/* True when wgllm_context_generate runs on this context with these sampler
 * settings (sp NULL or temperature <= 0: greedy): the backend generates on
 * the device (WebGPU), and for sampling supports the chain (top-k 1..64,
 * top-p, min-p, temperature, seed; no penalties, typical_p, logit bias or
 * n_probs). */
bool wgllm_context_can_generate(const struct wgllm_context *ctx, const struct wgllm_sampler_params *sp);
/*
 * Generation on the device after a wgllm_decode (sequence 0): up to n
 * tokens, the first picked from the decode's last logits, each next one from
 * the previous step's logits computed on the device: the argmax (sp NULL or
 * temperature <= 0), or a draw of the chain made on the device from a
 * uniform that hashes the seed and the position (the same seed gives the
 * same tokens; the draws differ from the CPU sampler's generator). Only
 * token ids come back, and step k+1 is queued before token k is read.
 * on_token gets each token and returns false to stop. *n_out counts the
 * tokens given; n_past then counts the tokens before the last one given (as
 * a host loop that does not decode its last token), and the host logits are
 * stale (wgllm_get_logits returns NULL). UNSUPPORTED where the backend has
 * no such path or the sampler settings are not supported there
 * (wgllm_context_can_generate); CONTEXT_FULL when the positions run out.
 */
enum wgllm_status wgllm_context_generate(struct wgllm_context *ctx, const struct wgllm_sampler_params *sp, int n,
                                         bool (*on_token)(int32_t, void *), void *user, int *n_out,
                                         struct wgllm_error *err);

/* Device-side sampling of output rows (the engine's path on WebGPU): per
 * output row of a batch, either nothing (sp NULL: the logits are read back,
 * wgllm_context_output_logits) or a token picked on the device -- the argmax
 * (sp->temperature <= 0) or a draw of sp's chain (top-k 1..64, top-p,
 * min-p, temperature) from a uniform that hashes sp->seed and `pos` (as
 * wgllm_context_generate draws: the same seed and position give the same
 * token; the CPU sampler's generator differs). Only the id and its raw
 * log-softmax come back, not the row.
 *
 * A mask (a grammar's allowed tokens for this step, made on the host before
 * the pass) takes every other token out before the argmax or the chain, as
 * wgllm_sampler_sample_masked does with its `allowed` bytes (llama.cpp's
 * grammar-first order); the logprob stays the raw log-softmax of the whole
 * row, as the host sampler reports it. The mask crosses to the device as
 * n_vocab bits (n_vocab / 8 bytes) instead of the row coming back. */
struct wgllm_row_sample {
    const struct wgllm_sampler_params *sp; /* NULL: read this row's logits back */
    int32_t pos;                           /* hashed with the seed: the output token's position + 1 */
    /* NULL: every token; else ceil(n_vocab / 32) words, token t allowed when
     * bit t % 32 of word t / 32 is set; at least one set, none past n_vocab */
    const uint32_t *mask;
};
/* True when the context's backend samples rows on the device and sp's
 * settings allow it: no repetition / presence / frequency penalties,
 * typical_p, logit bias or n_probs; greedy (temperature <= 0) or the chain
 * above. False on the CPU backend. */
bool wgllm_context_can_sample_rows(const struct wgllm_context *ctx, const struct wgllm_sampler_params *sp);
/* wgllm_context_decode_batch (logits) with rs[j] for each output row j
 * (wgllm_context_n_outputs rows): rows with rs[j].sp set get tok[j] and
 * lp[j] (the raw log-softmax of the token), and their logits rows are not
 * readable; the other rows' logits are, as after decode_batch (tok/lp
 * untouched there). UNSUPPORTED when the backend has no such path or an
 * rs[j].sp fails wgllm_context_can_sample_rows; INVALID_ARGUMENT when a
 * mask allows no token or sets bits past the vocabulary; nothing runs then. */
enum wgllm_status wgllm_context_decode_batch_sampled(struct wgllm_context *ctx, const struct wgllm_batch *b,
                                                     const struct wgllm_row_sample *rs, int32_t *tok, float *lp,
                                                     struct wgllm_error *err);

#endif
