/*
 * fuzz_openai.c - the OpenAI layer (src/api/, shared by `wgllm serve` and
 * the browser) on arbitrary bodies: the JSON budgets, then the field mapping
 * and validation for chat, completions and embeddings, served here and
 * forwarded (an upstream named "up"), and the answers built from what was
 * accepted (response, every kind of chunk, with token logprobs), and a
 * chat message's text as the answer of every tool-call family (whole and
 * streamed in small pieces); /tokenize, /detokenize, Anthropic's
 * /v1/messages and /v1/responses (through the chat each becomes) on the same bodies. A synthetic
 * tiny model (made once, in /tmp) gives the vocabulary and the token texts;
 * nothing is generated. An accepted request must respect every bound; a
 * violation aborts (a finding, like a crash).
 */
#include "wgllm.h"
#include "wgllm_tools.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_CTX 512
#define MAX_TOKENS 4096

static void require(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_openai: accepted a request that breaks: %s\n", what);
        abort();
    }
}

static const char *upstream(void *user, const char *model) {
    (void)user;
    return !strcmp(model, "up") ? "up" : NULL;
}

static void check_accepted(const struct wgllm_openai_params *p, struct wgllm_openai_request *g) {
    const struct wgllm_request_params *rp = &g->rp;
    const bool local = !g->upstream;
    const int n_vocab = wgllm_model_n_vocab(p->model);
    if (g->endpoint == WGLLM_OPENAI_EMBEDDINGS) {
        require(local && g->n_inputs >= 1 && g->n_inputs <= 256 && g->inputs && g->input_lens, "embedding inputs");
        return;
    }
    require(rp->max_tokens >= 0 && rp->max_tokens <= p->max_tokens, "max_tokens within --max-tokens");
    require(rp->n_stop >= 0 && rp->n_stop <= 16 && (rp->n_stop == 0 || rp->stop), "stop count");
    for (int i = 0; i < rp->n_stop; i++) require(strlen(rp->stop[i]) <= 1024, "stop length");
    require(rp->sampling.penalty_last_n >= -1 && rp->sampling.penalty_last_n <= p->n_ctx, "repeat_last_n");
    require(rp->sampling.repeat_penalty > 0, "repeat_penalty > 0");
    require(rp->sampling.temperature >= 0 && rp->sampling.temperature <= 100, "temperature");
    require(g->top_logprobs >= 0 && g->top_logprobs <= 20, "top_logprobs");
    require(!g->upstream || !g->logprobs, "no logprobs forwarded");
    require(rp->sampling.n_logit_bias >= 0 && (!local || rp->sampling.n_logit_bias <= n_vocab), "logit_bias count");
    for (int i = 0; local && i < rp->sampling.n_logit_bias; i++)
        require(rp->sampling.logit_bias[i].token >= 0 && rp->sampling.logit_bias[i].token < n_vocab,
                "logit_bias token id");
    const bool chat = g->endpoint == WGLLM_OPENAI_CHAT;
    require(chat ? g->n_msgs > 0 && g->msgs : g->prompt != NULL, "messages / prompt");
    for (int i = 0; chat && i < g->n_msgs; i++) require(g->msgs[i].role && g->msgs[i].content, "message strings");
    /* the answers it gets, with token ids of the vocabulary and alternatives for logprobs */
    const char *text = chat ? g->msgs[0].content : g->prompt;
    const size_t len = strlen(text);
    int32_t toks[3] = {0, 1 % n_vocab, (n_vocab - 1)};
    float lps[3] = {-0.5f, -1.25f, -INFINITY};
    struct wgllm_token_logprob top[3 * 4];
    for (int i = 0; i < 12; i++) top[i] = (struct wgllm_token_logprob){.token = i % n_vocab, .logprob = -(float)i};
    struct wgllm_result r = {0};
    r.text = (char *)text;
    r.text_len = len;
    r.tokens = toks;
    r.logprobs = lps;
    r.n_tokens = 3;
    r.top_logprobs = g->top_logprobs > 0 ? top : NULL;
    r.n_top = g->top_logprobs > 0 ? 4 : 0;
    r.usage.prompt_tokens = 3;
    r.usage.completion_tokens = 3;
    r.finish = WGLLM_FINISH_LENGTH;
    char id[48];
    wgllm_openai_new_id(g, id, sizeof(id));
    char *out = wgllm_openai_response(p, g, id, &r);
    require(out != NULL && !strchr(out, '\n'), "a response on one line");
    free(out);
    free(wgllm_openai_chunk_first(p, g, id));
    char *piece = NULL;
    require(wgllm_openai_chunk_token(p, g, id, text, len, toks[1], lps[1], &piece), "a chunk (not out of memory)");
    free(piece);
    char *end[WGLLM_OPENAI_END_CHUNKS];
    const int n = wgllm_openai_chunks_end(p, g, id, &r, end);
    require(n >= 1 && n <= WGLLM_OPENAI_END_CHUNKS, "a stream ends in 1 to 4 chunks");
    for (int i = 0; i < n; i++) free(end[i]);
    if (chat && !g->upstream) {
        /* the text as every family's answer: split into content and tool calls, whole and streamed
         * in pieces of 1 to 5 bytes */
        const bool had = g->tools;
        const int fmt = g->tool_format;
        g->tools = true;
        for (int f = WGLLM_TOOLS_GENERIC; f <= WGLLM_TOOLS_COMMAND_R; f++) {
            g->tool_format = f;
            char *whole = wgllm_openai_response(p, g, id, &r);
            require(whole != NULL && !strchr(whole, '\n'), "a tool-call answer on one line");
            free(whole);
            for (size_t i = 0, k = 1; i < len; i += k, k = k % 5 + 1) {
                char *c = NULL;
                require(wgllm_openai_chunk_token(p, g, id, text + i, len - i < k ? len - i : k, -1, 0, &c), "a chunk");
                require(!c || !strchr(c, '\n'), "a chunk on one line");
                free(c);
            }
            const int m = wgllm_openai_chunks_end(p, g, id, &r, end);
            require(m >= 1 && m <= WGLLM_OPENAI_END_CHUNKS, "a tool stream ends in 1 to 4 chunks");
            for (int i = 0; i < m; i++) free(end[i]);
            require(g->split.n_held == 0, "the end sends what the split held");
        }
        g->tools = had;
        g->tool_format = fmt;
    }
    r.finish = WGLLM_FINISH_ERROR;
    r.status = WGLLM_STATUS_CONTEXT_FULL;
    require(wgllm_openai_chunks_end(p, g, id, &r, end) == 1, "a failed stream ends in its error");
    free(end[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct wgllm_openai_params p;
    if (!p.model) {
        char path[64];
        snprintf(path, sizeof(path), "/tmp/wgllm-fuzz-openai-%d.gguf", (int)getpid());
        struct wgllm_tools_synth_params sp = wgllm_tools_synth_default_params();
        struct wgllm_error err;
        struct wgllm_model_params mp = wgllm_model_default_params();
        struct wgllm_model *m = NULL;
        if (wgllm_tools_synth_write(&sp, path, &err) != WGLLM_STATUS_OK ||
            wgllm_model_load(path, &mp, &m, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "fuzz_openai: no model: %s\n", err.message);
            abort();
        }
        unlink(path); /* mapped: the file is no longer needed */
        p = (struct wgllm_openai_params){.model = m, .model_id = "tiny.gguf", .model_alias = "/models/tiny.gguf",
                                         .max_tokens = MAX_TOKENS, .n_ctx = N_CTX, .upstream = upstream};
    }
    for (int k = 0; k < 3; k++) {
        struct wgllm_openai_request g;
        struct wgllm_openai_error e;
        if (wgllm_openai_parse(&p, (enum wgllm_openai_endpoint)k, (const char *)data, size, &g, &e)) {
            check_accepted(&p, &g);
        } else {
            require(e.status >= 400 && e.status < 500 && e.message[0], "a refusal is a 4xx with a message");
            char *j = wgllm_openai_error_json(&e);
            require(j != NULL, "an error object");
            free(j);
        }
        wgllm_openai_request_free(&g);
    }
    /* Anthropic's Messages and OpenAI's Responses bodies: what they become must be a chat body the
     * layer reads or refuses */
    for (int k = 0; k < 2; k++) {
        struct wgllm_openai_error e;
        char *chat = k ? wgllm_responses_to_chat((const char *)data, size, &e)
                       : wgllm_anthropic_to_chat((const char *)data, size, &e);
        if (chat) {
            struct wgllm_openai_request g;
            if (wgllm_openai_parse(&p, WGLLM_OPENAI_CHAT, chat, strlen(chat), &g, &e)) check_accepted(&p, &g);
            else require(e.status >= 400 && e.status < 500 && e.message[0], "a refusal of the chat it means is a 4xx");
            wgllm_openai_request_free(&g);
            free(chat);
        } else {
            require(e.status >= 400 && e.message[0], "a Messages refusal has a status and a message");
            char *j = wgllm_anthropic_error_json(&e);
            require(j != NULL, "an Anthropic error object");
            free(j);
        }
    }
    /* llama.cpp's token routes on the same bodies */
    for (int k = 0; k < 2; k++) {
        struct wgllm_openai_error e;
        char *out = k ? wgllm_openai_detokenize(&p, (const char *)data, size, &e)
                      : wgllm_openai_tokenize(&p, (const char *)data, size, &e);
        if (out) {
            require(out[0] == '{' && out[strlen(out) - 1] == '}', "a token answer is one JSON object");
            free(out);
        } else {
            require(e.status >= 400 && e.status < 600 && e.message[0], "a token route refusal has a status and a message");
        }
    }
    return 0;
}
