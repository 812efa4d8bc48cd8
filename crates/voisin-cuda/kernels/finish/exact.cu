// The exact keys of (query, base) pairs (common/exact.cuh), one thread per pair.

#include "common/exact.cuh"

// One thread per pair (query, base).
extern "C" __global__ void exact_keys(const elem_t* __restrict__ base, const elem_t* __restrict__ qs,
                                      int d, const uint2* __restrict__ pairs, long long npairs,
                                      int metric, double zero, double* __restrict__ out) {
    long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= npairs) return;
    uint2 qb = pairs[p];  // (query, base)
    out[p] = exact_key(base + (size_t)qb.y * d, qs + (size_t)qb.x * d, d, metric, zero);
}
