/*
 * kernels.h - the WGSL kernel generator of the WebGPU backend: WGSL text
 * made in C per kernel, per weight (or KV-cache) format and per tunable.
 * Weights stay in their GGUF block layout in flat array<u32> buffers (Q8_0
 * blocks are 34 bytes, Q4_0 18: not word aligned, so kernels unpack bytes
 * from u32 words); F16 is read as u32 pairs with unpack2x16float. All
 * arithmetic is f32 (an f16 path needs shader-f16, which SwiftShader lacks).
 *
 * Every kernel reads its parameters from binding 0, a uniform block laid out
 * as struct wgllm_kparams; the other bindings are listed per kernel below.
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
};
const struct wgllm_wgsl_tune *wgllm_wgsl_default_tune(void);
/* Defaults for software (CPU) adapters such as SwiftShader, where workgroup
 * barriers are expensive: mat-vec rows per thread instead of reductions. */
const struct wgllm_wgsl_tune *wgllm_wgsl_cpu_adapter_tune(void);
/* The tune to use on an adapter: what `wgllm tune` cached for it, else the
 * defaults above (tune.c, tune.h). */
struct wgllm_gpu_info;
const struct wgllm_wgsl_tune *wgllm_wgsl_tune_for(const struct wgllm_gpu_info *info);

/* The uniform block of every kernel (64 bytes; fields named by use below). */
struct wgllm_kparams {
    uint32_t n, m, k, a, b, c, d, e, g, h, i, j;
    float f0, f1, f2, f3;
};

enum wgllm_kernel {
    /* y[c + t*n + r] = dot(W row r, x[b + t*k ..]) for r < n rows, K = k; W
     * starts at u32 word a (element a for F32). Bindings 1 W, 2 x, 3 y.
     * Dispatch (ceil(n / rows_matvec), tokens, 1). */
    WGLLM_KERNEL_MATVEC,
    /* y[c + t*k + e] = W row ids[b + t], element e < k. Bindings 1 W, 2 ids
     * (u32), 3 y. When e != 0, W holds only rows [d, d+e) of the table (one
     * piece of a table split across buffers): other ids are skipped and row
     * id is read at id - d. Dispatch (ceil(k / wg_elem), tokens, 1). */
    WGLLM_KERNEL_GET_ROWS,
    /* y[c + r*n ..] = x[a + r*n ..] / sqrt(mean(x^2) + f0) * w[b ..]. Bindings
     * 1 x, 2 w, 3 y. Dispatch (rows, 1, 1). */
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
    /* Batched kernels (kernels_attn.c; numbered apart so kernels above can be added freely).
     * ST is the step buffer: ROW[t] = ST[b + t] = seq * n_ctx + pos, LEN[t] = ST[c + t] = pos + 1.
     * ATTN_BATCH: token t = wid.y, head h = wid.x: O[t*d + h*m ..] = softmax(q.K^T * f0) V over
     * the cache rows ROW[t]+1-LEN[t] .. ROW[t]; q at t*a + h*k; K row r of kv head h/g at r*e +
     * (h/g)*k, V at r*i + (h/g)*m (f16 caches); head dims k, m. Bindings 1 Q, 2 K, 3 V, 4 O, 5 ST.
     * Dispatch (heads, tokens, 1).
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
     * for PR[8w ..] = {row, k, seed hash, position, temperature, top_p, min_p (f32 bits), 0} from
     * logits X[row * p.n ..) (p.n entries): the argmax (k == 0; first on ties, as ARGMAX) or
     * SAMPLE's chain with top min(k, 64) and the draw's u = the same hash of the seed and the
     * position. R[2w] = the id, R[2w + 1] = the f32 bits of its raw log-softmax (the logit minus
     * the row's log-sum-exp). Bindings 1 X, 2 PR (u32, read), 3 R (u32). Dispatch (rows, 1, 1). */
    WGLLM_KERNEL_SAMPLE_ROWS,
};

struct wgllm_kernel_key {
    enum wgllm_kernel kernel;
    uint32_t type; /* weight type (MATVEC, GET_ROWS, MATMUL), vec_dot type (ROUND_ACT) or cache type (ATTN_BATCH) */
    bool neox;     /* ROPE */
};

/* The WGSL after the parameter block of the batched kernels (malloc'd; kernels_attn.c). */
char *wgllm_wgsl_batch_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune);
const char *wgllm_wgsl_batch_kernel_name(enum wgllm_kernel k);
/* kernels.c's WGSL helpers (to_f16 by integer rounding, two_sum, div_exact) for kernels_attn.c. */
const char *wgllm_wgsl_f16_helpers(void);

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
