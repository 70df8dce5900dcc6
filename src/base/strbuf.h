/*
 * strbuf.h - the one growable string builder and the one read-a-whole-file
 * helper. Every module that builds text (JSON bodies, SSE events, metrics,
 * chat-template input) or slurps a small file uses these instead of its own
 * realloc-doubling loop, so the size arithmetic is checked in one place and
 * out-of-memory is a flag the caller tests, never a crash.
 *
 *   struct wgllm_strbuf sb = {0};           // or .limit = N for a byte budget
 *   wgllm_strbuf_printf(&sb, "{\"n\":%d}", n);
 *   if (sb.oom || sb.over) ...;             // something was not appended
 *   char *s = wgllm_strbuf_take(&sb);       // caller frees; sb is empty again
 */
#ifndef WGLLM_STRBUF_H
#define WGLLM_STRBUF_H

#include "base/base.h"

struct wgllm_strbuf {
    char *data;   /* NUL-terminated whenever not NULL; owned by the builder */
    size_t len;   /* bytes of text, not counting the NUL */
    size_t cap;   /* bytes allocated at data */
    size_t limit; /* most bytes of text it may hold; 0 = no limit beyond memory */
    bool oom;     /* an append failed for lack of memory (or its size overflowed) */
    bool over;    /* an append was refused because it would pass `limit` */
};

/* Makes room for n more bytes (plus the NUL) without changing the text.
 * false, setting oom or over, when it cannot; the text is then unchanged.
 * Each append below fails the same way and appends nothing: a failed append
 * never leaves half a piece behind, and later appends are still tried (the
 * flags stay set so the caller can tell the text is incomplete). */
bool wgllm_strbuf_reserve(struct wgllm_strbuf *sb, size_t n);
/* Appends n bytes of s (which may hold NULs). */
bool wgllm_strbuf_put(struct wgllm_strbuf *sb, const void *s, size_t n);
/* Appends the NUL-terminated s. */
bool wgllm_strbuf_puts(struct wgllm_strbuf *sb, const char *s);
/* Appends one byte. */
bool wgllm_strbuf_putc(struct wgllm_strbuf *sb, char c);
/* Appends printf-formatted text. */
bool wgllm_strbuf_printf(struct wgllm_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool wgllm_strbuf_vprintf(struct wgllm_strbuf *sb, const char *fmt, va_list ap);
/* Hands the NUL-terminated text to the caller (who frees it) and leaves sb
 * empty with its limit kept and its flags cleared. An empty builder gives a
 * fresh "" so the result is never NULL except when that malloc fails. */
char *wgllm_strbuf_take(struct wgllm_strbuf *sb);
/* Empties the text but keeps its memory for reuse (and the limit and flags). */
void wgllm_strbuf_clear(struct wgllm_strbuf *sb);
/* Frees the text; sb is empty again (limit kept, flags cleared). */
void wgllm_strbuf_free(struct wgllm_strbuf *sb);

/* Reads the whole file at `path` into *data (malloc'd, NUL-terminated so text
 * can be used as a string; *len, when not NULL, is its byte count, which
 * counts any NULs inside). max_bytes bounds what a hostile or mistaken path
 * can make it allocate (0 = no bound). Works on pipes and other files whose
 * size is not known in advance. Errors name the path: WGLLM_STATUS_IO when it
 * cannot be opened or read, WGLLM_STATUS_BAD_FORMAT when it is over
 * max_bytes, WGLLM_STATUS_OUT_OF_MEMORY. On failure *data is NULL. */
enum wgllm_status wgllm_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                                  struct wgllm_error *err);

/* Grows the array *p of `elem`-byte elements, capacity *cap, so that it holds
 * at least `need` (doubling from 16, size arithmetic checked). false, with *p
 * and *cap unchanged, when that is out of memory or would not fit size_t. */
bool wgllm_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
