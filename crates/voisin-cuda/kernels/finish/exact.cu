// The exact keys of (query, base) pairs (common/exact.cuh), one thread per pair.

#include "common/exact.cuh"

// One thread per pair (query, base). Rows of d values, `ld` apart (ld ≥ d: the stored rows of
// half storage are padded, src/ops/device_set.rs).
extern "C" __global__ void exact_keys(const elem_t* __restrict__ base, const elem_t* __restrict__ qs,
                                      int d, long long ld, const uint2* __restrict__ pairs,
                                      long long npairs, int metric, double zero,
                                      double* __restrict__ out) {
    long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= npairs) return;
    uint2 qb = pairs[p];  // (query, base)
    out[p] = exact_key(base + (size_t)qb.y * ld, qs + (size_t)qb.x * ld, d, metric, zero);
}
