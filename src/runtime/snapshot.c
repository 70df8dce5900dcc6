/*
 * snapshot.c - the engine's in-memory store of KV prefix snapshots: when a
 * slot is reused for another conversation, what its cache held is saved
 * (wgllm_context_seq_save) so a later request with the same prefix restores
 * it instead of recomputing it. Owns lookup (the longest shared prefix),
 * insert and least-recently-used eviction within the engine's
 * snapshot_bytes / max_snapshots budgets. Runs on the engine thread; the
 * file format that persists the store is snapshot_file.c. Also the question
 * a router asks of the whole cache, slots and snapshots together: how much
 * of a prompt is warm (wgllm_engine_cached_tokens).
 */
#include "runtime/engine_internal.h"

void wgllm_snapshot_drop(struct wgllm_engine *e, int i) {
    e->snap_bytes -= e->snaps[i].bytes;
    e->m.snapshot_bytes_used = e->snap_bytes; /* engine thread or free(): no reader races a gauge */
    free(e->snaps[i].tokens);
    free(e->snaps[i].state);
    free(e->snaps[i].part);
    e->snaps[i] = e->snaps[--e->n_snaps];
}

/* True when a snapshot already covers tokens[0, n) (and, a ring's, still
 * holds the window of n: a longer one may not). */
bool wgllm_snapshot_covered(const struct wgllm_engine *e, const char *part, const int32_t *tokens, int n) {
    for (int i = 0; i < e->n_snaps; i++)
        if (wgllm_same_partition(e->snaps[i].part, part) && e->snaps[i].n >= n &&
            wgllm_engine_common_prefix(e->snaps[i].tokens, e->snaps[i].n, tokens, n) == n &&
            wgllm_context_can_continue(e->ctx, wgllm_context_state_pos_min(e->ctx, e->snaps[i].n), n))
            return true;
    return false;
}

/* Drops least recently used snapshots until one of `bytes` fits; false when it never can. */
bool wgllm_snapshot_make_room(struct wgllm_engine *e, size_t bytes) {
    if (e->p.snapshot_bytes == 0 || e->p.max_snapshots <= 0 || bytes > e->p.snapshot_bytes) return false;
    while (e->n_snaps > 0 && (e->n_snaps >= e->p.max_snapshots || e->snap_bytes + bytes > e->p.snapshot_bytes)) {
        int lru = 0;
        for (int i = 1; i < e->n_snaps; i++)
            if (e->snaps[i].last_used < e->snaps[lru].last_used) lru = i;
        wgllm_snapshot_drop(e, lru);
    }
    return true;
}

/* Stores a snapshot (after wgllm_snapshot_make_room); takes tokens and state. */
void wgllm_snapshot_add(struct wgllm_engine *e, char *part, int32_t *tokens, int n, void *state, size_t bytes) {
    e->snaps[e->n_snaps++] = (struct snapshot){.part = part, .tokens = tokens, .n = n, .state = state, .bytes = bytes,
                                               .last_used = ++e->clock};
    e->snap_bytes += bytes;
    pthread_mutex_lock(&e->mu);
    e->m.snapshot_bytes_used = e->snap_bytes;
    pthread_mutex_unlock(&e->mu);
}

/* Saves what slot s holds before it is reused, when worth it and not already saved. */
void wgllm_snapshot_save(struct wgllm_engine *e, int s) {
    struct slot *sl = &e->slots[s];
    const int n = wgllm_engine_slot_reusable(sl);
    if (n < e->p.min_snapshot_tokens || wgllm_snapshot_covered(e, sl->part, sl->tokens, n)) return;
    /* a sliding-window ring saves its last positions; they must all still be there */
    if (wgllm_context_seq_pos_min(e->ctx, s) > wgllm_context_state_pos_min(e->ctx, n)) return;
    size_t bytes = wgllm_context_seq_state_size(e->ctx, n);
    if (!wgllm_snapshot_make_room(e, bytes)) return;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    void *state = malloc(bytes);
    char *part = sl->part ? strdup(sl->part) : NULL;
    if (!tokens || !state || (sl->part && !part)) {
        free(tokens);
        free(state);
        free(part);
        return;
    }
    memcpy(tokens, sl->tokens, sizeof(int32_t) * (size_t)n);
    wgllm_context_seq_save(e->ctx, s, n, state);
    wgllm_snapshot_add(e, part, tokens, n, state, bytes);
    pthread_mutex_lock(&e->mu);
    e->m.snapshots_saved++;
    pthread_mutex_unlock(&e->mu);
}

void wgllm_snapshot_clear(struct wgllm_engine *e) {
    while (e->n_snaps > 0) wgllm_snapshot_drop(e, e->n_snaps - 1);
}

int wgllm_snapshot_lookup(const struct wgllm_engine *e, const char *part, const int32_t *prompt, int n, int limit,
                          int *cached) {
    int best = -1;
    for (int i = 0; i < e->n_snaps && limit > 0; i++) {
        if (!wgllm_same_partition(e->snaps[i].part, part)) continue;
        int c = WGLLM_MIN(wgllm_engine_common_prefix(e->snaps[i].tokens, e->snaps[i].n, prompt, n), limit);
        /* a ring's snapshot holds only its last positions: not every prefix */
        if (c > *cached && wgllm_context_can_continue(e->ctx, wgllm_context_state_pos_min(e->ctx, e->snaps[i].n), c))
            *cached = c, best = i;
    }
    return best;
}

void wgllm_snapshot_restore(struct wgllm_engine *e, int i, int s, int32_t *tokens, int cached) {
    struct snapshot *sn = &e->snaps[i];
    /* a snapshot restores whole; positions past `cached` are overwritten */
    wgllm_context_seq_load(e->ctx, s, sn->n, sn->state);
    memcpy(tokens, sn->tokens, sizeof(int32_t) * (size_t)cached);
    sn->last_used = ++e->clock;
}

/* ---- what the cache already holds (the routing policy's warmth input) ----- */

struct cached_query {
    const int32_t *tokens;
    int n;
    const char *part;
    int cached;
};

/* Engine thread: the longest prefix admit() would reuse for this prompt -- from any slot of the same
 * partition (admission copies another slot's prefix too, so a context_key adds nothing here) or a
 * snapshot -- capped as admit caps it (one prompt token is always computed). */
static void cached_on_thread(struct wgllm_engine *e, void *arg) {
    struct cached_query *q = arg;
    const int limit = q->n - 1;
    int cached = 0;
    for (int i = 0; i < e->p.n_slots && limit > 0; i++) {
        const struct slot *sl = &e->slots[i];
        if (!wgllm_same_partition(sl->part, q->part)) continue;
        const int c = WGLLM_MIN(wgllm_engine_common_prefix(sl->tokens, wgllm_engine_slot_reusable(sl), q->tokens, q->n), limit);
        /* as admit: a sliding-window ring that forgot the window of the prefix's end cannot provide it */
        if (c > cached && wgllm_context_can_continue(e->ctx, wgllm_context_seq_pos_min(e->ctx, i), c)) cached = c;
    }
    if (limit > 0) wgllm_snapshot_lookup(e, q->part, q->tokens, q->n, limit, &cached);
    q->cached = cached;
}

int wgllm_engine_cached_tokens(struct wgllm_engine *e, const int32_t *tokens, int n, const char *cache_partition) {
    if (!e || !tokens || n <= 1) return 0;
    struct cached_query q = {tokens, n, cache_partition, 0};
    wgllm_engine_run_on_thread(e, cached_on_thread, &q);
    return q.cached;
}
