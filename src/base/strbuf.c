/*
 * strbuf.c - the growable string builder, the read-a-whole-file helper and
 * the generic array grower declared in strbuf.h.
 */
#include "base/strbuf.h"

#include <errno.h>

bool wgllm_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) { c = need; break; }
        c *= 2;
    }
    size_t bytes;
    void *np = wgllm_size_mul(c, elem, &bytes) ? realloc(*p, bytes ? bytes : 1) : NULL;
    if (!np) return false;
    *p = np;
    *cap = c;
    return true;
}

bool wgllm_strbuf_reserve(struct wgllm_strbuf *sb, size_t n) {
    size_t need; /* text + n + NUL */
    if (!wgllm_size_mul_add(1, sb->len, n, &need) || !wgllm_size_mul_add(1, need, 1, &need)) {
        sb->oom = true;
        return false;
    }
    if (sb->limit && need - 1 > sb->limit) {
        sb->over = true;
        return false;
    }
    if (need <= sb->cap) return true;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (sb->limit && cap > sb->limit + 1) cap = sb->limit + 1; /* >= need, checked above */
    char *p = cap <= wgllm_size_limit ? realloc(sb->data, cap) : NULL;
    if (!p) {
        sb->oom = true;
        return false;
    }
    if (!sb->data) p[0] = 0;
    sb->data = p;
    sb->cap = cap;
    return true;
}

bool wgllm_strbuf_put(struct wgllm_strbuf *sb, const void *s, size_t n) {
    if (!wgllm_strbuf_reserve(sb, n)) return false;
    if (n) memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = 0;
    return true;
}

bool wgllm_strbuf_puts(struct wgllm_strbuf *sb, const char *s) { return wgllm_strbuf_put(sb, s, strlen(s)); }

bool wgllm_strbuf_putc(struct wgllm_strbuf *sb, char c) { return wgllm_strbuf_put(sb, &c, 1); }

bool wgllm_strbuf_vprintf(struct wgllm_strbuf *sb, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    /* first try into the room already there; most appends fit */
    size_t room = sb->data ? sb->cap - sb->len : 0;
    int k = vsnprintf(room ? sb->data + sb->len : NULL, room, fmt, ap2);
    va_end(ap2);
    if (k < 0) {
        if (sb->data) sb->data[sb->len] = 0;
        sb->oom = true; /* an encoding error: treat as a lost append */
        return false;
    }
    if ((size_t)k < room) {
        if (sb->limit && sb->len + (size_t)k > sb->limit) { /* fitted in memory, not in the budget */
            sb->data[sb->len] = 0;
            sb->over = true;
            return false;
        }
        sb->len += (size_t)k;
        return true;
    }
    if (sb->data) sb->data[sb->len] = 0; /* undo the truncated attempt */
    if (!wgllm_strbuf_reserve(sb, (size_t)k)) return false;
    va_copy(ap2, ap);
    vsnprintf(sb->data + sb->len, (size_t)k + 1, fmt, ap2);
    va_end(ap2);
    sb->len += (size_t)k;
    return true;
}

bool wgllm_strbuf_printf(struct wgllm_strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool ok = wgllm_strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
    return ok;
}

char *wgllm_strbuf_take(struct wgllm_strbuf *sb) {
    char *s = sb->data ? sb->data : calloc(1, 1);
    *sb = (struct wgllm_strbuf){.limit = sb->limit};
    return s;
}

void wgllm_strbuf_clear(struct wgllm_strbuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = 0;
}

void wgllm_strbuf_free(struct wgllm_strbuf *sb) {
    free(sb->data);
    *sb = (struct wgllm_strbuf){.limit = sb->limit};
}

enum wgllm_status wgllm_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                                  struct wgllm_error *err) {
    *data = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return wgllm_error_set(err, WGLLM_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    /* fread in chunks rather than trusting a size from fseek/ftell: pipes and
     * /proc files have none, and a file may change while it is read */
    struct wgllm_strbuf sb = {.limit = max_bytes};
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (;;) {
        size_t want = 4096;
        if (max_bytes) want = max_bytes - sb.len + 1 < want ? max_bytes - sb.len + 1 : want; /* +1 sees "over" */
        if (sb.cap - sb.len < want + 1) {
            /* grow without the limit for the one probe byte past max_bytes */
            sb.limit = 0;
            bool ok = wgllm_strbuf_reserve(&sb, want);
            sb.limit = max_bytes;
            if (!ok) {
                st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", path);
                break;
            }
        }
        size_t r = fread(sb.data + sb.len, 1, want, f);
        sb.len += r;
        sb.data[sb.len] = 0;
        if (max_bytes && sb.len > max_bytes) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "'%s' is larger than %zu bytes", path, max_bytes);
            break;
        }
        if (r < want) {
            if (ferror(f)) st = wgllm_error_set(err, WGLLM_STATUS_IO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st != WGLLM_STATUS_OK) {
        wgllm_strbuf_free(&sb);
        return st;
    }
    if (len) *len = sb.len;
    *data = wgllm_strbuf_take(&sb);
    if (!*data) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    return WGLLM_STATUS_OK;
}
