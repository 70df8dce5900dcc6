/*
 * fuzz_sse.c - what a hostile upstream sends the gateway: bytes of a streamed
 * answer through the client's SSE framing (http.c), split into pieces the
 * input chooses, each event through the client's chunk parser (client.c's
 * on_event: text, finish reason, usage, errors, tool-call deltas); then the same bytes as a
 * whole (non-streamed) answer. client.c is included, not linked, because its
 * parsers are static. Bounds that must hold: the pending event never
 * outgrows its limit, usage counts stay in [0, WGLLM_USAGE_MAX] with cached
 * <= prompt, the text is what the pieces carried, and the tool calls
 * assembled are one JSON array entry per named call. Last, the bytes as an
 * upstream's embeddings answer (embed_answer): passed on renamed, or refused.
 */
#include "client/client.c"

#include <stdint.h>

#define EVENT_LIMIT 4096
#define TOTAL_LIMIT (1 << 16)

struct seen {
    size_t bytes;
    int pieces;
};

static bool on_piece(const char *text, size_t len, int32_t token, float logprob, void *user) {
    struct seen *s = user;
    if (strlen(text) != len || token != -1) abort();
    s->bytes += len;
    s->pieces++;
    return true;
}

static void check_usage(const struct wgllm_usage *u) {
    if (u->prompt_tokens < 0 || u->prompt_tokens > WGLLM_USAGE_MAX || u->completion_tokens < 0 ||
        u->completion_tokens > WGLLM_USAGE_MAX || u->cached_tokens < 0 || u->cached_tokens > u->prompt_tokens)
        abort();
}

/* The assembled calls: one JSON array entry per named call, in index order. */
static void check_calls(const struct gen_state *g) {
    if (g->n_calls < 0 || g->n_calls > WGLLM_CLIENT_MAX_CALLS) abort();
    int named = 0;
    for (int i = 0; i < g->n_calls; i++) named += g->calls[i].name.len > 0;
    char *json;
    if (!calls_json(g, &json)) return; /* out of memory */
    if (!json != !named) abort();
    cJSON *a = json ? cJSON_Parse(json) : NULL;
    if (json && (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != named)) abort();
    cJSON_Delete(a);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    /* byte 0: max_tokens (0..7), chat or completion; byte 1: the piece size */
    struct endpoint ep = {.d = {.name = "fuzz"}};
    struct wgllm_request_params p = wgllm_request_default_params();
    p.max_tokens = data[0] & 7;
    struct seen seen = {0};
    p.on_token = on_piece;
    p.user_data = &seen;
    const size_t piece = 1 + data[1] % 64;
    const char *text = (const char *)data + 2;
    const size_t n = size - 2;

    struct gen_state g = {.ep = &ep, .p = &p, .chat = data[0] & 8};
    struct wgllm_sse sse;
    wgllm_sse_init(&sse, on_event, &g);
    sse.event_limit = EVENT_LIMIT;
    sse.total_limit = TOTAL_LIMIT;
    for (size_t off = 0; off < n; off += piece) {
        if (!wgllm_sse_feed(&sse, text + off, off + piece < n ? piece : n - off)) break;
        if (sse.buf.len > EVENT_LIMIT + 2) abort();
    }
    check_usage(&g.usage);
    if (g.text.len != seen.bytes || (g.text.data && strlen(g.text.data) != g.text.len)) abort();
    if (p.max_tokens > 0 && seen.pieces > 2 * p.max_tokens + 16) abort();
    wgllm_sse_free(&sse);
    check_calls(&g);
    gen_state_free(&g);

    /* the same bytes as a whole answer */
    struct gen_state w = {.ep = &ep, .p = &p, .chat = data[0] & 8};
    cJSON *o = cJSON_ParseWithLength(text, n);
    if (o) {
        read_usage(&w, cJSON_GetObjectItemCaseSensitive(o, "usage"));
        read_choice(&w, o, false);
        read_error(&w, o);
        cJSON_Delete(o);
    }
    check_usage(&w.usage);
    check_calls(&w);
    gen_state_free(&w);

    /* the same bytes as an upstream's embeddings answer: passed on with the
     * gateway's model name, or refused with a message */
    char *body = malloc(n + 1);
    if (!body) return 0;
    memcpy(body, text, n);
    body[n] = 0;
    struct wgllm_http_reply r = {.status = 200, .body = body, .body_len = n};
    char *answer = NULL;
    struct wgllm_error err = {0};
    if (embed_answer(&ep, &r, &answer, &err) == WGLLM_STATUS_OK) {
        cJSON *a = answer ? cJSON_Parse(answer) : NULL;
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(a, "model");
        if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(a, "data")) || !cJSON_IsString(model) ||
            strcmp(model->valuestring, "fuzz"))
            abort();
        cJSON_Delete(a);
    } else if (!err.message[0]) {
        abort();
    }
    free(answer);
    free(body);
    return 0;
}
