/*
 * fuzz_jinja.c - libFuzzer target for the chat-template interpreter (issue
 * #15): the input is a template, parsed and then rendered for a small fixed
 * conversation shaped like the server's requests (system, user, an assistant
 * turn with a tool call, the tool's answer, a user turn) with one tool, for
 * both add_generation_prompt values. An input with a NUL byte is a template,
 * the NUL, and the messages JSON to render instead (the JSON reader is fuzzed
 * too). The budgets are tighter than the
 * defaults so every input finishes in milliseconds (10,000 steps, 64 KiB of
 * output, 2 MiB of memory: every real template of the seeds renders the
 * same under them as under the defaults, and tests/test_jinja_limits.c
 * checks each budget at its default size; at 200,000 / 1 MiB / 32 MiB an
 * input that ran into one took up to 50 ms, and the fuzzer's time went to
 * those); a crash, a sanitizer
 * report, a leak, a result whose status and output disagree, or request
 * spans that are not sorted, disjoint ranges of the output is a finding.
 * Seeds: fuzz/corpus/fuzz_jinja (real templates and small hostile ones);
 * fuzz/fuzz_jinja.dict holds the language's words.
 */
#include "chat/chat.h"
#include "vocab/vocab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char MESSAGES[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris? <|im_start|>system {{ x }}\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call1\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":2}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call1\",\"content\":\"{\\\"temp\\\": 21.5}\"},"
    "{\"role\":\"user\",\"content\":\"  thanks \\u00e9\\n\"}]";

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the weather.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct wgllm_chat_params p = wgllm_chat_default_params();
    p.max_steps = 10000;
    p.max_output = 64 << 10;
    p.max_memory = 2 << 20;
    struct wgllm_chat_template *t = NULL;
    struct wgllm_error err = {0};
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *msgs = NULL;
    if (nul) { /* the JSON must end in a NUL: a copy */
        msgs = malloc(size - tlen);
        if (!msgs) return 0;
        memcpy(msgs, nul + 1, size - tlen - 1);
        msgs[size - tlen - 1] = 0;
    }
    enum wgllm_status st = wgllm_chat_template_init((const char *)data, tlen, &p, &t, &err);
    if (st != WGLLM_STATUS_OK) {
        if (t || !err.message[0]) abort(); /* a failure leaves nothing and says why */
        free(msgs);
        return 0;
    }
    for (int agp = 0; agp < 2; agp++) {
        char *out = NULL;
        struct wgllm_text_span *sp = NULL;
        size_t n = 0;
        st = wgllm_chat_template_render_json_spans(t, msgs ? msgs : MESSAGES, agp ? TOOLS : NULL,
                                                   agp ? NULL : "{\"enable_thinking\":false}", agp, "<s>", "</s>",
                                                   &out, &sp, &n, &err);
        if ((st == WGLLM_STATUS_OK) != (out != NULL)) abort();
        if (st != WGLLM_STATUS_OK && (!err.message[0] || sp || n)) abort();
        if (st == WGLLM_STATUS_OK) {
            /* the output may hold NUL bytes (the template's text can), so no strlen bound */
            if ((n != 0) != (sp != NULL)) abort();
            size_t end = 0;
            for (size_t i = 0; i < n; i++) {
                if (sp[i].len == 0 || (i && sp[i].off <= end) || sp[i].len > p.max_output ||
                    sp[i].off > p.max_output - sp[i].len)
                    abort();
                end = sp[i].off + sp[i].len;
                (void)*(volatile const char *)(out + end - 1); /* inside the buffer: ASan checks */
            }
        }
        free(sp);
        free(out);
    }
    wgllm_chat_template_free(t);
    free(msgs);
    return 0;
}
