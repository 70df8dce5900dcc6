/*
 * info.c - what `wgllm serve` says about itself: /v1/models (the served
 * model and the --upstream names) and /metrics (the engine's counters and
 * the server's, as Prometheus text). Server-only, so on cJSON; requests and
 * their answers are the core's OpenAI layer (src/api/).
 */
#include "server/server.h"

#include "wgllm_tools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *srv_models(struct srv *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "wgllm");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", wgllm_model_arch(s->model));
    cJSON_AddNumberToObject(meta, "n_vocab", wgllm_model_n_vocab(s->model));
    cJSON_AddNumberToObject(meta, "n_ctx_train", wgllm_model_n_ctx_train(s->model));
    cJSON_AddNumberToObject(meta, "n_embd", wgllm_model_n_embd(s->model));
    cJSON_AddNumberToObject(meta, "size", (double)wgllm_model_size(s->model));
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, m);
    for (int i = 0; i < wgllm_client_count(s->client); i++) {
        const struct wgllm_endpoint_desc *d = wgllm_client_at(s->client, i);
        if (d->kind == WGLLM_ENDPOINT_LOCAL) continue; /* --route's name for the served model */
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "id", d->name);
        cJSON_AddStringToObject(u, "object", "model");
        cJSON_AddNumberToObject(u, "created", (double)s->created);
        cJSON_AddStringToObject(u, "owned_by", "upstream");
        cJSON *um = cJSON_AddObjectToObject(u, "meta");
        cJSON_AddStringToObject(um, "upstream", d->base_url ? d->base_url : "");
        if (d->model) cJSON_AddStringToObject(um, "upstream_model", d->model);
        cJSON_AddItemToArray(data, u);
    }
    for (int i = 0; i < s->n_routes; i++) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "id", s->routes[i].name);
        cJSON_AddStringToObject(u, "object", "model");
        cJSON_AddNumberToObject(u, "created", (double)s->created);
        cJSON_AddStringToObject(u, "owned_by", "route");
        cJSON *targets = cJSON_AddArrayToObject(cJSON_AddObjectToObject(u, "meta"), "targets");
        for (int k = 0; k < s->routes[i].n; k++) cJSON_AddItemToArray(targets, cJSON_CreateString(s->routes[i].target[k]));
        cJSON_AddItemToArray(data, u);
    }
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

/* ---- metrics -------------------------------------------------------------- */

static void metric(struct wgllm_strbuf *b, const char *name, const char *type, const char *help, double v) {
    wgllm_strbuf_printf(b, "# HELP wgllm_%s %s\n# TYPE wgllm_%s %s\nwgllm_%s %.17g\n", name, help, name, type, name, v);
}

void srv_metric_label(struct wgllm_strbuf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') wgllm_strbuf_putc(b, '\\'), wgllm_strbuf_putc(b, *v);
        else if (*v == '\n') wgllm_strbuf_puts(b, "\\n");
        else wgllm_strbuf_putc(b, *v);
    }
}

/* Each --upstream replica's state (the client's), one labelled line per replica. */
static void upstream_metrics(struct wgllm_strbuf *b, const struct wgllm_client *c) {
    static const struct {
        const char *name, *type, *help;
    } M[] = {
        {"upstream_requests_total", "counter", "Calls sent to an upstream replica, retries included."},
        {"upstream_failures_total", "counter", "Calls or health checks that failed on a replica."},
        {"upstream_retries_total", "counter", "Failed calls sent on to another replica of the upstream."},
        {"upstream_in_flight", "gauge", "Calls running on a replica."},
        {"upstream_cooling", "gauge", "1 while a replica that failed is skipped (its cooldown)."},
        {"upstream_healthy", "gauge", "1 when the replica's last call or health check succeeded."},
        {"upstream_latency_ms", "gauge", "Moving average of a replica's successful calls, in ms."},
    };
    const int n = wgllm_client_count(c);
    bool any = false;
    for (int i = 0; i < n; i++) any |= wgllm_client_replica_count(c, i) > 0;
    if (!any) return;
    for (size_t m = 0; m < sizeof M / sizeof *M; m++) {
        wgllm_strbuf_printf(b, "# HELP wgllm_%s %s\n# TYPE wgllm_%s %s\n", M[m].name, M[m].help, M[m].name, M[m].type);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < wgllm_client_replica_count(c, i); k++) {
                struct wgllm_replica_stats st;
                wgllm_client_replica_stats(c, i, k, &st);
                const double v[] = {(double)st.requests, (double)st.failures, (double)st.retries, st.in_flight,
                                    st.cooling, st.healthy, st.latency_ms};
                wgllm_strbuf_printf(b, "wgllm_%s{upstream=\"", M[m].name);
                srv_metric_label(b, wgllm_client_at(c, i)->name);
                wgllm_strbuf_puts(b, "\",url=\"");
                srv_metric_label(b, st.url);
                wgllm_strbuf_printf(b, "\"} %.17g\n", v[m]);
            }
    }
}

/* Each --route target's decisions and the last decision's estimates, one labelled line per target. */
static void route_metrics(struct wgllm_strbuf *b, struct srv *s) {
    static const struct {
        const char *name, *type, *help;
    } M[] = {
        {"route_decisions_total", "counter", "Requests on a route that the policy sent to this target."},
        {"route_refused_total", "counter", "Requests on a route this target could not take (a local-only field, a prompt too long)."},
        {"route_estimated_ttft_ms", "gauge", "The last decision's estimated time to first token on this target, in ms."},
        {"route_score", "gauge", "The last decision's score of this target (estimated ms plus cost_weight times cost; lower wins)."},
        {"route_prompt_tokens", "gauge", "The last decision's prompt tokens."},
        {"route_cached_tokens", "gauge", "The last decision's prompt tokens already cached on this target (local)."},
        {"route_fallbacks_total", "counter", "Requests this target failed before any token that the local engine then answered."},
    };
    if (!s->n_routes) return;
    pthread_mutex_lock(&s->route_mu);
    for (size_t m = 0; m < sizeof M / sizeof *M; m++) {
        wgllm_strbuf_printf(b, "# HELP wgllm_%s %s\n# TYPE wgllm_%s %s\n", M[m].name, M[m].help, M[m].name, M[m].type);
        for (int i = 0; i < s->n_routes; i++)
            for (int k = 0; k < s->routes[i].n; k++) {
                const struct srv_route_stats *t = &s->routes[i].st[k];
                const double v[] = {(double)t->decisions, (double)t->refused, t->ttft_ms, t->score, t->prompt_tokens,
                                    t->cached_tokens, (double)t->fallbacks};
                wgllm_strbuf_printf(b, "wgllm_%s{route=\"", M[m].name);
                srv_metric_label(b, s->routes[i].name);
                wgllm_strbuf_puts(b, "\",target=\"");
                srv_metric_label(b, s->routes[i].target[k]);
                wgllm_strbuf_printf(b, "\"} %.17g\n", v[m]);
            }
    }
    wgllm_strbuf_puts(b, "# HELP wgllm_route_no_target_total Requests on a route that no target could take.\n"
                         "# TYPE wgllm_route_no_target_total counter\n");
    for (int i = 0; i < s->n_routes; i++) {
        wgllm_strbuf_puts(b, "wgllm_route_no_target_total{route=\"");
        srv_metric_label(b, s->routes[i].name);
        wgllm_strbuf_printf(b, "\"} %llu\n", (unsigned long long)s->routes[i].failed);
    }
    pthread_mutex_unlock(&s->route_mu);
}

char *srv_metrics(struct srv *s) {
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(s->engine, &m);
    struct wgllm_strbuf b = {0};
    metric(&b, "requests_submitted_total", "counter", "Requests accepted by the engine.", (double)m.requests_submitted);
    metric(&b, "requests_finished_total", "counter", "Requests that ended (any reason).", (double)m.requests_finished);
    metric(&b, "requests_cancelled_total", "counter", "Requests cancelled (client gone or asked).",
           (double)m.requests_cancelled);
    metric(&b, "requests_failed_total", "counter", "Requests that ended with an error.", (double)m.requests_failed);
    metric(&b, "requests_refused_total", "counter", "Requests refused because the queue was full.",
           (double)m.requests_refused);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m.prompt_tokens);
    metric(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from a cache.",
           (double)m.prompt_tokens_cached);
    metric(&b, "generated_tokens_total", "counter", "Generated tokens.", (double)m.generated_tokens);
    metric(&b, "cache_hits_total", "counter", "Requests that reused a cached prefix.", (double)m.cache_hits);
    metric(&b, "evictions_total", "counter", "Idle slots evicted for another request.", (double)m.evictions);
    metric(&b, "snapshots_saved_total", "counter", "Prefix snapshots saved.", (double)m.snapshots_saved);
    metric(&b, "snapshots_restored_total", "counter", "Prefix snapshots restored.", (double)m.snapshots_restored);
    metric(&b, "ticks_total", "counter", "Engine scheduler ticks.", (double)m.ticks);
    metric(&b, "context_shifts_total", "counter", "Full slots shifted (--context-shift).", (double)m.context_shifts);
    metric(&b, "device_sampled_tokens_total", "counter",
           "Tokens picked on the device (WebGPU sampling: only their ids came back, not the logits).",
           (double)m.device_sampled_tokens);
    metric(&b, "queue_depth", "gauge", "Requests waiting for a slot.", m.queue_depth);
    metric(&b, "active_slots", "gauge", "Slots serving a request.", m.active_slots);
    metric(&b, "idle_slots", "gauge", "Slots holding a reusable cache.", m.idle_slots);
    metric(&b, "snapshot_bytes", "gauge", "Host memory used by prefix snapshots.", (double)m.snapshot_bytes_used);
    metric(&b, "prefill_tokens_per_second", "gauge", "Moving average of the prefill rate of finished requests.",
           m.prefill_tok_s);
    metric(&b, "decode_tokens_per_second", "gauge", "Moving average of the decode rate of finished requests.",
           m.decode_tok_s);
    metric(&b, "request_duration_ms", "gauge", "Moving average of the time of a finished request, in ms.", m.request_ms);
    metric(&b, "http_requests_total", "counter", "HTTP requests answered.", (double)atomic_load(&s->http_requests));
    metric(&b, "http_errors_total", "counter", "HTTP requests answered with a 4xx or 5xx status.",
           (double)atomic_load(&s->http_errors));
    upstream_metrics(&b, s->client);
    route_metrics(&b, s);
    srv_policy_metrics(s->policy, &b);
    if (b.oom) { /* a partial page would read as metrics gone to zero: answer 500 instead */
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return wgllm_strbuf_take(&b);
}
