/*
 * backend_impl.h - the interface between a context and the backends that
 * run its forward pass, in the manner of ggml's ggml_backend_i: each backend
 * exports one table of functions over its own opaque state (backend/cpu:
 * wgllm_backend_cpu_i, backend/webgpu: wgllm_backend_webgpu_i), and
 * backend/context.c, which owns struct wgllm_context, picks one and calls
 * only through the table.
 *
 * The split of work: context.c resolves the parameters and validates every
 * input once (token ids, batch sizes, positions, sequence ids, ranges of the
 * sequence operations), keeps what does not depend on where the pass runs
 * (the single-sequence position n_past, the host rows of the outputs, the
 * batch tables of the single-sequence API) and turns every decode into
 * passes of at most n_batch tokens. A backend computes: it may assume its
 * inputs are valid and never re-checks them. Neither backend includes the
 * other's headers; what both need (the RoPE table) is in backend/rope.h.
 */
#ifndef WGLLM_BACKEND_IMPL_H
#define WGLLM_BACKEND_IMPL_H

#include "base/base.h"

struct wgllm_model;
struct wgllm_row_sample; /* backend.h */

/* The tokens of one pass, checked by context.c: 1 <= n <= n_batch, ids in
 * the vocabulary, positions in [0, n_ctx), sequences in [0, n_seq), and the
 * positions of one sequence increasing, each earlier one already cached or
 * earlier in the pass. */
struct wgllm_ubatch {
    int n;
    const int32_t *token, *pos, *seq;
    const bool *output;     /* n flags: keep this token's output row */
    const int32_t *out_idx; /* the n_out indices whose flag is set, ascending */
    int n_out;              /* may be 0: the pass only fills the KV cache */
    bool embeddings;        /* rows are the final normalized hidden states (n_embd), not logits */
    float *out;             /* host memory of the context for n_out rows of n_vocab (or n_embd)
                               floats, in batch order; the backend writes them before returning */
    /* NULL, or told how much of a long pass is done (done of total, in the
     * backend's own units, done < total) whenever the backend knows: after a
     * layer, after a submission the device has finished. Waiting to know
     * costs a device backend a little, so it waits only when this is set. */
    void (*progress)(int done, int total, void *user);
    void *progress_user;
};

/* What a device-side generation hook reads and advances (context.c's own fields). */
struct wgllm_gen_state {
    int *n_past;         /* in: cached positions of sequence 0; out: those before the last token given */
    int *n_logits;       /* in: rows of the last single-sequence decode (>= 1); set to 0 when they go stale */
    const float *logits; /* those rows (host), the last the newest */
};

struct wgllm_backend_i {
    const char *name; /* "cpu", "webgpu" */

    /* Allocates everything the backend needs for `model` with the resolved
     * params p (n_ctx, n_batch, n_seq, n_threads > 0; p->backend as the caller
     * asked). It may plan fewer positions or a smaller batch than asked
     * (never more) and says so in *n_ctx / *n_batch. On success writes what it
     * runs on into desc ("cpu", "webgpu: <adapter> ..."). For
     * WGLLM_BACKEND_AUTO it may instead return OK with *out NULL and the
     * reason the CPU should run in desc ("cpu (auto: ...)"). Errors name the
     * problem; nothing is left allocated. */
    enum wgllm_status (*init)(struct wgllm_model *model, const struct wgllm_context_params *p, void **out,
                              int *n_ctx, int *n_batch, char *desc, size_t desc_cap, struct wgllm_error *err);
    void (*free)(void *b);

    /* Runs one pass (struct wgllm_ubatch). A failure leaves the outputs of
     * the context undefined but the cache of other sequences untouched. */
    enum wgllm_status (*decode)(void *b, const struct wgllm_ubatch *ub, struct wgllm_error *err);

    /* Sequence operations; ranges already checked (0 <= seq < n_seq,
     * 0 < n <= n_ctx, src != dst). Snapshots hold, per layer, the n keys and
     * then the n values of each V row (wgllm_context_seq_state_size bytes);
     * a local layer with a ring (kv_window.h: wgllm_kv_ring of the
     * backend's n_ctx, n_batch and p->swa_full) holds only the last
     * m = min(n, ring) positions [n - m, n), in position order. seq_copy
     * of a ring copies cells [0, min(n, ring)). A backend with a ring
     * stores position p in cell p mod ring and a token at p attends to the
     * n_swa positions up to p through the modulo; context.c checks that
     * those cells still hold them and refuses the shift of a ring. */
    void (*seq_copy)(void *b, int src, int dst, int n);
    void (*seq_save)(void *b, int seq, int n, void *dst);
    void (*seq_load)(void *b, int seq, int n, const void *src);
    /* backend.h's wgllm_context_seq_shift with 0 < discard and
     * keep + discard < n (something moves). */
    enum wgllm_status (*seq_shift)(void *b, int seq, int n, int keep, int discard, struct wgllm_error *err);

    uint64_t (*host_memory)(const void *b);   /* bytes of host memory the backend allocated */
    uint64_t (*device_memory)(const void *b); /* bytes on the device; NULL: none (the CPU) */

    /* Optional (NULL when the backend has none): generation on the device
     * after a single-sequence decode: up to n tokens, each the argmax (sp
     * NULL) or a draw of sp's chain made on the device, given to on_token
     * (false stops). See backend.h's wgllm_context_generate. */
    bool (*can_sample)(const struct wgllm_sampler_params *sp);
    enum wgllm_status (*generate)(void *b, const struct wgllm_sampler_params *sp, struct wgllm_gen_state *gs, int n,
                                  bool (*on_token)(int32_t, void *), void *user, int *n_out, struct wgllm_error *err);

    /* Optional (NULL when the backend has none, as the CPU): decode's pass
     * (logits) where output row j with rs[j].sp set is not written to ub->out
     * but sampled on the device -- the argmax (temperature <= 0) or sp's
     * chain, as can_sample admits it, seeded by sp->seed and rs[j].pos --
     * its id to tok[j] and raw log-softmax to lp[j]; with rs[j].mask only
     * among the tokens it allows (checked: at least one, none past the
     * vocabulary), the log-softmax still of the whole row. The other rows are
     * written to ub->out as decode writes them (their slots of the rows of
     * sampled outputs are left undefined). context.c checked every rs[j]
     * (backend.h's wgllm_context_can_sample_rows). */
    enum wgllm_status (*decode_sampled)(void *b, const struct wgllm_ubatch *ub, const struct wgllm_row_sample *rs,
                                        int32_t *tok, float *lp, struct wgllm_error *err);
};

extern const struct wgllm_backend_i wgllm_backend_cpu_i;
extern const struct wgllm_backend_i wgllm_backend_webgpu_i;
extern const struct wgllm_backend_i wgllm_backend_cpu_encoder_i; /* encoder models (bert) on the CPU */

/* The state of the context's backend when it is `be`, else NULL: for the
 * backend-specific accessors that still leak it (wgllm_context_webgpu). */
struct wgllm_context;
void *wgllm_context_backend_state(struct wgllm_context *ctx, const struct wgllm_backend_i *be);

#endif
