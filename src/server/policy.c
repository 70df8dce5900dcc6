/*
 * policy.c - `wgllm serve --api-key-file`: several API keys, each a tenant
 * with the models (local or --upstream names) it may use, rate limits in
 * requests and tokens per minute, and its own KV cache partition, so that
 * prefix reuse and cached_tokens never cross tenants.
 *
 * The file is JSON: {"keys": [{"name": "alice", "key": "..." | "key_env":
 * "VAR", "models": ["..."], "requests_per_minute": N, "tokens_per_minute":
 * N}, ...]}. Names are unique and keys distinct; a key may come from the
 * environment so that the file holds none.
 *
 * Limits are token buckets refilled continuously (a full bucket is one
 * minute's worth): a request takes one request token when it starts, and
 * its prompt and generated tokens are charged when it ends, so one large
 * answer may take the token bucket below zero and the next request waits
 * until it refills. A refusal is 429 with Retry-After: the seconds until the
 * bucket that refused allows one more request.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgllm_tools.h"

struct srv_tenant {
    char *name, *key;
    char **models; /* NULL: every model */
    int n_models;
    double rpm, tpm;      /* 0 = no limit */
    double req_bucket, tok_bucket;
    int64_t refilled_us;
    uint64_t requests, limited, tokens;
};

struct srv_policy {
    pthread_mutex_t mu;
    struct srv_tenant *t;
    int n;
};

void srv_policy_free(struct srv_policy *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        free(p->t[i].name);
        free(p->t[i].key);
        for (int k = 0; k < p->t[i].n_models; k++) free(p->t[i].models[k]);
        free(p->t[i].models);
    }
    free(p->t);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static bool fail(char *msg, size_t cap, const char *fmt, const char *a, int i) {
    char what[160];
    snprintf(what, sizeof what, fmt, a);
    snprintf(msg, cap, "keys[%d]: %s", i, what);
    return false;
}

static bool limit_of(const cJSON *o, const char *name, double *out, char *msg, size_t cap, int i) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e12 || isnan(v->valuedouble))
        return fail(msg, cap, "'%s' must be a number of 0 (no limit) or more", name, i);
    *out = v->valuedouble;
    return true;
}

static bool tenant_of(const cJSON *o, struct srv_tenant *t, int i, char *msg, size_t cap) {
    static const char *const FIELDS[] = {"name", "key", "key_env", "models", "requests_per_minute",
                                         "tokens_per_minute", NULL};
    if (!cJSON_IsObject(o)) return fail(msg, cap, "must be an object%s", "", i);
    for (const cJSON *f = o->child; f; f = f->next) {
        bool known = false;
        for (int k = 0; FIELDS[k] && !known; k++) known = !strcmp(f->string, FIELDS[k]);
        if (!known) return fail(msg, cap, "unknown field '%.60s'", f->string, i);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *key = cJSON_GetObjectItemCaseSensitive(o, "key");
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "key_env");
    if (!cJSON_IsString(name) || !*name->valuestring) return fail(msg, cap, "needs a 'name'%s", "", i);
    if (!!key == !!env) return fail(msg, cap, "needs exactly one of 'key' and 'key_env'%s", "", i);
    const char *k = NULL;
    if (key) {
        if (!cJSON_IsString(key)) return fail(msg, cap, "'key' must be a string%s", "", i);
        k = key->valuestring;
    } else {
        if (!cJSON_IsString(env)) return fail(msg, cap, "'key_env' must be a string%s", "", i);
        k = getenv(env->valuestring);
        if (!k) return fail(msg, cap, "the environment variable %.60s (its key) is not set", env->valuestring, i);
    }
    /* a short key can be guessed; an empty one would open the server */
    if (strlen(k) < 8) return fail(msg, cap, "the key must have 8 characters or more%s", "", i);
    t->name = strdup(name->valuestring);
    t->key = strdup(k);
    if (!t->name || !t->key) return fail(msg, cap, "out of memory%s", "", i);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(o, "models");
    if (models) {
        if (!cJSON_IsArray(models)) return fail(msg, cap, "'models' must be an array of names%s", "", i);
        const int n = cJSON_GetArraySize(models);
        t->models = calloc((size_t)n + 1, sizeof *t->models);
        if (!t->models) return fail(msg, cap, "out of memory%s", "", i);
        const cJSON *m;
        cJSON_ArrayForEach(m, models) {
            if (!cJSON_IsString(m)) return fail(msg, cap, "'models' must be an array of names%s", "", i);
            if (!(t->models[t->n_models] = strdup(m->valuestring))) return fail(msg, cap, "out of memory%s", "", i);
            t->n_models++;
        }
    }
    if (!limit_of(o, "requests_per_minute", &t->rpm, msg, cap, i) || !limit_of(o, "tokens_per_minute", &t->tpm, msg, cap, i))
        return false;
    t->req_bucket = t->rpm;
    t->tok_bucket = t->tpm;
    t->refilled_us = wgllm_time_us();
    return t->name && t->key;
}

struct srv_policy *srv_policy_load(const char *path, char *msg, size_t cap) {
    char *text = NULL;
    struct wgllm_error err = {0};
    if (wgllm_read_file(path, SRV_POLICY_MAX_BYTES, &text, NULL, &err) != WGLLM_STATUS_OK) {
        snprintf(msg, cap, "%s", err.message);
        return NULL;
    }
    struct srv_policy *p = srv_policy_parse(text, msg, cap);
    free(text);
    return p;
}

struct srv_policy *srv_policy_parse(const char *text, char *msg, size_t cap) {
    cJSON *root = cJSON_Parse(text);
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(root, "keys");
    struct srv_policy *p = calloc(1, sizeof *p);
    bool ok = p != NULL;
    if (!ok) snprintf(msg, cap, "out of memory");
    else pthread_mutex_init(&p->mu, NULL);
    if (ok && (!cJSON_IsArray(keys) || cJSON_GetArraySize(keys) == 0)) {
        snprintf(msg, cap, "expected a JSON object {\"keys\": [{\"name\", \"key\" or \"key_env\", ...}, ...]}");
        ok = false;
    }
    if (ok) ok = (p->t = calloc((size_t)cJSON_GetArraySize(keys), sizeof *p->t)) != NULL;
    const cJSON *o, *list = ok ? keys : NULL;
    int i = 0;
    cJSON_ArrayForEach(o, list) {
        p->n = i + 1;
        if (!(ok = tenant_of(o, &p->t[i], i, msg, cap))) break;
        for (int j = 0; j < i && ok; j++) {
            if (!strcmp(p->t[j].name, p->t[i].name)) ok = fail(msg, cap, "the name '%.60s' is used twice", p->t[i].name, i);
            else if (!strcmp(p->t[j].key, p->t[i].key)) ok = fail(msg, cap, "has the same key as '%.60s'", p->t[j].name, i);
        }
        if (!ok) break;
        i++;
    }
    cJSON_Delete(root);
    if (!ok) {
        srv_policy_free(p);
        return NULL;
    }
    return p;
}

bool srv_same_secret(const char *a, const char *b) {
    const size_t n = strlen(a), m = strlen(b);
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)a[i] ^ (unsigned char)b[m ? i % m : 0];
    return diff == 0;
}

int srv_policy_tenant(const struct srv_policy *p, const char *key) {
    int found = -1;
    for (int i = 0; key && i < p->n; i++) /* every key compared: the time does not tell which matched */
        if (srv_same_secret(key, p->t[i].key)) found = i;
    return found;
}

const char *srv_policy_name(const struct srv_policy *p, int tenant) {
    return p && tenant >= 0 && tenant < p->n ? p->t[tenant].name : NULL;
}

bool srv_policy_allows(const struct srv_policy *p, int tenant, const char *model) {
    if (!p || tenant < 0) return true;
    const struct srv_tenant *t = &p->t[tenant];
    if (!t->models) return true;
    for (int i = 0; i < t->n_models; i++)
        if (model && !strcmp(t->models[i], model)) return true;
    return false;
}

static void refill(struct srv_tenant *t, int64_t now) {
    const double minutes = (double)(now - t->refilled_us) / 60e6;
    t->refilled_us = now;
    if (t->rpm > 0) t->req_bucket = fmin(t->rpm, t->req_bucket + minutes * t->rpm);
    if (t->tpm > 0) t->tok_bucket = fmin(t->tpm, t->tok_bucket + minutes * t->tpm);
}

int srv_policy_admit(struct srv_policy *p, int tenant) {
    if (!p || tenant < 0) return 0;
    pthread_mutex_lock(&p->mu);
    struct srv_tenant *t = &p->t[tenant];
    refill(t, wgllm_time_us());
    double wait_min = 0;
    if (t->rpm > 0 && t->req_bucket < 1) wait_min = (1 - t->req_bucket) / t->rpm;
    if (t->tpm > 0 && t->tok_bucket < 1) wait_min = fmax(wait_min, (1 - t->tok_bucket) / t->tpm);
    int retry = 0;
    if (wait_min > 0) {
        retry = (int)fmin(ceil(wait_min * 60), 86400);
        if (retry < 1) retry = 1;
        t->limited++;
    } else {
        if (t->rpm > 0) t->req_bucket -= 1;
        t->requests++;
    }
    pthread_mutex_unlock(&p->mu);
    return retry;
}

void srv_policy_charge(struct srv_policy *p, int tenant, int tokens) {
    if (!p || tenant < 0 || tokens <= 0) return;
    pthread_mutex_lock(&p->mu);
    struct srv_tenant *t = &p->t[tenant];
    refill(t, wgllm_time_us());
    if (t->tpm > 0) t->tok_bucket -= tokens;
    t->tokens += (uint64_t)tokens;
    pthread_mutex_unlock(&p->mu);
}

void srv_policy_metrics(struct srv_policy *p, struct wgllm_strbuf *b) {
    if (!p) return;
    static const char *const NAMES[] = {"tenant_requests_total", "tenant_rate_limited_total", "tenant_tokens_total"};
    static const char *const HELP[] = {"Requests a tenant (API key) was admitted for.",
                                       "Requests of a tenant refused by its rate limits (429).",
                                       "Prompt and generated tokens charged to a tenant."};
    pthread_mutex_lock(&p->mu);
    for (int m = 0; m < 3; m++) {
        wgllm_strbuf_printf(b, "# HELP wgllm_%s %s\n# TYPE wgllm_%s counter\n", NAMES[m], HELP[m], NAMES[m]);
        for (int i = 0; i < p->n; i++) {
            const uint64_t v = m == 0 ? p->t[i].requests : m == 1 ? p->t[i].limited : p->t[i].tokens;
            wgllm_strbuf_printf(b, "wgllm_%s{tenant=\"", NAMES[m]);
            srv_metric_label(b, p->t[i].name);
            wgllm_strbuf_printf(b, "\"} %llu\n", (unsigned long long)v);
        }
    }
    pthread_mutex_unlock(&p->mu);
}
