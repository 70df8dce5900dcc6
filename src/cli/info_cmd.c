/*
 * info_cmd.c - `wgllm info -m MODEL [--plan]`: the model's description
 * (architecture, shapes, types), the memory a context takes, the CPU
 * features the kernels use and, with --plan, the WebGPU memory plan
 * allocated for real.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>
#include <stdlib.h>

int wgllm_cli_info(const struct opts *o) {
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    int need = wgllm_model_describe(m, NULL, 0);
    char *buf = malloc((size_t)need + 1);
    wgllm_model_describe(m, buf, (size_t)need + 1);
    fputs(buf, stdout);
    free(buf);
    if (wgllm_model_n_layer(m) > 0) {
        int n_ctx = o->ctx > 0 ? o->ctx : (wgllm_model_n_ctx_train(m) < 4096 ? wgllm_model_n_ctx_train(m) : 4096);
        struct wgllm_context *c = wgllm_cli_new_context(m, o, n_ctx);
        if (c) {
            /* the CPU backend repacks the matrices it has kernels for (and copies the others onto
             * huge pages) when its first context is made */
            const uint64_t rp = wgllm_model_repacked_size(m);
            char rps[64] = "";
            if (rp) snprintf(rps, sizeof rps, " + %.1f MiB copied for the CPU", rp / 1048576.0);
            printf("memory:        %.1f MiB weights (mapped)%s + %.1f MiB context (KV cache for %d tokens and scratch)\n",
                   wgllm_model_size(m) / 1048576.0, rps, wgllm_context_memory(c) / 1048576.0, n_ctx);
            uint64_t full;
            int ring;
            const uint64_t kv = wgllm_context_kv_memory(c, &full, &ring);
            if (ring)
                printf("kv cache:      %.1f MiB (f16) with rings of %d cells on the sliding-window layers; %.1f MiB "
                       "with full caches: saves %.1f MiB (%.0f%%)\n", kv / 1048576.0, ring, full / 1048576.0,
                       (full - kv) / 1048576.0, 100.0 * (double)(full - kv) / (double)full);
            else
                printf("kv cache:      %.1f MiB (f16)\n", kv / 1048576.0);
            wgllm_context_free(c);
        }
    }
    printf("cpu:           %s\n", wgllm_cpu_features());
    int rc = 0;
    if (o->plan && wgllm_model_n_layer(m) > 0) { /* the WebGPU memory plan, allocated for real */
        int n_ctx = o->ctx > 0 ? o->ctx : (wgllm_model_n_ctx_train(m) < 4096 ? wgllm_model_n_ctx_train(m) : 4096);
        struct wgllm_tools_gpu_plan pl;
        struct wgllm_error err;
        if (wgllm_tools_gpu_plan(m, n_ctx, o->gpu_mem, &pl, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "wgllm: error: %s\n", err.message);
            rc = 1;
        } else {
            printf("webgpu plan:   %s, %d sequence(s) x %d positions, batches of %d tokens\n", pl.adapter, pl.n_seq, pl.n_ctx,
                   pl.n_batch);
            if (pl.budget) printf("  budget       %10.2f MiB (--gpu-mem)\n", pl.budget / 1048576.0);
            if (pl.note[0]) printf("  shrunk:      %s\n", pl.note);
            printf("  weights      %10.2f MiB (%d tensors split by rows)\n", pl.weights / 1048576.0, pl.n_split_tensors);
            printf("  vectors      %10.2f MiB\n", pl.vectors / 1048576.0);
            if (pl.ring)
                printf("  kv cache     %10.2f MiB (f16; rings of %d cells on the sliding-window layers, %.2f MiB with "
                       "full caches: saves %.2f MiB)\n", pl.kv_cache / 1048576.0, pl.ring, pl.kv_full / 1048576.0,
                       (pl.kv_full - pl.kv_cache) / 1048576.0);
            else
                printf("  kv cache     %10.2f MiB (f16)\n", pl.kv_cache / 1048576.0);
            printf("  activations  %10.2f MiB\n", pl.activations / 1048576.0);
            printf("  logits       %10.2f MiB (%d rows per pass, with readback)\n", pl.logits / 1048576.0, pl.out_rows);
            printf("  params       %10.2f MiB (%d arena slots)\n", pl.params / 1048576.0, pl.n_param_slots);
            printf("  total        %10.2f MiB in %d buffers; %d pipelines\n", pl.total / 1048576.0, pl.n_buffers,
                   pl.n_pipelines);
            printf("  decode step  %d dispatches (%d per layer), %.2f MiB of weights read\n", pl.n_dispatches,
                   pl.n_dispatches_layer, pl.token_bytes / 1048576.0);
        }
    }
    wgllm_model_free(m);
    return rc;
}
