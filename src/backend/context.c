/*
 * context.c - struct wgllm_context, whatever backend runs it: the public
 * context calls of wgllm.h and the batch / sequence calls of backend.h.
 *
 * It picks the backend (cpu; webgpu; auto: WebGPU on a hardware adapter,
 * else the CPU, with the reason), validates every input once, here, so that
 * each check has one implementation and one message, and then calls the
 * backend only through its table (backend_impl.h). It owns what does not
 * depend on where the pass runs: the single-sequence API's position
 * (n_past) and the batches it cuts a decode into, and the host rows of the
 * last pass's outputs, which the backend writes directly (the CPU's matrix
 * product, the WebGPU readback) so that no row is copied twice.
 */
#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/kv_window.h"
#include "model/model.h"

#include <stdio.h>

struct wgllm_context {
    const struct wgllm_backend_i *be; /* the backend's table */
    void *b;                          /* its state */
    struct wgllm_model *model;
    int n_ctx, n_seq, n_batch; /* as the backend planned them */
    int n_vocab, n_embd;
    int n_past; /* of sequence 0, for the single-sequence API */
    /* the sliding-window ring (backend/kv_window.h): cells per sequence of a
     * local layer (0: none), and per sequence the oldest position the ring
     * still holds, kept here from the positions of every pass so that each
     * backend only stores and reads by the modulo */
    int ring;
    int *pos_min;
    int *b_first; /* n_seq: a pass's first position of each sequence, -1 when absent */

    /* outputs of the last call: rows of n_vocab (logits) or n_embd floats */
    float *out;
    size_t out_cap; /* floats allocated */
    int n_outputs;  /* rows of the last decode_batch (or decode) */
    bool out_embd;  /* they are embeddings */
    int n_logits;   /* rows the single-sequence getters see: 0 after decode_batch or a generation */

    /* n_batch each: the single-sequence API's positions and sequences (all
     * 0), output flags of a batch without any, the output indices of a pass */
    int32_t *b_pos, *b_seq, *b_idx;
    bool *b_want;
    char desc[320]; /* wgllm_context_backend */
};

/* ---- create / free ----------------------------------------------------- */

struct wgllm_context_params wgllm_context_default_params(void) {
    struct wgllm_context_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0, .n_seq = 1,
                                     .backend = WGLLM_BACKEND_CPU};
    return p;
}

void wgllm_context_free(struct wgllm_context *c) {
    if (!c) return;
    if (c->b) c->be->free(c->b);
    wgllm_free_aligned(c->out);
    free(c->b_pos);
    free(c->b_seq);
    free(c->b_idx);
    free(c->b_want);
    free(c->pos_min);
    free(c->b_first);
    free(c);
}

/* Makes room for `floats` output floats, keeping the rows there (a failed
 * call after a growth must still leave the last call's outputs readable).
 * Aligned: the CPU's matrix products write the rows directly. */
static bool out_reserve(struct wgllm_context *c, uint64_t floats) {
    if (floats <= c->out_cap) return true;
    size_t bytes; /* rows x vocabulary in 64 bits: it may not fit a 32-bit size_t (wasm32) */
    float *p = wgllm_size_mul(floats, sizeof(float), &bytes) ? wgllm_alloc_aligned(bytes) : NULL;
    if (!p) return false;
    if (c->out) memcpy(p, c->out, c->out_cap * sizeof(float));
    wgllm_free_aligned(c->out);
    c->out = p;
    c->out_cap = (size_t)floats; /* bytes fit size_t, so floats does */
    return true;
}

enum wgllm_status wgllm_context_init(struct wgllm_model *model, const struct wgllm_context_params *params,
                                     struct wgllm_context **out, struct wgllm_error *err) {
    *out = NULL;
    if (model->vocab_only)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "the model file holds only a vocabulary (no weights)");
    struct wgllm_context_params p = params ? *params : wgllm_context_default_params();
    const struct wgllm_hparams *hp = &model->hp;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 || p.n_seq < 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "negative n_ctx, n_batch, n_threads or n_seq");
    if (p.n_ctx == 0) p.n_ctx = WGLLM_MIN(hp->n_ctx_train, 4096);
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_seq == 0) p.n_seq = 1;
    if (p.n_threads == 0) p.n_threads = model->n_threads;
    if (p.n_seq > 256) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "n_seq %d is more than 256", p.n_seq);
    if (p.n_ctx == 0) /* a file whose context_length is 0, and no n_ctx given */
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "the model's training context is 0 positions: give the context's n_ctx");
    p.n_batch = (int)WGLLM_MIN((int64_t)p.n_batch, (int64_t)p.n_ctx * p.n_seq); /* 64-bit: n_ctx may be near INT_MAX */
    if ((unsigned)p.backend > WGLLM_BACKEND_AUTO)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "unknown backend %d", (int)p.backend);
    static const char streamed_msg[] = "the model was loaded with its weights left in the file (stream_weights), "
                                       "which only the WebGPU backend can use; load it without stream_weights for the CPU";
    if (wgllm_model_streamed(model) && p.backend == WGLLM_BACKEND_CPU)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s", streamed_msg);

    struct wgllm_context *c = calloc(1, sizeof(*c));
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->model = model;
    c->n_seq = p.n_seq;
    c->n_vocab = hp->n_vocab;
    c->n_embd = hp->n_embd;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    /* WebGPU first unless the CPU was asked for; with AUTO its init says
     * whether to use it (a hardware adapter and kernels for every weight
     * format) or why the CPU runs instead, which becomes the description */
    enum wgllm_status st = WGLLM_STATUS_OK;
    /* an encoder has a CPU pass of its own (the WebGPU backend's is webgpu_encoder.c) */
    const struct wgllm_backend_i *cpu = hp->encoder ? &wgllm_backend_cpu_encoder_i : &wgllm_backend_cpu_i;
    c->be = cpu;
    if (p.backend != WGLLM_BACKEND_CPU) {
        st = wgllm_backend_webgpu_i.init(model, &p, &c->b, &c->n_ctx, &c->n_batch, c->desc, sizeof c->desc, err);
        if (!st && c->b) c->be = &wgllm_backend_webgpu_i;
        else if (!st && wgllm_model_streamed(model)) /* auto chose the CPU, which has no weights here */
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "backend %s; but %s", c->desc, streamed_msg);
    }
    if (!st && !c->b) {
        char cpu_desc[sizeof c->desc]; /* "cpu"; an auto choice keeps the reason WebGPU gave */
        st = cpu->init(model, &p, &c->b, &c->n_ctx, &c->n_batch,
                                      p.backend == WGLLM_BACKEND_CPU ? c->desc : cpu_desc, sizeof c->desc, err);
    }
    if (st) {
        wgllm_context_free(c);
        return st;
    }
    /* the backend's contract: it may plan less than asked, never more, and never nothing */
    WGLLM_ASSERT(c->n_ctx >= 1 && c->n_ctx <= p.n_ctx && c->n_batch >= 1 && c->n_batch <= p.n_batch);
    const size_t B = (size_t)c->n_batch;
    c->b_pos = wgllm_malloc_array(B, sizeof(int32_t)); /* NULL past size_t (wasm32) */
    c->b_seq = calloc(B, sizeof(int32_t));
    c->b_idx = wgllm_malloc_array(B, sizeof(int32_t));
    c->b_want = calloc(B, sizeof(bool));
    /* the backends size their rings from the same inputs (kv_window.h) */
    c->ring = wgllm_kv_ring(model, c->n_ctx, c->n_batch, p.swa_full);
    c->pos_min = calloc((size_t)c->n_seq, sizeof(int));
    c->b_first = malloc((size_t)c->n_seq * sizeof(int));
    if (!c->b_pos || !c->b_seq || !c->b_idx || !c->b_want || !c->pos_min || !c->b_first ||
        !out_reserve(c, (uint64_t)c->n_vocab)) {
        wgllm_context_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    *out = c;
    return WGLLM_STATUS_OK;
}

/* ---- what the context is ----------------------------------------------- */

int wgllm_context_n_ctx(const struct wgllm_context *c) { return c->n_ctx; }
int wgllm_context_n_seq(const struct wgllm_context *c) { return c->n_seq; }
int wgllm_context_n_batch(const struct wgllm_context *c) { return c->n_batch; }
int wgllm_context_n_past(const struct wgllm_context *c) { return c->n_past; }
const char *wgllm_context_backend(const struct wgllm_context *c) { return c->desc; }

uint64_t wgllm_context_memory(const struct wgllm_context *c) {
    return c->be->host_memory(c->b) + c->out_cap * sizeof(float) +
           (uint64_t)c->n_batch * (3 * sizeof(int32_t) + sizeof(bool));
}

uint64_t wgllm_context_gpu_memory(const struct wgllm_context *c) {
    return c->be->device_memory ? c->be->device_memory(c->b) : 0;
}

void *wgllm_context_backend_state(struct wgllm_context *c, const struct wgllm_backend_i *be) {
    return c->be == be ? c->b : NULL;
}

/* ---- decoding ---------------------------------------------------------- */

static enum wgllm_status check_tokens(const struct wgllm_context *c, const int32_t *tokens, int n,
                                      struct wgllm_error *err) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "token %d at index %d is outside the vocabulary (%d)", tokens[i], i, c->n_vocab);
    return WGLLM_STATUS_OK;
}

/* ---- the sliding-window ring ------------------------------------------- */

/* Each sequence's first position in a pass into b_first; INVALID_ARGUMENT
 * when the ring no longer holds the window of one of them (a prefix reused,
 * or the cache truncated, below what the ring remembers): the pass would
 * attend to cells that hold other positions. */
static enum wgllm_status window_check(struct wgllm_context *c, const int32_t *pos, const int32_t *seq, int n,
                                      struct wgllm_error *err) {
    if (!c->ring) return WGLLM_STATUS_OK;
    for (int s = 0; s < c->n_seq; s++) c->b_first[s] = -1;
    for (int i = 0; i < n; i++)
        if (c->b_first[seq[i]] < 0) c->b_first[seq[i]] = pos[i];
    for (int s = 0; s < c->n_seq; s++)
        if (c->b_first[s] >= 0 && !wgllm_kv_can_continue(c->model, c->pos_min[s], c->b_first[s]))
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "sequence %d cannot go on at position %d: its sliding-window layers keep a ring of "
                                   "%d cells, which holds positions from %d on, not the window of %d before it "
                                   "(start the sequence again from position 0)",
                                   s, c->b_first[s], c->ring, c->pos_min[s], c->model->hp.n_swa);
    return WGLLM_STATUS_OK;
}

/* After a pass that window_check admitted: a sequence started over at 0
 * holds only what this pass wrote, and a ring of R cells keeps the R
 * positions up to the newest one written (a sequence's positions ascend). */
static void window_note(struct wgllm_context *c, const int32_t *pos, const int32_t *seq, int n) {
    if (!c->ring) return;
    for (int s = 0; s < c->n_seq; s++)
        if (c->b_first[s] == 0) c->pos_min[s] = 0;
    for (int i = 0; i < n; i++) c->pos_min[seq[i]] = WGLLM_MAX(c->pos_min[seq[i]], pos[i] + 1 - c->ring);
}

int wgllm_context_seq_pos_min(const struct wgllm_context *c, int seq) {
    WGLLM_ASSERT(seq >= 0 && seq < c->n_seq);
    return c->pos_min[seq];
}

int wgllm_context_state_pos_min(const struct wgllm_context *c, int n) { return c->ring ? WGLLM_MAX(0, n - c->ring) : 0; }

bool wgllm_context_can_continue(const struct wgllm_context *c, int pos_min, int n) {
    return wgllm_kv_can_continue(c->model, pos_min, n);
}

uint64_t wgllm_context_kv_memory(const struct wgllm_context *c, uint64_t *full, int *ring) {
    if (full) *full = wgllm_kv_bytes(c->model, c->n_ctx, c->n_seq, 0);
    if (ring) *ring = c->ring;
    return wgllm_kv_bytes(c->model, c->n_ctx, c->n_seq, c->ring);
}

/* One pass of n validated tokens with output flags `want` through the
 * backend; the output rows go to `out`. */
/* One pass through the backend; with rs (logits only, the backend has
 * decode_sampled), the outputs rs marks are sampled on the device. */
static enum wgllm_status run_pass_sampled(struct wgllm_context *c, const int32_t *tok, const int32_t *pos,
                                          const int32_t *seq, const bool *want, int n, bool embeddings, float *out,
                                          const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                          const struct wgllm_batch *b, struct wgllm_error *err) {
    int n_out = 0;
    for (int i = 0; i < n; i++)
        if (want[i]) c->b_idx[n_out++] = i;
    enum wgllm_status st = window_check(c, pos, seq, n, err);
    if (st) return st;
    const struct wgllm_ubatch ub = {.n = n, .token = tok, .pos = pos, .seq = seq, .output = want,
                                    .out_idx = c->b_idx, .n_out = n_out, .embeddings = embeddings, .out = out,
                                    .progress = b ? b->progress : NULL, .progress_user = b ? b->progress_user : NULL};
    st = rs ? c->be->decode_sampled(c->b, &ub, rs, s_tok, s_lp, err) : c->be->decode(c->b, &ub, err);
    if (!st) window_note(c, pos, seq, n);
    return st;
}

static enum wgllm_status run_pass(struct wgllm_context *c, const int32_t *tok, const int32_t *pos, const int32_t *seq,
                                  const bool *want, int n, bool embeddings, float *out, struct wgllm_error *err) {
    return run_pass_sampled(c, tok, pos, seq, want, n, embeddings, out, NULL, NULL, NULL, NULL, err);
}

/* Sequence 0's n tokens after the cached ones, in passes of n_batch; with
 * all_logits every pass keeps its rows, else only the last token's row is
 * computed (the earlier passes only fill the cache). */
enum wgllm_status wgllm_decode(struct wgllm_context *c, const int32_t *tokens, int n, bool all_logits,
                               struct wgllm_error *err) {
    if (n <= 0) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "decode of %d tokens", n);
    if (c->n_past + n > c->n_ctx)
        return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                               "%d tokens do not fit: %d of the context's %d positions are used", n, c->n_past,
                               c->n_ctx);
    enum wgllm_status st = check_tokens(c, tokens, n, err);
    if (st) return st;
    const int rows = all_logits ? n : 1;
    if (!out_reserve(c, (uint64_t)rows * (uint64_t)c->n_vocab))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d rows of logits", rows);
    for (int done = 0; done < n;) {
        const int nt = WGLLM_MIN(c->n_batch, n - done);
        for (int i = 0; i < nt; i++) {
            c->b_pos[i] = c->n_past + i;
            c->b_want[i] = all_logits || done + i == n - 1;
        }
        st = run_pass(c, tokens + done, c->b_pos, c->b_seq, c->b_want, nt, false,
                      c->out + (all_logits ? (size_t)done * c->n_vocab : 0), err);
        if (st) return st;
        c->n_past += nt;
        done += nt;
    }
    c->n_logits = c->n_outputs = rows;
    c->out_embd = false;
    return WGLLM_STATUS_OK;
}

const float *wgllm_get_logits(const struct wgllm_context *c) {
    return c->n_logits > 0 ? c->out + (size_t)(c->n_logits - 1) * c->n_vocab : NULL;
}

const float *wgllm_get_logits_ith(const struct wgllm_context *c, int i) {
    if (i < 0 || i >= c->n_logits) return NULL;
    return c->out + (size_t)i * c->n_vocab;
}

void wgllm_context_truncate(struct wgllm_context *c, int n_past) {
    if (n_past < 0) n_past = 0;
    if (n_past < c->n_past) c->n_past = n_past;
}

/* A row's token mask (backend.h): the backend's sampler needs a candidate,
 * and counts the set bits, so none may lie past the vocabulary. */
static enum wgllm_status check_mask(const struct wgllm_context *c, const uint32_t *mask, int j, struct wgllm_error *err) {
    const int words = (c->n_vocab + 31) / 32, tail = c->n_vocab % 32;
    uint32_t any = 0;
    for (int i = 0; i < words; i++) any |= mask[i];
    if (!any) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "output %d: the token mask allows no token", j);
    if (tail && mask[words - 1] >> tail)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "output %d: the token mask sets bits past the vocabulary (%d tokens)", j, c->n_vocab);
    return WGLLM_STATUS_OK;
}

static enum wgllm_status decode_batch(struct wgllm_context *c, const struct wgllm_batch *b, bool embeddings,
                                      const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                      struct wgllm_error *err) {
    if (b->n <= 0 || b->n > c->n_batch)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "batch of %d tokens (1..%d allowed)", b->n,
                               c->n_batch);
    enum wgllm_status st = check_tokens(c, b->token, b->n, err);
    if (st) return st;
    int n_out = 0;
    for (int i = 0; i < b->n; i++) {
        if (b->seq[i] < 0 || b->seq[i] >= c->n_seq)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "batch token %d: sequence %d of %d", i,
                                   b->seq[i], c->n_seq);
        if (b->pos[i] < 0 || b->pos[i] >= c->n_ctx)
            return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL, "batch token %d: position %d outside the context (%d)",
                                   i, b->pos[i], c->n_ctx);
        n_out += b->output ? b->output[i] : i == b->n - 1;
    }
    const int width = embeddings ? c->n_embd : c->n_vocab;
    if (!out_reserve(c, (uint64_t)WGLLM_MAX(n_out, 1) * (uint64_t)width))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d output rows", n_out);
    const bool *want = b->output;
    if (!want) { /* only the last token */
        for (int i = 0; i < b->n; i++) c->b_want[i] = i == b->n - 1;
        want = c->b_want;
    }
    if (rs) { /* every sampled row's settings, before anything runs */
        bool any = false;
        for (int j = 0; j < n_out; j++) {
            if (!rs[j].sp) continue;
            if (!wgllm_context_can_sample_rows(c, rs[j].sp))
                return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                       "output %d: the %s backend cannot sample these settings on the device", j,
                                       c->be->name);
            if (rs[j].mask && (st = check_mask(c, rs[j].mask, j, err))) return st;
            any = true;
        }
        if (!any) rs = NULL;
    }
    st = run_pass_sampled(c, b->token, b->pos, b->seq, want, b->n, embeddings, c->out, rs, s_tok, s_lp, b, err);
    if (st) return st;
    c->n_outputs = n_out;
    c->out_embd = embeddings;
    c->n_logits = 0; /* the single-sequence getters no longer apply */
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_context_decode_batch(struct wgllm_context *c, const struct wgllm_batch *b, bool embeddings,
                                             struct wgllm_error *err) {
    return decode_batch(c, b, embeddings, NULL, NULL, NULL, err);
}

bool wgllm_context_can_sample_rows(const struct wgllm_context *c, const struct wgllm_sampler_params *sp) {
    if (!c->be->decode_sampled || !sp) return false;
    /* what the device does not implement changes greedy picks too */
    if ((sp->repeat_penalty != 1.0f && sp->penalty_last_n != 0) || sp->presence_penalty != 0.0f ||
        sp->frequency_penalty != 0.0f || sp->n_logit_bias > 0 || sp->n_probs > 0)
        return false;
    return sp->temperature <= 0.0f || (c->be->can_sample && c->be->can_sample(sp));
}

enum wgllm_status wgllm_context_decode_batch_sampled(struct wgllm_context *c, const struct wgllm_batch *b,
                                                     const struct wgllm_row_sample *rs, int32_t *tok, float *lp,
                                                     struct wgllm_error *err) {
    if (!c->be->decode_sampled)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "the %s backend does not sample on the device",
                               c->be->name);
    return decode_batch(c, b, false, rs, tok, lp, err);
}

int wgllm_context_n_outputs(const struct wgllm_context *c) { return c->n_outputs; }

const float *wgllm_context_output_logits(const struct wgllm_context *c, int j) {
    WGLLM_ASSERT(j >= 0 && j < c->n_outputs && !c->out_embd);
    return c->out + (size_t)j * c->n_vocab;
}

const float *wgllm_context_output_embd(const struct wgllm_context *c, int j) {
    WGLLM_ASSERT(j >= 0 && j < c->n_outputs && c->out_embd);
    return c->out + (size_t)j * c->n_embd;
}

/* ---- generation on the device ------------------------------------------ */

bool wgllm_context_can_generate(const struct wgllm_context *c, const struct wgllm_sampler_params *sp) {
    if (!c->be->generate) return false;
    return !sp || sp->temperature <= 0.0f || (c->be->can_sample && c->be->can_sample(sp));
}

enum wgllm_status wgllm_context_generate(struct wgllm_context *c, const struct wgllm_sampler_params *sp, int n,
                                         bool (*on_token)(int32_t, void *), void *user, int *n_out,
                                         struct wgllm_error *err) {
    *n_out = 0;
    if (!c->be->generate)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "the %s backend does not generate on the device",
                               c->be->name);
    if (c->n_logits < 1)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "generation needs the logits of a decode first");
    if (n <= 0) return WGLLM_STATUS_OK;
    if (sp && sp->temperature <= 0.0f) sp = NULL; /* greedy */
    const int32_t p0 = c->n_past, zero = 0;
    enum wgllm_status st = window_check(c, &p0, &zero, 1, err);
    if (st) return st;
    struct wgllm_gen_state gs = {&c->n_past, &c->n_logits, c->out};
    st = c->be->generate(c->b, sp, &gs, n, on_token, user, n_out, err);
    /* the steps wrote positions up to the last token given (n_past), at most */
    const int32_t last = c->n_past;
    if (*n_out > 0) window_note(c, &last, &zero, 1);
    return st;
}

/* ---- sequences --------------------------------------------------------- */

void wgllm_context_seq_copy(struct wgllm_context *c, int src, int dst, int n) {
    WGLLM_ASSERT(src >= 0 && src < c->n_seq && dst >= 0 && dst < c->n_seq && n >= 0 && n <= c->n_ctx);
    if (src == dst || n == 0) return;
    c->be->seq_copy(c->b, src, dst, n);
    c->pos_min[dst] = c->pos_min[src]; /* a ring is copied whole: what src still holds, dst now does */
}

/* Every backend lays a snapshot out the same way (backend_impl.h): f16 keys
 * and values of each layer; a local layer with a ring gives only the ring's
 * live cells, its last min(n, ring) positions. */
size_t wgllm_context_seq_state_size(const struct wgllm_context *c, int n) {
    const struct wgllm_hparams *hp = &c->model->hp;
    if (hp->encoder && n >= 0) return 0; /* an encoder caches nothing */
    if (n < 0) return SIZE_MAX;
    /* In 64 bits: a WebGPU KV cache lives in GPU memory and may hold more
     * than a 32-bit size_t can address; SIZE_MAX then, which no snapshot
     * budget admits and no snapshot file matches. */
    const uint64_t bytes = wgllm_kv_bytes(c->model, n, 1, c->ring && n > c->ring ? c->ring : 0);
    size_t out;
    return bytes != UINT64_MAX && wgllm_size_from_u64(bytes, &out) ? out : SIZE_MAX;
}

void wgllm_context_seq_save(const struct wgllm_context *c, int seq, int n, void *dst) {
    WGLLM_ASSERT(seq >= 0 && seq < c->n_seq && n >= 0 && n <= c->n_ctx);
    if (n > 0) c->be->seq_save(c->b, seq, n, dst);
}

void wgllm_context_seq_load(struct wgllm_context *c, int seq, int n, const void *src) {
    WGLLM_ASSERT(seq >= 0 && seq < c->n_seq && n >= 0 && n <= c->n_ctx);
    if (n > 0) c->be->seq_load(c->b, seq, n, src);
    c->pos_min[seq] = wgllm_context_state_pos_min(c, n);
}

enum wgllm_status wgllm_context_seq_shift(struct wgllm_context *c, int seq, int n, int keep, int discard,
                                          struct wgllm_error *err) {
    if (seq < 0 || seq >= c->n_seq || n < 0 || n > c->n_ctx || keep < 0 || discard < 0 || keep + discard > n)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "context shift of sequence %d (of %d): keep %d + discard %d must fit in its %d "
                               "positions (context %d)", seq, c->n_seq, keep, discard, n, c->n_ctx);
    if (discard == 0 || keep + discard == n) return WGLLM_STATUS_OK; /* nothing moves */
    if (c->ring)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "context shift of a model with sliding-window layers needs their full caches (context "
                               "param swa_full; the engine sets it with context_shift): a ring of %d cells no longer "
                               "holds the kept tokens the moved ones would see", c->ring);
    return c->be->seq_shift(c->b, seq, n, keep, discard, err);
}

enum wgllm_status wgllm_context_shift(struct wgllm_context *c, int keep, int discard, struct wgllm_error *err) {
    const int n = c->n_past;
    if (keep < 0 || keep >= n)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "context shift: keep %d must be in [0, %d) (the "
                               "cached tokens)", keep, n);
    if (discard <= 0) discard = (n - keep) / 2;
    enum wgllm_status st = wgllm_context_seq_shift(c, 0, n, keep, discard, err);
    if (st == WGLLM_STATUS_OK) c->n_past = n - discard;
    return st;
}
