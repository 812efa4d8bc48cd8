// Shared prelude of every kernel: how a value of a distance tile becomes a key (smaller = closer).
//
// Tiles hold either dot products from cuBLAS (GEMM metrics) or distances from vector_tile.cu;
// the selection and range kernels turn them into keys on the fly, so no separate epilogue pass
// reads and rewrites the tile. The modes mirror `TileKey` in src/prepare.rs.

#define KEY_L2 0         // |r|^2 + |c|^2 - 2 r.c  (euclidean, sqeuclidean, on centred data)
#define KEY_NEG_DOT 1    // -r.c                   (inner_product)
#define KEY_ONE_MINUS 2  // 1 - r.c                (cosine, correlation, on unit rows)
#define KEY_DIRECT 3     // the tile already holds the key (cityblock, chebyshev, minkowski)

#define NO_INDEX 0xffffffffu

__device__ __forceinline__ float tile_key(int mode, float t, const float* __restrict__ rn,
                                          const float* __restrict__ cn, int r, int c) {
    switch (mode) {
    case KEY_L2: return rn[r] + cn[c] - 2.0f * t;
    case KEY_NEG_DOT: return -t;
    case KEY_ONE_MINUS: return 1.0f - t;
    default: return t;
    }
}

// Maps a float to an unsigned integer with the same order, for radix selection.
__device__ __forceinline__ unsigned order_bits(float v) {
    unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
