/*
 * stream.c - chat and completion requests of `wgllm serve`: submitted to the
 * local engine or forwarded to an upstream (the client), answered whole or as
 * server-sent events, and cancelled when nobody will read the answer.
 *
 * Streaming: on_token runs on the engine thread and appends SSE chunks to a
 * per-request queue; MHD's content reader runs on the connection's thread and
 * blocks on that queue. A small waiter thread per stream owns the engine
 * request: it waits in slices, cancels the request when the client is gone
 * or the server stops, collects the final result (usage, finish reason) and
 * closes the queue. Only the owner of a request ever touches its handle, so
 * a cancel can never race the handle's release.
 *
 * Noticing a client that left: the content reader looks at the socket while
 * it waits (so a queued stream, which writes nothing, is noticed too); a
 * non-streaming request's handler does the same between its waits. A client
 * that shuts down its sending side after the request counts as gone (what
 * the socket shows is the same as for one that closed).
 */
#include "server/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wgllm_tools.h"

#define WAIT_SLICE_MS 100    /* how often a waiting owner looks for a reason to cancel */
#define READER_SLICE_MS 250  /* how often an idle stream looks at its client's socket */
#define KEEPALIVE_MS 5000    /* an SSE comment after this long without data: proxies stay open */

struct stream {
    struct srv *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct wgllm_strbuf buf; /* SSE bytes not yet read by MHD, from off on */
    size_t off;
    bool done, gone;
    int refs; /* the response and the waiter thread */
    struct wgllm_request *req; /* owned by the waiter thread (or the handler, not streaming) */
    struct wgllm_openai_request gen;
    const char *upstream; /* forwarded through the client instead of the engine (gen.upstream) */
    int fd;               /* the client's socket while the connection lives */
    char id[48];
    bool anthropic;       /* /v1/messages: answers and events in Anthropic's shape */
    struct wgllm_anthropic_stream an;
    struct wgllm_responses_stream *rs; /* /v1/responses, streaming: its events' state (NULL otherwise) */
    bool gen_responses;   /* /v1/responses: answers as a Response */
    int tenant;           /* --api-key-file: whose request (-1: none), charged its tokens at the end */
    char *route;          /* --route: the decision's JSON, added to the answer as wgllm.route (NULL: none) */
    struct wgllm_openai_request fallback; /* --route chose an upstream: the request parsed for the local
                                           * engine, which takes it if the upstream fails (has_fallback) */
    bool has_fallback;
    bool delivered;       /* a piece of the answer went to the client (then nothing is sent elsewhere) */
};

static void stream_free(struct stream *st) {
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    wgllm_openai_request_free(&st->gen);
    if (st->has_fallback) wgllm_openai_request_free(&st->fallback);
    wgllm_responses_stream_free(st->rs);
    wgllm_strbuf_free(&st->buf);
    free(st->route);
    atomic_fetch_sub(&st->srv->inflight, 1);
    free(st);
}

static void stream_unref_locked(struct stream *st) {
    const bool last = --st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (last) stream_free(st);
}

/* A JSON text (freed) as one server-sent event; NULL when out of memory. */
static char *sse(char *json) {
    char *out = NULL;
    if (json) {
        size_t n = strlen(json) + 9;
        if ((out = malloc(n))) snprintf(out, n, "data: %s\n\n", json);
        free(json);
    }
    return out;
}

/* A chat chunk (JSON, freed) as the stream's bytes: one `data:` event, or
 * the Anthropic events it becomes. The chunks come in order from one thread
 * at a time (the handler, then the engine, then the waiter), so the
 * translation's state needs no lock. */
static char *event(struct stream *st, char *json) {
    if (!st->anthropic && !st->rs) return sse(json);
    char *ev = !json ? NULL : st->rs ? wgllm_responses_stream_chunk(st->rs, json) : wgllm_anthropic_stream_chunk(&st->an, json);
    free(json);
    return ev;
}

/* Appends (and frees) a chunk; caller holds mu. */
static void stream_push_locked(struct stream *st, char *chunk) {
    if (!chunk) return;
    bool ok = wgllm_strbuf_puts(&st->buf, chunk); /* out of memory drops the chunk */
    free(chunk);
    if (!ok) return;
    pthread_cond_broadcast(&st->cv);
}

/* Appends (and frees) a chunk from the engine thread while the client is
 * there; false (the request is cancelled) once it left or the server stops. */
static bool stream_push_live(struct stream *st, char *chunk) {
    pthread_mutex_lock(&st->mu);
    const bool keep = !st->gone && !atomic_load(&st->srv->stopping);
    if (keep) stream_push_locked(st, chunk);
    else free(chunk);
    pthread_mutex_unlock(&st->mu);
    return keep;
}

static bool stream_on_token(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct stream *st = ud;
    st->delivered = true; /* (the thread of the call, which is the one that reads it after) */
    char *piece = NULL;
    wgllm_openai_chunk_token(&st->srv->api, &st->gen, st->id, text, len, token, logprob, &piece); /* out of memory drops it */
    return stream_push_live(st, event(st, piece));
}

/* return_progress: a chunk of prompt progress (OpenAI streams only; the
 * Anthropic and Responses translations have no such event). */
static bool stream_on_progress(const struct wgllm_prompt_progress *pp, void *ud) {
    struct stream *st = ud;
    return stream_push_live(st, event(st, wgllm_openai_chunk_progress(&st->srv->api, &st->gen, st->id, pp)));
}

/* A non-streaming upstream call is streamed from the upstream all the same,
 * with this callback: it drops the pieces (the result collects the text) and
 * aborts the transfer when the client left or the server stops. */
static bool upstream_alive(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct stream *st = ud;
    return !srv_client_gone(st->fd) && !atomic_load(&st->srv->stopping);
}

/* A client (upstream) failure as an HTTP error: the upstream's own status when
 * it answered one, 502 when it could not be reached. */
static void upstream_err(struct wgllm_openai_error *e, const struct wgllm_openai_request *g, enum wgllm_status st,
                         const char *msg) {
    wgllm_openai_error_from_engine(e, g, st, msg);
    const char *h = strstr(msg, "answered HTTP ");
    long code = h ? strtol(h + 14, NULL, 10) : 0;
    if (code >= 400 && code < 600) e->status = (int)code;
    else if (st == WGLLM_STATUS_IO || st == WGLLM_STATUS_BAD_FORMAT) e->status = 502;
    if (e->status == 404) e->code = "model_not_found";
    /* "client: 'top_k' is local-only ...": the request field to blame */
    const char *q = strncmp(msg, "client: '", 9) ? NULL : msg + 9, *qe = q ? strchr(q, '\'') : NULL;
    if (qe && strstr(qe, "is local-only") == qe + 2) snprintf(e->param, sizeof(e->param), "%.*s", (int)(qe - q), q);
}

static void shutting_down(struct wgllm_openai_error *e) {
    wgllm_openai_error_set(e, 503, "server_error", NULL, "shutting_down",
                "the server is shutting down and cancelled this request; send it again to another server");
}

static enum wgllm_status upstream_call(struct stream *st, struct wgllm_result *res, struct wgllm_error *werr) {
    struct wgllm_openai_request *g = &st->gen;
    struct wgllm_client *cl = st->srv->client;
    if (g->endpoint == WGLLM_OPENAI_CHAT) return wgllm_client_chat_json(cl, st->upstream, g->forward_json, &g->rp, res, werr);
    return wgllm_client_query(cl, st->upstream, g->prompt, &g->rp, res, werr);
}

char *srv_upstream_embeddings(struct srv *s, const struct wgllm_openai_request *g, struct wgllm_openai_error *e) {
    struct wgllm_error werr = {0};
    char *out = NULL;
    const enum wgllm_status st = wgllm_client_embed_json(s->client, g->upstream, g->forward_json, &out, &werr);
    if (st != WGLLM_STATUS_OK) upstream_err(e, g, st, werr.message);
    return st == WGLLM_STATUS_OK ? out : NULL;
}

/* Whether the client went away: a stream's reader (or MHD) said so; a
 * whole answer's socket is looked at. */
static bool client_gone(struct stream *st, bool streaming) {
    if (!streaming) return srv_client_gone(st->fd);
    pthread_mutex_lock(&st->mu);
    const bool gone = st->gone;
    pthread_mutex_unlock(&st->mu);
    return gone;
}

/* The owner's wait for a local request: in slices, cancelling it (once) when
 * the client is gone (streams: the reader or MHD said so; otherwise the
 * socket is looked at) or the server stops; then collects the result. */
static void wait_local(struct stream *st, bool streaming, struct wgllm_result *res) {
    bool cancelled = false;
    while (!wgllm_request_wait_for(st->req, WAIT_SLICE_MS)) {
        if (cancelled) continue;
        if (client_gone(st, streaming) || atomic_load(&st->srv->stopping)) {
            wgllm_request_cancel(st->req);
            cancelled = true;
        }
    }
    wgllm_request_wait(st->req, res);
    st->req = NULL;
}

static char *sse_error(struct stream *st, const struct wgllm_openai_error *e) {
    return event(st, wgllm_openai_error_json(e));
}

/* An error answer in the request's dialect. */
static enum MHD_Result send_err(struct stream *st, struct MHD_Connection *c, const struct wgllm_openai_error *e) {
    if (!st->anthropic) return srv_send_err(st->srv, c, e);
    return srv_send_text(st->srv, c, (unsigned)e->status, "application/json", wgllm_anthropic_error_json(e));
}

static bool fall_back(struct stream *st, bool streaming, const char *why);

static void *stream_waiter(void *arg) {
    struct stream *st = arg;
    struct srv *s = st->srv;
    struct wgllm_result res;
    if (st->upstream) {
        struct wgllm_error werr = {0};
        upstream_call(st, &res, &werr);
        if (res.finish == WGLLM_FINISH_ERROR) snprintf(res.message, sizeof(res.message), "%.255s", werr.message);
        if (res.finish == WGLLM_FINISH_ERROR && fall_back(st, true, res.message)) {
            wgllm_result_free(&res);
            wait_local(st, true, &res);
        }
    } else {
        wait_local(st, true, &res);
    }
    srv_policy_charge(s->policy, st->tenant, res.usage.prompt_tokens + res.usage.completion_tokens);
    char *tail[WGLLM_OPENAI_END_CHUNKS] = {NULL};
    int n_tail = 0;
    struct wgllm_openai_error e;
    if (res.finish == WGLLM_FINISH_ERROR && st->upstream) {
        upstream_err(&e, &st->gen, res.status, res.message);
        tail[n_tail++] = sse_error(st, &e);
    } else if (res.finish == WGLLM_FINISH_CANCELLED && atomic_load(&s->stopping)) {
        shutting_down(&e);
        tail[n_tail++] = sse_error(st, &e);
    } else {
        /* the layer's end of a stream: logprobs, finish and usage chunks, or the error */
        n_tail = wgllm_openai_chunks_end(&s->api, &st->gen, st->id, &res, tail);
        /* the route's decision rides on the last chunk (OpenAI streams: the other dialects' events have no room) */
        if (n_tail > 0 && st->route && !st->anthropic && !st->rs) tail[n_tail - 1] = srv_with_route(tail[n_tail - 1], st->route);
        for (int i = 0; i < n_tail; i++) tail[i] = event(st, tail[i]);
    }
    wgllm_result_free(&res);
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < n_tail; i++) stream_push_locked(st, tail[i]);
    /* Anthropic's ends with message_stop, a Response's with response.completed */
    if (!st->anthropic && !st->rs) stream_push_locked(st, strdup("data: [DONE]\n\n"));
    st->done = true;
    pthread_cond_broadcast(&st->cv);
    stream_unref_locked(st);
    return NULL;
}

static struct timespec after_ms(int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    struct stream *st = cls;
    (void)pos;
    pthread_mutex_lock(&st->mu);
    int idle_ms = 0;
    while (st->off == st->buf.len && !st->done) {
        struct timespec ts = after_ms(READER_SLICE_MS);
        if (pthread_cond_timedwait(&st->cv, &st->mu, &ts) != ETIMEDOUT) continue;
        if (st->off != st->buf.len || st->done) break;
        idle_ms += READER_SLICE_MS;
        /* a client that left ends the response (MHD then frees it: the request is cancelled);
         * a stopping server gives a stream whose request does not end a few seconds */
        if (srv_client_gone(st->fd) || (atomic_load(&st->srv->stopping) && idle_ms >= 4 * KEEPALIVE_MS / 5)) {
            pthread_mutex_unlock(&st->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (idle_ms >= KEEPALIVE_MS) {
            /* an SSE comment: keeps proxies open during a long prefill or a queue wait */
            static const char ping[] = ": keep-alive\n\n";
            pthread_mutex_unlock(&st->mu);
            if (max < sizeof(ping) - 1) return 0;
            memcpy(out, ping, sizeof(ping) - 1);
            return (ssize_t)(sizeof(ping) - 1);
        }
    }
    if (st->off == st->buf.len) { /* done and drained */
        pthread_mutex_unlock(&st->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->buf.len - st->off < max ? st->buf.len - st->off : max;
    memcpy(out, st->buf.data + st->off, n);
    st->off += n;
    if (st->off == st->buf.len) { /* drained: the memory is reused */
        st->off = 0;
        wgllm_strbuf_clear(&st->buf);
    }
    pthread_mutex_unlock(&st->mu);
    return (ssize_t)n;
}

static void stream_response_freed(void *cls) {
    struct stream *st = cls;
    pthread_mutex_lock(&st->mu);
    if (!st->done) st->gone = true; /* the owner cancels the request */
    st->fd = -1;                     /* the socket may be reused by another connection now */
    stream_unref_locked(st);
}

static enum wgllm_status submit(struct stream *st, struct wgllm_error *werr) {
    struct wgllm_openai_request *g = &st->gen;
    struct wgllm_engine *eng = st->srv->engine;
    enum wgllm_status rc = wgllm_openai_submit(eng, g, &st->req, werr);
    /* the engine's contract, checked where a broken promise would take the whole server down */
    if (rc == WGLLM_STATUS_OK && !st->req)
        rc = wgllm_error_set(werr, WGLLM_STATUS_UNSUPPORTED, "the engine accepted the request without a handle");
    return rc;
}

/* --route's fallback: the upstream the policy chose failed before any piece
 * reached the client, and the local engine could take the request, so it
 * does (the replicas behind the upstream were all tried already). The local
 * parse becomes the request before the submit (the engine may call on_token
 * at once, which formats with st->gen); a submit that fails puts the
 * upstream's back, whose error is then the answer. true when submitted. */
static bool fall_back(struct stream *st, bool streaming, const char *why) {
    if (!st->has_fallback || st->delivered || atomic_load(&st->srv->stopping)) return false;
    if (client_gone(st, streaming)) return false;
    const struct wgllm_openai_request up = st->gen;
    const char *from = st->upstream;
    st->gen = st->fallback;
    st->gen.rp.on_token = streaming ? stream_on_token : NULL;
    st->gen.rp.on_prompt_progress = streaming && st->gen.return_progress && !st->anthropic && !st->rs
                                        ? stream_on_progress : NULL;
    st->gen.rp.user_data = st;
    st->upstream = NULL;
    struct wgllm_error werr = {0};
    if (submit(st, &werr) != WGLLM_STATUS_OK) {
        st->fallback = st->gen;
        st->gen = up;
        st->upstream = from;
        return false;
    }
    st->has_fallback = false;
    struct wgllm_openai_request dead = up;
    wgllm_openai_request_free(&dead);
    st->route = srv_route_fell_back(st->srv, st->route, from, why);
    return true;
}

/* Not streaming: the handler thread waits for the whole answer. */
static enum MHD_Result answer_whole(struct stream *st, struct MHD_Connection *c) {
    struct srv *s = st->srv;
    struct wgllm_openai_request *g = &st->gen;
    struct wgllm_error werr = {0};
    struct wgllm_result res;
    struct wgllm_openai_error e;
    enum wgllm_status rc;
    if (st->upstream) {
        g->rp.on_token = upstream_alive;
        g->rp.user_data = st;
        rc = upstream_call(st, &res, &werr);
        if (rc != WGLLM_STATUS_OK) upstream_err(&e, g, rc, werr.message);
        if ((rc != WGLLM_STATUS_OK || res.finish == WGLLM_FINISH_ERROR) && res.finish != WGLLM_FINISH_CANCELLED &&
            fall_back(st, false, werr.message[0] ? werr.message : res.message)) {
            wgllm_result_free(&res);
            rc = WGLLM_STATUS_OK;
            wait_local(st, false, &res); /* g is &st->gen: the local request now */
            if (res.finish == WGLLM_FINISH_ERROR) wgllm_openai_error_from_engine(&e, g, res.status, res.message);
        }
    } else {
        rc = submit(st, &werr);
        if (rc != WGLLM_STATUS_OK) {
            wgllm_openai_error_from_engine(&e, g, rc, werr.message);
            return send_err(st, c, &e);
        }
        wait_local(st, false, &res);
        if (res.finish == WGLLM_FINISH_ERROR) wgllm_openai_error_from_engine(&e, g, res.status, res.message);
    }
    srv_policy_charge(s->policy, st->tenant, res.usage.prompt_tokens + res.usage.completion_tokens);
    enum MHD_Result ret;
    if (res.finish == WGLLM_FINISH_CANCELLED && atomic_load(&s->stopping)) {
        shutting_down(&e);
        ret = send_err(st, c, &e);
    } else if (res.finish == WGLLM_FINISH_CANCELLED) {
        ret = MHD_NO; /* the client left: nobody to answer, close */
    } else if (rc != WGLLM_STATUS_OK || res.finish == WGLLM_FINISH_ERROR) {
        if (st->upstream && rc == WGLLM_STATUS_OK) upstream_err(&e, g, res.status, werr.message);
        ret = send_err(st, c, &e);
    } else {
        char *chat = wgllm_openai_response(&s->api, g, st->id, &res);
        if (st->anthropic || st->gen_responses) {
            char *msg = !chat ? NULL : st->anthropic ? wgllm_anthropic_response(chat) : wgllm_responses_response(chat);
            free(chat);
            chat = msg;
        }
        ret = srv_send_text(s, c, 200, "application/json", srv_with_route(chat, st->route));
    }
    wgllm_result_free(&res);
    return ret;
}

enum MHD_Result srv_generate(struct srv *s, struct MHD_Connection *c, const char *body, size_t len,
                             enum srv_dialect dialect, int tenant) {
    struct wgllm_openai_error e;
    struct stream *st = calloc(1, sizeof(*st));
    if (!st) {
        wgllm_openai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        return srv_send_err(s, c, &e);
    }
    atomic_fetch_add(&s->inflight, 1);
    st->srv = s;
    st->tenant = tenant;
    st->anthropic = dialect == SRV_ANTHROPIC;
    st->gen_responses = dialect == SRV_RESPONSES;
    wgllm_anthropic_stream_init(&st->an);
    const bool chat = dialect != SRV_COMPLETIONS;
    char *messages_chat = NULL; /* a Messages or Responses body, as the chat body it means */
    if (st->anthropic || st->gen_responses) {
        messages_chat = st->anthropic ? wgllm_anthropic_to_chat(body, len, &e) : wgllm_responses_to_chat(body, len, &e);
        if (!messages_chat) {
            enum MHD_Result ret = send_err(st, c, &e);
            stream_free(st);
            return ret;
        }
        body = messages_chat, len = strlen(messages_chat);
    }
    st->fd = srv_client_fd(c);
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    /* a `model` naming a route: the tenant may use the route; the policy picks the target */
    const char *route = srv_route_named(s, body, len);
    if (route && !srv_policy_allows(s->policy, tenant, route)) {
        free(messages_chat);
        wgllm_openai_error_set(&e, 403, "permission_error", "model", "model_not_allowed",
                               "the key of '%s' may not use the model '%s'", srv_policy_name(s->policy, tenant), route);
        enum MHD_Result ret = send_err(st, c, &e);
        stream_free(st);
        return ret;
    }
    const enum wgllm_openai_endpoint endpoint = chat ? WGLLM_OPENAI_CHAT : WGLLM_OPENAI_COMPLETIONS;
    const bool parsed = route ? srv_route_request(s, route, endpoint, body, len, srv_policy_name(s->policy, tenant),
                                                  &st->gen, &st->route, &st->fallback, &st->has_fallback, &e)
                              : wgllm_openai_parse(&s->api, endpoint, body, len, &st->gen, &e);
    free(messages_chat);
    if (!parsed) {
        enum MHD_Result ret = send_err(st, c, &e);
        stream_free(st);
        return ret;
    }
    struct wgllm_openai_request *g = &st->gen;
    const char *upstream = st->upstream = g->upstream; /* a `model` naming an upstream goes there */
    if (!route && !srv_policy_allows(s->policy, tenant, upstream ? upstream : s->model_id)) {
        wgllm_openai_error_set(&e, 403, "permission_error", "model", "model_not_allowed",
                               "the key of '%s' may not use the model '%s'", srv_policy_name(s->policy, tenant),
                               upstream ? upstream : s->model_id);
        enum MHD_Result ret = send_err(st, c, &e);
        stream_free(st);
        return ret;
    }
    /* a tenant's KV caches are its own */
    g->rp.cache_partition = srv_policy_name(s->policy, tenant);
    if (st->has_fallback) st->fallback.rp.cache_partition = g->rp.cache_partition;
    wgllm_openai_new_id(g, st->id, sizeof(st->id));
    if (!g->stream) {
        enum MHD_Result ret = answer_whole(st, c);
        stream_free(st);
        return ret;
    }
    if (st->gen_responses && !(st->rs = wgllm_responses_stream_init())) {
        wgllm_openai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        enum MHD_Result ret = send_err(st, c, &e);
        stream_free(st);
        return ret;
    }
    g->rp.on_token = stream_on_token;
    g->rp.on_prompt_progress = g->return_progress && !st->anthropic && !st->gen_responses ? stream_on_progress : NULL;
    g->rp.user_data = st;
    stream_push_locked(st, event(st, wgllm_openai_chunk_first(&s->api, g, st->id))); /* chat: the role chunk */
    /* an upstream starts in the waiter thread; its failures arrive as an error event */
    struct wgllm_error werr = {0};
    enum wgllm_status rc = upstream ? WGLLM_STATUS_OK : submit(st, &werr);
    if (rc != WGLLM_STATUS_OK) {
        wgllm_openai_error_from_engine(&e, g, rc, werr.message);
        enum MHD_Result ret = send_err(st, c, &e);
        stream_free(st);
        return ret;
    }
    st->refs = 2;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, st, stream_response_freed);
    if (!r) {
        /* no response will ever read or free the stream: the waiter cancels at once */
        st->gone = true;
        st->refs = 1;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, stream_waiter, st) != 0) {
        /* cannot happen often: collect synchronously (cancelled: nobody is reading yet) */
        pthread_mutex_lock(&st->mu);
        st->gone = true;
        pthread_mutex_unlock(&st->mu);
        stream_waiter(st);
    } else {
        pthread_detach(th);
    }
    if (!r) return MHD_NO;
    /* libmicrohttpd counts the time a content reader waits as idle time: a stream (queued, or in a long
     * prefill) would be cut at the idle timeout. Its liveness is checked by the reader instead; the
     * connection's timeout comes back when the request completes (server.c, on_completed). */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    srv_add_headers(s, c, r, "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    atomic_fetch_add(&s->http_requests, 1);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}
