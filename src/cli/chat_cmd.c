/*
 * chat_cmd.c - `wgllm chat -m MODEL`: an interactive chat in the terminal.
 *
 * Every turn goes through the engine with one context_key, so the earlier
 * turns stay in the KV cache and only the new message is computed (the
 * cached count is shown after each reply). Ctrl-C stops the reply being
 * written; at the prompt it exits. `/reset` forgets the conversation.
 *
 * Ctrl-C is taken by a thread that waits for SIGINT with sigwait (blocked in
 * every other thread) and raises a flag; the streaming callback sees it at the
 * next token and returns false, which cancels the request. No request handle
 * crosses threads, so none can be used after wgllm_request_wait freed it.
 */
#include "cli.h"

#include "wgllm_tools.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_bool replying; /* a reply is being generated */
static atomic_bool stop_reply; /* Ctrl-C during it */

static void *sigint_thread(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0) continue;
        if (atomic_load(&replying)) {
            atomic_store(&stop_reply, true);
        } else {
            fputc('\n', stderr);
            _exit(130);
        }
    }
    return NULL;
}

static bool print_piece(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return !atomic_load(&stop_reply);
}

struct history {
    struct wgllm_message *m;
    int n;
    size_t cap;
};

static bool history_add(struct history *h, const char *role, const char *content) {
    if (!wgllm_grow((void **)&h->m, &h->cap, (size_t)h->n + 1, sizeof *h->m)) return false;
    char *c = strdup(content);
    if (!c) return false;
    h->m[h->n].role = role;
    h->m[h->n++].content = c;
    return true;
}

static void history_clear(struct history *h) {
    for (int i = 0; i < h->n; i++) free((char *)h->m[i].content);
    h->n = 0;
}

int wgllm_cli_chat(const struct opts *o) {
    /* block SIGINT before any thread starts, so only sigint_thread receives it */
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t sig_th;
    pthread_create(&sig_th, NULL, sigint_thread, &set);
    pthread_detach(sig_th);

    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    char *tmpl = NULL;
    size_t len;
    if (o->template_file && !(tmpl = wgllm_cli_read_file(o->template_file, &len))) {
        wgllm_model_free(m);
        return 1;
    }
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 1;
    ep.backend = o->backend, ep.gpu_mem = o->gpu_mem;
    ep.n_ctx = o->ctx;
    ep.n_threads = o->threads;
    ep.chat_template = tmpl;
    ep.context_shift = o->context_shift;
    ep.context_keep = o->keep;
    struct wgllm_engine *e;
    struct wgllm_error err;
    if (wgllm_engine_init(m, &ep, &e, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        free(tmpl);
        wgllm_model_free(m);
        return 1;
    }
    const bool tty = isatty(0) && isatty(1);
    if (tty) fprintf(stderr, "chatting with %s: /reset starts over, Ctrl-C stops a reply, Ctrl-D exits\n", o->model);
    struct history h = {0};
    int conversation = 0, rc = 0;
    char key[32], *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strcmp(line, "/reset")) {
            history_clear(&h);
            conversation++;
            fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        if (!history_add(&h, "user", line)) {
            rc = 1;
            break;
        }
        struct wgllm_request_params rp = wgllm_request_default_params();
        rp.max_tokens = o->n_predict > 0 ? o->n_predict : 512;
        rp.sampling.temperature = o->temp;
        rp.sampling.top_k = o->top_k;
        rp.sampling.top_p = o->top_p;
        rp.sampling.min_p = o->min_p;
        rp.sampling.seed = o->seed;
        snprintf(key, sizeof(key), "chat-%d", conversation);
        rp.context_key = key;
        rp.on_token = print_piece;
        struct wgllm_request *req;
        atomic_store(&stop_reply, false);
        atomic_store(&replying, true);
        if (wgllm_engine_submit_chat(e, h.m, h.n, &rp, &req, &err) != WGLLM_STATUS_OK) {
            atomic_store(&replying, false);
            fprintf(stderr, "wgllm: error: %s\n", err.message);
            h.n--, free((char *)h.m[h.n].content); /* the message was not sent */
            if (err.status == WGLLM_STATUS_UNSUPPORTED) {
                rc = 1;
                break;
            }
            continue;
        }
        struct wgllm_result res;
        wgllm_request_wait(req, &res);
        atomic_store(&replying, false);
        fputc('\n', stdout);
        fflush(stdout);
        fprintf(stderr, "[%s; prompt %d tokens, %d cached; reply %d tokens, %.1f tok/s]\n",
                res.finish == WGLLM_FINISH_CANCELLED ? "stopped" : res.finish == WGLLM_FINISH_LENGTH ? "length"
                : res.finish == WGLLM_FINISH_ERROR ? "error" : "done",
                res.usage.prompt_tokens, res.usage.cached_tokens, res.n_tokens, res.timings.decode_tok_s);
        if (res.status != WGLLM_STATUS_OK) fprintf(stderr, "wgllm: error: %s\n", res.message);
        history_add(&h, "assistant", res.text ? res.text : "");
        wgllm_result_free(&res);
    }
    free(line);
    history_clear(&h);
    free(h.m);
    wgllm_engine_free(e);
    free(tmpl);
    wgllm_model_free(m);
    return rc;
}
