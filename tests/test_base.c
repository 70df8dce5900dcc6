/*
 * test_base.c - the string builder, read-file helper and array grower of
 * src/base/strbuf.c: appends of every kind, the byte limit (exact: a piece
 * that would pass it is refused whole), out-of-memory as a flag (forced by
 * lowering wgllm_size_limit), take/free, and reading files: empty, with
 * NULs, exactly at and one byte over max_bytes, a pipe, a missing path.
 */
#include "test.h"

#include "base/strbuf.h"

#include <stdint.h>

TEST(strbuf_appends) {
    struct wgllm_strbuf sb = {0};
    CHECK(wgllm_strbuf_puts(&sb, "ab"));
    CHECK(wgllm_strbuf_putc(&sb, 'c'));
    CHECK(wgllm_strbuf_put(&sb, "d\0e", 3));
    CHECK(wgllm_strbuf_printf(&sb, "[%d:%s]", 42, "x"));
    CHECK_EQ_INT(sb.len, 12);
    CHECK(memcmp(sb.data, "abcd\0e[42:x]", 13) == 0);
    CHECK(!sb.oom && !sb.over);
    /* a long printf that cannot fit the room already there */
    char big[5000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(wgllm_strbuf_printf(&sb, "%s|%s", big, big));
    CHECK_EQ_INT(sb.len, 12 + 2 * 4999 + 1);
    CHECK_EQ_INT(sb.data[sb.len], 0);
    CHECK_EQ_INT(sb.data[12 + 4999], '|');
    char *s = wgllm_strbuf_take(&sb);
    CHECK(sb.data == NULL && sb.len == 0 && sb.cap == 0);
    CHECK_EQ_INT(strlen(s + 7), 5 + 2 * 4999 + 1); /* from "42:x]" on */
    free(s);
    /* an empty builder still hands out a string */
    s = wgllm_strbuf_take(&sb);
    CHECK(s && s[0] == 0);
    free(s);
    CHECK(wgllm_strbuf_puts(&sb, "abc"));
    size_t cap = sb.cap;
    wgllm_strbuf_clear(&sb);
    CHECK(sb.len == 0 && sb.cap == cap && sb.data[0] == 0);
    CHECK(wgllm_strbuf_reserve(&sb, 1000));
    CHECK(sb.cap >= 1001 && sb.len == 0 && sb.data[0] == 0);
    wgllm_strbuf_free(&sb);
    CHECK(sb.data == NULL);
}

TEST(strbuf_limit) {
    struct wgllm_strbuf sb = {.limit = 10};
    CHECK(wgllm_strbuf_puts(&sb, "0123456"));
    CHECK(!wgllm_strbuf_puts(&sb, "7890")); /* 11 bytes: refused whole */
    CHECK(sb.over && !sb.oom);
    CHECK_STR(sb.data, "0123456");
    CHECK(!wgllm_strbuf_printf(&sb, "%d", 7890));
    CHECK_STR(sb.data, "0123456");
    CHECK(wgllm_strbuf_printf(&sb, "%d", 789)); /* exactly 10 */
    CHECK_STR(sb.data, "0123456789");
    CHECK(sb.cap <= 11);
    CHECK(!wgllm_strbuf_putc(&sb, 'x'));
    CHECK(wgllm_strbuf_put(&sb, "", 0));
    char *s = wgllm_strbuf_take(&sb);
    CHECK_STR(s, "0123456789");
    free(s);
    CHECK(sb.limit == 10 && !sb.over);
    wgllm_strbuf_free(&sb);
}

TEST(strbuf_oom) {
    struct wgllm_strbuf sb = {0};
    CHECK(wgllm_strbuf_puts(&sb, "keep"));
    wgllm_set_size_limit(4096);
    char big[8192];
    memset(big, 'a', sizeof big);
    CHECK(!wgllm_strbuf_put(&sb, big, sizeof big));
    CHECK(sb.oom && !sb.over);
    CHECK_STR(sb.data, "keep");
    CHECK(!wgllm_strbuf_printf(&sb, "%.*s", 8000, big));
    CHECK_STR(sb.data, "keep");
    CHECK(wgllm_strbuf_puts(&sb, "!")); /* later appends are still tried */
    CHECK_STR(sb.data, "keep!");
    CHECK(!wgllm_strbuf_reserve(&sb, SIZE_MAX)); /* overflowing sizes too */
    wgllm_set_size_limit(0);
    wgllm_strbuf_free(&sb);
    CHECK(!sb.oom);
}

TEST(grow) {
    int *v = NULL;
    size_t cap = 0;
    CHECK(wgllm_grow((void **)&v, &cap, 1, sizeof *v));
    CHECK_EQ_INT(cap, 16);
    for (int i = 0; i < 1000; i++) {
        CHECK(wgllm_grow((void **)&v, &cap, (size_t)i + 1, sizeof *v));
        v[i] = i;
    }
    CHECK(cap >= 1000 && v[999] == 999);
    size_t old = cap;
    CHECK(!wgllm_grow((void **)&v, &cap, SIZE_MAX / 2, sizeof *v));
    CHECK(cap == old && v[999] == 999);
    free(v);
}

static void write_bytes(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ_INT(fwrite(s, 1, n, f), n);
    fclose(f);
}

TEST(read_file) {
    struct wgllm_error err;
    char *d;
    size_t n;
    const char *p = test_tmp_path(".bin");
    write_bytes(p, "", 0);
    CHECK_EQ_INT(wgllm_read_file(p, 0, &d, &n, &err), WGLLM_STATUS_OK);
    CHECK(d && n == 0 && d[0] == 0);
    free(d);
    write_bytes(p, "a\0b", 3);
    CHECK_EQ_INT(wgllm_read_file(p, 3, &d, &n, &err), WGLLM_STATUS_OK);
    CHECK(n == 3 && memcmp(d, "a\0b", 4) == 0);
    free(d);
    CHECK_EQ_INT(wgllm_read_file(p, 2, &d, &n, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(d == NULL && n == 0 && strstr(err.message, p) && strstr(err.message, "2 bytes"));
    /* bigger than one read, across the chunk boundary */
    size_t big = 3 * 4096 + 17;
    char *buf = malloc(big);
    for (size_t i = 0; i < big; i++) buf[i] = (char)('a' + i % 26);
    write_bytes(p, buf, big);
    CHECK_EQ_INT(wgllm_read_file(p, big, &d, &n, &err), WGLLM_STATUS_OK);
    CHECK(n == big && memcmp(d, buf, big) == 0 && d[big] == 0);
    free(d);
    CHECK_EQ_INT(wgllm_read_file(p, big - 1, &d, NULL, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK_EQ_INT(wgllm_read_file(p, 4096, &d, NULL, &err), WGLLM_STATUS_BAD_FORMAT);
    /* out of memory is a status, not a crash */
    wgllm_set_size_limit(8192);
    CHECK_EQ_INT(wgllm_read_file(p, 0, &d, &n, &err), WGLLM_STATUS_OUT_OF_MEMORY);
    CHECK(d == NULL && strstr(err.message, p));
    wgllm_set_size_limit(0);
    free(buf);
    remove(p);
    CHECK_EQ_INT(wgllm_read_file(p, 0, &d, &n, &err), WGLLM_STATUS_IO);
    CHECK(d == NULL && strstr(err.message, p) && err.status == WGLLM_STATUS_IO);
    /* a directory opens on Linux but cannot be read */
    CHECK_EQ_INT(wgllm_read_file("/", 0, &d, &n, &err), WGLLM_STATUS_IO);
    CHECK(d == NULL);
}

TEST(read_pipe) {
    /* /proc files report size 0: nothing to ask for in advance */
    struct wgllm_error err;
    char *d;
    size_t n;
    CHECK_EQ_INT(wgllm_read_file("/proc/self/status", 1 << 20, &d, &n, &err), WGLLM_STATUS_OK);
    CHECK(d && n > 10 && strncmp(d, "Name:", 5) == 0 && strlen(d) == n);
    free(d);
}

int main(void) {
    RUN(strbuf_appends);
    RUN(strbuf_limit);
    RUN(strbuf_oom);
    RUN(grow);
    RUN(read_file);
    RUN(read_pipe);
    return test_summary("test_base");
}
