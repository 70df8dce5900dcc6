/*
 * reasoning.c - the reasoning part of a chat answer (issue #16): a reasoning
 * model (DeepSeek-R1 distills, Qwen3) writes <think>...</think> before its
 * answer; the OpenAI layer returns that part as message.reasoning_content /
 * delta.reasoning_content and the rest as content, as llama.cpp's server
 * does (reasoning_format "none" keeps it all in content).
 *
 * The split runs on the streamed pieces, so a tag cut across pieces is held
 * back until it is known: at the start, text that may still become
 * "<think>" (after blank space); inside, a tail that may still become
 * "</think>". When the prompt already opened the block (a template that
 * ends in <think>), the text starts in the reasoning.
 */
#include "api/api_internal.h"

#include <string.h>

enum { THINK_START, THINK_IN, THINK_AFTER, THINK_CONTENT };

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

void wgllm_openai_think_init(struct wgllm_openai_think *t, bool open) {
    memset(t, 0, sizeof *t);
    t->mode = open ? THINK_IN : THINK_START;
}

static bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* The longest tail of s[0, n) that is a proper prefix of tag. */
static size_t partial_tail(const char *s, size_t n, const char *tag) {
    const size_t tl = strlen(tag);
    for (size_t k = n < tl - 1 ? n : tl - 1; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

void wgllm_openai_think_push(struct wgllm_openai_think *t, const char *text, size_t len, struct wgllm_strbuf *content,
                             struct wgllm_strbuf *reasoning) {
    /* the held bytes come first; nothing new, nothing to decide */
    char buf[sizeof t->hold + 256];
    while (len) {
        size_t n = t->n_hold;
        memcpy(buf, t->hold, n);
        const size_t take = len < sizeof buf - n ? len : sizeof buf - n;
        memcpy(buf + n, text, take);
        n += take, text += take, len -= take;
        t->n_hold = 0;
        size_t i = 0;
        while (i < n) {
            if (t->mode == THINK_START) {
                size_t j = i;
                while (j < n && blank(buf[j])) j++;
                const size_t rest = n - j;
                if (rest >= sizeof OPEN - 1 && !memcmp(buf + j, OPEN, sizeof OPEN - 1)) {
                    t->mode = THINK_IN;
                    i = j + sizeof OPEN - 1;
                } else if (rest < sizeof OPEN - 1 && !memcmp(buf + j, OPEN, rest) && j - i + rest < sizeof t->hold) {
                    /* may still become <think>: wait for more */
                    memcpy(t->hold, buf + i, n - i);
                    t->n_hold = n - i;
                    i = n;
                } else {
                    t->mode = THINK_CONTENT;
                }
            } else if (t->mode == THINK_IN) {
                const char *end = memmem(buf + i, n - i, CLOSE, sizeof CLOSE - 1);
                if (end) {
                    wgllm_strbuf_put(reasoning, buf + i, (size_t)(end - (buf + i)));
                    i = (size_t)(end - buf) + sizeof CLOSE - 1;
                    t->mode = THINK_AFTER;
                } else {
                    const size_t keep = partial_tail(buf + i, n - i, CLOSE);
                    wgllm_strbuf_put(reasoning, buf + i, n - i - keep);
                    memcpy(t->hold, buf + n - keep, keep);
                    t->n_hold = keep;
                    i = n;
                }
            } else if (t->mode == THINK_AFTER) {
                /* the blank space between the block and the answer is neither */
                while (i < n && blank(buf[i])) i++;
                if (i < n) t->mode = THINK_CONTENT;
            } else {
                wgllm_strbuf_put(content, buf + i, n - i);
                i = n;
            }
        }
    }
}

void wgllm_openai_think_flush(struct wgllm_openai_think *t, struct wgllm_strbuf *content, struct wgllm_strbuf *reasoning) {
    /* what was held is what it looked like: the start of an answer, or reasoning cut short */
    if (t->n_hold) wgllm_strbuf_put(t->mode == THINK_IN ? reasoning : content, t->hold, t->n_hold);
    t->n_hold = 0;
}
