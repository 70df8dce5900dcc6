/*
 * json.h - the core's one JSON reader and writer (no dependency: the core
 * compiles to wasm, where cJSON is not linked).
 *
 * Reader: strict RFC 8259 into a read-only DOM held in two blocks (the nodes,
 * in document order, and the decoded strings), with budgets on depth, nodes
 * and bytes so that hostile input costs linear time and bounded memory. It
 * refuses what RFC 8259 refuses (trailing commas, leading zeros, comments,
 * single quotes, control characters in strings, data after the value) and
 * also invalid UTF-8 anywhere in the text (WGLLM_JSON_ERR_UTF8, found by a
 * pass over all bytes before parsing, as the server's check did) and lone
 * surrogate escapes (\ud800 without its pair; a syntax error): the text a caller gets out is always valid
 * UTF-8, except that \u0000 decodes to a NUL byte inside a string (`len`
 * counts it; callers that need C strings refuse it). Objects keep their
 * members in order; duplicate keys are kept, and lookup by key finds the
 * first (what cJSON, which the server used before, does).
 *
 * Layout: a value's subtree is the `size` nodes starting at the value itself
 * (preorder), so the first child of a container is the node after it and a
 * child's next sibling is `child + child->size`: walking needs no pointers.
 *
 * Writer: a comma-tracking emitter on wgllm_strbuf. Strings are escaped as
 * cJSON prints them (", \, \b \f \n \r \t, other control characters as
 * \u00XX, nothing else) after invalid UTF-8 bytes (and NULs) became U+FFFD;
 * numbers as cJSON 1.7.15 prints them: %1.15g when that reads back (within
 * cJSON's tolerance of one DBL_EPSILON), else %1.17g; NaN and infinities as
 * null. So the server's bytes did not change when
 * it moved off cJSON.
 */
#ifndef WGLLM_JSON_H
#define WGLLM_JSON_H

#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum wgllm_json_type {
    WGLLM_JSON_NULL,
    WGLLM_JSON_FALSE,
    WGLLM_JSON_TRUE,
    WGLLM_JSON_NUMBER,
    WGLLM_JSON_STRING,
    WGLLM_JSON_ARRAY,
    WGLLM_JSON_OBJECT,
};

struct wgllm_json {
    uint8_t type;      /* enum wgllm_json_type */
    bool integral;     /* a number that is a whole finite value (1, 1.0, 1e2) */
    uint32_t size;     /* nodes of this value's subtree, itself included */
    uint32_t count;    /* array elements or object members */
    const char *key;   /* a member of an object: its name (NUL-terminated, key_len bytes); else NULL */
    size_t key_len;
    const char *str;   /* a string: its bytes, NUL-terminated (len bytes, which may hold NULs) */
    size_t len;
    double num;        /* a number (+-inf when it overflows a double) */
};

struct wgllm_json_doc {
    struct wgllm_json *nodes; /* nodes[0] is the root */
    size_t n_nodes;
    char *strings;
};

/* 0 in a field: no limit of that kind. */
struct wgllm_json_limits {
    int max_depth;     /* containers nested at most this deep */
    size_t max_nodes;  /* values in all */
    size_t max_bytes;  /* length of the text */
};

enum wgllm_json_problem {
    WGLLM_JSON_OK,
    WGLLM_JSON_ERR_SYNTAX,
    WGLLM_JSON_ERR_UTF8,
    WGLLM_JSON_ERR_DEPTH,
    WGLLM_JSON_ERR_NODES,
    WGLLM_JSON_ERR_BYTES,
    WGLLM_JSON_ERR_MEMORY,
};

struct wgllm_json_error {
    enum wgllm_json_problem problem;
    size_t offset;     /* the byte where it was found */
    char message[160]; /* what was wrong, e.g. "expected ',' or '}' after an object member" (no offset in it) */
};

/* Parses len bytes of text (NULs in it are errors, not the end). On failure
 * *doc is empty and *err says what and where. */
bool wgllm_json_parse(const char *text, size_t len, const struct wgllm_json_limits *limits,
                      struct wgllm_json_doc *doc, struct wgllm_json_error *err);
void wgllm_json_doc_free(struct wgllm_json_doc *doc);
static inline const struct wgllm_json *wgllm_json_root(const struct wgllm_json_doc *d) { return d->nodes; }

/* The first member named key of an object (NULL: none, or v is not an object). */
const struct wgllm_json *wgllm_json_get(const struct wgllm_json *obj, const char *key);
/* Walking a container: first child (NULL when empty or not a container), next after child. */
const struct wgllm_json *wgllm_json_first(const struct wgllm_json *v);
const struct wgllm_json *wgllm_json_next(const struct wgllm_json *parent, const struct wgllm_json *child);
/* The i-th element or member (linear). */
const struct wgllm_json *wgllm_json_at(const struct wgllm_json *v, uint32_t i);

static inline bool wgllm_json_is(const struct wgllm_json *v, enum wgllm_json_type t) { return v && v->type == t; }
static inline bool wgllm_json_is_null(const struct wgllm_json *v) { return !v || v->type == WGLLM_JSON_NULL; }
static inline bool wgllm_json_is_bool(const struct wgllm_json *v) {
    return v && (v->type == WGLLM_JSON_TRUE || v->type == WGLLM_JSON_FALSE);
}

/* Appends n bytes of s to out with each invalid UTF-8 byte (and each NUL)
 * replaced by U+FFFD: what JSON output may hold of text the model made. */
bool wgllm_json_utf8_clean(struct wgllm_strbuf *out, const char *s, size_t n);
/* Where the first invalid UTF-8 byte of s is; n when there is none. */
size_t wgllm_json_utf8_check(const char *s, size_t n);

/* ---- writer --------------------------------------------------------------- */

#define WGLLM_JSON_WRITER_DEPTH 64

struct wgllm_json_writer {
    struct wgllm_strbuf *out;
    bool exact; /* numbers in the fewest digits that read back as the same double (a value passed on
                 * unchanged), not cJSON's 15 whenever those come within an epsilon of it */
    int depth;
    bool has_item[WGLLM_JSON_WRITER_DEPTH]; /* a comma goes before the next item at this depth */
};

/* Every call takes `key`: the member's name inside an object, NULL inside an
 * array or at the top. Failures (out of memory, deeper than the writer's
 * depth) show as out->oom; later calls go on harmlessly. */
void wgllm_json_w_init(struct wgllm_json_writer *w, struct wgllm_strbuf *out);
void wgllm_json_w_object(struct wgllm_json_writer *w, const char *key);
void wgllm_json_w_array(struct wgllm_json_writer *w, const char *key);
void wgllm_json_w_end(struct wgllm_json_writer *w, char close); /* '}' or ']' */
void wgllm_json_w_string(struct wgllm_json_writer *w, const char *key, const char *s, size_t n);
void wgllm_json_w_str(struct wgllm_json_writer *w, const char *key, const char *s); /* NUL-terminated */
void wgllm_json_w_number(struct wgllm_json_writer *w, const char *key, double d);
void wgllm_json_w_bool(struct wgllm_json_writer *w, const char *key, bool b);
void wgllm_json_w_null(struct wgllm_json_writer *w, const char *key);
/* A parsed value written back (recursive: as deep as the writer's depth allows). */
void wgllm_json_w_value(struct wgllm_json_writer *w, const char *key, const struct wgllm_json *v);

/* A JSON string (quoted, escaped, cleaned as above) / a number, appended to out. */
bool wgllm_json_put_string(struct wgllm_strbuf *out, const char *s, size_t n);
bool wgllm_json_put_number(struct wgllm_strbuf *out, double d);
bool wgllm_json_put_number_exact(struct wgllm_strbuf *out, double d); /* see wgllm_json_writer.exact */

#endif
