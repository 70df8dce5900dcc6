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
    /* the same through a real (mmapped) file, at a few offsets */
    const char *path = test_tmp_path(".gguf");
    for (size_t n = 1; n < size; n += size / 7) {
        FILE *f = fopen(path, "wb");
        fwrite(full, 1, n, f);
        fclose(f);
        g = NULL;
        CHECK(wgllm_gguf_open(path, &g, &err) != WGLLM_STATUS_OK);
        CHECK(g == NULL && strstr(err.message, path) != NULL);
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
    return test_summary("test_gguf");
}
