// The exact keys of (query, base) pairs (common/exact.cuh), a thread per pair: each walks its
// pair's dimensions in order, as exact_key_of does (the keys are sums in that order,
// bit-identical to the CPU engine's). Two kernels (src/ops/exact.rs picks by the dimension):
// exact_keys reads each pair's rows itself; exact_keys_staged (a warp per 32 pairs) walks
// values its warp staged in shared memory, EK_CHUNK of each of its 32 base rows (and query
// rows) at a time, a row's values in one load across the lanes, the next chunk's loads in
// flight while the lanes walk this one.

#include "common/exact.cuh"

// One pair per thread, any grid. Rows of d values, `ld` apart (ld ≥ d: the stored rows of half
// storage are padded, src/ops/device_set.rs).
extern "C" __global__ void exact_keys(const elem_t* __restrict__ base, const elem_t* __restrict__ qs,
                                      int d, long long ld, const uint2* __restrict__ pairs,
                                      long long npairs, int metric, double zero,
                                      double* __restrict__ out) {
    long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= npairs) return;
    uint2 qb = pairs[p];  // (query, base)
    out[p] = exact_key(base + (size_t)qb.y * ld, qs + (size_t)qb.x * ld, d, metric, zero);
}

// Values of each row staged at a time: one per lane (EK_WARPS, warps per block, is
// src/runtime/abi.rs's).
#define EK_CHUNK 32

// A warp's staging: EK_CHUNK values of each of its 32 pairs' rows (one pad word per row, so
// that the lanes' walks, a row each, fall on distinct banks) and the rows themselves.
struct EkStage {
    float a[32][EK_CHUNK + 1];
    float b[32][EK_CHUNK + 1];
    const elem_t* rows[2][32];  // base rows, query rows
};

// Values [c, c + EK_CHUNK) of the 32 rows `rows` (lane l holds value c + l of each, where it
// is below d): the loads all in flight at once.
__device__ __forceinline__ void ek_load(float (&v)[32], const elem_t* const (&rows)[32], int c,
                                        int d, int lane, int nrows) {
    if (c + lane < d) {
#pragma unroll
        for (int r = 0; r < 32; ++r)
            if (r < nrows) v[r] = elem_float(rows[r][c + lane]);
    }
}

// Hands `visit` each lane's pair's values (base, query), dimension by dimension in order. With
// `one_query`, every lane's query row is lane 0's, staged once. The next chunk's values are
// loaded into registers while the lanes walk this one from shared memory.
template <class Visit>
__device__ __forceinline__ void ek_stream(EkStage& st, bool one_query, int d, int lane,
                                          Visit visit) {
    int nq = one_query ? 1 : 32;
    float va[32], vb[32];
    ek_load(va, st.rows[0], 0, d, lane, 32);
    ek_load(vb, st.rows[1], 0, d, lane, nq);
    for (int c = 0; c < d; c += EK_CHUNK) {
        if (c + lane < d) {
#pragma unroll
            for (int r = 0; r < 32; ++r) {
                st.a[r][lane] = va[r];
                if (r < nq) st.b[r][lane] = vb[r];
            }
        }
        __syncwarp();
        ek_load(va, st.rows[0], c + EK_CHUNK, d, lane, 32);
        ek_load(vb, st.rows[1], c + EK_CHUNK, d, lane, nq);
        const float* a = st.a[lane];
        const float* b = st.b[one_query ? 0 : lane];
        int n = min(EK_CHUNK, d - c);
        for (int i = 0; i < n; ++i) visit(a[i], b[i]);
        __syncwarp();
    }
}

// The key of each lane's pair under metric M (exact_walk's, from staged values).
template <int M>
__device__ __forceinline__ double ek_key(EkStage& st, bool one_query, int d, double zero,
                                         int lane) {
    double ca = 0.0, cb = 0.0;
    if (M == EX_CORRELATION) {
        ExactMean ma(zero), mb(zero);
        ek_stream(st, one_query, d, lane, [&](float a, float b) {
            ma.add(a);
            mb.add(b);
        });
        ca = ma.of(d);
        cb = mb.of(d);
    }
    ExactWalk<M> w(zero, ca, cb);
    ek_stream(st, one_query, d, lane, [&](float a, float b) { w.add(a, b); });
    return w.key();
}

// ek_key as with_exact_metric's callee (common/exact.cuh says why a struct).
struct EkKeyOf {
    EkStage& st;
    bool one_query;
    int d;
    double zero;
    int lane;
    template <class M>
    __device__ __forceinline__ double operator()(M) const {
        return ek_key<M::code>(st, one_query, d, zero, lane);
    }
};

// exact_keys' arguments and results, in blocks of EK_WARPS warps.
extern "C" __global__ void __launch_bounds__(EK_WARPS * 32)
    exact_keys_staged(const elem_t* __restrict__ base, const elem_t* __restrict__ qs, int d,
                      long long ld, const uint2* __restrict__ pairs, long long npairs, int metric,
                      double zero, double* __restrict__ out) {
    __shared__ EkStage stages[EK_WARPS];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long first = ((long long)blockIdx.x * EK_WARPS + warp) * 32;
    if (first >= npairs) return;  // the whole warp
    // Lanes past the end walk the last pair again and store nothing.
    uint2 qb = pairs[min(first + lane, npairs - 1)];
    EkStage& st = stages[warp];
    st.rows[0][lane] = base + (size_t)qb.y * ld;
    st.rows[1][lane] = qs + (size_t)qb.x * ld;
    bool one_query = __ballot_sync(0xffffffffu, qb.x == __shfl_sync(0xffffffffu, qb.x, 0)) ==
                     0xffffffffu;
    __syncwarp();
    double key = with_exact_metric(metric, EkKeyOf{st, one_query, d, zero, lane});
    if (first + lane < npairs) out[first + lane] = key;
}
