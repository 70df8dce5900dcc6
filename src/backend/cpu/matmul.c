/*
 * matmul.c - the CPU backend's matrix products (matmul.h), moved out of
 * forward.c so that the encoder multiplies exactly as the decoder does.
 */
#include "backend/cpu/matmul.h"

#include "base/threadpool.h"
#include "quant/gemm.h"
#include "quant/quant.h"
#include "quant/repack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct wgllm_cpu_act wgllm_cpu_act_prepare(void *buf, size_t cap, int ith, int nth, const float *src, int ld, int n,
                                           int64_t K, uint32_t type) {
    if (type == WGLLM_TYPE_F32) return (struct wgllm_cpu_act){src, (size_t)ld * sizeof(float)};
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    size_t stride = wgllm_row_size(type, K);
    WGLLM_ASSERT(stride * (size_t)n <= cap);
    char *dst = buf;
    int64_t lo, hi;
    if (n >= nth) {
        wgllm_split_range(n, ith, nth, 1, &lo, &hi);
        for (int64_t t = lo; t < hi; t++) tr->from_float(src + t * ld, dst + t * stride, K);
    } else {
        /* few rows (decode): split each row by blocks instead */
        int64_t nb = K / tr->blck_size;
        wgllm_split_range(nb, ith, nth, 1, &lo, &hi);
        if (hi > lo)
            for (int t = 0; t < n; t++)
                tr->from_float(src + t * ld + lo * tr->blck_size, dst + t * stride + (size_t)lo * tr->type_size,
                               (hi - lo) * tr->blck_size);
    }
    return (struct wgllm_cpu_act){dst, stride};
}

/* y[t*ldy + r] (+)= W[r] . x[t] for this thread's share of the rows r0..r1. */
static void matmul_rows(const struct wgllm_weight *w, struct wgllm_cpu_act x, int n, float *y, int ldy, int64_t r0,
                        int64_t r1, bool accumulate, const float *bias) {
    const struct wgllm_type_traits *tt = wgllm_type_traits(w->type);
    const wgllm_vec_dot_fn dot = tt->vec_dot;
    const char *wd = w->copy && !w->copy_panels ? w->copy : w->data;
    enum { RB = 16, TB = 8 };
    /* Several tokens: each weight block is unpacked once per tile of TB
     * tokens (bit-identical to vec_dot, so prompt == token by token). */
    if (tt->vec_dot_mt && n >= 2) {
        for (int64_t rb = r0; rb < r1; rb += RB) {
            const int64_t re = WGLLM_MIN(r1, rb + RB);
            for (int t0 = 0; t0 < n; t0 += TB) {
                const int nt = WGLLM_MIN(TB, n - t0);
                const char *xt = (const char *)x.data + (size_t)t0 * x.stride;
                for (int64_t r = rb; r < re; r++) {
                    float s[TB];
                    tt->vec_dot_mt(w->ne0, s, 1, wd + (size_t)r * w->row_size, xt, x.stride, nt);
                    for (int k = 0; k < nt; k++) {
                        float *yr = y + (size_t)(t0 + k) * ldy + r;
                        const float v = bias ? s[k] + bias[r] : s[k];
                        *yr = accumulate ? *yr + v : v;
                    }
                }
            }
        }
        return;
    }
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = WGLLM_MIN(r1, rb + RB);
        for (int t = 0; t < n; t++) {
            const char *xt = (const char *)x.data + (size_t)t * x.stride;
            float *yt = y + (size_t)t * ldy;
            for (int64_t r = rb; r < re; r++) {
                float s;
                dot(w->ne0, &s, wd + (size_t)r * w->row_size, xt);
                if (bias) s += bias[r];
                yt[r] = accumulate ? yt[r] + s : s;
            }
        }
    }
}

/* Rows r0..r1 (multiples of 16 except at the end) through the repacked
 * kernel when the weight has one, float weights through the tiled GEMM,
 * else row by row. */
void wgllm_cpu_matmul_range(const struct wgllm_weight *w, struct wgllm_cpu_act x, int n, float *y, int ldy,
                            int64_t r0, int64_t r1, bool accumulate, const float *bias) {
    if (r1 <= r0) return;
    if (w->rp) {
        wgllm_repacked_matmul(w->rp, r0, r1, x.data, x.stride, n, y, ldy, accumulate);
    } else if (w->copy_panels) {
        WGLLM_ASSERT(r0 % WGLLM_GEMM_PANEL_ROWS == 0 && r1 % WGLLM_GEMM_PANEL_ROWS == 0);
        if (!wgllm_gemm_panels(w->type, w->ne0, (const char *)w->copy + (size_t)r0 * w->row_size, r1 - r0, x.data,
                               x.stride, n, y + r0, ldy, accumulate)) {
            matmul_rows(w, x, n, y, ldy, r0, r1, accumulate, bias); /* no scratch: the file's rows */
            return;
        }
    } else {
        /* float weights: the tiled GEMM for a mat-vec too, so that a prompt
         * and its tokens one by one give the same bits */
        const wgllm_gemm_fn gemm = wgllm_gemm_kernel(w->type, NULL);
        const char *wd = w->copy ? w->copy : w->data;
        if (!gemm || !gemm(w->type, w->ne0, wd + (size_t)r0 * w->row_size, w->row_size, r1 - r0,
                           x.data, x.stride, n, y + r0, ldy, accumulate)) {
            matmul_rows(w, x, n, y, ldy, r0, r1, accumulate, bias);
            return;
        }
    }
    if (bias)
        for (int t = 0; t < n; t++)
            for (int64_t r = r0; r < r1; r++) y[(size_t)t * ldy + r] += bias[r];
}

void wgllm_cpu_matmul(const struct wgllm_weight *w, struct wgllm_cpu_act x, int n, float *y, int ldy, int ith,
                      int nth, bool accumulate, const float *bias) {
    int64_t r0, r1;
    wgllm_split_range(w->ne1, ith, nth, 16, &r0, &r1);
    wgllm_cpu_matmul_range(w, x, n, y, ldy, r0, r1, accumulate, bias);
}

/* ---- the CPU's weight layouts ---------------------------------------------- */

/* A matrix this CPU has a repacked kernel for; a stack of experts when each
 * expert's rows are whole panels (the repacked stack is then its experts'
 * repacked matrices one after another: forward.c's expert_view). */
static bool repackable(const struct wgllm_weight *w) {
    if (w->n_expert > 0)
        return w->ne1 % w->n_expert == 0 && wgllm_repack_supported(w->type, w->ne0, w->ne1 / w->n_expert);
    return wgllm_repack_supported(w->type, w->ne0, w->ne1);
}

/* The copies below are anonymous memory where the file's pages could be
 * evicted and read again: a model whose copies would take more than half of
 * this machine's memory keeps those matrices in the file's layout. Not in the
 * wasm build, whose file is already a copy in its heap. */
static bool fits_half_memory(uint64_t bytes) {
#if defined(__EMSCRIPTEN__)
    (void)bytes;
    return false;
#else
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages <= 0 || page <= 0 || bytes <= (uint64_t)pages * (uint64_t)page / 2;
#endif
}

/* Experts are repacked as llama.cpp's CPU backend repacks them (its
 * MUL_MAT_ID kernels read only the repacked layout): a decode reads a few
 * experts' rows, as fast as a dense matrix's then; within half the memory. */
static bool repack_experts(struct wgllm_weight *const *mats, int n) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (repackable(mats[i])) total += mats[i]->row_size * (uint64_t)mats[i]->ne1;
    return fits_half_memory(total);
}

/* A matrix with no repacked kernel (F16, BF16, F32, MXFP4, the other
 * i-quants; Q2_K to Q6_K on CPUs without theirs) is copied into memory on
 * transparent huge pages, where the kernel lends them (Linux, THP not
 * "never"), so that the decode's stream of its rows is not one TLB miss per
 * 4 KiB: as it is, or F16 and BF16 in the GEMM's panel layout where this
 * CPU has that kernel (quant/gemm.h; the same bytes in another order). The
 * file's mapping stays for token_embd (its rows are looked up per token) and
 * for streamed weights. */
static bool copy_plain(const struct wgllm_model *m, struct wgllm_weight *const *mats, int n, bool experts) {
    if (!wgllm_huge_pages_available()) return false;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const struct wgllm_weight *w = mats[i];
        if (w->data && w->data != m->tok_embd.data && !(repackable(w) && (w->n_expert == 0 || experts)))
            total += w->row_size * (uint64_t)w->ne1;
    }
    return total > 0 && fits_half_memory(total);
}

/* Bytes the repacked copies may take. In wasm the heap holds the file's
 * bytes and cannot give part of them back, so each repacked matrix is a
 * second copy inside the heap's 4 GiB: the copies stop where the heap would
 * pass 3 GiB, leaving a GiB for the contexts (KV cache, scratch), and the
 * matrices past that keep the file's layout and its per-row kernels (a 2 GB
 * Q4_K_M model loads as before, partly repacked). Elsewhere no limit (the
 * file's pages are released as their copies are made).
 * WGLLM_REPACK_BUDGET (bytes) sets it anywhere, read at the first CPU context. */
static enum wgllm_status repack_budget(uint64_t *budget, struct wgllm_error *err) {
    const char *e = getenv("WGLLM_REPACK_BUDGET");
    if (e && *e) {
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(e, &end, 10);
        if (errno || *end || e[0] == '-')
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "WGLLM_REPACK_BUDGET '%.40s' is not a number of bytes", e);
        *budget = v;
        return WGLLM_STATUS_OK;
    }
#if defined(__EMSCRIPTEN__)
    const uint64_t heap = (uint64_t)__builtin_wasm_memory_size(0) * 65536, cap = (uint64_t)3 << 30;
    *budget = heap < cap ? cap - heap : 0;
#else
    *budget = UINT64_MAX;
#endif
    return WGLLM_STATUS_OK;
}

/* Copies the matrices that have a faster kernel into the repacked layout
 * (quant/repack.h), and the others onto huge pages (copy_plain); called under
 * m->cpu_mu. A failure frees what was made (no context has seen it), so a
 * later context tries again. */
static enum wgllm_status repack_weights(struct wgllm_model *m, struct wgllm_error *err) {
    enum { CAP = 4096 };
    uint64_t budget = 0;
    const enum wgllm_status bst = repack_budget(&budget, err);
    if (bst) return bst;
    struct wgllm_weight **mats = malloc(CAP * sizeof(*mats));
    if (!mats) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    const int n = wgllm_model_matrices(m, mats, CAP);
    enum wgllm_status st = WGLLM_STATUS_OK;
    uint64_t bytes = 0;
    const bool experts = repack_experts(mats, n), plain = copy_plain(m, mats, n, experts);
    uint64_t packed = 0;
    for (int i = 0; i < n && !st; i++) {
        struct wgllm_weight *w = mats[i];
        if (!repackable(w) || (w->n_expert > 0 && !experts)) {
            if (!plain || !w->data || w->data == m->tok_embd.data) continue;
            const size_t size = w->row_size * (size_t)w->ne1;
            if (!(w->copy = wgllm_alloc_large(size))) {
                st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory copying '%s' (%zu bytes)",
                                     w->name, size);
                break;
            }
            /* F16 in panels where this CPU multiplies them faster (each expert whole panels) */
            const int64_t rows = w->n_expert > 0 ? w->ne1 / w->n_expert : w->ne1;
            w->copy_panels = (w->n_expert == 0 || w->ne1 % w->n_expert == 0) &&
                             wgllm_gemm_panels_supported(w->type, w->ne0, rows);
            if (w->copy_panels) wgllm_gemm_pack_panels(w->type, w->ne0, w->data, w->row_size, w->ne1, w->copy);
            else memcpy(w->copy, w->data, size);
            bytes += size;
            wgllm_model_release_pages(m, w);
            continue;
        }
        const uint64_t need = wgllm_repack_panel_bytes(w->type, w->ne0) * (uint64_t)(w->ne1 / WGLLM_REPACK_ROWS);
        if (packed + need > budget) continue; /* past the budget: the file's layout */
        packed += need;
        if (!(w->rp = calloc(1, sizeof(*w->rp)))) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory repacking '%s'", w->name);
            break;
        }
        if ((st = wgllm_repack(w->data, w->type, w->ne0, w->ne1, w->rp, err))) break;
        bytes += w->rp->size;
        /* token_embd's rows are still read when it doubles as the output */
        if (w->data != m->tok_embd.data) wgllm_model_release_pages(m, w);
    }
    if (st) { /* the released pages fault back in from the file */
        for (int i = 0; i < n; i++) {
            if (mats[i]->rp) {
                wgllm_repacked_free(mats[i]->rp);
                free(mats[i]->rp);
                mats[i]->rp = NULL;
            }
            wgllm_free_aligned(mats[i]->copy);
            mats[i]->copy = NULL;
            mats[i]->copy_panels = false;
        }
    } else {
        m->repacked_bytes = bytes;
    }
    free(mats);
    return st;
}

/* The CPU's weight layouts, made once per model: the first CPU context pays
 * for them and every later one, on any thread, shares them (the model owns
 * and frees them). Made here rather than at load so that a model only the
 * WebGPU backend runs never holds them. WGLLM_NO_REPACK=1 (read at the first
 * CPU context) keeps the GGUF layout. */
enum wgllm_status wgllm_cpu_weights_prepare(struct wgllm_model *m, struct wgllm_error *err) {
    pthread_mutex_lock(&m->cpu_mu);
    enum wgllm_status st = WGLLM_STATUS_OK;
    if (!m->cpu_weights_ready) {
        const char *env = getenv("WGLLM_NO_REPACK");
        if (!env || !strcmp(env, "0")) st = repack_weights(m, err);
        m->cpu_weights_ready = st == WGLLM_STATUS_OK;
    }
    pthread_mutex_unlock(&m->cpu_mu);
    return st;
}
