/*
 * matmul.h - the CPU backend's matrix products, shared by the decoder pass
 * (forward.c) and the encoder (encoder.c): activation rows are converted to
 * the weight type's vec_dot_type first, as ggml does, then each thread
 * computes its share of the weight's rows (through the repacked kernel of
 * quant/repack.h when the weight has one).
 */
#ifndef WGLLM_CPU_MATMUL_H
#define WGLLM_CPU_MATMUL_H

#include "base/base.h"
#include "model/model.h"
#include "quant/quant.h"

/* Activation rows in a weight's vec_dot_type: row t starts at data + t * stride. */
struct wgllm_cpu_act {
    const void *data;
    size_t stride;
};

/* Converts rows [0,n) of src (ld floats apart, K each) to `type` into buf
 * (cap bytes), each thread of nth its share; F32 is used in place. All
 * threads must meet at a barrier before the rows are read. */
struct wgllm_cpu_act wgllm_cpu_act_prepare(void *buf, size_t cap, int ith, int nth, const float *src, int ld, int n,
                                           int64_t K, uint32_t type);

/* y[t*ldy + r] (+)= W[r] . x[t] (+ bias[r]) for rows r0..r1 of W. */
void wgllm_cpu_matmul_range(const struct wgllm_weight *w, struct wgllm_cpu_act x, int n, float *y, int ldy,
                            int64_t r0, int64_t r1, bool accumulate, const float *bias);

/* The same for thread ith of nth's share of W's rows. */
void wgllm_cpu_matmul(const struct wgllm_weight *w, struct wgllm_cpu_act x, int n, float *y, int ldy, int ith,
                      int nth, bool accumulate, const float *bias);

/* The model's matrices that have a repacked kernel on this CPU (Q4_0/Q8_0,
 * and K-quants on x86-64: quant/repack.h) in the repacked layout, made by the first
 * CPU context of the model (decoder or encoder) and shared by the later ones;
 * WGLLM_NO_REPACK=1 keeps the GGUF layout. */
enum wgllm_status wgllm_cpu_weights_prepare(struct wgllm_model *m, struct wgllm_error *err);

static inline uint32_t wgllm_cpu_vdt(const struct wgllm_weight *w) {
    return wgllm_type_traits(w->type)->vec_dot_type;
}

#endif
