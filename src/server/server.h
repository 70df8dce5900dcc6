/*
 * server.h - `wgllm serve`: an OpenAI-compatible HTTP server on the engine.
 *
 * Native only (libmicrohttpd + cJSON), linked into the `wgllm` command and
 * never into libwgllm.a. server.c owns HTTP (daemon, routing, auth, body
 * limits), stream.c generation requests (SSE streaming, disconnects,
 * upstreams), info.c /v1/models and /metrics. The JSON of requests and
 * answers is the core's OpenAI layer (wgllm_openai_*), the one the browser
 * package uses too.
 */
#ifndef WGLLM_SERVER_H
#define WGLLM_SERVER_H

#include "wgllm.h"
#include "client/client.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>

/* `wgllm serve ...`: argv holds the options after the sub-command. */
int wgllm_serve_main(int argc, char **argv);

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
};

/* The OpenAI side (requests, answers, errors) is the core's layer
 * (wgllm_openai_*, include/wgllm.h), with s->api saying what this server
 * serves; what is left here is the server's own. info.c: */
char *srv_models(struct srv *s);
/* Prometheus exposition text. */
char *srv_metrics(struct srv *s);

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

/* ---- stream.c: chat and completion requests --------------------------------- */

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
                             enum srv_dialect dialect);

#endif
