/*
 * stop.c - the streaming stop-string matcher. Generated text arrives in
 * pieces; whatever could still turn into a stop string is held back, so a
 * client never sees a partial stop that later has to be taken back. The held
 * tail is never longer than the longest stop minus one byte, so each push
 * costs O((held + new) * stops).
 */
#include "base/base.h"
#include "base/strbuf.h"

struct wgllm_stop_matcher {
    char **stops;
    size_t *lens;
    int n;
    /* buf[0..emitted) was returned by the last call and is dropped at the next;
     * buf[emitted..used) is held back */
    char *buf;
    size_t used, emitted, cap;
    bool stopped;
};

void wgllm_stop_matcher_free(struct wgllm_stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->buf);
    free(m);
}

struct wgllm_stop_matcher *wgllm_stop_matcher_init(const char *const *stops, int n_stops) {
    struct wgllm_stop_matcher *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    if (!stops || n_stops < 0) n_stops = 0;
    m->stops = calloc((size_t)(n_stops > 0 ? n_stops : 1), sizeof(*m->stops));
    m->lens = calloc((size_t)(n_stops > 0 ? n_stops : 1), sizeof(*m->lens));
    m->cap = 64;
    m->buf = malloc(m->cap);
    if (!m->stops || !m->lens || !m->buf) goto fail;
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) continue; /* an empty stop would end every stream at once */
        size_t len = strlen(stops[i]);
        char *c = malloc(len + 1);
        if (!c) goto fail;
        memcpy(c, stops[i], len + 1);
        m->stops[m->n] = c;
        m->lens[m->n] = len;
        m->n++;
    }
    return m;
fail:
    wgllm_stop_matcher_free(m);
    return NULL;
}

void wgllm_stop_matcher_reset(struct wgllm_stop_matcher *m) {
    WGLLM_ASSERT(m);
    m->used = m->emitted = 0;
    m->stopped = false;
}

/* Drops what the previous call returned, keeping the held tail at the front. */
static void drop_emitted(struct wgllm_stop_matcher *m) {
    if (m->emitted) {
        memmove(m->buf, m->buf + m->emitted, m->used - m->emitted);
        m->used -= m->emitted;
        m->emitted = 0;
    }
}

static bool is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

const char *wgllm_stop_matcher_push(struct wgllm_stop_matcher *m, const char *text, size_t len, size_t *out_len,
                                    bool *stopped) {
    WGLLM_ASSERT(m && out_len && (text || len == 0));
    drop_emitted(m);
    *out_len = 0;
    if (stopped) *stopped = m->stopped;
    if (m->stopped) return m->buf;
    /* a few bytes of text that cannot be stored: nothing sensible is left to
     * do, and silently dropping generated text would be worse */
    if (!wgllm_grow((void **)&m->buf, &m->cap, m->used + len, 1))
        WGLLM_ABORT("stop matcher: out of memory for %zu bytes of text", m->used + len);
    if (len) memcpy(m->buf + m->used, text, len);
    m->used += len;
    if (m->n == 0) {
        m->emitted = m->used;
        *out_len = m->used;
        return m->buf;
    }

    /* the earliest complete stop wins; none can lie wholly inside the held
     * tail, which was checked before */
    size_t first = SIZE_MAX;
    for (int i = 0; i < m->n; i++) {
        if (m->lens[i] > m->used) continue;
        const char *hit = memmem(m->buf, m->used, m->stops[i], m->lens[i]);
        if (hit && (size_t)(hit - m->buf) < first) first = (size_t)(hit - m->buf);
    }
    if (first != SIZE_MAX) {
        m->stopped = true;
        if (stopped) *stopped = true;
        m->emitted = m->used; /* everything from the stop on is discarded */
        *out_len = first;
        return m->buf;
    }

    /* hold the longest tail that is a proper prefix of some stop */
    size_t hold = 0;
    for (int i = 0; i < m->n; i++) {
        size_t maxj = m->lens[i] - 1;
        if (maxj > m->used) maxj = m->used;
        for (size_t j = maxj; j > hold; j--) {
            if (memcmp(m->buf + m->used - j, m->stops[i], j) == 0) {
                hold = j;
                break;
            }
        }
    }
    size_t emit = m->used - hold;
    while (emit > 0 && emit < m->used && is_utf8_continuation((unsigned char)m->buf[emit])) emit--;
    m->emitted = emit;
    *out_len = emit;
    return m->buf;
}

const char *wgllm_stop_matcher_flush(struct wgllm_stop_matcher *m, size_t *out_len) {
    WGLLM_ASSERT(m && out_len);
    drop_emitted(m);
    if (m->stopped) {
        *out_len = 0;
        return m->buf;
    }
    m->emitted = m->used;
    *out_len = m->used;
    return m->buf;
}
