/*
 * http.c - the client's transport: one JSON POST over libcurl, the answer
 * either collected whole or read as server-sent events (`data:` lines, events
 * ended by a blank line) and handed over one event at a time, so a remote
 * stream reaches on_token as it arrives.
 */
#include "client/client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* Bodies beyond this are refused rather than buffered without end. */
#define HTTP_BODY_LIMIT (64u << 20)

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

struct xfer {
    CURL *curl;
    wgllm_http_event_fn on_event;
    void *user;
    char *buf; /* whole body, or the SSE bytes not yet parsed */
    size_t len, cap;
    bool sse, aborted, too_big;
};

static bool buf_add(struct xfer *x, const char *p, size_t n) {
    if (x->len + n + 1 > x->cap) {
        if (x->len + n + 1 > HTTP_BODY_LIMIT) {
            x->too_big = true;
            return false;
        }
        size_t cap = x->cap ? x->cap * 2 : 8192;
        while (cap < x->len + n + 1) cap *= 2;
        char *q = realloc(x->buf, cap);
        if (!q) return false;
        x->buf = q;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    x->buf[x->len] = 0;
    return true;
}

/* Hands over every complete event in the buffer; keeps the unfinished rest. */
static bool sse_drain(struct xfer *x) {
    size_t start = 0;
    for (;;) {
        /* an event ends at a blank line: "\n\n" or "\r\n\r\n" */
        char *end = NULL;
        size_t skip = 0;
        for (size_t i = start; i + 1 < x->len; i++) {
            if (x->buf[i] == '\n' && x->buf[i + 1] == '\n') { end = x->buf + i; skip = 2; break; }
            if (x->buf[i] == '\n' && x->buf[i + 1] == '\r' && i + 2 < x->len && x->buf[i + 2] == '\n') {
                end = x->buf + i; skip = 3; break;
            }
        }
        if (!end) break;
        size_t ev_len = (size_t)(end - (x->buf + start));
        /* concatenate the event's data lines (joined by "\n", as SSE says) */
        char *data = malloc(ev_len + 1);
        if (!data) return false;
        size_t dn = 0;
        bool any = false;
        const char *p = x->buf + start, *e = end;
        while (p < e) {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            const char *le = nl ? nl : e;
            size_t ll = (size_t)(le - p);
            if (ll && p[ll - 1] == '\r') ll--;
            if (ll >= 5 && !memcmp(p, "data:", 5)) {
                const char *v = p + 5;
                size_t vl = ll - 5;
                if (vl && *v == ' ') v++, vl--;
                if (any) data[dn++] = '\n';
                memcpy(data + dn, v, vl);
                dn += vl;
                any = true;
            }
            p = nl ? nl + 1 : e;
        }
        data[dn] = 0;
        bool keep = !any || x->on_event(data, dn, x->user);
        free(data);
        start = (size_t)(end - x->buf) + skip;
        if (!keep) {
            x->aborted = true;
            return false;
        }
    }
    memmove(x->buf, x->buf + start, x->len - start);
    x->len -= start;
    if (x->buf) x->buf[x->len] = 0;
    return true;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    struct xfer *x = ud;
    size_t bytes = size * n;
    if (!x->sse && x->on_event) {
        /* decide once, on the first bytes: stream only a successful answer */
        long status = 0;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
        x->sse = status >= 200 && status < 300;
        if (!x->sse) x->on_event = NULL; /* an error answer is collected whole */
    }
    if (!buf_add(x, p, bytes)) return 0;
    if (x->sse && !sse_drain(x)) return 0;
    return bytes;
}

enum wgllm_status wgllm_http_post(const char *url, const char *bearer, const char *json, int timeout_s,
                                  wgllm_http_event_fn on_event, void *user, struct wgllm_http_reply *reply,
                                  struct wgllm_error *err) {
    memset(reply, 0, sizeof(*reply));
    pthread_once(&g_curl_once, curl_once);
    CURL *curl = curl_easy_init();
    if (!curl) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "http: curl_easy_init failed");
    struct xfer x = {.curl = curl, .on_event = on_event, .user = user};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, on_event ? "Accept: text/event-stream" : "Accept: application/json");
    char auth[1024];
    if (bearer && *bearer) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bearer);
        h = curl_slist_append(h, auth);
    }
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(json));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)(timeout_s > 0 ? timeout_s : 600));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "wgllm-client");
    /* plain http to a local gateway must not go through a proxy set for the internet */
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(curl);
    enum wgllm_status st = WGLLM_STATUS_OK;
    if (x.aborted) {
        reply->aborted = true;
    } else if (x.too_big) {
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: the answer from %.200s is larger than %u MiB", url,
                             HTTP_BODY_LIMIT >> 20);
    } else if (rc != CURLE_OK) {
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: POST %.200s failed: %.200s", url,
                             cerr[0] ? cerr : curl_easy_strerror(rc));
    }
    if (st == WGLLM_STATUS_OK && !x.sse) {
        reply->body = x.buf ? x.buf : calloc(1, 1);
        reply->body_len = x.len;
        x.buf = NULL;
    }
    free(x.buf);
    return st;
}

void wgllm_http_reply_free(struct wgllm_http_reply *r) {
    free(r->body);
    memset(r, 0, sizeof(*r));
}
