/*
 * openai.c - the JSON side of `wgllm serve`: OpenAI request fields mapped to
 * engine parameters (with the field named in every 400), response objects,
 * SSE chunks, embeddings, /v1/models and Prometheus metrics.
 *
 * Unknown top-level fields are refused (400 naming them) rather than ignored,
 * so a client never silently loses a parameter it thinks it set.
 */
#include "server/server.h"

#include "base/strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STOPS 16
#define MAX_STOP_BYTES 1024 /* the stop matcher's work per token grows with the longest stop */
#define MAX_KEY_BYTES 1024  /* context_key */
#define MAX_EMBED_INPUTS 256

void srv_err_set(struct srv_err *e, int status, const char *type, const char *param, const char *code,
                 const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

static bool bad(struct srv_err *e, const char *param, const char *fmt, const char *a) {
    srv_err_set(e, 400, "invalid_request_error", param, NULL, fmt, param, a);
    return false;
}

char *srv_err_json(const struct srv_err *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param); else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code); else cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

void srv_err_from_engine(struct srv_err *e, enum wgllm_status st, const char *msg) {
    if (st == WGLLM_STATUS_CONTEXT_FULL)
        srv_err_set(e, 400, "invalid_request_error", "messages", "context_length_exceeded", "%s", msg);
    else if (st == WGLLM_STATUS_UNSUPPORTED && strstr(msg, "queue is full"))
        srv_err_set(e, 503, "server_error", NULL, "queue_full", "%s", msg);
    else if (st == WGLLM_STATUS_INVALID_ARGUMENT || st == WGLLM_STATUS_UNSUPPORTED)
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    else
        srv_err_set(e, 500, "server_error", NULL, NULL, "%s", msg);
}

bool srv_model_matches(const struct srv *s, const char *name) {
    if (!strcmp(name, s->model_id) || !strcmp(name, s->model_path)) return true;
    /* the file name without ".gguf" is a natural alias */
    size_t n = strlen(s->model_id);
    return n > 5 && !strcmp(s->model_id + n - 5, ".gguf") && strlen(name) == n - 5 && !strncmp(name, s->model_id, n - 5);
}

/* Generated text may hold stray bytes of an unfinished or invalid UTF-8
 * sequence; JSON must not: each invalid byte becomes U+FFFD. */
static char *utf8_clean(const char *s, size_t n) {
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        uint32_t cp = c & (k == 1 ? 0x7Fu : 0x7Fu >> k);
        for (size_t j = 1; ok && j < k; j++) {
            ok = (u[i + j] & 0xC0) == 0x80;
            cp = cp << 6 | (u[i + j] & 0x3Fu);
        }
        if (ok && ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || (k == 1 && c == 0)))
            ok = false;
        if (ok) {
            memcpy(o, u + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    return out;
}

static void add_text(cJSON *o, const char *key, const char *s, size_t n) {
    char *t = utf8_clean(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, key, t ? t : "");
    free(t);
}

/* ---- body limits ------------------------------------------------------------ */

static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad_at) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        *bad_at = i;
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

/* One linear pass over the bytes outside strings: nesting depth and the
 * number of values (each container, and each ',' separating two), the
 * things that make cJSON recurse and allocate. The syntax itself is cJSON's
 * to judge; this only refuses what would be expensive to parse. */
bool srv_body_check(const char *body, size_t len, struct srv_err *e) {
    size_t bad = 0;
    if (!utf8_valid((const unsigned char *)body, len, &bad)) {
        srv_err_set(e, 400, "invalid_request_error", NULL, "invalid_utf8",
                    "the request body is not valid UTF-8 (at byte %zu)", bad);
        return false;
    }
    int depth = 0;
    size_t values = 1;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const char c = body[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > SRV_JSON_MAX_DEPTH) {
                srv_err_set(e, 400, "invalid_request_error", NULL, "json_too_deep",
                            "the request body nests JSON deeper than %d levels (at byte %zu)", SRV_JSON_MAX_DEPTH, i);
                return false;
            }
            values++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',') {
            values++;
        }
        if (values > SRV_JSON_MAX_VALUES) {
            srv_err_set(e, 400, "invalid_request_error", NULL, "json_too_many_values",
                        "the request body has more than %d JSON values", SRV_JSON_MAX_VALUES);
            return false;
        }
    }
    return true;
}

/* ---- field helpers -------------------------------------------------------- */

static bool get_number(const cJSON *o, const char *k, double lo, double hi, double *out, bool *present,
                       struct srv_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (present) *present = false;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad(e, k, "'%s' must be a number%s", "");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        srv_err_set(e, 400, "invalid_request_error", k, NULL, "'%s' is %g; it must be in [%g, %g]", k, v->valuedouble,
                    lo, hi);
        return false;
    }
    *out = v->valuedouble;
    if (present) *present = true;
    return true;
}

static bool get_int(const cJSON *o, const char *k, double lo, double hi, int *out, bool *present, struct srv_err *e) {
    double d;
    bool p = false;
    if (!get_number(o, k, lo, hi, &d, &p, e)) return false;
    if (p && d != floor(d)) return bad(e, k, "'%s' must be an integer%s", "");
    if (p) *out = (int)d;
    if (present) *present = p;
    return true;
}

static bool get_bool(const cJSON *o, const char *k, bool *out, struct srv_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) return bad(e, k, "'%s' must be true or false%s", "");
    *out = cJSON_IsTrue(v);
    return true;
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
                                          "tools", "tool_choice", "parallel_tool_calls", "store", "metadata", NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", "echo", "suffix", "best_of", NULL};
static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "temperature", "top_p", "stop", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "n", "user", "stream", "stream_options", "top_k", "min_p", "typical_p",
    "repeat_penalty", "repeat_last_n", "ignore_eos", "cache_prompt", "context_key", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* Text of a message's content: a string, null, or an array of text parts. */
static bool message_text(const cJSON *c, int i, char **out, struct srv_err *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].content", i);
    if (!c || cJSON_IsNull(c)) {
        *out = dupn("", 0);
        return true;
    }
    if (cJSON_IsString(c)) {
        *out = dupn(c->valuestring, strlen(c->valuestring));
        return true;
    }
    if (!cJSON_IsArray(c)) return bad(e, param, "'%s' must be a string or an array of text parts%s", "");
    size_t total = 0;
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(tx)) {
            srv_err_set(e, 400, "invalid_request_error", param, NULL,
                        "'%s[%d]': only {\"type\": \"text\", \"text\": ...} parts are supported%s%s", param, j,
                        cJSON_IsString(t) ? ", not " : "", cJSON_IsString(t) ? t->valuestring : "");
            return false;
        }
        total += strlen(tx->valuestring);
        j++;
    }
    char *s = malloc(total + 1), *p = s;
    if (!s) return bad(e, param, "out of memory for '%s'%s", "");
    cJSON_ArrayForEach(part, c) {
        const char *tx = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(tx);
        memcpy(p, tx, n);
        p += n;
    }
    *p = 0;
    *out = s;
    return true;
}

static bool parse_messages(const cJSON *body, struct srv_gen *g, struct srv_err *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!m) return bad(e, "messages", "'%s' is required%s", "");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
        return bad(e, "messages", "'%s' must be a non-empty array of messages%s", "");
    int n = cJSON_GetArraySize(m);
    g->msgs = calloc((size_t)n, sizeof(*g->msgs));
    if (!g->msgs) return bad(e, "messages", "out of memory for '%s'%s", "");
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        int i = g->n_msgs;
        char param[64];
        snprintf(param, sizeof(param), "messages[%d].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsObject(it) || !cJSON_IsString(role)) return bad(e, param, "'%s' must be a string%s", "");
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return bad(e, param, "'%s' is '%s'; expected system, developer, user, assistant or tool", r);
        char *text = NULL;
        if (!message_text(cJSON_GetObjectItemCaseSensitive(it, "content"), i, &text, e)) return false;
        g->msgs[i].role = dupn(r, strlen(r));
        g->msgs[i].content = text;
        g->n_msgs++;
        if (!g->msgs[i].role || !text) return bad(e, "messages", "out of memory for '%s'%s", "");
    }
    return true;
}

static bool parse_prompt(const cJSON *body, struct srv_gen *g, struct srv_err *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!p) return bad(e, "prompt", "'%s' is required%s", "");
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) != 1 || !cJSON_IsString(cJSON_GetArrayItem(p, 0)))
            return bad(e, "prompt", "'%s' must be a string or an array of exactly one string (token arrays and "
                                    "several prompts are not supported)%s", "");
        p = cJSON_GetArrayItem(p, 0);
    }
    if (!cJSON_IsString(p)) return bad(e, "prompt", "'%s' must be a string%s", "");
    g->prompt = dupn(p->valuestring, strlen(p->valuestring));
    return g->prompt != NULL;
}

static bool parse_stop(const cJSON *body, struct srv_gen *g, struct srv_err *e) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(body, "stop");
    if (!s || cJSON_IsNull(s)) return true;
    const char *one[1];
    int n = 0;
    if (cJSON_IsString(s)) {
        one[0] = s->valuestring;
        n = 1;
    } else if (cJSON_IsArray(s)) {
        n = cJSON_GetArraySize(s);
        if (n > MAX_STOPS) return bad(e, "stop", "'%s' has more than 16 strings%s", "");
    } else {
        return bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
    }
    g->stops = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!g->stops) return bad(e, "stop", "out of memory for '%s'%s", "");
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_IsString(s) ? s : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(it)) return bad(e, "stop", "'%s' must contain only strings%s", "");
        if (strlen(it->valuestring) > MAX_STOP_BYTES)
            return bad(e, "stop", "'%s' strings are at most 1024 bytes%s", "");
        (void)one;
        g->stops[i] = dupn(it->valuestring, strlen(it->valuestring));
        g->rp.n_stop = i + 1;
    }
    g->rp.stop = (const char *const *)g->stops;
    return true;
}

static bool parse_bias(struct srv *s, const cJSON *body, struct srv_gen *g, struct srv_err *e) {
    const bool local = !g->model_name;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(body, "logit_bias");
    if (!b || cJSON_IsNull(b)) return true;
    if (!cJSON_IsObject(b)) return bad(e, "logit_bias", "'%s' must be an object of token id -> bias%s", "");
    int n = cJSON_GetArraySize(b);
    const long n_vocab = local ? (long)s->n_vocab : 2147483647L;
    /* more entries than tokens can only repeat keys: refused before anything is sized by them */
    if (n > (local ? s->n_vocab : SRV_JSON_MAX_VALUES)) {
        srv_err_set(e, 400, "invalid_request_error", "logit_bias", NULL,
                    "'logit_bias' has %d entries; the model has %d tokens", n, s->n_vocab);
        return false;
    }
    g->bias = calloc((size_t)(n ? n : 1), sizeof(*g->bias));
    if (!g->bias) return bad(e, "logit_bias", "out of memory for '%s'%s", "");
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, b) {
        char *end;
        long t = strtol(it->string, &end, 10);
        if (!*it->string || *end || t < 0 || t >= n_vocab)
            return bad(e, "logit_bias", "'%s' has key '%s', which is not a token id of this model", it->string);
        if (!cJSON_IsNumber(it) || it->valuedouble < -100 || it->valuedouble > 100)
            return bad(e, "logit_bias", "'%s' values must be numbers in [-100, 100] (token %s)", it->string);
        g->bias[i].token = (int32_t)t;
        /* -100 is OpenAI's "ban" */
        g->bias[i].bias = it->valuedouble <= -100 ? -INFINITY : (float)it->valuedouble;
        i++;
    }
    g->rp.sampling.logit_bias = g->bias;
    g->rp.sampling.n_logit_bias = i;
    return true;
}

static bool gen_parse(struct srv *s, const cJSON *body, bool chat, const char *upstream, struct srv_gen *g,
                      struct srv_err *e);

bool srv_gen_parse(struct srv *s, const cJSON *body, bool chat, struct srv_gen *g, struct srv_err *e) {
    return gen_parse(s, body, chat, NULL, g, e);
}

bool srv_gen_parse_upstream(struct srv *s, const cJSON *body, bool chat, const char *upstream, struct srv_gen *g,
                            struct srv_err *e) {
    if (!gen_parse(s, body, chat, upstream, g, e)) return false;
    if (g->logprobs)
        return bad(e, "logprobs", "'%s' is not forwarded to upstream '%s'", upstream);
    return true;
}

static bool gen_parse(struct srv *s, const cJSON *body, bool chat, const char *upstream, struct srv_gen *g,
                      struct srv_err *e) {
    memset(g, 0, sizeof(*g));
    g->chat = chat;
    g->model_name = upstream;
    g->rp = wgllm_request_default_params();
    g->rp.max_tokens = 0; /* OpenAI: until the end of generation or of the context */
    g->rp.sampling.temperature = 0.8f; /* llama.cpp server's defaults; the rest are the sampler's */
    g->rp.sampling.seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)g;
    if (!cJSON_IsObject(body)) return bad(e, "body", "the request %s must be a JSON object%s", "");
    const cJSON *it;
    cJSON_ArrayForEach(it, body) {
        if (!in_list(COMMON_FIELDS, it->string) && !in_list(chat ? CHAT_FIELDS : COMPLETION_FIELDS, it->string))
            return bad(e, it->string, "unknown field '%s'%s", "");
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return bad(e, "model", "'%s' must be a string%s", "");
        if (!upstream && !srv_model_matches(s, model->valuestring)) {
            srv_err_set(e, 404, "invalid_request_error", "model", "model_not_found",
                        "the model '%s' does not exist; this server serves '%s'", model->valuestring, s->model_id);
            return false;
        }
    }
    if (chat ? !parse_messages(body, g, e) : !parse_prompt(body, g, e)) return false;
    double d;
    bool p;
    struct wgllm_sampler_params *sp = &g->rp.sampling;
    int mt = 0;
    /* the server's cap (--max-tokens): no request holds a slot for an unbounded time */
    const double max_gen = s->max_tokens > 0 ? s->max_tokens : 1 << 30;
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
    if (!get_number(body, "repeat_penalty", 0, 100, &d, &p, e)) return false;
    /* logits are divided by it: 0 would make them infinite */
    if (p && d <= 0) return bad(e, "repeat_penalty", "'%s' must be greater than 0 (1 = off)%s", "");
    if (p) sp->repeat_penalty = (float)d;
    if (!get_int(body, "repeat_last_n", -1, 1 << 30, &sp->penalty_last_n, NULL, e)) return false;
    /* a window longer than a slot's context sees no more tokens; the sampler sizes a ring by it */
    if (s->n_ctx > 0 && sp->penalty_last_n > s->n_ctx) sp->penalty_last_n = s->n_ctx;
    if (!get_number(body, "seed", -9.2e18, 1.8e19, &d, &p, e)) return false;
    if (p) {
        if (d != floor(d)) return bad(e, "seed", "'%s' must be an integer%s", "");
        sp->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    }
    int n = 1;
    if (!get_int(body, "n", 1, 1 << 30, &n, NULL, e)) return false;
    if (n != 1) return bad(e, "n", "'%s' > 1 is not supported: send one request per completion%s", "");
    if (!get_bool(body, "ignore_eos", &g->rp.ignore_eos, e)) return false;
    bool cache_prompt = true;
    if (!get_bool(body, "cache_prompt", &cache_prompt, e)) return false; /* accepted: the engine always reuses */
    if (!get_bool(body, "stream", &g->stream, e)) return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(e, "stream_options", "'%s' must be an object%s", "");
        if (!get_bool(so, "include_usage", &g->include_usage, e)) return false;
    }
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(body, "context_key");
    if (ck && !cJSON_IsNull(ck)) {
        if (!cJSON_IsString(ck)) return bad(e, "context_key", "'%s' must be a string%s", "");
        if (strlen(ck->valuestring) > MAX_KEY_BYTES) return bad(e, "context_key", "'%s' is at most 1024 bytes%s", "");
        g->context_key = dupn(ck->valuestring, strlen(ck->valuestring));
        g->rp.context_key = g->context_key;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(body, "user");
    if (u && !cJSON_IsNull(u) && !cJSON_IsString(u)) return bad(e, "user", "'%s' must be a string%s", "");
    if (chat) {
        if (!get_bool(body, "logprobs", &g->logprobs, e)) return false;
        if (!get_int(body, "top_logprobs", 0, 20, &g->top_logprobs, NULL, e)) return false;
        if (g->top_logprobs > 0 && !g->logprobs)
            return bad(e, "top_logprobs", "'%s' needs 'logprobs': true%s", "");
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
        if (tools && !cJSON_IsNull(tools) && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
            return bad(e, "tools", "'%s' is not supported by this server yet%s", "");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
        const cJSON *rft = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (rf && !cJSON_IsNull(rf) && !(cJSON_IsString(rft) && !strcmp(rft->valuestring, "text")))
            return bad(e, "response_format", "'%s': only {\"type\": \"text\"} is supported%s", "");
    } else {
        int lp = -1;
        bool lpp = false;
        if (!get_int(body, "logprobs", 0, 5, &lp, &lpp, e)) return false;
        if (lpp) g->logprobs = true, g->top_logprobs = lp;
        bool echo = false;
        if (!get_bool(body, "echo", &echo, e)) return false;
        if (echo) return bad(e, "echo", "'%s' is not supported%s", "");
        const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(body, "suffix");
        if (sfx && !cJSON_IsNull(sfx)) return bad(e, "suffix", "'%s' is not supported%s", "");
        int best_of = 1;
        if (!get_int(body, "best_of", 1, 1, &best_of, NULL, e)) return false;
    }
    if (g->logprobs) sp->n_probs = g->top_logprobs;
    if (!parse_stop(body, g, e) || !parse_bias(s, body, g, e)) return false;
    return true;
}

void srv_gen_free(struct srv_gen *g) {
    for (int i = 0; i < g->n_msgs; i++) {
        free((char *)g->msgs[i].role);
        free((char *)g->msgs[i].content);
    }
    free(g->msgs);
    free(g->prompt);
    for (int i = 0; g->stops && i < g->rp.n_stop; i++) free(g->stops[i]);
    free(g->stops);
    free(g->bias);
    free(g->context_key);
    memset(g, 0, sizeof(*g));
}

/* ---- responses ------------------------------------------------------------ */

const char *srv_finish_name(enum wgllm_finish_reason f) {
    return f == WGLLM_FINISH_LENGTH ? "length" : "stop";
}

static cJSON *usage_json(const struct wgllm_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "prompt_tokens_details"), "cached_tokens", u->cached_tokens);
    return o;
}

static cJSON *head(struct srv *s, const struct srv_gen *g, const char *id, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", g->model_name ? g->model_name : s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "wgllm");
    return o;
}

/* The text of one token as the API shows it (may be a partial UTF-8 piece). */
static char *token_text(struct srv *s, int32_t tok) {
    char buf[256];
    int32_t n = wgllm_token_to_piece(s->model, tok, buf, (int32_t)sizeof(buf), false);
    if (n < 0) n = 0;
    return utf8_clean(buf, (size_t)n);
}

static cJSON *token_json(struct srv *s, int32_t tok, float logprob) {
    char *t = token_text(s, tok);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", t ? t : "");
    cJSON_AddNumberToObject(e, "logprob", logprob);
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
    free(t);
    return e;
}

/* One generated token's logprobs in the chat (content[]) or completions
 * (parallel arrays) shape; `top` holds its n_top alternatives or is NULL. */
static void add_logprob_entry(struct srv *s, const struct srv_gen *g, cJSON *lp, int32_t tok, float logprob,
                              const struct wgllm_token_logprob *top, int n_top, size_t *offset) {
    if (n_top > g->top_logprobs) n_top = g->top_logprobs;
    if (g->chat) {
        cJSON *e = token_json(s, tok, logprob);
        cJSON *alts = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; top && k < n_top; k++) cJSON_AddItemToArray(alts, token_json(s, top[k].token, top[k].logprob));
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "content"), e);
    } else {
        char *t = token_text(s, tok);
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), cJSON_CreateString(t ? t : ""));
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), cJSON_CreateNumber(logprob));
        cJSON *alts = cJSON_CreateNull();
        if (top && n_top > 0) {
            /* the legacy shape: token text -> logprob (equal texts keep the first, likelier one) */
            cJSON_Delete(alts);
            alts = cJSON_CreateObject();
            for (int k = 0; k < n_top; k++) {
                char *a = token_text(s, top[k].token);
                if (a && !cJSON_GetObjectItemCaseSensitive(alts, a)) cJSON_AddNumberToObject(alts, a, top[k].logprob);
                free(a);
            }
        }
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), alts);
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"), cJSON_CreateNumber((double)*offset));
        *offset += t ? strlen(t) : 0;
        free(t);
    }
}

static cJSON *new_logprobs(const struct srv_gen *g) {
    cJSON *lp = cJSON_CreateObject();
    if (g->chat) {
        cJSON_AddArrayToObject(lp, "content");
    } else {
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
    }
    return lp;
}

char *srv_gen_response(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_result *r) {
    cJSON *o = head(s, g, id, false);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "system_fingerprint");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (g->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        add_text(m, "content", r->text, r->text_len);
    } else {
        add_text(c, "text", r->text, r->text_len);
    }
    if (g->logprobs) {
        cJSON *lp = new_logprobs(g);
        size_t off = 0;
        for (int i = 0; i < r->n_tokens; i++)
            add_logprob_entry(s, g, lp, r->tokens[i], r->logprobs[i],
                              r->top_logprobs ? r->top_logprobs + (size_t)i * r->n_top : NULL, r->n_top, &off);
        cJSON_AddItemToObject(c, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", srv_finish_name(r->finish));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "usage", usage_json(&r->usage));
    cJSON_AddStringToObject(o, "system_fingerprint", "wgllm");
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

static char *sse(cJSON *o) {
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *out = malloc(n + 9);
    if (out) snprintf(out, n + 9, "data: %s\n\n", j);
    free(j);
    return out;
}

char *srv_gen_chunk(struct srv *s, const struct srv_gen *g, const char *id, const char *text, size_t len,
                    int32_t token, float logprob, bool first, const char *finish_reason) {
    cJSON *o = head(s, g, id, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (g->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) {
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        } else if (text) {
            add_text(d, "content", text, len);
        }
    } else {
        add_text(c, "text", text, len);
    }
    if (g->logprobs && g->top_logprobs == 0 && token >= 0) {
        cJSON *lp = new_logprobs(g);
        size_t off = 0;
        add_logprob_entry(s, g, lp, token, logprob, NULL, 0, &off);
        cJSON_AddItemToObject(c, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    if (finish_reason) cJSON_AddStringToObject(c, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (g->include_usage) cJSON_AddNullToObject(o, "usage");
    return sse(o);
}

char *srv_gen_logprobs_chunk(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_result *r) {
    cJSON *o = head(s, g, id, true);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (g->chat) cJSON_AddObjectToObject(c, "delta");
    else cJSON_AddStringToObject(c, "text", "");
    cJSON *lp = new_logprobs(g);
    size_t off = 0;
    for (int i = 0; i < r->n_tokens; i++)
        add_logprob_entry(s, g, lp, r->tokens[i], r->logprobs[i],
                          r->top_logprobs ? r->top_logprobs + (size_t)i * r->n_top : NULL, r->n_top, &off);
    cJSON_AddItemToObject(c, "logprobs", lp);
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    if (g->include_usage) cJSON_AddNullToObject(o, "usage");
    return sse(o);
}

char *srv_gen_usage_chunk(struct srv *s, const struct srv_gen *g, const char *id, const struct wgllm_usage *u) {
    cJSON *o = head(s, g, id, true);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    return sse(o);
}

/* ---- embeddings ----------------------------------------------------------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *p, size_t n) {
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = B64[v >> 18 & 63];
        *o++ = B64[v >> 12 & 63];
        *o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o = 0;
    return out;
}

char *srv_embeddings(struct srv *s, const cJSON *body, struct srv_err *e) {
    static const char *const FIELDS[] = {"model", "input", "encoding_format", "dimensions", "user", "pooling", NULL};
    if (!cJSON_IsObject(body)) {
        bad(e, "body", "the request %s must be a JSON object%s", "");
        return NULL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, body) {
        if (!in_list(FIELDS, it->string)) {
            bad(e, it->string, "unknown field '%s'%s", "");
            return NULL;
        }
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model) && (!cJSON_IsString(model) || !srv_model_matches(s, model->valuestring))) {
        srv_err_set(e, 404, "invalid_request_error", "model", "model_not_found",
                    "the model '%s' does not exist; this server serves '%s'",
                    cJSON_IsString(model) ? model->valuestring : "?", s->model_id);
        return NULL;
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(body, "input");
    if (!in) {
        bad(e, "input", "'%s' is required%s", "");
        return NULL;
    }
    int n_in = cJSON_IsArray(in) ? cJSON_GetArraySize(in) : 1;
    if (!(cJSON_IsString(in) || cJSON_IsArray(in)) || n_in < 1 || n_in > MAX_EMBED_INPUTS) {
        bad(e, "input", "'%s' must be a string or an array of 1 to 256 strings%s", "");
        return NULL;
    }
    for (int i = 0; cJSON_IsArray(in) && i < n_in; i++)
        if (!cJSON_IsString(cJSON_GetArrayItem(in, i))) {
            bad(e, "input", "'%s' must contain only strings (token arrays are not supported)%s", "");
            return NULL;
        }
    bool b64 = false;
    const cJSON *ef = cJSON_GetObjectItemCaseSensitive(body, "encoding_format");
    if (ef && !cJSON_IsNull(ef)) {
        if (!cJSON_IsString(ef) || (strcmp(ef->valuestring, "float") && strcmp(ef->valuestring, "base64"))) {
            bad(e, "encoding_format", "'%s' must be \"float\" or \"base64\"%s", "");
            return NULL;
        }
        b64 = !strcmp(ef->valuestring, "base64");
    }
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(body, "dimensions");
    if (dim && !cJSON_IsNull(dim) && (!cJSON_IsNumber(dim) || dim->valuedouble != wgllm_model_n_embd(s->model))) {
        srv_err_set(e, 400, "invalid_request_error", "dimensions", NULL,
                    "'dimensions' must be this model's embedding size, %d", wgllm_model_n_embd(s->model));
        return NULL;
    }
    enum wgllm_pooling pooling = WGLLM_POOLING_MODEL;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(body, "pooling");
    if (pl && !cJSON_IsNull(pl)) {
        const char *v = cJSON_IsString(pl) ? pl->valuestring : "";
        if (!strcmp(v, "mean")) pooling = WGLLM_POOLING_MEAN;
        else if (!strcmp(v, "last")) pooling = WGLLM_POOLING_LAST;
        else if (!strcmp(v, "cls")) pooling = WGLLM_POOLING_CLS;
        else {
            bad(e, "pooling", "'%s' must be \"mean\", \"last\" or \"cls\"%s", "");
            return NULL;
        }
    }
    const int E = wgllm_model_n_embd(s->model);
    float *vec = malloc(sizeof(float) * (size_t)E);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    long tokens = 0;
    for (int i = 0; i < n_in; i++) {
        const char *text = cJSON_IsArray(in) ? cJSON_GetArrayItem(in, i)->valuestring : in->valuestring;
        struct wgllm_error werr = {0};
        int n_out = 0;
        enum wgllm_status st =
            vec ? wgllm_embed(s->engine, text, strlen(text), pooling, true, vec, E, &n_out, &werr) : WGLLM_STATUS_OUT_OF_MEMORY;
        if (st != WGLLM_STATUS_OK) {
            if (!vec) snprintf(werr.message, sizeof(werr.message), "out of memory");
            srv_err_from_engine(e, st, werr.message);
            if (st == WGLLM_STATUS_UNSUPPORTED && strstr(werr.message, "pooling"))
                snprintf(e->param, sizeof(e->param), "pooling");
            else if (st == WGLLM_STATUS_CONTEXT_FULL || st == WGLLM_STATUS_INVALID_ARGUMENT)
                snprintf(e->param, sizeof(e->param), "input");
            free(vec);
            cJSON_Delete(o);
            return NULL;
        }
        int32_t nt = wgllm_tokenize(s->model, text, strlen(text), NULL, 0, true, false, NULL);
        tokens += nt < 0 && nt != INT32_MIN ? -nt : (nt > 0 ? nt : 0);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", i);
        if (b64) {
            /* OpenAI's base64 is the little-endian float32 bytes */
            unsigned char *bytes = malloc(sizeof(float) * (size_t)n_out);
            for (int k = 0; bytes && k < n_out; k++) {
                uint32_t u;
                memcpy(&u, &vec[k], 4);
                for (int b = 0; b < 4; b++) bytes[4 * k + b] = (unsigned char)(u >> (8 * b));
            }
            char *s64 = bytes ? base64(bytes, sizeof(float) * (size_t)n_out) : NULL;
            cJSON_AddStringToObject(d, "embedding", s64 ? s64 : "");
            free(s64);
            free(bytes);
        } else {
            cJSON *arr = cJSON_AddArrayToObject(d, "embedding");
            for (int k = 0; k < n_out; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(vec[k]));
        }
        cJSON_AddItemToArray(data, d);
    }
    free(vec);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)tokens);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *srv_models(struct srv *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "wgllm");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", wgllm_model_arch(s->model));
    cJSON_AddNumberToObject(meta, "n_vocab", wgllm_model_n_vocab(s->model));
    cJSON_AddNumberToObject(meta, "n_ctx_train", wgllm_model_n_ctx_train(s->model));
    cJSON_AddNumberToObject(meta, "n_embd", wgllm_model_n_embd(s->model));
    cJSON_AddNumberToObject(meta, "size", (double)wgllm_model_size(s->model));
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, m);
    for (int i = 0; i < wgllm_client_count(s->client); i++) {
        const struct wgllm_endpoint_desc *d = wgllm_client_at(s->client, i);
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "id", d->name);
        cJSON_AddStringToObject(u, "object", "model");
        cJSON_AddNumberToObject(u, "created", (double)s->created);
        cJSON_AddStringToObject(u, "owned_by", "upstream");
        cJSON *um = cJSON_AddObjectToObject(u, "meta");
        cJSON_AddStringToObject(um, "upstream", d->base_url ? d->base_url : "");
        if (d->model) cJSON_AddStringToObject(um, "upstream_model", d->model);
        cJSON_AddItemToArray(data, u);
    }
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

/* ---- metrics -------------------------------------------------------------- */

static void metric(struct wgllm_strbuf *b, const char *name, const char *type, const char *help, double v) {
    wgllm_strbuf_printf(b, "# HELP wgllm_%s %s\n# TYPE wgllm_%s %s\nwgllm_%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics(struct srv *s) {
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(s->engine, &m);
    struct wgllm_strbuf b = {0};
    metric(&b, "requests_submitted_total", "counter", "Requests accepted by the engine.", (double)m.requests_submitted);
    metric(&b, "requests_finished_total", "counter", "Requests that ended (any reason).", (double)m.requests_finished);
    metric(&b, "requests_cancelled_total", "counter", "Requests cancelled (client gone or asked).",
           (double)m.requests_cancelled);
    metric(&b, "requests_failed_total", "counter", "Requests that ended with an error.", (double)m.requests_failed);
    metric(&b, "requests_refused_total", "counter", "Requests refused because the queue was full.",
           (double)m.requests_refused);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m.prompt_tokens);
    metric(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from a cache.",
           (double)m.prompt_tokens_cached);
    metric(&b, "generated_tokens_total", "counter", "Generated tokens.", (double)m.generated_tokens);
    metric(&b, "cache_hits_total", "counter", "Requests that reused a cached prefix.", (double)m.cache_hits);
    metric(&b, "evictions_total", "counter", "Idle slots evicted for another request.", (double)m.evictions);
    metric(&b, "snapshots_saved_total", "counter", "Prefix snapshots saved.", (double)m.snapshots_saved);
    metric(&b, "snapshots_restored_total", "counter", "Prefix snapshots restored.", (double)m.snapshots_restored);
    metric(&b, "ticks_total", "counter", "Engine scheduler ticks.", (double)m.ticks);
    metric(&b, "context_shifts_total", "counter", "Full slots shifted (--context-shift).", (double)m.context_shifts);
    metric(&b, "queue_depth", "gauge", "Requests waiting for a slot.", m.queue_depth);
    metric(&b, "active_slots", "gauge", "Slots serving a request.", m.active_slots);
    metric(&b, "idle_slots", "gauge", "Slots holding a reusable cache.", m.idle_slots);
    metric(&b, "snapshot_bytes", "gauge", "Host memory used by prefix snapshots.", (double)m.snapshot_bytes_used);
    metric(&b, "http_requests_total", "counter", "HTTP requests answered.", (double)atomic_load(&s->http_requests));
    metric(&b, "http_errors_total", "counter", "HTTP requests answered with a 4xx or 5xx status.",
           (double)atomic_load(&s->http_errors));
    if (b.oom) { /* a partial page would read as metrics gone to zero: answer 500 instead */
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return wgllm_strbuf_take(&b);
}
