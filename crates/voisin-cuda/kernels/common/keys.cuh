// How a value of a distance tile becomes a key (smaller = closer), and keys as ordered integers.
//
// Tiles hold either dot products from cuBLAS (GEMM metrics) or distances from vector_tile.cu;
// // the selection and range kernels turn them into keys on the fly, so no separate epilogue pass
// reads and rewrites the tile. The modes KEY_* and NO_INDEX come from src/runtime/abi.rs (`TileKey`):
// KEY_L2 |r|^2 + |c|^2 - 2 r.c (euclidean, sqeuclidean, on centred data), KEY_NEG_DOT -r.c
// (inner_product), KEY_ONE_MINUS 1 - r.c (cosine, correlation, on unit rows), KEY_DIRECT the
// tile already holds the key (cityblock, chebyshev, minkowski), KEY_L2_INT as KEY_L2 with the
// tile's 32-bit words holding the int32 dot products of int8 tiles (u8 rows minus 128).

#pragma once
#include "common/abi.cuh"

// Whether the mode reads the squared norms of the tile's rows and columns.
__device__ __forceinline__ bool key_reads_norms(int mode) {
    return mode == KEY_L2 || mode == KEY_L2_INT;
}

// The key of tile value t whose row and column norms (read only where key_reads_norms) are
// already at hand: kernels that use one norm for many values keep it in a register.
__device__ __forceinline__ float tile_key_of(int mode, float t, float rnorm, float cnorm) {
    switch (mode) {
    case KEY_L2: return rnorm + cnorm - 2.0f * t;
    case KEY_L2_INT: return rnorm + cnorm - 2.0f * (float)__float_as_int(t);
    case KEY_NEG_DOT: return -t;
    case KEY_ONE_MINUS: return 1.0f - t;
    default: return t;
    }
}

__device__ __forceinline__ float tile_key(int mode, float t, const float* __restrict__ rn,
                                          const float* __restrict__ cn, int r, int c) {
    return key_reads_norms(mode) ? tile_key_of(mode, t, rn[r], cn[c])
                                 : tile_key_of(mode, t, 0.0f, 0.0f);
}

// A mode's key as one multiply-add whose coefficients are read once per kernel, for the
// filters that test every value of a tile and so cannot afford a switch per value
// (select/survivors.cu tile_filter, select/pair_filter.cu): key = delta * t + (rs + cs), with
// rs and cs the squared norms of the row and the column where `norms`, else rs = alpha and
// cs = 0. The same keys as tile_key_of: fl(fl(rs + cs) - 2t) for KEY_L2 (2t is exact, so a
// fused multiply-add rounds it once too), -t, fl(1 - t) and t for the others (up to the sign
// of a zero key).
struct KeyForm {
    float delta;
    float alpha;
    bool norms;
    bool int_word;  // tile words hold int32 sums (KEY_L2_INT)
};

__device__ __forceinline__ KeyForm key_form(int mode) {
    switch (mode) {
    case KEY_L2: return {-2.0f, 0.0f, true, false};
    case KEY_L2_INT: return {-2.0f, 0.0f, true, true};
    case KEY_NEG_DOT: return {-1.0f, 0.0f, false, false};
    case KEY_ONE_MINUS: return {-1.0f, 1.0f, false, false};
    default: return {1.0f, 0.0f, false, false};
    }
}

// The value a tile word stands for: itself, or the int32 sum it holds.
__device__ __forceinline__ float form_value(const KeyForm& f, float word) {
    return f.int_word ? (float)__float_as_int(word) : word;
}

__device__ __forceinline__ float form_key(const KeyForm& f, float t, float rs, float cs) {
    return fmaf(f.delta, t, rs + cs);
}

// Maps a float to an unsigned integer with the same order, for radix selection.
__device__ __forceinline__ unsigned order_bits(float v) {
    unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The float whose order_bits are `b`.
__device__ __forceinline__ float order_key(unsigned b) {
    return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}

// Declares the kernel's dynamic shared memory as an array `name` of T, 16-byte aligned (vector
// copies go into it; the CPU simulation of kernel-sim/ defines its own, a pointer into its
// shared block).
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
