/*
 * server.c - the HTTP side of `wgllm serve`: libmicrohttpd daemon (one thread
 * per connection, so handlers may block on the engine), routing, API key,
 * body limits, SSE streaming and cancellation of abandoned streams.
 *
 * Streaming: on_token runs on the engine thread and appends SSE chunks to a
 * per-request queue; MHD's content reader runs on the connection's thread and
 * blocks on that queue. A small waiter thread per stream collects the final
 * result (usage, finish reason) and closes the queue. When the client goes
 * away MHD frees the response, the queue is marked gone, and the next
 * on_token returns false, which cancels the request in the engine.
 */
#include "server/server.h"

#include "base/base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
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

#define BODY_LIMIT (8u << 20)

static struct srv g_srv;

/* ---- per-connection request state ----------------------------------------- */

struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
};

static void add_common_headers(struct MHD_Response *r, const char *ctype) {
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *text) {
    atomic_fetch_add(&g_srv.http_requests, 1);
    if (status >= 400) atomic_fetch_add(&g_srv.http_errors, 1);
    if (!text) {
        status = 500;
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(text ? strlen(text) : 0, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    add_common_headers(r, ctype);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_err(struct MHD_Connection *c, const struct srv_err *e) {
    return send_text(c, (unsigned)e->status, "application/json", srv_err_json(e));
}

static enum MHD_Result send_errf(struct MHD_Connection *c, int status, const char *type, const char *param,
                                 const char *code, const char *msg) {
    struct srv_err e;
    srv_err_set(&e, status, type, param, code, "%s", msg);
    return send_err(c, &e);
}

/* ---- streaming ------------------------------------------------------------ */

struct stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *buf;
    size_t len, cap, off;
    bool done, gone;
    int refs; /* the response and the waiter thread */
    struct wgllm_request *req;
    struct srv_gen gen;
    const char *upstream; /* forwarded through the client instead of the engine */
    char id[48];
};

static void stream_unref_locked(struct stream *st) {
    if (--st->refs > 0) {
        pthread_mutex_unlock(&st->mu);
        return;
    }
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    srv_gen_free(&st->gen);
    free(st->buf);
    free(st);
}

/* Appends (and frees) a chunk; caller holds mu. */
static void stream_push_locked(struct stream *st, char *chunk) {
    if (!chunk) return;
    size_t n = strlen(chunk);
    if (st->len + n > st->cap) {
        size_t cap = (st->cap ? st->cap * 2 : 4096) + n;
        char *p = realloc(st->buf, cap);
        if (!p) {
            free(chunk);
            return;
        }
        st->buf = p;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, chunk, n);
    st->len += n;
    free(chunk);
    pthread_cond_broadcast(&st->cv);
}

static bool stream_on_token(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct stream *st = ud;
    char *chunk = NULL;
    if (len > 0 || (st->gen.logprobs && st->gen.top_logprobs == 0 && token >= 0))
        chunk = srv_gen_chunk(&g_srv, &st->gen, st->id, text, len, token, logprob, false, NULL);
    pthread_mutex_lock(&st->mu);
    const bool keep = !st->gone && !atomic_load(&g_srv.stopping);
    if (keep) stream_push_locked(st, chunk);
    else free(chunk);
    pthread_mutex_unlock(&st->mu);
    return keep;
}

/* A client (upstream) failure as an HTTP error: the upstream's own status when
 * it answered one, 502 when it could not be reached. */
static void upstream_err(struct srv_err *e, enum wgllm_status st, const char *msg) {
    srv_err_from_engine(e, st, msg);
    const char *h = strstr(msg, "answered HTTP ");
    long code = h ? strtol(h + 14, NULL, 10) : 0;
    if (code >= 400 && code < 600) e->status = (int)code;
    else if (st == WGLLM_STATUS_IO || st == WGLLM_STATUS_BAD_FORMAT) e->status = 502;
    if (e->status == 404) e->code = "model_not_found";
    /* "client: 'top_k' is local-only ...": the request field to blame */
    const char *q = strncmp(msg, "client: '", 9) ? NULL : msg + 9, *qe = q ? strchr(q, '\'') : NULL;
    if (qe && strstr(qe, "is local-only") == qe + 2) snprintf(e->param, sizeof(e->param), "%.*s", (int)(qe - q), q);
}

static enum wgllm_status upstream_call(struct srv_gen *g, const char *upstream, struct wgllm_result *res,
                                       struct wgllm_error *werr) {
    if (g->chat) return wgllm_client_chat(g_srv.client, upstream, g->msgs, g->n_msgs, &g->rp, res, werr);
    return wgllm_client_query(g_srv.client, upstream, g->prompt, &g->rp, res, werr);
}

static void *stream_waiter(void *arg) {
    struct stream *st = arg;
    struct wgllm_result res;
    if (st->upstream) {
        struct wgllm_error werr = {0};
        upstream_call(&st->gen, st->upstream, &res, &werr);
        if (res.finish == WGLLM_FINISH_ERROR) snprintf(res.message, sizeof(res.message), "%.255s", werr.message);
    } else {
        wgllm_request_wait(st->req, &res);
    }
    char *tail = NULL, *usage = NULL;
    if (res.finish == WGLLM_FINISH_ERROR) {
        struct srv_err e;
        if (st->upstream) upstream_err(&e, res.status, res.message);
        else srv_err_from_engine(&e, res.status, res.message);
        char *j = srv_err_json(&e);
        if (j) {
            size_t n = strlen(j) + 9;
            tail = malloc(n);
            if (tail) snprintf(tail, n, "data: %s\n\n", j);
            free(j);
        }
    } else {
        if (st->gen.logprobs && st->gen.top_logprobs > 0) {
            char *lp = srv_gen_logprobs_chunk(&g_srv, &st->gen, st->id, &res);
            pthread_mutex_lock(&st->mu);
            stream_push_locked(st, lp);
            pthread_mutex_unlock(&st->mu);
        }
        tail = srv_gen_chunk(&g_srv, &st->gen, st->id, NULL, 0, -1, 0, false, srv_finish_name(res.finish));
        if (st->gen.include_usage) usage = srv_gen_usage_chunk(&g_srv, &st->gen, st->id, &res.usage);
    }
    wgllm_result_free(&res);
    pthread_mutex_lock(&st->mu);
    stream_push_locked(st, tail);
    stream_push_locked(st, usage);
    stream_push_locked(st, strdup("data: [DONE]\n\n"));
    st->done = true;
    st->req = NULL;
    pthread_cond_broadcast(&st->cv);
    stream_unref_locked(st);
    return NULL;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    struct stream *st = cls;
    (void)pos;
    pthread_mutex_lock(&st->mu);
    while (st->off == st->len && !st->done) {
        if (atomic_load(&g_srv.stopping)) {
            pthread_mutex_unlock(&st->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        if (pthread_cond_timedwait(&st->cv, &st->mu, &ts) == ETIMEDOUT && st->off == st->len && !st->done) {
            /* an SSE comment: keeps proxies open and finds a vanished client during a long prefill */
            static const char ping[] = ": keep-alive\n\n";
            pthread_mutex_unlock(&st->mu);
            if (max < sizeof(ping) - 1) return 0;
            memcpy(out, ping, sizeof(ping) - 1);
            return (ssize_t)(sizeof(ping) - 1);
        }
    }
    if (st->off == st->len) { /* done and drained */
        pthread_mutex_unlock(&st->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    if (st->off == st->len) st->off = st->len = 0;
    pthread_mutex_unlock(&st->mu);
    return (ssize_t)n;
}

static void stream_response_freed(void *cls) {
    struct stream *st = cls;
    pthread_mutex_lock(&st->mu);
    if (!st->done) st->gone = true; /* the next token cancels the request */
    stream_unref_locked(st);
}

/* ---- generation ----------------------------------------------------------- */

static void make_id(char *id, size_t n, const char *prefix) {
    static atomic_ullong counter;
    unsigned long long k = atomic_fetch_add(&counter, 1);
    snprintf(id, n, "%s-%lx%llx", prefix, (unsigned long)time(NULL), k);
}

static enum wgllm_status submit(struct srv_gen *g, struct wgllm_request **req, struct wgllm_error *werr) {
    enum wgllm_status st =
        g->chat ? wgllm_engine_submit_chat(g_srv.engine, g->msgs, g->n_msgs, &g->rp, req, werr)
                : wgllm_engine_submit_query(g_srv.engine, g->prompt, strlen(g->prompt), &g->rp, req, werr);
    /* the engine's contract, checked where a broken promise would take the whole server down */
    if (st == WGLLM_STATUS_OK && !*req)
        st = wgllm_error_set(werr, WGLLM_STATUS_UNSUPPORTED, "the engine accepted the request without a handle");
    return st;
}

static enum MHD_Result handle_generate(struct MHD_Connection *c, const cJSON *body, bool chat,
                                       const char *upstream) {
    struct srv_err e;
    struct stream *st = calloc(1, sizeof(*st));
    if (!st) return send_errf(c, 500, "server_error", NULL, NULL, "out of memory");
    st->upstream = upstream;
    if (upstream ? !srv_gen_parse_upstream(&g_srv, body, chat, upstream, &st->gen, &e)
                 : !srv_gen_parse(&g_srv, body, chat, &st->gen, &e)) {
        srv_gen_free(&st->gen);
        free(st);
        return send_err(c, &e);
    }
    struct srv_gen *g = &st->gen;
    make_id(st->id, sizeof(st->id), chat ? "chatcmpl" : "cmpl");
    struct wgllm_error werr = {0};
    struct wgllm_request *req = NULL;
    if (upstream && !g->stream) {
        struct wgllm_result res;
        enum wgllm_status rc = upstream_call(g, upstream, &res, &werr);
        enum MHD_Result ret;
        if (rc != WGLLM_STATUS_OK || res.finish == WGLLM_FINISH_ERROR) {
            upstream_err(&e, rc != WGLLM_STATUS_OK ? rc : res.status, werr.message);
            ret = send_err(c, &e);
        } else {
            ret = send_text(c, 200, "application/json", srv_gen_response(&g_srv, g, st->id, &res));
        }
        wgllm_result_free(&res);
        srv_gen_free(g);
        free(st);
        return ret;
    }
    if (!g->stream) {
        enum wgllm_status rc = submit(g, &req, &werr);
        if (rc != WGLLM_STATUS_OK) {
            srv_err_from_engine(&e, rc, werr.message);
            if (e.code && !strcmp(e.code, "context_length_exceeded"))
                snprintf(e.param, sizeof(e.param), "%s", chat ? "messages" : "prompt");
            srv_gen_free(g);
            free(st);
            return send_err(c, &e);
        }
        struct wgllm_result res;
        wgllm_request_wait(req, &res);
        enum MHD_Result ret;
        if (res.finish == WGLLM_FINISH_ERROR) {
            srv_err_from_engine(&e, res.status, res.message);
            ret = send_err(c, &e);
        } else {
            ret = send_text(c, 200, "application/json", srv_gen_response(&g_srv, g, st->id, &res));
        }
        wgllm_result_free(&res);
        srv_gen_free(g);
        free(st);
        return ret;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    g->rp.on_token = stream_on_token;
    g->rp.user_data = st;
    if (chat) stream_push_locked(st, srv_gen_chunk(&g_srv, g, st->id, NULL, 0, -1, 0, true, NULL));
    /* an upstream starts in the waiter thread; its failures arrive as an error event */
    enum wgllm_status rc = upstream ? WGLLM_STATUS_OK : submit(g, &req, &werr);
    if (rc != WGLLM_STATUS_OK) {
        srv_err_from_engine(&e, rc, werr.message);
        if (e.code && !strcmp(e.code, "context_length_exceeded"))
            snprintf(e.param, sizeof(e.param), "%s", chat ? "messages" : "prompt");
        pthread_mutex_lock(&st->mu);
        st->refs = 1;
        stream_unref_locked(st);
        return send_err(c, &e);
    }
    st->req = req;
    st->refs = 2;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, st, stream_response_freed);
    pthread_t th;
    if (pthread_create(&th, NULL, stream_waiter, st) != 0) {
        /* cannot happen often; cancel and collect synchronously */
        wgllm_request_cancel(req);
        stream_waiter(st);
    } else {
        pthread_detach(th);
    }
    if (!r) {
        stream_response_freed(st);
        return MHD_NO;
    }
    add_common_headers(r, "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    atomic_fetch_add(&g_srv.http_requests, 1);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- routing -------------------------------------------------------------- */

static bool utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : c & (0x7Fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

static bool authorized(struct MHD_Connection *c) {
    if (!g_srv.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(g_srv.api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)g_srv.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *method, struct conn *cn) {
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) return send_text(c, 204, "text/plain", strdup(""));
    if (!strcmp(url, "/health") && get) return send_text(c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (!authorized(c))
        return send_errf(c, 401, "invalid_request_error", NULL, "invalid_api_key",
                         "missing or wrong API key: send 'Authorization: Bearer <key>'");
    if (!strcmp(url, "/metrics") && get) return send_text(c, 200, "text/plain; version=0.0.4", srv_metrics(&g_srv));
    if ((!strcmp(url, "/v1/models") || !strcmp(url, "/models")) && get)
        return send_text(c, 200, "application/json", srv_models(&g_srv));
    const bool is_chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions");
    const bool is_cmpl = !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
    const bool is_embd = !strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings");
    if (!is_chat && !is_cmpl && !is_embd) {
        char msg[300];
        snprintf(msg, sizeof(msg), "unknown route %s %.200s", method, url);
        return send_errf(c, 404, "invalid_request_error", NULL, "not_found", msg);
    }
    if (!post) return send_errf(c, 405, "invalid_request_error", NULL, "method_not_allowed", "use POST on this route");
    if (cn->too_large)
        return send_errf(c, 413, "invalid_request_error", NULL, "request_too_large",
                         "the request body is larger than 8 MiB");
    if (!utf8_valid((const unsigned char *)cn->body, cn->len))
        return send_errf(c, 400, "invalid_request_error", NULL, "invalid_utf8", "the request body is not valid UTF-8");
    const char *end = NULL;
    cJSON *body = cJSON_ParseWithLengthOpts(cn->body ? cn->body : "", cn->len, &end, false);
    if (!body) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the request body is not valid JSON (near byte %ld)",
                 end && cn->body ? (long)(end - cn->body) : 0L);
        return send_errf(c, 400, "invalid_request_error", NULL, "invalid_json", msg);
    }
    enum MHD_Result ret;
    const cJSON *em = is_embd && cJSON_IsObject(body) ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
    if (cJSON_IsString(em) && !srv_model_matches(&g_srv, em->valuestring) && wgllm_client_find(g_srv.client, em->valuestring)) {
        ret = send_errf(c, 400, "invalid_request_error", "model", NULL,
                        "embeddings are not forwarded to upstreams; ask the upstream directly");
    } else if (is_embd) {
        struct srv_err e;
        char *out = srv_embeddings(&g_srv, body, &e);
        ret = out ? send_text(c, 200, "application/json", out) : send_err(c, &e);
    } else {
        /* a `model` naming an upstream goes there, through the client */
        const cJSON *m = cJSON_IsObject(body) ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
        const struct wgllm_endpoint_desc *up =
            cJSON_IsString(m) && !srv_model_matches(&g_srv, m->valuestring) ? wgllm_client_find(g_srv.client, m->valuestring)
                                                                             : NULL;
        ret = handle_generate(c, body, is_chat, up ? up->name : NULL);
    }
    cJSON_Delete(body);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof(*cn));
        if (!cn) return MHD_NO;
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > BODY_LIMIT) {
            cn->too_large = true;
            /* answer before the upload: MHD then discards it and closes */
            return send_errf(c, 413, "invalid_request_error", NULL, "request_too_large",
                             "the request body is larger than 8 MiB");
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large && cn->len + *upload_size <= BODY_LIMIT) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = (cn->cap ? cn->cap * 2 : 16384);
                while (cap < cn->len + *upload_size + 1) cap *= 2;
                char *p = realloc(cn->body, cap);
                if (!p) return MHD_NO;
                cn->body = p;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = 0;
        } else {
            cn->too_large = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return route(c, url, method, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    struct conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

/* ---- command line --------------------------------------------------------- */

static volatile sig_atomic_t g_signal;
static void on_signal(int sig) { g_signal = sig; }

static const char *serve_usage =
    "usage: wgllm serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-size N]\n"
    "                   [--threads N] [--backend cpu|webgpu|auto] [--api-key KEY] [--chat-template FILE]\n"
    "                   [--alias NAME] [--max-queue N] [--timeout SECONDS] [--upstream NAME=URL[#MODEL]]...\n"
    "                   [--context-shift [--keep N]]\n"
    "  OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/embeddings,\n"
    "  /v1/models, /health, /metrics. --port 0 picks a free port (printed on stderr).\n"
    "  --upstream (repeatable): requests whose `model` is NAME are forwarded to the\n"
    "  OpenAI-compatible base URL (e.g. http://host:8080/v1), as MODEL when given\n"
    "  (else without a `model` field); chat and completions, streaming included.\n"
    "  A generation that fills its slot's context (--ctx-size) fails with context_length_exceeded,\n"
    "  or with --context-shift drops the oldest half of the tokens after the first N (--keep;\n"
    "  default -1: the whole prompt) and goes on, as llama.cpp's context shift.\n";

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t k;
    while (s && (k = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *p = realloc(s, cap *= 2);
            if (!p) {
                free(s);
                s = NULL;
            }
            s = p;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

static bool parse_num(const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) return false;
    *out = (int)x;
    return true;
}

int wgllm_serve_main(int argc, char **argv) {
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = NULL, *tmpl_path = NULL, *alias = NULL;
    const char *backend = "cpu";
    int port = 8080, parallel = 4, ctx = 0, threads = 0, max_queue = 256, timeout = 600, keep = -1;
    bool context_shift = false;
    enum { MAX_UPSTREAMS = 16 };
    const char *upstreams[MAX_UPSTREAMS];
    int n_up = 0;
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
        else if (!strcmp(a, "--api-key")) api_key = v;
        else if (!strcmp(a, "--chat-template")) tmpl_path = v;
        else if (!strcmp(a, "--alias")) alias = v;
        else if (!strcmp(a, "--backend") || !strcmp(a, "-b")) backend = v;
        else if (!strcmp(a, "--upstream")) {
            ok = n_up < MAX_UPSTREAMS && strchr(v, '=') && strchr(v, '=') != v;
            if (ok) upstreams[n_up++] = v;
        }
        else {
            fprintf(stderr, "wgllm serve: unknown option '%s'\n%s", a, serve_usage);
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
    if (api_key && !*api_key) api_key = NULL;
    char *tmpl = NULL;
    if (tmpl_path && !(tmpl = read_file(tmpl_path))) {
        fprintf(stderr, "wgllm serve: cannot read chat template '%s': %s\n", tmpl_path, strerror(errno));
        return 1;
    }
    struct wgllm_error err;
    struct wgllm_client *client = NULL;
    if (n_up > 0 && wgllm_client_init(&client, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        free(tmpl);
        return 1;
    }
    for (int i = 0; i < n_up; i++) {
        /* NAME=URL[#MODEL] */
        char spec[1024];
        snprintf(spec, sizeof(spec), "%s", upstreams[i]);
        char *eq = strchr(spec, '='), *hash = strchr(eq + 1, '#');
        *eq = 0;
        if (hash) *hash = 0;
        struct wgllm_endpoint_desc d = {.name = spec, .kind = WGLLM_ENDPOINT_GATEWAY, .base_url = eq + 1,
                                        .model = hash && hash[1] ? hash + 1 : NULL,
                                        .ops = WGLLM_OP_QUERY | WGLLM_OP_CHAT, .timeout_s = timeout};
        if (wgllm_client_add(client, &d, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "wgllm serve: --upstream %s: %s\n", upstreams[i], err.message);
            wgllm_client_free(client);
            free(tmpl);
            return 2;
        }
    }
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = threads;
    struct wgllm_model *model = NULL;
    if (wgllm_model_load(model_path, &mp, &model, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        wgllm_client_free(client);
        free(tmpl);
        return 1;
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
    struct wgllm_engine *eng = NULL;
    if (wgllm_engine_init(model, &ep, &eng, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm serve: error: %s\n", err.message);
        wgllm_model_free(model);
        wgllm_client_free(client);
        free(tmpl);
        return 1;
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

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", port);
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "wgllm serve: cannot resolve host '%s': %s\n", host, gai_strerror(gai));
        wgllm_engine_free(eng);
        wgllm_model_free(model);
        wgllm_client_free(client);
        free(tmpl);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "wgllm serve: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
        wgllm_engine_free(eng);
        wgllm_model_free(model);
        wgllm_client_free(client);
        free(tmpl);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "wgllm serve: backend %s\n", wgllm_engine_backend(eng));
    fprintf(stderr, "wgllm serve: model %s, %d slots, listening on http://%s:%u\n", g_srv.model_id, parallel, host,
            info ? (unsigned)info->port : (unsigned)port);
    fflush(stderr);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!g_signal) pause();
    fprintf(stderr, "wgllm serve: stopping (signal %d)\n", (int)g_signal);
    atomic_store(&g_srv.stopping, true);
    MHD_stop_daemon(d);
    wgllm_engine_free(eng);
    wgllm_model_free(model);
    wgllm_client_free(client);
    free(tmpl);
    return 0;
}
