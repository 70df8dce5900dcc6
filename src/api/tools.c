/*
 * tools.c - tool calls in the OpenAI layer (issue #16): the `tools`,
 * `tool_choice` and `parallel_tool_calls` fields, the messages as the chat
 * template reads them (assistant tool_calls, role "tool" answers), the
 * grammar that makes a required call well-formed, and the split of an answer
 * into content and tool_calls in the syntax of the model's family
 * (enum wgllm_tool_format, told from the template as llama.cpp's chat parser
 * tells it), for whole answers and for streams.
 *
 * A required call (tool_choice "required" or a named function) is
 * constrained by a grammar: the family's call syntax around each function's
 * `parameters` schema, so the arguments satisfy it whatever the weights are.
 * With "auto" the model is free and its answer is parsed; a template with no
 * call syntax of its own (GENERIC) is shown the tools in a system message
 * and always answers in JSON, {"tool_calls": [...]} or {"response": "..."},
 * the way llama.cpp's generic format does.
 */
#include "api/api_internal.h"

#include "base/json.h"
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOOLS 128

typedef struct wgllm_json J;
typedef struct wgllm_json_writer W;

static bool oom(struct wgllm_openai_error *e, const char *param) {
    wgllm_openai_error_set(e, 500, "server_error", param, NULL, "out of memory for '%s'", param);
    return false;
}

static bool name_ok(const J *n) {
    if (!wgllm_json_is(n, WGLLM_JSON_STRING) || n->len == 0 || n->len > 64) return false;
    for (size_t i = 0; i < n->len; i++) {
        const char c = n->str[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- the request: tools, tool_choice ---------------------------------------- */

/* Call markers per format: what opens the calls in an answer (NULL: the
 * answer is JSON from its first character, or is held whole). */
static const char *opener(int format) {
    switch (format) {
        case WGLLM_TOOLS_HERMES:
            return "<tool_call>";
        case WGLLM_TOOLS_MISTRAL:
            return "[TOOL_CALLS]";
        case WGLLM_TOOLS_DEEPSEEK_R1:
            return "<｜tool▁calls▁begin｜>";
        case WGLLM_TOOLS_COMMAND_R:
            return "<|START_ACTION|>";
        default:
            return NULL;
    }
}

/* The text that opens a call in the format, as the lazy grammar of tool_choice
 * auto waits for it (NULL: no such opener, the call stays free). functionary's
 * calls follow the prompt's own ">>>", and Llama 3's JSON has none, so their
 * auto answers are not constrained. */
static const char *const *lazy_triggers(int format) {
    static const char *const HERMES[] = {"<tool_call>"}, *const MISTRAL[] = {"[TOOL_CALLS]"},
                             *const DEEPSEEK[] = {"<｜tool▁calls▁begin｜>"}, *const COMMAND_R[] = {"<|START_ACTION|>"};
    switch (format) {
        case WGLLM_TOOLS_HERMES: return HERMES;
        case WGLLM_TOOLS_MISTRAL: return MISTRAL;
        case WGLLM_TOOLS_DEEPSEEK_R1: return DEEPSEEK;
        case WGLLM_TOOLS_COMMAND_R: return COMMAND_R;
        default: return NULL;
    }
}

static void put_lit(struct wgllm_strbuf *sb, const char *s) { wgllm_schema_grammar_literal(sb, s, strlen(s)); }

/* `"key" space ":" space` as the schema rules write object members */
static void put_key(struct wgllm_strbuf *sb, const char *key) {
    struct wgllm_strbuf k = {0};
    wgllm_json_put_string(&k, key, strlen(key));
    wgllm_schema_grammar_literal(sb, k.data ? k.data : "", k.len);
    wgllm_strbuf_free(&k);
    wgllm_strbuf_puts(sb, " space \":\" space ");
}

/* The rule of one function's call in the format's syntax: the name and the
 * arguments whose rule `args` is. */
static const char *call_rule(struct wgllm_schema_grammar *b, int format, int i, const char *name, const char *args) {
    struct wgllm_strbuf sb = {0};
    char rname[32];
    snprintf(rname, sizeof rname, "call%d", i);
    struct wgllm_strbuf quoted = {0};
    wgllm_json_put_string(&quoted, name, strlen(name));
    const char *q = quoted.data ? quoted.data : "\"\"";
    if (format == WGLLM_TOOLS_DEEPSEEK_R1) {
        put_lit(&sb, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>");
        wgllm_strbuf_putc(&sb, ' ');
        put_lit(&sb, name);
        wgllm_strbuf_puts(&sb, " \"\\n```json\\n\" ");
        wgllm_strbuf_puts(&sb, args);
        wgllm_strbuf_puts(&sb, " \"\\n\"? \"```\" ");
        put_lit(&sb, "<｜tool▁call▁end｜>");
    } else if (format == WGLLM_TOOLS_FUNCTIONARY) {
        struct wgllm_strbuf nl = {0};
        wgllm_strbuf_printf(&nl, "%s\n", name);
        wgllm_schema_grammar_literal(&sb, nl.data ? nl.data : "", nl.len);
        wgllm_strbuf_free(&nl);
        wgllm_strbuf_printf(&sb, " %s", args);
    } else {
        /* JSON objects: {"name": ..., "arguments": ...} and the families' variants */
        wgllm_strbuf_puts(&sb, "\"{\" space ");
        if (format == WGLLM_TOOLS_COMMAND_R) {
            put_key(&sb, "tool_call_id");
            wgllm_strbuf_printf(&sb, "\"\\\"%d\\\"\" space \",\" space ", i);
        }
        put_key(&sb, format == WGLLM_TOOLS_COMMAND_R ? "tool_name" : "name");
        wgllm_schema_grammar_literal(&sb, q, strlen(q));
        wgllm_strbuf_puts(&sb, " space \",\" space ");
        put_key(&sb, format == WGLLM_TOOLS_LLAMA3 || format == WGLLM_TOOLS_COMMAND_R ? "parameters" : "arguments");
        wgllm_strbuf_puts(&sb, args);
        if (format == WGLLM_TOOLS_MISTRAL) { /* Mistral's ids are 9 letters or digits */
            wgllm_strbuf_puts(&sb, " \",\" space ");
            put_key(&sb, "id");
            wgllm_strbuf_puts(&sb, "\"\\\"\" [a-zA-Z0-9]{9} \"\\\"\" space");
        }
        wgllm_strbuf_puts(&sb, " \"}\" space");
    }
    wgllm_strbuf_free(&quoted);
    const char *r = sb.oom ? NULL : wgllm_schema_grammar_rule(b, rname, sb.data);
    wgllm_strbuf_free(&sb);
    return r;
}

/* The grammar of an answer that calls (one of) the functions, or, for the
 * generic format with tool_choice auto, answers in {"response": ...}. */
static bool tools_grammar(const J *tools, const char *only, bool lazy, struct wgllm_openai_request *g,
                          struct wgllm_openai_error *e) {
    struct wgllm_error err = {0};
    struct wgllm_schema_grammar *b;
    if (wgllm_schema_grammar_init(&b, &err) != WGLLM_STATUS_OK) return oom(e, "tools");
    struct wgllm_strbuf alts = {0}, root = {0};
    int i = 0, n = 0;
    bool ok = true;
    for (const J *t = wgllm_json_first(tools); t && ok; t = wgllm_json_next(tools, t), i++) {
        const J *fn = wgllm_json_get(t, "function");
        const J *name = wgllm_json_get(fn, "name");
        if (only && strcmp(name->str, only)) continue;
        const J *params = wgllm_json_get(fn, "parameters");
        struct wgllm_strbuf text = {0};
        if (wgllm_json_is_null(params)) {
            wgllm_strbuf_puts(&text, "{\"type\":\"object\"}");
        } else {
            W w;
            wgllm_json_w_init(&w, &text);
            wgllm_json_w_value(&w, NULL, params);
        }
        char rname[32];
        snprintf(rname, sizeof rname, "args%d", i);
        const char *args = text.oom ? NULL : wgllm_schema_grammar_add(b, text.data, text.len, rname, &err);
        wgllm_strbuf_free(&text);
        const char *call = args ? call_rule(b, g->tool_format, i, name->str, args) : NULL;
        if (!call) {
            char param[48];
            snprintf(param, sizeof param, "tools[%d].function.parameters", i);
            wgllm_openai_error_set(e, 400, "invalid_request_error", param, "invalid_schema", "%s",
                                   err.message[0] ? err.message : "out of memory");
            ok = false;
            break;
        }
        wgllm_strbuf_printf(&alts, "%s%s", n++ ? " | " : "", call);
    }
    const char *calls = NULL;
    if (ok) {
        const bool many = g->parallel_tool_calls;
        const char *call = wgllm_schema_grammar_rule(b, "call", alts.data ? alts.data : "\"\"");
        struct wgllm_strbuf cs = {0};
        switch (g->tool_format) {
            case WGLLM_TOOLS_HERMES:
                wgllm_strbuf_puts(&cs, "\"<tool_call>\\n\" ");
                wgllm_strbuf_printf(&cs, "%s \"</tool_call>\"", call);
                if (many) wgllm_strbuf_printf(&cs, " (\"\\n\" \"<tool_call>\\n\" %s \"</tool_call>\")*", call);
                break;
            case WGLLM_TOOLS_MISTRAL:
                wgllm_strbuf_printf(&cs, "\"[TOOL_CALLS]\" \"[\" space %s", call);
                if (many) wgllm_strbuf_printf(&cs, " (\",\" space %s)*", call);
                wgllm_strbuf_puts(&cs, " \"]\"");
                break;
            case WGLLM_TOOLS_DEEPSEEK_R1:
                put_lit(&cs, "<｜tool▁calls▁begin｜>");
                wgllm_strbuf_printf(&cs, " %s", call);
                if (many) wgllm_strbuf_printf(&cs, " (\"\\n\"? %s)*", call);
                wgllm_strbuf_putc(&cs, ' ');
                put_lit(&cs, "<｜tool▁calls▁end｜>");
                break;
            case WGLLM_TOOLS_COMMAND_R:
                wgllm_strbuf_printf(&cs, "\"<|START_ACTION|>\" \"[\" space %s", call);
                if (many) wgllm_strbuf_printf(&cs, " (\",\" space %s)*", call);
                wgllm_strbuf_puts(&cs, " \"]\" space \"<|END_ACTION|>\"");
                break;
            case WGLLM_TOOLS_FUNCTIONARY:
                wgllm_strbuf_printf(&cs, "%s", call);
                if (many) wgllm_strbuf_printf(&cs, " (\">>>\" %s)*", call);
                break;
            case WGLLM_TOOLS_LLAMA3:
                wgllm_strbuf_printf(&cs, "%s", call);
                break;
            default: /* generic */
                wgllm_strbuf_puts(&cs, "\"{\" space ");
                put_key(&cs, "tool_calls");
                wgllm_strbuf_printf(&cs, "\"[\" space %s", call);
                if (many) wgllm_strbuf_printf(&cs, " (\",\" space %s)*", call);
                wgllm_strbuf_puts(&cs, " \"]\" space \"}\" space");
                if (g->tool_choice == WGLLM_TOOL_CHOICE_AUTO) {
                    const char *str = wgllm_schema_grammar_add(b, "{\"type\":\"string\"}", 17, "response-text", &err);
                    wgllm_strbuf_puts(&cs, " | \"{\" space ");
                    put_key(&cs, "response");
                    wgllm_strbuf_printf(&cs, "%s \"}\" space", str ? str : "string");
                }
                break;
        }
        calls = call && !cs.oom ? wgllm_schema_grammar_rule(b, "calls", cs.data) : NULL;
        wgllm_strbuf_free(&cs);
        if (calls) {
            /* a reasoning model thinks first: DeepSeek-R1's answer begins inside <think> (a lazy
             * grammar starts at the call: what came before it was free) */
            if (lazy)
                wgllm_strbuf_printf(&root, "%s", calls);
            else if (g->reasoning && g->think_open)
                wgllm_strbuf_printf(&root, "[^<]* \"</think>\" space %s", calls);
            else if (g->reasoning)
                wgllm_strbuf_printf(&root, "(\"<think>\" [^<]* \"</think>\" space)? %s", calls);
            else
                wgllm_strbuf_printf(&root, "%s", calls);
        }
        const char *r = calls && !root.oom ? wgllm_schema_grammar_rule(b, "tools-root", root.data) : NULL;
        if (!r || wgllm_schema_grammar_finish(b, r, &g->grammar, &err) != WGLLM_STATUS_OK) {
            ok = false;
            oom(e, "tools");
        }
    }
    wgllm_strbuf_free(&alts), wgllm_strbuf_free(&root);
    wgllm_schema_grammar_free(b);
    if (!ok) return false;
    g->grammar_param = "tools";
    g->rp.grammar = g->grammar;
    g->rp.grammar_len = strlen(g->grammar);
    return true;
}

bool wgllm_openai_tools_parse(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                              struct wgllm_openai_error *e) {
    const J *tools = wgllm_json_get(body, "tools");
    const J *tc = wgllm_json_get(body, "tool_choice");
    g->parallel_tool_calls = true;
    const J *ptc = wgllm_json_get(body, "parallel_tool_calls");
    if (!wgllm_json_is_null(ptc)) {
        if (!wgllm_json_is_bool(ptc)) return wgllm_openai_bad(e, "parallel_tool_calls", "'%s' must be true or false%s", "");
        g->parallel_tool_calls = ptc->type == WGLLM_JSON_TRUE;
    }
    const bool none = wgllm_json_is_null(tools) || (tools->type == WGLLM_JSON_ARRAY && tools->count == 0);
    if (!wgllm_json_is_null(tools) && tools->type != WGLLM_JSON_ARRAY)
        return wgllm_openai_bad(e, "tools", "'%s' must be an array of {\"type\": \"function\", \"function\": {...}}%s", "");
    if (!none && tools->count > MAX_TOOLS) return wgllm_openai_bad(e, "tools", "'%s' has more than 128 tools%s", "");
    /* every tool is checked, the names are unique */
    int i = 0;
    for (const J *t = none ? NULL : wgllm_json_first(tools); t; t = wgllm_json_next(tools, t), i++) {
        char param[48];
        snprintf(param, sizeof param, "tools[%d]", i);
        const J *type = wgllm_json_get(t, "type"), *fn = wgllm_json_get(t, "function");
        if (!wgllm_json_is(t, WGLLM_JSON_OBJECT) || !wgllm_json_is(type, WGLLM_JSON_STRING) ||
            strcmp(type->str, "function") || !wgllm_json_is(fn, WGLLM_JSON_OBJECT))
            return wgllm_openai_bad(e, param, "'%s' must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}%s", "");
        snprintf(param, sizeof param, "tools[%d].function.name", i);
        const J *name = wgllm_json_get(fn, "name");
        if (!name_ok(name)) return wgllm_openai_bad(e, param, "'%s' must be 1 to 64 letters, digits, '_' or '-'%s", "");
        for (const J *u = wgllm_json_first(tools); u != t; u = wgllm_json_next(tools, u))
            if (!strcmp(wgllm_json_get(wgllm_json_get(u, "function"), "name")->str, name->str))
                return wgllm_openai_bad(e, param, "'%s': two tools are called '%s'", name->str);
        for (const J *m = wgllm_json_first(fn); m; m = wgllm_json_next(fn, m)) {
            snprintf(param, sizeof param, "tools[%d].function.%.16s", i, m->key);
            if (!strcmp(m->key, "name")) continue;
            if (!strcmp(m->key, "description")) {
                if (!wgllm_json_is(m, WGLLM_JSON_STRING) && !wgllm_json_is_null(m))
                    return wgllm_openai_bad(e, param, "'%s' must be a string%s", "");
            } else if (!strcmp(m->key, "parameters")) {
                if (!wgllm_json_is(m, WGLLM_JSON_OBJECT) && !wgllm_json_is_null(m))
                    return wgllm_openai_bad(e, param, "'%s' must be a JSON Schema object%s", "");
            } else if (!strcmp(m->key, "strict")) {
                if (!wgllm_json_is_bool(m) && !wgllm_json_is_null(m))
                    return wgllm_openai_bad(e, param, "'%s' must be true or false%s", "");
            } else {
                return wgllm_openai_bad(e, param, "unknown field '%s'%s", "");
            }
        }
    }
    const char *only = NULL;
    g->tool_choice = WGLLM_TOOL_CHOICE_AUTO;
    if (!wgllm_json_is_null(tc)) {
        if (wgllm_json_is(tc, WGLLM_JSON_STRING)) {
            if (!strcmp(tc->str, "none"))
                g->tool_choice = WGLLM_TOOL_CHOICE_NONE;
            else if (!strcmp(tc->str, "auto"))
                g->tool_choice = WGLLM_TOOL_CHOICE_AUTO;
            else if (!strcmp(tc->str, "required"))
                g->tool_choice = WGLLM_TOOL_CHOICE_REQUIRED;
            else
                return wgllm_openai_bad(e, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or a function, not '%s'",
                           tc->str);
        } else {
            const J *type = wgllm_json_get(tc, "type"), *name = wgllm_json_get(wgllm_json_get(tc, "function"), "name");
            if (!wgllm_json_is(type, WGLLM_JSON_STRING) || strcmp(type->str, "function") ||
                !wgllm_json_is(name, WGLLM_JSON_STRING))
                return wgllm_openai_bad(e, "tool_choice",
                           "'%s' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}%s", "");
            bool found = false;
            for (const J *t = none ? NULL : wgllm_json_first(tools); t && !found; t = wgllm_json_next(tools, t))
                found = !strcmp(wgllm_json_get(wgllm_json_get(t, "function"), "name")->str, name->str);
            if (!found) return wgllm_openai_bad(e, "tool_choice", "'%s' names '%s', which is not one of the tools", name->str);
            g->tool_choice = WGLLM_TOOL_CHOICE_FUNCTION;
            only = name->str;
        }
        if (none && g->tool_choice != WGLLM_TOOL_CHOICE_NONE && g->tool_choice != WGLLM_TOOL_CHOICE_AUTO)
            return wgllm_openai_bad(e, "tool_choice", "'%s' needs 'tools'%s", "");
    }
    if (none || g->tool_choice == WGLLM_TOOL_CHOICE_NONE) return true;
    /* an upstream gets the tools as given (forward_json) and parses its model's calls itself */
    if (g->upstream) return true;
    g->tools = true;
    g->tool_format = ap->engine ? (int)wgllm_engine_template_caps(ap->engine).tool_format : WGLLM_TOOLS_GENERIC;
    /* the tools as the template sees them */
    struct wgllm_strbuf text = {0};
    W w;
    wgllm_json_w_init(&w, &text);
    wgllm_json_w_value(&w, NULL, tools);
    if (text.oom) return wgllm_strbuf_free(&text), oom(e, "tools");
    g->tools_json = wgllm_strbuf_take(&text);
    const bool constrained = g->tool_choice == WGLLM_TOOL_CHOICE_REQUIRED ||
                             g->tool_choice == WGLLM_TOOL_CHOICE_FUNCTION || g->tool_format == WGLLM_TOOLS_GENERIC;
    if (!constrained) {
        /* auto: the answer is free until the model opens a call; the call itself is then constrained
         * (llama.cpp's lazy grammar), unless response_format constrains the whole answer already */
        const char *const *triggers = lazy_triggers(g->tool_format);
        if (!triggers || g->grammar) return true;
        if (!tools_grammar(tools, NULL, true, g, e)) return false;
        g->rp.grammar_triggers = triggers;
        g->rp.n_grammar_triggers = 1;
        return true;
    }
    if (g->grammar)
        return wgllm_openai_bad(e, g->grammar_param,
                   "'%s' cannot be combined with tools that must be called (tool_choice "
                   "required, a named function, or a template without tool syntax)%s",
                   "");
    return tools_grammar(tools, only, false, g, e);
}

/* ---- the messages as the template reads them --------------------------------- */

/* A tool call's arguments: the JSON object its string holds, for templates
 * that write them with tojson, else the string itself. */
static void put_arguments(W *w, const J *args, bool as_string) {
    if (as_string && wgllm_json_is(args, WGLLM_JSON_STRING)) {
        wgllm_json_w_value(w, "arguments", args);
        return;
    }
    if (as_string && wgllm_json_is(args, WGLLM_JSON_OBJECT)) {
        /* the text the template concatenates */
        struct wgllm_strbuf t = {0};
        W tw;
        wgllm_json_w_init(&tw, &t);
        wgllm_json_w_value(&tw, NULL, args);
        wgllm_json_w_string(w, "arguments", t.data ? t.data : "{}", t.data ? t.len : 2);
        if (t.oom) w->out->oom = true;
        wgllm_strbuf_free(&t);
        return;
    }
    if (wgllm_json_is(args, WGLLM_JSON_STRING)) {
        struct wgllm_json_doc d = {0};
        struct wgllm_json_error je;
        const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 16};
        if (wgllm_json_parse(args->str, args->len, &lim, &d, &je) && wgllm_json_root(&d)->type == WGLLM_JSON_OBJECT) {
            wgllm_json_w_value(w, "arguments", wgllm_json_root(&d));
            wgllm_json_doc_free(&d);
            return;
        }
        wgllm_json_doc_free(&d);
    }
    if (wgllm_json_is_null(args)) {
        wgllm_json_w_object(w, "arguments");
        wgllm_json_w_end(w, '}');
    } else {
        wgllm_json_w_value(w, "arguments", args);
    }
}

static bool check_tool_calls(const J *calls, int i, struct wgllm_openai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (calls->type != WGLLM_JSON_ARRAY) return wgllm_openai_bad(e, param, "'%s' must be an array%s", "");
    int k = 0;
    for (const J *c = wgllm_json_first(calls); c; c = wgllm_json_next(calls, c), k++) {
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k);
        const J *fn = wgllm_json_get(c, "function");
        const J *name = wgllm_json_get(fn, "name"), *args = wgllm_json_get(fn, "arguments");
        const J *id = wgllm_json_get(c, "id");
        if (!wgllm_json_is(c, WGLLM_JSON_OBJECT) || !wgllm_json_is(fn, WGLLM_JSON_OBJECT) ||
            !wgllm_json_is(name, WGLLM_JSON_STRING) ||
            !(wgllm_json_is_null(args) || args->type == WGLLM_JSON_STRING || args->type == WGLLM_JSON_OBJECT) ||
            !(wgllm_json_is_null(id) || id->type == WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, param,
                       "'%s' must be {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., "
                       "\"arguments\": \"...\"}}%s",
                       "");
    }
    return true;
}

/* {"tool_calls": [{"name", "arguments"}, ...]}: how the generic format shows
 * an earlier call to a template that has no syntax for it */
static void generic_calls_text(const J *calls, struct wgllm_strbuf *out) {
    W w;
    wgllm_json_w_init(&w, out);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_array(&w, "tool_calls");
    for (const J *c = wgllm_json_first(calls); c; c = wgllm_json_next(calls, c)) {
        const J *fn = wgllm_json_get(c, "function");
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_string(&w, "name", wgllm_json_get(fn, "name")->str, wgllm_json_get(fn, "name")->len);
        put_arguments(&w, wgllm_json_get(fn, "arguments"), false);
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
}

/* What the generic format tells the model in the system message. */
static void generic_instructions(const struct wgllm_openai_request *g, struct wgllm_strbuf *out) {
    wgllm_strbuf_puts(out, "You can call these tools (JSON Schema of each one's arguments):\n");
    wgllm_strbuf_puts(out, g->tools_json);
    wgllm_strbuf_puts(out, "\n\nAnswer with JSON only: {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": "
                           "{...}}]} to call tools");
    if (g->tool_choice == WGLLM_TOOL_CHOICE_AUTO)
        wgllm_strbuf_puts(out, ", or {\"response\": \"<your answer>\"} to answer the user directly");
    wgllm_strbuf_puts(out, ".");
}

bool wgllm_openai_messages_json(const struct wgllm_openai_params *ap, const J *body, struct wgllm_openai_request *g,
                                struct wgllm_openai_error *e) {
    const J *m = wgllm_json_get(body, "messages");
    const bool generic = g->tools && g->tool_format == WGLLM_TOOLS_GENERIC;
    /* each message's role and text were checked (and joined) by the caller: g->msgs[i] */
    int i = 0;
    for (const J *it = wgllm_json_first(m); it; it = wgllm_json_next(m, it), i++) {
        const J *calls = wgllm_json_get(it, "tool_calls");
        if (!wgllm_json_is_null(calls) && !check_tool_calls(calls, i, e)) return false;
        char param[64];
        snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
        const J *tid = wgllm_json_get(it, "tool_call_id");
        if (!wgllm_json_is_null(tid) && tid->type != WGLLM_JSON_STRING)
            return wgllm_openai_bad(e, param, "'%s' must be a string%s", "");
        snprintf(param, sizeof param, "messages[%d].name", i);
        const J *name = wgllm_json_get(it, "name");
        if (!wgllm_json_is_null(name) && name->type != WGLLM_JSON_STRING)
            return wgllm_openai_bad(e, param, "'%s' must be a string%s", "");
    }
    struct wgllm_strbuf text = {0}, sys = {0};
    if (generic) generic_instructions(g, &sys);
    const struct wgllm_template_caps caps =
        ap->engine ? wgllm_engine_template_caps(ap->engine) : (struct wgllm_template_caps){.system_role = true};
    const bool system_role = caps.system_role;
    W w;
    wgllm_json_w_init(&w, &text);
    wgllm_json_w_array(&w, NULL);
    /* the generic format's instructions: the system message's end, a system message of their own, or (a
     * template without a system role) the first user message's start */
    const bool has_system = g->n_msgs > 0 && !strcmp(g->msgs[0].role, "system");
    if (generic && !has_system && system_role) {
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "role", "system");
        wgllm_json_w_string(&w, "content", sys.data ? sys.data : "", sys.len);
        wgllm_json_w_end(&w, '}');
    }
    bool placed = !generic || (!has_system && system_role);
    i = 0;
    for (const J *it = wgllm_json_first(m); it; it = wgllm_json_next(m, it), i++) {
        const char *role = g->msgs[i].role, *content = g->msgs[i].content;
        const J *calls = wgllm_json_get(it, "tool_calls");
        const J *tid = wgllm_json_get(it, "tool_call_id"), *name = wgllm_json_get(it, "name");
        struct wgllm_strbuf c = {0};
        wgllm_strbuf_puts(&c, content);
        if (generic && !strcmp(role, "tool")) {
            /* a template without a tool role reads the answer as the user's */
            wgllm_strbuf_clear(&c);
            W cw;
            wgllm_json_w_init(&cw, &c);
            wgllm_json_w_object(&cw, NULL);
            wgllm_json_w_object(&cw, "tool_response");
            if (wgllm_json_is(tid, WGLLM_JSON_STRING)) wgllm_json_w_string(&cw, "tool_call_id", tid->str, tid->len);
            if (wgllm_json_is(name, WGLLM_JSON_STRING)) wgllm_json_w_string(&cw, "tool", name->str, name->len);
            wgllm_json_w_str(&cw, "content", content);
            wgllm_json_w_end(&cw, '}');
            wgllm_json_w_end(&cw, '}');
            role = "user";
        } else if (generic && !wgllm_json_is_null(calls) && calls->count > 0) {
            wgllm_strbuf_clear(&c);
            generic_calls_text(calls, &c);
        }
        if (!placed && ((has_system && i == 0) || (!has_system && !strcmp(role, "user")))) {
            struct wgllm_strbuf joined = {0};
            if (has_system)
                wgllm_strbuf_printf(&joined, "%s\n\n%s", c.data ? c.data : "", sys.data ? sys.data : "");
            else
                wgllm_strbuf_printf(&joined, "%s\n\n%s", sys.data ? sys.data : "", c.data ? c.data : "");
            wgllm_strbuf_free(&c);
            c = joined;
            placed = true;
        }
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "role", role);
        /* a call without text keeps its null content: templates test `content is none` (DeepSeek-R1's) */
        if (!generic && !wgllm_json_is_null(calls) && calls->count > 0 &&
            wgllm_json_is_null(wgllm_json_get(it, "content")))
            wgllm_json_w_null(&w, "content");
        else
            wgllm_json_w_string(&w, "content", c.data ? c.data : "", c.len);
        if (c.oom) text.oom = true;
        wgllm_strbuf_free(&c);
        if (wgllm_json_is(name, WGLLM_JSON_STRING)) wgllm_json_w_string(&w, "name", name->str, name->len);
        if (!generic && wgllm_json_is(tid, WGLLM_JSON_STRING))
            wgllm_json_w_string(&w, "tool_call_id", tid->str, tid->len);
        if (!generic && !wgllm_json_is_null(calls)) {
            wgllm_json_w_array(&w, "tool_calls");
            for (const J *tc = wgllm_json_first(calls); tc; tc = wgllm_json_next(calls, tc)) {
                const J *fn = wgllm_json_get(tc, "function"), *id = wgllm_json_get(tc, "id");
                wgllm_json_w_object(&w, NULL);
                if (wgllm_json_is(id, WGLLM_JSON_STRING)) wgllm_json_w_string(&w, "id", id->str, id->len);
                wgllm_json_w_str(&w, "type", "function");
                wgllm_json_w_object(&w, "function");
                wgllm_json_w_string(&w, "name", wgllm_json_get(fn, "name")->str, wgllm_json_get(fn, "name")->len);
                put_arguments(&w, wgllm_json_get(fn, "arguments"), caps.string_arguments);
                wgllm_json_w_end(&w, '}');
                wgllm_json_w_end(&w, '}');
            }
            wgllm_json_w_end(&w, ']');
        }
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, ']');
    const bool failed = text.oom || sys.oom;
    wgllm_strbuf_free(&sys);
    if (failed) return wgllm_strbuf_free(&text), oom(e, "messages");
    g->messages_json = wgllm_strbuf_take(&text);
    return true;
}

/* ---- the answer: content and tool calls --------------------------------------- */

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    return i;
}

/* The end of the JSON object or array that starts at s[i] ('{' or '['): the
 * index after its closing bracket, or 0 when it does not close in s[0, n). */
static size_t json_end(const char *s, size_t n, size_t i) {
    int depth = 0;
    bool str = false;
    for (; i < n; i++) {
        const char c = s[i];
        if (str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > 64) return 0;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return 0;
}

static bool starts(const char *s, size_t n, size_t i, const char *lit) {
    const size_t k = strlen(lit);
    return i + k <= n && !memcmp(s + i, lit, k);
}

static size_t find(const char *s, size_t n, size_t from, const char *lit) {
    const size_t k = strlen(lit);
    for (size_t i = from; i + k <= n; i++)
        if (!memcmp(s + i, lit, k)) return i;
    return (size_t)-1;
}

static bool add_call(struct wgllm_tool_calls *out, const char *name, size_t name_len, const J *args, const J *id) {
    if (!wgllm_grow((void **)&out->v, &out->cap, (size_t)out->n + 1, sizeof *out->v)) return false;
    struct wgllm_strbuf a = {0};
    if (wgllm_json_is(args, WGLLM_JSON_STRING)) {
        wgllm_strbuf_put(&a, args->str, args->len);
    } else if (wgllm_json_is_null(args)) {
        wgllm_strbuf_puts(&a, "{}");
    } else {
        W w;
        wgllm_json_w_init(&w, &a);
        wgllm_json_w_value(&w, NULL, args);
    }
    char *nm = malloc(name_len + 1);
    char *idc = wgllm_json_is(id, WGLLM_JSON_STRING) ? strdup(id->str) : NULL;
    if (a.oom || !nm || (wgllm_json_is(id, WGLLM_JSON_STRING) && !idc)) {
        wgllm_strbuf_free(&a), free(nm), free(idc);
        return false;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    out->v[out->n].name = nm;
    out->v[out->n].arguments = wgllm_strbuf_take(&a);
    if (!out->v[out->n].arguments) out->v[out->n].arguments = strdup("{}");
    out->v[out->n].id = idc;
    out->n++;
    return true;
}

/* One JSON call object s[i, end) with its name under `nk` and arguments under
 * `ak` (or "arguments" / "parameters" both); false when it is not one. */
static bool json_call(struct wgllm_tool_calls *out, const char *s, size_t i, size_t end, const char *nk) {
    struct wgllm_json_doc d = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 16};
    if (!wgllm_json_parse(s + i, end - i, &lim, &d, &je)) return false;
    const J *o = wgllm_json_root(&d);
    const J *name = wgllm_json_get(o, nk);
    const J *args = wgllm_json_get(o, "arguments");
    if (!args) args = wgllm_json_get(o, "parameters");
    const J *id = wgllm_json_get(o, "id");
    bool ok = o->type == WGLLM_JSON_OBJECT && wgllm_json_is(name, WGLLM_JSON_STRING) && name->len > 0 &&
              (wgllm_json_is_null(args) || args->type == WGLLM_JSON_OBJECT || args->type == WGLLM_JSON_STRING);
    if (ok && !add_call(out, name->str, name->len, args, id)) out->oom = true;
    wgllm_json_doc_free(&d);
    return ok;
}

/* A JSON array of call objects s[i, end). */
static bool json_calls(struct wgllm_tool_calls *out, const char *s, size_t i, size_t end, const char *nk) {
    i = skip_ws(s, end, i);
    if (i >= end || s[i] != '[') return false;
    i = skip_ws(s, end, i + 1);
    while (i < end && s[i] == '{') {
        const size_t e = json_end(s, end, i);
        if (!e || !json_call(out, s, i, e, nk)) return false;
        i = skip_ws(s, end, e);
        if (i < end && s[i] == ',') i = skip_ws(s, end, i + 1);
    }
    return i < end && s[i] == ']';
}

static void drop_calls(struct wgllm_tool_calls *out, int keep) {
    for (int k = keep; k < out->n; k++) free(out->v[k].name), free(out->v[k].arguments), free(out->v[k].id);
    out->n = keep;
}

void wgllm_tool_calls_free(struct wgllm_tool_calls *out) {
    drop_calls(out, 0);
    free(out->v);
    wgllm_strbuf_free(&out->content);
    memset(out, 0, sizeof *out);
}

void wgllm_tool_calls_from_json(const char *json, struct wgllm_tool_calls *out) {
    if (!json) return;
    struct wgllm_json_doc d = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 20};
    if (!wgllm_json_parse(json, strlen(json), &lim, &d, &je)) {
        out->oom = true; /* the client wrote it: only memory can make it unreadable */
        return;
    }
    const J *arr = wgllm_json_root(&d);
    for (const J *c = arr->type == WGLLM_JSON_ARRAY ? wgllm_json_first(arr) : NULL; c; c = wgllm_json_next(arr, c)) {
        const J *fn = wgllm_json_get(c, "function");
        const J *name = wgllm_json_get(fn, "name");
        if (!wgllm_json_is(name, WGLLM_JSON_STRING)) continue;
        if (!add_call(out, name->str, name->len, wgllm_json_get(fn, "arguments"), wgllm_json_get(c, "id"))) {
            out->oom = true;
            break;
        }
    }
    wgllm_json_doc_free(&d);
}

/* Hermes: <tool_call>{...}</tool_call>, any number, text around them is content. */
static bool parse_hermes(const char *s, size_t n, struct wgllm_tool_calls *out) {
    size_t i = 0;
    for (;;) {
        const size_t at = find(s, n, i, "<tool_call>");
        if (at == (size_t)-1) break;
        const size_t j = skip_ws(s, n, at + 11);
        const size_t e = j < n && s[j] == '{' ? json_end(s, n, j) : 0;
        if (!e || !json_call(out, s, j, e, "name")) break;
        wgllm_strbuf_put(&out->content, s + i, at - i);
        size_t k = skip_ws(s, n, e);
        if (starts(s, n, k, "</tool_call>")) k += 12;
        i = k;
    }
    wgllm_strbuf_put(&out->content, s + i, n - i);
    return out->n > 0;
}

static bool parse_generic(const char *s, size_t n, struct wgllm_tool_calls *out) {
    const size_t i = skip_ws(s, n, 0);
    const size_t e = i < n && s[i] == '{' ? json_end(s, n, i) : 0;
    if (!e) return false;
    struct wgllm_json_doc d = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 16};
    if (!wgllm_json_parse(s + i, e - i, &lim, &d, &je)) return false;
    const J *o = wgllm_json_root(&d);
    const J *calls = wgllm_json_get(o, "tool_calls"), *one = wgllm_json_get(o, "tool_call");
    const J *resp = wgllm_json_get(o, "response");
    bool ok = false;
    if (wgllm_json_is(calls, WGLLM_JSON_ARRAY) || wgllm_json_is(one, WGLLM_JSON_OBJECT)) {
        ok = true;
        for (const J *c = one ? one : wgllm_json_first(calls); c && ok; c = one ? NULL : wgllm_json_next(calls, c)) {
            const J *name = wgllm_json_get(c, "name"), *args = wgllm_json_get(c, "arguments");
            ok = wgllm_json_is(name, WGLLM_JSON_STRING) && name->len > 0;
            if (ok && !add_call(out, name->str, name->len, args, wgllm_json_get(c, "id"))) out->oom = true;
        }
    } else if (wgllm_json_is(resp, WGLLM_JSON_STRING)) {
        wgllm_strbuf_put(&out->content, resp->str, resp->len);
        ok = true;
    }
    wgllm_json_doc_free(&d);
    return ok;
}

static bool parse_r1(const char *s, size_t n, struct wgllm_tool_calls *out) {
    const size_t at = find(s, n, 0, "<｜tool▁calls▁begin｜>");
    if (at == (size_t)-1) return false;
    wgllm_strbuf_put(&out->content, s, at);
    size_t i = at + strlen("<｜tool▁calls▁begin｜>");
    const char *cb = "<｜tool▁call▁begin｜>", *sep = "<｜tool▁sep｜>";
    for (;;) {
        i = skip_ws(s, n, i);
        if (!starts(s, n, i, cb)) break;
        const size_t sp = find(s, n, i, sep);
        if (sp == (size_t)-1) return false;
        const size_t nm = sp + strlen(sep);
        size_t nl = nm;
        while (nl < n && s[nl] != '\n') nl++;
        size_t j = nl;
        if (starts(s, n, skip_ws(s, n, j), "```json")) j = skip_ws(s, n, j) + 7;
        j = skip_ws(s, n, j);
        const size_t e = j < n && s[j] == '{' ? json_end(s, n, j) : 0;
        if (!e || nl == nm) return false;
        struct wgllm_json_doc d = {0};
        struct wgllm_json_error je;
        const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 16};
        if (!wgllm_json_parse(s + j, e - j, &lim, &d, &je)) return false;
        const bool ok = add_call(out, s + nm, nl - nm, wgllm_json_root(&d), NULL);
        wgllm_json_doc_free(&d);
        if (!ok) out->oom = true;
        i = skip_ws(s, n, e);
        if (starts(s, n, i, "```")) i += 3;
        i = skip_ws(s, n, i);
        if (starts(s, n, i, "<｜tool▁call▁end｜>")) i += strlen("<｜tool▁call▁end｜>");
    }
    if (starts(s, n, i, "<｜tool▁calls▁end｜>")) i += strlen("<｜tool▁calls▁end｜>");
    wgllm_strbuf_put(&out->content, s + i, n - i);
    return out->n > 0;
}

/* functionary v3.2: segments split by ">>>": "all\n<text>" is content, "name\n{...}" a call */
static bool parse_functionary(const char *s, size_t n, struct wgllm_tool_calls *out) {
    size_t i = starts(s, n, 0, ">>>") ? 3 : 0;
    bool parsed = false; /* some segment was "all" or a call: the text is in the format */
    while (i < n) {
        size_t next = find(s, n, i, ">>>");
        if (next == (size_t)-1) next = n;
        size_t nl = i;
        while (nl < next && s[nl] != '\n') nl++;
        if (nl - i == 3 && !memcmp(s + i, "all", 3)) {
            wgllm_strbuf_put(&out->content, s + nl + (nl < next), next - nl - (nl < next));
            parsed = true;
        } else {
            const size_t j = skip_ws(s, next, nl);
            const size_t e = j < next && s[j] == '{' ? json_end(s, next, j) : 0;
            struct wgllm_json_doc d = {0};
            struct wgllm_json_error je;
            const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 16};
            if (!e || nl == i || !wgllm_json_parse(s + j, e - j, &lim, &d, &je)) {
                if (!parsed) return false;
                wgllm_strbuf_put(&out->content, s + i, next - i);
            } else {
                if (!add_call(out, s + i, nl - i, wgllm_json_root(&d), NULL)) out->oom = true;
                wgllm_json_doc_free(&d);
                parsed = true;
            }
        }
        i = next < n ? next + 3 : n;
    }
    return parsed;
}

static bool split_calls(int format, const char *s, size_t n, struct wgllm_tool_calls *out) {
    switch (format) {
        case WGLLM_TOOLS_HERMES:
            return parse_hermes(s, n, out);
        case WGLLM_TOOLS_LLAMA3: {
            size_t i = skip_ws(s, n, 0);
            if (starts(s, n, i, "<|python_tag|>")) i = skip_ws(s, n, i + 14);
            while (i < n && s[i] == '{') {
                const size_t e = json_end(s, n, i);
                if (!e || !json_call(out, s, i, e, "name")) break;
                i = skip_ws(s, n, e);
                if (i < n && s[i] == ';') i = skip_ws(s, n, i + 1);
            }
            if (out->n) wgllm_strbuf_put(&out->content, s + i, n - i);
            return out->n > 0;
        }
        case WGLLM_TOOLS_MISTRAL: {
            const size_t at = find(s, n, 0, "[TOOL_CALLS]");
            if (at == (size_t)-1) return false;
            const size_t j = skip_ws(s, n, at + 12);
            const size_t e = j < n && s[j] == '[' ? json_end(s, n, j) : 0;
            if (!e || !json_calls(out, s, j, e, "name")) return false;
            wgllm_strbuf_put(&out->content, s, at);
            wgllm_strbuf_put(&out->content, s + e, n - e);
            return true;
        }
        case WGLLM_TOOLS_DEEPSEEK_R1:
            return parse_r1(s, n, out);
        case WGLLM_TOOLS_COMMAND_R: {
            const size_t at = find(s, n, 0, "<|START_ACTION|>");
            if (at == (size_t)-1) return false;
            const size_t j = skip_ws(s, n, at + 16);
            const size_t e = j < n && s[j] == '[' ? json_end(s, n, j) : 0;
            if (!e || !json_calls(out, s, j, e, "tool_name")) return false;
            wgllm_strbuf_put(&out->content, s, at);
            size_t k = skip_ws(s, n, e);
            if (starts(s, n, k, "<|END_ACTION|>")) k += 14;
            wgllm_strbuf_put(&out->content, s + k, n - k);
            return true;
        }
        case WGLLM_TOOLS_FUNCTIONARY:
            return parse_functionary(s, n, out);
        default:
            return parse_generic(s, n, out);
    }
}

void wgllm_openai_tools_extract(const struct wgllm_openai_request *g, const char *s, size_t n,
                                struct wgllm_tool_calls *out) {
    memset(out, 0, sizeof *out);
    if (!g->tools || !split_calls(g->tool_format, s, n, out)) {
        /* not calls after all: all of it is content */
        drop_calls(out, 0);
        wgllm_strbuf_clear(&out->content);
        wgllm_strbuf_put(&out->content, s, n);
    }
    if (out->content.oom) out->oom = true;
}

/* ---- streams: what may be sent as content before the end ----------------------- */

void wgllm_openai_toolsplit_push(struct wgllm_openai_request *g, const char *text, size_t len,
                                 struct wgllm_strbuf *content) {
    struct wgllm_openai_toolsplit *t = &g->split;
    if (!g->tools || (t->seen && !t->calls)) {
        wgllm_strbuf_put(content, text, len);
        return;
    }
    if (len && !wgllm_grow((void **)&t->held, &t->cap, t->n_held + len + 1, 1)) {
        /* out of memory: what cannot be held goes out as content */
        wgllm_strbuf_put(content, text, len);
        return;
    }
    if (len) memcpy(t->held + t->n_held, text, len);
    t->n_held += len;
    if (t->calls || t->n_held == 0) return;
    const char *op = opener(g->tool_format);
    if (!op) {
        /* Llama 3 calls are JSON from the first character: text that starts otherwise is content.
         * The generic and functionary formats are held whole. */
        if (g->tool_format != WGLLM_TOOLS_LLAMA3) {
            t->calls = true;
            return;
        }
        const size_t i = skip_ws(t->held, t->n_held, 0);
        if (i == t->n_held) return;
        if (t->held[i] == '{' || starts(t->held, t->n_held, i, "<|python_tag|>") ||
            (t->n_held - i < 14 && !memcmp(t->held + i, "<|python_tag|>", t->n_held - i))) {
            t->calls = true;
            return;
        }
        /* not a call: the rest of this answer streams as it comes */
        wgllm_strbuf_put(content, t->held, t->n_held);
        t->n_held = 0;
        t->seen = true;
        return;
    }
    const size_t at = find(t->held, t->n_held, 0, op);
    if (at != (size_t)-1) {
        wgllm_strbuf_put(content, t->held, at);
        memmove(t->held, t->held + at, t->n_held - at);
        t->n_held -= at;
        t->calls = true;
        return;
    }
    /* keep what may be the opener's beginning */
    const size_t ol = strlen(op);
    size_t keep = 0;
    for (size_t k = ol - 1 < t->n_held ? ol - 1 : t->n_held; k > 0; k--)
        if (!memcmp(t->held + t->n_held - k, op, k)) {
            keep = k;
            break;
        }
    wgllm_strbuf_put(content, t->held, t->n_held - keep);
    memmove(t->held, t->held + t->n_held - keep, keep);
    t->n_held = keep;
}

void wgllm_openai_toolsplit_free(struct wgllm_openai_toolsplit *t) {
    free(t->held);
    memset(t, 0, sizeof *t);
}
