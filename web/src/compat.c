/*
 * compat.c - qsort_r for emscripten 3.1.6, built over qsort with the
 * comparator and its argument in thread-local storage (each thread sorts
 * with its own; a comparator that sorts again would need a stack, none does).
 */
#include "compat.h"

#include <stdlib.h>

static _Thread_local int (*t_cmp)(const void *, const void *, void *);
static _Thread_local void *t_arg;

static int trampoline(const void *a, const void *b) { return t_cmp(a, b, t_arg); }

void qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *), void *arg) {
    int (*saved_cmp)(const void *, const void *, void *) = t_cmp;
    void *saved_arg = t_arg;
    t_cmp = cmp;
    t_arg = arg;
    qsort(base, n, size, trampoline);
    t_cmp = saved_cmp;
    t_arg = saved_arg;
}
