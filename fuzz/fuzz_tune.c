/*
 * fuzz_tune.c - libFuzzer target for the WebGPU tune cache (tune.c): the
 * input is written as the cache file of a made-up adapter and loaded; a
 * tune the loader accepts must pass wgllm_wgsl_tune_valid on that adapter
 * and generate every kernel's WGSL in bounded time and memory (a tune is
 * a set of sizes the kernel generator loops over). No GPU is needed.
 *
 * Seeds: fuzz/corpus/fuzz_tune/ (caches for this adapter).
 */
#include "backend/webgpu/kernels.h"
#include "backend/webgpu/tune.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct wgllm_gpu_info fuzz_adapter(void) {
    struct wgllm_gpu_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "Fuzz GPU");
    snprintf(info.description, sizeof info.description, "fuzz driver 1.0");
    info.backend = "vulkan";
    info.type = "discrete GPU";
    info.vendor_id = 4318;
    info.device_id = 8708;
    info.max_invocations = 1024;
    info.max_workgroup_storage = 32768;
    info.max_workgroup_size_x = 1024;
    info.subgroups = true;
    info.subgroup_min_size = info.subgroup_max_size = 32;
    return info;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/wgllm-fuzz-tune-%ld.txt", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    const struct wgllm_gpu_info info = fuzz_adapter();
    struct wgllm_wgsl_tune t;
    memset(&t, 0, sizeof t);
    struct wgllm_error err;
    if (wgllm_tune_cache_load(path, &info, &t, &err) != WGLLM_STATUS_OK) return 0;
    if (!wgllm_wgsl_tune_valid(&t, info.max_invocations, info.max_workgroup_storage, NULL, 0)) __builtin_trap();
    static const uint32_t types[] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_K};
    for (int k = WGLLM_KERNEL_MATVEC; k <= WGLLM_KERNEL_MATMUL; k++) {
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            struct wgllm_kernel_key key = {.kernel = (enum wgllm_kernel)k, .type = types[ti], .neox = ti & 1};
            char *src = wgllm_wgsl_generate(&key, &t);
            /* a kernel's source is a few pages: a tune that makes it huge is a finding */
            if (src && strlen(src) > (1u << 20)) __builtin_trap();
            free(src);
        }
    }
    return 0;
}
