/*
 * openai_response.c - the answer side of the OpenAI layer (include/wgllm.h):
 * error objects, whole responses, stream chunks (role, token, logprobs,
 * finish, usage) and embeddings, written with the core's JSON writer.
 *
 * Member order and number formatting are what the server printed with cJSON
 * before, so clients that compare bytes (tests, caches) see no change. Text
 * the model made may hold stray bytes of an unfinished or invalid UTF-8
 * sequence; JSON must not: the writer turns each invalid byte into U+FFFD.
 */
#include "api/api_internal.h"
#include "wgllm.h"

#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct wgllm_json_writer W;

static const char *shown_model(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g) {
    return g->upstream ? g->upstream : p->model_id ? p->model_id : "";
}

static char *finish(struct wgllm_strbuf *b) {
    if (b->oom || b->over) {
        wgllm_strbuf_free(b);
        return NULL;
    }
    return wgllm_strbuf_take(b);
}

char *wgllm_openai_error_json(const struct wgllm_openai_error *e) {
    struct wgllm_strbuf b = {0};
    W w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_object(&w, "error");
    wgllm_json_w_str(&w, "message", e->message);
    wgllm_json_w_str(&w, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) wgllm_json_w_str(&w, "param", e->param);
    else wgllm_json_w_null(&w, "param");
    if (e->code) wgllm_json_w_str(&w, "code", e->code);
    else wgllm_json_w_null(&w, "code");
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, '}');
    return finish(&b);
}

const char *wgllm_openai_finish_name(enum wgllm_finish_reason f) {
    return f == WGLLM_FINISH_LENGTH ? "length" : f == WGLLM_FINISH_CANCELLED ? "abort" : "stop";
}

static void usage_json(W *w, const struct wgllm_usage *u) {
    wgllm_json_w_object(w, "usage");
    wgllm_json_w_number(w, "prompt_tokens", u->prompt_tokens);
    wgllm_json_w_number(w, "completion_tokens", u->completion_tokens);
    wgllm_json_w_number(w, "total_tokens", u->prompt_tokens + u->completion_tokens);
    wgllm_json_w_object(w, "prompt_tokens_details");
    wgllm_json_w_number(w, "cached_tokens", u->cached_tokens);
    wgllm_json_w_end(w, '}');
    wgllm_json_w_end(w, '}');
}

/* id, object, created, model (and system_fingerprint in chunks, where it comes here) */
static void head(W *w, const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id,
                 bool chunk) {
    const bool chat = g->endpoint == WGLLM_OPENAI_CHAT;
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_str(w, "id", id);
    wgllm_json_w_str(w, "object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    wgllm_json_w_number(w, "created", (double)time(NULL));
    wgllm_json_w_str(w, "model", shown_model(p, g));
    if (chunk) wgllm_json_w_str(w, "system_fingerprint", "wgllm");
}

/* The text of one token as the API shows it (may be a partial UTF-8 piece, cleaned). */
static void token_text(const struct wgllm_openai_params *p, int32_t tok, struct wgllm_strbuf *out) {
    char buf[256];
    int32_t n = p->model ? wgllm_token_to_piece(p->model, tok, buf, (int32_t)sizeof(buf), false) : 0;
    if (n < 0) n = 0;
    wgllm_json_utf8_clean(out, buf, (size_t)n);
}

static void token_json(W *w, const struct wgllm_openai_params *p, int32_t tok, float logprob, bool alts_follow) {
    struct wgllm_strbuf t = {0};
    token_text(p, tok, &t);
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_string(w, "token", t.data ? t.data : "", t.len);
    wgllm_json_w_number(w, "logprob", logprob);
    wgllm_json_w_array(w, "bytes");
    for (size_t i = 0; i < t.len; i++) wgllm_json_w_number(w, NULL, (unsigned char)t.data[i]);
    wgllm_json_w_end(w, ']');
    if (!alts_follow) wgllm_json_w_end(w, '}');
    wgllm_strbuf_free(&t);
}

/* Generated tokens [0, n) with their logprobs in the chat (content[]) or the
 * completions (parallel arrays) shape; `top` holds n_top alternatives per
 * token or is NULL. */
static void logprobs_json(W *w, const struct wgllm_openai_params *p, const struct wgllm_openai_request *g,
                          const int32_t *toks, const float *lps, int n, const struct wgllm_token_logprob *top,
                          int stride) {
    /* rows of `top` are `stride` wide (the result's n_top); the request shows up to top_logprobs of them */
    const int n_top = stride < g->top_logprobs ? stride : g->top_logprobs;
    wgllm_json_w_object(w, "logprobs");
    if (g->endpoint == WGLLM_OPENAI_CHAT) {
        wgllm_json_w_array(w, "content");
        for (int i = 0; i < n; i++) {
            token_json(w, p, toks[i], lps[i], true);
            wgllm_json_w_array(w, "top_logprobs");
            for (int k = 0; top && k < n_top; k++) {
                const struct wgllm_token_logprob *a = &top[(size_t)i * (size_t)stride + (size_t)k];
                token_json(w, p, a->token, a->logprob, false);
            }
            wgllm_json_w_end(w, ']');
            wgllm_json_w_end(w, '}');
        }
        wgllm_json_w_end(w, ']');
    } else {
        struct wgllm_strbuf t = {0};
        wgllm_json_w_array(w, "tokens");
        for (int i = 0; i < n; i++) {
            wgllm_strbuf_clear(&t);
            token_text(p, toks[i], &t);
            wgllm_json_w_string(w, NULL, t.data ? t.data : "", t.len);
        }
        wgllm_json_w_end(w, ']');
        wgllm_json_w_array(w, "token_logprobs");
        for (int i = 0; i < n; i++) wgllm_json_w_number(w, NULL, lps[i]);
        wgllm_json_w_end(w, ']');
        wgllm_json_w_array(w, "top_logprobs");
        for (int i = 0; i < n; i++) {
            if (!top || n_top <= 0) {
                wgllm_json_w_null(w, NULL);
                continue;
            }
            /* the legacy shape: token text -> logprob (equal texts keep the first, likelier one) */
            struct wgllm_strbuf seen[20] = {{0}};
            wgllm_json_w_object(w, NULL);
            for (int k = 0; k < n_top && k < 20; k++) {
                const struct wgllm_token_logprob *a = &top[(size_t)i * (size_t)stride + (size_t)k];
                token_text(p, a->token, &seen[k]);
                bool dup = false;
                for (int q = 0; q < k && !dup; q++)
                    dup = seen[q].len == seen[k].len && !memcmp(seen[q].data ? seen[q].data : "",
                                                                seen[k].data ? seen[k].data : "", seen[k].len);
                if (dup) continue;
                /* a key is a C string: a NUL (there is none after cleaning) would end it */
                wgllm_json_w_number(w, seen[k].data ? seen[k].data : "", a->logprob);
            }
            for (int k = 0; k < 20; k++) wgllm_strbuf_free(&seen[k]);
            wgllm_json_w_end(w, '}');
        }
        wgllm_json_w_end(w, ']');
        wgllm_json_w_array(w, "text_offset");
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            wgllm_json_w_number(w, NULL, (double)off);
            wgllm_strbuf_clear(&t);
            token_text(p, toks[i], &t);
            off += t.len;
        }
        wgllm_json_w_end(w, ']');
        wgllm_strbuf_free(&t);
    }
    wgllm_json_w_end(w, '}');
}

/* The calls as OpenAI lists them: [{"id", "type": "function", "function":
 * {"name", "arguments"}}], in a stream each with its "index". An id the
 * model did not write is made from the answer's id, unique per call. */
static void tool_calls_json(W *w, const struct wgllm_tool_calls *tc, const char *id, bool stream) {
    for (int k = 0; k < tc->n; k++) {
        char cid[96];
        const char *tail = strchr(id, '-');
        snprintf(cid, sizeof cid, "call_%s_%d", tail ? tail + 1 : id, k);
        wgllm_json_w_object(w, NULL);
        if (stream) wgllm_json_w_number(w, "index", k);
        wgllm_json_w_str(w, "id", tc->v[k].id ? tc->v[k].id : cid);
        wgllm_json_w_str(w, "type", "function");
        wgllm_json_w_object(w, "function");
        wgllm_json_w_str(w, "name", tc->v[k].name);
        wgllm_json_w_str(w, "arguments", tc->v[k].arguments);
        wgllm_json_w_end(w, '}');
        wgllm_json_w_end(w, '}');
    }
}

/* The start every answer with one choice shares: the head, then "choices": [{"index": 0, ... */
static void open_choice(W *w, struct wgllm_strbuf *b, const struct wgllm_openai_params *p,
                        const struct wgllm_openai_request *g, const char *id, bool chunk) {
    wgllm_json_w_init(w, b);
    head(w, p, g, id, chunk);
    wgllm_json_w_array(w, "choices");
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_number(w, "index", 0);
}

/* The end every chunk with one choice shares: the choice, the array, the
 * include_usage null, the object. */
static char *close_chunk(W *w, struct wgllm_strbuf *b, const struct wgllm_openai_request *g) {
    wgllm_json_w_end(w, '}');
    wgllm_json_w_end(w, ']');
    if (g->include_usage) wgllm_json_w_null(w, "usage");
    wgllm_json_w_end(w, '}');
    return finish(b);
}

static void result_logprobs(W *w, const struct wgllm_openai_params *p, const struct wgllm_openai_request *g,
                            const struct wgllm_result *r) {
    logprobs_json(w, p, g, r->tokens, r->logprobs, r->n_tokens, r->top_logprobs, r->top_logprobs ? r->n_top : 0);
}

char *wgllm_openai_response(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id,
                            const struct wgllm_result *r) {
    struct wgllm_strbuf b = {0};
    W w;
    bool calls = false;
    open_choice(&w, &b, p, g, id, false);
    if (g->endpoint == WGLLM_OPENAI_CHAT) {
        wgllm_json_w_object(&w, "message");
        wgllm_json_w_str(&w, "role", "assistant");
        struct wgllm_strbuf content = {0}, reasoning = {0};
        if (g->reasoning) {
            struct wgllm_openai_think t;
            wgllm_openai_think_init(&t, g->think_open);
            wgllm_openai_think_push(&t, r->text ? r->text : "", r->text ? r->text_len : 0, &content, &reasoning);
            wgllm_openai_think_flush(&t, &content, &reasoning);
        } else {
            wgllm_strbuf_put(&content, r->text ? r->text : "", r->text ? r->text_len : 0);
            if (r->reasoning_content) wgllm_strbuf_puts(&reasoning, r->reasoning_content); /* an upstream's */
        }
        struct wgllm_tool_calls tc = {0};
        if (g->tools) wgllm_openai_tools_extract(g, content.data ? content.data : "", content.len, &tc);
        else wgllm_tool_calls_from_json(r->tool_calls_json, &tc); /* an upstream's, parsed there */
        const struct wgllm_strbuf *shown = g->tools ? &tc.content : &content;
        if (tc.n > 0 && shown->len == 0) wgllm_json_w_null(&w, "content"); /* OpenAI's content beside tool_calls */
        else wgllm_json_w_string(&w, "content", shown->data ? shown->data : "", shown->len);
        if (reasoning.len) wgllm_json_w_string(&w, "reasoning_content", reasoning.data, reasoning.len);
        if (tc.n > 0) {
            wgllm_json_w_array(&w, "tool_calls");
            tool_calls_json(&w, &tc, id, false);
            wgllm_json_w_end(&w, ']');
            calls = true;
        }
        if (content.oom || reasoning.oom || tc.oom) b.oom = true;
        wgllm_strbuf_free(&content), wgllm_strbuf_free(&reasoning);
        wgllm_tool_calls_free(&tc);
        wgllm_json_w_end(&w, '}');
    } else {
        wgllm_json_w_string(&w, "text", r->text, r->text ? r->text_len : 0);
    }
    if (g->logprobs) result_logprobs(&w, p, g, r);
    else wgllm_json_w_null(&w, "logprobs");
    /* an answer cut by max_tokens says so, calls or not */
    const bool called = calls && r->finish == WGLLM_FINISH_STOP;
    wgllm_json_w_str(&w, "finish_reason", called ? "tool_calls" : wgllm_openai_finish_name(r->finish));
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, ']');
    usage_json(&w, &r->usage);
    wgllm_json_w_str(&w, "system_fingerprint", "wgllm");
    wgllm_json_w_end(&w, '}');
    return finish(&b);
}

/* One chunk with one choice: delta/text, logprobs, finish_reason. kind: 0 role,
 * 1 text (+ the one token's logprobs when token >= 0), 2 finish. */
static char *chunk_ex(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id, int kind,
                      const char *text, size_t len, const char *think, size_t think_len, int32_t token, float logprob,
                      const char *finish_reason) {
    struct wgllm_strbuf b = {0};
    W w;
    open_choice(&w, &b, p, g, id, true);
    if (g->endpoint == WGLLM_OPENAI_CHAT) {
        wgllm_json_w_object(&w, "delta");
        if (kind == 0) {
            wgllm_json_w_str(&w, "role", "assistant");
            wgllm_json_w_str(&w, "content", "");
        } else if (kind == 1 || len || think_len) {
            if (len || !think_len) wgllm_json_w_string(&w, "content", text, text ? len : 0);
            if (think_len) wgllm_json_w_string(&w, "reasoning_content", think, think_len);
        }
        wgllm_json_w_end(&w, '}');
    } else {
        wgllm_json_w_string(&w, "text", text, text ? len : 0);
    }
    if ((kind == 1 || kind == 3) && g->logprobs && g->top_logprobs == 0 && token >= 0)
        logprobs_json(&w, p, g, &token, &logprob, 1, NULL, 0);
    else
        wgllm_json_w_null(&w, "logprobs");
    if (finish_reason) wgllm_json_w_str(&w, "finish_reason", finish_reason);
    else wgllm_json_w_null(&w, "finish_reason");
    return close_chunk(&w, &b, g);
}

static char *chunk(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id, int kind,
                   const char *text, size_t len, int32_t token, float logprob, const char *finish_reason) {
    return chunk_ex(p, g, id, kind, text, len, NULL, 0, token, logprob, finish_reason);
}

char *wgllm_openai_chunk_first(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g,
                               const char *id) {
    return g->endpoint == WGLLM_OPENAI_CHAT ? chunk(p, g, id, 0, NULL, 0, -1, 0, NULL) : NULL;
}

bool wgllm_openai_chunk_token(const struct wgllm_openai_params *p, struct wgllm_openai_request *g, const char *id,
                              const char *text, size_t len, int32_t token, float logprob, char **out) {
    *out = NULL;
    const bool lp = g->logprobs && g->top_logprobs == 0 && token >= 0;
    if ((g->reasoning || g->tools) && g->endpoint == WGLLM_OPENAI_CHAT) {
        struct wgllm_strbuf content = {0}, reasoning = {0}, piece = {0};
        if (g->reasoning) wgllm_openai_think_push(&g->think, text, len, &piece, &reasoning);
        else wgllm_strbuf_put(&piece, text, len);
        wgllm_openai_toolsplit_push(g, piece.data ? piece.data : "", piece.len, &content);
        bool ok = !content.oom && !reasoning.oom && !piece.oom;
        wgllm_strbuf_free(&piece);
        if (ok && (content.len || reasoning.len || lp)) {
            *out = chunk_ex(p, g, id, content.len || !reasoning.len ? 1 : 3, content.data ? content.data : "",
                            content.len, reasoning.data, reasoning.len, token, logprob, NULL);
            ok = *out != NULL;
        }
        wgllm_strbuf_free(&content), wgllm_strbuf_free(&reasoning);
        return ok;
    }
    /* a piece without text still carries its token's logprobs (without alternatives) */
    if (len == 0 && !lp) return true;
    *out = chunk(p, g, id, 1, text, len, token, logprob, NULL);
    return *out != NULL;
}

char *wgllm_openai_chunk_progress(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g,
                                  const char *id, const struct wgllm_prompt_progress *pp) {
    struct wgllm_strbuf b = {0};
    W w;
    open_choice(&w, &b, p, g, id, true);
    if (g->endpoint == WGLLM_OPENAI_CHAT) { /* llama.cpp's: the assistant's role and no content yet */
        wgllm_json_w_object(&w, "delta");
        wgllm_json_w_str(&w, "role", "assistant");
        wgllm_json_w_null(&w, "content");
        wgllm_json_w_end(&w, '}');
    } else {
        wgllm_json_w_str(&w, "text", "");
    }
    wgllm_json_w_null(&w, "logprobs");
    wgllm_json_w_null(&w, "finish_reason");
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, ']');
    if (g->include_usage) wgllm_json_w_null(&w, "usage");
    wgllm_json_w_object(&w, "prompt_progress");
    wgllm_json_w_number(&w, "total", pp->total);
    wgllm_json_w_number(&w, "cache", pp->cached);
    wgllm_json_w_number(&w, "processed", pp->processed);
    wgllm_json_w_number(&w, "time_ms", floor(pp->time_ms * 1e3) / 1e3);
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, '}');
    return finish(&b);
}

/* Every token's logprobs, alternatives included, in one chunk (empty text). */
static char *logprobs_chunk(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id,
                            const struct wgllm_result *r) {
    struct wgllm_strbuf b = {0};
    W w;
    open_choice(&w, &b, p, g, id, true);
    if (g->endpoint == WGLLM_OPENAI_CHAT) {
        wgllm_json_w_object(&w, "delta");
        wgllm_json_w_end(&w, '}');
    } else {
        wgllm_json_w_str(&w, "text", "");
    }
    result_logprobs(&w, p, g, r);
    wgllm_json_w_null(&w, "finish_reason");
    return close_chunk(&w, &b, g);
}

static char *usage_chunk(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id,
                         const struct wgllm_usage *u) {
    struct wgllm_strbuf b = {0};
    W w;
    wgllm_json_w_init(&w, &b);
    head(&w, p, g, id, true);
    wgllm_json_w_array(&w, "choices");
    wgllm_json_w_end(&w, ']');
    usage_json(&w, u);
    wgllm_json_w_end(&w, '}');
    return finish(&b);
}

/* The tool calls of a stream in one chunk, with the content the split held
 * beside them. */
static char *tools_chunk(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g, const char *id,
                         const struct wgllm_tool_calls *tc) {
    struct wgllm_strbuf b = {0};
    W w;
    open_choice(&w, &b, p, g, id, true);
    wgllm_json_w_object(&w, "delta");
    if (tc->content.len) wgllm_json_w_string(&w, "content", tc->content.data, tc->content.len);
    wgllm_json_w_array(&w, "tool_calls");
    tool_calls_json(&w, tc, id, true);
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_null(&w, "logprobs");
    wgllm_json_w_null(&w, "finish_reason");
    return close_chunk(&w, &b, g);
}

int wgllm_openai_chunks_end(const struct wgllm_openai_params *p, struct wgllm_openai_request *g, const char *id,
                            const struct wgllm_result *r, char *out[WGLLM_OPENAI_END_CHUNKS]) {
    int n = 0;
    if (r->finish == WGLLM_FINISH_ERROR) {
        struct wgllm_openai_error e;
        wgllm_openai_error_from_engine(&e, g, r->status, r->message);
        if ((out[n] = wgllm_openai_error_json(&e))) n++;
        return n;
    }
    /* all or nothing: a stream must not end without its finish chunk, nor
     * with the usage but without the logprobs asked for */
    bool oom = false;
    if (g->logprobs && g->top_logprobs > 0) {
        if ((out[n] = logprobs_chunk(p, g, id, r))) n++;
        else oom = true;
    }
    /* text the <think> split still held ends up in the finish chunk's delta */
    struct wgllm_strbuf content = {0}, reasoning = {0};
    if (g->reasoning && g->endpoint == WGLLM_OPENAI_CHAT) wgllm_openai_think_flush(&g->think, &content, &reasoning);
    /* an upstream's reasoning, which the client gathered apart from the text, comes with the finish */
    if (r->reasoning_content && g->endpoint == WGLLM_OPENAI_CHAT) wgllm_strbuf_puts(&reasoning, r->reasoning_content);
    bool calls = false;
    if (g->tools && g->endpoint == WGLLM_OPENAI_CHAT) {
        /* the tool split's held text, with what the think split gave last, is calls or content */
        struct wgllm_strbuf rest = {0};
        wgllm_openai_toolsplit_push(g, content.data ? content.data : "", content.len, &rest);
        struct wgllm_tool_calls tc = {0};
        wgllm_openai_tools_extract(g, g->split.held ? g->split.held : "", g->split.n_held, &tc);
        g->split.n_held = 0;
        g->split.calls = g->split.seen = false; /* the stream is over */
        wgllm_strbuf_clear(&content);
        wgllm_strbuf_put(&content, rest.data ? rest.data : "", rest.len);
        if (tc.n > 0) {
            calls = true;
            if (content.len) { /* content that came before the calls goes first */
                struct wgllm_strbuf both = {0};
                wgllm_strbuf_put(&both, content.data, content.len);
                wgllm_strbuf_put(&both, tc.content.data ? tc.content.data : "", tc.content.len);
                wgllm_strbuf_free(&tc.content);
                tc.content = both;
                wgllm_strbuf_clear(&content);
            }
            if ((out[n] = tools_chunk(p, g, id, &tc))) n++;
            else oom = true;
        } else {
            wgllm_strbuf_put(&content, tc.content.data ? tc.content.data : "", tc.content.len);
        }
        if (rest.oom || tc.oom || content.oom) oom = true;
        wgllm_strbuf_free(&rest);
        wgllm_tool_calls_free(&tc);
    } else if (r->tool_calls_json && g->endpoint == WGLLM_OPENAI_CHAT) {
        /* an upstream's calls, assembled from its deltas by the client */
        struct wgllm_tool_calls tc = {0};
        wgllm_tool_calls_from_json(r->tool_calls_json, &tc);
        if (tc.n > 0) {
            calls = true;
            if ((out[n] = tools_chunk(p, g, id, &tc))) n++;
            else oom = true;
        }
        if (tc.oom) oom = true;
        wgllm_tool_calls_free(&tc);
    }
    out[n] = chunk_ex(p, g, id, 2, content.data, content.len, reasoning.data, reasoning.len, -1, 0,
                      calls && r->finish == WGLLM_FINISH_STOP ? "tool_calls" : wgllm_openai_finish_name(r->finish));
    wgllm_strbuf_free(&content), wgllm_strbuf_free(&reasoning);
    if (out[n]) n++;
    else oom = true;
    if (g->include_usage) {
        if ((out[n] = usage_chunk(p, g, id, &r->usage))) n++;
        else oom = true;
    }
    if (oom) {
        for (int i = 0; i < n; i++) free(out[i]), out[i] = NULL;
        return 0;
    }
    return n;
}

/* ---- embeddings ----------------------------------------------------------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* OpenAI's base64 is the little-endian float32 bytes. */
static void base64_floats(W *w, const char *key, const float *v, int n) {
    const size_t nb = sizeof(float) * (size_t)n;
    unsigned char *p = malloc(nb ? nb : 1);
    char *s = malloc((nb + 2) / 3 * 4 + 1), *o = s;
    if (!p || !s) {
        free(p);
        free(s);
        w->out->oom = true;
        return;
    }
    for (int k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        for (int b = 0; b < 4; b++) p[4 * k + b] = (unsigned char)(u >> (8 * b));
    }
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t x = (uint32_t)p[i] << 16 | (i + 1 < nb ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < nb ? p[i + 2] : 0);
        *o++ = B64[x >> 18 & 63];
        *o++ = B64[x >> 12 & 63];
        *o++ = i + 1 < nb ? B64[x >> 6 & 63] : '=';
        *o++ = i + 2 < nb ? B64[x & 63] : '=';
    }
    *o = 0;
    wgllm_json_w_str(w, key, s);
    free(p);
    free(s);
}

char *wgllm_openai_embeddings(const struct wgllm_openai_params *p, const struct wgllm_openai_request *g,
                              struct wgllm_openai_error *e) {
    if (!p->engine || !p->model) {
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "no engine to compute embeddings on");
        return NULL;
    }
    const int E = wgllm_model_n_embd(p->model);
    float *vec = malloc(sizeof(float) * (size_t)(E > 0 ? E : 1));
    if (!vec) {
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    struct wgllm_strbuf b = {0};
    W w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_str(&w, "object", "list");
    wgllm_json_w_array(&w, "data");
    long tokens = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        const char *text = g->inputs[i];
        const size_t len = g->input_lens[i];
        struct wgllm_error werr = {0};
        int n_out = 0;
        const enum wgllm_status st = wgllm_embed(p->engine, text, len, g->pooling, true, vec, E, &n_out, &werr);
        if (st != WGLLM_STATUS_OK) {
            wgllm_openai_error_from_engine(e, g, st, werr.message);
            if (st == WGLLM_STATUS_UNSUPPORTED && strstr(werr.message, "pooling"))
                snprintf(e->param, sizeof(e->param), "pooling");
            else if (st == WGLLM_STATUS_CONTEXT_FULL || st == WGLLM_STATUS_INVALID_ARGUMENT)
                snprintf(e->param, sizeof(e->param), "input");
            free(vec);
            wgllm_strbuf_free(&b);
            return NULL;
        }
        const int32_t nt = wgllm_tokenize(p->model, text, len, NULL, 0, true, false, NULL);
        tokens += nt < 0 && nt != INT32_MIN ? -nt : (nt > 0 ? nt : 0);
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "object", "embedding");
        wgllm_json_w_number(&w, "index", i);
        if (g->base64) {
            base64_floats(&w, "embedding", vec, n_out);
        } else {
            wgllm_json_w_array(&w, "embedding");
            for (int k = 0; k < n_out; k++) wgllm_json_w_number(&w, NULL, vec[k]);
            wgllm_json_w_end(&w, ']');
        }
        wgllm_json_w_end(&w, '}');
    }
    free(vec);
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_str(&w, "model", shown_model(p, g));
    wgllm_json_w_object(&w, "usage");
    wgllm_json_w_number(&w, "prompt_tokens", (double)tokens);
    wgllm_json_w_number(&w, "total_tokens", (double)tokens);
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, '}');
    char *out = finish(&b);
    if (!out) wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return out;
}
