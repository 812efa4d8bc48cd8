// Prepared f32 rows as f16 for the f16 tensor cores (the graph's fused tile pair, src/ops/pair.rs),
// each row scaled by its own power of two, one warp per row.
//
// The scale 2^e puts the row's largest magnitude in [2^14, 2^15) (e = 15 - x for a largest value
// of m * 2^x, m in [0.5, 1)), capped at 2^62 for rows of tiny values, so that 2^-e times another
// row's stays inside f32's normal range. (The floor of 2^-62 never applies: the engine requires
// finite f32 squared norms, so values below 2^64.) Scaling by a power of two is exact; the one
// rounding is f32 to f16, to nearest. A value in f16's normal range keeps 11 significant bits,
// as TF32 does; one below it loses at most 2^-14 / 2^e, which is at most 2^-28 times the row's
// largest value, or 2^-76 where the cap applies: the terms numerics/plan.rs adds to TF32's bound
// (`with_precision`). A row of zeros gets e = 0.
//
// Split (fp16x3 plans, select/pair_filter.cu): each scaled value v also keeps the f16 nearest
// to what its f16 hi leaves, lo = f16(v - hi) (the difference is exact in f32: v's bits below
// hi's last), so that hi + lo is within 2^-22 |v| of v in f16's normal range, or within the
// subnormal spacing below it: the terms of numerics/plan.rs's split bound. The row is stored in
// groups of PF_SPLIT_GROUP values: their his, then their los.
//
// in: n rows of d f32 values, d apart. out: n rows of ld f16 bits (ld >= d; split: ld >= 2d
// rounded up to whole groups of both halves), zero past the row's values. back: 2^-e per row,
// what a dot product of scaled rows is multiplied by, once per side.

#include "common/abi.cuh"
#include "common/half.cuh"

__device__ __forceinline__ float sh_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

extern "C" __global__ void scaled_half_rows(const float* __restrict__ in, long long n, int d,
                                            unsigned short* __restrict__ out, long long ld,
                                            float* __restrict__ back, int split) {
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const float* x = in + row * d;
    unsigned short* o = out + row * ld;
    float m = 0.0f;
    for (int i = lane; i < d; i += 32) m = fmaxf(m, fabsf(x[i]));
    m = sh_warp_max(m);
    int e = 0;
    if (m > 0.0f) {
        int x2;
        frexpf(m, &x2);
        e = max(-62, min(62, 15 - x2));
    }
    float s = ldexpf(1.0f, e);
    if (!split) {
        for (int i = lane; i < d; i += 32) o[i] = f16_bits_rn(x[i] * s);
        for (long long i = d + lane; i < ld; i += 32) o[i] = 0;
    } else {
        // Value i's hi at group i / G's start + i % G, its lo G further; a lane per value.
        const int G = PF_SPLIT_GROUP;
        for (long long i = lane; 2 * i < ld; i += 32) {
            unsigned short hi = 0, lo = 0;
            if (i < d) {
                float v = x[i] * s;
                hi = f16_bits_rn(v);
                lo = f16_bits_rn(v - f16_value(hi));
            }
            long long at = i / G * 2 * G + i % G;
            o[at] = hi;
            o[at + G] = lo;
        }
    }
    if (lane == 0) back[row] = ldexpf(1.0f, -e);
}

// A tile of dot products of scaled rows (cuBLAS on the copies above, src/ops/tile.rs) brought back
// to the rows' own scale: out[r * ld + c] *= rf[r] * cf[c] for r < nr, c < nc, rf and cf the rows'
// factors `back`. Each factor is a power of two in [2^-62, 2^62], so their product is exact and
// normal, and so is the scaled value times it unless the result falls below f32's normal range:
// one rounding there, at most 2^-150, inside the plan's absolute term (`tiny`). One row of the
// tile per blockIdx.y.
extern "C" __global__ void unscale_tile(float* __restrict__ out, long long ld, int nr, int nc,
                                        const float* __restrict__ rf,
                                        const float* __restrict__ cf) {
    int r = blockIdx.y;
    if (r >= nr) return;
    float f = rf[r];
    float* o = out + r * ld;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < nc; c += gridDim.x * blockDim.x)
        o[c] *= f * cf[c];
}
