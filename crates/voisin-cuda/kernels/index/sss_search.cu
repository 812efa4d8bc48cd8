// SSS pivot table search ([Barrientos13] §4.1.3 range, §4.2.3 k-NN): one block per query, the query
// and its distances to the pivots in shared memory. The table's rows are sorted by the distance
// to the first pivot, so that pivot's test leaves one contiguous run of rows (two binary
// searches); every thread then takes rows of the run in turn, tests the other pivots and
// measures the rows no pivot rules out. Uses index/space.cuh's exact keys, pruning test, answer
// slots and schedule (IDX_TAIL_PARAMS, idx_answer).
//
// Exactness as in index/space.cuh: keys bit-identical to the reference's, and the tests are
// voisin-index's SSS tests (with its rounding allowance) on those same values.
//
// Layout: items in table order, dimension-major (value i of row j at i * n + j); the table
// pivot-major (distance of row j to pivot p at p * n + j), so neighbouring threads read
// neighbouring values.

#include "index/space.cuh"

// SSS_MAX_PIVOTS (src/runtime/abi.rs): pivots per table at most.

struct SssShared {
    unsigned long long count;
    unsigned long long evals;
    long long lo, hi;
    double dq[SSS_MAX_PIVOTS];    // the query's distance to each pivot
    double kq[SSS_MAX_PIVOTS];    // and its key
};

__device__ void sss_scan(SssShared& sh, const float* q, double r, bool write, unsigned cap,
                         unsigned* out_id, double* out_key, const float* __restrict__ x,
                         const unsigned* __restrict__ xid, long long n,
                         const double* __restrict__ tab, int np, const unsigned* __restrict__ pid,
                         const unsigned char* __restrict__ skip, double widest, int d,
                         int metric, double zero) {
    if (threadIdx.x == 0) {
        sh.count = 0;
        // The run of rows the first pivot leaves: |d(x, p0) - d(q, p0)| within reach.
        const double q0 = sh.dq[0];
        long long a = 0, b = n;
        while (a < b) {  // where rows reach the query's own distance to p0
            long long m = (a + b) >> 1;
            if (tab[m] < q0) a = m + 1; else b = m;
        }
        const long long at = a;
        a = 0;
        b = at;
        while (a < b) {  // first row below it that is not too far below
            long long m = (a + b) >> 1;
            if (lc_beyond(q0 - tab[m], r, q0 + tab[m])) a = m + 1; else b = m;
        }
        sh.lo = a;
        a = at;
        b = n;
        while (a < b) {  // first row above it that is too far above
            long long m = (a + b) >> 1;
            if (lc_beyond(tab[m] - q0, r, q0 + tab[m])) b = m; else a = m + 1;
        }
        sh.hi = a;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < np; p += blockDim.x)
        if (sh.dq[p] <= r) lc_emit(&sh.count, write, cap, pid[p], sh.kq[p], out_id, out_key);
    unsigned long long evals = 0;
    for (long long i = sh.lo + threadIdx.x; i < sh.hi; i += blockDim.x) {
        if (skip[i]) continue;  // a pivot, answered above
        bool out = false;
        for (int p = 1; p < np && !out; ++p) {
            const double dqp = sh.dq[p];
            const double tol = LC_SLACK * fabs(dqp + widest + r);
            const double dx = tab[p * n + i];
            out = dx < dqp - r - tol || dx > dqp + r + tol;
        }
        if (out) continue;
        double key = lc_key(metric, q, x + i, n, d, zero);
        ++evals;
        if (lc_dist(metric, key) <= r) lc_emit(&sh.count, write, cap, xid[i], key, out_id, out_key);
    }
    if (evals) atomicAdd(&sh.evals, evals);
    __syncthreads();
}

extern "C" __global__ void sss_search(const float* __restrict__ x, const unsigned* __restrict__ xid,
                                      long long n, const double* __restrict__ tab, int np,
                                      const float* __restrict__ pv,
                                      const unsigned* __restrict__ pid,
                                      const unsigned char* __restrict__ skip, double widest,
                                      IDX_TAIL_PARAMS) {
    extern __shared__ float sss_query[];
    __shared__ SssShared sh;
    idx_load_query(sss_query, queries, qids, d);
    __syncthreads();
    for (int p = threadIdx.x; p < np; p += blockDim.x) {
        double key = lc_key(metric, sss_query, pv + p, np, d, zero);
        sh.kq[p] = key;
        sh.dq[p] = lc_dist(metric, key);
    }
    if (threadIdx.x == 0) sh.evals = np;
    __syncthreads();
    unsigned* oid = out_id + (size_t)blockIdx.x * cap;
    double* okey = out_key + (size_t)blockIdx.x * cap;
    auto scan = [&](double r, bool write) {
        sss_scan(sh, sss_query, r, write, cap, oid, okey, x, xid, n, tab, np, pid, skip, widest, d,
                 metric, zero);
    };
    idx_answer(scan, &sh.count, radii, k, grow_from, counts);
    if (threadIdx.x == 0) evals[blockIdx.x] = sh.evals;
}
