/*
 * test_webgpu_wgsl.c - the generated WGSL does not change by accident: every
 * kernel source (wgllm_wgsl_all_keys) under a set of tunes is hashed and
 * compared with tests/webgpu_wgsl_hashes.txt, so a refactoring of the
 * generator or of the code around it proves itself byte-identical, and a
 * deliberate change of a kernel shows up as the list of kernels it changed
 * (to be explained in its commit). No device needed: this is text only.
 *
 *   build/release/tests/test_webgpu_wgsl            compare with the file
 *   build/release/tests/test_webgpu_wgsl --print    print the table (the
 *       file's contents: redirect into tests/webgpu_wgsl_hashes.txt after a
 *       deliberate kernel change)
 *
 * The tunes: the default, the software adapter's, the default with
 * subgroups, and variants of the autotuner's candidate lists (tune.c) that
 * move every tunable the generator reads.
 */
#include "test.h"

#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"

#include <stdint.h>

#define HASH_FILE "tests/webgpu_wgsl_hashes.txt"
#define MAX_KEYS 512

/* FNV-1a, 64 bits: enough to tell sources apart, short enough to read. */
static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

struct named_tune {
    const char *name;
    struct wgllm_wgsl_tune t;
};

static int make_tunes(struct named_tune *nt) {
    int n = 0;
    nt[n++] = (struct named_tune){"default", *wgllm_wgsl_default_tune()};
    nt[n++] = (struct named_tune){"cpu_adapter", *wgllm_wgsl_cpu_adapter_tune()};
    nt[n] = (struct named_tune){"subgroups", *wgllm_wgsl_default_tune()};
    nt[n++].t.matvec_subgroups = true;
    /* mat-vec 128 threads x 2 rows, mat-mat 64x64x32 with 8x8 micro tiles,
     * wider element-wise and row kernels, wider attention tiles */
    nt[n] = (struct named_tune){"mv128x2_mm64x64x32_8x8", *wgllm_wgsl_default_tune()};
    nt[n].t.wg_matvec = 128, nt[n].t.rows_matvec = 2, nt[n].t.wg_elem = 128, nt[n].t.wg_row = 256;
    nt[n].t.wg_attn = 128, nt[n].t.attn_max_dims = 2;
    nt[n].t.mm_tile_n = 64, nt[n].t.mm_tile_m = 64, nt[n].t.mm_tile_k = 32, nt[n].t.mm_micro_n = 8, nt[n].t.mm_micro_m = 8;
    n++;
    /* thread rows, direct mat-mat 64x8 with 1x8 micro tiles, K tiles of 64 */
    nt[n] = (struct named_tune){"rows32_direct64x8", *wgllm_wgsl_cpu_adapter_tune()};
    nt[n].t.rows_matvec = 32, nt[n].t.wg_elem = 256, nt[n].t.wg_attn = 16, nt[n].t.attn_max_dims = 16;
    nt[n].t.mm_tile_n = 64, nt[n].t.mm_tile_m = 8, nt[n].t.mm_tile_k = 64, nt[n].t.mm_micro_n = 1, nt[n].t.mm_micro_m = 8;
    n++;
    /* tiled mat-mat 32x32x64 with 4x4 micro tiles */
    nt[n] = (struct named_tune){"mm32x32x64_4x4", *wgllm_wgsl_default_tune()};
    nt[n].t.mm_tile_n = 32, nt[n].t.mm_tile_m = 32, nt[n].t.mm_tile_k = 64, nt[n].t.mm_micro_n = 4, nt[n].t.mm_micro_m = 4;
    n++;
    return n;
}

/* The table: one line per (tune, kernel) "tune label hash", then per tune
 * "tune TOTAL hash-of-its-sources count", then "ALL TOTAL hash count". */
static char *table(void) {
    static struct wgllm_kernel_key keys[MAX_KEYS];
    struct named_tune nt[8];
    const int n_tunes = make_tunes(nt);
    const int n_keys = wgllm_wgsl_all_keys(keys, MAX_KEYS);
    CHECK(n_keys > 0 && n_keys <= MAX_KEYS);
    struct wgllm_strbuf sb = {0};
    uint64_t all = 0xcbf29ce484222325ull;
    int n_all = 0;
    for (int ti = 0; ti < n_tunes; ti++) {
        char why[200];
        CHECK(wgllm_wgsl_tune_valid(&nt[ti].t, 256, 16384, why, sizeof why));
        uint64_t tot = 0xcbf29ce484222325ull;
        for (int i = 0; i < n_keys && i < MAX_KEYS; i++) {
            char label[64];
            wgllm_wgsl_key_label(&keys[i], label, sizeof label);
            char *src = wgllm_wgsl_generate(&keys[i], &nt[ti].t);
            CHECK(src != NULL);
            if (!src) continue;
            const uint64_t h = fnv1a(src);
            free(src);
            wgllm_strbuf_printf(&sb, "%s %s %016llx\n", nt[ti].name, label, (unsigned long long)h);
            tot = (tot ^ h) * 0x100000001b3ull;
            all = (all ^ h) * 0x100000001b3ull;
            n_all++;
        }
        wgllm_strbuf_printf(&sb, "%s TOTAL %016llx %d\n", nt[ti].name, (unsigned long long)tot, n_keys);
    }
    wgllm_strbuf_printf(&sb, "ALL TOTAL %016llx %d\n", (unsigned long long)all, n_all);
    CHECK(!sb.oom);
    return wgllm_strbuf_take(&sb);
}

/* Prints each line of `a` that `b` lacks (a, b: newline-separated). */
static int lines_missing(const char *a, const char *b, const char *what) {
    int n = 0;
    for (const char *l = a; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        bool found = false;
        for (const char *m = b; *m && !found;) {
            const char *f = strchr(m, '\n');
            size_t ml = f ? (size_t)(f - m) : strlen(m);
            found = ml == len && !memcmp(m, l, len);
            m = f ? f + 1 : m + ml;
        }
        if (!found) fprintf(stderr, "  %s: %.*s\n", what, (int)len, l), n++;
        l = e ? e + 1 : l + len;
    }
    return n;
}

TEST(generated_wgsl_is_unchanged) {
    char *now = table();
    size_t len;
    char *want = test_read_file(HASH_FILE, &len);
    CHECK(want != NULL); /* run from the repository root */
    if (now && want && strcmp(now, want)) {
        lines_missing(now, want, "generated now, not in " HASH_FILE);
        lines_missing(want, now, "in " HASH_FILE ", not generated now");
        fprintf(stderr, "  the generated WGSL changed: if on purpose, explain it in the commit and run\n"
                        "  build/release/tests/test_webgpu_wgsl --print > " HASH_FILE "\n");
        CHECK(!"generated WGSL matches " HASH_FILE);
    }
    free(now);
    free(want);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--print")) {
        char *t = table();
        if (!t || test_failed || test_checks_failed_in_current) return 1;
        fputs(t, stdout);
        free(t);
        return 0;
    }
    RUN(generated_wgsl_is_unchanged);
    return test_summary("test_webgpu_wgsl");
}
