// Range search, two passes over the same tiles: range_count counts, per row, the tile values whose
// key is at most that row's threshold (the radius key widened by the error bound); the host turns
// counts into offsets; range_fill writes the passing column indices at a per-row cursor. Order
// within a row is arbitrary; the host decides membership on exact keys and sorts.

#include "common/keys.cuh"

extern "C" __global__ void range_count(const float* __restrict__ tile, long long ld, int rows,
                                       int cols, int mode, const float* __restrict__ rn,
                                       const float* __restrict__ cn,
                                       const float* __restrict__ thr,
                                       unsigned long long* __restrict__ counts) {
    __shared__ unsigned n;
    int r = blockIdx.x;
    if (r >= rows) return;
    if (threadIdx.x == 0) n = 0;
    __syncthreads();
    const float* row = tile + (size_t)r * ld;
    float t = thr[r];
    unsigned mine = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        mine += tile_key(mode, row[c], rn, cn, r, c) <= t;
    if (mine) atomicAdd(&n, mine);
    __syncthreads();
    if (threadIdx.x == 0 && n) counts[r] += n;
}

extern "C" __global__ void range_fill(const float* __restrict__ tile, long long ld, int rows,
                                      int cols, int mode, const float* __restrict__ rn,
                                      const float* __restrict__ cn, const float* __restrict__ thr,
                                      unsigned col_off,
                                      unsigned long long* __restrict__ cursor,
                                      unsigned* __restrict__ out_idx) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* row = tile + (size_t)r * ld;
    float t = thr[r];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        if (tile_key(mode, row[c], rn, cn, r, c) <= t) {
            unsigned long long p = atomicAdd(&cursor[r], 1ull);
            out_idx[p] = col_off + (unsigned)c;
        }
    }
}
