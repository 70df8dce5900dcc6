/*
 * engine_internal.h - what the parts of the local engine share: engine.c
 * (the scheduler: queue, slots, batching, submit/step, the engine thread),
 * snapshot.c (the in-memory store of KV prefix snapshots: lookup, insert,
 * eviction) and snapshot_file.c (the persisted snapshot format,
 * wgllm_engine_snapshots_export/import). Internal to src/runtime. What one
 * file defines for the others is named wgllm_engine_* / wgllm_snapshot_*.
 *
 * The snapshot store, like the slots, belongs to the engine thread (see
 * engine.c): the wgllm_snapshot_* functions run on it, and callers reach it
 * through wgllm_engine_run_on_thread.
 */
#ifndef WGLLM_RUNTIME_ENGINE_INTERNAL_H
#define WGLLM_RUNTIME_ENGINE_INTERNAL_H

#include "backend/backend.h"
#include "chat/chat.h"
#include "grammar/grammar.h"
#include "model/model.h"

#include <pthread.h>
#include <stdatomic.h>

enum req_kind { REQ_GENERATE, REQ_EMBED };
enum req_phase { PHASE_QUEUED, PHASE_PREFILL, PHASE_DECODE, PHASE_DONE };
enum slot_state { SLOT_FREE, SLOT_IDLE, SLOT_ACTIVE };

struct wgllm_request {
    struct wgllm_engine *eng;
    enum req_kind kind;
    enum req_phase phase;
    struct wgllm_request_params p;
    char *key;         /* copy of p.context_key */
    char *part;        /* copy of p.cache_partition: whose caches it may reuse */
    char **stops;      /* copies of p.stop */
    int32_t *prompt;
    int n_prompt;
    atomic_bool cancel;
    struct wgllm_request *next; /* queue link */

    /* embedding */
    enum wgllm_pooling pooling;
    bool normalize;
    double *embd_acc;
    int embd_count;

    /* engine-thread state */
    int slot;
    int n_done_prompt; /* prompt tokens in the KV cache (cached or computed) */
    int n_reported;    /* the last processed count told to p.on_prompt_progress (-1: none yet) */
    int n_cached;
    int32_t pending;   /* sampled, to be decoded next tick */
    bool device;       /* its tokens are sampled on the device (wgllm_context_can_sample_rows) */
    struct wgllm_sampler *sampler;
    struct wgllm_constraint *grammar; /* p.grammar, parsed at submit; NULL = unconstrained */
    const uint32_t *mask; /* device + grammar: the allowed tokens of its next output; NULL until made */
    struct wgllm_detokenizer *detok;
    struct wgllm_stop_matcher *stop;
    char *text;
    size_t text_len, text_cap;
    int32_t *tokens;
    float *logprobs;
    struct wgllm_token_logprob *top; /* gen_cap x n_top, when n_probs > 0 */
    int n_top;
    int n_gen, gen_cap;
    int64_t t_submit, t_admit, t_prefill_end, t_first, t_end;

    bool done; /* under mu */
    pthread_cond_t done_cv;
    struct wgllm_result result;
};

struct slot {
    enum slot_state state;
    char *key;       /* the context_key of the conversation it holds, or NULL */
    char *part;      /* the cache partition of what it holds (NULL: the shared one) */
    int32_t *tokens; /* what the KV cache of this slot holds, n_ctx capacity */
    int n_tokens;
    bool shifted;    /* a context shift moved tokens since the slot was admitted */
    int n_exact;     /* when shifted: the leading tokens still equal to a fresh evaluation */
    uint64_t last_used;
    struct wgllm_request *req;
};

struct snapshot {
    char *part;      /* the cache partition it belongs to (NULL: the shared one) */
    int32_t *tokens;
    int n;
    void *state;
    size_t bytes;
    uint64_t last_used;
};

struct wgllm_engine {
    struct wgllm_model *model;
    struct wgllm_context *ctx;
    struct wgllm_engine_params p;
    int n_ctx, n_batch;
    int max_piece; /* bytes of the longest token text (SPM, BPE): a text of N bytes has at
                    * least N / max_piece tokens; 0 = no such bound (WordPiece drops spaces) */
    struct wgllm_chat_template *tmpl;
    char tmpl_error[320];
    int thinks; /* wgllm_engine_template_thinks */
    struct wgllm_template_caps caps; /* thinks and tool_format are also the fields above */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    struct wgllm_request *q_head, *q_tail;
    int n_queue;

    struct slot *slots;
    struct snapshot *snaps;
    int n_snaps;
    struct ctl_op *ctl_head; /* under mu: operations for the engine thread */
    pthread_cond_t ctl_cv;
    size_t snap_bytes;
    uint64_t clock;

    /* the batch of one tick */
    int32_t *b_tok, *b_pos, *b_seq;
    bool *b_out;
    struct wgllm_request **b_owner;   /* owner of each token */
    struct wgllm_engine_pf {          /* the batch's prompt chunks: owner, first position, tokens */
        struct wgllm_request *r;
        int from, k;
    } *b_pf;
    int n_pf;
    struct wgllm_request **out_owner; /* owner of each output row */
    struct wgllm_row_sample *out_rs;  /* per output row: sampled on the device or not */
    int32_t *out_tok;                 /* the device's picks and their logprobs */
    float *out_lp;

    struct wgllm_engine_metrics m; /* counters under mu */

    pthread_mutex_t gv_mu;               /* guards gvocab's making */
    struct wgllm_grammar_vocab *gvocab;  /* the token pieces as grammars match them (constrain.c) */
};

static inline int wgllm_engine_common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0, lim = WGLLM_MIN(na, nb);
    while (n < lim && a[n] == b[n]) n++;
    return n;
}

/* Leading tokens of a slot whose KV another request may reuse. */
static inline int wgllm_engine_slot_reusable(const struct slot *sl) { return sl->shifted ? sl->n_exact : sl->n_tokens; }

/* engine.c: runs fn(e, arg) on the engine thread between ticks and waits for
 * it (or, without a thread, steps the engine until it ran). */
void wgllm_engine_run_on_thread(struct wgllm_engine *e, void (*fn)(struct wgllm_engine *, void *), void *arg);

/* constrain.c: a request's grammar (see there). */
struct wgllm_constraint;
/* triggers (n_triggers > 0): a lazy grammar, see wgllm_request_params.grammar_triggers. */
enum wgllm_status wgllm_constraint_init(struct wgllm_engine *e, const char *grammar, size_t len,
                                        const char *const *triggers, int n_triggers, struct wgllm_constraint **out,
                                        struct wgllm_error *err);
/* Whether the grammar applies now (a lazy one only once triggered); mask, bits and complete need it. */
bool wgllm_constraint_active(const struct wgllm_constraint *c);
void wgllm_constraint_free(struct wgllm_constraint *c);
/* allowed[t] for this step (n_vocab bytes); NULL (err set) when nothing is allowed or a budget ran out. */
const uint8_t *wgllm_constraint_mask(struct wgllm_constraint *c, const float *logits, struct wgllm_error *err);
/* The same mask from the parse state alone, as bits for the device's sampler
 * (backend.h's wgllm_row_sample.mask; valid until the next call or accept);
 * NULL (err set) as wgllm_constraint_mask. */
const uint32_t *wgllm_constraint_bits(struct wgllm_constraint *c, struct wgllm_error *err);
enum wgllm_status wgllm_constraint_accept(struct wgllm_constraint *c, int32_t token, struct wgllm_error *err);
/* The grammar is complete and takes nothing more. */
bool wgllm_constraint_complete(const struct wgllm_constraint *c);

/* snapshot.c: the snapshot store (e->snaps, e->n_snaps, e->snap_bytes). */
/* Drops snapshot i (the last one takes its place). */
void wgllm_snapshot_drop(struct wgllm_engine *e, int i);
/* Drops them all (engine teardown). */
void wgllm_snapshot_clear(struct wgllm_engine *e);
/* True when a snapshot already covers tokens[0, n). */
bool wgllm_snapshot_covered(const struct wgllm_engine *e, const char *part, const int32_t *tokens, int n);
/* Drops least recently used snapshots until one of `bytes` fits; false when it never can. */
bool wgllm_snapshot_make_room(struct wgllm_engine *e, size_t bytes);
/* Stores a snapshot (after wgllm_snapshot_make_room); takes tokens and state. */
void wgllm_snapshot_add(struct wgllm_engine *e, char *part, int32_t *tokens, int n, void *state, size_t bytes);
/* Saves what slot s holds before it is reused, when worth it and not already saved. */
void wgllm_snapshot_save(struct wgllm_engine *e, int s);
/* The snapshot sharing the longest prefix with prompt[0, n) (capped at
 * `limit`) that is longer than *cached: its index, with *cached raised to that
 * length; -1 (and *cached unchanged) when none is longer. */
int wgllm_snapshot_lookup(const struct wgllm_engine *e, const char *part, const int32_t *prompt, int n, int limit,
                          int *cached);
/* Caches of one partition are reused only by requests of the same one (both NULL: the shared one). */
static inline bool wgllm_same_partition(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }
/* Loads snapshot i into sequence s and copies its first `cached` tokens to
 * `tokens`; marks it used. */
void wgllm_snapshot_restore(struct wgllm_engine *e, int i, int s, int32_t *tokens, int cached);

#endif
