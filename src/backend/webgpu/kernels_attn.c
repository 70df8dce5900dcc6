/*
 * kernels_attn.c - WGSL of the kernels that the batched forward pass needs
 * beyond kernels.c (see the enum in kernels.h): attention of many tokens of
 * many sequences over their own cached positions (online softmax over
 * position tiles; its F32 version, the encoder's, over f32 K/V rows of the
 * pass itself without f16 roundings), the f16 K/V store at (sequence, position), and a row-wise
 * add (residuals and broadcast biases), and the re-rotation of f16 keys
 * moved by a context shift. kernels.c's generator calls
 * wgllm_wgsl_batch_body for these kernels and prepends the parameter block.
 *
 * The per-token data live in one u32 "step" buffer written by the host per
 * batch: for token t, ROW[t] = seq * n_ctx + pos is the token's cache row
 * and LEN[t] = pos + 1 the number of positions it attends to, so the
 * sequence's first row is ROW[t] + 1 - LEN[t].
 */
#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"
#include "quant/quant.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f16 rounding and an error-free sum: kernels.c's (to_f16 must not be
 * written as unpack(pack(x)), which a driver may fold away). */
#define helpers_wgsl wgllm_wgsl_f16_helpers()

/*
 * Workgroup (head h = wid.x, token t = wid.y), wg_attn threads = positions
 * per tile. Pass 1 keeps, per thread, a running max and a sum of exp(s - max)
 * rescaled when the max grows (online softmax; the sum as an error-free
 * hi + lo pair), merged across threads. Pass 2 walks position tiles: each
 * thread scores one position, the probability exp(s - M) / sum is rounded to
 * f16 as the CPU backend rounds it, and each thread accumulates its output
 * dims over the tile from workgroup memory. Compared with the CPU's
 * softmax only the normalizer differs, by the rounding of the rescales (a
 * few f32 ulps), so probabilities match except where one sits on an f16
 * rounding boundary. Tolerance: what test_webgpu_model measures against the
 * CPU backend did not move from the exact two-pass kernel it replaced to this one
 * (Q8_0/Q4_0 median 4.8-7.1e-7 of the logits' rms, F32 1.6e-4 / 2.6e-3
 * worst, F16 1.4e-3; greedy tokens equal), i.e. below the f32 sum-order noise.
 * The gemma block's extras follow the CPU's attend_head: q times q_scale
 * (and before it mistral3's per-token temperature, from the step buffer)
 * before its f16 rounding, the soft-cap of each score before the scale, and
 * a sliding window as a shorter span (the last `window` positions). On a
 * ring (p.n rows per sequence) the span's rows wrap through the modulo;
 * the sums still run in position order, so a ring gives the very values of
 * the full cache. ATTN_SINK (gpt-oss) is this kernel with the head's sink
 * joining the merged max and, last, the denominator (the CPU's
 * wgllm_op_softmax_sink); ATTN_BATCH's text stays as it was.
 */
static void attn_batch(char **s, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    const char *fmt =
        "const WGA: u32 = %uu;\nconst MAXD: u32 = %uu;\n%s%s"
        "@group(0) @binding(1) var<storage, read> Q: array<f32>;\n"
        "@group(0) @binding(2) var<storage, read> K: array<u32>;\n"
        "@group(0) @binding(3) var<storage, read> V: array<u32>;\n"
        "@group(0) @binding(4) var<storage, read_write> O: array<f32>;\n"
        "@group(0) @binding(5) var<storage, read> ST: array<u32>;\n"
        "%s%s"
        "var<workgroup> qs: array<f32, WGA * MAXD>;\n"
        "var<workgroup> pt: array<f32, WGA>;\n"
        "var<workgroup> rm: array<f32, WGA>;\n"
        "var<workgroup> rh: array<f32, WGA>;\n"
        "var<workgroup> rl: array<f32, WGA>;\n"
        "var<workgroup> wlen: u32;\n"
        "var<workgroup> wbase: u32;\n"
        "var<workgroup> wq0: u32;\n"
        /* the cache row of the span's j-th position: consecutive rows, or through a ring */
        "fn rowat(base: u32, q0: u32, j: u32) -> u32 {\n"
        "  if (p.n == 0u) { return base + j; }\n"
        "  return base + (q0 + j) %% p.n;\n"
        "}\n"
        "fn score(row: u32, kvh: u32) -> f32 {\n"
        "  let kb = row * p.e + kvh * p.k;\n"
        "  var d = 0.0;\n"
        "  for (var i = 0u; i < p.k; i++) { d += qs[i] * kget(kb + i); }\n"
        "  if (p.f2 > 0.0) { d = tanh_f(d * p.f3) * p.f2; }\n"
        "  return d * p.f0;\n"
        "}\n"
        "@compute @workgroup_size(WGA)\n"
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
        "  let tid = lid.x;\n"
        "  let h = wid.x;\n"
        "  let tok = wid.y;\n"
        "  let kvh = h / p.g;\n"
        "  if (tid == 0u) {\n"
        "    var len = ST[p.c + tok];\n"
        "    if (p.h > 0u) { len = min(len, p.h); }\n"
        "    wlen = len;\n"
        "    wbase = ST[p.b + tok] + 1u - len;\n"
        "    wq0 = 0u;\n"
        "    if (p.n > 0u) {\n"
        "      let pos = ST[p.c + tok] - 1u;\n"
        "      wbase = ST[p.b + tok] - pos %% p.n;\n"
        "      wq0 = pos + 1u - len;\n"
        "    }\n"
        "  }\n"
        /* the query temperature first, then q_scale: the CPU's two roundings */
        "  var qt = 1.0;\n"
        "  if (p.j > 0u) { qt = bitcast<f32>(ST[p.j + tok]); }\n"
        "  for (var i = tid; i < p.k; i += WGA) { qs[i] = %s(Q[tok * p.a + h * p.k + i] * qt * p.f1); }\n"
        "  let n = workgroupUniformLoad(&wlen);\n"
        "  let base = workgroupUniformLoad(&wbase);\n"
        "  let q0 = workgroupUniformLoad(&wq0);\n"
        "  var m = -3.4e38;\n"
        "  var hi = 0.0;\n"
        "  var lo = 0.0;\n"
        "  for (var j = tid; j < n; j += WGA) {\n"
        "    let s = score(rowat(base, q0, j), kvh);\n"
        "    if (s > m) {\n"
        "      let r = exp(m - s);\n"
        "      hi = hi * r;\n"
        "      lo = lo * r;\n"
        "      m = s;\n"
        "    }\n"
        "    let t2 = two_sum(hi, exp(s - m));\n"
        "    hi = t2.x;\n"
        "    lo += t2.y;\n"
        "  }\n"
        "  rm[tid] = m;\n"
        "  rh[tid] = hi;\n"
        "  rl[tid] = lo;\n"
        "  workgroupBarrier();\n"
        "  for (var w = WGA / 2u; w > 0u; w >>= 1u) {\n"
        "    if (tid < w) {\n"
        "      let m1 = rm[tid];\n"
        "      let m2 = rm[tid + w];\n"
        "      let mm = max(m1, m2);\n"
        "      let r1 = exp(m1 - mm);\n"
        "      let r2 = exp(m2 - mm);\n"
        "      let t2 = two_sum(rh[tid] * r1, rh[tid + w] * r2);\n"
        "      rm[tid] = mm;\n"
        "      rh[tid] = t2.x;\n"
        "      rl[tid] = rl[tid] * r1 + rl[tid + w] * r2 + t2.y;\n"
        "    }\n"
        "    workgroupBarrier();\n"
        "  }\n"
        "%s"
        "  var acc: array<f32, MAXD>;\n"
        "  for (var r = 0u; r < MAXD; r++) { acc[r] = 0.0; }\n"
        "  for (var j0 = 0u; j0 < n; j0 += WGA) {\n"
        "    let j = j0 + tid;\n"
        "    var pj = 0.0;\n"
        "    if (j < n) { pj = %s(exp(score(rowat(base, q0, j), kvh) - gmax) * inv); }\n"
        "    workgroupBarrier();\n"
        "    pt[tid] = pj;\n"
        "    workgroupBarrier();\n"
        "    let cnt = min(WGA, n - j0);\n"
        "    for (var r = 0u; r < MAXD; r++) {\n"
        "      let dd = tid + r * WGA;\n"
        "      if (dd < p.m) {\n"
        "        var a = acc[r];\n"
        "        if (p.n == 0u) {\n"
        "          let vb = (base + j0) * p.i + kvh * p.m + dd;\n"
        "          for (var jj = 0u; jj < cnt; jj++) { a += pt[jj] * vget(vb + jj * p.i); }\n"
        "        } else {\n"
        "          for (var jj = 0u; jj < cnt; jj++) { a += pt[jj] * vget(rowat(base, q0, j0 + jj) * p.i + kvh * p.m + dd); }\n"
        "        }\n"
        "        acc[r] = a;\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "  for (var r = 0u; r < MAXD; r++) {\n"
        "    let dd = tid + r * WGA;\n"
        "    if (dd < p.m) { O[tok * p.d + h * p.m + dd] = acc[r]; }\n"
        "  }\n"
        "}\n";
    /* f16 caches (the decoders'), or the encoder's f32 K and V, unrounded */
    const bool f32 = key->type == WGLLM_TYPE_F32;
    const char *kv = f32 ? "fn kget(i: u32) -> f32 { return bitcast<f32>(K[i]); }\n"
                           "fn vget(i: u32) -> f32 { return bitcast<f32>(V[i]); }\n"
                         : "fn kget(i: u32) -> f32 { let v = unpack2x16float(K[i >> 1u]); return select(v.x, v.y, (i & 1u) == 1u); }\n"
                           "fn vget(i: u32) -> f32 { let v = unpack2x16float(V[i >> 1u]); return select(v.x, v.y, (i & 1u) == 1u); }\n";
    const char *rnd = f32 ? "" : "to_f16";
    /* with a sink (gpt-oss) its score joins the max, and its exp comes last
     * in the denominator, as in the CPU's wgllm_op_softmax_sink */
    const bool sink = key->kernel == WGLLM_KERNEL_ATTN_SINK;
    const char *sk_bind = sink ? "@group(0) @binding(6) var<storage, read> SK: array<f32>;\n" : "";
    const char *norm = sink ? "  let sk = SK[h];\n"
                              "  let gmax = max(rm[0], sk);\n"
                              "  let r0 = exp(rm[0] - gmax);\n"
                              "  let t3 = two_sum(rh[0] * r0, rl[0] * r0);\n"
                              "  let t4 = two_sum(t3.x, exp(sk - gmax));\n"
                              "  let inv = 1.0 / (t4.x + (t3.y + t4.y));\n"
                            : "  let gmax = rm[0];\n"
                              "  let inv = 1.0 / (rh[0] + rl[0]);\n";
    size_t n = strlen(fmt) + strlen(helpers_wgsl) + strlen(wgllm_wgsl_tanh_helper()) + strlen(kv) + strlen(sk_bind) +
               strlen(norm) + 64;
    *s = malloc(n);
    if (*s)
        snprintf(*s, n, fmt, t->wg_attn, t->attn_max_dims, helpers_wgsl, wgllm_wgsl_tanh_helper(), kv, sk_bind, rnd,
                 norm, rnd);
}

static char *dup_fmt(const char *fmt, unsigned wg) {
    size_t n = strlen(fmt) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, wg);
    return s;
}

/*
 * Keys moved by a context shift: row r of S (f16 pairs, p.e words a row) is
 * turned by the RoPE of the position delta (CS, the host's table) and
 * stored at word p.c + r * p.e of Y. One thread per output word, reading
 * the pair partners it needs from S, so no thread writes what another
 * reads. Same f32 arithmetic as the CPU's wgllm_op_rope on the f16 -> f32
 * row; only the final f16 rounding (pack2x16float) and a possible fused
 * multiply-add may differ (a ulp at most).
 */
static void rope_shift(char **s, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    const char *fmt =
        "const WGE: u32 = %uu;\nconst NEOX: bool = %s;\n"
        "@group(0) @binding(1) var<storage, read> S: array<u32>;\n"
        "@group(0) @binding(2) var<storage, read> CS: array<f32>;\n"
        "@group(0) @binding(3) var<storage, read_write> Y: array<u32>;\n"
        "fn sget(i: u32) -> f32 { let v = unpack2x16float(S[i >> 1u]); return select(v.x, v.y, (i & 1u) == 1u); }\n"
        "fn rot(hb: u32, j: u32) -> f32 {\n"
        "  if (j >= p.m) { return sget(hb + j); }\n"
        "  let hf = p.m / 2u;\n"
        "  var i = j / 2u;\n"
        "  var ia = hb + 2u * i;\n"
        "  var second = (j & 1u) == 1u;\n"
        "  if (NEOX) {\n"
        "    i = select(j, j - hf, j >= hf);\n"
        "    ia = hb + i;\n"
        "    second = j >= hf;\n"
        "  }\n"
        "  let ib = select(ia + 1u, ia + hf, NEOX);\n"
        "  let c = CS[2u * i];\n"
        "  let s = CS[2u * i + 1u];\n"
        "  let x0 = sget(ia);\n"
        "  let x1 = sget(ib);\n"
        "  if (second) { return x0 * s + x1 * c; }\n"
        "  return x0 * c - x1 * s;\n"
        "}\n"
        "@compute @workgroup_size(WGE)\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {\n"
        "  let w = gid.x + gid.y * nw.x * WGE;\n"
        "  if (w >= p.n) { return; }\n"
        "  let r = w / p.e;\n"
        "  let d = 2u * (w %% p.e);\n"
        "  let hb = 2u * r * p.e + (d / p.k) * p.k;\n"
        "  let j = d %% p.k;\n"
        "  Y[p.c + w] = pack2x16float(vec2<f32>(rot(hb, j), rot(hb, j + 1u)));\n"
        "}\n";
    size_t n = strlen(fmt) + 64;
    *s = malloc(n);
    if (*s) snprintf(*s, n, fmt, t->wg_elem, key->neox ? "true" : "false");
}

/* ---- sampling: SAMPLE and SAMPLE_ROWS share the candidates' selection and
 * the chain's cuts, generated by the same code (names substituted) so that
 * the two cannot drift apart. */

static const char *sample_fns =
    "fn pcg(v: u32) -> u32 {\n"
    "  let s = v * 747796405u + 2891336453u;\n"
    "  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;\n"
    "  return (w >> 22u) ^ w;\n"
    "}\n"
    "fn before(v: f32, i: u32, w: f32, j: u32) -> bool { return v > w || (v == w && i < j); }\n";

/* The top K = min(k, KMAX, p.n) logits of X[xbase ..) into cv/ci (largest
 * first, the lower index on ties): K rounds of a (value, index) arg-max over
 * the entries after the previous round's, reduced across the workgroup in
 * bv/bi; then all threads but thread 0 return. `idx` and `st` name the
 * round's index and the reduction's stride; `barrier_first`: the round
 * waits before writing bv/bi (another reduction used them just before).
 * `cand`, when set, is a WGSL condition on i prefixed to the test ("ok(i) &&
 * "): entries it rejects are never candidates (SAMPLE_ROWS's token mask);
 * the caller then keeps K at most the number it accepts, since a round that
 * finds nothing would leave a bogus candidate. */
static void sample_top_k(struct wgllm_strbuf *sb, const char *k, const char *xbase, const char *idx, const char *st,
                         bool barrier_first, const char *cand) {
    wgllm_strbuf_printf(sb,
                        "  let K = min(min(%s, KMAX), p.n);\n"
                        "  var lastv = 0.0;\n"
                        "  var lasti = 0u;\n"
                        "  for (var r = 0u; r < K; r++) {\n"
                        "    var v = 0.0;\n"
                        "    var %s = 0xffffffffu;\n"
                        "    for (var i = tid; i < p.n; i += WGR) {\n"
                        "      let x = X[%s + i];\n"
                        "      if (%s(r == 0u || before(lastv, lasti, x, i)) && (%s == 0xffffffffu || before(x, i, v, %s))) { v = x; %s = i; }\n"
                        "    }\n"
                        "%s"
                        "    bv[tid] = v;\n"
                        "    bi[tid] = %s;\n"
                        "    workgroupBarrier();\n"
                        "    for (var %s = WGR / 2u; %s > 0u; %s >>= 1u) {\n"
                        "      if (tid < %s) {\n"
                        "        let ov = bv[tid + %s];\n"
                        "        let oi = bi[tid + %s];\n"
                        "        if (oi != 0xffffffffu && (bi[tid] == 0xffffffffu || before(ov, oi, bv[tid], bi[tid]))) { bv[tid] = ov; bi[tid] = oi; }\n"
                        "      }\n"
                        "      workgroupBarrier();\n"
                        "    }\n"
                        "    lastv = bv[0];\n"
                        "    lasti = bi[0];\n"
                        "    if (tid == 0u) { cv[r] = lastv; ci[r] = lasti; }\n"
                        "    workgroupBarrier();\n"
                        "  }\n"
                        "  if (tid != 0u) { return; }\n",
                        k, idx, xbase, cand ? cand : "", idx, idx, idx, barrier_first ? "    workgroupBarrier();\n" : "", idx, st, st, st, st,
                        st, st);
}

/* Thread 0 on the K candidates, as the CPU sampler chain: top-p (on the
 * probabilities at temperature 1; >= 1 off), min-p (<= 0 off), then `total`,
 * the kept candidates' weight at the temperature (the draw's scale). `mx`
 * names the largest logit. */
static void sample_cut(struct wgllm_strbuf *sb, const char *mx, const char *top_p, const char *min_p, const char *temp) {
    wgllm_strbuf_printf(sb,
                        "  var n = K;\n"
                        "  let %s = cv[0];\n"
                        "  if (%s < 1.0 && n > 1u) {\n"
                        "    var z = 0.0;\n"
                        "    for (var j = 0u; j < n; j++) { z += exp(cv[j] - %s); }\n"
                        "    var cum = 0.0;\n"
                        "    for (var j = 0u; j < n; j++) {\n"
                        "      cum += exp(cv[j] - %s) / z;\n"
                        "      if (cum >= %s) { n = j + 1u; break; }\n"
                        "    }\n"
                        "  }\n"
                        "  if (%s > 0.0 && n > 1u) {\n"
                        "    let cut = %s + log(%s);\n"
                        "    var k = 1u;\n"
                        "    while (k < n && cv[k] >= cut) { k++; }\n"
                        "    n = k;\n"
                        "  }\n"
                        "  var total = 0.0;\n"
                        "  for (var j = 0u; j < n; j++) { total += exp((cv[j] - %s) / %s); }\n",
                        mx, top_p, mx, mx, top_p, min_p, mx, min_p, mx, temp);
}

/* One workgroup samples the logits row at p.a; the id goes to ST[p.b]. */
static char *sample(const struct wgllm_wgsl_tune *t) {
    struct wgllm_strbuf sb = {0};
    wgllm_strbuf_printf(&sb,
                        "const WGR: u32 = %uu;\n"
                        "const KMAX: u32 = 64u;\n"
                        "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
                        "@group(0) @binding(2) var<storage, read_write> ST: array<u32>;\n"
                        "var<workgroup> bv: array<f32, WGR>;\n"
                        "var<workgroup> bi: array<u32, WGR>;\n"
                        "var<workgroup> cv: array<f32, KMAX>;\n"
                        "var<workgroup> ci: array<u32, KMAX>;\n"
                        "%s"
                        "@compute @workgroup_size(WGR)\n"
                        "fn main(@builtin(local_invocation_id) lid: vec3<u32>) {\n"
                        "  let tid = lid.x;\n",
                        t->wg_row, sample_fns);
    sample_top_k(&sb, "p.k", "p.a", "idx", "s", false, NULL);
    sample_cut(&sb, "mx", "p.f1", "p.f2", "p.f0");
    wgllm_strbuf_puts(&sb, "  let u = f32(pcg(pcg(p.c) ^ (ST[p.d] * 2654435761u)) >> 8u) / 16777216.0;\n"
                           "  let r = u * total;\n"
                           "  var acc = 0.0;\n"
                           "  var pick = ci[n - 1u];\n"
                           "  for (var j = 0u; j < n; j++) {\n"
                           "    acc += exp((cv[j] - mx) / p.f0);\n"
                           "    if (r < acc) { pick = ci[j]; break; }\n"
                           "  }\n"
                           "  ST[p.b] = pick;\n"
                           "}\n");
    if (sb.oom) wgllm_strbuf_free(&sb);
    return sb.data;
}

/* Workgroup w samples row PR[8w] (kernels.h), after one pass for the argmax
 * among the allowed tokens and the log-sum-exp of the whole row. A row with
 * a mask (PR[8w + 7] = 1 + its index in M) takes only the tokens whose bit
 * is set, as the host sampler masks the grammar's tokens before the chain;
 * its logprob is still the raw log-softmax, as the host reports it. */
static char *sample_rows(const struct wgllm_wgsl_tune *t) {
    struct wgllm_strbuf sb = {0};
    wgllm_strbuf_printf(&sb,
                        "const WGR: u32 = %uu;\n"
                        "const KMAX: u32 = 64u;\n"
                        "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
                        "@group(0) @binding(2) var<storage, read> PR: array<u32>;\n"
                        "@group(0) @binding(3) var<storage, read_write> R: array<u32>;\n"
                        "@group(0) @binding(4) var<storage, read> M: array<u32>;\n"
                        "var<workgroup> bv: array<f32, WGR>;\n"
                        "var<workgroup> bi: array<u32, WGR>;\n"
                        "var<workgroup> bm: array<f32, WGR>;\n"
                        "var<workgroup> bs: array<f32, WGR>;\n"
                        "var<workgroup> cv: array<f32, KMAX>;\n"
                        "var<workgroup> ci: array<u32, KMAX>;\n"
                        "var<workgroup> wk: u32;\n"
                        "var<private> mk: u32;\n"
                        "var<private> mb: u32;\n"
                        "%s"
                        "fn ok(i: u32) -> bool { return mk == 0u || ((M[mb + (i >> 5u)] >> (i & 31u)) & 1u) != 0u; }\n"
                        "@compute @workgroup_size(WGR)\n"
                        "fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {\n"
                        "  let tid = lid.x;\n"
                        "  let q = wid.x * 8u;\n"
                        "  let base = PR[q] * p.n;\n"
                        "  mk = PR[q + 7u];\n"
                        "  mb = select(0u, (mk - 1u) * ((p.n + 31u) / 32u), mk != 0u);\n"
                        "  if (tid == 0u) { wk = PR[q + 1u]; }\n"
                        "  let kk = workgroupUniformLoad(&wk);\n"
                        /* one pass: the allowed argmax, and the row's running max with the sum relative to it */
                        "  var m = -3.4e38;\n"
                        "  var s = 0.0;\n"
                        "  var am = -3.4e38;\n"
                        "  var idx = 0xffffffffu;\n"
                        "  for (var i = tid; i < p.n; i += WGR) {\n"
                        "    let x = X[base + i];\n"
                        "    if (s == 0.0 || x > m) { s = s * exp(m - x) + 1.0; m = x; } else { s += exp(x - m); }\n"
                        "    if (ok(i) && (idx == 0xffffffffu || x > am)) { am = x; idx = i; }\n"
                        "  }\n"
                        "  bv[tid] = am;\n"
                        "  bi[tid] = idx;\n"
                        "  bm[tid] = m;\n"
                        "  bs[tid] = s;\n"
                        "  workgroupBarrier();\n"
                        "  for (var st = WGR / 2u; st > 0u; st >>= 1u) {\n"
                        "    if (tid < st) {\n"
                        "      let ov = bv[tid + st];\n"
                        "      let oi = bi[tid + st];\n"
                        "      if (oi != 0xffffffffu && (bi[tid] == 0xffffffffu || before(ov, oi, bv[tid], bi[tid]))) { bv[tid] = ov; bi[tid] = oi; }\n"
                        "      let om = bm[tid + st];\n"
                        "      let os = bs[tid + st];\n"
                        "      if (os != 0.0) {\n"
                        "        if (bs[tid] == 0.0) { bm[tid] = om; bs[tid] = os; }\n"
                        "        else {\n"
                        "          let mv = bm[tid];\n"
                        "          let nm = max(mv, om);\n"
                        "          bs[tid] = bs[tid] * exp(mv - nm) + os * exp(om - nm);\n"
                        "          bm[tid] = nm;\n"
                        "        }\n"
                        "      }\n"
                        "    }\n"
                        "    workgroupBarrier();\n"
                        "  }\n"
                        "  let mx = bv[0];\n"
                        "  let best = bi[0];\n"
                        "  let lse = bm[0] + log(bs[0]);\n",
                        t->wg_row, sample_fns);
    sample_top_k(&sb, "kk", "base", "id", "st", true, "ok(i) && ");
    wgllm_strbuf_puts(&sb, "  if (K == 0u) {\n"
                           "    R[2u * wid.x] = best;\n"
                           "    R[2u * wid.x + 1u] = bitcast<u32>(mx - lse);\n"
                           "    return;\n"
                           "  }\n"
                           "  let temp = bitcast<f32>(PR[q + 4u]);\n"
                           "  let top_p = bitcast<f32>(PR[q + 5u]);\n"
                           "  let min_p = bitcast<f32>(PR[q + 6u]);\n");
    sample_cut(&sb, "cm", "top_p", "min_p", "temp");
    wgllm_strbuf_puts(&sb, "  let u = f32(pcg(pcg(PR[q + 2u]) ^ (PR[q + 3u] * 2654435761u)) >> 8u) / 16777216.0;\n"
                           "  let rr = u * total;\n"
                           "  var acc = 0.0;\n"
                           "  var pick = n - 1u;\n"
                           "  for (var j = 0u; j < n; j++) {\n"
                           "    acc += exp((cv[j] - cm) / temp);\n"
                           "    if (rr < acc) { pick = j; break; }\n"
                           "  }\n"
                           "  R[2u * wid.x] = ci[pick];\n"
                           "  R[2u * wid.x + 1u] = bitcast<u32>(cv[pick] - lse);\n"
                           "}\n");
    if (sb.oom) wgllm_strbuf_free(&sb);
    return sb.data;
}

char *wgllm_wgsl_batch_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    char *s = NULL;
    switch (key->kernel) {
    case WGLLM_KERNEL_ATTN_BATCH:
    case WGLLM_KERNEL_ATTN_SINK: attn_batch(&s, key, t); return s;
    case WGLLM_KERNEL_ROPE_SHIFT_F16: rope_shift(&s, key, t); return s;
    case WGLLM_KERNEL_SAMPLE: return sample(t);
    case WGLLM_KERNEL_SAMPLE_ROWS: return sample_rows(t);
    case WGLLM_KERNEL_STORE_KV:
        return dup_fmt("const WGE: u32 = %uu;\n"
                       "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
                       "@group(0) @binding(2) var<storage, read> ST: array<u32>;\n"
                       "@group(0) @binding(3) var<storage, read_write> Y: array<u32>;\n"
                       "@compute @workgroup_size(WGE)\n"
                       "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
                       "  let i = gid.x;\n"
                       "  let tok = gid.y;\n"
                       "  if (i >= p.n) { return; }\n"
                       "  let x = p.a + tok * p.k + 2u * i;\n"
                       "  Y[p.c + ST[p.b + tok] * p.e + i] = pack2x16float(vec2<f32>(X[x], X[x + 1u]));\n"
                       "}\n",
                       t->wg_elem);
    case WGLLM_KERNEL_ADD_ROWS:
        return dup_fmt("const WGE: u32 = %uu;\n"
                       "@group(0) @binding(1) var<storage, read_write> X: array<f32>;\n"
                       "@group(0) @binding(2) var<storage, read> B: array<f32>;\n"
                       "@compute @workgroup_size(WGE)\n"
                       "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
                       "  let i = gid.x;\n"
                       "  let tok = gid.y;\n"
                       "  if (i >= p.n) { return; }\n"
                       "  X[p.a + tok * p.n + i] = X[p.a + tok * p.n + i] + B[p.b + tok * p.m + i];\n"
                       "}\n",
                       t->wg_elem);
    default: return wgllm_wgsl_encoder_body(key, t);
    }
}

const char *wgllm_wgsl_batch_kernel_name(enum wgllm_kernel k) {
    switch (k) {
    case WGLLM_KERNEL_ATTN_BATCH: return "attn_batch";
    case WGLLM_KERNEL_ATTN_SINK: return "attn_sink";
    case WGLLM_KERNEL_STORE_KV: return "store_kv";
    case WGLLM_KERNEL_ADD_ROWS: return "add_rows";
    case WGLLM_KERNEL_ROPE_SHIFT_F16: return "rope_shift_f16";
    case WGLLM_KERNEL_SAMPLE: return "sample";
    case WGLLM_KERNEL_SAMPLE_ROWS: return "sample_rows";
    default: return wgllm_wgsl_encoder_kernel_name(k);
    }
}
