/* test_gguf.c - GGUF reader/writer: round trips of every value type, the real
 * vocabulary files, truncation/corruption sweeps, hostile headers, splits. */
#include "test.h"

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

static size_t elem_size(enum wgllm_gguf_type t) {
    switch (t) {
    case WGLLM_GGUF_TYPE_UINT8: case WGLLM_GGUF_TYPE_INT8: case WGLLM_GGUF_TYPE_BOOL: return 1;
    case WGLLM_GGUF_TYPE_UINT16: case WGLLM_GGUF_TYPE_INT16: return 2;
    case WGLLM_GGUF_TYPE_UINT32: case WGLLM_GGUF_TYPE_INT32: case WGLLM_GGUF_TYPE_FLOAT32: return 4;
    default: return 8;
    }
}

static bool value_eq(const struct wgllm_gguf_value *a, const struct wgllm_gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case WGLLM_GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case WGLLM_GGUF_TYPE_ARRAY:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) return false;
        if (a->v.arr.type == WGLLM_GGUF_TYPE_STRING || a->v.arr.type == WGLLM_GGUF_TYPE_ARRAY) {
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (!value_eq(&a->v.arr.items[i], &b->v.arr.items[i])) return false;
            return true;
        }
        return a->v.arr.n == 0 ||
               memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * elem_size(a->v.arr.type)) == 0;
    case WGLLM_GGUF_TYPE_INT8: case WGLLM_GGUF_TYPE_INT16: case WGLLM_GGUF_TYPE_INT32:
    case WGLLM_GGUF_TYPE_INT64:
        return a->v.i64 == b->v.i64;
    case WGLLM_GGUF_TYPE_FLOAT32: case WGLLM_GGUF_TYPE_FLOAT64:
        return a->v.f64 == b->v.f64;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* Tensor bytes are a function of (tensor index, byte index). */
static uint8_t pattern(int64_t t, uint64_t i) { return (uint8_t)(t * 31 + i * 7 + (i >> 8)); }

static bool fill_pattern(int64_t index, void *buf, uint64_t size, void *user) {
    (void)user;
    for (uint64_t i = 0; i < size; i++) ((uint8_t *)buf)[i] = pattern(index, i);
    return true;
}

static bool data_matches(const struct wgllm_gguf_tensor *t, int64_t index) {
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < t->size; i++)
        if (p[i] != pattern(index, i)) return false;
    return true;
}

/* ---- every value type --------------------------------------------------- */

#define N_EXPECTED 40
static struct wgllm_gguf_value expected[N_EXPECTED];
static const char *expected_key[N_EXPECTED];
static int n_expected;

static struct wgllm_gguf_value sval(const char *s) {
    struct wgllm_gguf_value v = {.type = WGLLM_GGUF_TYPE_STRING};
    v.v.str.data = s;
    v.v.str.len = strlen(s);
    return v;
}

static void expect(const char *key, struct wgllm_gguf_value v) {
    expected_key[n_expected] = key;
    expected[n_expected++] = v;
}

static const uint8_t arr_u8[] = {0, 1, 255};
static const int8_t arr_i8[] = {-128, 0, 127};
static const uint16_t arr_u16[] = {0, 65535, 7};
static const int16_t arr_i16[] = {-32768, 32767};
static const uint32_t arr_u32[] = {1, 2, 3, 4000000000u};
static const int32_t arr_i32[] = {-5, 6};
static const float arr_f32[] = {1.5f, -2.25f, 1e30f};
static const uint8_t arr_bool[] = {1, 0, 1};
static const uint64_t arr_u64[] = {UINT64_MAX, 0};
static const int64_t arr_i64[] = {INT64_MIN, INT64_MAX};
static const double arr_f64[] = {3.141592653589793, -0.0};
static const char *const arr_strs[] = {"hello", "", "wörld ▁x", "last"};
static struct wgllm_gguf_value str_items[4], inner[3], inner_str_items[2], outer_items[2], nest2[1];

static struct wgllm_gguf_value arrv(enum wgllm_gguf_type t, const void *data, uint64_t n) {
    struct wgllm_gguf_value v = {.type = WGLLM_GGUF_TYPE_ARRAY};
    v.v.arr.type = t;
    v.v.arr.n = n;
    v.v.arr.data = data;
    return v;
}
static struct wgllm_gguf_value arri(enum wgllm_gguf_type t, struct wgllm_gguf_value *items, uint64_t n) {
    struct wgllm_gguf_value v = {.type = WGLLM_GGUF_TYPE_ARRAY};
    v.v.arr.type = t;
    v.v.arr.n = n;
    v.v.arr.items = items;
    return v;
}

/* Declares every value type on w (through each setter) and records what the
 * reader must return. */
static void build_all_values(struct wgllm_gguf_writer *w) {
    n_expected = 0;
    struct wgllm_gguf_value v;
#define SCALAR(key, T, field, val)                                                        \
    v = (struct wgllm_gguf_value){.type = T};                                             \
    v.v.field = val;                                                                      \
    wgllm_gguf_writer_set_value(w, key, &v);                                              \
    expect(key, v)
    SCALAR("t.u8", WGLLM_GGUF_TYPE_UINT8, u64, 200);
    SCALAR("t.i8", WGLLM_GGUF_TYPE_INT8, i64, -100);
    SCALAR("t.u16", WGLLM_GGUF_TYPE_UINT16, u64, 60000);
    SCALAR("t.i16", WGLLM_GGUF_TYPE_INT16, i64, -30000);
    SCALAR("t.u64", WGLLM_GGUF_TYPE_UINT64, u64, 0x123456789abcdef0ull);
    SCALAR("t.i64", WGLLM_GGUF_TYPE_INT64, i64, -0x123456789abcdefll);
    SCALAR("t.f64", WGLLM_GGUF_TYPE_FLOAT64, f64, 2.718281828459045);
#undef SCALAR
    wgllm_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_UINT32, .v.u64 = 4000000000u};
    expect("t.u32", v);
    wgllm_gguf_writer_set_i32(w, "t.i32", -2000000000);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_INT32, .v.i64 = -2000000000};
    expect("t.i32", v);
    wgllm_gguf_writer_set_f32(w, "t.f32", 0.1f);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_FLOAT32, .v.f64 = (double)0.1f};
    expect("t.f32", v);
    wgllm_gguf_writer_set_bool(w, "t.bool", true);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_BOOL, .v.u64 = 1};
    expect("t.bool", v);
    wgllm_gguf_writer_set_bool(w, "t.bool0", false);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_BOOL, .v.u64 = 0};
    expect("t.bool0", v);
    wgllm_gguf_writer_set_str(w, "t.str", "a string ▁ with UTF-8");
    expect("t.str", sval("a string ▁ with UTF-8"));
    wgllm_gguf_writer_set_str(w, "t.empty_str", "");
    expect("t.empty_str", sval(""));
    wgllm_gguf_writer_set_u16(w, "t.u16b", 9);
    v = (struct wgllm_gguf_value){.type = WGLLM_GGUF_TYPE_UINT16, .v.u64 = 9};
    expect("t.u16b", v);

#define ARR(key, T, a)                                                                    \
    wgllm_gguf_writer_set_arr(w, key, T, a, sizeof(a) / sizeof(a[0]));                    \
    expect(key, arrv(T, a, sizeof(a) / sizeof(a[0])))
    ARR("a.u8", WGLLM_GGUF_TYPE_UINT8, arr_u8);
    ARR("a.i8", WGLLM_GGUF_TYPE_INT8, arr_i8);
    ARR("a.u16", WGLLM_GGUF_TYPE_UINT16, arr_u16);
    ARR("a.i16", WGLLM_GGUF_TYPE_INT16, arr_i16);
    ARR("a.u32", WGLLM_GGUF_TYPE_UINT32, arr_u32);
    ARR("a.i32", WGLLM_GGUF_TYPE_INT32, arr_i32);
    ARR("a.f32", WGLLM_GGUF_TYPE_FLOAT32, arr_f32);
    ARR("a.bool", WGLLM_GGUF_TYPE_BOOL, arr_bool);
    ARR("a.u64", WGLLM_GGUF_TYPE_UINT64, arr_u64);
    ARR("a.i64", WGLLM_GGUF_TYPE_INT64, arr_i64);
    ARR("a.f64", WGLLM_GGUF_TYPE_FLOAT64, arr_f64);
#undef ARR
    wgllm_gguf_writer_set_arr(w, "a.empty", WGLLM_GGUF_TYPE_INT32, NULL, 0);
    expect("a.empty", arrv(WGLLM_GGUF_TYPE_INT32, NULL, 0));
    wgllm_gguf_writer_set_arr_str(w, "a.str", arr_strs, 4);
    for (int i = 0; i < 4; i++) str_items[i] = sval(arr_strs[i]);
    expect("a.str", arri(WGLLM_GGUF_TYPE_STRING, str_items, 4));
    wgllm_gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0);
    expect("a.str_empty", arri(WGLLM_GGUF_TYPE_STRING, NULL, 0));
    /* [[-5, 6], [], [1.5, -2.25, 1e30]] is not homogeneous; GGUF nests one
     * element type per level: [[i32 x2], [i32 x0], [i32 x2]] and [[str], [str,str]] */
    inner[0] = arrv(WGLLM_GGUF_TYPE_INT32, arr_i32, 2);
    inner[1] = arrv(WGLLM_GGUF_TYPE_INT32, NULL, 0);
    inner[2] = arrv(WGLLM_GGUF_TYPE_INT32, arr_i32, 1);
    v = arri(WGLLM_GGUF_TYPE_ARRAY, inner, 3);
    wgllm_gguf_writer_set_value(w, "n.i32", &v);
    expect("n.i32", v);
    inner_str_items[0] = sval("");
    inner_str_items[1] = sval("x");
    outer_items[0] = arri(WGLLM_GGUF_TYPE_STRING, inner_str_items, 2);
    outer_items[1] = arri(WGLLM_GGUF_TYPE_STRING, NULL, 0);
    nest2[0] = arri(WGLLM_GGUF_TYPE_ARRAY, outer_items, 2);
    v = arri(WGLLM_GGUF_TYPE_ARRAY, nest2, 1); /* depth 3: [[[ "", "x" ], []]] */
    wgllm_gguf_writer_set_value(w, "n.deep_str", &v);
    expect("n.deep_str", v);
    /* Replacing a key keeps its position and takes the new value. */
    wgllm_gguf_writer_set_str(w, "t.str", "replaced");
    for (int i = 0; i < n_expected; i++)
        if (strcmp(expected_key[i], "t.str") == 0) expected[i] = sval("replaced");
}

static void add_tensors(struct wgllm_gguf_writer *w) {
    uint64_t ne0[2] = {8, 4};            /* f32: 128 bytes */
    uint64_t ne1[3] = {32, 2, 3};        /* f16: 384 bytes */
    uint64_t ne2[1] = {3};               /* f32: 12 bytes, padded */
    uint64_t ne3[2] = {64, 2};           /* q8_0: 136 bytes */
    uint64_t ne4[4] = {2, 2, 2, 4};      /* f32: 128 bytes, aligned end */
    wgllm_gguf_writer_add_tensor(w, "t0.weight", WGLLM_TYPE_F32, 2, ne0);
    wgllm_gguf_writer_add_tensor(w, "t1", WGLLM_TYPE_F16, 3, ne1);
    wgllm_gguf_writer_add_tensor(w, "t2.odd", WGLLM_TYPE_F32, 1, ne2);
    wgllm_gguf_writer_add_tensor(w, "t3.q8", WGLLM_TYPE_Q8_0, 2, ne3);
    wgllm_gguf_writer_add_tensor(w, "t4.last", WGLLM_TYPE_F32, 4, ne4);
}

static void check_all_values(const struct wgllm_gguf *g) {
    CHECK_EQ_INT(wgllm_gguf_n_kv(g), n_expected);
    for (int i = 0; i < n_expected && i < wgllm_gguf_n_kv(g); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, i);
        CHECK(wgllm_gguf_str_eq(kv->key, expected_key[i]));
        if (!value_eq(&kv->value, &expected[i])) {
            fprintf(stderr, "  value of '%s' differs\n", expected_key[i]);
            CHECK(false);
        }
        CHECK(wgllm_gguf_find(g, expected_key[i]) == &kv->value);
    }
}

TEST(test_roundtrip_all_types) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    build_all_values(w);
    add_tensors(w);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err), WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);

    struct wgllm_gguf *g = NULL;
    enum wgllm_status st = wgllm_gguf_open(path, &g, &err);
    if (st != WGLLM_STATUS_OK) fprintf(stderr, "  %s\n", err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    if (!g) return;
    CHECK_EQ_INT(wgllm_gguf_version(g), 3);
    CHECK_EQ_INT(wgllm_gguf_alignment(g), 32);
    CHECK_EQ_INT(wgllm_gguf_n_splits(g), 1);
    check_all_values(g);

    static const char *names[5] = {"t0.weight", "t1", "t2.odd", "t3.q8", "t4.last"};
    static const uint32_t types[5] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_F32, WGLLM_TYPE_Q8_0, WGLLM_TYPE_F32};
    static const uint64_t sizes[5] = {128, 384, 12, 136, 128};
    static const uint32_t ndims[5] = {2, 3, 1, 2, 4};
    CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 5);
    uint64_t ds = wgllm_gguf_data_offset(g, 0);
    CHECK_EQ_INT(ds % 32, 0);
    for (int i = 0; i < 5 && i < wgllm_gguf_n_tensors(g); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        CHECK(wgllm_gguf_str_eq(t->name, names[i]));
        CHECK(wgllm_gguf_find_tensor(g, names[i]) == t);
        CHECK_EQ_INT(t->type, types[i]);
        CHECK_EQ_INT(t->size, sizes[i]);
        CHECK_EQ_INT(t->n_dims, ndims[i]);
        CHECK_EQ_INT(t->offset % 32, 0);
        CHECK_EQ_INT(t->split, 0);
        CHECK(data_matches(t, i));
    }
    const struct wgllm_gguf_tensor *t1 = wgllm_gguf_find_tensor(g, "t1");
    CHECK(t1 && t1->ne[0] == 32 && t1->ne[1] == 2 && t1->ne[2] == 3 && t1->ne[3] == 1);
    CHECK(wgllm_gguf_find_tensor(g, "t1.x") == NULL);
    CHECK(wgllm_gguf_find(g, "nope") == NULL);
    /* last tensor ends exactly at the end of the file (128 is aligned) */
    const struct wgllm_gguf_tensor *t4 = wgllm_gguf_find_tensor(g, "t4.last");
    CHECK_EQ_INT(ds + t4->offset + t4->size, wgllm_gguf_file_size(g));

    /* typed getters */
    uint32_t u;
    float f;
    bool b;
    struct wgllm_gguf_str s;
    CHECK_EQ_INT(wgllm_gguf_get_u32(g, "t.u16", &u, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(u, 60000);
    CHECK_EQ_INT(wgllm_gguf_get_u32(g, "t.i32", &u, &err), WGLLM_STATUS_BAD_FORMAT); /* negative */
    CHECK(strstr(err.message, "t.i32") != NULL);
    CHECK_EQ_INT(wgllm_gguf_get_u32(g, "t.str", &u, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "t.str") != NULL);
    CHECK_EQ_INT(wgllm_gguf_get_u32(g, "missing.key", &u, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "missing key") != NULL);
    CHECK_EQ_INT(wgllm_gguf_get_f32(g, "t.f64", &f, &err), WGLLM_STATUS_OK);
    CHECK_NEAR(f, 2.718281828, 1e-6);
    CHECK_EQ_INT(wgllm_gguf_get_f32(g, "t.u32", &f, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK_EQ_INT(wgllm_gguf_get_bool(g, "t.bool", &b, &err), WGLLM_STATUS_OK);
    CHECK(b);
    CHECK_EQ_INT(wgllm_gguf_get_str(g, "t.str", &s, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_gguf_str_eq(s, "replaced"));
    const struct wgllm_gguf_value *a = wgllm_gguf_find(g, "a.i16");
    CHECK(a && wgllm_gguf_arr_int(a, 0) == -32768 && wgllm_gguf_arr_int(a, 1) == 32767);
    a = wgllm_gguf_find(g, "a.u32");
    CHECK(a && wgllm_gguf_arr_int(a, 3) == 4000000000ll);
    a = wgllm_gguf_find(g, "a.f32");
    CHECK(a && wgllm_gguf_arr_float(a, 1) == -2.25);
    a = wgllm_gguf_find(g, "a.f64");
    CHECK(a && wgllm_gguf_arr_float(a, 0) == 3.141592653589793);
    wgllm_gguf_free(g);
    unlink(path);
}

TEST(test_alignment_key) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_u32(w, "general.alignment", 64);
    add_tensors(w);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err), WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (!g) return;
    CHECK_EQ_INT(wgllm_gguf_alignment(g), 64);
    CHECK_EQ_INT(wgllm_gguf_data_offset(g, 0) % 64, 0);
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        CHECK_EQ_INT(t->offset % 64, 0);
        CHECK(data_matches(t, i));
    }
    wgllm_gguf_free(g);
    unlink(path);
}

static bool fill_fail_at_2(int64_t index, void *buf, uint64_t size, void *user) {
    (*(int *)user)++;
    return index == 2 ? false : fill_pattern(index, buf, size, NULL);
}

TEST(test_writer_errors) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    add_tensors(w);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    int calls = 0;
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, fill_fail_at_2, &calls, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "t2.odd") != NULL);
    CHECK_EQ_INT(calls, 3);
    CHECK(access(path, F_OK) != 0); /* the partial file is removed */
    wgllm_gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "general.alignment") != NULL);
    wgllm_gguf_writer_set_u32(w, "general.alignment", 32);
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, "/nonexistent/dir/x.gguf", fill_pattern, NULL, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "/nonexistent/dir/x.gguf") != NULL);
    CHECK_EQ_INT(wgllm_gguf_writer_write_split(w, path, 0, fill_pattern, NULL, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    wgllm_gguf_writer_free(w);
}

/* ---- real vocabulary files ------------------------------------------------ */

struct vocab_case {
    const char *file, *model;
    uint64_t n_tokens;
};

TEST(test_vocab_files) {
    static const struct vocab_case cases[] = {
        {"vocab/ggml-vocab-llama-spm.gguf", "llama", 32000},
        {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", 50257},
        {"vocab/ggml-vocab-deepseek-coder.gguf", "gpt2", 0},
        {"vocab/ggml-vocab-phi-3.gguf", "llama", 32064},
        {"vocab/ggml-vocab-bert-bge.gguf", "bert", 30522},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct wgllm_gguf *g = NULL;
        struct wgllm_error err = {0};
        enum wgllm_status st = wgllm_gguf_open(test_shared_path(cases[c].file), &g, &err);
        if (st != WGLLM_STATUS_OK) fprintf(stderr, "  %s: %s\n", cases[c].file, err.message);
        CHECK_EQ_INT(st, WGLLM_STATUS_OK);
        if (!g) continue;
        struct wgllm_gguf_str s;
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.architecture", &s, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "tokenizer.ggml.model", &s, &err), WGLLM_STATUS_OK);
        CHECK(wgllm_gguf_str_eq(s, cases[c].model));
        const struct wgllm_gguf_value *tok = wgllm_gguf_find(g, "tokenizer.ggml.tokens");
        CHECK(tok && tok->type == WGLLM_GGUF_TYPE_ARRAY && tok->v.arr.type == WGLLM_GGUF_TYPE_STRING);
        if (tok && cases[c].n_tokens) CHECK_EQ_INT(tok->v.arr.n, cases[c].n_tokens);
        if (tok) CHECK(tok->v.arr.n > 1000);
        uint32_t bos;
        if (wgllm_gguf_find(g, "tokenizer.ggml.bos_token_id")) {
            CHECK_EQ_INT(wgllm_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos, &err), WGLLM_STATUS_OK);
            CHECK(tok && bos < tok->v.arr.n);
        }

        /* Copy every key into a new file through set_value; it must read back equal. */
        struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
        for (int64_t i = 0; i < wgllm_gguf_n_kv(g); i++) {
            const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, i);
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
            wgllm_gguf_writer_set_value(w, key, &kv->value);
        }
        const char *path = test_tmp_path(".gguf");
        CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err), WGLLM_STATUS_OK);
        wgllm_gguf_writer_free(w);
        struct wgllm_gguf *g2 = NULL;
        CHECK_EQ_INT(wgllm_gguf_open(path, &g2, &err), WGLLM_STATUS_OK);
        if (g2) {
            CHECK_EQ_INT(wgllm_gguf_n_kv(g2), wgllm_gguf_n_kv(g));
            for (int64_t i = 0; i < wgllm_gguf_n_kv(g) && i < wgllm_gguf_n_kv(g2); i++) {
                const struct wgllm_gguf_kv *a = wgllm_gguf_kv_at(g, i), *b = wgllm_gguf_kv_at(g2, i);
                CHECK(a->key.len == b->key.len && memcmp(a->key.data, b->key.data, a->key.len) == 0);
                CHECK(value_eq(&a->value, &b->value));
            }
            wgllm_gguf_free(g2);
        }
        unlink(path);
        wgllm_gguf_free(g);
    }
}

/* ---- corruption sweeps ------------------------------------------------------ */

/* A small valid file: a few keys (string array, nested array) and tensors. */
static uint8_t *small_file(size_t *size) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.architecture", "llama");
    wgllm_gguf_writer_set_u32(w, "llama.block_count", 2);
    wgllm_gguf_writer_set_bool(w, "b", true);
    static const char *const strs[] = {"<s>", "", "ab"};
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, 3);
    static const float sc[] = {0.5f, 1.5f};
    wgllm_gguf_writer_set_arr(w, "sc", WGLLM_GGUF_TYPE_FLOAT32, sc, 2);
    struct wgllm_gguf_value in[2], v;
    in[0] = arrv(WGLLM_GGUF_TYPE_INT32, arr_i32, 2);
    in[1] = arrv(WGLLM_GGUF_TYPE_INT32, NULL, 0);
    v = arri(WGLLM_GGUF_TYPE_ARRAY, in, 2);
    wgllm_gguf_writer_set_value(w, "nest", &v);
    uint64_t ne0[2] = {4, 2}, ne1[1] = {32}, ne2[1] = {8};
    wgllm_gguf_writer_add_tensor(w, "a", WGLLM_TYPE_F32, 2, ne0);
    wgllm_gguf_writer_add_tensor(w, "q", WGLLM_TYPE_Q8_0, 1, ne1);
    wgllm_gguf_writer_add_tensor(w, "z", WGLLM_TYPE_F32, 1, ne2);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err;
    enum wgllm_status st = wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err);
    wgllm_gguf_writer_free(w);
    if (st != WGLLM_STATUS_OK) return NULL;
    uint8_t *p = (uint8_t *)test_read_file(path, size);
    unlink(path);
    return p;
}

/* When a mutated file still parses, everything it hands out must lie inside it. */
static bool consistent(const struct wgllm_gguf *g, const uint8_t *buf, size_t size) {
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (d < buf || d > buf + size || t->size > (uint64_t)(buf + size - d)) return false;
        if (t->name.data < (const char *)buf || t->name.len > size) return false;
    }
    return true;
}

/* ---- reading through a source -------------------------------------------------- */

/* An in-memory wgllm_model_source: each file an exact-size heap copy, so ASan
 * sees a read outside it; counts calls and can fail a chosen range. */
struct mem_src {
    int n;
    uint8_t *data[8];
    uint64_t size[8];
    const char *names[8];
    int calls;
    uint64_t max_end;  /* furthest byte read (any file) */
    bool bad_range;    /* the reader asked for a range outside a file */
    int fail_file;     /* -1: never fail */
    uint64_t fail_at;  /* a read of fail_file covering this byte fails */
};

static enum wgllm_status mem_read(void *user, int file, uint64_t offset, void *dst, size_t n,
                                  struct wgllm_error *err) {
    struct mem_src *m = user;
    m->calls++;
    if (file < 0 || file >= m->n || n == 0 || offset > m->size[file] || n > m->size[file] - offset) {
        m->bad_range = true;
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "range outside the file");
    }
    if (file == m->fail_file && offset <= m->fail_at && m->fail_at < offset + n)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "the disk is on fire");
    memcpy(dst, m->data[file] + offset, n);
    if (offset + n > m->max_end) m->max_end = offset + n;
    return WGLLM_STATUS_OK;
}

static void mem_src_init(struct mem_src *m) {
    memset(m, 0, sizeof(*m));
    m->fail_file = -1;
}

/* Adds a copy of buf as the next file. */
static void mem_src_add(struct mem_src *m, const void *buf, size_t size, const char *name) {
    m->data[m->n] = malloc(size ? size : 1);
    memcpy(m->data[m->n], buf, size);
    m->size[m->n] = size;
    m->names[m->n] = name;
    m->n++;
}

static void mem_src_free(struct mem_src *m) {
    for (int i = 0; i < m->n; i++) free(m->data[i]);
    m->n = 0;
}

static enum wgllm_status mem_src_open(struct mem_src *m, bool named, struct wgllm_gguf **g,
                                      struct wgllm_error *err) {
    struct wgllm_model_source src = {
        .n_files = m->n,
        .sizes = m->size,
        .names = named ? m->names : NULL,
        .read = mem_read,
        .user = m,
    };
    return wgllm_gguf_open_source(&src, g, err);
}

/* Everything the two contexts hand out is equal; b's tensor bytes are read
 * with wgllm_gguf_read_tensor (whole and in pieces) and compared with a's. */
static void check_same(const struct wgllm_gguf *a, const struct wgllm_gguf *b) {
    CHECK_EQ_INT(wgllm_gguf_version(a), wgllm_gguf_version(b));
    CHECK_EQ_INT(wgllm_gguf_alignment(a), wgllm_gguf_alignment(b));
    CHECK_EQ_INT(wgllm_gguf_n_splits(a), wgllm_gguf_n_splits(b));
    CHECK_EQ_INT(wgllm_gguf_file_size(a), wgllm_gguf_file_size(b));
    for (int i = 0; i < wgllm_gguf_n_splits(a) && i < wgllm_gguf_n_splits(b); i++)
        CHECK_EQ_INT(wgllm_gguf_data_offset(a, i), wgllm_gguf_data_offset(b, i));
    CHECK_EQ_INT(wgllm_gguf_n_kv(a), wgllm_gguf_n_kv(b));
    int bad = 0;
    for (int64_t i = 0; i < wgllm_gguf_n_kv(a) && i < wgllm_gguf_n_kv(b); i++) {
        const struct wgllm_gguf_kv *x = wgllm_gguf_kv_at(a, i), *y = wgllm_gguf_kv_at(b, i);
        if (x->key.len != y->key.len || memcmp(x->key.data, y->key.data, x->key.len) != 0 ||
            !value_eq(&x->value, &y->value))
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(wgllm_gguf_n_tensors(a), wgllm_gguf_n_tensors(b));
    CHECK(wgllm_gguf_mapped(a));
    CHECK(!wgllm_gguf_mapped(b));
    struct wgllm_error err;
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(a) && i < wgllm_gguf_n_tensors(b); i++) {
        const struct wgllm_gguf_tensor *x = wgllm_gguf_tensor_at(a, i), *y = wgllm_gguf_tensor_at(b, i);
        CHECK(x->name.len == y->name.len && memcmp(x->name.data, y->name.data, x->name.len) == 0);
        CHECK(x->n_dims == y->n_dims && x->type == y->type && x->offset == y->offset &&
              x->size == y->size && x->split == y->split);
        CHECK(memcmp(x->ne, y->ne, sizeof(x->ne)) == 0);
        CHECK(x->data != NULL && y->data == NULL);
        if (x->size == 0) continue;
        /* whole, the first and last byte, and a middle stretch */
        uint64_t sz = x->size;
        const uint64_t ranges[][2] = {{0, sz}, {0, 1}, {sz - 1, 1}, {sz / 3, sz / 2}, {sz, 0}};
        uint8_t *buf = malloc(sz + 1), *buf2 = malloc(sz + 1);
        for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
            uint64_t off = ranges[r][0], n = ranges[r][1];
            memset(buf, 0xa5, sz + 1);
            CHECK_EQ_INT(wgllm_gguf_read_tensor(b, y, off, buf, n, &err), WGLLM_STATUS_OK);
            CHECK(memcmp(buf, (const uint8_t *)x->data + off, n) == 0);
            CHECK_EQ_INT(buf[n], 0xa5);
            /* the mapped context reads the same way */
            CHECK_EQ_INT(wgllm_gguf_read_tensor(a, x, off, buf2, n, &err), WGLLM_STATUS_OK);
            CHECK(memcmp(buf, buf2, n) == 0);
        }
        /* outside the tensor, including offsets whose sum overflows */
        const uint64_t outside[][2] = {{0, sz + 1}, {sz, 1}, {sz + 1, 0}, {1, sz}, {UINT64_MAX, 2},
                                       {2, UINT64_MAX}};
        for (size_t r = 0; r < sizeof(outside) / sizeof(outside[0]); r++) {
            if (outside[r][1] > SIZE_MAX) continue;
            err.message[0] = '\0';
            CHECK_EQ_INT(wgllm_gguf_read_tensor(b, y, outside[r][0], buf, (size_t)outside[r][1], &err),
                         WGLLM_STATUS_INVALID_ARGUMENT);
            CHECK(strstr(err.message, "outside") != NULL);
            CHECK_EQ_INT(wgllm_gguf_read_tensor(a, x, outside[r][0], buf, (size_t)outside[r][1], &err),
                         WGLLM_STATUS_INVALID_ARGUMENT);
        }
        free(buf);
        free(buf2);
    }
}

/* Opens buf[0, n) with open_memory and through a source named `name`: same
 * status, and the source's message is "name: " + open_memory's. */
static bool same_as_memory(const uint8_t *buf, size_t n, const char *name, size_t at) {
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, buf, n);
    struct wgllm_gguf *g = NULL, *h = NULL;
    struct wgllm_error e1, e2;
    e1.message[0] = e2.message[0] = '\0';
    enum wgllm_status s1 = wgllm_gguf_open_memory(p, n, &g, &e1);
    struct mem_src m;
    mem_src_init(&m);
    mem_src_add(&m, buf, n, name);
    enum wgllm_status s2 = mem_src_open(&m, true, &h, &e2);
    char want[1100];
    snprintf(want, sizeof(want), "%s: %s", name, e1.message);
    bool ok = s1 == s2 && (g == NULL) == (h == NULL) && !m.bad_range &&
              (s1 == WGLLM_STATUS_OK || strcmp(want, e2.message) == 0);
    if (!ok)
        fprintf(stderr, "  at %zu: memory %d \"%s\"\n         source %d \"%s\"\n", at, (int)s1,
                e1.message, (int)s2, e2.message);
    wgllm_gguf_free(g);
    wgllm_gguf_free(h);
    mem_src_free(&m);
    free(p);
    return ok;
}

TEST(test_truncate_every_offset) {
    size_t size;
    uint8_t *full = small_file(&size);
    CHECK(full != NULL);
    if (!full) return;
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open_memory(full, size, &g, &err), WGLLM_STATUS_OK);
    wgllm_gguf_free(g);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        /* Exactly n bytes on the heap, so ASan sees any read past the end. */
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, full, n);
        err.message[0] = '\0';
        g = NULL;
        enum wgllm_status st = wgllm_gguf_open_memory(p, n, &g, &err);
        if (st == WGLLM_STATUS_OK || g != NULL || err.message[0] == '\0') {
            if (bad++ < 5) fprintf(stderr, "  truncation at %zu: status %d\n", n, (int)st);
        }
        wgllm_gguf_free(g);
        free(p);
    }
    CHECK_EQ_INT(bad, 0);
    /* through a source: the same status and message, behind the file's name */
    bad = 0;
    for (size_t n = 0; n <= size; n++)
        if (!same_as_memory(full, n, "small.gguf", n) && bad++ > 5) break;
    CHECK_EQ_INT(bad, 0);
    /* the same through a real (mmapped) file, at a few offsets */
    const char *path = test_tmp_path(".gguf");
    for (size_t n = 1; n < size; n += size / 7) {
        FILE *f = fopen(path, "wb");
        fwrite(full, 1, n, f);
        fclose(f);
        g = NULL;
        CHECK(wgllm_gguf_open(path, &g, &err) != WGLLM_STATUS_OK);
        CHECK(g == NULL && strstr(err.message, path) != NULL);
        struct wgllm_error err2;
        CHECK(wgllm_gguf_open_unmapped(path, &g, &err2) == err.status);
        CHECK(g == NULL);
        CHECK_STR(err2.message, err.message);
    }
    unlink(path);
    free(full);
}

TEST(test_flip_every_offset) {
    size_t size;
    uint8_t *full = small_file(&size);
    CHECK(full != NULL);
    if (!full) return;
    int failed = 0, ok = 0, bad = 0;
    for (size_t i = 0; i < size; i++) {
        static const uint8_t vals[2] = {0xff, 0x80};
        for (int k = 0; k < 2; k++) {
            uint8_t *p = malloc(size);
            memcpy(p, full, size);
            p[i] = vals[k];
            struct wgllm_gguf *g = NULL;
            struct wgllm_error err;
            err.message[0] = '\0';
            enum wgllm_status st = wgllm_gguf_open_memory(p, size, &g, &err);
            if (st != WGLLM_STATUS_OK) {
                failed++;
                if (g != NULL || err.message[0] == '\0' || err.status != st) bad++;
            } else {
                ok++;
                if (!consistent(g, p, size)) bad++;
                /* touch every key and value to let ASan check them */
                for (int64_t j = 0; j < wgllm_gguf_n_kv(g); j++) {
                    const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, j);
                    volatile char c = kv->key.len ? kv->key.data[kv->key.len - 1] : 0;
                    (void)c;
                    if (kv->value.type == WGLLM_GGUF_TYPE_ARRAY &&
                        kv->value.v.arr.type == WGLLM_GGUF_TYPE_STRING)
                        for (uint64_t e = 0; e < kv->value.v.arr.n; e++) {
                            const struct wgllm_gguf_str *s = &kv->value.v.arr.items[e].v.str;
                            volatile char c2 = s->len ? s->data[s->len - 1] : 0;
                            (void)c2;
                        }
                }
            }
            wgllm_gguf_free(g);
            free(p);
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* most positions are structure, not payload, so most flips must be caught */
    CHECK(failed > ok);
    free(full);
}

/* ---- hostile headers --------------------------------------------------------- */

struct bb {
    uint8_t p[4096];
    size_t n;
};
static void bb_put(struct bb *b, const void *s, size_t n) {
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_header(struct bb *b, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_u32(b, WGLLM_GGUF_MAGIC);
    bb_u32(b, 3);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
/* A tensor info: name, dims, type, offset. */
static void bb_tensor(struct bb *b, const char *name, uint32_t n_dims, const int64_t *ne,
                      uint32_t type, uint64_t offset) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) bb_u64(b, (uint64_t)ne[i]);
    bb_u32(b, type);
    bb_u64(b, offset);
}
static void bb_pad(struct bb *b, size_t total) {
    while (b->n < total) b->p[b->n++] = 0;
}

static void expect_fail(struct bb *b, enum wgllm_status want, const char *needle, int line) {
    uint8_t *p = malloc(b->n);
    memcpy(p, b->p, b->n);
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    err.message[0] = '\0';
    enum wgllm_status st = wgllm_gguf_open_memory(p, b->n, &g, &err);
    if (st != want || !strstr(err.message, needle) || g) {
        fprintf(stderr, "  line %d: status %d (want %d), message \"%s\" (want \"%s\")\n", line,
                (int)st, (int)want, err.message, needle);
        test_checks_failed_in_current++;
    }
    /* and through a source, the same way */
    if (!same_as_memory(b->p, b->n, "hostile.gguf", (size_t)line)) test_checks_failed_in_current++;
    wgllm_gguf_free(g);
    free(p);
}
#define EXPECT_FAIL(b, st, needle) expect_fail(b, st, needle, __LINE__)

TEST(test_hostile_headers) {
    struct bb b;
    const enum wgllm_status BAD = WGLLM_STATUS_BAD_FORMAT;

    bb_header(&b, 0, 0);
    b.p[0] = 'X';
    EXPECT_FAIL(&b, BAD, "magic");
    bb_header(&b, 0, 0);
    b.p[4] = 1;
    EXPECT_FAIL(&b, WGLLM_STATUS_UNSUPPORTED, "version 1");
    bb_header(&b, 0, 0);
    b.p[4] = 0;
    EXPECT_FAIL(&b, BAD, "version");

    bb_header(&b, 0, 1ull << 62);
    EXPECT_FAIL(&b, BAD, "key/value count");
    bb_header(&b, UINT64_MAX, 0);
    EXPECT_FAIL(&b, BAD, "tensor count");

    bb_header(&b, 0, 1);
    bb_u64(&b, 1ull << 63); /* key length */
    bb_pad(&b, 64);
    EXPECT_FAIL(&b, BAD, "key length");

    bb_header(&b, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, WGLLM_GGUF_TYPE_STRING);
    bb_u64(&b, UINT64_MAX - 3); /* string length */
    bb_pad(&b, 80);
    EXPECT_FAIL(&b, BAD, "general.name");
    EXPECT_FAIL(&b, BAD, "string length");

    bb_header(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 99);
    bb_pad(&b, 80);
    EXPECT_FAIL(&b, BAD, "value type 99");

    bb_header(&b, 0, 1);
    bb_str(&b, "tokens");
    bb_u32(&b, WGLLM_GGUF_TYPE_ARRAY);
    bb_u32(&b, WGLLM_GGUF_TYPE_STRING);
    bb_u64(&b, 1ull << 60); /* array count */
    bb_pad(&b, 100);
    EXPECT_FAIL(&b, BAD, "array count");

    bb_header(&b, 0, 1);
    bb_str(&b, "deep");
    bb_u32(&b, WGLLM_GGUF_TYPE_ARRAY);
    for (int i = 0; i < 20; i++) {
        bb_u32(&b, WGLLM_GGUF_TYPE_ARRAY);
        bb_u64(&b, 1);
    }
    bb_pad(&b, b.n + 64);
    EXPECT_FAIL(&b, BAD, "nested");

    bb_header(&b, 0, 2);
    bb_str(&b, "k");
    bb_u32(&b, WGLLM_GGUF_TYPE_UINT8);
    b.p[b.n++] = 1;
    bb_str(&b, "k");
    bb_u32(&b, WGLLM_GGUF_TYPE_UINT8);
    b.p[b.n++] = 2;
    EXPECT_FAIL(&b, BAD, "duplicate key 'k'");

    bb_header(&b, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, WGLLM_GGUF_TYPE_UINT32);
    bb_u32(&b, 48);
    EXPECT_FAIL(&b, BAD, "general.alignment");
    b.n -= 4;
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, BAD, "general.alignment");

    int64_t ne[4] = {32, 4, 1, 1};
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, ne, WGLLM_TYPE_F32, 1024);
    bb_pad(&b, 256);
    EXPECT_FAIL(&b, BAD, "tensor 'w': data [offset");
    EXPECT_FAIL(&b, BAD, "extends past end of file (size 256)");

    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, ne, WGLLM_TYPE_F32, 16);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "data offset 16");

    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, ne, 200, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, WGLLM_STATUS_UNSUPPORTED, "type 200");

    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, ne, 4 /* removed Q4_2 */, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, WGLLM_STATUS_UNSUPPORTED, "tensor 'w'");

    int64_t big[4] = {1ll << 32, 1ll << 32, 1ll << 32, 1};
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 3, big, WGLLM_TYPE_F32, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "dims overflow");

    int64_t bytes_big[4] = {1ll << 31, 1ll << 31, 2, 1}; /* 2^63 elements: count ok? no */
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 3, bytes_big, WGLLM_TYPE_F32, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "dims overflow");

    int64_t bytes_ovf[4] = {1ll << 31, 1ll << 31, 1, 1}; /* 2^62 elements, 2^64 bytes of f32 */
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, bytes_ovf, WGLLM_TYPE_F32, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "dims overflow");

    int64_t neg[4] = {32, -1, 1, 1};
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 2, neg, WGLLM_TYPE_F32, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "ne[1] = -1");

    bb_header(&b, 1, 0);
    int64_t ne5[5] = {32, 1, 1, 1, 1};
    bb_tensor(&b, "w", 5, ne5, WGLLM_TYPE_F32, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "n_dims 5");

    int64_t odd[4] = {33, 1, 1, 1};
    bb_header(&b, 1, 0);
    bb_tensor(&b, "w", 1, odd, WGLLM_TYPE_Q8_0, 0);
    bb_pad(&b, 1024);
    EXPECT_FAIL(&b, BAD, "block size");

    bb_header(&b, 2, 0);
    bb_tensor(&b, "w", 2, ne, WGLLM_TYPE_F32, 0);
    bb_tensor(&b, "w", 2, ne, WGLLM_TYPE_F32, 512);
    bb_pad(&b, 2048);
    EXPECT_FAIL(&b, BAD, "duplicate tensor name 'w'");

    /* and a valid hand-built one, so the cases above fail for their own reason */
    bb_header(&b, 2, 0);
    bb_tensor(&b, "w", 2, ne, WGLLM_TYPE_F32, 0);
    bb_tensor(&b, "v", 2, ne, WGLLM_TYPE_F32, 512);
    bb_pad(&b, 2048);
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open_memory(b.p, b.n, &g, &err), WGLLM_STATUS_OK);
    if (g) CHECK_EQ_INT(wgllm_gguf_data_offset(g, 0), 128);
    wgllm_gguf_free(g);

    /* files that do not exist or are empty */
    CHECK_EQ_INT(wgllm_gguf_open("/nonexistent/x.gguf", &g, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "/nonexistent/x.gguf") != NULL);
    const char *path = test_tmp_path(".gguf");
    fclose(fopen(path, "wb"));
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_BAD_FORMAT);
    unlink(path);
}

/* ---- split models ----------------------------------------------------------------- */

TEST(test_split_roundtrip) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.architecture", "llama");
    wgllm_gguf_writer_set_u32(w, "llama.block_count", 3);
    char name[32];
    for (int i = 0; i < 7; i++) {
        uint64_t ne[2] = {64, 4 + (uint64_t)i}; /* 1 KiB + */
        snprintf(name, sizeof(name), "blk.%d.w", i);
        wgllm_gguf_writer_add_tensor(w, name, WGLLM_TYPE_F32, 2, ne);
    }
    /* tensors of 1024..2560 bytes: {0,1,2} 3840, {3,4} 3840, {5,6} 4864 */
    const uint64_t max_bytes = 5000;
    CHECK_EQ_INT(wgllm_gguf_writer_split_count(w, max_bytes), 3);
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s", test_tmp_path("-model"));
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_gguf_writer_write_split(w, prefix, max_bytes, fill_pattern, NULL, &err);
    if (st) fprintf(stderr, "  %s\n", err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);

    char p1[600], p2[600], p3[600];
    wgllm_gguf_split_path(p1, sizeof(p1), prefix, 1, 3);
    wgllm_gguf_split_path(p2, sizeof(p2), prefix, 2, 3);
    wgllm_gguf_split_path(p3, sizeof(p3), prefix, 3, 3);
    CHECK(strstr(p1, "-model-00001-of-00003.gguf") != NULL);
    for (int which = 0; which < 2; which++) {
        struct wgllm_gguf *g = NULL;
        st = wgllm_gguf_open(which == 0 ? p1 : p3, &g, &err);
        if (st) fprintf(stderr, "  %s\n", err.message);
        CHECK_EQ_INT(st, WGLLM_STATUS_OK);
        if (!g) continue;
        CHECK_EQ_INT(wgllm_gguf_n_splits(g), 3);
        CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 7);
        struct wgllm_gguf_str s;
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.architecture", &s, &err), WGLLM_STATUS_OK);
        const struct wgllm_gguf_value *v = wgllm_gguf_find(g, "split.count");
        CHECK(v && v->type == WGLLM_GGUF_TYPE_UINT16 && v->v.u64 == 3);
        v = wgllm_gguf_find(g, "split.no");
        CHECK(v && v->type == WGLLM_GGUF_TYPE_UINT16 && v->v.u64 == 0);
        v = wgllm_gguf_find(g, "split.tensors.count");
        CHECK(v && v->type == WGLLM_GGUF_TYPE_INT32 && v->v.i64 == 7);
        int seen[3] = {0};
        for (int i = 0; i < 7; i++) {
            snprintf(name, sizeof(name), "blk.%d.w", i);
            const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(g, name);
            CHECK(t != NULL);
            if (!t) continue;
            CHECK_EQ_INT(t->size, 64 * 4 * (4 + i));
            CHECK(data_matches(t, i));
            CHECK(t->split >= 0 && t->split < 3);
            if (t->split >= 0 && t->split < 3) seen[t->split]++;
        }
        CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
        wgllm_gguf_free(g);
    }
    /* shard 2 alone holds no metadata but the split keys */
    struct wgllm_gguf *g = NULL;
    size_t n2;
    uint8_t *b2 = (uint8_t *)test_read_file(p2, &n2);
    CHECK(b2 != NULL);
    if (b2) {
        CHECK_EQ_INT(wgllm_gguf_open_memory(b2, n2, &g, &err), WGLLM_STATUS_OK);
        if (g) {
            CHECK_EQ_INT(wgllm_gguf_n_kv(g), 3);
            CHECK(wgllm_gguf_find(g, "general.architecture") == NULL);
            const struct wgllm_gguf_value *v = wgllm_gguf_find(g, "split.no");
            CHECK(v && v->v.u64 == 1);
        }
        wgllm_gguf_free(g);
        free(b2);
    }
    /* a missing shard is named in the error */
    unlink(p3);
    g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(p1, &g, &err), WGLLM_STATUS_IO);
    CHECK(g == NULL && strstr(err.message, "-00003-of-00003.gguf") != NULL);
    /* a shard from a different split fails split.no */
    rename(p2, p3);
    CHECK_EQ_INT(wgllm_gguf_open(p1, &g, &err), WGLLM_STATUS_IO);
    wgllm_gguf_split_path(p2, sizeof(p2), prefix, 2, 3);
    size_t n1;
    uint8_t *b1 = (uint8_t *)test_read_file(p1, &n1);
    FILE *f = fopen(p2, "wb");
    fwrite(b1, 1, n1, f);
    fclose(f);
    free(b1);
    CHECK_EQ_INT(wgllm_gguf_open(p1, &g, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "split.no") != NULL);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}

#define BIG_TOKENS 40000

/* A file whose header (~1.5 MB of tokens) is far larger than the reader's
 * first read, with a 4 MiB tensor after it; written to `path`, returned read back. */
static uint8_t *big_file(const char *path, size_t *size) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.architecture", "llama");
    char *chars = malloc((size_t)BIG_TOKENS * 32);
    const char **toks = malloc(BIG_TOKENS * sizeof(*toks));
    float *scores = malloc(BIG_TOKENS * sizeof(*scores));
    uint8_t *flags = malloc(BIG_TOKENS);
    for (int i = 0; i < BIG_TOKENS; i++) {
        snprintf(chars + (size_t)i * 32, 32, "tok_%05d_%.*s", i % 100000, i % 20, "abcdefghijklmnopqrst");
        toks[i] = chars + (size_t)i * 32;
        scores[i] = (float)i * 0.25f;
        flags[i] = (uint8_t)(i % 3 == 0);
    }
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, BIG_TOKENS);
    wgllm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", WGLLM_GGUF_TYPE_FLOAT32, scores, BIG_TOKENS);
    wgllm_gguf_writer_set_arr(w, "flags", WGLLM_GGUF_TYPE_BOOL, flags, BIG_TOKENS);
    wgllm_gguf_writer_set_u32(w, "after.the.arrays", 7);
    uint64_t ne0[2] = {1024, 1024}, ne1[1] = {64}, ne2[1] = {7};
    wgllm_gguf_writer_add_tensor(w, "big", WGLLM_TYPE_F32, 2, ne0);
    wgllm_gguf_writer_add_tensor(w, "q", WGLLM_TYPE_Q8_0, 1, ne1);
    wgllm_gguf_writer_add_tensor(w, "odd", WGLLM_TYPE_F32, 1, ne2);
    struct wgllm_error err;
    enum wgllm_status st = wgllm_gguf_writer_write(w, path, fill_pattern, NULL, &err);
    wgllm_gguf_writer_free(w);
    free(chars);
    free(toks);
    free(scores);
    free(flags);
    if (st != WGLLM_STATUS_OK) return NULL;
    return (uint8_t *)test_read_file(path, size);
}

TEST(test_source_big_header) {
    const char *path = test_tmp_path(".gguf");
    size_t size;
    uint8_t *full = big_file(path, &size);
    unlink(path);
    CHECK(full != NULL);
    if (!full) return;
    struct wgllm_gguf *a = NULL, *b = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open_memory(full, size, &a, &err), WGLLM_STATUS_OK);
    if (!a) return;
    uint64_t header = wgllm_gguf_data_offset(a, 0);
    CHECK(header > 1000000 && size > header + 4000000);

    struct mem_src m;
    mem_src_init(&m);
    mem_src_add(&m, full, size, "big.gguf");
    enum wgllm_status st = mem_src_open(&m, true, &b, &err);
    if (st) fprintf(stderr, "  %s\n", err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    /* the header took several reads, and the tensor data was left in place */
    CHECK(m.calls > 1);
    CHECK(m.max_end >= header && m.max_end < size);
    CHECK(!m.bad_range);
    if (b) {
        const struct wgllm_gguf_value *v = wgllm_gguf_find(b, "tokenizer.ggml.tokens");
        CHECK(v && v->v.arr.n == BIG_TOKENS && wgllm_gguf_str_eq(v->v.arr.items[12345].v.str, "tok_12345_abcde"));
        uint32_t u;
        CHECK_EQ_INT(wgllm_gguf_get_u32(b, "after.the.arrays", &u, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(u, 7);
        int calls = m.calls;
        check_same(a, b);
        CHECK(m.calls > calls);
        /* read_tensor asks the source for exactly the tensor's bytes */
        const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(b, "odd");
        uint8_t x[4];
        m.max_end = 0;
        CHECK(t && wgllm_gguf_read_tensor(b, t, 24, x, 4, &err) == WGLLM_STATUS_OK);
        if (t) CHECK_EQ_INT(m.max_end, wgllm_gguf_data_offset(b, 0) + t->offset + 28);
        CHECK(t && x[0] == pattern(2, 24) && x[3] == pattern(2, 27));
        wgllm_gguf_free(b);
    }
    mem_src_free(&m);

    /* Truncations past the first read: the parser must tell "not read yet"
     * from "past the end of the file" and report exactly what open_memory does. */
    const size_t cuts[] = {0, 100, 262143, 262144, 262145, 300001, 524288, 700003, 1048576,
                           (size_t)header - 1, (size_t)header, (size_t)header + 4096, size - 1};
    int bad = 0;
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        if (!same_as_memory(full, cuts[i], "big.gguf", cuts[i])) bad++;
    CHECK_EQ_INT(bad, 0);
    /* a count that claims more than the file: same message too */
    uint8_t *hostile = malloc(size);
    memcpy(hostile, full, size);
    const struct wgllm_gguf_value *sv = wgllm_gguf_find(a, "tokenizer.ggml.scores");
    if (sv) {
        uint64_t n_at = (uint64_t)((const uint8_t *)sv->v.arr.data - full) - 8, huge = size;
        memcpy(hostile + n_at, &huge, 8);
        CHECK(same_as_memory(hostile, size, "big.gguf", (size_t)n_at));
        huge = (size - (n_at + 8)) / 4 - 1; /* fits the file, runs into the tensor data */
        memcpy(hostile + n_at, &huge, 8);
        CHECK(same_as_memory(hostile, size, "big.gguf", (size_t)n_at));
    }
    free(hostile);
    wgllm_gguf_free(a);
    free(full);
}

/* A file of `size` bytes whose first `n` are `head` and the rest zeros,
 * without holding them: a hostile header's claims cost nothing to test. */
struct zero_src {
    const uint8_t *head;
    size_t n;
    uint64_t most; /* the largest single read asked for */
};

static enum wgllm_status zero_read(void *user, int file, uint64_t offset, void *dst, size_t n,
                                   struct wgllm_error *err) {
    struct zero_src *z = user;
    (void)file, (void)err;
    if (n > z->most) z->most = n;
    memset(dst, 0, n);
    if (offset < z->n) memcpy(dst, z->head + offset, WGLLM_MIN(n, (size_t)(z->n - offset)));
    return WGLLM_STATUS_OK;
}

TEST(test_source_header_cap) {
    /* GGUF v3, 0 tensors, 1 key "a" of type str whose length claims 600 MB of a 700 MB file */
    uint8_t head[64] = {'G', 'G', 'U', 'F', 3};
    size_t n = 8;
    uint64_t v64 = 0;
    memcpy(head + n, &v64, 8), n += 8; /* tensors */
    v64 = 1;
    memcpy(head + n, &v64, 8), n += 8; /* key/values */
    memcpy(head + n, &v64, 8), n += 8; /* key length */
    head[n++] = 'a';
    uint32_t type = WGLLM_GGUF_TYPE_STRING;
    memcpy(head + n, &type, 4), n += 4;
    v64 = 600ull << 20;
    memcpy(head + n, &v64, 8), n += 8;
    struct zero_src z = {head, n, 0};
    const uint64_t size = 700ull << 20;
    const char *name = "huge.gguf";
    struct wgllm_model_source src = {.n_files = 1, .sizes = &size, .names = &name, .read = zero_read, .user = &z};
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open_source(&src, &g, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(g == NULL);
    CHECK(strstr(err.message, "huge.gguf: ") == err.message && strstr(err.message, "too large to read into memory"));
    CHECK(z.most <= (512u << 20)); /* never asked for more than the cap */
    wgllm_gguf_free(g);
}

TEST(test_source_read_errors) {
    size_t size;
    const char *path = test_tmp_path(".gguf");
    uint8_t *full = big_file(path, &size);
    unlink(path);
    CHECK(full != NULL);
    if (!full) return;
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    /* a read inside the header fails: the message names the file and the range */
    struct mem_src m;
    mem_src_init(&m);
    mem_src_add(&m, full, size, "model-on-opfs.gguf");
    m.fail_file = 0;
    m.fail_at = 600000;
    CHECK_EQ_INT(mem_src_open(&m, true, &g, &err), WGLLM_STATUS_IO);
    CHECK(g == NULL);
    CHECK(strstr(err.message, "model-on-opfs.gguf: ") == err.message);
    CHECK(strstr(err.message, "[524288, 1048576)") != NULL);
    CHECK(strstr(err.message, "the disk is on fire") != NULL);
    /* the first read, and without names: "file 1" */
    m.fail_at = 0;
    CHECK_EQ_INT(mem_src_open(&m, false, &g, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "file 1: ") == err.message && strstr(err.message, "[0, 262144)") != NULL);
    /* a read of tensor data fails: the tensor, file and range are named */
    m.fail_file = -1;
    CHECK_EQ_INT(mem_src_open(&m, true, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(g, "big");
        m.fail_file = 0;
        m.fail_at = wgllm_gguf_data_offset(g, 0) + t->offset + 1000;
        uint8_t *buf = malloc(t->size);
        CHECK_EQ_INT(wgllm_gguf_read_tensor(g, t, 0, buf, 999, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_gguf_read_tensor(g, t, 0, buf, t->size, &err), WGLLM_STATUS_IO);
        CHECK(strstr(err.message, "tensor 'big'") != NULL);
        CHECK(strstr(err.message, "model-on-opfs.gguf") != NULL);
        char range[64];
        snprintf(range, sizeof(range), "[%llu, %llu)", (unsigned long long)(m.fail_at - 1000),
                 (unsigned long long)(m.fail_at - 1000 + t->size));
        CHECK(strstr(err.message, range) != NULL);
        CHECK(strstr(err.message, "the disk is on fire") != NULL);
        free(buf);
        wgllm_gguf_free(g);
    }
    mem_src_free(&m);
    /* bad arguments */
    struct wgllm_model_source src = {.n_files = 0, .sizes = NULL, .read = mem_read};
    g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open_source(&src, &g, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(g == NULL && strstr(err.message, "source") != NULL);
    CHECK_EQ_INT(wgllm_gguf_open_source(NULL, &g, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    free(full);
}

/* Opens `path` mapped and unmapped; they must agree in everything. */
static void check_unmapped(const char *path) {
    struct wgllm_gguf *a = NULL, *b = NULL;
    struct wgllm_error err;
    enum wgllm_status st = wgllm_gguf_open(path, &a, &err);
    if (st) fprintf(stderr, "  open %s: %s\n", path, err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    st = wgllm_gguf_open_unmapped(path, &b, &err);
    if (st) fprintf(stderr, "  open_unmapped %s: %s\n", path, err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    if (a && b) check_same(a, b);
    wgllm_gguf_free(a);
    wgllm_gguf_free(b);
}

/* open and open_unmapped fail the same way. */
static void check_same_failure(const char *path, enum wgllm_status want, const char *needle) {
    struct wgllm_gguf *a = NULL, *b = NULL;
    struct wgllm_error e1, e2;
    e1.message[0] = e2.message[0] = '\0';
    CHECK_EQ_INT(wgllm_gguf_open(path, &a, &e1), want);
    CHECK_EQ_INT(wgllm_gguf_open_unmapped(path, &b, &e2), want);
    CHECK(a == NULL && b == NULL);
    CHECK_STR(e1.message, e2.message);
    CHECK(strstr(e2.message, needle) != NULL);
}

/* A writer declaring seven small F32 tensors of different shapes (split tests). */
static struct wgllm_gguf_writer *seven_tensor_writer(void) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.architecture", "llama");
    char name[32];
    for (int i = 0; i < 7; i++) {
        uint64_t ne[2] = {64, 4 + (uint64_t)i};
        snprintf(name, sizeof(name), "blk.%d.w", i);
        wgllm_gguf_writer_add_tensor(w, name, WGLLM_TYPE_F32, 2, ne);
    }
    return w;
}

TEST(test_unmapped_files) {
    const char *path = test_tmp_path(".gguf");
    size_t size;
    uint8_t *full = big_file(path, &size);
    CHECK(full != NULL);
    check_unmapped(path);
    /* truncated: the same message as the mapped reader, naming the path */
    FILE *f = fopen(path, "wb");
    fwrite(full, 1, 700000, f);
    fclose(f);
    check_same_failure(path, WGLLM_STATUS_BAD_FORMAT, path);
    f = fopen(path, "wb");
    fclose(f);
    check_same_failure(path, WGLLM_STATUS_BAD_FORMAT, "empty");
    unlink(path);
    check_same_failure(path, WGLLM_STATUS_IO, "cannot open");
    free(full);

    /* real vocabularies (headers of 0.6 to 1.8 MB) */
    check_unmapped(test_shared_path("vocab/ggml-vocab-gpt-2.gguf"));
    check_unmapped(test_shared_path("vocab/ggml-vocab-bert-bge.gguf"));

    /* a split model, opened by its first and by its last shard */
    struct wgllm_gguf_writer *w = seven_tensor_writer();
    char prefix[512], p1[600], p2[600], p3[600];
    snprintf(prefix, sizeof(prefix), "%s", test_tmp_path("-um"));
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_writer_write_split(w, prefix, 5000, fill_pattern, NULL, &err), WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);
    wgllm_gguf_split_path(p1, sizeof(p1), prefix, 1, 3);
    wgllm_gguf_split_path(p2, sizeof(p2), prefix, 2, 3);
    wgllm_gguf_split_path(p3, sizeof(p3), prefix, 3, 3);
    check_unmapped(p1);
    check_unmapped(p3);
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open_unmapped(p1, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        CHECK_EQ_INT(wgllm_gguf_n_splits(g), 3);
        const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(g, "blk.6.w");
        uint8_t buf[16];
        CHECK(t && t->split == 2 && wgllm_gguf_read_tensor(g, t, 100, buf, 16, &err) == WGLLM_STATUS_OK);
        CHECK(buf[0] == pattern(6, 100) && buf[15] == pattern(6, 115));
        wgllm_gguf_free(g);
    }
    /* a wrong shard in the middle: split.no, named by that shard's path */
    size_t n1;
    uint8_t *b1 = (uint8_t *)test_read_file(p1, &n1);
    size_t n2;
    uint8_t *b2 = (uint8_t *)test_read_file(p2, &n2);
    f = fopen(p2, "wb");
    fwrite(b1, 1, n1, f);
    fclose(f);
    check_same_failure(p1, WGLLM_STATUS_BAD_FORMAT, "split.no");
    struct wgllm_error e;
    CHECK(wgllm_gguf_open_unmapped(p1, &g, &e) != WGLLM_STATUS_OK && strstr(e.message, p2) == e.message);
    f = fopen(p2, "wb");
    fwrite(b2, 1, n2, f);
    fclose(f);
    /* a missing shard is named */
    unlink(p3);
    check_same_failure(p1, WGLLM_STATUS_IO, "-00003-of-00003.gguf");
    free(b1);
    free(b2);
    unlink(p1);
    unlink(p2);
}

TEST(test_source_split) {
    struct wgllm_gguf_writer *w = seven_tensor_writer();
    char prefix[512], p[3][600];
    snprintf(prefix, sizeof(prefix), "%s", test_tmp_path("-src"));
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_writer_write_split(w, prefix, 5000, fill_pattern, NULL, &err), WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);
    uint8_t *bytes[3];
    size_t sizes[3];
    for (int i = 0; i < 3; i++) {
        wgllm_gguf_split_path(p[i], sizeof(p[i]), prefix, i + 1, 3);
        bytes[i] = (uint8_t *)test_read_file(p[i], &sizes[i]);
        CHECK(bytes[i] != NULL);
        if (!bytes[i]) return;
    }
    static const char *const names[3] = {"shard-a", "shard-b", "shard-c"};
    struct wgllm_gguf *a = NULL, *b = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(p[0], &a, &err), WGLLM_STATUS_OK);
    struct mem_src m;
    mem_src_init(&m);
    for (int i = 0; i < 3; i++) mem_src_add(&m, bytes[i], sizes[i], names[i]);
    CHECK_EQ_INT(mem_src_open(&m, true, &b, &err), WGLLM_STATUS_OK);
    if (a && b) check_same(a, b);
    wgllm_gguf_free(b);
    mem_src_free(&m);
    wgllm_gguf_free(a);

    /* too few and too many files for split.count */
    for (int n = 1; n <= 4; n += 1) {
        if (n == 3) continue;
        mem_src_init(&m);
        for (int i = 0; i < n; i++) mem_src_add(&m, bytes[i % 3], sizes[i % 3], names[i % 3]);
        b = NULL;
        CHECK_EQ_INT(mem_src_open(&m, true, &b, &err), WGLLM_STATUS_BAD_FORMAT);
        char want[96];
        snprintf(want, sizeof(want), "shard-a: gguf: split.count is 3 but the source gives %d file", n);
        CHECK(b == NULL && strstr(err.message, want) == err.message);
        mem_src_free(&m);
    }
    /* shards out of order: split.no, naming the shard */
    mem_src_init(&m);
    mem_src_add(&m, bytes[0], sizes[0], names[0]);
    mem_src_add(&m, bytes[2], sizes[2], names[2]);
    mem_src_add(&m, bytes[1], sizes[1], names[1]);
    CHECK_EQ_INT(mem_src_open(&m, true, &b, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "shard-c: gguf: key 'split.no' is 2, expected 1") == err.message);
    mem_src_free(&m);
    /* a single file that says it is one of 3 */
    mem_src_init(&m);
    mem_src_add(&m, bytes[0], sizes[0], names[0]);
    CHECK_EQ_INT(mem_src_open(&m, true, &b, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "split.count is 3") != NULL);
    mem_src_free(&m);
    for (int i = 0; i < 3; i++) {
        free(bytes[i]);
        unlink(p[i]);
    }
}

int main(void) {
    wgllm_base_init();
    wgllm_quant_init();
    RUN(test_roundtrip_all_types);
    RUN(test_alignment_key);
    RUN(test_writer_errors);
    RUN(test_vocab_files);
    RUN(test_truncate_every_offset);
    RUN(test_flip_every_offset);
    RUN(test_hostile_headers);
    RUN(test_split_roundtrip);
    RUN(test_source_big_header);
    RUN(test_source_header_cap);
    RUN(test_source_read_errors);
    RUN(test_unmapped_files);
    RUN(test_source_split);
    return test_summary("test_gguf");
}
