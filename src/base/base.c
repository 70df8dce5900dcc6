/*
 * base.c - errors, assertions, logging, aligned allocation, fp16 conversion,
 * CPU feature detection and the monotonic clock.
 */
#include "base/base.h"

#include <pthread.h>
#if defined(__linux__) && !defined(__EMSCRIPTEN__)
#include <sys/mman.h>
#endif
#include <time.h>

static const char *const status_names[] = {
    [WGLLM_STATUS_OK] = "ok",
    [WGLLM_STATUS_INVALID_ARGUMENT] = "invalid argument",
    [WGLLM_STATUS_IO] = "i/o error",
    [WGLLM_STATUS_BAD_FORMAT] = "bad format",
    [WGLLM_STATUS_UNSUPPORTED] = "unsupported",
    [WGLLM_STATUS_OUT_OF_MEMORY] = "out of memory",
    [WGLLM_STATUS_CONTEXT_FULL] = "context full",
};

const char *wgllm_status_name(enum wgllm_status status) {
    if ((unsigned)status < sizeof(status_names) / sizeof(status_names[0]) && status_names[status])
        return status_names[status];
    return "unknown status";
}

enum wgllm_status wgllm_error_set(struct wgllm_error *err, enum wgllm_status status,
                                  const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return status;
}

void wgllm_error_prefix(struct wgllm_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    char old[sizeof(err->message)];
    memcpy(old, err->message, sizeof(old));
    size_t pl = strnlen(prefix, sizeof(err->message) - 1);
    memcpy(err->message, prefix, pl);
    size_t ol = strnlen(old, sizeof(err->message) - 1 - pl);
    memcpy(err->message + pl, old, ol);
    err->message[pl + ol] = 0;
}

void wgllm_error_clear(struct wgllm_error *err) {
    if (err) {
        err->status = WGLLM_STATUS_OK;
        err->message[0] = 0;
    }
}

_Noreturn void wgllm_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "wgllm: %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static int log_level = -1;

void wgllm_log(enum wgllm_log_level level, const char *fmt, ...) {
    if (log_level < 0) {
        const char *e = getenv("WGLLM_LOG");
        log_level = WGLLM_LOG_WARN;
        if (e) {
            if (!strcmp(e, "error")) log_level = WGLLM_LOG_ERROR;
            else if (!strcmp(e, "info")) log_level = WGLLM_LOG_INFO;
            else if (!strcmp(e, "debug")) log_level = WGLLM_LOG_DEBUG;
        }
    }
    if ((int)level > log_level) return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "wgllm %s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *wgllm_alloc_aligned(size_t size) {
    void *p = NULL;
    if (size == 0) size = 64;
    if (size > SIZE_MAX - 63) return NULL; /* WGLLM_PAD would wrap to a tiny block */
    if (posix_memalign(&p, 64, WGLLM_PAD(size, 64)) != 0) return NULL;
    memset(p, 0, size);
    return p;
}

#if defined(__linux__) && !defined(__EMSCRIPTEN__)
static bool huge_avail;
static pthread_once_t huge_once = PTHREAD_ONCE_INIT;
static void huge_probe(void) {
    const char *no = getenv("WGLLM_NO_HUGEPAGE");
    FILE *f = no && strcmp(no, "0") ? NULL : fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        char line[128] = "";
        huge_avail = fgets(line, sizeof line, f) && !strstr(line, "[never]");
        fclose(f);
    }
}
#endif

bool wgllm_huge_pages_available(void) {
#if defined(__linux__) && !defined(__EMSCRIPTEN__)
    pthread_once(&huge_once, huge_probe);
    return huge_avail;
#else
    return false;
#endif
}

void *wgllm_alloc_large(size_t size) {
#if defined(__linux__) && !defined(__EMSCRIPTEN__)
    const size_t huge = (size_t)2 << 20;
    if (size >= huge && size <= SIZE_MAX - huge && wgllm_huge_pages_available()) {
        void *p = NULL;
        if (posix_memalign(&p, huge, WGLLM_PAD(size, huge)) != 0) return NULL;
        (void)madvise(p, WGLLM_PAD(size, huge), MADV_HUGEPAGE); /* only a hint: 4 KiB pages if refused */
        memset(p, 0, size);
        return p;
    }
#endif
    return wgllm_alloc_aligned(size);
}

void wgllm_free_aligned(void *p) { free(p); }

/* ---- fp16 -------------------------------------------------------------- */

float wgllm_fp16_to_fp32(wgllm_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    union { uint32_t u; float f; } v = {.u = bits};
    return v.f;
}

wgllm_fp16 wgllm_fp32_to_fp16(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    uint32_t x = v.u;
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (wgllm_fp16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (wgllm_fp16)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* subnormal or zero in half */
        if (ax < 0x33000000u) return (wgllm_fp16)sign; /* < half of smallest subnormal */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        /* value = m * 2^(e-150); half subnormal unit = 2^-24 -> q = m >> (126 - e) */
        int shift = 126 - (int)e;
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (wgllm_fp16)(sign | q);
    }
    /* normal: rebias and round mantissa to nearest even */
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);
    r -= (127 - 15) << 23;
    return (wgllm_fp16)(sign | (r >> 13));
}

float wgllm_fp16_table[1 << 16];

/* ---- CPU features ------------------------------------------------------ */

static struct wgllm_cpu_caps cpu_caps;
static char cpu_features_str[160];

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
static bool amx_permitted(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }
#else
static bool amx_permitted(void) { return false; }
#endif
static void detect_cpu(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
    cpu_caps.fma = ymm && ((c >> 12) & 1);
    cpu_caps.f16c = ymm && ((c >> 29) & 1);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        cpu_caps.avx2 = ymm && ((b >> 5) & 1);
        cpu_caps.avx512f = zmm && ((b >> 16) & 1);
        cpu_caps.avx512bw = zmm && ((b >> 30) & 1);
        cpu_caps.avx512vl = zmm && ((b >> 31) & 1);
        cpu_caps.avx512vnni = zmm && ((c >> 11) & 1);
        /* the OS must save the tile state (XCR0 bits 17-18, XTILECFG and
         * XTILEDATA), and Linux hands it to a process only on request; the
         * permission covers every thread, those started later too */
        cpu_caps.amx_int8 = ((d >> 25) & 1) && (xcr0 & 0x60000) == 0x60000 && amx_permitted();
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        cpu_caps.avxvnni = ymm && ((a >> 4) & 1);
        cpu_caps.avx512bf16 = zmm && ((a >> 5) & 1);
    }
    /* WGLLM_CPU=avx512|avx2|scalar caps the kernels, to test and compare
     * paths (avx512: without AVX512_BF16 and AMX, as on Skylake-X / Ice Lake). */
    const char *cap = getenv("WGLLM_CPU");
    if (cap && !strcmp(cap, "avx512")) cpu_caps.avx512bf16 = cpu_caps.amx_int8 = false;
    if (cap && (!strcmp(cap, "avx2") || !strcmp(cap, "scalar"))) {
        cpu_caps.avx512f = cpu_caps.avx512bw = cpu_caps.avx512vl = false;
        cpu_caps.avx512vnni = cpu_caps.avx512bf16 = cpu_caps.amx_int8 = false;
        if (!strcmp(cap, "scalar")) cpu_caps.avx2 = cpu_caps.fma = cpu_caps.f16c = cpu_caps.avxvnni = false;
    }
}
#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20) /* Linux arm64 uapi hwcap bit of SDOT/UDOT */
#endif
/* NEON is part of the arm64 baseline; SDOT is optional (absent on Cortex-A53,
 * A72, ...), so the kernel's hwcaps decide rather than the compile flags. */
static void detect_cpu(void) {
    cpu_caps.neon = true;
#if defined(__linux__)
    cpu_caps.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__ARM_FEATURE_DOTPROD)
    cpu_caps.dotprod = true;
#endif
    /* WGLLM_CPU=neon|scalar caps the kernels, to test and compare paths. */
    const char *cap = getenv("WGLLM_CPU");
    if (cap && (!strcmp(cap, "neon") || !strcmp(cap, "scalar"))) cpu_caps.dotprod = false;
    if (cap && !strcmp(cap, "scalar")) cpu_caps.neon = false;
}
#elif defined(__wasm_simd128__)
/* web/src/relaxed.lib.js: whether this browser validates the relaxed-SIMD
 * kernel module (every wasm link of the core takes that library). */
extern int wgllm_relaxed_available(void);

static void detect_cpu(void) {
    cpu_caps.simd128 = true;
    cpu_caps.relaxed_simd = wgllm_relaxed_available() != 0;
}
#else
static void detect_cpu(void) {}
#endif

static pthread_once_t base_once = PTHREAD_ONCE_INIT;

static void base_init_once(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) wgllm_fp16_table[i] = wgllm_fp16_to_fp32((wgllm_fp16)i);
    detect_cpu();
    const struct { bool on; const char *name; } f[] = {
        {cpu_caps.amx_int8, "AMX_INT8"},
        {cpu_caps.avx512vnni, "AVX512_VNNI"}, {cpu_caps.avx512bf16, "AVX512_BF16"},
        {cpu_caps.avx512f, "AVX512"},         {cpu_caps.avxvnni, "AVX_VNNI"},
        {cpu_caps.avx2, "AVX2"},              {cpu_caps.fma, "FMA"},
        {cpu_caps.f16c, "F16C"},              {cpu_caps.neon, "NEON"},
        {cpu_caps.dotprod, "DOTPROD"},     {cpu_caps.relaxed_simd, "RELAXED_SIMD"},
        {cpu_caps.simd128, "SIMD128"},
    };
    size_t off = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].on)
            off += (size_t)snprintf(cpu_features_str + off, sizeof(cpu_features_str) - off, "%s%s",
                                    off ? " " : "", f[i].name);
    if (!off) snprintf(cpu_features_str, sizeof(cpu_features_str), "scalar");
}

void wgllm_base_init(void) { pthread_once(&base_once, base_init_once); }

const struct wgllm_cpu_caps *wgllm_cpu_caps(void) {
    wgllm_base_init();
    return &cpu_caps;
}

const char *wgllm_cpu_features(void) {
    wgllm_base_init();
    return cpu_features_str;
}

int64_t wgllm_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
