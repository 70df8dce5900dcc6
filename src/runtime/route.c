/*
 * route.c - the routing policy (wgllm.h, "Routes"): estimated time to
 * first token and cost per candidate, the hard rules, the pick, and the
 * decision as JSON. A pure function of its inputs: the server, the C client
 * and the wasm core gather the inputs their own way and get the same answer.
 */

#include "wgllm.h"
#include "base/base.h" /* WGLLM_MIN */
#include "base/json.h"

#include <stdlib.h>

struct wgllm_route_params wgllm_route_default_params(void) {
    return (struct wgllm_route_params){.cost_weight = 1000.0, .default_prefill_tok_s = 200.0,
                                       .default_request_ms = 2000.0, .default_latency_ms = 500.0,
                                       .busy_factor = 0.25, .expected_completion_tokens = 256};
}

/* A measured rate or time, or the default when there is none (or a nonsense one). */
static double measured(double v, double dflt) { return v > 0 ? v : dflt > 0 ? dflt : 1.0; }

static void estimate(const struct wgllm_route_params *p, struct wgllm_route_candidate *c, int completion) {
    if (c->kind == WGLLM_ROUTE_LOCAL) {
        const int todo = c->prompt_tokens > c->cached_tokens ? c->prompt_tokens - c->cached_tokens : 0;
        const bool slot_free = c->busy_slots < c->n_slots && c->queue_depth == 0;
        const double wait = slot_free ? 0.0
                                      : (c->queue_depth + 1) * measured(c->request_ms, p->default_request_ms) /
                                            (c->n_slots > 0 ? c->n_slots : 1);
        c->ttft_ms = todo / measured(c->prefill_tok_s, p->default_prefill_tok_s) * 1000.0 + wait;
    } else {
        const int in_flight = c->in_flight > 0 ? c->in_flight : 0;
        c->ttft_ms = measured(c->latency_ms, p->default_latency_ms) * (1.0 + p->busy_factor * in_flight);
    }
    /* a local engine's cached tokens are not computed again, so they cost nothing; an upstream's
     * prompt caching (if any) is not known here, so it is priced whole */
    const int prompt = c->prompt_tokens > 0 ? c->prompt_tokens : 0;
    const int cached = c->kind == WGLLM_ROUTE_LOCAL && c->cached_tokens > 0 ? WGLLM_MIN(c->cached_tokens, prompt) : 0;
    const double tokens = (double)(prompt - cached) + completion;
    c->cost_units = (c->cost > 0 ? c->cost : 0.0) * tokens / 1e6;
    c->score = c->ttft_ms + p->cost_weight * c->cost_units;
}

/* Healthy candidates first: a local engine always is, an upstream when a replica is. */
static bool unhealthy(const struct wgllm_route_candidate *c) { return c->kind == WGLLM_ROUTE_REMOTE && !c->healthy; }

int wgllm_route_decide(const struct wgllm_route_params *p, struct wgllm_route_decision *d, int max_tokens) {
    const struct wgllm_route_params dp = wgllm_route_default_params();
    if (!p) p = &dp;
    d->completion_tokens = max_tokens > 0 ? max_tokens : p->expected_completion_tokens > 0 ? p->expected_completion_tokens : 0;
    d->chosen = -1;
    d->fallback_from = -1;
    d->fallback_error[0] = 0;
    for (int i = 0; i < d->n; i++) {
        struct wgllm_route_candidate *c = &d->c[i];
        estimate(p, c, d->completion_tokens);
        if (c->refused) continue;
        if (d->chosen < 0) {
            d->chosen = i;
            continue;
        }
        const struct wgllm_route_candidate *b = &d->c[d->chosen];
        /* strictly better only: an equal one keeps the earlier in the list */
        if (unhealthy(c) != unhealthy(b) ? !unhealthy(c) : c->score < b->score) d->chosen = i;
    }
    return d->chosen;
}

const char *wgllm_route_local_only(const struct wgllm_request_params *p) {
    const struct wgllm_sampler_params def = wgllm_sampler_default_params();
    const struct wgllm_sampler_params *s = &p->sampling;
    return p->context_key ? "context_key"
           : p->ignore_eos ? "ignore_eos"
           : !p->add_special ? "add_special"
           : s->top_k != def.top_k ? "top_k"
           : s->min_p != def.min_p ? "min_p"
           : s->typical_p != def.typical_p ? "typical_p"
           : s->repeat_penalty != def.repeat_penalty ? "repeat_penalty"
           : s->penalty_last_n != def.penalty_last_n ? "penalty_last_n"
           : s->n_probs > 0 ? "n_probs"
           : NULL;
}

char *wgllm_route_json(const struct wgllm_route_decision *d) {
    struct wgllm_strbuf b = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_str(&w, "name", d->route ? d->route : "");
    if (d->chosen >= 0) wgllm_json_w_str(&w, "target", d->c[d->chosen].name);
    else wgllm_json_w_null(&w, "target");
    wgllm_json_w_number(&w, "completion_tokens", d->completion_tokens);
    wgllm_json_w_array(&w, "candidates");
    for (int i = 0; i < d->n; i++) {
        const struct wgllm_route_candidate *c = &d->c[i];
        const bool local = c->kind == WGLLM_ROUTE_LOCAL;
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "target", c->name ? c->name : "");
        wgllm_json_w_str(&w, "kind", local ? "local" : "remote");
        wgllm_json_w_bool(&w, "eligible", !c->refused);
        if (c->refused) wgllm_json_w_str(&w, "refused", c->refused);
        wgllm_json_w_bool(&w, "healthy", !unhealthy(c));
        wgllm_json_w_number(&w, "prompt_tokens", c->prompt_tokens);
        if (local) {
            wgllm_json_w_number(&w, "cached_tokens", c->cached_tokens);
            wgllm_json_w_number(&w, "prefill_tok_s", c->prefill_tok_s);
            wgllm_json_w_number(&w, "request_ms", c->request_ms);
            wgllm_json_w_number(&w, "queue_depth", c->queue_depth);
            wgllm_json_w_number(&w, "busy_slots", c->busy_slots);
            wgllm_json_w_number(&w, "n_slots", c->n_slots);
        } else {
            wgllm_json_w_number(&w, "latency_ms", c->latency_ms);
            wgllm_json_w_number(&w, "in_flight", c->in_flight);
        }
        wgllm_json_w_number(&w, "cost_per_mtok", c->cost);
        wgllm_json_w_number(&w, "estimated_ttft_ms", c->ttft_ms);
        wgllm_json_w_number(&w, "estimated_cost", c->cost_units);
        wgllm_json_w_number(&w, "score", c->score);
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, ']');
    if (d->fallback_from >= 0 && d->fallback_from < d->n) {
        wgllm_json_w_object(&w, "fallback");
        wgllm_json_w_str(&w, "from", d->c[d->fallback_from].name ? d->c[d->fallback_from].name : "");
        wgllm_json_w_str(&w, "error", d->fallback_error);
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, '}');
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return wgllm_strbuf_take(&b);
}
