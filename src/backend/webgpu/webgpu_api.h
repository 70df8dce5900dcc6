/*
 * webgpu_api.h - the subset of the standard webgpu.h C API that wgllm calls,
 * declared here because the library (Dawn, loaded with dlopen) ships no
 * header. Values and layouts are those of Dawn's webgpu.h of mid-2025
 * (WGPUStringView strings, CallbackInfo structs returning WGPUFuture,
 * WGPUInstanceDescriptor.capabilities). tests/test_webgpu.c checks them
 * against the library: a wrong layout shows as a validation error there.
 *
 * Only types are declared; the functions are reached through the table of
 * pointers in hal_native.c, so nothing links against the library.
 */
#ifndef WGLLM_WEBGPU_API_H
#define WGLLM_WEBGPU_API_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t WGPUBool;
typedef uint64_t WGPUFlags;

typedef struct WGPUInstanceImpl *WGPUInstance;
typedef struct WGPUAdapterImpl *WGPUAdapter;
typedef struct WGPUDeviceImpl *WGPUDevice;
typedef struct WGPUQueueImpl *WGPUQueue;
typedef struct WGPUBufferImpl *WGPUBuffer;
typedef struct WGPUShaderModuleImpl *WGPUShaderModule;
typedef struct WGPUComputePipelineImpl *WGPUComputePipeline;
typedef struct WGPUBindGroupLayoutImpl *WGPUBindGroupLayout;
typedef struct WGPUBindGroupImpl *WGPUBindGroup;
typedef struct WGPUPipelineLayoutImpl *WGPUPipelineLayout;
typedef struct WGPUCommandEncoderImpl *WGPUCommandEncoder;
typedef struct WGPUCommandBufferImpl *WGPUCommandBuffer;
typedef struct WGPUComputePassEncoderImpl *WGPUComputePassEncoder;
typedef struct WGPUSamplerImpl *WGPUSampler;
typedef struct WGPUTextureViewImpl *WGPUTextureView;
typedef struct WGPUSurfaceImpl *WGPUSurface;
typedef struct WGPUQuerySetImpl *WGPUQuerySet;

#define WGPU_STRLEN SIZE_MAX
#define WGPU_WHOLE_SIZE UINT64_MAX

typedef struct WGPUStringView {
    const char *data;
    size_t length; /* WGPU_STRLEN: NUL-terminated */
} WGPUStringView;

typedef struct WGPUChainedStruct {
    const struct WGPUChainedStruct *next;
    uint32_t sType;
} WGPUChainedStruct;

typedef struct WGPUFuture {
    uint64_t id;
} WGPUFuture;

typedef struct WGPUFutureWaitInfo {
    WGPUFuture future;
    WGPUBool completed;
} WGPUFutureWaitInfo;

/* enums (uint32 in the ABI) */
enum { WGPUSType_ShaderSourceWGSL = 0x00000002 };
enum { WGPUCallbackMode_WaitAnyOnly = 1, WGPUCallbackMode_AllowProcessEvents = 2, WGPUCallbackMode_AllowSpontaneous = 3 };
enum { WGPUWaitStatus_Success = 1, WGPUWaitStatus_TimedOut = 2, WGPUWaitStatus_Error = 3 };
enum { WGPURequestAdapterStatus_Success = 1 };
enum { WGPURequestDeviceStatus_Success = 1 };
enum { WGPUMapAsyncStatus_Success = 1 };
enum { WGPUStatus_Success = 1, WGPUStatus_Error = 2 };
enum { WGPUFeatureLevel_Core = 2 };
enum { WGPUPowerPreference_HighPerformance = 2 };
enum { WGPUErrorType_NoError = 1, WGPUErrorType_Validation = 2, WGPUErrorType_OutOfMemory = 3, WGPUErrorType_Internal = 4 };
enum { WGPUErrorFilter_Validation = 1, WGPUErrorFilter_OutOfMemory = 2, WGPUErrorFilter_Internal = 3 };
enum {
    WGPUBackendType_Undefined = 0, WGPUBackendType_Null = 1, WGPUBackendType_WebGPU = 2, WGPUBackendType_D3D11 = 3,
    WGPUBackendType_D3D12 = 4, WGPUBackendType_Metal = 5, WGPUBackendType_Vulkan = 6, WGPUBackendType_OpenGL = 7,
    WGPUBackendType_OpenGLES = 8
};
enum { WGPUAdapterType_DiscreteGPU = 1, WGPUAdapterType_IntegratedGPU = 2, WGPUAdapterType_CPU = 3, WGPUAdapterType_Unknown = 4 };
/* This generation numbers features as the standard header of early/mid 2025
 * (DepthClipControl = 1 ... Subgroups = 0x11, CoreFeaturesAndLimits = 0x12);
 * a later Dawn moved CoreFeaturesAndLimits first. On SwiftShader the library
 * reports 0x11 and 0x12 but not 0x0A, matching Chromium's "subgroups yes,
 * shader-f16 no"; tests/test_webgpu.c compiles a subgroup kernel to confirm. */
enum { WGPUFeatureName_ShaderF16 = 0x0A, WGPUFeatureName_Subgroups = 0x11, WGPUFeatureName_CoreFeaturesAndLimits = 0x12 };

/* flags (uint64) */
#define WGPUBufferUsage_MapRead ((WGPUFlags)0x0001)
#define WGPUBufferUsage_MapWrite ((WGPUFlags)0x0002)
#define WGPUBufferUsage_CopySrc ((WGPUFlags)0x0004)
#define WGPUBufferUsage_CopyDst ((WGPUFlags)0x0008)
#define WGPUBufferUsage_Uniform ((WGPUFlags)0x0040)
#define WGPUBufferUsage_Storage ((WGPUFlags)0x0080)
#define WGPUMapMode_Read ((WGPUFlags)0x0001)

typedef struct WGPUInstanceCapabilities {
    WGPUChainedStruct *nextInChain;
    WGPUBool timedWaitAnyEnable;
    size_t timedWaitAnyMaxCount;
} WGPUInstanceCapabilities;

typedef struct WGPUInstanceDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUInstanceCapabilities capabilities;
} WGPUInstanceDescriptor;

typedef struct WGPURequestAdapterOptions {
    const WGPUChainedStruct *nextInChain;
    uint32_t featureLevel;
    uint32_t powerPreference;
    WGPUBool forceFallbackAdapter;
    uint32_t backendType;
    WGPUSurface compatibleSurface;
} WGPURequestAdapterOptions;

typedef void (*WGPURequestAdapterCallback)(uint32_t status, WGPUAdapter adapter, WGPUStringView message,
                                           void *userdata1, void *userdata2);
typedef struct WGPURequestAdapterCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    uint32_t mode;
    WGPURequestAdapterCallback callback;
    void *userdata1, *userdata2;
} WGPURequestAdapterCallbackInfo;

typedef void (*WGPURequestDeviceCallback)(uint32_t status, WGPUDevice device, WGPUStringView message,
                                          void *userdata1, void *userdata2);
typedef struct WGPURequestDeviceCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    uint32_t mode;
    WGPURequestDeviceCallback callback;
    void *userdata1, *userdata2;
} WGPURequestDeviceCallbackInfo;

typedef void (*WGPUDeviceLostCallback)(const WGPUDevice *device, uint32_t reason, WGPUStringView message,
                                       void *userdata1, void *userdata2);
typedef struct WGPUDeviceLostCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    uint32_t mode;
    WGPUDeviceLostCallback callback;
    void *userdata1, *userdata2;
} WGPUDeviceLostCallbackInfo;

typedef void (*WGPUUncapturedErrorCallback)(const WGPUDevice *device, uint32_t type, WGPUStringView message,
                                            void *userdata1, void *userdata2);
typedef struct WGPUUncapturedErrorCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    WGPUUncapturedErrorCallback callback;
    void *userdata1, *userdata2;
} WGPUUncapturedErrorCallbackInfo;

typedef void (*WGPUPopErrorScopeCallback)(uint32_t status, uint32_t type, WGPUStringView message, void *userdata1,
                                          void *userdata2);
typedef struct WGPUPopErrorScopeCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    uint32_t mode;
    WGPUPopErrorScopeCallback callback;
    void *userdata1, *userdata2;
} WGPUPopErrorScopeCallbackInfo;

typedef void (*WGPUBufferMapCallback)(uint32_t status, WGPUStringView message, void *userdata1, void *userdata2);
typedef struct WGPUBufferMapCallbackInfo {
    const WGPUChainedStruct *nextInChain;
    uint32_t mode;
    WGPUBufferMapCallback callback;
    void *userdata1, *userdata2;
} WGPUBufferMapCallbackInfo;

typedef struct WGPUAdapterInfo {
    WGPUChainedStruct *nextInChain;
    WGPUStringView vendor, architecture, device, description;
    uint32_t backendType;
    uint32_t adapterType;
    uint32_t vendorID, deviceID;
    uint32_t subgroupMinSize, subgroupMaxSize;
} WGPUAdapterInfo;

typedef struct WGPULimits {
    WGPUChainedStruct *nextInChain;
    uint32_t maxTextureDimension1D, maxTextureDimension2D, maxTextureDimension3D, maxTextureArrayLayers;
    uint32_t maxBindGroups, maxBindGroupsPlusVertexBuffers, maxBindingsPerBindGroup;
    uint32_t maxDynamicUniformBuffersPerPipelineLayout, maxDynamicStorageBuffersPerPipelineLayout;
    uint32_t maxSampledTexturesPerShaderStage, maxSamplersPerShaderStage, maxStorageBuffersPerShaderStage;
    uint32_t maxStorageTexturesPerShaderStage, maxUniformBuffersPerShaderStage;
    uint64_t maxUniformBufferBindingSize;
    uint64_t maxStorageBufferBindingSize;
    uint32_t minUniformBufferOffsetAlignment, minStorageBufferOffsetAlignment;
    uint32_t maxVertexBuffers;
    uint64_t maxBufferSize;
    uint32_t maxVertexAttributes, maxVertexBufferArrayStride, maxInterStageShaderVariables;
    uint32_t maxColorAttachments, maxColorAttachmentBytesPerSample;
    uint32_t maxComputeWorkgroupStorageSize, maxComputeInvocationsPerWorkgroup;
    uint32_t maxComputeWorkgroupSizeX, maxComputeWorkgroupSizeY, maxComputeWorkgroupSizeZ;
    uint32_t maxComputeWorkgroupsPerDimension;
} WGPULimits;

typedef struct WGPUSupportedFeatures {
    size_t featureCount;
    const uint32_t *features;
} WGPUSupportedFeatures;

typedef struct WGPUQueueDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
} WGPUQueueDescriptor;

typedef struct WGPUDeviceDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
    size_t requiredFeatureCount;
    const uint32_t *requiredFeatures;
    const WGPULimits *requiredLimits;
    WGPUQueueDescriptor defaultQueue;
    WGPUDeviceLostCallbackInfo deviceLostCallbackInfo;
    WGPUUncapturedErrorCallbackInfo uncapturedErrorCallbackInfo;
} WGPUDeviceDescriptor;

typedef struct WGPUBufferDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
    WGPUFlags usage;
    uint64_t size;
    WGPUBool mappedAtCreation;
} WGPUBufferDescriptor;

typedef struct WGPUShaderSourceWGSL {
    WGPUChainedStruct chain;
    WGPUStringView code;
} WGPUShaderSourceWGSL;

typedef struct WGPUShaderModuleDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
} WGPUShaderModuleDescriptor;

typedef struct WGPUConstantEntry {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView key;
    double value;
} WGPUConstantEntry;

typedef struct WGPUComputeState {
    const WGPUChainedStruct *nextInChain;
    WGPUShaderModule module;
    WGPUStringView entryPoint;
    size_t constantCount;
    const WGPUConstantEntry *constants;
} WGPUComputeState;

typedef struct WGPUComputePipelineDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
    WGPUPipelineLayout layout; /* NULL: layout derived from the shader */
    WGPUComputeState compute;
} WGPUComputePipelineDescriptor;

typedef struct WGPUBindGroupEntry {
    const WGPUChainedStruct *nextInChain;
    uint32_t binding;
    WGPUBuffer buffer;
    uint64_t offset;
    uint64_t size;
    WGPUSampler sampler;
    WGPUTextureView textureView;
} WGPUBindGroupEntry;

typedef struct WGPUBindGroupDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
    WGPUBindGroupLayout layout;
    size_t entryCount;
    const WGPUBindGroupEntry *entries;
} WGPUBindGroupDescriptor;

typedef struct WGPUCommandEncoderDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
} WGPUCommandEncoderDescriptor;

typedef struct WGPUCommandBufferDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
} WGPUCommandBufferDescriptor;

typedef struct WGPUComputePassDescriptor {
    const WGPUChainedStruct *nextInChain;
    WGPUStringView label;
    const void *timestampWrites;
} WGPUComputePassDescriptor;

/* The functions wgllm resolves with dlsym (name, return type, arguments). */
#define WGLLM_WGPU_FUNCS(X)                                                                                      \
    X(wgpuCreateInstance, WGPUInstance, (const WGPUInstanceDescriptor *))                                       \
    X(wgpuInstanceRequestAdapter, WGPUFuture,                                                                    \
      (WGPUInstance, const WGPURequestAdapterOptions *, WGPURequestAdapterCallbackInfo))                         \
    X(wgpuInstanceWaitAny, uint32_t, (WGPUInstance, size_t, WGPUFutureWaitInfo *, uint64_t))                    \
    X(wgpuInstanceProcessEvents, void, (WGPUInstance))                                                           \
    X(wgpuInstanceRelease, void, (WGPUInstance))                                                                 \
    X(wgpuAdapterGetInfo, uint32_t, (WGPUAdapter, WGPUAdapterInfo *))                                            \
    X(wgpuAdapterInfoFreeMembers, void, (WGPUAdapterInfo))                                                       \
    X(wgpuAdapterGetLimits, uint32_t, (WGPUAdapter, WGPULimits *))                                               \
    X(wgpuAdapterHasFeature, WGPUBool, (WGPUAdapter, uint32_t))                                                  \
    X(wgpuAdapterGetFeatures, void, (WGPUAdapter, WGPUSupportedFeatures *))                                      \
    X(wgpuSupportedFeaturesFreeMembers, void, (WGPUSupportedFeatures))                                           \
    X(wgpuAdapterRequestDevice, WGPUFuture, (WGPUAdapter, const WGPUDeviceDescriptor *, WGPURequestDeviceCallbackInfo)) \
    X(wgpuAdapterRelease, void, (WGPUAdapter))                                                                   \
    X(wgpuDeviceGetLimits, uint32_t, (WGPUDevice, WGPULimits *))                                                 \
    X(wgpuDeviceGetQueue, WGPUQueue, (WGPUDevice))                                                               \
    X(wgpuDeviceCreateBuffer, WGPUBuffer, (WGPUDevice, const WGPUBufferDescriptor *))                            \
    X(wgpuDeviceCreateShaderModule, WGPUShaderModule, (WGPUDevice, const WGPUShaderModuleDescriptor *))          \
    X(wgpuDeviceCreateComputePipeline, WGPUComputePipeline, (WGPUDevice, const WGPUComputePipelineDescriptor *)) \
    X(wgpuDeviceCreateBindGroup, WGPUBindGroup, (WGPUDevice, const WGPUBindGroupDescriptor *))                   \
    X(wgpuDeviceCreateCommandEncoder, WGPUCommandEncoder, (WGPUDevice, const WGPUCommandEncoderDescriptor *))    \
    X(wgpuDevicePushErrorScope, void, (WGPUDevice, uint32_t))                                                    \
    X(wgpuDevicePopErrorScope, WGPUFuture, (WGPUDevice, WGPUPopErrorScopeCallbackInfo))                          \
    X(wgpuDeviceDestroy, void, (WGPUDevice))                                                                     \
    X(wgpuDeviceRelease, void, (WGPUDevice))                                                                     \
    X(wgpuQueueWriteBuffer, void, (WGPUQueue, WGPUBuffer, uint64_t, const void *, size_t))                       \
    X(wgpuQueueSubmit, void, (WGPUQueue, size_t, const WGPUCommandBuffer *))                                     \
    X(wgpuQueueRelease, void, (WGPUQueue))                                                                       \
    X(wgpuBufferMapAsync, WGPUFuture, (WGPUBuffer, WGPUFlags, size_t, size_t, WGPUBufferMapCallbackInfo))        \
    X(wgpuBufferGetConstMappedRange, const void *, (WGPUBuffer, size_t, size_t))                                \
    X(wgpuBufferUnmap, void, (WGPUBuffer))                                                                       \
    X(wgpuBufferDestroy, void, (WGPUBuffer))                                                                     \
    X(wgpuBufferRelease, void, (WGPUBuffer))                                                                     \
    X(wgpuShaderModuleRelease, void, (WGPUShaderModule))                                                         \
    X(wgpuComputePipelineGetBindGroupLayout, WGPUBindGroupLayout, (WGPUComputePipeline, uint32_t))               \
    X(wgpuComputePipelineRelease, void, (WGPUComputePipeline))                                                   \
    X(wgpuBindGroupLayoutRelease, void, (WGPUBindGroupLayout))                                                   \
    X(wgpuBindGroupRelease, void, (WGPUBindGroup))                                                               \
    X(wgpuCommandEncoderBeginComputePass, WGPUComputePassEncoder,                                                \
      (WGPUCommandEncoder, const WGPUComputePassDescriptor *))                                                   \
    X(wgpuCommandEncoderCopyBufferToBuffer, void, (WGPUCommandEncoder, WGPUBuffer, uint64_t, WGPUBuffer, uint64_t, uint64_t)) \
    X(wgpuCommandEncoderFinish, WGPUCommandBuffer, (WGPUCommandEncoder, const WGPUCommandBufferDescriptor *))    \
    X(wgpuCommandEncoderRelease, void, (WGPUCommandEncoder))                                                     \
    X(wgpuCommandBufferRelease, void, (WGPUCommandBuffer))                                                       \
    X(wgpuComputePassEncoderSetPipeline, void, (WGPUComputePassEncoder, WGPUComputePipeline))                    \
    X(wgpuComputePassEncoderSetBindGroup, void, (WGPUComputePassEncoder, uint32_t, WGPUBindGroup, size_t, const uint32_t *)) \
    X(wgpuComputePassEncoderDispatchWorkgroups, void, (WGPUComputePassEncoder, uint32_t, uint32_t, uint32_t))    \
    X(wgpuComputePassEncoderEnd, void, (WGPUComputePassEncoder))                                                 \
    X(wgpuComputePassEncoderRelease, void, (WGPUComputePassEncoder))

#endif
