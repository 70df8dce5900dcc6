/*
 * client.c - the endpoint table and the three calls (query, chat, embed):
 * local endpoints go straight to the engine; gateways and providers get an
 * OpenAI request body built from the typed parameters (local-only fields
 * refused, per-endpoint options merged under them) and their answer, whole or
 * streamed, mapped back onto struct wgllm_result.
 */
#include "client/client.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "wgllm_tools.h"

struct endpoint {
    struct wgllm_endpoint_desc d; /* strings below owned */
    char *key;                    /* the API key read at add time */
    cJSON *options;               /* parsed options_json, or NULL */
    struct wgllm_replica_set *reps; /* remote: the servers of base_url */
};

/* A route: endpoints by index (the table only grows, so indices stay valid). */
struct route {
    char *name;
    int target[WGLLM_ROUTE_MAX_CANDIDATES];
    int n;
    struct wgllm_route_params params;
};

struct wgllm_client {
    struct endpoint *eps;
    int n;
    size_t cap;
    struct route *routes;
    int n_routes;
    size_t routes_cap;
};

static char *sdup(const char *s) { return s ? strdup(s) : NULL; }

enum wgllm_status wgllm_client_init(struct wgllm_client **out, struct wgllm_error *err) {
    *out = calloc(1, sizeof(**out));
    return *out ? WGLLM_STATUS_OK : wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
}

void wgllm_client_free(struct wgllm_client *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        struct endpoint *e = &c->eps[i];
        free((char *)e->d.name);
        free((char *)e->d.base_url);
        free((char *)e->d.model);
        free((char *)e->d.api_key_env);
        free((char *)e->d.options_json);
        free(e->key);
        cJSON_Delete(e->options);
        wgllm_replicas_free(e->reps);
    }
    free(c->eps);
    for (int i = 0; i < c->n_routes; i++) free(c->routes[i].name);
    free(c->routes);
    free(c);
}

static const char *const TYPED_FIELDS[] = {"model", "prompt", "messages", "input", "stream", "stream_options", NULL};

enum wgllm_status wgllm_client_add(struct wgllm_client *c, const struct wgllm_endpoint_desc *d,
                                   struct wgllm_error *err) {
    if (!d->name || !*d->name) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: endpoint name is empty");
    if (wgllm_client_find(c, d->name))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: endpoint '%s' already exists", d->name);
    if (wgllm_client_is_route(c, d->name))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: '%s' is already a route", d->name);
    if (!(d->cost >= 0) || d->cost > 1e12) /* NaN fails the first test */
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "client: endpoint '%s': cost %g is not a price per 1M tokens (0 or more)", d->name, d->cost);
    const bool remote = d->kind == WGLLM_ENDPOINT_GATEWAY || d->kind == WGLLM_ENDPOINT_PROVIDER;
    if (d->kind == WGLLM_ENDPOINT_LOCAL && !d->engine)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: local endpoint '%s' has no engine", d->name);
    if (!remote && d->kind != WGLLM_ENDPOINT_LOCAL)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: endpoint '%s' has unknown kind %d", d->name,
                               (int)d->kind);
    if (remote && !d->base_url)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "client: endpoint '%s' needs base_url starting with http:// or https:// (got '')",
                               d->name);
    struct wgllm_replica_set *reps = NULL;
    if (remote) {
        const enum wgllm_status rs = wgllm_replicas_init(&reps, d->name, d->base_url, d->cooldown_s, err);
        if (rs != WGLLM_STATUS_OK) return rs;
    }
    if (d->ops & ~(unsigned)WGLLM_OP_ALL)
        return wgllm_replicas_free(reps), wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: endpoint '%s' has unknown ops bits 0x%x",
                               d->name, d->ops);
    char *key = NULL;
    if (d->kind == WGLLM_ENDPOINT_PROVIDER && (!d->api_key_env || !*d->api_key_env))
        return wgllm_replicas_free(reps), wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "client: provider '%s' needs api_key_env (the variable holding its key)", d->name);
    if (remote && d->api_key_env && *d->api_key_env) {
        const char *v = getenv(d->api_key_env);
        if (!v || !*v)
            return wgllm_replicas_free(reps), wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "client: endpoint '%s': environment variable %s (its API key) is not set", d->name,
                                   d->api_key_env);
        key = strdup(v);
    }
    cJSON *opts = NULL;
    if (d->options_json) {
        if (!remote) {
            free(key);
            wgllm_replicas_free(reps);
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "client: endpoint '%s': options_json is for gateways and providers", d->name);
        }
        opts = cJSON_Parse(d->options_json);
        if (!cJSON_IsObject(opts)) {
            cJSON_Delete(opts);
            free(key);
            wgllm_replicas_free(reps);
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "client: endpoint '%s': options_json is not a JSON object", d->name);
        }
        for (int i = 0; TYPED_FIELDS[i]; i++)
            if (cJSON_GetObjectItemCaseSensitive(opts, TYPED_FIELDS[i])) {
                cJSON_Delete(opts);
                free(key);
                wgllm_replicas_free(reps);
                return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                       "client: endpoint '%s': options_json may not set the typed field '%s'", d->name,
                                       TYPED_FIELDS[i]);
            }
    }
    if (!wgllm_grow((void **)&c->eps, &c->cap, (size_t)c->n + 1, sizeof *c->eps)) {
        cJSON_Delete(opts);
        free(key);
        wgllm_replicas_free(reps);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    }
    struct endpoint *e = &c->eps[c->n++];
    memset(e, 0, sizeof(*e));
    e->d = *d;
    e->d.name = sdup(d->name);
    e->d.base_url = sdup(d->base_url);
    e->d.model = sdup(d->model);
    e->d.api_key_env = sdup(d->api_key_env);
    e->d.options_json = sdup(d->options_json);
    if (!e->d.ops) e->d.ops = WGLLM_OP_ALL;
    e->key = key;
    e->options = opts;
    e->reps = reps;
    return WGLLM_STATUS_OK;
}

const struct wgllm_endpoint_desc *wgllm_client_find(const struct wgllm_client *c, const char *name) {
    for (int i = 0; c && name && i < c->n; i++)
        if (!strcmp(c->eps[i].d.name, name)) return &c->eps[i].d;
    return NULL;
}

int wgllm_client_count(const struct wgllm_client *c) { return c ? c->n : 0; }

const struct wgllm_endpoint_desc *wgllm_client_at(const struct wgllm_client *c, int i) {
    return c && i >= 0 && i < c->n ? &c->eps[i].d : NULL;
}

int wgllm_client_replica_count(const struct wgllm_client *c, int i) {
    return c && i >= 0 && i < c->n ? wgllm_replicas_count(c->eps[i].reps) : 0;
}

void wgllm_client_replica_stats(const struct wgllm_client *c, int i, int k, struct wgllm_replica_stats *out) {
    wgllm_replicas_stats(c->eps[i].reps, k, out);
}

int wgllm_client_check(struct wgllm_client *c, int timeout_s, const atomic_bool *stop) {
    int failed = 0;
    for (int i = 0; c && i < c->n; i++)
        if (c->eps[i].reps) failed += wgllm_replicas_check(c->eps[i].reps, c->eps[i].key, timeout_s, stop);
    return failed;
}

static const char *op_name(unsigned op) { return op == WGLLM_OP_QUERY ? "query" : op == WGLLM_OP_CHAT ? "chat" : "embed"; }

static enum wgllm_status resolve(struct wgllm_client *c, const char *name, unsigned op, struct endpoint **out,
                                 struct wgllm_error *err) {
    *out = NULL;
    for (int i = 0; c && name && i < c->n; i++)
        if (!strcmp(c->eps[i].d.name, name)) *out = &c->eps[i];
    if (!*out)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: no endpoint named '%s'", name ? name : "(null)");
    if (!((*out)->d.ops & op))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "client: endpoint '%s' does not support %s", name,
                               op_name(op));
    return WGLLM_STATUS_OK;
}

/* ---- remote generation ---------------------------------------------------- */

/* Local-only knobs a remote endpoint cannot honour: refused, never dropped. */
static enum wgllm_status check_remote_params(const struct endpoint *ep, const struct wgllm_request_params *p,
                                             struct wgllm_error *err) {
    const char *field = wgllm_route_local_only(p); /* the routing policy's rule too (wgllm.h, "Routes") */
    if (!field) return WGLLM_STATUS_OK;
    return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                           "client: '%s' is local-only and endpoint '%s' is remote; leave it at its default (or put "
                           "the server's own field in the endpoint's options_json)",
                           field, ep->d.name);
}

/* The endpoint's options fill in only what the request's own fields left unset. */
static void add_options(const struct endpoint *ep, cJSON *b) {
    const cJSON *o;
    cJSON_ArrayForEach(o, ep->options) {
        if (!cJSON_GetObjectItemCaseSensitive(b, o->string))
            cJSON_AddItemToObject(b, o->string, cJSON_Duplicate(o, true));
    }
}

static cJSON *remote_body(const struct endpoint *ep, const struct wgllm_request_params *p, bool stream) {
    cJSON *b = cJSON_CreateObject();
    if (ep->d.model) cJSON_AddStringToObject(b, "model", ep->d.model);
    if (p->max_tokens > 0) cJSON_AddNumberToObject(b, "max_tokens", p->max_tokens);
    const struct wgllm_sampler_params *s = &p->sampling;
    cJSON_AddNumberToObject(b, "temperature", s->temperature > 0 ? s->temperature : 0);
    cJSON_AddNumberToObject(b, "top_p", s->top_p < 1 ? s->top_p : 1);
    cJSON_AddNumberToObject(b, "seed", (double)(s->seed & ((1ull << 53) - 1)));
    if (s->presence_penalty != 0) cJSON_AddNumberToObject(b, "presence_penalty", s->presence_penalty);
    if (s->frequency_penalty != 0) cJSON_AddNumberToObject(b, "frequency_penalty", s->frequency_penalty);
    if (s->n_logit_bias > 0) {
        cJSON *lb = cJSON_AddObjectToObject(b, "logit_bias");
        for (int i = 0; i < s->n_logit_bias; i++) {
            char k[16];
            snprintf(k, sizeof(k), "%d", (int)s->logit_bias[i].token);
            float v = s->logit_bias[i].bias;
            cJSON_DeleteItemFromObjectCaseSensitive(lb, k);
            cJSON_AddNumberToObject(lb, k, isinf(v) && v < 0 ? -100 : v > 100 ? 100 : v < -100 ? -100 : v);
        }
    }
    if (p->n_stop > 0) {
        cJSON *st = cJSON_AddArrayToObject(b, "stop");
        for (int i = 0; i < p->n_stop; i++) cJSON_AddItemToArray(st, cJSON_CreateString(p->stop[i]));
    }
    if (stream) {
        cJSON_AddTrueToObject(b, "stream");
        cJSON_AddTrueToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage");
    }
    add_options(ep, b);
    return b;
}

struct gen_state {
    const struct endpoint *ep;
    const struct wgllm_request_params *p;
    bool chat;
    struct wgllm_strbuf text; /* the answer so far (text.oom: some of it was lost) */
    struct wgllm_strbuf reasoning; /* chat: the reasoning_content so far */
    enum wgllm_finish_reason finish;
    bool have_finish;
    struct wgllm_usage usage;
    char error[256];
    int64_t t0, t_first;
    int pieces;   /* streamed text pieces so far */
    bool overrun; /* the upstream streamed far more pieces than max_tokens allows: cut as LENGTH */
    /* tool calls, whole or assembled from stream deltas by their index */
    struct remote_call {
        struct wgllm_strbuf id, name, args;
    } calls[WGLLM_CLIENT_MAX_CALLS];
    int n_calls;
    bool calls_past; /* an index past WGLLM_CLIENT_MAX_CALLS */
};

static void gen_state_free(struct gen_state *g) {
    wgllm_strbuf_free(&g->text);
    wgllm_strbuf_free(&g->reasoning);
    for (int i = 0; i < g->n_calls; i++) {
        wgllm_strbuf_free(&g->calls[i].id);
        wgllm_strbuf_free(&g->calls[i].name);
        wgllm_strbuf_free(&g->calls[i].args);
    }
    g->n_calls = 0;
}

/* A message's or delta's tool_calls. OpenAI streams a call as deltas of one
 * index: the id, type and name first, then the arguments in pieces; whole
 * answers have no index (their position is it). */
static void read_calls(struct gen_state *g, const cJSON *m) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (!cJSON_IsArray(tc)) return;
    int k = 0;
    cJSON_ArrayForEach(c, tc) {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(c, "index");
        const double i = cJSON_IsNumber(ix) ? ix->valuedouble : k;
        k++;
        if (!(i >= 0 && i < WGLLM_CLIENT_MAX_CALLS)) {
            g->calls_past = true;
            continue;
        }
        struct remote_call *rc = &g->calls[(int)i];
        if ((int)i >= g->n_calls) g->n_calls = (int)i + 1;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (cJSON_IsString(id) && !rc->id.len) wgllm_strbuf_puts(&rc->id, id->valuestring);
        if (cJSON_IsString(name) && !rc->name.len) wgllm_strbuf_puts(&rc->name, name->valuestring);
        if (cJSON_IsString(args)) {
            wgllm_strbuf_puts(&rc->args, args->valuestring);
        } else if (cJSON_IsObject(args)) { /* some servers send the object itself */
            char *t = cJSON_PrintUnformatted(args);
            if (t) wgllm_strbuf_puts(&rc->args, t);
            else rc->args.oom = true;
            free(t);
        }
    }
}

/* The calls as OpenAI's array, for wgllm_result.tool_calls_json; NULL when
 * there are none. Indexes the upstream skipped, or calls without a name, are
 * left out. false: out of memory. */
static bool calls_json(const struct gen_state *g, char **out) {
    *out = NULL;
    bool oom = false;
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < g->n_calls; i++) {
        const struct remote_call *rc = &g->calls[i];
        oom |= rc->id.oom || rc->name.oom || rc->args.oom;
        if (!rc->name.len) continue;
        cJSON *o = cJSON_CreateObject(), *fn = o ? cJSON_AddObjectToObject(o, "function") : NULL;
        if (!fn) {
            cJSON_Delete(o);
            oom = true;
            break;
        }
        if (rc->id.len) cJSON_AddStringToObject(o, "id", rc->id.data);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(fn, "name", rc->name.data);
        cJSON_AddStringToObject(fn, "arguments", rc->args.len ? rc->args.data : "{}");
        cJSON_AddItemToArray(arr, o);
    }
    if (!arr) return false;
    if (cJSON_GetArraySize(arr) > 0 && !(*out = cJSON_PrintUnformatted(arr))) oom = true;
    cJSON_Delete(arr);
    return !oom;
}

/* Before a retry on another replica: true (and the state emptied) when no
 * piece of the failed attempt reached the caller. */
static bool gen_fresh(void *user) {
    struct gen_state *g = user;
    if (g->pieces > 0) return false;
    const struct gen_state keep = {.ep = g->ep, .p = g->p, .chat = g->chat, .t0 = g->t0};
    gen_state_free(g);
    *g = keep;
    return true;
}

/* An upstream's count as an int the server can add and print: absurd or
 * negative numbers are clamped, never trusted into an overflow. */
static int usage_count(const cJSON *v) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) return 0;
    return v->valuedouble < (double)WGLLM_USAGE_MAX ? (int)v->valuedouble : WGLLM_USAGE_MAX;
}

static void read_usage(struct gen_state *g, const cJSON *u) {
    if (!cJSON_IsObject(u)) return;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"))) g->usage.prompt_tokens = usage_count(v);
    if ((v = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens"))) g->usage.completion_tokens = usage_count(v);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
    if ((v = cJSON_GetObjectItemCaseSensitive(d, "cached_tokens"))) g->usage.cached_tokens = usage_count(v);
    if (g->usage.cached_tokens > g->usage.prompt_tokens) g->usage.cached_tokens = g->usage.prompt_tokens;
}

static void read_error(struct gen_state *g, const cJSON *o) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    snprintf(g->error, sizeof(g->error), "%s", cJSON_IsString(m) ? m->valuestring : "(no message)");
}

/* One choice object (whole answer or stream chunk): text, finish reason. Returns false to cancel. */
static bool read_choice(struct gen_state *g, const cJSON *root, bool stream) {
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    if (!cJSON_IsObject(ch)) return true;
    const cJSON *t;
    if (g->chat) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(ch, stream ? "delta" : "message");
        t = cJSON_GetObjectItemCaseSensitive(m, "content");
        read_calls(g, m);
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (cJSON_IsString(rc)) wgllm_strbuf_puts(&g->reasoning, rc->valuestring);
    } else {
        t = cJSON_GetObjectItemCaseSensitive(ch, "text");
    }
    bool keep = true;
    if (cJSON_IsString(t) && *t->valuestring) {
        size_t n = strlen(t->valuestring);
        /* a piece is at least one token; an upstream that streams more than twice
         * max_tokens pieces ignores the limit (an endless stream): the answer ends
         * here, as if the limit had been honoured */
        const int max = g->p->max_tokens;
        if (stream && max > 0 && ++g->pieces > 2 * (int64_t)max + 16) {
            g->overrun = true;
            return false;
        }
        if (!g->t_first) g->t_first = wgllm_time_us();
        wgllm_strbuf_put(&g->text, t->valuestring, n);
        if (stream && g->p->on_token) keep = g->p->on_token(t->valuestring, n, -1, 0.0f, g->p->user_data);
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    if (cJSON_IsString(f)) {
        g->have_finish = true;
        g->finish = !strcmp(f->valuestring, "length") ? WGLLM_FINISH_LENGTH : WGLLM_FINISH_STOP;
    }
    return keep;
}

static bool on_event(const char *data, size_t len, void *user) {
    struct gen_state *g = user;
    if (!strcmp(data, "[DONE]")) return true;
    cJSON *o = cJSON_ParseWithLength(data, len);
    if (!o) return true; /* not JSON (a comment-like event): skip */
    bool keep = true;
    if (cJSON_GetObjectItemCaseSensitive(o, "error")) {
        read_error(g, o);
    } else {
        read_usage(g, cJSON_GetObjectItemCaseSensitive(o, "usage"));
        keep = read_choice(g, o, true);
    }
    cJSON_Delete(o);
    return keep;
}

/* An error answer (status >= 400) mapped to a status: the message says which endpoint and what it said. */
static enum wgllm_status http_error(const struct endpoint *ep, const struct wgllm_http_reply *r, struct wgllm_error *err) {
    cJSON *o = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    const cJSON *code = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "code") : NULL;
    enum wgllm_status st = r->status >= 500 ? WGLLM_STATUS_IO : WGLLM_STATUS_INVALID_ARGUMENT;
    if (cJSON_IsString(code) && !strcmp(code->valuestring, "context_length_exceeded")) st = WGLLM_STATUS_CONTEXT_FULL;
    wgllm_error_set(err, st, "endpoint '%s' answered HTTP %ld: %.300s", ep->d.name, r->status,
                    cJSON_IsString(m) ? m->valuestring : (r->body ? r->body : ""));
    cJSON_Delete(o);
    return st;
}

/* POSTs json to `route` on one of ep's replicas, and again on the next one
 * not tried after a failure of the replica (no connection, a reset, a
 * timeout, a 5xx) for as long as fresh(user) says nothing reached the
 * caller yet (it also readies user's state for the next attempt). */
static enum wgllm_status post_replicas(const struct endpoint *ep, const char *route, const char *json,
                                       wgllm_http_event_fn on_ev, void *user, bool (*fresh)(void *user),
                                       struct wgllm_http_reply *r, struct wgllm_error *err) {
    uint64_t tried = 0;
    const int n = wgllm_replicas_count(ep->reps);
    for (int attempt = 1;; attempt++) {
        const int k = wgllm_replicas_pick(ep->reps, tried);
        tried |= 1ull << k;
        char url[2048];
        snprintf(url, sizeof url, "%.2000s%s", wgllm_replicas_url(ep->reps, k), route);
        const int64_t t0 = wgllm_time_us();
        enum wgllm_status st = wgllm_http_post(url, ep->key, json, ep->d.timeout_s, on_ev, user, r, err);
        if (st == WGLLM_STATUS_OK && r->status >= 400) st = http_error(ep, r, err);
        const bool broke = !r->aborted && (r->failed || r->status >= 500);
        const bool again = broke && attempt < n && (!fresh || fresh(user));
        wgllm_replicas_done(ep->reps, k, !broke, again, (double)(wgllm_time_us() - t0) / 1e3);
        if (!again) {
            if (broke && attempt > 1 && err)
                snprintf(err->message + strlen(err->message), sizeof err->message - strlen(err->message),
                         " (the last of %d replicas tried)", attempt);
            return st;
        }
        wgllm_http_reply_free(r);
    }
}

static enum wgllm_status remote_generate(const struct endpoint *ep, const char *route, cJSON *body,
                                         const struct wgllm_request_params *p, bool chat,
                                         struct wgllm_result *res, struct wgllm_error *err) {
    char *json = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    if (!json) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory for the request");
    struct gen_state g = {.ep = ep, .p = p, .chat = chat, .t0 = wgllm_time_us()};
    struct wgllm_http_reply r;
    const bool stream = p->on_token != NULL;
    enum wgllm_status st = post_replicas(ep, route, json, stream ? on_event : NULL, &g, gen_fresh, &r, err);
    free(json);
    if (st == WGLLM_STATUS_OK && !r.streamed) {
        cJSON *o = cJSON_Parse(r.body);
        if (!o) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s' answered something that is not JSON",
                                 ep->d.name);
        } else {
            read_usage(&g, cJSON_GetObjectItemCaseSensitive(o, "usage"));
            read_choice(&g, o, false);
            cJSON_Delete(o);
            /* asked to stream, answered whole: the text goes out as one piece */
            if (stream && g.text.len > 0 && !p->on_token(g.text.data, g.text.len, -1, 0.0f, p->user_data)) r.aborted = true;
        }
    }
    if (st == WGLLM_STATUS_OK && g.error[0])
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "endpoint '%s' failed mid-stream: %s", ep->d.name, g.error);
    if (st == WGLLM_STATUS_OK && (g.text.oom || g.reasoning.oom)) st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    if (st == WGLLM_STATUS_OK && g.calls_past)
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s' answered a tool call past the %d this client takes",
                             ep->d.name, WGLLM_CLIENT_MAX_CALLS);
    char *calls = NULL;
    if (st == WGLLM_STATUS_OK && !calls_json(&g, &calls))
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory for the tool calls");
    if (g.overrun) { /* cut by read_choice, not by the caller */
        r.aborted = false;
        g.have_finish = true;
        g.finish = WGLLM_FINISH_LENGTH;
    }
    if (st == WGLLM_STATUS_OK && !r.aborted && !g.have_finish)
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s' ended its answer without a finish_reason",
                             ep->d.name);
    memset(res, 0, sizeof(*res));
    res->status = st;
    res->finish = r.aborted ? WGLLM_FINISH_CANCELLED : st != WGLLM_STATUS_OK ? WGLLM_FINISH_ERROR : g.finish;
    if (st != WGLLM_STATUS_OK && err) snprintf(res->message, sizeof(res->message), "%.255s", err->message);
    res->text_len = g.text.len;
    res->text = wgllm_strbuf_take(&g.text);
    res->tool_calls_json = calls;
    if (g.reasoning.len) res->reasoning_content = wgllm_strbuf_take(&g.reasoning);
    gen_state_free(&g);
    res->usage = g.usage;
    res->n_tokens = g.usage.completion_tokens;
    const int64_t now = wgllm_time_us();
    res->timings.total_ms = (double)(now - g.t0) / 1e3;
    if (g.t_first) res->timings.ttft_ms = (double)(g.t_first - g.t0) / 1e3;
    if (g.t_first && now > g.t_first && g.usage.completion_tokens > 1)
        res->timings.decode_tok_s = (g.usage.completion_tokens - 1) / ((double)(now - g.t_first) / 1e6);
    wgllm_http_reply_free(&r);
    return st;
}

/* ---- the calls ------------------------------------------------------------ */

static enum wgllm_status empty_result(struct wgllm_result *res, enum wgllm_status st, const struct wgllm_error *err) {
    memset(res, 0, sizeof(*res));
    res->status = st;
    res->finish = WGLLM_FINISH_ERROR;
    if (err) snprintf(res->message, sizeof(res->message), "%.255s", err->message);
    res->text = calloc(1, 1);
    return st;
}

enum wgllm_status wgllm_client_query(struct wgllm_client *c, const char *endpoint, const char *prompt,
                                     const struct wgllm_request_params *params, struct wgllm_result *result,
                                     struct wgllm_error *err) {
    struct endpoint *ep;
    enum wgllm_status st = resolve(c, endpoint, WGLLM_OP_QUERY, &ep, err);
    if (st != WGLLM_STATUS_OK) return empty_result(result, st, err);
    if (ep->d.kind == WGLLM_ENDPOINT_LOCAL) return wgllm_query(ep->d.engine, prompt, params, result, err);
    if ((st = check_remote_params(ep, params, err)) != WGLLM_STATUS_OK) return empty_result(result, st, err);
    cJSON *b = remote_body(ep, params, params->on_token != NULL);
    cJSON_AddStringToObject(b, "prompt", prompt);
    return remote_generate(ep, "/completions", b, params, false, result, err);
}

enum wgllm_status wgllm_client_chat(struct wgllm_client *c, const char *endpoint, const struct wgllm_message *msgs,
                                    int n_msgs, const struct wgllm_request_params *params,
                                    struct wgllm_result *result, struct wgllm_error *err) {
    struct endpoint *ep;
    enum wgllm_status st = resolve(c, endpoint, WGLLM_OP_CHAT, &ep, err);
    if (st != WGLLM_STATUS_OK) return empty_result(result, st, err);
    if (ep->d.kind == WGLLM_ENDPOINT_LOCAL) return wgllm_chat(ep->d.engine, msgs, n_msgs, params, result, err);
    if ((st = check_remote_params(ep, params, err)) != WGLLM_STATUS_OK) return empty_result(result, st, err);
    cJSON *b = remote_body(ep, params, params->on_token != NULL);
    cJSON *m = cJSON_AddArrayToObject(b, "messages");
    for (int i = 0; i < n_msgs; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", msgs[i].role ? msgs[i].role : "user");
        cJSON_AddStringToObject(o, "content", msgs[i].content ? msgs[i].content : "");
        cJSON_AddItemToArray(m, o);
    }
    return remote_generate(ep, "/chat/completions", b, params, true, result, err);
}

enum wgllm_status wgllm_client_chat_json(struct wgllm_client *c, const char *endpoint, const char *fields_json,
                                         const struct wgllm_request_params *params, struct wgllm_result *result,
                                         struct wgllm_error *err) {
    struct endpoint *ep;
    enum wgllm_status st = resolve(c, endpoint, WGLLM_OP_CHAT, &ep, err);
    if (st != WGLLM_STATUS_OK) return empty_result(result, st, err);
    if (ep->d.kind == WGLLM_ENDPOINT_LOCAL) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                        "client: endpoint '%s' is local; its tools and response_format run in the OpenAI layer "
                        "(wgllm_openai_parse, wgllm_openai_submit), not through chat_json", ep->d.name);
        return empty_result(result, WGLLM_STATUS_UNSUPPORTED, err);
    }
    if ((st = check_remote_params(ep, params, err)) != WGLLM_STATUS_OK) return empty_result(result, st, err);
    cJSON *f = fields_json ? cJSON_Parse(fields_json) : NULL;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(f, "messages"), *it;
    if (!cJSON_IsObject(f) || !cJSON_IsArray(msgs)) {
        cJSON_Delete(f);
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: chat_json needs an object with a 'messages' array");
        return empty_result(result, WGLLM_STATUS_INVALID_ARGUMENT, err);
    }
    cJSON *b = remote_body(ep, params, params->on_token != NULL);
    cJSON_ArrayForEach(it, f) {
        /* the typed parameters (model, stream, ...) are the client's own */
        if (cJSON_GetObjectItemCaseSensitive(b, it->string)) continue;
        cJSON_AddItemToObject(b, it->string, cJSON_Duplicate(it, true));
    }
    cJSON_Delete(f);
    return remote_generate(ep, "/chat/completions", b, params, true, result, err);
}

/* Posts body b (freed here) to the endpoint's /embeddings, its options added. */
static enum wgllm_status post_embeddings(const struct endpoint *ep, cJSON *b, struct wgllm_http_reply *r,
                                         struct wgllm_error *err) {
    add_options(ep, b);
    char *json = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    memset(r, 0, sizeof *r);
    if (!json) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    enum wgllm_status st = post_replicas(ep, "/embeddings", json, NULL, NULL, NULL, r, err);
    free(json);
    return st;
}

/* The upstream's embeddings answer as it came but for `model`, which names the
 * endpoint (as chat answers do): the caller asked for it by that name. The
 * numbers are written back exactly (the same doubles), not cJSON's way. */
static enum wgllm_status embed_answer(const struct endpoint *ep, const struct wgllm_http_reply *r, char **out,
                                      struct wgllm_error *err) {
    /* 256 inputs of 4096 dimensions are 1M values: room for 4; an answer nests 4 deep */
    const struct wgllm_json_limits lim = {.max_depth = 32, .max_nodes = (size_t)1 << 22};
    struct wgllm_json_doc doc;
    struct wgllm_json_error je = {0};
    if (!r->body || !wgllm_json_parse(r->body, r->body_len, &lim, &doc, &je))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s' answered embeddings that do not read as JSON: %s",
                               ep->d.name, r->body ? je.message : "no body");
    const struct wgllm_json *root = wgllm_json_root(&doc);
    if (!wgllm_json_is(root, WGLLM_JSON_OBJECT) || !wgllm_json_is(wgllm_json_get(root, "data"), WGLLM_JSON_ARRAY)) {
        wgllm_json_doc_free(&doc);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s' answered embeddings without a 'data' array",
                               ep->d.name);
    }
    struct wgllm_strbuf b = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &b);
    w.exact = true;
    wgllm_json_w_object(&w, NULL);
    bool named = false;
    for (const struct wgllm_json *m = wgllm_json_first(root); m; m = wgllm_json_next(root, m)) {
        if (strcmp(m->key, "model")) {
            wgllm_json_w_value(&w, m->key, m);
        } else if (!named) { /* where the upstream put it; a repeated key once */
            wgllm_json_w_str(&w, "model", ep->d.name);
            named = true;
        }
    }
    if (!named) wgllm_json_w_str(&w, "model", ep->d.name);
    wgllm_json_w_end(&w, '}');
    wgllm_json_doc_free(&doc);
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory for the answer");
    }
    *out = wgllm_strbuf_take(&b);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_client_embed_json(struct wgllm_client *c, const char *endpoint, const char *fields_json,
                                          char **answer_json, struct wgllm_error *err) {
    *answer_json = NULL;
    struct endpoint *ep;
    enum wgllm_status st = resolve(c, endpoint, WGLLM_OP_EMBED, &ep, err);
    if (st != WGLLM_STATUS_OK) return st;
    if (ep->d.kind == WGLLM_ENDPOINT_LOCAL)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "client: endpoint '%s' is local; its embeddings run in the OpenAI layer "
                               "(wgllm_openai_embeddings), not through embed_json", ep->d.name);
    cJSON *b = fields_json ? cJSON_Parse(fields_json) : NULL;
    if (!cJSON_IsObject(b) || !cJSON_GetObjectItemCaseSensitive(b, "input")) {
        cJSON_Delete(b);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: embed_json needs an object with an 'input'");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(b, "model");
    if (ep->d.model) cJSON_AddStringToObject(b, "model", ep->d.model);
    struct wgllm_http_reply r;
    st = post_embeddings(ep, b, &r, err);
    if (st == WGLLM_STATUS_OK) st = embed_answer(ep, &r, answer_json, err);
    wgllm_http_reply_free(&r);
    return st;
}

enum wgllm_status wgllm_client_embed(struct wgllm_client *c, const char *endpoint, const char *text, size_t len,
                                     enum wgllm_pooling pooling, bool normalize, float *out, int max_out, int *n_out,
                                     struct wgllm_error *err) {
    struct endpoint *ep;
    *n_out = 0;
    enum wgllm_status st = resolve(c, endpoint, WGLLM_OP_EMBED, &ep, err);
    if (st != WGLLM_STATUS_OK) return st;
    if (ep->d.kind == WGLLM_ENDPOINT_LOCAL)
        return wgllm_embed(ep->d.engine, text, len, pooling, normalize, out, max_out, n_out, err);
    if (pooling != WGLLM_POOLING_MODEL)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "client: 'pooling' is local-only and endpoint '%s' is remote; use "
                               "WGLLM_POOLING_MODEL (or the server's field in options_json)",
                               ep->d.name);
    cJSON *b = cJSON_CreateObject();
    if (ep->d.model) cJSON_AddStringToObject(b, "model", ep->d.model);
    cJSON_AddItemToObject(b, "input", cJSON_CreateStringReference("")); /* replaced below */
    char *t = malloc(len + 1);
    if (!t) {
        cJSON_Delete(b);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    }
    memcpy(t, text, len);
    t[len] = 0;
    cJSON_ReplaceItemInObjectCaseSensitive(b, "input", cJSON_CreateString(t));
    free(t);
    cJSON_AddStringToObject(b, "encoding_format", "float");
    struct wgllm_http_reply r;
    st = post_embeddings(ep, b, &r, err);
    if (st == WGLLM_STATUS_OK) {
        cJSON *root = cJSON_Parse(r.body);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "data"), 0), "embedding");
        if (!cJSON_IsArray(v)) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "endpoint '%s': no data[0].embedding array in the answer",
                                 ep->d.name);
        } else if (cJSON_GetArraySize(v) > max_out) {
            st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                 "endpoint '%s' returned %d dimensions; the output has room for %d", ep->d.name,
                                 cJSON_GetArraySize(v), max_out);
        } else {
            int n = 0;
            double ss = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, v) {
                out[n] = cJSON_IsNumber(x) ? (float)x->valuedouble : 0.0f;
                ss += (double)out[n] * out[n];
                n++;
            }
            if (normalize && ss > 0)
                for (int i = 0; i < n; i++) out[i] = (float)(out[i] / sqrt(ss));
            *n_out = n;
        }
        cJSON_Delete(root);
    }
    wgllm_http_reply_free(&r);
    return st;
}

/* ---- routes: the policy's inputs gathered, the call sent where it picks ---- */

static const struct route *route_find(const struct wgllm_client *c, const char *name) {
    for (int i = 0; c && name && i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, name)) return &c->routes[i];
    return NULL;
}

bool wgllm_client_is_route(const struct wgllm_client *c, const char *name) { return route_find(c, name) != NULL; }
int wgllm_client_route_count(const struct wgllm_client *c) { return c ? c->n_routes : 0; }
const char *wgllm_client_route_name(const struct wgllm_client *c, int i) {
    return c && i >= 0 && i < c->n_routes ? c->routes[i].name : NULL;
}

static int endpoint_index(const struct wgllm_client *c, const char *name) {
    for (int i = 0; name && i < c->n; i++)
        if (!strcmp(c->eps[i].d.name, name)) return i;
    return -1;
}

enum wgllm_status wgllm_client_add_route(struct wgllm_client *c, const struct wgllm_client_route_desc *d,
                                         struct wgllm_error *err) {
    if (!d->name || !*d->name) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route name is empty");
    if (route_find(c, d->name) || wgllm_client_find(c, d->name))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route '%s': the name is taken by %s", d->name,
                               route_find(c, d->name) ? "another route" : "an endpoint");
    if (d->n_targets < 1 || d->n_targets > WGLLM_ROUTE_MAX_CANDIDATES || !d->targets)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route '%s' needs 1 to %d targets (got %d)",
                               d->name, WGLLM_ROUTE_MAX_CANDIDATES, d->n_targets);
    if (!(d->params.cost_weight >= 0) || !(d->params.busy_factor >= 0))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "client: route '%s': cost_weight and busy_factor must be 0 or more", d->name);
    struct route r = {.n = d->n_targets, .params = d->params};
    for (int i = 0; i < d->n_targets; i++) {
        const char *t = d->targets[i];
        if ((r.target[i] = endpoint_index(c, t)) < 0)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route '%s': no endpoint named '%s'",
                                   d->name, t && *t ? t : "(empty)");
        for (int j = 0; j < i; j++)
            if (r.target[j] == r.target[i])
                return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route '%s' names '%s' twice",
                                       d->name, t);
    }
    if (!(r.name = strdup(d->name)) ||
        !wgllm_grow((void **)&c->routes, &c->routes_cap, (size_t)c->n_routes + 1, sizeof *c->routes)) {
        free(r.name);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    }
    c->routes[c->n_routes++] = r;
    return WGLLM_STATUS_OK;
}

/* The prompt as this local endpoint's engine would compute over it (*ids malloc'd). */
static enum wgllm_status route_tokens(const struct endpoint *ep, const struct wgllm_route_request *rq, int32_t **ids,
                                      int *n, struct wgllm_error *err) {
    struct wgllm_engine *e = ep->d.engine;
    if (rq->op == WGLLM_OP_QUERY)
        return wgllm_engine_prompt_tokens_query(e, rq->prompt ? rq->prompt : "", rq->prompt_len, rq->add_special, ids,
                                                n, err);
    if (rq->messages_json)
        return wgllm_engine_prompt_tokens_chat_json(e, rq->messages_json, rq->tools_json, rq->kwargs_json, ids, n, err);
    return wgllm_engine_prompt_tokens_chat(e, rq->msgs, rq->n_msgs, ids, n, err);
}

/* Without a local tokenization: about 4 bytes a token, what OpenAI's guidance says for English. */
static int estimate_tokens(const struct wgllm_route_request *rq) {
    size_t bytes = rq->op == WGLLM_OP_QUERY ? rq->prompt_len : rq->messages_json ? strlen(rq->messages_json) : 0;
    for (int i = 0; rq->op != WGLLM_OP_QUERY && !rq->messages_json && i < rq->n_msgs; i++)
        bytes += rq->msgs[i].content ? strlen(rq->msgs[i].content) : 0;
    const size_t t = bytes / 4 + 1;
    return t > (size_t)WGLLM_USAGE_MAX ? WGLLM_USAGE_MAX : (int)t;
}

static void gather_local(const struct endpoint *ep, const struct wgllm_route_request *rq,
                         struct wgllm_route_candidate *cd, char *note, size_t cap) {
    int32_t *ids = NULL;
    int n = 0;
    struct wgllm_error e = {0};
    if (route_tokens(ep, rq, &ids, &n, &e) != WGLLM_STATUS_OK) {
        snprintf(note, cap, "%.180s", e.message);
        cd->refused = note;
        return;
    }
    cd->prompt_tokens = n;
    cd->cached_tokens = wgllm_engine_cached_tokens(ep->d.engine, ids, n, rq->cache_partition);
    free(ids);
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(ep->d.engine, &m);
    cd->prefill_tok_s = m.prefill_tok_s;
    cd->request_ms = m.request_ms;
    cd->queue_depth = m.queue_depth;
    cd->busy_slots = m.active_slots;
    cd->n_slots = m.n_slots;
}

/* A remote endpoint as the policy sees it: its best replica -- healthy and
 * out of cooldown first, then the fewest calls in flight (what the replica
 * table picks), then the lowest measured latency -- with that one's load. */
static void gather_remote(const struct endpoint *ep, struct wgllm_route_candidate *cd) {
    bool have = false;
    for (int k = 0; k < wgllm_replicas_count(ep->reps); k++) {
        struct wgllm_replica_stats st;
        wgllm_replicas_stats(ep->reps, k, &st);
        const bool ok = st.healthy && !st.cooling;
        const bool better = !have                         ? true
                            : ok != cd->healthy             ? ok
                            : st.in_flight != cd->in_flight ? st.in_flight < cd->in_flight
                                                            : st.latency_ms > 0 && (cd->latency_ms <= 0 || st.latency_ms < cd->latency_ms);
        if (!better) continue;
        have = true;
        cd->healthy = ok;
        cd->in_flight = st.in_flight;
        cd->latency_ms = st.latency_ms;
    }
}

enum wgllm_status wgllm_client_route(struct wgllm_client *c, const char *route, const struct wgllm_route_request *rq,
                                     struct wgllm_route_decision *d, struct wgllm_error *err) {
    const struct route *r = route_find(c, route);
    memset(d, 0, sizeof *d);
    d->chosen = d->fallback_from = -1;
    if (!r) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: no route named '%s'", route ? route : "(null)");
    d->route = r->name;
    d->n = r->n;
    int local_tokens = -1; /* the first local tokenization: the best count the remote ones get */
    for (int i = 0; i < r->n; i++) {
        const struct endpoint *ep = &c->eps[r->target[i]];
        struct wgllm_route_candidate *cd = &d->c[i];
        cd->name = ep->d.name;
        cd->cost = ep->d.cost;
        cd->kind = ep->d.kind == WGLLM_ENDPOINT_LOCAL ? WGLLM_ROUTE_LOCAL : WGLLM_ROUTE_REMOTE;
        struct wgllm_error e = {0};
        if (!(ep->d.ops & rq->op)) {
            snprintf(d->notes[i], sizeof d->notes[i], "it does not offer %s", op_name(rq->op));
            cd->refused = d->notes[i];
        } else if (cd->kind == WGLLM_ROUTE_LOCAL && rq->local_refused) {
            snprintf(d->notes[i], sizeof d->notes[i], "%.180s", rq->local_refused);
            cd->refused = d->notes[i];
        } else if (cd->kind == WGLLM_ROUTE_LOCAL) {
            gather_local(ep, rq, cd, d->notes[i], sizeof d->notes[i]);
            if (!cd->refused && local_tokens < 0) local_tokens = cd->prompt_tokens;
        } else if (rq->remote_refused) {
            snprintf(d->notes[i], sizeof d->notes[i], "%.180s", rq->remote_refused);
            cd->refused = d->notes[i];
        } else if (rq->params && check_remote_params(ep, rq->params, &e) != WGLLM_STATUS_OK) {
            snprintf(d->notes[i], sizeof d->notes[i], "%.180s", e.message);
            cd->refused = d->notes[i];
        } else {
            gather_remote(ep, cd);
        }
    }
    const int est = local_tokens >= 0 ? local_tokens : estimate_tokens(rq);
    for (int i = 0; i < d->n; i++)
        if (d->c[i].kind == WGLLM_ROUTE_REMOTE) d->c[i].prompt_tokens = est;
    if (wgllm_route_decide(&r->params, d, rq->max_tokens) >= 0) return WGLLM_STATUS_OK;
    struct wgllm_strbuf b = {0};
    for (int i = 0; i < d->n; i++) wgllm_strbuf_printf(&b, "%s%s: %s", i ? "; " : "", d->c[i].name, d->c[i].refused);
    wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: route '%s': no target can take this request (%s)",
                    r->name, b.data ? b.data : "");
    wgllm_strbuf_free(&b);
    return WGLLM_STATUS_INVALID_ARGUMENT;
}

/* The caller's on_token, and whether it was called: a remote call that
 * failed before it was may go to another target without the caller
 * seeing two answers. */
struct relay {
    wgllm_token_fn fn;
    void *user;
    bool called;
};

static bool relay_token(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct relay *r = ud;
    r->called = true;
    return r->fn(text, len, token, logprob, r->user);
}

/* Runs the call on d's choice; a remote one that fails before any piece
 * reached the caller (its replicas all tried) goes to the route's local
 * endpoint when that one could take it (d->fallback_from says so). */
static enum wgllm_status route_call(struct wgllm_client *c, struct wgllm_route_decision *d, const char *prompt,
                                    const struct wgllm_message *msgs, int n_msgs,
                                    const struct wgllm_request_params *params, struct wgllm_result *result,
                                    struct wgllm_error *err) {
    struct relay rl = {params->on_token, params->user_data, false};
    struct wgllm_request_params p = *params;
    if (p.on_token) p.on_token = relay_token, p.user_data = &rl;
    const struct wgllm_route_candidate *cd = &d->c[d->chosen];
    enum wgllm_status st = prompt ? wgllm_client_query(c, cd->name, prompt, &p, result, err)
                                  : wgllm_client_chat(c, cd->name, msgs, n_msgs, &p, result, err);
    const bool failed = st != WGLLM_STATUS_OK || result->finish == WGLLM_FINISH_ERROR;
    if (cd->kind == WGLLM_ROUTE_LOCAL || !failed || rl.called) return st;
    int local = -1;
    for (int i = 0; i < d->n && local < 0; i++)
        if (d->c[i].kind == WGLLM_ROUTE_LOCAL && !d->c[i].refused) local = i;
    if (local < 0) return st;
    d->fallback_from = d->chosen;
    snprintf(d->fallback_error, sizeof d->fallback_error, "%.250s",
             result->message[0] ? result->message : err ? err->message : "");
    d->chosen = local;
    wgllm_result_free(result);
    return prompt ? wgllm_client_query(c, d->c[local].name, prompt, params, result, err)
                  : wgllm_client_chat(c, d->c[local].name, msgs, n_msgs, params, result, err);
}

enum wgllm_status wgllm_client_route_query(struct wgllm_client *c, const char *route, const char *prompt,
                                           const struct wgllm_request_params *params, struct wgllm_route_decision *d,
                                           struct wgllm_result *result, struct wgllm_error *err) {
    struct wgllm_route_decision own;
    if (!d) d = &own;
    const struct wgllm_route_request rq = {.op = WGLLM_OP_QUERY, .prompt = prompt, .prompt_len = prompt ? strlen(prompt) : 0,
                                           .add_special = params->add_special, .cache_partition = params->cache_partition,
                                           .max_tokens = params->max_tokens, .params = params};
    const enum wgllm_status st = wgllm_client_route(c, route, &rq, d, err);
    if (st != WGLLM_STATUS_OK) return empty_result(result, st, err);
    return route_call(c, d, prompt ? prompt : "", NULL, 0, params, result, err);
}

enum wgllm_status wgllm_client_route_chat(struct wgllm_client *c, const char *route, const struct wgllm_message *msgs,
                                          int n_msgs, const struct wgllm_request_params *params,
                                          struct wgllm_route_decision *d, struct wgllm_result *result,
                                          struct wgllm_error *err) {
    struct wgllm_route_decision own;
    if (!d) d = &own;
    const struct wgllm_route_request rq = {.op = WGLLM_OP_CHAT, .msgs = msgs, .n_msgs = n_msgs,
                                           .cache_partition = params->cache_partition,
                                           .max_tokens = params->max_tokens, .params = params};
    const enum wgllm_status st = wgllm_client_route(c, route, &rq, d, err);
    if (st != WGLLM_STATUS_OK) return empty_result(result, st, err);
    return route_call(c, d, NULL, msgs, n_msgs, params, result, err);
}
