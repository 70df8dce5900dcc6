/*
 * kernels_moe.c - WGSL of the mixture-of-experts kernels (kernels.h):
 * MOE_ROUTE (softmax and top-k of the router's logits into the routing
 * buffer), MATVEC_ID (the chosen experts' mat-vecs, reading the expert id
 * from that buffer), MOE_SUM (the weighted sum of the chosen experts'
 * outputs, the shared expert and its gate, into the residual stream), and
 * gpt-oss's MOE_BIAS / MOE_GLU_OAI (each choice's expert's biases, read by
 * the id from that buffer too, and SwiGLU-OAI). The
 * routing never goes to the host: a pass stays one submit.
 *
 * MATVEC_ID is MATVEC with the weight rows offset by the expert: it takes
 * the weight format from kernels.c (wgllm_wgsl_format: the one dequant
 * routine per format that MATVEC uses, so a format added there is here at
 * once) and MATVEC's three shapes of workgroup (a row per thread, a
 * workgroup reduction, subgroups), chosen by the same tune.
 *
 * Prefill groups the batch by expert instead, as llama.cpp's MUL_MAT_ID:
 * MOE_BUCKET lists each expert's choices (token order) in the routing
 * buffer, and MATMUL_ID is kernels.c's MATMUL (wgllm_wgsl_mm: its tiles,
 * its per-format dequantisation, its per-element sums) with a tile map that
 * reads that list, so each expert's weight tile is dequantised once per
 * tile of its tokens rather than once per token.
 */
#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"
#include "quant/quant.h"

#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each view's fields where the WGSL reads them (as kernels.c checks its own). */
#define KP_AT(view, field, letter)                                                              \
    _Static_assert(offsetof(struct wgllm_kp_##view, field) == offsetof(struct wgllm_kp_raw, letter), \
                   "wgllm_kp_" #view "." #field " must sit at p." #letter)
_Static_assert(sizeof(struct wgllm_kp_matvec_id) == 64, "wgllm_kp_matvec_id is the whole block");
KP_AT(matvec_id, rows, n); KP_AT(matvec_id, x_div, m); KP_AT(matvec_id, k, k); KP_AT(matvec_id, w_off, a);
KP_AT(matvec_id, x_off, b); KP_AT(matvec_id, y_off, c); KP_AT(matvec_id, ids_at, d); KP_AT(matvec_id, e0, e);
KP_AT(matvec_id, n_exp, g); KP_AT(matvec_id, used, h); KP_AT(matvec_id, groups, i);
_Static_assert(sizeof(struct wgllm_kp_moe_bucket) == 64, "wgllm_kp_moe_bucket is the whole block");
KP_AT(moe_bucket, n_expert, n); KP_AT(moe_bucket, used, m); KP_AT(moe_bucket, ids_at, a); KP_AT(moe_bucket, off_at, b);
KP_AT(moe_bucket, list_at, c);
_Static_assert(sizeof(struct wgllm_kp_matmul_id) == 64, "wgllm_kp_matmul_id is the whole block");
KP_AT(matmul_id, rows, n); KP_AT(matmul_id, x_div, m); KP_AT(matmul_id, k, k); KP_AT(matmul_id, w_off, a);
KP_AT(matmul_id, x_off, b); KP_AT(matmul_id, y_off, c); KP_AT(matmul_id, list_at, d); KP_AT(matmul_id, e0, e);
KP_AT(matmul_id, off_at, g); KP_AT(matmul_id, tiles, i); KP_AT(matmul_id, _j, j);
_Static_assert(sizeof(struct wgllm_kp_moe_route) == 64, "wgllm_kp_moe_route is the whole block");
KP_AT(moe_route, rows, n); KP_AT(moe_route, n_expert, m); KP_AT(moe_route, used, k); KP_AT(moe_route, l_off, a);
KP_AT(moe_route, ids_at, b); KP_AT(moe_route, w_at, c); KP_AT(moe_route, norm, d); KP_AT(moe_route, softmax_w, e);
_Static_assert(sizeof(struct wgllm_kp_moe_bias) == 64, "wgllm_kp_moe_bias is the whole block");
KP_AT(moe_bias, count, n); KP_AT(moe_bias, width, m); KP_AT(moe_bias, b_off, a); KP_AT(moe_bias, ids_at, b);
KP_AT(moe_bias, u_off, c); KP_AT(moe_bias, alpha, f0); KP_AT(moe_bias, limit, f1);
_Static_assert(sizeof(struct wgllm_kp_moe_sum) == 64, "wgllm_kp_moe_sum is the whole block");
KP_AT(moe_sum, width, n); KP_AT(moe_sum, used, m); KP_AT(moe_sum, x_off, a); KP_AT(moe_sum, w_at, b);
KP_AT(moe_sum, shared, c); KP_AT(moe_sum, g_off, d); KP_AT(moe_sum, scaled, e); KP_AT(moe_sum, scale, f0);
#undef KP_AT

/* The choice a workgroup computes (q), its expert's first row inside this
 * piece (eb, valid only when ok) and the x row it reads: uniform per
 * workgroup (every value comes from wid and the routing buffer at a uniform
 * index), but computed as a flag rather than an early return so that the
 * reduction's barriers stay in uniform control flow for the compiler. */
static const char *choice_wgsl =
    "  let j = wid.x / p.i;\n"
    "  let q = wid.y * p.h + j;\n"
    "  let id = S[p.d + q];\n"
    "  let ok = id >= p.e && id < p.e + p.g;\n"
    "  let eb = (id - p.e) * p.n;\n"
    "  let xb = p.b + (q / p.m) * p.k;\n"
    "  let yb = p.c + q * p.n;\n";

static void gen_matvec_id(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    char *fmt = wgllm_wgsl_format(key->type, true);
    if (!fmt) {
        b->oom = true;
        return;
    }
    const bool rows = t->matvec_thread_rows;
    wgllm_strbuf_printf(b, "const WGM: u32 = %uu;\nconst ROWS: u32 = %uu;\n", rows ? 1u : t->wg_matvec, t->rows_matvec);
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "@group(0) @binding(4) var<storage, read> S: array<u32>;\n%s", fmt);
    free(fmt);
    if (rows) { /* a row per thread: rdot's stride WGM is 1 */
        wgllm_strbuf_printf(b, "@compute @workgroup_size(ROWS)\n"
                  "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
                  "%s"
                  "  let row = (wid.x %% p.i) * ROWS + lid.x;\n"
                  "  if (!ok || row >= p.n) { return; }\n"
                  "  Y[yb + row] = rdot(row_base(eb + row), xb, 0u);\n"
                  "}\n", choice_wgsl);
        return;
    }
    if (t->matvec_subgroups) {
        wgllm_strbuf_printf(b, "var<workgroup> red: array<f32, WGM>;\n"
                  "@compute @workgroup_size(WGM)\n"
                  "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,\n"
                  "        @builtin(subgroup_invocation_id) sli: u32, @builtin(subgroup_size) sgs: u32) {\n"
                  "  let tid = lid.x;\n"
                  "%s"
                  "  let nsg = (WGM + sgs - 1u) / sgs;\n"
                  "  for (var rr = 0u; rr < ROWS; rr++) {\n"
                  "    let row = (wid.x %% p.i) * ROWS + rr;\n"
                  "    var acc = 0.0;\n"
                  "    if (ok && row < p.n) { acc = rdot(row_base(eb + row), xb, tid); }\n"
                  "    let s = subgroupAdd(acc);\n"
                  "    if (sli == 0u) { red[tid / sgs] = s; }\n"
                  "    workgroupBarrier();\n"
                  "    if (tid == 0u && ok && row < p.n) {\n"
                  "      var tot = 0.0;\n"
                  "      for (var i = 0u; i < nsg; i++) { tot += red[i]; }\n"
                  "      Y[yb + row] = tot;\n"
                  "    }\n"
                  "    workgroupBarrier();\n"
                  "  }\n"
                  "}\n", choice_wgsl);
        return;
    }
    wgllm_strbuf_printf(b, "var<workgroup> red: array<f32, WGM>;\n"
              "@compute @workgroup_size(WGM)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
              "  let tid = lid.x;\n"
              "%s"
              "  for (var rr = 0u; rr < ROWS; rr++) {\n"
              "    let row = (wid.x %% p.i) * ROWS + rr;\n"
              "    var acc = 0.0;\n"
              "    if (ok && row < p.n) { acc = rdot(row_base(eb + row), xb, tid); }\n"
              "    red[tid] = acc;\n"
              "    workgroupBarrier();\n"
              "    for (var s = WGM / 2u; s > 0u; s >>= 1u) {\n"
              "      if (tid < s) { red[tid] += red[tid + s]; }\n"
              "      workgroupBarrier();\n"
              "    }\n"
              "    if (tid == 0u && ok && row < p.n) { Y[yb + row] = red[0]; }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "}\n", choice_wgsl);
}

/* As the CPU's moe_ffn (backend/cpu/forward.c) and wgllm_op_softmax: the
 * max, exp(l - max) summed without loss (hi + lo, for the CPU's sum in
 * double), times the reciprocal of the sum; then k passes each taking the
 * most probable expert not yet taken (strictly greater: ties go to the
 * lower index), the chosen probabilities summed in order and, with d = 1,
 * divided by max(sum, 2^-14). One thread per token: a router row is a few
 * hundred logits at most. */
static void gen_moe_route(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n%s", t->wg_elem, wgllm_wgsl_f16_helpers());
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> L: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read_write> S: array<u32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let t = gid.x;\n"
              "  if (t >= p.n) { return; }\n"
              "  let lb = p.a + t * p.m;\n"
              "  var pr: array<f32, 256>;\n"
              "  var mx = -3.402823466e+38;\n"
              "  for (var e = 0u; e < p.m; e++) { mx = select(mx, L[lb + e], L[lb + e] > mx); }\n"
              "  var hi = 0.0;\n"
              "  var lo = 0.0;\n"
              "  for (var e = 0u; e < p.m; e++) {\n"
              "    let v = exp(L[lb + e] - mx);\n"
              "    pr[e] = v;\n"
              "    let s2 = two_sum(hi, v);\n"
              "    hi = s2.x;\n"
              "    lo += s2.y;\n"
              "  }\n"
              "  let inv = 1.0 / (hi + lo);\n"
              "  for (var e = 0u; e < p.m; e++) { pr[e] = select(pr[e] * inv, L[lb + e], p.e == 1u); }\n"
              "  var sel: array<u32, 64>;\n"
              "  var w: array<f32, 64>;\n"
              "  var sum = 0.0;\n"
              "  for (var i = 0u; i < p.k; i++) {\n"
              "    var best = 0xffffffffu;\n"
              "    for (var e = 0u; e < p.m; e++) {\n"
              "      var taken = false;\n"
              "      for (var j = 0u; j < i; j++) { taken = taken || sel[j] == e; }\n"
              "      if (!taken && (best == 0xffffffffu || pr[e] > pr[best])) { best = e; }\n"
              "    }\n"
              "    sel[i] = best;\n"
              "    w[i] = pr[best];\n"
              "    sum += w[i];\n"
              "  }\n"
              /* gpt-oss: the softmax of the chosen logits (the CPU's wgllm_op_softmax over w) */
              "  if (p.e == 1u) {\n"
              "    var wm = w[0];\n"
              "    for (var i = 1u; i < p.k; i++) { wm = max(wm, w[i]); }\n"
              "    var wh = 0.0;\n"
              "    var wl = 0.0;\n"
              "    for (var i = 0u; i < p.k; i++) {\n"
              "      w[i] = exp(w[i] - wm);\n"
              "      let s3 = two_sum(wh, w[i]);\n"
              "      wh = s3.x;\n"
              "      wl += s3.y;\n"
              "    }\n"
              "    let winv = 1.0 / (wh + wl);\n"
              "    for (var i = 0u; i < p.k; i++) { w[i] = w[i] * winv; }\n"
              "  }\n"
              "  if (p.d == 1u) {\n"
              "    sum = max(sum, 6.103515625e-05);\n"
              "    for (var i = 0u; i < p.k; i++) { w[i] = w[i] / sum; }\n"
              "  }\n"
              "  for (var i = 0u; i < p.k; i++) {\n"
              "    S[p.b + t * p.k + i] = sel[i];\n"
              "    S[p.c + t * p.k + i] = bitcast<u32>(w[i]);\n"
              "  }\n"
              "}\n");
}

/* As the CPU's final loop of moe_ffn: w_0 r_0, + w_j r_j in the order
 * chosen, + the shared expert (times its gate silu(v) / v, as llama.cpp
 * computes the sigmoid), times the residual scale, added to the stream. */
static void gen_moe_sum(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n", t->wg_elem);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read_write> X: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> R: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read> S: array<u32>;\n"
              "@group(0) @binding(4) var<storage, read> SH: array<f32>;\n"
              "@group(0) @binding(5) var<storage, read> G: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let i = gid.x;\n"
              "  let t = gid.y;\n"
              "  if (i >= p.n) { return; }\n"
              "  let q0 = t * p.m;\n"
              "  var s = bitcast<f32>(S[p.b + q0]) * R[q0 * p.n + i];\n"
              "  for (var j = 1u; j < p.m; j++) { s += bitcast<f32>(S[p.b + q0 + j]) * R[(q0 + j) * p.n + i]; }\n"
              "  if (p.c == 1u) { s += SH[t * p.n + i]; }\n"
              "  if (p.c == 2u) {\n"
              "    let v = G[p.d + t];\n"
              "    s += SH[t * p.n + i] * ((v / (1.0 + exp(-v))) / v);\n"
              "  }\n"
              "  if (p.e == 1u) { s = s * p.f0; }\n"
              "  X[p.a + t * p.n + i] += s;\n"
              "}\n");
}

/* The expert id of element i's choice and the element's index in the
 * expert's bias (gpt-oss's ggml_add_id), shared by the two biased kernels. */
static const char *bias_wgsl =
    "  let i = gid.x;\n"
    "  if (i >= p.n) { return; }\n"
    "  let id = S[p.b + i / p.m];\n"
    "  let bi = id * p.m + i % p.m;\n";

/* As the CPU's expert mat-vec with a bias (the bias added to each f32 dot). */
static void gen_moe_bias(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n", t->wg_elem);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read_write> Y: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> S: array<u32>;\n"
              "@group(0) @binding(3) var<storage, read> V: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "%s"
              "  Y[i] = Y[i] + V[p.a + bi];\n"
              "}\n", bias_wgsl);
}

/* The gate and up biases, then wgllm_op_swiglu_oai in its order of operations. */
static void gen_moe_glu_oai(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n", t->wg_elem);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> G: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> U: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "@group(0) @binding(4) var<storage, read> S: array<u32>;\n"
              "@group(0) @binding(5) var<storage, read> V: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "%s"
              "  let x = min(G[i] + V[p.a + bi], p.f1);\n"
              "  let v = clamp(U[i] + V[p.c + bi], -p.f1, p.f1);\n"
              "  Y[i] = (x / (1.0 + exp(p.f0 * (-x)))) * (v + 1.0);\n"
              "}\n", bias_wgsl);
}

/* One workgroup, a thread per expert: count its choices, the offsets as
 * the sum of the counts below (at most 256 of them), then its list in
 * token order. Each thread reads every id twice: a few thousand words for
 * a prefill chunk, once per layer (the list serves gate, up and down).
 * The grid's y is the pass's token count (the routing buffer holds n_batch
 * rows; those past the pass are stale), so workgroups past the first leave
 * at once; wid is uniform, so the barrier stays valid. */
static void gen_moe_bucket(struct wgllm_strbuf *b) {
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read_write> S: array<u32>;\n"
              "var<workgroup> cnt: array<u32, 256>;\n"
              "@compute @workgroup_size(256)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
              "        @builtin(local_invocation_index) e: u32) {\n"
              "  if (wid.y != 0u) { return; }\n"
              "  let nq = nwg.y * p.m;\n"
              "  var c = 0u;\n"
              "  if (e < p.n) {\n"
              "    for (var q = 0u; q < nq; q++) { c += select(0u, 1u, S[p.a + q] == e); }\n"
              "  }\n"
              "  cnt[e] = c;\n"
              "  workgroupBarrier();\n"
              "  if (e >= p.n) { return; }\n"
              "  var o = 0u;\n"
              "  for (var i = 0u; i < e; i++) { o += cnt[i]; }\n"
              "  S[p.b + e] = o;\n"
              "  if (e + 1u == p.n) { S[p.b + p.n] = o + c; }\n"
              "  for (var q = 0u; q < nq; q++) {\n"
              "    if (S[p.a + q] == e) {\n"
              "      S[p.c + o] = q;\n"
              "      o++;\n"
              "    }\n"
              "  }\n"
              "}\n");
}

/* MATMUL_ID's tile map (wgllm_wgsl_mm): expert e + x / i of the piece, its
 * choices from the bucketed list; the x row and output slot of a choice are
 * MATVEC_ID's (choice q reads x row q / m and writes rows q * n ..). */
static const char *mm_id_map =
    "@group(0) @binding(4) var<storage, read> S: array<u32>;\n"
    "var<private> eb: u32;\n" /* the expert's first row in this piece */
    "var<private> lb: u32;\n" /* S word of the expert's first choice */
    "fn tile(wid: vec3<u32>) -> vec2<u32> {\n"
    "  let xe = wid.x / p.i;\n"
    "  eb = xe * p.n;\n"
    "  let o = S[p.g + p.e + xe];\n"
    "  lb = p.d + o;\n"
    "  return vec2<u32>((wid.x % p.i) * TN, S[p.g + p.e + xe + 1u] - o);\n"
    "}\n"
    "fn wrow(r: u32) -> u32 { return row_base(eb + r); }\n"
    "fn xat(t: u32) -> u32 { return p.b + (S[lb + t] / p.m) * p.k; }\n"
    "fn yat(t: u32) -> u32 { return p.c + S[lb + t] * p.n; }\n";

static void gen_matmul_id(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    char *mm = wgllm_wgsl_mm(key->type, t, mm_id_map);
    if (!mm) {
        b->oom = true;
        return;
    }
    wgllm_strbuf_printf(b, "%s", mm);
    free(mm);
}

char *wgllm_wgsl_moe_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune) {
    struct wgllm_strbuf b = {0};
    switch (key->kernel) {
    case WGLLM_KERNEL_MATVEC_ID: gen_matvec_id(&b, key, tune); break;
    case WGLLM_KERNEL_MOE_ROUTE: gen_moe_route(&b, tune); break;
    case WGLLM_KERNEL_MOE_SUM: gen_moe_sum(&b, tune); break;
    case WGLLM_KERNEL_MOE_BIAS: gen_moe_bias(&b, tune); break;
    case WGLLM_KERNEL_MOE_GLU_OAI: gen_moe_glu_oai(&b, tune); break;
    case WGLLM_KERNEL_MOE_BUCKET: gen_moe_bucket(&b); break;
    case WGLLM_KERNEL_MATMUL_ID: gen_matmul_id(&b, key, tune); break;
    default: b.oom = true; break;
    }
    if (b.oom || !b.data) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

const char *wgllm_wgsl_moe_kernel_name(enum wgllm_kernel k) {
    switch (k) {
    case WGLLM_KERNEL_MATVEC_ID: return "matvec_id";
    case WGLLM_KERNEL_MOE_ROUTE: return "moe_route";
    case WGLLM_KERNEL_MOE_SUM: return "moe_sum";
    case WGLLM_KERNEL_MOE_BIAS: return "moe_bias";
    case WGLLM_KERNEL_MOE_GLU_OAI: return "moe_glu_oai";
    case WGLLM_KERNEL_MOE_BUCKET: return "moe_bucket";
    case WGLLM_KERNEL_MATMUL_ID: return "matmul_id";
    default: return "unknown";
    }
}
