/*
 * schema.c - JSON Schema to GBNF (issue #16): what `response_format:
 * {type: "json_schema"}` and tool parameters are constrained with.
 *
 * The output follows llama.cpp's json-schema-to-grammar in shape (the same
 * primitive rules, whitespace rule and property order: required properties
 * in the order of `properties`, then any in-order subset of the optional
 * ones), so a schema constrains the same texts here as there. Supported:
 * type (one or a list), properties / required / additionalProperties,
 * items / prefixItems / minItems / maxItems, enum / const, anyOf / oneOf
 * (alternatives), allOf (object schemas merged), $ref into $defs /
 * definitions / the root, string minLength / maxLength / pattern / format
 * (date, time, date-time, uuid, email), integer minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (exact digit-range rules), number
 * minimum >= 0, nullable. Annotations (title, description, default, ...)
 * are ignored; any other keyword is UNSUPPORTED naming it and where it is,
 * because a constraint that is silently dropped is a wrong answer.
 */
#include "grammar/grammar.h"

#include "base/json.h"
#include "base/strbuf.h"

#include <math.h>

#define MAX_RULES 20000
#define MAX_OUTPUT (4u << 20)

struct rule {
    char *name, *body;
};

struct conv {
    const struct wgllm_json *root;
    struct rule *rules;
    size_t n_rules, cap_rules;
    struct { char *ptr, *name; } *refs; /* $ref pointer -> its rule */
    size_t n_refs, cap_refs;
    size_t out_bytes;
    enum wgllm_status st;
    struct wgllm_error *err;
    int depth;
    /* the refs whose rule is being written with no text matched since it
     * began (visit passes them through $ref / anyOf / oneOf only): one of
     * them asked for again would be a left-recursive rule */
    size_t lead[65], n_lead;
};

__attribute__((format(printf, 3, 4))) static bool fail(struct conv *c, enum wgllm_status st, const char *fmt, ...) {
    if (c->st != WGLLM_STATUS_OK) return false;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = wgllm_error_set(c->err, st, "json schema: %s", msg);
    return false;
}

static bool oom(struct conv *c) { return fail(c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory"); }

static const struct rule *find(const struct conv *c, const char *name) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) return &c->rules[i];
    return NULL;
}

/* Adds rule `base` (or base-N when that name holds another body); returns its name (owned by c). */
static const char *add_rule(struct conv *c, const char *base, const char *body) {
    if (c->st != WGLLM_STATUS_OK || !body) return NULL;
    char name[160];
    snprintf(name, sizeof name, "%.120s", base);
    for (int k = 1;; k++) {
        const struct rule *r = find(c, name);
        if (!r) break;
        if (!strcmp(r->body, body)) return r->name;
        snprintf(name, sizeof name, "%.120s-%d", base, k);
    }
    if (c->n_rules >= MAX_RULES) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "the schema needs more than %d rules", MAX_RULES), NULL;
    c->out_bytes += strlen(name) + strlen(body) + 8;
    if (c->out_bytes > MAX_OUTPUT)
        return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "the schema's grammar is larger than %u bytes", MAX_OUTPUT), NULL;
    if (!wgllm_grow((void **)&c->rules, &c->cap_rules, c->n_rules + 1, sizeof *c->rules)) return oom(c), NULL;
    char *n = strdup(name), *b = strdup(body);
    if (!n || !b) return free(n), free(b), oom(c), NULL;
    c->rules[c->n_rules++] = (struct rule){n, b};
    return n;
}

/* Sets the body of a rule made earlier as a placeholder (recursive $ref). */
static void set_body(struct conv *c, const char *name, const char *body) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) {
            char *b = strdup(body);
            if (!b) { oom(c); return; }
            free(c->rules[i].body);
            c->rules[i].body = b;
            return;
        }
}

/* A GBNF literal of n bytes. */
static void put_literal(struct wgllm_strbuf *sb, const char *s, size_t n) {
    wgllm_strbuf_putc(sb, '"');
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') wgllm_strbuf_putc(sb, '\\'), wgllm_strbuf_putc(sb, (char)ch);
        else if (ch == '\n') wgllm_strbuf_puts(sb, "\\n");
        else if (ch == '\r') wgllm_strbuf_puts(sb, "\\r");
        else if (ch == '\t') wgllm_strbuf_puts(sb, "\\t");
        else if (ch < 0x20 || ch == 0x7f) wgllm_strbuf_printf(sb, "\\x%02X", ch);
        else wgllm_strbuf_putc(sb, (char)ch);
    }
    wgllm_strbuf_putc(sb, '"');
}

/* ---- the primitive rules (llama.cpp's) ---------------------------------------- */

static const char *SPACE = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

struct prim {
    const char *name, *body, *deps;
};
static const struct prim PRIMS[] = {
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"decimal-part", "[0-9]{1,16}", ""},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
     "integral-part decimal-part space"},
    {"integer", "(\"-\"? integral-part) space", "integral-part space"},
    {"value", "object | array | string | number | boolean | null", "object array string number boolean null"},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     "string value space"},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", "value space"},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
             "[0-9a-fA-F]{12} \"\\\"\" space", "space"},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", ""},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"null", "\"null\" space", "space"},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", ""},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? "
             "( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", ""},
    {"date-time", "date \"T\" time", "date time"},
    {"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
    {"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\" space", "date-time space"},
    {"email-string", "\"\\\"\" [a-zA-Z0-9_%+-] [a-zA-Z0-9._%+-]* \"@\" [a-zA-Z0-9-]+ (\".\" [a-zA-Z0-9-]+)* "
                     "\".\" [a-zA-Z]{2,24} \"\\\"\" space", "space"},
};

static const char *prim(struct conv *c, const char *name) {
    if (!strcmp(name, "space")) return add_rule(c, "space", SPACE);
    for (size_t i = 0; i < sizeof PRIMS / sizeof *PRIMS; i++) {
        if (strcmp(PRIMS[i].name, name)) continue;
        if (find(c, name)) return find(c, name)->name;
        const char *n = add_rule(c, name, PRIMS[i].body);
        /* then what it refers to (after it, so a cycle like value/object ends at the name) */
        char dep[40];
        for (const char *d = PRIMS[i].deps; *d;) {
            size_t k = strcspn(d, " ");
            snprintf(dep, sizeof dep, "%.*s", (int)k, d);
            prim(c, dep);
            d += k + (d[k] == ' ');
        }
        return n;
    }
    WGLLM_ABORT("no primitive rule %s", name);
}

/* ---- integer ranges ------------------------------------------------------------- */

/* Digits d[0, n) of x, most significant first. */
static int digits(uint64_t x, char *d) {
    char t[24];
    int n = 0;
    do t[n++] = (char)('0' + x % 10), x /= 10;
    while (x);
    for (int i = 0; i < n; i++) d[i] = t[n - 1 - i];
    return n;
}

/* Alternatives matching the decimal strings of length n between x and y
 * (digit strings of that length, x <= y), appended to sb (" | "-separated). */
static void same_len_range(struct wgllm_strbuf *sb, const char *x, const char *y, int n, bool *first) {
    int i = 0;
    while (i < n && x[i] == y[i]) i++;
    if (i == n) {
        if (!*first) wgllm_strbuf_puts(sb, " | ");
        *first = false;
        put_literal(sb, x, (size_t)n);
        return;
    }
    bool x_zeros = true, y_nines = true;
    for (int k = i + 1; k < n; k++) x_zeros &= x[k] == '0', y_nines &= y[k] == '9';
    const int rest = n - i - 1;
    char lo[24], hi[24];
    if (x_zeros && y_nines) {
        if (!*first) wgllm_strbuf_puts(sb, " | ");
        *first = false;
        if (i) put_literal(sb, x, (size_t)i), wgllm_strbuf_putc(sb, ' ');
        wgllm_strbuf_printf(sb, "[%c-%c]", x[i], y[i]);
        if (rest) wgllm_strbuf_printf(sb, " [0-9]{%d}", rest);
        return;
    }
    /* x[i] followed by x's tail .. 9s */
    memcpy(hi, x, (size_t)n);
    for (int k = i + 1; k < n; k++) hi[k] = '9';
    same_len_range(sb, x, hi, n, first);
    /* the digits strictly between, followed by anything */
    if (y[i] - x[i] >= 2) {
        if (!*first) wgllm_strbuf_puts(sb, " | ");
        *first = false;
        if (i) put_literal(sb, x, (size_t)i), wgllm_strbuf_putc(sb, ' ');
        wgllm_strbuf_printf(sb, "[%c-%c]", x[i] + 1, y[i] - 1);
        if (rest) wgllm_strbuf_printf(sb, " [0-9]{%d}", rest);
    }
    /* y[i] followed by 0s .. y's tail */
    memcpy(lo, y, (size_t)n);
    for (int k = i + 1; k < n; k++) lo[k] = '0';
    same_len_range(sb, lo, y, n, first);
}

/* Alternatives for the naturals in [a, b] (b = UINT64_MAX: unbounded, up to 16 digits as integral-part allows). */
static void natural_range(struct wgllm_strbuf *sb, uint64_t a, uint64_t b, bool *first) {
    char da[24], db[24];
    const int na = digits(a, da);
    const bool unbounded = b == UINT64_MAX;
    const int nb = unbounded ? 16 : digits(b, db);
    for (int len = na; len <= nb; len++) {
        char lo[24], hi[24];
        if (len == na) memcpy(lo, da, (size_t)na);
        else lo[0] = '1', memset(lo + 1, '0', (size_t)len - 1);
        if (len == nb && !unbounded) memcpy(hi, db, (size_t)nb);
        else memset(hi, '9', (size_t)len);
        if (len == 1 && len != na) lo[0] = '0';
        same_len_range(sb, lo, hi, len, first);
    }
}

static bool int_bound(struct conv *c, const struct wgllm_json *s, const char *key, bool lower, int64_t *out, bool *has) {
    const struct wgllm_json *v = wgllm_json_get(s, key);
    if (!v) return true;
    const bool excl = !strncmp(key, "exclusive", 9);
    if (wgllm_json_is_bool(v)) return true; /* draft 4's boolean form, read with minimum/maximum */
    if (!wgllm_json_is(v, WGLLM_JSON_NUMBER) || !isfinite(v->num) || fabs(v->num) > 9e15)
        return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s' must be a number within +-9e15", key);
    double d = lower ? ceil(v->num) : floor(v->num);
    if (excl && d == v->num) d += lower ? 1 : -1;
    const bool draft4 = !excl && wgllm_json_is(wgllm_json_get(s, lower ? "exclusiveMinimum" : "exclusiveMaximum"), WGLLM_JSON_TRUE);
    if (draft4 && d == v->num) d += lower ? 1 : -1;
    const int64_t x = (int64_t)d;
    if (!*has || (lower ? x > *out : x < *out)) *out = x;
    *has = true;
    return true;
}

static const char *integer_rule(struct conv *c, const struct wgllm_json *s, const char *name) {
    int64_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    if (!int_bound(c, s, "minimum", true, &lo, &has_lo) || !int_bound(c, s, "exclusiveMinimum", true, &lo, &has_lo) ||
        !int_bound(c, s, "maximum", false, &hi, &has_hi) || !int_bound(c, s, "exclusiveMaximum", false, &hi, &has_hi))
        return NULL;
    if (!has_lo && !has_hi) return prim(c, "integer");
    if (has_lo && has_hi && lo > hi) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': no integer is within its bounds", name), NULL;
    struct wgllm_strbuf sb = {0};
    bool first = true;
    wgllm_strbuf_puts(&sb, "(");
    /* negatives: "-" and the magnitudes */
    if (!has_lo || lo < 0) {
        const uint64_t mag_lo = has_hi && hi < 0 ? (uint64_t)-hi : 1;
        const uint64_t mag_hi = has_lo ? (uint64_t)-lo : UINT64_MAX;
        struct wgllm_strbuf alt = {0};
        bool f2 = true;
        natural_range(&alt, mag_lo, mag_hi, &f2);
        wgllm_strbuf_printf(&sb, "\"-\" (%s)", alt.data ? alt.data : "");
        wgllm_strbuf_free(&alt);
        first = false;
    }
    if (!has_hi || hi >= 0) {
        const uint64_t a = has_lo && lo > 0 ? (uint64_t)lo : 0;
        const uint64_t b = has_hi ? (uint64_t)hi : UINT64_MAX;
        natural_range(&sb, a, b, &first);
    }
    wgllm_strbuf_puts(&sb, ") space");
    prim(c, "space");
    const char *r = sb.oom ? (oom(c), NULL) : add_rule(c, name, sb.data);
    wgllm_strbuf_free(&sb);
    return r;
}

/* ---- patterns (a regular-expression subset) --------------------------------------- */

struct rx {
    const char *s;
    size_t n, i;
    struct conv *c;
    bool nullable; /* the atom, sequence or alternation just read can match no text */
    int depth;
};

/* One literal code point of the pattern as JSON string content. */
static void rx_literal(struct wgllm_strbuf *sb, const char *s, size_t n) {
    if (n == 1 && (s[0] == '"' || s[0] == '\\')) {
        wgllm_strbuf_puts(sb, s[0] == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
        return;
    }
    if (n == 1 && (unsigned char)s[0] < 0x20) {
        wgllm_strbuf_printf(sb, "\"\\\\u%04x\"", (unsigned char)s[0]);
        return;
    }
    put_literal(sb, s, n);
}

static bool rx_alt(struct rx *r, struct wgllm_strbuf *sb);

/* A [class] of the pattern as GBNF (quotes and backslashes in it become their JSON escapes). */
static bool rx_class(struct rx *r, struct wgllm_strbuf *sb) {
    r->i++; /* [ */
    const bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    struct wgllm_strbuf cls = {0};
    bool has_quote = false, has_bs = false;
    wgllm_strbuf_puts(&cls, neg ? "[^" : "[");
    bool first = true;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        char ch = r->s[r->i++];
        if (ch == '\\' && r->i < r->n) {
            const char e = r->s[r->i++];
            if (e == 'd') { wgllm_strbuf_puts(&cls, "0-9"); continue; }
            if (e == 'w') { wgllm_strbuf_puts(&cls, "a-zA-Z0-9_"); continue; }
            if (e == 's') { wgllm_strbuf_puts(&cls, " \\t\\n\\r"); continue; }
            if (e == 'n' || e == 't' || e == 'r') {
                wgllm_strbuf_printf(&cls, "\\%c", e);
                continue;
            }
            if (e == 'D' || e == 'W' || e == 'S' || e == 'b')
                return wgllm_strbuf_free(&cls), fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: '\\%c' inside [] is not supported", e);
            if (e == '-' || e == '^') { /* a literal, not a range or a negation: GBNF has no \- */
                wgllm_strbuf_printf(&cls, "\\x%02X", (unsigned char)e);
                continue;
            }
            ch = e;
        }
        if (ch == '"') { has_quote = true; continue; }
        if (ch == '\\') { has_bs = true; continue; }
        if (ch == ']' || ch == '[') wgllm_strbuf_putc(&cls, '\\');
        /* a control character (a NUL from "\u0000" too) as GBNF's \xHH: raw, a
         * NUL cut the class short in the text (fuzz_schema) */
        if ((unsigned char)ch < 0x20 || ch == 0x7f) {
            wgllm_strbuf_printf(&cls, "\\x%02X", (unsigned char)ch);
            continue;
        }
        wgllm_strbuf_putc(&cls, ch);
    }
    if (r->i >= r->n) return wgllm_strbuf_free(&cls), fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: '[' without ']'");
    r->i++;
    if (neg) wgllm_strbuf_puts(&cls, "\"\\\\\\x00-\\x1F\\x7F");
    wgllm_strbuf_putc(&cls, ']');
    wgllm_strbuf_puts(sb, "(");
    wgllm_strbuf_puts(sb, cls.data);
    /* a quote or backslash the class admits is written escaped in the JSON string */
    if (neg ? !has_quote : has_quote) wgllm_strbuf_puts(sb, " | \"\\\\\\\"\"");
    if (neg ? !has_bs : has_bs) wgllm_strbuf_puts(sb, " | \"\\\\\\\\\"");
    wgllm_strbuf_puts(sb, ")");
    wgllm_strbuf_free(&cls);
    return true;
}

static bool rx_atom(struct rx *r, struct wgllm_strbuf *sb) {
    const char ch = r->s[r->i];
    r->nullable = false; /* every atom but a group matches one code point or more */
    if (ch == '(') {
        if (++r->depth > 64) return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: groups nested deeper than 64");
        r->i++;
        if (r->i + 1 < r->n && r->s[r->i] == '?') {
            if (r->s[r->i + 1] != ':')
                return fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: '(?%c' (lookaround, named groups) is not supported", r->s[r->i + 1]);
            r->i += 2;
        }
        wgllm_strbuf_puts(sb, "(");
        if (!rx_alt(r, sb)) return false;
        if (r->i >= r->n || r->s[r->i] != ')') return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: '(' without ')'");
        r->i++;
        r->depth--;
        wgllm_strbuf_puts(sb, ")");
        return true;
    }
    if (ch == '[') return rx_class(r, sb);
    if (ch == '.') {
        r->i++;
        prim(r->c, "char");
        wgllm_strbuf_puts(sb, "char");
        return true;
    }
    if (ch == '\\') {
        if (r->i + 1 >= r->n) return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern ends with '\\'");
        const char e = r->s[r->i + 1];
        r->i += 2;
        switch (e) {
        case 'd': wgllm_strbuf_puts(sb, "[0-9]"); return true;
        case 'w': wgllm_strbuf_puts(sb, "[a-zA-Z0-9_]"); return true;
        case 's': wgllm_strbuf_puts(sb, "(\" \" | \"\\\\t\" | \"\\\\n\" | \"\\\\r\")"); return true;
        case 'n': wgllm_strbuf_puts(sb, "\"\\\\n\""); return true;
        case 't': wgllm_strbuf_puts(sb, "\"\\\\t\""); return true;
        case 'r': wgllm_strbuf_puts(sb, "\"\\\\r\""); return true;
        default:
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                return fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: '\\%c' is not supported", e);
            /* an escaped code point is the whole UTF-8 sequence (its first byte
             * alone made invalid UTF-8 in the grammar: fuzz_schema) */
            size_t k = 1;
            while (r->i < r->n && ((unsigned char)r->s[r->i] & 0xc0) == 0x80) r->i++, k++;
            rx_literal(sb, r->s + r->i - k, k);
            return true;
        }
    }
    /* a literal code point (UTF-8 sequence) */
    size_t k = 1;
    while (r->i + k < r->n && ((unsigned char)r->s[r->i + k] & 0xc0) == 0x80) k++;
    rx_literal(sb, r->s + r->i, k);
    r->i += k;
    return true;
}

/* The inside of {...}: m, m, ,n or m,n (decimal, m <= n), as GBNF writes
 * repetitions; anything else ({}, {1,2,3}, {3,2}) is refused here rather
 * than handed to the GBNF reader as a grammar it cannot read. */
static bool rx_repetition_ok(const char *s, size_t n) {
    uint64_t v[2] = {0, 0};
    size_t digits[2] = {0, 0}, i = 0;
    int part = 0;
    for (; i < n; i++) {
        if (s[i] == ',' && part == 0) {
            part = 1;
        } else if (s[i] >= '0' && s[i] <= '9') {
            v[part] = WGLLM_MIN(v[part] * 10 + (uint64_t)(s[i] - '0'), (uint64_t)UINT32_MAX);
            digits[part]++;
        } else {
            return false;
        }
    }
    if (part == 0) return digits[0] > 0;
    return !(digits[0] && digits[1] && v[0] > v[1]);
}

static bool rx_seq(struct rx *r, struct wgllm_strbuf *sb) {
    bool any = false, all_nullable = true;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        const char ch = r->s[r->i];
        if (ch == '^' || ch == '$')
            return fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: '%c' is supported only at the pattern's start or end", ch);
        if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
            return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: a quantifier with nothing before it");
        if (any) wgllm_strbuf_putc(sb, ' ');
        wgllm_strbuf_puts(sb, "(");
        if (!rx_atom(r, sb)) return false;
        wgllm_strbuf_puts(sb, ")");
        any = true;
        bool atom_nullable = r->nullable, unbounded = false;
        if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?')) {
            unbounded = r->s[r->i] != '?';
            if (r->s[r->i] != '+') atom_nullable = true;
            wgllm_strbuf_putc(sb, r->s[r->i++]);
        } else if (r->i < r->n && r->s[r->i] == '{') {
            const size_t start = r->i;
            while (r->i < r->n && r->s[r->i] != '}') r->i++;
            if (r->i >= r->n) return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: '{' without '}'");
            r->i++;
            if (!rx_repetition_ok(r->s + start + 1, r->i - start - 2))
                return fail(r->c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: bad repetition '%.*s'", (int)(r->i - start), r->s + start);
            unbounded = r->s[r->i - 2] == ',';
            /* {0...}, {,n}: may repeat zero times */
            size_t d = start + 1;
            while (r->s[d] == '0') d++;
            if (r->s[d] < '1' || r->s[d] > '9') atom_nullable = true;
            if (r->s[start + 1] == ',') wgllm_strbuf_putc(sb, '{'), wgllm_strbuf_putc(sb, '0'), wgllm_strbuf_put(sb, r->s + start + 1, r->i - start - 1);
            else wgllm_strbuf_put(sb, r->s + start, r->i - start);
        }
        /* an unbounded repetition of what can match nothing is a left-recursive
         * rule in GBNF (fuzz_schema: "(()))+"): refused, not handed on */
        if (unbounded && r->nullable)
            return fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: a repetition ('*', '+', '{m,}') of something that can match nothing is not supported");
        if (r->i < r->n && r->s[r->i] == '?')
            return fail(r->c, WGLLM_STATUS_UNSUPPORTED, "pattern: lazy quantifiers are not supported");
        all_nullable = all_nullable && atom_nullable;
    }
    if (!any) wgllm_strbuf_puts(sb, "\"\"");
    r->nullable = all_nullable;
    return true;
}

static bool rx_alt(struct rx *r, struct wgllm_strbuf *sb) {
    if (!rx_seq(r, sb)) return false;
    bool nullable = r->nullable;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        wgllm_strbuf_puts(sb, " | ");
        if (!rx_seq(r, sb)) return false;
        nullable = nullable || r->nullable;
    }
    r->nullable = nullable;
    return true;
}

static const char *pattern_rule(struct conv *c, const struct wgllm_json *pat, const char *name) {
    if (!wgllm_json_is(pat, WGLLM_JSON_STRING)) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'pattern' must be a string"), NULL;
    struct rx r = {.s = pat->str, .n = pat->len, .c = c};
    /* JSON Schema patterns search: an end without an anchor takes any characters */
    const bool start = r.n && r.s[0] == '^';
    const bool end = r.n > (size_t)start && r.s[r.n - 1] == '$' && (r.n < 2 || r.s[r.n - 2] != '\\');
    if (start) r.i = 1;
    if (end) r.n--;
    struct wgllm_strbuf sb = {0};
    prim(c, "char");
    prim(c, "space");
    wgllm_strbuf_puts(&sb, "\"\\\"\" ");
    if (!start) wgllm_strbuf_puts(&sb, "char* ");
    wgllm_strbuf_puts(&sb, "(");
    bool ok = rx_alt(&r, &sb);
    if (ok && r.i < r.n) ok = fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "pattern: unbalanced ')'");
    wgllm_strbuf_puts(&sb, ")");
    if (!end) wgllm_strbuf_puts(&sb, " char*");
    wgllm_strbuf_puts(&sb, " \"\\\"\" space");
    const char *n = ok ? (sb.oom ? (oom(c), NULL) : add_rule(c, name, sb.data)) : NULL;
    wgllm_strbuf_free(&sb);
    return n;
}

/* ---- schemas ---------------------------------------------------------------------- */

static const char *visit(struct conv *c, const struct wgllm_json *s, const char *name);

static bool in(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

static const char *const IGNORED[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",
                                      "name", "contentMediaType", "contentEncoding", NULL};

/* Every keyword of s is one this converter enforces or an annotation. */
static bool check_keywords(struct conv *c, const struct wgllm_json *s, const char *name, const char *const *known) {
    for (const struct wgllm_json *m = wgllm_json_first(s); m; m = wgllm_json_next(s, m))
        if (!in(m->key, known) && !in(m->key, IGNORED))
            return fail(c, WGLLM_STATUS_UNSUPPORTED, "keyword '%.60s' (at '%.80s') is not supported", m->key, name);
    return true;
}

/* A rule name from a property name: letters, digits and '-'. */
static void sub_name(char *out, size_t cap, const char *base, const char *part) {
    size_t n = (size_t)snprintf(out, cap, "%s-", base);
    for (const char *p = part; *p && n + 1 < cap && n < 100; p++) {
        const char ch = *p;
        out[n++] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ? ch : '-';
    }
    out[n] = 0;
}

static const struct wgllm_json *resolve(struct conv *c, const char *ref) {
    if (strncmp(ref, "#", 1)) return fail(c, WGLLM_STATUS_UNSUPPORTED, "$ref '%.80s': only local references (#/...) are supported", ref), NULL;
    const struct wgllm_json *v = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        v = wgllm_json_get(v, seg);
        if (!v) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "$ref '%.80s' points at nothing", ref), NULL;
    }
    return v;
}

static const char *ref_rule(struct conv *c, const char *ref) {
    for (size_t i = 0; i < c->n_refs; i++) {
        if (strcmp(c->refs[i].ptr, ref)) continue;
        for (size_t k = 0; k < c->n_lead; k++)
            if (c->lead[k] == i)
                return fail(c, WGLLM_STATUS_INVALID_ARGUMENT,
                            "$ref '%.80s' refers back to itself before any text (a left-recursive schema)", ref), NULL;
        return c->refs[i].name;
    }
    const struct wgllm_json *target = resolve(c, ref);
    if (!target) return NULL;
    char base[128];
    const char *last = strrchr(ref, '/');
    sub_name(base, sizeof base, "ref", last ? last + 1 : "root");
    /* a placeholder first: a schema that refers to itself finds its own name */
    char placeholder[32];
    snprintf(placeholder, sizeof placeholder, "\"\" # %zu", c->n_refs);
    const char *name = add_rule(c, base, placeholder);
    if (!name) return NULL;
    if (!wgllm_grow((void **)&c->refs, &c->cap_refs, c->n_refs + 1, sizeof *c->refs)) return oom(c), NULL;
    c->refs[c->n_refs].ptr = strdup(ref);
    c->refs[c->n_refs].name = strdup(name);
    if (!c->refs[c->n_refs].ptr || !c->refs[c->n_refs].name) return oom(c), NULL;
    c->n_refs++;
    char inner[160];
    snprintf(inner, sizeof inner, "%s-def", name);
    WGLLM_ASSERT(c->n_lead < sizeof c->lead / sizeof c->lead[0]); /* one per visit level, at most 64 */
    c->lead[c->n_lead++] = c->n_refs - 1;
    const char *body = visit(c, target, inner);
    c->n_lead--;
    if (body) set_body(c, name, body);
    return body ? name : NULL;
}

static const char *literal_rule(struct conv *c, const struct wgllm_json *v, struct wgllm_strbuf *alts) {
    struct wgllm_strbuf js = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &js);
    wgllm_json_w_value(&w, NULL, v);
    if (js.oom) return wgllm_strbuf_free(&js), oom(c), NULL;
    put_literal(alts, js.data, js.len);
    wgllm_strbuf_free(&js);
    return "";
}

static const char *object_rule(struct conv *c, const struct wgllm_json *props, const struct wgllm_json *required,
                               const struct wgllm_json *additional, const char *name) {
    prim(c, "space");
    const uint32_t n = props ? props->count : 0;
    const char **kv = calloc((size_t)n + 1, sizeof *kv);
    bool *req = calloc((size_t)n + 1, sizeof *req);
    if (!kv || !req) return free(kv), free(req), oom(c), NULL;
    uint32_t i = 0;
    for (const struct wgllm_json *p = wgllm_json_first(props); p && c->st == WGLLM_STATUS_OK; p = wgllm_json_next(props, p), i++) {
        char sub[160];
        sub_name(sub, sizeof sub, name, p->key);
        const char *vr = visit(c, p, sub);
        struct wgllm_strbuf b = {0};
        struct wgllm_strbuf key = {0};
        wgllm_json_put_string(&key, p->key, p->key_len);
        put_literal(&b, key.data ? key.data : "\"\"", key.len);
        wgllm_strbuf_printf(&b, " space \":\" space %s", vr ? vr : "");
        char kvn[180];
        snprintf(kvn, sizeof kvn, "%s-kv", sub);
        kv[i] = vr && !b.oom && !key.oom ? add_rule(c, kvn, b.data) : NULL;
        wgllm_strbuf_free(&b), wgllm_strbuf_free(&key);
        for (const struct wgllm_json *r = wgllm_json_first(required); r; r = wgllm_json_next(required, r))
            if (wgllm_json_is(r, WGLLM_JSON_STRING) && r->len == p->key_len && !memcmp(r->str, p->key, r->len)) req[i] = true;
    }
    const char *add_kv = NULL;
    if (c->st == WGLLM_STATUS_OK && additional && !wgllm_json_is(additional, WGLLM_JSON_FALSE)) {
        char an[160];
        snprintf(an, sizeof an, "%s-additional", name);
        const char *vr = wgllm_json_is(additional, WGLLM_JSON_TRUE) ? prim(c, "value") : visit(c, additional, an);
        prim(c, "string");
        struct wgllm_strbuf b = {0};
        wgllm_strbuf_printf(&b, "string \":\" space %s", vr ? vr : "");
        snprintf(an, sizeof an, "%s-additional-kv", name);
        add_kv = vr && !b.oom ? add_rule(c, an, b.data) : NULL;
        wgllm_strbuf_free(&b);
    }
    /* required ones in order, then any in-order subset of the optional ones: opt_k ::= kv_k ("," space opt_k+1..)? | opt_k+1.. */
    struct wgllm_strbuf body = {0};
    wgllm_strbuf_puts(&body, "\"{\" space");
    bool any = false;
    for (uint32_t k = 0; k < n; k++)
        if (req[k] && kv[k]) wgllm_strbuf_printf(&body, "%s %s", any ? " \",\" space" : "", kv[k]), any = true;
    const char *opt_next = NULL; /* the rule for a non-empty in-order subset of the optional ones from k on */
    for (uint32_t k = n; k-- > 0 && c->st == WGLLM_STATUS_OK;) {
        if (req[k] || !kv[k]) continue;
        struct wgllm_strbuf b = {0};
        if (opt_next) wgllm_strbuf_printf(&b, "%s ( \",\" space %s )? | %s", kv[k], opt_next, opt_next);
        else wgllm_strbuf_puts(&b, kv[k]);
        char on[180];
        snprintf(on, sizeof on, "%s-opt%u", name, k);
        opt_next = b.oom ? (oom(c), NULL) : add_rule(c, on, b.data);
        wgllm_strbuf_free(&b);
    }
    if (any) {
        if (opt_next) wgllm_strbuf_printf(&body, " ( \",\" space %s )?", opt_next);
        if (add_kv) wgllm_strbuf_printf(&body, " ( \",\" space %s )*", add_kv);
    } else if (opt_next && add_kv) {
        wgllm_strbuf_printf(&body, " ( %s ( \",\" space %s )* | %s ( \",\" space %s )* )?", opt_next, add_kv, add_kv, add_kv);
    } else if (opt_next || add_kv) {
        const char *x = opt_next ? opt_next : add_kv;
        if (add_kv) wgllm_strbuf_printf(&body, " ( %s ( \",\" space %s )* )?", x, x);
        else wgllm_strbuf_printf(&body, " ( %s )?", x);
    }
    wgllm_strbuf_puts(&body, " \"}\" space");
    const char *r = c->st == WGLLM_STATUS_OK && !body.oom ? add_rule(c, name, body.data) : NULL;
    wgllm_strbuf_free(&body);
    free(kv), free(req);
    return r;
}

static const struct wgllm_json *type_of(const struct wgllm_json *s) { return wgllm_json_get(s, "type"); }

static bool count_kw(struct conv *c, const struct wgllm_json *s, const char *k, uint32_t *out) {
    const struct wgllm_json *v = wgllm_json_get(s, k);
    if (!v) return true;
    if (!wgllm_json_is(v, WGLLM_JSON_NUMBER) || !v->integral || v->num < 0 || v->num > 100000)
        return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s' must be an integer from 0 to 100000", k);
    *out = (uint32_t)v->num;
    return true;
}

/* What type t (one name) of schema s is. */
static const char *typed(struct conv *c, const struct wgllm_json *s, const char *t, const char *name) {
    if (!strcmp(t, "object")) {
        static const char *const K[] = {"type", "properties", "required", "additionalProperties", "nullable", NULL};
        if (!check_keywords(c, s, name, K)) return NULL;
        const struct wgllm_json *props = wgllm_json_get(s, "properties"), *add = wgllm_json_get(s, "additionalProperties");
        if (props && !wgllm_json_is(props, WGLLM_JSON_OBJECT)) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'properties' must be an object"), NULL;
        if (!props && (!add || wgllm_json_is(add, WGLLM_JSON_TRUE))) return prim(c, "object");
        return object_rule(c, props, wgllm_json_get(s, "required"), add, name);
    }
    if (!strcmp(t, "array")) {
        static const char *const K[] = {"type", "items", "prefixItems", "minItems", "maxItems", "nullable", NULL};
        if (!check_keywords(c, s, name, K)) return NULL;
        uint32_t lo = 0, hi = UINT32_MAX;
        if (!count_kw(c, s, "minItems", &lo) || !count_kw(c, s, "maxItems", &hi)) return NULL;
        if (hi < lo) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': maxItems < minItems", name), NULL;
        const struct wgllm_json *items = wgllm_json_get(s, "items"), *prefix = wgllm_json_get(s, "prefixItems");
        if (wgllm_json_is(items, WGLLM_JSON_ARRAY)) prefix = items, items = NULL;
        prim(c, "space");
        struct wgllm_strbuf b = {0};
        wgllm_strbuf_puts(&b, "\"[\" space");
        if (prefix) {
            uint32_t k = 0;
            for (const struct wgllm_json *it = wgllm_json_first(prefix); it; it = wgllm_json_next(prefix, it), k++) {
                char sub[160];
                snprintf(sub, sizeof sub, "%s-%u", name, k);
                const char *ir = visit(c, it, sub);
                if (!ir) break;
                wgllm_strbuf_printf(&b, "%s %s", k ? " \",\" space" : "", ir);
            }
        } else {
            char sub[160];
            snprintf(sub, sizeof sub, "%s-item", name);
            const char *ir = items && !wgllm_json_is(items, WGLLM_JSON_TRUE) ? visit(c, items, sub) : prim(c, "value");
            if (ir && hi > 0) {
                if (lo == 0) wgllm_strbuf_printf(&b, " ( %s ", ir);
                else wgllm_strbuf_printf(&b, " %s ", ir);
                const uint32_t rlo = lo ? lo - 1 : 0;
                if (hi == UINT32_MAX) wgllm_strbuf_printf(&b, "( \",\" space %s ){%u,}", ir, rlo);
                else wgllm_strbuf_printf(&b, "( \",\" space %s ){%u,%u}", ir, rlo, hi - 1);
                if (lo == 0) wgllm_strbuf_puts(&b, " )?");
            }
        }
        wgllm_strbuf_puts(&b, " \"]\" space");
        const char *r = c->st == WGLLM_STATUS_OK && !b.oom ? add_rule(c, name, b.data) : NULL;
        wgllm_strbuf_free(&b);
        return r;
    }
    if (!strcmp(t, "string")) {
        static const char *const K[] = {"type", "minLength", "maxLength", "pattern", "format", "nullable", NULL};
        if (!check_keywords(c, s, name, K)) return NULL;
        const struct wgllm_json *pat = wgllm_json_get(s, "pattern"), *fmt = wgllm_json_get(s, "format");
        uint32_t lo = 0, hi = UINT32_MAX;
        if (!count_kw(c, s, "minLength", &lo) || !count_kw(c, s, "maxLength", &hi)) return NULL;
        if ((pat || fmt) && (wgllm_json_get(s, "minLength") || wgllm_json_get(s, "maxLength")))
            return fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': minLength/maxLength together with pattern or format", name), NULL;
        if (pat && fmt) return fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': pattern together with format", name), NULL;
        if (pat) return pattern_rule(c, pat, name);
        if (fmt) {
            if (!wgllm_json_is(fmt, WGLLM_JSON_STRING)) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'format' must be a string"), NULL;
            if (!strcmp(fmt->str, "date")) return prim(c, "date-string");
            if (!strcmp(fmt->str, "time")) return prim(c, "time-string");
            if (!strcmp(fmt->str, "date-time")) return prim(c, "date-time-string");
            if (!strcmp(fmt->str, "uuid")) return prim(c, "uuid");
            if (!strcmp(fmt->str, "email")) return prim(c, "email-string");
            return fail(c, WGLLM_STATUS_UNSUPPORTED, "string format '%.40s' is not supported (date, time, date-time, uuid, email are)", fmt->str), NULL;
        }
        if (lo == 0 && hi == UINT32_MAX) return prim(c, "string");
        if (hi < lo) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': maxLength < minLength", name), NULL;
        prim(c, "char");
        prim(c, "space");
        char body[128];
        if (hi == UINT32_MAX) snprintf(body, sizeof body, "\"\\\"\" char{%u,} \"\\\"\" space", lo);
        else snprintf(body, sizeof body, "\"\\\"\" char{%u,%u} \"\\\"\" space", lo, hi);
        if (hi != UINT32_MAX && hi > 2000) return fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': maxLength above 2000", name), NULL;
        return add_rule(c, name, body);
    }
    if (!strcmp(t, "integer") || !strcmp(t, "number")) {
        static const char *const K[] = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", NULL};
        if (!check_keywords(c, s, name, K)) return NULL;
        if (!strcmp(t, "integer")) return integer_rule(c, s, name);
        if (wgllm_json_get(s, "maximum") || wgllm_json_get(s, "exclusiveMaximum"))
            return fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': maximum on a number is not supported (on an integer it is)", name), NULL;
        const struct wgllm_json *mn = wgllm_json_get(s, "minimum"), *xmn = wgllm_json_get(s, "exclusiveMinimum");
        if ((mn && !(wgllm_json_is(mn, WGLLM_JSON_NUMBER) && mn->num == 0)) || (xmn && !wgllm_json_is_bool(xmn)))
            return fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': a number's minimum other than 0 is not supported", name), NULL;
        if (!mn) return prim(c, "number");
        prim(c, "integral-part"), prim(c, "decimal-part"), prim(c, "space");
        return add_rule(c, "nonnegative-number", "integral-part (\".\" decimal-part)? ([eE] [-+]? integral-part)? space");
    }
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
        static const char *const K[] = {"type", "nullable", NULL};
        if (!check_keywords(c, s, name, K)) return NULL;
        return prim(c, t);
    }
    return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': unknown type '%.40s'", name, t), NULL;
}

/* allOf of object schemas (through $ref): one object with every property and requirement. */
static const char *all_of(struct conv *c, const struct wgllm_json *list, const char *name) {
    struct wgllm_strbuf props = {0}, req = {0};
    wgllm_strbuf_puts(&props, "{\"type\":\"object\",\"properties\":{");
    wgllm_strbuf_puts(&req, "],\"required\":[");
    bool fp = true, fr = true;
    for (const struct wgllm_json *s = wgllm_json_first(list); s && c->st == WGLLM_STATUS_OK; s = wgllm_json_next(list, s)) {
        const struct wgllm_json *ref = wgllm_json_get(s, "$ref");
        if (wgllm_json_is(ref, WGLLM_JSON_STRING)) s = resolve(c, ref->str);
        if (!s) break;
        const struct wgllm_json *p = wgllm_json_get(s, "properties"), *r = wgllm_json_get(s, "required");
        if (!p) {
            fail(c, WGLLM_STATUS_UNSUPPORTED, "'%s': allOf is supported for object schemas with properties", name);
            break;
        }
        for (const struct wgllm_json *m = wgllm_json_first(p); m; m = wgllm_json_next(p, m)) {
            if (!fp) wgllm_strbuf_putc(&props, ',');
            fp = false;
            wgllm_json_put_string(&props, m->key, m->key_len);
            wgllm_strbuf_putc(&props, ':');
            struct wgllm_json_writer w;
            wgllm_json_w_init(&w, &props);
            wgllm_json_w_value(&w, NULL, m);
        }
        for (const struct wgllm_json *m = wgllm_json_first(r); m; m = wgllm_json_next(r, m)) {
            if (!fr) wgllm_strbuf_putc(&req, ',');
            fr = false;
            struct wgllm_json_writer w;
            wgllm_json_w_init(&w, &req);
            wgllm_json_w_value(&w, NULL, m);
        }
    }
    wgllm_strbuf_puts(&req, "]}");
    wgllm_strbuf_puts(&props, "}");
    const char *out = NULL;
    if (c->st == WGLLM_STATUS_OK && !props.oom && !req.oom) {
        /* the merged schema is parsed into its own document; refs inside still resolve against the root */
        wgllm_strbuf_put(&props, req.data + 1, req.len - 1);
        struct wgllm_json_doc d = {0};
        struct wgllm_json_error je;
        if (!props.oom && wgllm_json_parse(props.data, props.len, NULL, &d, &je)) {
            const struct wgllm_json *m = wgllm_json_root(&d);
            out = object_rule(c, wgllm_json_get(m, "properties"), wgllm_json_get(m, "required"), NULL, name);
            wgllm_json_doc_free(&d);
        } else {
            oom(c);
        }
    }
    wgllm_strbuf_free(&props), wgllm_strbuf_free(&req);
    return out;
}

static const char *visit_schema(struct conv *c, const struct wgllm_json *s, const char *name);

/* A schema that matches text of its own first (anything but $ref, anyOf,
 * oneOf) ends the lead of the refs around it while its parts are written. */
static const char *visit(struct conv *c, const struct wgllm_json *s, const char *name) {
    const bool passes = wgllm_json_is(s, WGLLM_JSON_OBJECT) &&
                        (wgllm_json_get(s, "$ref") || wgllm_json_get(s, "anyOf") || wgllm_json_get(s, "oneOf"));
    const size_t n_lead = c->n_lead;
    if (!passes) c->n_lead = 0;
    const char *r = visit_schema(c, s, name);
    c->n_lead = n_lead;
    return r;
}

static const char *visit_schema(struct conv *c, const struct wgllm_json *s, const char *name) {
    if (c->st != WGLLM_STATUS_OK) return NULL;
    if (++c->depth > 64) return fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "the schema is nested deeper than 64"), NULL;
    const char *r = NULL;
    const struct wgllm_json *ref, *t, *any;
    if (wgllm_json_is(s, WGLLM_JSON_TRUE) || (wgllm_json_is(s, WGLLM_JSON_OBJECT) && s->count == 0)) {
        r = prim(c, "value");
    } else if (!wgllm_json_is(s, WGLLM_JSON_OBJECT)) {
        fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': a schema must be an object or true", name);
    } else if ((ref = wgllm_json_get(s, "$ref"))) {
        static const char *const K[] = {"$ref", NULL};
        if (!wgllm_json_is(ref, WGLLM_JSON_STRING)) fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'$ref' must be a string");
        else if (check_keywords(c, s, name, K)) r = ref_rule(c, ref->str);
    } else if ((any = wgllm_json_get(s, "anyOf")) || (any = wgllm_json_get(s, "oneOf"))) {
        static const char *const K[] = {"anyOf", "oneOf", NULL};
        if (!wgllm_json_is(any, WGLLM_JSON_ARRAY) || !any->count) {
            fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': anyOf/oneOf must be a non-empty array", name);
        } else if (check_keywords(c, s, name, K)) {
            struct wgllm_strbuf b = {0};
            uint32_t k = 0;
            for (const struct wgllm_json *a = wgllm_json_first(any); a && c->st == WGLLM_STATUS_OK; a = wgllm_json_next(any, a), k++) {
                char sub[160];
                snprintf(sub, sizeof sub, "%s-%u", name, k);
                const char *ar = visit(c, a, sub);
                if (ar) wgllm_strbuf_printf(&b, "%s%s", k ? " | " : "", ar);
            }
            r = c->st == WGLLM_STATUS_OK && !b.oom ? add_rule(c, name, b.data) : NULL;
            wgllm_strbuf_free(&b);
        }
    } else if ((any = wgllm_json_get(s, "allOf"))) {
        static const char *const K[] = {"allOf", NULL};
        if (!wgllm_json_is(any, WGLLM_JSON_ARRAY) || !any->count) fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'allOf' must be a non-empty array");
        else if (check_keywords(c, s, name, K)) r = all_of(c, any, name);
    } else if ((any = wgllm_json_get(s, "const")) || (any = wgllm_json_get(s, "enum"))) {
        static const char *const K[] = {"const", "enum", "type", "nullable", NULL};
        if (check_keywords(c, s, name, K)) {
            struct wgllm_strbuf b = {0};
            wgllm_strbuf_puts(&b, "(");
            if (wgllm_json_get(s, "const")) {
                literal_rule(c, any, &b);
            } else if (!wgllm_json_is(any, WGLLM_JSON_ARRAY) || !any->count) {
                fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': enum must be a non-empty array", name);
            } else {
                uint32_t k = 0;
                for (const struct wgllm_json *v = wgllm_json_first(any); v; v = wgllm_json_next(any, v), k++) {
                    if (k) wgllm_strbuf_puts(&b, " | ");
                    literal_rule(c, v, &b);
                }
            }
            wgllm_strbuf_puts(&b, ") space");
            prim(c, "space");
            r = c->st == WGLLM_STATUS_OK && !b.oom ? add_rule(c, name, b.data) : NULL;
            wgllm_strbuf_free(&b);
        }
    } else if ((t = type_of(s)) && wgllm_json_is(t, WGLLM_JSON_ARRAY)) {
        struct wgllm_strbuf b = {0};
        uint32_t k = 0;
        for (const struct wgllm_json *tt = wgllm_json_first(t); tt && c->st == WGLLM_STATUS_OK; tt = wgllm_json_next(t, tt), k++) {
            if (!wgllm_json_is(tt, WGLLM_JSON_STRING)) {
                fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': type names must be strings", name);
                break;
            }
            char sub[160];
            snprintf(sub, sizeof sub, "%s-%s", name, tt->str);
            const char *tr = typed(c, s, tt->str, sub);
            if (tr) wgllm_strbuf_printf(&b, "%s%s", k ? " | " : "", tr);
        }
        r = c->st == WGLLM_STATUS_OK && !b.oom && b.len ? add_rule(c, name, b.data) : (c->st == WGLLM_STATUS_OK ? fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': empty type list", name), NULL : NULL);
        wgllm_strbuf_free(&b);
    } else if (t) {
        if (!wgllm_json_is(t, WGLLM_JSON_STRING)) fail(c, WGLLM_STATUS_INVALID_ARGUMENT, "'%s': type must be a string or a list", name);
        else r = typed(c, s, t->str, name);
    } else if (wgllm_json_get(s, "properties") || wgllm_json_get(s, "additionalProperties")) {
        r = typed(c, s, "object", name);
    } else if (wgllm_json_get(s, "items") || wgllm_json_get(s, "prefixItems")) {
        r = typed(c, s, "array", name);
    } else {
        static const char *const K[] = {"nullable", NULL};
        if (check_keywords(c, s, name, K)) r = prim(c, "value");
    }
    /* OpenAPI's nullable: the value or null */
    if (r && wgllm_json_is(wgllm_json_get(s, "nullable"), WGLLM_JSON_TRUE)) {
        char b[200], n2[170];
        snprintf(b, sizeof b, "%s | null", r);
        snprintf(n2, sizeof n2, "%s-nullable", name);
        prim(c, "null");
        r = add_rule(c, n2, b);
    }
    c->depth--;
    return r;
}

/* ---- the builder: several schemas and hand-written rules in one grammar ---- */

struct wgllm_schema_grammar {
    struct conv c;
};

enum wgllm_status wgllm_schema_grammar_init(struct wgllm_schema_grammar **out, struct wgllm_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "json schema: out of memory");
    (*out)->c.err = err;
    return WGLLM_STATUS_OK;
}

void wgllm_schema_grammar_free(struct wgllm_schema_grammar *b) {
    if (!b) return;
    struct conv *c = &b->c;
    for (size_t i = 0; i < c->n_rules; i++) free(c->rules[i].name), free(c->rules[i].body);
    for (size_t i = 0; i < c->n_refs; i++) free(c->refs[i].ptr), free(c->refs[i].name);
    free(c->rules), free(c->refs);
    free(b);
}

const char *wgllm_schema_grammar_add(struct wgllm_schema_grammar *b, const char *schema, size_t len, const char *name,
                                     struct wgllm_error *err) {
    struct conv *c = &b->c;
    c->err = err;
    if (c->st != WGLLM_STATUS_OK) return NULL;
    struct wgllm_json_doc d = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 128, .max_nodes = 1 << 20, .max_bytes = 16u << 20};
    if (!wgllm_json_parse(schema, len, &lim, &d, &je)) {
        c->st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "json schema: not JSON at byte %zu: %s", je.offset,
                                je.message);
        return NULL;
    }
    /* $ref pointers are relative to this document: the rules they made for
     * another one stay (by name), the pointer map does not */
    for (size_t i = 0; i < c->n_refs; i++) free(c->refs[i].ptr), free(c->refs[i].name);
    c->n_refs = 0;
    c->root = wgllm_json_root(&d);
    const char *r = visit(c, c->root, name);
    c->root = NULL;
    wgllm_json_doc_free(&d);
    if (!r && c->st == WGLLM_STATUS_OK) oom(c);
    return c->st == WGLLM_STATUS_OK ? r : NULL;
}

const char *wgllm_schema_grammar_rule(struct wgllm_schema_grammar *b, const char *name, const char *body) {
    struct conv *c = &b->c;
    /* the primitives a hand-written rule may name */
    prim(c, "space");
    const char *r = add_rule(c, name, body);
    if (!r && c->st == WGLLM_STATUS_OK) oom(c);
    return r;
}

void wgllm_schema_grammar_literal(struct wgllm_strbuf *sb, const char *s, size_t n) { put_literal(sb, s, n); }

enum wgllm_status wgllm_schema_grammar_finish(struct wgllm_schema_grammar *b, const char *root, char **out,
                                              struct wgllm_error *err) {
    struct conv *c = &b->c;
    c->err = err;
    *out = NULL;
    if (c->st != WGLLM_STATUS_OK) return c->st;
    struct wgllm_strbuf sb = {0};
    /* the start rule is `root`: the root schema's own rule, or one that names what it is (root ::= string) */
    if (strcmp(root, "root")) wgllm_strbuf_printf(&sb, "root ::= %s\n", root);
    for (size_t i = 0; i < c->n_rules; i++) wgllm_strbuf_printf(&sb, "%s ::= %s\n", c->rules[i].name, c->rules[i].body);
    if (sb.oom) {
        wgllm_strbuf_free(&sb);
        oom(c);
        return c->st;
    }
    *out = wgllm_strbuf_take(&sb);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_json_schema_to_grammar(const char *schema, size_t len, char **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_schema_grammar *b;
    enum wgllm_status st = wgllm_schema_grammar_init(&b, err);
    if (st != WGLLM_STATUS_OK) return st;
    const char *root = wgllm_schema_grammar_add(b, schema, len, "root", err);
    st = root ? wgllm_schema_grammar_finish(b, root, out, err) : b->c.st;
    wgllm_schema_grammar_free(b);
    return st;
}
