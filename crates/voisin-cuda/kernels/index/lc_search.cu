// List of Clusters search ([Barrientos13] §4.1.2 range, §4.2.2 increasing-radius k-NN): one block per
// query, the query in shared memory, the centers scanned in tiles of LC_TILE with the covering
// radius and early-stop rules, the members of every cluster that may hold an answer scanned by one
// warp each. A tile's surviving clusters go to a shared list of LC_TILE entries, so the number of
// centers is unbounded (the seed kept one shared flag per center).
//
// Exactness: every key is the exact f64 key of voisin::metric::exact::vector_key, computed with the
// same operations in the same order, each rounded on its own (the _rn intrinsics forbid the fused
// multiply-adds Rust never forms), so keys and distances are bit-identical to the reference's; the
// pruning tests are those of voisin-index's List of Clusters on these same values, with the same
// rounding allowance (LC_SLACK, voisin-index's FLOAT_SLACK). Nothing is decided on an approximate
// value.
//
// Layout: centers and members are stored dimension-major (value i of item j at i * count + j) so a
// warp reading 32 consecutive items reads 128 consecutive bytes per dimension. Members are in the
// index's order: cluster by cluster, each sorted by distance to its center.

#include "index/space.cuh"

#define LC_TILE 1024

struct LcShared {
    unsigned long long count;  // answers found (all of them, also past the slot capacity)
    unsigned long long evals;  // distance evaluations
    int stop;                  // first cluster whose ball holds the query ball strictly
    int nlist;
    int list[LC_TILE];         // clusters of the tile whose members must be scanned
    double dc[LC_TILE];        // their center's distance to the query
};

// One range search of radius r for the query in shared memory; sh.count holds the number of answers
// afterwards. With `write`, the first `cap` answers go to out_id/out_key (in no order).
__device__ void lc_scan(LcShared& sh, const float* q, double r, bool write, unsigned cap,
                        unsigned* out_id, double* out_key, const float* __restrict__ ctr,
                        const double* __restrict__ crad, const unsigned* __restrict__ cid,
                        const unsigned* __restrict__ cbeg, const float* __restrict__ mem,
                        const double* __restrict__ mdist, const unsigned* __restrict__ mid,
                        int nc, long long nm, int d, int metric, double zero) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (threadIdx.x == 0) {
        sh.count = 0;
        sh.stop = nc;
    }
    __syncthreads();
    unsigned long long evals = 0;
    for (int t0 = 0; t0 < nc; t0 += LC_TILE) {
        if (t0 > sh.stop) break;  // uniform: sh.stop was last written before a barrier
        if (threadIdx.x == 0) sh.nlist = 0;
        __syncthreads();
        int t1 = min(nc, t0 + LC_TILE);
        for (int j = t0 + threadIdx.x; j < t1; j += blockDim.x) {
            double key = lc_key(metric, q, ctr + j, nc, d, zero);
            ++evals;
            double dc = lc_dist(metric, key), R = crad[j];
            double reach = R + r + LC_SLACK * fabs(R + r);
            if (!(dc <= reach)) continue;  // neither the center nor a member can answer
            if (dc <= r) lc_emit(&sh.count, write, cap, cid[j], key, out_id, out_key);
            if (!lc_beyond(dc - R, r, dc + R)) {
                int at = atomicAdd(&sh.nlist, 1);
                sh.list[at] = j;
                sh.dc[at] = dc;
            }
            // Early stop: the query ball lies strictly inside this cluster's ball, and every
            // later item is at least the covering radius away from this center.
            if (dc + r + LC_SLACK * fabs(dc + r) < R) atomicMin(&sh.stop, j);
        }
        __syncthreads();
        for (int e = warp; e < sh.nlist; e += nwarps) {
            int j = sh.list[e];
            if (j > sh.stop) continue;
            double dq = sh.dc[e];
            // Members are sorted by distance to the center: only the ring of those within r of
            // the query's distance can answer (the same two tests as the CPU walk).
            long long lo = cbeg[j], hi = cbeg[j + 1];
            long long a = lo, b = hi;
            while (a < b) {  // first member not ruled out as too close to the center
                long long m = (a + b) >> 1;
                double x = mdist[m];
                if (lc_beyond(dq - x, r, dq + x)) a = m + 1; else b = m;
            }
            lo = a;
            b = hi;
            while (a < b) {  // first member ruled out as too far from the center
                long long m = (a + b) >> 1;
                double x = mdist[m];
                if (lc_beyond(x - dq, r, dq + x)) b = m; else a = m + 1;
            }
            hi = a;
            for (long long p = lo + lane; p < hi; p += 32) {
                double key = lc_key(metric, q, mem + p, nm, d, zero);
                ++evals;
                if (lc_dist(metric, key) <= r)
                    lc_emit(&sh.count, write, cap, mid[p], key, out_id, out_key);
            }
        }
        __syncthreads();
    }
    if (evals) atomicAdd(&sh.evals, evals);
    __syncthreads();
}

extern "C" __global__ void lc_search(const float* __restrict__ ctr, const double* __restrict__ crad,
                                     const unsigned* __restrict__ cid,
                                     const unsigned* __restrict__ cbeg,
                                     const float* __restrict__ mem,
                                     const double* __restrict__ mdist,
                                     const unsigned* __restrict__ mid, int nc, long long nm,
                                     IDX_TAIL_PARAMS) {
    extern __shared__ float lc_query[];
    __shared__ LcShared sh;
    idx_load_query(lc_query, queries, qids, d);
    if (threadIdx.x == 0) sh.evals = 0;
    __syncthreads();
    unsigned* oid = out_id + (size_t)blockIdx.x * cap;
    double* okey = out_key + (size_t)blockIdx.x * cap;
    auto scan = [&](double r, bool write) {
        lc_scan(sh, lc_query, r, write, cap, oid, okey, ctr, crad, cid, cbeg, mem, mdist, mid, nc,
                nm, d, metric, zero);
    };
    idx_answer(scan, &sh.count, radii, k, grow_from, counts);
    if (threadIdx.x == 0) evals[blockIdx.x] = sh.evals;
}

// Sorts each row's answers by (key, index) and writes the first `take` (all when take == 0) as
// indices and f32 distances at dense[offsets[b]...]. Row b's slots are in the main buffer, or in
// the overflow buffer at row ovf_row[b] when that is >= 0 (a row that outgrew the main slots and
// was run again). Slot capacities are powers of two, so the padded bitonic sort fits in place:
// in shared memory when the padded row has at most smem_rows entries, else in the slots.
__device__ void lc_bitonic(double* key, unsigned* id, unsigned n2) {
    for (unsigned size = 2; size <= n2; size <<= 1) {
        for (unsigned stride = size >> 1; stride > 0; stride >>= 1) {
            for (unsigned i = threadIdx.x; i < n2 / 2; i += blockDim.x) {
                unsigned lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                bool up = (lo & size) == 0;
                double ka = key[lo], kb = key[hi];
                unsigned ia = id[lo], ib = id[hi];
                bool greater = ka > kb || (ka == kb && ia > ib);
                if (greater == up) {
                    key[lo] = kb;
                    key[hi] = ka;
                    id[lo] = ib;
                    id[hi] = ia;
                }
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void lc_sort_rows(double* __restrict__ out_key, unsigned* __restrict__ out_id,
                                        unsigned cap, const unsigned long long* __restrict__ counts,
                                        double* __restrict__ ovf_key, unsigned* __restrict__ ovf_id,
                                        unsigned ovf_cap, const int* __restrict__ ovf_row,
                                        const unsigned long long* __restrict__ offsets,
                                        unsigned long long take, int metric, unsigned smem_rows,
                                        unsigned* __restrict__ dense_id,
                                        float* __restrict__ dense_dist) {
    DYNAMIC_SHARED(double, lc_sort_smem);
    const int b = blockIdx.x;
    const int o = ovf_row ? ovf_row[b] : -1;
    double* key = o >= 0 ? ovf_key + (size_t)o * ovf_cap : out_key + (size_t)b * cap;
    unsigned* id = o >= 0 ? ovf_id + (size_t)o * ovf_cap : out_id + (size_t)b * cap;
    const unsigned n = (unsigned)counts[b];
    unsigned n2 = 1;
    while (n2 < n) n2 <<= 1;
    double* k2 = key;
    unsigned* i2 = id;
    if (n2 <= smem_rows) {
        k2 = lc_sort_smem;
        i2 = (unsigned*)(lc_sort_smem + smem_rows);
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
            k2[i] = key[i];
            i2[i] = id[i];
        }
    }
    for (unsigned i = n + threadIdx.x; i < n2; i += blockDim.x) {
        k2[i] = LC_INF;
        i2[i] = 0xffffffffu;
    }
    __syncthreads();
    lc_bitonic(k2, i2, n2);
    unsigned long long m = take ? min((unsigned long long)n, take) : n;
    unsigned long long at = offsets[b];
    for (unsigned i = threadIdx.x; i < m; i += blockDim.x) {
        dense_id[at + i] = i2[i];
        dense_dist[at + i] = (float)lc_dist(metric, k2[i]);
    }
}
