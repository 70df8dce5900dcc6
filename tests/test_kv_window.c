/*
 * test_kv_window.c - the sliding-window KV ring (backend/kv_window.h) on
 * tiny gemma models (a window of 8): with passes of 4 tokens a local layer
 * keeps 12 cells instead of n_ctx, and 20 to 28 positions wrap the ring
 * up to twice. A ring gives the logits of full caches (swa_full) on the CPU (its
 * kernel levels: rerun with WGLLM_CPU=avx2 and scalar) and on WebGPU, with
 * the prompt in several passes and the generation token by token; a
 * sequence that went past its ring refuses a prefix whose window it
 * forgot and serves those whose window it kept; snapshots hold only the
 * ring's live cells and restore to the same continuation; context shift is
 * refused on a ring. The engine: a prefix whose window a slot forgot is
 * computed again (the same tokens as a fresh engine), one it kept is
 * reused, and a snapshot of a ring restores the same continuation.
 */
#include "test.h"

#include "backend/backend.h"
#include "backend/webgpu/hal.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"

/* WebGPU generates fewer tokens: a step costs ~50 ms on SwiftShader (ASan) */
enum { N_CTX = 64, N_BATCH = 4, RING = 8 + N_BATCH, N_PROMPT = 9, N_GEN = 19, N_GEN_GPU = 11 };

static struct wgllm_model *gemma(const char *shape) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = shape;
    sp.type = WGLLM_TYPE_F32;
    sp.seed = 5;
    return test_synth_model(&sp);
}

static struct wgllm_context *new_ctx(struct wgllm_model *m, enum wgllm_backend b, bool full, int n_seq) {
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = N_BATCH;
    cp.n_seq = n_seq;
    cp.backend = b;
    cp.swa_full = full;
    struct wgllm_context *c = NULL;
    struct wgllm_error err = {0};
    if (wgllm_context_init(m, &cp, &c, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  context: %s\n", err.message);
        test_checks_failed_in_current++;
        return NULL;
    }
    return c;
}

/* The largest |a - b| over n floats, relative to b's rms. */
static double rel_diff(const float *a, const float *b, int n) {
    double mx = 0, sq = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, fabs((double)a[i] - b[i])), sq += (double)b[i] * b[i];
    return mx / fmax(sqrt(sq / n), 1e-30);
}

/* A prompt of N_PROMPT tokens in passes of N_BATCH with every row's logits,
 * then n_gen greedy tokens one by one: rows[t] gets position t's logits
 * (N_PROMPT + n_gen rows of V); the generated tokens go to gen. */
static bool run(struct wgllm_context *c, int V, int n_gen, float *rows, int32_t *gen) {
    int32_t toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    struct wgllm_error err = {0};
    if (wgllm_decode(c, toks, N_PROMPT, true, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  decode: %s\n", err.message);
        return false;
    }
    for (int t = 0; t < N_PROMPT; t++) memcpy(rows + (size_t)t * V, wgllm_get_logits_ith(c, t), sizeof(float) * (size_t)V);
    for (int k = 0; k < n_gen; k++) {
        gen[k] = wgllm_argmax(rows + (size_t)(N_PROMPT - 1 + k) * V, V);
        if (wgllm_decode(c, &gen[k], 1, false, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "  decode %d: %s\n", k, err.message);
            return false;
        }
        memcpy(rows + (size_t)(N_PROMPT + k) * V, wgllm_get_logits(c), sizeof(float) * (size_t)V);
    }
    return true;
}

/* Ring (cr, n_seq sequences) and full caches (cf) of model m: the same
 * logits at every position and the same greedy tokens, and the ring's KV
 * bytes are what kv_window says. Exactly on WebGPU, whose sums run in
 * position order either way. The CPU's V product is two f16 dot products
 * where the window wraps, which moves an output by an f32 ulp; measured
 * ~1e-6 of the logits' rms, and up to 1.1e-3 (avx2, scalar) where that ulp
 * crosses an f16 rounding boundary of the next layer's K/V or GeGLU input;
 * a wrong cell moves them by O(1). */
static void ring_equals_full(struct wgllm_model *m, struct wgllm_context *cr, struct wgllm_context *cf, int n_seq,
                             bool cpu) {
    const int V = m->hp.n_vocab, n_gen = cpu ? N_GEN : N_GEN_GPU, N = N_PROMPT + n_gen;
    float *lr = malloc(sizeof(float) * (size_t)N * V), *lf = malloc(sizeof(float) * (size_t)N * V);
    int32_t gr[N_GEN], gf[N_GEN];
    CHECK(lr && lf);
    if (lr && lf) {
        uint64_t full_r, full_f;
        int ring_r, ring_f;
        const uint64_t kv_r = wgllm_context_kv_memory(cr, &full_r, &ring_r), kv_f = wgllm_context_kv_memory(cf, &full_f, &ring_f);
        CHECK_EQ_INT(ring_r, RING);
        CHECK_EQ_INT(ring_f, 0);
        CHECK(kv_f == full_f && full_r == full_f * (uint64_t)n_seq);
        int n_local = 0;
        for (int il = 0; il < m->hp.n_layer; il++) n_local += m->layers[il].swa;
        CHECK(n_local > 0);
        const uint64_t row = (uint64_t)m->hp.n_head_kv * (m->hp.head_dim_k + m->hp.head_dim_v) * 2;
        CHECK_EQ_INT(kv_r, row * n_seq * ((uint64_t)(m->hp.n_layer - n_local) * N_CTX + (uint64_t)n_local * RING));
        CHECK(run(cr, V, n_gen, lr, gr));
        CHECK(run(cf, V, n_gen, lf, gf));
        double worst = 0;
        for (int t = 0; t < N; t++) worst = fmax(worst, rel_diff(lr + (size_t)t * V, lf + (size_t)t * V, V));
        fprintf(stderr, "  %s: ring of %d cells vs full caches: worst logits difference %.3g of the rms over %d "
                "positions\n", cpu ? "cpu" : "webgpu", RING, worst, N);
        CHECK(worst <= (cpu ? 5e-3 : 0.0));
        CHECK(!memcmp(gr, gf, sizeof(int32_t) * (size_t)n_gen));
    }
    free(lr), free(lf);
}

/* One token at (pos, seq) of a multi-sequence context; its logits to out
 * (NULL: none kept). */
static enum wgllm_status one(struct wgllm_context *c, int32_t tok, int32_t pos, int32_t seq, float *out, int V) {
    const bool want = out != NULL;
    const struct wgllm_batch bt = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq, .output = &want};
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_context_decode_batch(c, &bt, false, &err);
    if (!st && out) memcpy(out, wgllm_context_output_logits(c, 0), sizeof(float) * (size_t)V);
    return st;
}

/* The largest |a - b| over n f16 values, relative to b's rms. */
static double rel_diff16(const wgllm_fp16 *a, const wgllm_fp16 *b, size_t n) {
    double mx = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = wgllm_fp16_to_fp32(a[i]), y = wgllm_fp16_to_fp32(b[i]);
        mx = fmax(mx, fabs(x - y)), sq += y * y;
    }
    return mx / fmax(sqrt(sq / (double)n), 1e-30);
}

/* A ring's snapshot of L positions holds, on a local layer, its last RING
 * positions in position order: those of the full caches' snapshot (cf's
 * sequence 0, holding the same L tokens) at [L - RING, L). The CPU keeps
 * V transposed (rows per dimension), WebGPU rows per position. */
static void check_snapshot_layout(struct wgllm_model *m, struct wgllm_context *cf, const void *ring_snap, int L,
                                  bool cpu) {
    const struct wgllm_hparams *hp = &m->hp;
    const size_t KD = (size_t)hp->n_head_kv * hp->head_dim_k, VD = (size_t)hp->n_head_kv * hp->head_dim_v;
    wgllm_fp16 *full = malloc(wgllm_context_seq_state_size(cf, L));
    CHECK(full != NULL);
    if (!full) return;
    wgllm_context_seq_save(cf, 0, L, full);
    const wgllm_fp16 *r = ring_snap, *f = full;
    double worst = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const size_t m_l = m->layers[il].swa ? RING : (size_t)L, skip = (size_t)L - m_l;
        worst = fmax(worst, rel_diff16(r, f + skip * KD, m_l * KD)); /* keys: rows per position */
        r += m_l * KD, f += (size_t)L * KD;
        if (cpu)
            for (size_t d = 0; d < VD; d++, r += m_l, f += L) worst = fmax(worst, rel_diff16(r, f + skip, m_l));
        else
            worst = fmax(worst, rel_diff16(r, f + skip * VD, m_l * VD)), r += m_l * VD, f += (size_t)L * VD;
    }
    /* the CPU's caches differ by f16 roundings past the first wrap (ring_equals_full) */
    CHECK(worst <= (cpu ? 2e-2 : 0.0));
    if (worst > (cpu ? 2e-2 : 0.0)) fprintf(stderr, "  snapshot layout: worst difference %.3g of the rms\n", worst);
    free(full);
}

/* Which prefixes a ring (cr, 3 sequences) still provides, against full
 * caches (cf, sequence 0), both started over: after 28 positions (the ring
 * holds [16, 28)) a sequence goes on at 24 (its window [16, 24) is there)
 * with the logits of full caches, not at 23 or below 16 (refused,
 * INVALID_ARGUMENT), and again from 0; a copy of the sequence serves what
 * it did; a snapshot is the ring's live cells and restores into another
 * slot to the same continuation; a shift is refused. */
static void ring_prefixes(struct wgllm_model *m, struct wgllm_context *cr, struct wgllm_context *cf, bool cpu) {
    const int V = m->hp.n_vocab, L = 28;
    const double tol = cpu ? 5e-3 : 0.0;
    float *a = malloc(sizeof(float) * (size_t)V), *f = malloc(sizeof(float) * (size_t)V);
    CHECK(a && f);
    if (!a || !f) {
        free(a), free(f);
        return;
    }
    wgllm_context_truncate(cf, 0);
    int32_t toks[64];
    for (int i = 0; i < L; i++) toks[i] = (int32_t)((i * 104729 + 7) % V);
    for (int i = 0; i < L; i += N_BATCH) { /* in full passes: each wraps the ring with its own tokens too */
        int32_t pos[N_BATCH], seq[N_BATCH] = {0};
        for (int j = 0; j < N_BATCH; j++) pos[j] = i + j;
        const struct wgllm_batch bt = {.n = N_BATCH, .token = toks + i, .pos = pos, .seq = seq};
        CHECK_EQ_INT(wgllm_context_decode_batch(cr, &bt, false, NULL), WGLLM_STATUS_OK);
    }
    CHECK_EQ_INT(wgllm_decode(cf, toks, L, false, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_context_seq_pos_min(cr, 0), L - RING);
    CHECK(!wgllm_context_can_continue(cr, L - RING, 23) && wgllm_context_can_continue(cr, L - RING, 24));
    CHECK(wgllm_context_can_continue(cr, 0, 3) && wgllm_context_can_continue(cr, L - RING, 0));

    /* a snapshot of all 28 positions: the ring's 12 cells on local layers */
    const size_t sz = wgllm_context_seq_state_size(cr, L);
    int n_local = 0;
    for (int il = 0; il < m->hp.n_layer; il++) n_local += m->layers[il].swa;
    const size_t row = (size_t)m->hp.n_head_kv * (m->hp.head_dim_k + m->hp.head_dim_v) * 2;
    CHECK_EQ_INT(sz, row * ((size_t)(m->hp.n_layer - n_local) * L + (size_t)n_local * RING));
    CHECK_EQ_INT(wgllm_context_state_pos_min(cr, L), L - RING);
    void *snap = malloc(sz);
    if (snap) {
        wgllm_context_seq_save(cr, 0, L, snap);
        check_snapshot_layout(m, cf, snap, L, cpu);
    }
    /* a copy into slot 1 serves what slot 0 does */
    wgllm_context_seq_copy(cr, 0, 1, L);
    CHECK_EQ_INT(wgllm_context_seq_pos_min(cr, 1), L - RING);

    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_context_seq_shift(cr, 0, L, 4, 8, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "swa_full") != NULL);
    /* refused: 23's window reaches 15, gone; so is anything below the ring */
    CHECK_EQ_INT(one(cr, toks[23], 23, 0, a, V), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(one(cr, toks[10], 10, 0, a, V), WGLLM_STATUS_INVALID_ARGUMENT);
    /* served: going on at 24 (overwriting 24..27), as the full cache truncated there */
    wgllm_context_truncate(cf, 24);
    CHECK_EQ_INT(one(cr, toks[24], 24, 0, a, V), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_decode(cf, &toks[24], 1, false, NULL), WGLLM_STATUS_OK);
    memcpy(f, wgllm_get_logits(cf), sizeof(float) * (size_t)V);
    CHECK(rel_diff(a, f, V) <= tol);
    /* the copy goes on at 28 as the original would have */
    for (int p = 25; p < L; p++) CHECK_EQ_INT(wgllm_decode(cf, &toks[p], 1, false, NULL), WGLLM_STATUS_OK);
    const int32_t next = 5;
    CHECK_EQ_INT(one(cr, next, L, 1, a, V), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_decode(cf, &next, 1, false, NULL), WGLLM_STATUS_OK);
    memcpy(f, wgllm_get_logits(cf), sizeof(float) * (size_t)V);
    CHECK(rel_diff(a, f, V) <= tol);
    /* the snapshot restored into slot 2 goes on the same way */
    if (snap) {
        wgllm_context_seq_load(cr, 2, L, snap);
        CHECK_EQ_INT(wgllm_context_seq_pos_min(cr, 2), L - RING);
        CHECK_EQ_INT(one(cr, next, L, 2, a, V), WGLLM_STATUS_OK);
        CHECK(rel_diff(a, f, V) <= tol);
    }
    free(snap);
    /* starting over at 0 always works, and the ring holds only what it wrote since */
    CHECK_EQ_INT(one(cr, toks[0], 0, 0, NULL, V), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_context_seq_pos_min(cr, 0), 0);
    /* full caches shift (the single-sequence call too); the ring's context refuses it */
    CHECK_EQ_INT(wgllm_context_shift(cf, 4, 8, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_context_n_past(cf), L + 1 - 8);
    wgllm_context_truncate(cr, 0);
    CHECK_EQ_INT(wgllm_decode(cr, toks, 12, false, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_context_shift(cr, 4, 4, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK_EQ_INT(wgllm_context_n_past(cr), 12);
    free(a), free(f);
}

struct collected {
    int32_t t[N_GEN_GPU];
    int n;
};

static bool collect_token(int32_t tok, void *ud) {
    struct collected *c = ud;
    if (c->n < N_GEN_GPU) c->t[c->n++] = tok;
    return true;
}

/* Generation on the device (WebGPU) through the ring, both contexts
 * started over: the tokens of full caches. */
static void generation_on_the_device(struct wgllm_model *m, struct wgllm_context *cr, struct wgllm_context *cf) {
    struct wgllm_context *c[2] = {cr, cf};
    struct collected got[2] = {{{0}, 0}, {{0}, 0}};
    for (int i = 0; i < 2; i++) {
        wgllm_context_truncate(c[i], 0);
        int32_t toks[N_PROMPT];
        for (int j = 0; j < N_PROMPT; j++) toks[j] = (int32_t)((j * 7919 + 13) % m->hp.n_vocab);
        CHECK_EQ_INT(wgllm_decode(c[i], toks, N_PROMPT, false, NULL), WGLLM_STATUS_OK);
        int n_out = 0;
        struct wgllm_error err = {0};
        CHECK_EQ_INT(wgllm_context_generate(c[i], NULL, N_GEN_GPU, collect_token, &got[i], &n_out, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(n_out, N_GEN_GPU);
    }
    CHECK_EQ_INT(got[0].n, N_GEN_GPU);
    CHECK(got[0].n == got[1].n && !memcmp(got[0].t, got[1].t, sizeof got[0].t));
}

/* Every check on one pair of contexts (a context costs seconds of pipeline
 * compiles on WebGPU under ASan): the prefixes and device generation on
 * gemma3 only. */
static void checks(const char *shape, enum wgllm_backend b, bool all) {
    struct wgllm_model *m = gemma(shape);
    CHECK(m != NULL);
    if (!m) return;
    const int n_seq = all ? 3 : 1;
    struct wgllm_context *cr = new_ctx(m, b, false, n_seq), *cf = new_ctx(m, b, true, 1);
    if (cr && cf) {
        ring_equals_full(m, cr, cf, n_seq, b == WGLLM_BACKEND_CPU);
        if (all) ring_prefixes(m, cr, cf, b == WGLLM_BACKEND_CPU);
        if (all && b == WGLLM_BACKEND_WEBGPU) generation_on_the_device(m, cr, cf);
    }
    wgllm_context_free(cr);
    wgllm_context_free(cf);
    wgllm_model_free(m);
}

TEST(cpu_gemma3_ring_equals_full_and_serves_only_what_it_kept) { checks("tiny-gemma3", WGLLM_BACKEND_CPU, true); }
TEST(cpu_gemma2_ring_equals_full) { checks("tiny-gemma2", WGLLM_BACKEND_CPU, false); }
TEST(webgpu_gemma3_ring_equals_full_serves_only_what_it_kept_and_generates) {
    checks("tiny-gemma3", WGLLM_BACKEND_WEBGPU, true);
}
TEST(webgpu_gemma2_ring_equals_full) { checks("tiny-gemma2", WGLLM_BACKEND_WEBGPU, false); }

/* ---- the engine ---------------------------------------------------------- */

static struct wgllm_model *eng_model;

static struct wgllm_engine *new_engine(int n_slots, size_t snapshot_bytes) {
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = n_slots;
    ep.n_ctx = 128;
    ep.n_batch = N_BATCH;
    ep.snapshot_bytes = snapshot_bytes;
    ep.min_snapshot_tokens = 8;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err;
    if (wgllm_engine_init(eng_model, &ep, &e, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  engine: %s\n", err.message);
        test_checks_failed_in_current++;
    }
    return e;
}

/* What a fresh engine answers (nothing cached). */
static bool fresh(const char *prompt, int max_tokens, struct wgllm_result *r) {
    struct wgllm_engine *e = new_engine(1, 0);
    if (!e) return false;
    struct wgllm_request_params p = test_greedy(max_tokens);
    const bool ok = wgllm_query(e, prompt, &p, r, NULL) == WGLLM_STATUS_OK;
    CHECK(ok);
    wgllm_engine_free(e);
    return ok;
}

static void check_same(const struct wgllm_result *a, const struct wgllm_result *b) {
    CHECK_EQ_INT(a->n_tokens, b->n_tokens);
    CHECK(a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens));
    for (int i = 0; i < a->n_tokens && i < b->n_tokens; i++) CHECK_NEAR(a->logprobs[i], b->logprobs[i], 1e-4);
}

/* A prompt far longer than the ring (12 cells), a continuation of it, and a
 * prompt sharing only its first words. */
static const char *const P = "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lamp, "
                             "a book and a thermos of tea, and he watched the ships pass far out at sea";
static const char *const P_MORE = "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a "
                                  "lamp, a book and a thermos of tea, and he watched the ships pass far out at sea. "
                                  "Then he slept";
static const char *const P_SHORT = "The lighthouse keeper climbed down to the harbour";

/* A slot past its ring: a follow-up inside the window it kept reuses the
 * prefix (cached_tokens > 0); one sharing only a prefix whose window is
 * gone is computed again from 0 (cached_tokens 0); both answer as a fresh
 * engine does. */
TEST(engine_reuses_only_what_the_ring_kept) {
    struct wgllm_result cold_more, cold_short, r1, r2, r3;
    if (!fresh(P_MORE, 6, &cold_more) || !fresh(P_SHORT, 6, &cold_short)) return;
    struct wgllm_engine *e = new_engine(1, 0);
    if (!e) return;
    struct wgllm_request_params p = test_greedy(2);
    p.context_key = "conversation";
    /* one generated token decoded after P: the ring holds P's last RING - 1 and it */
    CHECK_EQ_INT(wgllm_query(e, P, &p, &r1, NULL), WGLLM_STATUS_OK);
    p.max_tokens = 6;
    CHECK(r1.usage.prompt_tokens > 3 * RING); /* the ring wrapped */
    CHECK_EQ_INT(wgllm_query(e, P_MORE, &p, &r2, NULL), WGLLM_STATUS_OK);
    const int lcp = test_common_prefix(eng_model, P, P_MORE, NULL);
    CHECK(lcp > 3 * RING);
    CHECK_EQ_INT(r2.usage.cached_tokens, lcp);
    check_same(&r2, &cold_more);
    /* the routing policy's warmth query says what admission will reuse: nothing for P_SHORT */
    int32_t *ids = NULL;
    int n_ids = 0;
    CHECK_EQ_INT(wgllm_engine_prompt_tokens_query(e, P_SHORT, strlen(P_SHORT), true, &ids, &n_ids, NULL),
                 WGLLM_STATUS_OK);
    if (ids) CHECK_EQ_INT(wgllm_engine_cached_tokens(e, ids, n_ids, NULL), 0);
    free(ids);
    CHECK_EQ_INT(wgllm_query(e, P_SHORT, &p, &r3, NULL), WGLLM_STATUS_OK);
    CHECK(test_common_prefix(eng_model, P_MORE, P_SHORT, NULL) >= 4); /* shared, but its window is gone */
    CHECK_EQ_INT(r3.usage.cached_tokens, 0);
    check_same(&r3, &cold_short);
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(e, &m);
    CHECK_EQ_INT(m.cache_hits, 1);
    wgllm_result_free(&r1), wgllm_result_free(&r2), wgllm_result_free(&r3);
    wgllm_result_free(&cold_more), wgllm_result_free(&cold_short);
    wgllm_engine_free(e);
}

/* Two slots: a request in the other slot copies the prefix of P's slot where
 * its ring kept the window (cached_tokens > 0), and not where it did not. */
TEST(engine_copies_from_another_slot_only_what_the_ring_kept) {
    struct wgllm_result cold_more, cold_short, r1, r2, r3;
    if (!fresh(P_MORE, 6, &cold_more) || !fresh(P_SHORT, 6, &cold_short)) return;
    struct wgllm_engine *e = new_engine(2, 0);
    if (!e) return;
    struct wgllm_request_params p = test_greedy(2);
    p.context_key = "p";
    CHECK_EQ_INT(wgllm_query(e, P, &p, &r1, NULL), WGLLM_STATUS_OK); /* the slot of key p keeps P */
    p.max_tokens = 6;
    p.context_key = "s"; /* the free slot: only a copy of P's slot could give it a prefix */
    CHECK_EQ_INT(wgllm_query(e, P_SHORT, &p, &r3, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(r3.usage.cached_tokens, 0);
    check_same(&r3, &cold_short);
    /* key s's slot again (its own prefix is too short to keep): a copy from P's */
    CHECK_EQ_INT(wgllm_query(e, P_MORE, &p, &r2, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(r2.usage.cached_tokens, test_common_prefix(eng_model, P, P_MORE, NULL));
    check_same(&r2, &cold_more);
    wgllm_result_free(&r1), wgllm_result_free(&r2), wgllm_result_free(&r3);
    wgllm_result_free(&cold_more), wgllm_result_free(&cold_short);
    wgllm_engine_free(e);
}

/* One slot: P is evicted by another conversation into a snapshot of the
 * ring's live cells, and comes back for its continuation with the answer of
 * a fresh engine. */
TEST(engine_snapshot_of_a_ring_restores_the_continuation) {
    struct wgllm_result cold_more, ra, rb, ra2;
    if (!fresh(P_MORE, 6, &cold_more)) return;
    struct wgllm_engine *e = new_engine(1, (size_t)64 << 20);
    if (!e) return;
    struct wgllm_request_params p = test_greedy(2);
    p.context_key = "a";
    CHECK_EQ_INT(wgllm_query(e, P, &p, &ra, NULL), WGLLM_STATUS_OK);
    p.max_tokens = 6;
    p.context_key = "b";
    CHECK_EQ_INT(wgllm_query(e, "In winter the wind rattled the windows", &p, &rb, NULL), WGLLM_STATUS_OK);
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(e, &m);
    CHECK_EQ_INT(m.snapshots_saved, 1);
    /* the slot held P and the token decoded after it: the global layer all
     * of them, the local ones their last RING */
    const struct wgllm_hparams *hp = &eng_model->hp;
    int n_local = 0;
    for (int il = 0; il < hp->n_layer; il++) n_local += eng_model->layers[il].swa;
    const uint64_t n = (uint64_t)ra.usage.prompt_tokens + (uint64_t)ra.n_tokens - 1;
    const uint64_t row = (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v) * 2;
    CHECK_EQ_INT(m.snapshot_bytes_used, row * ((uint64_t)(hp->n_layer - n_local) * n + (uint64_t)n_local * RING));
    fprintf(stderr, "  snapshot of %llu positions: %llu bytes (full caches: %llu)\n", (unsigned long long)n,
            (unsigned long long)m.snapshot_bytes_used, (unsigned long long)(row * hp->n_layer * n));
    p.context_key = "a";
    CHECK_EQ_INT(wgllm_query(e, P_MORE, &p, &ra2, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(ra2.usage.cached_tokens, test_common_prefix(eng_model, P, P_MORE, NULL));
    wgllm_engine_metrics(e, &m);
    CHECK_EQ_INT(m.snapshots_restored, 1);
    check_same(&ra2, &cold_more);
    wgllm_result_free(&ra), wgllm_result_free(&rb), wgllm_result_free(&ra2), wgllm_result_free(&cold_more);
    wgllm_engine_free(e);
}

int main(void) {
    wgllm_base_init();
    wgllm_quant_init();
    RUN(cpu_gemma3_ring_equals_full_and_serves_only_what_it_kept);
    RUN(cpu_gemma2_ring_equals_full);
    if (!getenv("WGLLM_CPU")) { /* the engine and WebGPU once; the CPU's kernel levels again below */
        eng_model = gemma("tiny-gemma3");
        CHECK(eng_model != NULL);
        if (eng_model) {
            RUN(engine_reuses_only_what_the_ring_kept);
            RUN(engine_snapshot_of_a_ring_restores_the_continuation);
            RUN(engine_copies_from_another_slot_only_what_the_ring_kept);
        } else {
            test_failed++;
        }
        wgllm_model_free(eng_model);
        int required;
        struct wgllm_gpu *g = test_webgpu_open("test_kv_window", &required);
        if (g) {
            wgllm_gpu_close(g);
            RUN(webgpu_gemma3_ring_equals_full_serves_only_what_it_kept_and_generates);
            RUN(webgpu_gemma2_ring_equals_full);
        } else if (required) {
            test_failed++;
        }
        if (wgllm_cpu_caps()->avx512vnni && wgllm_cpu_caps()->avx2) test_rerun_with_cpu_cap("avx2");
        test_rerun_with_cpu_cap("scalar");
    }
    return test_summary("test_kv_window");
}
