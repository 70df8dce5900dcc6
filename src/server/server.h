/*
 * server.h - `wgllm serve`: an OpenAI-compatible HTTP server on the engine.
 *
 * Native only (libmicrohttpd + cJSON), linked into the `wgllm` command and
 * never into libwgllm.a. server.c owns HTTP (daemon, routing, auth, body
 * limits, SSE streaming and disconnects); openai.c owns the JSON side
 * (request fields -> engine parameters, responses, chunks, errors, metrics).
 */
#ifndef WGLLM_SERVER_H
#define WGLLM_SERVER_H

#include "wgllm.h"
#include "client/client.h"

#include <cjson/cJSON.h>
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
    /* bounds for request fields: what the engine's slots and the vocabulary can use */
    int n_ctx, n_vocab;
    int max_tokens;         /* the largest max_tokens a request may ask (--max-tokens) */
    const char *cors;       /* --cors: "*" or comma-separated origins; NULL = no CORS headers */
    atomic_bool draining;   /* SIGTERM: in-flight requests finish, new ones are refused */
    atomic_bool stopping;   /* past the shutdown deadline: what still runs is cancelled */
    atomic_int inflight;    /* generation and embedding requests being answered */
    atomic_ullong http_requests, http_errors;
    struct wgllm_client *client; /* --upstream endpoints (gateways), NULL = none */
};

/* An OpenAI error: HTTP status plus the error object's fields. */
struct srv_err {
    int status;
    const char *type;  /* "invalid_request_error", ... */
    char param[64];    /* the offending field, "" = null */
    const char *code;  /* NULL = null */
    char message[512];
};

void srv_err_set(struct srv_err *e, int status, const char *type, const char *param, const char *code,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string. */
char *srv_err_json(const struct srv_err *e);

/* A generation request (chat or completion) mapped from JSON. */
struct srv_gen {
    bool chat, stream, include_usage, logprobs;
    int top_logprobs;
    struct wgllm_message *msgs; /* chat; strings owned by this struct */
    int n_msgs;
    char *prompt; /* completion */
    struct wgllm_request_params rp;
    struct wgllm_logit_bias *bias;
    char **stops;
    char *context_key;
    const char *model_name; /* the `model` responses show; NULL = the served model's id */
};

/* Limits on what a request body may be before it is parsed: valid UTF-8, JSON
 * nesting at most SRV_JSON_MAX_DEPTH deep and at most SRV_JSON_MAX_VALUES
 * values (what cJSON would allocate a node for). False with a 400 in *err. */
#define SRV_JSON_MAX_DEPTH 32
#define SRV_JSON_MAX_VALUES 65536
bool srv_body_check(const char *body, size_t len, struct srv_err *err);

/* Parses and validates the body; false with *err set (the status and the field). */
bool srv_gen_parse(struct srv *s, const cJSON *body, bool chat, struct srv_gen *g, struct srv_err *err);
/* The same for a request forwarded to the upstream `upstream` (a client
 * endpoint): no model match, no local vocabulary checks, no logprobs (the
 * upstream's tokens are not known here). */
bool srv_gen_parse_upstream(struct srv *s, const cJSON *body, bool chat, const char *upstream, struct srv_gen *g,
                            struct srv_err *err);
void srv_gen_free(struct srv_gen *g);

/* Maps an engine submit/result failure to an HTTP error. */
void srv_err_from_engine(struct srv_err *e, enum wgllm_status st, const char *msg);

/* The full (non-streaming) response object, malloc'd JSON. */
char *srv_gen_response(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_result *r);
/* One streamed chunk as "data: {...}\n\n", malloc'd. text may be NULL (role
 * chunk when first, else a finish chunk with finish_reason). token < 0: no logprobs. */
char *srv_gen_chunk(struct srv *s, const struct srv_gen *g, const char *id, const char *text, size_t len,
                    int32_t token, float logprob, bool first, const char *finish_reason);
/* With top_logprobs > 0 the engine hands the alternatives over only in the
 * result, so a stream carries every token's logprobs in this one chunk
 * (empty text) just before the finish chunk. */
char *srv_gen_logprobs_chunk(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_result *r);
/* The include_usage chunk. */
char *srv_gen_usage_chunk(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_usage *u);
const char *srv_finish_name(enum wgllm_finish_reason f);

/* Whole request -> response JSON, or NULL with *err. */
char *srv_embeddings(struct srv *s, const cJSON *body, struct srv_err *err);
char *srv_models(struct srv *s);
/* Prometheus exposition text. */
char *srv_metrics(struct srv *s);
/* true when `name` names the served model (404 otherwise). */
bool srv_model_matches(const struct srv *s, const char *name);

/* ---- server.c: HTTP helpers shared with stream.c ------------------------- */

/* Queues text (malloc'd, freed here; NULL = out of memory) with the common
 * headers (CORS when configured); counts the answer in the metrics. */
enum MHD_Result srv_send_text(struct srv *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text);
enum MHD_Result srv_send_err(struct srv *s, struct MHD_Connection *c, const struct srv_err *e);
void srv_add_headers(struct srv *s, struct MHD_Connection *c, struct MHD_Response *r, const char *ctype);
/* The client's socket, and whether the client behind it has gone away (closed
 * or reset): how a request notices, while it waits, that nobody will read its answer. */
int srv_client_fd(struct MHD_Connection *c);
bool srv_client_gone(int fd);

/* ---- stream.c: chat and completion requests --------------------------------- */

/* Answers a generation request (local engine, or the upstream `upstream`),
 * streaming or not; the request is cancelled when the client goes away or the
 * server stops. */
enum MHD_Result srv_generate(struct srv *s, struct MHD_Connection *c, const cJSON *body, bool chat,
                             const char *upstream);

#endif
