/*
 * unicode.c - UTF-8, category flags, GPT-2 byte mapping and the regex
 * pre-tokenizer (see unicode.h). Everything here mirrors llama.cpp's
 * unicode.cpp in behaviour, including its quirks, because token ids must match.
 */
#include "vocab/unicode.h"
#include "base/strbuf.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * codepoints
 * ---------------------------------------------------------------------- */

uint32_t wgllm_unicode_flags(uint32_t cpt) {
    if (cpt > 0x10FFFF) return 0;
    size_t lo = 0, hi = wgllm_unicode_n_flag_runs; /* last run with start <= cpt */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (wgllm_unicode_flag_runs[mid][0] <= cpt) lo = mid;
        else hi = mid;
    }
    return wgllm_unicode_flag_runs[lo][1];
}

uint32_t wgllm_unicode_tolower(uint32_t cpt) {
    size_t lo = 0, hi = wgllm_unicode_n_lower;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (wgllm_unicode_lower_map[mid][0] < cpt) lo = mid + 1;
        else hi = mid;
    }
    if (lo < wgllm_unicode_n_lower && wgllm_unicode_lower_map[lo][0] == cpt)
        return wgllm_unicode_lower_map[lo][1];
    return cpt;
}

uint32_t wgllm_unicode_nfd_first(uint32_t cpt) {
    if (cpt >= 0xAC00 && cpt <= 0xD7A3) return 0x1100 + (cpt - 0xAC00) / 588; /* Hangul: leading jamo */
    size_t lo = 0, hi = wgllm_unicode_n_nfd;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (wgllm_unicode_nfd_map[mid][0] < cpt) lo = mid + 1;
        else hi = mid;
    }
    if (lo < wgllm_unicode_n_nfd && wgllm_unicode_nfd_map[lo][0] == cpt) return wgllm_unicode_nfd_map[lo][1];
    return cpt;
}

size_t wgllm_unicode_len_utf8(char c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[(uint8_t)c >> 4];
}

/* One codepoint at s[*off]; false (offset untouched) for llama.cpp's "invalid
 * character" cases. Overlong forms are accepted, as llama.cpp does. */
static bool decode_one(const uint8_t *s, size_t len, size_t *off, uint32_t *cpt) {
    size_t o = *off;
    uint8_t c = s[o];
    if (!(c & 0x80)) { *cpt = c; *off = o + 1; return true; }
    if (!(c & 0x40)) return false;
#define CONT(k) (o + (k) < len && (s[o + (k)] & 0xC0) == 0x80)
    if (!(c & 0x20)) {
        if (!CONT(1)) return false;
        *cpt = ((uint32_t)(c & 0x1F) << 6) | (s[o + 1] & 0x3F);
        *off = o + 2;
        return true;
    }
    if (!(c & 0x10)) {
        if (!CONT(1) || !CONT(2)) return false;
        *cpt = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[o + 1] & 0x3F) << 6) | (s[o + 2] & 0x3F);
        *off = o + 3;
        return true;
    }
    if (!(c & 0x08)) {
        if (!CONT(1) || !CONT(2) || !CONT(3)) return false;
        *cpt = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3F) << 12) |
               ((uint32_t)(s[o + 2] & 0x3F) << 6) | (s[o + 3] & 0x3F);
        /* beyond Unicode (F4 90.. to F7): llama.cpp aborts on these; we treat
         * the lead byte as invalid like any other bad sequence */
        if (*cpt > 0x10FFFF) return false;
        *off = o + 4;
        return true;
    }
#undef CONT
    return false;
}

size_t wgllm_unicode_decode(const char *s, size_t len, uint32_t *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t off = 0, n = 0;
    while (off < len) {
        uint32_t cpt;
        if (decode_one(u, len, &off, &cpt)) {
            out[n++] = cpt;
        } else {
            out[n++] = 0xFFFD;
            off++;
        }
    }
    return n;
}

int wgllm_unicode_encode(uint32_t cpt, char out[4]) {
    if (cpt <= 0x7F) { out[0] = (char)cpt; return 1; }
    if (cpt <= 0x7FF) {
        out[0] = (char)(0xC0 | ((cpt >> 6) & 0x1F));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        out[0] = (char)(0xE0 | ((cpt >> 12) & 0x0F));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    WGLLM_ASSERT(cpt <= 0x10FFFF);
    out[0] = (char)(0xF0 | ((cpt >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cpt & 0x3F));
    return 4;
}

/* GPT-2: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * 256, 257, ... in byte order. */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t wgllm_unicode_byte_to_cpt(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (int c = 0; c < b; c++) n += !byte_is_printable(c);
    return 256 + n;
}

int wgllm_unicode_cpt_to_byte(uint32_t cpt) {
    if (cpt < 256) return byte_is_printable((int)cpt) ? (int)cpt : -1;
    uint32_t n = 0;
    for (int c = 0; c < 256; c++) {
        if (byte_is_printable(c)) continue;
        if (256 + n == cpt) return c;
        n++;
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * a growable list of word lengths
 * ---------------------------------------------------------------------- */

struct lens {
    size_t *v, n, cap;
    bool oom;
};

static void lens_push(struct lens *l, size_t x) {
    if (l->n == l->cap && !wgllm_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) {
        l->oom = true;
        return;
    }
    l->v[l->n++] = x;
}

/* ------------------------------------------------------------------------
 * hand-written matchers (llama.cpp's unicode_regex_split_custom_*)
 * ---------------------------------------------------------------------- */

#define OUT_OF_RANGE 0xFFFFFFFFu

struct chunk {
    const uint32_t *cpts;
    size_t ini, end, prev_end;
    struct lens *out;
};

static uint32_t ch_cpt(const struct chunk *c, size_t pos) {
    return (pos >= c->ini && pos < c->end) ? c->cpts[pos] : OUT_OF_RANGE;
}
static uint32_t ch_flags(const struct chunk *c, size_t pos) {
    return (pos >= c->ini && pos < c->end) ? wgllm_unicode_flags(c->cpts[pos]) : 0;
}
static size_t ch_add(struct chunk *c, size_t end) {
    size_t len = end - c->prev_end;
    if (len > 0) lens_push(c->out, len);
    c->prev_end = end;
    return len;
}

#define F_WS WGLLM_UCF_WHITESPACE
#define F_L WGLLM_UCF_LETTER
#define F_N WGLLM_UCF_NUMBER

/* The last alternatives of the gpt2 and llama3 expressions at pos, where
 * nws whitespace characters start: \s+(?!\S) (the run but its last
 * character, when more text follows), else \s+, else one character of
 * anything. Adds the piece; returns where the next one starts. */
static size_t split_ws_run(struct chunk *c, size_t pos, size_t nws) {
    if (nws > 1 && ch_cpt(c, pos + nws) != OUT_OF_RANGE)
        pos += nws - 1;
    else if (nws > 0)
        pos += nws;
    else
        pos++;
    ch_add(c, pos);
    return pos;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(struct chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cpt = ch_cpt(c, pos), flags = ch_flags(c, pos);
        if (cpt == '\'' && pos + 1 < c->end) {
            uint32_t n1 = ch_cpt(c, pos + 1);
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                pos += ch_add(c, pos + 2);
                continue;
            }
            if (pos + 2 < c->end) {
                uint32_t n2 = ch_cpt(c, pos + 2);
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += ch_add(c, pos + 3);
                    continue;
                }
            }
        }
        uint32_t f2 = cpt == ' ' ? ch_flags(c, pos + 1) : flags;
        if (f2 & F_L) {
            pos += (cpt == ' ');
            while (f2 & F_L) f2 = ch_flags(c, ++pos);
            ch_add(c, pos);
            continue;
        }
        if (f2 & F_N) {
            pos += (cpt == ' ');
            while (f2 & F_N) f2 = ch_flags(c, ++pos);
            ch_add(c, pos);
            continue;
        }
        if (!(f2 & (F_WS | F_L | F_N)) && f2) {
            pos += (cpt == ' ');
            while (!(f2 & (F_WS | F_L | F_N)) && f2) f2 = ch_flags(c, ++pos);
            ch_add(c, pos);
            continue;
        }
        size_t nws = 0;
        while (ch_flags(c, pos + nws) & F_WS) nws++;
        pos = split_ws_run(c, pos, nws);
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(struct chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cpt = ch_cpt(c, pos), flags = ch_flags(c, pos);
        if (cpt == '\'' && pos + 1 < c->end) {
            uint32_t n1 = wgllm_unicode_tolower(ch_cpt(c, pos + 1));
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                pos += ch_add(c, pos + 2);
                continue;
            }
            if (pos + 2 < c->end) {
                uint32_t n2 = wgllm_unicode_tolower(ch_cpt(c, pos + 2));
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += ch_add(c, pos + 3);
                    continue;
                }
            }
        }
        if (!(cpt == '\r' || cpt == '\n' || (flags & F_N))) {
            if ((flags & F_L) || (ch_flags(c, pos + 1) & F_L)) {
                pos++;
                while (ch_flags(c, pos) & F_L) pos++;
                ch_add(c, pos);
                continue;
            }
        }
        if (flags & F_N) {
            size_t ini = pos;
            while (ch_flags(c, pos) & F_N) {
                if (++pos - ini >= 3) {
                    ch_add(c, pos);
                    ini = pos;
                }
            }
            ch_add(c, pos);
            continue;
        }
        uint32_t f2 = cpt == ' ' ? ch_flags(c, pos + 1) : flags;
        /* llama.cpp tests `flags` (not f2) for "defined" here; kept as is */
        if (!(f2 & (F_WS | F_L | F_N)) && flags) {
            pos += (cpt == ' ');
            while (!(f2 & (F_WS | F_L | F_N)) && f2) f2 = ch_flags(c, ++pos);
            uint32_t c2 = ch_cpt(c, pos);
            while (c2 == '\r' || c2 == '\n') c2 = ch_cpt(c, ++pos);
            ch_add(c, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (ch_flags(c, pos + nws) & F_WS) {
            uint32_t c2 = ch_cpt(c, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) {
            pos = last_rn;
            ch_add(c, pos);
            continue;
        }
        pos = split_ws_run(c, pos, nws);
    }
}

/* ------------------------------------------------------------------------
 * a small backtracking regex engine (ECMAScript semantics as std::regex)
 *
 * Regexes that use \p{..} run on "collapsed" text, as in llama.cpp: ASCII
 * stays, other codepoints become one code per category (0xD0 other, 0xD1 N,
 * 0xD2 L, 0xD3 P, 0xD4 M, 0xD5 S, 0x0B whitespace), and \p{X} matches that
 * code plus the ASCII members of X. Other regexes run on the codepoints with
 * non-ASCII whitespace replaced by 0x0B.
 * ---------------------------------------------------------------------- */

/* OP_STAR is a greedy X* or X+ (x = the minimum count) of one char (y = 0)
 * or one class (y = 1): it consumes the longest run at once and leaves a
 * single backtrack entry for all the shorter ones, so `\p{L}+` over a
 * 32 MiB run of letters needs one stack entry, not 32 million. */
enum { OP_CHAR, OP_CLASS, OP_SPLIT, OP_JMP, OP_BOL, OP_EOL, OP_LOOK, OP_MATCH, OP_STAR };

struct inst {
    uint8_t op;
    bool neg;      /* OP_LOOK: negative lookahead */
    uint32_t c;    /* OP_CHAR: the char; OP_CLASS: class index */
    int32_t x, y;  /* OP_SPLIT: preferred, other; OP_JMP: x; OP_LOOK: x = continuation */
};

struct cls {
    bool neg, space, nonspace, digit, nondigit, word, nonword;
    uint32_t (*r)[2];
    int nr;
    size_t cap;
};

enum { N_CHAR, N_CLASS, N_CAT, N_ALT, N_REP, N_BOL, N_EOL, N_LOOK, N_EMPTY };

struct node {
    int type;
    uint32_t c;        /* N_CHAR char / N_CLASS index */
    int min, max;      /* N_REP; max < 0 = unbounded */
    bool lazy, neg;    /* N_REP lazy; N_LOOK negative */
    struct node **kids;
    int nk;
    size_t kids_cap;
    struct node *next_alloc; /* the compile's list of every node (struct compile) */
};

struct rx {
    bool collapsed;
    int custom; /* 0 regex, 1 gpt2, 2 llama3 */
    struct inst *prog;
    int n;
    size_t cap;
    struct cls *cls;
    int ncls;
    size_t cls_cap;
};

struct wgllm_pretok {
    struct rx *rx;
    int n;
};

struct parser {
    const uint32_t *p;
    size_t i, n;
    bool collapsed, bad;
    struct rx *rx;
};

/* One regex compile (compile()): every node and scratch array it made, and
 * where an allocation that fails jumps to. The parser and the code
 * generator are recursive, and a failed allocation can happen at any depth
 * with subtrees held only by the frames above; so instead of unwinding each
 * frame by hand, every allocation is listed here, a failure longjmps back to
 * compile(), and compile() frees the list either way. (Previously a failure
 * aborted the process while loading a model.) The context is per thread:
 * models may load on several threads at once. */
struct scratch {
    struct scratch *next;
    int v[];
};
struct compile {
    jmp_buf oom;
    struct node *nodes;
    struct scratch *scratch;
};
static _Thread_local struct compile *cur_compile;

static _Noreturn void compile_oom(void) {
    WGLLM_ASSERT(cur_compile != NULL); /* allocations below happen only inside compile() */
    longjmp(cur_compile->oom, 1);
}

static struct node *mk(int type) {
    struct node *nd = calloc(1, sizeof *nd);
    if (!nd) compile_oom();
    nd->type = type;
    nd->next_alloc = cur_compile->nodes;
    cur_compile->nodes = nd;
    return nd;
}

/* n ints of scratch for gen(), freed with the compile */
static int *scratch_ints(size_t n) {
    struct scratch *t = calloc(1, sizeof *t + sizeof(int) * (n ? n : 1));
    if (!t) compile_oom();
    t->next = cur_compile->scratch;
    cur_compile->scratch = t;
    return t->v;
}

static void add_kid(struct node *nd, struct node *k) {
    if (!wgllm_grow((void **)&nd->kids, &nd->kids_cap, (size_t)nd->nk + 1, sizeof *nd->kids)) compile_oom();
    nd->kids[nd->nk++] = k;
}

static void cls_range(struct cls *c, uint32_t lo, uint32_t hi) {
    if (!wgllm_grow((void **)&c->r, &c->cap, (size_t)c->nr + 1, sizeof *c->r)) compile_oom();
    c->r[c->nr][0] = lo;
    c->r[c->nr][1] = hi;
    c->nr++;
}

static int new_cls(struct rx *rx) {
    if (!wgllm_grow((void **)&rx->cls, &rx->cls_cap, (size_t)rx->ncls + 1, sizeof *rx->cls)) compile_oom();
    memset(&rx->cls[rx->ncls], 0, sizeof rx->cls[0]);
    return rx->ncls++;
}

/* Adds the collapsed form of \p{X}: its category code and ASCII members. */
static bool cls_category(struct cls *c, char cat) {
    switch (cat) {
    case 'N': cls_range(c, 0xD1, 0xD1); cls_range(c, 0x30, 0x39); return true;
    case 'L': cls_range(c, 0xD2, 0xD2); cls_range(c, 0x41, 0x5A); cls_range(c, 0x61, 0x7A); return true;
    case 'P':
        cls_range(c, 0xD3, 0xD3);
        cls_range(c, 0x21, 0x23); cls_range(c, 0x25, 0x2A); cls_range(c, 0x2C, 0x2F);
        cls_range(c, 0x3A, 0x3B); cls_range(c, 0x3F, 0x40); cls_range(c, 0x5B, 0x5D);
        cls_range(c, 0x5F, 0x5F); cls_range(c, 0x7B, 0x7B); cls_range(c, 0x7D, 0x7D);
        return true;
    case 'M': cls_range(c, 0xD4, 0xD4); return true;
    case 'S':
        cls_range(c, 0xD5, 0xD5);
        cls_range(c, 0x24, 0x24); cls_range(c, 0x2B, 0x2B); cls_range(c, 0x3C, 0x3E);
        cls_range(c, 0x5E, 0x5E); cls_range(c, 0x60, 0x60); cls_range(c, 0x7C, 0x7C);
        cls_range(c, 0x7E, 0x7E);
        return true;
    }
    return false;
}

static bool at(struct parser *ps, uint32_t c) { return ps->i < ps->n && ps->p[ps->i] == c; }

static uint32_t hexval(struct parser *ps, int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        if (ps->i >= ps->n) { ps->bad = true; return 0; }
        uint32_t d = ps->p[ps->i++];
        if (d >= '0' && d <= '9') v = v * 16 + (d - '0');
        else if (d >= 'a' && d <= 'f') v = v * 16 + (d - 'a' + 10);
        else if (d >= 'A' && d <= 'F') v = v * 16 + (d - 'A' + 10);
        else { ps->bad = true; return 0; }
    }
    return v;
}

static bool is_letter_subcat(uint32_t c) { return c == 'u' || c == 'l' || c == 't' || c == 'm' || c == 'o'; }

/* Parses the escape after '\'. Returns a literal char, or -1 when it added
 * to class `c` (\s, \d, \p{..}, ...). */
static int64_t parse_escape(struct parser *ps, struct cls *c) {
    if (ps->i >= ps->n) { ps->bad = true; return 0; }
    uint32_t e = ps->p[ps->i++];
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': return hexval(ps, 2);
    case 'u': return hexval(ps, 4);
    case 's': c->space = true; return -1;
    case 'S': c->nonspace = true; return -1;
    case 'd': c->digit = true; return -1;
    case 'D': c->nondigit = true; return -1;
    case 'w': c->word = true; return -1;
    case 'W': c->nonword = true; return -1;
    case 'p':
        /* \p{X}; the letter subcategories \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo}
         * collapse to \p{L}, as llama.cpp's k_ucat_enum maps them */
        if (ps->i + 2 < ps->n && ps->p[ps->i] == '{' && ps->p[ps->i + 2] == '}' && ps->collapsed &&
            cls_category(c, (char)ps->p[ps->i + 1])) {
            ps->i += 3;
            return -1;
        }
        if (ps->i + 3 < ps->n && ps->p[ps->i] == '{' && ps->p[ps->i + 1] == 'L' && ps->p[ps->i + 3] == '}' &&
            ps->collapsed && is_letter_subcat(ps->p[ps->i + 2])) {
            cls_category(c, 'L');
            ps->i += 4;
            return -1;
        }
        ps->bad = true;
        return 0;
    default: return e;
    }
}

static struct node *parse_alt(struct parser *ps);

static struct node *parse_class(struct parser *ps) {
    int ci = new_cls(ps->rx);
    struct cls *c = &ps->rx->cls[ci];
    if (at(ps, '^')) { c->neg = true; ps->i++; }
    bool first = true;
    while (ps->i < ps->n && (!at(ps, ']') || first)) {
        first = false;
        int64_t lo;
        uint32_t ch = ps->p[ps->i++];
        if (ch == '\\') {
            c = &ps->rx->cls[ci];
            lo = parse_escape(ps, c);
            if (lo < 0) continue;
        } else {
            lo = ch;
        }
        if (at(ps, '-') && ps->i + 1 < ps->n && ps->p[ps->i + 1] != ']') {
            ps->i++;
            int64_t hi;
            uint32_t ch2 = ps->p[ps->i++];
            if (ch2 == '\\') {
                hi = parse_escape(ps, c);
                if (hi < 0) { ps->bad = true; break; }
            } else {
                hi = ch2;
            }
            if (hi < lo) { ps->bad = true; break; }
            cls_range(c, (uint32_t)lo, (uint32_t)hi);
        } else {
            cls_range(c, (uint32_t)lo, (uint32_t)lo);
        }
    }
    if (!at(ps, ']')) ps->bad = true;
    else ps->i++;
    struct node *nd = mk(N_CLASS);
    nd->c = (uint32_t)ci;
    return nd;
}

static int parse_int(struct parser *ps) {
    int v = -1;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (int)(ps->p[ps->i++] - '0');
        if (v > 1000) { ps->bad = true; return 0; }
    }
    return v;
}

static struct node *parse_atom(struct parser *ps) {
    uint32_t ch = ps->p[ps->i++];
    if (ch == '(') {
        struct node *nd;
        if (at(ps, '?')) {
            ps->i++;
            if (at(ps, ':')) {
                ps->i++;
                nd = parse_alt(ps);
            } else if (at(ps, '=') || at(ps, '!')) {
                nd = mk(N_LOOK);
                nd->neg = at(ps, '!');
                ps->i++;
                add_kid(nd, parse_alt(ps));
            } else {
                ps->bad = true; /* (?i: is not ECMAScript: std::regex rejects it too */
                return mk(N_EMPTY);
            }
        } else {
            nd = parse_alt(ps);
        }
        if (!at(ps, ')')) ps->bad = true;
        else ps->i++;
        return nd;
    }
    if (ch == '[') return parse_class(ps);
    if (ch == '^') return mk(N_BOL);
    if (ch == '$') return mk(N_EOL);
    if (ch == '.') {
        int ci = new_cls(ps->rx);
        struct cls *c = &ps->rx->cls[ci];
        c->neg = true;
        cls_range(c, '\n', '\n');
        cls_range(c, '\r', '\r');
        struct node *nd = mk(N_CLASS);
        nd->c = (uint32_t)ci;
        return nd;
    }
    if (ch == '\\') {
        int ci = new_cls(ps->rx);
        int64_t lit = parse_escape(ps, &ps->rx->cls[ci]);
        if (lit < 0) {
            struct node *nd = mk(N_CLASS);
            nd->c = (uint32_t)ci;
            return nd;
        }
        ps->rx->ncls--; /* unused */
        free(ps->rx->cls[ci].r);
        ch = (uint32_t)lit;
    } else if (ch == ')' || ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == '|') {
        ps->bad = true;
    }
    struct node *nd = mk(N_CHAR);
    nd->c = ch;
    return nd;
}

static struct node *parse_seq(struct parser *ps) {
    struct node *seq = mk(N_CAT);
    while (ps->i < ps->n && !at(ps, '|') && !at(ps, ')') && !ps->bad) {
        struct node *a = parse_atom(ps);
        for (;;) {
            int mn, mx;
            if (at(ps, '*')) { mn = 0; mx = -1; ps->i++; }
            else if (at(ps, '+')) { mn = 1; mx = -1; ps->i++; }
            else if (at(ps, '?')) { mn = 0; mx = 1; ps->i++; }
            else if (at(ps, '{')) {
                ps->i++;
                mn = parse_int(ps);
                mx = mn;
                if (at(ps, ',')) { ps->i++; mx = parse_int(ps); }
                if (!at(ps, '}') || mn < 0 || (mx >= 0 && mx < mn)) { ps->bad = true; break; }
                ps->i++;
            } else break;
            struct node *r = mk(N_REP);
            r->min = mn;
            r->max = mx;
            if (at(ps, '?')) { r->lazy = true; ps->i++; }
            add_kid(r, a);
            a = r;
        }
        add_kid(seq, a);
    }
    return seq;
}

static struct node *parse_alt(struct parser *ps) {
    struct node *first = parse_seq(ps);
    if (!at(ps, '|')) return first;
    struct node *alt = mk(N_ALT);
    add_kid(alt, first);
    while (at(ps, '|') && !ps->bad) {
        ps->i++;
        add_kid(alt, parse_seq(ps));
    }
    return alt;
}

static int emit(struct rx *rx, uint8_t op) {
    if (!wgllm_grow((void **)&rx->prog, &rx->cap, (size_t)rx->n + 1, sizeof *rx->prog)) compile_oom();
    memset(&rx->prog[rx->n], 0, sizeof rx->prog[0]);
    rx->prog[rx->n].op = op;
    return rx->n++;
}

static void gen(struct rx *rx, const struct node *nd) {
    switch (nd->type) {
    case N_EMPTY: break;
    case N_CHAR: { int k = emit(rx, OP_CHAR); rx->prog[k].c = nd->c; break; }
    case N_CLASS: { int k = emit(rx, OP_CLASS); rx->prog[k].c = nd->c; break; }
    case N_BOL: emit(rx, OP_BOL); break;
    case N_EOL: emit(rx, OP_EOL); break;
    case N_CAT:
        for (int i = 0; i < nd->nk; i++) gen(rx, nd->kids[i]);
        break;
    case N_ALT: {
        int *jmps = scratch_ints((size_t)nd->nk);
        for (int i = 0; i < nd->nk; i++) {
            int split = -1;
            if (i + 1 < nd->nk) split = emit(rx, OP_SPLIT);
            if (split >= 0) rx->prog[split].x = rx->n;
            gen(rx, nd->kids[i]);
            if (i + 1 < nd->nk) {
                jmps[i] = emit(rx, OP_JMP);
                rx->prog[split].y = rx->n;
            }
        }
        for (int i = 0; i + 1 < nd->nk; i++) rx->prog[jmps[i]].x = rx->n;
        break;
    }
    case N_REP: {
        const struct node *kid = nd->kids[0];
        if (nd->max < 0 && !nd->lazy && (kid->type == N_CHAR || kid->type == N_CLASS)) {
            int k = emit(rx, OP_STAR);
            rx->prog[k].c = kid->c;
            rx->prog[k].x = nd->min;
            rx->prog[k].y = kid->type == N_CLASS;
            break;
        }
        for (int i = 0; i < nd->min; i++) gen(rx, nd->kids[0]);
        if (nd->max < 0) {
            int split = emit(rx, OP_SPLIT);
            gen(rx, nd->kids[0]);
            int jmp = emit(rx, OP_JMP);
            rx->prog[jmp].x = split;
            int body = split + 1, out = rx->n;
            rx->prog[split].x = nd->lazy ? out : body;
            rx->prog[split].y = nd->lazy ? body : out;
        } else {
            int nopt = nd->max - nd->min;
            int *splits = scratch_ints((size_t)(nopt > 0 ? nopt : 1));
            for (int i = 0; i < nopt; i++) {
                splits[i] = emit(rx, OP_SPLIT);
                gen(rx, nd->kids[0]);
            }
            for (int i = 0; i < nopt; i++) {
                int body = splits[i] + 1, out = rx->n;
                rx->prog[splits[i]].x = nd->lazy ? out : body;
                rx->prog[splits[i]].y = nd->lazy ? body : out;
            }
        }
        break;
    }
    case N_LOOK: {
        int look = emit(rx, OP_LOOK);
        rx->prog[look].neg = nd->neg;
        gen(rx, nd->kids[0]);
        emit(rx, OP_MATCH);
        rx->prog[look].x = rx->n;
        break;
    }
    }
}

static bool rx_isspace(uint32_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }
static bool rx_isdigit(uint32_t c) { return c >= '0' && c <= '9'; }
static bool rx_isword(uint32_t c) {
    return rx_isdigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool cls_match(const struct cls *c, uint32_t ch) {
    bool in = false;
    for (int i = 0; i < c->nr && !in; i++) in = ch >= c->r[i][0] && ch <= c->r[i][1];
    if (!in) {
        in = (c->space && rx_isspace(ch)) || (c->nonspace && !rx_isspace(ch)) ||
             (c->digit && rx_isdigit(ch)) || (c->nondigit && !rx_isdigit(ch)) ||
             (c->word && rx_isword(ch)) || (c->nonword && !rx_isword(ch));
    }
    return in != c->neg;
}

/* A backtrack entry: resume at pc with positions pos, pos - 1, ..., lo
 * (one position unless it comes from OP_STAR). */
struct thread {
    int32_t pc;
    size_t pos, lo;
};

struct stack {
    struct thread *t;
    size_t n, cap;
};

static bool rx_one(const struct rx *rx, const struct inst *in, uint32_t ch) {
    return in->y ? cls_match(&rx->cls[in->c], ch) : ch == in->c;
}

static bool stack_push(struct stack *st, struct thread t) {
    if (st->n == st->cap && !wgllm_grow((void **)&st->t, &st->cap, st->n + 1, sizeof *st->t)) return false;
    st->t[st->n++] = t;
    return true;
}

#define RX_NOMEM (-2)

/* Depth-first run of the program from (pc, pos) over text[0..n): the first
 * MATCH reached in priority order wins, as in a backtracking ECMAScript
 * engine. Returns the end position, -1 when nothing matches, or RX_NOMEM. */
static int64_t rx_run(const struct rx *rx, int32_t pc0, const uint32_t *text, size_t n, size_t pos0) {
    struct stack st = {0};
    int64_t result = -1;
    struct thread cur = {pc0, pos0, pos0};
    for (;;) {
        bool fail = false;
        for (;;) {
            const struct inst *in = &rx->prog[cur.pc];
            if (in->op == OP_MATCH) { result = (int64_t)cur.pos; goto done; }
            if (in->op == OP_CHAR) {
                if (cur.pos < n && text[cur.pos] == in->c) { cur.pos++; cur.pc++; }
                else { fail = true; break; }
            } else if (in->op == OP_CLASS) {
                if (cur.pos < n && cls_match(&rx->cls[in->c], text[cur.pos])) { cur.pos++; cur.pc++; }
                else { fail = true; break; }
            } else if (in->op == OP_SPLIT) {
                if (!stack_push(&st, (struct thread){in->y, cur.pos, cur.pos})) { result = RX_NOMEM; goto done; }
                cur.pc = in->x;
            } else if (in->op == OP_STAR) {
                size_t e = cur.pos;
                while (e < n && rx_one(rx, in, text[e])) e++;
                const size_t lo = cur.pos + (size_t)in->x;
                if (e < lo) { fail = true; break; }
                if (e > lo && !stack_push(&st, (struct thread){cur.pc + 1, e - 1, lo})) { result = RX_NOMEM; goto done; }
                cur.pos = e;
                cur.pc++;
            } else if (in->op == OP_JMP) {
                cur.pc = in->x;
            } else if (in->op == OP_BOL) {
                if (cur.pos != 0) { fail = true; break; }
                cur.pc++;
            } else if (in->op == OP_EOL) {
                if (cur.pos != n) { fail = true; break; }
                cur.pc++;
            } else { /* OP_LOOK */
                int64_t r = rx_run(rx, cur.pc + 1, text, n, cur.pos);
                if (r == RX_NOMEM) { result = RX_NOMEM; goto done; }
                if ((r >= 0) == in->neg) { fail = true; break; }
                cur.pc = in->x;
            }
        }
        (void)fail;
        if (st.n == 0) break;
        struct thread *top = &st.t[st.n - 1];
        cur = (struct thread){top->pc, top->pos, top->pos};
        if (top->pos > top->lo) top->pos--; /* the next shorter run of an OP_STAR */
        else st.n--;
    }
done:
    free(st.t);
    return result;
}

/* llama.cpp's unicode_regex_split_stl on one list of chunks. */
static void split_regex(const struct rx *rx, const uint32_t *text, const size_t *in, size_t nin,
                        struct lens *out) {
    size_t start = 0;
    for (size_t k = 0; k < nin; k++) {
        const uint32_t *t = text + start;
        size_t len = in[k], prev = 0, pos = 0;
        while (pos < len) {
            int64_t end = -1;
            size_t s;
            for (s = pos; s < len; s++) {
                end = rx_run(rx, 0, t, len, s);
                if (end >= 0 || end == RX_NOMEM) break;
            }
            if (end == RX_NOMEM) {
                out->oom = true;
                return;
            }
            if (end < 0) break;
            if (s > prev) lens_push(out, s - prev);
            if ((size_t)end == s) { /* empty match: std::regex emits a 0-length word, i.e. nothing */
                pos = s + 1;
                prev = s;
                continue;
            }
            lens_push(out, (size_t)end - s);
            prev = pos = (size_t)end;
        }
        if (prev < len) lens_push(out, len - prev);
        start += len;
    }
}

static const char *const k_gpt2_expr =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char *const k_llama3_expr_a =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const k_llama3_expr_b =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool uses_category(const char *e) {
    static const char *const cats[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}",
                                       "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (strstr(e, cats[i])) return true;
    return false;
}

static void rx_free(struct rx *rx) {
    free(rx->prog);
    for (int i = 0; i < rx->ncls; i++) free(rx->cls[i].r);
    free(rx->cls);
}

enum compiled { COMPILED, COMPILE_BAD, COMPILE_OOM };

/* Parses e and generates its program into rx (struct compile above). */
static enum compiled compile(struct rx *rx, const char *e) {
    const size_t len = strlen(e);
    /* on the heap, not in this frame: what changes between setjmp and
     * longjmp must not be a local of the function that called setjmp */
    struct compile *cc = calloc(1, sizeof *cc);
    uint32_t *cp = calloc(len ? len : 1, sizeof *cp);
    if (!cc || !cp) {
        free(cc), free(cp);
        return COMPILE_OOM;
    }
    enum compiled result;
    cur_compile = cc;
    if (setjmp(cc->oom)) {
        result = COMPILE_OOM;
    } else {
        const size_t ncp = wgllm_unicode_decode(e, len, cp);
        struct parser ps = {.p = cp, .n = ncp, .collapsed = rx->collapsed, .rx = rx};
        for (size_t i = 0; i < ncp && rx->collapsed; i++)
            if (cp[i] >= 128) ps.bad = true; /* llama.cpp refuses this mix too */
        struct node *root = ps.bad ? NULL : parse_alt(&ps);
        if (ps.i != ps.n) ps.bad = true;
        if (!ps.bad) {
            gen(rx, root);
            emit(rx, OP_MATCH);
        }
        result = ps.bad ? COMPILE_BAD : COMPILED;
    }
    cur_compile = NULL;
    for (struct node *nd = cc->nodes, *next; nd; nd = next) {
        next = nd->next_alloc;
        free(nd->kids);
        free(nd);
    }
    for (struct scratch *t = cc->scratch, *next; t; t = next) {
        next = t->next;
        free(t);
    }
    free(cc);
    free(cp);
    return result;
}

enum wgllm_status wgllm_pretok_init(const char *const *exprs, int n_exprs,
                                    struct wgllm_pretok **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_pretok *p = calloc(1, sizeof *p);
    if (p) p->rx = calloc(n_exprs > 0 ? (size_t)n_exprs : 1, sizeof *p->rx);
    if (!p || !p->rx) {
        free(p);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the pre-tokenizer");
    }
    p->n = n_exprs;
    for (int k = 0; k < n_exprs; k++) {
        struct rx *rx = &p->rx[k];
        const char *e = exprs[k];
        if (strcmp(e, k_gpt2_expr) == 0) { rx->custom = 1; continue; }
        if (strcmp(e, k_llama3_expr_a) == 0 || strcmp(e, k_llama3_expr_b) == 0) { rx->custom = 2; continue; }
        rx->collapsed = uses_category(e);
        const enum compiled c = compile(rx, e);
        if (c != COMPILED) {
            wgllm_pretok_free(p);
            if (c == COMPILE_OOM)
                return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for pre-tokenizer regex %d", k);
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "pre-tokenizer regex %d cannot be parsed: '%s'", k, e);
        }
    }
    *out = p;
    return WGLLM_STATUS_OK;
}

void wgllm_pretok_free(struct wgllm_pretok *p) {
    if (!p) return;
    for (int k = 0; k < p->n; k++) rx_free(&p->rx[k]);
    free(p->rx);
    free(p);
}

static uint32_t collapse(uint32_t cpt) {
    if (cpt < 128) return cpt;
    uint32_t f = wgllm_unicode_flags(cpt);
    if (f & WGLLM_UCF_WHITESPACE) return 0x0B;
    switch (f & WGLLM_UCF_CATEGORIES) {
    case WGLLM_UCF_NUMBER: return 0xD1;
    case WGLLM_UCF_LETTER: return 0xD2;
    case WGLLM_UCF_PUNCTUATION: return 0xD3;
    case WGLLM_UCF_MARK: return 0xD4;
    case WGLLM_UCF_SYMBOL: return 0xD5;
    default: return 0xD0;
    }
}

size_t wgllm_pretok_split(const struct wgllm_pretok *p, const uint32_t *cpts, size_t n,
                          size_t **lens) {
    struct lens cur = {0};
    *lens = NULL;
    if (n == 0) return 0;
    lens_push(&cur, n);
    uint32_t *collapsed = NULL, *wide = NULL;
    for (int k = 0; k < p->n && !cur.oom; k++) {
        const struct rx *rx = &p->rx[k];
        struct lens next = {0};
        if (rx->custom) {
            size_t start = 0;
            for (size_t i = 0; i < cur.n; i++) {
                struct chunk c = {cpts, start, start + cur.v[i], start, &next};
                if (rx->custom == 1) split_gpt2(&c);
                else split_llama3(&c);
                start += cur.v[i];
            }
        } else {
            uint32_t **t = rx->collapsed ? &collapsed : &wide;
            if (!*t) {
                *t = wgllm_malloc_array(n, sizeof **t);
                if (!*t) { next.oom = true; goto swap; }
                for (size_t i = 0; i < n; i++) {
                    if (rx->collapsed) (*t)[i] = collapse(cpts[i]);
                    else (*t)[i] = (cpts[i] > 0x7F && (wgllm_unicode_flags(cpts[i]) & WGLLM_UCF_WHITESPACE)) ? 0x0B : cpts[i];
                }
            }
            split_regex(rx, *t, cur.v, cur.n, &next);
        }
    swap:
        free(cur.v);
        cur = next;
    }
    free(collapsed);
    free(wide);
    if (cur.oom) {
        free(cur.v);
        return (size_t)-1;
    }
    *lens = cur.v;
    return cur.n;
}
