/*
 * generate.c - wgllm_generate (wgllm.h): the decode -> sample loop of one
 * sequence. Where the context's backend picks tokens on the device
 * (backend.h: wgllm_context_can_generate, e.g. WebGPU greedy or a plain
 * sampler chain) only token ids come back and the next step is queued before
 * a token is read; otherwise the CPU sampler draws from the host logits.
 * Both leave the last token given undecoded, so a caller that shifts a full
 * context goes on the same way after either.
 */
#include "wgllm.h"

#include "backend/backend.h"
#include "base/base.h"

bool wgllm_generate_on_device(const struct wgllm_context *ctx, const struct wgllm_sampler_params *params) {
    return wgllm_context_can_generate(ctx, params);
}

enum wgllm_status wgllm_generate(struct wgllm_context *ctx, const struct wgllm_sampler_params *params,
                                 struct wgllm_sampler *sampler, int n, wgllm_generate_fn on_token,
                                 void *user_data, int *n_out, struct wgllm_error *err) {
    int given = 0;
    if (n_out) *n_out = 0;
    if (!ctx || n < 0 || !on_token || !params)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "generate: needs a context, sampler params, n >= 0 and on_token");
    if (n == 0) return WGLLM_STATUS_OK;
    if (wgllm_context_can_generate(ctx, params)) {
        enum wgllm_status st = wgllm_context_generate(ctx, params, n, on_token, user_data, &given, err);
        if (n_out) *n_out = given;
        return st;
    }
    if (!sampler)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "generate: these settings sample on the CPU, which needs a sampler");
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (;;) {
        const float *logits = wgllm_get_logits(ctx);
        if (!logits) {
            st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                 "generate: no logits (decode the last token given before generating again)");
            break;
        }
        int32_t tok = wgllm_sampler_sample(sampler, logits);
        wgllm_sampler_accept(sampler, tok);
        given++;
        if (!on_token(tok, user_data) || given == n) break;
        if ((st = wgllm_decode(ctx, &tok, 1, false, err)) != WGLLM_STATUS_OK) break;
    }
    if (n_out) *n_out = given;
    return st;
}
