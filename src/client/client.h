/*
 * client.h - endpoints: one call (query, chat, embed) routed by name to a
 * local engine or to a remote OpenAI-compatible server, with the same result
 * and streaming types everywhere.
 *
 * Native only (libcurl + cJSON): linked into the `wgllm` command, never into
 * libwgllm.a. client.c owns the endpoint table, validation and the mapping of
 * wgllm parameters to OpenAI request bodies; http.c owns libcurl and SSE.
 *
 *     struct wgllm_client *c;
 *     wgllm_client_init(&c, &err);
 *     struct wgllm_endpoint_desc d = { .name = "big", .kind = WGLLM_ENDPOINT_PROVIDER,
 *         .base_url = "https://api.example.com/v1", .model = "big-model",
 *         .api_key_env = "EXAMPLE_API_KEY" };
 *     wgllm_client_add(c, &d, &err);
 *     wgllm_client_chat(c, "big", msgs, 2, &rp, &res, &err);
 *
 * Remote endpoints and local-only parameters: a gateway or provider refuses
 * (INVALID_ARGUMENT, naming the field) a request that sets context_key,
 * ignore_eos, add_special = false, or a sampler field OpenAI does not have
 * set away from wgllm_sampler_default_params(): top_k, min_p, typical_p,
 * repeat_penalty, penalty_last_n. Such knobs, when the remote server has
 * them, go into the descriptor's options_json instead. Remote results carry
 * text, finish reason, usage and timings; token ids are not known
 * (tokens/logprobs NULL, n_tokens = the reported completion_tokens) and
 * on_token receives token -1, logprob 0.
 */
#ifndef WGLLM_CLIENT_H
#define WGLLM_CLIENT_H

#include "wgllm.h"
#include "wgllm_tools.h"

#include <stdatomic.h>

enum wgllm_endpoint_kind {
    WGLLM_ENDPOINT_LOCAL,    /* a wgllm_engine in this process */
    WGLLM_ENDPOINT_GATEWAY,  /* an OpenAI-compatible base URL (wgllm serve, llama.cpp server, vLLM) */
    WGLLM_ENDPOINT_PROVIDER, /* the same with an API key read from the environment */
};

/* Operations an endpoint offers (bit mask). */
enum {
    WGLLM_OP_QUERY = 1, /* raw prompt: /completions */
    WGLLM_OP_CHAT = 2,  /* messages: /chat/completions */
    WGLLM_OP_EMBED = 4, /* /embeddings */
    WGLLM_OP_ALL = 7,
};

struct wgllm_endpoint_desc {
    const char *name;              /* what calls name it by (copied) */
    enum wgllm_endpoint_kind kind;
    struct wgllm_engine *engine;   /* LOCAL: not owned, must outlive the client */
    const char *base_url;          /* GATEWAY/PROVIDER: ".../v1" (routes are appended); several
                                    * servers of the same model as "URL1,URL2,...": replicas (below) */
    const char *model;             /* remote model name sent as `model`; NULL = the field is left out */
    const char *api_key_env;       /* PROVIDER (required) / GATEWAY (optional): the variable holding the key */
    const char *options_json;      /* remote: a JSON object merged into every request body; may not
                                    * name model, prompt, messages, input, stream or stream_options */
    unsigned ops;                  /* WGLLM_OP_* offered; 0 = all */
    int timeout_s;                 /* remote: whole-request limit; 0 = 600 */
    int cooldown_s;                /* remote: how long a failing replica is skipped; 0 = 10 */
    double cost;                   /* what 1M tokens (prompt + completion) cost there, for routes; 0 = free */
};

/* Replicas: a remote endpoint with several base URLs sends each call to the
 * one with the fewest calls in flight among those not cooling down (ties in
 * turn). A call that fails there before any piece reached the caller (no
 * connection, a reset, a timeout, an HTTP 5xx) is sent again to the next
 * replica not yet tried; once a piece was delivered (on_token) it is never
 * retried, its failure is the call's. A failing replica cools down for
 * cooldown_s; when every replica is cooling, the one that ends first is
 * tried. wgllm_client_check probes GET {URL}/models on each: an answer
 * (any status below 500) ends the cooldown, a failure starts one. */
#define WGLLM_CLIENT_MAX_REPLICAS 64
struct wgllm_replica_stats {
    const char *url;          /* owned by the client */
    int in_flight;
    bool cooling;             /* failed within its cooldown: skipped while another is available */
    bool healthy;             /* its last call or check succeeded */
    uint64_t requests;        /* calls sent to it, retries included */
    uint64_t failures;        /* of them, or of the checks, those that failed */
    uint64_t retries;         /* failed calls that were sent on to another replica */
    double latency_ms;        /* moving average of its successful calls: first piece (streams) or whole answer */
};

struct wgllm_client;

enum wgllm_status wgllm_client_init(struct wgllm_client **out, struct wgllm_error *err);
void wgllm_client_free(struct wgllm_client *c);
/* Adds an endpoint (the descriptor is copied). INVALID_ARGUMENT for a
 * duplicate or empty name, a missing engine/base URL, an unset key variable,
 * or options that are not a JSON object or name a typed field. */
enum wgllm_status wgllm_client_add(struct wgllm_client *c, const struct wgllm_endpoint_desc *desc,
                                   struct wgllm_error *err);
/* NULL when there is none; the descriptor as stored (strings owned by c). */
const struct wgllm_endpoint_desc *wgllm_client_find(const struct wgllm_client *c, const char *name);
int wgllm_client_count(const struct wgllm_client *c);
const struct wgllm_endpoint_desc *wgllm_client_at(const struct wgllm_client *c, int i);
/* Endpoint i's replicas (0 for a local one) and the state of replica k. */
int wgllm_client_replica_count(const struct wgllm_client *c, int i);
void wgllm_client_replica_stats(const struct wgllm_client *c, int i, int k, struct wgllm_replica_stats *out);
/* One round of health checks over every remote replica (each GET bounded by
 * timeout_s), ending early once *stop (may be NULL) is set; returns how many
 * failed. Safe beside calls in other threads. */
int wgllm_client_check(struct wgllm_client *c, int timeout_s, const atomic_bool *stop);

/* The calls: resolve the endpoint (NOT_FOUND-like INVALID_ARGUMENT "no
 * endpoint named ..."), check that it offers the operation (UNSUPPORTED),
 * then run it. Blocking; streaming through params->on_token (return false to
 * cancel: a remote transfer is aborted). The status is the call's; a
 * generation that fails after starting also sets result->finish = ERROR. */
enum wgllm_status wgllm_client_query(struct wgllm_client *c, const char *endpoint, const char *prompt,
                                     const struct wgllm_request_params *params, struct wgllm_result *result,
                                     struct wgllm_error *err);
enum wgllm_status wgllm_client_chat(struct wgllm_client *c, const char *endpoint, const struct wgllm_message *msgs,
                                    int n_msgs, const struct wgllm_request_params *params,
                                    struct wgllm_result *result, struct wgllm_error *err);
/* Chat with a remote endpoint from OpenAI request fields as given (what a
 * gateway forwards): fields_json is an object with `messages` (tool calls,
 * tool results and content parts as OpenAI takes them) and any other chat
 * fields the upstream applies itself: tools, tool_choice,
 * parallel_tool_calls, response_format, chat_template_kwargs, ... They go into
 * the body beside the typed parameters, which win over a field of the same
 * name. The calls the upstream answers (whole, or assembled from streamed
 * deltas) come back in result->tool_calls_json, at most
 * WGLLM_CLIENT_MAX_CALLS of them (more is BAD_FORMAT). Local endpoints:
 * UNSUPPORTED (a local engine's tools run in the OpenAI layer). */
#define WGLLM_CLIENT_MAX_CALLS 64
enum wgllm_status wgllm_client_chat_json(struct wgllm_client *c, const char *endpoint, const char *fields_json,
                                         const struct wgllm_request_params *params, struct wgllm_result *result,
                                         struct wgllm_error *err);
/* Embeddings on a remote endpoint from OpenAI request fields as given (what
 * a gateway forwards): fields_json is an object with `input` and any other
 * embeddings fields (encoding_format, dimensions, user); `model` is the
 * endpoint's. *answer_json (malloc'd) is the upstream's answer as it came,
 * but for `model`, which names the endpoint. An upstream's HTTP error is
 * INVALID_ARGUMENT (4xx) or IO (5xx) with "answered HTTP <status>: <its
 * message>"; an answer without a `data` array is BAD_FORMAT. Local
 * endpoints: UNSUPPORTED (wgllm_openai_embeddings runs them). */
enum wgllm_status wgllm_client_embed_json(struct wgllm_client *c, const char *endpoint, const char *fields_json,
                                          char **answer_json, struct wgllm_error *err);
/* Remote: pooling must be WGLLM_POOLING_MODEL (the server decides; put a
 * server's own pooling field in options_json); normalize L2-normalizes here. */
enum wgllm_status wgllm_client_embed(struct wgllm_client *c, const char *endpoint, const char *text, size_t len,
                                     enum wgllm_pooling pooling, bool normalize, float *out, int max_out, int *n_out,
                                     struct wgllm_error *err);

/* Routes: one name for several endpoints (a local engine, gateways,
 * providers). A call on a route goes to the endpoint the routing policy
 * (wgllm.h, "Routes") picks for it from what the client measures: a local
 * endpoint's cached prefix of this prompt (wgllm_engine_cached_tokens, in
 * the request's cache_partition), its queue, busy slots and measured prefill
 * rate and request time (wgllm_engine_metrics); a remote one's replica
 * latency, calls in flight and health (wgllm_replica_stats) and its cost.
 * A remote endpoint is refused for a request with a local-only parameter
 * (the list above, or rq->remote_refused), one without the operation, and a
 * local one for a prompt its context cannot hold (or rq->local_refused). Names are shared with
 * endpoints (a route may not take an endpoint's name). */
struct wgllm_client_route_desc {
    const char *name;                 /* copied */
    const char *const *targets;       /* endpoint names, each added before (copied) */
    int n_targets;                    /* 1..WGLLM_ROUTE_MAX_CANDIDATES */
    struct wgllm_route_params params; /* wgllm_route_default_params() and changes */
};
/* INVALID_ARGUMENT naming the problem: an empty or taken name, no targets or
 * too many, a target that is no endpoint or is named twice, a negative
 * cost_weight. */
enum wgllm_status wgllm_client_add_route(struct wgllm_client *c, const struct wgllm_client_route_desc *desc,
                                         struct wgllm_error *err);
/* Whether `name` is a route; its targets' names (owned by c). */
bool wgllm_client_is_route(const struct wgllm_client *c, const char *name);
int wgllm_client_route_count(const struct wgllm_client *c);
const char *wgllm_client_route_name(const struct wgllm_client *c, int i);

/* One request as the policy sees it: its prompt in one of three forms (a
 * raw prompt; messages; chat as OpenAI JSON, what the server parsed), the
 * cache partition and max_tokens it runs with. */
struct wgllm_route_request {
    unsigned op;                          /* WGLLM_OP_QUERY or WGLLM_OP_CHAT */
    const char *prompt;                   /* query */
    size_t prompt_len;
    bool add_special;                     /* query: BOS as the model asks */
    const struct wgllm_message *msgs;     /* chat */
    int n_msgs;
    const char *messages_json, *tools_json, *kwargs_json; /* chat as JSON (instead of msgs) */
    const char *cache_partition;
    int max_tokens;                       /* 0 = none (the policy prices expected_completion_tokens) */
    const struct wgllm_request_params *params; /* its local-only knobs refuse remote targets; NULL = none */
    const char *remote_refused;           /* why no remote target can take it (a local-only field such as
                                             grammar, as the caller's parser said); NULL = none */
    const char *local_refused;            /* why no local target can take it; NULL = none */
};
/* Gathers every target's inputs for rq and runs the policy into *d (its
 * strings owned by c and d). OK with d->chosen >= 0, or INVALID_ARGUMENT
 * naming the route and each target's refusal when none can take it; an
 * unknown route is INVALID_ARGUMENT "no route named ...". */
enum wgllm_status wgllm_client_route(struct wgllm_client *c, const char *route, const struct wgllm_route_request *rq,
                                     struct wgllm_route_decision *d, struct wgllm_error *err);
/* A call on a route: decides (d may be NULL: the decision is then not kept)
 * and runs the call on the chosen endpoint as wgllm_client_query / _chat do.
 * A remote endpoint that fails before any piece reached on_token (all its
 * replicas tried) hands the call to the route's local endpoint when that one
 * could take it: d->chosen is then the local one, d->fallback_from the one
 * that failed and d->fallback_error why. */
enum wgllm_status wgllm_client_route_query(struct wgllm_client *c, const char *route, const char *prompt,
                                           const struct wgllm_request_params *params, struct wgllm_route_decision *d,
                                           struct wgllm_result *result, struct wgllm_error *err);
enum wgllm_status wgllm_client_route_chat(struct wgllm_client *c, const char *route, const struct wgllm_message *msgs,
                                          int n_msgs, const struct wgllm_request_params *params,
                                          struct wgllm_route_decision *d, struct wgllm_result *result,
                                          struct wgllm_error *err);

/* ---- replicas.c: the servers behind one endpoint (internal) -------------- */

struct wgllm_replica_set;
/* base_urls split at commas, each checked (http:// or https://). */
enum wgllm_status wgllm_replicas_init(struct wgllm_replica_set **out, const char *name, const char *base_urls,
                                      int cooldown_s, struct wgllm_error *err);
void wgllm_replicas_free(struct wgllm_replica_set *s);
int wgllm_replicas_count(const struct wgllm_replica_set *s);
const char *wgllm_replicas_url(const struct wgllm_replica_set *s, int k); /* without a trailing '/' */
/* The replica for the next attempt among those not in `tried` (bit k), -1
 * when none is left; counted in flight until wgllm_replicas_done. */
int wgllm_replicas_pick(struct wgllm_replica_set *s, uint64_t tried);
/* ok: the call succeeded (ms: its latency); retried: it failed and goes on to another. */
void wgllm_replicas_done(struct wgllm_replica_set *s, int k, bool ok, bool retried, double ms);
int wgllm_replicas_check(struct wgllm_replica_set *s, const char *bearer, int timeout_s, const atomic_bool *stop);
void wgllm_replicas_stats(struct wgllm_replica_set *s, int k, struct wgllm_replica_stats *out);

/* ---- http.c: one OpenAI-style POST (internal to the client) -------------- */

struct wgllm_http_reply {
    long status;      /* HTTP status, 0 when no response came */
    char *body;       /* non-streaming (or error) body, NUL-terminated, malloc'd */
    size_t body_len;
    bool aborted;     /* on_event returned false */
    bool streamed;    /* the answer came as SSE events (else whole, in body) */
    bool failed;      /* the transfer broke: no connection, a reset, a timeout (not a limit of ours) */
};

/* Called for each SSE event's data (without "data: "), NUL-terminated. Return false to abort. */
typedef bool (*wgllm_http_event_fn)(const char *data, size_t len, void *user);

/* What one remote answer may carry: a whole body, or all the bytes of a
 * stream together; and one SSE event (an upstream that never ends an event
 * must not grow a buffer without end). */
#define WGLLM_HTTP_BODY_LIMIT ((size_t)64 << 20)
#define WGLLM_HTTP_EVENT_LIMIT ((size_t)8 << 20)
/* The largest token count a remote `usage` may report (larger ones are clamped). */
#define WGLLM_USAGE_MAX (1 << 30)

/* The SSE framing of a streamed answer: bytes in, events out (on_event), in
 * time linear in the bytes however they are split. A feed returns false when
 * it stops the stream: on_event said so (aborted), an event grew past
 * event_limit or the stream past total_limit (too_big), or memory ran out. */
struct wgllm_sse {
    wgllm_http_event_fn on_event;
    void *user;
    size_t event_limit, total_limit;
    struct wgllm_strbuf buf; /* the bytes of the unfinished event */
    size_t scan;        /* buf[0..scan) holds no event end: the next search starts there */
    size_t total;       /* bytes fed so far */
    bool aborted, too_big, oom;
};
void wgllm_sse_init(struct wgllm_sse *p, wgllm_http_event_fn on_event, void *user);
bool wgllm_sse_feed(struct wgllm_sse *p, const char *data, size_t n);
void wgllm_sse_free(struct wgllm_sse *p);

/* POSTs json to url. With on_event the 2xx answer is read as SSE and handed
 * over event by event; otherwise (and for error statuses, and an answer of
 * Content-Type application/json) it is collected in reply->body, at most
 * WGLLM_HTTP_BODY_LIMIT bytes. IO with a message on transport failure or
 * past a limit. */
enum wgllm_status wgllm_http_post(const char *url, const char *bearer, const char *json, int timeout_s,
                                  wgllm_http_event_fn on_event, void *user, struct wgllm_http_reply *reply,
                                  struct wgllm_error *err);
/* A GET of url, the answer collected whole (health checks). */
enum wgllm_status wgllm_http_get(const char *url, const char *bearer, int timeout_s, struct wgllm_http_reply *reply,
                                 struct wgllm_error *err);
void wgllm_http_reply_free(struct wgllm_http_reply *r);

#endif
