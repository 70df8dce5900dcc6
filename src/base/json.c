/*
 * json.c - the strict JSON reader (text -> DOM, within budgets) and the
 * writer on wgllm_strbuf; see json.h for what each accepts and prints.
 *
 * The reader is iterative (an explicit stack of open containers), so its C
 * stack use does not depend on the input, and every byte is looked at a
 * bounded number of times: a UTF-8 pass, then one pass that builds the nodes.
 * Decoded strings never outgrow their source (an escape is at least as long
 * as what it decodes to, and the two quotes pay for the NUL), so the string
 * block is allocated once, at the text's length, and pointers into it stay put.
 */
#include "base/json.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Length of the valid sequence at s[i] (1..4), 0 when invalid there. */
static size_t utf8_seq(const unsigned char *s, size_t i, size_t n) {
    const unsigned c = s[i];
    const size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || i + k > n) return 0;
    uint32_t cp = k == 1 ? c : c & (0x7Fu >> k);
    for (size_t j = 1; j < k; j++) {
        if ((s[i + j] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i + j] & 0x3Fu);
    }
    if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return k;
}

size_t wgllm_json_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) { /* the common case, without the call */
            i++;
            continue;
        }
        const size_t k = utf8_seq(u, i, n);
        if (!k) return i;
        i += k;
    }
    return n;
}

bool wgllm_json_utf8_clean(struct wgllm_strbuf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    bool ok = true;
    for (size_t i = 0; i < n;) {
        size_t run = i; /* the longest valid stretch, appended at once */
        size_t k;
        while (run < n && u[run] != 0 && (k = utf8_seq(u, run, n)) > 0) run += k;
        if (run > i) ok &= wgllm_strbuf_put(out, s + i, run - i);
        if (run < n) {
            ok &= wgllm_strbuf_put(out, "\xEF\xBF\xBD", 3);
            run++;
        }
        i = run;
    }
    return ok;
}

/* ---- reader ----------------------------------------------------------------- */

struct parser {
    const char *s;
    size_t n, pos;
    const struct wgllm_json_limits *lim;
    struct wgllm_json *nodes;
    size_t n_nodes, cap_nodes;
    char *strings;
    size_t str_len;
    uint32_t *stack; /* indices of the open containers */
    size_t depth, cap_stack;
    struct wgllm_json_error *err;
};

static bool fail(struct parser *p, enum wgllm_json_problem what, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool fail(struct parser *p, enum wgllm_json_problem what, size_t at, const char *fmt, ...) {
    p->err->problem = what;
    p->err->offset = at;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->message, sizeof(p->err->message), fmt, ap);
    va_end(ap);
    return false;
}

static void skip_ws(struct parser *p) {
    while (p->pos < p->n) {
        const char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static struct wgllm_json *new_node(struct parser *p) {
    if (p->lim && p->lim->max_nodes && p->n_nodes >= p->lim->max_nodes) {
        fail(p, WGLLM_JSON_ERR_NODES, p->pos, "more than %zu values", p->lim->max_nodes);
        return NULL;
    }
    if (p->n_nodes >= UINT32_MAX) {
        fail(p, WGLLM_JSON_ERR_NODES, p->pos, "more than %u values", (unsigned)UINT32_MAX);
        return NULL;
    }
    void *v = p->nodes;
    if (!wgllm_grow(&v, &p->cap_nodes, p->n_nodes + 1, sizeof(*p->nodes))) {
        fail(p, WGLLM_JSON_ERR_MEMORY, p->pos, "out of memory for %zu values", p->n_nodes + 1);
        return NULL;
    }
    p->nodes = v;
    struct wgllm_json *j = &p->nodes[p->n_nodes++];
    memset(j, 0, sizeof(*j));
    j->size = 1;
    return j;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = s[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

static void put_utf8(char *o, size_t *len, uint32_t cp) {
    if (cp < 0x80) {
        o[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*len)++] = (char)(0xC0 | cp >> 6);
        o[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*len)++] = (char)(0xE0 | cp >> 12);
        o[(*len)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*len)++] = (char)(0xF0 | cp >> 18);
        o[(*len)++] = (char)(0x80 | (cp >> 12 & 0x3F));
        o[(*len)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* A string at p->pos (the opening quote), decoded into the string block. */
static bool parse_string(struct parser *p, const char **out, size_t *out_len) {
    const size_t start = p->pos++;
    char *o = p->strings + p->str_len;
    size_t len = 0;
    for (;;) {
        if (p->pos >= p->n) return fail(p, WGLLM_JSON_ERR_SYNTAX, start, "a string that is never closed");
        const unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "a control character (0x%02x) inside a string", c);
        if (c != '\\') {
            o[len++] = (char)c;
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->n) return fail(p, WGLLM_JSON_ERR_SYNTAX, start, "a string that is never closed");
        const char e = p->s[p->pos + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char dec[] = "\"\\/\b\f\n\r\t";
            o[len++] = dec[simple - "\"\\/bfnrt"];
            p->pos += 2;
            continue;
        }
        if (e != 'u') return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "an invalid escape '\\%c'", e >= 0x20 ? e : '?');
        const int hi = p->pos + 6 <= p->n ? hex4(p->s + p->pos + 2) : -1;
        if (hi < 0) return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "a \\u escape without 4 hex digits");
        uint32_t cp = (uint32_t)hi;
        if (hi >= 0xDC00 && hi <= 0xDFFF)
            return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "a lone surrogate escape \\u%04x", (unsigned)hi);
        if (hi >= 0xD800 && hi <= 0xDBFF) {
            const int lo = p->pos + 12 <= p->n && p->s[p->pos + 6] == '\\' && p->s[p->pos + 7] == 'u'
                               ? hex4(p->s + p->pos + 8)
                               : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "a lone surrogate escape \\u%04x", (unsigned)hi);
            cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            p->pos += 6;
        }
        p->pos += 6;
        put_utf8(o, &len, cp);
    }
    o[len] = 0;
    p->str_len += len + 1;
    *out = o;
    *out_len = len;
    return true;
}

static bool parse_number(struct parser *p, struct wgllm_json *j) {
    const size_t start = p->pos;
    const char *s = p->s;
    size_t i = p->pos;
    if (i < p->n && s[i] == '-') i++;
    if (i < p->n && s[i] == '0') {
        i++;
        if (i < p->n && s[i] >= '0' && s[i] <= '9')
            return fail(p, WGLLM_JSON_ERR_SYNTAX, start, "a number with a leading zero");
    } else if (i < p->n && s[i] >= '1' && s[i] <= '9') {
        while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return fail(p, WGLLM_JSON_ERR_SYNTAX, i, "a number without digits");
    }
    if (i < p->n && s[i] == '.') {
        i++;
        if (i >= p->n || s[i] < '0' || s[i] > '9')
            return fail(p, WGLLM_JSON_ERR_SYNTAX, i, "a number with no digit after its '.'");
        while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->n || s[i] < '0' || s[i] > '9')
            return fail(p, WGLLM_JSON_ERR_SYNTAX, i, "a number with no digit in its exponent");
        while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    /* strtod needs a terminated copy: the text goes on (and it would read hex, "inf", ...) */
    const size_t k = i - start;
    char buf[64], *tmp = k < sizeof(buf) ? buf : malloc(k + 1);
    if (!tmp) return fail(p, WGLLM_JSON_ERR_MEMORY, start, "out of memory for a number of %zu digits", k);
    memcpy(tmp, s + start, k);
    tmp[k] = 0;
    j->num = strtod(tmp, NULL);
    if (tmp != buf) free(tmp);
    j->type = WGLLM_JSON_NUMBER;
    j->integral = isfinite(j->num) && j->num == floor(j->num);
    p->pos = i;
    return true;
}

static bool literal(struct parser *p, const char *word, enum wgllm_json_type t, struct wgllm_json *j) {
    const size_t k = strlen(word);
    if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k))
        return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "an unexpected character '%c'", p->s[p->pos]);
    j->type = (uint8_t)t;
    p->pos += k;
    return true;
}

/* A member's name and its ':' (p->pos at the name's quote, whitespace skipped). */
static bool parse_key(struct parser *p, const char **key, size_t *key_len) {
    if (p->pos >= p->n || p->s[p->pos] != '"')
        return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "expected a member name (a string) in an object");
    if (!parse_string(p, key, key_len)) return false;
    skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != ':')
        return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "expected ':' after a member name");
    p->pos++;
    return true;
}

static bool parse_doc(struct parser *p) {
    const char *key = NULL;
    size_t key_len = 0;
    for (;;) {
        /* a value (the member `key` of the open object, if there is one) */
        skip_ws(p);
        if (p->pos >= p->n) return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "the text ends where a value was expected");
        const char c = p->s[p->pos];
        struct wgllm_json *j = new_node(p);
        if (!j) return false;
        j->key = key;
        j->key_len = key_len;
        key = NULL;
        bool opened = false;
        if (c == '{' || c == '[') {
            j->type = c == '{' ? WGLLM_JSON_OBJECT : WGLLM_JSON_ARRAY;
            if (p->lim && p->lim->max_depth && p->depth + 1 > (size_t)p->lim->max_depth)
                return fail(p, WGLLM_JSON_ERR_DEPTH, p->pos, "nesting deeper than %d levels", p->lim->max_depth);
            void *st = p->stack;
            if (!wgllm_grow(&st, &p->cap_stack, p->depth + 1, sizeof(*p->stack)))
                return fail(p, WGLLM_JSON_ERR_MEMORY, p->pos, "out of memory for %zu levels", p->depth + 1);
            p->stack = st;
            p->stack[p->depth++] = (uint32_t)(p->n_nodes - 1);
            p->pos++;
            skip_ws(p);
            if (p->pos < p->n && p->s[p->pos] == (c == '{' ? '}' : ']')) {
                /* empty: closed below, as any container */
            } else if (c == '{') {
                if (!parse_key(p, &key, &key_len)) return false;
                continue;
            } else {
                continue;
            }
            opened = true;
        } else if (c == '"') {
            if (!parse_string(p, &j->str, &j->len)) return false;
            j->type = WGLLM_JSON_STRING;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if (!parse_number(p, j)) return false;
        } else if (c == 't') {
            if (!literal(p, "true", WGLLM_JSON_TRUE, j)) return false;
        } else if (c == 'f') {
            if (!literal(p, "false", WGLLM_JSON_FALSE, j)) return false;
        } else if (c == 'n') {
            if (!literal(p, "null", WGLLM_JSON_NULL, j)) return false;
        } else {
            return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "an unexpected character '%c' where a value was expected",
                        (unsigned char)c >= 0x20 && (unsigned char)c < 0x7F ? c : '?');
        }
        /* a value ended (an empty container is closed at once): count it in its container,
         * then either a ',' (the next one) or the container's end, which ends a value too */
        bool closing = opened;
        for (;;) {
            if (closing) {
                p->pos++; /* the '}' or ']' */
                const uint32_t top = p->stack[--p->depth];
                p->nodes[top].size = (uint32_t)(p->n_nodes - top);
                closing = false;
            }
            if (p->depth == 0) {
                skip_ws(p);
                if (p->pos != p->n) return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "more text after the JSON value");
                return true;
            }
            struct wgllm_json *top = &p->nodes[p->stack[p->depth - 1]];
            top->count++;
            const bool obj = top->type == WGLLM_JSON_OBJECT;
            skip_ws(p);
            const char d = p->pos < p->n ? p->s[p->pos] : 0;
            if (d == ',') {
                p->pos++;
                if (obj) {
                    skip_ws(p);
                    if (!parse_key(p, &key, &key_len)) return false;
                }
                break;
            }
            if (d == (obj ? '}' : ']')) {
                closing = true;
                continue;
            }
            if (p->pos >= p->n)
                return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "the text ends inside %s", obj ? "an object" : "an array");
            return fail(p, WGLLM_JSON_ERR_SYNTAX, p->pos, "expected ',' or '%c' after %s", obj ? '}' : ']',
                        obj ? "an object member" : "an array element");
        }
    }
}

bool wgllm_json_parse(const char *text, size_t len, const struct wgllm_json_limits *limits,
                      struct wgllm_json_doc *doc, struct wgllm_json_error *err) {
    memset(doc, 0, sizeof(*doc));
    memset(err, 0, sizeof(*err));
    struct parser p = {.s = text, .n = len, .lim = limits, .err = err};
    if (limits && limits->max_bytes && len > limits->max_bytes)
        return fail(&p, WGLLM_JSON_ERR_BYTES, limits->max_bytes, "more than %zu bytes", limits->max_bytes);
    const size_t bad = wgllm_json_utf8_check(text, len);
    if (bad < len) return fail(&p, WGLLM_JSON_ERR_UTF8, bad, "invalid UTF-8");
    if (!(p.strings = malloc(len + 1))) return fail(&p, WGLLM_JSON_ERR_MEMORY, 0, "out of memory for %zu bytes", len);
    const bool ok = parse_doc(&p);
    free(p.stack);
    if (!ok) {
        free(p.nodes);
        free(p.strings);
        return false;
    }
    doc->nodes = p.nodes;
    doc->n_nodes = p.n_nodes;
    doc->strings = p.strings;
    return true;
}

void wgllm_json_doc_free(struct wgllm_json_doc *doc) {
    free(doc->nodes);
    free(doc->strings);
    memset(doc, 0, sizeof(*doc));
}

const struct wgllm_json *wgllm_json_first(const struct wgllm_json *v) {
    return v && (v->type == WGLLM_JSON_ARRAY || v->type == WGLLM_JSON_OBJECT) && v->count ? v + 1 : NULL;
}

const struct wgllm_json *wgllm_json_next(const struct wgllm_json *parent, const struct wgllm_json *child) {
    const struct wgllm_json *n = child + child->size;
    return n < parent + parent->size ? n : NULL;
}

const struct wgllm_json *wgllm_json_get(const struct wgllm_json *obj, const char *key) {
    if (!wgllm_json_is(obj, WGLLM_JSON_OBJECT)) return NULL;
    const size_t k = strlen(key);
    for (const struct wgllm_json *c = wgllm_json_first(obj); c; c = wgllm_json_next(obj, c))
        if (c->key_len == k && !memcmp(c->key, key, k)) return c;
    return NULL;
}

const struct wgllm_json *wgllm_json_at(const struct wgllm_json *v, uint32_t i) {
    const struct wgllm_json *c = wgllm_json_first(v);
    for (; c && i > 0; i--) c = wgllm_json_next(v, c);
    return c;
}

/* ---- writer ----------------------------------------------------------------- */

bool wgllm_json_put_string(struct wgllm_strbuf *out, const char *s, size_t n) {
    /* clean first (invalid bytes -> U+FFFD), then escape what JSON must */
    struct wgllm_strbuf clean = {0};
    const char *t = s ? s : "";
    size_t tn = s ? n : 0;
    if (wgllm_json_utf8_check(t, tn) < tn || (tn && memchr(t, 0, tn))) {
        if (!wgllm_json_utf8_clean(&clean, t, tn)) {
            wgllm_strbuf_free(&clean);
            out->oom = true;
            return false;
        }
        t = clean.data ? clean.data : "";
        tn = clean.len;
    }
    bool ok = wgllm_strbuf_reserve(out, tn + 2) && wgllm_strbuf_putc(out, '"');
    size_t run = 0; /* bytes since the last escape, appended together */
    for (size_t i = 0; ok && i < tn; i++) {
        const unsigned char c = (unsigned char)t[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        ok &= wgllm_strbuf_put(out, t + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': ok &= wgllm_strbuf_put(out, "\\\"", 2); break;
        case '\\': ok &= wgllm_strbuf_put(out, "\\\\", 2); break;
        case '\b': ok &= wgllm_strbuf_put(out, "\\b", 2); break;
        case '\f': ok &= wgllm_strbuf_put(out, "\\f", 2); break;
        case '\n': ok &= wgllm_strbuf_put(out, "\\n", 2); break;
        case '\r': ok &= wgllm_strbuf_put(out, "\\r", 2); break;
        case '\t': ok &= wgllm_strbuf_put(out, "\\t", 2); break;
        default: ok &= wgllm_strbuf_printf(out, "\\u%04x", c); break;
        }
    }
    if (ok) ok &= wgllm_strbuf_put(out, t + run, tn - run) && wgllm_strbuf_putc(out, '"');
    wgllm_strbuf_free(&clean);
    return ok;
}

/* cJSON 1.7.15's print_number, kept so that responses read the same as before */
bool wgllm_json_put_number(struct wgllm_strbuf *out, double d) {
    if (isnan(d) || isinf(d)) return wgllm_strbuf_puts(out, "null");
    char buf[32];
    snprintf(buf, sizeof(buf), "%1.15g", d);
    const double back = strtod(buf, NULL);
    const double m = fabs(back) > fabs(d) ? fabs(back) : fabs(d);
    /* (cJSON also took a 15-digit text that overflows to inf near DBL_MAX: not here) */
    if (!isfinite(back) || !(fabs(back - d) <= m * DBL_EPSILON)) snprintf(buf, sizeof(buf), "%1.17g", d);
    return wgllm_strbuf_puts(out, buf);
}

bool wgllm_json_put_number_exact(struct wgllm_strbuf *out, double d) {
    if (isnan(d) || isinf(d)) return wgllm_strbuf_puts(out, "null");
    char buf[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof(buf), "%1.*g", digits, d);
        if (strtod(buf, NULL) == d) break; /* 17 digits always read back */
    }
    return wgllm_strbuf_puts(out, buf);
}

void wgllm_json_w_init(struct wgllm_json_writer *w, struct wgllm_strbuf *out) {
    memset(w, 0, sizeof(*w));
    w->out = out;
}

/* The comma and the key before an item. */
static void item_n(struct wgllm_json_writer *w, const char *key, size_t key_len) {
    if (w->depth > 0 && w->has_item[w->depth - 1]) wgllm_strbuf_putc(w->out, ',');
    if (w->depth > 0) w->has_item[w->depth - 1] = true;
    if (key) {
        wgllm_json_put_string(w->out, key, key_len);
        wgllm_strbuf_putc(w->out, ':');
    }
}

static void item(struct wgllm_json_writer *w, const char *key) { item_n(w, key, key ? strlen(key) : 0); }

static void w_open(struct wgllm_json_writer *w, const char *key, char c) {
    item(w, key);
    if (w->depth >= WGLLM_JSON_WRITER_DEPTH) {
        w->out->oom = true;
        return;
    }
    wgllm_strbuf_putc(w->out, c);
    w->has_item[w->depth++] = false;
}

void wgllm_json_w_object(struct wgllm_json_writer *w, const char *key) { w_open(w, key, '{'); }
void wgllm_json_w_array(struct wgllm_json_writer *w, const char *key) { w_open(w, key, '['); }

void wgllm_json_w_end(struct wgllm_json_writer *w, char close) {
    if (w->depth > 0) w->depth--;
    wgllm_strbuf_putc(w->out, close);
}

void wgllm_json_w_string(struct wgllm_json_writer *w, const char *key, const char *s, size_t n) {
    item(w, key);
    wgllm_json_put_string(w->out, s, n);
}

void wgllm_json_w_str(struct wgllm_json_writer *w, const char *key, const char *s) {
    wgllm_json_w_string(w, key, s, s ? strlen(s) : 0);
}

void wgllm_json_w_number(struct wgllm_json_writer *w, const char *key, double d) {
    item(w, key);
    if (w->exact) wgllm_json_put_number_exact(w->out, d);
    else wgllm_json_put_number(w->out, d);
}

void wgllm_json_w_bool(struct wgllm_json_writer *w, const char *key, bool b) {
    item(w, key);
    wgllm_strbuf_puts(w->out, b ? "true" : "false");
}

void wgllm_json_w_null(struct wgllm_json_writer *w, const char *key) {
    item(w, key);
    wgllm_strbuf_puts(w->out, "null");
}

/* a member's key with its length (it may hold a NUL from \u0000) */
static void w_value(struct wgllm_json_writer *w, const char *key, size_t key_len, const struct wgllm_json *v) {
    if (v->type == WGLLM_JSON_ARRAY || v->type == WGLLM_JSON_OBJECT) {
        const bool obj = v->type == WGLLM_JSON_OBJECT;
        item_n(w, key, key_len);
        if (w->depth >= WGLLM_JSON_WRITER_DEPTH) {
            w->out->oom = true;
            return;
        }
        wgllm_strbuf_putc(w->out, obj ? '{' : '[');
        w->has_item[w->depth++] = false;
        for (const struct wgllm_json *c = wgllm_json_first(v); c; c = wgllm_json_next(v, c))
            w_value(w, obj ? c->key : NULL, c->key_len, c);
        wgllm_json_w_end(w, obj ? '}' : ']');
        return;
    }
    item_n(w, key, key_len);
    switch (v->type) {
    case WGLLM_JSON_NULL: wgllm_strbuf_puts(w->out, "null"); break;
    case WGLLM_JSON_FALSE: wgllm_strbuf_puts(w->out, "false"); break;
    case WGLLM_JSON_TRUE: wgllm_strbuf_puts(w->out, "true"); break;
    case WGLLM_JSON_NUMBER:
        if (w->exact) wgllm_json_put_number_exact(w->out, v->num);
        else wgllm_json_put_number(w->out, v->num);
        break;
    default: wgllm_json_put_string(w->out, v->str, v->len); break;
    }
}

void wgllm_json_w_value(struct wgllm_json_writer *w, const char *key, const struct wgllm_json *v) {
    w_value(w, key, key ? strlen(key) : 0, v);
}
