/*
 * test_chat.c - the Jinja chat-template interpreter: small templates with
 * hand-checked output, the shared real templates, error reporting, and a
 * truncation fuzz (no crash, no sanitizer report, on any prefix).
 *
 * Also a helper for tests/peer/chat.test.mjs:
 *   test_chat --render TEMPLATE MESSAGES.json [--tools TOOLS.json]
 *             [--add-generation-prompt] [--bos S] [--eos S]
 * prints the rendering (no trailing newline) so the peer test can compare it
 * byte for byte with @huggingface/jinja; `test_chat --builtin NAME` prints a
 * built-in template's source.
 */
#include "test.h"

#include "chat/chat.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

#include <dirent.h>

static char *render_src(const char *src, const char *msgs_json, const char *tools, bool agp,
                        enum wgllm_status *st, struct wgllm_error *err) {
    struct wgllm_chat_template *t = NULL;
    char *out = NULL;
    *st = wgllm_chat_template_parse(src, strlen(src), &t, err);
    if (*st != WGLLM_STATUS_OK) return NULL;
    *st = wgllm_chat_template_render_json(t, msgs_json, tools, agp, "<s>", "</s>", &out, err);
    wgllm_chat_template_free(t);
    return out;
}

static void check_render(const char *src, const char *msgs, const char *expect, int line) {
    enum wgllm_status st;
    struct wgllm_error err = {0};
    char *out = render_src(src, msgs, NULL, true, &st, &err);
    if (st != WGLLM_STATUS_OK || !out || strcmp(out, expect) != 0) {
        fprintf(stderr, "  line %d: template %s\n    got      \"%s\" (%s)\n    expected \"%s\"\n", line, src,
                out ? out : "(null)", err.message, expect);
        test_checks_failed_in_current++;
    }
    free(out);
}
#define R(src, expect) check_render(src, "[{\"role\":\"user\",\"content\":\"hi\"}]", expect, __LINE__)

TEST(small_templates) {
    R("{{ 1 + 2 }}|{{ 7 // 2 }}|{{ 7 % 3 }}|{{ 2 * 3.5 }}|{{ 1 / 2 }}", "3|3|1|7.0|0.5");
    R("{{ 'a' ~ 1 ~ 'b' }}{{ 'x' + 2 }}", "a1bx2");
    R("{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% endfor %}", "user:hi");
    R("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ loop.length }},{% endfor %}",
      "10F3,213,32L3,");
    R("{% set ns = namespace(a=1) %}{% for x in [1,2] %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}", "4");
    R("{{ '  a b  ' | trim }}|{{ 'ab' | upper }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}", "a b|AB|Hello World|Hello");
    R("{{ [1,2,3] | length }}{{ 'abc'[1:] }}{{ 'abc'[:-1] }}{{ [1,2,3][-1] }}{{ 'a,b'.split(',')[1] }}", "3bcab3b");
    R("{{ x | default('d') }}{{ x is defined }}{{ none is none }}{{ 'a' in 'cat' }}{{ 3 not in [1,2] }}", "dfalsetruetruetrue");
    R("{{ {'b': 1, 'a': [true, none, 'q\"']} | tojson }}", "{\"b\": 1, \"a\": [true, null, \"q\\\"\"]}");
    R("{{ {'a': [1]} | tojson(indent=2) }}", "{\n  \"a\": [\n    1\n  ]\n}");
    R("{{ 'yes' if messages else 'no' }}{{ 'abc'.startswith('ab') }}{{ ' x '.strip() }}{{ 'a-b'.replace('-', '+') }}",
      "yestruexa+b");
    R("{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", "<1B><23>");
    R("{%- if false %}x{% elif 1 == 1 %}  y  {%- else %}z{% endif -%}  !", "  y!");
    R("a\n  {% if true %}\nb\n  {% endif %}\nc\n", "a\nb\nc");
    R("{# comment #}{{ [3,1] | join('-') }}{{ ['x','y'] | first }}{{ ['x','y'] | last }}", "3-1xy");
    R("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}{{ {'a':1}.get('z', 5) }}", "a=1;b=2;5");
    R("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", "<s></s>true");
    R("{% for x in [1,2,3,4] if x is even %}{{ x }}{% else %}none{% endfor %}{% for x in [] %}{% else %}E{% endfor %}", "24E");
}

TEST(errors_are_reported) {
    enum wgllm_status st;
    struct wgllm_error err = {0};
    char *out = render_src("{{ raise_exception('bad role') }}", "[]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK_EQ_INT(st, WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "bad role") != NULL);
    out = render_src("ab\n{% if x %}\n{{ 1 + }}{% endif %}", "[]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK_EQ_INT(st, WGLLM_STATUS_BAD_FORMAT);
    /* line 2: trim_blocks removed the newline after %} before lexing, as the reference does */
    CHECK(strstr(err.message, "line 2, column 18") != NULL);
    out = render_src("{{ nosuch(1) }}", "[]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK(strstr(err.message, "unknown function 'nosuch'") != NULL);
    out = render_src("{% if true %}x", "[]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK(strstr(err.message, "endif") != NULL);
    out = render_src("{{ x }}", "[{]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK(strstr(err.message, "JSON") != NULL);
    out = render_src("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "[]", NULL, false, &st, &err);
    CHECK(out == NULL);
    CHECK(strstr(err.message, "recursion") != NULL);
}

/* Expected strings below were produced once by @huggingface/jinja 0.5.11 (the
 * reference, via tests/peer/chat.test.mjs) for this conversation and pasted here. */
static const char *CONV =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi  there\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"user\",\"content\":\"2+2?\"}]";
static const char *CONV_NO_SYSTEM =
    "[{\"role\":\"user\",\"content\":\"Hi  there\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"user\",\"content\":\"2+2?\"}]";
/* file, 1 = without the system turn (Gemma rejects it), tools JSON (Hermes needs some) */
static const struct { const char *file; int no_system; const char *tools; const char *expect; } SHARED[] = {
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", 0, "[]",
     "<s><|im_start|>system\nYou are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. Here are the available tools: <tools>  </tools>Use the following pydantic model json schema for each tool call you will make: {\"properties\": {\"name\": {\"title\": \"Name\", \"type\": \"string\"}, \"arguments\": {\"title\": \"Arguments\", \"type\": \"object\"}}, \"required\": [\"name\", \"arguments\"], \"title\": \"FunctionCall\", \"type\": \"object\"}}\nFor each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-dict>}\n</tool_call><|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi  there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", 0, NULL,
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi  there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", 0, NULL,
     "<s>Be brief.<\xef\xbd\x9c""User\xef\xbd\x9c"">Hi  there<\xef\xbd\x9c""Assistant\xef\xbd\x9c"">Hello!<\xef\xbd\x9c""end\xe2\x96\x81""of\xe2\x96\x81""sentence\xef\xbd\x9c""><\xef\xbd\x9c""User\xef\xbd\x9c"">2+2?<\xef\xbd\x9c""Assistant\xef\xbd\x9c""><think>\n"},
    {"google-gemma-2-2b-it.jinja", 1, NULL,
     "<s><start_of_turn>user\nHi  there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", 0, NULL,
     "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi  there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"microsoft-Phi-3.5-mini-instruct.jinja", 0, NULL,
     "<|system|>\nBe brief.<|end|>\n<|user|>\nHi  there<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", 0, NULL,
     "<s>[INST]Hi  there[/INST]Hello!</s>[INST]Be brief.\n\n2+2?[/INST]"},
};

TEST(shared_templates) {
    for (size_t i = 0; i < sizeof SHARED / sizeof SHARED[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "templates/%s", SHARED[i].file);
        size_t len;
        char *src = test_read_file(test_shared_path(rel), &len);
        CHECK(src != NULL);
        if (!src) continue;
        struct wgllm_chat_template *t = NULL;
        struct wgllm_error err = {0};
        char *out = NULL;
        enum wgllm_status st = wgllm_chat_template_parse(src, len, &t, &err);
        if (st == WGLLM_STATUS_OK) st = wgllm_chat_template_render_json(t, SHARED[i].no_system ? CONV_NO_SYSTEM : CONV, SHARED[i].tools, true, "<s>", "</s>", &out, &err);
        if (st != WGLLM_STATUS_OK || strcmp(out, SHARED[i].expect) != 0) {
            fprintf(stderr, "  %s: %s\n    got \"%s\"\n", SHARED[i].file, err.message, out ? out : "");
            test_checks_failed_in_current++;
        }
        free(out);
        wgllm_chat_template_free(t);
        free(src);
    }
}

TEST(plain_message_api) {
    const char *src = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}";
    struct wgllm_chat_template *t = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_chat_template_parse(src, strlen(src), &t, &err), WGLLM_STATUS_OK);
    struct wgllm_chat_message m[2] = {{"user", "a \"q\"\n{{ x }}"}, {"assistant", "\xe2\x9c\x93"}};
    char *out = NULL;
    CHECK_EQ_INT(wgllm_chat_template_render(t, m, 2, true, NULL, NULL, &out, &err), WGLLM_STATUS_OK);
    if (out) CHECK_STR(out, "[user]a \"q\"\n{{ x }}[assistant]\xe2\x9c\x93>");
    free(out);
    wgllm_chat_template_free(t);
}

/* every 17th-byte prefix of every shared template parses or fails cleanly */
TEST(truncation_fuzz) {
    const char *dir = test_shared_path("templates");
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".jinja")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *src = test_read_file(path, &len);
        if (!src) continue;
        files++;
        for (size_t cut = 0; cut <= len; cut += 17) {
            struct wgllm_chat_template *t = NULL;
            struct wgllm_error err = {0};
            if (wgllm_chat_template_parse(src, cut, &t, &err) != WGLLM_STATUS_OK) {
                CHECK(t == NULL && err.message[0]);
                continue;
            }
            char *out = NULL;
            enum wgllm_status st = wgllm_chat_template_render_json(t, CONV, "[]", cut & 1, "<s>", "</s>", &out, &err);
            CHECK((st == WGLLM_STATUS_OK) == (out != NULL));
            free(out);
            wgllm_chat_template_free(t);
        }
        free(src);
    }
    closedir(d);
    CHECK(files >= 7);
}

/* Each built-in template with system + 3 turns (user, assistant, user), against
 * the prompt its model family expects, written out by hand. */
TEST(builtin_templates) {
    static const char conv[] =
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
        "{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"user\",\"content\":\"2+2?\"}]";
    static const struct {
        const char *name, *want;
    } cases[] = {
        {"chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
        {"llama2", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] 2+2? [/INST]"},
        {"llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"gemma", "<s><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"},
        {"phi3", "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
                 "<|user|>\n2+2?<|end|>\n<|assistant|>\n"},
        {"mistral", "<s>[INST] Be brief.\n\nHi [/INST] Hello!</s>[INST] 2+2? [/INST]"},
    };
    size_t n = 0;
    while (wgllm_chat_template_builtin_name(n)) n++;
    CHECK_EQ_INT((int)n, 6);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *src = wgllm_chat_template_builtin(cases[i].name);
        CHECK(src != NULL);
        if (!src) continue;
        check_render(src, conv, cases[i].want, __LINE__);
    }
    CHECK(wgllm_chat_template_builtin("no-such") == NULL);
    CHECK(wgllm_chat_template_builtin(NULL) == NULL);
    /* llama2 insists on alternating roles, and says so */
    enum wgllm_status st;
    struct wgllm_error err = {0};
    char *out = render_src(wgllm_chat_template_builtin("llama2"),
                           "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]", NULL,
                           false, &st, &err);
    CHECK(out == NULL && st != WGLLM_STATUS_OK && strstr(err.message, "alternate") != NULL);
    free(out);
}

/* Template choice by special tokens on real vocabularies: phi-3 has <|user|>
 * and <|end|>; LLaMA SPM and GPT-2 have none of the markers. */
static const char *detect_for(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    struct wgllm_gguf *g = NULL;
    struct wgllm_vocab *v = NULL;
    struct wgllm_error err = {0};
    const char *r = "(open failed)";
    if (wgllm_gguf_open(test_shared_path(rel), &g, &err) == WGLLM_STATUS_OK &&
        wgllm_vocab_init(g, &v, &err) == WGLLM_STATUS_OK) {
        r = wgllm_chat_template_detect(v);
        if (!r) r = "(none)";
    }
    wgllm_vocab_free(v);
    wgllm_gguf_free(g);
    return r;
}

TEST(builtin_detection) {
    CHECK_STR(detect_for("phi-3"), "phi3");
    CHECK_STR(detect_for("llama-spm"), "(none)");
    CHECK_STR(detect_for("gpt-2"), "(none)");
    CHECK(wgllm_chat_template_detect(NULL) == NULL);
}

static int render_main(int argc, char **argv) {
    const char *tools_file = NULL, *bos = "", *eos = "";
    bool agp = false;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--tools") && i + 1 < argc) tools_file = argv[++i];
        else if (!strcmp(argv[i], "--add-generation-prompt")) agp = true;
        else if (!strcmp(argv[i], "--bos") && i + 1 < argc) bos = argv[++i];
        else if (!strcmp(argv[i], "--eos") && i + 1 < argc) eos = argv[++i];
    }
    size_t len, ml;
    char *src = test_read_file(argv[2], &len);
    char *msgs = test_read_file(argv[3], &ml);
    char *tools = tools_file ? test_read_file(tools_file, &ml) : NULL;
    if (!src || !msgs || (tools_file && !tools)) { fprintf(stderr, "cannot read input files\n"); return 2; }
    struct wgllm_chat_template *t = NULL;
    struct wgllm_error err = {0};
    char *out = NULL;
    enum wgllm_status st = wgllm_chat_template_parse(src, len, &t, &err);
    if (st == WGLLM_STATUS_OK) st = wgllm_chat_template_render_json(t, msgs, tools, agp, bos, eos, &out, &err);
    if (st == WGLLM_STATUS_OK) fwrite(out, 1, strlen(out), stdout);
    else fprintf(stderr, "%s\n", err.message);
    free(out);
    wgllm_chat_template_free(t);
    free(src);
    free(msgs);
    free(tools);
    return st == WGLLM_STATUS_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--render")) return render_main(argc, argv);
    if (argc == 3 && !strcmp(argv[1], "--builtin")) { /* for the peer test */
        const char *src = wgllm_chat_template_builtin(argv[2]);
        if (src) fputs(src, stdout);
        return src ? 0 : 1;
    }
    RUN(small_templates);
    RUN(errors_are_reported);
    RUN(plain_message_api);
    RUN(shared_templates);
    RUN(truncation_fuzz);
    RUN(builtin_templates);
    RUN(builtin_detection);
    return test_summary("test_chat");
}
