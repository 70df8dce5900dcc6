/*
 * kernels_iquants.c - the WGSL dequantization (w8, kernels.c's contract: the
 * 8 elements 8u..8u+7 of a row's 32-element chunk c, in f32 exactly as the
 * CPU's to_float computes them) of the grid formats IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, with their grids as WGSL constant arrays.
 * kernels.c's generator puts it after its byte readers (ld8, ld16, ld32,
 * f16at); mat-vec, mat-mat and get_rows are built on w8 there.
 *
 * The grids are printed from the C tables (iquants_tables.c, ggml's), packed
 * to what a shader reads cheaply: an IQ2 entry's 8 magnitudes 8, 25, 43 as
 * 2-bit codes c (magnitude 8 + 17c + c/2) in 16 bits, two entries per u32;
 * an IQ1 entry's 8 values -1, 0, 1 as 2-bit codes (value + 1) the same way;
 * an IQ3 entry is already one u32 of 4 byte magnitudes. ksigns_iq2xs is not
 * a table here: its entry i is i with bit 7 the parity of i (countOneBits).
 * The float steps are to_float's (iquants.c): the group scale in ggml's
 * expression, times the signed grid value (IQ1: plus the offset +-1/8).
 */
#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"
#include "quant/iquants.h"

#include <stdlib.h>

/* a 2-bit code per byte of an 8-byte grid entry */
static uint32_t pack_codes(uint64_t g, bool iq1) {
    uint32_t c = 0;
    for (int j = 0; j < 8; j++) {
        const int v = iq1 ? (int8_t)(g >> (8 * j)) + 1 : ((int)((g >> (8 * j)) & 0xFF) == 8 ? 0 : (int)((g >> (8 * j)) & 0xFF) == 25 ? 1 : 2);
        c |= (uint32_t)v << (2 * j);
    }
    return c;
}

/* const NAME = array<u32, N>(...) of the 8-byte grid g (n entries), packed */
static void grid_codes(struct wgllm_strbuf *sb, const char *name, const uint64_t *g, int n, bool iq1) {
    wgllm_strbuf_printf(sb, "const %s = array<u32, %d>(", name, n / 2);
    for (int i = 0; i < n; i += 2)
        wgllm_strbuf_printf(sb, "%s%uu", i ? (i % 32 ? "," : ",\n") : "", pack_codes(g[i], iq1) | pack_codes(g[i + 1], iq1) << 16);
    wgllm_strbuf_puts(sb, ");\n");
}

static void grid_u32(struct wgllm_strbuf *sb, const char *name, const uint32_t *g, int n) {
    wgllm_strbuf_printf(sb, "const %s = array<u32, %d>(", name, n);
    for (int i = 0; i < n; i++) wgllm_strbuf_printf(sb, "%s%uu", i ? (i % 16 ? "," : ",\n") : "", g[i]);
    wgllm_strbuf_puts(sb, ");\n");
}

/* The IQ2 / IQ1 decoders: entry i's 8 codes, and one value from a code */
static const char *codes_wgsl =
    "fn gcodes(e: u32) -> u32 { return (GRID[e / 2u] >> (16u * (e & 1u))) & 0xffffu; }\n"
    "fn mag2(c: u32) -> f32 { return f32(8u + 17u * c + c / 2u); }\n"
    /* ggml's ksigns_iq2xs: 7 sign bits and their parity as the 8th */
    "fn ksigns(s: u32) -> u32 { return s | ((countOneBits(s) & 1u) << 7u); }\n";

/* 8 IQ2 values of grid entry e with sign byte s, times db */
static const char *iq2_tail_wgsl =
    "  let gc = gcodes(e);\n"
    "  var v: array<f32, 8>;\n"
    "  for (var t = 0u; t < 8u; t++) {\n"
    "    let m = mag2((gc >> (2u * t)) & 3u);\n"
    "    v[t] = db * select(m, -m, ((s >> t) & 1u) == 1u);\n"
    "  }\n"
    "  return v;\n"
    "}\n";

/* 8 IQ3 values of grid entries g1 (elements 0..3), g2 (4..7), sign byte s, times db */
static const char *iq3_tail_wgsl =
    "  var v: array<f32, 8>;\n"
    "  for (var t = 0u; t < 4u; t++) {\n"
    "    let m1 = f32((g1 >> (8u * t)) & 255u);\n"
    "    let m2 = f32((g2 >> (8u * t)) & 255u);\n"
    "    v[t] = db * select(m1, -m1, ((s >> t) & 1u) == 1u);\n"
    "    v[t + 4u] = db * select(m2, -m2, ((s >> (t + 4u)) & 1u) == 1u);\n"
    "  }\n"
    "  return v;\n"
    "}\n";

/* 8 IQ1 values of grid entry e, times dl, with offset delta */
static const char *iq1_tail_wgsl =
    "  let gc = gcodes(e);\n"
    "  var v: array<f32, 8>;\n"
    "  for (var t = 0u; t < 8u; t++) { v[t] = dl * (f32(i32((gc >> (2u * t)) & 3u) - 1) + delta); }\n"
    "  return v;\n"
    "}\n";

char *wgllm_wgsl_iq_w8(uint32_t type) {
    struct wgllm_strbuf sb = {0};
    switch (type) {
    case WGLLM_TYPE_IQ2_XXS:
        /* d, qs u16[32]: group ib = two u32: 4 grid bytes; 4 x 7 sign bits, scale << 28 */
        grid_codes(&sb, "GRID", wgllm_iq2xxs_grid, 256, false);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 66u + 2u + 8u * (c %% 8u);\n"
                            "  let aux = ld32(o + 4u);\n"
                            "  let db = f16at(rb + (c / 8u) * 66u) * (0.5 + f32(aux >> 28u)) * 0.25;\n"
                            "  let e = (ld32(o) >> (8u * u)) & 255u;\n"
                            "  let s = ksigns((aux >> (7u * u)) & 127u);\n"
                            "%s",
                            codes_wgsl, iq2_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ2_XS:
        /* d, qs u16[32] (9-bit index | 7 sign bits << 9), scales[8] (two 4-bit) */
        grid_codes(&sb, "GRID", wgllm_iq2xs_grid, 512, false);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 74u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let q = ld16(o + 2u + 8u * ib + 2u * u);\n"
                            "  let sc = ld8(o + 66u + ib);\n"
                            "  let db = f16at(o) * (0.5 + f32(select(sc & 15u, sc >> 4u, u >= 2u))) * 0.25;\n"
                            "  let e = q & 511u;\n"
                            "  let s = ksigns(q >> 9u);\n"
                            "%s",
                            codes_wgsl, iq2_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ2_S:
        /* d, qs[32] low index bits, signs[32], qh[8] (2 high bits per entry), scales[8] */
        grid_codes(&sb, "GRID", wgllm_iq2s_grid, 1024, false);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 82u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let sc = ld8(o + 74u + ib);\n"
                            "  let db = f16at(o) * (0.5 + f32(select(sc & 15u, sc >> 4u, u >= 2u))) * 0.25;\n"
                            "  let e = ld8(o + 2u + 4u * ib + u) | ((ld8(o + 66u + ib) << (8u - 2u * u)) & 0x300u);\n"
                            "  let s = ld8(o + 34u + 4u * ib + u);\n"
                            "%s",
                            codes_wgsl, iq2_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ3_XXS:
        /* d, qs[64] grid indices (4-byte entries), per group a u32 of 4 x 7 sign bits and scale << 28 */
        grid_u32(&sb, "GRID", wgllm_iq3xxs_grid, 256);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 98u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let aux = ld32(o + 66u + 4u * ib);\n"
                            "  let db = f16at(o) * (0.5 + f32(aux >> 28u)) * 0.5;\n"
                            "  let g1 = GRID[ld8(o + 2u + 8u * ib + 2u * u)];\n"
                            "  let g2 = GRID[ld8(o + 3u + 8u * ib + 2u * u)];\n"
                            "  let s = ksigns((aux >> (7u * u)) & 127u);\n"
                            "%s",
                            codes_wgsl, iq3_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ3_S:
        /* d, qs[64] low index bits, qh[8] (the 9th bits), signs[32], scales[4] (two 4-bit) */
        grid_u32(&sb, "GRID", wgllm_iq3s_grid, 512);
        wgllm_strbuf_printf(&sb,
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 110u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let sc = ld8(o + 106u + ib / 2u);\n"
                            "  let db = f16at(o) * f32(1u + 2u * select(sc & 15u, sc >> 4u, (ib & 1u) == 1u));\n"
                            "  let h = ld8(o + 66u + ib);\n"
                            "  let g1 = GRID[ld8(o + 2u + 8u * ib + 2u * u) | ((h << (8u - 2u * u)) & 256u)];\n"
                            "  let g2 = GRID[ld8(o + 3u + 8u * ib + 2u * u) | ((h << (7u - 2u * u)) & 256u)];\n"
                            "  let s = ld8(o + 74u + 4u * ib + u);\n"
                            "%s",
                            iq3_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ1_S:
        /* d, qs[32] low index bits, qh u16[8]: 3 high bits per entry, scale << 12, offset sign << 15 */
        grid_codes(&sb, "GRID", wgllm_iq1s_grid, 2048, true);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 50u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let qh = ld16(o + 34u + 2u * ib);\n"
                            "  let dl = f16at(o) * f32(2u * ((qh >> 12u) & 7u) + 1u);\n"
                            "  let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);\n"
                            "  let e = ld8(o + 2u + 4u * ib + u) | (((qh >> (3u * u)) & 7u) << 8u);\n"
                            "%s",
                            codes_wgsl, iq1_tail_wgsl);
        break;
    case WGLLM_TYPE_IQ1_M:
        /* qs[32] low index bits, qh[16] (a nibble per entry: 3 high bits, offset sign),
         * scales u16[4]: two 3-bit scales per group, the fp16 block scale in the top nibbles */
        grid_codes(&sb, "GRID", wgllm_iq1s_grid, 2048, true);
        wgllm_strbuf_printf(&sb, "%s"
                            "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                            "  let o = rb + (c / 8u) * 56u;\n"
                            "  let ib = c %% 8u;\n"
                            "  let h16 = (ld16(o + 48u) >> 12u) | ((ld16(o + 50u) >> 8u) & 0xf0u) |\n"
                            "            ((ld16(o + 52u) >> 4u) & 0xf00u) | (ld16(o + 54u) & 0xf000u);\n"
                            "  let sc = ld16(o + 48u + 2u * (ib / 2u)) >> (6u * (ib & 1u));\n"
                            "  let dl = unpack2x16float(h16).x * f32(2u * (select(sc, sc >> 3u, u >= 2u) & 7u) + 1u);\n"
                            "  let qb = ld8(o + 32u + 2u * ib + u / 2u);\n"
                            "  let nb = select(qb & 15u, qb >> 4u, (u & 1u) == 1u);\n"
                            "  let delta = select(0.125, -0.125, (nb & 8u) != 0u);\n"
                            "  let e = ld8(o + 4u * ib + u) | ((nb & 7u) << 8u);\n"
                            "%s",
                            codes_wgsl, iq1_tail_wgsl);
        break;
    default: return NULL;
    }
    if (sb.oom) {
        wgllm_strbuf_free(&sb);
        return NULL;
    }
    return wgllm_strbuf_take(&sb);
}
