/*
 * http.c - the client's transport: one JSON POST (or a GET) over libcurl, the answer
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
#include <strings.h>

#include "wgllm_tools.h"

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* ---- SSE framing ---------------------------------------------------------- */

void wgllm_sse_init(struct wgllm_sse *p, wgllm_http_event_fn on_event, void *user) {
    memset(p, 0, sizeof(*p));
    p->on_event = on_event;
    p->user = user;
    p->event_limit = WGLLM_HTTP_EVENT_LIMIT;
    p->total_limit = WGLLM_HTTP_BODY_LIMIT;
}

void wgllm_sse_free(struct wgllm_sse *p) {
    wgllm_strbuf_free(&p->buf);
    p->scan = 0;
}

/* Hands one event (ev[0..ev_len)) to on_event: its data lines joined by "\n"
 * as SSE says; an event without data (a comment, a keep-alive) is skipped. */
static bool sse_emit(struct wgllm_sse *p, const char *ev, size_t ev_len) {
    char *data = malloc(ev_len + 1);
    if (!data) {
        p->oom = true;
        return false;
    }
    size_t dn = 0;
    bool any = false;
    const char *q = ev, *e = ev + ev_len;
    while (q < e) {
        const char *nl = memchr(q, '\n', (size_t)(e - q));
        const char *le = nl ? nl : e;
        size_t ll = (size_t)(le - q);
        if (ll && q[ll - 1] == '\r') ll--;
        if (ll >= 5 && !memcmp(q, "data:", 5)) {
            const char *v = q + 5;
            size_t vl = ll - 5;
            if (vl && *v == ' ') v++, vl--;
            if (any) data[dn++] = '\n';
            memcpy(data + dn, v, vl);
            dn += vl;
            any = true;
        }
        q = nl ? nl + 1 : e;
    }
    data[dn] = 0;
    const bool keep = !any || p->on_event(data, dn, p->user);
    free(data);
    if (!keep) p->aborted = true;
    return keep;
}

/* Appends the new bytes, then hands over every complete event (one ends at a
 * blank line: "\n\n" or "\n\r\n"). The search resumes where the previous
 * one stopped, so an event that arrives in many pieces is scanned once. */
bool wgllm_sse_feed(struct wgllm_sse *p, const char *data, size_t n) {
    if (p->aborted || p->too_big || p->oom) return false;
    p->total += n;
    if (p->total > p->total_limit) {
        p->too_big = true;
        return false;
    }
    while (n > 0) {
        /* copy at most what keeps the pending event within its limit (+2 for the blank line) */
        size_t room = p->event_limit + 2 > p->buf.len ? p->event_limit + 2 - p->buf.len : 0;
        size_t k = n < room ? n : room;
        if (k == 0) {
            p->too_big = true;
            return false;
        }
        if (!wgllm_strbuf_put(&p->buf, data, k)) {
            p->oom = true;
            return false;
        }
        char *b = p->buf.data;
        const size_t len = p->buf.len;
        data += k;
        n -= k;
        size_t start = 0, i = p->scan;
        while (i + 1 < len) {
            size_t skip = 0;
            if (b[i] == '\n' && b[i + 1] == '\n') skip = 2;
            else if (b[i] == '\n' && b[i + 1] == '\r' && i + 2 < len && b[i + 2] == '\n') skip = 3;
            else if (b[i] == '\n' && b[i + 1] == '\r' && i + 2 == len) break; /* "\n\r" + more to come */
            if (!skip) {
                i++;
                continue;
            }
            if (!sse_emit(p, b + start, i - start)) return false; /* the event is buf[start..i) */
            start = i + skip;
            i = start;
        }
        if (start > 0) {
            memmove(b, b + start, len - start);
            p->buf.len = len - start;
            b[p->buf.len] = 0;
            i -= start;
        }
        p->scan = i;
        if (p->buf.len > p->event_limit) {
            p->too_big = true;
            return false;
        }
    }
    return true;
}

/* ---- one POST --------------------------------------------------------------- */

struct xfer {
    CURL *curl;
    wgllm_http_event_fn on_event;
    void *user;
    struct wgllm_sse sse; /* a 2xx answer to a streaming request */
    struct wgllm_strbuf body; /* otherwise the whole body (limit WGLLM_HTTP_BODY_LIMIT - 1) */
    bool is_sse, decided;
};

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    struct xfer *x = ud;
    size_t bytes = size * n;
    if (!x->decided) {
        /* decide once, on the first bytes: stream only a successful answer */
        long status = 0;
        const char *ctype = NULL;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(x->curl, CURLINFO_CONTENT_TYPE, &ctype);
        /* a server that answers a streaming request with one JSON object is read whole */
        x->is_sse = x->on_event && status >= 200 && status < 300 &&
                    !(ctype && !strncasecmp(ctype, "application/json", 16));
        x->decided = true;
    }
    if (x->is_sse) return wgllm_sse_feed(&x->sse, p, bytes) ? bytes : 0;
    return wgllm_strbuf_put(&x->body, p, bytes) ? bytes : 0;
}

/* One request: a POST of json, or a GET when json is NULL. */
static enum wgllm_status perform(const char *url, const char *bearer, const char *json, int timeout_s,
                                 wgllm_http_event_fn on_event, void *user, struct wgllm_http_reply *reply,
                                 struct wgllm_error *err) {
    memset(reply, 0, sizeof(*reply));
    pthread_once(&g_curl_once, curl_once);
    CURL *curl = curl_easy_init();
    if (!curl) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "http: curl_easy_init failed");
    struct xfer x = {.curl = curl, .on_event = on_event, .user = user, .body.limit = WGLLM_HTTP_BODY_LIMIT - 1};
    wgllm_sse_init(&x.sse, on_event, user);
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
    if (json) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(json));
    }
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)(timeout_s > 0 ? timeout_s : 600));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long)(timeout_s > 0 && timeout_s < 30 ? timeout_s : 30));
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "wgllm-client");
    /* an announced body over the limit is refused before any of it arrives */
    curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)WGLLM_HTTP_BODY_LIMIT);
    /* plain http to a local gateway must not go through a proxy set for the internet */
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(curl);
    enum wgllm_status st = WGLLM_STATUS_OK;
    if (x.sse.aborted) {
        reply->aborted = true;
    } else if (x.sse.too_big && x.sse.total > x.sse.total_limit) {
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: the stream from %.200s carried more than %zu MiB", url,
                             x.sse.total_limit >> 20);
    } else if (x.sse.too_big) {
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: %.200s sent one event larger than %zu MiB", url,
                             x.sse.event_limit >> 20);
    } else if (x.body.over || rc == CURLE_FILESIZE_EXCEEDED) {
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: the answer from %.200s is larger than %zu MiB", url,
                             WGLLM_HTTP_BODY_LIMIT >> 20);
    } else if (x.body.oom || x.sse.oom) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "http: out of memory reading the answer from %.200s", url);
    } else if (rc != CURLE_OK) {
        reply->failed = true;
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "http: %s %.200s failed: %.200s", json ? "POST" : "GET", url,
                             cerr[0] ? cerr : curl_easy_strerror(rc));
    }
    reply->streamed = x.is_sse;
    if (st == WGLLM_STATUS_OK && !x.is_sse) {
        reply->body_len = x.body.len;
        reply->body = wgllm_strbuf_take(&x.body);
    }
    wgllm_strbuf_free(&x.body);
    wgllm_sse_free(&x.sse);
    return st;
}

enum wgllm_status wgllm_http_post(const char *url, const char *bearer, const char *json, int timeout_s,
                                  wgllm_http_event_fn on_event, void *user, struct wgllm_http_reply *reply,
                                  struct wgllm_error *err) {
    return perform(url, bearer, json ? json : "", timeout_s, on_event, user, reply, err);
}

enum wgllm_status wgllm_http_get(const char *url, const char *bearer, int timeout_s, struct wgllm_http_reply *reply,
                                 struct wgllm_error *err) {
    return perform(url, bearer, NULL, timeout_s, NULL, NULL, reply, err);
}

void wgllm_http_reply_free(struct wgllm_http_reply *r) {
    free(r->body);
    memset(r, 0, sizeof(*r));
}
