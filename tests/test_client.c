/* test_client.c - the endpoint client without a server: descriptor
 * validation, resolution, operation checks, local-only fields refused for
 * remote endpoints, and a transport failure against a closed loopback port.
 * (Forwarding to a live server is covered by tests/peer/gateway.test.mjs.) */
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "test.h"

static struct wgllm_endpoint_desc gw(const char *name) {
    struct wgllm_endpoint_desc d = {.name = name, .kind = WGLLM_ENDPOINT_GATEWAY,
                                    .base_url = "http://127.0.0.1:9/v1", .timeout_s = 5};
    return d;
}

TEST(add_validates_descriptors) {
    struct wgllm_client *c;
    struct wgllm_error err;
    CHECK(wgllm_client_init(&c, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc d = gw("a");
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "already exists") != NULL);
    d = gw("");
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d = gw("b");
    d.base_url = "ftp://x";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "base_url") != NULL);
    d = gw("p");
    d.kind = WGLLM_ENDPOINT_PROVIDER;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT); /* no api_key_env */
    d.api_key_env = "WGLLM_TEST_SURELY_UNSET_KEY";
    unsetenv(d.api_key_env);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "WGLLM_TEST_SURELY_UNSET_KEY") != NULL);
    setenv("WGLLM_TEST_SURELY_UNSET_KEY", "k", 1);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    unsetenv("WGLLM_TEST_SURELY_UNSET_KEY");
    d = gw("o");
    d.options_json = "[1]";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d.options_json = "{\"top_k\": 5, \"model\": \"x\"}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "'model'") != NULL);
    d.options_json = "{\"stream\": false}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d.options_json = "{\"top_k\": 5}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc l = {.name = "local", .kind = WGLLM_ENDPOINT_LOCAL};
    CHECK(wgllm_client_add(c, &l, &err) == WGLLM_STATUS_INVALID_ARGUMENT); /* no engine */
    CHECK(wgllm_client_count(c) == 3);
    CHECK(!strcmp(wgllm_client_at(c, 2)->name, "o"));
    CHECK(wgllm_client_find(c, "o")->ops == WGLLM_OP_ALL);
    CHECK(wgllm_client_find(c, "zzz") == NULL);
    wgllm_client_free(c);
}

TEST(calls_resolve_check_and_refuse_local_only_fields) {
    struct wgllm_client *c;
    struct wgllm_error err;
    CHECK(wgllm_client_init(&c, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc d = gw("chat-only");
    d.ops = WGLLM_OP_CHAT;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    struct wgllm_request_params rp = wgllm_request_default_params();
    struct wgllm_result res;
    CHECK(wgllm_client_query(c, "nobody", "hi", &rp, &res, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "nobody") != NULL && res.finish == WGLLM_FINISH_ERROR);
    wgllm_result_free(&res);
    CHECK(wgllm_client_query(c, "chat-only", "hi", &rp, &res, &err) == WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "query") != NULL);
    wgllm_result_free(&res);
    float v[4];
    int n = -1;
    CHECK(wgllm_client_embed(c, "chat-only", "x", 1, WGLLM_POOLING_MODEL, true, v, 4, &n, &err) ==
          WGLLM_STATUS_UNSUPPORTED);
    CHECK(n == 0);
    const struct wgllm_message m[1] = {{"user", "hi"}};
    const char *fields[] = {"context_key", "top_k", "min_p", "ignore_eos", "n_probs"};
    for (int i = 0; i < 5; i++) {
        rp = wgllm_request_default_params();
        if (i == 0) rp.context_key = "conv";
        if (i == 1) rp.sampling.top_k = 3;
        if (i == 2) rp.sampling.min_p = 0.5f;
        if (i == 3) rp.ignore_eos = true;
        if (i == 4) rp.sampling.n_probs = 2;
        CHECK(wgllm_client_chat(c, "chat-only", m, 1, &rp, &res, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(err.message, fields[i]) != NULL);
        wgllm_result_free(&res);
    }
    /* nothing listens on port 9: a transport error naming the URL, not a hang */
    rp = wgllm_request_default_params();
    CHECK(wgllm_client_chat(c, "chat-only", m, 1, &rp, &res, &err) == WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "127.0.0.1:9") != NULL);
    CHECK(res.finish == WGLLM_FINISH_ERROR && res.text && res.text[0] == 0);
    wgllm_result_free(&res);
    wgllm_client_free(c);
}

int main(void) {
    RUN(add_validates_descriptors);
    RUN(calls_resolve_check_and_refuse_local_only_fields);
    return test_summary("test_client");
}
