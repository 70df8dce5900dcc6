/*
 * openai.c - the request side of the OpenAI layer (include/wgllm.h): the
 * body's JSON within its budgets, then each field of chat, completions and
 * embeddings requests checked and mapped to engine parameters, with the
 * offending field named in every 400. Shared by `wgllm serve` and the
 * browser build; the answers are in openai_response.c.
 *
 * Unknown top-level fields are refused (400 naming them) rather than ignored,
 * so a client never silently loses a parameter it thinks it set.
 */
#include "api/api_internal.h"
#include "wgllm.h"

#include "base/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STOPS 16
#define MAX_STOP_BYTES 1024 /* the stop matcher's work per token grows with the longest stop */
#define MAX_KEY_BYTES 1024  /* context_key */
#define MAX_EMBED_INPUTS 256
#define BODY_MAX_BYTES ((size_t)8 << 20)
#define BODY_MAX_DEPTH 32
#define BODY_MAX_VALUES 65536

void wgllm_openai_error_set(struct wgllm_openai_error *e, int status, const char *type, const char *param,
                            const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

bool wgllm_openai_bad(struct wgllm_openai_error *e, const char *param, const char *fmt, const char *a) {
    wgllm_openai_error_set(e, 400, "invalid_request_error", param, NULL, fmt, param, a);
    return false;
}

void wgllm_openai_error_from_engine(struct wgllm_openai_error *e, const struct wgllm_openai_request *req,
                                    enum wgllm_status st, const char *msg) {
    if (st == WGLLM_STATUS_CONTEXT_FULL)
        wgllm_openai_error_set(e, 400, "invalid_request_error",
                               req && req->endpoint == WGLLM_OPENAI_COMPLETIONS ? "prompt" : "messages",
                               "context_length_exceeded", "%s", msg);
    else if (st == WGLLM_STATUS_UNSUPPORTED && strstr(msg, "queue is full"))
        wgllm_openai_error_set(e, 503, "server_error", NULL, "queue_full", "%s", msg);
    else if ((st == WGLLM_STATUS_BAD_FORMAT || st == WGLLM_STATUS_INVALID_ARGUMENT) && !strncmp(msg, "grammar: ", 9))
        wgllm_openai_error_set(e, 400, "invalid_request_error", req && req->grammar_param ? req->grammar_param : "grammar",
                               "invalid_grammar", "%s", msg);
    else if (st == WGLLM_STATUS_INVALID_ARGUMENT || st == WGLLM_STATUS_UNSUPPORTED)
        wgllm_openai_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    else
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "%s", msg);
}

void wgllm_openai_new_id(const struct wgllm_openai_request *req, char *id, size_t cap) {
    static atomic_ullong counter;
    const unsigned long long k = atomic_fetch_add(&counter, 1);
    snprintf(id, cap, "%s-%lx%llx", req && req->endpoint == WGLLM_OPENAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)time(NULL), k);
}

/* ---- field helpers -------------------------------------------------------- */

typedef struct wgllm_json J;

static bool has_nul(const J *v) { return strlen(v->str) != v->len; }

static bool get_number(const J *o, const char *k, double lo, double hi, double *out, bool *present,
                       struct wgllm_openai_error *e) {
    const J *v = wgllm_json_get(o, k);
    if (present) *present = false;
    if (wgllm_json_is_null(v)) return true;
    if (v->type != WGLLM_JSON_NUMBER || !isfinite(v->num)) return wgllm_openai_bad(e, k, "'%s' must be a number%s", "");
    if (v->num < lo || v->num > hi) {
        wgllm_openai_error_set(e, 400, "invalid_request_error", k, NULL, "'%s' is %g; it must be in [%g, %g]", k,
                               v->num, lo, hi);
        return false;
    }
    *out = v->num;
    if (present) *present = true;
    return true;
}

static bool get_int(const J *o, const char *k, double lo, double hi, int *out, bool *present,
                    struct wgllm_openai_error *e) {
    double d;
    bool p = false;
    if (!get_number(o, k, lo, hi, &d, &p, e)) return false;
    if (p && d != floor(d)) return wgllm_openai_bad(e, k, "'%s' must be an integer%s", "");
    if (p) *out = (int)d;
    if (present) *present = p;
    return true;
}

static bool get_bool(const J *o, const char *k, bool *out, struct wgllm_openai_error *e) {
    const J *v = wgllm_json_get(o, k);
    if (wgllm_json_is_null(v)) return true;
    if (!wgllm_json_is_bool(v)) return wgllm_openai_bad(e, k, "'%s' must be true or false%s", "");
    *out = v->type == WGLLM_JSON_TRUE;
    return true;
}

/* A string the engine takes as a C string: no NUL inside. */
static bool c_string(const J *v, const char *param, struct wgllm_openai_error *e) {
    if (!has_nul(v)) return true;
    return wgllm_openai_bad(e, param, "'%s' contains a NUL character (\\u0000), which the engine cannot take there%s", "");
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static const char *const CHAT_FIELDS[] = {"messages", "max_completion_tokens", "top_logprobs", "response_format",
                                          "tools", "tool_choice", "parallel_tool_calls", "store", "metadata",
                                          "reasoning_format", "chat_template_kwargs", NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", "echo", "suffix", "best_of", NULL};
static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "temperature", "top_p", "stop", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "n", "user", "stream", "stream_options", "top_k", "min_p", "typical_p",
    "repeat_penalty", "repeat_last_n", "repetition_penalty", "ignore_eos", "cache_prompt", "context_key",
    "grammar", "json_schema", "return_progress", NULL};

static const char *const EMBED_FIELDS[] = {"model", "input", "encoding_format", "dimensions", "user", "pooling",
                                           NULL};

static bool in_list(const char *const *l, const J *member) {
    for (; *l; l++)
        if (strlen(*l) == member->key_len && !memcmp(*l, member->key, member->key_len)) return true;
    return false;
}

bool wgllm_openai_known_fields(const J *body, const char *const *a, const char *const *b, struct wgllm_openai_error *e) {
    for (const J *it = wgllm_json_first(body); it; it = wgllm_json_next(body, it)) {
        if (in_list(a, it) || (b && in_list(b, it))) continue;
        char name[48]; /* the name as the error's param holds it (a NUL in it ends it there) */
        snprintf(name, sizeof(name), "%s", it->key);
        return wgllm_openai_bad(e, name, "unknown field '%s'%s", "");
    }
    return true;
}

static bool model_matches(const struct wgllm_openai_params *p, const char *name) {
    if (p->model_id && !strcmp(name, p->model_id)) return true;
    if (p->model_alias && !strcmp(name, p->model_alias)) return true;
    /* the file name without ".gguf" is a natural alias */
    const size_t n = p->model_id ? strlen(p->model_id) : 0;
    return n > 5 && !strcmp(p->model_id + n - 5, ".gguf") && strlen(name) == n - 5 && !strncmp(name, p->model_id, n - 5);
}

/* Text of a message's content: a string, null, or an array of text parts. */
static bool message_text(const J *c, int i, char **out, struct wgllm_openai_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].content", i);
    if (wgllm_json_is_null(c)) {
        *out = dupn("", 0);
        return true;
    }
    if (c->type == WGLLM_JSON_STRING) {
        if (!c_string(c, param, e)) return false;
        *out = dupn(c->str, c->len);
        return true;
    }
    if (c->type != WGLLM_JSON_ARRAY) return wgllm_openai_bad(e, param, "'%s' must be a string or an array of text parts%s", "");
    size_t total = 0;
    int j = 0;
    for (const J *part = wgllm_json_first(c); part; part = wgllm_json_next(c, part), j++) {
        const J *t = wgllm_json_get(part, "type");
        const J *tx = wgllm_json_get(part, "text");
        const bool ts = wgllm_json_is(t, WGLLM_JSON_STRING);
        if (part->type != WGLLM_JSON_OBJECT || !ts || strcmp(t->str, "text") || !wgllm_json_is(tx, WGLLM_JSON_STRING)) {
            wgllm_openai_error_set(e, 400, "invalid_request_error", param, NULL,
                                   "'%s[%d]': only {\"type\": \"text\", \"text\": ...} parts are supported%s%s", param,
                                   j, ts ? ", not " : "", ts ? t->str : "");
            return false;
        }
        if (!c_string(tx, param, e)) return false;
        total += tx->len;
    }
    char *s = malloc(total + 1), *q = s;
    if (!s) return wgllm_openai_bad(e, param, "out of memory for '%s'%s", "");
    for (const J *part = wgllm_json_first(c); part; part = wgllm_json_next(c, part)) {
        const J *tx = wgllm_json_get(part, "text");
        memcpy(q, tx->str, tx->len);
        q += tx->len;
    }
    *q = 0;
    *out = s;
    return true;
}

static bool parse_messages(const J *body, struct wgllm_openai_request *g, struct wgllm_openai_error *e) {
    const J *m = wgllm_json_get(body, "messages");
    if (!m) return wgllm_openai_bad(e, "messages", "'%s' is required%s", "");
    if (m->type != WGLLM_JSON_ARRAY || m->count == 0)
        return wgllm_openai_bad(e, "messages", "'%s' must be a non-empty array of messages%s", "");
    g->msgs = calloc(m->count, sizeof(*g->msgs));
    if (!g->msgs) return wgllm_openai_bad(e, "messages", "out of memory for '%s'%s", "");
    for (const J *it = wgllm_json_first(m); it; it = wgllm_json_next(m, it)) {
        const int i = g->n_msgs;
        char param[64];
        snprintf(param, sizeof(param), "messages[%d].role", i);
        const J *role = wgllm_json_get(it, "role");
        if (it->type != WGLLM_JSON_OBJECT || !wgllm_json_is(role, WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, param, "'%s' must be a string%s", "");
        if (!c_string(role, param, e)) return false;
        const char *r = role->str;
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
        if ((strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")))
            return wgllm_openai_bad(e, param, "'%s' is '%s'; expected system, developer, user, assistant or tool", r);
        char *text = NULL;
        if (!message_text(wgllm_json_get(it, "content"), i, &text, e)) return false;
        g->msgs[i].role = dupn(r, strlen(r));
        g->msgs[i].content = text;
        g->n_msgs++;
        if (!g->msgs[i].role || !text) return wgllm_openai_bad(e, "messages", "out of memory for '%s'%s", "");
    }
    return true;
}

static bool parse_prompt(const J *body, struct wgllm_openai_request *g, struct wgllm_openai_error *e) {
    const J *p = wgllm_json_get(body, "prompt");
    if (!p) return wgllm_openai_bad(e, "prompt", "'%s' is required%s", "");
    if (p->type == WGLLM_JSON_ARRAY) {
        if (p->count != 1 || !wgllm_json_is(wgllm_json_first(p), WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, "prompt", "'%s' must be a string or an array of exactly one string (token arrays and "
                                    "several prompts are not supported)%s", "");
        p = wgllm_json_first(p);
    }
    if (p->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "prompt", "'%s' must be a string%s", "");
    /* the prompt goes to the engine with its length: a NUL in it is text */
    g->prompt = dupn(p->str, p->len);
    g->prompt_len = p->len;
    if (!g->prompt) return wgllm_openai_bad(e, "prompt", "out of memory for '%s'%s", "");
    return true;
}

static bool parse_stop(const J *body, struct wgllm_openai_request *g, struct wgllm_openai_error *e) {
    const J *s = wgllm_json_get(body, "stop");
    if (wgllm_json_is_null(s)) return true;
    int n = 0;
    if (s->type == WGLLM_JSON_STRING) {
        n = 1;
    } else if (s->type == WGLLM_JSON_ARRAY) {
        if (s->count > MAX_STOPS) return wgllm_openai_bad(e, "stop", "'%s' has more than 16 strings%s", "");
        n = (int)s->count;
    } else {
        return wgllm_openai_bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
    }
    g->stops = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!g->stops) return wgllm_openai_bad(e, "stop", "out of memory for '%s'%s", "");
    const J *it = s->type == WGLLM_JSON_STRING ? s : wgllm_json_first(s);
    for (int i = 0; i < n; i++, it = s->type == WGLLM_JSON_STRING ? NULL : wgllm_json_next(s, it)) {
        if (it->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "stop", "'%s' must contain only strings%s", "");
        if (it->len > MAX_STOP_BYTES) return wgllm_openai_bad(e, "stop", "'%s' strings are at most 1024 bytes%s", "");
        if (!c_string(it, "stop", e)) return false;
        if (!(g->stops[i] = dupn(it->str, it->len))) return wgllm_openai_bad(e, "stop", "out of memory for '%s'%s", "");
        g->rp.n_stop = i + 1;
    }
    g->rp.stop = (const char *const *)g->stops;
    return true;
}

static bool parse_bias(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                       struct wgllm_openai_error *e) {
    const bool local = !g->upstream;
    const J *b = wgllm_json_get(body, "logit_bias");
    if (wgllm_json_is_null(b)) return true;
    if (b->type != WGLLM_JSON_OBJECT) return wgllm_openai_bad(e, "logit_bias", "'%s' must be an object of token id -> bias%s", "");
    const int n_vocab_i = ap->model ? wgllm_model_n_vocab(ap->model) : 0;
    const long n_vocab = local ? (long)n_vocab_i : 2147483647L;
    const uint32_t n = b->count;
    /* more entries than tokens can only repeat keys: refused before anything is sized by them */
    if (n > (uint32_t)(local ? n_vocab_i : BODY_MAX_VALUES)) {
        wgllm_openai_error_set(e, 400, "invalid_request_error", "logit_bias", NULL,
                               "'logit_bias' has %u entries; the model has %d tokens", (unsigned)n, n_vocab_i);
        return false;
    }
    g->bias = calloc(n ? n : 1, sizeof(*g->bias));
    if (!g->bias) return wgllm_openai_bad(e, "logit_bias", "out of memory for '%s'%s", "");
    int i = 0;
    for (const J *it = wgllm_json_first(b); it; it = wgllm_json_next(b, it)) {
        char *end;
        const long t = strtol(it->key, &end, 10);
        /* digits only: strtol would also take spaces and a sign */
        const bool digits = it->key_len > 0 && it->key[0] >= '0' && it->key[0] <= '9';
        if (!digits || end != it->key + it->key_len || t < 0 || t >= n_vocab)
            return wgllm_openai_bad(e, "logit_bias", "'%s' has key '%s', which is not a token id of this model", it->key);
        if (it->type != WGLLM_JSON_NUMBER || it->num < -100 || it->num > 100)
            return wgllm_openai_bad(e, "logit_bias", "'%s' values must be numbers in [-100, 100] (token %s)", it->key);
        g->bias[i].token = (int32_t)t;
        /* -100 is OpenAI's "ban" */
        g->bias[i].bias = it->num <= -100 ? -INFINITY : (float)it->num;
        i++;
    }
    g->rp.sampling.logit_bias = g->bias;
    g->rp.sampling.n_logit_bias = i;
    return true;
}

/* The text of a schema given as JSON (an object or true), for the converter. */
static bool schema_grammar(const J *schema, const char *param, struct wgllm_openai_request *g,
                           struct wgllm_openai_error *e) {
    if (!wgllm_json_is(schema, WGLLM_JSON_OBJECT) && !wgllm_json_is(schema, WGLLM_JSON_TRUE))
        return wgllm_openai_bad(e, param, "'%s' must be a JSON Schema (an object)%s", "");
    struct wgllm_strbuf text = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &text);
    wgllm_json_w_value(&w, NULL, schema);
    if (text.oom) return wgllm_strbuf_free(&text), wgllm_openai_bad(e, param, "out of memory for '%s'%s", "");
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_json_schema_to_grammar(text.data, text.len, &g->grammar, &err);
    wgllm_strbuf_free(&text);
    if (st != WGLLM_STATUS_OK) {
        wgllm_openai_error_set(e, 400, "invalid_request_error", param, "invalid_schema", "%s", err.message);
        return false;
    }
    g->grammar_param = param;
    return true;
}

/* Structured output: response_format (json_object, json_schema), and the
 * local-only grammar (GBNF) and json_schema fields of llama.cpp's server.
 * All become one GBNF grammar in rp; at most one of them may be given. */
static bool parse_structured(const J *body, bool chat, struct wgllm_openai_request *g, struct wgllm_openai_error *e) {
    const J *rf = chat ? wgllm_json_get(body, "response_format") : NULL;
    const J *gr = wgllm_json_get(body, "grammar"), *js = wgllm_json_get(body, "json_schema");
    const J *rft = wgllm_json_get(rf, "type");
    if (!wgllm_json_is_null(rf)) {
        if (!wgllm_json_is(rf, WGLLM_JSON_OBJECT) || !wgllm_json_is(rft, WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, "response_format", "'%s' must be an object with a string 'type'%s", "");
        if (!strcmp(rft->str, "text")) rf = NULL;
        else if (strcmp(rft->str, "json_object") && strcmp(rft->str, "json_schema"))
            return wgllm_openai_bad(e, "response_format", "'%s': type must be text, json_object or json_schema, not '%s'", rft->str);
    }
    const int given = !wgllm_json_is_null(rf) + !wgllm_json_is_null(gr) + !wgllm_json_is_null(js);
    if (given > 1) return wgllm_openai_bad(e, "grammar", "'%s', 'json_schema' and 'response_format' exclude each other%s", "");
    if (given == 0) return true;
    /* an upstream gets response_format as given (forward_json) and applies it
     * itself; GBNF and the bare json_schema field are llama.cpp's local extensions */
    if (g->upstream && wgllm_json_is_null(gr) && wgllm_json_is_null(js)) return true;
    if (g->upstream)
        return wgllm_openai_bad(e, !wgllm_json_is_null(gr) ? "grammar" : "json_schema",
                   "'%s' is local-only and not forwarded to upstream '%s' (use response_format)", g->upstream);
    if (!wgllm_json_is_null(gr)) {
        if (!wgllm_json_is(gr, WGLLM_JSON_STRING) || !gr->len) return wgllm_openai_bad(e, "grammar", "'%s' must be a non-empty string (GBNF)%s", "");
        if (!c_string(gr, "grammar", e)) return false;
        if (!(g->grammar = dupn(gr->str, gr->len))) return wgllm_openai_bad(e, "grammar", "out of memory for '%s'%s", "");
        g->grammar_param = "grammar";
    } else if (!wgllm_json_is_null(js)) {
        if (!schema_grammar(js, "json_schema", g, e)) return false;
    } else if (!strcmp(rft->str, "json_object")) {
        static const char OBJECT[] = "{\"type\":\"object\"}";
        struct wgllm_error err = {0};
        if (wgllm_json_schema_to_grammar(OBJECT, sizeof OBJECT - 1, &g->grammar, &err) != WGLLM_STATUS_OK)
            return wgllm_openai_bad(e, "response_format", "'%s': %s", err.message);
        g->grammar_param = "response_format";
    } else {
        const J *jsd = wgllm_json_get(rf, "json_schema");
        if (!wgllm_json_is(jsd, WGLLM_JSON_OBJECT))
            return wgllm_openai_bad(e, "response_format", "'%s': type json_schema needs 'json_schema': {name, schema}%s", "");
        const J *sch = wgllm_json_get(jsd, "schema");
        if (!sch) return wgllm_openai_bad(e, "response_format", "'%s': json_schema needs a 'schema'%s", "");
        if (!schema_grammar(sch, "response_format", g, e)) return false;
    }
    g->rp.grammar = g->grammar;
    g->rp.grammar_len = strlen(g->grammar);
    return true;
}

/* An upstream chat's fields that its own template, tool-call parser and
 * structured output handle; an upstream embeddings request's fields. */
static const char *const CHAT_FORWARDED[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                             "response_format", "chat_template_kwargs", "reasoning_format", NULL};
static const char *const EMBED_FORWARDED[] = {"input", "encoding_format", "dimensions", "user", NULL};

/* The fields of `names` that body has, as the client gave them (validated already), into g->forward_json. */
static bool forward_fields(const J *body, const char *const *names, struct wgllm_openai_request *g,
                           struct wgllm_openai_error *e) {
    struct wgllm_strbuf text = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &text);
    wgllm_json_w_object(&w, NULL);
    for (size_t i = 0; names[i]; i++) {
        const J *v = wgllm_json_get(body, names[i]);
        if (v) wgllm_json_w_value(&w, names[i], v);
    }
    wgllm_json_w_end(&w, '}');
    if (text.oom) return wgllm_strbuf_free(&text), wgllm_openai_bad(e, names[0], "out of memory for '%s'%s", "");
    g->forward_json = wgllm_strbuf_take(&text);
    return true;
}

/* The chat fields that go to the template: tools (and their grammar), the
 * messages as JSON, chat_template_kwargs. */
static bool chat_extras(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                        struct wgllm_openai_error *e) {
    if (!wgllm_openai_tools_parse(ap, body, g, e)) return false;
    const J *kw = wgllm_json_get(body, "chat_template_kwargs");
    if (!wgllm_json_is_null(kw)) {
        if (kw->type != WGLLM_JSON_OBJECT) return wgllm_openai_bad(e, "chat_template_kwargs", "'%s' must be an object%s", "");
        if (g->upstream) return forward_fields(body, CHAT_FORWARDED, g, e);
        struct wgllm_strbuf text = {0};
        struct wgllm_json_writer w;
        wgllm_json_w_init(&w, &text);
        wgllm_json_w_value(&w, NULL, kw);
        if (text.oom) return wgllm_strbuf_free(&text), wgllm_openai_bad(e, "chat_template_kwargs", "out of memory for '%s'%s", "");
        g->kwargs_json = wgllm_strbuf_take(&text);
    }
    return g->upstream ? forward_fields(body, CHAT_FORWARDED, g, e) : wgllm_openai_messages_json(ap, body, g, e);
}

enum wgllm_status wgllm_openai_submit(struct wgllm_engine *eng, const struct wgllm_openai_request *g,
                                      struct wgllm_request **out, struct wgllm_error *err) {
    *out = NULL;
    if (g->endpoint == WGLLM_OPENAI_COMPLETIONS) return wgllm_engine_submit_query(eng, g->prompt, g->prompt_len, &g->rp, out, err);
    if (g->endpoint != WGLLM_OPENAI_CHAT || !g->messages_json)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "openai: not a chat or completions request served here");
    return wgllm_engine_submit_chat_json(eng, g->messages_json, g->tools_json, g->kwargs_json, &g->rp, out, err);
}

enum wgllm_status wgllm_openai_prompt_tokens(struct wgllm_engine *eng, const struct wgllm_openai_request *g,
                                             int32_t **ids, int *n, struct wgllm_error *err) {
    *ids = NULL;
    *n = 0;
    if (g->endpoint == WGLLM_OPENAI_COMPLETIONS)
        return wgllm_engine_prompt_tokens_query(eng, g->prompt, g->prompt_len, g->rp.add_special, ids, n, err);
    if (g->endpoint != WGLLM_OPENAI_CHAT || !g->messages_json)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "openai: not a chat or completions request served here");
    return wgllm_engine_prompt_tokens_chat_json(eng, g->messages_json, g->tools_json, g->kwargs_json, ids, n, err);
}

static bool gen_parse(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                      struct wgllm_openai_error *e) {
    const bool chat = g->endpoint == WGLLM_OPENAI_CHAT;
    g->rp = wgllm_request_default_params();
    g->rp.max_tokens = 0;                /* OpenAI: until the end of generation or of the context */
    g->rp.sampling.temperature = 0.8f;   /* llama.cpp server's defaults; the rest are the sampler's */
    g->rp.sampling.seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)g ^ (uint64_t)wgllm_time_us() << 20;
    if (!wgllm_openai_known_fields(body, COMMON_FIELDS, chat ? CHAT_FIELDS : COMPLETION_FIELDS, e)) return false;
    const J *model = wgllm_json_get(body, "model");
    if (!wgllm_json_is_null(model)) {
        if (model->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "model", "'%s' must be a string%s", "");
        if (!g->upstream && (has_nul(model) || !model_matches(ap, model->str))) {
            wgllm_openai_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                                   "the model '%s' does not exist; this server serves '%s'%s%s%s", model->str,
                                   ap->model_id ? ap->model_id : "", ap->upstream_names ? " and forwards '" : "",
                                   ap->upstream_names ? ap->upstream_names : "", ap->upstream_names ? "'" : "");
            return false;
        }
    }
    if (chat ? !parse_messages(body, g, e) : !parse_prompt(body, g, e)) return false;
    double d;
    bool p;
    struct wgllm_sampler_params *sp = &g->rp.sampling;
    int mt = 0;
    /* the server's cap (--max-tokens): no request holds a slot for an unbounded time */
    const double max_gen = ap->max_tokens > 0 ? ap->max_tokens : 1 << 30;
    if (!get_int(body, "max_tokens", 1, max_gen, &mt, &p, e)) return false;
    if (p) g->rp.max_tokens = mt;
    if (chat && !get_int(body, "max_completion_tokens", 1, max_gen, &mt, &p, e)) return false;
    if (chat && p) g->rp.max_tokens = mt;
    if (!get_number(body, "temperature", 0, 100, &d, &p, e)) return false;
    if (p) sp->temperature = (float)d;
    if (!get_number(body, "top_p", 0, 1, &d, &p, e)) return false;
    if (p) sp->top_p = (float)d;
    if (!get_number(body, "min_p", 0, 1, &d, &p, e)) return false;
    if (p) sp->min_p = (float)d;
    if (!get_number(body, "typical_p", 0, 1, &d, &p, e)) return false;
    if (p) sp->typical_p = (float)d;
    if (!get_int(body, "top_k", -1, 1 << 30, &sp->top_k, NULL, e)) return false;
    if (!get_number(body, "presence_penalty", -2, 2, &d, &p, e)) return false;
    if (p) sp->presence_penalty = (float)d;
    if (!get_number(body, "frequency_penalty", -2, 2, &d, &p, e)) return false;
    if (p) sp->frequency_penalty = (float)d;
    /* llama.cpp's name and WebLLM's / transformers' name of the same thing: one field */
    const char *rpn = wgllm_json_get(body, "repetition_penalty") ? "repetition_penalty" : "repeat_penalty";
    if (wgllm_json_get(body, "repetition_penalty") && wgllm_json_get(body, "repeat_penalty"))
        return wgllm_openai_bad(e, "repetition_penalty", "'%s' and 'repeat_penalty' are the same field: give one%s", "");
    if (!get_number(body, rpn, 0, 100, &d, &p, e)) return false;
    /* logits are divided by it: 0 would make them infinite */
    if (p && d <= 0) return wgllm_openai_bad(e, rpn, "'%s' must be greater than 0 (1 = off)%s", "");
    if (p) sp->repeat_penalty = (float)d;
    if (!get_int(body, "repeat_last_n", -1, 1 << 30, &sp->penalty_last_n, NULL, e)) return false;
    /* a window longer than a slot's context sees no more tokens; the sampler sizes a ring by it */
    if (ap->n_ctx > 0 && sp->penalty_last_n > ap->n_ctx) sp->penalty_last_n = ap->n_ctx;
    if (!get_number(body, "seed", -9.2e18, 1.8e19, &d, &p, e)) return false;
    if (p) {
        if (d != floor(d)) return wgllm_openai_bad(e, "seed", "'%s' must be an integer%s", "");
        sp->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    }
    int n = 1;
    if (!get_int(body, "n", 1, 1 << 30, &n, NULL, e)) return false;
    if (n != 1) return wgllm_openai_bad(e, "n", "'%s' > 1 is not supported: send one request per completion%s", "");
    if (!get_bool(body, "ignore_eos", &g->rp.ignore_eos, e)) return false;
    bool cache_prompt = true;
    if (!get_bool(body, "cache_prompt", &cache_prompt, e)) return false; /* accepted: the engine always reuses */
    if (!get_bool(body, "stream", &g->stream, e)) return false;
    if (!get_bool(body, "return_progress", &g->return_progress, e)) return false;
    const J *so = wgllm_json_get(body, "stream_options");
    if (!wgllm_json_is_null(so)) {
        if (so->type != WGLLM_JSON_OBJECT) return wgllm_openai_bad(e, "stream_options", "'%s' must be an object%s", "");
        if (!get_bool(so, "include_usage", &g->include_usage, e)) return false;
    }
    const J *ck = wgllm_json_get(body, "context_key");
    if (!wgllm_json_is_null(ck)) {
        if (ck->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "context_key", "'%s' must be a string%s", "");
        if (ck->len > MAX_KEY_BYTES) return wgllm_openai_bad(e, "context_key", "'%s' is at most 1024 bytes%s", "");
        if (!c_string(ck, "context_key", e)) return false;
        if (!(g->context_key = dupn(ck->str, ck->len))) return wgllm_openai_bad(e, "context_key", "out of memory for '%s'%s", "");
        g->rp.context_key = g->context_key;
    }
    const J *u = wgllm_json_get(body, "user");
    if (!wgllm_json_is_null(u) && u->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "user", "'%s' must be a string%s", "");
    if (chat) {
        if (!get_bool(body, "logprobs", &g->logprobs, e)) return false;
        if (!get_int(body, "top_logprobs", 0, 20, &g->top_logprobs, NULL, e)) return false;
        if (g->top_logprobs > 0 && !g->logprobs) return wgllm_openai_bad(e, "top_logprobs", "'%s' needs 'logprobs': true%s", "");
        /* llama.cpp's reasoning_format: "none" keeps <think> blocks in content; "auto" / "deepseek" split them */
        const J *rf = wgllm_json_get(body, "reasoning_format");
        bool split = true;
        if (!wgllm_json_is_null(rf)) {
            if (!wgllm_json_is(rf, WGLLM_JSON_STRING) ||
                (strcmp(rf->str, "none") && strcmp(rf->str, "auto") && strcmp(rf->str, "deepseek")))
                return wgllm_openai_bad(e, "reasoning_format", "'%s' must be \"none\", \"auto\" or \"deepseek\"%s", "");
            split = strcmp(rf->str, "none") != 0;
        }
        const int thinks = split && !g->upstream && ap->engine ? wgllm_engine_template_thinks(ap->engine) : 0;
        g->reasoning = thinks > 0;
        g->think_open = thinks == 2;
        wgllm_openai_think_init(&g->think, g->think_open);
    } else {
        int lp = -1;
        bool lpp = false;
        if (!get_int(body, "logprobs", 0, 5, &lp, &lpp, e)) return false;
        if (lpp) g->logprobs = true, g->top_logprobs = lp;
        bool echo = false;
        if (!get_bool(body, "echo", &echo, e)) return false;
        if (echo) return wgllm_openai_bad(e, "echo", "'%s' is not supported%s", "");
        if (!wgllm_json_is_null(wgllm_json_get(body, "suffix"))) return wgllm_openai_bad(e, "suffix", "'%s' is not supported%s", "");
        int best_of = 1;
        if (!get_int(body, "best_of", 1, 1, &best_of, NULL, e)) return false;
    }
    if (g->logprobs) sp->n_probs = g->top_logprobs;
    if (!parse_stop(body, g, e) || !parse_bias(ap, body, g, e) || !parse_structured(body, chat, g, e)) return false;
    if (chat && !chat_extras(ap, body, g, e)) return false;
    /* the upstream's tokens are not known here */
    if (g->upstream && g->logprobs) return wgllm_openai_bad(e, "logprobs", "'%s' is not forwarded to upstream '%s'", g->upstream);
    return true;
}

static bool embed_parse(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                        struct wgllm_openai_error *e) {
    if (!wgllm_openai_known_fields(body, EMBED_FIELDS, NULL, e)) return false;
    const J *model = wgllm_json_get(body, "model");
    if (!g->upstream && !wgllm_json_is_null(model) &&
        (model->type != WGLLM_JSON_STRING || has_nul(model) || !model_matches(ap, model->str))) {
        wgllm_openai_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                               "the model '%s' does not exist; this server serves '%s'",
                               model->type == WGLLM_JSON_STRING ? model->str : "?", ap->model_id ? ap->model_id : "");
        return false;
    }
    const J *in = wgllm_json_get(body, "input");
    if (!in) return wgllm_openai_bad(e, "input", "'%s' is required%s", "");
    const bool arr = in->type == WGLLM_JSON_ARRAY;
    const uint32_t n_in = arr ? in->count : 1;
    if (!(in->type == WGLLM_JSON_STRING || arr) || n_in < 1 || n_in > MAX_EMBED_INPUTS)
        return wgllm_openai_bad(e, "input", "'%s' must be a string or an array of 1 to 256 strings%s", "");
    for (const J *it = arr ? wgllm_json_first(in) : NULL; it; it = wgllm_json_next(in, it))
        if (it->type != WGLLM_JSON_STRING)
            return wgllm_openai_bad(e, "input", "'%s' must contain only strings (token arrays are not supported)%s", "");
    const J *ef = wgllm_json_get(body, "encoding_format");
    if (!wgllm_json_is_null(ef)) {
        if (ef->type != WGLLM_JSON_STRING || (strcmp(ef->str, "float") && strcmp(ef->str, "base64")))
            return wgllm_openai_bad(e, "encoding_format", "'%s' must be \"float\" or \"base64\"%s", "");
        g->base64 = !strcmp(ef->str, "base64");
    }
    const int n_embd = ap->model ? wgllm_model_n_embd(ap->model) : 0;
    const J *dim = wgllm_json_get(body, "dimensions");
    /* an upstream knows its own size */
    if (g->upstream && !wgllm_json_is_null(dim) && (dim->type != WGLLM_JSON_NUMBER || dim->num < 1 || dim->num != floor(dim->num)))
        return wgllm_openai_bad(e, "dimensions", "'%s' must be a positive integer%s", "");
    if (!g->upstream && !wgllm_json_is_null(dim) && (dim->type != WGLLM_JSON_NUMBER || dim->num != n_embd)) {
        wgllm_openai_error_set(e, 400, "invalid_request_error", "dimensions", NULL,
                               "'dimensions' must be this model's embedding size, %d", n_embd);
        return false;
    }
    const J *u = wgllm_json_get(body, "user");
    if (!wgllm_json_is_null(u) && u->type != WGLLM_JSON_STRING) return wgllm_openai_bad(e, "user", "'%s' must be a string%s", "");
    g->pooling = WGLLM_POOLING_MODEL;
    const J *pl = wgllm_json_get(body, "pooling");
    if (!wgllm_json_is_null(pl)) {
        const char *v = pl->type == WGLLM_JSON_STRING ? pl->str : "";
        if (!strcmp(v, "mean")) g->pooling = WGLLM_POOLING_MEAN;
        else if (!strcmp(v, "last")) g->pooling = WGLLM_POOLING_LAST;
        else if (!strcmp(v, "cls")) g->pooling = WGLLM_POOLING_CLS;
        else return wgllm_openai_bad(e, "pooling", "'%s' must be \"mean\", \"last\" or \"cls\"%s", "");
        if (g->upstream)
            return wgllm_openai_bad(e, "pooling", "'%s' is local-only and not forwarded to upstream '%s' (its server pools as it was started)",
                                    g->upstream);
    }
    /* an upstream gets the body as given but for `model` (the client names the upstream's own) */
    if (g->upstream) return forward_fields(body, EMBED_FORWARDED, g, e);
    g->inputs = calloc(n_in, sizeof(*g->inputs));
    g->input_lens = calloc(n_in, sizeof(*g->input_lens));
    if (!g->inputs || !g->input_lens) return wgllm_openai_bad(e, "input", "out of memory for '%s'%s", "");
    const J *it = arr ? wgllm_json_first(in) : in;
    for (uint32_t i = 0; i < n_in; i++, it = arr ? wgllm_json_next(in, it) : NULL) {
        if (!(g->inputs[i] = dupn(it->str, it->len))) return wgllm_openai_bad(e, "input", "out of memory for '%s'%s", "");
        g->input_lens[i] = it->len;
        g->n_inputs = (int)i + 1;
    }
    return true;
}

/* The body's JSON, with the limits a hostile client meets mapped to their codes. */
bool wgllm_openai_parse_body(const char *body, size_t len, struct wgllm_json_doc *doc, struct wgllm_openai_error *e) {
    if (len > BODY_MAX_BYTES) {
        wgllm_openai_error_set(e, 413, "invalid_request_error", NULL, "request_too_large",
                               "the request body is larger than %zu MiB", BODY_MAX_BYTES >> 20);
        return false;
    }
    const struct wgllm_json_limits lim = {.max_depth = BODY_MAX_DEPTH, .max_nodes = BODY_MAX_VALUES};
    struct wgllm_json_error je;
    if (wgllm_json_parse(body ? body : "", body ? len : 0, &lim, doc, &je)) return true;
    switch (je.problem) {
    case WGLLM_JSON_ERR_UTF8:
        wgllm_openai_error_set(e, 400, "invalid_request_error", NULL, "invalid_utf8",
                               "the request body is not valid UTF-8 (at byte %zu)", je.offset);
        break;
    case WGLLM_JSON_ERR_DEPTH:
        wgllm_openai_error_set(e, 400, "invalid_request_error", NULL, "json_too_deep",
                               "the request body nests JSON deeper than %d levels (at byte %zu)", BODY_MAX_DEPTH,
                               je.offset);
        break;
    case WGLLM_JSON_ERR_NODES:
        wgllm_openai_error_set(e, 400, "invalid_request_error", NULL, "json_too_many_values",
                               "the request body has more than %d JSON values (at byte %zu)", BODY_MAX_VALUES,
                               je.offset);
        break;
    case WGLLM_JSON_ERR_MEMORY:
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "%s", je.message);
        break;
    default:
        wgllm_openai_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                               "the request body is not valid JSON (near byte %zu: %s)", je.offset, je.message);
        break;
    }
    return false;
}

bool wgllm_openai_parse(const struct wgllm_openai_params *p, enum wgllm_openai_endpoint endpoint, const char *body,
                        size_t len, struct wgllm_openai_request *req, struct wgllm_openai_error *err) {
    memset(req, 0, sizeof(*req));
    req->endpoint = endpoint;
    if (endpoint < WGLLM_OPENAI_COMPLETIONS || endpoint > WGLLM_OPENAI_EMBEDDINGS) {
        wgllm_openai_error_set(err, 404, "invalid_request_error", NULL, "not_found", "unknown endpoint %d",
                               (int)endpoint);
        return false;
    }
    struct wgllm_json_doc doc;
    if (!wgllm_openai_parse_body(body, len, &doc, err)) return false;
    const J *root = wgllm_json_root(&doc);
    bool ok;
    if (root->type != WGLLM_JSON_OBJECT) {
        ok = wgllm_openai_bad(err, "body", "the request %s must be a JSON object%s", "");
    } else {
        /* a `model` naming an upstream goes there */
        const J *m = wgllm_json_get(root, "model");
        const char *up = NULL;
        if (wgllm_json_is(m, WGLLM_JSON_STRING) && !has_nul(m) && !model_matches(p, m->str) && p->upstream)
            up = p->upstream(p->upstream_user, m->str);
        req->upstream = up;
        ok = endpoint == WGLLM_OPENAI_EMBEDDINGS ? embed_parse(p, root, req, err) : gen_parse(p, root, req, err);
    }
    wgllm_json_doc_free(&doc);
    if (!ok) {
        wgllm_openai_request_free(req);
        req->endpoint = endpoint;
    }
    return ok;
}

void wgllm_openai_request_free(struct wgllm_openai_request *g) {
    for (int i = 0; g->msgs && i < g->n_msgs; i++) {
        free((char *)g->msgs[i].role);
        free((char *)g->msgs[i].content);
    }
    free(g->msgs);
    free(g->prompt);
    for (int i = 0; g->stops && i < g->rp.n_stop; i++) free(g->stops[i]);
    free(g->stops);
    free(g->bias);
    free(g->context_key);
    free(g->grammar);
    free(g->messages_json);
    free(g->tools_json);
    free(g->forward_json);
    free(g->kwargs_json);
    wgllm_openai_toolsplit_free(&g->split);
    for (int i = 0; g->inputs && i < g->n_inputs; i++) free(g->inputs[i]);
    free(g->inputs);
    free(g->input_lens);
    memset(g, 0, sizeof(*g));
}

/* ---- llama.cpp server's /tokenize and /detokenize ------------------------ */

static char *writer_text(struct wgllm_strbuf *b, struct wgllm_openai_error *e) {
    if (b->oom) {
        wgllm_strbuf_free(b);
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory for the answer");
        return NULL;
    }
    return wgllm_strbuf_take(b);
}

/* One token's piece as llama.cpp's server shows it: a string when it is whole
 * UTF-8, else the bytes as numbers (a piece may be part of a character). */
static void piece_json(struct wgllm_json_writer *w, const struct wgllm_model *m, int32_t id) {
    char buf[256], *p = buf;
    int32_t n = wgllm_token_to_piece(m, id, buf, (int32_t)sizeof buf, true);
    if (n < 0 && (p = malloc((size_t)-n))) n = wgllm_token_to_piece(m, id, p, -n, true);
    if (n < 0) n = 0, p = p ? p : buf;
    if (wgllm_json_utf8_check(p, (size_t)n) == (size_t)n && !memchr(p, 0, (size_t)n)) {
        wgllm_json_w_string(w, "piece", p, (size_t)n);
    } else {
        wgllm_json_w_array(w, "piece");
        for (int32_t i = 0; i < n; i++) wgllm_json_w_number(w, NULL, (unsigned char)p[i]);
        wgllm_json_w_end(w, ']');
    }
    if (p != buf) free(p);
}

char *wgllm_openai_tokenize(const struct wgllm_openai_params *p, const char *body, size_t len,
                            struct wgllm_openai_error *e) {
    static const char *const FIELDS[] = {"content", "add_special", "parse_special", "with_pieces", "model", NULL};
    struct wgllm_json_doc doc;
    if (!wgllm_openai_parse_body(body, len, &doc, e)) return NULL;
    const J *root = wgllm_json_root(&doc), *content = wgllm_json_get(root, "content");
    bool add_special = false, parse_special = true, with_pieces = false, ok = true;
    if (root->type != WGLLM_JSON_OBJECT) ok = wgllm_openai_bad(e, "body", "the request %s must be a JSON object%s", "");
    else if (!wgllm_openai_known_fields(root, FIELDS, NULL, e)) ok = false;
    else if (!wgllm_json_is(content, WGLLM_JSON_STRING)) ok = wgllm_openai_bad(e, "content", "'%s' must be a string%s", "");
    else ok = get_bool(root, "add_special", &add_special, e) && get_bool(root, "parse_special", &parse_special, e) &&
              get_bool(root, "with_pieces", &with_pieces, e);
    int32_t *toks = NULL, n = 0;
    struct wgllm_error err = {0};
    if (ok && (n = wgllm_tokenize_alloc(p->model, content->str, content->len, add_special, parse_special, &toks, &err)) < 0) {
        wgllm_openai_error_set(e, 400, "invalid_request_error", "content", NULL, "%s", err.message);
        ok = false;
    }
    wgllm_json_doc_free(&doc);
    if (!ok) return free(toks), NULL;
    struct wgllm_strbuf b = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_array(&w, "tokens");
    for (int32_t i = 0; i < n; i++) {
        if (!with_pieces) {
            wgllm_json_w_number(&w, NULL, toks[i]);
            continue;
        }
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_number(&w, "id", toks[i]);
        piece_json(&w, p->model, toks[i]);
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
    free(toks);
    return writer_text(&b, e);
}

char *wgllm_openai_detokenize(const struct wgllm_openai_params *p, const char *body, size_t len,
                              struct wgllm_openai_error *e) {
    static const char *const FIELDS[] = {"tokens", "model", NULL};
    struct wgllm_json_doc doc;
    if (!wgllm_openai_parse_body(body, len, &doc, e)) return NULL;
    const J *root = wgllm_json_root(&doc), *toks = wgllm_json_get(root, "tokens");
    bool ok = true;
    if (root->type != WGLLM_JSON_OBJECT) ok = wgllm_openai_bad(e, "body", "the request %s must be a JSON object%s", "");
    else if (!wgllm_openai_known_fields(root, FIELDS, NULL, e)) ok = false;
    else if (!wgllm_json_is(toks, WGLLM_JSON_ARRAY)) ok = wgllm_openai_bad(e, "tokens", "'%s' must be an array of token ids%s", "");
    const int n_vocab = wgllm_model_n_vocab(p->model);
    struct wgllm_strbuf text = {0};
    int i = 0;
    for (const J *t = ok ? wgllm_json_first(toks) : NULL; t; t = wgllm_json_next(toks, t), i++) {
        if (t->type != WGLLM_JSON_NUMBER || t->num != floor(t->num) || t->num < 0 || t->num >= n_vocab) {
            wgllm_openai_error_set(e, 400, "invalid_request_error", "tokens", NULL,
                                   "'tokens[%d]' is not a token id of this model (0 to %d)", i, n_vocab - 1);
            ok = false;
            break;
        }
        char buf[256];
        const int32_t k = wgllm_token_to_piece(p->model, (int32_t)t->num, buf, (int32_t)sizeof buf, true);
        if (k >= 0) {
            wgllm_strbuf_put(&text, buf, (size_t)k);
        } else {
            char *big = malloc((size_t)-k);
            if (big && wgllm_token_to_piece(p->model, (int32_t)t->num, big, -k, true) == -k)
                wgllm_strbuf_put(&text, big, (size_t)-k);
            else text.oom = true;
            free(big);
        }
    }
    wgllm_json_doc_free(&doc);
    if (!ok) return wgllm_strbuf_free(&text), NULL;
    struct wgllm_strbuf b = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    /* bytes of a character cut between tokens become U+FFFD, as JSON needs */
    wgllm_json_w_string(&w, "content", text.data ? text.data : "", text.len);
    wgllm_json_w_end(&w, '}');
    if (text.oom) b.oom = true;
    wgllm_strbuf_free(&text);
    return writer_text(&b, e);
}

bool wgllm_openai_parse_own(const char *json, struct wgllm_json_doc *d) {
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1u << 24};
    return json && wgllm_json_parse(json, strlen(json), &lim, d, &je);
}

void wgllm_openai_chunk_view(const struct wgllm_json_doc *d, struct wgllm_openai_chunk_view *v) {
    const J *r = wgllm_json_root(d);
    const J *ch = wgllm_json_at(wgllm_json_get(r, "choices"), 0), *delta = wgllm_json_get(ch, "delta");
    const J *rc = wgllm_json_get(delta, "reasoning_content"), *c = wgllm_json_get(delta, "content");
    const J *fin = wgllm_json_get(ch, "finish_reason"), *u = wgllm_json_get(r, "usage");
    *v = (struct wgllm_openai_chunk_view){
        .root = r,
        .error = wgllm_json_get(r, "error"),
        .reasoning = wgllm_json_is(rc, WGLLM_JSON_STRING) && rc->len ? rc : NULL,
        .content = wgllm_json_is(c, WGLLM_JSON_STRING) && c->len ? c : NULL,
        .tool_calls = wgllm_json_get(delta, "tool_calls"),
        .finish = wgllm_json_is(fin, WGLLM_JSON_STRING) ? fin : NULL,
        .usage = wgllm_json_is(u, WGLLM_JSON_OBJECT) ? u : NULL,
    };
}
