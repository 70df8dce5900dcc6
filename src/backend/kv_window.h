/*
 * kv_window.h - the sliding-window KV ring that both backends and the
 * context share (llama.cpp's SWA cache): a local layer (wgllm_layer.swa)
 * attends to the n_swa latest positions only, so it keeps a ring of
 * n_swa + n_batch cells per sequence instead of n_ctx, position p in cell
 * p mod ring. The n_batch slack is what one pass may add to a sequence:
 * the pass stores all its keys before any of its tokens attends, and its
 * first token still needs the n_swa - 1 positions before it.
 *
 * A ring forgets: once a sequence has gone past the ring, positions below
 * its "pos_min" are gone from the local layers, and the sequence can be
 * continued (or a prefix of it reused) at position n only where the window
 * of n lies above pos_min (wgllm_kv_can_continue).
 */
#ifndef WGLLM_BACKEND_KV_WINDOW_H
#define WGLLM_BACKEND_KV_WINDOW_H

#include "base/base.h"

struct wgllm_model;

/* Cells a local layer keeps per sequence in a context of n_ctx positions
 * and passes of n_batch tokens; 0 when there is no ring: the model has no
 * local layer, full is set (context shift needs every layer's whole
 * cache), or the ring would not be smaller than n_ctx. */
int wgllm_kv_ring(const struct wgllm_model *m, int n_ctx, int n_batch, bool full);

/* Cells layer il keeps per sequence: the ring on a local layer, else n_ctx. */
int wgllm_kv_layer_cells(const struct wgllm_model *m, int il, int n_ctx, int ring);

/* Whether a sequence whose local layers hold positions from pos_min on can
 * be continued at position n (its prefix [0, n) reused): n is 0, nothing
 * was forgotten, or the window of n (the n_swa positions before it, as
 * llama.cpp's server counts them) is still held. */
bool wgllm_kv_can_continue(const struct wgllm_model *m, int pos_min, int n);

/* Bytes of the f16 K and V caches of every layer for n_seq sequences of
 * n_ctx positions with local layers of `ring` cells (0: full caches). */
uint64_t wgllm_kv_bytes(const struct wgllm_model *m, int n_ctx, int n_seq, int ring);

#endif
