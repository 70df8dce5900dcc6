/*
 * route.c - `wgllm serve --route NAME=TARGET,...`: a `model` that names a
 * route is served by the target the routing policy (wgllm.h, "Routes")
 * picks: the local engine ("local") or an --upstream. The inputs are the
 * client's (wgllm_client_route: the engine's cached prefix of this prompt in
 * the tenant's cache partition, its queue and measured rates; each
 * upstream's replica latency, load and health, its cost); what is the
 * server's own is the request: parsed once for the local engine and once
 * for an upstream, the fields an upstream cannot take (grammar, json_schema,
 * logprobs, context_key, sampler knobs OpenAI lacks) refusing the upstreams,
 * and the decision's counters for /metrics. A request sent to an upstream
 * keeps its local parse when the local engine could take it: stream.c falls
 * back to it when the upstream fails before anything reached the client.
 */
#include "server/server.h"

#include "wgllm_tools.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An environment variable WGLLM_<KIND>_<NAME>_<WHAT> (NAME upper-cased, other characters as _). */
static void env_name(char *out, size_t cap, const char *kind, const char *name, const char *what) {
    size_t n = (size_t)snprintf(out, cap, "WGLLM_%s_", kind);
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = (char)(isalnum((unsigned char)*p) ? toupper((unsigned char)*p) : '_');
    snprintf(out + n, cap - n, "_%s", what);
}

bool srv_env_number(const char *var, double lo, double hi, double *out, char *msg, size_t cap) {
    const char *v = getenv(var);
    if (!v || !*v) return true;
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || *end || !(x >= lo && x <= hi)) {
        snprintf(msg, cap, "%s=%.100s: expected a number from %g to %g", var, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool srv_upstream_cost(const char *name, double *cost, char *msg, size_t cap) {
    char var[200];
    env_name(var, sizeof var, "UPSTREAM", name, "COST");
    return srv_env_number(var, 0, 1e12, cost, msg, cap);
}

bool srv_routes_setup(struct srv *s, const char *const *specs, int n, char *msg, size_t cap) {
    if (n == 0) return true;
    if (!(s->routes = calloc((size_t)n, sizeof *s->routes))) return snprintf(msg, cap, "out of memory"), false;
    pthread_mutex_init(&s->route_mu, NULL);
    for (int i = 0; i < n; i++) {
        struct srv_route *r = &s->routes[i];
        if (strlen(specs[i]) >= sizeof r->spec) {
            snprintf(msg, cap, "--route %.60s...: longer than %zu bytes", specs[i], sizeof r->spec - 1);
            return false;
        }
        snprintf(r->spec, sizeof r->spec, "%s", specs[i]);
        char *eq = strchr(r->spec, '=');
        if (!eq || eq == r->spec || !eq[1]) {
            snprintf(msg, cap, "--route %.200s: expected NAME=TARGET[,TARGET...] (targets: local or --upstream names)",
                     specs[i]);
            return false;
        }
        *eq = 0;
        r->name = r->spec;
        if (!strcmp(r->name, s->model_id) || !strcmp(r->name, SRV_LOCAL_TARGET)) {
            snprintf(msg, cap, "--route %.200s: the name '%s' is the served model's", specs[i], r->name);
            return false;
        }
        for (char *p = eq + 1; p;) {
            char *comma = strchr(p, ',');
            if (comma) *comma = 0;
            if (!*p) {
                snprintf(msg, cap, "--route %.200s: an empty target", specs[i]);
                return false;
            }
            if (r->n == WGLLM_ROUTE_MAX_CANDIDATES) {
                snprintf(msg, cap, "--route %.200s: more than %d targets", specs[i], WGLLM_ROUTE_MAX_CANDIDATES);
                return false;
            }
            r->target[r->n++] = p;
            p = comma ? comma + 1 : NULL;
        }
        struct wgllm_client_route_desc d = {.name = r->name, .targets = r->target, .n_targets = r->n,
                                            .params = wgllm_route_default_params()};
        char var[200];
        env_name(var, sizeof var, "ROUTE", r->name, "COST_WEIGHT");
        if (!srv_env_number(var, 0, 1e15, &d.params.cost_weight, msg, cap)) return false;
        struct wgllm_error err;
        if (wgllm_client_add_route(s->client, &d, &err) != WGLLM_STATUS_OK) {
            snprintf(msg, cap, "--route %.200s: %s", specs[i], err.message);
            return false;
        }
        s->n_routes++;
    }
    return true;
}

void srv_routes_free(struct srv *s) {
    if (!s->routes) return;
    pthread_mutex_destroy(&s->route_mu);
    free(s->routes);
    s->routes = NULL;
    s->n_routes = 0;
}

const char *srv_route_named(const struct srv *s, const char *body, size_t len) {
    if (!s->n_routes) return NULL;
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    const char *name = NULL;
    for (int i = 0; cJSON_IsString(m) && i < s->n_routes && !name; i++)
        if (!strcmp(m->valuestring, s->routes[i].name)) name = s->routes[i].name;
    cJSON_Delete(o);
    return name;
}

/* The layer's upstream() for the parse of a route's request for its upstreams: any name is that one. */
static const char *as_upstream(void *user, const char *model) {
    (void)model;
    return user;
}

/* Counts the decision (under route_mu): /metrics shows each target's decisions, refusals and last estimates. */
static void record(struct srv *s, const struct wgllm_route_decision *d) {
    struct srv_route *r = NULL;
    for (int i = 0; i < s->n_routes && !r; i++)
        if (!strcmp(s->routes[i].name, d->route)) r = &s->routes[i];
    if (!r) return;
    pthread_mutex_lock(&s->route_mu);
    for (int i = 0; i < d->n && i < r->n; i++) {
        struct srv_route_stats *t = &r->st[i];
        const struct wgllm_route_candidate *c = &d->c[i];
        t->decisions += i == d->chosen;
        t->refused += c->refused != NULL;
        t->ttft_ms = c->ttft_ms;
        t->score = c->score;
        t->cached_tokens = c->cached_tokens;
        t->prompt_tokens = c->prompt_tokens;
    }
    r->failed += d->chosen < 0;
    pthread_mutex_unlock(&s->route_mu);
}

bool srv_route_request(struct srv *s, const char *route, enum wgllm_openai_endpoint endpoint, const char *body,
                       size_t len, const char *partition, struct wgllm_openai_request *out, char **report,
                       struct wgllm_openai_request *fallback, bool *has_fallback, struct wgllm_openai_error *e) {
    *report = NULL;
    *has_fallback = false;
    const struct srv_route *r = NULL;
    for (int i = 0; i < s->n_routes && !r; i++)
        if (!strcmp(s->routes[i].name, route)) r = &s->routes[i];
    bool has_local = false;
    const char *first_up = NULL;
    for (int i = 0; r && i < r->n; i++) {
        if (!strcmp(r->target[i], SRV_LOCAL_TARGET)) has_local = true;
        else if (!first_up) first_up = r->target[i];
    }
    /* the same body parsed as the local engine takes it (the route's name standing for the served
     * model) and as an upstream takes it: which parse fails, and why, is what refuses a target */
    struct wgllm_openai_params lp = s->api, up = s->api;
    lp.model_alias = route;
    lp.upstream = NULL;
    up.upstream = as_upstream;
    up.upstream_user = (void *)first_up;
    struct wgllm_openai_request gl = {0}, gu = {0};
    struct wgllm_openai_error el, eu;
    const bool ok_l = has_local && wgllm_openai_parse(&lp, endpoint, body, len, &gl, &el);
    const bool ok_u = first_up && wgllm_openai_parse(&up, endpoint, body, len, &gu, &eu);
    if (!ok_l && !ok_u) {
        /* wrong for every target: the local parse's error says what is wrong with the request itself */
        *e = has_local ? el : eu;
        wgllm_openai_request_free(&gl);
        wgllm_openai_request_free(&gu);
        return false;
    }
    gl.rp.cache_partition = partition;
    gu.rp.cache_partition = partition;
    const struct wgllm_openai_request *g = ok_l ? &gl : &gu;
    /* without a local parse no local target tokenizes (each is refused): the upstream's fields then
     * stand in for the messages in the byte estimate of the prompt's tokens (the cost term) */
    char local_refused[300] = "", remote_refused[300] = "";
    if (has_local && !ok_l) snprintf(local_refused, sizeof local_refused, "%.290s", el.message);
    if (first_up && !ok_u) snprintf(remote_refused, sizeof remote_refused, "%.290s", eu.message);
    const struct wgllm_route_request rq = {
        .op = endpoint == WGLLM_OPENAI_CHAT ? WGLLM_OP_CHAT : WGLLM_OP_QUERY, .prompt = g->prompt,
        .prompt_len = g->prompt_len, .add_special = g->rp.add_special, .messages_json = ok_l ? gl.messages_json : gu.forward_json,
        .tools_json = gl.tools_json, .kwargs_json = gl.kwargs_json, .cache_partition = partition,
        .max_tokens = g->rp.max_tokens, .params = ok_u ? &gu.rp : NULL,
        .remote_refused = *remote_refused ? remote_refused : NULL, .local_refused = *local_refused ? local_refused : NULL};
    struct wgllm_route_decision *d = malloc(sizeof *d);
    struct wgllm_error werr = {0};
    const enum wgllm_status st = d ? wgllm_client_route(s->client, route, &rq, d, &werr)
                                   : wgllm_error_set(&werr, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    if (d) record(s, d);
    if (st != WGLLM_STATUS_OK) {
        wgllm_openai_error_set(e, st == WGLLM_STATUS_OUT_OF_MEMORY ? 500 : 400,
                               st == WGLLM_STATUS_OUT_OF_MEMORY ? "server_error" : "invalid_request_error", "model",
                               "route_no_target", "%s", werr.message);
        free(d);
        wgllm_openai_request_free(&gl);
        wgllm_openai_request_free(&gu);
        return false;
    }
    const struct wgllm_route_candidate *c = &d->c[d->chosen];
    if (c->kind == WGLLM_ROUTE_LOCAL) {
        *out = gl;
        wgllm_openai_request_free(&gu);
    } else {
        *out = gu;
        out->upstream = c->name; /* owned by the client, which outlives every request */
        bool local_ok = false;
        for (int i = 0; i < d->n; i++) local_ok |= d->c[i].kind == WGLLM_ROUTE_LOCAL && !d->c[i].refused;
        if (local_ok) *fallback = gl, *has_fallback = true;
        else wgllm_openai_request_free(&gl);
    }
    *report = wgllm_route_json(d);
    free(d);
    return true;
}

char *srv_route_fell_back(struct srv *s, char *report, const char *from, const char *why) {
    cJSON *o = cJSON_Parse(report);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    for (int i = 0; cJSON_IsString(name) && i < s->n_routes; i++) {
        struct srv_route *r = &s->routes[i];
        if (strcmp(r->name, name->valuestring)) continue;
        pthread_mutex_lock(&s->route_mu);
        for (int k = 0; k < r->n; k++) r->st[k].fallbacks += !strcmp(r->target[k], from);
        pthread_mutex_unlock(&s->route_mu);
    }
    cJSON *f = cJSON_AddObjectToObject(o, "fallback");
    cJSON_AddStringToObject(f, "from", from);
    cJSON_AddStringToObject(f, "error", why);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "target", cJSON_CreateString(SRV_LOCAL_TARGET));
    char *out = o && f ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!out) return report; /* out of memory: the decision as it was */
    free(report);
    return out;
}

char *srv_with_route(char *json, const char *report) {
    if (!json || !report) return json;
    size_t n = strlen(json);
    while (n && json[n - 1] != '}') n--;
    if (!n) return json;
    struct wgllm_strbuf b = {0};
    wgllm_strbuf_put(&b, json, n - 1);
    wgllm_strbuf_printf(&b, "%s\"wgllm\":{\"route\":%s}}", n > 2 ? "," : "", report);
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return json;
    }
    free(json);
    return wgllm_strbuf_take(&b);
}
