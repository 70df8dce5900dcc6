/*
 * fuzz_openai.c - the request side of `wgllm serve` on arbitrary bodies: the
 * checks before parsing (UTF-8, JSON depth and value count), cJSON, then the
 * OpenAI field mapping and validation for chat and completions, local and
 * forwarded, and the answers built from what was accepted. No model is
 * loaded: struct srv carries the bounds a model would give (context,
 * vocabulary), so parsing is separate from the engine. An accepted request
 * must respect every bound; a violation aborts (a finding, like a crash).
 */
#include "server/server.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX 512
#define N_VOCAB 1000
#define MAX_TOKENS 4096

static void require(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_openai: accepted a request that breaks: %s\n", what);
        abort();
    }
}

static void check_accepted(struct srv *s, struct srv_gen *g, bool local) {
    const struct wgllm_request_params *rp = &g->rp;
    require(rp->max_tokens >= 0 && rp->max_tokens <= s->max_tokens, "max_tokens within --max-tokens");
    require(rp->n_stop >= 0 && rp->n_stop <= 16 && (rp->n_stop == 0 || rp->stop), "stop count");
    for (int i = 0; i < rp->n_stop; i++) require(strlen(rp->stop[i]) <= 1024, "stop length");
    require(rp->sampling.penalty_last_n >= -1 && rp->sampling.penalty_last_n <= s->n_ctx, "repeat_last_n");
    require(rp->sampling.repeat_penalty > 0, "repeat_penalty > 0");
    require(rp->sampling.temperature >= 0 && rp->sampling.temperature <= 100, "temperature");
    require(g->top_logprobs >= 0 && g->top_logprobs <= 20, "top_logprobs");
    require(rp->sampling.n_logit_bias >= 0 && (!local || rp->sampling.n_logit_bias <= s->n_vocab), "logit_bias count");
    for (int i = 0; local && i < rp->sampling.n_logit_bias; i++)
        require(rp->sampling.logit_bias[i].token >= 0 && rp->sampling.logit_bias[i].token < s->n_vocab,
                "logit_bias token id");
    require(g->chat ? g->n_msgs > 0 && g->msgs : g->prompt != NULL, "messages / prompt");
    /* the answers a request gets (no token ids: those need a model) */
    const char *text = g->chat ? g->msgs[0].content : g->prompt;
    free(srv_gen_chunk(s, g, "cmpl-fuzz", NULL, 0, -1, 0, true, NULL));
    free(srv_gen_chunk(s, g, "cmpl-fuzz", text, strlen(text), -1, 0, false, NULL));
    free(srv_gen_chunk(s, g, "cmpl-fuzz", NULL, 0, -1, 0, false, "length"));
    struct wgllm_result r = {0};
    r.text = (char *)text;
    r.text_len = strlen(text);
    r.usage.prompt_tokens = 3;
    r.usage.completion_tokens = 2;
    free(srv_gen_response(s, g, "cmpl-fuzz", &r));
    free(srv_gen_usage_chunk(s, g, "cmpl-fuzz", &r.usage));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct srv s;
    if (!s.model_id) {
        s.model_id = "tiny.gguf";
        s.model_path = "/models/tiny.gguf";
        s.n_ctx = N_CTX;
        s.n_vocab = N_VOCAB;
        s.max_tokens = MAX_TOKENS;
    }
    char *body = malloc(size + 1);
    if (!body) return 0;
    memcpy(body, data, size);
    body[size] = 0;
    struct srv_err e;
    if (!srv_body_check(body, size, &e)) {
        require(e.status == 400, "a refused body is a 400");
        free(srv_err_json(&e));
        free(body);
        return 0;
    }
    cJSON *j = cJSON_ParseWithLengthOpts(body, size, NULL, false);
    for (int k = 0; j && k < 4; k++) {
        const bool chat = k & 1, upstream = k & 2;
        struct srv_gen g;
        const bool ok = upstream ? srv_gen_parse_upstream(&s, j, chat, "up", &g, &e) : srv_gen_parse(&s, j, chat, &g, &e);
        if (ok) {
            check_accepted(&s, &g, !upstream);
        } else {
            require(e.status >= 400 && e.status < 500 && e.message[0], "a refusal is a 4xx with a message");
            free(srv_err_json(&e));
        }
        srv_gen_free(&g);
    }
    cJSON_Delete(j);
    free(body);
    return 0;
}
