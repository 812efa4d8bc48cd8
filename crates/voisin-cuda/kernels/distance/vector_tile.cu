// Distance tiles for the metrics that are not matrix products (cityblock, chebyshev, minkowski):
// out[r][c] = key(q_r, b_c) in f32. Plain SIMT tiling: a 16x16 block computes 64x64 outputs, each
// thread a 4x4 micro-tile, with 32-dimension slices of both sides staged in shared memory.
// The host bounds the f32 error relative to the value (see src/numerics/plan.rs).

#include "common/abi.cuh"

// `kind` is VT_CITYBLOCK, VT_CHEBYSHEV or VT_MINKOWSKI (src/runtime/abi.rs).

__device__ __forceinline__ float vt_term(int kind, float a, float b, float p) {
    float d = fabsf(a - b);
    return kind == VT_MINKOWSKI ? powf(d, p) : d;
}

extern "C" __global__ void vector_tile(const float* __restrict__ q, int nq,
                                       const float* __restrict__ b, int nb, int dim, int kind,
                                       float p, float* __restrict__ out, long long ld) {
    __shared__ float qs[64][33];
    __shared__ float bs[64][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int tid = ty * 16 + tx;
    int q0 = blockIdx.y * 64, b0 = blockIdx.x * 64;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < dim; k0 += 32) {
        for (int e = tid; e < 64 * 32; e += 256) {
            int rr = e / 32, kk = e % 32;
            int gk = k0 + kk;
            qs[rr][kk] = (q0 + rr < nq && gk < dim) ? q[(size_t)(q0 + rr) * dim + gk] : 0.0f;
            bs[rr][kk] = (b0 + rr < nb && gk < dim) ? b[(size_t)(b0 + rr) * dim + gk] : 0.0f;
        }
        __syncthreads();
        int kmax = min(32, dim - k0);
        for (int kk = 0; kk < kmax; ++kk) {
            float a[4], bb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = qs[ty + 16 * i][kk];
#pragma unroll
            for (int j = 0; j < 4; ++j) bb[j] = bs[tx + 16 * j][kk];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float t = vt_term(kind, a[i], bb[j], p);
                    acc[i][j] = kind == VT_CHEBYSHEV ? fmaxf(acc[i][j], t) : acc[i][j] + t;
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int r = q0 + ty + 16 * i, c = b0 + tx + 16 * j;
            if (r < nq && c < nb) out[(size_t)r * ld + c] = acc[i][j];
        }
}
