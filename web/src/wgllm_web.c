/*
 * wgllm_web.c - the C side of the browser package: a handful of flat
 * functions that the JS host (web/src/core.js) calls through the wasm exports.
 *
 * Requests are OpenAI requests: JS passes the request's JSON text
 * (wgllm_web_openai) and gets back the JSON texts `wgllm serve` would send
 * (the core's OpenAI layer, src/api/, does both), so field names, defaults,
 * validation and errors are the server's; JS only parses them.
 *
 * Why a layer at all: the engine's streaming callback runs on the engine
 * thread (a pthread = another Web Worker), which cannot talk to the JS that
 * owns the request. So each request gets a buffer that the engine thread
 * appends the stream's chunks to (one JSON text per line), plus a counter in
 * shared memory that it bumps and notifies; JS waits on that counter with
 * Atomics.waitAsync (never blocking its event loop), takes the lines, and at
 * the end reads the answer. The blocking wgllm_request_wait / wgllm_embed
 * run on a detached helper pthread per job.
 *
 * Backends: the engine runs on the CPU or on WebGPU (navigator.gpu through
 * hal_browser.c), as the engine parameters' backend says, with the same
 * batching, KV reuse and embeddings on both. Loading with a GPU must happen
 * on a pthread (the HAL waits for JS promises that the main thread resolves),
 * so JS starts it with wgllm_web_load_start and waits on its counter like on
 * a job's; the engine's own thread then calls the HAL the same way.
 *
 * Single-threaded builds (no __EMSCRIPTEN_PTHREADS__, for pages without
 * cross-origin isolation): the engine has no thread (no_thread) and nothing
 * runs on its own; JS calls wgllm_web_step between turns of its event loop,
 * and a job is finished there once its request is done. Embeddings and
 * snapshots run to the end inside their call; a load runs inside
 * wgllm_web_load(_stream)_start. Two cores link these objects: the CPU one
 * (wgllm-core-st.js, hal_none.c), and the WebGPU one (wgllm-core-st-gpu.js:
 * hal_browser.c, linked with Asyncify), whose waits for the browser (the
 * GPU's promises, the reads of streamed weights) are the async import
 * wgllm_web_js_wait: the wasm stack unwinds to JS while a promise is
 * pending, so those calls return Promises there (core.js awaits them).
 *
 * Streamed weights: wgllm_web_load_stream_start loads a
 * model whose files stay on the JS side (an OPFS file, a user's File, an
 * ArrayBuffer): the GGUF reader pulls the header and the WebGPU backend the
 * weights through a read callback, in bounded chunks (wgllm_web_js_read:
 * the main thread reads the range asynchronously and wakes the loading
 * pthread, or the sleeping single thread), so the weights go from the file
 * to GPU buffers and never sit in the wasm heap, which can only grow.
 *
 * Ownership: wgllm_web_load / wgllm_web_load_finish return a state (model +
 * engine or GPU generator) freed by wgllm_web_unload; every job returned by
 * a submit is freed by wgllm_web_job_free once JS has seen done != 0.
 */
#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#else
/* a native build (tests/test_web_faults.c): the single-threaded core's
 * paths, with nothing to export to JS */
#define EMSCRIPTEN_KEEPALIVE
#endif
#ifdef __EMSCRIPTEN_PTHREADS__
#include <emscripten/threading.h>
#endif
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgllm_tools.h"
#include "wgllm.h"
#include "base/json.h"

/* Progress of wgllm_model_load, forwarded to the JS host on the main thread
 * (wgllm_web.lib.js; asynchronous: the loading pthread never waits). */
#ifdef __EMSCRIPTEN__
extern void wgllm_web_js_progress(double p);
#else
static void wgllm_web_js_progress(double p) { (void)p; } /* native: no JS host to tell */
#endif

struct web_state {
    struct wgllm_model *model;
    struct wgllm_engine *eng;
    char *chat_template;
    char backend[320];           /* "cpu", "cpu (auto: ...)", "webgpu: ADAPTER (...)" */
};

/* a generation (its helper waits for the engine; the single-threaded core finishes it in wgllm_web_step)
 * comes before JOB_EMBED, the jobs that run to their end on the helper (or inline) */
enum job_kind { JOB_OPENAI = 0, JOB_EMBED = 1, JOB_SNAP_EXPORT = 2, JOB_SNAP_IMPORT = 3 };

struct web_job {
    /* first field, 4-aligned: JS waits on it with Atomics.waitAsync */
    _Atomic int32_t seq;  /* bumped each time text arrives and at the end */
    _Atomic int32_t done; /* 1 once result (or the embedding) is final */
    _Atomic int32_t cancel;
    enum job_kind kind;
    struct web_state *st;
    pthread_mutex_t mu;
    struct wgllm_strbuf pending; /* chunks (lines of JSON) not yet taken by JS */
    struct wgllm_strbuf taken;   /* what the last take returned (JS copies it out at once) */
    _Atomic int32_t oom; /* streamed text found no memory: the request stops with an error */
    struct wgllm_request *req;
    struct wgllm_result res;
    /* embed */
    char *text;
    size_t text_len;
    int pooling, normalize;
    float *vec;
    int n_vec;
    /* snapshots: the exported file, or the copy of the one to import */
    void *blob;
    size_t blob_len;
    /* OpenAI requests: pending holds the stream's chunks, one JSON text per line */
    struct wgllm_openai_params api;
    struct wgllm_openai_request oreq;
    char *model_id;
    char id[48];
    int http_status; /* 200, or the error's status */
    char *answer;    /* the final JSON text: the response, or an error object; NULL for a stream that ended well */
    bool answer_lost; /* no memory for the answer (or a stream's last chunks): OOM_ANSWER says so instead */
    enum wgllm_status status;
    char message[512];
};

static char g_error[512];

EMSCRIPTEN_KEEPALIVE const char *wgllm_web_last_error(void) { return g_error; }

static void bump(struct web_job *j) {
    atomic_fetch_add(&j->seq, 1);
#ifdef __EMSCRIPTEN_PTHREADS__
    emscripten_futex_wake((void *)&j->seq, INT_MAX);
#endif
}

static bool on_progress(float p, void *ud) {
    (void)ud;
    wgllm_web_js_progress(p);
    return true;
}

#ifdef __EMSCRIPTEN__
/* One read of a streamed model, completed by the JS side
 * (wgllm_web_js_read): state 0 pending -> 2 while JS writes into dst -> 1
 * done (status, msg at +8); the C side moves 0 -> 3 when it gives up, after
 * which JS must not touch dst. The two compare-exchanges make that race-free. */
struct web_read_wait {
    _Atomic int32_t state;
    int32_t status;
    char msg[512];
};
extern void wgllm_web_js_read(struct web_read_wait *w, int src, int file, double off, void *dst, double n);
#ifndef __EMSCRIPTEN_PTHREADS__
extern int wgllm_web_js_wait(_Atomic int32_t *flag, double ms); /* wgllm_web.lib.js: an Asyncify sleep */
#endif

#define READ_WAIT_MS 300000.0 /* a read of at most 16 MiB from OPFS or a File takes far less */

/* `user` is the files' id on the JS side (Module.wgllmSources), which lives
 * as long as the model: no C object to keep alive. */
static enum wgllm_status web_read(void *user, int file, uint64_t off, void *dst, size_t n, struct wgllm_error *err) {
    struct web_read_wait *w = calloc(1, sizeof *w);
    if (!w) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    wgllm_web_js_read(w, (int)(intptr_t)user, file, (double)off, dst, (double)n);
    const double t0 = emscripten_get_now();
    int32_t v;
    while ((v = atomic_load(&w->state)) != 1) {
        int32_t expect = 0;
        if (emscripten_get_now() - t0 > READ_WAIT_MS && atomic_compare_exchange_strong(&w->state, &expect, 3))
            /* w stays allocated: the read's promise still holds it */
            return wgllm_error_set(err, WGLLM_STATUS_IO, "the browser did not answer a read of %zu bytes in %.0f s", n,
                                   READ_WAIT_MS / 1000);
#ifdef __EMSCRIPTEN_PTHREADS__
        emscripten_futex_wait((void *)&w->state, (uint32_t)v, 1000.0);
#else
        /* state 2 never lasts past the JS call that sets it: here v is 0 */
        int32_t pending = 0;
        if (wgllm_web_js_wait(&w->state, 1000.0) < 0 && atomic_compare_exchange_strong(&w->state, &pending, 3))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "this core cannot wait for the browser's reads (streamed weights need the "
                                   "threaded or the single-threaded WebGPU core)");
#endif
    }
    enum wgllm_status st = WGLLM_STATUS_OK;
    if (w->status) st = wgllm_error_set(err, WGLLM_STATUS_IO, "%s", w->msg);
    free(w);
    return st;
}
#endif

/* Loads the model (from `path`, or streamed from `src` when it is not NULL)
 * and starts the engine; backend as enum wgllm_backend. NULL with the
 * message in `error`; *engine_failed says the model loaded but the engine
 * (its backend) could not start. */
static struct web_state *load_state(const char *path, const struct wgllm_model_source *src, int n_threads, int n_ctx,
                                    int n_slots, const char *chat_template, int backend, char *error,
                                    size_t error_cap, bool *engine_failed) {
    struct web_state *st = calloc(1, sizeof(*st));
    if (!st) {
        snprintf(error, error_cap, "out of memory");
        return NULL;
    }
    snprintf(st->backend, sizeof st->backend, "cpu");
    struct wgllm_error err = {0};
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = n_threads > 0 ? n_threads : 1;
#ifndef __EMSCRIPTEN_PTHREADS__
    mp.n_threads = 1;
#endif
    mp.progress = on_progress;
    enum wgllm_status lst = src ? wgllm_model_load_source(src, path, &mp, &st->model, &err)
                                : wgllm_model_load(path, &mp, &st->model, &err);
    if (lst != WGLLM_STATUS_OK) {
        snprintf(error, error_cap, "%s", err.message);
        free(st);
        return NULL;
    }
    if (chat_template && chat_template[0] && !(st->chat_template = strdup(chat_template))) {
        /* not the model's template in its place: the caller asked for this one */
        snprintf(error, error_cap, "out of memory for the chat template");
        wgllm_model_free(st->model);
        free(st);
        return NULL;
    }
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_threads = mp.n_threads;
    ep.n_ctx = n_ctx;
    ep.n_slots = n_slots > 0 ? n_slots : 1;
    ep.snapshot_bytes = (size_t)32 << 20; /* the wasm heap only grows: keep snapshots small */
    ep.chat_template = st->chat_template;
    ep.backend = (enum wgllm_backend)backend;
#ifndef __EMSCRIPTEN_PTHREADS__
    ep.no_thread = true; /* driven by wgllm_web_step (WebGPU's waits sleep through Asyncify) */
#endif
    if (wgllm_engine_init(st->model, &ep, &st->eng, &err) != WGLLM_STATUS_OK) {
        snprintf(error, error_cap, "%s", err.message);
        if (engine_failed) *engine_failed = true;
        wgllm_model_free(st->model);
        free(st->chat_template);
        free(st);
        return NULL;
    }
    snprintf(st->backend, sizeof st->backend, "%s", wgllm_engine_backend(st->eng));
    return st;
}

/*
 * Loads the GGUF at `path` (a file of the in-memory file system) and starts an
 * engine on it (CPU), on the calling thread. chat_template may be NULL or ""
 * (the model's). Returns NULL on failure with the message in
 * wgllm_web_last_error().
 */
EMSCRIPTEN_KEEPALIVE struct web_state *wgllm_web_load(const char *path, int n_threads, int n_ctx, int n_slots,
                                                      const char *chat_template) {
    return load_state(path, NULL, n_threads, n_ctx, n_slots, chat_template, WGLLM_BACKEND_CPU, g_error,
                      sizeof g_error, NULL);
}

/* A load running on its own pthread (needed for WebGPU): JS waits on `seq`. */
struct web_load {
    _Atomic int32_t seq; /* first field: JS waits on it with Atomics.waitAsync */
    _Atomic int32_t done;
    char *path, *chat_template;
    int n_threads, n_ctx, n_slots, backend;
    struct web_state *st;
    char error[512];
    bool engine_failed;
    /* a streamed load: the source (sizes and names are copied by the reader) */
    bool streamed;
    struct wgllm_model_source src;
    const char **names;
};

static void *load_main(void *p) {
    struct web_load *l = p;
    l->st = load_state(l->path, l->streamed ? &l->src : NULL, l->n_threads, l->n_ctx, l->n_slots, l->chat_template,
                       l->backend, l->error, sizeof l->error, &l->engine_failed);
    atomic_store(&l->done, 1);
    atomic_fetch_add(&l->seq, 1);
#ifdef __EMSCRIPTEN_PTHREADS__
    emscripten_futex_wake((void *)&l->seq, INT_MAX);
#endif
    return NULL;
}

/* Starts loading on a pthread; backend 0 cpu, 1 webgpu, 2 auto (enum
 * wgllm_backend). Poll wgllm_web_load_done, then take the result with
 * wgllm_web_load_finish. NULL (message in wgllm_web_last_error) if it
 * could not start. */
static struct web_load *load_new(const char *path, int n_threads, int n_ctx, int n_slots, const char *chat_template,
                                 int backend) {
    if (backend < WGLLM_BACKEND_CPU || backend > WGLLM_BACKEND_AUTO) {
        snprintf(g_error, sizeof(g_error), "unknown backend %d", backend);
        return NULL;
    }
    struct web_load *l = calloc(1, sizeof(*l));
    if (l) {
        l->path = strdup(path);
        l->chat_template = chat_template && chat_template[0] ? strdup(chat_template) : NULL;
    }
    if (!l || !l->path || (chat_template && chat_template[0] && !l->chat_template)) {
        if (l) free(l->path), free(l->chat_template);
        free(l);
        snprintf(g_error, sizeof(g_error), "out of memory");
        return NULL;
    }
    l->n_threads = n_threads, l->n_ctx = n_ctx, l->n_slots = n_slots, l->backend = backend;
    return l;
}

static void load_delete(struct web_load *l) {
    free(l->path);
    free(l->chat_template);
    free((void *)l->src.sizes);
    free(l->names);
    free(l);
}

static struct web_load *load_run(struct web_load *l) {
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
    load_main(l); /* no thread to put it on: done when this returns (which may be a Promise's end on JS's side) */
    return l;
#else
    pthread_t t;
    if (pthread_create(&t, NULL, load_main, l) != 0) {
        load_delete(l);
        snprintf(g_error, sizeof(g_error), "cannot start the loading thread");
        return NULL;
    }
    pthread_detach(t);
    return l;
#endif
}

EMSCRIPTEN_KEEPALIVE struct web_load *wgllm_web_load_start(const char *path, int n_threads, int n_ctx, int n_slots,
                                                           const char *chat_template, int backend) {
    struct web_load *l = load_new(path, n_threads, n_ctx, n_slots, chat_template, backend);
    return l ? load_run(l) : NULL;
}

/* Starts a streamed load: the n_files files of JS
 * source `src` (Module.wgllmSources[src]) with byte sizes `sizes` and names
 * `names` ("a\0b\0...", for messages). Then as wgllm_web_load_start. */
EMSCRIPTEN_KEEPALIVE struct web_load *wgllm_web_load_stream_start(int src, int n_files, const double *sizes,
                                                                  const char *names, int n_threads, int n_ctx,
                                                                  int n_slots, const char *chat_template,
                                                                  int backend) {
#ifdef __EMSCRIPTEN__
    if (n_files < 1) {
        snprintf(g_error, sizeof(g_error), "a streamed model needs at least one file");
        return NULL;
    }
    struct web_load *l = load_new(names, n_threads, n_ctx, n_slots, chat_template, backend);
    if (!l) return NULL;
    size_t packed = 0; /* the names are copied: JS frees its block when this returns */
    for (int i = 0; i < n_files; i++) packed += strlen(names + packed) + 1;
    uint64_t *sz = malloc((size_t)n_files * sizeof *sz);
    l->names = malloc((size_t)n_files * sizeof *l->names + packed);
    if (!sz || !l->names) {
        free(sz);
        load_delete(l);
        snprintf(g_error, sizeof(g_error), "out of memory");
        return NULL;
    }
    char *copy = memcpy((char *)(l->names + n_files), names, packed);
    for (int i = 0; i < n_files; i++, copy += strlen(copy) + 1) sz[i] = (uint64_t)sizes[i], l->names[i] = copy;
    l->streamed = true;
    l->src = (struct wgllm_model_source){.n_files = n_files, .sizes = sz, .names = l->names, .read = web_read,
                                        .user = (void *)(intptr_t)src};
    return load_run(l);
#else
    (void)src, (void)n_files, (void)sizes, (void)names, (void)n_threads, (void)n_ctx, (void)n_slots;
    (void)chat_template, (void)backend;
    snprintf(g_error, sizeof(g_error), "streamed weights need the browser's reads (a wasm core)");
    return NULL;
#endif
}

/* After a failed load (done != 0, before finish): 1 when the model itself
 * loaded and only the engine's backend could not start. */
EMSCRIPTEN_KEEPALIVE int wgllm_web_load_engine_failed(struct web_load *l) { return l->engine_failed; }

EMSCRIPTEN_KEEPALIVE int wgllm_web_load_done(struct web_load *l) { return atomic_load(&l->done); }

/* The loaded state (NULL with wgllm_web_last_error on failure); frees `l`. */
EMSCRIPTEN_KEEPALIVE struct web_state *wgllm_web_load_finish(struct web_load *l) {
    struct web_state *st = l->st;
    if (!st) snprintf(g_error, sizeof(g_error), "%s", l->error);
    load_delete(l);
    return st;
}

/* What the state runs on and why (wgllm_context_backend's wording). */
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_backend(struct web_state *st) { return st->backend; }

/* "RELAXED_SIMD SIMD128" or "SIMD128": what the CPU kernels use here. */
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_cpu_features(void) { return wgllm_cpu_features(); }

EMSCRIPTEN_KEEPALIVE void wgllm_web_unload(struct web_state *st) {
    if (!st) return;
    if (st->eng) wgllm_engine_free(st->eng);
    wgllm_model_free(st->model);
    free(st->chat_template);
    free(st);
}

/* Model facts for the JS side: 0 vocab, 1 context of training, 2 embedding
 * width, 3 layers, 4 weight bytes, 5 GPU bytes allocated (0 on the CPU). */
EMSCRIPTEN_KEEPALIVE double wgllm_web_model_info(struct web_state *st, int what) {
    switch (what) {
    case 0: return wgllm_model_n_vocab(st->model);
    case 1: return wgllm_model_n_ctx_train(st->model);
    case 2: return wgllm_model_n_embd(st->model);
    case 3: return wgllm_model_n_layer(st->model);
    case 4: return (double)wgllm_model_size(st->model);
    case 5: return (double)wgllm_engine_gpu_memory(st->eng);
    default: return -1;
    }
}

EMSCRIPTEN_KEEPALIVE const char *wgllm_web_model_arch(struct web_state *st) { return wgllm_model_arch(st->model); }

/* Appends one chunk (a JSON text, freed) as a line of the stream; false when out of memory. */
static bool push_line(struct web_job *j, char *chunk) {
    if (!chunk) return false;
    pthread_mutex_lock(&j->mu);
    const bool ok = wgllm_strbuf_puts(&j->pending, chunk) && wgllm_strbuf_putc(&j->pending, '\n');
    pthread_mutex_unlock(&j->mu);
    free(chunk);
    bump(j);
    return ok;
}

static bool on_openai_token(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct web_job *j = ud;
    struct wgllm_openai_request *g = &j->oreq;
    char *chunk = NULL;
    bool ok = wgllm_openai_chunk_token(&j->api, g, j->id, text, len, token, logprob, &chunk);
    if (ok && chunk) ok = push_line(j, chunk);
    if (!ok) atomic_store(&j->oom, 1); /* never a stream with a hole in it: stop, and say why */
    return ok && !atomic_load(&j->cancel);
}

/* return_progress on a stream: a line of prompt progress, which JS reads
 * while the pass goes on (core.js polls the job during a GPU wait). */
static bool on_openai_progress(const struct wgllm_prompt_progress *pp, void *ud) {
    struct web_job *j = ud;
    bool ok = push_line(j, wgllm_openai_chunk_progress(&j->api, &j->oreq, j->id, pp));
    if (!ok) atomic_store(&j->oom, 1);
    return ok && !atomic_load(&j->cancel);
}

/* What a job whose answer found no memory answers: static, so it needs none. */
static const char OOM_ANSWER[] = "{\"error\":{\"message\":\"out of memory for the answer\",\"type\":\"server_error\","
                                 "\"param\":null,\"code\":null}}";

/* The answer (or a stream's end) could not be made: the job fails with a
 * status and message that say so, whatever the request's own result was. */
static void answer_lost(struct web_job *j, const char *what) {
    j->answer_lost = true;
    j->http_status = 500;
    j->status = WGLLM_STATUS_OUT_OF_MEMORY;
    snprintf(j->message, sizeof(j->message), "out of memory for %s", what);
}

/* The end of an OpenAI job: the stream's last chunks, or the whole answer. */
static void openai_finish(struct web_job *j) {
    wgllm_request_wait(j->req, &j->res);
    j->req = NULL;
    struct wgllm_result *r = &j->res;
    if (atomic_load(&j->oom) && r->finish != WGLLM_FINISH_ERROR) {
        r->finish = WGLLM_FINISH_ERROR;
        r->status = WGLLM_STATUS_OUT_OF_MEMORY;
        snprintf(r->message, sizeof(r->message), "out of memory for the streamed chunks");
    }
    j->status = r->status;
    snprintf(j->message, sizeof(j->message), "%s", r->message);
    struct wgllm_openai_error e;
    if (r->finish == WGLLM_FINISH_ERROR) wgllm_openai_error_from_engine(&e, &j->oreq, r->status, r->message);
    j->http_status = r->finish == WGLLM_FINISH_ERROR ? e.status : 200;
    if (j->oreq.stream) {
        /* interrupted too: its finish chunk says "abort" (whoever broke out of the loop reads no more) */
        char *end[WGLLM_OPENAI_END_CHUNKS];
        const int n = wgllm_openai_chunks_end(&j->api, &j->oreq, j->id, r, end);
        bool pushed = n > 0; /* 0: out of memory (chunks_end makes all of them or none) */
        for (int i = 0; i < n; i++) pushed = push_line(j, end[i]) && pushed; /* each pushed or freed */
        if (!pushed) answer_lost(j, "the stream's last chunks");
    } else {
        j->answer = r->finish == WGLLM_FINISH_ERROR ? wgllm_openai_error_json(&e)
                                                    : wgllm_openai_response(&j->api, &j->oreq, j->id, r);
        if (!j->answer) answer_lost(j, "the answer");
    }
}

static void *job_main(void *p) {
    struct web_job *j = p;
    if (j->kind == JOB_SNAP_EXPORT || j->kind == JOB_SNAP_IMPORT) {
        struct wgllm_error err = {0};
        j->status = j->kind == JOB_SNAP_EXPORT
                        ? wgllm_engine_snapshots_export(j->st->eng, &j->blob, &j->blob_len, &err)
                        : wgllm_engine_snapshots_import(j->st->eng, j->blob, j->blob_len, &err);
        if (j->status) snprintf(j->message, sizeof(j->message), "%s", err.message);
    } else if (j->kind == JOB_EMBED) {
        struct wgllm_error err = {0};
        int n_embd = wgllm_model_n_embd(j->st->model);
        j->vec = malloc(sizeof(float) * (size_t)n_embd);
        if (!j->vec) {
            j->status = WGLLM_STATUS_OUT_OF_MEMORY;
            snprintf(j->message, sizeof(j->message), "out of memory");
        } else {
            j->status = wgllm_embed(j->st->eng, j->text, j->text_len, (enum wgllm_pooling)j->pooling,
                                    j->normalize != 0, j->vec, n_embd, &j->n_vec, &err);
            if (j->status) snprintf(j->message, sizeof(j->message), "%s", err.message);
        }
    } else {
        openai_finish(j);
    }
    atomic_store(&j->done, 1);
    bump(j);
    return NULL;
}

static struct web_job *job_new(struct web_state *st, enum job_kind kind) {
    struct web_job *j = calloc(1, sizeof(*j));
    if (!j) {
        snprintf(g_error, sizeof(g_error), "out of memory");
        return NULL;
    }
    j->st = st;
    j->kind = kind;
    pthread_mutex_init(&j->mu, NULL);
    return j;
}

static bool job_start(struct web_job *j) {
#ifndef __EMSCRIPTEN_PTHREADS__
    /* generations finish in wgllm_web_step; an embedding runs here, its
     * wait driving the engine */
    if (j->kind >= JOB_EMBED) job_main(j);
    return true;
#else
    pthread_t t;
    if (pthread_create(&t, NULL, job_main, j) != 0) {
        snprintf(g_error, sizeof(g_error), "cannot start a helper thread");
        return false;
    }
    pthread_detach(t);
    return true;
#endif
}

EMSCRIPTEN_KEEPALIVE void wgllm_web_job_free(struct web_job *j);

/*
 * An OpenAI request: `body` is len bytes of the request's JSON (as a client
 * would POST it), endpoint 0 /v1/completions, 1 /v1/chat/completions
 * (enum wgllm_openai_endpoint); `model_id` the name answers show. The core's
 * OpenAI layer parses and checks it exactly as `wgllm serve` does, and the
 * answers are the same JSON texts the server sends: a stream's chunks arrive
 * as lines in the job's text (wgllm_web_job_take), the whole answer (or an
 * error object) once done in wgllm_web_job_answer, the HTTP status the server
 * would give in wgllm_web_job_num(j, 11). A refused request is a job that is
 * done at once with its error. NULL only when out of memory.
 */
EMSCRIPTEN_KEEPALIVE struct web_job *wgllm_web_openai(struct web_state *st, int endpoint, const char *body, int len,
                                                      const char *model_id) {
    struct web_job *j = job_new(st, JOB_OPENAI);
    if (!j) return NULL;
    j->model_id = strdup(model_id ? model_id : "");
    if (!j->model_id) {
        wgllm_web_job_free(j);
        snprintf(g_error, sizeof(g_error), "out of memory");
        return NULL;
    }
    const int n_ctx = wgllm_engine_n_ctx(st->eng);
    /* the server's caps: no request holds the slot for longer than a context (or 65536 tokens) */
    j->api = (struct wgllm_openai_params){.model = st->model, .engine = st->eng, .model_id = j->model_id,
                                          .max_tokens = n_ctx > 65536 ? n_ctx : 65536, .n_ctx = n_ctx};
    struct wgllm_openai_error e;
    bool ok = endpoint == WGLLM_OPENAI_CHAT || endpoint == WGLLM_OPENAI_COMPLETIONS;
    if (!ok)
        wgllm_openai_error_set(&e, 404, "invalid_request_error", NULL, "not_found",
                               "the browser engine answers completions (0) and chat completions (1), not endpoint %d",
                               endpoint);
    else
        ok = wgllm_openai_parse(&j->api, (enum wgllm_openai_endpoint)endpoint, body, len > 0 ? (size_t)len : 0,
                                &j->oreq, &e);
    struct wgllm_openai_request *g = &j->oreq;
    if (ok) {
        wgllm_openai_new_id(g, j->id, sizeof(j->id));
        g->rp.on_token = on_openai_token;
        g->rp.on_prompt_progress = g->stream && g->return_progress ? on_openai_progress : NULL;
        g->rp.user_data = j;
        if (g->stream && !push_line(j, wgllm_openai_chunk_first(&j->api, g, j->id)) && endpoint == WGLLM_OPENAI_CHAT) {
            wgllm_openai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            ok = false;
        }
    }
    if (ok) {
        struct wgllm_error err = {0};
        const enum wgllm_status s = wgllm_openai_submit(st->eng, g, &j->req, &err);
        if (s != WGLLM_STATUS_OK) {
            wgllm_openai_error_from_engine(&e, g, s, err.message);
            ok = false;
        }
    }
    if (ok && !job_start(j)) {
        wgllm_request_cancel(j->req);
        wgllm_request_wait(j->req, &j->res);
        j->req = NULL;
        wgllm_openai_error_set(&e, 500, "server_error", NULL, NULL, "%s", g_error);
        ok = false;
    }
    if (!ok) { /* answered at once: the error, as the server would send it */
        pthread_mutex_lock(&j->mu);
        wgllm_strbuf_clear(&j->pending); /* a stream that never started has no chunks */
        pthread_mutex_unlock(&j->mu);
        j->http_status = e.status;
        j->answer = wgllm_openai_error_json(&e);
        j->answer_lost = !j->answer; /* the message below still says what went wrong */
        j->status = WGLLM_STATUS_INVALID_ARGUMENT;
        snprintf(j->message, sizeof(j->message), "%s", e.message);
        atomic_store(&j->done, 1);
        bump(j);
    }
    return j;
}

/* The layer's upstream() for the parse of a routed request for its remote targets. */
static const char *as_remote(void *user, const char *model) {
    (void)model;
    return user;
}

static double json_num(const struct wgllm_json *o, const char *key, double dflt) {
    const struct wgllm_json *v = wgllm_json_get(o, key);
    return wgllm_json_is(v, WGLLM_JSON_NUMBER) ? v->num : dflt;
}

/*
 * The routing policy (wgllm.h, "Routes") for a request on a route of the
 * JS router (wgllm.js createRouter) whose local target is this engine. body
 * as for wgllm_web_openai, its `model` the route's name; targets the route as JS
 * measures it: {"route", "cost_weight", "targets": [{"name", "kind":
 * "local"|"remote", "cost", "latency_ms", "in_flight", "healthy"}]} in the
 * route's order. The request is parsed as this engine takes it and as an
 * upstream takes it (a field an upstream cannot take -- grammar, logprobs,
 * a local-only knob -- refuses the remote targets; one the engine cannot
 * take refuses the local one); the engine gives its prompt tokens, how many
 * it holds already (wgllm_engine_cached_tokens: waits for the current
 * tick), its queue and measured rates. Returns the decision's JSON
 * (malloc'd; free it), NULL with wgllm_web_last_error on bad targets.
 */
EMSCRIPTEN_KEEPALIVE char *wgllm_web_route(struct web_state *st, int endpoint, const char *body, int len,
                                           const char *targets, int targets_len) {
    struct wgllm_json_doc doc;
    struct wgllm_json_error jerr;
    const struct wgllm_json_limits lim = {.max_depth = 8, .max_nodes = 4096, .max_bytes = 1 << 20};
    if (!wgllm_json_parse(targets, targets_len > 0 ? (size_t)targets_len : 0, &lim, &doc, &jerr)) {
        snprintf(g_error, sizeof g_error, "route targets: %s at byte %zu", jerr.message, jerr.offset);
        return NULL;
    }
    const struct wgllm_json *root = wgllm_json_root(&doc), *list = wgllm_json_get(root, "targets");
    const struct wgllm_json *name = wgllm_json_get(root, "route");
    struct wgllm_route_decision *d = calloc(1, sizeof *d);
    char *out = NULL;
    if (!d || !wgllm_json_is(list, WGLLM_JSON_ARRAY) || list->count < 1 || list->count > WGLLM_ROUTE_MAX_CANDIDATES ||
        !wgllm_json_is(name, WGLLM_JSON_STRING)) {
        snprintf(g_error, sizeof g_error, d ? "route targets: need a route name and 1 to %d targets" : "out of memory",
                 WGLLM_ROUTE_MAX_CANDIDATES);
        free(d);
        wgllm_json_doc_free(&doc);
        return NULL;
    }
    const int n_ctx = wgllm_engine_n_ctx(st->eng);
    struct wgllm_openai_params lp = {.model = st->model, .engine = st->eng, .max_tokens = n_ctx > 65536 ? n_ctx : 65536,
                                     .n_ctx = n_ctx, .model_alias = name->str};
    struct wgllm_openai_params rp = lp;
    rp.model_alias = NULL; /* the route's name must not be this model's for the remote parse */
    rp.upstream = as_remote;
    rp.upstream_user = "remote";
    struct wgllm_openai_request gl = {0}, gr = {0};
    struct wgllm_openai_error el, er;
    const size_t blen = len > 0 ? (size_t)len : 0;
    const enum wgllm_openai_endpoint ep = endpoint == WGLLM_OPENAI_CHAT ? WGLLM_OPENAI_CHAT : WGLLM_OPENAI_COMPLETIONS;
    const bool ok_l = wgllm_openai_parse(&lp, ep, body, blen, &gl, &el);
    const bool ok_r = wgllm_openai_parse(&rp, ep, body, blen, &gr, &er);
    const char *local_only = ok_r ? wgllm_route_local_only(&gr.rp) : NULL;
    /* the local inputs, once (the engine's tokens are the best count the remote targets get too) */
    int n_tok = 0, cached = 0;
    struct wgllm_error werr = {0};
    char local_why[192] = "";
    if (ok_l) {
        int32_t *ids = NULL;
        if (wgllm_openai_prompt_tokens(st->eng, &gl, &ids, &n_tok, &werr) == WGLLM_STATUS_OK)
            cached = wgllm_engine_cached_tokens(st->eng, ids, n_tok, NULL);
        else
            snprintf(local_why, sizeof local_why, "%.190s", werr.message);
        free(ids);
    } else {
        snprintf(local_why, sizeof local_why, "%.190s", el.message);
    }
    if (!n_tok) n_tok = (int)(blen / 4 + 1); /* about 4 bytes a token without a tokenization */
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(st->eng, &m);
    d->route = name->str;
    for (const struct wgllm_json *t = wgllm_json_first(list); t; t = wgllm_json_next(list, t)) {
        struct wgllm_route_candidate *c = &d->c[d->n];
        const struct wgllm_json *tn = wgllm_json_get(t, "name"), *kind = wgllm_json_get(t, "kind");
        c->name = wgllm_json_is(tn, WGLLM_JSON_STRING) ? tn->str : "";
        c->kind = wgllm_json_is(kind, WGLLM_JSON_STRING) && !strcmp(kind->str, "local") ? WGLLM_ROUTE_LOCAL
                                                                                        : WGLLM_ROUTE_REMOTE;
        c->cost = json_num(t, "cost", 0);
        c->prompt_tokens = n_tok;
        if (c->kind == WGLLM_ROUTE_LOCAL) {
            if (*local_why) snprintf(d->notes[d->n], sizeof d->notes[d->n], "%s", local_why), c->refused = d->notes[d->n];
            c->cached_tokens = cached;
            c->prefill_tok_s = m.prefill_tok_s;
            c->request_ms = m.request_ms;
            c->queue_depth = m.queue_depth;
            c->busy_slots = m.active_slots;
            c->n_slots = m.n_slots;
        } else {
            if (!ok_r) snprintf(d->notes[d->n], sizeof d->notes[d->n], "%.190s", er.message), c->refused = d->notes[d->n];
            else if (local_only)
                snprintf(d->notes[d->n], sizeof d->notes[d->n], "'%s' is local-only", local_only), c->refused = d->notes[d->n];
            c->latency_ms = json_num(t, "latency_ms", 0);
            c->in_flight = (int)json_num(t, "in_flight", 0);
            c->healthy = wgllm_json_is(wgllm_json_get(t, "healthy"), WGLLM_JSON_TRUE);
        }
        d->n++;
    }
    struct wgllm_route_params p = wgllm_route_default_params();
    p.cost_weight = json_num(root, "cost_weight", p.cost_weight);
    wgllm_route_decide(&p, d, ok_l ? gl.rp.max_tokens : ok_r ? gr.rp.max_tokens : 0);
    if (!(out = wgllm_route_json(d))) snprintf(g_error, sizeof g_error, "out of memory");
    wgllm_openai_request_free(&gl);
    wgllm_openai_request_free(&gr);
    free(d);
    wgllm_json_doc_free(&doc);
    return out;
}

/* The final JSON text of an OpenAI job once done ("" for a stream, whose
 * end is in its lines; OOM_ANSWER when there was no memory for it). */
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_job_answer(struct web_job *j) {
    return j->answer ? j->answer : j->answer_lost ? OOM_ANSWER : "";
}

/* Embeds the len bytes of `text` (copied; NULs are text) on a helper thread
 * (the engine computes it); pooling as enum wgllm_pooling. */
EMSCRIPTEN_KEEPALIVE struct web_job *wgllm_web_embed(struct web_state *st, const char *text, int len, int pooling,
                                                     int normalize) {
    struct web_job *j = job_new(st, JOB_EMBED);
    if (!j) return NULL;
    j->text_len = len > 0 ? (size_t)len : 0;
    if ((j->text = malloc(j->text_len + 1))) memcpy(j->text, text, j->text_len), j->text[j->text_len] = 0;
    j->pooling = pooling;
    j->normalize = normalize;
    if (!j->text || !job_start(j)) {
        if (!j->text) snprintf(g_error, sizeof(g_error), "out of memory");
        wgllm_web_job_free(j);
        return NULL;
    }
    return j;
}

/*
 * Single-threaded build: runs one engine tick, and finishes job j (may be
 * NULL) if its request has ended. Returns nonzero while the engine has work
 * left. The threaded build's engine runs by itself: there it returns 0.
 */
EMSCRIPTEN_KEEPALIVE int wgllm_web_step(struct web_state *st, struct web_job *j) {
#ifdef __EMSCRIPTEN_PTHREADS__
    (void)st;
    (void)j;
    return 0;
#else
    if (j && atomic_load(&j->done)) return 0;
    const bool more = wgllm_engine_step(st->eng);
    if (j && j->req && wgllm_request_done(j->req)) job_main(j);
    return more;
#endif
}

/* Address of the counter JS waits on (seq), as an int32 index base. */
EMSCRIPTEN_KEEPALIVE int32_t *wgllm_web_job_seq(struct web_job *j) { return (int32_t *)&j->seq; }
EMSCRIPTEN_KEEPALIVE int wgllm_web_job_done(struct web_job *j) { return atomic_load(&j->done); }

/* Cancels at the next tick (and makes on_token ask to stop). */
EMSCRIPTEN_KEEPALIVE void wgllm_web_job_cancel(struct web_job *j) {
    atomic_store(&j->cancel, 1);
    struct wgllm_request *r = j->req;
    if (r && !atomic_load(&j->done)) wgllm_request_cancel(r);
}

/* Moves the text streamed so far out of the job: returns it (valid until the
 * next take) with its byte length in *len. The two buffers swap places, so
 * a take never allocates (and never fails): the engine thread goes on
 * appending to the other one. */
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_job_take(struct web_job *j, int *len) {
    pthread_mutex_lock(&j->mu);
    struct wgllm_strbuf old = j->taken;
    j->taken = j->pending;
    wgllm_strbuf_clear(&old);
    j->pending = old;
    *len = (int)j->taken.len;
    pthread_mutex_unlock(&j->mu);
    return j->taken.data ? j->taken.data : "";
}

/* Results once done: 0 status, 1 finish reason, 2 prompt tokens, 3 cached
 * tokens, 4 completion tokens, 5 ttft ms, 6 prefill tok/s, 7 decode tok/s,
 * 8 total ms, 9 text length, 10 embedding length, 11 the HTTP status of an
 * OpenAI job. */
EMSCRIPTEN_KEEPALIVE double wgllm_web_job_num(struct web_job *j, int what) {
    const struct wgllm_result *r = &j->res;
    switch (what) {
    case 0: return j->status;
    case 1: return r->finish;
    case 2: return r->usage.prompt_tokens;
    case 3: return r->usage.cached_tokens;
    case 4: return r->usage.completion_tokens;
    case 5: return r->timings.ttft_ms;
    case 6: return r->timings.prefill_tok_s;
    case 7: return r->timings.decode_tok_s;
    case 8: return r->timings.total_ms;
    case 9: return (double)r->text_len;
    case 10: return j->n_vec;
    case 11: return j->http_status;
    default: return -1;
    }
}

EMSCRIPTEN_KEEPALIVE const char *wgllm_web_job_text(struct web_job *j) { return j->res.text ? j->res.text : ""; }
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_job_message(struct web_job *j) { return j->message; }
EMSCRIPTEN_KEEPALIVE const float *wgllm_web_job_vec(struct web_job *j) { return j->vec; }

/* The engine's prefix snapshots (import == 0: exported into the job, read
 * them with wgllm_web_job_blob once done) or restores `len` bytes of an
 * exported file (import != 0; copied at once). A job like the others: JS
 * waits on its counter (the engine thread does the work between ticks). */
EMSCRIPTEN_KEEPALIVE struct web_job *wgllm_web_snapshots(struct web_state *st, int import, const void *data,
                                                         int len) {
    struct web_job *j = job_new(st, import ? JOB_SNAP_IMPORT : JOB_SNAP_EXPORT);
    if (!j) return NULL;
    if (import) {
        j->blob = malloc(len > 0 ? (size_t)len : 1);
        if (!j->blob) {
            snprintf(g_error, sizeof(g_error), "out of memory for %d bytes of snapshots", len);
            wgllm_web_job_free(j);
            return NULL;
        }
        if (len > 0) memcpy(j->blob, data, (size_t)len);
        j->blob_len = len > 0 ? (size_t)len : 0;
    }
    if (!job_start(j)) {
        wgllm_web_job_free(j);
        return NULL;
    }
    return j;
}

EMSCRIPTEN_KEEPALIVE const void *wgllm_web_job_blob(struct web_job *j, int *len) {
    *len = (int)j->blob_len;
    return j->blob;
}

/* Frees a job that is done (or was never started). */
EMSCRIPTEN_KEEPALIVE void wgllm_web_job_free(struct web_job *j) {
    if (!j) return;
    wgllm_result_free(&j->res);
    pthread_mutex_destroy(&j->mu);
    wgllm_strbuf_free(&j->pending);
    wgllm_strbuf_free(&j->taken);
    free(j->text);
    free(j->vec);
    free(j->blob);
    wgllm_openai_request_free(&j->oreq);
    free(j->model_id);
    free(j->answer);
    free(j);
}
