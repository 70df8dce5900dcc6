/*
 * responses.c - OpenAI's Responses API (/v1/responses) on the chat layer:
 * a Responses request becomes the chat request it means, served by the one
 * chat path, and the chat answer and stream chunks become a Response and
 * its stream events. The server keeps no responses: store is accepted and
 * ignored, previous_response_id refused (send the conversation in input).
 *
 * Request: instructions become the first (system) message; input is a
 * string (one user turn) or items: messages (roles user, system, developer,
 * assistant; content a string or input_text / output_text parts),
 * function_call items (joined with the assistant text before them into one
 * assistant turn's tool_calls) and function_call_output items (tool
 * messages); reasoning items of earlier turns are dropped. tools (type
 * function: name, description, parameters), tool_choice, parallel_tool_calls,
 * text.format (text, json_object, json_schema), max_output_tokens,
 * temperature, top_p, stream map to chat fields; reasoning, metadata, user,
 * store, truncation and include are accepted; anything else is refused by name.
 *
 * Answer: output items reasoning (reasoning_text), message (output_text) and
 * function_call (call_id, name, arguments); status completed, or incomplete
 * with incomplete_details.reason max_output_tokens; usage with cached
 * tokens. Stream: response.created / in_progress, then per item
 * output_item.added, its part and deltas (output_text.delta,
 * reasoning_text.delta, function_call_arguments.delta) and their done
 * events, output_item.done, and response.completed (or .incomplete) with the
 * whole Response; every event numbered (sequence_number).
 */
#include "api/api_internal.h"
#include "wgllm.h"

#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct wgllm_json J;
typedef struct wgllm_json_writer W;

/* A message's content: a string, or text parts (input_text, output_text, text). */
static bool content_text(const J *c, struct wgllm_strbuf *out) {
    if (wgllm_json_is(c, WGLLM_JSON_STRING)) return wgllm_strbuf_put(out, c->str, c->len), true;
    if (!wgllm_json_is(c, WGLLM_JSON_ARRAY)) return false;
    for (const J *p = wgllm_json_first(c); p; p = wgllm_json_next(c, p)) {
        const J *type = wgllm_json_get(p, "type"), *text = wgllm_json_get(p, "text");
        if (!wgllm_json_is(type, WGLLM_JSON_STRING) || !wgllm_json_is(text, WGLLM_JSON_STRING) ||
            (strcmp(type->str, "input_text") && strcmp(type->str, "output_text") && strcmp(type->str, "text")))
            return false;
        wgllm_strbuf_put(out, text->str, text->len);
    }
    return true;
}

/* The assistant turn being gathered: its text and the function_call items after it. */
struct pending {
    bool open;
    struct wgllm_strbuf text;
    struct wgllm_strbuf calls; /* the tool_calls array's members, written already */
    int n_calls;
};

static void flush(W *w, struct pending *p) {
    if (!p->open) return;
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_str(w, "role", "assistant");
    if (p->n_calls && !p->text.len) wgllm_json_w_null(w, "content");
    else wgllm_json_w_string(w, "content", p->text.data ? p->text.data : "", p->text.len);
    if (p->n_calls) {
        wgllm_json_w_array(w, "tool_calls");
        for (const char *s = p->calls.data; s && *s;) { /* the calls, one per line, as JSON already */
            const char *nl = strchr(s, '\n');
            struct wgllm_json_doc d;
            struct wgllm_json_error je;
            const struct wgllm_json_limits lim = {.max_depth = 64, .max_nodes = 1 << 20};
            if (wgllm_json_parse(s, (size_t)(nl - s), &lim, &d, &je)) {
                wgllm_json_w_value(w, NULL, wgllm_json_root(&d));
                wgllm_json_doc_free(&d);
            } else {
                w->out->oom = true;
            }
            s = nl + 1;
        }
        wgllm_json_w_end(w, ']');
    }
    wgllm_json_w_end(w, '}');
    if (p->text.oom || p->calls.oom) w->out->oom = true;
    wgllm_strbuf_free(&p->text), wgllm_strbuf_free(&p->calls);
    memset(p, 0, sizeof *p);
}

static bool input_item(W *w, struct pending *p, const J *it, int i, struct wgllm_openai_error *e) {
    char param[40];
    snprintf(param, sizeof param, "input[%d]", i);
    const J *type = wgllm_json_get(it, "type"), *role = wgllm_json_get(it, "role");
    const char *t = wgllm_json_is(type, WGLLM_JSON_STRING) ? type->str : wgllm_json_is(role, WGLLM_JSON_STRING) ? "message" : "";
    if (!wgllm_json_is(it, WGLLM_JSON_OBJECT)) return wgllm_openai_bad(e, param, "'%s' must be an object%s", "");
    if (!strcmp(t, "message")) {
        const char *r = wgllm_json_is(role, WGLLM_JSON_STRING) ? role->str : "";
        struct wgllm_strbuf text = {0};
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
            return wgllm_openai_bad(e, param, "'%s'.role must be user, system, developer or assistant%s", "");
        if (!content_text(wgllm_json_get(it, "content"), &text)) {
            wgllm_strbuf_free(&text);
            return wgllm_openai_bad(e, param, "'%s'.content must be a string or input_text / output_text parts%s", "");
        }
        if (!strcmp(r, "assistant")) {
            flush(w, p);
            p->open = true;
            p->text = text;
            return true;
        }
        flush(w, p);
        wgllm_json_w_object(w, NULL);
        wgllm_json_w_str(w, "role", strcmp(r, "developer") ? r : "system");
        wgllm_json_w_string(w, "content", text.data ? text.data : "", text.len);
        wgllm_json_w_end(w, '}');
        wgllm_strbuf_free(&text);
        return true;
    }
    if (!strcmp(t, "function_call")) {
        const J *id = wgllm_json_get(it, "call_id"), *name = wgllm_json_get(it, "name");
        const J *args = wgllm_json_get(it, "arguments");
        if (!wgllm_json_is(id, WGLLM_JSON_STRING) || !wgllm_json_is(name, WGLLM_JSON_STRING) ||
            !wgllm_json_is(args, WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, param, "'%s' must be a function_call with call_id, name and arguments strings%s", "");
        p->open = true;
        W cw;
        wgllm_json_w_init(&cw, &p->calls);
        wgllm_json_w_object(&cw, NULL);
        wgllm_json_w_value(&cw, "id", id);
        wgllm_json_w_str(&cw, "type", "function");
        wgllm_json_w_object(&cw, "function");
        wgllm_json_w_value(&cw, "name", name);
        wgllm_json_w_value(&cw, "arguments", args);
        wgllm_json_w_end(&cw, '}');
        wgllm_json_w_end(&cw, '}');
        wgllm_strbuf_putc(&p->calls, '\n');
        p->n_calls++;
        return true;
    }
    if (!strcmp(t, "function_call_output")) {
        const J *id = wgllm_json_get(it, "call_id"), *out = wgllm_json_get(it, "output");
        struct wgllm_strbuf text = {0};
        if (!wgllm_json_is(id, WGLLM_JSON_STRING) || !content_text(out, &text)) {
            wgllm_strbuf_free(&text);
            return wgllm_openai_bad(e, param, "'%s' must be a function_call_output with a call_id and a text output%s", "");
        }
        flush(w, p);
        wgllm_json_w_object(w, NULL);
        wgllm_json_w_str(w, "role", "tool");
        wgllm_json_w_value(w, "tool_call_id", id);
        wgllm_json_w_string(w, "content", text.data ? text.data : "", text.len);
        wgllm_json_w_end(w, '}');
        wgllm_strbuf_free(&text);
        return true;
    }
    if (!strcmp(t, "reasoning")) return true; /* an earlier turn's: the template shows none */
    wgllm_openai_error_set(e, 400, "invalid_request_error", param, NULL,
                           "'%s' is a %.40s item, which this server cannot take (message, function_call, "
                           "function_call_output, reasoning)", param, t[0] ? t : "typeless");
    return false;
}

static bool tools_of(W *w, const J *root, struct wgllm_openai_error *e) {
    const J *tools = wgllm_json_get(root, "tools"), *choice = wgllm_json_get(root, "tool_choice");
    if (!wgllm_json_is_null(tools)) {
        if (!wgllm_json_is(tools, WGLLM_JSON_ARRAY)) return wgllm_openai_bad(e, "tools", "'%s' must be an array%s", "");
        wgllm_json_w_array(w, "tools");
        int i = 0;
        for (const J *t = wgllm_json_first(tools); t; t = wgllm_json_next(tools, t), i++) {
            char param[32];
            snprintf(param, sizeof param, "tools[%d]", i);
            const J *type = wgllm_json_get(t, "type"), *name = wgllm_json_get(t, "name");
            if (!wgllm_json_is(type, WGLLM_JSON_STRING) || strcmp(type->str, "function"))
                return wgllm_openai_bad(e, param, "'%s': only function tools run here, not '%s'",
                              wgllm_json_is(type, WGLLM_JSON_STRING) ? type->str : "?");
            if (!wgllm_json_is(name, WGLLM_JSON_STRING)) return wgllm_openai_bad(e, param, "'%s' needs a name%s", "");
            wgllm_json_w_object(w, NULL);
            wgllm_json_w_str(w, "type", "function");
            wgllm_json_w_object(w, "function");
            wgllm_json_w_value(w, "name", name);
            static const char *const KEEP[] = {"description", "parameters", "strict"};
            for (int k = 0; k < 3; k++) {
                const J *v = wgllm_json_get(t, KEEP[k]);
                if (!wgllm_json_is_null(v)) wgllm_json_w_value(w, KEEP[k], v);
            }
            wgllm_json_w_end(w, '}');
            wgllm_json_w_end(w, '}');
        }
        wgllm_json_w_end(w, ']');
    }
    if (wgllm_json_is(choice, WGLLM_JSON_STRING)) {
        wgllm_json_w_value(w, "tool_choice", choice);
    } else if (!wgllm_json_is_null(choice)) {
        const J *type = wgllm_json_get(choice, "type"), *name = wgllm_json_get(choice, "name");
        if (!wgllm_json_is(type, WGLLM_JSON_STRING) || strcmp(type->str, "function") || !wgllm_json_is(name, WGLLM_JSON_STRING))
            return wgllm_openai_bad(e, "tool_choice", "'%s' must be auto, none, required or {\"type\": \"function\", \"name\": ...}%s", "");
        wgllm_json_w_object(w, "tool_choice");
        wgllm_json_w_str(w, "type", "function");
        wgllm_json_w_object(w, "function");
        wgllm_json_w_value(w, "name", name);
        wgllm_json_w_end(w, '}');
        wgllm_json_w_end(w, '}');
    }
    return true;
}

/* text.format as the chat's response_format */
static bool format_of(W *w, const J *text, struct wgllm_openai_error *e) {
    if (wgllm_json_is_null(text)) return true;
    const J *f = wgllm_json_get(text, "format"), *type = wgllm_json_get(f, "type");
    if (!wgllm_json_is(text, WGLLM_JSON_OBJECT)) return wgllm_openai_bad(e, "text", "'%s' must be an object%s", "");
    if (wgllm_json_is_null(f)) return true;
    if (!wgllm_json_is(type, WGLLM_JSON_STRING)) return wgllm_openai_bad(e, "text.format", "'%s' needs a type%s", "");
    if (!strcmp(type->str, "text")) return true;
    wgllm_json_w_object(w, "response_format");
    wgllm_json_w_value(w, "type", type);
    if (!strcmp(type->str, "json_schema")) {
        const J *schema = wgllm_json_get(f, "schema");
        if (!wgllm_json_is(schema, WGLLM_JSON_OBJECT))
            return wgllm_openai_bad(e, "text.format", "'%s': type json_schema needs a schema object%s", "");
        wgllm_json_w_object(w, "json_schema");
        static const char *const KEEP[] = {"name", "schema", "strict", "description"};
        for (int k = 0; k < 4; k++) {
            const J *v = wgllm_json_get(f, KEEP[k]);
            if (!wgllm_json_is_null(v)) wgllm_json_w_value(w, KEEP[k], v);
        }
        wgllm_json_w_end(w, '}');
    } else if (strcmp(type->str, "json_object")) {
        return wgllm_openai_bad(e, "text.format", "'%s': type must be text, json_object or json_schema, not '%s'", type->str);
    }
    wgllm_json_w_end(w, '}');
    return true;
}

char *wgllm_responses_to_chat(const char *body, size_t len, struct wgllm_openai_error *e) {
    static const char *const FIELDS[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
                                         "stream", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
                                         "metadata", "user", "store", "truncation", "include", "previous_response_id",
                                         NULL};
    struct wgllm_json_doc doc;
    if (!wgllm_openai_parse_body(body, len, &doc, e)) return NULL;
    const J *root = wgllm_json_root(&doc);
    struct wgllm_strbuf out = {0};
    W w;
    wgllm_json_w_init(&w, &out);
    struct pending p = {0};
    bool ok = true;
    if (root->type != WGLLM_JSON_OBJECT) {
        ok = wgllm_openai_bad(e, "body", "the request %s must be a JSON object%s", "");
        goto done;
    }
    if (!(ok = wgllm_openai_known_fields(root, FIELDS, NULL, e))) goto done;
    if (!wgllm_json_is_null(wgllm_json_get(root, "previous_response_id"))) {
        ok = wgllm_openai_bad(e, "previous_response_id",
                    "'%s': this server keeps no responses; send the whole conversation in input%s", "");
        goto done;
    }
    const J *input = wgllm_json_get(root, "input");
    if (!wgllm_json_is(input, WGLLM_JSON_STRING) && !(wgllm_json_is(input, WGLLM_JSON_ARRAY) && input->count)) {
        ok = wgllm_openai_bad(e, "input", "'%s' is required: a string or a non-empty array of items%s", "");
        goto done;
    }
    wgllm_json_w_object(&w, NULL);
    static const char *const SAME[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", NULL};
    for (int i = 0; SAME[i]; i++) {
        const J *v = wgllm_json_get(root, SAME[i]);
        if (v) wgllm_json_w_value(&w, SAME[i], v);
    }
    const J *mot = wgllm_json_get(root, "max_output_tokens");
    if (!wgllm_json_is_null(mot)) wgllm_json_w_value(&w, "max_tokens", mot);
    if (wgllm_json_is(wgllm_json_get(root, "stream"), WGLLM_JSON_TRUE)) {
        wgllm_json_w_object(&w, "stream_options");
        wgllm_json_w_bool(&w, "include_usage", true);
        wgllm_json_w_end(&w, '}');
    }
    if (!(ok = tools_of(&w, root, e) && format_of(&w, wgllm_json_get(root, "text"), e))) goto done;
    wgllm_json_w_array(&w, "messages");
    const J *ins = wgllm_json_get(root, "instructions");
    if (!wgllm_json_is_null(ins)) {
        if (!wgllm_json_is(ins, WGLLM_JSON_STRING)) {
            ok = wgllm_openai_bad(e, "instructions", "'%s' must be a string%s", "");
            goto done;
        }
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "role", "system");
        wgllm_json_w_value(&w, "content", ins);
        wgllm_json_w_end(&w, '}');
    }
    if (wgllm_json_is(input, WGLLM_JSON_STRING)) {
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "role", "user");
        wgllm_json_w_value(&w, "content", input);
        wgllm_json_w_end(&w, '}');
    } else {
        int i = 0;
        for (const J *it = wgllm_json_first(input); it && ok; it = wgllm_json_next(input, it), i++)
            ok = input_item(&w, &p, it, i, e);
        if (!ok) goto done;
        flush(&w, &p);
    }
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
done:
    wgllm_strbuf_free(&p.text), wgllm_strbuf_free(&p.calls);
    wgllm_json_doc_free(&doc);
    if (ok && out.oom) {
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory for the request");
        ok = false;
    }
    if (!ok) return wgllm_strbuf_free(&out), NULL;
    return wgllm_strbuf_take(&out);
}

/* ---- what an answer holds, whole or as the stream gathers it ------------------- */

struct call {
    char *id, *name, *arguments;
};

struct wgllm_responses_stream {
    char id[96];     /* the answer's id tail (after "chatcmpl-") */
    char *model;
    long created;
    struct wgllm_strbuf reasoning, text;
    struct call *calls;
    size_t cap;
    int n_calls;
    bool incomplete; /* cut by max_output_tokens */
    double in, cached, out;
    /* the stream: which item is open (0 none, 1 reasoning, 2 message), the next item's index, event count */
    int open, next_item, seq;
    bool started, ended, oom;
};

static void set_head(struct wgllm_responses_stream *s, const J *r) {
    const J *id = wgllm_json_get(r, "id"), *model = wgllm_json_get(r, "model");
    if (!s->id[0] && wgllm_json_is(id, WGLLM_JSON_STRING)) {
        const char *tail = strchr(id->str, '-');
        snprintf(s->id, sizeof s->id, "%.80s", tail ? tail + 1 : id->str);
    }
    if (!s->model && wgllm_json_is(model, WGLLM_JSON_STRING)) s->model = strdup(model->str);
    if (!s->created) s->created = (long)time(NULL);
}

static void add_call(struct wgllm_responses_stream *s, const J *t) {
    const J *fn = wgllm_json_get(t, "function"), *id = wgllm_json_get(t, "id");
    const J *name = wgllm_json_get(fn, "name"), *args = wgllm_json_get(fn, "arguments");
    if (!wgllm_grow((void **)&s->calls, &s->cap, (size_t)s->n_calls + 1, sizeof *s->calls)) {
        s->oom = true;
        return;
    }
    struct call *c = &s->calls[s->n_calls++];
    c->id = strdup(wgllm_json_is(id, WGLLM_JSON_STRING) ? id->str : "call");
    c->name = strdup(wgllm_json_is(name, WGLLM_JSON_STRING) ? name->str : "");
    c->arguments = strdup(wgllm_json_is(args, WGLLM_JSON_STRING) ? args->str : "{}");
    if (!c->id || !c->name || !c->arguments) s->oom = true;
}

static void read_usage(struct wgllm_responses_stream *s, const J *u) {
    const J *p = wgllm_json_get(u, "prompt_tokens"), *c = wgllm_json_get(u, "completion_tokens");
    const J *cached = wgllm_json_get(wgllm_json_get(u, "prompt_tokens_details"), "cached_tokens");
    s->in = wgllm_json_is(p, WGLLM_JSON_NUMBER) ? p->num : 0;
    s->out = wgllm_json_is(c, WGLLM_JSON_NUMBER) ? c->num : 0;
    s->cached = wgllm_json_is(cached, WGLLM_JSON_NUMBER) ? cached->num : 0;
}

static void item_id(char *buf, size_t n, const char *prefix, const struct wgllm_responses_stream *s, int k) {
    snprintf(buf, n, "%s_%.80s_%d", prefix, s->id, k);
}

/* Output item k of the answer; `done` writes it whole (else as just begun). */
static void write_reasoning(W *w, const char *key, const struct wgllm_responses_stream *s, int k, bool done) {
    char id[120];
    item_id(id, sizeof id, "rs", s, k);
    wgllm_json_w_object(w, key);
    wgllm_json_w_str(w, "type", "reasoning");
    wgllm_json_w_str(w, "id", id);
    wgllm_json_w_array(w, "summary");
    wgllm_json_w_end(w, ']');
    wgllm_json_w_array(w, "content");
    if (done) {
        wgllm_json_w_object(w, NULL);
        wgllm_json_w_str(w, "type", "reasoning_text");
        wgllm_json_w_string(w, "text", s->reasoning.data ? s->reasoning.data : "", s->reasoning.len);
        wgllm_json_w_end(w, '}');
    }
    wgllm_json_w_end(w, ']');
    if (done) wgllm_json_w_str(w, "status", "completed");
    wgllm_json_w_end(w, '}');
}

static void text_part(W *w, const char *key, const struct wgllm_strbuf *t) {
    wgllm_json_w_object(w, key);
    wgllm_json_w_str(w, "type", "output_text");
    wgllm_json_w_string(w, "text", t && t->data ? t->data : "", t ? t->len : 0);
    wgllm_json_w_array(w, "annotations");
    wgllm_json_w_end(w, ']');
    wgllm_json_w_end(w, '}');
}

static void write_message(W *w, const char *key, const struct wgllm_responses_stream *s, int k, bool done) {
    char id[120];
    item_id(id, sizeof id, "msg", s, k);
    wgllm_json_w_object(w, key);
    wgllm_json_w_str(w, "type", "message");
    wgllm_json_w_str(w, "id", id);
    wgllm_json_w_str(w, "status", done ? "completed" : "in_progress");
    wgllm_json_w_str(w, "role", "assistant");
    wgllm_json_w_array(w, "content");
    if (done) text_part(w, NULL, &s->text);
    wgllm_json_w_end(w, ']');
    wgllm_json_w_end(w, '}');
}

static void write_call(W *w, const char *key, const struct wgllm_responses_stream *s, int i, int k, bool done) {
    char id[120];
    item_id(id, sizeof id, "fc", s, k);
    wgllm_json_w_object(w, key);
    wgllm_json_w_str(w, "type", "function_call");
    wgllm_json_w_str(w, "id", id);
    wgllm_json_w_str(w, "call_id", s->calls[i].id);
    wgllm_json_w_str(w, "name", s->calls[i].name);
    wgllm_json_w_str(w, "arguments", done ? s->calls[i].arguments : "");
    wgllm_json_w_str(w, "status", done ? "completed" : "in_progress");
    wgllm_json_w_end(w, '}');
}

/* The Response object: `final` with its items and usage, else as created. */
static void write_response(W *w, const char *key, const struct wgllm_responses_stream *s, bool final) {
    char id[120];
    snprintf(id, sizeof id, "resp_%.80s", s->id);
    wgllm_json_w_object(w, key);
    wgllm_json_w_str(w, "id", id);
    wgllm_json_w_str(w, "object", "response");
    wgllm_json_w_number(w, "created_at", (double)s->created);
    wgllm_json_w_str(w, "status", !final ? "in_progress" : s->incomplete ? "incomplete" : "completed");
    wgllm_json_w_str(w, "model", s->model ? s->model : "");
    wgllm_json_w_null(w, "error");
    if (final && s->incomplete) {
        wgllm_json_w_object(w, "incomplete_details");
        wgllm_json_w_str(w, "reason", "max_output_tokens");
        wgllm_json_w_end(w, '}');
    } else {
        wgllm_json_w_null(w, "incomplete_details");
    }
    wgllm_json_w_array(w, "output");
    int k = 0;
    if (final && s->reasoning.len) write_reasoning(w, NULL, s, k++, true);
    if (final && s->text.len) write_message(w, NULL, s, k++, true);
    for (int i = 0; final && i < s->n_calls; i++) write_call(w, NULL, s, i, k++, true);
    wgllm_json_w_end(w, ']');
    wgllm_json_w_bool(w, "parallel_tool_calls", true);
    if (final) {
        wgllm_json_w_object(w, "usage");
        wgllm_json_w_number(w, "input_tokens", s->in);
        wgllm_json_w_object(w, "input_tokens_details");
        wgllm_json_w_number(w, "cached_tokens", s->cached);
        wgllm_json_w_end(w, '}');
        wgllm_json_w_number(w, "output_tokens", s->out);
        wgllm_json_w_object(w, "output_tokens_details");
        wgllm_json_w_number(w, "reasoning_tokens", 0);
        wgllm_json_w_end(w, '}');
        wgllm_json_w_number(w, "total_tokens", s->in + s->out);
        wgllm_json_w_end(w, '}');
    } else {
        wgllm_json_w_null(w, "usage");
    }
    wgllm_json_w_end(w, '}');
}

struct wgllm_responses_stream *wgllm_responses_stream_init(void) { return calloc(1, sizeof(struct wgllm_responses_stream)); }

void wgllm_responses_stream_free(struct wgllm_responses_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n_calls; i++) free(s->calls[i].id), free(s->calls[i].name), free(s->calls[i].arguments);
    free(s->calls);
    free(s->model);
    wgllm_strbuf_free(&s->reasoning), wgllm_strbuf_free(&s->text);
    free(s);
}

char *wgllm_responses_response(const char *chat_json) {
    struct wgllm_json_doc d;
    if (!wgllm_openai_parse_own(chat_json, &d)) return NULL;
    struct wgllm_responses_stream *s = wgllm_responses_stream_init();
    char *out = NULL;
    if (s) {
        const J *r = wgllm_json_root(&d);
        set_head(s, r);
        const J *ch = wgllm_json_at(wgllm_json_get(r, "choices"), 0), *m = wgllm_json_get(ch, "message");
        const J *rc = wgllm_json_get(m, "reasoning_content"), *c = wgllm_json_get(m, "content");
        const J *fin = wgllm_json_get(ch, "finish_reason"), *calls = wgllm_json_get(m, "tool_calls");
        if (wgllm_json_is(rc, WGLLM_JSON_STRING)) wgllm_strbuf_put(&s->reasoning, rc->str, rc->len);
        if (wgllm_json_is(c, WGLLM_JSON_STRING)) wgllm_strbuf_put(&s->text, c->str, c->len);
        for (const J *t = wgllm_json_first(calls); t; t = wgllm_json_next(calls, t)) add_call(s, t);
        s->incomplete = wgllm_json_is(fin, WGLLM_JSON_STRING) && !strcmp(fin->str, "length");
        read_usage(s, wgllm_json_get(r, "usage"));
        struct wgllm_strbuf b = {0};
        W w;
        wgllm_json_w_init(&w, &b);
        write_response(&w, NULL, s, true);
        if (b.oom || s->oom || s->text.oom || s->reasoning.oom) wgllm_strbuf_free(&b);
        else out = wgllm_strbuf_take(&b);
        wgllm_responses_stream_free(s);
    }
    wgllm_json_doc_free(&d);
    return out;
}

/* ---- the stream's events ------------------------------------------------------- */

static void ev_begin(struct wgllm_responses_stream *s, struct wgllm_strbuf *out, W *w, const char *type) {
    wgllm_strbuf_printf(out, "event: %s\ndata: ", type);
    wgllm_json_w_init(w, out);
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_str(w, "type", type);
    wgllm_json_w_number(w, "sequence_number", s->seq++);
}

static void ev_end(struct wgllm_strbuf *out, W *w) {
    wgllm_json_w_end(w, '}');
    wgllm_strbuf_puts(out, "\n\n");
}

/* The open reasoning or message item, finished: its done events. */
static void close_item(struct wgllm_responses_stream *s, struct wgllm_strbuf *out) {
    if (!s->open) return;
    const int k = s->next_item - 1;
    const bool msg = s->open == 2;
    char id[120];
    item_id(id, sizeof id, msg ? "msg" : "rs", s, k);
    const struct wgllm_strbuf *t = msg ? &s->text : &s->reasoning;
    W w;
    ev_begin(s, out, &w, msg ? "response.output_text.done" : "response.reasoning_text.done");
    wgllm_json_w_str(&w, "item_id", id);
    wgllm_json_w_number(&w, "output_index", k);
    wgllm_json_w_number(&w, "content_index", 0);
    wgllm_json_w_string(&w, "text", t->data ? t->data : "", t->len);
    ev_end(out, &w);
    ev_begin(s, out, &w, "response.content_part.done");
    wgllm_json_w_str(&w, "item_id", id);
    wgllm_json_w_number(&w, "output_index", k);
    wgllm_json_w_number(&w, "content_index", 0);
    if (msg) {
        text_part(&w, "part", t);
    } else {
        wgllm_json_w_object(&w, "part");
        wgllm_json_w_str(&w, "type", "reasoning_text");
        wgllm_json_w_string(&w, "text", t->data ? t->data : "", t->len);
        wgllm_json_w_end(&w, '}');
    }
    ev_end(out, &w);
    ev_begin(s, out, &w, "response.output_item.done");
    wgllm_json_w_number(&w, "output_index", k);
    if (msg) write_message(&w, "item", s, k, true);
    else write_reasoning(&w, "item", s, k, true);
    ev_end(out, &w);
    s->open = 0;
}

enum { OPEN_REASONING = 1, OPEN_MESSAGE = 2 };

/* Text or reasoning into its item, which is begun when it is not the open one. */
static void delta(struct wgllm_responses_stream *s, struct wgllm_strbuf *out, int kind, const J *piece) {
    W w;
    char id[120];
    const bool msg = kind == OPEN_MESSAGE;
    if (s->open != kind) {
        /* an item of this kind was done already (text after a call): what comes now is a new one */
        close_item(s, out);
        const int k = s->next_item++;
        ev_begin(s, out, &w, "response.output_item.added");
        wgllm_json_w_number(&w, "output_index", k);
        if (msg) write_message(&w, "item", s, k, false);
        else write_reasoning(&w, "item", s, k, false);
        ev_end(out, &w);
        item_id(id, sizeof id, msg ? "msg" : "rs", s, k);
        ev_begin(s, out, &w, "response.content_part.added");
        wgllm_json_w_str(&w, "item_id", id);
        wgllm_json_w_number(&w, "output_index", k);
        wgllm_json_w_number(&w, "content_index", 0);
        if (msg) {
            text_part(&w, "part", NULL);
        } else {
            wgllm_json_w_object(&w, "part");
            wgllm_json_w_str(&w, "type", "reasoning_text");
            wgllm_json_w_str(&w, "text", "");
            wgllm_json_w_end(&w, '}');
        }
        ev_end(out, &w);
        s->open = kind;
    }
    const int k = s->next_item - 1;
    item_id(id, sizeof id, msg ? "msg" : "rs", s, k);
    wgllm_strbuf_put(msg ? &s->text : &s->reasoning, piece->str, piece->len);
    ev_begin(s, out, &w, msg ? "response.output_text.delta" : "response.reasoning_text.delta");
    wgllm_json_w_str(&w, "item_id", id);
    wgllm_json_w_number(&w, "output_index", k);
    wgllm_json_w_number(&w, "content_index", 0);
    wgllm_json_w_value(&w, "delta", piece);
    ev_end(out, &w);
}

/* A whole call: its item added, its arguments in one delta, done. */
static void call_events(struct wgllm_responses_stream *s, struct wgllm_strbuf *out, const J *t) {
    close_item(s, out);
    add_call(s, t);
    if (s->oom) return;
    const int i = s->n_calls - 1, k = s->next_item++;
    char id[120];
    item_id(id, sizeof id, "fc", s, k);
    W w;
    ev_begin(s, out, &w, "response.output_item.added");
    wgllm_json_w_number(&w, "output_index", k);
    write_call(&w, "item", s, i, k, false);
    ev_end(out, &w);
    ev_begin(s, out, &w, "response.function_call_arguments.delta");
    wgllm_json_w_str(&w, "item_id", id);
    wgllm_json_w_number(&w, "output_index", k);
    wgllm_json_w_str(&w, "delta", s->calls[i].arguments);
    ev_end(out, &w);
    ev_begin(s, out, &w, "response.function_call_arguments.done");
    wgllm_json_w_str(&w, "item_id", id);
    wgllm_json_w_number(&w, "output_index", k);
    wgllm_json_w_str(&w, "name", s->calls[i].name);
    wgllm_json_w_str(&w, "arguments", s->calls[i].arguments);
    ev_end(out, &w);
    ev_begin(s, out, &w, "response.output_item.done");
    wgllm_json_w_number(&w, "output_index", k);
    write_call(&w, "item", s, i, k, true);
    ev_end(out, &w);
}

char *wgllm_responses_stream_chunk(struct wgllm_responses_stream *s, const char *chunk_json) {
    struct wgllm_json_doc d;
    if (!wgllm_openai_parse_own(chunk_json, &d)) return NULL;
    struct wgllm_openai_chunk_view v;
    wgllm_openai_chunk_view(&d, &v);
    const J *r = v.root, *err = v.error;
    struct wgllm_strbuf out = {0};
    W w;
    if (err) {
        ev_begin(s, &out, &w, "error");
        const J *code = wgllm_json_get(err, "code"), *msg = wgllm_json_get(err, "message"), *param = wgllm_json_get(err, "param");
        if (wgllm_json_is(code, WGLLM_JSON_STRING)) wgllm_json_w_value(&w, "code", code);
        else wgllm_json_w_null(&w, "code");
        wgllm_json_w_str(&w, "message", wgllm_json_is(msg, WGLLM_JSON_STRING) ? msg->str : "error");
        if (wgllm_json_is(param, WGLLM_JSON_STRING)) wgllm_json_w_value(&w, "param", param);
        else wgllm_json_w_null(&w, "param");
        ev_end(&out, &w);
        s->ended = true;
    } else {
        set_head(s, r);
        if (!s->started) {
            ev_begin(s, &out, &w, "response.created");
            write_response(&w, "response", s, false);
            ev_end(&out, &w);
            ev_begin(s, &out, &w, "response.in_progress");
            write_response(&w, "response", s, false);
            ev_end(&out, &w);
            s->started = true;
        }
        if (v.reasoning) delta(s, &out, OPEN_REASONING, v.reasoning);
        if (v.content) delta(s, &out, OPEN_MESSAGE, v.content);
        for (const J *t = wgllm_json_first(v.tool_calls); t; t = wgllm_json_next(v.tool_calls, t)) call_events(s, &out, t);
        if (v.finish) {
            close_item(s, &out);
            s->incomplete = !strcmp(v.finish->str, "length");
        }
        const J *u = v.usage;
        if (u) {
            close_item(s, &out);
            read_usage(s, u);
            ev_begin(s, &out, &w, s->incomplete ? "response.incomplete" : "response.completed");
            write_response(&w, "response", s, true);
            ev_end(&out, &w);
            s->ended = true;
        }
    }
    wgllm_json_doc_free(&d);
    if (out.oom || s->oom || s->text.oom || s->reasoning.oom) return wgllm_strbuf_free(&out), NULL;
    return out.data ? wgllm_strbuf_take(&out) : calloc(1, 1);
}
