/*
 * checked.c - the size checks and the seeded hash that every parser of
 * outside input uses (declared in base.h): checked array allocation, the
 * test hook that emulates a 32-bit size_t, and SipHash-1-3 under a random
 * per-process key.
 */
#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

size_t wgllm_size_limit = SIZE_MAX;

void wgllm_set_size_limit(size_t limit) { wgllm_size_limit = limit ? limit : SIZE_MAX; }

void *wgllm_malloc_array(uint64_t n, size_t size) {
    size_t bytes;
    if (!wgllm_size_mul(n, size, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *wgllm_calloc_array(uint64_t n, size_t size) {
    size_t bytes;
    if (!wgllm_size_mul(n, size, &bytes)) return NULL;
    return calloc(bytes ? bytes : 1, 1);
}

/* ---- SipHash-1-3 (Aumasson & Bernstein; one compression round, three
 * finalisation rounds, as Rust's and Python's hash tables use) ---------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                          \
    do {                                                                                  \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                         \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                            \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                            \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                         \
    } while (0)

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

uint64_t wgllm_hash(const struct wgllm_hash_key *k, uint64_t tweak, const void *data, size_t n) {
    const uint8_t *p = data;
    const uint64_t k0 = k->k0, k1 = k->k1 ^ tweak;
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t j = 0; i + j < n; j++) b |= (uint64_t)p[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the key ------------------------------------------------------------- */

static struct wgllm_hash_key process_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t key_counter;

/* splitmix64: spreads a counter or a weak seed over all 64 bits */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void key_init_once(void) {
    uint64_t r[2];
    if (getentropy(r, sizeof r) != 0) {
        /* No entropy source: the clock, the process id and an address
         * (ASLR) are a weaker key, but still one no file can know. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r[0] = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)getpid());
        r[1] = mix64(r[0] ^ (uint64_t)(uintptr_t)&process_key);
    }
    process_key.k0 = r[0];
    process_key.k1 = r[1];
}

struct wgllm_hash_key wgllm_hash_key_new(void) {
    pthread_once(&key_once, key_init_once);
    uint64_t c = mix64(atomic_fetch_add(&key_counter, 1) + 1);
    struct wgllm_hash_key k = {process_key.k0 ^ c, process_key.k1 ^ mix64(c)};
    return k;
}
