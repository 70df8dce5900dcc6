/*
 * hal_native.c - the GPU layer (hal.h) on a native webgpu.h library (Dawn
 * from npm), loaded with dlopen at run time so that wgllm builds and runs
 * without it. All waiting goes through wgpuInstanceWaitAny on futures (the
 * instance is created with timed waits enabled); device errors are caught
 * by the uncaptured-error callback and by error scopes around compilation,
 * and reported by the next call that can fail. A closed device that is idle
 * and healthy is kept for the next open in the process (see wgllm_gpu_close).
 */
#include "backend/webgpu/hal.h"
#include "backend/webgpu/webgpu_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct wgpu_fns {
#define X(name, ret, args) ret(*name) args;
    WGLLM_WGPU_FUNCS(X)
#undef X
};

/* buffers created by any device of the process (wgllm_gpu_buffers_created) */
static _Atomic uint64_t buffers_created;
/* bytes wgllm_gpu_readback copied to the host, any device (wgllm_gpu_readback_bytes) */
static _Atomic uint64_t readback_bytes;

struct wgllm_gpu_buffer {
    WGPUBuffer buf;
    uint64_t size;
    int usage;
};

struct wgllm_gpu_pipeline {
    WGPUComputePipeline pipe;
    WGPUBindGroupLayout layout;
};

struct wgllm_gpu_bindgroup {
    WGPUBindGroup bg;
};

struct wgllm_gpu {
    bool timed_out; /* a wait gave up with work in flight (wait_future) */
    void *lib;
    struct wgpu_fns f;
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    struct wgllm_gpu_info info;

    struct wgllm_gpu_pipe_cache pipes;

    WGPUCommandEncoder enc; /* the open batch */
    WGPUComputePassEncoder pass;

    uint64_t bytes;
    int n_buffers;
    bool error; /* an uncaptured device error or device loss since the last check */
    char error_msg[400];
};

/* ---- helpers ------------------------------------------------------------ */

static WGPUStringView sv(const char *s) { return (WGPUStringView){s, s ? WGPU_STRLEN : 0}; }

static void sv_copy(char *dst, size_t cap, WGPUStringView v) {
    size_t n = 0;
    if (v.data) n = v.length == WGPU_STRLEN ? strlen(v.data) : v.length;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, v.data, n);
    dst[n] = 0;
}

static void on_uncaptured_error(const WGPUDevice *device, uint32_t type, WGPUStringView message, void *u1, void *u2) {
    struct wgllm_gpu *g = u1;
    if (g->error) return; /* keep the first: later ones are usually its consequences */
    g->error = true;
    char m[360];
    sv_copy(m, sizeof m, message);
    snprintf(g->error_msg, sizeof g->error_msg, "WebGPU error (type %u): %s", type, m);
}

static void on_device_lost(const WGPUDevice *device, uint32_t reason, WGPUStringView message, void *u1, void *u2) {
    struct wgllm_gpu *g = u1;
    if (reason == 2 /* Destroyed */ || reason == 3 /* CallbackCancelled / InstanceDropped */) return;
    if (g->error) return;
    g->error = true;
    char m[360];
    sv_copy(m, sizeof m, message);
    snprintf(g->error_msg, sizeof g->error_msg, "WebGPU device lost (reason %u): %s", reason, m);
}

static enum wgllm_status take_error(struct wgllm_gpu *g, struct wgllm_error *err, const char *what) {
    if (!g->error) return WGLLM_STATUS_OK;
    g->error = false;
    return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s: %s", what, g->error_msg);
}

/* Waits for one future, up to 60 s in 1 s steps. */
/* Seconds a wait may take: a software adapter (SwiftShader) running a large
 * model's prompt in one submit can need minutes; WGLLM_GPU_TIMEOUT overrides. */
static int wait_limit_s(void) {
    const char *e = getenv("WGLLM_GPU_TIMEOUT");
    const int v = e ? atoi(e) : 0;
    return v > 0 ? v : 600;
}

static bool wait_future(struct wgllm_gpu *g, WGPUFuture fut) {
    const int limit = wait_limit_s();
    for (int i = 0; i < limit; i++) {
        WGPUFutureWaitInfo wi = {fut, 0};
        uint32_t st = g->f.wgpuInstanceWaitAny(g->instance, 1, &wi, 1000000000ull);
        if (st == WGPUWaitStatus_Success && wi.completed) return true;
        if (st != WGPUWaitStatus_TimedOut) return false;
    }
    /* work still in flight: releasing the device under it crashes Dawn at
     * exit, so wgllm_gpu_close leaves this device to the process's end */
    g->timed_out = true;
    return false;
}

/* ---- loading ------------------------------------------------------------ */

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static const char *dawn_rel = "tools/dawn/node_modules/bun-webgpu-linux-x64/libwebgpu_wrapper.so";

/* Tries `dir`/dawn_rel for dir and up to 5 of its parents. */
static void *try_tree(const char *start, char *tried, size_t cap, char *found, size_t fcap) {
    char dir[PATH_MAX];
    copy_str(dir, sizeof dir, start);
    for (int up = 0; up < 6 && dir[0]; up++) {
        char path[PATH_MAX + 128];
        snprintf(path, sizeof path, "%s/%s", dir, dawn_rel);
        if (access(path, R_OK) == 0) {
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) {
                copy_str(found, fcap, path);
                return h;
            }
            size_t l = strlen(tried);
            snprintf(tried + l, cap - l, "\n  %s (%s)", path, dlerror());
            return NULL;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = 0;
    }
    size_t l = strlen(tried);
    snprintf(tried + l, cap - l, "\n  %s/%s and its parents' (not found)", start, dawn_rel);
    return NULL;
}

static void *load_library(char *found, size_t fcap, struct wgllm_error *err) {
    char tried[1500] = "";
    const char *env = getenv("WGLLM_WEBGPU_LIB");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            copy_str(found, fcap, env);
            return h;
        }
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WGLLM_WEBGPU_LIB=%s could not be loaded: %s", env, dlerror());
        return NULL;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        void *h = try_tree(exe, tried, sizeof tried, found, fcap);
        if (h) return h;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) {
        void *h = try_tree(cwd, tried, sizeof tried, found, fcap);
        if (h) return h;
    }
    static const char *sonames[] = {"libwebgpu_dawn.so", "libwgpu_native.so", "libwebgpu_wrapper.so"};
    for (size_t i = 0; i < sizeof sonames / sizeof *sonames; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            copy_str(found, fcap, sonames[i]);
            return h;
        }
        size_t l = strlen(tried);
        snprintf(tried + l, sizeof tried - l, "\n  %s (library search path)", sonames[i]);
    }
    wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                    "no webgpu.h library found (install it with scripts/deps.sh, or set WGLLM_WEBGPU_LIB); tried:%s",
                    tried);
    return NULL;
}

/* ---- open / close ------------------------------------------------------- */

struct adapter_req {
    WGPUAdapter adapter;
    uint32_t status;
    char msg[300];
};

static void on_adapter(uint32_t status, WGPUAdapter adapter, WGPUStringView message, void *u1, void *u2) {
    struct adapter_req *r = u1;
    r->status = status;
    r->adapter = adapter;
    sv_copy(r->msg, sizeof r->msg, message);
}

struct device_req {
    WGPUDevice device;
    uint32_t status;
    char msg[300];
};

static void on_device(uint32_t status, WGPUDevice device, WGPUStringView message, void *u1, void *u2) {
    struct device_req *r = u1;
    r->status = status;
    r->device = device;
    sv_copy(r->msg, sizeof r->msg, message);
}

static const char *backend_name(uint32_t b) {
    switch (b) {
    case WGPUBackendType_Null: return "null";
    case WGPUBackendType_WebGPU: return "webgpu";
    case WGPUBackendType_D3D11: return "d3d11";
    case WGPUBackendType_D3D12: return "d3d12";
    case WGPUBackendType_Metal: return "metal";
    case WGPUBackendType_Vulkan: return "vulkan";
    case WGPUBackendType_OpenGL: return "opengl";
    case WGPUBackendType_OpenGLES: return "opengles";
    default: return "unknown";
    }
}

static const char *adapter_type_name(uint32_t t) {
    switch (t) {
    case WGPUAdapterType_DiscreteGPU: return "discrete GPU";
    case WGPUAdapterType_IntegratedGPU: return "integrated GPU";
    case WGPUAdapterType_CPU: return "CPU";
    default: return "unknown";
    }
}

/* The device the last wgllm_gpu_close kept (one at most), with the environment
 * it was opened under: creating a device, compiling its pipelines and
 * destroying it again cost seconds on a software adapter (SwiftShader: about
 * a second per model, 0.1-0.5 s per pipeline), and a program that loads one
 * model after another, or a context per request, would pay them every time. */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static struct wgllm_gpu *kept;
static char kept_env[1100];
static void destroy_device(struct wgllm_gpu *g);

/* what decides which library and driver an open gets */
static void open_env(char *buf, size_t cap) {
    const char *lib = getenv("WGLLM_WEBGPU_LIB"), *icd = getenv("VK_ICD_FILENAMES");
    snprintf(buf, cap, "%s\n%s", lib ? lib : "", icd ? icd : "");
}

enum wgllm_status wgllm_gpu_open(struct wgllm_gpu **out, struct wgllm_error *err) {
    *out = NULL;
    char env[sizeof kept_env];
    open_env(env, sizeof env);
    pthread_mutex_lock(&kept_mu);
    struct wgllm_gpu *reuse = kept && !strcmp(kept_env, env) ? kept : NULL;
    if (reuse) kept = NULL;
    pthread_mutex_unlock(&kept_mu);
    if (reuse && reuse->error) { /* lost, or an error of the last owner's work, since it was kept */
        destroy_device(reuse);
        reuse = NULL;
    }
    if (reuse) {
        *out = reuse;
        return WGLLM_STATUS_OK;
    }
    struct wgllm_gpu *g = calloc(1, sizeof *g);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the GPU device");
    g->lib = load_library(g->info.library, sizeof g->info.library, err);
    if (!g->lib) {
        free(g);
        return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    }
#define X(name, ret, args)                                                                                       \
    *(void **)&g->f.name = dlsym(g->lib, #name);                                                              \
    if (!g->f.name) {                                                                                         \
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s lacks the function %s (not the webgpu.h generation " \
                        "wgllm expects)", g->info.library, #name);                                            \
        wgllm_gpu_close(g);                                                                                   \
        return WGLLM_STATUS_UNSUPPORTED;                                                                      \
    }
    WGLLM_WGPU_FUNCS(X)
#undef X

    WGPUInstanceDescriptor idesc = {0};
    idesc.capabilities.timedWaitAnyEnable = 1;
    g->instance = g->f.wgpuCreateInstance(&idesc);
    if (!g->instance) {
        wgllm_gpu_close(g);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "wgpuCreateInstance failed (library %s)",
                               g->info.library);
    }

    struct adapter_req ar = {0};
    WGPURequestAdapterOptions opts = {0};
    opts.featureLevel = WGPUFeatureLevel_Core;
    opts.powerPreference = WGPUPowerPreference_HighPerformance;
    WGPURequestAdapterCallbackInfo aci = {NULL, WGPUCallbackMode_WaitAnyOnly, on_adapter, &ar, NULL};
    WGPUFuture fut = g->f.wgpuInstanceRequestAdapter(g->instance, &opts, aci);
    if (!wait_future(g, fut) || ar.status != WGPURequestAdapterStatus_Success || !ar.adapter) {
        const char *icd = getenv("VK_ICD_FILENAMES");
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                        "no WebGPU adapter (status %u%s%s)%s", ar.status, ar.msg[0] ? ": " : "", ar.msg,
                        icd ? "" : "; on a machine without a GPU, install chromium-common and libvulkan1 and set "
                                   "VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json for SwiftShader");
        wgllm_gpu_close(g);
        return WGLLM_STATUS_UNSUPPORTED;
    }
    g->adapter = ar.adapter;

    /* The library may know fields past the end of our declarations (later
     * generations append members), so it writes into padded storage. */
    union {
        WGPUAdapterInfo v;
        char pad[1024];
    } ai;
    memset(&ai, 0, sizeof ai);
    if (g->f.wgpuAdapterGetInfo(g->adapter, &ai.v) == WGPUStatus_Success) {
        sv_copy(g->info.name, sizeof g->info.name, ai.v.device);
        sv_copy(g->info.vendor, sizeof g->info.vendor, ai.v.vendor);
        sv_copy(g->info.architecture, sizeof g->info.architecture, ai.v.architecture);
        sv_copy(g->info.description, sizeof g->info.description, ai.v.description);
        if (!g->info.name[0]) snprintf(g->info.name, sizeof g->info.name, "%s", g->info.description);
        g->info.backend = backend_name(ai.v.backendType);
        g->info.type = adapter_type_name(ai.v.adapterType);
        g->info.is_cpu = ai.v.adapterType == WGPUAdapterType_CPU;
        g->info.vendor_id = ai.v.vendorID;
        g->info.device_id = ai.v.deviceID;
        g->info.subgroup_min_size = ai.v.subgroupMinSize;
        g->info.subgroup_max_size = ai.v.subgroupMaxSize;
        g->f.wgpuAdapterInfoFreeMembers(ai.v);
    } else {
        g->info.backend = g->info.type = "unknown";
    }
    if (!strcmp(g->info.backend, "null")) {
        /* Dawn's Null backend computes nothing; it is what remains without a driver */
        const char *icd = getenv("VK_ICD_FILENAMES");
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no WebGPU adapter (only Dawn's Null backend)%s",
                        icd ? "" : "; on a machine without a GPU, install chromium-common and libvulkan1 and set "
                                   "VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json for SwiftShader");
        wgllm_gpu_close(g);
        return WGLLM_STATUS_UNSUPPORTED;
    }

    union {
        WGPULimits v;
        char pad[1024];
    } lim;
    memset(&lim, 0, sizeof lim);
    if (g->f.wgpuAdapterGetLimits(g->adapter, &lim.v) != WGPUStatus_Success) {
        wgllm_gpu_close(g);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "wgpuAdapterGetLimits failed on %s", g->info.name);
    }
    WGPUSupportedFeatures sf = {0};
    g->f.wgpuAdapterGetFeatures(g->adapter, &sf);
    for (size_t i = 0; i < sf.featureCount && g->info.n_feature_ids < 64; i++)
        g->info.feature_ids[g->info.n_feature_ids++] = sf.features[i];
    g->f.wgpuSupportedFeaturesFreeMembers(sf);
    g->info.shader_f16 = g->f.wgpuAdapterHasFeature(g->adapter, WGPUFeatureName_ShaderF16) != 0;
    g->info.subgroups = g->f.wgpuAdapterHasFeature(g->adapter, WGPUFeatureName_Subgroups) != 0;

    uint32_t feats[2];
    size_t nf = 0;
    if (g->info.shader_f16) feats[nf++] = WGPUFeatureName_ShaderF16;
    if (g->info.subgroups) feats[nf++] = WGPUFeatureName_Subgroups;

    struct device_req dr = {0};
    WGPUDeviceDescriptor dd = {0};
    dd.label = sv("wgllm");
    dd.requiredFeatureCount = nf;
    dd.requiredFeatures = feats;
    dd.requiredLimits = &lim.v; /* everything the adapter offers (1 GiB bindings on SwiftShader, not 128 MiB) */
    dd.deviceLostCallbackInfo = (WGPUDeviceLostCallbackInfo){NULL, WGPUCallbackMode_AllowSpontaneous, on_device_lost, g, NULL};
    dd.uncapturedErrorCallbackInfo = (WGPUUncapturedErrorCallbackInfo){NULL, on_uncaptured_error, g, NULL};
    WGPURequestDeviceCallbackInfo dci = {NULL, WGPUCallbackMode_WaitAnyOnly, on_device, &dr, NULL};
    fut = g->f.wgpuAdapterRequestDevice(g->adapter, &dd, dci);
    if (!wait_future(g, fut) || dr.status != WGPURequestDeviceStatus_Success || !dr.device) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "could not create a WebGPU device on %s (status %u): %s",
                        g->info.name, dr.status, dr.msg);
        wgllm_gpu_close(g);
        return WGLLM_STATUS_UNSUPPORTED;
    }
    g->device = dr.device;
    g->queue = g->f.wgpuDeviceGetQueue(g->device);

    memset(&lim, 0, sizeof lim);
    g->f.wgpuDeviceGetLimits(g->device, &lim.v);
    g->info.max_storage_binding_size = lim.v.maxStorageBufferBindingSize;
    g->info.max_buffer_size = lim.v.maxBufferSize;
    g->info.max_workgroup_storage = lim.v.maxComputeWorkgroupStorageSize;
    g->info.max_invocations = lim.v.maxComputeInvocationsPerWorkgroup;
    g->info.max_workgroup_size_x = lim.v.maxComputeWorkgroupSizeX;
    g->info.max_workgroups_per_dim = lim.v.maxComputeWorkgroupsPerDimension;
    g->info.min_storage_offset_align = lim.v.minStorageBufferOffsetAlignment;
    g->info.min_uniform_offset_align = lim.v.minUniformBufferOffsetAlignment;
    g->info.max_storage_buffers_per_stage = lim.v.maxStorageBuffersPerShaderStage;
    *out = g;
    return WGLLM_STATUS_OK;
}

/* Releases the whole device and what it holds. */
static void destroy_device(struct wgllm_gpu *g) {
    if (!g) return;
    for (int i = 0; i < g->pipes.n; i++) {
        struct wgllm_gpu_pipeline *p = g->pipes.e[i].p;
        if (p->layout) g->f.wgpuBindGroupLayoutRelease(p->layout);
        if (p->pipe) g->f.wgpuComputePipelineRelease(p->pipe);
        free(p);
    }
    wgllm_gpu_pipe_cache_free(&g->pipes);
    if (g->timed_out) {
        wgllm_log(WGLLM_LOG_WARN, "webgpu: work on the device did not finish; leaving the device open");
        free(g);
        return;
    }
    if (g->pass) g->f.wgpuComputePassEncoderRelease(g->pass);
    if (g->enc) g->f.wgpuCommandEncoderRelease(g->enc);
    if (g->queue) g->f.wgpuQueueRelease(g->queue);
    if (g->device) {
        g->f.wgpuDeviceDestroy(g->device);
        g->f.wgpuDeviceRelease(g->device);
    }
    if (g->adapter) g->f.wgpuAdapterRelease(g->adapter);
    if (g->instance) g->f.wgpuInstanceRelease(g->instance);
    /* The library is not unloaded: Dawn and the Vulkan loader keep threads and
     * atexit handlers that must not outlive their code. */
    free(g);
}

/* An idle, healthy device (no buffer left, no error, nothing in flight) is
 * kept for the next wgllm_gpu_open of this process, with its compiled
 * pipelines; one kept already is destroyed first, so at most one waits. The
 * kept one lives until the process ends, as a timed-out device does. */
void wgllm_gpu_close(struct wgllm_gpu *g) {
    if (!g) return;
    if (g->device && !g->timed_out && !g->error && g->n_buffers == 0) {
        /* a batch left open is dropped, as destroying the device would */
        if (g->pass) g->f.wgpuComputePassEncoderRelease(g->pass);
        if (g->enc) g->f.wgpuCommandEncoderRelease(g->enc);
        g->pass = NULL, g->enc = NULL;
        struct wgllm_gpu *old;
        pthread_mutex_lock(&kept_mu);
        old = kept;
        kept = g;
        open_env(kept_env, sizeof kept_env);
        pthread_mutex_unlock(&kept_mu);
        destroy_device(old);
        return;
    }
    destroy_device(g);
}

const struct wgllm_gpu_info *wgllm_gpu_get_info(const struct wgllm_gpu *g) { return &g->info; }

/* ---- buffers ------------------------------------------------------------ */

struct wgllm_gpu_buffer *wgllm_gpu_buffer_create(struct wgllm_gpu *g, uint64_t size, int usage, const char *label,
                                                 struct wgllm_error *err) {
    size = (size + 15) & ~(uint64_t)15;
    if (size == 0) size = 16;
    if (size > g->info.max_buffer_size) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "GPU buffer '%s' of %llu bytes exceeds the device's maxBufferSize %llu",
                        label ? label : "", (unsigned long long)size, (unsigned long long)g->info.max_buffer_size);
        return NULL;
    }
    WGPUFlags u = 0;
    if (usage & WGLLM_GPU_STORAGE) u |= WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    if (usage & WGLLM_GPU_UNIFORM) u |= WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst;
    if (usage & WGLLM_GPU_READBACK) u |= WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst;
    WGPUBufferDescriptor d = {NULL, sv(label), u, size, 0};
    WGPUBuffer b = g->f.wgpuDeviceCreateBuffer(g->device, &d);
    struct wgllm_gpu_buffer *gb = calloc(1, sizeof *gb);
    if (!b || !gb) {
        free(gb);
        if (b) g->f.wgpuBufferRelease(b);
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "could not create GPU buffer '%s' of %llu bytes",
                        label ? label : "", (unsigned long long)size);
        return NULL;
    }
    gb->buf = b;
    gb->size = size;
    gb->usage = usage;
    g->bytes += size;
    g->n_buffers++;
    atomic_fetch_add(&buffers_created, 1);
    return gb;
}

uint64_t wgllm_gpu_buffers_created(void) { return atomic_load(&buffers_created); }
uint64_t wgllm_gpu_readback_bytes(void) { return atomic_load(&readback_bytes); }

void wgllm_gpu_buffer_destroy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b) {
    if (!b) return;
    g->f.wgpuBufferDestroy(b->buf);
    g->f.wgpuBufferRelease(b->buf);
    g->bytes -= b->size;
    g->n_buffers--;
    free(b);
}

uint64_t wgllm_gpu_buffer_size(const struct wgllm_gpu_buffer *b) { return b->size; }

void wgllm_gpu_buffer_write(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, const void *data,
                            size_t size) {
    WGLLM_ASSERT(offset % 4 == 0 && offset + size <= b->size);
    size_t main = size & ~(size_t)3;
    if (main) g->f.wgpuQueueWriteBuffer(g->queue, b->buf, offset, data, main);
    if (size > main) {
        uint8_t tail[4] = {0};
        memcpy(tail, (const uint8_t *)data + main, size - main);
        g->f.wgpuQueueWriteBuffer(g->queue, b->buf, offset + main, tail, 4);
    }
}

struct map_res {
    uint32_t status;
    bool done;
    char msg[300];
};

static void on_map(uint32_t status, WGPUStringView message, void *u1, void *u2) {
    struct map_res *r = u1;
    r->status = status;
    r->done = true;
    sv_copy(r->msg, sizeof r->msg, message);
}

enum wgllm_status wgllm_gpu_readback(struct wgllm_gpu *g, struct wgllm_gpu_buffer *rb, uint64_t offset, void *dst,
                                     size_t size, struct wgllm_error *err) {
    WGLLM_ASSERT(rb->usage & WGLLM_GPU_READBACK);
    WGLLM_ASSERT(offset % 8 == 0 && offset + size <= rb->size);
    size_t msize = (size + 3) & ~(size_t)3;
    struct map_res mr = {0};
    WGPUBufferMapCallbackInfo ci = {NULL, WGPUCallbackMode_WaitAnyOnly, on_map, &mr, NULL};
    WGPUFuture fut = g->f.wgpuBufferMapAsync(rb->buf, WGPUMapMode_Read, offset, msize, ci);
    if (!wait_future(g, fut) || mr.status != WGPUMapAsyncStatus_Success) {
        enum wgllm_status st = take_error(g, err, "GPU readback");
        if (st) return st;
        if (g->timed_out)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "GPU readback: the device did not finish within %d s (WGLLM_GPU_TIMEOUT=SECONDS "
                                   "allows more; software adapters are slow on large models)", wait_limit_s());
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "mapping a GPU buffer for readback failed (status %u): %s",
                               mr.status, mr.msg);
    }
    const void *p = g->f.wgpuBufferGetConstMappedRange(rb->buf, offset, msize);
    if (!p) {
        g->f.wgpuBufferUnmap(rb->buf);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "mapped GPU buffer range is not readable");
    }
    memcpy(dst, p, size);
    atomic_fetch_add(&readback_bytes, (uint64_t)size);
    g->f.wgpuBufferUnmap(rb->buf);
    return take_error(g, err, "GPU work before the readback");
}

/* ---- pipelines ------------------------------------------------------------ */

struct scope_res {
    uint32_t status, type;
    bool done;
    char msg[1500];
};

static void on_pop_scope(uint32_t status, uint32_t type, WGPUStringView message, void *u1, void *u2) {
    struct scope_res *r = u1;
    r->status = status;
    r->type = type;
    r->done = true;
    size_t cap = sizeof r->msg;
    sv_copy(r->msg, cap, message);
}

struct wgllm_gpu_pipeline *wgllm_gpu_pipeline_get(struct wgllm_gpu *g, const char *wgsl, const char *label,
                                                  struct wgllm_error *err) {
    struct wgllm_gpu_pipeline *cached = wgllm_gpu_pipe_cache_find(&g->pipes, wgsl);
    if (cached) return cached;

    g->f.wgpuDevicePushErrorScope(g->device, WGPUErrorFilter_Validation);
    WGPUShaderSourceWGSL src = {{NULL, WGPUSType_ShaderSourceWGSL}, sv(wgsl)};
    WGPUShaderModuleDescriptor md = {&src.chain, sv(label)};
    WGPUShaderModule mod = g->f.wgpuDeviceCreateShaderModule(g->device, &md);
    WGPUComputePipelineDescriptor pd = {0};
    pd.label = sv(label);
    pd.layout = NULL;
    pd.compute.module = mod;
    pd.compute.entryPoint = sv("main");
    WGPUComputePipeline pipe = mod ? g->f.wgpuDeviceCreateComputePipeline(g->device, &pd) : NULL;
    if (mod) g->f.wgpuShaderModuleRelease(mod);
    struct scope_res sr = {0};
    WGPUPopErrorScopeCallbackInfo pci = {NULL, WGPUCallbackMode_WaitAnyOnly, on_pop_scope, &sr, NULL};
    WGPUFuture fut = g->f.wgpuDevicePopErrorScope(g->device, pci);
    if (!wait_future(g, fut) || !sr.done) sr.type = WGPUErrorType_Internal;
    if (!pipe || sr.type != WGPUErrorType_NoError) {
        if (pipe) g->f.wgpuComputePipelineRelease(pipe);
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "compiling WGSL kernel '%s' failed: %s", label ? label : "",
                        sr.msg[0] ? sr.msg : "(no message)");
        return NULL;
    }
    struct wgllm_gpu_pipeline *p = calloc(1, sizeof *p);
    if (!p || !wgllm_gpu_pipe_cache_add(&g->pipes, wgsl, p)) {
        free(p);
        g->f.wgpuComputePipelineRelease(pipe);
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a pipeline");
        return NULL;
    }
    p->pipe = pipe;
    p->layout = g->f.wgpuComputePipelineGetBindGroupLayout(pipe, 0);
    return p;
}

int wgllm_gpu_pipeline_count(const struct wgllm_gpu *g) { return g->pipes.n; }

struct wgllm_gpu_bindgroup *wgllm_gpu_bindgroup_create(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, int n,
                                                       const struct wgllm_gpu_binding *b, struct wgllm_error *err) {
    WGPUBindGroupEntry e[16];
    WGLLM_ASSERT(n > 0 && n <= 16);
    for (int i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        e[i].binding = (uint32_t)i;
        e[i].buffer = b[i].buffer->buf;
        e[i].offset = b[i].offset;
        e[i].size = b[i].size ? b[i].size : b[i].buffer->size - b[i].offset;
    }
    WGPUBindGroupDescriptor d = {NULL, sv(NULL), p->layout, (size_t)n, e};
    g->f.wgpuDevicePushErrorScope(g->device, WGPUErrorFilter_Validation);
    WGPUBindGroup bg = g->f.wgpuDeviceCreateBindGroup(g->device, &d);
    struct scope_res sr = {0};
    WGPUPopErrorScopeCallbackInfo pci = {NULL, WGPUCallbackMode_WaitAnyOnly, on_pop_scope, &sr, NULL};
    WGPUFuture fut = g->f.wgpuDevicePopErrorScope(g->device, pci);
    if (!wait_future(g, fut) || !sr.done) sr.type = WGPUErrorType_Internal;
    struct wgllm_gpu_bindgroup *r = calloc(1, sizeof *r);
    if (!bg || sr.type != WGPUErrorType_NoError || !r) {
        if (bg) g->f.wgpuBindGroupRelease(bg);
        free(r);
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "creating a bind group failed: %s",
                        sr.msg[0] ? sr.msg : "(no message)");
        return NULL;
    }
    r->bg = bg;
    return r;
}

void wgllm_gpu_bindgroup_destroy(struct wgllm_gpu *g, struct wgllm_gpu_bindgroup *bg) {
    if (!bg) return;
    g->f.wgpuBindGroupRelease(bg->bg);
    free(bg);
}

/* ---- batches ---------------------------------------------------------------- */

void wgllm_gpu_batch_begin(struct wgllm_gpu *g) {
    WGLLM_ASSERT(!g->enc);
    WGPUCommandEncoderDescriptor d = {NULL, sv(NULL)};
    g->enc = g->f.wgpuDeviceCreateCommandEncoder(g->device, &d);
}

static void end_pass(struct wgllm_gpu *g) {
    if (!g->pass) return;
    g->f.wgpuComputePassEncoderEnd(g->pass);
    g->f.wgpuComputePassEncoderRelease(g->pass);
    g->pass = NULL;
}

void wgllm_gpu_dispatch(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, struct wgllm_gpu_bindgroup *bg,
                        uint32_t x, uint32_t y, uint32_t z) {
    WGLLM_ASSERT(g->enc);
    if (!g->pass) {
        WGPUComputePassDescriptor d = {NULL, sv(NULL), NULL};
        g->pass = g->f.wgpuCommandEncoderBeginComputePass(g->enc, &d);
    }
    g->f.wgpuComputePassEncoderSetPipeline(g->pass, p->pipe);
    g->f.wgpuComputePassEncoderSetBindGroup(g->pass, 0, bg->bg, 0, NULL);
    g->f.wgpuComputePassEncoderDispatchWorkgroups(g->pass, x, y, z);
}

void wgllm_gpu_copy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *src, uint64_t src_off, struct wgllm_gpu_buffer *dst,
                    uint64_t dst_off, uint64_t size) {
    WGLLM_ASSERT(g->enc);
    end_pass(g);
    g->f.wgpuCommandEncoderCopyBufferToBuffer(g->enc, src->buf, src_off, dst->buf, dst_off, size);
}

enum wgllm_status wgllm_gpu_batch_submit(struct wgllm_gpu *g, struct wgllm_error *err) {
    WGLLM_ASSERT(g->enc);
    end_pass(g);
    WGPUCommandBufferDescriptor d = {NULL, sv(NULL)};
    WGPUCommandBuffer cb = g->f.wgpuCommandEncoderFinish(g->enc, &d);
    g->f.wgpuCommandEncoderRelease(g->enc);
    g->enc = NULL;
    if (cb) {
        g->f.wgpuQueueSubmit(g->queue, 1, &cb);
        g->f.wgpuCommandBufferRelease(cb);
    }
    g->f.wgpuInstanceProcessEvents(g->instance);
    return take_error(g, err, "GPU batch");
}

uint64_t wgllm_gpu_bytes_allocated(const struct wgllm_gpu *g) { return g->bytes; }
int wgllm_gpu_buffer_count(const struct wgllm_gpu *g) { return g->n_buffers; }
