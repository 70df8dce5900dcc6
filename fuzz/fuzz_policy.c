/*
 * fuzz_policy.c - a hostile `--api-key-file`: bytes through the key file's
 * parser (policy.c's srv_policy_parse). A file that is refused must say why;
 * one that loads must then answer what the server asks of it on every
 * request -- the tenant of a key, the models it may use, admissions and
 * charges (Retry-After within a day), the /metrics text -- with no crash,
 * leak or unbounded output.
 */
#include "server/server.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > SRV_POLICY_MAX_BYTES) return 0; /* srv_policy_load refuses such a file before parsing */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char msg[256] = "";
    struct srv_policy *p = srv_policy_parse(text, msg, sizeof msg);
    if (!p) {
        if (!msg[0]) abort(); /* a refusal names the problem */
        free(text);
        return 0;
    }
    /* keys to look up: the whole input, and each quoted string in it (the
     * file's own keys among them) */
    int found = srv_policy_tenant(p, text);
    for (char *q = strchr(text, '"'); q; q = strchr(q + 1, '"')) {
        char *end = strchr(q + 1, '"');
        if (!end) break;
        *end = 0;
        const int t = srv_policy_tenant(p, q + 1);
        *end = '"';
        if (t < -1) abort();
        if (t >= 0) found = t;
        q = end;
    }
    if (found < -1 || (found >= 0) != (srv_policy_name(p, found) != NULL)) abort();
    const int t = found >= 0 ? found : 0; /* a loaded file has at least one tenant */
    (void)srv_policy_allows(p, t, "model");
    (void)srv_policy_allows(p, t, NULL);
    for (int i = 0; i < 4; i++) {
        const int retry = srv_policy_admit(p, t);
        if (retry < 0 || retry > 86400) abort();
        srv_policy_charge(p, t, size > 0 ? data[size - 1] * 1000 : 1);
    }
    struct wgllm_strbuf b = {.limit = 1 << 22};
    srv_policy_metrics(p, &b);
    if (b.len && strncmp(b.data, "# HELP", 6) != 0) abort();
    wgllm_strbuf_free(&b);
    srv_policy_free(p);
    free(text);
    return 0;
}
