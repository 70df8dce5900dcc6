/*
 * forward_webgpu.c - the WebGPU backend (its table: wgllm_backend_webgpu_i,
 * backend_impl.h; see forward_webgpu.h) at run time: create and free (the
 * memory plan and the buffers come from webgpu_plan.c, the list of
 * dispatches from webgpu_graph.c; webgpu_internal.h), a pass: write the
 * pass's per-token data, record the list into one command batch sized for
 * the pass's tokens, submit once, read back only the rows whose outputs are
 * wanted, into the context's host rows; generation on the GPU; the sequence
 * operations. Inputs come validated by backend/context.c.
 *
 * The per-token data (token id, cache row, attention length, output rows)
 * go through one "step" buffer, the cos/sin table through another; queue
 * writes are ordered with submits, so a batch is queued without waiting for
 * the previous one unless its outputs are read back.
 *
 * Sequence operations are buffer copies of the KV cache (webgpu_plan.c); a
 * context shift copies and re-rotates through a scratch of one layer's n_ctx
 * rows (WebGPU copies may not overlap within one buffer, and a kernel
 * moving rows in place would race across workgroups).
 */
#include "backend/webgpu/webgpu_internal.h"
#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/rope.h"
#include "model/model.h"
#include "wgllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wgllm_webgpu_ctx_free(struct wgllm_webgpu_ctx *g) {
    if (!g) return;
    free(g->staging);
    if (g->gpu) {
        for (int i = 0; i < g->n_ops; i++) wgllm_gpu_bindgroup_destroy(g->gpu, g->ops[i].bg);
        for (int il = 0; g->shift_bg && il < g->model->hp.n_layer; il++) wgllm_gpu_bindgroup_destroy(g->gpu, g->shift_bg[il]);
        wgllm_gpu_bindgroup_destroy(g->gpu, g->samp_bg);
        wgllm_webgpu_moe_free(g);
        /* buffers go with the device; destroying them first keeps the counters honest */
        for (int i = 0; g->w && i < g->n_w; i++)
            for (int p = 0; p < g->w[i].n_pieces; p++)
                if (i != 7 * g->model->hp.n_layer + 1 || g->w[i].piece[p].buf != g->w[i - 1].piece[p].buf)
                    wgllm_gpu_buffer_destroy(g->gpu, g->w[i].piece[p].buf);
        for (int il = 0; g->kc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->kc[il]);
        for (int il = 0; g->vc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->vc[il]);
        struct wgllm_gpu_buffer *bs[] = {g->vecs, g->x,   g->xn,  g->q,      g->k,    g->v,        g->qr,    g->kr,
                                         g->att,  g->tmp, g->gate, g->up,    g->ffh,  g->logits,   g->step,  g->arena,
                                         g->readback, g->xr, g->rope_cs, g->gelu_tab, g->xo, g->att_o, g->id_rb[0], g->id_rb[1],
                                         g->shift_tmp, g->samp_in, g->samp_out, g->samp_mask, g->sinks};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) wgllm_gpu_buffer_destroy(g->gpu, bs[i]);
        wgllm_gpu_close(g->gpu);
    }
    wgllm_webgpu_moe_free(g); /* host memory only, when there was no device */
    free(g->w);
    free(g->kc);
    free(g->vc);
    free(g->shift_bg);
    free(g->ops);
    free(g->slots);
    free(g->rope_host);
    free(g->step_host);
    free(g->samp_host);
    free(g->samp_row);
    free(g->enc_host);
    free(g);
}

/* Everything a context holds, once: the plan and its buffers, the list of
 * dispatches with its arena and bind groups, then a wait for the uploads. */
static enum wgllm_status create(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
    struct vec_offsets vo;
    enum wgllm_status st = wgllm_webgpu_plan_alloc(g, &vo, err);
    if (st) return st;
    st = wgllm_webgpu_graph_build(g, &vo, err);
    free(vo.attn_norm);
    if (st) return st;
    st = wgllm_webgpu_sync(g, err);
    if (st) return st;
    g->plan.total = wgllm_gpu_bytes_allocated(g->gpu);
    g->plan.n_buffers = wgllm_gpu_buffer_count(g->gpu);
    g->plan.n_pipelines = wgllm_gpu_pipeline_count(g->gpu);
    /* a one-token step: the per-token ops of token 0 and the mat-vecs (not the mat-mats), then the argmax */
    for (int i = 0; i < g->n_ops_logits; i++) {
        const bool runs = g->ops[i].tok <= 0 && g->ops[i].when != WHEN_MANY;
        g->plan.n_dispatches += runs;
        g->plan.n_dispatches_layer += runs && i >= g->layer0_ops[0] && i < g->layer0_ops[1];
    }
    if (!g->model->hp.encoder) g->plan.n_dispatches++;
    g->plan.token_bytes = wgllm_model_decode_bytes(g->model);
    g->plan.n_param_slots = g->n_slots;
    g->plan.out_rows = g->out_cap;
    return WGLLM_STATUS_OK;
}

/* A pass's work goes to the queue in command buffers of at most
 * submit_units dispatch-tokens (a dispatch over `count` tokens is `count`
 * units): a long prefill is otherwise one submission of every layer for
 * every token, minutes of work on a software adapter and past a driver's
 * watchdog on a slow GPU. Cutting a batch between two dispatches changes
 * only when work reaches the queue, which runs command buffers in order;
 * a decode (one token) stays one submission. WGLLM_WEBGPU_SUBMIT_UNITS
 * overrides the bound (tests). */
#define SUBMIT_UNITS 16384

enum wgllm_status wgllm_webgpu_ctx_create(struct wgllm_model *model, const struct wgllm_context_params *params,
                                          struct wgllm_webgpu_ctx **out, char *why, size_t why_cap,
                                          struct wgllm_error *err) {
    *out = NULL;
    const bool autosel = params->backend == WGLLM_BACKEND_AUTO;
    /* formats first: no need to open a device for a model the kernels cannot run */
    char reason[300] = "";
    const bool ok = wgllm_webgpu_formats_ok(model, reason, sizeof reason);
    if (!ok) {
        if (!autosel) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU backend: %s", reason);
        snprintf(why, why_cap, "cpu (auto: %s)", reason);
        return WGLLM_STATUS_OK;
    }
    struct wgllm_gpu *gpu;
    struct wgllm_error e2 = {0};
    if (wgllm_gpu_open(&gpu, &e2)) {
        if (!autosel) {
            if (err) *err = e2;
            return e2.status;
        }
        snprintf(why, why_cap, "cpu (auto: %s)", e2.message);
        return WGLLM_STATUS_OK;
    }
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(gpu);
    if (autosel && info->is_cpu) {
        snprintf(why, why_cap, "cpu (auto: the WebGPU adapter '%s' is a software/CPU adapter)", info->name);
        wgllm_gpu_close(gpu);
        return WGLLM_STATUS_OK;
    }
    struct wgllm_webgpu_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        wgllm_gpu_close(gpu);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    g->model = model;
    g->gpu = gpu;
    g->tune = wgllm_wgsl_tune_for(info);
    g->n_ctx = params->n_ctx > 0 ? params->n_ctx : WGLLM_MIN(model->hp.n_ctx_train, 4096);
    g->n_seq = params->n_seq > 0 ? params->n_seq : 1;
    g->n_batch = params->n_batch > 0 ? params->n_batch : 512;
    g->n_batch = (int)WGLLM_MIN((int64_t)g->n_batch, (int64_t)g->n_ctx * g->n_seq); /* 64-bit: n_ctx may be near INT_MAX */
    if (model->hp.encoder) /* as the CPU encoder: a sequence is one pass, no longer than the position table */
        g->n_ctx = WGLLM_MIN(WGLLM_MIN(g->n_ctx, model->hp.n_ctx_train), g->n_batch);
    g->gpu_mem = params->gpu_mem;
    g->swa_full = params->swa_full;
    const char *su = getenv("WGLLM_WEBGPU_SUBMIT_UNITS");
    const long long sun = su ? atoll(su) : 0;
    g->submit_units = sun > 0 ? (uint64_t)sun : SUBMIT_UNITS;
    enum wgllm_status st = create(g, err);
    if (st) {
        wgllm_error_prefix(err, "WebGPU backend on %s: ", info->name);
        wgllm_webgpu_ctx_free(g);
        return st;
    }
    snprintf(why, why_cap, "webgpu: %s (%s, %s)%s", info->name, info->backend, info->type,
             autosel ? " (auto: a hardware adapter)" : "");
    *out = g;
    return WGLLM_STATUS_OK;
}

/* ---- a pass ------------------------------------------------------------ */

/* Token i's cos/sin rows of position pos: the table the CPU backend
 * rotates by (backend/rope.h, libm's cos/sin, LongRoPE's factors and
 * attention factor), and the local layers' when their RoPE differs. */
static void rope_rows(struct wgllm_webgpu_ctx *g, int i, int pos) {
    const int n_rot = g->model->hp.n_rot;
    wgllm_rope_table_for(g->rope_host + (size_t)i * n_rot, pos, g->model, g->rope_factors, false);
    if (g->rope_swa_off)
        wgllm_rope_table_for(g->rope_host + ((size_t)g->n_batch + i) * n_rot, pos, g->model, g->rope_factors, true);
}

/* Token i at the position of token i - 1 (sequences side by side): its rows. */
static void rope_repeat(struct wgllm_webgpu_ctx *g, int i) {
    const size_t n_rot = (size_t)g->model->hp.n_rot;
    for (int t = 0; t < (g->rope_swa_off ? 2 : 1); t++) {
        float *cs = g->rope_host + ((size_t)t * g->n_batch + i) * n_rot;
        memcpy(cs, cs - n_rot, sizeof(float) * n_rot);
    }
}

/* Uploads the first n rows of each table. */
static void rope_upload(struct wgllm_webgpu_ctx *g, int n) {
    const size_t row = (size_t)g->model->hp.n_rot * sizeof(float);
    wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)n * row);
    if (g->rope_swa_off)
        wgllm_gpu_buffer_write(g->gpu, g->rope_cs, g->rope_swa_off, g->rope_host + (size_t)g->n_batch * g->model->hp.n_rot,
                               (size_t)n * row);
}

static void begin(struct wgllm_webgpu_ctx *g) {
    wgllm_gpu_batch_begin(g->gpu);
    g->batch_units = 0;
}

static enum wgllm_status submit(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
    g->n_submits++;
    return wgllm_gpu_batch_submit(g->gpu, err);
}

static enum wgllm_status record(struct wgllm_webgpu_ctx *g, int i0, int i1, int count, struct wgllm_error *err) {
    for (int i = i0; i < i1; i++) {
        const struct gop *o = &g->ops[i];
        if (o->tok >= count) continue;
        if (o->when == (count >= MM_MIN_TOKENS ? WHEN_FEW : WHEN_MANY)) continue;
        uint32_t x = o->x, y = 1;
        switch (o->grow) {
        case GROW_Y: y = ceil_div((uint64_t)count, o->div); break;
        case GROW_X: x = o->x * (uint32_t)count; break;
        case GROW_XE: x = ceil_div((uint64_t)o->per * (uint64_t)count, o->div); break;
        }
        if (g->batch_units > 0 && g->batch_units + (uint64_t)count > g->submit_units) {
            /* someone watches the pass: a 4-byte copy to read back is the portable way to know
               when the device has done this submission (a mapAsync answers after the work
               that uses its buffer) */
            if (g->progress) wgllm_gpu_copy(g->gpu, g->xn, 0, g->readback, 0, 4);
            enum wgllm_status s = submit(g, err);
            if (!s && g->progress) {
                uint32_t word;
                if (!(s = wgllm_gpu_readback(g->gpu, g->readback, 0, &word, 4, err))) {
                    const int L = g->n_ops_layers;
                    if (i < L) g->progress(L * g->prog_i0 + i * g->prog_span, L * g->prog_n, g->progress_user);
                }
            }
            if (s) return s;
            begin(g);
        }
        wgllm_gpu_dispatch(g->gpu, o->pipe, o->bg, x, y, 1);
        g->batch_units += (uint64_t)count;
    }
    return WGLLM_STATUS_OK;
}

/* One pass over tokens [0, n) of the arrays (n <= n_batch; n_out <= out_cap
 * of them with `want` set): one command batch, one submit; the output rows
 * are read back into `out` (the context's host rows). */
static enum wgllm_status run_pass(struct wgllm_webgpu_ctx *g, const int32_t *tok, const int32_t *pos,
                                  const int32_t *seq, const bool *want, int n, bool embeddings, float *out,
                                  const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                  struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint32_t B = (uint32_t)g->n_batch;
    uint32_t *st = g->step_host;
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        st[i] = (uint32_t)tok[i];
        st[B + i] = (uint32_t)(seq[i] * g->n_ctx + pos[i]);
        st[2 * B + i] = (uint32_t)pos[i] + 1;
        if (g->ring) st[5 * B + i] = (uint32_t)(seq[i] * g->ring + pos[i] % g->ring);
        if (want[i]) st[3 * B + n_out++] = (uint32_t)i;
        if (hp->attn_temp_scale != 0.0f) {
            const float ts = wgllm_hparams_attn_temp(hp, pos[i]);
            memcpy(&st[4 * B + i], &ts, 4);
        }
        if (i > 0 && pos[i] == pos[i - 1]) rope_repeat(g, i);
        else rope_rows(g, i, pos[i]);
    }
    for (int a = 0; a < WGLLM_STEP_REGIONS; a++)
        if (a < 3 || (a == 3 && n_out) || (a == 4 && hp->attn_temp_scale != 0.0f) || (a == 5 && g->ring))
            wgllm_gpu_buffer_write(g->gpu, g->step, (uint64_t)a * B * 4, st + a * B, (size_t)(a == 3 ? n_out : n) * 4);
    rope_upload(g, n);
    begin(g);
    enum wgllm_status s = record(g, 0, g->n_ops_layers, n, err);
    if (s) return s;
    const uint64_t width = embeddings ? (uint64_t)hp->n_embd : (uint64_t)hp->n_vocab;
    int n_host = n_out, n_dev = 0; /* rows read back, rows sampled here */
    if (n_out && rs) {
        n_host = 0;
        for (int j = 0; j < n_out; j++)
            if (!rs[j].sp) g->samp_row[n_host++] = j;
        const uint32_t MW = g->samp_mask_words;
        uint32_t n_mask = 0;
        for (int j = 0; j < n_out; j++) {
            const struct wgllm_sampler_params *sp = rs[j].sp;
            if (!sp) continue;
            uint32_t *w = g->samp_host + 8 * n_dev;
            const bool greedy = sp->temperature <= 0.0f;
            w[0] = (uint32_t)j;
            w[1] = greedy ? 0u : (uint32_t)sp->top_k;
            w[2] = (uint32_t)(sp->seed ^ (sp->seed >> 32)); /* as generate seeds SAMPLE */
            w[3] = (uint32_t)rs[j].pos;
            memcpy(&w[4], &sp->temperature, 4);
            memcpy(&w[5], &sp->top_p, 4);
            memcpy(&w[6], &sp->min_p, 4);
            w[7] = 0;
            if (rs[j].mask) {
                /* the kernel's top-k rounds must each find a candidate: no more rounds than allowed tokens */
                uint32_t allowed = 0;
                for (uint32_t i = 0; i < MW; i++) allowed += (uint32_t)__builtin_popcount(rs[j].mask[i]);
                if (!greedy && w[1] > allowed) w[1] = allowed;
                /* each pass's masks go to the buffer's front: at most out_cap rows, which it holds */
                wgllm_gpu_buffer_write(g->gpu, g->samp_mask, (uint64_t)n_mask * MW * 4, rs[j].mask, (size_t)MW * 4);
                w[7] = ++n_mask;
            }
            g->samp_row[n_out - 1 - n_dev++] = j; /* from the end: the host rows fill the front */
        }
        wgllm_gpu_buffer_write(g->gpu, g->samp_in, 0, g->samp_host, (size_t)n_dev * 8 * 4);
    }
    if (n_out) {
        if ((s = record(g, g->n_ops_layers, embeddings ? g->n_ops_norm : g->n_ops_logits, n_out, err))) return s;
        if (n_host == n_out) {
            wgllm_gpu_copy(g->gpu, embeddings ? g->xn : g->logits, 0, g->readback, 0, (uint64_t)n_out * width * 4);
        } else {
            /* the rows read back, packed at the front of the readback, then the sampled ids */
            for (int i = 0; i < n_host; i++)
                wgllm_gpu_copy(g->gpu, g->logits, (uint64_t)g->samp_row[i] * width * 4, g->readback,
                               (uint64_t)i * width * 4, width * 4);
            wgllm_gpu_dispatch(g->gpu, g->samp_pipe, g->samp_bg, (uint32_t)n_dev, 1, 1);
            wgllm_gpu_copy(g->gpu, g->samp_out, 0, g->readback, (uint64_t)n_host * width * 4, (uint64_t)n_dev * 8);
        }
    }
    s = submit(g, err);
    if (!s && n_host == n_out && n_out)
        s = wgllm_gpu_readback(g->gpu, g->readback, 0, out, (size_t)n_out * width * 4, err);
    if (!s && n_host < n_out) {
        /* into out: k rows then 2 words per sampled row (n_out rows of width >= 2 floats hold them) */
        const size_t head = (size_t)n_host * width;
        s = wgllm_gpu_readback(g->gpu, g->readback, 0, out, head * 4 + (size_t)n_dev * 8, err);
        if (s) return s;
        for (int d = 0; d < n_dev; d++) {
            const int j = g->samp_row[n_out - 1 - d];
            uint32_t w[2];
            memcpy(w, out + head + 2 * (size_t)d, 8);
            s_tok[j] = (int32_t)w[0];
            memcpy(&s_lp[j], &w[1], 4);
        }
        /* each host row to its output's place, the last first (a row only moves up) */
        for (int i = n_host - 1; i >= 0; i--)
            if (g->samp_row[i] != i)
                memmove(out + (size_t)g->samp_row[i] * width, out + (size_t)i * width, width * 4);
    }
    return s;
}

/* The backend's decode: the tokens as passes of at most out_cap outputs
 * each (a pass per group is equivalent: a sequence's tokens come in
 * increasing positions, so a later pass finds the earlier ones' keys and
 * values in the cache). */
static enum wgllm_status decode_rows(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                     const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                     struct wgllm_error *err) {
    const int32_t *tok = ub->token, *pos = ub->pos, *seq = ub->seq;
    const bool *want = ub->output;
    const int n = ub->n;
    const size_t width = ub->embeddings ? (size_t)g->model->hp.n_embd : (size_t)g->model->hp.n_vocab;
    int row0 = 0, i0 = 0;
    while (i0 < n) {
        int i1 = i0, no = 0;
        for (; i1 < n; i1++)
            if (want[i1]) {
                if (no == g->out_cap) break;
                no++;
            }
        g->prog_i0 = i0;
        g->prog_span = i1 - i0;
        g->prog_n = n;
        enum wgllm_status s = run_pass(g, tok + i0, pos + i0, seq + i0, want + i0, i1 - i0, ub->embeddings,
                                       ub->out + row0 * width, rs ? rs + row0 : NULL, s_tok ? s_tok + row0 : NULL,
                                       s_lp ? s_lp + row0 : NULL, err);
        if (s) return s;
        row0 += no;
        i0 = i1;
    }
    return WGLLM_STATUS_OK;
}

/* An encoder's pass (webgpu_encoder.c): all its tokens through the layers,
 * then the gather of the wanted rows, which are read back. */
static enum wgllm_status encoder_decode(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                        struct wgllm_error *err) {
    enum wgllm_status s = wgllm_webgpu_encoder_step(g, ub, err);
    if (s) return s;
    const uint64_t bytes = (uint64_t)ub->n_out * (uint64_t)g->model->hp.n_embd * 4;
    begin(g);
    s = record(g, 0, g->n_ops_layers, ub->n, err);
    if (!s && ub->n_out && !(s = record(g, g->n_ops_layers, g->n_ops_norm, ub->n_out, err)))
        wgllm_gpu_copy(g->gpu, g->xn, 0, g->readback, 0, bytes);
    if (s) return s;
    s = submit(g, err);
    if (!s && ub->n_out) s = wgllm_gpu_readback(g->gpu, g->readback, 0, ub->out, (size_t)bytes, err);
    return s;
}

/* The pass's progress hook for record's cuts, for the length of one decode. */
static enum wgllm_status watched(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                 const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                 struct wgllm_error *err) {
    g->progress = ub->progress;
    g->progress_user = ub->progress_user;
    g->prog_i0 = 0;
    g->prog_span = g->prog_n = ub->n;
    enum wgllm_status s = g->model->hp.encoder ? encoder_decode(g, ub, err) : decode_rows(g, ub, rs, s_tok, s_lp, err);
    g->progress = NULL;
    return s;
}

static enum wgllm_status webgpu_decode(void *b, const struct wgllm_ubatch *ub, struct wgllm_error *err) {
    return watched(b, ub, NULL, NULL, NULL, err);
}

/* The backend's decode_sampled: as decode, each pass's sampled rows picked
 * by one SAMPLE_ROWS dispatch after the logits, only their ids and logprobs
 * read back (with the rows of the others). */
static enum wgllm_status webgpu_decode_sampled(void *b, const struct wgllm_ubatch *ub,
                                               const struct wgllm_row_sample *rs, int32_t *tok, float *lp,
                                               struct wgllm_error *err) {
    return watched(b, ub, rs, tok, lp, err); /* an encoder has no logits: refused there by name */
}

/* ---- generation on the GPU --------------------------------------------- */

/* Queues one decode step of sequence 0 at `pos`: its token is `tok`, or
 * (tok < 0) the id the previous step's argmax left in the step buffer;
 * the step's own argmax goes there too and is copied to id_rb[rb]. */
static enum wgllm_status queue_greedy_step(struct wgllm_webgpu_ctx *g, bool sampled, int32_t tok, int pos, int rb,
                                           struct wgllm_error *err) {
    const uint64_t B = (uint64_t)g->n_batch;
    /* cache row (sequence 0), length, output row, ring row */
    const uint32_t v[3] = {(uint32_t)pos, (uint32_t)pos + 1, 0}; /* cache row (sequence 0), length, output row */
    if (tok >= 0) {
        const uint32_t t = (uint32_t)tok;
        wgllm_gpu_buffer_write(g->gpu, g->step, 0, &t, 4);
    }
    for (int a = 0; a < 3; a++) wgllm_gpu_buffer_write(g->gpu, g->step, (uint64_t)(a + 1) * B * 4, &v[a], 4);
    if (g->model->hp.attn_temp_scale != 0.0f) {
        const float ts = wgllm_hparams_attn_temp(&g->model->hp, pos);
        wgllm_gpu_buffer_write(g->gpu, g->step, 4 * B * 4, &ts, 4);
    }
    if (g->ring) { /* the ring row (sequence 0) */
        const uint32_t rr = (uint32_t)(pos % g->ring);
        wgllm_gpu_buffer_write(g->gpu, g->step, 5 * B * 4, &rr, 4);
    }
    rope_rows(g, 0, pos);
    rope_upload(g, 1);
    begin(g);
    const int pick = g->n_ops_logits + (sampled ? 1 : 0); /* the argmax, or the sampler */
    enum wgllm_status s = record(g, 0, g->n_ops_layers, 1, err);
    if (!s) s = record(g, g->n_ops_layers, g->n_ops_logits, 1, err);
    if (!s) s = record(g, pick, pick + 1, 1, err);
    if (s) return s;
    wgllm_gpu_copy(g->gpu, g->step, 0, g->id_rb[rb], 0, 16);
    return submit(g, err);
}

/* The first sampled token, from the logits row the prompt's pass left on
 * the GPU (one output row): only the SAMPLE dispatch, seeded by position n_past. */
static enum wgllm_status sample_first(struct wgllm_webgpu_ctx *g, const struct wgllm_gen_state *gs, int32_t *tok,
                                      struct wgllm_error *err) {
    if (*gs->n_logits != 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "sampling on the GPU starts from a decode that kept one row of logits (it kept %d)",
                               *gs->n_logits);
    const uint32_t len = (uint32_t)*gs->n_past;
    wgllm_gpu_buffer_write(g->gpu, g->step, 2 * (uint64_t)g->n_batch * 4, &len, 4);
    begin(g);
    enum wgllm_status st = record(g, g->n_ops_logits + 1, g->n_ops_logits + 2, 1, err);
    if (st) return st;
    wgllm_gpu_copy(g->gpu, g->step, 0, g->id_rb[0], 0, 16);
    st = submit(g, err);
    uint32_t id[4];
    if (!st) st = wgllm_gpu_readback(g->gpu, g->id_rb[0], 0, id, 16, err);
    if (!st) *tok = (int32_t)id[0];
    return st;
}

/* What WGLLM_KERNEL_SAMPLE implements of the CPU sampler chain. */
static bool webgpu_can_sample(const struct wgllm_sampler_params *sp) {
    return sp->temperature > 0.0f && sp->top_k > 0 && sp->top_k <= 64 && sp->typical_p >= 1.0f &&
           (sp->repeat_penalty == 1.0f || sp->penalty_last_n == 0) && sp->presence_penalty == 0.0f &&
           sp->frequency_penalty == 0.0f && sp->n_logit_bias == 0 && sp->n_probs == 0;
}

/* The backend's generate (backend.h's wgllm_context_generate; the context
 * has checked that a decode left logits and that n > 0): each step's token
 * picked on the GPU, by the argmax (sp NULL) or the SAMPLE op, whose
 * parameter slot is written here. */
static enum wgllm_status webgpu_generate(void *b, const struct wgllm_sampler_params *sp, struct wgllm_gen_state *gs,
                                         int n, bool (*on_token)(int32_t, void *), void *user, int *n_out,
                                         struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = b;
    *n_out = 0;
    const bool sampled = sp != NULL;
    if (sampled) {
        if (!webgpu_can_sample(sp))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "sampling on the GPU takes temperature > 0, top_k "
                                   "1..64, top_p, min_p and a seed; no penalties, typical_p, logit bias or n_probs");
        const struct gop *o = &g->ops[g->n_ops_logits + 1];
        const union wgllm_kparams sk = {.sample = {.n_vocab = (uint32_t)g->model->hp.n_vocab,
                                                   .len_at = 2 * (uint32_t)g->n_batch,
                                                   .private_slot = KP_PRIVATE_SAMPLE, .top_k = (uint32_t)sp->top_k,
                                                   .seed = (uint32_t)(sp->seed ^ (sp->seed >> 32)),
                                                   .temperature = sp->temperature, .top_p = sp->top_p,
                                                   .min_p = sp->min_p}};
        wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)o->slot * SLOT_BYTES, &sk, sizeof sk);
    }
    const int V = g->model->hp.n_vocab;
    /* the first token: greedy from the logits already on the host; sampled,
     * the GPU samples it too (re-running the last position's head on the
     * logits row it left) */
    int32_t tok = -1;
    const float *l = gs->logits + (size_t)(*gs->n_logits - 1) * V;
    for (int i = 0; i < V; i++)
        if (tok < 0 || l[i] > l[tok]) tok = i;
    if (sampled) {
        enum wgllm_status s0 = sample_first(g, gs, &tok, err);
        if (s0) return s0;
    }
    const int p0 = *gs->n_past;
    enum wgllm_status s = WGLLM_STATUS_OK;
    int queued = 0; /* steps queued: step k consumes token k-1 at position p0 + k - 1 and makes token k */
    for (int k = 0; k < n; k++) {
        /* keep one step ahead: step k+1 is queued before token k is read */
        while (!s && queued < WGLLM_MIN(k + 1, n - 1) && p0 + queued < g->n_ctx) {
            s = queue_greedy_step(g, sampled, queued == 0 ? tok : -1, p0 + queued, (queued + 1) % 2, err);
            queued++;
        }
        if (s) break;
        if (k > 0) {
            uint32_t id[4];
            s = wgllm_gpu_readback(g->gpu, g->id_rb[k % 2], 0, id, 16, err);
            if (s) break;
            tok = (int32_t)id[0];
        }
        (*n_out)++;
        *gs->n_past = p0 + k; /* tokens before this one are in the cache */
        if (!on_token(tok, user)) break;
        if (k + 1 < n && p0 + k >= g->n_ctx) {
            s = wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL, "the context's %d positions are used", g->n_ctx);
            break;
        }
    }
    if (!s && queued > *n_out - 1 && *n_out > 0) { /* a step queued past the end: wait for it, drop its token */
        uint32_t id[4];
        s = wgllm_gpu_readback(g->gpu, g->id_rb[(queued) % 2], 0, id, 16, err);
    }
    *gs->n_logits = 0; /* the host logits are those of the prompt, not of the last step */
    return s;
}

/* ---- sequences ------------------------------------------------------------ */

/* Rows per sequence of layer il's caches: n_ctx, or a local layer's ring. */
static uint64_t layer_cells(const struct wgllm_webgpu_ctx *g, int il) {
    return (uint64_t)(g->ring && g->model->layers[il].swa ? g->ring : g->n_ctx);
}

/* Rows [0, min(n, cells)) of each layer: all n positions of a full cache,
 * the whole ring of a local layer past it. */
static void webgpu_seq_copy(void *b, int src, int dst, int n) {
    struct wgllm_webgpu_ctx *g = b;
    const struct wgllm_hparams *hp = &g->model->hp;
    if (hp->encoder) return; /* an encoder caches nothing: its state is 0 bytes */
    const uint64_t kr = (uint64_t)hp->n_head_kv * hp->head_dim_k * 2, vr = (uint64_t)hp->n_head_kv * hp->head_dim_v * 2;
    /* WebGPU copies never have one buffer as both source and target: go
     * through a scratch activation buffer (free between passes), in pieces */
    struct wgllm_gpu_buffer *via = g->gate;
    const uint64_t cap = wgllm_gpu_buffer_size(via);
    wgllm_gpu_batch_begin(g->gpu);
    for (int il = 0; il < hp->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            struct wgllm_gpu_buffer *c = kv ? g->vc[il] : g->kc[il];
            const uint64_t ss = layer_cells(g, il);
            const uint64_t row = kv ? vr : kr, piece = cap / row * row, bytes = WGLLM_MIN((uint64_t)n, ss) * row;
            WGLLM_ASSERT(piece > 0);
            for (uint64_t o = 0; o < bytes; o += piece) {
                const uint64_t sz = WGLLM_MIN(piece, bytes - o);
                wgllm_gpu_copy(g->gpu, c, src * ss * row + o, via, 0, sz);
                wgllm_gpu_copy(g->gpu, via, 0, c, dst * ss * row + o, sz);
            }
        }
    struct wgllm_error err = {0};
    if (wgllm_gpu_batch_submit(g->gpu, &err)) wgllm_log(WGLLM_LOG_ERROR, "webgpu: sequence copy: %s", err.message);
}

/* `bytes` at byte `off` of cache c to / from buf; saving goes through the
 * readback buffer in pieces. */
static void cache_io(struct wgllm_webgpu_ctx *g, struct wgllm_gpu_buffer *c, uint64_t off, uint64_t bytes,
                     uint64_t row, char *buf, bool save) {
    if (!save) {
        wgllm_gpu_buffer_write(g->gpu, c, off, buf, bytes);
        return;
    }
    const uint64_t piece = wgllm_gpu_buffer_size(g->readback) / row * row;
    for (uint64_t o = 0; o < bytes; o += piece) {
        const uint64_t sz = WGLLM_MIN(piece, bytes - o);
        struct wgllm_error err = {0};
        wgllm_gpu_batch_begin(g->gpu);
        wgllm_gpu_copy(g->gpu, c, off + o, g->readback, 0, sz);
        if (wgllm_gpu_batch_submit(g->gpu, &err) || wgllm_gpu_readback(g->gpu, g->readback, 0, buf + o, sz, &err))
            wgllm_log(WGLLM_LOG_ERROR, "webgpu: sequence save: %s", err.message);
    }
}

/* Snapshots hold, per layer, the keys then the values (rows as the cache
 * holds them) of positions [n - m, n), m = min(n, cells): every position of
 * a full cache, the live rows of a ring in position order (backend_impl.h). */
static void seq_io(struct wgllm_webgpu_ctx *g, int seq, int n, char *buf, bool save) {
    const struct wgllm_hparams *hp = &g->model->hp;
    if (hp->encoder) return; /* nothing cached */
    for (int il = 0; il < hp->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            struct wgllm_gpu_buffer *c = kv ? g->vc[il] : g->kc[il];
            const uint64_t row = (uint64_t)hp->n_head_kv * (kv ? hp->head_dim_v : hp->head_dim_k) * 2;
            const uint64_t cells = layer_cells(g, il), m = WGLLM_MIN((uint64_t)n, cells), c0 = ((uint64_t)n - m) % cells;
            const uint64_t first = WGLLM_MIN(m, cells - c0), off = (uint64_t)seq * cells * row;
            cache_io(g, c, off + c0 * row, first * row, row, buf, save);
            if (m > first) cache_io(g, c, off, (m - first) * row, row, buf + first * row, save);
            buf += m * row;
        }
}

static void webgpu_seq_save(void *b, int seq, int n, void *dst) { seq_io(b, seq, n, dst, true); }
static void webgpu_seq_load(void *b, int seq, int n, const void *src) { seq_io(b, seq, n, (char *)src, false); }

/* As the CPU backend's shift (backend/cpu/forward.c): RoPE angles are linear
 * in the position, so turning a cached key by the delta's rotation gives the
 * key of its new position; the same host table (backend/rope.h's of
 * -discard) makes both backends turn by the same angles. Per layer: the
 * moved K rows go to the scratch and come back turned (ROPE_SHIFT_F16), the
 * V rows go to the scratch and back; all layers in one submit. */
static enum wgllm_status webgpu_seq_shift(void *b, int seq, int n, int keep, int discard, struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = b;
    if (g->model->hp.encoder)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s is an encoder: it keeps no context to shift",
                               g->model->arch_name);
    const int n_move = n - keep - discard;
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint64_t KD = (uint64_t)hp->n_head_kv * hp->head_dim_k, VD = (uint64_t)hp->n_head_kv * hp->head_dim_v;
    /* as the CPU's shift: the same factors and attention factor (which so
     * multiplies the moved keys once more, as llama.cpp's K-shift does) */
    rope_rows(g, 0, -discard);
    rope_upload(g, 1);
    const uint64_t row0 = (uint64_t)seq * g->n_ctx;
    const union wgllm_kparams kp = {.rope_shift = {.words = (uint32_t)((uint64_t)n_move * KD / 2),
                                                   .row_words = (uint32_t)(KD / 2), .head_dim = (uint32_t)hp->head_dim_k,
                                                   .n_rot = (uint32_t)hp->n_rot,
                                                   .y_off = (uint32_t)((row0 + (uint64_t)keep) * KD / 2)}};
    wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)g->shift_slot * SLOT_BYTES, &kp, sizeof kp);
    const uint32_t wg = ceil_div(kp.rope_shift.words, g->tune->wg_elem);
    const uint32_t gx = WGLLM_MIN(wg, wgllm_gpu_get_info(g->gpu)->max_workgroups_per_dim), gy = ceil_div(wg, gx);
    wgllm_gpu_batch_begin(g->gpu);
    for (int il = 0; il < hp->n_layer; il++) {
        wgllm_gpu_copy(g->gpu, g->kc[il], (row0 + keep + discard) * KD * 2, g->shift_tmp, 0, (uint64_t)n_move * KD * 2);
        if (g->model->layers[il].rope)
            wgllm_gpu_dispatch(g->gpu, g->shift_pipe, g->shift_bg[il], gx, gy, 1);
        else /* a layer without RoPE (smollm3): its keys carry no position, they only move */
            wgllm_gpu_copy(g->gpu, g->shift_tmp, 0, g->kc[il], (row0 + keep) * KD * 2, (uint64_t)n_move * KD * 2);
        wgllm_gpu_copy(g->gpu, g->vc[il], (row0 + keep + discard) * VD * 2, g->shift_tmp, 0, (uint64_t)n_move * VD * 2);
        wgllm_gpu_copy(g->gpu, g->shift_tmp, 0, g->vc[il], (row0 + keep) * VD * 2, (uint64_t)n_move * VD * 2);
    }
    enum wgllm_status st = wgllm_gpu_batch_submit(g->gpu, err);
    if (st) wgllm_error_prefix(err, "webgpu: context shift: ");
    return st;
}

/* ---- memory, the table ------------------------------------------------- */

static uint64_t webgpu_host_memory(const void *b) {
    const struct wgllm_webgpu_ctx *g = b;
    const int regions = g->ring ? WGLLM_STEP_REGIONS : WGLLM_STEP_REGIONS - 1;
    return (uint64_t)g->n_batch * (regions * 4 + g->model->hp.n_rot * 4); /* the step and RoPE tables */
}

static uint64_t webgpu_device_memory(const void *b) {
    return wgllm_gpu_bytes_allocated(((const struct wgllm_webgpu_ctx *)b)->gpu);
}

void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan) { *plan = g->plan; }

uint64_t wgllm_webgpu_submits(const struct wgllm_webgpu_ctx *g) { return g->n_submits; }

static enum wgllm_status webgpu_init(struct wgllm_model *model, const struct wgllm_context_params *p, void **out,
                                     int *n_ctx, int *n_batch, char *desc, size_t desc_cap, struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = NULL;
    enum wgllm_status st = wgllm_webgpu_ctx_create(model, p, &g, desc, desc_cap, err);
    *out = g;
    if (g) *n_ctx = g->n_ctx, *n_batch = g->n_batch;
    return st;
}

static void webgpu_free(void *b) { wgllm_webgpu_ctx_free(b); }

const struct wgllm_backend_i wgllm_backend_webgpu_i = {
    .name = "webgpu",
    .init = webgpu_init,
    .free = webgpu_free,
    .decode = webgpu_decode,
    .seq_copy = webgpu_seq_copy,
    .seq_save = webgpu_seq_save,
    .seq_load = webgpu_seq_load,
    .seq_shift = webgpu_seq_shift,
    .host_memory = webgpu_host_memory,
    .device_memory = webgpu_device_memory,
    .can_sample = webgpu_can_sample,
    .generate = webgpu_generate,
    .decode_sampled = webgpu_decode_sampled,
};

struct wgllm_webgpu_ctx *wgllm_context_webgpu(struct wgllm_context *c) {
    return wgllm_context_backend_state(c, &wgllm_backend_webgpu_i);
}
