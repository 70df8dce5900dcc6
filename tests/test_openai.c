/*
 * test_openai.c - the OpenAI layer of the core (src/api/, shared by `wgllm
 * serve` and the browser): the defaults every request gets, the field
 * mapping (repeat_penalty / repetition_penalty as one field), refusals with
 * their status, param and code (unknown fields, types, ranges, the JSON
 * budgets, NULs), error objects byte for byte, and answers built from a real
 * greedy generation on a synthetic model: the whole response, the stream's
 * chunks whose text adds up to it, logprobs in both shapes, usage.
 */
#include "api/api_internal.h"
#include "grammar/grammar.h"
#include "test.h"

#include "base/json.h"
#include "model/synth.h"
#include "wgllm.h"

static const char *CHATML =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static struct wgllm_model *g_model;
static struct wgllm_engine *g_eng;
static struct wgllm_openai_params g_p;

static bool parse(enum wgllm_openai_endpoint ep, const char *body, struct wgllm_openai_request *rq,
                  struct wgllm_openai_error *e) {
    return wgllm_openai_parse(&g_p, ep, body, strlen(body), rq, e);
}

/* A refusal of body with this status, param ("" = null) and code (NULL = null). */
static void refused(enum wgllm_openai_endpoint ep, const char *body, int status, const char *param, const char *code) {
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    const bool ok = parse(ep, body, &rq, &e);
    wgllm_openai_request_free(&rq);
    if (ok) {
        fprintf(stderr, "  accepted: %s\n", body);
        CHECK(!ok);
        return;
    }
    if (e.status != status || strcmp(e.param, param) || (code ? !e.code || strcmp(e.code, code) : e.code != NULL))
        fprintf(stderr, "  %s -> %d '%s' %s: %s\n", body, e.status, e.param, e.code ? e.code : "null", e.message);
    CHECK_EQ_INT(e.status, status);
    CHECK_STR(e.param, param);
    CHECK(code ? e.code && !strcmp(e.code, code) : e.code == NULL);
    CHECK(e.message[0] != 0);
}

TEST(defaults_are_llama_cpp_servers) {
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &rq, &e));
    const struct wgllm_sampler_params *sp = &rq.rp.sampling;
    CHECK_NEAR(sp->temperature, 0.8, 1e-6);
    CHECK_EQ_INT(sp->top_k, 40);
    CHECK_NEAR(sp->top_p, 0.95, 1e-6);
    CHECK_NEAR(sp->min_p, 0.05, 1e-6);
    CHECK_NEAR(sp->repeat_penalty, 1, 0);
    CHECK_EQ_INT(sp->penalty_last_n, 64);
    CHECK_EQ_INT(rq.rp.max_tokens, 0);
    CHECK(!rq.stream && !rq.logprobs && rq.rp.context_key == NULL);
    wgllm_openai_request_free(&rq);
    /* both spellings of the repetition penalty set the same field */
    CHECK(parse(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"x\",\"repetition_penalty\":1.3,\"seed\":7,\"top_k\":5}", &rq,
                &e));
    CHECK_NEAR(rq.rp.sampling.repeat_penalty, 1.3, 1e-6);
    CHECK_EQ_INT(rq.rp.sampling.seed, 7);
    CHECK_EQ_INT(rq.rp.sampling.top_k, 5);
    wgllm_openai_request_free(&rq);
    CHECK(parse(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"a\\u0000b\",\"repeat_penalty\":1.2,\"context_key\":\"k\"}",
                &rq, &e));
    CHECK_NEAR(rq.rp.sampling.repeat_penalty, 1.2, 1e-6);
    CHECK(rq.prompt_len == 3 && !memcmp(rq.prompt, "a\0b", 3)); /* a prompt goes with its length */
    CHECK_STR(rq.rp.context_key, "k");
    wgllm_openai_request_free(&rq);
}

TEST(refusals_name_the_field) {
    const enum wgllm_openai_endpoint C = WGLLM_OPENAI_CHAT, P = WGLLM_OPENAI_COMPLETIONS, E = WGLLM_OPENAI_EMBEDDINGS;
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frobnicate\":1}", 400, "frobnicate", NULL);
    refused(C, "{\"messages\":[]}", 400, "messages", NULL);
    refused(C, "{}", 400, "messages", NULL);
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", NULL);
    refused(C, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role", NULL);
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}", 400, "messages[0].content", NULL);
    refused(P, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature", NULL);
    refused(P, "{\"prompt\":\"x\",\"temperature\":-1}", 400, "temperature", NULL);
    refused(P, "{\"prompt\":\"x\",\"temperature\":1e999}", 400, "temperature", NULL);
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens", NULL);
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "max_tokens", NULL);
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":5000}", 400, "max_tokens", NULL); /* over params.max_tokens */
    refused(P, "{\"prompt\":\"x\",\"repetition_penalty\":0}", 400, "repetition_penalty", NULL);
    refused(P, "{\"prompt\":\"x\",\"repetition_penalty\":1,\"repeat_penalty\":1}", 400, "repetition_penalty", NULL);
    refused(P, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs", NULL);
    refused(P, "{\"prompt\":\"x\",\"stop\":[\"a\",1]}", 400, "stop", NULL);
    refused(P, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", 400, "logit_bias", NULL);
    refused(P, "{\"prompt\":\"x\",\"logit_bias\":{\" 1\":1}}", 400, "logit_bias", NULL);
    refused(P, "{\"prompt\":\"x\",\"logit_bias\":{\"1\\u0000\":1}}", 400, "logit_bias", NULL);
    refused(P, "{\"prompt\":\"x\",\"n\":2}", 400, "n", NULL);
    refused(P, "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model", "model_not_found");
    refused(P, "[1]", 400, "body", NULL);
    refused(P, "{\"prompt\":\"x\",}", 400, "", "invalid_json");
    refused(P, "{\"prompt\":\"\\ud800\"}", 400, "", "invalid_json");
    refused(P, "{\"prompt\":\"\xff\"}", 400, "", "invalid_utf8");
    refused(P, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", 400, "", "json_too_deep");
    refused(E, "{\"input\":\"x\",\"encoding_format\":\"hex\"}", 400, "encoding_format", NULL);
    refused(E, "{\"input\":[1]}", 400, "input", NULL);
    refused(E, "{\"input\":\"x\",\"dimensions\":3}", 400, "dimensions", NULL);
    /* the model's own names are accepted */
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(P, "{\"prompt\":\"x\",\"model\":\"tiny\"}", &rq, &e));
    wgllm_openai_request_free(&rq);
    CHECK(parse(P, "{\"prompt\":\"x\",\"model\":\"/m/tiny.gguf\"}", &rq, &e));
    wgllm_openai_request_free(&rq);
}

TEST(error_json_bytes) {
    struct wgllm_openai_error e;
    wgllm_openai_error_set(&e, 400, "invalid_request_error", "temperature", NULL, "'%s' \"bad\"\n", "temperature");
    char *j = wgllm_openai_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"'temperature' \\\"bad\\\"\\n\",\"type\":\"invalid_request_error\","
                 "\"param\":\"temperature\",\"code\":null}}");
    free(j);
    wgllm_openai_error_set(&e, 503, "server_error", NULL, "queue_full", "full");
    j = wgllm_openai_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"full\",\"type\":\"server_error\",\"param\":null,\"code\":\"queue_full\"}}");
    free(j);
}

/* Collects the streamed pieces as chunks, as a server or the browser does. */
struct collect {
    struct wgllm_openai_request *rq;
    struct wgllm_strbuf text; /* the pieces, concatenated */
    int n_chunks;
    bool bad_chunk;
};

static bool on_piece(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct collect *c = ud;
    char *chunk = NULL;
    if (!wgllm_openai_chunk_token(&g_p, c->rq, "id-1", text, len, token, logprob, &chunk)) c->bad_chunk = true;
    if (chunk) {
        struct wgllm_json_doc d;
        struct wgllm_json_error je;
        if (!wgllm_json_parse(chunk, strlen(chunk), NULL, &d, &je)) c->bad_chunk = true;
        const struct wgllm_json *ch = wgllm_json_first(wgllm_json_get(wgllm_json_root(&d), "choices"));
        const struct wgllm_json *t = c->rq->endpoint == WGLLM_OPENAI_CHAT
                                         ? wgllm_json_get(wgllm_json_get(ch, "delta"), "content")
                                         : wgllm_json_get(ch, "text");
        if (t && t->type == WGLLM_JSON_STRING) wgllm_strbuf_put(&c->text, t->str, t->len);
        else c->bad_chunk = true;
        wgllm_json_doc_free(&d);
        c->n_chunks++;
        free(chunk);
    }
    return true;
}

/* Runs body through the engine (streaming into chunks) and checks the answers. */
static void run(enum wgllm_openai_endpoint ep, const char *body) {
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(ep, body, &rq, &e));
    struct collect c = {.rq = &rq};
    rq.rp.on_token = on_piece;
    rq.rp.user_data = &c;
    struct wgllm_request *req = NULL;
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_openai_submit(g_eng, &rq, &req, &err);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    if (st != WGLLM_STATUS_OK) {
        fprintf(stderr, "  submit: %s\n", err.message);
        wgllm_openai_request_free(&rq);
        return;
    }
    struct wgllm_result r;
    wgllm_request_wait(req, &r);
    CHECK(r.finish == WGLLM_FINISH_LENGTH);
    CHECK(!c.bad_chunk && c.n_chunks > 0);
    char *resp = wgllm_openai_response(&g_p, &rq, "id-1", &r);
    struct wgllm_json_doc d;
    struct wgllm_json_error je;
    CHECK(resp && wgllm_json_parse(resp, strlen(resp), NULL, &d, &je));
    const struct wgllm_json *o = wgllm_json_root(&d);
    CHECK_STR(wgllm_json_get(o, "object")->str, ep == WGLLM_OPENAI_CHAT ? "chat.completion" : "text_completion");
    CHECK_STR(wgllm_json_get(o, "model")->str, "tiny.gguf");
    const struct wgllm_json *ch = wgllm_json_first(wgllm_json_get(o, "choices"));
    const struct wgllm_json *t = ep == WGLLM_OPENAI_CHAT ? wgllm_json_get(wgllm_json_get(ch, "message"), "content")
                                                        : wgllm_json_get(ch, "text");
    /* the stream's pieces add up to the whole answer's text */
    CHECK(t && t->len == c.text.len && !memcmp(t->str, c.text.data ? c.text.data : "", t->len));
    CHECK_STR(wgllm_json_get(ch, "finish_reason")->str, "length");
    const struct wgllm_json *u = wgllm_json_get(o, "usage");
    CHECK_EQ_INT(wgllm_json_get(u, "completion_tokens")->num, r.usage.completion_tokens);
    CHECK_EQ_INT(wgllm_json_get(u, "total_tokens")->num, r.usage.prompt_tokens + r.usage.completion_tokens);
    const struct wgllm_json *lp = wgllm_json_get(ch, "logprobs");
    if (rq.logprobs) {
        const struct wgllm_json *list = ep == WGLLM_OPENAI_CHAT ? wgllm_json_get(lp, "content")
                                                                : wgllm_json_get(lp, "tokens");
        CHECK(list && (int)list->count == r.n_tokens);
        if (ep == WGLLM_OPENAI_CHAT) {
            const struct wgllm_json *alts = wgllm_json_get(wgllm_json_first(list), "top_logprobs");
            CHECK(alts && (int)alts->count == rq.top_logprobs);
        } else {
            CHECK((int)wgllm_json_get(lp, "text_offset")->count == r.n_tokens);
        }
    } else {
        CHECK(lp && lp->type == WGLLM_JSON_NULL);
    }
    wgllm_json_doc_free(&d);
    free(resp);
    /* the stream's end: [logprobs], finish, [usage] */
    char *end[WGLLM_OPENAI_END_CHUNKS];
    const int n = wgllm_openai_chunks_end(&g_p, &rq, "id-1", &r, end);
    CHECK_EQ_INT(n, 1 + (rq.logprobs && rq.top_logprobs > 0) + rq.include_usage);
    for (int i = 0; i < n; i++) {
        CHECK(strstr(end[i], "\"object\":\"") != NULL);
        free(end[i]);
    }
    char *first = wgllm_openai_chunk_first(&g_p, &rq, "id-1");
    CHECK(ep == WGLLM_OPENAI_CHAT ? first && strstr(first, "\"role\":\"assistant\"") : !first);
    free(first);
    wgllm_result_free(&r);
    wgllm_strbuf_free(&c.text);
    wgllm_openai_request_free(&rq);
}

TEST(answers_of_a_generation) {
    run(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,"
                                  "\"ignore_eos\":true}");
    run(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,"
                                  "\"ignore_eos\":true,\"logprobs\":3,\"stream_options\":{\"include_usage\":true}}");
    run(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,"
                           "\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":2}");
    run(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,"
                           "\"ignore_eos\":true,\"seed\":3,\"logprobs\":true}");
}

/* return_progress: parsed, refused when not a boolean, and its chunk in llama.cpp's shape */
TEST(prompt_progress_chunks) {
    refused(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"return_progress\":1}", 400,
            "return_progress", NULL);
    for (int ep = 0; ep < 2; ep++) {
        const enum wgllm_openai_endpoint e = ep ? WGLLM_OPENAI_CHAT : WGLLM_OPENAI_COMPLETIONS;
        const char *body = ep ? "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true,"
                                "\"return_progress\":true,\"stream_options\":{\"include_usage\":true}}"
                              : "{\"prompt\":\"Hi\",\"stream\":true,\"return_progress\":true}";
        struct wgllm_openai_request rq;
        struct wgllm_openai_error oe;
        CHECK(parse(e, body, &rq, &oe));
        CHECK(rq.return_progress);
        const struct wgllm_prompt_progress pp = {.total = 40, .cached = 8, .processed = 24, .time_ms = 12.5};
        char *c = wgllm_openai_chunk_progress(&g_p, &rq, "id-1", &pp);
        struct wgllm_json_doc d;
        struct wgllm_json_error je;
        const bool parsed = c && wgllm_json_parse(c, strlen(c), NULL, &d, &je);
        CHECK(parsed);
        if (parsed) {
            const struct wgllm_json *o = wgllm_json_root(&d), *p = wgllm_json_get(o, "prompt_progress");
            CHECK_STR(wgllm_json_get(o, "object")->str, ep ? "chat.completion.chunk" : "text_completion");
            CHECK(p && wgllm_json_get(p, "total")->num == 40 && wgllm_json_get(p, "cache")->num == 8 &&
                  wgllm_json_get(p, "processed")->num == 24 && wgllm_json_get(p, "time_ms")->num == 12.5);
            const struct wgllm_json *ch = wgllm_json_first(wgllm_json_get(o, "choices"));
            if (ep) {
                CHECK_STR(wgllm_json_get(wgllm_json_get(ch, "delta"), "role")->str, "assistant");
                CHECK(wgllm_json_is_null(wgllm_json_get(wgllm_json_get(ch, "delta"), "content")));
                CHECK(wgllm_json_get(o, "usage") && wgllm_json_is_null(wgllm_json_get(o, "usage")));
            } else {
                CHECK_STR(wgllm_json_get(ch, "text")->str, "");
            }
            CHECK(wgllm_json_is_null(wgllm_json_get(ch, "finish_reason")));
            wgllm_json_doc_free(&d);
        }
        free(c);
        wgllm_openai_request_free(&rq);
    }
}

/* Generates body's answer (greedy) and returns its text (malloc'd), or NULL with err. */
static char *answer(enum wgllm_openai_endpoint ep, const char *body, struct wgllm_result *r,
                    struct wgllm_openai_error *oe) {
    struct wgllm_openai_request rq;
    if (!parse(ep, body, &rq, oe)) {
        wgllm_openai_request_free(&rq);
        return NULL;
    }
    struct wgllm_request *req = NULL;
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_openai_submit(g_eng, &rq, &req, &err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_openai_error_from_engine(oe, &rq, st, err.message);
        wgllm_openai_request_free(&rq);
        return NULL;
    }
    wgllm_request_wait(req, r);
    wgllm_openai_request_free(&rq);
    return strdup(r->text);
}

TEST(structured_output) {
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(WGLLM_OPENAI_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}", &rq, &e));
    CHECK(rq.rp.grammar && rq.rp.grammar_len == strlen(rq.rp.grammar) && strstr(rq.rp.grammar, "root ::=") != NULL);
    wgllm_openai_request_free(&rq);
    CHECK(parse(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"text\"}}",
                &rq, &e));
    CHECK(rq.rp.grammar == NULL);
    wgllm_openai_request_free(&rq);
    const char *M = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char b[600];
    snprintf(b, sizeof b, "%s\"response_format\":{\"type\":\"xml\"}}", M);
    refused(WGLLM_OPENAI_CHAT, b, 400, "response_format", NULL);
    snprintf(b, sizeof b, "%s\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\"}}}", M);
    refused(WGLLM_OPENAI_CHAT, b, 400, "response_format", NULL);
    snprintf(b, sizeof b, "%s\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"not\":{}}}}}", M);
    refused(WGLLM_OPENAI_CHAT, b, 400, "response_format", "invalid_schema");
    snprintf(b, sizeof b, "%s\"json_schema\":{\"type\":\"string\",\"format\":\"ipv4\"}}", M);
    refused(WGLLM_OPENAI_CHAT, b, 400, "json_schema", "invalid_schema");
    snprintf(b, sizeof b, "%s\"grammar\":\"root ::= x\",\"json_schema\":{}}", M);
    refused(WGLLM_OPENAI_CHAT, b, 400, "grammar", NULL);
    refused(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"x\",\"grammar\":7}", 400, "grammar", NULL);
    /* completions take no response_format (OpenAI's), but grammar and json_schema */
    refused(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", 400,
            "response_format", NULL);

    /* generated: the text is what the constraint allows; max_tokens leaves room for the longest
     * whitespace the grammar's space rule admits, so the answer always ends on its own */
    struct wgllm_result r;
    char *t = answer(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"Is it?\",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\","
                                               "\"temperature\":0,\"max_tokens\":8}", &r, &e);
    CHECK(t && (!strcmp(t, "yes") || !strcmp(t, "no")));
    CHECK(t && r.finish == WGLLM_FINISH_STOP);
    if (t) wgllm_result_free(&r);
    free(t);
    snprintf(b, sizeof b, "%s\"temperature\":0,\"max_tokens\":200,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"digit\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,"
             "\"maximum\":9}},\"required\":[\"a\"]}}}}", M);
    t = answer(WGLLM_OPENAI_CHAT, b, &r, &e);
    CHECK(t != NULL);
    if (t) {
        struct wgllm_json_doc d;
        struct wgllm_json_error je;
        const bool ok = wgllm_json_parse(t, strlen(t), NULL, &d, &je);
        if (!ok) fprintf(stderr, "  not JSON: %s\n", t);
        CHECK(ok);
        const struct wgllm_json *a = ok ? wgllm_json_get(wgllm_json_root(&d), "a") : NULL;
        CHECK(a && a->type == WGLLM_JSON_NUMBER && a->integral && a->num >= 0 && a->num <= 9);
        CHECK(ok && wgllm_json_root(&d)->count == 1);
        if (ok) wgllm_json_doc_free(&d);
        CHECK_EQ_INT(r.finish, WGLLM_FINISH_STOP);
        wgllm_result_free(&r);
        free(t);
    }
    /* json_object: a random model's object may run to max_tokens, but every prefix is one the grammar allows */
    snprintf(b, sizeof b, "%s\"temperature\":0,\"max_tokens\":24,\"response_format\":{\"type\":\"json_object\"}}", M);
    t = answer(WGLLM_OPENAI_CHAT, b, &r, &e);
    CHECK(t != NULL);
    if (t) {
        char *gbnf = NULL;
        struct wgllm_grammar *g = NULL;
        struct wgllm_grammar_state *st = NULL;
        CHECK(wgllm_json_schema_to_grammar("{\"type\":\"object\"}", 17, &gbnf, NULL) == WGLLM_STATUS_OK);
        CHECK(gbnf && wgllm_grammar_parse(gbnf, strlen(gbnf), NULL, &g, NULL) == WGLLM_STATUS_OK);
        CHECK(g && wgllm_grammar_state_init(g, &st, NULL) == WGLLM_STATUS_OK);
        CHECK(st && t[0] == '{' && wgllm_grammar_state_accept_text(st, t, strlen(t), NULL) == WGLLM_STATUS_OK);
        CHECK(r.finish == WGLLM_FINISH_LENGTH || (st && wgllm_grammar_state_can_end(st)));
        wgllm_grammar_state_free(st);
        wgllm_grammar_free(g);
        free(gbnf);
        wgllm_result_free(&r);
        free(t);
    }
    /* a grammar that does not read: 400 naming where */
    t = answer(WGLLM_OPENAI_COMPLETIONS, "{\"prompt\":\"x\",\"grammar\":\"root ::= (\\\"a\\\"\"}", &r, &e);
    CHECK(t == NULL);
    CHECK_EQ_INT(e.status, 400);
    CHECK_STR(e.param, "grammar");
    CHECK(e.code && !strcmp(e.code, "invalid_grammar"));
    CHECK(strstr(e.message, "line 1 column") != NULL);
}

TEST(embeddings) {
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(WGLLM_OPENAI_EMBEDDINGS, "{\"input\":[\"a\",\"bc\"],\"pooling\":\"mean\"}", &rq, &e));
    char *out = wgllm_openai_embeddings(&g_p, &rq, &e);
    CHECK(out != NULL);
    struct wgllm_json_doc d;
    struct wgllm_json_error je;
    CHECK(out && wgllm_json_parse(out, strlen(out), NULL, &d, &je));
    const struct wgllm_json *data = wgllm_json_get(wgllm_json_root(&d), "data");
    CHECK(data && data->count == 2);
    CHECK_EQ_INT(wgllm_json_get(wgllm_json_at(data, 1), "embedding")->count, wgllm_model_n_embd(g_model));
    wgllm_json_doc_free(&d);
    free(out);
    wgllm_openai_request_free(&rq);
}

/* ---- reasoning -------------------------------------------------------------------------- */

static void split_case(const char *text, bool open, const char *want_content, const char *want_reasoning) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        struct wgllm_openai_think t;
        struct wgllm_strbuf c = {0}, r = {0};
        wgllm_openai_think_init(&t, open);
        const size_t n = strlen(text);
        if (bytewise)
            for (size_t i = 0; i < n; i++) wgllm_openai_think_push(&t, text + i, 1, &c, &r);
        else
            wgllm_openai_think_push(&t, text, n, &c, &r);
        wgllm_openai_think_flush(&t, &c, &r);
        if (strcmp(c.data ? c.data : "", want_content) || strcmp(r.data ? r.data : "", want_reasoning))
            fprintf(stderr, "  '%s' (%s): content '%s' reasoning '%s'\n", text, bytewise ? "bytewise" : "whole",
                    c.data ? c.data : "", r.data ? r.data : "");
        CHECK_STR(c.data ? c.data : "", want_content);
        CHECK_STR(r.data ? r.data : "", want_reasoning);
        wgllm_strbuf_free(&c), wgllm_strbuf_free(&r);
    }
}

struct deltas {
    struct wgllm_openai_request *rq;
    const struct wgllm_openai_params *p;
    struct wgllm_strbuf content, reasoning;
};

static void take_delta(struct deltas *d, char *chunk) {
    if (!chunk) return;
    struct wgllm_json_doc doc;
    struct wgllm_json_error je;
    if (wgllm_json_parse(chunk, strlen(chunk), NULL, &doc, &je)) {
        const struct wgllm_json *delta = wgllm_json_get(wgllm_json_first(wgllm_json_get(wgllm_json_root(&doc), "choices")), "delta");
        const struct wgllm_json *c = wgllm_json_get(delta, "content"), *r = wgllm_json_get(delta, "reasoning_content");
        if (wgllm_json_is(c, WGLLM_JSON_STRING)) wgllm_strbuf_put(&d->content, c->str, c->len);
        if (wgllm_json_is(r, WGLLM_JSON_STRING)) wgllm_strbuf_put(&d->reasoning, r->str, r->len);
        wgllm_json_doc_free(&doc);
    }
    free(chunk);
}

static bool on_delta(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct deltas *d = ud;
    char *chunk = NULL;
    CHECK(wgllm_openai_chunk_token(d->p, d->rq, "id", text, len, token, logprob, &chunk));
    take_delta(d, chunk);
    return true;
}

/* A chat request on engine e: the whole answer's content / reasoning_content, and the stream's. */
static void think_run(struct wgllm_engine *e, const char *body, const char *content, const char *reasoning) {
    const struct wgllm_openai_params p = {.model = g_model, .engine = e, .model_id = "tiny.gguf", .max_tokens = 4096, .n_ctx = 256};
    for (int streamed = 0; streamed < 2; streamed++) {
        struct wgllm_openai_request rq;
        struct wgllm_openai_error oe;
        CHECK(wgllm_openai_parse(&p, WGLLM_OPENAI_CHAT, body, strlen(body), &rq, &oe));
        struct deltas d = {.rq = &rq, .p = &p};
        if (streamed) rq.rp.on_token = on_delta, rq.rp.user_data = &d;
        struct wgllm_request *req = NULL;
        struct wgllm_error err = {0};
        CHECK_EQ_INT(wgllm_openai_submit(e, &rq, &req, &err), WGLLM_STATUS_OK);
        if (!req) {
            fprintf(stderr, "  submit: %s\n", err.message);
            wgllm_openai_request_free(&rq);
            return;
        }
        struct wgllm_result r;
        wgllm_request_wait(req, &r);
        if (streamed) {
            char *end[WGLLM_OPENAI_END_CHUNKS];
            const int n = wgllm_openai_chunks_end(&p, &rq, "id", &r, end);
            for (int i = 0; i < n; i++) take_delta(&d, end[i]);
            CHECK_STR(d.content.data ? d.content.data : "", content);
            CHECK_STR(d.reasoning.data ? d.reasoning.data : "", reasoning);
        } else {
            char *resp = wgllm_openai_response(&p, &rq, "id", &r);
            struct wgllm_json_doc doc;
            struct wgllm_json_error je;
            CHECK(resp && wgllm_json_parse(resp, strlen(resp), NULL, &doc, &je));
            if (resp) {
                const struct wgllm_json *m = wgllm_json_get(wgllm_json_first(wgllm_json_get(wgllm_json_root(&doc), "choices")), "message");
                const struct wgllm_json *c = wgllm_json_get(m, "content"), *rc = wgllm_json_get(m, "reasoning_content");
                CHECK(c && c->type == WGLLM_JSON_STRING);
                if (c) CHECK_STR(c->str, content);
                if (*reasoning) CHECK(rc && rc->type == WGLLM_JSON_STRING && !strcmp(rc->str, reasoning));
                else CHECK(rc == NULL);
                wgllm_json_doc_free(&doc);
            }
            free(resp);
        }
        wgllm_strbuf_free(&d.content), wgllm_strbuf_free(&d.reasoning);
        wgllm_result_free(&r);
        wgllm_openai_request_free(&rq);
    }
}

TEST(reasoning_content) {
    split_case("<think>abc</think>\n\nyes", false, "yes", "abc");
    split_case("\n <think>\nplan\n</think>answer <think>x</think>", false, "answer <think>x</think>", "\nplan\n");
    split_case("hello <think>x</think>", false, "hello <think>x</think>", "");
    split_case("abc</think>yes", true, "yes", "abc");
    split_case("<thinking>", false, "<thinking>", "");
    split_case("<th", false, "<th", "");
    split_case("<think>cut sho", false, "", "cut sho");
    split_case("a</thi", true, "", "a</thi");
    split_case("", true, "", "");
    /* engines on a reasoning template (Qwen3-like: the model writes the block) and one that opens it (DeepSeek-R1-like) */
    const char *qwen = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                       "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
                       "{# answers may begin with <think> #}";
    const char *r1 = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                     "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}";
    struct wgllm_engine *eq = NULL, *er = NULL;
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 1, ep.n_ctx = 256, ep.n_threads = 1;
    ep.chat_template = qwen;
    CHECK_EQ_INT(wgllm_engine_init(g_model, &ep, &eq, NULL), WGLLM_STATUS_OK);
    ep.chat_template = r1;
    CHECK_EQ_INT(wgllm_engine_init(g_model, &ep, &er, NULL), WGLLM_STATUS_OK);
    if (!eq || !er) return;
    CHECK_EQ_INT(wgllm_engine_template_thinks(eq), 1);
    CHECK_EQ_INT(wgllm_engine_template_thinks(er), 2);
    CHECK_EQ_INT(wgllm_engine_template_thinks(g_eng), 0);
    /* the grammar makes the random model write the shape (the letters are its own choice, greedy: fixed) */
    think_run(eq, "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0,\"max_tokens\":40,"
                  "\"grammar\":\"root ::= \\\"<think>\\\" \\\"ab\\\" \\\"</think>\\\\n\\\\n\\\" \\\"yes\\\"\"}", "yes", "ab");
    think_run(er, "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0,\"max_tokens\":40,"
                  "\"grammar\":\"root ::= \\\"xy\\\" \\\"</think>\\\\n\\\" \\\"no\\\"\"}", "no", "xy");
    /* reasoning_format none: all of it is content */
    think_run(eq, "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0,\"max_tokens\":40,"
                  "\"reasoning_format\":\"none\",\"grammar\":\"root ::= \\\"<think>ab</think>yes\\\"\"}", "<think>ab</think>yes", "");
    /* a model without reasoning: nothing is split */
    think_run(g_eng, "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0,\"max_tokens\":40,"
                     "\"grammar\":\"root ::= \\\"<think>ab</think>yes\\\"\"}", "<think>ab</think>yes", "");
    refused(WGLLM_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"reasoning_format\":\"xml\"}", 400,
            "reasoning_format", NULL);
    wgllm_engine_free(eq);
    wgllm_engine_free(er);
}

static const char *only_up(void *user, const char *model) {
    (void)user;
    return !strcmp(model, "up") ? "up" : NULL;
}

/* A chat for an upstream: the fields its own template and parser handle go in
 * forward_json as given, GBNF stays local, and the calls it answers
 * (wgllm_result.tool_calls_json) come out whole and streamed, ids kept. */
TEST(forwarded_to_an_upstream) {
    const struct wgllm_openai_params saved = g_p;
    g_p.upstream = only_up;
    static const char BODY[] =
        "{\"model\":\"up\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c9\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":\"1\"}],\"tools\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\"}}},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},\"max_tokens\":3,\"temperature\":0}";
    struct wgllm_openai_request rq;
    struct wgllm_openai_error e;
    CHECK(parse(WGLLM_OPENAI_CHAT, BODY, &rq, &e));
    CHECK(rq.upstream && !strcmp(rq.upstream, "up"));
    CHECK(!rq.tools && !rq.grammar && !rq.messages_json); /* nothing of it runs here */
    CHECK(rq.forward_json != NULL);
    /* forward_json holds exactly these fields, each equal to what was sent */
    struct wgllm_json_doc sent = {0}, fwd = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 32, .max_nodes = 4096};
    CHECK(wgllm_json_parse(BODY, sizeof BODY - 1, &lim, &sent, &je));
    CHECK(rq.forward_json && wgllm_json_parse(rq.forward_json, strlen(rq.forward_json), &lim, &fwd, &je));
    static const char *const KEYS[] = {"messages", "tools", "tool_choice", "parallel_tool_calls", "response_format",
                                       "chat_template_kwargs"};
    const struct wgllm_json *root = wgllm_json_root(&fwd);
    CHECK_EQ_INT((int)root->count, 6);
    for (int i = 0; i < 6; i++) {
        struct wgllm_strbuf a = {0}, b = {0};
        struct wgllm_json_writer wa, wb;
        wgllm_json_w_init(&wa, &a), wgllm_json_w_init(&wb, &b);
        wgllm_json_w_value(&wa, NULL, wgllm_json_get(wgllm_json_root(&sent), KEYS[i]));
        wgllm_json_w_value(&wb, NULL, wgllm_json_get(root, KEYS[i]));
        if (!a.data || !b.data || strcmp(a.data, b.data)) fprintf(stderr, "  %s: %s != %s\n", KEYS[i], a.data, b.data);
        CHECK(a.data && b.data && !strcmp(a.data, b.data));
        wgllm_strbuf_free(&a), wgllm_strbuf_free(&b);
    }
    wgllm_json_doc_free(&sent), wgllm_json_doc_free(&fwd);

    /* the upstream's calls in the answer, whole and as the stream's end */
    struct wgllm_result r = {.finish = WGLLM_FINISH_STOP, .text = strdup(""),
                             .tool_calls_json = strdup("[{\"id\":\"call_up1\",\"type\":\"function\",\"function\":{\"name\":"
                                                       "\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]")};
    char *resp = wgllm_openai_response(&g_p, &rq, "chatcmpl-7", &r);
    CHECK(resp && strstr(resp, "\"content\":null,\"tool_calls\":[{\"id\":\"call_up1\",\"type\":\"function\","
                               "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]"));
    CHECK(resp && strstr(resp, "\"finish_reason\":\"tool_calls\""));
    free(resp);
    char *end[WGLLM_OPENAI_END_CHUNKS] = {0};
    const int n = wgllm_openai_chunks_end(&g_p, &rq, "chatcmpl-7", &r, end);
    CHECK_EQ_INT(n, 2);
    CHECK(n == 2 && strstr(end[0], "\"tool_calls\":[{\"index\":0,\"id\":\"call_up1\""));
    CHECK(n == 2 && strstr(end[1], "\"finish_reason\":\"tool_calls\""));
    for (int i = 0; i < n; i++) free(end[i]);
    /* cut by max_tokens, calls or not, the answer says so */
    r.finish = WGLLM_FINISH_LENGTH;
    resp = wgllm_openai_response(&g_p, &rq, "chatcmpl-7", &r);
    CHECK(resp && strstr(resp, "\"finish_reason\":\"length\""));
    free(resp);
    wgllm_result_free(&r);
    wgllm_openai_request_free(&rq);

    /* GBNF and the bare json_schema field are local extensions */
    refused(WGLLM_OPENAI_CHAT, "{\"model\":\"up\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":\"root ::= \\\"a\\\"\"}",
            400, "grammar", NULL);
    refused(WGLLM_OPENAI_CHAT, "{\"model\":\"up\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"json_schema\":{}}", 400,
            "json_schema", NULL);
    g_p = saved;
}

/* Anthropic's Messages API: the chat a body means, a Message from a chat
 * answer, and the events a stream's chat chunks become, in order. */
TEST(anthropic_messages) {
    static const char BODY[] =
        "{\"model\":\"tiny.gguf\",\"max_tokens\":20,\"system\":[{\"type\":\"text\",\"text\":\"be brief\"}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"ok\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"w\",\"input\":{\"c\":\"x\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"sunny\"}]},{\"type\":\"text\",\"text\":\"and?\"}]}],\"tools\":[{\"name\":\"w\","
        "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"stream\":true,\"thinking\":{\"type\":\"disabled\"}}";
    struct wgllm_openai_error e;
    char *chat = wgllm_anthropic_to_chat(BODY, sizeof BODY - 1, &e);
    CHECK(chat != NULL);
    if (!chat) return;
    static const char *const WANT[] = {
        "\"model\":\"tiny.gguf\",\"max_tokens\":20,\"stream\":true,\"temperature\":1,\"stream_options\":"
        "{\"include_usage\":true},\"chat_template_kwargs\":{\"enable_thinking\":false},\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":"
        "\"required\",\"parallel_tool_calls\":false,\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":"
        "[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"c\\\":\\\"x\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"sunny\"},{\"role\":\"user\",\"content\":\"and?\"}]}",
    };
    if (!strstr(chat, WANT[0])) fprintf(stderr, "  chat: %s\n", chat);
    CHECK(strstr(chat, WANT[0]) != NULL);
    struct wgllm_openai_request rq;
    CHECK(parse(WGLLM_OPENAI_CHAT, chat, &rq, &e)); /* the chat it means is one the layer takes */
    wgllm_openai_request_free(&rq);
    free(chat);

    static const char RESP[] =
        "{\"id\":\"chatcmpl-abc\",\"model\":\"tiny.gguf\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"hi\",\"reasoning_content\":\"hmm\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"c\\\": 2}\"}}]},\"finish_reason\":\"tool_calls\"}],"
        "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":3}}}";
    char *msg = wgllm_anthropic_response(RESP);
    CHECK_STR(msg ? msg : "",
              "{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"tiny.gguf\",\"content\":["
              "{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"hi\"},"
              "{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"w\",\"input\":{\"c\":2}}],\"stop_reason\":\"tool_use\","
              "\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":3,\"output_tokens\":4}}");
    free(msg);

    static const char *const CHUNKS[] = {
        "{\"id\":\"chatcmpl-abc\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r\"}}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]}}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        "{\"id\":\"chatcmpl-abc\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}",
    };
    struct wgllm_anthropic_stream as;
    wgllm_anthropic_stream_init(&as);
    struct wgllm_strbuf all = {0};
    for (int i = 0; i < 7; i++) {
        char *ev = wgllm_anthropic_stream_chunk(&as, CHUNKS[i]);
        CHECK(ev != NULL);
        if (ev) wgllm_strbuf_puts(&all, ev);
        free(ev);
    }
    CHECK(as.ended);
    /* the event names in order, and the blocks' indexes */
    static const char *const ORDER[] = {
        "event: message_start", "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
        "\"content_block\":{\"type\":\"thinking\"", "\"thinking_delta\",\"thinking\":\"r\"",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
        "\"index\":1,\"content_block\":{\"type\":\"text\"", "\"text_delta\",\"text\":\"Hel\"", "\"text_delta\",\"text\":\"lo\"",
        "{\"type\":\"content_block_stop\",\"index\":1}", "\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"c1\"",
        "\"input_json_delta\",\"partial_json\":\"{}\"", "{\"type\":\"content_block_stop\",\"index\":2}",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"",
        "\"output_tokens\":3", "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    };
    const char *at = all.data ? all.data : "";
    for (size_t i = 0; i < sizeof ORDER / sizeof *ORDER; i++) {
        const char *f = strstr(at, ORDER[i]);
        if (!f) fprintf(stderr, "  missing (in order) %s in:\n%s\n", ORDER[i], all.data ? all.data : "");
        CHECK(f != NULL);
        if (f) at = f + strlen(ORDER[i]);
    }
    wgllm_strbuf_free(&all);

    /* refusals name the field */
    const char *bad[][2] = {{"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
                            {"{\"max_tokens\":3,\"messages\":[]}", "messages"},
                            {"{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":2}", "temperature"},
                            {"{\"max_tokens\":3,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0]"},
                            {"{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
                             "messages[0].content[0]"},
                            {"{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"x\"}}",
                             "tool_choice"},
                            {"{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":1}",
                             "top_logprobs"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *c = wgllm_anthropic_to_chat(bad[i][0], strlen(bad[i][0]), &e);
        CHECK(c == NULL);
        free(c);
        if (strcmp(e.param, bad[i][1])) fprintf(stderr, "  %s -> '%s': %s\n", bad[i][0], e.param, e.message);
        CHECK_STR(e.param, bad[i][1]);
        CHECK_EQ_INT(e.status, 400);
    }
}

/* The Responses API: the chat a body means (items joined into turns), a
 * Response from a chat answer, and a stream's events in order, numbered. */
TEST(responses_api) {
    static const char BODY[] =
        "{\"model\":\"tiny.gguf\",\"instructions\":\"be brief\",\"max_output_tokens\":9,\"input\":[{\"role\":\"user\","
        "\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]},{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
        "\"ok\"},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"w\",\"arguments\":\"{}\"},{\"type\":"
        "\"function_call_output\",\"call_id\":\"c1\",\"output\":\"sunny\"},{\"type\":\"reasoning\",\"id\":\"rs_1\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":"
        "\"function\",\"name\":\"w\"},\"text\":{\"format\":{\"type\":\"json_object\"}},\"store\":false}";
    struct wgllm_openai_error e;
    char *chat = wgllm_responses_to_chat(BODY, sizeof BODY - 1, &e);
    CHECK(chat != NULL);
    if (!chat) return;
    static const char WANT[] =
        "{\"model\":\"tiny.gguf\",\"max_tokens\":9,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\","
        "\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"w\"}},"
        "\"response_format\":{\"type\":\"json_object\"},\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
        "\"c1\",\"content\":\"sunny\"}]}";
    CHECK_STR(chat, WANT);
    free(chat);
    static const char RESP[] =
        "{\"id\":\"chatcmpl-q\",\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
        "\"hi\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},"
        "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4}}";
    char *r = wgllm_responses_response(RESP);
    CHECK(r && strstr(r, "\"id\":\"resp_q\",\"object\":\"response\""));
    CHECK(r && strstr(r, "\"status\":\"incomplete\""));
    CHECK(r && strstr(r, "\"incomplete_details\":{\"reason\":\"max_output_tokens\"}"));
    CHECK(r && strstr(r, "\"output\":[{\"type\":\"message\",\"id\":\"msg_q_0\",\"status\":\"completed\",\"role\":"
                         "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\",\"annotations\":[]}]},"
                         "{\"type\":\"function_call\",\"id\":\"fc_q_1\",\"call_id\":\"call_1\",\"name\":\"w\",\"arguments\":"
                         "\"{}\",\"status\":\"completed\"}]"));
    CHECK(r && strstr(r, "\"total_tokens\":14"));
    free(r);
    static const char *const CHUNKS[] = {
        "{\"id\":\"chatcmpl-q\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}",
        "{\"id\":\"chatcmpl-q\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r\"}}]}",
        "{\"id\":\"chatcmpl-q\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}",
        "{\"id\":\"chatcmpl-q\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}",
        "{\"id\":\"chatcmpl-q\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
        "{\"id\":\"chatcmpl-q\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}",
    };
    struct wgllm_responses_stream *rs = wgllm_responses_stream_init();
    CHECK(rs != NULL);
    struct wgllm_strbuf all = {0};
    for (int i = 0; rs && i < 6; i++) {
        char *ev = wgllm_responses_stream_chunk(rs, CHUNKS[i]);
        CHECK(ev != NULL);
        if (ev) wgllm_strbuf_puts(&all, ev);
        free(ev);
    }
    wgllm_responses_stream_free(rs);
    static const char *const ORDER[] = {
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0",
        "\"type\":\"response.in_progress\",\"sequence_number\":1",
        "\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"type\":\"reasoning\"",
        "\"type\":\"response.reasoning_text.delta\"", "\"delta\":\"r\"", "\"type\":\"response.reasoning_text.done\"",
        "\"type\":\"response.output_item.done\"", "\"output_index\":1,\"item\":{\"type\":\"message\"",
        "\"type\":\"response.content_part.added\"", "\"delta\":\"Hel\"", "\"delta\":\"lo\"",
        "\"type\":\"response.output_text.done\"", "\"text\":\"Hello\"", "\"type\":\"response.content_part.done\"",
        "\"type\":\"response.output_item.done\"", "event: response.completed\ndata: {\"type\":\"response.completed\"",
        "\"status\":\"completed\"", "\"output_tokens\":3",
    };
    const char *at = all.data ? all.data : "";
    for (size_t i = 0; i < sizeof ORDER / sizeof *ORDER; i++) {
        const char *f = strstr(at, ORDER[i]);
        if (!f) fprintf(stderr, "  missing (in order) %s in:\n%s\n", ORDER[i], all.data ? all.data : "");
        CHECK(f != NULL);
        if (f) at = f + strlen(ORDER[i]);
    }
    wgllm_strbuf_free(&all);
    const char *bad[][2] = {{"{\"input\":\"x\",\"previous_response_id\":\"r\"}", "previous_response_id"},
                            {"{\"input\":[]}", "input"},
                            {"{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools[0]"},
                            {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0]"},
                            {"{\"input\":\"x\",\"seed\":1}", "seed"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *c = wgllm_responses_to_chat(bad[i][0], strlen(bad[i][0]), &e);
        CHECK(c == NULL);
        free(c);
        CHECK_STR(e.param, bad[i][1]);
    }
}

int main(void) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    g_model = test_synth_model(&sp);
    CHECK(g_model != NULL);
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 2, ep.n_ctx = 256, ep.chat_template = CHATML, ep.n_threads = 1;
    struct wgllm_error err = {0};
    if (!g_model || wgllm_engine_init(g_model, &ep, &g_eng, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "test_openai: no engine: %s\n", err.message);
        return 1; /* a test whose setup fails fails */
    }
    g_p = (struct wgllm_openai_params){.model = g_model, .engine = g_eng, .model_id = "tiny.gguf",
                                       .model_alias = "/m/tiny.gguf", .max_tokens = 4096, .n_ctx = 256};
    RUN(defaults_are_llama_cpp_servers);
    RUN(refusals_name_the_field);
    RUN(error_json_bytes);
    RUN(answers_of_a_generation);
    RUN(prompt_progress_chunks);
    RUN(embeddings);
    RUN(structured_output);
    RUN(reasoning_content);
    RUN(forwarded_to_an_upstream);
    RUN(anthropic_messages);
    RUN(responses_api);
    wgllm_engine_free(g_eng);
    wgllm_model_free(g_model);
    return test_summary("test_openai");
}
