/*
 * anthropic.c - Anthropic's Messages API (/v1/messages) on the OpenAI layer:
 * a Messages request becomes the chat request it means (so it is parsed,
 * validated, templated, constrained and served by the one chat path), and
 * the layer's answers and stream chunks become Messages answers and events.
 *
 * Request: system (a string or text blocks) becomes the first message; a
 * user turn's text blocks its content and its tool_result blocks `tool`
 * messages before it (they answer the calls of the turn before); an
 * assistant turn's text its content and its tool_use blocks its tool_calls
 * (input as the arguments' JSON text); thinking blocks of earlier turns are
 * dropped (a template shows none of them). tools (name, description,
 * input_schema), tool_choice (auto, any = required, tool = a named function,
 * none; disable_parallel_tool_use), stop_sequences, max_tokens (required),
 * temperature (default 1, as Anthropic's), top_p, top_k, stream, metadata
 * and thinking (disabled: enable_thinking false for the template) map to
 * their chat fields; anything else is refused by name.
 *
 * Answer: content blocks thinking (reasoning_content), text, tool_use;
 * stop_reason end_turn, max_tokens or tool_use; usage input_tokens,
 * output_tokens, cache_read_input_tokens. A stop sequence ends a turn as
 * end_turn: the engine does not say which stop matched.
 *
 * Stream: message_start, then per block content_block_start, its deltas
 * (text_delta, thinking_delta, input_json_delta with a call's whole
 * arguments) and content_block_stop, then message_delta (stop_reason,
 * usage) and message_stop; an error is an `error` event. The translation
 * reads each chat chunk the layer made, so the two dialects cannot drift.
 */
#include "api/api_internal.h"
#include "wgllm.h"

#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wgllm_json J;
typedef struct wgllm_json_writer W;

/* The text of a content that is a string or an array of text blocks (other
 * block types are the caller's); false when it is neither. */
static bool text_of(const J *c, struct wgllm_strbuf *out, bool *other) {
    if (wgllm_json_is(c, WGLLM_JSON_STRING)) return wgllm_strbuf_put(out, c->str, c->len), true;
    if (!wgllm_json_is(c, WGLLM_JSON_ARRAY)) return false;
    for (const J *b = wgllm_json_first(c); b; b = wgllm_json_next(c, b)) {
        const J *type = wgllm_json_get(b, "type"), *text = wgllm_json_get(b, "text");
        if (!wgllm_json_is(type, WGLLM_JSON_STRING)) return false;
        if (!strcmp(type->str, "text")) {
            if (!wgllm_json_is(text, WGLLM_JSON_STRING)) return false;
            wgllm_strbuf_put(out, text->str, text->len);
        } else if (other) {
            *other = true;
        } else {
            return false;
        }
    }
    return true;
}

/* One turn of `messages` as chat messages. */
static bool turn(W *w, const J *m, int i, struct wgllm_openai_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d]", i);
    const J *role = wgllm_json_get(m, "role"), *content = wgllm_json_get(m, "content");
    if (!wgllm_json_is(m, WGLLM_JSON_OBJECT) || !wgllm_json_is(role, WGLLM_JSON_STRING) ||
        (strcmp(role->str, "user") && strcmp(role->str, "assistant")))
        return wgllm_openai_bad(e, param, "'%s' must be {\"role\": \"user\" or \"assistant\", \"content\": ...}%s", "");
    const bool user = !strcmp(role->str, "user");
    struct wgllm_strbuf text = {0};
    bool blocks = false;
    if (!text_of(content, &text, &blocks)) {
        wgllm_strbuf_free(&text);
        return wgllm_openai_bad(e, param, "'%s'.content must be a string or an array of content blocks%s", "");
    }
    /* the blocks that are not text, checked and then written in chat's terms */
    int calls = 0, k = 0;
    for (const J *b = blocks ? wgllm_json_first(content) : NULL; b; b = wgllm_json_next(content, b), k++) {
        const char *type = wgllm_json_get(b, "type")->str;
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k);
        if (!strcmp(type, "text") || !strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) continue;
        if (user && !strcmp(type, "tool_result")) {
            const J *id = wgllm_json_get(b, "tool_use_id"), *c = wgllm_json_get(b, "content");
            struct wgllm_strbuf r = {0};
            if (!wgllm_json_is(id, WGLLM_JSON_STRING) || !(wgllm_json_is_null(c) || text_of(c, &r, NULL))) {
                wgllm_strbuf_free(&r), wgllm_strbuf_free(&text);
                return wgllm_openai_bad(e, param, "'%s' must be a tool_result with a tool_use_id and text content%s", "");
            }
            const J *is_error = wgllm_json_get(b, "is_error");
            wgllm_json_w_object(w, NULL);
            wgllm_json_w_str(w, "role", "tool");
            wgllm_json_w_string(w, "tool_call_id", id->str, id->len);
            if (wgllm_json_is(is_error, WGLLM_JSON_TRUE)) {
                struct wgllm_strbuf t = {0};
                wgllm_strbuf_puts(&t, "Error: ");
                wgllm_strbuf_put(&t, r.data ? r.data : "", r.len);
                wgllm_json_w_string(w, "content", t.data ? t.data : "", t.len);
                wgllm_strbuf_free(&t);
            } else {
                wgllm_json_w_string(w, "content", r.data ? r.data : "", r.len);
            }
            wgllm_json_w_end(w, '}');
            wgllm_strbuf_free(&r);
        } else if (!user && !strcmp(type, "tool_use")) {
            const J *id = wgllm_json_get(b, "id"), *name = wgllm_json_get(b, "name"), *input = wgllm_json_get(b, "input");
            if (!wgllm_json_is(id, WGLLM_JSON_STRING) || !wgllm_json_is(name, WGLLM_JSON_STRING) ||
                !wgllm_json_is(input, WGLLM_JSON_OBJECT)) {
                wgllm_strbuf_free(&text);
                return wgllm_openai_bad(e, param, "'%s' must be a tool_use with an id, a name and an input object%s", "");
            }
            calls++;
        } else {
            wgllm_strbuf_free(&text);
            wgllm_openai_error_set(e, 400, "invalid_request_error", param, NULL,
                                   "'%s' is a %.40s block, which a %s turn of this server cannot take "
                                   "(text%s)", param, type, role->str, user ? ", tool_result" : ", tool_use, thinking");
            return false;
        }
    }
    if (user && !text.len && blocks) { /* only tool results: no empty user turn after them */
        wgllm_strbuf_free(&text);
        return true;
    }
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_str(w, "role", role->str);
    if (!user && calls && !text.len) wgllm_json_w_null(w, "content");
    else wgllm_json_w_string(w, "content", text.data ? text.data : "", text.len);
    if (calls) {
        wgllm_json_w_array(w, "tool_calls");
        for (const J *b = wgllm_json_first(content); b; b = wgllm_json_next(content, b)) {
            if (strcmp(wgllm_json_get(b, "type")->str, "tool_use")) continue;
            struct wgllm_strbuf args = {0};
            W aw;
            wgllm_json_w_init(&aw, &args);
            wgllm_json_w_value(&aw, NULL, wgllm_json_get(b, "input"));
            wgllm_json_w_object(w, NULL);
            wgllm_json_w_value(w, "id", wgllm_json_get(b, "id"));
            wgllm_json_w_str(w, "type", "function");
            wgllm_json_w_object(w, "function");
            wgllm_json_w_value(w, "name", wgllm_json_get(b, "name"));
            wgllm_json_w_string(w, "arguments", args.data ? args.data : "{}", args.data ? args.len : 2);
            wgllm_json_w_end(w, '}');
            wgllm_json_w_end(w, '}');
            if (args.oom) w->out->oom = true;
            wgllm_strbuf_free(&args);
        }
        wgllm_json_w_end(w, ']');
    }
    wgllm_json_w_end(w, '}');
    if (text.oom) w->out->oom = true;
    wgllm_strbuf_free(&text);
    return true;
}

static bool tools_of(W *w, const J *tools, const J *choice, struct wgllm_openai_error *e) {
    if (!wgllm_json_is_null(tools)) {
        if (!wgllm_json_is(tools, WGLLM_JSON_ARRAY)) return wgllm_openai_bad(e, "tools", "'%s' must be an array%s", "");
        wgllm_json_w_array(w, "tools");
        int i = 0;
        for (const J *t = wgllm_json_first(tools); t; t = wgllm_json_next(tools, t), i++) {
            char param[32];
            snprintf(param, sizeof param, "tools[%d]", i);
            const J *name = wgllm_json_get(t, "name"), *schema = wgllm_json_get(t, "input_schema");
            const J *type = wgllm_json_get(t, "type");
            if (!wgllm_json_is_null(type) && !(wgllm_json_is(type, WGLLM_JSON_STRING) && !strcmp(type->str, "custom")))
                return wgllm_openai_bad(e, param, "'%s' is a server tool (type '%s'); only client tools (name, input_schema) run here",
                              wgllm_json_is(type, WGLLM_JSON_STRING) ? type->str : "?");
            if (!wgllm_json_is(name, WGLLM_JSON_STRING) || !wgllm_json_is(schema, WGLLM_JSON_OBJECT))
                return wgllm_openai_bad(e, param, "'%s' must have a name and an input_schema object%s", "");
            wgllm_json_w_object(w, NULL);
            wgllm_json_w_str(w, "type", "function");
            wgllm_json_w_object(w, "function");
            wgllm_json_w_value(w, "name", name);
            const J *d = wgllm_json_get(t, "description");
            if (wgllm_json_is(d, WGLLM_JSON_STRING)) wgllm_json_w_value(w, "description", d);
            wgllm_json_w_value(w, "parameters", schema);
            wgllm_json_w_end(w, '}');
            wgllm_json_w_end(w, '}');
        }
        wgllm_json_w_end(w, ']');
    }
    if (wgllm_json_is_null(choice)) return true;
    const J *type = wgllm_json_get(choice, "type"), *name = wgllm_json_get(choice, "name");
    if (!wgllm_json_is(type, WGLLM_JSON_STRING))
        return wgllm_openai_bad(e, "tool_choice", "'%s' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}%s", "");
    if (!strcmp(type->str, "auto") || !strcmp(type->str, "none")) {
        wgllm_json_w_value(w, "tool_choice", type);
    } else if (!strcmp(type->str, "any")) {
        wgllm_json_w_str(w, "tool_choice", "required");
    } else if (!strcmp(type->str, "tool") && wgllm_json_is(name, WGLLM_JSON_STRING)) {
        wgllm_json_w_object(w, "tool_choice");
        wgllm_json_w_str(w, "type", "function");
        wgllm_json_w_object(w, "function");
        wgllm_json_w_value(w, "name", name);
        wgllm_json_w_end(w, '}');
        wgllm_json_w_end(w, '}');
    } else {
        return wgllm_openai_bad(e, "tool_choice", "'%s': type must be auto, any, none or tool (with a name), not '%s'", type->str);
    }
    const J *dp = wgllm_json_get(choice, "disable_parallel_tool_use");
    if (wgllm_json_is_bool(dp)) wgllm_json_w_bool(w, "parallel_tool_calls", dp->type == WGLLM_JSON_FALSE);
    return true;
}

char *wgllm_anthropic_to_chat(const char *body, size_t len, struct wgllm_openai_error *e) {
    static const char *const FIELDS[] = {"model", "messages", "system", "max_tokens", "stop_sequences", "temperature",
                                         "top_p", "top_k", "stream", "tools", "tool_choice", "metadata", "thinking",
                                         NULL};
    struct wgllm_json_doc doc;
    if (!wgllm_openai_parse_body(body, len, &doc, e)) return NULL;
    const J *root = wgllm_json_root(&doc);
    struct wgllm_strbuf out = {0};
    W w;
    wgllm_json_w_init(&w, &out);
    bool ok = true;
    if (root->type != WGLLM_JSON_OBJECT) {
        ok = wgllm_openai_bad(e, "body", "the request %s must be a JSON object%s", "");
        goto done;
    }
    if (!(ok = wgllm_openai_known_fields(root, FIELDS, NULL, e))) goto done;
    const J *msgs = wgllm_json_get(root, "messages"), *mt = wgllm_json_get(root, "max_tokens");
    if (!wgllm_json_is(msgs, WGLLM_JSON_ARRAY) || !msgs->count) {
        ok = wgllm_openai_bad(e, "messages", "'%s' is required: a non-empty array of turns%s", "");
        goto done;
    }
    if (!wgllm_json_is(mt, WGLLM_JSON_NUMBER)) {
        ok = wgllm_openai_bad(e, "max_tokens", "'%s' is required (a number of tokens)%s", "");
        goto done;
    }
    wgllm_json_w_object(&w, NULL);
    static const char *const SAME[] = {"model", "max_tokens", "top_p", "top_k", "stream", NULL};
    for (int i = 0; SAME[i]; i++) {
        const J *v = wgllm_json_get(root, SAME[i]);
        if (v) wgllm_json_w_value(&w, SAME[i], v);
    }
    const J *temp = wgllm_json_get(root, "temperature");
    if (temp && !(wgllm_json_is(temp, WGLLM_JSON_NUMBER) && temp->num >= 0 && temp->num <= 1)) {
        ok = wgllm_openai_bad(e, "temperature", "'%s' must be a number from 0 to 1 (Anthropic's range)%s", "");
        goto done;
    }
    if (temp) wgllm_json_w_value(&w, "temperature", temp);
    else wgllm_json_w_number(&w, "temperature", 1.0); /* Anthropic's default, not llama.cpp's 0.8 */
    const J *stops = wgllm_json_get(root, "stop_sequences");
    if (stops) wgllm_json_w_value(&w, "stop", stops);
    if (wgllm_json_is(wgllm_json_get(root, "stream"), WGLLM_JSON_TRUE)) {
        /* the usage chunk ends the stream: message_delta carries it */
        wgllm_json_w_object(&w, "stream_options");
        wgllm_json_w_bool(&w, "include_usage", true);
        wgllm_json_w_end(&w, '}');
    }
    const J *md = wgllm_json_get(root, "metadata"), *uid = wgllm_json_get(md, "user_id");
    if (!wgllm_json_is_null(md) && !wgllm_json_is(md, WGLLM_JSON_OBJECT)) {
        ok = wgllm_openai_bad(e, "metadata", "'%s' must be an object%s", "");
        goto done;
    }
    if (wgllm_json_is(uid, WGLLM_JSON_STRING)) wgllm_json_w_value(&w, "user", uid);
    const J *th = wgllm_json_get(root, "thinking"), *tht = wgllm_json_get(th, "type");
    if (!wgllm_json_is_null(th)) {
        if (!wgllm_json_is(tht, WGLLM_JSON_STRING) || (strcmp(tht->str, "enabled") && strcmp(tht->str, "disabled"))) {
            ok = wgllm_openai_bad(e, "thinking", "'%s' must be {\"type\": \"enabled\" | \"disabled\"}%s", "");
            goto done;
        }
        if (!strcmp(tht->str, "disabled")) {
            wgllm_json_w_object(&w, "chat_template_kwargs");
            wgllm_json_w_bool(&w, "enable_thinking", false);
            wgllm_json_w_end(&w, '}');
        }
    }
    if (!(ok = tools_of(&w, wgllm_json_get(root, "tools"), wgllm_json_get(root, "tool_choice"), e))) goto done;
    wgllm_json_w_array(&w, "messages");
    const J *sys = wgllm_json_get(root, "system");
    if (!wgllm_json_is_null(sys)) {
        struct wgllm_strbuf t = {0};
        if (!text_of(sys, &t, NULL)) {
            wgllm_strbuf_free(&t);
            ok = wgllm_openai_bad(e, "system", "'%s' must be a string or an array of text blocks%s", "");
            goto done;
        }
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "role", "system");
        wgllm_json_w_string(&w, "content", t.data ? t.data : "", t.len);
        wgllm_json_w_end(&w, '}');
        wgllm_strbuf_free(&t);
    }
    int i = 0;
    for (const J *m = wgllm_json_first(msgs); m && ok; m = wgllm_json_next(msgs, m), i++) ok = turn(&w, m, i, e);
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_end(&w, '}');
done:
    wgllm_json_doc_free(&doc);
    if (ok && out.oom) {
        wgllm_openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory for the request");
        ok = false;
    }
    if (!ok) return wgllm_strbuf_free(&out), NULL;
    return wgllm_strbuf_take(&out);
}

/* ---- answers ----------------------------------------------------------------- */

static const char *stop_reason(const char *finish) {
    return !strcmp(finish, "length") ? "max_tokens" : !strcmp(finish, "tool_calls") ? "tool_use" : "end_turn";
}

/* msg_ + what follows the chat id's first '-' */
static void message_id(W *w, const J *id) {
    char buf[96];
    const char *s = wgllm_json_is(id, WGLLM_JSON_STRING) ? id->str : "x";
    const char *tail = strchr(s, '-');
    snprintf(buf, sizeof buf, "msg_%.80s", tail ? tail + 1 : s);
    wgllm_json_w_str(w, "id", buf);
}

/* A tool call's arguments (JSON text) as the tool_use input object. */
static void input_of(W *w, const J *args) {
    struct wgllm_json_doc d = {0};
    struct wgllm_json_error je;
    const struct wgllm_json_limits lim = {.max_depth = 60, .max_nodes = 1 << 20};
    if (wgllm_json_is(args, WGLLM_JSON_STRING) && wgllm_json_parse(args->str, args->len, &lim, &d, &je) &&
        wgllm_json_root(&d)->type == WGLLM_JSON_OBJECT) {
        wgllm_json_w_value(w, "input", wgllm_json_root(&d));
    } else {
        wgllm_json_w_object(w, "input");
        wgllm_json_w_end(w, '}');
    }
    wgllm_json_doc_free(&d);
}

static void usage_of(W *w, const J *u) {
    wgllm_json_w_object(w, "usage");
    const J *p = wgllm_json_get(u, "prompt_tokens"), *c = wgllm_json_get(u, "completion_tokens");
    const J *cached = wgllm_json_get(wgllm_json_get(u, "prompt_tokens_details"), "cached_tokens");
    const double np = wgllm_json_is(p, WGLLM_JSON_NUMBER) ? p->num : 0;
    const double nc = wgllm_json_is(cached, WGLLM_JSON_NUMBER) ? cached->num : 0;
    /* Anthropic counts the cached part apart from input_tokens */
    wgllm_json_w_number(w, "input_tokens", np - nc);
    wgllm_json_w_number(w, "cache_read_input_tokens", nc);
    wgllm_json_w_number(w, "output_tokens", wgllm_json_is(c, WGLLM_JSON_NUMBER) ? c->num : 0);
    wgllm_json_w_end(w, '}');
}

char *wgllm_anthropic_response(const char *chat_json) {
    struct wgllm_json_doc d;
    if (!wgllm_openai_parse_own(chat_json, &d)) return NULL;
    const J *r = wgllm_json_root(&d);
    const J *ch = wgllm_json_at(wgllm_json_get(r, "choices"), 0), *m = wgllm_json_get(ch, "message");
    const J *fin = wgllm_json_get(ch, "finish_reason");
    struct wgllm_strbuf b = {0};
    W w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    message_id(&w, wgllm_json_get(r, "id"));
    wgllm_json_w_str(&w, "type", "message");
    wgllm_json_w_str(&w, "role", "assistant");
    wgllm_json_w_value(&w, "model", wgllm_json_get(r, "model"));
    wgllm_json_w_array(&w, "content");
    const J *rc = wgllm_json_get(m, "reasoning_content"), *c = wgllm_json_get(m, "content");
    if (wgllm_json_is(rc, WGLLM_JSON_STRING) && rc->len) {
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "type", "thinking");
        wgllm_json_w_value(&w, "thinking", rc);
        wgllm_json_w_str(&w, "signature", "");
        wgllm_json_w_end(&w, '}');
    }
    if (wgllm_json_is(c, WGLLM_JSON_STRING) && c->len) {
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "type", "text");
        wgllm_json_w_value(&w, "text", c);
        wgllm_json_w_end(&w, '}');
    }
    const J *calls = wgllm_json_get(m, "tool_calls");
    for (const J *t = wgllm_json_first(calls); t; t = wgllm_json_next(calls, t)) {
        const J *fn = wgllm_json_get(t, "function");
        wgllm_json_w_object(&w, NULL);
        wgllm_json_w_str(&w, "type", "tool_use");
        wgllm_json_w_value(&w, "id", wgllm_json_get(t, "id"));
        wgllm_json_w_value(&w, "name", wgllm_json_get(fn, "name"));
        input_of(&w, wgllm_json_get(fn, "arguments"));
        wgllm_json_w_end(&w, '}');
    }
    wgllm_json_w_end(&w, ']');
    wgllm_json_w_str(&w, "stop_reason", stop_reason(wgllm_json_is(fin, WGLLM_JSON_STRING) ? fin->str : "stop"));
    wgllm_json_w_null(&w, "stop_sequence");
    usage_of(&w, wgllm_json_get(r, "usage"));
    wgllm_json_w_end(&w, '}');
    wgllm_json_doc_free(&d);
    if (b.oom) return wgllm_strbuf_free(&b), NULL;
    return wgllm_strbuf_take(&b);
}

char *wgllm_anthropic_error_json(const struct wgllm_openai_error *e) {
    struct wgllm_strbuf b = {0};
    W w;
    wgllm_json_w_init(&w, &b);
    wgllm_json_w_object(&w, NULL);
    wgllm_json_w_str(&w, "type", "error");
    wgllm_json_w_object(&w, "error");
    /* Anthropic's names for the statuses its SDKs map to exception classes */
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    wgllm_json_w_str(&w, "type", type);
    wgllm_json_w_str(&w, "message", e->message);
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, '}');
    if (b.oom) return wgllm_strbuf_free(&b), NULL;
    return wgllm_strbuf_take(&b);
}

/* ---- the stream -------------------------------------------------------------- */

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING, BLOCK_TOOL };

static void event_begin(struct wgllm_strbuf *out, W *w, const char *name) {
    wgllm_strbuf_printf(out, "event: %s\ndata: ", name);
    wgllm_json_w_init(w, out);
    wgllm_json_w_object(w, NULL);
    wgllm_json_w_str(w, "type", name);
}

static void event_end(struct wgllm_strbuf *out, W *w) {
    wgllm_json_w_end(w, '}');
    wgllm_strbuf_puts(out, "\n\n");
}

static void block_stop(struct wgllm_anthropic_stream *s, struct wgllm_strbuf *out) {
    if (s->block == BLOCK_NONE) return;
    W w;
    event_begin(out, &w, "content_block_stop");
    wgllm_json_w_number(&w, "index", s->index++);
    event_end(out, &w);
    s->block = BLOCK_NONE;
}

/* Text or thinking: into the open block of that kind, or a new one. */
static void block_delta(struct wgllm_anthropic_stream *s, struct wgllm_strbuf *out, int kind, const J *text) {
    W w;
    if (s->block != kind) {
        block_stop(s, out);
        event_begin(out, &w, "content_block_start");
        wgllm_json_w_number(&w, "index", s->index);
        wgllm_json_w_object(&w, "content_block");
        wgllm_json_w_str(&w, "type", kind == BLOCK_TEXT ? "text" : "thinking");
        wgllm_json_w_str(&w, kind == BLOCK_TEXT ? "text" : "thinking", "");
        if (kind == BLOCK_THINKING) wgllm_json_w_str(&w, "signature", "");
        wgllm_json_w_end(&w, '}');
        event_end(out, &w);
        s->block = kind;
    }
    event_begin(out, &w, "content_block_delta");
    wgllm_json_w_number(&w, "index", s->index);
    wgllm_json_w_object(&w, "delta");
    wgllm_json_w_str(&w, "type", kind == BLOCK_TEXT ? "text_delta" : "thinking_delta");
    wgllm_json_w_value(&w, kind == BLOCK_TEXT ? "text" : "thinking", text);
    wgllm_json_w_end(&w, '}');
    event_end(out, &w);
}

static void tool_block(struct wgllm_anthropic_stream *s, struct wgllm_strbuf *out, const J *call) {
    block_stop(s, out);
    const J *fn = wgllm_json_get(call, "function"), *args = wgllm_json_get(fn, "arguments");
    W w;
    event_begin(out, &w, "content_block_start");
    wgllm_json_w_number(&w, "index", s->index);
    wgllm_json_w_object(&w, "content_block");
    wgllm_json_w_str(&w, "type", "tool_use");
    wgllm_json_w_value(&w, "id", wgllm_json_get(call, "id"));
    wgllm_json_w_value(&w, "name", wgllm_json_get(fn, "name"));
    wgllm_json_w_object(&w, "input");
    wgllm_json_w_end(&w, '}');
    wgllm_json_w_end(&w, '}');
    event_end(out, &w);
    event_begin(out, &w, "content_block_delta");
    wgllm_json_w_number(&w, "index", s->index);
    wgllm_json_w_object(&w, "delta");
    wgllm_json_w_str(&w, "type", "input_json_delta");
    if (wgllm_json_is(args, WGLLM_JSON_STRING)) wgllm_json_w_value(&w, "partial_json", args);
    else wgllm_json_w_str(&w, "partial_json", "{}");
    wgllm_json_w_end(&w, '}');
    event_end(out, &w);
    s->block = BLOCK_TOOL; /* whole at once: closed right away */
    block_stop(s, out);
}

void wgllm_anthropic_stream_init(struct wgllm_anthropic_stream *s) { memset(s, 0, sizeof *s); }

char *wgllm_anthropic_stream_chunk(struct wgllm_anthropic_stream *s, const char *chunk_json) {
    struct wgllm_json_doc d;
    if (!wgllm_openai_parse_own(chunk_json, &d)) return NULL;
    struct wgllm_openai_chunk_view v;
    wgllm_openai_chunk_view(&d, &v);
    const J *r = v.root, *err = v.error;
    struct wgllm_strbuf out = {0};
    W w;
    if (err) {
        /* the chat error object, in Anthropic's shape */
        struct wgllm_openai_error e = {.status = 500};
        const J *msg = wgllm_json_get(err, "message"), *type = wgllm_json_get(err, "type");
        snprintf(e.message, sizeof e.message, "%s", wgllm_json_is(msg, WGLLM_JSON_STRING) ? msg->str : "error");
        if (wgllm_json_is(type, WGLLM_JSON_STRING) && !strcmp(type->str, "invalid_request_error")) e.status = 400;
        char *j = wgllm_anthropic_error_json(&e);
        if (j) wgllm_strbuf_printf(&out, "event: error\ndata: %s\n\n", j);
        else out.oom = true;
        free(j);
        s->ended = true;
    } else {
        if (!s->started) {
            event_begin(&out, &w, "message_start");
            wgllm_json_w_object(&w, "message");
            message_id(&w, wgllm_json_get(r, "id"));
            wgllm_json_w_str(&w, "type", "message");
            wgllm_json_w_str(&w, "role", "assistant");
            wgllm_json_w_value(&w, "model", wgllm_json_get(r, "model"));
            wgllm_json_w_array(&w, "content");
            wgllm_json_w_end(&w, ']');
            wgllm_json_w_null(&w, "stop_reason");
            wgllm_json_w_null(&w, "stop_sequence");
            wgllm_json_w_object(&w, "usage");
            wgllm_json_w_number(&w, "input_tokens", 0); /* known at the end: message_delta has it */
            wgllm_json_w_number(&w, "output_tokens", 0);
            wgllm_json_w_end(&w, '}');
            wgllm_json_w_end(&w, '}');
            event_end(&out, &w);
            s->started = true;
        }
        if (v.reasoning) block_delta(s, &out, BLOCK_THINKING, v.reasoning);
        if (v.content) block_delta(s, &out, BLOCK_TEXT, v.content);
        for (const J *t = wgllm_json_first(v.tool_calls); t; t = wgllm_json_next(v.tool_calls, t)) tool_block(s, &out, t);
        if (v.finish) {
            block_stop(s, &out);
            snprintf(s->stop_reason, sizeof s->stop_reason, "%s", stop_reason(v.finish->str));
        }
        const J *u = v.usage;
        if (u && s->stop_reason[0]) {
            event_begin(&out, &w, "message_delta");
            wgllm_json_w_object(&w, "delta");
            wgllm_json_w_str(&w, "stop_reason", s->stop_reason);
            wgllm_json_w_null(&w, "stop_sequence");
            wgllm_json_w_end(&w, '}');
            usage_of(&w, u);
            event_end(&out, &w);
            event_begin(&out, &w, "message_stop");
            event_end(&out, &w);
            s->ended = true;
        }
    }
    wgllm_json_doc_free(&d);
    if (out.oom) return wgllm_strbuf_free(&out), NULL;
    return out.data ? wgllm_strbuf_take(&out) : calloc(1, 1);
}
