/*
 * engine.c - the local engine: one thread serves every request of one model
 * by scheduler ticks (see the Engine section of wgllm.h).
 *
 * Ownership: submitters touch only the queue and a request's cancel flag
 * (under `mu`); everything else -- slots, snapshots, the batch, the state of
 * admitted requests -- belongs to the engine thread, so a tick runs without
 * holding the lock. A request is freed by wgllm_request_wait, after the
 * engine thread has marked it done.
 *
 * Memory: slots, snapshots store and the batch arrays are sized at init; a
 * request allocates its sampler, detokenizer and output arrays when it is
 * admitted, never per token (the output arrays are sized for max_tokens, or
 * grow geometrically when max_tokens is 0).
 *
 * A full slot (context_shift on) is shifted as llama.cpp does; from then on
 * its cache equals a fresh evaluation of its tokens only up to the kept ones
 * (the moved tokens attended to the dropped ones), so reuse stops there.
 *
 * The state it shares with snapshot.c (the KV snapshot store) and
 * snapshot_file.c (its persisted format) is in engine_internal.h.
 */
#include "runtime/engine_internal.h"
#include "base/strbuf.h"

#include <math.h>

/* ---- small helpers --------------------------------------------------------- */

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static bool text_append(struct wgllm_request *r, const char *s, size_t n) {
    if (!wgllm_grow((void **)&r->text, &r->text_cap, r->text_len + n + 1, 1)) return false;
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return true;
}

static void request_destroy(struct wgllm_request *r) {
    if (!r) return;
    free(r->key);
    free(r->part);
    if (r->stops)
        for (int i = 0; i < r->p.n_stop; i++) free(r->stops[i]);
    free(r->stops);
    free(r->prompt);
    free(r->embd_acc);
    wgllm_sampler_free(r->sampler);
    wgllm_constraint_free(r->grammar);
    wgllm_detokenizer_free(r->detok);
    wgllm_stop_matcher_free(r->stop);
    free(r->text);
    free(r->tokens);
    free(r->logprobs);
    free(r->top);
    pthread_cond_destroy(&r->done_cv);
    free(r);
}

/* ---- finishing ------------------------------------------------------------ */

/* Engine thread: ends r, frees its slot for reuse, wakes the waiter. */
static void finish(struct wgllm_engine *e, struct wgllm_request *r, enum wgllm_finish_reason why,
                   enum wgllm_status st, const char *msg) {
    if (r->phase == PHASE_DONE) return;
    if (why != WGLLM_FINISH_ERROR && why != WGLLM_FINISH_CANCELLED && r->kind == REQ_GENERATE && r->stop) {
        size_t n;
        const char *rest = wgllm_stop_matcher_flush(r->stop, &n);
        if (n && r->p.on_token) r->p.on_token(rest, n, -1, 0.0f, r->p.user_data);
        if (!text_append(r, rest, n)) /* a result without its tail would be a wrong text, not a short one */
            why = WGLLM_FINISH_ERROR, st = WGLLM_STATUS_OUT_OF_MEMORY, msg = "out of memory for the generated text";
    }
    /* every result has a text ("" at least), which callers print */
    char *text = r->text ? r->text : dup_str("");
    if (!text && why != WGLLM_FINISH_ERROR)
        why = WGLLM_FINISH_ERROR, st = WGLLM_STATUS_OUT_OF_MEMORY, msg = "out of memory for the generated text";
    r->t_end = wgllm_time_us();
    struct wgllm_result *res = &r->result;
    memset(res, 0, sizeof(*res));
    res->status = st;
    if (msg) snprintf(res->message, sizeof(res->message), "%s", msg);
    res->finish = why;
    res->text = text;
    res->text_len = r->text_len;
    r->text = NULL;
    res->tokens = r->tokens;
    res->logprobs = r->logprobs;
    res->n_tokens = r->n_gen;
    res->top_logprobs = r->top;
    res->n_top = r->top ? r->n_top : 0;
    r->tokens = NULL;
    r->logprobs = NULL;
    r->top = NULL;
    res->usage.prompt_tokens = r->n_prompt;
    res->usage.cached_tokens = r->n_cached;
    res->usage.completion_tokens = r->n_gen;
    struct wgllm_timings *t = &res->timings;
    if (r->t_admit) t->queued_ms = (r->t_admit - r->t_submit) / 1e3;
    if (r->t_first) t->ttft_ms = (r->t_first - r->t_submit) / 1e3;
    if (r->t_prefill_end > r->t_admit && r->t_admit)
        t->prefill_tok_s = (r->n_prompt - r->n_cached) / ((r->t_prefill_end - r->t_admit) / 1e6);
    if (r->n_gen > 1 && r->t_end > r->t_first) t->decode_tok_s = (r->n_gen - 1) / ((r->t_end - r->t_first) / 1e6);
    t->total_ms = (r->t_end - r->t_submit) / 1e3;
    r->phase = PHASE_DONE;
    pthread_mutex_lock(&e->mu);
    if (r->slot >= 0) {
        struct slot *s = &e->slots[r->slot];
        s->state = SLOT_IDLE;
        s->req = NULL;
        s->last_used = ++e->clock;
        e->m.active_slots--;
        e->m.idle_slots++;
    }
    e->m.requests_finished++;
    if (why == WGLLM_FINISH_CANCELLED) e->m.requests_cancelled++;
    if (why == WGLLM_FINISH_ERROR) e->m.requests_failed++;
    e->m.generated_tokens += (uint64_t)r->n_gen;
    /* moving averages for the routing policy's estimates (wgllm.h, "Routes"); prefills of a few
     * tokens measure the tick's overhead, not the rate, and are left out */
    if (r->kind == REQ_GENERATE && r->n_prompt - r->n_cached >= 16 && t->prefill_tok_s > 0)
        e->m.prefill_tok_s = e->m.prefill_tok_s > 0 ? 0.8 * e->m.prefill_tok_s + 0.2 * t->prefill_tok_s : t->prefill_tok_s;
    if (r->kind == REQ_GENERATE && t->decode_tok_s > 0)
        e->m.decode_tok_s = e->m.decode_tok_s > 0 ? 0.8 * e->m.decode_tok_s + 0.2 * t->decode_tok_s : t->decode_tok_s;
    if (r->kind == REQ_GENERATE && (why == WGLLM_FINISH_STOP || why == WGLLM_FINISH_LENGTH))
        e->m.request_ms = e->m.request_ms > 0 ? 0.8 * e->m.request_ms + 0.2 * t->total_ms : t->total_ms;
    r->done = true;
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---- work run on the engine thread for callers (snapshot export/import) --- */

struct ctl_op {
    void (*fn)(struct wgllm_engine *e, void *arg);
    void *arg;
    bool done;
    struct ctl_op *next;
};

/* With e->mu held: runs the queued operations (unlocking around each). */
static void run_control(struct wgllm_engine *e) {
    while (e->ctl_head) {
        struct ctl_op *c = e->ctl_head;
        e->ctl_head = c->next;
        pthread_mutex_unlock(&e->mu);
        c->fn(e, c->arg);
        pthread_mutex_lock(&e->mu);
        c->done = true;
        pthread_cond_broadcast(&e->ctl_cv);
    }
}

static void *engine_main(void *arg);

/* Runs fn(e, arg) on the engine thread between ticks and waits for it (or,
 * without a thread, steps the engine until it ran). */
void wgllm_engine_run_on_thread(struct wgllm_engine *e, void (*fn)(struct wgllm_engine *, void *), void *arg) {
    struct ctl_op c = {fn, arg, false, NULL};
    pthread_mutex_lock(&e->mu);
    struct ctl_op **pp = &e->ctl_head;
    while (*pp) pp = &(*pp)->next;
    *pp = &c;
    pthread_cond_signal(&e->cv);
    while (!c.done) {
        if (!e->p.no_thread) {
            pthread_cond_wait(&e->ctl_cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        engine_main(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- admission: slots and KV reuse ---------------------------------------- */

/* Picks a slot for r (engine thread): the idle slot of its context_key, else
 * a free one, else the least recently used idle one. -1 when all are busy. */
static int pick_slot(struct wgllm_engine *e, const struct wgllm_request *r) {
    int best = -1;
    if (r->key)
        for (int i = 0; i < e->p.n_slots; i++)
            if (e->slots[i].state == SLOT_IDLE && e->slots[i].key && !strcmp(e->slots[i].key, r->key) &&
                wgllm_same_partition(e->slots[i].part, r->part))
                return i;
    for (int i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state == SLOT_FREE) return i;
    for (int i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state == SLOT_IDLE && (best < 0 || e->slots[i].last_used < e->slots[best].last_used)) best = i;
    return best;
}


/* Tells on_prompt_progress that `processed` prompt tokens are in the cache,
 * when that is news; a false answer cancels the request (at the next tick). */
static void prompt_progress(struct wgllm_request *r, int processed) {
    if (!r->p.on_prompt_progress || processed <= r->n_reported) return;
    r->n_reported = processed;
    const struct wgllm_prompt_progress pp = {.total = r->n_prompt, .cached = r->n_cached, .processed = processed,
                                             .time_ms = (double)(wgllm_time_us() - r->t_admit) / 1e3};
    if (!r->p.on_prompt_progress(&pp, r->p.user_data)) atomic_store(&r->cancel, true);
}

/* The backend's word on the pass under way (wgllm_batch.progress): each
 * prompt chunk in it is that share done. */
static void pass_progress(int done, int total, void *user) {
    struct wgllm_engine *e = user;
    for (int i = 0; i < e->n_pf; i++) {
        const struct wgllm_engine_pf *f = &e->b_pf[i];
        prompt_progress(f->r, f->from + (int)((int64_t)f->k * done / total));
    }
}

/* Sets up slot s for r: evicts what it held (snapshotting it), then brings
 * in the longest cached prefix of r's prompt from the slot itself, another
 * slot, or a snapshot. */
static void admit(struct wgllm_engine *e, struct wgllm_request *r, int s) {
    struct slot *sl = &e->slots[s];
    const bool same_part = wgllm_same_partition(sl->part, r->part);
    const bool same_key = same_part && r->key && sl->key && !strcmp(sl->key, r->key);
    if (sl->state == SLOT_IDLE && !same_key && sl->n_tokens > 0) {
        wgllm_snapshot_save(e, s);
        pthread_mutex_lock(&e->mu);
        e->m.evictions++;
        pthread_mutex_unlock(&e->mu);
    }
    /* at least one prompt token is always computed: its logits start generation */
    const int limit = r->kind == REQ_EMBED ? 0 : r->n_prompt - 1;
    /* another partition's cache is never reused: its prefix would tell what it held (cached_tokens, timing) */
    int cached = !same_part ? 0
                            : WGLLM_MIN(wgllm_engine_common_prefix(sl->tokens, wgllm_engine_slot_reusable(sl), r->prompt,
                                                                   r->n_prompt),
                                        limit);
    /* a sliding-window ring that has forgotten the window of the prefix's
     * end cannot provide it: the prompt is computed from 0 (llama.cpp's
     * server reprocesses it whole then) */
    if (!wgllm_context_can_continue(e->ctx, wgllm_context_seq_pos_min(e->ctx, s), cached)) cached = 0;
    int src_slot = -1, src_snap = -1;
    for (int i = 0; i < e->p.n_slots && limit > 0; i++) {
        if (i == s || wgllm_engine_slot_reusable(&e->slots[i]) <= cached ||
            !wgllm_same_partition(e->slots[i].part, r->part))
            continue;
        int c = WGLLM_MIN(wgllm_engine_common_prefix(e->slots[i].tokens, wgllm_engine_slot_reusable(&e->slots[i]), r->prompt, r->n_prompt),
                          limit);
        /* an active slot's cache only grows past its prompt (or shifts past its kept
         * tokens), and the copy is made now, so the prefix copied is stable */
        if (c > cached && wgllm_context_can_continue(e->ctx, wgllm_context_seq_pos_min(e->ctx, i), c))
            cached = c, src_slot = i, src_snap = -1;
    }
    const int snap = wgllm_snapshot_lookup(e, r->part, r->prompt, r->n_prompt, limit, &cached);
    if (snap >= 0) src_snap = snap, src_slot = -1;
    if (src_slot >= 0) {
        wgllm_context_seq_copy(e->ctx, src_slot, s, cached);
        memcpy(sl->tokens, e->slots[src_slot].tokens, sizeof(int32_t) * (size_t)cached);
    } else if (src_snap >= 0) {
        wgllm_snapshot_restore(e, src_snap, s, sl->tokens, cached);
    }
    sl->n_tokens = cached;
    sl->shifted = false; /* what it keeps is an exact prefix */
    free(sl->key);
    sl->key = dup_str(r->key);
    free(sl->part);
    sl->part = dup_str(r->part);
    pthread_mutex_lock(&e->mu);
    if (sl->state == SLOT_IDLE) e->m.idle_slots--;
    e->m.active_slots++;
    sl->state = SLOT_ACTIVE;
    pthread_mutex_unlock(&e->mu);
    sl->req = r;
    sl->last_used = ++e->clock;
    r->slot = s;
    r->n_cached = cached;
    r->n_done_prompt = cached;
    r->phase = PHASE_PREFILL;
    r->t_admit = wgllm_time_us();
    r->n_reported = -1;
    prompt_progress(r, cached);
    pthread_mutex_lock(&e->mu);
    e->m.prompt_tokens += (uint64_t)r->n_prompt;
    e->m.prompt_tokens_cached += (uint64_t)cached;
    if (cached > 0) e->m.cache_hits++;
    if (src_snap >= 0) e->m.snapshots_restored++;
    pthread_mutex_unlock(&e->mu);
}

/* Allocations a generation request needs, at admission. */
static bool prepare_generation(struct wgllm_engine *e, struct wgllm_request *r) {
    r->sampler = wgllm_sampler_init(&r->p.sampling, wgllm_model_n_vocab(e->model));
    r->detok = wgllm_detokenizer_init(e->model);
    r->stop = wgllm_stop_matcher_init((const char *const *)r->stops, r->p.n_stop);
    /* sized by what the slot can hold, not by what the request asked (grown when shifting goes past it) */
    r->gen_cap = r->p.max_tokens > 0 ? WGLLM_MIN(r->p.max_tokens, e->n_ctx) : WGLLM_MIN(256, e->n_ctx);
    r->tokens = malloc(sizeof(int32_t) * (size_t)r->gen_cap);
    r->logprobs = malloc(sizeof(float) * (size_t)r->gen_cap);
    if (!r->sampler || !r->detok || !r->stop || !r->tokens || !r->logprobs) return false;
    if (r->p.sampling.n_probs > 0) {
        r->n_top = WGLLM_MIN(r->p.sampling.n_probs, wgllm_model_n_vocab(e->model));
        r->top = malloc(sizeof(*r->top) * (size_t)r->gen_cap * (size_t)r->n_top);
        if (!r->top) return false;
    }
    /* the prompt counts for the repetition penalties, as in llama.cpp */
    for (int i = 0; i < r->n_prompt; i++) wgllm_sampler_accept(r->sampler, r->prompt[i]);
    /* per request: settings the device implements are sampled there, the others on the host; a
     * grammar's mask goes to the device with each step (run_batch), so it does not decide */
    r->device = wgllm_context_can_sample_rows(e->ctx, &r->p.sampling);
    return true;
}

/* ---- one tick ------------------------------------------------------------- */

/* r's slot is full and r has a token to decode: shift the slot's context
 * (llama.cpp's rule: keep n_keep tokens -- plus the BOS --, drop half of the
 * rest, the oldest) or, with shifting off, end r with CONTEXT_FULL. Returns
 * whether r goes on. */
static bool make_room(struct wgllm_engine *e, struct wgllm_request *r) {
    struct slot *sl = &e->slots[r->slot];
    const int n = sl->n_tokens;
    char msg[256];
    if (!e->p.context_shift && r->p.max_tokens == 0) {
        /* "until the end": a full context ends it as max_tokens would (llama.cpp's server, OpenAI) */
        finish(e, r, WGLLM_FINISH_LENGTH, WGLLM_STATUS_OK, NULL);
        return false;
    }
    if (!e->p.context_shift) {
        snprintf(msg, sizeof(msg),
                 "the context is full: all %d positions of the slot are used (prompt %d tokens, %d generated) "
                 "and context shifting is off (engine parameter context_shift; --context-shift for wgllm serve and chat)", n, r->n_prompt, r->n_gen);
        finish(e, r, WGLLM_FINISH_ERROR, WGLLM_STATUS_CONTEXT_FULL, msg);
        return false;
    }
    const bool bos = n > 0 && sl->tokens[0] == wgllm_token_bos(e->model);
    int keep = e->p.context_keep < 0 ? r->n_prompt : e->p.context_keep + bos;
    keep = WGLLM_MIN(keep, n / 2); /* each shift frees at least a quarter of the context */
    const int discard = (n - keep) / 2;
    struct wgllm_error err;
    if (wgllm_context_seq_shift(e->ctx, r->slot, n, keep, discard, &err) != WGLLM_STATUS_OK) {
        finish(e, r, WGLLM_FINISH_ERROR, err.status, err.message);
        return false;
    }
    memmove(sl->tokens + keep, sl->tokens + keep + discard, sizeof(int32_t) * (size_t)(n - keep - discard));
    sl->n_exact = WGLLM_MIN(wgllm_engine_slot_reusable(sl), keep);
    sl->shifted = true;
    sl->n_tokens = n - discard;
    wgllm_log(WGLLM_LOG_DEBUG, "engine: slot %d full (%d positions): kept %d, discarded %d", r->slot, n, keep, discard);
    pthread_mutex_lock(&e->mu);
    e->m.context_shifts++;
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* Handles r's latest output: its logits (sampled here) or, with logits
 * NULL, the token `dtok` and logprob `dlp` the device picked; streams it
 * and decides whether r goes on. */
static void on_logits(struct wgllm_engine *e, struct wgllm_request *r, const float *logits, int32_t dtok,
                      float dlp) {
    const int64_t now = wgllm_time_us();
    if (r->phase == PHASE_PREFILL) {
        r->phase = PHASE_DECODE;
        r->t_prefill_end = now;
    }
    float lp = dlp;
    int n_top = 0;
    /* top alternatives land in the slot of the next generated token (grown below if needed) */
    if (logits && r->top && r->n_gen == r->gen_cap) {
        struct wgllm_token_logprob *t = realloc(r->top, sizeof(*t) * (size_t)r->gen_cap * 2 * (size_t)r->n_top);
        if (!t) {
            finish(e, r, WGLLM_FINISH_ERROR, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for logprobs");
            return;
        }
        r->top = t;
    }
    const uint8_t *allowed = NULL;
    if (logits && r->grammar && wgllm_constraint_active(r->grammar)) {
        struct wgllm_error gerr;
        if (!(allowed = wgllm_constraint_mask(r->grammar, logits, &gerr))) {
            finish(e, r, WGLLM_FINISH_ERROR, gerr.status, gerr.message);
            return;
        }
    }
    const int32_t tok = !logits ? dtok
                                : wgllm_sampler_sample_masked(r->sampler, logits, allowed,
                                                              r->top ? r->top + (size_t)r->n_gen * r->n_top : NULL,
                                                              &n_top, &lp);
    wgllm_sampler_accept(r->sampler, tok);
    if (r->grammar) {
        struct wgllm_error gerr;
        r->mask = NULL; /* the next step's is made from the state after tok */
        if (wgllm_constraint_accept(r->grammar, tok, &gerr) != WGLLM_STATUS_OK) {
            finish(e, r, WGLLM_FINISH_ERROR, gerr.status, gerr.message);
            return;
        }
    }
    if (!r->t_first) r->t_first = now;
    if (!r->p.ignore_eos && wgllm_token_is_eog(e->model, tok)) {
        finish(e, r, WGLLM_FINISH_STOP, WGLLM_STATUS_OK, NULL);
        return;
    }
    if (r->n_gen == r->gen_cap) {
        int cap = r->gen_cap * 2;
        int32_t *t = realloc(r->tokens, sizeof(int32_t) * (size_t)cap);
        if (t) r->tokens = t;
        float *l = realloc(r->logprobs, sizeof(float) * (size_t)cap);
        if (l) r->logprobs = l;
        if (!t || !l) {
            finish(e, r, WGLLM_FINISH_ERROR, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for generated tokens");
            return;
        }
        r->gen_cap = cap;
    }
    r->tokens[r->n_gen] = tok;
    r->logprobs[r->n_gen] = lp;
    r->n_gen++;
    size_t n;
    const char *piece = wgllm_detokenizer_push(r->detok, tok, &n);
    bool stopped = false;
    const char *out = wgllm_stop_matcher_push(r->stop, piece, n, &n, &stopped);
    if (n || r->p.on_token) {
        if (!text_append(r, out, n)) { /* never a result text with a hole in it */
            finish(e, r, WGLLM_FINISH_ERROR, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the generated text");
            return;
        }
        if (r->p.on_token && !r->p.on_token(out, n, tok, lp, r->p.user_data)) {
            finish(e, r, WGLLM_FINISH_CANCELLED, WGLLM_STATUS_OK, NULL);
            return;
        }
    }
    /* a complete grammar that takes nothing more: the end-of-generation token is all it would allow */
    if (stopped || (r->grammar && wgllm_constraint_complete(r->grammar))) {
        finish(e, r, WGLLM_FINISH_STOP, WGLLM_STATUS_OK, NULL);
        return;
    }
    /* "until the end" with context shifting has no end: one context's worth of tokens is its length */
    const int max_gen = r->p.max_tokens > 0 ? r->p.max_tokens : e->p.context_shift ? e->n_ctx : 0;
    if (max_gen > 0 && r->n_gen >= max_gen) {
        finish(e, r, WGLLM_FINISH_LENGTH, WGLLM_STATUS_OK, NULL);
        return;
    }
    if (e->slots[r->slot].n_tokens >= e->n_ctx && !make_room(e, r)) return; /* no room to decode it */
    r->pending = tok;
}

static void embed_output(struct wgllm_engine *e, struct wgllm_request *r, const float *h) {
    const int E = wgllm_model_n_embd(e->model);
    if (r->pooling == WGLLM_POOLING_MEAN) {
        for (int i = 0; i < E; i++) r->embd_acc[i] += h[i];
        r->embd_count++;
    } else { /* CLS: the first token's, LAST/NONE: the last token's */
        for (int i = 0; i < E; i++) r->embd_acc[i] = h[i];
        r->embd_count = 1;
    }
}

static bool embed_wants_output(const struct wgllm_request *r, int i) {
    if (r->pooling == WGLLM_POOLING_MEAN) return true;
    if (r->pooling == WGLLM_POOLING_CLS) return i == 0;
    return i == r->n_prompt - 1;
}

/* Builds and runs one batch of one kind; returns tokens placed. */
static int run_batch(struct wgllm_engine *e, bool embeddings) {
    int nb = 0;
    const int S = e->p.n_slots;
    /* 0. the grammar masks of the requests sampled on the device, from their parse states before
     * the pass (the host path masks the row it reads back; here only the bits go up) */
    if (!embeddings)
        for (int s = 0; s < S; s++) {
            struct wgllm_request *r = e->slots[s].req;
            if (!r || !r->device || !r->grammar || r->mask || !wgllm_constraint_active(r->grammar) ||
                (r->phase != PHASE_DECODE && r->phase != PHASE_PREFILL))
                continue;
            struct wgllm_error gerr;
            if (!(r->mask = wgllm_constraint_bits(r->grammar, &gerr)))
                finish(e, r, WGLLM_FINISH_ERROR, gerr.status, gerr.message);
        }
    /* 1. one token for every generating stream */
    if (!embeddings)
        for (int s = 0; s < S && nb < e->n_batch; s++) {
            struct wgllm_request *r = e->slots[s].req;
            if (!r || r->phase != PHASE_DECODE) continue;
            e->b_tok[nb] = r->pending;
            e->b_pos[nb] = e->slots[s].n_tokens;
            e->b_seq[nb] = s;
            e->b_out[nb] = true;
            e->b_owner[nb++] = r;
        }
    /* 2. prompt chunks, oldest admission first, within the prefill budget */
    int budget = WGLLM_MIN(e->p.prefill_budget, e->n_batch - nb);
    e->n_pf = 0;
    for (;;) {
        struct wgllm_request *pick = NULL;
        for (int s = 0; s < S; s++) {
            struct wgllm_request *r = e->slots[s].req;
            if (!r || r->phase != PHASE_PREFILL || (r->kind == REQ_EMBED) != embeddings) continue;
            bool placed = false;
            for (int i = 0; i < nb; i++) placed |= e->b_owner[i] == r;
            if (!placed && (!pick || r->t_admit < pick->t_admit)) pick = r;
        }
        if (!pick || budget <= 0) break;
        int k = WGLLM_MIN(budget, pick->n_prompt - pick->n_done_prompt);
        /* an encoder sees a text whole in one pass: never a part of one (the
         * context's n_ctx <= n_batch, so one always fits an empty batch) */
        if (e->model->hp.encoder && k < pick->n_prompt) {
            if (nb > 0) break;
            k = pick->n_prompt;
        }
        if (pick->p.on_prompt_progress && k > 0)
            e->b_pf[e->n_pf++] = (struct wgllm_engine_pf){.r = pick, .from = pick->n_done_prompt, .k = k};
        for (int i = 0; i < k; i++) {
            const int idx = pick->n_done_prompt + i;
            e->b_tok[nb] = pick->prompt[idx];
            e->b_pos[nb] = idx;
            e->b_seq[nb] = pick->slot;
            e->b_out[nb] = embeddings ? embed_wants_output(pick, idx) : idx == pick->n_prompt - 1;
            e->b_owner[nb++] = pick;
        }
        budget -= k;
    }
    if (nb == 0) return 0;
    struct wgllm_batch b = {.n = nb, .token = e->b_tok, .pos = e->b_pos, .seq = e->b_seq, .output = e->b_out,
                            .progress = e->n_pf ? pass_progress : NULL, .progress_user = e};
    /* the outputs of requests sampled on the device: only their ids come back */
    int n_dev = 0;
    if (!embeddings)
        for (int i = 0, j = 0; i < nb; i++) {
            if (!e->b_out[i]) continue;
            struct wgllm_request *r = e->b_owner[i];
            /* the position the draw hashes: the token's attention length, as wgllm_context_generate's */
            e->out_rs[j++] = (struct wgllm_row_sample){.sp = r->device ? &r->p.sampling : NULL,
                                                       .pos = e->b_pos[i] + 1, .mask = r->device ? r->mask : NULL};
            n_dev += r->device;
        }
    struct wgllm_error err;
    const enum wgllm_status dst =
        n_dev ? wgllm_context_decode_batch_sampled(e->ctx, &b, e->out_rs, e->out_tok, e->out_lp, &err)
              : wgllm_context_decode_batch(e->ctx, &b, embeddings, &err);
    if (dst != WGLLM_STATUS_OK) {
        for (int i = 0; i < nb; i++) finish(e, e->b_owner[i], WGLLM_FINISH_ERROR, err.status, err.message);
        return nb;
    }
    /* the cache now holds these tokens */
    int n_out = 0;
    for (int i = 0; i < nb; i++) {
        struct wgllm_request *r = e->b_owner[i];
        struct slot *sl = &e->slots[e->b_seq[i]];
        if (!e->model->hp.encoder) { /* an encoder caches nothing: its slots hold no prefix to reuse or snapshot */
            sl->tokens[e->b_pos[i]] = e->b_tok[i];
            sl->n_tokens = e->b_pos[i] + 1;
        }
        if (r->phase == PHASE_PREFILL) r->n_done_prompt = e->b_pos[i] + 1;
        if (e->b_out[i]) e->out_owner[n_out++] = r;
    }
    for (int i = 0; i < e->n_pf; i++) prompt_progress(e->b_pf[i].r, e->b_pf[i].r->n_done_prompt);
    if (n_dev) { /* counted before any of them ends its request (a waiter then sees its tokens counted) */
        pthread_mutex_lock(&e->mu);
        e->m.device_sampled_tokens += (uint64_t)n_dev;
        pthread_mutex_unlock(&e->mu);
    }
    for (int j = 0; j < n_out; j++) {
        struct wgllm_request *r = e->out_owner[j];
        if (r->phase == PHASE_DONE) continue;
        if (embeddings)
            embed_output(e, r, wgllm_context_output_embd(e->ctx, j));
        else if (n_dev && e->out_rs[j].sp)
            on_logits(e, r, NULL, e->out_tok[j], e->out_lp[j]);
        else
            on_logits(e, r, wgllm_context_output_logits(e->ctx, j), -1, 0.0f);
    }
    /* embeddings complete when the whole text went through */
    if (embeddings)
        for (int s = 0; s < S; s++) {
            struct wgllm_request *r = e->slots[s].req;
            if (!r || r->kind != REQ_EMBED || r->n_done_prompt < r->n_prompt) continue;
            r->t_prefill_end = wgllm_time_us();
            finish(e, r, WGLLM_FINISH_STOP, WGLLM_STATUS_OK, NULL);
        }
    return nb;
}

/* ---- the engine thread ---------------------------------------------------- */

static bool any_active(const struct wgllm_engine *e) {
    for (int s = 0; s < e->p.n_slots; s++)
        if (e->slots[s].state == SLOT_ACTIVE) return true;
    return false;
}

static void *engine_main(void *arg) {
    struct wgllm_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* queued requests that were cancelled never get a slot */
        struct wgllm_request **pp = &e->q_head, *last = NULL;
        while (*pp) {
            struct wgllm_request *r = *pp;
            if (atomic_load(&r->cancel) || e->stopping) {
                *pp = r->next;
                e->n_queue--;
                pthread_mutex_unlock(&e->mu);
                finish(e, r, WGLLM_FINISH_CANCELLED, WGLLM_STATUS_OK, NULL);
                pthread_mutex_lock(&e->mu);
                continue;
            }
            last = r;
            pp = &r->next;
        }
        e->q_tail = last;
        run_control(e);
        if (e->stopping && !any_active(e)) break;
        /* admission in arrival order while slots are available */
        while (e->q_head && !e->stopping) {
            struct wgllm_request *r = e->q_head;
            int s = pick_slot(e, r);
            if (s < 0) break;
            e->q_head = r->next;
            if (!e->q_head) e->q_tail = NULL;
            e->n_queue--;
            pthread_mutex_unlock(&e->mu);
            if (r->kind == REQ_GENERATE && !prepare_generation(e, r)) {
                r->slot = -1;
                finish(e, r, WGLLM_FINISH_ERROR, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory admitting a request");
            } else {
                admit(e, r, s);
            }
            pthread_mutex_lock(&e->mu);
        }
        if (!any_active(e)) {
            if (e->stopping || e->p.no_thread) break;
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        e->m.ticks++;
        pthread_mutex_unlock(&e->mu);

        /* cancellations take effect at the tick boundary */
        for (int s = 0; s < e->p.n_slots; s++) {
            struct wgllm_request *r = e->slots[s].req;
            if (r && (atomic_load(&r->cancel) || e->stopping))
                finish(e, r, WGLLM_FINISH_CANCELLED, WGLLM_STATUS_OK, NULL);
        }
        run_batch(e, false);
        run_batch(e, true);
        pthread_mutex_lock(&e->mu);
        if (e->p.no_thread) break; /* one tick per wgllm_engine_step */
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}


bool wgllm_engine_step(struct wgllm_engine *e) {
    WGLLM_ASSERT(e->p.no_thread);
    engine_main(e);
    pthread_mutex_lock(&e->mu);
    const bool more = e->q_head || any_active(e);
    pthread_mutex_unlock(&e->mu);
    return more;
}

/* With e->mu held: until r is done, sleeping, or stepping the engine when it has no thread. */
static void wait_done_locked(struct wgllm_engine *e, struct wgllm_request *r) {
    while (!r->done) {
        if (!e->p.no_thread) {
            pthread_cond_wait(&r->done_cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        wgllm_engine_step(e);
        pthread_mutex_lock(&e->mu);
    }
}

/* ---- public API ----------------------------------------------------------- */

struct wgllm_engine_params wgllm_engine_default_params(void) {
    struct wgllm_engine_params p = {
        .n_slots = 4,
        .n_ctx = 0,
        .n_batch = 512,
        .prefill_budget = 0,
        .n_threads = 0,
        .max_queue = 256,
        .snapshot_bytes = (size_t)256 << 20,
        .max_snapshots = 16,
        .min_snapshot_tokens = 32,
        .chat_template = NULL,
        .context_shift = false,
        .context_keep = -1,
    };
    return p;
}

struct wgllm_request_params wgllm_request_default_params(void) {
    struct wgllm_request_params p = {.max_tokens = 256, .add_special = true};
    p.sampling = wgllm_sampler_default_params();
    return p;
}

const char *wgllm_engine_backend(const struct wgllm_engine *e) { return wgllm_context_backend(e->ctx); }
uint64_t wgllm_engine_gpu_memory(const struct wgllm_engine *e) { return wgllm_context_gpu_memory(e->ctx); }

void wgllm_engine_free(struct wgllm_engine *e) {
    if (!e) return;
    if (e->thread) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    } else if (e->p.no_thread && e->slots) {
        e->stopping = true; /* what is still queued or running ends as cancelled */
        engine_main(e);
    }
    if (e->slots)
        for (int i = 0; i < e->p.n_slots; i++) {
            free(e->slots[i].key);
            free(e->slots[i].part);
            free(e->slots[i].tokens);
        }
    wgllm_snapshot_clear(e);
    free(e->snaps);
    free(e->slots);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_out);
    free(e->b_owner);
    free(e->b_pf);
    free(e->out_owner);
    free(e->out_rs);
    free(e->out_tok);
    free(e->out_lp);
    wgllm_chat_template_free(e->tmpl);
    wgllm_grammar_vocab_free(e->gvocab);
    pthread_mutex_destroy(&e->gv_mu);
    wgllm_context_free(e->ctx);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->ctl_cv);
    free(e);
}

/* What the template does with a system message and with a call's arguments
 * string (struct wgllm_template_caps), from renderings that would show it. */
static void probe_template(struct wgllm_engine *e, const char *src, size_t len) {
    e->caps.tool_format = (enum wgllm_tool_format)wgllm_chat_tool_format(src, len);
    const struct wgllm_chat_message sm[2] = {{"system", "wgllm-system-probe"}, {"user", "x"}};
    char *text = NULL;
    e->caps.system_role = wgllm_chat_template_render(e->tmpl, sm, 2, true, "", "", &text, NULL) == WGLLM_STATUS_OK &&
                          strstr(text, "wgllm-system-probe") != NULL;
    free(text);
    static const char calls[] =
        "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
        "[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"wgllm_probe\",\"arguments\":"
        "\"{\\\"wgllm_arg\\\": 1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_0\",\"content\":\"y\"}]";
    /* descriptions too: templates concatenate them (Hermes 2 Pro's) */
    static const char tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"wgllm_probe\",\"description\":\"p\","
                                "\"parameters\":{\"type\":\"object\",\"properties\":{\"wgllm_arg\":{\"type\":\"integer\","
                                "\"description\":\"a\"}},\"required\":[\"wgllm_arg\"]}}}]";
    text = NULL;
    e->caps.string_arguments = wgllm_chat_template_render_json(e->tmpl, calls, tools, false, "", "", &text, NULL) ==
                                   WGLLM_STATUS_OK &&
                               strstr(text, "{\"wgllm_arg\": 1}") != NULL;
    free(text);
}

/* The chat template: the engine's override or the GGUF's; a parse failure
 * is kept as the message chat requests get. */
static void load_template(struct wgllm_engine *e) {
    const char *src = e->p.chat_template;
    size_t len = src ? strlen(src) : 0;
    if (!src) {
        const char *builtin;
        if (!(src = wgllm_model_chat_template(e->model, &len, &builtin))) {
            snprintf(e->tmpl_error, sizeof(e->tmpl_error),
                     "the model has no chat template (tokenizer.chat_template) and none was given");
            return;
        }
        if (builtin)
            wgllm_log(WGLLM_LOG_INFO, "engine: no tokenizer.chat_template; using the built-in '%s' template", builtin);
    }
    struct wgllm_error err;
    if (wgllm_chat_template_parse(src, len, &e->tmpl, &err) != WGLLM_STATUS_OK) {
        snprintf(e->tmpl_error, sizeof(e->tmpl_error), "the chat template does not parse: %.200s", err.message);
        return;
    }
    probe_template(e, src, len);
    /* a reasoning model's template writes or strips <think> blocks; one that
     * ends the generation prompt inside <think> (DeepSeek-R1's) has every
     * answer begin in the reasoning: a one-message rendering tells */
    if (len >= 7 && memmem(src, len, "<think>", 7)) {
        e->thinks = 1;
        const struct wgllm_chat_message m = {"user", "x"};
        char *text = NULL;
        if (wgllm_chat_template_render(e->tmpl, &m, 1, true, "", "", &text, NULL) == WGLLM_STATUS_OK) {
            size_t tl = strlen(text);
            while (tl && (text[tl - 1] == '\n' || text[tl - 1] == ' ' || text[tl - 1] == '\r' || text[tl - 1] == '\t')) tl--;
            if (tl >= 7 && !memcmp(text + tl - 7, "<think>", 7)) e->thinks = 2;
        }
        free(text);
    }
}

enum wgllm_status wgllm_engine_init(struct wgllm_model *model, const struct wgllm_engine_params *params,
                                    struct wgllm_engine **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_engine_params p = params ? *params : wgllm_engine_default_params();
    if (p.n_slots <= 0 || p.n_slots > 256 || p.n_batch < 0 || p.prefill_budget < 0 || p.max_queue < 0 ||
        p.max_snapshots < 0 || p.min_snapshot_tokens < 0 || p.context_keep < -1)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "engine parameters out of range (n_slots %d must be 1..256; context_keep %d >= -1; "
                               "others >= 0)", p.n_slots, p.context_keep);
    struct wgllm_engine *e = calloc(1, sizeof(*e));
    if (!e) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    e->model = model;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->gv_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->ctl_cv, NULL);
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = p.n_ctx;
    cp.n_batch = p.n_batch ? p.n_batch : 512;
    cp.n_threads = p.n_threads;
    cp.n_seq = p.n_slots;
    cp.backend = p.backend, cp.gpu_mem = p.gpu_mem;
    /* a sliding-window ring cannot be shifted (wgllm_context_shift): with
     * shifting on, those layers keep their whole caches, as llama.cpp's
     * server needs swa_full for it */
    cp.swa_full = p.context_shift;
    enum wgllm_status st = wgllm_context_init(model, &cp, &e->ctx, err);
    if (st) {
        e->p.n_slots = 0;
        wgllm_engine_free(e);
        return st;
    }
    e->n_ctx = wgllm_context_n_ctx(e->ctx);
    e->n_batch = wgllm_context_n_batch(e->ctx);
    if (p.prefill_budget == 0 || p.prefill_budget > e->n_batch) p.prefill_budget = e->n_batch;
    e->p = p;
    e->slots = calloc((size_t)p.n_slots, sizeof(*e->slots));
    e->snaps = calloc((size_t)WGLLM_MAX(p.max_snapshots, 1), sizeof(*e->snaps));
    e->b_tok = malloc(sizeof(int32_t) * (size_t)e->n_batch);
    e->b_pos = malloc(sizeof(int32_t) * (size_t)e->n_batch);
    e->b_seq = malloc(sizeof(int32_t) * (size_t)e->n_batch);
    e->b_out = malloc(sizeof(bool) * (size_t)e->n_batch);
    e->b_owner = malloc(sizeof(*e->b_owner) * (size_t)e->n_batch);
    e->b_pf = malloc(sizeof(*e->b_pf) * (size_t)p.n_slots);
    e->out_owner = malloc(sizeof(*e->out_owner) * (size_t)e->n_batch);
    e->out_rs = malloc(sizeof(*e->out_rs) * (size_t)e->n_batch);
    e->out_tok = malloc(sizeof(int32_t) * (size_t)e->n_batch);
    e->out_lp = malloc(sizeof(float) * (size_t)e->n_batch);
    bool ok = e->slots && e->snaps && e->b_tok && e->b_pos && e->b_seq && e->b_out && e->b_owner && e->b_pf && e->out_owner &&
              e->out_rs && e->out_tok && e->out_lp;
    for (int i = 0; ok && i < p.n_slots; i++) ok = (e->slots[i].tokens = malloc(sizeof(int32_t) * (size_t)e->n_ctx));
    if (!ok) {
        wgllm_engine_free(e);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the engine's slots");
    }
    load_template(e);
    const struct wgllm_vocab *v = model->vocab;
    if (wgllm_vocab_type(v) == WGLLM_VOCAB_TYPE_SPM || wgllm_vocab_type(v) == WGLLM_VOCAB_TYPE_BPE)
        e->max_piece = (int)wgllm_vocab_max_token_len(v); /* <= VOCAB_MAX_TEXT */
    if (!p.no_thread && pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        e->thread = 0;
        wgllm_engine_free(e);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "cannot start the engine thread");
    }
    *out = e;
    return WGLLM_STATUS_OK;
}

/* Common part of every submit: validation, copies, queueing. Takes ownership of prompt. */
struct embed_cfg {
    enum wgllm_pooling pooling;
    bool normalize;
    double *acc; /* n_embd, ownership passes to the request */
};

static enum wgllm_status submit(struct wgllm_engine *e, enum req_kind kind, int32_t *prompt, int n_prompt,
                                const struct wgllm_request_params *params, const struct embed_cfg *ec,
                                struct wgllm_request **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_request_params p = params ? *params : wgllm_request_default_params();
    if (n_prompt <= 0) {
        free(prompt);
        if (ec) free(ec->acc);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "the prompt is empty");
    }
    if (kind != REQ_EMBED && e->model->hp.encoder) {
        free(prompt);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the model is an embedding model (a %s encoder): it computes embeddings "
                               "(wgllm_embed, /v1/embeddings), not text",
                               e->model->arch_name);
    }
    if (n_prompt >= e->n_ctx + (kind == REQ_EMBED)) {
        free(prompt);
        if (ec) free(ec->acc);
        if (e->model->hp.encoder)
            return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                                   "the input has %d tokens; this %s encoder takes at most %d (its position table has "
                                   "%d)", n_prompt, e->model->arch_name, e->n_ctx, e->model->hp.n_ctx_train);
        return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                               "the prompt has %d tokens; the context holds %d per slot%s%s", n_prompt, e->n_ctx,
                               kind == REQ_EMBED ? "" : " (and at least one more is needed to generate)",
                               e->p.context_shift ? "; context shifting applies to generated tokens, not prompts" : "");
    }
    if (p.max_tokens < 0 || p.n_stop < 0 || (p.n_stop > 0 && !p.stop)) {
        free(prompt);
        if (ec) free(ec->acc);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "max_tokens %d or n_stop %d is invalid",
                               p.max_tokens, p.n_stop);
    }
    /* allocations the sampler sizes by these: no larger than the context and the vocabulary can use */
    if (p.sampling.penalty_last_n > e->n_ctx) p.sampling.penalty_last_n = e->n_ctx;
    if (p.sampling.n_probs > wgllm_model_n_vocab(e->model)) p.sampling.n_probs = wgllm_model_n_vocab(e->model);
    struct wgllm_request *r = calloc(1, sizeof(*r));
    if (!r) {
        free(prompt);
        if (ec) free(ec->acc);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    r->eng = e;
    r->kind = kind;
    r->p = p;
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    r->slot = -1;
    r->phase = PHASE_QUEUED;
    atomic_init(&r->cancel, false);
    pthread_cond_init(&r->done_cv, NULL);
    r->key = dup_str(p.context_key);
    r->p.context_key = NULL;
    r->part = dup_str(p.cache_partition);
    r->p.cache_partition = NULL;
    if (p.grammar && kind == REQ_GENERATE) {
        /* a bad grammar fails the submit, with the reader's line:column message */
        const enum wgllm_status gs = wgllm_constraint_init(e, p.grammar, p.grammar_len, p.grammar_triggers,
                                                           p.n_grammar_triggers, &r->grammar, err);
        if (gs != WGLLM_STATUS_OK) {
            request_destroy(r);
            return gs;
        }
    }
    r->p.grammar = NULL;
    r->p.grammar_triggers = NULL; /* copied by the constraint */
    r->p.n_grammar_triggers = 0;
    if (p.n_stop > 0) {
        r->stops = calloc((size_t)p.n_stop, sizeof(char *));
        for (int i = 0; r->stops && i < p.n_stop; i++) r->stops[i] = dup_str(p.stop[i]);
    }
    r->p.stop = NULL;
    if (ec) {
        r->pooling = ec->pooling;
        r->normalize = ec->normalize;
        r->embd_acc = ec->acc;
    }
    r->t_submit = wgllm_time_us();
    pthread_mutex_lock(&e->mu);
    if (e->n_queue >= e->p.max_queue || e->stopping) {
        e->m.requests_refused++;
        pthread_mutex_unlock(&e->mu);
        request_destroy(r);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "the engine's queue is full (%d requests waiting)",
                               e->p.max_queue);
    }
    e->m.requests_submitted++;
    if (e->q_tail) e->q_tail->next = r; else e->q_head = r;
    e->q_tail = r;
    e->n_queue++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return WGLLM_STATUS_OK;
}

/* The message of a prompt that cannot fit (`what`: "%d tokens" or "%zu bytes, so at least %d tokens"). */
static enum wgllm_status prompt_too_long(const struct wgllm_engine *e, enum req_kind kind, const char *what,
                                         struct wgllm_error *err) {
    if (e->model->hp.encoder)
        return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                               "the input has %s; this %s encoder takes at most %d (its position table has %d)", what,
                               e->model->arch_name, e->n_ctx, e->model->hp.n_ctx_train);
    return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL, "the prompt has %s; the context holds %d per slot%s%s", what,
                           e->n_ctx, kind == REQ_EMBED ? "" : " (and at least one more is needed to generate)",
                           e->p.context_shift ? "; context shifting applies to generated tokens, not prompts" : "");
}

/* Tokenizes a request's text into *out (malloc'd, n_ctx + 1 entries at most),
 * with control tokens parsed (parse_special) except inside the n_plain ranges
 * of `plain` (a chat rendering's request text: see wgllm_engine_submit_chat),
 * bounded by the context: a text whose bytes alone prove it cannot fit is
 * refused before it is tokenized, and the tokens are written into a buffer of
 * the context's size instead of one sized by the text. Never returns OK
 * without tokens: a tokenizer failure (a model without a tokenizer) is an
 * error with a message, whatever the vocabulary left in err. */
static enum wgllm_status tokenize_prompt(struct wgllm_engine *e, enum req_kind kind, const char *text, size_t len,
                                         bool add_special, bool parse_special, const struct wgllm_text_span *plain,
                                         size_t n_plain, int32_t **out, int *n_out, struct wgllm_error *err) {
    *out = NULL;
    *n_out = 0;
    if (wgllm_vocab_type(e->model->vocab) == WGLLM_VOCAB_TYPE_NONE)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the model has no tokenizer (tokenizer.ggml.model is 'none'): it cannot take text");
    const int limit = kind == REQ_EMBED ? e->n_ctx : e->n_ctx - 1; /* most prompt tokens a slot takes */
    char what[96];
    const size_t least = e->max_piece > 0 ? (len + (size_t)e->max_piece - 1) / (size_t)e->max_piece : 0;
    if (least > (size_t)limit) {
        snprintf(what, sizeof(what), "%zu bytes, so at least %zu tokens", len, least);
        return prompt_too_long(e, kind, what, err);
    }
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)limit + 1));
    if (!ids) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d prompt tokens", limit);
    struct wgllm_error terr = {0};
    const int32_t n = plain && len <= (size_t)INT32_MAX / 2
                          ? wgllm_vocab_tokenize_spans(e->model->vocab, text, len, ids, limit, add_special, plain, n_plain)
                          : wgllm_tokenize(e->model, text, len, ids, limit, add_special, parse_special, &terr);
    if (n == INT32_MIN) {
        free(ids);
        if (terr.status == WGLLM_STATUS_OK) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "tokenization failed");
        return wgllm_error_set(err, terr.status, "%s", terr.message);
    }
    if (n < 0) { /* -n tokens needed, more than fit */
        free(ids);
        snprintf(what, sizeof(what), "%d tokens", -n);
        return prompt_too_long(e, kind, what, err);
    }
    *out = ids;
    *n_out = n;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_engine_submit_query(struct wgllm_engine *e, const char *prompt, size_t len,
                                            const struct wgllm_request_params *params, struct wgllm_request **out,
                                            struct wgllm_error *err) {
    *out = NULL;
    if (!prompt) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "query: NULL prompt");
    int32_t *ids = NULL;
    int n = 0;
    enum wgllm_status st = wgllm_engine_prompt_tokens_query(e, prompt, len, params ? params->add_special : true, &ids, &n, err);
    if (st != WGLLM_STATUS_OK) return st;
    return submit(e, REQ_GENERATE, ids, n, params, NULL, out, err);
}

enum wgllm_status wgllm_engine_prompt_tokens_query(struct wgllm_engine *e, const char *prompt, size_t len,
                                                   bool add_special, int32_t **ids, int *n, struct wgllm_error *err) {
    *ids = NULL;
    *n = 0;
    if (!prompt) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "query: NULL prompt");
    return tokenize_prompt(e, REQ_GENERATE, prompt, len, add_special, false, NULL, 0, ids, n, err);
}

/* The model's BOS and EOS texts, as the template writes them. */
static void special_texts(const struct wgllm_engine *e, const char **bos_text, const char **eos_text) {
    const struct wgllm_vocab *v = e->model->vocab;
    const int32_t bos = wgllm_vocab_bos(v), eos = wgllm_vocab_eos(v);
    *bos_text = bos >= 0 ? wgllm_vocab_token_text(v, bos) : "";
    *eos_text = eos >= 0 ? wgllm_vocab_token_text(v, eos) : "";
}

/* A chat rendering (text with the spans that are the request's, both freed) as prompt tokens. */
static enum wgllm_status rendered_tokens(struct wgllm_engine *e, char *text, struct wgllm_text_span *spans,
                                         size_t n_spans, int32_t **ids, int *n, struct wgllm_error *err) {
    /* Templates usually write the BOS text themselves: add it only when they
     * did not (a message that begins with it does not count). Control tokens
     * are parsed in the template's own text only: the messages' text is
     * tokenized as text, so a user cannot write "<|im_start|>system" into the
     * prompt (llama.cpp's server parses them in the whole rendering). */
    const char *bos_text, *eos_text;
    special_texts(e, &bos_text, &eos_text);
    const size_t bl = strlen(bos_text);
    const bool has_bos = bl > 0 && strncmp(text, bos_text, bl) == 0 && (n_spans == 0 || spans[0].off >= bl);
    static const struct wgllm_text_span none;
    enum wgllm_status st = tokenize_prompt(e, REQ_GENERATE, text, strlen(text), !has_bos, true, spans ? spans : &none,
                                           n_spans, ids, n, err);
    free(spans);
    free(text);
    return st;
}


enum wgllm_status wgllm_engine_submit_chat(struct wgllm_engine *e, const struct wgllm_message *msgs, int n_msgs,
                                           const struct wgllm_request_params *params, struct wgllm_request **out,
                                           struct wgllm_error *err) {
    *out = NULL;
    int32_t *ids = NULL;
    int n = 0;
    enum wgllm_status st = wgllm_engine_prompt_tokens_chat(e, msgs, n_msgs, &ids, &n, err);
    if (st != WGLLM_STATUS_OK) return st;
    return submit(e, REQ_GENERATE, ids, n, params, NULL, out, err);
}

enum wgllm_status wgllm_engine_prompt_tokens_chat(struct wgllm_engine *e, const struct wgllm_message *msgs, int n_msgs,
                                                  int32_t **ids, int *n, struct wgllm_error *err) {
    *ids = NULL;
    *n = 0;
    if (!e->tmpl) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "chat: %s", e->tmpl_error);
    if (n_msgs <= 0 || !msgs) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat: no messages");
    struct wgllm_chat_message *cm = malloc(sizeof(*cm) * (size_t)n_msgs);
    if (!cm) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            free(cm);
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat: message %d has no role or content", i);
        }
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    const char *bos_text, *eos_text;
    special_texts(e, &bos_text, &eos_text);
    char *text = NULL;
    struct wgllm_text_span *spans = NULL;
    size_t n_spans = 0;
    enum wgllm_status st = wgllm_chat_template_render_spans(e->tmpl, cm, (size_t)n_msgs, true, bos_text, eos_text,
                                                            &text, &spans, &n_spans, err);
    free(cm);
    if (st) return st;
    return rendered_tokens(e, text, spans, n_spans, ids, n, err);
}

enum wgllm_status wgllm_engine_submit_chat_json(struct wgllm_engine *e, const char *messages_json,
                                                const char *tools_json, const char *kwargs_json,
                                                const struct wgllm_request_params *params,
                                                struct wgllm_request **out, struct wgllm_error *err) {
    *out = NULL;
    int32_t *ids = NULL;
    int n = 0;
    enum wgllm_status st = wgllm_engine_prompt_tokens_chat_json(e, messages_json, tools_json, kwargs_json, &ids, &n, err);
    if (st != WGLLM_STATUS_OK) return st;
    return submit(e, REQ_GENERATE, ids, n, params, NULL, out, err);
}

enum wgllm_status wgllm_engine_prompt_tokens_chat_json(struct wgllm_engine *e, const char *messages_json,
                                                       const char *tools_json, const char *kwargs_json, int32_t **ids,
                                                       int *n, struct wgllm_error *err) {
    *ids = NULL;
    *n = 0;
    if (!e->tmpl) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "chat: %s", e->tmpl_error);
    if (!messages_json) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat: no messages");
    const char *bos_text, *eos_text;
    special_texts(e, &bos_text, &eos_text);
    char *text = NULL;
    struct wgllm_text_span *spans = NULL;
    size_t n_spans = 0;
    enum wgllm_status st = wgllm_chat_template_render_json_spans(e->tmpl, messages_json, tools_json, kwargs_json, true,
                                                                 bos_text, eos_text, &text, &spans, &n_spans, err);
    if (st) return st;
    return rendered_tokens(e, text, spans, n_spans, ids, n, err);
}

struct wgllm_template_caps wgllm_engine_template_caps(const struct wgllm_engine *e) {
    struct wgllm_template_caps c = e->caps;
    c.thinks = e->thinks;
    return c;
}

int wgllm_engine_template_thinks(const struct wgllm_engine *e) { return e->thinks; }

void wgllm_request_cancel(struct wgllm_request *r) {
    if (!r) return;
    struct wgllm_engine *e = r->eng;
    pthread_mutex_lock(&e->mu);
    atomic_store(&r->cancel, true);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

bool wgllm_request_wait_for(struct wgllm_request *r, int timeout_ms) {
    struct wgllm_engine *e = r->eng;
    if (e->p.no_thread) { /* nobody else advances it: one tick per call */
        if (!wgllm_request_done(r)) wgllm_engine_step(e);
        return wgllm_request_done(r);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long ms = timeout_ms > 0 ? timeout_ms : 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&e->mu);
    while (!r->done && pthread_cond_timedwait(&r->done_cv, &e->mu, &ts) == 0) {
    }
    const bool done = r->done;
    pthread_mutex_unlock(&e->mu);
    return done;
}

int wgllm_engine_n_ctx(const struct wgllm_engine *e) { return e->n_ctx; }

bool wgllm_request_done(struct wgllm_request *r) {
    struct wgllm_engine *e = r->eng;
    pthread_mutex_lock(&e->mu);
    const bool done = r->done;
    pthread_mutex_unlock(&e->mu);
    return done;
}

void wgllm_request_wait(struct wgllm_request *r, struct wgllm_result *result) {
    struct wgllm_engine *e = r->eng;
    pthread_mutex_lock(&e->mu);
    wait_done_locked(e, r);
    pthread_mutex_unlock(&e->mu);
    if (result) {
        *result = r->result;
    } else {
        wgllm_result_free(&r->result);
    }
    request_destroy(r);
}

void wgllm_result_free(struct wgllm_result *r) {
    if (!r) return;
    free(r->text);
    free(r->tokens);
    free(r->logprobs);
    free(r->top_logprobs);
    free(r->tool_calls_json);
    free(r->reasoning_content);
    r->tool_calls_json = NULL;
    r->reasoning_content = NULL;
    r->text = NULL;
    r->tokens = NULL;
    r->logprobs = NULL;
    r->top_logprobs = NULL;
}

static enum wgllm_status wait_result(struct wgllm_request *req, struct wgllm_result *result,
                                     struct wgllm_error *err) {
    wgllm_request_wait(req, result);
    if (result->status != WGLLM_STATUS_OK) return wgllm_error_set(err, result->status, "%s", result->message);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_query(struct wgllm_engine *e, const char *prompt, const struct wgllm_request_params *params,
                              struct wgllm_result *result, struct wgllm_error *err) {
    memset(result, 0, sizeof(*result));
    struct wgllm_request *req;
    enum wgllm_status st = wgllm_engine_submit_query(e, prompt, prompt ? strlen(prompt) : 0, params, &req, err);
    if (st) return result->status = st;
    return wait_result(req, result, err);
}

enum wgllm_status wgllm_chat(struct wgllm_engine *e, const struct wgllm_message *msgs, int n_msgs,
                             const struct wgllm_request_params *params, struct wgllm_result *result,
                             struct wgllm_error *err) {
    memset(result, 0, sizeof(*result));
    struct wgllm_request *req;
    enum wgllm_status st = wgllm_engine_submit_chat(e, msgs, n_msgs, params, &req, err);
    if (st) return result->status = st;
    return wait_result(req, result, err);
}

enum wgllm_status wgllm_embed(struct wgllm_engine *e, const char *text, size_t len, enum wgllm_pooling pooling,
                              bool normalize, float *out, int max_out, int *n_out, struct wgllm_error *err) {
    *n_out = 0;
    const int E = wgllm_model_n_embd(e->model);
    if (pooling == WGLLM_POOLING_MODEL) {
        const enum wgllm_status ps = wgllm_model_pooling(e->model, &pooling, err);
        if (ps != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "embed: ");
            return ps;
        }
    }
    if (pooling < WGLLM_POOLING_NONE || pooling > WGLLM_POOLING_LAST)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "embed: unknown pooling %d", (int)pooling);
    if (max_out < E)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "embed: output has room for %d of %d values",
                               max_out, E);
    if (!text) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "embed: NULL text");
    int32_t *ids = NULL;
    int n = 0;
    enum wgllm_status tst = tokenize_prompt(e, REQ_EMBED, text, len, true, false, NULL, 0, &ids, &n, err);
    if (tst != WGLLM_STATUS_OK) return tst;
    double *acc = calloc((size_t)E, sizeof(double));
    if (!acc) {
        free(ids);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    struct wgllm_request_params p = wgllm_request_default_params();
    struct wgllm_request *req;
    const struct embed_cfg ec = {pooling, normalize, acc};
    enum wgllm_status st = submit(e, REQ_EMBED, ids, n, &p, &ec, &req, err);
    if (st) return st;
    pthread_mutex_lock(&e->mu);
    wait_done_locked(e, req);
    pthread_mutex_unlock(&e->mu);
    struct wgllm_result res = req->result;
    if (res.status == WGLLM_STATUS_OK && res.finish != WGLLM_FINISH_STOP)
        wgllm_error_set(err, res.status = WGLLM_STATUS_INVALID_ARGUMENT, "embed: the request was cancelled");
    else if (res.status != WGLLM_STATUS_OK)
        wgllm_error_set(err, res.status, "%s", res.message);
    if (res.status == WGLLM_STATUS_OK) {
        double norm = 0.0;
        const double div = req->embd_count > 0 ? (double)req->embd_count : 1.0;
        for (int i = 0; i < E; i++) norm += (acc[i] / div) * (acc[i] / div);
        norm = normalize && norm > 0.0 ? 1.0 / sqrt(norm) : 1.0;
        for (int i = 0; i < E; i++) out[i] = (float)(acc[i] / div * norm);
        *n_out = E;
    }
    st = res.status;
    wgllm_result_free(&res);
    request_destroy(req);
    return st;
}

void wgllm_engine_metrics(struct wgllm_engine *e, struct wgllm_engine_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->m;
    out->queue_depth = e->n_queue;
    out->n_slots = e->p.n_slots;
    pthread_mutex_unlock(&e->mu);
}
