/*
 * repack.c - the interleaved Q4_0/Q8_0 layout (see repack.h): the copy from
 * the GGUF layout, the scalar reference product, and the choice of SIMD
 * kernel (repack_avx512.c, repack_avx2.c; repack_wasm.c in the browser
 * build) for this CPU.
 */
#include "quant/repack.h"

#include <math.h>
#include <pthread.h>

/* ---- layout ------------------------------------------------------------ */

static bool shape_ok(uint32_t type, int64_t ne0, int64_t ne1) {
    return (type == WGLLM_TYPE_Q4_0 || type == WGLLM_TYPE_Q8_0) && ne0 > 0 && ne0 % 32 == 0 &&
           ne0 / 32 <= WGLLM_REPACK_MAX_BLOCKS && ne1 > 0 && ne1 % WGLLM_REPACK_ROWS == 0;
}

/* One panel: rows src[0..16) (row_size bytes apart) into dst. */
static void repack_panel(const uint8_t *src, size_t row_size, uint32_t type, int64_t nb, uint8_t *dst) {
    wgllm_fp16 *scales = (wgllm_fp16 *)dst;
    uint8_t *quants = dst + wgllm_repack_scale_bytes(nb * 32);
    const size_t qb = wgllm_repack_quant_bytes(type);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = quants + (size_t)b * qb;
            if (type == WGLLM_TYPE_Q4_0) {
                wgllm_block_q4_0 blk;
                memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
                scales[b * WGLLM_REPACK_ROWS + j] = blk.d;
                for (int m = 0; m < 4; m++) memcpy(q + m * 64 + j * 4, blk.qs + 4 * m, 4);
            } else {
                wgllm_block_q8_0 blk;
                memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
                scales[b * WGLLM_REPACK_ROWS + j] = blk.d;
                for (int g = 0; g < 8; g++) {
                    uint32_t v;
                    memcpy(&v, blk.qs + 4 * g, 4);
                    v ^= 0x80808080u; /* q + 128 in each byte */
                    memcpy(q + g * 64 + j * 4, &v, 4);
                }
            }
        }
    }
}

enum wgllm_status wgllm_repack(const void *src, uint32_t type, int64_t ne0, int64_t ne1,
                               struct wgllm_repacked *out, struct wgllm_error *err) {
    memset(out, 0, sizeof(*out));
    if (!shape_ok(type, ne0, ne1))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "repack: type %s with %lld x %lld elements has no interleaved layout "
                               "(needs q4_0/q8_0, ne0 %% 32 == 0, ne0 <= %d, ne1 %% %d == 0)",
                               wgllm_type_name(type), (long long)ne0, (long long)ne1,
                               WGLLM_REPACK_MAX_BLOCKS * 32, WGLLM_REPACK_ROWS);
    const size_t panel = wgllm_repack_panel_bytes(type, ne0);
    uint64_t size;
    if (wgllm_mul_overflow(panel, (uint64_t)(ne1 / WGLLM_REPACK_ROWS), &size) || size > SIZE_MAX)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "repack: %lld x %lld matrix too large",
                               (long long)ne0, (long long)ne1);
    uint8_t *data = wgllm_alloc_aligned((size_t)size);
    if (!data)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "repack: cannot allocate %llu bytes",
                               (unsigned long long)size);
    const size_t row_size = wgllm_row_size(type, ne0);
    for (int64_t p = 0; p < ne1 / WGLLM_REPACK_ROWS; p++)
        repack_panel((const uint8_t *)src + (size_t)p * WGLLM_REPACK_ROWS * row_size, row_size, type, ne0 / 32,
                     data + (size_t)p * panel);
    out->type = type;
    out->ne0 = ne0;
    out->ne1 = ne1;
    out->data = data;
    out->size = (size_t)size;
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}

void wgllm_repacked_free(struct wgllm_repacked *w) {
    if (!w) return;
    wgllm_free_aligned(w->data);
    memset(w, 0, sizeof(*w));
}

int wgllm_repack_row_group(void) { return WGLLM_REPACK_ROWS; }

/* ---- scalar reference -------------------------------------------------- */

void wgllm_repacked_matmul_ref(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    const int64_t nb = w->ne0 / 32;
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0), qb = wgllm_repack_quant_bytes(w->type);
    const bool q4 = w->type == WGLLM_TYPE_Q4_0;
    for (int64_t p = r0 / WGLLM_REPACK_ROWS; p < r1 / WGLLM_REPACK_ROWS; p++) {
        const uint8_t *pd = (const uint8_t *)w->data + (size_t)p * panel;
        const wgllm_fp16 *scales = (const wgllm_fp16 *)pd;
        const uint8_t *quants = pd + wgllm_repack_scale_bytes(w->ne0);
        for (int t = 0; t < n; t++) {
            const wgllm_block_q8_0 *xb = (const wgllm_block_q8_0 *)((const char *)x + (size_t)t * x_stride);
            for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *q = quants + (size_t)b * qb;
                    const int8_t *a = xb[b].qs;
                    int32_t sum_a = 0, dot = 0;
                    for (int i = 0; i < 32; i++) sum_a += a[i];
                    if (q4) {
                        for (int m = 0; m < 4; m++)
                            for (int k = 0; k < 4; k++) {
                                const uint8_t v = q[m * 64 + j * 4 + k];
                                dot += (v & 0x0F) * a[4 * m + k] + (v >> 4) * a[16 + 4 * m + k];
                            }
                        dot -= 8 * sum_a;
                    } else {
                        for (int g = 0; g < 8; g++)
                            for (int k = 0; k < 4; k++) dot += q[g * 64 + j * 4 + k] * a[4 * g + k];
                        dot -= 128 * sum_a;
                    }
                    const float d = wgllm_fp16_lookup(scales[b * WGLLM_REPACK_ROWS + j]) * wgllm_fp16_lookup(xb[b].d);
                    acc = fmaf(d, (float)dot, acc);
                }
                float *dst = y + (size_t)t * ldy + p * WGLLM_REPACK_ROWS + j;
                *dst = accumulate ? *dst + acc : acc;
            }
        }
    }
}

/* ---- dispatch ---------------------------------------------------------- */

static wgllm_repacked_matmul_fn kernel;
static const char *kernel_name = "none";

static void pick_kernel(void) {
    wgllm_quant_init();
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *c = wgllm_cpu_caps();
    if (c->avx2 && c->fma && c->f16c) {
        kernel = wgllm_repacked_matmul_avx2;
        kernel_name = "avx2";
        if (c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni) {
            kernel = wgllm_repacked_matmul_avx512;
            kernel_name = "avx512";
        }
    }
#elif defined(__wasm_simd128__)
    kernel = wgllm_repacked_matmul_wasm;
    kernel_name = "simd128";
#endif
}

static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

wgllm_repacked_matmul_fn wgllm_repack_kernel(const char **name) {
    pthread_once(&kernel_once, pick_kernel);
    if (name) *name = kernel_name;
    return kernel;
}

bool wgllm_repack_supported(uint32_t type, int64_t ne0, int64_t ne1) {
    return shape_ok(type, ne0, ne1) && wgllm_repack_kernel(NULL) != NULL;
}

void wgllm_repacked_matmul(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                           int n, float *y, int ldy, bool accumulate) {
    const wgllm_repacked_matmul_fn k = wgllm_repack_kernel(NULL);
    (k ? k : wgllm_repacked_matmul_ref)(w, r0, r1, x, x_stride, n, y, ldy, accumulate);
}
