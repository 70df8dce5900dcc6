/*
 * webgpu_internal.h - what the files of the WebGPU backend share: the
 * context (struct wgllm_webgpu_ctx), its weights, dispatches and parameter
 * arena, and the entry points each file gives the others. Not for use
 * outside src/backend/webgpu/.
 *
 *   webgpu_plan.c    the memory plan (sizes fitted to the device's limits and
 *                    a budget) and every buffer: weights (uploaded or
 *                    streamed), vectors, KV cache, activations
 *   webgpu_graph.c   the dispatches of one pass: which kernel with which
 *                    parameters and bindings per layer, the parameter arena
 *                    and the bind groups
 *   forward_webgpu.c create / free, running passes (write the step data,
 *                    record, submit, read back), generation on the GPU, the
 *                    sequence operations and the backend's table
 *   webgpu_encoder.c the dispatches and step data of an encoder's pass
 *                    (bert, nomic-bert), built from webgpu_graph.c's
 *                    primitives
 *   webgpu_moe.c     a mixture-of-experts model's own weights, buffers and
 *                    dispatches (the FFN of its layers), for the other three
 */
#ifndef WGLLM_WEBGPU_INTERNAL_H
#define WGLLM_WEBGPU_INTERNAL_H

#include "backend/webgpu/forward_webgpu.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "backend/webgpu/webgpu_plan.h"

struct wgllm_model;
struct wgllm_weight;
struct wgllm_ubatch;

/* The parameter blocks of SAMPLE and SAMPLE_ROWS carry a marker in their
 * private_slot field (which neither kernel reads) so that slot_of never
 * finds them equal to another dispatch's block and shares the slot:
 * webgpu_generate rewrites SAMPLE's slot per call (temperature, seed, ...),
 * which must not change an ARGMAX (or other) dispatch whose block happened
 * to match, and SAMPLE_ROWS's {n_vocab} would otherwise equal ARGMAX's.
 * The values spell "SAMP" and "ROWS" in little-endian ASCII (a dump of the
 * arena shows them). */
#define KP_PRIVATE_SAMPLE 0x53414d50u
#define KP_PRIVATE_SAMPLE_ROWS 0x524f5753u

#define SLOT_BYTES 256

/* A matrix on the GPU: rows split across buffers when needed. */
struct gweight {
    uint32_t type;
    int64_t ne0, ne1;
    size_t row_size;
    int n_pieces;
    struct {
        struct wgllm_gpu_buffer *buf;
        int64_t row0, rows;
    } piece[MAX_PIECES];
};

/* How a dispatch's grid grows with the count (tokens of the chunk, or its
 * outputs for the ops after the layers). */
enum grow {
    GROW_Y,  /* y = ceil(count / div): kernels that take the token from the grid's y */
    GROW_X,  /* x = x * count: row kernels (one workgroup per row) */
    GROW_XE, /* x = ceil(per * count / div): element-wise over all rows at once */
};

/* Which passes a dispatch belongs to (mat-vec or mat-mat versions of one product). */
enum { WHEN_ALWAYS, WHEN_FEW /* count < MM_MIN_TOKENS */, WHEN_MANY /* count >= MM_MIN_TOKENS */ };

struct gop {
    struct wgllm_gpu_pipeline *pipe;
    struct wgllm_gpu_bindgroup *bg;
    uint32_t x, per, div;
    uint8_t grow;
    uint8_t when; /* WHEN_*: the token counts it runs for */
    int tok; /* >= 0: an op of that one token (row-split weights), run when tok < count */
    /* until the bind group exists */
    int slot, nb;
    struct wgllm_gpu_binding b[9]; /* the arena and up to eight buffers (MATVEC_QKV with biases) */
};

struct wgllm_webgpu_moe;

struct wgllm_webgpu_ctx {
    struct wgllm_model *model;
    struct wgllm_webgpu_moe *moe; /* a mixture-of-experts model's (webgpu_moe.c); NULL otherwise */
    void *staging; /* a streamed model's upload block (UPLOAD_CHUNK bytes), freed after the upload */
    struct wgllm_gpu *gpu;
    const struct wgllm_wgsl_tune *tune;
    int n_ctx, n_seq, n_batch, out_cap;
    uint64_t gpu_mem;
    bool swa_full; /* the caller's wgllm_context_params.swa_full */
    int ring;      /* cells per sequence of a sliding-window layer's ring (kv_window.h); 0: none */

    struct gweight *w;  /* 7 per layer (n_pieces 0: absent), then tok_embd, output (an encoder: its position table) */
    int n_w;
    struct wgllm_gpu_buffer *vecs;                 /* every f32 vector */
    struct wgllm_gpu_buffer *sinks;                /* gpt-oss's attention sinks, layer il's n_head at il * sink stride */
    struct wgllm_gpu_buffer **kc, **vc;            /* per layer, [n_seq][n_ctx] rows ([n_seq][ring] on a ring) */
    /* activations, n_batch rows each (xo and logits: out_cap rows) */
    struct wgllm_gpu_buffer *x, *xn, *q, *k, *v, *qr, *kr, *att, *tmp, *gate, *up, *ffh, *xo, *att_o, *logits;
    struct wgllm_gpu_buffer *xr;      /* a mat-vec input rounded as the CPU rounds it (ROUND_ACT) */
    struct wgllm_gpu_buffer *rope_cs; /* cos/sin pairs of each token's position (n_batch x n_rot floats), and
                                         at rope_swa_off the local layers' (wgllm_model_has_swa_rope) */
    uint64_t rope_swa_off;            /* bytes; 0: no second table */
    struct wgllm_gpu_buffer *gelu_tab; /* GeGLU models: the CPU's GELU of every f16 (wgllm_op_gelu_f16_table) */
    const float *rope_factors;        /* wgllm_model_rope_factors for this context's n_ctx */
    /* u32 [WGLLM_STEP_REGIONS][n_batch]: token ids, cache rows (seq * n_ctx + pos), attention
       lengths (pos + 1), output rows, query temperatures (f32 bits, mistral3), ring rows
       (seq * ring + pos % ring; only with a ring) */
    struct wgllm_gpu_buffer *step;
    struct wgllm_gpu_buffer *arena, *readback;
    /* context shift: n_ctx rows of K or V of one layer; ROPE_SHIFT_F16 from it into each layer's K cache
       (bind groups per layer, parameters in the arena's last slot, written per shift) */
    struct wgllm_gpu_buffer *shift_tmp;
    struct wgllm_gpu_pipeline *shift_pipe;
    struct wgllm_gpu_bindgroup **shift_bg;
    int shift_slot;
    struct wgllm_gpu_buffer *id_rb[2]; /* greedy on the GPU: the sampled ids, read back alternately */
    /* device sampling of a pass's output rows (decode_sampled): SAMPLE_ROWS reads 8 words per
       sampled row from samp_in and writes id + logprob to samp_out; host copies of out_cap rows.
       samp_mask: the token bitsets of the masked rows (grammars), samp_mask_words each, uploaded
       with the pass (n_vocab / 8 bytes a row instead of reading n_vocab floats back) */
    struct wgllm_gpu_buffer *samp_in, *samp_out, *samp_mask;
    struct wgllm_gpu_pipeline *samp_pipe;
    struct wgllm_gpu_bindgroup *samp_bg;
    uint32_t *samp_host; /* out_cap x 8 words */
    uint32_t samp_mask_words; /* ceil(n_vocab / 32) */
    int *samp_row;       /* out_cap: the output row of each row read back, then of each sampled one */
    float *rope_host;
    uint32_t *step_host;
    int *enc_host; /* an encoder's grouping of a pass (webgpu_encoder.c): n_seq firsts, n_seq lengths, n_batch rows */

    struct gop *ops;
    int n_ops, cap_ops;
    /* bounded submissions (forward_webgpu.c's record): dispatch-tokens in the batch being recorded,
       the most one batch takes before it is submitted, and the submissions made so far */
    uint64_t batch_units, submit_units, n_submits;
    /* the pass's progress hook (wgllm_ubatch.progress; NULL = none): at each cut the queue is waited
       for and op `i` of the tokens [prog_i0, prog_i0 + prog_span) of prog_n reported */
    void (*progress)(int done, int total, void *user);
    void *progress_user;
    int prog_i0, prog_span, prog_n;
    int n_ops_layers, n_ops_norm; /* [0, layers): up to the last attention (all tokens); [layers, norm): the rest
                                     of the last layer and the final norm (output rows only); then the logits */
    int layer0_ops[2];            /* [first, second): the ops of layer 0 (the per-layer count of the plan) */
    int n_ops_logits;             /* [norm, logits): the logits; [logits, n_ops): argmax of logits row 0 into the
                                     step's token 0 (greedy on the GPU) */
    union wgllm_kparams *slots;   /* host copy of the arena */
    int n_slots, cap_slots;
    struct wgllm_webgpu_plan plan;
};

/* Passes of at least this many tokens run the mat-vecs as the tiled MATMUL
 * (where the weight type has one): each dequantized weight then serves a
 * tile of tokens. Below it MATVEC per token wastes no tile on absent tokens.
 * Both versions are recorded at load (bind groups and parameters fixed);
 * record() picks one by the pass's token count. */
#define MM_MIN_TOKENS 8

/* Offsets (in floats) of the model's vectors inside the vecs buffer. */
struct vec_offsets {
    uint32_t *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm; /* per layer */
    /* per layer, an encoder's (bert): the other biases, the LayerNorms' weights and biases */
    uint32_t *bo, *b_up, *b_down, *attn_out_norm, *attn_out_norm_b, *layer_out_norm, *layer_out_norm_b;
    uint32_t *b_gate_inp, *b_gate_exps, *b_up_exps, *b_down_exps; /* per layer, gpt-oss's router and expert biases */
    uint32_t output_norm;
    uint32_t embd_norm, embd_norm_b, type_row; /* an encoder's: the embeddings' LayerNorm, token type 0's row */
};

static inline uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* Bytes between layers' attention sinks in g->sinks: a multiple of 256,
 * the largest storage-binding offset alignment WebGPU lets a device ask. */
uint64_t wgllm_webgpu_sink_stride(const struct wgllm_model *m);

/* ---- webgpu_plan.c ------------------------------------------------------- */

/* A buffer of the context, its size added to *category of the plan (may be NULL). */
struct wgllm_gpu_buffer *wgllm_webgpu_gbuf(struct wgllm_webgpu_ctx *g, uint64_t bytes, int usage, const char *label,
                                          uint64_t *category, struct wgllm_error *err);
/* Waits for all queued work by reading back 4 bytes through the context's
 * own readback buffer (no buffer is created). */
enum wgllm_status wgllm_webgpu_sync(struct wgllm_webgpu_ctx *g, struct wgllm_error *err);
/* True when every matrix of the model has a kernel; else false with why. */
bool wgllm_webgpu_formats_ok(const struct wgllm_model *model, char *why, size_t cap);
/* Fits the plan (n_ctx, n_batch, out_cap) to the device and the budget and
 * allocates every buffer, uploading the weights and vectors; *vo gets the
 * vectors' offsets (the caller frees vo->attn_norm, which holds them all). */
enum wgllm_status wgllm_webgpu_plan_alloc(struct wgllm_webgpu_ctx *g, struct vec_offsets *vo, struct wgllm_error *err);

/* Streams a weight's rows into the pieces wgllm_webgpu_weight_rows gives it. */
enum wgllm_status wgllm_webgpu_plan_weight(struct wgllm_webgpu_ctx *g, const struct wgllm_webgpu_limits *lim,
                                           const struct wgllm_weight *w, struct gweight *gw, uint64_t *pending,
                                           struct wgllm_error *err);

/* ---- webgpu_graph.c ------------------------------------------------------ */

/* Records the dispatches of a pass (g->ops, their parameter slots), the
 * sampling and context-shift pipelines, allocates the parameter arena and
 * writes it, and creates every bind group. */
enum wgllm_status wgllm_webgpu_graph_build(struct wgllm_webgpu_ctx *g, const struct vec_offsets *vo,
                                          struct wgllm_error *err);

/* The dispatch list under construction (webgpu_graph.c, and webgpu_encoder.c
 * and webgpu_moe.c through the functions below). */
struct builder {
    struct wgllm_webgpu_ctx *g;
    struct wgllm_error *err;
    bool failed; /* an op could not be added (err says why): the rest are no-ops */
    /* what xr holds: x rounded for vec_dot_type rtype (NULL: nothing valid) */
    struct wgllm_gpu_buffer *rsrc;
    uint32_t rtype;
    bool keep_round; /* the op being added does not write rsrc */
    uint32_t wg_storage; /* the device's workgroup memory (a mat-vec prologue's packed row must fit) */
    /* the last RMS_NORM_ROUND (op index, x -> y, its weights' offset): a
     * fused mat-vec right after it that is y's only reader takes the norm
     * into its prologue and leaves the op to passes of many tokens */
    int norm_op;
    struct wgllm_gpu_buffer *norm_x, *norm_y;
    uint32_t norm_off;
};
/* The compiled pipeline of a kernel (NULL with err set when it has no version for type). */
struct wgllm_gpu_pipeline *wgllm_webgpu_pipe(struct wgllm_webgpu_ctx *g, enum wgllm_kernel k, uint32_t type,
                                             bool neox, struct wgllm_error *err);
/* Adds a dispatch with grid x for one token growing as `grow` says; bindings
 * 1.. are whole buffers; its parameter block goes in an arena slot (shared
 * with an equal one). Returns it, NULL after a failure. */
struct gop *wgllm_webgpu_add_op(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                                enum grow grow, uint32_t x, int nb, struct wgllm_gpu_buffer *b1,
                                struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4);
/* An element-wise op over `per` elements of each row, all rows in one grid (div per workgroup). */
void wgllm_webgpu_add_elems(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                            uint32_t per, uint32_t div, int nb, struct wgllm_gpu_buffer *b1,
                            struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4);
/* y[t] = W x[t] for up to cap rows, the input rounded as the CPU rounds it
 * (MATVEC for few tokens, MATMUL for many; per token for a split weight). */
void wgllm_webgpu_add_matvec(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                             struct wgllm_gpu_buffer *y, int cap);
/* x[t] += y[t] (y_stride n), or x[t] += y (y_stride 0: a bias at y_off). */
void wgllm_webgpu_add_rows(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                           uint32_t n, uint32_t y_stride);

/* ---- webgpu_encoder.c ----------------------------------------------------- */

/* The dispatches of an encoder's pass (bert, nomic-bert) into bd. */
void wgllm_webgpu_encoder_ops(struct builder *bd, const struct vec_offsets *vo);
/* An encoder's pass, before it is recorded: checks that each sequence is
 * whole (positions 0..n-1) and writes the step data (and RoPE table) of the
 * pass's tokens grouped by sequence; the wanted rows' ids (region 3) in
 * ub's output order, so the gathered rows come out as ub->out wants them. */
enum wgllm_status wgllm_webgpu_encoder_step(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                            struct wgllm_error *err);
/* The buffer a mat-vec of a weight with vec_dot_type vt reads for input x
 * (width floats per row, cap rows): xr, rounded as the CPU rounds it (a
 * ROUND_ACT unless xr holds that already), or x itself. */
struct wgllm_gpu_buffer *wgllm_webgpu_add_round(struct builder *bd, struct wgllm_gpu_buffer *x, uint32_t vt,
                                                uint32_t width, int cap);

/* ---- webgpu_moe.c -------------------------------------------------------- */

/* False (with why) when the model's experts cannot run on the WebGPU kernels. */
bool wgllm_webgpu_moe_formats_ok(const struct wgllm_model *m, char *why, size_t cap);
/* The plan's share (no device): limits each expert stack and the MoE
 * weights must meet (errors name the tensor or the quantity), the bytes of
 * the weights beyond the 7 per layer, the floats per token of the MoE
 * activations, and the widest of them (for the batch's binding limit). All
 * 0 for a dense model. */
enum wgllm_status wgllm_webgpu_moe_check(const struct wgllm_model *m, const struct wgllm_webgpu_limits *lim,
                                         struct wgllm_error *err);
uint64_t wgllm_webgpu_moe_weight_bytes(const struct wgllm_model *m);
uint64_t wgllm_webgpu_moe_tok_floats(const struct wgllm_model *m);
uint64_t wgllm_webgpu_moe_row_floats(const struct wgllm_model *m);
/* Uploads the MoE weights beyond the 7 per layer and creates the MoE
 * activations (n_batch rows); nothing for a dense model. */
enum wgllm_status wgllm_webgpu_moe_alloc(struct wgllm_webgpu_ctx *g, const struct wgllm_webgpu_limits *lim,
                                         uint64_t *pending, struct wgllm_error *err);
/* The FFN of MoE layer il on cap rows of fin, added into the stream xa. */
void wgllm_webgpu_moe_ffn(struct wgllm_webgpu_ctx *g, struct builder *bd, int il, const struct vec_offsets *vo, struct wgllm_gpu_buffer *fin, struct wgllm_gpu_buffer *xa,
                          int cap);
void wgllm_webgpu_moe_free(struct wgllm_webgpu_ctx *g);

#endif
