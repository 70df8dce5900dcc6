/*
 * gguf_file.c - getting a GGUF model's bytes to the parser in gguf.c: a
 * buffer in memory, a mapped file, every shard of a split model found by
 * its name (PREFIX-NNNNN-of-MMMMM.gguf) and checked against its split.* keys,
 * and reading through a source (header only, by growing prefixes; tensor
 * data on demand) for bytes that cannot be mapped, such as a browser's OPFS
 * file or wgllm_gguf_open_unmapped's pread. Also the context's lifetime.
 */
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_SPLITS 65535 /* split.count is a u16 */

/* ---------------------------------------------------------------------------
 * opening
 * ------------------------------------------------------------------------- */

static void gguf_file_release(struct gguf_file *f) {
    free(f->kv);
    free(f->tensors);
    free(f->buf);
    if (f->map) munmap(f->map, (size_t)f->size);
    memset(f, 0, sizeof(*f));
}

void wgllm_gguf_free(struct wgllm_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_files; i++) gguf_file_release(&g->files[i]);
    free(g->files);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    wgllm_gguf_arena_free(g->arena);
    if (g->src_release) g->src_release(g->src.user);
    if (g->src_names)
        for (int i = 0; i < g->src.n_files; i++) free(g->src_names[i]);
    free(g->src_names);
    free(g->src_sizes);
    free(g);
}

/* Opens `path` read-only: a non-empty regular file; *fd stays open. */
static enum wgllm_status gguf_open_fd(const char *path, int *fd_out, uint64_t *size,
                                      struct wgllm_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot open '%s': %s", path,
                               strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: '%s' is not a regular file", path);
    }
    if (stt.st_size == 0) {
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: '%s' is empty (magic at offset 0 missing)", path);
    }
    *fd_out = fd;
    *size = (uint64_t)stt.st_size;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status gguf_map(const char *path, struct gguf_file *f, struct wgllm_error *err) {
    int fd;
    uint64_t size;
    GGUF_TRY(gguf_open_fd(path, &fd, &size, err));
    size_t map_size;
    if (!wgllm_size_from_u64(size, &map_size)) { /* wasm32: a file past 4 GiB */
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "gguf: '%s' has %llu bytes, more than this process can map", path,
                               (unsigned long long)size);
    }
    void *m = mmap(NULL, map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot map '%s' (%llu bytes): %s", path,
                               (unsigned long long)size, strerror(e));
    f->map = m;
    f->data = m;
    f->size = size;
    return WGLLM_STATUS_OK;
}

static struct wgllm_gguf *gguf_new(int n_files) {
    struct wgllm_gguf *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->files = calloc((size_t)n_files, sizeof(*g->files));
    if (!g->files) {
        free(g);
        return NULL;
    }
    return g;
}

enum wgllm_status wgllm_gguf_open_memory(const void *data, size_t size, struct wgllm_gguf **out,
                                         struct wgllm_error *err) {
    *out = NULL;
    if (!data && size)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "gguf: NULL buffer");
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    g->n_files = 1;
    g->files[0].data = data;
    g->files[0].size = size;
    uint64_t more;
    enum wgllm_status st = wgllm_gguf_parse_file(&g->files[0], &g->arena, size, &more, err);
    if (st == WGLLM_STATUS_OK) st = wgllm_gguf_finish(g, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_gguf_free(g);
        return st;
    }
    *out = g;
    return WGLLM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * split checks and the shared open sequence
 * ------------------------------------------------------------------------- */

/* How the number of files was decided, which the split.count message names. */
enum gguf_count_rule {
    GGUF_COUNT_PLAIN_NAME, /* one file, its name not a shard name */
    GGUF_COUNT_SPLIT_NAME, /* the MMMMM of PREFIX-NNNNN-of-MMMMM.gguf */
    GGUF_COUNT_SOURCE,     /* the caller's wgllm_model_source.n_files */
};

/* split.count of the first file against the number of files there are. */
static enum wgllm_status gguf_check_split_count(const struct gguf_file *f0, int n_files,
                                                enum gguf_count_rule rule,
                                                struct wgllm_error *err) {
    int64_t count = wgllm_gguf_split_key(f0, "split.count");
    if (count == -2 || count > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.count' must be an integer in 0..%d", GGUF_MAX_SPLITS);
    if (count <= 0) count = 1;
    if (count == n_files) return WGLLM_STATUS_OK;
    switch (rule) {
    case GGUF_COUNT_PLAIN_NAME:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the file name does not follow "
                               "PREFIX-NNNNN-of-MMMMM.gguf, so the other shards cannot be found",
                               (long long)count);
    case GGUF_COUNT_SPLIT_NAME:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the file name says %d shards",
                               (long long)count, n_files);
    default:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the source gives %d file%s",
                               (long long)count, n_files, n_files == 1 ? "" : "s");
    }
}

/* Shard i (0-based) of a split into `count` files. */
static enum wgllm_status gguf_check_split_file(const struct gguf_file *f, int i, int64_t count,
                                               struct wgllm_error *err) {
    int64_t no = wgllm_gguf_split_key(f, "split.no");
    int64_t c = wgllm_gguf_split_key(f, "split.count");
    if (no != i)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.no' is %s%lld, expected %d",
                               no == -1 ? "missing " : no == -2 ? "not an integer " : "",
                               (long long)(no < 0 ? 0 : no), i);
    if (c != -1 && c != count)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.count' is %lld, but the first shard says %lld",
                               (long long)c, (long long)count);
    return WGLLM_STATUS_OK;
}

/* split.tensors.count of the first shard against the tensors of all. */
static enum wgllm_status gguf_check_split_tensors(const struct wgllm_gguf *g,
                                                  struct wgllm_error *err) {
    int64_t want = wgllm_gguf_split_key(&g->files[0], "split.tensors.count"), sum = 0;
    for (int i = 0; i < g->n_files; i++) sum += g->files[i].n_tensors;
    if (want != sum)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.tensors.count' is %s%lld but the %d shards hold "
                               "%lld tensors",
                               want == -1 ? "missing " : "", (long long)want, g->n_files,
                               (long long)sum);
    return WGLLM_STATUS_OK;
}

/* How a file gets into g->files[i] (parsed), and its name for messages. */
struct gguf_loader {
    enum wgllm_status (*load)(struct wgllm_gguf *g, int i, void *ctx, struct wgllm_error *err);
    const char *(*name)(void *ctx, int i);
    void *ctx;
};

/* The open sequence of every kind of file: the first file, split.count
 * against n_files, then every other shard and its split keys, then the
 * merged tables. g holds one zeroed file slot. An error gets the name of
 * the file it is about as prefix. */
static enum wgllm_status gguf_open_files(struct wgllm_gguf *g, int n_files,
                                         enum gguf_count_rule rule, const struct gguf_loader *ld,
                                         struct wgllm_error *err) {
    int cur = 0;
    enum wgllm_status st = ld->load(g, 0, ld->ctx, err);
    if (st == WGLLM_STATUS_OK) st = gguf_check_split_count(&g->files[0], n_files, rule, err);
    if (st == WGLLM_STATUS_OK && n_files > 1) {
        struct gguf_file *files = realloc(g->files, (size_t)n_files * sizeof(*files));
        if (!files) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
        } else {
            g->files = files;
            memset(&files[1], 0, (size_t)(n_files - 1) * sizeof(*files));
            for (int i = 0; i < n_files && st == WGLLM_STATUS_OK; i++) {
                cur = i;
                if (i > 0) {
                    g->n_files = i + 1;
                    st = ld->load(g, i, ld->ctx, err);
                }
                if (st == WGLLM_STATUS_OK) st = gguf_check_split_file(&g->files[i], i, n_files, err);
            }
            if (st == WGLLM_STATUS_OK) {
                cur = 0;
                st = gguf_check_split_tensors(g, err);
            }
        }
    }
    if (st == WGLLM_STATUS_OK) {
        cur = 0;
        st = wgllm_gguf_finish(g, err);
    }
    if (st != WGLLM_STATUS_OK) wgllm_error_prefix(err, "%s: ", ld->name(ld->ctx, cur));
    return st;
}

/* ---------------------------------------------------------------------------
 * files found by name: one file, or every shard of PREFIX-NNNNN-of-MMMMM.gguf
 * ------------------------------------------------------------------------- */

/* Matches "PREFIX-NNNNN-of-MMMMM.gguf"; fills prefix length, shard number, count. */
static bool gguf_split_name(const char *path, size_t *prefix_len, int *no, int *count) {
    static const char pat[] = "-#####-of-#####.gguf";
    size_t n = strlen(path), m = sizeof(pat) - 1;
    if (n <= m) return false;
    const char *s = path + n - m;
    int a = 0, b = 0;
    for (size_t i = 0; i < m; i++) {
        if (pat[i] == '#') {
            if (s[i] < '0' || s[i] > '9') return false;
            if (i < 6) a = a * 10 + (s[i] - '0');
            else b = b * 10 + (s[i] - '0');
        } else if (s[i] != pat[i]) {
            return false;
        }
    }
    *prefix_len = n - m;
    *no = a;
    *count = b;
    return true;
}

int wgllm_gguf_split_path(char *buf, size_t size, const char *prefix, int no, int count) {
    return snprintf(buf, size, "%s-%05d-of-%05d.gguf", prefix, no, count);
}

struct gguf_shards {
    const char *path;
    char *prefix; /* NULL: `path` is the only file */
    int count;
    char *buf; /* one shard's path (gguf_shard_path) */
    size_t cap;
};

static enum wgllm_status gguf_shards_init(struct gguf_shards *s, const char *path,
                                          struct wgllm_error *err) {
    memset(s, 0, sizeof(*s));
    s->path = path;
    s->count = 1;
    size_t plen = 0;
    int no = 0, count = 0;
    if (!gguf_split_name(path, &plen, &no, &count)) return WGLLM_STATUS_OK;
    if (count < 1 || no < 1 || no > count || count > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: '%s': shard number %d of %d in the file name is out of range",
                               path, no, count);
    s->cap = strlen(path) + 32;
    s->prefix = malloc(plen + 1);
    s->buf = malloc(s->cap);
    if (!s->prefix || !s->buf) {
        free(s->prefix);
        free(s->buf);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    }
    memcpy(s->prefix, path, plen);
    s->prefix[plen] = '\0';
    s->count = count;
    return WGLLM_STATUS_OK;
}

static void gguf_shards_free(struct gguf_shards *s) {
    free(s->prefix);
    free(s->buf);
}

/* The path of file i (0-based); valid until the next call. */
static const char *gguf_shard_path(void *ctx, int i) {
    struct gguf_shards *s = ctx;
    if (!s->prefix) return s->path;
    wgllm_gguf_split_path(s->buf, s->cap, s->prefix, i + 1, s->count);
    return s->buf;
}

static enum wgllm_status gguf_map_load(struct wgllm_gguf *g, int i, void *ctx,
                                       struct wgllm_error *err) {
    struct gguf_file *f = &g->files[i];
    GGUF_TRY(gguf_map(gguf_shard_path(ctx, i), f, err));
    uint64_t more;
    return wgllm_gguf_parse_file(f, &g->arena, f->size, &more, err);
}

enum wgllm_status wgllm_gguf_open(const char *path, struct wgllm_gguf **out,
                                  struct wgllm_error *err) {
    *out = NULL;
    struct gguf_shards sh;
    GGUF_TRY(gguf_shards_init(&sh, path, err));
    enum wgllm_status st;
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    } else {
        g->n_files = 1;
        struct gguf_loader ld = {gguf_map_load, gguf_shard_path, &sh};
        st = gguf_open_files(g, sh.count, sh.prefix ? GGUF_COUNT_SPLIT_NAME : GGUF_COUNT_PLAIN_NAME,
                             &ld, err);
        if (st != WGLLM_STATUS_OK) {
            wgllm_gguf_free(g);
            g = NULL;
        }
    }
    gguf_shards_free(&sh);
    *out = g;
    return st;
}

/* ---------------------------------------------------------------------------
 * reading through a source
 * ------------------------------------------------------------------------- */

/* The first read of a header; most fit (a 150k-token vocabulary does not). */
#define GGUF_FIRST_READ ((uint64_t)256 << 10)
/* The most a header may take when read into memory (the mapped reader copies
 * nothing, so it has no such limit): real ones, vocabularies of 256k tokens
 * included, are tens of MB; a hostile length must not make a browser tab
 * allocate gigabytes. */
#define GGUF_MAX_HEADER ((uint64_t)512 << 20)

static const char *gguf_src_name(const struct wgllm_gguf *g, int i, char *buf, size_t cap) {
    if (g->src.names && g->src.names[i]) return g->src.names[i];
    snprintf(buf, cap, "file %d", i + 1);
    return buf;
}

/* Reads [off, off + n) of file i through the source; the message names the range. */
static enum wgllm_status gguf_source_read(const struct wgllm_gguf *g, int i, uint64_t off,
                                          void *dst, size_t n, struct wgllm_error *err) {
    if (n == 0) return WGLLM_STATUS_OK;
    struct wgllm_error e = {0};
    enum wgllm_status st = g->src.read(g->src.user, i, off, dst, n, &e);
    if (st == WGLLM_STATUS_OK) return st;
    return wgllm_error_set(err, st, "cannot read bytes [%llu, %llu) (%zu bytes): %s",
                           (unsigned long long)off, (unsigned long long)(off + n), n,
                           e.message[0] ? e.message : wgllm_status_name(st));
}

static void gguf_arena_splice(struct gguf_arena_block **head, struct gguf_arena_block *list) {
    if (!list) return;
    struct gguf_arena_block *tail = list;
    while (tail->next) tail = tail->next;
    tail->next = *head;
    *head = list;
}

/* Reads a prefix of file i and parses it, reading more until the header fits. */
static enum wgllm_status gguf_source_load(struct wgllm_gguf *g, int i, void *ctx,
                                          struct wgllm_error *err) {
    (void)ctx;
    struct gguf_file *f = &g->files[i];
    uint64_t size = g->src.sizes[i], have = 0, want = WGLLM_MIN(size, GGUF_FIRST_READ);
    uint8_t *buf = NULL;
    for (;;) {
        if (want >= (uint64_t)SIZE_MAX) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                                   "gguf: the header needs %llu bytes, more than this process "
                                   "can address",
                                   (unsigned long long)want);
        }
        uint8_t *nb = realloc(buf, want ? (size_t)want : 1);
        if (!nb) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                                   "gguf: no memory for %llu header bytes", (unsigned long long)want);
        }
        buf = nb;
        enum wgllm_status st = gguf_source_read(g, i, have, buf + have, (size_t)(want - have), err);
        if (st != WGLLM_STATUS_OK) {
            free(buf);
            wgllm_error_prefix(err, "gguf: reading the header: ");
            return st;
        }
        have = want;
        f->data = buf;
        f->size = size;
        f->sourced = true;
        /* Items of a parse that is retried are dropped with their arena. */
        struct gguf_arena_block *arena = NULL;
        uint64_t more = 0;
        st = wgllm_gguf_parse_file(f, &arena, have, &more, err);
        if (st == WGLLM_STATUS_OK || more == 0) {
            f->buf = buf;
            gguf_arena_splice(&g->arena, arena);
            return st;
        }
        free(f->kv);
        free(f->tensors);
        memset(f, 0, sizeof(*f));
        wgllm_gguf_arena_free(arena);
        /* Counts and lengths were checked against the file size first. */
        WGLLM_ASSERT(more > have && more <= size);
        if (more > GGUF_MAX_HEADER) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "gguf: the header (key/values and tensor infos) needs more than %llu "
                                   "bytes (%llu so far): too large to read into memory",
                                   (unsigned long long)GGUF_MAX_HEADER, (unsigned long long)more);
        }
        want = have > size / 2 ? size : have * 2;
        if (want < more) want = more;
        if (want > GGUF_MAX_HEADER) want = WGLLM_MAX(more, GGUF_MAX_HEADER);
    }
}

struct gguf_source_names {
    const struct wgllm_gguf *g;
    char buf[32];
};

static const char *gguf_source_name(void *ctx, int i) {
    struct gguf_source_names *c = ctx;
    return gguf_src_name(c->g, i, c->buf, sizeof(c->buf));
}

static enum wgllm_status gguf_open_source_as(const struct wgllm_model_source *src,
                                             enum gguf_count_rule rule, struct wgllm_gguf **out,
                                             struct wgllm_error *err) {
    *out = NULL;
    if (!src || !src->sizes || !src->read || src->n_files < 1 || src->n_files > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: a source needs 1..%d files (got %d), their sizes and a read "
                               "function",
                               GGUF_MAX_SPLITS, src ? src->n_files : 0);
    int n = src->n_files;
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    g->n_files = 1;
    g->sourced = true;
    g->src = *src;
    g->src.names = NULL;
    bool oom = false;
    g->src_sizes = malloc((size_t)n * sizeof(*g->src_sizes));
    if (g->src_sizes) memcpy(g->src_sizes, src->sizes, (size_t)n * sizeof(*g->src_sizes));
    else oom = true;
    g->src.sizes = g->src_sizes;
    if (src->names && !oom) {
        g->src_names = calloc((size_t)n, sizeof(*g->src_names));
        oom = !g->src_names;
        for (int i = 0; i < n && !oom; i++)
            if (src->names[i] && !(g->src_names[i] = strdup(src->names[i]))) oom = true;
        g->src.names = (const char *const *)g->src_names;
    }
    if (oom) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    }
    struct gguf_source_names names = {.g = g};
    struct gguf_loader ld = {gguf_source_load, gguf_source_name, &names};
    enum wgllm_status st = gguf_open_files(g, n, rule, &ld, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_gguf_free(g);
        return st;
    }
    *out = g;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_open_source(const struct wgllm_model_source *src,
                                         struct wgllm_gguf **out, struct wgllm_error *err) {
    return gguf_open_source_as(src, GGUF_COUNT_SOURCE, out, err);
}

/* The source of wgllm_gguf_open_unmapped: the files stay open, read with pread. */
struct gguf_pread_files {
    int n;
    int *fds;
};

static void gguf_pread_free(void *user) {
    struct gguf_pread_files *pf = user;
    if (!pf) return;
    for (int i = 0; i < pf->n; i++) close(pf->fds[i]);
    free(pf->fds);
    free(pf);
}

static enum wgllm_status gguf_pread_read(void *user, int file, uint64_t offset, void *dst,
                                         size_t n, struct wgllm_error *err) {
    struct gguf_pread_files *pf = user;
    WGLLM_ASSERT(file >= 0 && file < pf->n);
    uint8_t *d = dst;
    size_t done = 0;
    while (done < n) {
        size_t chunk = WGLLM_MIN(n - done, (size_t)1 << 30);
        ssize_t r = pread(pf->fds[file], d + done, chunk, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return wgllm_error_set(err, WGLLM_STATUS_IO, "pread at offset %llu failed: %s",
                                   (unsigned long long)(offset + done), strerror(errno));
        if (r == 0)
            return wgllm_error_set(err, WGLLM_STATUS_IO,
                                   "the file ends at offset %llu (did it shrink while open?)",
                                   (unsigned long long)(offset + done));
        done += (size_t)r;
    }
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_open_unmapped(const char *path, struct wgllm_gguf **out,
                                           struct wgllm_error *err) {
    *out = NULL;
    struct gguf_shards sh;
    GGUF_TRY(gguf_shards_init(&sh, path, err));
    int n = sh.count;
    enum wgllm_status st = WGLLM_STATUS_OK;
    uint64_t *sizes = calloc((size_t)n, sizeof(*sizes));
    char **names = calloc((size_t)n, sizeof(*names));
    struct gguf_pread_files *pf = calloc(1, sizeof(*pf));
    if (pf) pf->fds = calloc((size_t)n, sizeof(*pf->fds));
    if (!sizes || !names || !pf || !pf->fds)
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    for (int i = 0; i < n && st == WGLLM_STATUS_OK; i++) {
        const char *p = gguf_shard_path(&sh, i);
        if (!(names[i] = strdup(p))) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
            break;
        }
        st = gguf_open_fd(p, &pf->fds[i], &sizes[i], err);
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "%s: ", p);
            break;
        }
        pf->n = i + 1;
    }
    if (st == WGLLM_STATUS_OK) {
        struct wgllm_model_source src = {
            .n_files = n,
            .sizes = sizes,
            .names = (const char *const *)names,
            .read = gguf_pread_read,
            .user = pf,
        };
        st = gguf_open_source_as(&src, sh.prefix ? GGUF_COUNT_SPLIT_NAME : GGUF_COUNT_PLAIN_NAME,
                                 out, err);
        if (st == WGLLM_STATUS_OK) {
            (*out)->src_release = gguf_pread_free;
            pf = NULL;
        }
    }
    gguf_pread_free(pf);
    if (names)
        for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    gguf_shards_free(&sh);
    return st;
}

bool wgllm_gguf_mapped(const struct wgllm_gguf *g) { return !g->sourced; }

enum wgllm_status wgllm_gguf_read_tensor(const struct wgllm_gguf *g,
                                         const struct wgllm_gguf_tensor *t, uint64_t offset,
                                         void *dst, size_t n, struct wgllm_error *err) {
    char nbuf[80];
    if (offset > t->size || n > t->size - offset) {
        wgllm_gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: tensor '%s': bytes [%llu, +%zu) are outside its %llu bytes",
                               nbuf, (unsigned long long)offset, n, (unsigned long long)t->size);
    }
    if (n == 0) return WGLLM_STATUS_OK;
    WGLLM_ASSERT(dst != NULL && t->split >= 0 && t->split < g->n_files);
    if (!g->sourced) {
        memcpy(dst, (const uint8_t *)t->data + offset, n);
        return WGLLM_STATUS_OK;
    }
    /* begin + size was checked against the file size at open: no overflow. */
    uint64_t at = g->files[t->split].data_start + t->offset + offset;
    enum wgllm_status st = gguf_source_read(g, t->split, at, dst, n, err);
    if (st != WGLLM_STATUS_OK) {
        char fbuf[32];
        wgllm_gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
        wgllm_error_prefix(err, "gguf: tensor '%s' in %s: ", nbuf,
                           gguf_src_name(g, t->split, fbuf, sizeof(fbuf)));
    }
    return st;
}
