/*
 * wgllm_route.h - the routing policy: which target of a route (the local
 * engine or one of several OpenAI-compatible upstreams) takes a request.
 *
 * One implementation, dependency-free (src/runtime/route.c, in libwgllm and
 * the wasm core), used by `wgllm serve --route`, by the C client's routes
 * (src/client/client.h, wgllm_client_add_route) and by the browser package's
 * createRouter. The caller gathers each candidate's inputs (what the engine
 * and the replica table measure); the policy is a pure function of them, so
 * the same inputs always give the same decision.
 *
 * Estimated time to first token (ms):
 *   local:  (prompt_tokens - cached_tokens) / prefill_tok_s * 1000 + wait_ms,
 *           wait_ms = 0 when a slot is free and nothing is queued, else
 *           (queue_depth + 1) * request_ms / n_slots
 *           (prefill_tok_s, request_ms: the engine's moving averages;
 *           default_prefill_tok_s / default_request_ms before any were measured)
 *   remote: latency_ms * (1 + busy_factor * in_flight)
 *           (latency_ms: the moving average of its fastest healthy replica's
 *           time to first piece; default_latency_ms before any was measured)
 * Cost (in the unit of `cost`, e.g. dollars):
 *   cost * (prompt_tokens + completion_tokens) / 1e6, with completion_tokens the
 *   request's max_tokens, or expected_completion_tokens when it has none; a
 *   local engine's cached tokens are left out (they are not computed again).
 * Score (lower wins): ttft_ms + cost_weight * cost_units.
 *
 * Hard rules, before the score: a candidate with `refused` set (a local-only
 * field for an upstream, a prompt longer than the local context, an
 * operation the endpoint lacks) never wins; an upstream none of whose
 * replicas is healthy and out of cooldown loses to every healthy candidate
 * (the local engine is always healthy). Ties go to the earlier candidate in
 * the route's list.
 */
#ifndef WGLLM_ROUTE_H
#define WGLLM_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "wgllm.h"

#define WGLLM_ROUTE_MAX_CANDIDATES 16

enum wgllm_route_kind {
    WGLLM_ROUTE_LOCAL,  /* a wgllm_engine in this process */
    WGLLM_ROUTE_REMOTE, /* an OpenAI-compatible upstream (one or more replicas) */
};

struct wgllm_route_params {
    double cost_weight;            /* ms of estimated TTFT one unit of cost is worth (default 1000) */
    double default_prefill_tok_s;  /* local prefill rate before one was measured (default 200) */
    double default_request_ms;     /* local request time before one was measured (default 2000) */
    double default_latency_ms;     /* upstream latency before one was measured (default 500) */
    double busy_factor;            /* upstream slowdown per call in flight (default 0.25) */
    int expected_completion_tokens; /* completion tokens priced when max_tokens is unset (default 256) */
};

struct wgllm_route_params wgllm_route_default_params(void);

struct wgllm_route_candidate {
    /* ---- inputs (the caller fills these) ---- */
    const char *name;          /* the target's name (not owned) */
    enum wgllm_route_kind kind;
    const char *refused;       /* why it cannot take this request; NULL = it can (not owned) */
    double cost;               /* per 1M tokens (prompt + completion), in any unit; 0 = free */
    int prompt_tokens;         /* the request's prompt tokens (remote: the local count, or an estimate) */
    /* local */
    int cached_tokens;         /* leading prompt tokens already in a slot or snapshot (wgllm_engine_cached_tokens) */
    double prefill_tok_s;      /* measured prefill rate; 0 = none yet */
    double request_ms;         /* measured time of a whole request; 0 = none yet */
    int queue_depth;           /* requests waiting for a slot */
    int busy_slots, n_slots;   /* slots generating / all slots */
    /* remote */
    double latency_ms;         /* measured time to first piece; 0 = none yet */
    int in_flight;             /* calls in flight to it */
    bool healthy;              /* some replica is healthy and not cooling down */
    /* ---- outputs (wgllm_route_decide fills these) ---- */
    double ttft_ms;            /* estimated time to first token */
    double cost_units;         /* estimated cost of the request */
    double score;              /* ttft_ms + cost_weight * cost_units */
};

/* The decision of one request: its candidates (inputs and outputs) and the
 * one chosen. */
struct wgllm_route_decision {
    const char *route;         /* the route's name (not owned) */
    struct wgllm_route_candidate c[WGLLM_ROUTE_MAX_CANDIDATES];
    int n;
    int chosen;                /* index into c, -1 when every candidate refused */
    int completion_tokens;     /* what the cost was computed with */
    /* set by a caller whose chosen target failed before any of the answer was
     * delivered and that sent the request to another (then `chosen`): */
    int fallback_from;         /* that target's index, -1 = none (wgllm_route_decide sets -1) */
    char fallback_error[256];  /* why it failed */
    char notes[WGLLM_ROUTE_MAX_CANDIDATES][192]; /* storage a gatherer may point c[i].refused at */
};

/* Fills every candidate's outputs and d->chosen (also returned): the
 * lowest (unhealthy, score, index) among those not refused; -1 when all are. */
int wgllm_route_decide(const struct wgllm_route_params *p, struct wgllm_route_decision *d, int max_tokens);

/* The decision as a JSON object (malloc'd, NULL when out of memory):
 * {"name", "target" (null when none), "candidates": [{"target", "kind":
 * "local"|"remote", "eligible", "refused"?, "healthy", "prompt_tokens",
 * "cached_tokens", "prefill_tok_s", "queue_depth", "busy_slots", "latency_ms",
 * "in_flight", "cost_per_mtok", "estimated_ttft_ms", "estimated_cost",
 * "score"}], "fallback"?: {"from", "error"}} -- the `wgllm.route` field of
 * answers. */
char *wgllm_route_json(const struct wgllm_route_decision *d);

/* The first parameter of p that only a local engine honours (an OpenAI-
 * compatible upstream has no such field, or no way to be told): context_key,
 * ignore_eos, add_special = false, and top_k, min_p, typical_p,
 * repeat_penalty, penalty_last_n, n_probs away from
 * wgllm_sampler_default_params(); NULL when there is none. A request with
 * one refuses every remote target. */
const char *wgllm_route_local_only(const struct wgllm_request_params *p);

#endif
