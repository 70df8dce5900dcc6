/*
 * devices_cmd.c - `wgllm devices`: the WebGPU adapter wgllm would use, with
 * the limits and features the kernel generator specialises on, or why there
 * is none (no library, no adapter). With --dump-wgsl DIR, the WGSL of
 * every kernel as the backend generates it for that adapter (its tune),
 * one file per kernel, to read.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>

static int dump_wgsl(const char *dir) {
    struct wgllm_error err = {0};
    char adapter[256];
    int n = 0;
    printf("# tune\n");
    if (wgllm_tools_dump_wgsl(dir, &n, adapter, sizeof adapter, stdout, &err)) {
        fprintf(stderr, "wgllm: %s\n", err.message);
        return 1;
    }
    printf("wrote %d kernels to %s/ (%s)\n", n, dir, adapter[0] ? adapter : "no adapter: the default tune");
    return 0;
}

int wgllm_cli_devices(const struct opts *o) {
    if (o->dump_wgsl) return dump_wgsl(o->dump_wgsl);
    printf("cpu: available (always)\n");
    struct wgllm_error err = {0};
    struct wgllm_tools_gpu_info info;
    if (wgllm_tools_gpu_info(&info, &err)) {
        printf("webgpu: not available: %s\n", err.message);
        return 0;
    }
    const struct wgllm_tools_gpu_info *in = &info;
    printf("webgpu: %s\n", in->name);
    printf("  library:        %s\n", in->library);
    printf("  backend:        %s\n", in->backend);
    printf("  type:           %s%s\n", in->type, in->is_cpu ? " (software adapter: --backend auto keeps the CPU backend)" : "");
    if (in->vendor[0] || in->architecture[0]) printf("  vendor:         %s %s (0x%04x:0x%04x)\n", in->vendor, in->architecture, in->vendor_id, in->device_id);
    if (in->description[0]) printf("  driver:         %s\n", in->description);
    printf("  limits:         max storage binding %llu MiB, max buffer %llu MiB\n",
           (unsigned long long)(in->max_storage_binding_size >> 20), (unsigned long long)(in->max_buffer_size >> 20));
    printf("                  workgroup storage %u KiB, invocations per workgroup %u, workgroup size x %u, workgroups per dim %u\n",
           in->max_workgroup_storage >> 10, in->max_invocations, in->max_workgroup_size_x, in->max_workgroups_per_dim);
    printf("                  storage buffers per stage %u, storage offset alignment %u\n", in->max_storage_buffers_per_stage,
           in->min_storage_offset_align);
    printf("  features:       shader-f16 %s, subgroups %s", in->shader_f16 ? "yes" : "no", in->subgroups ? "yes" : "no");
    if (in->subgroups && in->subgroup_max_size) printf(" (size %u..%u)", in->subgroup_min_size, in->subgroup_max_size);
    printf("\n  feature ids:   ");
    for (int i = 0; i < in->n_feature_ids; i++) printf(" 0x%x", in->feature_ids[i]);
    printf("\n");
    return 0;
}
