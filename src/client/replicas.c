/*
 * replicas.c - the servers behind one remote endpoint name (base_url
 * "URL1,URL2,..."): which one a call goes to, what a failure costs it, and
 * the health checks that bring it back.
 *
 * A call goes to the replica with the fewest calls in flight among those
 * not cooling down, ties taken in turn, so that a slow server gets less and
 * the load spreads when all are equal. A replica that fails a call (no
 * connection, a reset, a timeout, a 5xx) cools down for the endpoint's
 * cooldown_s: calls skip it while another is available (when all are cooling,
 * the one whose cooldown ends first is tried rather than failing outright).
 * A health check that gets an answer (any status below 500) brings it back
 * at once; one that fails sends it to cool down. The retry decision itself (never after a piece reached
 * the caller) is client.c's: it knows what was delivered.
 */
#include "client/client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "wgllm_tools.h"

#define DEFAULT_COOLDOWN_S 10

struct wgllm_replica {
    char *url;
    int in_flight;
    int64_t cool_until_us; /* skipped before this time (wgllm_time_us), unless all are */
    bool healthy;
    uint64_t requests, failures, retries;
    double latency_ms; /* moving average of the successful calls */
};

struct wgllm_replica_set {
    pthread_mutex_t mu;
    struct wgllm_replica *v;
    int n;
    int next; /* where the turn for ties starts */
    int cooldown_s;
};

static bool url_ok(const char *u, size_t n) {
    return (n > 7 && !strncmp(u, "http://", 7)) || (n > 8 && !strncmp(u, "https://", 8));
}

enum wgllm_status wgllm_replicas_init(struct wgllm_replica_set **out, const char *name, const char *base_urls,
                                      int cooldown_s, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_replica_set *s = calloc(1, sizeof *s);
    if (!s) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->cooldown_s = cooldown_s > 0 ? cooldown_s : DEFAULT_COOLDOWN_S;
    size_t cap = 0;
    for (const char *p = base_urls;;) {
        const char *comma = strchr(p, ',');
        const size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (!url_ok(p, n)) {
            wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                            "client: endpoint '%s' needs base_url starting with http:// or https:// (got '%.*s'; "
                            "several replicas are separated by commas)",
                            name, (int)(n < 300 ? n : 300), p);
            wgllm_replicas_free(s);
            return WGLLM_STATUS_INVALID_ARGUMENT;
        }
        if (s->n >= WGLLM_CLIENT_MAX_REPLICAS) {
            wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "client: endpoint '%s' has more than %d replicas", name,
                            WGLLM_CLIENT_MAX_REPLICAS);
            wgllm_replicas_free(s);
            return WGLLM_STATUS_INVALID_ARGUMENT;
        }
        /* ".../v1/" and ".../v1" are the same base: routes are appended after one '/' */
        const size_t keep = n && p[n - 1] == '/' ? n - 1 : n;
        char *u = malloc(keep + 1);
        if (!u || !wgllm_grow((void **)&s->v, &cap, (size_t)s->n + 1, sizeof *s->v)) {
            free(u);
            wgllm_replicas_free(s);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "client: out of memory");
        }
        memcpy(u, p, keep);
        u[keep] = 0;
        s->v[s->n++] = (struct wgllm_replica){.url = u, .healthy = true};
        if (!comma) break;
        p = comma + 1;
    }
    *out = s;
    return WGLLM_STATUS_OK;
}

void wgllm_replicas_free(struct wgllm_replica_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->v[i].url);
    free(s->v);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int wgllm_replicas_count(const struct wgllm_replica_set *s) { return s ? s->n : 0; }

const char *wgllm_replicas_url(const struct wgllm_replica_set *s, int k) { return s->v[k].url; }

int wgllm_replicas_pick(struct wgllm_replica_set *s, uint64_t tried) {
    pthread_mutex_lock(&s->mu);
    const int64_t now = wgllm_time_us();
    int best = -1, best_cool = -1;
    for (int j = 0; j < s->n; j++) {
        const int k = (s->next + j) % s->n; /* in turn from `next`: the first of equals wins */
        if (tried >> k & 1) continue;
        const struct wgllm_replica *r = &s->v[k];
        if (r->cool_until_us > now) {
            if (best_cool < 0 || r->cool_until_us < s->v[best_cool].cool_until_us) best_cool = k;
        } else if (best < 0 || r->in_flight < s->v[best].in_flight) {
            best = k;
        }
    }
    if (best < 0) best = best_cool;
    if (best >= 0) {
        s->v[best].in_flight++;
        s->v[best].requests++;
        s->next = (best + 1) % s->n;
    }
    pthread_mutex_unlock(&s->mu);
    return best;
}

void wgllm_replicas_done(struct wgllm_replica_set *s, int k, bool ok, bool retried, double ms) {
    pthread_mutex_lock(&s->mu);
    struct wgllm_replica *r = &s->v[k];
    r->in_flight--;
    if (ok) {
        r->healthy = true;
        r->cool_until_us = 0;
        r->latency_ms = r->latency_ms > 0 ? 0.8 * r->latency_ms + 0.2 * ms : ms;
    } else {
        r->healthy = false;
        r->failures++;
        r->cool_until_us = wgllm_time_us() + (int64_t)s->cooldown_s * 1000000;
    }
    if (retried) r->retries++;
    pthread_mutex_unlock(&s->mu);
}

int wgllm_replicas_check(struct wgllm_replica_set *s, const char *bearer, int timeout_s, const atomic_bool *stop) {
    int failed = 0;
    for (int k = 0; k < s->n && !(stop && atomic_load(stop)); k++) {
        /* the URL is fixed after init: read it without the lock, which a slow check must not hold */
        char url[2100];
        snprintf(url, sizeof url, "%.2000s/models", s->v[k].url);
        struct wgllm_http_reply r;
        struct wgllm_error err = {0};
        const enum wgllm_status st = wgllm_http_get(url, bearer, timeout_s, &r, &err);
        /* any answer below 500 is a server that is up (a 401 is a key problem, which calls report) */
        const bool ok = st == WGLLM_STATUS_OK && r.status >= 200 && r.status < 500;
        wgllm_http_reply_free(&r);
        pthread_mutex_lock(&s->mu);
        struct wgllm_replica *rep = &s->v[k];
        rep->healthy = ok;
        if (ok) {
            rep->cool_until_us = 0;
        } else {
            rep->failures++;
            rep->cool_until_us = wgllm_time_us() + (int64_t)s->cooldown_s * 1000000;
        }
        pthread_mutex_unlock(&s->mu);
        failed += !ok;
    }
    return failed;
}

void wgllm_replicas_stats(struct wgllm_replica_set *s, int k, struct wgllm_replica_stats *out) {
    pthread_mutex_lock(&s->mu);
    const struct wgllm_replica *r = &s->v[k];
    *out = (struct wgllm_replica_stats){.url = r->url, .in_flight = r->in_flight,
                                        .cooling = r->cool_until_us > wgllm_time_us(), .healthy = r->healthy,
                                        .requests = r->requests, .failures = r->failures, .retries = r->retries,
                                        .latency_ms = r->latency_ms};
    pthread_mutex_unlock(&s->mu);
}
