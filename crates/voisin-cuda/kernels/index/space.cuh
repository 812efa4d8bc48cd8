// What every index search kernel (index/lc_search.cu, index/sss_search.cu) shares: exact keys
// and distances, the pruning test, answer slots, and the schedule of radii per query block.
//
// Exactness: every key is the exact f64 key of voisin::metric::exact::vector_key (common/exact.cuh),
// so keys and distances are bit-identical to the reference's; the pruning tests are those of
// voisin-index on these same values, with the same rounding allowance (LC_SLACK, voisin-index's
// FLOAT_SLACK). Nothing is decided on an approximate value.

#pragma once
#include "common/keys.cuh"
#include "common/exact.cuh"

#define LC_SLACK 1e-9
#define LC_INF __longlong_as_double(0x7ff0000000000000LL)

// The exact key of query `q` and the item at `x` of a dimension-major table of row `stride`
// (x - q instead of q - x changes no bit: the differences are only squared or taken absolute).
// `metric` is the EX_* code of exact_key_of (src/runtime/abi.rs): EX_SQEUCLIDEAN for euclidean (the key
// is the squared distance), EX_CITYBLOCK or EX_CHEBYSHEV.
__device__ __forceinline__ double lc_key(int metric, const float* q, const float* x,
                                         long long stride, int d, double zero) {
    // One call per metric with the code as a constant: the inlined key keeps only its branch.
    StridedRow a{x, stride};
    DenseRow b{q};
    switch (metric) {
    case EX_CHEBYSHEV: return exact_key_of(a, b, d, EX_CHEBYSHEV, zero);
    case EX_CITYBLOCK: return exact_key_of(a, b, d, EX_CITYBLOCK, zero);
    default: return exact_key_of(a, b, d, EX_SQEUCLIDEAN, zero);
    }
}

// Metric::key_to_distance.
__device__ __forceinline__ double lc_dist(int metric, double key) {
    return metric == EX_SQEUCLIDEAN ? sqrt(fmax(key, 0.0)) : key;
}

// Space::beyond: a region whose distance lower bound is `bound` lies outside `r` beyond doubt.
__device__ __forceinline__ bool lc_beyond(double bound, double r, double scale) {
    return bound > r + LC_SLACK * fabs(scale + r);
}

// Counts an answer (in shared memory) and, with `write`, stores it while the slots have room.
__device__ __forceinline__ void lc_emit(unsigned long long* count, bool write, unsigned cap,
                                        unsigned id, double key, unsigned* out_id,
                                        double* out_key) {
    unsigned long long c = atomicAdd(count, 1ull);
    if (write && c < cap) {
        out_id[c] = id;
        out_key[c] = key;
    }
}

// The shared tail of every index search kernel's arguments and its per-block schedule. Block b
// answers query qids[b] (or b when qids is null) with radius radii[b]. k == 0: a range search.
// k > 0: increasing radius (the seed found it better than a shrinking radius on GPUs): the radius
// grows with count-only passes until at least k answers lie within it, then a last pass writes
// them, and radii[b] becomes the final radius (`grow_from` replaces a zero radius). Slots:
// out_id/out_key + b * cap; counts[b] is the number of answers (possibly above cap: the host then
// runs that query again with more room), evals[b] the distance evaluations.
#define IDX_TAIL_PARAMS                                                                           \
    int d, int metric, double zero, const float *__restrict__ queries,                            \
        const unsigned *__restrict__ qids, double *__restrict__ radii, long long k,                \
        double grow_from, unsigned cap, unsigned *__restrict__ out_id,                             \
        double *__restrict__ out_key, unsigned long long *__restrict__ counts,                     \
        unsigned long long *__restrict__ evals

// Loads the block's query into shared memory `q`.
__device__ __forceinline__ void idx_load_query(float* q, const float* queries,
                                               const unsigned* qids, int d) {
    const long long qi = qids ? qids[blockIdx.x] : blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) q[i] = queries[qi * d + i];
}

// Runs `scan(r, write)` (a range search that leaves its answer count in *count) as the tail's
// schedule says and stores the block's count and final radius.
template <class Scan>
__device__ void idx_answer(Scan scan, const unsigned long long* count, double* radii,
                           long long k, double grow_from, unsigned long long* counts) {
    const int b = blockIdx.x;
    double r = radii[b];
    if (k > 0) {
        for (int round = 0;; ++round) {
            scan(r, false);
            unsigned long long c = *count;
            __syncthreads();  // every thread has read the count before the next pass resets it
            // With finite data an infinite radius holds every item; 250 passes end the loop even
            // on data with NaN.
            if (c >= (unsigned long long)k || round >= 250) break;
            // Items within r grow like r^dim locally; a quarter power undershoots in higher
            // intrinsic dimension, which only costs another counting pass.
            double f = c == 0 ? 2.0 : fmin(2.0, fmax(1.1, pow((double)k / (double)c, 0.25)));
            r = round >= 200 ? LC_INF : (r > 0.0 ? r * f : grow_from);
        }
        if (threadIdx.x == 0) radii[b] = r;
    }
    scan(r, true);
    if (threadIdx.x == 0) counts[b] = *count;
}

