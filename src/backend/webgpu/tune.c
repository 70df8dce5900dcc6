/*
 * tune.c - the autotuner of the WGSL tunables and its per-adapter cache
 * file (see tune.h). The sweep owns its GPU buffers (made at its start,
 * destroyed at its end); the cache is plain text, rewritten whole (temp
 * file + rename) so that a crash never leaves half a file.
 */
#include "backend/webgpu/tune.h"
#include "model/model.h"
#include "quant/quant.h"
#include "base/strbuf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the tunables as key=value ---------------------------------------------- */

static const struct {
    const char *key;
    size_t off;
    bool is_bool;
} fields[] = {
    {"wg_matvec", offsetof(struct wgllm_wgsl_tune, wg_matvec), false},
    {"rows_matvec", offsetof(struct wgllm_wgsl_tune, rows_matvec), false},
    {"matvec_thread_rows", offsetof(struct wgllm_wgsl_tune, matvec_thread_rows), true},
    {"matvec_subgroups", offsetof(struct wgllm_wgsl_tune, matvec_subgroups), true},
    {"matvec_split_round", offsetof(struct wgllm_wgsl_tune, matvec_split_round), true},
    {"wg_row", offsetof(struct wgllm_wgsl_tune, wg_row), false},
    {"wg_elem", offsetof(struct wgllm_wgsl_tune, wg_elem), false},
    {"wg_attn", offsetof(struct wgllm_wgsl_tune, wg_attn), false},
    {"attn_max_dims", offsetof(struct wgllm_wgsl_tune, attn_max_dims), false},
    {"mm_tile_n", offsetof(struct wgllm_wgsl_tune, mm_tile_n), false},
    {"mm_tile_m", offsetof(struct wgllm_wgsl_tune, mm_tile_m), false},
    {"mm_tile_k", offsetof(struct wgllm_wgsl_tune, mm_tile_k), false},
    {"mm_micro_n", offsetof(struct wgllm_wgsl_tune, mm_micro_n), false},
    {"mm_micro_m", offsetof(struct wgllm_wgsl_tune, mm_micro_m), false},
    {"mm_direct", offsetof(struct wgllm_wgsl_tune, mm_direct), true},
    {"mm_split_k", offsetof(struct wgllm_wgsl_tune, mm_split_k), false},
};
#define N_FIELDS (sizeof fields / sizeof *fields)

void wgllm_tune_fprint(FILE *f, const struct wgllm_wgsl_tune *t) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *at = (const char *)t + fields[i].off;
        if (fields[i].is_bool) fprintf(f, "%s=%d\n", fields[i].key, *(const bool *)at ? 1 : 0);
        else fprintf(f, "%s=%u\n", fields[i].key, *(const uint32_t *)at);
    }
}

bool wgllm_tune_equal(const struct wgllm_wgsl_tune *a, const struct wgllm_wgsl_tune *b) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *pa = (const char *)a + fields[i].off, *pb = (const char *)b + fields[i].off;
        if (fields[i].is_bool ? *(const bool *)pa != *(const bool *)pb : *(const uint32_t *)pa != *(const uint32_t *)pb)
            return false;
    }
    return true;
}

/* Sets field `key` from `val`; false when the key is unknown or the value
 * not a number in range. */
static bool tune_set(struct wgllm_wgsl_tune *t, const char *key, const char *val) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (strcmp(key, fields[i].key)) continue;
        char *end;
        errno = 0;
        unsigned long v = strtoul(val, &end, 10);
        if (errno || end == val || *end || val[0] == '-' || v > 65536) return false;
        char *at = (char *)t + fields[i].off;
        if (fields[i].is_bool) {
            if (v > 1) return false;
            *(bool *)at = v == 1;
        } else {
            *(uint32_t *)at = (uint32_t)v;
        }
        return true;
    }
    return false;
}

const struct wgllm_wgsl_tune *wgllm_wgsl_tune_defaults_for(const struct wgllm_gpu_info *info) {
    return info->is_cpu && !getenv("WGLLM_WEBGPU_GPU_TUNE") ? wgllm_wgsl_cpu_adapter_tune() : wgllm_wgsl_default_tune();
}

/* ---- the cache file ---------------------------------------------------------- */

const char *wgllm_tune_cache_path(char *buf, size_t cap) {
    const char *e = getenv("WGLLM_TUNE_CACHE");
    if (e) {
        if (!e[0] || !strcmp(e, "off")) return NULL;
        snprintf(buf, cap, "%s", e);
        return buf;
    }
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0]) snprintf(buf, cap, "%s/wgllm/webgpu-tune.txt", x);
    else if ((x = getenv("HOME")) && x[0]) snprintf(buf, cap, "%s/.cache/wgllm/webgpu-tune.txt", x);
    else return NULL;
    return buf;
}

/* The identity of an adapter as the cache writes it: values on one line. */
struct ident {
    char v[5][300];
};
static const char *ident_keys[5] = {"vendor_id", "device_id", "name", "backend", "driver"};

static void one_line(char *dst, size_t cap, const char *s) {
    snprintf(dst, cap, "%s", s ? s : "");
    for (char *c = dst; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
}

static void ident_of(const struct wgllm_gpu_info *info, struct ident *id) {
    snprintf(id->v[0], sizeof id->v[0], "%u", info->vendor_id);
    snprintf(id->v[1], sizeof id->v[1], "%u", info->device_id);
    one_line(id->v[2], sizeof id->v[2], info->name);
    one_line(id->v[3], sizeof id->v[3], info->backend);
    one_line(id->v[4], sizeof id->v[4], info->description);
}

/* One parsed [adapter] section: where it is in the file, whom it names,
 * its values (over the adapter's defaults), and whether it parsed. */
struct section {
    size_t begin, end; /* byte range in the file text */
    struct ident id;
    bool has[5];
    struct wgllm_wgsl_tune t;
    char bad[200]; /* first problem, "" when none */
};

static void strip(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
}

/* Parses the file text into sections (at most cap). Returns the count, or -1
 * with why set when the header is wrong or a line outside a section is
 * not understood. */
static int parse_cache(const char *text, const struct wgllm_wgsl_tune *defaults, struct section *sec, int cap, char *why,
                       size_t why_cap) {
    int n = -1, line_no = 0;
    bool version_seen = false;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const size_t begin = (size_t)(p - text);
        char line[512];
        line_no++;
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        strip(line);
        p = eol ? eol + 1 : p + len;
        if (!line[0] || line[0] == '#') continue;
        if (!strcmp(line, "[adapter]")) {
            if (!version_seen) {
                snprintf(why, why_cap, "line %d: a section before the version line", line_no);
                return -1;
            }
            if (n + 1 >= cap) break;
            if (n >= 0) sec[n].end = begin;
            n++;
            memset(&sec[n], 0, sizeof sec[n]);
            sec[n].begin = begin;
            sec[n].t = *defaults;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) {
            if (n >= 0 && !sec[n].bad[0]) snprintf(sec[n].bad, sizeof sec[n].bad, "line %d: no '=' in '%.60s'", line_no, line);
            if (n < 0) {
                snprintf(why, why_cap, "line %d: no '=' in '%.60s'", line_no, line);
                return -1;
            }
            continue;
        }
        *eq = 0;
        const char *key = line, *val = eq + 1;
        if (n < 0) {
            if (strcmp(key, "version")) {
                snprintf(why, why_cap, "line %d: '%.40s' before the first [adapter] section (expected version=)", line_no, key);
                return -1;
            }
            if (strcmp(val, "1")) {
                snprintf(why, why_cap, "version %.20s, this build reads version %d", val, WGLLM_TUNE_CACHE_VERSION);
                return -1;
            }
            version_seen = true;
            continue;
        }
        bool known = false;
        for (int i = 0; i < 5; i++)
            if (!strcmp(key, ident_keys[i])) {
                snprintf(sec[n].id.v[i], sizeof sec[n].id.v[i], "%s", val);
                sec[n].has[i] = known = true;
            }
        if (!known && !tune_set(&sec[n].t, key, val) && !sec[n].bad[0])
            snprintf(sec[n].bad, sizeof sec[n].bad, "line %d: bad entry %.40s=%.40s", line_no, key, val);
    }
    if (!version_seen) {
        snprintf(why, why_cap, "no version line");
        return -1;
    }
    if (n >= 0) sec[n].end = strlen(text);
    return n + 1;
}

static bool ident_same(const struct ident *a, const struct ident *b) {
    for (int i = 0; i < 5; i++)
        if (strcmp(a->v[i], b->v[i])) return false;
    return true;
}

static bool ident_eq(const struct section *s, const struct ident *id) {
    for (int i = 0; i < 5; i++)
        if (!s->has[i] || strcmp(s->id.v[i], id->v[i])) return false;
    return true;
}

/* The whole file, NUL-terminated; *binary set when it holds a NUL byte.
 * NULL when missing, unreadable or 16 MiB or more: a cache is small, and
 * this bounds what a hostile file can make us allocate. */
static char *read_text(const char *path, bool *binary) {
    char *s;
    size_t n;
    *binary = false;
    if (wgllm_read_file(path, ((size_t)1 << 24) - 1, &s, &n, NULL) != WGLLM_STATUS_OK) return NULL;
    *binary = memchr(s, 0, n) != NULL;
    return s;
}

#define MAX_SECTIONS 64

enum wgllm_status wgllm_tune_cache_load(const char *path, const struct wgllm_gpu_info *info, struct wgllm_wgsl_tune *t,
                                        struct wgllm_error *err) {
    bool binary;
    char *text = read_text(path, &binary);
    if (!text) return wgllm_error_set(err, WGLLM_STATUS_IO, "no tune cache %s (or unreadable)", path);
    enum wgllm_status st = WGLLM_STATUS_OK;
    struct section *sec = malloc(sizeof *sec * MAX_SECTIONS);
    char why[256] = "";
    int n = sec && !binary ? parse_cache(text, wgllm_wgsl_tune_defaults_for(info), sec, MAX_SECTIONS, why, sizeof why) : -1;
    if (n < 0) {
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tune cache %s: %s", path, why[0] ? why : "not a text file");
        goto done;
    }
    struct ident id;
    ident_of(info, &id);
    for (int i = 0; i < n; i++) {
        if (!ident_eq(&sec[i], &id)) continue;
        if (sec[i].bad[0]) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tune cache %s: %s", path, sec[i].bad);
            goto done;
        }
        char v[200];
        if (!wgllm_wgsl_tune_valid(&sec[i].t, info->max_invocations, info->max_workgroup_storage, v, sizeof v)) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tune cache %s: the entry for %s is invalid: %s", path,
                                 info->name, v);
            goto done;
        }
        if ((sec[i].t.matvec_subgroups || sec[i].t.mm_split_k) && !info->subgroups) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tune cache %s: the entry for %s uses subgroups, which the device lacks",
                                 path, info->name);
            goto done;
        }
        *t = sec[i].t;
        goto done;
    }
    st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tune cache %s has no entry for %s", path, info->name);
done:
    free(sec);
    free(text);
    return st;
}

static void mkdirs_for(const char *path) {
    char d[1024];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) return;
    *slash = 0;
    for (char *c = d + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        mkdir(d, 0755);
        *c = '/';
    }
    mkdir(d, 0755);
}

enum wgllm_status wgllm_tune_cache_store(const char *path, const struct wgllm_gpu_info *info,
                                         const struct wgllm_wgsl_tune *t, struct wgllm_error *err) {
    char v[200];
    if (!wgllm_wgsl_tune_valid(t, info->max_invocations, info->max_workgroup_storage, v, sizeof v))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "refusing to cache an invalid tune: %s", v);
    mkdirs_for(path);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return wgllm_error_set(err, WGLLM_STATUS_IO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "# wgllm WebGPU kernel tunables per adapter, written by `wgllm tune`\nversion=%d\n",
            WGLLM_TUNE_CACHE_VERSION);
    /* keep the other adapters' sections of a readable file, as they were */
    bool binary;
    char *old = read_text(path, &binary);
    struct section *sec = old ? malloc(sizeof *sec * MAX_SECTIONS) : NULL;
    if (sec) {
        char why[256] = "a NUL byte in it";
        int n = binary ? -1 : parse_cache(old, wgllm_wgsl_default_tune(), sec, MAX_SECTIONS, why, sizeof why);
        struct ident id;
        ident_of(info, &id);
        if (n < 0) wgllm_log(WGLLM_LOG_WARN, "tune cache %s was unreadable (%s): rewritten", path, why);
        for (int i = 0; i < n; i++) {
            if (ident_eq(&sec[i], &id)) continue;
            fprintf(f, "%.*s", (int)(sec[i].end - sec[i].begin), old + sec[i].begin);
            if (sec[i].end > sec[i].begin && old[sec[i].end - 1] != '\n') fputc('\n', f);
        }
    }
    free(sec);
    free(old);
    struct ident id;
    ident_of(info, &id);
    fprintf(f, "[adapter]\n");
    for (int i = 0; i < 5; i++) fprintf(f, "%s=%s\n", ident_keys[i], id.v[i]);
    wgllm_tune_fprint(f, t);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return wgllm_error_set(err, WGLLM_STATUS_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return WGLLM_STATUS_OK;
}

const struct wgllm_wgsl_tune *wgllm_wgsl_tune_for(const struct wgllm_gpu_info *info) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        struct ident id;
        struct wgllm_wgsl_tune t;
    } loaded[8];
    static int n_loaded;
    const struct wgllm_wgsl_tune *def = wgllm_wgsl_tune_defaults_for(info);
    char buf[1024];
    const char *path = getenv("WGLLM_WEBGPU_GPU_TUNE") ? NULL : wgllm_tune_cache_path(buf, sizeof buf);
    if (!path) return def;
    struct wgllm_wgsl_tune t;
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_tune_cache_load(path, info, &t, &err);
    if (st == WGLLM_STATUS_BAD_FORMAT) wgllm_log(WGLLM_LOG_WARN, "%s: ignored, using the default tune", err.message);
    if (st) return def;
    if (wgllm_tune_equal(&t, def)) return def;
    /* the same adapter and values again: the same pointer (a loaded entry is never changed) */
    struct ident id;
    ident_of(info, &id);
    const struct wgllm_wgsl_tune *res = def;
    pthread_mutex_lock(&mu);
    int i = 0;
    for (; i < n_loaded; i++)
        if (ident_same(&loaded[i].id, &id) && wgllm_tune_equal(&loaded[i].t, &t)) break;
    if (i == n_loaded && n_loaded < (int)(sizeof loaded / sizeof *loaded)) {
        loaded[i].id = id;
        loaded[i].t = t;
        n_loaded++;
    }
    if (i < n_loaded) res = &loaded[i].t;
    pthread_mutex_unlock(&mu);
    wgllm_log(WGLLM_LOG_INFO, "WebGPU kernels: the tune cached in %s for %s", path, info->name);
    return res;
}

/* ---- the model's shapes -------------------------------------------------------- */

int wgllm_tune_model_shapes(const struct wgllm_model *m, struct wgllm_tune_shape *out, int cap) {
    int n = 0;
    for (int il = -1; il < m->hp.n_layer; il++) {
        const struct wgllm_layer *L = il >= 0 ? &m->layers[il] : NULL;
        const struct wgllm_weight *ws[7] = {&m->output};
        int nw = 1;
        if (L) {
            const struct wgllm_weight *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            memcpy(ws, lw, sizeof lw);
            nw = 7;
        }
        for (int j = 0; j < nw; j++) {
            const struct wgllm_weight *w = ws[j];
            if (!w->data && !w->ne1) continue;
            if (!wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, w->type) || w->ne0 <= 0 || w->ne1 <= 0) continue;
            int i = 0;
            for (; i < n; i++)
                if (out[i].type == w->type && out[i].rows == (uint32_t)w->ne1 && out[i].k == (uint32_t)w->ne0) break;
            if (i < n) out[i].count++;
            else if (n < cap) out[n++] = (struct wgllm_tune_shape){w->type, (uint32_t)w->ne1, (uint32_t)w->ne0, 1};
        }
    }
    return n;
}

/* ---- the sweep ---------------------------------------------------------------- */

struct wgllm_tune_params wgllm_tune_default_params(void) {
    return (struct wgllm_tune_params){
        .budget_s = 300,
        .reps = 8,
        .tokens = 64,
        .row_cap = 16384,
    };
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* G_PRO: the decode mat-vec's input rounded in its prologue, or by a
 * ROUND_ACT dispatch before it (matvec_split_round) */
enum group { G_MATVEC, G_MATMUL, G_ELEM, G_PRO, N_GROUPS };
static const char *group_names[N_GROUPS] = {"mat-vec", "mat-mat", "element-wise", "mat-vec prologue"};

#define MAX_SHAPES 32

/* The sweep's state: per shape its random weights, input and output
 * buffers and the default kernels' outputs (the correctness reference). */
struct tuner {
    struct wgllm_gpu *g;
    const struct wgllm_gpu_info *info;
    const struct wgllm_tune_params *p;
    struct wgllm_tune_shape sh[MAX_SHAPES];
    int n;
    struct wgllm_gpu_buffer *w[MAX_SHAPES], *x[MAX_SHAPES], *y[MAX_SHAPES], *ub[MAX_SHAPES];
    struct wgllm_gpu_buffer *xr[MAX_SHAPES], *rub[MAX_SHAPES]; /* G_PRO's rounded x and ROUND_ACT's parameters */
    float *ref[N_GROUPS][MAX_SHAPES]; /* per group: the default kernel's output */
    uint32_t elem_n;                  /* element-wise timing length */
    struct wgllm_gpu_buffer *eg, *eu, *ey, *eub;
    float *eref;
    uint64_t rng;
};

static uint32_t rnd(struct tuner *T) {
    T->rng ^= T->rng << 13;
    T->rng ^= T->rng >> 7;
    T->rng ^= T->rng << 17;
    return (uint32_t)(T->rng >> 32);
}
static float rndf(struct tuner *T) { return (float)(rnd(T) >> 8) / (1u << 23) - 1.0f; } /* [-1, 1) */

static void progress(struct tuner *T, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(struct tuner *T, const char *fmt, ...) {
    if (!T->p->progress) return;
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    T->p->progress(T->p->ud, line);
}

/* Random weights in the GGUF layout of the type, made directly (no
 * quantizer): block scales small and finite, quants uniform. */
static void *random_weights(struct tuner *T, uint32_t type, uint32_t rows, uint32_t k, size_t *bytes) {
    const size_t rs = wgllm_row_size(type, k);
    *bytes = rs * rows;
    unsigned char *w = malloc(*bytes + 4);
    if (!w) return NULL;
    if (type == WGLLM_TYPE_F32) {
        float *f = (float *)w;
        for (size_t i = 0; i < (size_t)rows * k; i++) f[i] = rndf(T);
    } else if (type == WGLLM_TYPE_F16) {
        wgllm_fp16 *h = (wgllm_fp16 *)w;
        for (size_t i = 0; i < (size_t)rows * k; i++) h[i] = wgllm_fp32_to_fp16(rndf(T));
    } else {
        const size_t bs = type == WGLLM_TYPE_Q8_0 ? 34 : 18;
        for (size_t b = 0; b < *bytes / bs; b++) {
            unsigned char *blk = w + b * bs;
            wgllm_fp16 d = wgllm_fp32_to_fp16(0.01f + 0.01f * (rndf(T) + 1.0f));
            memcpy(blk, &d, 2);
            for (size_t i = 2; i < bs; i++) blk[i] = (unsigned char)rnd(T);
        }
    }
    return w;
}

static struct wgllm_gpu_pipeline *pipe_key(struct tuner *T, const struct wgllm_kernel_key *key,
                                           const struct wgllm_wgsl_tune *t, bool is_default, struct wgllm_error *err);
static struct wgllm_gpu_pipeline *pipe_for(struct tuner *T, enum wgllm_kernel k, uint32_t type,
                                           const struct wgllm_wgsl_tune *t, bool is_default, struct wgllm_error *err) {
    const struct wgllm_kernel_key key = {.kernel = k, .type = type, .neox = false};
    return pipe_key(T, &key, t, is_default, err);
}

static struct wgllm_gpu_pipeline *pipe_key(struct tuner *T, const struct wgllm_kernel_key *key,
                                           const struct wgllm_wgsl_tune *t, bool is_default, struct wgllm_error *err) {
    const enum wgllm_kernel k = key->kernel;
    const uint32_t type = key->type;
    char *src = wgllm_wgsl_generate(key, t);
    if (src && T->p->wgsl_hook) src = T->p->wgsl_hook(T->p->ud, is_default, src);
    if (!src) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no %s kernel for %s", wgllm_wgsl_kernel_name(k), wgllm_type_name(type));
        return NULL;
    }
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(T->g, src, wgllm_wgsl_kernel_name(k), err);
    free(src);
    return p;
}

static uint32_t cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* A candidate's kernel for shape i (or the element-wise one), ready to
 * dispatch: pipeline, bind group, workgroup counts. */
struct prepared {
    struct wgllm_gpu_pipeline *pipe;
    struct wgllm_gpu_bindgroup *bg;
    uint32_t gx, gy;
    struct wgllm_gpu_pipeline *pipe0; /* G_PRO split: the ROUND_ACT dispatched before (NULL: none) */
    struct wgllm_gpu_bindgroup *bg0;
    uint32_t gx0;
};

/* Both dispatches of a prepared candidate. */
static void dispatch_prepared(struct tuner *T, const struct prepared *pr) {
    if (pr->pipe0) wgllm_gpu_dispatch(T->g, pr->pipe0, pr->bg0, pr->gx0, 1, 1);
    wgllm_gpu_dispatch(T->g, pr->pipe, pr->bg, pr->gx, pr->gy, 1);
}

static void prepared_free(struct tuner *T, struct prepared *pr) {
    if (pr->bg) wgllm_gpu_bindgroup_destroy(T->g, pr->bg);
    if (pr->bg0) wgllm_gpu_bindgroup_destroy(T->g, pr->bg0);
    pr->bg = pr->bg0 = NULL;
}

/* G_PRO's candidate for shape i: one token's MATVEC rounding x in its
 * prologue, or ROUND_ACT into xr then MATVEC (as the graph builds either;
 * the plain MATVEC alone where the weights need no rounding or the packed
 * row does not fit). */
static enum wgllm_status prepare_pro(struct tuner *T, int i, const struct wgllm_wgsl_tune *t, bool is_default,
                                     struct prepared *pr, struct wgllm_error *err) {
    const uint32_t vt = wgllm_type_traits(T->sh[i].type)->vec_dot_type;
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = T->sh[i].type, .pro = WGLLM_PRO_ROUND,
                                   .pro_f32 = true, .kx = T->sh[i].k};
    uint32_t bytes = wgllm_wgsl_pro_bytes(&key, t);
    if (bytes > T->info->max_workgroup_storage) key.pro_f32 = false, bytes = wgllm_wgsl_pro_bytes(&key, t);
    const bool round = vt != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt);
    const bool pro = !t->matvec_split_round && bytes && bytes <= T->info->max_workgroup_storage;
    if (!pro) key.pro = WGLLM_PRO_NONE, key.kx = 0;
    pr->pipe = pipe_key(T, &key, t, is_default, err);
    if (!pr->pipe) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    struct wgllm_gpu_binding b[4] = {{T->ub[i], 0, 0}, {T->w[i], 0, 0}, {pro || !round ? T->x[i] : T->xr[i], 0, 0}, {T->y[i], 0, 0}};
    if (!(pr->bg = wgllm_gpu_bindgroup_create(T->g, pr->pipe, 4, b, err))) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    pr->gx = cdiv(T->sh[i].rows, t->rows_matvec), pr->gy = 1;
    if (pro || !round) return WGLLM_STATUS_OK;
    pr->pipe0 = pipe_for(T, WGLLM_KERNEL_ROUND_ACT, vt, t, is_default, err);
    if (!pr->pipe0) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    struct wgllm_gpu_binding r[3] = {{T->rub[i], 0, 0}, {T->x[i], 0, 0}, {T->xr[i], 0, 0}};
    if (!(pr->bg0 = wgllm_gpu_bindgroup_create(T->g, pr->pipe0, 3, r, err))) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    pr->gx0 = cdiv(cdiv(T->sh[i].k, 32), t->wg_elem);
    return WGLLM_STATUS_OK;
}

static enum wgllm_status prepare(struct tuner *T, enum group gr, int i, const struct wgllm_wgsl_tune *t, bool is_default,
                                 struct prepared *pr, struct wgllm_error *err) {
    memset(pr, 0, sizeof *pr);
    if (gr == G_PRO) {
        const enum wgllm_status st = prepare_pro(T, i, t, is_default, pr, err);
        if (st) return st;
    } else if (gr == G_ELEM) {
        pr->pipe = pipe_for(T, WGLLM_KERNEL_SWIGLU, WGLLM_TYPE_F32, t, is_default, err);
        if (!pr->pipe) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
        struct wgllm_gpu_binding b[4] = {{T->eub, 0, 0}, {T->eg, 0, 0}, {T->eu, 0, 0}, {T->ey, 0, 0}};
        pr->bg = wgllm_gpu_bindgroup_create(T->g, pr->pipe, 4, b, err);
        pr->gx = cdiv(T->elem_n, t->wg_elem), pr->gy = 1;
    } else {
        const enum wgllm_kernel k = gr == G_MATVEC ? WGLLM_KERNEL_MATVEC : WGLLM_KERNEL_MATMUL;
        pr->pipe = pipe_for(T, k, T->sh[i].type, t, is_default, err);
        if (!pr->pipe) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
        struct wgllm_gpu_binding b[4] = {{T->ub[i], 0, 0}, {T->w[i], 0, 0}, {T->x[i], 0, 0}, {T->y[i], 0, 0}};
        pr->bg = wgllm_gpu_bindgroup_create(T->g, pr->pipe, 4, b, err);
        if (gr == G_MATVEC) pr->gx = cdiv(T->sh[i].rows, t->rows_matvec), pr->gy = 1;
        else pr->gx = cdiv(T->sh[i].rows, t->mm_tile_n), pr->gy = cdiv((uint32_t)T->p->tokens, t->mm_tile_m);
    }
    if (!pr->bg) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    if (pr->gx > T->info->max_workgroups_per_dim || pr->gy > T->info->max_workgroups_per_dim)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%u x %u workgroups is over the adapter's limit", pr->gx, pr->gy);
    return WGLLM_STATUS_OK;
}

static size_t out_len(struct tuner *T, enum group gr, int i) {
    if (gr == G_ELEM) return T->elem_n;
    return (size_t)T->sh[i].rows * (gr == G_MATMUL ? (size_t)T->p->tokens : 1); /* G_PRO: one token, as G_MATVEC */
}

/* Runs the candidate once per shape and compares its outputs with the
 * reference (or stores them as the reference when ref_pass); then times
 * reps dispatches per shape (best of two submits). Returns the weighted
 * milliseconds, or a negative value when the candidate fails or is wrong
 * (why says how). */
static double measure(struct tuner *T, enum group gr, const struct wgllm_wgsl_tune *t, bool ref_pass, char *why,
                      size_t why_cap) {
    const int n = gr == G_ELEM ? 1 : T->n;
    double total = 0;
    for (int i = 0; i < n; i++) {
        struct wgllm_error err = {0};
        struct prepared pr;
        struct wgllm_gpu_buffer *yb = gr == G_ELEM ? T->ey : T->y[i];
        const size_t len = out_len(T, gr, i);
        if (prepare(T, gr, i, t, ref_pass, &pr, &err)) {
            snprintf(why, why_cap, "%.290s", err.message);
            prepared_free(T, &pr);
            return -1;
        }
        /* the output is cleared first: a candidate that skips elements must not inherit the reference's */
        static const float cleared = -1e30f;
        float *host = malloc(len * sizeof *host);
        for (size_t j = 0; host && j < len; j++) host[j] = cleared;
        if (host) wgllm_gpu_buffer_write(T->g, yb, 0, host, len * sizeof *host);
        wgllm_gpu_batch_begin(T->g);
        dispatch_prepared(T, &pr);
        enum wgllm_status st = host ? wgllm_gpu_batch_submit(T->g, &err) : WGLLM_STATUS_OUT_OF_MEMORY;
        if (!st) st = wgllm_gpu_buffer_read(T->g, yb, 0, host, len * sizeof *host, &err);
        if (st) {
            snprintf(why, why_cap, "%.290s", host ? err.message : "out of memory");
            free(host);
            prepared_free(T, &pr);
            return -1;
        }
        float **refp = gr == G_ELEM ? &T->eref : &T->ref[gr][i];
        if (ref_pass) {
            free(*refp);
            *refp = host;
        } else {
            /* within 1e-4 of the reference's rms: other sum orders differ by ~1e-6 of it, a wrong row or chunk by ~1 */
            double ss = 0, worst = 0;
            for (size_t j = 0; j < len; j++) ss += (double)(*refp)[j] * (*refp)[j];
            const double rms = sqrt(ss / (double)len) + 1e-30;
            for (size_t j = 0; j < len; j++) {
                const double d = fabs((double)host[j] - (*refp)[j]);
                if (d > worst || d != d) worst = d != d ? 1e30 : d;
            }
            free(host);
            if (worst > 1e-4 * rms) {
                snprintf(why, why_cap, "wrong result (max |diff| %.2g of rms %.2g)", worst, rms);
                prepared_free(T, &pr);
                return -1;
            }
        }
        /* enough dispatches per submit that the submit and the wait are
         * noise (>= 20 ms), then the best of two submits */
        double best = 1e30;
        int reps = T->p->reps;
        for (int rep = 0; rep < 2 && !st; rep++) {
            const double t0 = now_s();
            wgllm_gpu_batch_begin(T->g);
            for (int r = 0; r < reps; r++) dispatch_prepared(T, &pr);
            st = wgllm_gpu_batch_submit(T->g, &err);
            if (!st) st = wgllm_gpu_finish(T->g, &err);
            const double el = now_s() - t0;
            if (!st && el < 0.02 && reps < 4096) {
                reps = el > 0.02 / 64 ? (int)(reps * 0.03 / el) + 1 : reps * 64;
                if (reps > 4096) reps = 4096;
                rep--; /* not counted: too short to tell */
                continue;
            }
            const double ms = el * 1e3 / reps;
            if (ms < best) best = ms;
        }
        prepared_free(T, &pr);
        if (st) {
            snprintf(why, why_cap, "%.290s", err.message);
            return -1;
        }
        total += best * (gr == G_ELEM ? 1 : T->sh[i].count);
    }
    return total;
}

/* The candidates of a group: variations of the base tune. */
static int candidates(enum group gr, const struct wgllm_wgsl_tune *base, bool quick, bool subgroups,
                      struct wgllm_wgsl_tune *out, int cap) {
    int n = 0;
#define ADD(...)                                 \
    do {                                         \
        if (n < cap) {                           \
            out[n] = *base;                      \
            struct wgllm_wgsl_tune *c = &out[n]; \
            __VA_ARGS__;                         \
            n++;                                 \
        }                                        \
    } while (0)
    if (gr == G_MATVEC) {
        static const uint32_t wq[][2] = {{64, 4}, {128, 2}, {256, 1}, {32, 8}, {64, 1}, {128, 4}, {32, 4}, {64, 8}, {256, 2}, {128, 1}, {32, 1}};
        static const uint32_t rq[] = {64, 32, 128, 16};
        const int nw = quick ? 3 : (int)(sizeof wq / sizeof *wq), nr = quick ? 2 : (int)(sizeof rq / sizeof *rq);
        for (int r = 0; r < nr; r++)
            ADD(c->matvec_thread_rows = true; c->matvec_subgroups = false; c->wg_matvec = 1; c->rows_matvec = rq[r]);
        for (int w = 0; w < nw; w++) ADD(c->matvec_thread_rows = false; c->matvec_subgroups = false; c->wg_matvec = wq[w][0]; c->rows_matvec = wq[w][1]);
        for (int w = 0; subgroups && w < nw; w++)
            ADD(c->matvec_thread_rows = false; c->matvec_subgroups = true; c->wg_matvec = wq[w][0]; c->rows_matvec = wq[w][1]);
    } else if (gr == G_MATMUL) {
        /* cheap ones to compile first (software adapters compile big tiles for seconds) */
        static const uint32_t mq[][5] = {
            {32, 32, 32, 2, 2}, {64, 64, 32, 4, 4}, {32, 32, 64, 4, 4}, {64, 32, 32, 4, 4}, {32, 64, 32, 4, 4},
            {128, 64, 32, 8, 4}, {64, 64, 32, 8, 8}, {128, 32, 32, 8, 4}, {64, 16, 64, 4, 2}, {16, 64, 64, 2, 4},
            {64, 64, 64, 8, 8}, {32, 32, 32, 4, 4},
        };
        /* and without workgroup memory (mm_direct) */
        static const uint32_t dq[][5] = {{64, 16, 32, 1, 16}, {64, 8, 32, 1, 8}, {32, 32, 32, 2, 8}, {64, 32, 32, 2, 16}};
        /* and split along K with subgroup reductions (mm_split_k): rows, tokens, threads */
        static const uint32_t sq[][3] = {{4, 8, 64}, {2, 16, 128}, {8, 8, 64}, {4, 4, 256}};
        const int nm = quick ? 3 : (int)(sizeof mq / sizeof *mq), nd = quick ? 1 : (int)(sizeof dq / sizeof *dq);
        const int ns = !subgroups ? 0 : quick ? 1 : (int)(sizeof sq / sizeof *sq);
        for (int i = 0; i < nd; i++)
            ADD(c->mm_direct = true; c->mm_split_k = 0; c->mm_tile_n = dq[i][0]; c->mm_tile_m = dq[i][1];
                c->mm_tile_k = dq[i][2]; c->mm_micro_n = dq[i][3]; c->mm_micro_m = dq[i][4]);
        for (int i = 0; i < nm; i++)
            ADD(c->mm_direct = false; c->mm_split_k = 0; c->mm_tile_n = mq[i][0]; c->mm_tile_m = mq[i][1];
                c->mm_tile_k = mq[i][2]; c->mm_micro_n = mq[i][3]; c->mm_micro_m = mq[i][4]);
        for (int i = 0; i < ns; i++)
            ADD(c->mm_direct = false; c->mm_split_k = sq[i][2]; c->mm_tile_n = sq[i][0]; c->mm_tile_m = sq[i][1]);
    } else if (gr == G_PRO) {
        ADD(c->matvec_split_round = !base->matvec_split_round);
    } else {
        static const uint32_t eq[] = {64, 128, 256, 32};
        const int ne = quick ? 2 : 4;
        for (int i = 0; i < ne; i++) ADD(c->wg_elem = eq[i]);
    }
#undef ADD
    return n;
}

static void describe(enum group gr, const struct wgllm_wgsl_tune *t, char *s, size_t cap) {
    if (gr == G_MATVEC && t->matvec_thread_rows) snprintf(s, cap, "thread rows, %u rows/workgroup", t->rows_matvec);
    else if (gr == G_MATVEC)
        snprintf(s, cap, "%u threads, %u rows/workgroup%s", t->wg_matvec, t->rows_matvec, t->matvec_subgroups ? ", subgroups" : "");
    else if (gr == G_MATMUL && t->mm_split_k)
        snprintf(s, cap, "split-K over %u threads (subgroups), tile %ux%u", t->mm_split_k, t->mm_tile_n, t->mm_tile_m);
    else if (gr == G_MATMUL && t->mm_direct)
        snprintf(s, cap, "direct, tile %ux%u, micro %ux%u", t->mm_tile_n, t->mm_tile_m, t->mm_micro_n, t->mm_micro_m);
    else if (gr == G_MATMUL)
        snprintf(s, cap, "tile %ux%u k%u, micro %ux%u", t->mm_tile_n, t->mm_tile_m, t->mm_tile_k, t->mm_micro_n, t->mm_micro_m);
    else if (gr == G_PRO) snprintf(s, cap, "%s", t->matvec_split_round ? "ROUND_ACT before the mat-vec" : "rounding in the mat-vec's prologue");
    else snprintf(s, cap, "%u threads", t->wg_elem);
}

static void tuner_free(struct tuner *T) {
    for (int i = 0; i < T->n; i++) {
        wgllm_gpu_buffer_destroy(T->g, T->w[i]);
        wgllm_gpu_buffer_destroy(T->g, T->x[i]);
        wgllm_gpu_buffer_destroy(T->g, T->y[i]);
        wgllm_gpu_buffer_destroy(T->g, T->ub[i]);
        wgllm_gpu_buffer_destroy(T->g, T->xr[i]);
        wgllm_gpu_buffer_destroy(T->g, T->rub[i]);
        for (int gr = 0; gr < N_GROUPS; gr++) free(T->ref[gr][i]);
    }
    wgllm_gpu_buffer_destroy(T->g, T->eg);
    wgllm_gpu_buffer_destroy(T->g, T->eu);
    wgllm_gpu_buffer_destroy(T->g, T->ey);
    wgllm_gpu_buffer_destroy(T->g, T->eub);
    free(T->eref);
}

static enum wgllm_status tuner_init(struct tuner *T, const struct wgllm_tune_shape *shapes, int n_shapes,
                                    struct wgllm_error *err) {
    const uint64_t max_bind = WGLLM_MIN(T->info->max_storage_binding_size, T->info->max_buffer_size);
    for (int s = 0; s < n_shapes && T->n < MAX_SHAPES; s++) {
        struct wgllm_tune_shape sh = shapes[s];
        if (!wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, sh.type) || !wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL, sh.type) ||
            !sh.rows || !sh.k || (sh.type != WGLLM_TYPE_F32 && sh.k % 32)) {
            progress(T, "skipping %s %ux%u: no WebGPU kernel for it", wgllm_type_name(sh.type), sh.rows, sh.k);
            continue;
        }
        /* the time of a larger matrix grows with its rows: time a slice of it and scale */
        uint32_t rows = sh.rows;
        if (T->p->row_cap && rows > T->p->row_cap) rows = T->p->row_cap;
        while (rows > 1 && wgllm_row_size(sh.type, sh.k) * rows > max_bind) rows /= 2;
        const int count = sh.count > 0 ? sh.count : 1;
        const double scale = (double)sh.rows / rows;
        size_t wbytes;
        void *w = random_weights(T, sh.type, rows, sh.k, &wbytes);
        const size_t nx = (size_t)T->p->tokens * sh.k, ny = (size_t)T->p->tokens * rows;
        float *x = malloc(nx * sizeof *x);
        if (!w || !x) {
            free(w), free(x);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a %ux%u test matrix", rows, sh.k);
        }
        for (size_t i = 0; i < nx; i++) x[i] = rndf(T);
        const int i = T->n;
        T->sh[i] = (struct wgllm_tune_shape){sh.type, rows, sh.k, (int)(count * scale + 0.5)};
        if (rows < sh.rows)
            progress(T, "shape %d: %s %u rows x K %u, %d per token (timed on %u rows, counted %.1fx)", i + 1,
                     wgllm_type_name(sh.type), sh.rows, sh.k, count, rows, scale);
        else
            progress(T, "shape %d: %s %u rows x K %u, %d per token", i + 1, wgllm_type_name(sh.type), sh.rows, sh.k, count);
        T->w[i] = wgllm_gpu_buffer_create(T->g, wbytes, WGLLM_GPU_STORAGE, "tune_w", err);
        T->x[i] = T->w[i] ? wgllm_gpu_buffer_create(T->g, nx * 4, WGLLM_GPU_STORAGE, "tune_x", err) : NULL;
        T->y[i] = T->x[i] ? wgllm_gpu_buffer_create(T->g, ny * 4, WGLLM_GPU_STORAGE, "tune_y", err) : NULL;
        T->ub[i] = T->y[i] ? wgllm_gpu_buffer_create(T->g, sizeof(union wgllm_kparams), WGLLM_GPU_UNIFORM, "tune_p", err) : NULL;
        T->xr[i] = T->ub[i] ? wgllm_gpu_buffer_create(T->g, (size_t)sh.k * 4, WGLLM_GPU_STORAGE, "tune_xr", err) : NULL;
        T->rub[i] = T->xr[i] ? wgllm_gpu_buffer_create(T->g, sizeof(union wgllm_kparams), WGLLM_GPU_UNIFORM, "tune_rp", err) : NULL;
        T->n++;
        if (!T->rub[i]) {
            free(w), free(x);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
        wgllm_gpu_buffer_write(T->g, T->w[i], 0, w, wbytes);
        wgllm_gpu_buffer_write(T->g, T->x[i], 0, x, nx * 4);
        const union wgllm_kparams kp = {.matvec = {.rows = rows, .k = sh.k, .tokens = (uint32_t)T->p->tokens}};
        wgllm_gpu_buffer_write(T->g, T->ub[i], 0, &kp, sizeof kp);
        const union wgllm_kparams rp = {.round_act = {.count = sh.k}};
        wgllm_gpu_buffer_write(T->g, T->rub[i], 0, &rp, sizeof rp);
        free(w), free(x);
        if (sh.rows > T->elem_n) T->elem_n = sh.rows;
    }
    if (!T->n) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no matrix shape with WebGPU kernels to tune on");
    T->elem_n *= 4; /* an FFN-sized vector, times a few tokens */
    float *v = malloc((size_t)T->elem_n * sizeof *v);
    if (!v) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 0; i < T->elem_n; i++) v[i] = 4.0f * rndf(T);
    T->eg = wgllm_gpu_buffer_create(T->g, (size_t)T->elem_n * 4, WGLLM_GPU_STORAGE, "tune_g", err);
    T->eu = T->eg ? wgllm_gpu_buffer_create(T->g, (size_t)T->elem_n * 4, WGLLM_GPU_STORAGE, "tune_u", err) : NULL;
    T->ey = T->eu ? wgllm_gpu_buffer_create(T->g, (size_t)T->elem_n * 4, WGLLM_GPU_STORAGE, "tune_y", err) : NULL;
    T->eub = T->ey ? wgllm_gpu_buffer_create(T->g, sizeof(union wgllm_kparams), WGLLM_GPU_UNIFORM, "tune_p", err) : NULL;
    if (!T->eub) {
        free(v);
        return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    wgllm_gpu_buffer_write(T->g, T->eg, 0, v, (size_t)T->elem_n * 4);
    for (uint32_t i = 0; i < T->elem_n; i++) v[i] = rndf(T);
    wgllm_gpu_buffer_write(T->g, T->eu, 0, v, (size_t)T->elem_n * 4);
    const union wgllm_kparams kp = {.swiglu = {.count = T->elem_n}};
    wgllm_gpu_buffer_write(T->g, T->eub, 0, &kp, sizeof kp);
    free(v);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_tune_run(struct wgllm_gpu *g, const struct wgllm_tune_shape *shapes, int n_shapes,
                                 const struct wgllm_tune_params *p, struct wgllm_wgsl_tune *out,
                                 struct wgllm_error *err) {
    struct wgllm_tune_params dp = wgllm_tune_default_params();
    if (!p) p = &dp;
    if (p->tokens <= 0 || p->reps <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "tune: tokens and reps must be > 0");
    struct tuner *T = calloc(1, sizeof *T);
    if (!T) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    T->g = g, T->info = wgllm_gpu_get_info(g), T->p = p, T->rng = 0x9e3779b97f4a7c15ull;
    const double t_start = now_s(), deadline = t_start + (p->budget_s > 0 ? p->budget_s : 1e9);
    struct wgllm_wgsl_tune best = *wgllm_wgsl_tune_defaults_for(T->info);
    enum wgllm_status st = tuner_init(T, shapes, n_shapes, err);
    bool out_of_time = false;
    for (int gr = 0; !st && gr < N_GROUPS; gr++) {
        if (p->groups && !(p->groups & (1u << gr))) continue;
        const struct wgllm_wgsl_tune base = best;
        char why[600], d[120];
        describe((enum group)gr, &base, d, sizeof d);
        /* the reference: the defaults' own outputs and time */
        const double t_base = measure(T, (enum group)gr, &base, true, why, sizeof why);
        if (t_base < 0) {
            st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tune: the default %s kernels failed: %s", group_names[gr], why);
            break;
        }
        progress(T, "%s: default (%s): %.3f ms per pass over the shapes", group_names[gr], d, t_base);
        struct wgllm_wgsl_tune cand[48];
        int nc = candidates((enum group)gr, &base, p->quick, T->info->subgroups, cand, 48);
        double t_best = t_base;
        int tried = 0;
        for (int c = 0; c < nc; c++) {
            if (p->max_candidates > 0 && tried >= p->max_candidates) break;
            describe((enum group)gr, &cand[c], d, sizeof d);
            if (wgllm_tune_equal(&cand[c], &base)) continue;
            if (!wgllm_wgsl_tune_valid(&cand[c], T->info->max_invocations, T->info->max_workgroup_storage, why, sizeof why)) {
                progress(T, "%s %d/%d (%s): skipped, %s", group_names[gr], c + 1, nc, d, why);
                continue;
            }
            if (now_s() > deadline) {
                out_of_time = true;
                progress(T, "%s: time budget of %.0f s reached, %d candidates untried", group_names[gr], p->budget_s, nc - c);
                break;
            }
            tried++;
            const double t = measure(T, (enum group)gr, &cand[c], false, why, sizeof why);
            if (t < 0) {
                progress(T, "%s %d/%d (%s): rejected, %s", group_names[gr], c + 1, nc, d, why);
                continue;
            }
            const bool better = t < t_best * 0.97; /* a win must beat the timing noise */
            progress(T, "%s %d/%d (%s): %.3f ms%s", group_names[gr], c + 1, nc, d, t, better ? "  (best so far)" : "");
            if (better) {
                t_best = t;
                best = cand[c];
            }
        }
        describe((enum group)gr, &best, d, sizeof d);
        progress(T, "%s: best %s, %.3f ms (%.2fx the default)", group_names[gr], d, t_best, t_base / t_best);
        if (out_of_time) break;
    }
    if (!st) progress(T, "tuned in %.1f s%s", now_s() - t_start, out_of_time ? " (stopped by the time budget)" : "");
    tuner_free(T);
    free(T);
    if (st) return st;
    *out = best;
    return WGLLM_STATUS_OK;
}
