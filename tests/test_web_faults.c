/*
 * test_web_faults.c - allocation failures in the browser package's C side
 * (web/src/wgllm_web.c, compiled natively here: its single-threaded core's
 * paths, the ones web/dist/wgllm-core-st.js runs).
 *
 * This binary is linked with -Wl,--wrap=malloc,--wrap=calloc,... (Makefile),
 * so every allocation of the glue and of the core beneath it goes through
 * the counter below, which makes the Nth one fail. One sequence is what a
 * page does: load a synthetic model (with a chat template of its own), a
 * streamed and a whole chat completion and a streamed completion through
 * wgllm_web_openai stepped to their end, a request the layer refuses, an
 * embedding, a snapshot export and import, unload, and a load that fails. It runs once clean (the reference), then once per fault
 * point N = 1, 2, ... until a run passes without reaching N. At each point
 * every call must either give the reference result or fail with a clear
 * error (a message; an OpenAI error object with its HTTP status), never
 * crash, abort, hang (steps are bounded) or leak (LeakSanitizer checks
 * after each point under ASan); and a fresh clean sequence after it must
 * still give the reference results. A second pass makes every allocation
 * from the point on fail (memory that stays exhausted), at every 4th point:
 * the error paths must need no memory to say what went wrong.
 *
 * Points are taken with a stride over the core's allocations when there are
 * many (WGLLM_FAULT_STRIDE, default 1 = all; the default suite sets none),
 * but every allocation made by the glue itself is always failed: the glue
 * is #included below with its malloc/calloc/strdup renamed to tag them,
 * and the test fails unless each of its allocation calls was reached.
 */
#include "test.h"

#include "model/synth.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "vocab/vocab.h"
#include "wgllm_tools.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#else
#define HAVE_LSAN 0
#endif

/* ---- the fault counter ------------------------------------------------------ */

static _Atomic long n_alloc;   /* allocations since the sequence began */
static _Atomic long fail_at;   /* the allocation to fail (1-based); 0: none */
static _Atomic bool counting;  /* off outside the sequences (the harness's own allocations) */
static _Atomic int cur_site;   /* glue line of the allocation being made; 0: the core's */
static bool fail_rest;         /* every allocation from fail_at on fails (memory that stays exhausted) */
#define MAX_ALLOCS (1 << 20)
static int *site_of;           /* reference run: glue line of allocation i (0: the core's) */
static void **caller_of;       /* ... and the address it was called from (WGLLM_FAULT_VERBOSE) */

static bool fail_now(void *caller) {
    const int site = atomic_exchange(&cur_site, 0);
    if (!atomic_load(&counting)) return false;
    const long n = atomic_fetch_add(&n_alloc, 1) + 1;
    if (site_of && n < MAX_ALLOCS) site_of[n] = site, caller_of[n] = caller;
    const long at = atomic_load(&fail_at);
    return at && (n == at || (fail_rest && n > at));
}
#define FAIL_NOW() fail_now(__builtin_return_address(0))

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);

void *__wrap_malloc(size_t n) { return FAIL_NOW() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return FAIL_NOW() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return FAIL_NOW() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return FAIL_NOW() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return FAIL_NOW() ? NULL : __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    return FAIL_NOW() ? ENOMEM : __real_posix_memalign(p, align, n);
}

/* "file offset of the caller" for addr2line -e THIS_BINARY */
static void print_caller(const char *what, long n, void *const *callers) {
    Dl_info info;
    if (callers[n] && dladdr(callers[n], &info) && info.dli_fbase)
        fprintf(stderr, "  %s allocation %ld: called from %s+0x%lx\n", what, n, info.dli_fname,
                (unsigned long)((char *)callers[n] - (char *)info.dli_fbase));
}

/* The glue, with its own allocation calls tagged by line (they still go
 * through the wrapped functions above). */
static void *glue_tag(int line) {
    atomic_store(&cur_site, line);
    return NULL;
}
#define malloc(n) (glue_tag(__LINE__), malloc(n))
#define calloc(n, s) (glue_tag(__LINE__), calloc(n, s))
#define realloc(p, n) (glue_tag(__LINE__), realloc(p, n))
#define strdup(s) (glue_tag(__LINE__), strdup(s))
#include "../web/src/wgllm_web.c"
#undef malloc
#undef calloc
#undef realloc
#undef strdup

/* ---- one sequence ----------------------------------------------------------- */

#define MAX_STEPS 20000 /* a request of 4 tokens takes a few dozen; more is a hang */

/* short texts: with one token per byte, the prefills are most of the run time; the comment names
 * Hermes' call syntax, so tools add no instructions to the prompt (the generic format's would not fit) */
static const char TEMPLATE[] = "{# <tool_call> #}{% for m in messages %}{{ m.role[0] }}:{{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}a:{% endif %}";
/* the streamed chat offers a tool (auto: the tools' checks, the messages' JSON and the held stream,
 * without a grammar, whose token table would double the sequence's allocations) */
static const char BODY_STREAM[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],"
                                  "\"max_tokens\":4,\"temperature\":0,\"stream\":true,"
                                  "\"stream_options\":{\"include_usage\":true},\"tools\":[{\"type\":\"function\","
                                  "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                                  "\"properties\":{\"a\":{\"type\":\"integer\"}}}}}],\"tool_choice\":\"auto\"}";
static const char BODY_WHOLE[] = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be\"},"
                                 "{\"role\":\"user\",\"content\":\"Hi\"}],"
                                 "\"max_tokens\":4,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2}";
static const char BODY_COMPLETE[] = "{\"prompt\":\"Hi\",\"max_tokens\":2,\"temperature\":0,\"stream\":true,"
                                   "\"stream_options\":{\"include_usage\":true}}";
static const char BODY_REFUSED[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":-3}";
static const char EMBED_TEXT[] = "lamp";
/* the routing policy's inputs for the whole chat again (warm now) on a route with a remote target */
static const char BODY_ROUTE[] = "{\"model\":\"r\",\"messages\":[{\"role\":\"system\",\"content\":\"Be\"},"
                                 "{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"logprobs\":true}";
static const char ROUTE_TARGETS[] = "{\"route\":\"r\",\"cost_weight\":1000,\"targets\":[{\"name\":\"here\","
                                    "\"kind\":\"local\"},{\"name\":\"far\",\"kind\":\"remote\",\"latency_ms\":400,"
                                    "\"healthy\":true,\"cost\":1}]}";

/* What one sequence gave: per call, ok (the result), or the error it said. */
enum { OP_LOAD, OP_STREAM, OP_WHOLE, OP_COMPLETE, OP_REFUSED, OP_EMBED, OP_EXPORT, OP_IMPORT, OP_ROUTE, OP_BAD_LOAD,
       N_OPS };
static const char *const OP_NAMES[N_OPS] = {"load", "streamed chat", "whole chat", "streamed completion",
                                            "refused chat", "embed", "snapshot export", "snapshot import",
                                            "route decision", "failing load"};
struct outcome {
    bool ok[N_OPS];
    bool ran[N_OPS];
    char text[3][256];    /* the chats' and the completion's texts */
    char stream_end[512]; /* the stream's last line */
    float vec[256];
    int n_vec;
    char load_error[512]; /* what a failed load said */
    bool problem;         /* a failure that was not a clear error */
    char why[600];
};

static void problem(struct outcome *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct outcome *o, const char *fmt, ...) {
    if (o->problem) return; /* the first one says it */
    o->problem = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
}

/* The last complete line of the stream text s (len bytes). */
static void last_line(const char *s, size_t len, char *out, size_t cap) {
    size_t end = len;
    while (end > 0 && s[end - 1] == '\n') end--;
    size_t start = end;
    while (start > 0 && s[start - 1] != '\n') start--;
    snprintf(out, cap, "%.*s", (int)(end - start), s + start);
}

/* An OpenAI job stepped to its end; true when it ended well (text in
 * *text, the stream's last line in *end). A failure must be an error the
 * page can show: an OpenAI error object (the answer, or the stream's last
 * line) with a status that is not 200. */
static bool run_chat(struct outcome *o, struct web_state *st, int endpoint, const char *body, bool stream, char *text,
                     size_t cap, bool refused) {
    struct web_job *j = wgllm_web_openai(st, endpoint, body, (int)strlen(body), "tiny");
    if (!j) {
        if (!wgllm_web_last_error()[0]) problem(o, "wgllm_web_openai returned NULL without a message");
        return false;
    }
    static char streamed[1 << 16];
    size_t n_streamed = 0;
    int steps = 0;
    while (!wgllm_web_job_done(j) && steps++ < MAX_STEPS) {
        wgllm_web_step(st, j);
        int len;
        const char *t = wgllm_web_job_take(j, &len); /* as JS takes them between steps */
        if (len > 0 && n_streamed + (size_t)len < sizeof streamed) memcpy(streamed + n_streamed, t, (size_t)len), n_streamed += (size_t)len;
    }
    int len;
    const char *t = wgllm_web_job_take(j, &len);
    if (len > 0 && n_streamed + (size_t)len < sizeof streamed) memcpy(streamed + n_streamed, t, (size_t)len), n_streamed += (size_t)len;
    bool ok = false;
    if (!wgllm_web_job_done(j)) {
        problem(o, "a chat job still not done after %d steps", MAX_STEPS);
        wgllm_web_job_cancel(j);
        while (!wgllm_web_job_done(j) && steps++ < 2 * MAX_STEPS) wgllm_web_step(st, j);
        if (!wgllm_web_job_done(j)) return false; /* leaked: cannot be freed while running */
    } else {
        const int http = (int)wgllm_web_job_num(j, 11), status = (int)wgllm_web_job_num(j, 0);
        const char *answer = wgllm_web_job_answer(j);
        char end[512];
        last_line(streamed, n_streamed, end, sizeof end);
        if (http == 200 && status == 0 && refused) {
            problem(o, "a request with max_tokens -3 was answered");
        } else if (http == 200 && status == 0) {
            /* a whole answer holds the choices; a stream ends with its usage chunk after the finish chunk */
            if (!stream && !strstr(answer, "\"choices\""))
                problem(o, "a whole chat ended well but its answer is \"%.200s\"", answer);
            else if (stream && (answer[0] || !strstr(streamed, "\"finish_reason\":\"length\"") || !strstr(end, "\"usage\"")))
                problem(o, "a stream ended well but its chunks end with \"%.200s\" (answer \"%.100s\")", end, answer);
            else
                ok = true;
            snprintf(text, cap, "%s", wgllm_web_job_text(j));
            if (stream) snprintf(o->stream_end, sizeof o->stream_end, "%s", end);
        } else {
            const char *err = stream && !answer[0] ? end : answer;
            if (http == 200 || http < 400 || !strstr(err, "\"error\"") || !strstr(err, "\"message\":\"") ||
                strstr(err, "\"message\":\"\""))
                problem(o, "a failed chat (HTTP %d, status %d, message \"%s\") says \"%.200s\"", http, status,
                        wgllm_web_job_message(j), err);
            /* the refusal itself, or (out of memory) a 500 that says so: clear either way */
            if (refused) ok = http == 400 && strstr(err, "max_tokens") != NULL;
        }
    }
    wgllm_web_job_free(j);
    return ok;
}

/* A job of the other kinds (done at once in this build): ok, or a clear error. */
static bool job_result(struct outcome *o, struct web_job *j, const char *what) {
    if (!j) {
        if (!wgllm_web_last_error()[0]) problem(o, "%s returned NULL without a message", what);
        return false;
    }
    if (!wgllm_web_job_done(j)) {
        problem(o, "%s is not done in the single-threaded build", what);
        return false;
    }
    const bool ok = wgllm_web_job_num(j, 0) == 0;
    if (!ok && !wgllm_web_job_message(j)[0]) problem(o, "%s failed without a message", what);
    return ok;
}

static const char *model_path;

static void run_sequence(struct outcome *o, long fault) {
    memset(o, 0, sizeof *o);
    g_error[0] = 0;
    atomic_store(&n_alloc, 0);
    atomic_store(&fail_at, fault);
    atomic_store(&counting, true);
    o->ran[OP_LOAD] = true;
    struct web_state *st = wgllm_web_load(model_path, 1, 64, 1, TEMPLATE);
    if (!st) {
        snprintf(o->load_error, sizeof o->load_error, "%s", wgllm_web_last_error());
        if (!wgllm_web_last_error()[0]) problem(o, "wgllm_web_load returned NULL without a message");
    } else {
        o->ok[OP_LOAD] = true;
        o->ran[OP_STREAM] = o->ran[OP_WHOLE] = o->ran[OP_EMBED] = o->ran[OP_EXPORT] = true;
        o->ran[OP_COMPLETE] = o->ran[OP_REFUSED] = true;
        o->ok[OP_STREAM] = run_chat(o, st, WGLLM_OPENAI_CHAT, BODY_STREAM, true, o->text[0], sizeof o->text[0], false);
        o->ok[OP_WHOLE] = run_chat(o, st, WGLLM_OPENAI_CHAT, BODY_WHOLE, false, o->text[1], sizeof o->text[1], false);
        o->ok[OP_COMPLETE] =
            run_chat(o, st, WGLLM_OPENAI_COMPLETIONS, BODY_COMPLETE, true, o->text[2], sizeof o->text[2], false);
        o->ok[OP_REFUSED] = run_chat(o, st, WGLLM_OPENAI_CHAT, BODY_REFUSED, false, NULL, 0, true);
        struct web_job *j = wgllm_web_embed(st, EMBED_TEXT, (int)strlen(EMBED_TEXT), WGLLM_POOLING_MEAN, 1);
        if ((o->ok[OP_EMBED] = job_result(o, j, "an embedding"))) {
            o->n_vec = (int)wgllm_web_job_num(j, 10);
            if (o->n_vec > 0 && o->n_vec <= 256) memcpy(o->vec, wgllm_web_job_vec(j), sizeof(float) * (size_t)o->n_vec);
        }
        wgllm_web_job_free(j);
        j = wgllm_web_snapshots(st, 0, NULL, 0);
        if ((o->ok[OP_EXPORT] = job_result(o, j, "a snapshot export"))) {
            int len;
            const void *blob = wgllm_web_job_blob(j, &len);
            o->ran[OP_IMPORT] = true;
            struct web_job *k = wgllm_web_snapshots(st, 1, blob, len);
            o->ok[OP_IMPORT] = job_result(o, k, "a snapshot import");
            wgllm_web_job_free(k);
        }
        wgllm_web_job_free(j);
        /* a decision: the reference's (local: logprobs refuses the remote), or one whose refusals say why */
        o->ran[OP_ROUTE] = true;
        char *dec = wgllm_web_route(st, WGLLM_OPENAI_CHAT, BODY_ROUTE, (int)strlen(BODY_ROUTE), ROUTE_TARGETS,
                                    (int)strlen(ROUTE_TARGETS));
        if (!dec && !wgllm_web_last_error()[0]) problem(o, "wgllm_web_route returned NULL without a message");
        o->ok[OP_ROUTE] = dec && strstr(dec, "\"name\":\"r\",\"target\":\"here\"") && strstr(dec, "\"latency_ms\":400") &&
                          strstr(dec, "\"refused\":\"'logprobs' is not forwarded"); /* local-only: the remote is out */
        if (dec && !o->ok[OP_ROUTE] && !strstr(dec, "\"refused\":\"")) problem(o, "a route decision without its reason: %.300s", dec);
        free(dec);
        wgllm_web_unload(st);
    }
    /* a load that fails (no such file) on its own pthread: its error must still say why */
    o->ran[OP_BAD_LOAD] = true;
    struct web_load *l = wgllm_web_load_start("/nonexistent/model.gguf", 1, 256, 1, TEMPLATE, WGLLM_BACKEND_CPU);
    if (!l) {
        if (!wgllm_web_last_error()[0]) problem(o, "wgllm_web_load_start returned NULL without a message");
    } else {
        const struct timespec ms = {0, 1000000};
        for (int i = 0; !wgllm_web_load_done(l) && i < 10000; i++) nanosleep(&ms, NULL);
        if (!wgllm_web_load_done(l)) {
            problem(o, "a failing load did not end in 10 s");
        } else {
            struct web_state *bad = wgllm_web_load_finish(l);
            if (bad) {
                problem(o, "a load of a missing file succeeded");
                wgllm_web_unload(bad);
            } else if (!strstr(wgllm_web_last_error(), "model.gguf") && !strstr(wgllm_web_last_error(), "memory")) {
                problem(o, "a failing load says \"%s\"", wgllm_web_last_error());
            }
        }
    }
    atomic_store(&counting, false);
    atomic_store(&fail_at, 0);
}

/* Differences from the reference: every call that succeeded must give its result. */
static bool same_results(const struct outcome *ref, const struct outcome *o, char *why, size_t cap) {
    if (o->ok[OP_STREAM] && strcmp(o->text[0], ref->text[0])) {
        snprintf(why, cap, "the streamed chat gave \"%s\", not \"%s\"", o->text[0], ref->text[0]);
        return false;
    }
    if (o->ok[OP_WHOLE] && strcmp(o->text[1], ref->text[1])) {
        snprintf(why, cap, "the whole chat gave \"%s\", not \"%s\"", o->text[1], ref->text[1]);
        return false;
    }
    if (o->ok[OP_COMPLETE] && strcmp(o->text[2], ref->text[2])) {
        snprintf(why, cap, "the completion gave \"%s\", not \"%s\"", o->text[2], ref->text[2]);
        return false;
    }
    if (o->ok[OP_EMBED] && (o->n_vec != ref->n_vec || memcmp(o->vec, ref->vec, sizeof(float) * (size_t)ref->n_vec))) {
        snprintf(why, cap, "the embedding differs (%d floats, want %d)", o->n_vec, ref->n_vec);
        return false;
    }
    return true;
}

static bool all_ok(const struct outcome *o) {
    for (int i = 0; i < N_OPS; i++)
        if (i != OP_BAD_LOAD && !o->ok[i]) return false;
    return !o->problem;
}

/* Lines of web/src/wgllm_web.c that call malloc, calloc, realloc or strdup
 * in what a native build compiles (outside the __EMSCRIPTEN__ and
 * __EMSCRIPTEN_PTHREADS__ branches), so that a new allocation in the glue
 * that the sequence does not reach fails this test. -1 when unreadable. */
static int glue_alloc_lines(int *out, int cap) {
    FILE *f = fopen("web/src/wgllm_web.c", "r");
    if (!f) f = fopen("../web/src/wgllm_web.c", "r");
    if (!f) return -1;
    bool active[32] = {true};
    int depth = 0, n = 0, line = 0;
    char buf[1024];
    while (fgets(buf, sizeof buf, f)) {
        line++;
        const char *t = buf + strspn(buf, " \t");
        const bool emsc = strstr(t, "__EMSCRIPTEN") != NULL; /* undefined natively */
        if (!strncmp(t, "#if", 3) && depth < 31) {
            const bool on = !emsc ? true : !strncmp(t, "#ifndef", 7);
            active[depth + 1] = active[depth] && on;
            depth++;
        } else if (!strncmp(t, "#else", 5) && depth > 0) {
            active[depth] = active[depth - 1] && !active[depth];
        } else if (!strncmp(t, "#endif", 6) && depth > 0) {
            depth--;
        } else if (active[depth] && t[0] != '*' && t[0] != '/' && t[0] != '#' &&
                   (strstr(t, "malloc(") || strstr(t, "calloc(") || strstr(t, "realloc(") || strstr(t, "strdup(")) &&
                   n < cap) {
            out[n++] = line;
        }
    }
    fclose(f);
    return n;
}

static bool leak_check(void) {
#if HAVE_LSAN
    return __lsan_do_recoverable_leak_check() == 0;
#else
    return true;
#endif
}

/* The reference run's record of each allocation (glue line, caller). */
static int *ref_sites;
static void **ref_callers;
static long ref_total;
static struct outcome ref;

struct sweep {
    long points, absorbed, glue_points, problems;
    int glue_lines[64], n_glue_lines;
};

/* One pass over the fault points: every glue allocation, every stride-th
 * one of the core's, and the one past the end (which must run clean). With
 * rest, every allocation from the point on fails too (memory that stays
 * exhausted: the error paths must not need any). */
static void sweep(bool rest, long stride, struct sweep *w) {
    static struct outcome o, again;
    const bool verbose = getenv("WGLLM_FAULT_VERBOSE") != NULL;
    const char *mode = rest ? "from allocation" : "allocation";
    memset(w, 0, sizeof *w);
    fail_rest = rest;
    for (long n = 1; n <= ref_total + 1; n++) {
        const bool glue = n <= ref_total && ref_sites[n] != 0;
        if (!glue && n % stride != 0 && n != ref_total + 1) continue;
        run_sequence(&o, n);
        w->points++;
        char why[700] = "";
        const bool reached = atomic_load(&n_alloc) >= n;
        if (o.problem || !same_results(&ref, &o, why, sizeof why) || !leak_check()) {
            if (++w->problems <= 10) {
                fprintf(stderr, "  %s %ld on (glue line %d): %s\n", mode, n, ref_sites[n < MAX_ALLOCS ? n : 0],
                        o.problem ? o.why : why[0] ? why : "a leak (above)");
                print_caller("failing", n, ref_callers);
            }
        }
        if (glue) {
            w->glue_points++;
            bool seen = false;
            for (int i = 0; i < w->n_glue_lines; i++) seen |= w->glue_lines[i] == ref_sites[n];
            if (!seen && w->n_glue_lines < 64) w->glue_lines[w->n_glue_lines++] = ref_sites[n];
        }
        if (!reached) { /* past the sequence's last allocation: it ran clean */
            CHECK(all_ok(&o));
            break;
        }
        w->absorbed += all_ok(&o); /* the core found another way (a cache left out, say) */
        if (verbose && all_ok(&o)) print_caller("absorbed", n, ref_callers);
        /* a fresh sequence after the failure still gives the reference */
        fail_rest = false;
        run_sequence(&again, 0);
        fail_rest = rest;
        if (!all_ok(&again) || !same_results(&ref, &again, why, sizeof why)) {
            if (++w->problems <= 10)
                fprintf(stderr, "  after %s %ld failed, a clean sequence: %s\n", mode, n,
                        again.problem ? again.why : why[0] ? why : "a call failed");
        }
    }
    fail_rest = false;
}

TEST(every_allocation_failure_is_a_clear_error) {
    static struct outcome o;
    site_of = __real_calloc(MAX_ALLOCS, sizeof *site_of);
    caller_of = __real_calloc(MAX_ALLOCS, sizeof *caller_of);
    ref_sites = __real_calloc(MAX_ALLOCS, sizeof *ref_sites); /* later runs overwrite site_of */
    ref_callers = __real_calloc(MAX_ALLOCS, sizeof *ref_callers);
    CHECK(site_of && caller_of && ref_sites && ref_callers);
    if (!site_of || !caller_of || !ref_sites || !ref_callers) return;
    run_sequence(&ref, 0);
    ref_total = atomic_load(&n_alloc);
    if (!all_ok(&ref)) {
        fprintf(stderr, "  the clean sequence failed: %s (load: %s)\n", ref.problem ? ref.why : "a call failed",
                ref.load_error);
        for (int i = 0; i < N_OPS; i++) fprintf(stderr, "    %s: %s\n", OP_NAMES[i], ref.ok[i] ? "ok" : "failed");
        CHECK(0);
        return;
    }
    CHECK(ref.text[0][0] && ref.text[1][0] && ref.text[2][0] && ref.n_vec == 256);
    CHECK(ref_total < MAX_ALLOCS);
    memcpy(ref_sites, site_of, sizeof *ref_sites * (size_t)WGLLM_MIN(ref_total + 1, MAX_ALLOCS));
    memcpy(ref_callers, caller_of, sizeof *ref_callers * (size_t)WGLLM_MIN(ref_total + 1, MAX_ALLOCS));
    /* the same sequence again: its allocations must be the same ones, or the points mean nothing */
    run_sequence(&o, 0);
    CHECK_EQ_INT(atomic_load(&n_alloc), ref_total);

    /* one allocation fails; then memory that stays exhausted (every 4th point: the second pass
     * costs as much as the first, and most of its points repeat the first's error paths) */
    const char *s = getenv("WGLLM_FAULT_STRIDE");
    const long stride = s && atol(s) > 0 ? atol(s) : 1, rest_stride = 4 * stride;
    struct sweep one, rest;
    sweep(false, stride, &one);
    sweep(true, rest_stride, &rest);
    CHECK_EQ_INT(one.problems, 0);
    CHECK_EQ_INT(rest.problems, 0);
    /* every allocation call the glue compiles natively was failed at least once */
    int src_lines[64];
    const int n_src = glue_alloc_lines(src_lines, 64);
    CHECK(n_src > 0);
    for (int i = 0; i < n_src; i++) {
        bool hit = false;
        for (int k = 0; k < one.n_glue_lines; k++) hit |= one.glue_lines[k] == src_lines[i];
        if (!hit) fprintf(stderr, "  web/src/wgllm_web.c:%d allocates, but the sequence never reached it\n", src_lines[i]);
        CHECK(hit);
    }
    printf("test_web_faults: %ld allocations in a sequence; one failing: %ld points (stride %ld), %ld of them the "
           "glue's own at %d of its %d call sites, %ld absorbed (every result still given); all failing from a "
           "point on: %ld points (stride %ld), %ld absorbed\n",
           ref_total, one.points, stride, one.glue_points, one.n_glue_lines, n_src, one.absorbed, rest.points,
           rest_stride, rest.absorbed);
    CHECK_EQ_INT(one.n_glue_lines, n_src);
    free(ref_sites), free(ref_callers), free(site_of), free(caller_of);
    ref_sites = NULL, ref_callers = NULL, site_of = NULL, caller_of = NULL;
}

/* A vocabulary of the 256 bytes and BOS/EOS (byte-level BPE, no merge that
 * applies): the sequence's cost is then the glue's and the engine's, not
 * the sampling over 32000 logits and the hashing of 32000 tokens, which
 * under ASan would make the hundreds of sequences below minutes. */
static const char *byte_vocab_path(void) {
    static char bytes[256][4];
    const char *texts[258];
    int32_t types[258];
    for (int b = 0; b < 256; b++) {
        test_gpt2_byte_text(b, bytes[b]);
        texts[b] = bytes[b], types[b] = WGLLM_TOKEN_TYPE_NORMAL;
    }
    texts[256] = "<s>", texts[257] = "</s>";
    types[256] = types[257] = WGLLM_TOKEN_TYPE_CONTROL;
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.name", "bytes");
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "deepseek-coder"); /* regexes compiled at load: their allocations fail too */
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, 258);
    wgllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", WGLLM_GGUF_TYPE_INT32, types, 258);
    const char *merges[] = {"\x01 \x02"}; /* the bytes' symbols are other codepoints: never applies */
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    wgllm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    wgllm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 257);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_gguf_writer_write(w, path, NULL, NULL, &err);
    wgllm_gguf_writer_free(w);
    if (st) fprintf(stderr, "  byte vocabulary: %s\n", err.message);
    return st ? NULL : path;
}

int main(void) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny";
    sp.type = WGLLM_TYPE_Q4_0;
    sp.n_layer = 1;
    char vocab[512];
    const char *vp = byte_vocab_path();
    if (vp) snprintf(vocab, sizeof vocab, "%s", vp); /* test_tmp_path's buffer is reused by the next call */
    sp.vocab_path = vp ? vocab : NULL;
    if (!vp || !(model_path = test_synth_path(&sp))) {
        printf("test_web_faults: cannot write the synthetic model\n");
        return 1; /* a setup that fails is a failure */
    }
    RUN(every_allocation_failure_is_a_clear_error);
    remove(model_path);
    remove(vocab);
    return test_summary("test_web_faults");
}
