// List of Clusters search (seed 003 §4.1.2 range, §4.2.2 increasing-radius k-NN): one block per
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

#define LC_SQEUCLIDEAN 0  // euclidean: the key is the squared distance
#define LC_CITYBLOCK 1
#define LC_CHEBYSHEV 2
#define LC_TILE 1024
#define LC_SLACK 1e-9
#define LC_INF __longlong_as_double(0x7ff0000000000000LL)

__device__ __forceinline__ double lc_key(int metric, const float* q, const float* x,
                                         long long stride, int d, double zero) {
    if (metric == LC_CHEBYSHEV) {
        double s = 0.0;
        for (int i = 0; i < d; ++i)
            s = fmax(s, fabs(__dsub_rn((double)q[i], (double)x[i * stride])));
        return s;
    }
    double s = zero;
    for (int i = 0; i < d; ++i) {
        double t = __dsub_rn((double)q[i], (double)x[i * stride]);
        s = __dadd_rn(s, metric == LC_SQEUCLIDEAN ? __dmul_rn(t, t) : fabs(t));
    }
    return s;
}

// Metric::key_to_distance.
__device__ __forceinline__ double lc_dist(int metric, double key) {
    return metric == LC_SQEUCLIDEAN ? sqrt(fmax(key, 0.0)) : key;
}

// Space::beyond: a region whose distance lower bound is `bound` lies outside `r` beyond doubt.
__device__ __forceinline__ bool lc_beyond(double bound, double r, double scale) {
    return bound > r + LC_SLACK * fabs(scale + r);
}

struct LcShared {
    unsigned long long count;  // answers found (all of them, also past the slot capacity)
    unsigned long long evals;  // distance evaluations
    int stop;                  // first cluster whose ball holds the query ball strictly
    int nlist;
    int list[LC_TILE];         // clusters of the tile whose members must be scanned
    double dc[LC_TILE];        // their center's distance to the query
};

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
    extern __shared__ double lc_sort_smem[];
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
