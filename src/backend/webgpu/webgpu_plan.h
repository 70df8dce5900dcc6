/*
 * webgpu_plan.h - the WebGPU memory plan's sizes, computed without a
 * device: what every buffer of a context will take for a model, the
 * device's limits and the caller's n_ctx / n_seq / n_batch / gpu_mem, with
 * n_batch, the output rows per pass and n_ctx shrunk to fit (webgpu_plan.c
 * does the fitting, then allocates from these numbers).
 *
 * Every size is 64-bit arithmetic that saturates instead of wrapping (a
 * product past 2^64 stays "more than 2^64" and fails every limit), and every
 * buffer is then checked against the device's maxBufferSize and, when it is
 * bound as storage, maxStorageBufferBindingSize; the host arrays' element
 * counts are checked to fit size_t (32 bits on wasm32; wgllm_size_limit
 * emulates that in tests). So a hostile file or caller gets an error naming
 * the quantity ("the logits buffer needs X bytes, the device allows Y")
 * instead of a small wrapped size and the out-of-bounds writes after it.
 *
 * Split from webgpu_internal.h so that tests drive it with any limits and
 * hyper-parameters, no device needed (tests/test_webgpu_plan.c).
 */
#ifndef WGLLM_WEBGPU_PLAN_H
#define WGLLM_WEBGPU_PLAN_H

#include "base/base.h"

/* Most pieces one weight is split into (struct gweight, webgpu_internal.h). */
#define MAX_PIECES 16
/* regions of n_batch words in the step buffer (webgpu_internal.h's step); the last (ring rows) only with a ring */
#define WGLLM_STEP_REGIONS 6

struct wgllm_model;
struct wgllm_weight;
struct wgllm_gpu_info;
struct wgllm_wgsl_tune;

/* What the plan needs to know of the device and of the kernels' tune. */
struct wgllm_webgpu_limits {
    uint64_t max_buffer_size;          /* maxBufferSize: any buffer */
    uint64_t max_storage_binding_size; /* maxStorageBufferBindingSize: a buffer bound as storage */
    uint64_t max_weight_bytes;         /* a lower cap on a weight piece (WGLLM_WEBGPU_MAX_WEIGHT_BYTES); 0: none */
    uint32_t max_workgroups_per_dim;
    uint32_t max_wg_storage;           /* maxComputeWorkgroupStorageSize (or WGLLM_WEBGPU_MAX_WG_STORAGE, lower) */
    uint32_t wg_elem, rows_matvec, wg_attn, attn_max_dims; /* struct wgllm_wgsl_tune's */
};

/* The limits of an open device with its tune (and the environment's cap). */
void wgllm_webgpu_limits_of(const struct wgllm_gpu_info *info, const struct wgllm_wgsl_tune *tune,
                            struct wgllm_webgpu_limits *lim);

/* The activation buffers of n_batch (or out_cap) rows, in the order
 * webgpu_plan.c creates them. */
enum wgllm_webgpu_act {
    WGLLM_ACT_X, WGLLM_ACT_XN, WGLLM_ACT_Q, WGLLM_ACT_K, WGLLM_ACT_V, WGLLM_ACT_ATT, WGLLM_ACT_TMP, WGLLM_ACT_GATE,
    WGLLM_ACT_UP, WGLLM_ACT_FFH, WGLLM_ACT_QR, WGLLM_ACT_KR, WGLLM_ACT_XR, WGLLM_ACT_XO, WGLLM_ACT_ATT_O,
    WGLLM_ACT_COUNT
};
extern const char *const wgllm_webgpu_act_names[WGLLM_ACT_COUNT];

struct wgllm_webgpu_sizes {
    /* in: what the caller asks (each >= 1; gpu_mem 0: no budget); out: what was planned */
    int n_ctx, n_seq, n_batch;
    uint64_t gpu_mem;
    bool swa_full;      /* sliding-window layers keep all n_ctx positions (no ring, kv_window.h) */
    /* out */
    int ring;           /* cells a sliding-window layer keeps per sequence; 0: no ring */
    int out_cap;        /* output rows per pass */
    uint64_t estimate;  /* what the plan is expected to take on the device */
    char note[320];     /* what shrank and why ("" when nothing) */
    /* bytes of each buffer as it is created (the device rounds them up to 16) */
    uint64_t step, readback, samp_in, samp_out, samp_mask, vectors, k_cache, v_cache, shift, logits, rope_cs;
    uint64_t k_ring, v_ring; /* a sliding-window layer's K and V caches with a ring (else k_cache, v_cache) */
    uint64_t gelu_table;   /* GeGLU's f16 table (65536 entries); 0: a SwiGLU model */
    uint64_t rope_swa_off; /* bytes: where the sliding-window layers' cos/sin table starts in rope_cs
                              (a binding offset, so 256-aligned); 0: they share the global one */
    uint64_t act[WGLLM_ACT_COUNT]; /* 0: not created (qr, kr without q/k norms) */
    /* element counts of the host arrays, known to fit size_t */
    size_t step_host, rope_host, samp_host, samp_row;
};

/*
 * Fits the plan and fills *sz (see above). Errors, each naming the
 * quantity: hyper-parameters or counts that are 0 or out of range
 * (INVALID_ARGUMENT), a buffer that cannot fit the device's limits even at
 * one token, one position and n_seq output rows (UNSUPPORTED), a budget too
 * small for the weights and scratch (OUT_OF_MEMORY).
 */
enum wgllm_status wgllm_webgpu_plan_sizes(const struct wgllm_model *m, const struct wgllm_webgpu_limits *lim,
                                          struct wgllm_webgpu_sizes *sz, struct wgllm_error *err);

/* Rows per piece of a weight split to fit a binding and the mat-vec's
 * dispatch limit (whole u32 words per piece), and how many pieces (at most
 * MAX_PIECES of webgpu_internal.h). Errors name the tensor. */
enum wgllm_status wgllm_webgpu_weight_rows(const struct wgllm_webgpu_limits *lim, const struct wgllm_weight *w,
                                           int64_t *max_rows, int *n_pieces, struct wgllm_error *err);

#endif
