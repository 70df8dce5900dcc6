/*
 * kernels.h - the WGSL kernel generator of the WebGPU backend: WGSL text
 * made in C per kernel, per weight (or KV-cache) format and per tunable.
 * Weights stay in their GGUF block layout in flat array<u32> buffers (Q8_0
 * blocks are 34 bytes, Q4_0 18: not word aligned, so kernels unpack bytes
 * from u32 words); F16 is read as u32 pairs with unpack2x16float. All
 * arithmetic is f32 (an f16 path needs shader-f16, which SwiftShader lacks).
 *
 * Every kernel reads its parameters from binding 0, a uniform block laid out
 * as union wgllm_kparams; the other bindings are listed per kernel below.
 */
#ifndef WGLLM_WEBGPU_KERNELS_H
#define WGLLM_WEBGPU_KERNELS_H

#include "base/base.h"

/* The tunables, in one table (defaults: wgllm_wgsl_default_tune). */
struct wgllm_wgsl_tune {
    uint32_t wg_matvec;   /* threads per mat-vec workgroup (power of two) */
    uint32_t rows_matvec; /* rows per mat-vec workgroup */
    uint32_t wg_row;      /* threads per row kernel (RMSNorm, argmax) (power of two) */
    uint32_t wg_elem;     /* threads per element-wise workgroup */
    uint32_t wg_attn;     /* threads per attention (ATTN_BATCH) workgroup = positions per tile (power of two) */
    uint32_t attn_max_dims; /* head dims an attention thread accumulates: head_dim <= wg_attn * this */
    bool matvec_thread_rows; /* mat-vec: one row per thread, no workgroup reduction (rows_matvec threads) */
    bool matvec_subgroups;   /* mat-vec: reduce with subgroupAdd (needs the adapter's subgroups feature) */
    /* decode mat-vecs: round (and RMS-normalize) their input in separate
     * dispatches (ROUND_ACT, RMS_NORM_ROUND) instead of in each workgroup's
     * prologue (kernels_fused.c; fewer dispatches, the rounding repeated per
     * workgroup) */
    bool matvec_split_round;
    /* mat-mat (prefill): a workgroup computes mm_tile_n weight rows x
     * mm_tile_m tokens, walking K in chunks of mm_tile_k (a multiple of 32:
     * whole quant blocks); each thread a mm_micro_n x mm_micro_m register
     * tile, so (tile_n/micro_n) * (tile_m/micro_m) threads; workgroup memory
     * (tile_n + tile_m) * tile_k floats. */
    uint32_t mm_tile_n, mm_tile_m, mm_tile_k, mm_micro_n, mm_micro_m;
    /* mat-mat without workgroup memory or barriers: each thread dequantises
     * its rows' blocks in registers and reuses them for its mm_micro_m
     * tokens (mm_tile_k unused). Software adapters, where barriers cost. */
    bool mm_direct;
    /* mat-mat split along K (0: off): the workgroup's mm_split_k threads
     * (power of two, >= 4) take its 32-element blocks in turn, each thread
     * summing all mm_tile_n x mm_tile_m outputs (at most 64) over its
     * blocks; subgroupAdd, one partial per subgroup in workgroup memory and
     * one barrier reduce them (needs the adapter's subgroups feature).
     * Many threads on few tokens: a batch of decode streams reads the
     * weights once at mat-vec parallelism. mm_tile_k and the micro tile
     * are unused. */
    uint32_t mm_split_k;
};
const struct wgllm_wgsl_tune *wgllm_wgsl_default_tune(void);
/* Defaults for software (CPU) adapters such as SwiftShader, where workgroup
 * barriers are expensive: mat-vec rows per thread instead of reductions. */
const struct wgllm_wgsl_tune *wgllm_wgsl_cpu_adapter_tune(void);
/* The tune to use on an adapter: what `wgllm tune` cached for it, else the
 * defaults above (tune.c, tune.h). */
struct wgllm_gpu_info;
const struct wgllm_wgsl_tune *wgllm_wgsl_tune_for(const struct wgllm_gpu_info *info);

/*
 * The uniform block every kernel reads at binding 0: 64 bytes, the WGSL
 * struct P that every generated kernel declares, twelve u32 fields n m k a
 * b c d e g h i j then four f32 f0..f3 (the WGSL keeps those letters: its
 * text is the pipeline cache's key and the layout is all the GPU sees).
 * What a slot means depends on the kernel, so the host fills the block
 * through the kernel's own view in union wgllm_kparams: named fields at the
 * offsets of the letters that kernel's WGSL reads (which letter each is
 * stands beside it; static asserts in kernels.c check every one), unused
 * slots named _x and left zero. The enum below describes each kernel in
 * the letters, as its WGSL reads them.
 */
struct wgllm_kp_raw {
    uint32_t n, m, k, a, b, c, d, e, g, h, i, j;
    float f0, f1, f2, f3;
};

/* MATVEC, MATMUL */
struct wgllm_kp_matvec {
    uint32_t rows;   /* n: weight rows computed (outputs per token) */
    uint32_t _m;
    uint32_t k;      /* k: elements per row (K), also x's stride per token */
    uint32_t w_off;  /* a: where W starts: u32 word (element for F32) */
    uint32_t x_off;  /* b: x element of token 0 */
    uint32_t y_off;  /* c: y element of token 0 (token t's row at y_off + t * rows) */
    uint32_t _d, _e, _g;
    union {
        uint32_t tokens;   /* h: MATMUL: tokens it may write (the last tile's extra rows are skipped) */
        uint32_t norm_off; /* h: a mat-vec with WGLLM_PRO_NORM: the norm's weights in B */
    };
    uint32_t _i;
    uint32_t epi;    /* j: what happens to each output before it is stored (WGLLM_EPI_*) */
    float scale;     /* f0: WGLLM_EPI_SCALE's factor */
    float cap;       /* f1: WGLLM_EPI_SOFTCAP's cap */
    float inv_cap;   /* f2: 1 / cap, rounded on the host as the CPU rounds it */
    float norm_eps;  /* f3: WGLLM_PRO_NORM's epsilon */
};
/* The mat-vec epilogue (kp_matvec.epi): the soft-cap first, then the scale,
 * in the CPU backend's order (final_softcap, then logit_scale); with ACC the
 * result is added to what y holds (a projection into the residual stream,
 * which then needs no ADD_ROWS of its own). */
enum { WGLLM_EPI_SOFTCAP = 1, WGLLM_EPI_SCALE = 2, WGLLM_EPI_ACC = 4 };

/* GET_ROWS */
struct wgllm_kp_get_rows {
    uint32_t _n, _m;
    uint32_t width;      /* k: elements per row */
    uint32_t w_off;      /* a: where the table starts (u32 word; element for F32) */
    uint32_t ids_off;    /* b: ids[ids_off + t] is token t's row */
    uint32_t y_off;      /* c: y element of token 0 (stride width) */
    uint32_t piece_row0; /* d: the first row this piece of a split table holds */
    uint32_t piece_rows; /* e: rows of the piece; 0: the whole table */
    uint32_t _g, _h, _i, _j;
    float scale;         /* f0: every element is multiplied by it (1: a plain gather; gemma's sqrt(n_embd)) */
    float _f1, _f2, _f3;
};

/* RMS_NORM */
struct wgllm_kp_rms_norm {
    uint32_t width; /* n: elements per row */
    uint32_t _m, _k;
    uint32_t x_off; /* a: x element of row 0 */
    uint32_t w_off; /* b: the norm's weights */
    uint32_t y_off; /* c: y element of row 0 */
    uint32_t add;   /* d: 1: y += norm * scale (a post-norm into the residual stream), 0: y = norm */
    uint32_t _e, _g, _h, _i, _j;
    float eps;      /* f0 */
    float scale;    /* f1: with add, the residual scale (1: none) */
    float _f2, _f3;
};

/* ROPE */
struct wgllm_kp_rope {
    uint32_t heads;      /* n */
    uint32_t n_rot;      /* m: rotated dims per head (cos/sin floats per token) */
    uint32_t head_dim;   /* k */
    uint32_t x_off;      /* a */
    uint32_t tok_stride; /* b: x elements per token */
    uint32_t cs_off;     /* c: the cos/sin table's token 0 */
    uint32_t _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* SWIGLU, GEGLU */
struct wgllm_kp_swiglu {
    uint32_t count; /* n: elements (all rows) */
    uint32_t _m, _k;
    uint32_t g_off; /* a */
    uint32_t u_off; /* b */
    uint32_t y_off; /* c */
    uint32_t _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* ARGMAX */
struct wgllm_kp_argmax {
    uint32_t count;  /* n: entries */
    uint32_t _m, _k;
    uint32_t x_off;  /* a */
    uint32_t out_at; /* b: the u32 word the index goes to */
    uint32_t _c, _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* ROUND_ACT */
struct wgllm_kp_round_act {
    uint32_t count; /* n: elements, a multiple of 32 (256 for Q8_K) */
    uint32_t _m, _k;
    uint32_t x_off; /* a */
    uint32_t _b;
    uint32_t y_off; /* c */
    uint32_t _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* ATTN_BATCH */
struct wgllm_kp_attn {
    uint32_t ring;     /* n: > 0: the caches are rings of `ring` rows per sequence, ROW[t] the token's ring row */
    uint32_t dv;       /* m: value head dims */
    uint32_t dk;       /* k: key head dims */
    uint32_t q_stride; /* a: q elements per token */
    uint32_t row_at;   /* b: ST[row_at + t] = token t's cache row */
    uint32_t len_at;   /* c: ST[len_at + t] = positions token t attends to */
    uint32_t o_stride; /* d: output elements per token */
    uint32_t k_stride; /* e: K cache elements per row */
    uint32_t gqa;      /* g: query heads per kv head */
    uint32_t window;   /* h: > 0: only the last `window` positions are attended (a sliding-window layer) */
    uint32_t v_stride; /* i: V cache elements per row */
    uint32_t temp_at;  /* j: > 0: ST[temp_at + t] = the f32 bits of token t's query temperature (mistral3) */
    float scale;       /* f0: the scores' factor (kq_scale, 1/sqrt(dk) by default) */
    float q_scale;     /* f1: q is multiplied by it before its f16 rounding (1: none) */
    float softcap;     /* f2: > 0: a score s becomes softcap * tanh(s / softcap) before the scale */
    float inv_softcap; /* f3: 1 / softcap, rounded on the host as the CPU rounds it */
};

/* STORE_KV */
struct wgllm_kp_store_kv {
    uint32_t words;    /* n: f16 pairs per token */
    uint32_t _m;
    uint32_t x_stride; /* k: x elements per token */
    uint32_t x_off;    /* a */
    uint32_t row_at;   /* b: ST[row_at + t] = token t's cache row */
    uint32_t y_off;    /* c: the cache's first word */
    uint32_t _d;
    uint32_t y_stride; /* e: cache words per row */
    uint32_t _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* ADD_ROWS */
struct wgllm_kp_add_rows {
    uint32_t width;    /* n: elements per row (x's stride per token) */
    uint32_t y_stride; /* m: y elements per token; 0: one row for all (a bias) */
    uint32_t _k;
    uint32_t x_off;    /* a */
    uint32_t y_off;    /* b */
    uint32_t _c, _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* ROPE_SHIFT_F16 */
struct wgllm_kp_rope_shift {
    uint32_t words;     /* n: u32 words (f16 pairs) to turn */
    uint32_t n_rot;     /* m */
    uint32_t head_dim;  /* k */
    uint32_t _a, _b;
    uint32_t y_off;     /* c: where the turned words go */
    uint32_t _d;
    uint32_t row_words; /* e: words per cache row */
    uint32_t _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* SAMPLE, SAMPLE_ROWS (which reads only n_vocab) */
struct wgllm_kp_sample {
    uint32_t n_vocab;      /* n */
    uint32_t _m;
    uint32_t top_k;        /* k */
    uint32_t x_off;        /* a: the logits row */
    uint32_t out_at;       /* b: the ST word the id goes to */
    uint32_t seed;         /* c: the seed's 32-bit hash */
    uint32_t len_at;       /* d: ST[len_at] = the position's attention length (the draw's counter) */
    uint32_t _e, _g;
    uint32_t private_slot; /* h: not read by the kernel; a marker that keeps the block out of the
                              parameter arena's sharing of equal blocks (forward_webgpu.c) */
    uint32_t _i, _j;
    float temperature;     /* f0 */
    float top_p;           /* f1: >= 1 off */
    float min_p;           /* f2: <= 0 off */
    float _f3;
};

/* LAYER_NORM (the encoder's, kernels_enc.c) */
struct wgllm_kp_layer_norm {
    uint32_t width;  /* n: elements per row */
    uint32_t _m, _k;
    uint32_t x_off;  /* a: x element of row 0 */
    uint32_t w_off;  /* b: the norm's weights */
    uint32_t b_off;  /* c: the norm's biases */
    uint32_t _d, _e, _g, _h, _i, _j;
    float eps;       /* f0 */
    float _f1, _f2, _f3;
};

/* GELU (the encoder's, kernels_enc.c) */
struct wgllm_kp_gelu {
    uint32_t count; /* n: elements (all rows) */
    uint32_t _m, _k;
    uint32_t x_off; /* a */
    uint32_t _b, _c, _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* MATVEC_ID (kernels_moe.c) */
struct wgllm_kp_matvec_id {
    uint32_t rows;     /* n: rows of one expert (outputs per choice) */
    uint32_t x_div;    /* m: choices per x row: n_expert_used (one input per token) or 1 (one per choice) */
    uint32_t k;        /* k: elements per row (K), also x's stride per row */
    uint32_t w_off;    /* a: where W starts: u32 word (element for F32) */
    uint32_t x_off;    /* b: x element of row 0 */
    uint32_t y_off;    /* c: y element of choice 0 (choice q's rows at y_off + q * rows) */
    uint32_t ids_at;   /* d: S[ids_at + t * used + j] = token t's j-th expert */
    uint32_t e0;       /* e: the first expert this piece of the stack holds */
    uint32_t n_exp;    /* g: experts in this piece (choices of others are skipped) */
    uint32_t used;     /* h: n_expert_used */
    uint32_t groups;   /* i: workgroups along x per choice (ceil(rows / rows_matvec)) */
    uint32_t _j;
    float _f0, _f1, _f2, _f3;
};

/* MOE_BUCKET (kernels_moe.c) */
struct wgllm_kp_moe_bucket {
    uint32_t n_expert; /* n: experts (at most 256) */
    uint32_t used;     /* m: n_expert_used */
    uint32_t _k;
    uint32_t ids_at;   /* a: S word of choice 0's expert id */
    uint32_t off_at;   /* b: S words [b, b + n]: where each expert's choices start in the list, then the total */
    uint32_t list_at;  /* c: S word of the list's first entry */
    uint32_t _d, _e, _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* MATMUL_ID (kernels_moe.c) */
struct wgllm_kp_matmul_id {
    uint32_t rows;    /* n: rows of one expert (outputs per choice) */
    uint32_t x_div;   /* m: as MATVEC_ID's: choices per x row (n_expert_used or 1) */
    uint32_t k;       /* k: elements per row (K), also x's stride per row */
    uint32_t w_off;   /* a: where W starts: u32 word (element for F32) */
    uint32_t x_off;   /* b: x element of row 0 */
    uint32_t y_off;   /* c: y element of choice 0 (choice q's rows at y_off + q * rows) */
    uint32_t list_at; /* d: S word of MOE_BUCKET's list */
    uint32_t e0;      /* e: the first expert this piece of the stack holds */
    uint32_t off_at;  /* g: S word of MOE_BUCKET's offsets */
    uint32_t _h;
    uint32_t tiles;   /* i: workgroups along x per expert (ceil(rows / mm_tile_n)) */
    uint32_t _j;      /* j: MATMUL's epilogue, none */
    float _f0, _f1, _f2, _f3;
};

/* MOE_ROUTE (kernels_moe.c) */
struct wgllm_kp_moe_route {
    uint32_t rows;     /* n: router rows (tokens) it may route; threads past it do nothing */
    uint32_t n_expert; /* m: logits per row */
    uint32_t used;     /* k: experts chosen per row */
    uint32_t l_off;    /* a: L element of row 0 */
    uint32_t ids_at;   /* b: S word of row 0's first id */
    uint32_t w_at;     /* c: S word of row 0's first weight (f32 bits) */
    uint32_t norm;     /* d: 1: the chosen weights renormalized to sum 1 */
    uint32_t softmax_w; /* e: 1: top-k of the raw logits, the weights their softmax (gpt-oss) */
    uint32_t _g, _h, _i, _j;
    float _f0, _f1, _f2, _f3;
};

/* MOE_BIAS, MOE_GLU_OAI (kernels_moe.c) */
struct wgllm_kp_moe_bias {
    uint32_t count;  /* n: elements of all the choices' rows */
    uint32_t width;  /* m: elements per choice's row (and per expert's bias) */
    uint32_t _k;
    uint32_t b_off;  /* a: V element of expert 0's bias (MOE_GLU_OAI: the gate's) */
    uint32_t ids_at; /* b: S word of choice 0's expert id */
    uint32_t u_off;  /* c: MOE_GLU_OAI: V element of expert 0's up bias */
    uint32_t _d, _e, _g, _h, _i, _j;
    float alpha;     /* f0: MOE_GLU_OAI's sigmoid factor */
    float limit;     /* f1: MOE_GLU_OAI's clamp */
    float _f2, _f3;
};

/* MOE_SUM (kernels_moe.c) */
struct wgllm_kp_moe_sum {
    uint32_t width;    /* n: elements per row (n_embd) */
    uint32_t used;     /* m: choices per token */
    uint32_t _k;
    uint32_t x_off;    /* a */
    uint32_t w_at;     /* b: S word of token 0's first weight (f32 bits) */
    uint32_t shared;   /* c: 0: no shared expert, 1: added as is, 2: times its sigmoid gate */
    uint32_t g_off;    /* d: G element of token 0's gate logit */
    uint32_t scaled;   /* e: 1: the sum is multiplied by f0 (granite's residual scale) */
    uint32_t _g, _h, _i, _j;
    float scale;       /* f0 */
    float _f1, _f2, _f3;
};

/* MATVEC_QKV (MATVEC_SWIGLU/GEGLU use wgllm_kp_matvec) */
struct wgllm_kp_matvec_qkv {
    uint32_t rows_q; /* n */
    uint32_t rows_k; /* m */
    uint32_t k;      /* k: elements per row, x's stride per token */
    uint32_t w_off;  /* a: 0 (each weight is a whole buffer) */
    uint32_t x_off;  /* b */
    uint32_t _c;
    uint32_t rows_v; /* d */
    uint32_t bq_off; /* e: with key.bias, the biases in B */
    uint32_t bk_off; /* g */
    uint32_t norm_off; /* h: with WGLLM_PRO_NORM, the norm's weights in B */
    uint32_t bv_off; /* i */
    uint32_t _j;
    float _f0, _f1, _f2;
    float norm_eps;  /* f3: WGLLM_PRO_NORM's epsilon */
};

/* ROPE_STORE */
struct wgllm_kp_rope_store {
    uint32_t heads;    /* n: q heads */
    uint32_t n_rot;    /* m */
    uint32_t head_dim; /* k */
    uint32_t q_stride; /* a */
    uint32_t k_stride; /* b: K elements per token (its cache row: b/2 words) */
    uint32_t cs_off;   /* c */
    uint32_t v_stride; /* d */
    uint32_t row_at;   /* e: ST[row_at + t] = token t's cache row */
    uint32_t _g;
    uint32_t rotate;   /* h: 1: q and k are rotated; 0: a layer without RoPE */
    uint32_t _i, _j;
    float _f0, _f1, _f2, _f3;
};

union wgllm_kparams {
    struct wgllm_kp_matvec_qkv matvec_qkv;
    struct wgllm_kp_rope_store rope_store;
    struct wgllm_kp_raw raw;
    struct wgllm_kp_matvec_id matvec_id;
    struct wgllm_kp_moe_route moe_route;
    struct wgllm_kp_moe_sum moe_sum;
    struct wgllm_kp_moe_bias moe_bias;
    struct wgllm_kp_moe_bucket moe_bucket;
    struct wgllm_kp_matmul_id matmul_id;
    struct wgllm_kp_matvec matvec;
    struct wgllm_kp_get_rows get_rows;
    struct wgllm_kp_rms_norm rms_norm;
    struct wgllm_kp_rope rope;
    struct wgllm_kp_swiglu swiglu;
    struct wgllm_kp_argmax argmax;
    struct wgllm_kp_round_act round_act;
    struct wgllm_kp_attn attn;
    struct wgllm_kp_store_kv store_kv;
    struct wgllm_kp_add_rows add_rows;
    struct wgllm_kp_rope_shift rope_shift;
    struct wgllm_kp_sample sample;
    struct wgllm_kp_layer_norm layer_norm;
    struct wgllm_kp_gelu gelu;
};

enum wgllm_kernel {
    /* y[c + t*n + r] = epi(dot(W row r, x[b + t*k ..])) for r < n rows, K = k; W
     * starts at u32 word a (element a for F32); epi per j (WGLLM_EPI_*: soft-cap
     * by f1, then scale by f0; j = 0: none). Bindings 1 W, 2 x, 3 y.
     * Dispatch (ceil(n / rows_matvec), tokens, 1). */
    WGLLM_KERNEL_MATVEC,
    /* y[c + t*k + e] = W row ids[b + t], element e < k, times f0. Bindings 1 W, 2 ids
     * (u32), 3 y. When e != 0, W holds only rows [d, d+e) of the table (one
     * piece of a table split across buffers): other ids are skipped and row
     * id is read at id - d. Dispatch (ceil(k / wg_elem), tokens, 1). */
    WGLLM_KERNEL_GET_ROWS,
    /* y[c + r*n ..] = x[a + r*n ..] / sqrt(mean(x^2) + f0) * w[b ..]; with d = 1
     * y[c + r*n ..] += that * f1 instead. Bindings 1 x, 2 w, 3 y. Dispatch (rows, 1, 1). */
    WGLLM_KERNEL_RMS_NORM,
    /* In place on x: token t's head hd at a + t*b + hd*k, n heads, n_rot m;
     * pair i turns by cos CS[c + t*m + 2i], sin CS[c + t*m + 2i + 1] (the
     * table of wgllm_op_rope_cache, made on the host). Bindings 1 x, 2 CS
     * (f32). Dispatch (ceil(n * m/2 / wg_elem), tokens, 1). */
    WGLLM_KERNEL_ROPE,
    /* y[c+i] = silu(g[a+i]) * u[b+i], i < n. Bindings 1 g, 2 u, 3 y.
     * Dispatch (ceil(n / wg_elem), 1, 1). */
    WGLLM_KERNEL_SWIGLU,
    /* out[b] = index of the largest x[a + i], i < n (first on ties). Bindings
     * 1 x, 2 out (u32). Dispatch (1, 1, 1). */
    WGLLM_KERNEL_ARGMAX,
    /* y[c+i] = x[a+i] rounded as the CPU backend rounds a mat-vec's input
     * for weights whose vec_dot_type is key.type: Q8_0 (blocks of 32 with
     * an f16 scale, as llama.cpp's activation quantizer), Q8_K (blocks of
     * 256 from a, an f32 scale: the K-quants' vec_dot_type) or F16. i < n, n
     * a multiple of 32 (256 for Q8_K). Bindings 1 x, 2 y. Dispatch
     * (ceil(n/32 / wg_elem), 1, 1): 32 elements per thread. */
    WGLLM_KERNEL_ROUND_ACT,
    /* Prefill mat-mat: as MATVEC (same bindings and offsets, K = k) for h
     * tokens: y[c + t*n + r] = dot(W row r, x[b + t*k ..]), r < n, t < h.
     * Weight tiles are dequantised once into workgroup memory and serve every
     * token of the tile (with tune mm_direct: once per thread, in registers,
     * for its mm_micro_m tokens). k a multiple of 32 for the block formats,
     * even for F16. Dispatch (ceil(n / mm_tile_n), ceil(h / mm_tile_m), 1). */
    WGLLM_KERNEL_MATMUL,
    /* y[c+i] = gelu(g[a+i]) * u[b+i], i < n, with ggml's CPU GELU: 0 at or below -10, x at or
     * above 10, else T's f16 entry for f16(x) (T: 65536 f16 in u32 pairs, the host's
     * wgllm_op_gelu_f16_table). Bindings 1 g, 2 u, 3 y, 4 T. Dispatch (ceil(n / wg_elem), 1, 1). */
    WGLLM_KERNEL_GEGLU,
    /* RMS_NORM (without d) that also writes its rows rounded as ROUND_ACT
     * rounds for vec_dot_type key.type: R[c + r*n ..] (n a multiple of 32,
     * 256 for Q8_K). Bindings 1 x, 2 w, 3 y, 4 R. Dispatch (rows, 1, 1). */
    WGLLM_KERNEL_RMS_NORM_ROUND,
    /* Batched kernels (kernels_attn.c; numbered apart so kernels above can be added freely).
     * ST is the step buffer: ROW[t] = ST[b + t] = seq * n_ctx + pos, LEN[t] = ST[c + t] = pos + 1.
     * ATTN_BATCH: token t = wid.y, head h = wid.x: O[t*d + h*m ..] = softmax(cap(f16(q * f1).K^T)
     * * f0) V (cap: f2 * tanh(s * f3) when f2 > 0) over the cache rows ROW[t]+1-L .. ROW[t], L =
     * LEN[t], or min(LEN[t], h) when h > 0; q at t*a + h*k; K row r of kv head h/g at r*e +
     * (h/g)*k, V at r*i + (h/g)*m (f16 caches; key.type F32: f32 K and V, and neither q nor the
     * probabilities rounded to f16, the encoder's all-f32 attention); head dims k, m. With n > 0 the caches are rings
     * of n rows per sequence (a sliding-window layer, backend/kv_window.h): ROW[t] = seq * n +
     * pos % n, and position q of the span is row ROW[t] - pos % n + q % n. Bindings 1 Q, 2 K, 3
     * V, 4 O, 5 ST. Dispatch (heads, tokens, 1).
     * STORE_KV: Y word c + ROW[t]*e + i = pack2x16float(x[a + t*k + 2i], x[.. + 1]), i < n.
     * Bindings 1 x, 2 ST, 3 Y. Dispatch (ceil(n / wg_elem), tokens, 1).
     * ADD_ROWS: x[a + t*n + i] += y[b + t*m + i], i < n (m = 0: a broadcast bias). Bindings 1 x,
     * 2 y. Dispatch (ceil(n / wg_elem), tokens, 1). */
    WGLLM_KERNEL_ATTN_BATCH = 64, WGLLM_KERNEL_STORE_KV, WGLLM_KERNEL_ADD_ROWS,
    /* Context shift of f16 keys: Y word p.c + w = the f16 pair of word w of S (rows of p.e words, heads
     * of p.k dims), turned by RoPE with the cos/sin pairs CS[0 .. p.m) (n_rot p.m; key.neox: NEOX
     * pairs), w < p.n. Bindings 1 S (u32), 2 CS (f32), 3 Y (u32). Dispatch (x, y, 1) with x * y >=
     * ceil(n / wg_elem) workgroups (the word index is gid.x + gid.y * x * wg_elem). */
    WGLLM_KERNEL_ROPE_SHIFT_F16,
    /* Sampling on the GPU, as the CPU sampler chain without penalties or bias: the top min(p.k, 64)
     * logits of X[p.a ..), p.n entries (largest first, lower index on ties), then top-p p.f1 (on
     * the probabilities at temperature 1; >= 1 off), min-p p.f2 (<= 0 off), temperature p.f0, and a
     * draw with u = a hash of the seed p.c and ST[p.d] (the token's attention length, so one per
     * position). The id goes to ST[p.b]. Bindings 1 X, 2 ST (u32). Dispatch (1, 1, 1). */
    WGLLM_KERNEL_SAMPLE,
    /* Sampling of several output rows at once (the engine's device sampling): workgroup w picks
     * for PR[8w ..] = {row, k, seed hash, position, temperature, top_p, min_p (f32 bits), mask} from
     * logits X[row * p.n ..) (p.n entries): the argmax (k == 0; first on ties, as ARGMAX) or
     * SAMPLE's chain with top min(k, 64) and the draw's u = the same hash of the seed and the
     * position. mask 0: every token; else only the tokens whose bit is set in the bitset
     * M[(mask - 1) * ceil(p.n / 32) ..) (bit t % 32 of word t / 32) are candidates, and k must then
     * be at most their number (>= 1). R[2w] = the id, R[2w + 1] = the f32 bits of its raw
     * log-softmax (the logit minus the log-sum-exp of the whole row, masked or not). Bindings 1 X,
     * 2 PR (u32, read), 3 R (u32), 4 M (u32, read). Dispatch (rows, 1, 1). */
    WGLLM_KERNEL_SAMPLE_ROWS,
    /* The encoder's (bert; kernels_enc.c). LAYER_NORM, in place: row r of X at a + r*n becomes
     * (x - mean) / sqrt(var + f0) * W[b ..] + W[c ..], as the CPU's wgllm_op_layer_norm (sums
     * without loss standing in for its doubles). Bindings 1 X, 2 W. Dispatch (rows, 1, 1).
     * GELU, in place: X[a+i] = GEGLU's GELU of X[a+i] (the CPU's f16 table T), i < n. Bindings
     * 1 X, 2 T. Dispatch (ceil(n / wg_elem), 1, 1). */
    WGLLM_KERNEL_LAYER_NORM,
    WGLLM_KERNEL_GELU,
    /* ATTN_BATCH over the f16 caches with a sink per head (gpt-oss): SK[h] joins the softmax's
     * max and denominator as one more score without a value. Bindings as ATTN_BATCH, 6 SK. */
    WGLLM_KERNEL_ATTN_SINK,
    /* Mixture of experts (kernels_moe.c; numbered apart as the batched ones). S is the routing
     * buffer (u32): each token's chosen experts and their weights (f32 bits), written by MOE_ROUTE
     * and read by the others, so the routing never leaves the GPU.
     * MATVEC_ID: MATVEC of the chosen experts of a stack (experts of p.n rows each, stacked as
     * in the file): choice q = t * h + j (token t = wid.y, j = wid.x / i) with expert id =
     * S[d + q] multiplies expert id's rows by x row q / m (the token's input, m = h, or the
     * choice's own, m = 1): Y[c + q*n + r] = dot(W row (id - e) * n + r, x[b + (q/m)*k ..]),
     * r < n, only when e <= id < e + g (one piece of a stack split across buffers holds
     * experts [e, e + g)). The weight format's one dequant routine is MATVEC's. Bindings 1 W,
     * 2 x, 3 Y, 4 S. Dispatch (i * h, tokens, 1).
     * MOE_ROUTE: for row t < n (t = gid.x): the softmax of L[a + t*m ..] (m logits, as the
     * CPU's wgllm_op_softmax), its k most probable experts (ties: the lower index) in
     * S[b + t*k ..] and their probabilities, divided by their sum (at least 2^-14) when d = 1,
     * as f32 bits in S[c + t*k ..]. m <= 256, k <= 64. Bindings 1 L, 2 S. Dispatch
     * (ceil(rows / wg_elem), 1, 1).
     * MOE_SUM: X[a + t*n + i] += f0? * (sum_j w_j * R[(t*m + j)*n + i] (+ SH[t*n + i], times
     * sigmoid(G[d + t]) when c = 2)), w_j = S[b + t*m + j] as f32, in the CPU's order. Bindings
     * 1 X, 2 R, 3 S, 4 SH, 5 G. Dispatch (ceil(n / wg_elem), tokens, 1).
     * MOE_ROUTE with e = 1 (gpt-oss): the k largest raw logits, their weights the softmax over
     * just those k.
     * MOE_BIAS: Y[i] += V[a + S[b + i/m]*m + i%m], i < n: each choice's row plus its expert's
     * bias (ggml_add_id). Bindings 1 Y, 2 S, 3 V. Dispatch (ceil(n / wg_elem), 1, 1).
     * MOE_GLU_OAI: with g = G[i] + the gate bias (at a) and u = U[i] + the up bias (at c) of
     * choice i/m's expert, Y[i] = x * sigmoid(f0 x) * (v + 1), x = min(g, f1), v = clamp(u, -f1,
     * f1) (SwiGLU-OAI). Bindings 1 G, 2 U, 3 Y, 4 S, 5 V. Dispatch as MOE_BIAS.
     * MOE_BUCKET: the routing of the pass's T tokens (T = the grid's y; workgroups past the
     * first do nothing) grouped by expert: S[b + e] = the choices of experts below e, S[b + n]
     * = T * m, and S[c + S[b + e] ..] the choices q = t*m + j with S[a + q] = e, in order of q.
     * n <= 256. Bindings 1 S. Dispatch (1, tokens, 1).
     * MATMUL_ID: MATVEC_ID for the choices MOE_BUCKET listed, as MATMUL does it (the same tiles
     * and per-element sums): workgroup (x, y) takes expert e + x / i (of this piece, its rows at
     * (x / i) * n), rows (x % i) * mm_tile_n .., and the expert's choices y * mm_tile_m .. of
     * the list; Y[c + q*n + r] = dot(W row, x[b + (q/m)*k ..]). Bindings 1 W, 2 x, 3 Y, 4 S.
     * Dispatch (i * experts of the piece, ceil(tokens / mm_tile_m), 1): an expert gets at most
     * one choice per token. */
    WGLLM_KERNEL_MATVEC_ID = 96, WGLLM_KERNEL_MOE_ROUTE, WGLLM_KERNEL_MOE_SUM, WGLLM_KERNEL_MOE_BIAS,
    WGLLM_KERNEL_MOE_GLU_OAI, WGLLM_KERNEL_MOE_BUCKET, WGLLM_KERNEL_MATMUL_ID,
    /* Fused decode kernels (kernels_fused.c): fewer dispatches per layer, each
     * giving the bits of the kernels it replaces (same products, same
     * reduction order, same final expressions). The mat-vecs take MATVEC's
     * workgroup shapes and each weight's one format routine.
     * MATVEC_QKV: the q, k and v mat-vecs of one input (types type, type2,
     * type3): rows R < n of W0 into Y0[t*n + R], then m rows of W1 into
     * Y1[t*m ..], then d rows of W2 into Y2[t*d ..], x at b + t*k, K = k;
     * with key.bias plus B[e + R] (q), B[g + R] (k), B[i + R] (v). Bindings
     * 1 W0, 2 W1, 3 W2, 4 x, 5 Y0, 6 Y1, 7 Y2 (8 B). Dispatch
     * (ceil((n + m + d) / rows_matvec), tokens, 1).
     * With key.pro (any of the three mat-vecs, MATVEC too): x is the
     * unrounded row (WGLLM_PRO_ROUND) or the row before its RMSNorm
     * (WGLLM_PRO_NORM, weights at B[h], epsilon f3), K = key.kx; B (the
     * vectors) is then bound after the kernel's other bindings (MATVEC 4,
     * QKV 8 as its biases', GLU 5, GEGLU 6).
     * MATVEC_SWIGLU / MATVEC_GEGLU: the gate (type) and up (type2) mat-vecs
     * of one input and the GLU of their rows, as MATVEC then SWIGLU/GEGLU:
     * Y[c + t*n + R] = act(dot(Wg row R, x)) * dot(Wu row R, x), R < n, x at
     * b + t*k. Bindings 1 Wg, 2 Wu, 3 x, 4 Y (GEGLU: 5 T). Dispatch
     * (ceil(n / rows_matvec), tokens, 1).
     * ROPE_STORE: ROPE of q in place (n heads, head dim k, n_rot m, token
     * stride a; only when h = 1), and K and V stored as STORE_KV stores them:
     * K (token stride b, rotated as ROPE would when h = 1) into KC row
     * ST[e + t] (b/2 words a row), V (token stride d) into VC the same way;
     * cos/sin at CS[c + t*m ..]. Bindings 1 Q, 2 K, 3 V, 4 CS, 5 ST, 6 KC,
     * 7 VC. Dispatch (ceil((h ? n*m/2 : 0) + b/2 + d/2) / wg_elem), tokens, 1). */
    WGLLM_KERNEL_MATVEC_QKV = 128, WGLLM_KERNEL_MATVEC_SWIGLU, WGLLM_KERNEL_MATVEC_GEGLU, WGLLM_KERNEL_ROPE_STORE,
};

struct wgllm_kernel_key {
    enum wgllm_kernel kernel;
    uint32_t type; /* weight type (MATVEC, GET_ROWS, MATMUL), vec_dot type (ROUND_ACT) or cache type (ATTN_BATCH) */
    bool neox;     /* ROPE */
    /* the fused mat-vecs' other weights: MATVEC_QKV's k and v types,
     * MATVEC_SWIGLU/GEGLU's up type (type2), and whether MATVEC_QKV adds biases */
    uint32_t type2, type3;
    bool bias;
    /* The mat-vecs' prologue (MATVEC, MATVEC_QKV, MATVEC_SWIGLU/GEGLU;
     * kernels_fused.c): WGLLM_PRO_NONE reads x rounded already (xr);
     * WGLLM_PRO_ROUND reads x as it is and each workgroup rounds the token's
     * row for the weights' vec_dot_type into workgroup memory (packed: int8
     * and a scale per block, or 16-bit halves) before its rows, as
     * ROUND_ACT would; WGLLM_PRO_NORM first takes x's RMSNorm (weights at
     * B[h], epsilon f3) as RMS_NORM_ROUND would. kx: K (the array's length
     * is part of the text). pro_f32: the rounded row kept as f32 values
     * instead (4K bytes; read as they are, where the packed row costs an
     * unpacking per element: 2x a mat-vec's time on SwiftShader). */
    uint8_t pro;
    bool pro_f32;
    uint32_t kx;
};
enum { WGLLM_PRO_NONE, WGLLM_PRO_ROUND, WGLLM_PRO_NORM };
/* Bytes of workgroup memory a mat-vec with a prologue takes under tune (0:
 * the key's weights need no rounding or the prologue has no version for
 * them), to be held against the device's limit. */
uint32_t wgllm_wgsl_pro_bytes(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
/* kernels.c's round32 (ROUND_ACT's body: div_rn and the helpers it needs
 * beside the f16 ones) for vec_dot_type `type`, storing through
 * rstore_q(i, q, d) (Q8 types: value f32(q) * d) or rstore_f(i, v), which
 * the caller defines; RX is the source (malloc'd; kernels_fused.c). */
char *wgllm_wgsl_round32(uint32_t type);
/* kernels.c's mat-vec epilogue epi()/put() over Y (needs tanh_f). */
const char *wgllm_wgsl_epi_helper(void);

/* The WGSL after the parameter block of the batched kernels (malloc'd; kernels_attn.c). */
char *wgllm_wgsl_batch_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
const char *wgllm_wgsl_batch_kernel_name(enum wgllm_kernel k);
/* w8() of a grid format (IQ2_XXS..IQ1_M) with its grid constants, after
 * kernels.c's byte readers (malloc'd; NULL for another type or out of
 * memory; kernels_iquants.c). */
char *wgllm_wgsl_iq_w8(uint32_t type);
/* kernels.c's WGSL helpers (to_f16 by integer rounding, two_sum, div_exact) for kernels_attn.c. */
const char *wgllm_wgsl_f16_helpers(void);
/* kernels.c's tanh_f (the soft-caps' tanh) for kernels_attn.c. */
const char *wgllm_wgsl_tanh_helper(void);
/* kernels.c's gelu (GEGLU's table lookup; needs the f16 helpers and T) for kernels_enc.c. */
const char *wgllm_wgsl_gelu_helper(void);
/* The WGSL after the parameter block of the encoder's kernels (malloc'd; kernels_enc.c), NULL
 * for another kernel; and their names. */
char *wgllm_wgsl_encoder_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
const char *wgllm_wgsl_encoder_kernel_name(enum wgllm_kernel k);
/* The fused kernels' WGSL after the parameter block (malloc'd; kernels_fused.c), and their names. */
char *wgllm_wgsl_fused_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
const char *wgllm_wgsl_fused_kernel_name(enum wgllm_kernel k);
/* wgllm_wgsl_all_keys' share: the mat-vecs with a prologue (K = 4096, packed
 * and f32 rows) after the n keys there are, up to cap; returns the new n. */
int wgllm_wgsl_fused_pro_keys(struct wgllm_kernel_key *out, int n, int cap);
/* The MoE kernels' WGSL after the parameter block (malloc'd; kernels_moe.c). */
char *wgllm_wgsl_moe_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
const char *wgllm_wgsl_moe_kernel_name(enum wgllm_kernel k);
/* kernels.c's mat-mat (MATMUL's two shapes: tiles in workgroup memory, or
 * mm_direct) after the parameter block, for weight type `type`, with the
 * map of its tiles given as WGSL (malloc'd; NULL: no such format). X is
 * binding 2, Y binding 3 (stored through MATMUL's put, p.j its epilogue);
 * the map defines fn tile(wid) -> vec2<u32> (the tile's first weight row,
 * and how many tokens there are: the tile's tokens are wid.y * mm_tile_m ..
 * below it), fn wrow(r) (row_base of tile row r), fn xat(t) (x element of
 * token t's row) and fn yat(t) (y element of token t's output row 0), and
 * may declare more bindings and private state for them. For MATMUL_ID. */
char *wgllm_wgsl_mm(uint32_t type, const struct wgllm_wgsl_tune *tune, const char *map);
/* kernels.c's format functions of a weight type (malloc'd; NULL: no such
 * format): W at binding 1, row_base, wget and, with_dot, rdot over X at
 * binding 2 (as MATVEC's), for kernels_moe.c's MATVEC_ID. */
char *wgllm_wgsl_format(uint32_t type, bool with_dot);

/* True when the kernel has a version for the type (F32/F16/Q8_0/Q4_0 and
 * the 8-element-unit formats of kernels.c's w8_block, Q4_K/Q5_K/Q6_K..., for
 * weights; Q8_0/Q8_1/Q8_K/F16/BF16 for ROUND_ACT; any type for the rest). */
bool wgllm_wgsl_supports(enum wgllm_kernel k, uint32_t type);
/* The WGSL source (malloc'd, free with free), NULL when unsupported. */
char *wgllm_wgsl_generate(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
/* Short label for messages ("matvec_q4_0"). */
const char *wgllm_wgsl_kernel_name(enum wgllm_kernel k);
/* Every kernel source the generator makes for a tune: each kernel with each
 * type it has a version for (the weight kernels: every weight format;
 * ROUND_ACT: its vec_dot types; the rest: the one type the backend asks
 * for) and, for the RoPE kernels, both pair layouts. Writes up to cap keys
 * and returns how many there are. For `wgllm devices --dump-wgsl` and the
 * generated-WGSL hash test (tests/test_webgpu_wgsl.c). */
int wgllm_wgsl_all_keys(struct wgllm_kernel_key *out, int cap);
/* A key as a file-name-safe label: "matvec_q4_0", "rope_neox_f32". */
void wgllm_wgsl_key_label(const struct wgllm_kernel_key *key, char *buf, size_t cap);
/* Writes every source of wgllm_wgsl_all_keys under `tune` as DIR/LABEL.wgsl
 * (the folder is made when missing), exactly the text the backend compiles;
 * *n_files: how many were written. IO errors name the path. */
enum wgllm_status wgllm_wgsl_dump(const char *dir, const struct wgllm_wgsl_tune *tune, int *n_files,
                                  struct wgllm_error *err);
/* Checks a tune against the kernels' own rules (powers of two, tiles that
 * divide, at most max_invocations threads and max_wg_storage bytes of
 * workgroup memory per kernel). False with the first problem in why. */
bool wgllm_wgsl_tune_valid(const struct wgllm_wgsl_tune *t, uint32_t max_invocations, uint32_t max_wg_storage,
                           char *why, size_t why_cap);

#endif
