/*
 * server.c - the HTTP side of `wgllm serve`: libmicrohttpd daemon (one thread
 * per connection, so handlers may block on the engine), the limits a hostile
 * client meets, API key, CORS, routing, embeddings, and a graceful stop.
 * Generation requests (streaming and cancellation) are in stream.c.
 *
 * Order of the checks: everything that can be decided from the request line
 * and the headers -- header limits, shutdown, CORS preflight, /health, the
 * API key, the route and method, an announced Content-Length -- is decided
 * in the first call for the request, before any byte of the body is read;
 * only an authorized request to a route that takes a body gets it buffered,
 * within the body limit and the read deadline; then the core's OpenAI layer
 * parses it within its budgets (UTF-8, JSON depth and value count) and
 * checks its fields.
 *
 * Connection limits (total, per client address) and the idle timeout are
 * libmicrohttpd's own (MHD_OPTION_CONNECTION_LIMIT, _PER_IP_CONNECTION_LIMIT,
 * _CONNECTION_TIMEOUT): a connection over a limit is closed at accept.
 *
 * Stopping (SIGTERM, SIGINT): the listening socket closes at once (new
 * connections are refused), requests on open connections get 503, in-flight
 * requests finish within --shutdown-timeout; then what still runs is
 * cancelled, and the daemon, the engine and the model are freed only once no
 * request refers to them.
 */
#include "server/server.h"
#include "cli/cli.h" /* wgllm_cli_serve: the entry of the command table */

#include "wgllm_tools.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_LIMIT ((size_t)8 << 20)    /* request body bytes */
#define HEADER_BYTES_LIMIT (32u << 10)  /* all request header names + values */
#define HEADER_COUNT_LIMIT 100u
#define URL_LIMIT 8192u

static struct srv g_srv;
static int g_read_timeout = 60; /* seconds a request's body may take to arrive (--read-timeout) */
static int g_idle_timeout = 30; /* seconds a silent connection stays open (--idle-timeout) */

/* ---- answers ----------------------------------------------------------------- */

/* Whether `origin` is one of the --cors origins (comma-separated, exact). */
static bool cors_allows(const char *list, const char *origin) {
    if (!list || !origin || !*origin) return false;
    const size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, origin, n)) return true;
        p += k + (e != NULL);
    }
    return false;
}

void srv_add_headers(struct srv *s, struct MHD_Connection *c, struct MHD_Response *r, const char *ctype) {
    MHD_add_response_header(r, "Content-Type", ctype);
    if (!s->cors) return; /* CORS is off: a browser page of another origin gets nothing */
    if (!strcmp(s->cors, "*")) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        return;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (cors_allows(s->cors, origin)) MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

enum MHD_Result srv_send_text(struct srv *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text) {
    atomic_fetch_add(&s->http_requests, 1);
    if (!text) {
        status = 500;
        ctype = "application/json";
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!text) return MHD_NO;
    }
    if (status >= 400) atomic_fetch_add(&s->http_errors, 1);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    srv_add_headers(s, c, r, ctype);
    if (atomic_load(&s->draining)) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result srv_send_err(struct srv *s, struct MHD_Connection *c, const struct wgllm_openai_error *e) {
    return srv_send_text(s, c, (unsigned)e->status, "application/json", wgllm_openai_error_json(e));
}

static enum MHD_Result send_errf(struct MHD_Connection *c, int status, const char *type, const char *param,
                                 const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result send_errf(struct MHD_Connection *c, int status, const char *type, const char *param,
                                 const char *code, const char *fmt, ...) {
    struct wgllm_openai_error e;
    char msg[sizeof(e.message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    wgllm_openai_error_set(&e, status, type, param, code, "%s", msg);
    return srv_send_err(&g_srv, c, &e);
}

int srv_client_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

bool srv_client_gone(int fd) {
    if (fd < 0) return false;
    char b;
    const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- per-request state ---------------------------------------------------------- */

enum route { ROUTE_CHAT = 1, ROUTE_COMPLETIONS, ROUTE_EMBEDDINGS, ROUTE_TOKENIZE, ROUTE_DETOKENIZE, ROUTE_MESSAGES,
             ROUTE_RESPONSES };

struct conn {
    enum route route; /* a route that takes a body; 0 = answered before the body */
    int tenant;       /* --api-key-file: whose key it came with (-1: none) */
    struct wgllm_strbuf body; /* as it arrives; upload() holds it to BODY_LIMIT */
    int64_t t0;       /* when the request's headers were complete */
    bool refused;     /* the body broke a limit: whatever else arrives is dropped */
};

/* The request's key is --api-key, or one of --api-key-file's (*tenant: whose). */
static bool authorized(struct MHD_Connection *c, int *tenant) {
    *tenant = -1;
    if (!g_srv.api_key && !g_srv.policy) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncmp(h, "Bearer ", 7)) h += 7;
    /* Anthropic's clients send the key as x-api-key */
    else if (!(h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"))) return false;
    if (g_srv.policy) return (*tenant = srv_policy_tenant(g_srv.policy, h)) >= 0;
    return srv_same_secret(h, g_srv.api_key);
}

/* 429 with Retry-After: a tenant over its rate limits. */
static enum MHD_Result rate_limited(struct MHD_Connection *c, int tenant, int retry) {
    struct wgllm_openai_error e;
    wgllm_openai_error_set(&e, 429, "rate_limit_error", NULL, "rate_limit_exceeded",
                           "'%s' is over its rate limit (--api-key-file); retry after %d s",
                           srv_policy_name(g_srv.policy, tenant), retry);
    char *text = wgllm_openai_error_json(&e);
    struct MHD_Response *r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) return free(text), MHD_NO;
    srv_add_headers(&g_srv, c, r, "application/json");
    char secs[16];
    snprintf(secs, sizeof secs, "%d", retry);
    MHD_add_response_header(r, "Retry-After", secs);
    atomic_fetch_add(&g_srv.http_requests, 1);
    atomic_fetch_add(&g_srv.http_errors, 1);
    enum MHD_Result ret = MHD_queue_response(c, 429, r);
    MHD_destroy_response(r);
    return ret;
}

struct header_tally {
    size_t bytes;
    unsigned n;
};

static enum MHD_Result tally_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    struct header_tally *t = cls;
    (void)kind;
    t->bytes += (key ? strlen(key) : 0) + (value ? strlen(value) : 0) + 4;
    t->n++;
    return MHD_YES;
}

/* A CORS preflight: answered only for an allowed origin, with the methods and
 * the headers a browser client with a key sends. Without --cors, OPTIONS just
 * lists the methods (no CORS headers: the browser then refuses the call). */
static enum MHD_Result preflight(struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const bool any = g_srv.cors && !strcmp(g_srv.cors, "*");
    if (g_srv.cors && origin && !any && !cors_allows(g_srv.cors, origin))
        return send_errf(c, 403, "invalid_request_error", NULL, "cors_origin_not_allowed",
                         "the origin '%.200s' is not allowed (--cors)", origin);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    if (g_srv.cors && origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
        if (!any) MHD_add_response_header(r, "Vary", "Origin");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    atomic_fetch_add(&g_srv.http_requests, 1);
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

/* The first call for a request: everything the headers decide. Returns after
 * queueing an answer (MHD then discards any upload and closes), or with
 * cn->route set, to have the body read. */
static enum MHD_Result begin(struct MHD_Connection *c, const char *url, const char *method, struct conn *cn) {
    struct header_tally t = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, tally_header, &t);
    if (t.bytes > HEADER_BYTES_LIMIT || t.n > HEADER_COUNT_LIMIT)
        return send_errf(c, 431, "invalid_request_error", NULL, "headers_too_large",
                         "the request has %u headers of %zu bytes; at most %u headers of %u bytes are read", t.n,
                         t.bytes, HEADER_COUNT_LIMIT, HEADER_BYTES_LIMIT);
    if (strlen(url) > URL_LIMIT)
        return send_errf(c, 414, "invalid_request_error", NULL, "url_too_long", "the URL is longer than %u bytes",
                         URL_LIMIT);
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (atomic_load(&g_srv.draining))
        return send_errf(c, 503, "server_error", NULL, "shutting_down",
                         "the server is shutting down; send the request to another server");
    if (!strcmp(method, "OPTIONS")) return preflight(c);
    if (!strcmp(url, "/health") && get) return srv_send_text(&g_srv, c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (!authorized(c, &cn->tenant))
        return send_errf(c, 401, "invalid_request_error", NULL, "invalid_api_key",
                         "missing or wrong API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')");
    if (!strcmp(url, "/metrics") && get)
        return srv_send_text(&g_srv, c, 200, "text/plain; version=0.0.4", srv_metrics(&g_srv));
    if ((!strcmp(url, "/v1/models") || !strcmp(url, "/models")) && get)
        return srv_send_text(&g_srv, c, 200, "application/json", srv_models(&g_srv));
    enum route r = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions") ? ROUTE_CHAT
                   : !strcmp(url, "/v1/completions") || !strcmp(url, "/completions")       ? ROUTE_COMPLETIONS
                   : !strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings")         ? ROUTE_EMBEDDINGS
                   : !strcmp(url, "/v1/messages")                                           ? ROUTE_MESSAGES
                   : !strcmp(url, "/v1/responses") || !strcmp(url, "/responses")           ? ROUTE_RESPONSES
                   : !strcmp(url, "/tokenize")                                              ? ROUTE_TOKENIZE
                   : !strcmp(url, "/detokenize")                                            ? ROUTE_DETOKENIZE
                                                                                           : 0;
    if (!r) return send_errf(c, 404, "invalid_request_error", NULL, "not_found", "unknown route %s %.200s", method, url);
    if (!post) return send_errf(c, 405, "invalid_request_error", NULL, "method_not_allowed", "use POST on this route");
    /* before the body is read: a tenant over its limit costs nothing more */
    const int retry = srv_policy_admit(g_srv.policy, cn->tenant);
    if (retry > 0) return rate_limited(c, cn->tenant, retry);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > BODY_LIMIT)
        return send_errf(c, 413, "invalid_request_error", NULL, "request_too_large",
                         "the request body is larger than %zu MiB", BODY_LIMIT >> 20);
    cn->route = r;
    cn->t0 = wgllm_time_us();
    return MHD_YES;
}

/* A piece of the body: buffered within the limits. A body that outgrows the
 * limit or the read deadline (a chunked upload that never ends, a trickle)
 * closes the connection: libmicrohttpd 0.9 cannot queue an answer while an
 * upload is in progress, and reading on to answer would be what the limit
 * is there to prevent. (An announced Content-Length over the limit gets its
 * JSON 413 before the upload, in begin.) */
static enum MHD_Result upload(struct MHD_Connection *c, struct conn *cn, const char *data, size_t n) {
    (void)c;
    if (cn->refused) return MHD_NO;
    if (cn->body.len + n > BODY_LIMIT || wgllm_time_us() - cn->t0 > (int64_t)g_read_timeout * 1000000) {
        cn->refused = true;
        atomic_fetch_add(&g_srv.http_errors, 1);
        return MHD_NO;
    }
    return wgllm_strbuf_put(&cn->body, data, n) ? MHD_YES : MHD_NO;
}

static enum MHD_Result model_not_allowed(struct MHD_Connection *c, int tenant, const char *model) {
    return send_errf(c, 403, "permission_error", "model", "model_not_allowed", "the key of '%s' may not use the model '%s'",
                     srv_policy_name(g_srv.policy, tenant), model);
}

/* On the served model, or on the upstream that `model` names. */
static enum MHD_Result embeddings(struct MHD_Connection *c, const char *body, size_t len, int tenant) {
    struct wgllm_openai_error e;
    struct wgllm_openai_request rq;
    if (!wgllm_openai_parse(&g_srv.api, WGLLM_OPENAI_EMBEDDINGS, body, len, &rq, &e)) return srv_send_err(&g_srv, c, &e);
    const char *model = rq.upstream ? rq.upstream : g_srv.model_id;
    if (!srv_policy_allows(g_srv.policy, tenant, model)) {
        wgllm_openai_request_free(&rq);
        return model_not_allowed(c, tenant, model);
    }
    atomic_fetch_add(&g_srv.inflight, 1);
    char *out = rq.upstream ? srv_upstream_embeddings(&g_srv, &rq, &e) : wgllm_openai_embeddings(&g_srv.api, &rq, &e);
    wgllm_openai_request_free(&rq);
    enum MHD_Result ret = out ? srv_send_text(&g_srv, c, 200, "application/json", out) : srv_send_err(&g_srv, c, &e);
    atomic_fetch_sub(&g_srv.inflight, 1);
    return ret;
}

/* The whole body is in: the OpenAI layer parses and checks it; answer. */
static enum MHD_Result respond(struct MHD_Connection *c, struct conn *cn) {
    const char *text = cn->body.data ? cn->body.data : "";
    if (cn->route == ROUTE_EMBEDDINGS) return embeddings(c, text, cn->body.len, cn->tenant);
    /* these run on the served model only */
    if ((cn->route == ROUTE_TOKENIZE || cn->route == ROUTE_DETOKENIZE) &&
        !srv_policy_allows(g_srv.policy, cn->tenant, g_srv.model_id))
        return model_not_allowed(c, cn->tenant, g_srv.model_id);
    if (cn->route == ROUTE_TOKENIZE || cn->route == ROUTE_DETOKENIZE) {
        struct wgllm_openai_error e;
        char *out = cn->route == ROUTE_TOKENIZE ? wgllm_openai_tokenize(&g_srv.api, text, cn->body.len, &e)
                                                : wgllm_openai_detokenize(&g_srv.api, text, cn->body.len, &e);
        return out ? srv_send_text(&g_srv, c, 200, "application/json", out) : srv_send_err(&g_srv, c, &e);
    }
    return srv_generate(&g_srv, c, text, cn->body.len,
                        cn->route == ROUTE_MESSAGES    ? SRV_ANTHROPIC
                        : cn->route == ROUTE_RESPONSES ? SRV_RESPONSES
                        : cn->route == ROUTE_CHAT      ? SRV_CHAT
                                                       : SRV_COMPLETIONS,
                        cn->tenant);
}

/* The OpenAI layer's question for a `model` that is not the served one: an
 * --upstream of that name forwards the request there, through the client. */
static const char *upstream_named(void *user, const char *model) {
    const struct wgllm_endpoint_desc *d = wgllm_client_find(user, model);
    return d && d->kind != WGLLM_ENDPOINT_LOCAL ? d->name : NULL; /* --route's "local" is the served model */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)cls;
    (void)version;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof(*cn));
        if (!cn) return MHD_NO;
        *con_cls = cn;
        return begin(c, url, method, cn);
    }
    if (*data_size) {
        /* a body after an early answer is dropped, never buffered */
        enum MHD_Result ret = cn->route ? upload(c, cn, data, *data_size) : MHD_YES;
        *data_size = 0;
        return ret;
    }
    if (cn->refused || !cn->route) return MHD_YES; /* answered already */
    return respond(c, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)toe;
    /* a stream switched the idle timeout off for its connection (stream.c): a kept-alive connection gets it back */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)g_idle_timeout);
    struct conn *cn = *con_cls;
    if (cn) {
        wgllm_strbuf_free(&cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

/* ---- command line --------------------------------------------------------- */

/* The handler may run on any thread of the process (the engine's and
 * libmicrohttpd's threads do not block signals), so `pause()` in the main
 * thread could sleep through it: the handler writes to a pipe the main
 * thread polls instead, which wakes it whichever thread took the signal. */
static volatile sig_atomic_t g_signal;
static int g_signal_pipe[2] = {-1, -1};
static void on_signal(int sig) {
    const int saved = errno;
    g_signal = sig;
    const char b = 1;
    if (g_signal_pipe[1] >= 0 && write(g_signal_pipe[1], &b, 1) < 0) {
        /* a full pipe already holds a wake-up */
    }
    errno = saved;
}

/* Waits up to `ms` milliseconds (-1: forever) for a signal; true when one came.
 * The pipe is drained whatever poll() says: a signal taken by this thread
 * interrupts poll (EINTR) after its handler has written the byte, which must
 * not be left for the next wait to find. */
static bool wait_signal(int ms) {
    struct pollfd p = {.fd = g_signal_pipe[0], .events = POLLIN};
    (void)poll(&p, 1, ms);
    bool got = false;
    char buf[16];
    while (read(g_signal_pipe[0], buf, sizeof(buf)) > 0) got = true;
    return got;
}

static const char *serve_usage =
    "usage: wgllm serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-size N]\n"
    "                   [--threads N] [--backend cpu|webgpu|auto] [--api-key KEY] [--chat-template FILE]\n"
    "                   [--alias NAME] [--max-queue N] [--timeout SECONDS] [--upstream NAME=URL[#MODEL]]...\n"
    "                   [--context-shift [--keep N]] [--max-tokens N] [--cors ORIGIN[,ORIGIN...]]\n"
    "                   [--max-connections N] [--max-connections-per-ip N] [--idle-timeout SECONDS]\n"
    "                   [--read-timeout SECONDS] [--shutdown-timeout SECONDS] [--upstream-check SECONDS]\n"
    "                   [--api-key-file FILE] [--route NAME=TARGET[,TARGET...]]...\n"
    "  OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/embeddings,\n"
    "  /v1/models, /health, /metrics, llama.cpp's /tokenize and /detokenize, and Anthropic's\n"
    "  /v1/messages and OpenAI's /v1/responses (each served as the chat it means; the key\n"
    "  also as x-api-key).\n"
    "  --port 0 picks a free port (printed on stderr).\n"
    "  --upstream (repeatable): requests whose `model` is NAME are forwarded to the\n"
    "  OpenAI-compatible base URL (e.g. http://host:8080/v1), as MODEL when given\n"
    "  (else without a `model` field); chat, completions (streaming included) and\n"
    "  embeddings (input, encoding_format, dimensions, user as given; pooling is local);\n"
    "  messages, tools, tool_choice, parallel_tool_calls, response_format and\n"
    "  chat_template_kwargs go as given, and the upstream's tool calls come back;\n"
    "  grammar, json_schema, logprobs and sampler knobs OpenAI lacks are refused;\n"
    "  --timeout bounds each forwarded request (default 600).\n"
    "  Several servers of one upstream: NAME=URL1,URL2,...[#MODEL]. A request goes to the one\n"
    "  with the fewest in flight; one that cannot connect, breaks or answers 5xx before any\n"
    "  token reached the client is sent to the next (never after), and that server is\n"
    "  skipped for a cooldown (10 s). --upstream-check (default 10, 0 = off): every SECONDS,\n"
    "  GET URL/models on each; an answer ends a cooldown, a failure starts one. Per upstream,\n"
    "  from the environment (NAME upper-cased, other characters as _): WGLLM_UPSTREAM_NAME_KEY\n"
    "  (its bearer key), _TIMEOUT and _COOLDOWN (seconds), _COST (per 1M tokens, for routes).\n"
    "  /metrics: wgllm_upstream_*.\n"
    "  --route (repeatable): generation requests (chat, completions, messages, responses) whose\n"
    "  `model` is NAME go to the TARGET (local = the served model, or an --upstream NAME) with\n"
    "  the lowest estimated time to first token plus WGLLM_ROUTE_<NAME>_COST_WEIGHT (default\n"
    "  1000) ms per unit of cost: local from its cached prefix of the prompt, queue and measured\n"
    "  prefill rate; an upstream from its replicas' latency, calls in flight and health;\n"
    "  WGLLM_LOCAL_COST prices the local one. An upstream with no healthy replica loses to any\n"
    "  healthy target; grammar, json_schema, logprobs, context_key and other local-only fields\n"
    "  go local. An upstream that fails before any token reached the client (all its replicas\n"
    "  tried) falls back to the local engine when the route has it. The answer's wgllm.route\n"
    "  (and a stream's last chunk) shows the decision, its inputs and any fallback; /metrics:\n"
    "  wgllm_route_*. With --api-key-file, a tenant allowed NAME may be served by any target.\n"
    "  --api-key-file: several keys, each a tenant: {\"keys\": [{\"name\", \"key\" or \"key_env\",\n"
    "  \"models\": [...], \"requests_per_minute\", \"tokens_per_minute\"}]}. A model not in its list\n"
    "  is a 403, a limit a 429 with Retry-After; a tenant's KV caches (prefix reuse,\n"
    "  context_key, cached_tokens) are never reused by another. /metrics: wgllm_tenant_*.\n"
    "  A generation that fills its slot's context (--ctx-size) fails with context_length_exceeded,\n"
    "  or with --context-shift drops the oldest half of the tokens after the first N (--keep;\n"
    "  default -1: the whole prompt) and goes on, as llama.cpp's context shift; without\n"
    "  max_tokens it then ends after one context of tokens. --max-tokens: the largest\n"
    "  max_tokens a request may ask (default: 65536 or the context, if larger).\n"
    "  Abuse limits: bodies of 8 MiB, headers of 32 KiB, JSON 32 deep with 65536 values;\n"
    "  --max-connections (default 1024) and --max-connections-per-ip (default 64) close\n"
    "  connections over them at accept; --idle-timeout (default 30) closes a silent\n"
    "  connection (never one whose stream is running); --read-timeout (default 60) bounds\n"
    "  how long a request's body may take. --cors: answer browser pages of these origins (\"*\" = any;\n"
    "  default: no CORS headers). SIGTERM/SIGINT: new connections are refused, in-flight\n"
    "  requests get --shutdown-timeout seconds (default 10) to finish, then are cancelled.\n";

static bool parse_num(const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) return false;
    *out = (int)x;
    return true;
}

/* An upstream's settings from the environment (keys must not be on the
 * command line, where ps shows them): WGLLM_UPSTREAM_<NAME>_KEY names the
 * key's variable for the client; _TIMEOUT and _COOLDOWN are seconds. */
static bool upstream_env(struct wgllm_endpoint_desc *d, char *key_var, size_t cap) {
    char prefix[128];
    size_t n = (size_t)snprintf(prefix, sizeof prefix, "WGLLM_UPSTREAM_");
    for (const char *p = d->name; *p && n + 1 < sizeof prefix; p++)
        prefix[n++] = (char)(isalnum((unsigned char)*p) ? toupper((unsigned char)*p) : '_');
    prefix[n] = 0;
    snprintf(key_var, cap, "%s_KEY", prefix);
    if (getenv(key_var) && *getenv(key_var)) d->api_key_env = key_var;
    static const char *const NUM[] = {"TIMEOUT", "COOLDOWN"};
    for (int i = 0; i < 2; i++) {
        char var[160];
        snprintf(var, sizeof var, "%s_%s", prefix, NUM[i]);
        const char *v = getenv(var);
        if (!v || !*v) continue;
        int x;
        if (!parse_num(v, 1, 1 << 20, &x)) {
            fprintf(stderr, "wgllm serve: %s=%s: expected seconds (1 to %d)\n", var, v, 1 << 20);
            return false;
        }
        *(i ? &d->cooldown_s : &d->timeout_s) = x;
    }
    char msg[300];
    if (!srv_upstream_cost(d->name, &d->cost, msg, sizeof msg)) {
        fprintf(stderr, "wgllm serve: %s\n", msg);
        return false;
    }
    return true;
}

/* --upstream-check: health checks of every upstream replica, until the server drains. */
static int g_check_s;
static void *health_loop(void *arg) {
    struct wgllm_client *c = arg;
    for (;;) {
        for (int i = 0; i < g_check_s * 10; i++) {
            if (atomic_load(&g_srv.draining)) return NULL;
            usleep(100 * 1000);
        }
        wgllm_client_check(c, g_check_s < 5 ? g_check_s : 5, &g_srv.draining);
    }
}

int wgllm_serve_main(int argc, char **argv) {
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = NULL, *tmpl_path = NULL, *alias = NULL;
    const char *backend = "cpu";
    int port = 8080, parallel = 4, ctx = 0, threads = 0, max_queue = 256, timeout = 600, keep = -1;
    int max_tokens = 0, max_conns = 1024, max_conns_ip = 64, idle_timeout = 30, read_timeout = 60, stop_timeout = 10;
    int check_s = 10;
    const char *cors = NULL, *key_file = NULL;
    bool context_shift = false;
    enum { MAX_UPSTREAMS = 16 };
    const char *upstreams[MAX_UPSTREAMS], *routes[MAX_UPSTREAMS];
    int n_up = 0, n_routes = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_usage, stdout);
            return 0;
        }
        if (!strcmp(a, "--context-shift")) { /* the one option without a value */
            context_shift = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "wgllm serve: option %s needs a value\n%s", a, serve_usage);
            return 2;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--port")) ok = parse_num(v, 0, 65535, &port);
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) ok = parse_num(v, 1, 256, &parallel);
        else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c") || !strcmp(a, "--ctx")) ok = parse_num(v, 0, 1 << 24, &ctx);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) ok = parse_num(v, 0, 4096, &threads);
        else if (!strcmp(a, "--max-queue")) ok = parse_num(v, 0, 1 << 20, &max_queue);
        else if (!strcmp(a, "--timeout")) ok = parse_num(v, 1, 1 << 20, &timeout);
        else if (!strcmp(a, "--keep")) ok = parse_num(v, -1, 1 << 24, &keep);
        else if (!strcmp(a, "--max-tokens")) ok = parse_num(v, 1, 1 << 30, &max_tokens);
        else if (!strcmp(a, "--max-connections")) ok = parse_num(v, 1, 1 << 16, &max_conns);
        else if (!strcmp(a, "--max-connections-per-ip")) ok = parse_num(v, 0, 1 << 16, &max_conns_ip);
        else if (!strcmp(a, "--idle-timeout")) ok = parse_num(v, 1, 1 << 20, &idle_timeout);
        else if (!strcmp(a, "--read-timeout")) ok = parse_num(v, 1, 1 << 20, &read_timeout);
        else if (!strcmp(a, "--shutdown-timeout")) ok = parse_num(v, 0, 1 << 20, &stop_timeout);
        else if (!strcmp(a, "--upstream-check")) ok = parse_num(v, 0, 1 << 20, &check_s);
        else if (!strcmp(a, "--cors")) ok = *(cors = v) != 0;
        else if (!strcmp(a, "--api-key")) ok = *(api_key = v) != 0; /* an empty key would open the server */
        else if (!strcmp(a, "--api-key-file")) key_file = v;
        else if (!strcmp(a, "--chat-template")) tmpl_path = v;
        else if (!strcmp(a, "--alias")) alias = v;
        else if (!strcmp(a, "--backend") || !strcmp(a, "-b")) backend = v;
        else if (!strcmp(a, "--upstream")) {
            ok = n_up < MAX_UPSTREAMS && strchr(v, '=') && strchr(v, '=') != v;
            if (ok) upstreams[n_up++] = v;
        }
        else if (!strcmp(a, "--route")) {
            ok = n_routes < MAX_UPSTREAMS;
            if (ok) routes[n_routes++] = v;
        }
        else {
            fprintf(stderr, "wgllm serve: unknown option '%s'\n%s", a, serve_usage);
            return 2;
        }
        if (!ok && !strcmp(a, "--api-key")) {
            fprintf(stderr, "wgllm serve: bad value '' for --api-key: an empty key would leave the server open "
                            "(leave the option out for that)\n");
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "wgllm serve: bad value '%s' for %s\n", v, a);
            return 2;
        }
        i++;
    }
    if (!model_path) {
        fprintf(stderr, "wgllm serve: -m MODEL is required\n%s", serve_usage);
        return 2;
    }
    enum wgllm_backend be = !strcmp(backend, "cpu") ? WGLLM_BACKEND_CPU : !strcmp(backend, "webgpu") ? WGLLM_BACKEND_WEBGPU
                            : !strcmp(backend, "auto") ? WGLLM_BACKEND_AUTO : (enum wgllm_backend)-1;
    if ((int)be < 0) {
        fprintf(stderr, "wgllm serve: unknown backend '%s' (use cpu, webgpu or auto)\n", backend);
        return 2;
    }
    if (api_key && key_file) {
        fprintf(stderr, "wgllm serve: --api-key and --api-key-file exclude each other (put the key in the file)\n");
        return 2;
    }
    struct srv_policy *policy = NULL;
    if (key_file) {
        char msg[256];
        if (!(policy = srv_policy_load(key_file, msg, sizeof msg))) {
            fprintf(stderr, "wgllm serve: --api-key-file %s: %s\n", key_file, msg);
            return 2;
        }
    }
    /* what a failure below frees (each free takes NULL / an empty buffer) */
    int rc = 1;
    char *tmpl = NULL;
    struct wgllm_client *client = NULL;
    struct wgllm_model *model = NULL;
    struct wgllm_engine *eng = NULL;
    struct wgllm_strbuf up_names = {0};
    struct MHD_Daemon *d = NULL;
    struct wgllm_error err; /* no size bound: the template parser has its own memory budget */
    if (tmpl_path && wgllm_read_file(tmpl_path, 0, &tmpl, NULL, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: cannot read chat template: %s\n", err.message);
        goto fail;
    }
    if ((n_up > 0 || n_routes > 0) && wgllm_client_init(&client, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        goto fail;
    }
    for (int i = 0; i < n_up; i++) {
        /* NAME=URL[#MODEL] */
        char spec[1024];
        snprintf(spec, sizeof(spec), "%s", upstreams[i]);
        char *eq = strchr(spec, '='), *hash = strchr(eq + 1, '#');
        *eq = 0;
        if (hash) *hash = 0;
        struct wgllm_endpoint_desc ud = {.name = spec, .kind = WGLLM_ENDPOINT_GATEWAY, .base_url = eq + 1,
                                         .model = hash && hash[1] ? hash + 1 : NULL,
                                         .ops = WGLLM_OP_ALL, .timeout_s = timeout};
        char key_var[160];
        if (!upstream_env(&ud, key_var, sizeof key_var)) {
            rc = 2;
            goto fail;
        }
        if (wgllm_client_add(client, &ud, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "wgllm serve: --upstream %s: %s\n", upstreams[i], err.message);
            rc = 2;
            goto fail;
        }
    }
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = threads;
    if (wgllm_model_load(model_path, &mp, &model, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        goto fail;
    }
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = parallel;
    ep.n_ctx = ctx;
    ep.n_threads = threads;
    ep.max_queue = max_queue;
    ep.chat_template = tmpl;
    ep.context_shift = context_shift;
    ep.context_keep = keep;
    ep.backend = be;
    if (wgllm_engine_init(model, &ep, &eng, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        goto fail;
    }
    if (n_routes > 0) {
        /* the served model as the client's local endpoint: what a route's "local" target measures */
        struct wgllm_endpoint_desc ld = {.name = SRV_LOCAL_TARGET, .kind = WGLLM_ENDPOINT_LOCAL, .engine = eng,
                                         .ops = WGLLM_OP_QUERY | WGLLM_OP_CHAT};
        char msg[300] = "";
        const bool ok = srv_env_number("WGLLM_LOCAL_COST", 0, 1e12, &ld.cost, msg, sizeof msg) &&
                        wgllm_client_add(client, &ld, &err) == WGLLM_STATUS_OK;
        if (!ok) {
            fprintf(stderr, "wgllm serve: --route: %s%s\n", *msg ? msg : err.message,
                    *msg ? "" : " (the name 'local' stands for the served model)");
            rc = 2;
            goto fail;
        }
    }
    const char *base = strrchr(model_path, '/');
    memset(&g_srv, 0, sizeof(g_srv));
    g_srv.model = model;
    g_srv.engine = eng;
    g_srv.model_id = alias ? alias : base ? base + 1 : model_path;
    g_srv.model_path = model_path;
    g_srv.api_key = api_key;
    g_srv.created = (long)time(NULL);
    g_srv.client = client;
    g_srv.policy = policy;
    char route_msg[512];
    if (!srv_routes_setup(&g_srv, routes, n_routes, route_msg, sizeof route_msg)) {
        fprintf(stderr, "wgllm serve: %s\n", route_msg);
        rc = 2;
        goto fail;
    }
    const int n_ctx = wgllm_engine_n_ctx(eng);
    /* the names an unknown model's 404 lists: upstreams and routes */
    for (int i = 0; i < wgllm_client_count(client); i++)
        if (wgllm_client_at(client, i)->kind != WGLLM_ENDPOINT_LOCAL)
            wgllm_strbuf_printf(&up_names, "%s%s", up_names.len ? "', '" : "", wgllm_client_at(client, i)->name);
    for (int i = 0; i < g_srv.n_routes; i++)
        wgllm_strbuf_printf(&up_names, "%s%s", up_names.len ? "', '" : "", g_srv.routes[i].name);
    g_srv.api = (struct wgllm_openai_params){
        .model = model, .engine = eng, .model_id = g_srv.model_id, .model_alias = model_path,
        .max_tokens = max_tokens ? max_tokens : (n_ctx > 65536 ? n_ctx : 65536), .n_ctx = n_ctx,
        .upstream = client ? upstream_named : NULL, .upstream_user = client, .upstream_names = up_names.data};
    g_srv.cors = cors;
    g_read_timeout = read_timeout;
    g_idle_timeout = idle_timeout;

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", port);
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "wgllm serve: cannot resolve host '%s': %s\n", host, gai_strerror(gai));
        goto fail;
    }
    signal(SIGPIPE, SIG_IGN);
    /* ITC: MHD_quiesce_daemon, to stop accepting while in-flight requests finish */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)idle_timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)max_conns_ip,
        /* the request line and headers must fit (with room for the read buffer) */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "wgllm serve: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "wgllm serve: backend %s\n", wgllm_engine_backend(eng));
    fprintf(stderr, "wgllm serve: model %s, %d slots, listening on http://%s:%u\n", g_srv.model_id, parallel, host,
            info ? (unsigned)info->port : (unsigned)port);
    fflush(stderr);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    if (pipe(g_signal_pipe) != 0) {
        fprintf(stderr, "wgllm serve: cannot create the signal pipe: %s\n", strerror(errno));
        goto fail;
    }
    for (int i = 0; i < 2; i++) fcntl(g_signal_pipe[i], F_SETFL, fcntl(g_signal_pipe[i], F_GETFL) | O_NONBLOCK);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pthread_t health;
    g_check_s = check_s;
    const bool checking = client && check_s > 0 && pthread_create(&health, NULL, health_loop, client) == 0;
    while (!g_signal) wait_signal(-1);
    const int sig = (int)g_signal;
    g_signal = 0;
    /* 1. refuse: the listening socket closes, open connections get 503 */
    atomic_store(&g_srv.draining, true);
    const MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    fprintf(stderr, "wgllm serve: stopping (signal %d): %d requests in flight get %d s to finish\n", sig,
            atomic_load(&g_srv.inflight), stop_timeout);
    fflush(stderr);
    /* 2. finish: in-flight requests run on until the deadline (a second signal cuts it short) */
    const int64_t deadline = wgllm_time_us() + (int64_t)stop_timeout * 1000000;
    while (atomic_load(&g_srv.inflight) > 0 && wgllm_time_us() < deadline)
        if (wait_signal(20)) break;
    /* 3. cancel what still runs; each request's owner sees `stopping` within a wait slice */
    const int left = atomic_load(&g_srv.inflight);
    if (left > 0) fprintf(stderr, "wgllm serve: cancelling %d requests\n", left);
    atomic_store(&g_srv.stopping, true);
    const int64_t grace = wgllm_time_us() + 10 * 1000000;
    while (atomic_load(&g_srv.inflight) > 0 && wgllm_time_us() < grace) usleep(20 * 1000);
    MHD_stop_daemon(d);
    d = NULL;
    if (atomic_load(&g_srv.inflight) > 0) {
        /* a request still refers to the engine (an upstream that does not answer): freeing it would be a
         * use after free, so the process ends without the cleanup */
        fprintf(stderr, "wgllm serve: %d requests did not end; exiting without freeing the engine\n",
                atomic_load(&g_srv.inflight));
        fflush(stderr);
        _exit(1);
    }
    if (checking) pthread_join(health, NULL);
    fprintf(stderr, "wgllm serve: stopped\n");
    rc = 0;
fail:
    if (d) MHD_stop_daemon(d);
    srv_policy_free(policy);
    wgllm_strbuf_free(&up_names);
    srv_routes_free(&g_srv);
    wgllm_engine_free(eng);
    wgllm_model_free(model);
    wgllm_client_free(client);
    free(tmpl);
    return rc;
}

/* `wgllm serve` as the command table (src/cli/main.c) reaches it. */
int wgllm_cli_serve(int argc, char **argv) { return wgllm_serve_main(argc, argv); }
