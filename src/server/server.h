/*
 * server.h - `wgllm serve`: an OpenAI-compatible HTTP server on the engine.
 *
 * Native only (libmicrohttpd + cJSON), linked into the `wgllm` command and
 * never into libwgllm.a. server.c owns HTTP (daemon, routing, auth, body
 * limits), stream.c generation requests (SSE streaming, disconnects,
 * upstreams; the OpenAI, Anthropic and Responses dialects), info.c
 * /v1/models and /metrics, policy.c the tenants of --api-key-file. The JSON
 * of requests and answers is the core's OpenAI layer (wgllm_openai_*,
 * wgllm_anthropic_*, wgllm_responses_*), the one the browser package uses too.
 */
#ifndef WGLLM_SERVER_H
#define WGLLM_SERVER_H

#include "wgllm.h"
#include "client/client.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* `wgllm serve ...`: argv holds the options after the sub-command. */
int wgllm_serve_main(int argc, char **argv);

/* --route: the name a route's targets give the served model (its endpoint in the client). */
#define SRV_LOCAL_TARGET "local"

/* What /metrics shows of one target of a route (route.c counts, info.c prints). */
struct srv_route_stats {
    uint64_t decisions;            /* requests sent to it */
    uint64_t refused;              /* requests it could not take (a local-only field, a prompt too long) */
    double ttft_ms, score;         /* the last decision's estimate */
    int cached_tokens, prompt_tokens;
    uint64_t fallbacks;            /* requests it failed that the local engine then answered */
};

struct srv_route {
    char spec[1024];               /* --route's value, split in place */
    const char *name;
    const char *target[WGLLM_ROUTE_MAX_CANDIDATES];
    int n;
    struct srv_route_stats st[WGLLM_ROUTE_MAX_CANDIDATES]; /* under srv.route_mu */
    uint64_t failed;               /* requests no target could take */
};

struct srv {
    struct wgllm_model *model;
    struct wgllm_engine *engine;
    const char *model_id;   /* the name /v1/models lists and requests may name */
    const char *model_path; /* -m as given, also accepted as a name */
    const char *api_key;    /* NULL = open */
    long created;
    /* what the OpenAI layer checks requests against (model names, --max-tokens, the
     * slots' context, --upstream names) and answers with */
    struct wgllm_openai_params api;
    const char *cors;       /* --cors: "*" or comma-separated origins; NULL = no CORS headers */
    atomic_bool draining;   /* SIGTERM: in-flight requests finish, new ones are refused */
    atomic_bool stopping;   /* past the shutdown deadline: what still runs is cancelled */
    atomic_int inflight;    /* generation and embedding requests being answered */
    atomic_ullong http_requests, http_errors;
    struct wgllm_client *client; /* --upstream endpoints (gateways), NULL = none */
    struct srv_policy *policy;   /* --api-key-file tenants, NULL = none (then api_key, or open) */
    struct srv_route *routes;    /* --route, n_routes of them (the client holds their targets) */
    int n_routes;
    pthread_mutex_t route_mu;    /* guards the routes' stats */
};

/* The OpenAI side (requests, answers, errors) is the core's layer
 * (wgllm_openai_*, include/wgllm.h), with s->api saying what this server
 * serves; what is left here is the server's own. info.c: */
char *srv_models(struct srv *s);
/* Prometheus exposition text. */
char *srv_metrics(struct srv *s);
/* A Prometheus label value, backslash, quote and newline escaped. */
void srv_metric_label(struct wgllm_strbuf *b, const char *v);

/* ---- policy.c: --api-key-file tenants ---------------------------------------- */

struct srv_policy;
/* NULL with msg on a file that does not read or is wrong (naming the entry and field). */
#define SRV_POLICY_MAX_BYTES (1 << 20) /* a key file larger than this is refused */
struct srv_policy *srv_policy_load(const char *path, char *msg, size_t cap);
/* The same from the file's text (NUL-terminated): NULL with msg on a problem. */
struct srv_policy *srv_policy_parse(const char *text, char *msg, size_t cap);
void srv_policy_free(struct srv_policy *p);
/* The tenant whose key this is, -1 when none (every key compared, in constant time each). */
int srv_policy_tenant(const struct srv_policy *p, const char *key);
const char *srv_policy_name(const struct srv_policy *p, int tenant); /* NULL for -1 or no policy */
/* Whether the tenant may use `model` (the served model's id or an --upstream name). */
bool srv_policy_allows(const struct srv_policy *p, int tenant, const char *model);
/* A request starts: 0 when admitted (its request token taken), else the
 * seconds to wait (429 Retry-After). */
int srv_policy_admit(struct srv_policy *p, int tenant);
/* A request's prompt and generated tokens, charged when it ends. */
void srv_policy_charge(struct srv_policy *p, int tenant, int tokens);
void srv_policy_metrics(struct srv_policy *p, struct wgllm_strbuf *b);
/* Two secrets equal, in time that does not depend on where they first differ. */
bool srv_same_secret(const char *a, const char *b);

/* ---- route.c: --route ------------------------------------------------------ */

/* The --route values (NAME=TARGET,...; targets SRV_LOCAL_TARGET or --upstream
 * names) added to s->client as routes, with WGLLM_ROUTE_<NAME>_COST_WEIGHT;
 * false with msg naming the value and the problem. */
bool srv_routes_setup(struct srv *s, const char *const *specs, int n, char *msg, size_t cap);
void srv_routes_free(struct srv *s);
/* WGLLM_UPSTREAM_<NAME>_COST (per 1M tokens) into *cost when set; false with msg when it is not a number >= 0. */
bool srv_upstream_cost(const char *name, double *cost, char *msg, size_t cap);
/* A variable holding a number in [lo, hi] into *out when set; false with msg when it is wrong. */
bool srv_env_number(const char *var, double lo, double hi, double *out, char *msg, size_t cap);
/* The route a request body's `model` names (owned by s), NULL when none. */
const char *srv_route_named(const struct srv *s, const char *body, size_t len);
/* Parses a generation request on `route` for the target the policy picks
 * (out->upstream set for an upstream, NULL for the local engine) and counts
 * the decision; *report (malloc'd) is the decision's JSON. false with e set
 * when the request is wrong for every target or no target can take it. */
bool srv_route_request(struct srv *s, const char *route, enum wgllm_openai_endpoint endpoint, const char *body,
                       size_t len, const char *partition, struct wgllm_openai_request *out, char **report,
                       struct wgllm_openai_request *fallback, bool *has_fallback, struct wgllm_openai_error *e);
/* When an upstream was chosen and the local engine could take the request
 * too, *fallback is the request parsed for it (*has_fallback): what stream.c
 * submits there when the upstream fails before anything reached the client.
 * srv_route_fell_back counts that and returns the report (freed) with
 * "fallback": {"from", "error"} added. */
char *srv_route_fell_back(struct srv *s, char *report, const char *from, const char *why);
/* json (an answer or a chunk, a JSON object; freed) with "wgllm": {"route": report} added. */
char *srv_with_route(char *json, const char *report);

/* ---- server.c: HTTP helpers shared with stream.c ------------------------- */

/* Queues text (malloc'd, freed here; NULL = out of memory) with the common
 * headers (CORS when configured); counts the answer in the metrics. */
enum MHD_Result srv_send_text(struct srv *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text);
enum MHD_Result srv_send_err(struct srv *s, struct MHD_Connection *c, const struct wgllm_openai_error *e);
void srv_add_headers(struct srv *s, struct MHD_Connection *c, struct MHD_Response *r, const char *ctype);
/* The client's socket, and whether the client behind it has gone away (closed
 * or reset): how a request notices, while it waits, that nobody will read its answer. */
int srv_client_fd(struct MHD_Connection *c);
bool srv_client_gone(int fd);

/* ---- stream.c: chat and completion requests, upstream embeddings ------------ */

/* Answers a generation request (len bytes of body; the local engine, or the
 * upstream its `model` names), streaming or not; the request is cancelled
 * when the client goes away or the server stops. */
enum srv_dialect {
    SRV_COMPLETIONS, /* /v1/completions */
    SRV_CHAT,        /* /v1/chat/completions */
    SRV_ANTHROPIC,   /* /v1/messages: Anthropic's Messages API, served as the chat it means */
    SRV_RESPONSES,   /* /v1/responses: OpenAI's Responses API, the same way */
};
enum MHD_Result srv_generate(struct srv *s, struct MHD_Connection *c, const char *body, size_t len,
                             enum srv_dialect dialect, int tenant);
/* An embeddings request for the upstream g->upstream: its answer (malloc'd),
 * or NULL with e set (the upstream's own status when it answered one). */
char *srv_upstream_embeddings(struct srv *s, const struct wgllm_openai_request *g, struct wgllm_openai_error *e);

#endif
