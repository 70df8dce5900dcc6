/*
 * kernels_fused.c - WGSL of the fused decode kernels (kernels.h): one
 * mat-vec for a layer's q, k and v (MATVEC_QKV), one for gate, up and
 * their GLU (MATVEC_SWIGLU / MATVEC_GEGLU), and RoPE with the KV-cache
 * store (ROPE_STORE). They exist to cut a decode step's dispatches, which
 * is what bounds a small model's tokens/s on a real GPU; each gives the
 * bits of the kernels it stands for, so both paths agree with the CPU alike.
 *
 * A fused mat-vec binds several weights, each in its own format: the one
 * dequant routine per format (wgllm_wgsl_format, what MATVEC uses) is
 * emitted once per weight with its module-scope names suffixed (_0, _1,
 * _2) and its binding renumbered, so a Q4_K_M layer with a Q6_K v
 * projection fuses as well as a uniform one. The workgroup shapes (a row
 * per thread, a workgroup reduction, subgroups) are MATVEC's, reducing a
 * vec2 per row (q|k|v: one value; gate and up: two) in MATVEC's order.
 *
 * Each of them, and MATVEC itself, may also take its input unrounded: a
 * prologue (key.pro) rounds it, after an RMSNorm when asked, as ROUND_ACT
 * and RMS_NORM_ROUND would (see "the prologue" below), so that a llama
 * layer's decode step needs 6 dispatches instead of 10.
 */
#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"
#include "quant/quant.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KP_AT(view, field, letter)                                                              \
    _Static_assert(offsetof(struct wgllm_kp_##view, field) == offsetof(struct wgllm_kp_raw, letter), \
                   "wgllm_kp_" #view "." #field " must sit at p." #letter)
_Static_assert(sizeof(struct wgllm_kp_matvec_qkv) == 64, "wgllm_kp_matvec_qkv is the whole block");
KP_AT(matvec_qkv, rows_q, n); KP_AT(matvec_qkv, rows_k, m); KP_AT(matvec_qkv, k, k); KP_AT(matvec_qkv, w_off, a);
KP_AT(matvec_qkv, x_off, b); KP_AT(matvec_qkv, rows_v, d); KP_AT(matvec_qkv, bq_off, e); KP_AT(matvec_qkv, bk_off, g);
KP_AT(matvec_qkv, bv_off, i);
KP_AT(matvec_qkv, norm_off, h); KP_AT(matvec_qkv, norm_eps, f3);
_Static_assert(sizeof(struct wgllm_kp_rope_store) == 64, "wgllm_kp_rope_store is the whole block");
KP_AT(rope_store, heads, n); KP_AT(rope_store, n_rot, m); KP_AT(rope_store, head_dim, k);
KP_AT(rope_store, q_stride, a); KP_AT(rope_store, k_stride, b); KP_AT(rope_store, cs_off, c);
KP_AT(rope_store, v_stride, d); KP_AT(rope_store, row_at, e); KP_AT(rope_store, rotate, h);
#undef KP_AT

static bool ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The names a format's text declares at module scope: fn NAME, var<...> NAME, const NAME. */
static int declared_names(const char *t, char names[][32], int cap) {
    int n = 0;
    for (const char *c = t; *c; c++) {
        if (c > t && ident_char(c[-1])) continue;
        const char *q = NULL;
        if (!strncmp(c, "fn ", 3)) q = c + 3;
        else if (!strncmp(c, "const ", 6)) q = c + 6;
        else if (!strncmp(c, "var<", 4) && (q = strchr(c, '>'))) q++;
        if (!q) continue;
        while (*q == ' ') q++;
        size_t len = 0;
        while (ident_char(q[len])) len++;
        if (!len || len >= 32 || n == cap) continue;
        memcpy(names[n], q, len);
        names[n][len] = 0;
        n++;
    }
    return n;
}

/* The format routine of `type` for weight `part`: every declared name
 * suffixed _part, its weight at @binding(binding); with `xin` its reads of
 * X[i] become xin(i) (the prologue's packed input). */
static void emit_part_format(struct wgllm_strbuf *b, uint32_t type, int part, int binding, bool xin) {
    char *t = wgllm_wgsl_format(type, true);
    if (!t) {
        b->oom = true;
        return;
    }
    char names[64][32];
    const int n = declared_names(t, names, 64);
    int xdepth = 0; /* brackets open inside an X[...] being turned into xin(...) */
    for (const char *c = t; *c;) {
        if (xin && c[0] == 'X' && c[1] == '[' && (c == t || !ident_char(c[-1]))) {
            wgllm_strbuf_printf(b, "xin(");
            xdepth = 1;
            c += 2;
        } else if (xdepth && (*c == '[' || *c == ']')) {
            xdepth += *c == '[' ? 1 : -1;
            wgllm_strbuf_printf(b, "%c", xdepth || *c == '[' ? *c : ')');
            c++;
        } else if (!strncmp(c, "@binding(1)", 11)) {
            wgllm_strbuf_printf(b, "@binding(%d)", binding);
            c += 11;
        } else if (ident_start(*c) && (c == t || c[-1] != '.')) {
            size_t len = 0;
            while (ident_char(c[len])) len++;
            bool ours = false;
            for (int i = 0; i < n && !ours; i++) ours = strlen(names[i]) == len && !strncmp(names[i], c, len);
            wgllm_strbuf_printf(b, "%.*s%s", (int)len, c, ours ? (part == 0 ? "_0" : part == 1 ? "_1" : "_2") : "");
            c += len;
        } else if (isdigit((unsigned char)*c)) { /* a literal: 1u, 0x7fu, 2.5e-3 */
            size_t len = 0;
            while (ident_char(c[len]) || c[len] == '.') len++;
            wgllm_strbuf_printf(b, "%.*s", (int)len, c);
            c += len;
        } else {
            wgllm_strbuf_printf(b, "%c", *c++);
        }
    }
    free(t);
}

/* main() of a fused mat-vec over rows R < nrows(): val(R, xb, tid) is
 * this thread's share of the row's products, put2(R, tok, v) stores the
 * reduced pair. MATVEC's three shapes, in its order of summation. */
static void emit_matvec_main(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t, bool pro) {
    /* with a prologue every thread helps round the token's row into
     * workgroup memory first, and the rows read it from there (xb 0) */
    const char *xb = pro ? "0u" : "p.b + tok * p.k";
    if (t->matvec_thread_rows && pro) {
        wgllm_strbuf_printf(b, "@compute @workgroup_size(ROWS)\n"
                  "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
                  "  let tok = wid.y;\n"
                  "  prologue(lid.x, ROWS, tok);\n"
                  "  let row = wid.x * ROWS + lid.x;\n"
                  "  if (row >= nrows()) { return; }\n"
                  "  put2(row, tok, val(row, 0u, 0u));\n"
                  "}\n");
        return;
    }
    if (t->matvec_thread_rows) {
        wgllm_strbuf_printf(b, "@compute @workgroup_size(ROWS)\n"
                  "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
                  "  let row = gid.x;\n"
                  "  let tok = gid.y;\n"
                  "  if (row >= nrows()) { return; }\n"
                  "  put2(row, tok, val(row, p.b + tok * p.k, 0u));\n"
                  "}\n");
        return;
    }
    const char *pcall = pro ? "  prologue(tid, WGM, tok);\n" : "";
    if (t->matvec_subgroups) {
        wgllm_strbuf_printf(b, "var<workgroup> red: array<vec2<f32>, WGM>;\n"
                  "@compute @workgroup_size(WGM)\n"
                  "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,\n"
                  "        @builtin(subgroup_invocation_id) sli: u32, @builtin(subgroup_size) sgs: u32) {\n"
                  "  let tid = lid.x;\n"
                  "  let tok = wid.y;\n"
                  "%s"
                  "  let xb = %s;\n"
                  "  let nsg = (WGM + sgs - 1u) / sgs;\n"
                  "  for (var rr = 0u; rr < ROWS; rr++) {\n"
                  "    let row = wid.x * ROWS + rr;\n"
                  "    var acc = vec2<f32>(0.0, 0.0);\n"
                  "    if (row < nrows()) { acc = val(row, xb, tid); }\n"
                  "    let s = subgroupAdd(acc);\n"
                  "    if (sli == 0u) { red[tid / sgs] = s; }\n"
                  "    workgroupBarrier();\n"
                  "    if (tid == 0u && row < nrows()) {\n"
                  "      var tot = vec2<f32>(0.0, 0.0);\n"
                  "      for (var i = 0u; i < nsg; i++) { tot += red[i]; }\n"
                  "      put2(row, tok, tot);\n"
                  "    }\n"
                  "    workgroupBarrier();\n"
                  "  }\n"
                  "}\n", pcall, xb);
        return;
    }
    wgllm_strbuf_printf(b, "var<workgroup> red: array<vec2<f32>, WGM>;\n"
              "@compute @workgroup_size(WGM)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
              "  let tid = lid.x;\n"
              "  let tok = wid.y;\n"
              "%s"
              "  let xb = %s;\n"
              "  for (var rr = 0u; rr < ROWS; rr++) {\n"
              "    let row = wid.x * ROWS + rr;\n"
              "    var acc = vec2<f32>(0.0, 0.0);\n"
              "    if (row < nrows()) { acc = val(row, xb, tid); }\n"
              "    red[tid] = acc;\n"
              "    workgroupBarrier();\n"
              "    for (var s = WGM / 2u; s > 0u; s >>= 1u) {\n"
              "      if (tid < s) { red[tid] += red[tid + s]; }\n"
              "      workgroupBarrier();\n"
              "    }\n"
              "    if (tid == 0u && row < nrows()) { put2(row, tok, red[0]); }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "}\n", pcall, xb);
}

/* ---- the prologue: the mat-vec's input rounded in workgroup memory --------
 * A rounding block (32 or 256 elements) spans the outputs of many producer
 * workgroups, so the rounding cannot ride on the producer's store; instead
 * each consumer workgroup rounds the token's whole input row itself, with
 * ROUND_ACT's own round32 (and RMS_NORM_ROUND's sum of squares before it),
 * into workgroup memory, then runs its rows against it. The row is kept as
 * the f32 values ROUND_ACT stores where 4K bytes fit (key.pro_f32: read as
 * they are), else packed to fit WebGPU's 16 KiB guarantee: Q8 types as int8
 * quants, 4 to a word, and one f32 scale per block (f32(q) * d is the very
 * value ROUND_ACT stores), F16 and BF16 as 16-bit halves (exact: the
 * rounded value is a half). The work repeats per workgroup, rows_matvec
 * rows each. */

/* Elements per scale of a packed Q8 row (0: halves). */
static uint32_t pro_block(uint32_t vt) {
    return vt == WGLLM_TYPE_Q8_K ? 256u : vt == WGLLM_TYPE_Q8_0 || vt == WGLLM_TYPE_Q8_1 ? 32u : 0u;
}

static bool pro_ok(const struct wgllm_kernel_key *key, uint32_t *vt) {
    *vt = wgllm_type_traits(key->type)->vec_dot_type;
    return key->pro && key->kx && *vt != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, *vt) &&
           key->kx % (pro_block(*vt) ? pro_block(*vt) : 2u) == 0;
}

uint32_t wgllm_wgsl_pro_bytes(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    uint32_t vt;
    if (!pro_ok(key, &vt)) return 0;
    const uint32_t qb = pro_block(vt), k = key->kx;
    uint64_t bytes = key->pro_f32 ? 4ull * k : qb ? 4ull * ((k + 3) / 4) + 4ull * (k / qb) : 4ull * ((k + 1) / 2);
    if (!t->matvec_thread_rows) bytes += 8ull * t->wg_matvec; /* red */
    if (key->pro == WGLLM_PRO_NORM) bytes += 8ull * t->wg_row;
    return bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
}

int wgllm_wgsl_fused_pro_keys(struct wgllm_kernel_key *out, int n, int cap) {
    static const struct wgllm_kernel_key pros[] = {{.kernel = WGLLM_KERNEL_MATVEC, .pro = WGLLM_PRO_ROUND},
                                                   {.kernel = WGLLM_KERNEL_MATVEC_QKV, .pro = WGLLM_PRO_NORM},
                                                   {.kernel = WGLLM_KERNEL_MATVEC_SWIGLU, .pro = WGLLM_PRO_NORM},
                                                   {.kernel = WGLLM_KERNEL_MATVEC_GEGLU, .pro = WGLLM_PRO_NORM},
                                                   {.kernel = WGLLM_KERNEL_MATVEC, .pro = WGLLM_PRO_ROUND, .pro_f32 = true},
                                                   {.kernel = WGLLM_KERNEL_MATVEC_QKV, .pro = WGLLM_PRO_NORM, .pro_f32 = true}};
    for (size_t i = 0; i < sizeof pros / sizeof *pros; i++)
        for (uint32_t t = 0; t < WGLLM_TYPE_COUNT; t++) {
            struct wgllm_kernel_key k = pros[i];
            k.type = k.type2 = k.type3 = t, k.kx = 4096;
            if (!wgllm_wgsl_supports(k.kernel, t) || !pro_ok(&k, &(uint32_t){0})) continue;
            if (n < cap) out[n] = k;
            n++;
        }
    return n;
}

/* text with ident[...] turned into fn(...) and p.n into KX (round32's
 * source array and its element bound). */
static void emit_as_calls(struct wgllm_strbuf *b, const char *text, const char *ident, const char *fn) {
    const size_t il = strlen(ident);
    int depth = 0;
    for (const char *c = text; *c;) {
        if (!strncmp(c, ident, il) && c[il] == '[' && (c == text || !ident_char(c[-1]))) {
            wgllm_strbuf_printf(b, "%s(", fn);
            depth = 1;
            c += il + 1;
        } else if (depth && (*c == '[' || *c == ']')) {
            depth += *c == '[' ? 1 : -1;
            wgllm_strbuf_printf(b, "%c", depth || *c == '[' ? *c : ')');
            c++;
        } else if (!strncmp(c, "p.n", 3) && !ident_char(c[3])) {
            wgllm_strbuf_printf(b, "KX");
            c += 3;
        } else {
            wgllm_strbuf_printf(b, "%c", *c++);
        }
    }
}

/* The prologue's declarations and prologue(tid, nt, tok): x is X (the
 * unrounded row at p.b + tok * p.k), the norm's weights B[p.h ..]. */
static void emit_prologue(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    uint32_t vt;
    if (!pro_ok(key, &vt)) {
        b->oom = true; /* no such kernel: generate fails */
        return;
    }
    const uint32_t qb = pro_block(vt), k = key->kx;
    const bool norm = key->pro == WGLLM_PRO_NORM;
    wgllm_strbuf_printf(b, "const KX: u32 = %uu;\n%s", k, wgllm_wgsl_f16_helpers());
    char *r = wgllm_wgsl_round32(vt);
    if (!r) {
        b->oom = true;
        return;
    }
    emit_as_calls(b, r, "RX", "xsrc");
    free(r);
    if (key->pro_f32)
        wgllm_strbuf_printf(b, "var<workgroup> XF: array<f32, %u>;\n"
                  "fn rstore_q(i: u32, q: i32, d: f32) { XF[i] = f32(q) * d; }\n"
                  "fn rstore_f(i: u32, v: f32) { XF[i] = v; }\n"
                  "fn xin(i: u32) -> f32 { return XF[i]; }\n", k);
    else if (qb)
        wgllm_strbuf_printf(b, "const QB: u32 = %uu;\n"
                  "var<workgroup> XQ: array<u32, %u>;\n"
                  "var<workgroup> XS: array<f32, %u>;\n"
                  /* one thread owns a block's 32 elements (8 words), and the block's first writes the scale */
                  "fn rstore_q(i: u32, q: i32, d: f32) {\n"
                  "  let w = i >> 2u;\n"
                  "  let sh = 8u * (i & 3u);\n"
                  "  XQ[w] = (XQ[w] & ~(0xffu << sh)) | ((bitcast<u32>(q) & 0xffu) << sh);\n"
                  "  if (i %% QB == 0u) { XS[i / QB] = d; }\n"
                  "}\n"
                  "fn xin(i: u32) -> f32 { return f32(bitcast<i32>(XQ[i >> 2u] << (24u - 8u * (i & 3u))) >> 24u) * XS[i / QB]; }\n",
                  qb, (k + 3) / 4, k / qb);
    else if (vt == WGLLM_TYPE_BF16) /* the rounded value's low half is zero */
        wgllm_strbuf_printf(b, "var<workgroup> XH: array<u32, %u>;\n"
                  "fn rstore_f(i: u32, v: f32) {\n"
                  "  let sh = 16u * (i & 1u);\n"
                  "  XH[i >> 1u] = (XH[i >> 1u] & ~(0xffffu << sh)) | ((bitcast<u32>(v) >> 16u) << sh);\n"
                  "}\n"
                  "fn xin(i: u32) -> f32 { return bitcast<f32>(((XH[i >> 1u] >> (16u * (i & 1u))) & 0xffffu) << 16u); }\n",
                  (k + 1) / 2);
    else /* F16: the half's bits by integer arithmetic both ways (pack2x16float may flush or fold) */
        wgllm_strbuf_printf(b, "var<workgroup> XH: array<u32, %u>;\n"
                  "fn f16bits(v: f32) -> u32 {\n"
                  "  let u = bitcast<u32>(v);\n"
                  "  let s = (u >> 16u) & 0x8000u;\n"
                  "  if ((u & 0x7f800000u) == 0x7f800000u) { return s | 0x7c00u | select(0u, 0x200u, (u & 0x7fffffu) != 0u); }\n"
                  "  let a = abs(v);\n"
                  "  if (a < 6.103515625e-05) { return s | u32(a * 16777216.0); }\n"
                  "  return s | ((((u >> 23u) & 0xffu) - 112u) << 10u) | ((u >> 13u) & 0x3ffu);\n"
                  "}\n"
                  "fn f16val(h: u32) -> f32 {\n"
                  "  let e = (h >> 10u) & 31u;\n"
                  "  let m = h & 0x3ffu;\n"
                  "  var a = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));\n"
                  "  if (e == 0u) { a = f32(m) * 5.9604644775390625e-08; }\n"
                  "  if (e == 31u) { a = bitcast<f32>(0x7f800000u | (m << 13u)); }\n"
                  "  return select(a, -a, (h & 0x8000u) != 0u);\n"
                  "}\n"
                  "fn rstore_f(i: u32, v: f32) {\n"
                  "  let sh = 16u * (i & 1u);\n"
                  "  XH[i >> 1u] = (XH[i >> 1u] & ~(0xffffu << sh)) | (f16bits(v) << sh);\n"
                  "}\n"
                  "fn xin(i: u32) -> f32 { return f16val((XH[i >> 1u] >> (16u * (i & 1u))) & 0xffffu); }\n",
                  (k + 1) / 2);
    if (!norm) {
        wgllm_strbuf_printf(b, "fn xsrc(i: u32) -> f32 { return X[i]; }\n"
                  "fn prologue(tid: u32, nt: u32, tok: u32) {\n"
                  "  let xo = p.b + tok * p.k;\n"
                  "  for (var i0 = tid * 32u; i0 < KX; i0 += nt * 32u) { round32(i0, xo, 0u); }\n"
                  "  workgroupBarrier();\n"
                  "}\n");
        return;
    }
    /* RMS_NORM_ROUND's sums: WGR partials, each over every WGR-th element
     * (a thread of this workgroup takes the partials tid, tid + nt, ..),
     * then its tree; so the scale and every normalized element are its bits */
    wgllm_strbuf_printf(b, "const WGR: u32 = %uu;\n"
              "var<workgroup> nh: array<vec2<f32>, WGR>;\n"
              "var<private> nscale: f32;\n"
              "var<private> nxo: u32;\n"
              "fn xsrc(i: u32) -> f32 { return (X[i] * nscale) * B[p.h + i - nxo]; }\n"
              "fn prologue(tid: u32, nt: u32, tok: u32) {\n"
              "  let xo = p.b + tok * p.k;\n"
              "  for (var v = tid; v < WGR; v += nt) {\n"
              "    var hi = 0.0;\n"
              "    var lo = 0.0;\n"
              "    for (var i = v; i < KX; i += WGR) {\n"
              "      let x = X[xo + i];\n"
              "      let t = two_sum(hi, x * x);\n"
              "      hi = t.x;\n"
              "      lo += t.y;\n"
              "    }\n"
              "    nh[v] = vec2<f32>(hi, lo);\n"
              "  }\n"
              "  workgroupBarrier();\n"
              "  for (var s = WGR / 2u; s > 0u; s >>= 1u) {\n"
              "    for (var v = tid; v < s; v += nt) {\n"
              "      let t = two_sum(nh[v].x, nh[v + s].x);\n"
              "      nh[v] = vec2<f32>(t.x, nh[v].y + nh[v + s].y + t.y);\n"
              "    }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "  let mean = div_exact(nh[0].x, nh[0].y, f32(KX));\n"
              "  nscale = 1.0 / sqrt(mean + p.f3);\n"
              "  nxo = xo;\n"
              "  for (var i0 = tid * 32u; i0 < KX; i0 += nt * 32u) { round32(i0, xo, 0u); }\n"
              "  workgroupBarrier();\n"
              "}\n", t->wg_row);
}

static void emit_matvec_consts(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGM: u32 = %uu;\nconst ROWS: u32 = %uu;\n", t->matvec_thread_rows ? 1u : t->wg_matvec,
                        t->rows_matvec);
}

static void gen_qkv(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    emit_matvec_consts(b, t);
    const uint32_t types[3] = {key->type, key->type2, key->type3};
    for (int i = 0; i < 3; i++) emit_part_format(b, types[i], i, 1 + i, key->pro);
    wgllm_strbuf_printf(b, "@group(0) @binding(4) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(5) var<storage, read_write> Y0: array<f32>;\n"
              "@group(0) @binding(6) var<storage, read_write> Y1: array<f32>;\n"
              "@group(0) @binding(7) var<storage, read_write> Y2: array<f32>;\n");
    /* the vectors: biases and the norm's weights */
    if (key->bias || key->pro == WGLLM_PRO_NORM)
        wgllm_strbuf_printf(b, "@group(0) @binding(8) var<storage, read> B: array<f32>;\n");
    if (key->pro) emit_prologue(b, key, t);
    const char *bq = key->bias ? " + B[p.e + r]" : "", *bk = key->bias ? " + B[p.g + r]" : "",
               *bv = key->bias ? " + B[p.i + r]" : "";
    wgllm_strbuf_printf(b, "fn nrows() -> u32 { return p.n + p.m + p.d; }\n"
              "fn val(row: u32, xb: u32, tid: u32) -> vec2<f32> {\n"
              "  if (row < p.n) { return vec2<f32>(rdot_0(row_base_0(row), xb, tid), 0.0); }\n"
              "  if (row < p.n + p.m) { return vec2<f32>(rdot_1(row_base_1(row - p.n), xb, tid), 0.0); }\n"
              "  return vec2<f32>(rdot_2(row_base_2(row - p.n - p.m), xb, tid), 0.0);\n"
              "}\n"
              /* the bias after the product, as the separate ADD_ROWS adds it */
              "fn put2(row: u32, tok: u32, v: vec2<f32>) {\n"
              "  if (row < p.n) { let r = row; Y0[tok * p.n + r] = v.x%s; return; }\n"
              "  if (row < p.n + p.m) { let r = row - p.n; Y1[tok * p.m + r] = v.x%s; return; }\n"
              "  let r = row - p.n - p.m;\n"
              "  Y2[tok * p.d + r] = v.x%s;\n"
              "}\n", bq, bk, bv);
    emit_matvec_main(b, t, key->pro);
}

static void gen_glu(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    const bool gelu = key->kernel == WGLLM_KERNEL_MATVEC_GEGLU;
    emit_matvec_consts(b, t);
    emit_part_format(b, key->type, 0, 1, key->pro);
    emit_part_format(b, key->type2, 1, 2, key->pro);
    wgllm_strbuf_printf(b, "@group(0) @binding(3) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(4) var<storage, read_write> Y: array<f32>;\n");
    if (gelu) /* GEGLU's table and its f16 rounding (the prologue brings the latter) */
        wgllm_strbuf_printf(b, "@group(0) @binding(5) var<storage, read> T: array<u32>;\n%s%s",
                            key->pro ? "" : wgllm_wgsl_f16_helpers(), wgllm_wgsl_gelu_helper());
    if (key->pro == WGLLM_PRO_NORM)
        wgllm_strbuf_printf(b, "@group(0) @binding(%d) var<storage, read> B: array<f32>;\n", gelu ? 6 : 5);
    if (key->pro) emit_prologue(b, key, t);
    wgllm_strbuf_printf(b, "fn nrows() -> u32 { return p.n; }\n"
              "fn val(row: u32, xb: u32, tid: u32) -> vec2<f32> {\n"
              "  return vec2<f32>(rdot_0(row_base_0(row), xb, tid), rdot_1(row_base_1(row), xb, tid));\n"
              "}\n"
              "fn put2(row: u32, tok: u32, v: vec2<f32>) {\n"
              "  let g = v.x;\n"
              "  Y[p.c + tok * p.n + row] = %s * v.y;\n"
              "}\n", gelu ? "gelu(g)" : "(g / (1.0 + exp(-g)))");
    emit_matvec_main(b, t, key->pro);
}

/* MATVEC with a prologue: MATVEC's bindings (and B after them for the
 * norm), its epilogue, its shapes and order (a vec2 whose y stays 0). */
static void gen_matvec_pro(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    emit_matvec_consts(b, t);
    emit_part_format(b, key->type, 0, 1, true);
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n%s%s",
              wgllm_wgsl_tanh_helper(), wgllm_wgsl_epi_helper());
    if (key->pro == WGLLM_PRO_NORM) wgllm_strbuf_printf(b, "@group(0) @binding(4) var<storage, read> B: array<f32>;\n");
    emit_prologue(b, key, t);
    wgllm_strbuf_printf(b, "fn nrows() -> u32 { return p.n; }\n"
              "fn val(row: u32, xb: u32, tid: u32) -> vec2<f32> { return vec2<f32>(rdot_0(row_base_0(row), xb, tid), 0.0); }\n"
              "fn put2(row: u32, tok: u32, v: vec2<f32>) { put(p.c + tok * p.n + row, v.x); }\n");
    emit_matvec_main(b, t, true);
}

/* ROPE's rotation (kernels.c's gen_rope: the same two products of each
 * pair), read for one element of K so that its word can go to the cache
 * without K being rotated in place. */
static void gen_rope_store(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\nconst NEOX: bool = %s;\n", t->wg_elem, key->neox ? "true" : "false");
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read_write> Q: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> K: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read> V: array<f32>;\n"
              "@group(0) @binding(4) var<storage, read> CS: array<f32>;\n"
              "@group(0) @binding(5) var<storage, read> ST: array<u32>;\n"
              "@group(0) @binding(6) var<storage, read_write> KC: array<u32>;\n"
              "@group(0) @binding(7) var<storage, read_write> VC: array<u32>;\n"
              "fn krot(tb: u32, e: u32, cb: u32) -> f32 {\n"
              "  let i = e %% p.k;\n"
              "  let base = tb + (e / p.k) * p.k;\n"
              "  if (p.h == 0u || i >= p.m) { return K[base + i]; }\n"
              "  let hf = p.m / 2u;\n"
              "  var j = i / 2u;\n"
              "  var first = (i & 1u) == 0u;\n"
              "  var ia = base + 2u * j;\n"
              "  var ib = ia + 1u;\n"
              "  if (NEOX) {\n"
              "    first = i < hf;\n"
              "    j = select(i - hf, i, first);\n"
              "    ia = base + j;\n"
              "    ib = ia + hf;\n"
              "  }\n"
              "  let c = CS[cb + 2u * j];\n"
              "  let s = CS[cb + 2u * j + 1u];\n"
              "  let x0 = K[ia];\n"
              "  let x1 = K[ib];\n"
              "  if (first) { return x0 * c - x1 * s; }\n"
              "  return x0 * s + x1 * c;\n"
              "}\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let u = gid.x;\n"
              "  let tok = gid.y;\n"
              "  let hf = p.m / 2u;\n"
              "  let nq = select(0u, p.n * hf, p.h != 0u);\n"
              "  let nk = p.b / 2u;\n"
              "  let nv = p.d / 2u;\n"
              "  let cb = p.c + tok * p.m;\n"
              "  if (u < nq) {\n"
              "    let i = u %% hf;\n"
              "    let c = CS[cb + 2u * i];\n"
              "    let s = CS[cb + 2u * i + 1u];\n"
              "    let base = tok * p.a + (u / hf) * p.k;\n"
              "    var ia = base + 2u * i;\n"
              "    var ib = ia + 1u;\n"
              "    if (NEOX) { ia = base + i; ib = base + i + hf; }\n"
              "    let x0 = Q[ia];\n"
              "    let x1 = Q[ib];\n"
              "    Q[ia] = x0 * c - x1 * s;\n"
              "    Q[ib] = x0 * s + x1 * c;\n"
              "    return;\n"
              "  }\n"
              "  if (u >= nq + nk + nv) { return; }\n"
              "  let row = ST[p.e + tok];\n"
              "  if (u < nq + nk) {\n"
              "    let w = u - nq;\n"
              "    KC[row * nk + w] = pack2x16float(vec2<f32>(krot(tok * p.b, 2u * w, cb), krot(tok * p.b, 2u * w + 1u, cb)));\n"
              "    return;\n"
              "  }\n"
              "  let w = u - nq - nk;\n"
              "  let x = tok * p.d + 2u * w;\n"
              "  VC[row * nv + w] = pack2x16float(vec2<f32>(V[x], V[x + 1u]));\n"
              "}\n");
}

char *wgllm_wgsl_fused_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune) {
    struct wgllm_strbuf b = {0};
    switch (key->kernel) {
    case WGLLM_KERNEL_MATVEC: gen_matvec_pro(&b, key, tune); break;
    case WGLLM_KERNEL_MATVEC_QKV: gen_qkv(&b, key, tune); break;
    case WGLLM_KERNEL_MATVEC_SWIGLU:
    case WGLLM_KERNEL_MATVEC_GEGLU: gen_glu(&b, key, tune); break;
    case WGLLM_KERNEL_ROPE_STORE: gen_rope_store(&b, key, tune); break;
    default: return NULL;
    }
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

const char *wgllm_wgsl_fused_kernel_name(enum wgllm_kernel k) {
    switch (k) {
    case WGLLM_KERNEL_MATVEC_QKV: return "matvec_qkv";
    case WGLLM_KERNEL_MATVEC_SWIGLU: return "matvec_swiglu";
    case WGLLM_KERNEL_MATVEC_GEGLU: return "matvec_geglu";
    case WGLLM_KERNEL_ROPE_STORE: return "rope_store";
    default: return "unknown";
    }
}
