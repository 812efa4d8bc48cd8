// Index construction on the GPU (docs/design/gpu-index-build.md): the List of Clusters' steps and
// the distances of items to a few reference items (SSS pivots).
//
// List of Clusters, one step per cluster, all state on the device: the items left are slots of a
// compacted dimension-major table (`cv`, row `stride`) with their ids, an alive flag and their
// running sum of distances to the centers so far. A step is two launches:
//   lc_build_scan     distance of every alive slot to the center (vectors: its row in `cbuf`;
//                     strings: lc_build_scan_lev, its id in `centers`), sums updated,
//                     each slot's order key stored and counted in a histogram of the keys; the
//                     last block to finish finds the bin `b` where the count reaches the cluster's
//                     `cut` members (everything below b is a member);
//   lc_build_collect  slots below b go to list A (all members), slots in b to list B (the
//                     boundary), the others' largest sum per block (next-center candidates); the
//                     last block to finish takes A and the smallest of B by (key, slot) as the
//                     members in order, writes them and marks them gone, and picks the next
//                     center among the other blocks' candidates and B's remainder.
// Slots keep the items' order (compaction is stable), so ties by slot are ties by index, and
// pairs compare by (total order of the distance, slot): the CPU build's (distance, index) order.
// The keys are index/space.cuh's exact keys, bit-identical to the host's, so the steps choose
// what the CPU build chooses. With `mpow` > 0 (minkowski) the distance is an approximation the
// host re-measures exactly for the chosen members.

#include "index/space.cuh"
#include "strings/myers.cuh"

#define LCB_THREADS 1024
// Bins of the key histogram (lcb_bin).
#define LCB_BINS 8192
// Pairs the last block ranks in shared memory: the largest cluster's members (src/index/build.rs
// MAX_CLUSTER - 1 fit). kernel-sim/lc_build.sh makes LCB_FAST small so that its sets reach the
// radix path as well.
#define LCB_SORT 1024
#ifndef LCB_FAST
#define LCB_FAST LCB_SORT
#endif
#define LCB_NONE 0xffffffffu

// Unsigned order of these values is f64::total_cmp's order of the doubles.
__device__ __forceinline__ unsigned long long lcb_order(double x) {
    unsigned long long u = (unsigned long long)__double_as_longlong(x);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

__device__ __forceinline__ double lcb_unorder(unsigned long long o) {
    unsigned long long u = (o >> 63) ? (o & 0x7fffffffffffffffull) : ~o;
    return __longlong_as_double((long long)u);
}

// The histogram bin of an order key, non-decreasing in the key: 0 for negative values (-0.0),
// 1 for positives below 2^-126 (0.0 among them), the last bin above 2^127, and between them the
// exponent and 5 mantissa bits (bins 1/32 of an octave wide).
__device__ __forceinline__ unsigned lcb_bin(unsigned long long o) {
    if (!(o >> 63)) return 0;
    const int e = (int)((o >> 52) & 0x7ff);
    if (e < 1023 - 126) return 1;
    if (e > 1023 + 127) return LCB_BINS - 1;
    return 2 + (unsigned)(e - (1023 - 126)) * 32 + (unsigned)((o >> 47) & 31);
}

// The distance from the row `c` (dense) to column `x` of a dimension-major table: the exact
// key's distance (lc_key, lc_dist), or with `mpow` > 0 minkowski's, approximated.
__device__ __forceinline__ double lcb_dist(int metric, double mpow, const float* c, const float* x,
                                           long long stride, int d, double zero) {
    if (mpow > 0.0) {
        double s = zero;
        for (int i = 0; i < d; ++i) s += pow(fabs((double)x[i * stride] - (double)c[i]), mpow);
        return pow(fmax(s, 0.0), 1.0 / mpow);
    }
    return lc_dist(metric, lc_key(metric, c, x, stride, d, zero));
}

// (ka, sa) before (kb, sb): by key, then slot.
__device__ __forceinline__ bool lcb_less(unsigned long long ka, unsigned sa, unsigned long long kb,
                                         unsigned sb) {
    return ka < kb || (ka == kb && sa < sb);
}

// Whether (ka, sa) ranks above (kb, sb) for the next center: larger sum, ties to the smaller slot.
__device__ __forceinline__ bool lcb_better(unsigned long long ka, unsigned sa,
                                           unsigned long long kb, unsigned sb) {
    return ka > kb || (ka == kb && sa < sb);
}

// Slot `s` as a next-center candidate against the thread's best so far (by its sum).
__device__ __forceinline__ void lcb_offer(const double* sums, unsigned s,
                                          unsigned long long& best_k, unsigned& best_s) {
    const unsigned long long o = lcb_order(sums[s]);
    if (lcb_better(o, s, best_k, best_s)) {
        best_k = o;
        best_s = s;
    }
}

// Reduces the block's (key, slot) candidates in shared memory to entry 0. blockDim.x is a power
// of two.
__device__ void lcb_reduce_best(unsigned long long* k, unsigned* s) {
    for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half && lcb_better(k[threadIdx.x + half], s[threadIdx.x + half],
                                                   k[threadIdx.x], s[threadIdx.x])) {
            k[threadIdx.x] = k[threadIdx.x + half];
            s[threadIdx.x] = s[threadIdx.x + half];
        }
        __syncthreads();
    }
}

// Whether this block is the last of the grid to get here (every block's global writes before
// the call are visible to it then). `done` is reset by the last block.
__device__ bool lcb_last_block(unsigned* done, bool* flag) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *flag = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    const bool last = *flag;
    if (last) {
        __threadfence();
        if (threadIdx.x == 0) *done = 0;
    }
    return last;
}

// Distances of the `len` slots to the current center (alive slots only; `dist(s)` measures
// slot s): sums updated, each slot's order key in keys[slot] and, with cut > 0, counted in
// `hist` (LCB_BINS, zero on entry and again on exit). The last block writes *cut_bin: the bin
// where the count reaches `cut`.
template <class Dist>
__device__ void lcb_scan(Dist dist, const unsigned char* __restrict__ alive,
                         double* __restrict__ sums, long long len, int cut,
                         unsigned long long* __restrict__ keys, unsigned* hist, long long* cut_bin,
                         unsigned* done) {
    __shared__ unsigned sh[LCB_BINS];
    __shared__ unsigned run[LCB_THREADS];
    __shared__ unsigned long long part[32];
    __shared__ bool flag;
    if (cut > 0)
        for (int i = threadIdx.x; i < LCB_BINS; i += blockDim.x) sh[i] = 0;
    __syncthreads();
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < len; s += step) {
        if (!alive[s]) continue;
        const double ds = dist(s);
        sums[s] = __dadd_rn(sums[s], ds);
        const unsigned long long key = lcb_order(ds);
        keys[s] = key;
        if (cut > 0) atomicAdd(&sh[lcb_bin(key)], 1u);
    }
    if (cut == 0) return;
    __syncthreads();
    for (int i = threadIdx.x; i < LCB_BINS; i += blockDim.x)
        if (sh[i]) atomicAdd(&hist[i], sh[i]);
    if (!lcb_last_block(done, &flag)) return;
    // The last block: the whole histogram in shared memory (cleared in global memory for the
    // next step); each thread totals a run of bins, 32 threads total runs of those, and one
    // thread walks the three levels down to the bin.
    for (int i = threadIdx.x; i < LCB_BINS; i += blockDim.x) {
        sh[i] = ((volatile unsigned*)hist)[i];
        hist[i] = 0;
    }
    __syncthreads();
    const int per1 = LCB_BINS / blockDim.x;
    {
        unsigned t = 0;
        for (int i = 0; i < per1; ++i) t += sh[threadIdx.x * per1 + i];
        run[threadIdx.x] = t;
    }
    __syncthreads();
    const int groups = blockDim.x < 32 ? blockDim.x : 32, per2 = blockDim.x / groups;
    if ((int)threadIdx.x < groups) {
        unsigned long long t = 0;
        for (int i = 0; i < per2; ++i) t += run[threadIdx.x * per2 + i];
        part[threadIdx.x] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned long long want = (unsigned long long)cut;
        unsigned long long below = 0;
        int g = 0;
        while (g + 1 < groups && below + part[g] < want) below += part[g++];
        int t = g * per2;
        while (t + 1 < (g + 1) * per2 && below + run[t] < want) below += run[t++];
        int b = t * per1;
        while (b + 1 < (t + 1) * per1 && below + sh[b] < want) below += sh[b++];
        *cut_bin = b;
    }
}

// The scan over vectors: the center's row in `cbuf`, read by every thread alike (one cached
// load per warp, so no dimension limit comes from shared memory).
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_scan(const float* __restrict__ cv, long long stride, int d, int metric, double mpow,
              double zero, const float* __restrict__ cbuf,
              const unsigned char* __restrict__ alive, double* __restrict__ sums, long long len,
              int cut, unsigned long long* __restrict__ keys, unsigned* hist, long long* cut_bin,
              unsigned* done) {
    lcb_scan([&](long long s) { return lcb_dist(metric, mpow, cbuf, cv + s, stride, d, zero); },
             alive, sums, len, cut, keys, hist, cut_bin, done);
}

// The scan over strings (levenshtein): item i is chars[offs[i]..offs[i + 1]) (code points), slot
// s holds item ids[s], and the center is item centers[step]. Every pair has a string of at most
// 64 chars (the host sends no set with two longer ones), Myers' pattern.
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_scan_lev(const unsigned* __restrict__ chars, const unsigned* __restrict__ offs,
                  const unsigned* __restrict__ ids, const unsigned* __restrict__ centers,
                  long long step, const unsigned char* __restrict__ alive,
                  double* __restrict__ sums, long long len, int cut,
                  unsigned long long* __restrict__ keys, unsigned* hist, long long* cut_bin,
                  unsigned* done) {
    const unsigned c = centers[step], sc = offs[c], lc = offs[c + 1] - sc;
    lcb_scan([&](long long s) {
                 const unsigned x = ids[s], sx = offs[x];
                 return (double)myers_distance(chars, sc, lc, sx, offs[x + 1] - sx);
             },
             alive, sums, len, cut, keys, hist, cut_bin, done);
}

// The r-th smallest (1-based) of the `n` pairs (key, slot) in global memory, by (key, slot): a
// radix select by the whole block, 8 bits a pass (8 passes over the key, 4 over the slot). The
// result is written to *tk, *ts (shared).
__device__ void lcb_select_rth(const unsigned long long* key, const unsigned* slot, unsigned n,
                               unsigned r, unsigned* count, unsigned long long* tk, unsigned* ts,
                               unsigned* rem) {
    if (threadIdx.x == 0) {
        *tk = 0;
        *ts = 0;
        *rem = r;
    }
    for (int pass = 0; pass < 12; ++pass) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) count[i] = 0;
        __syncthreads();
        const unsigned long long pk = *tk;
        const unsigned ps = *ts;
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
            const unsigned long long k = ((volatile unsigned long long*)key)[i];
            const unsigned s = ((volatile unsigned*)slot)[i];
            bool match;
            unsigned digit;
            if (pass < 8) {
                match = pass == 0 || (k >> (64 - 8 * pass)) == (pk >> (64 - 8 * pass));
                digit = (unsigned)(k >> (56 - 8 * pass)) & 255;
            } else {
                const int p = pass - 8;
                match = k == pk && (p == 0 || (s >> (32 - 8 * p)) == (ps >> (32 - 8 * p)));
                digit = (s >> (24 - 8 * p)) & 255;
            }
            if (match) atomicAdd(&count[digit], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned below = 0, digit = 0;
            while (digit < 255 && below + count[digit] < *rem) below += count[digit++];
            *rem -= below;
            if (pass < 8) *tk |= (unsigned long long)digit << (56 - 8 * pass);
            else *ts |= digit << (24 - 8 * (pass - 8));
        }
        __syncthreads();
    }
}

// Per alive slot, by the bin of its key against *cut_bin (cut > 0): below, to list A (ak, as);
// in it, to list B (bk, bs); above (or cut == 0), a next-center candidate (the block's best sum
// goes to best_key/best_slot[blockIdx.x]). counts[0], counts[1]: the lists' lengths; counts[2]:
// blocks done (all zero on entry and again on exit). The last block: the cut smallest of A and B
// by (key, slot) become members[start..start + cut) (ids) and mdist (distances), in order, and
// their slots are marked gone; with next >= 0, the best candidate of the blocks and of B's rest
// becomes center `next` (centers[next], its row in cbuf, its slot marked gone).
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_collect(const unsigned long long* __restrict__ keys, unsigned char* alive,
                 const double* __restrict__ sums, long long len, int cut,
                 const long long* __restrict__ cut_bin, unsigned long long* ak, unsigned* as,
                 unsigned long long* bk, unsigned* bs, unsigned* counts,
                 unsigned long long* best_key, unsigned* best_slot,
                 const unsigned* __restrict__ ids, unsigned* __restrict__ members,
                 double* __restrict__ mdist, long long start, const float* __restrict__ cv,
                 long long stride, int d, float* __restrict__ cbuf,
                 unsigned* __restrict__ centers, long long next) {
    __shared__ unsigned long long rk[LCB_THREADS];
    __shared__ unsigned rs[LCB_THREADS];
    __shared__ unsigned long long sk[LCB_SORT];
    __shared__ unsigned ss[LCB_SORT];
    __shared__ unsigned count[256];
    __shared__ unsigned long long tk;
    __shared__ unsigned ts, rem, taken;
    __shared__ bool flag;
    const long long b = cut > 0 ? *cut_bin : -1;
    unsigned long long best_k = 0;
    unsigned best_s = LCB_NONE;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < len; s += step) {
        if (!alive[s]) continue;
        if (b >= 0) {
            const unsigned long long k = keys[s];
            const long long bin = lcb_bin(k);
            if (bin < b) {
                const unsigned at = atomicAdd(&counts[0], 1u);
                ak[at] = k;
                as[at] = (unsigned)s;
                continue;
            }
            if (bin == b) {
                const unsigned at = atomicAdd(&counts[1], 1u);
                bk[at] = k;
                bs[at] = (unsigned)s;
                continue;
            }
        }
        lcb_offer(sums, (unsigned)s, best_k, best_s);
    }
    rk[threadIdx.x] = best_k;
    rs[threadIdx.x] = best_s;
    __syncthreads();
    lcb_reduce_best(rk, rs);
    if (threadIdx.x == 0) {
        best_key[blockIdx.x] = rk[0];
        best_slot[blockIdx.x] = rs[0];
    }
    if (!lcb_last_block(&counts[2], &flag)) return;
    // The last block. The candidates of every block first.
    best_k = 0;
    best_s = LCB_NONE;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
        const unsigned long long o = ((volatile unsigned long long*)best_key)[i];
        const unsigned s = ((volatile unsigned*)best_slot)[i];
        if (lcb_better(o, s, best_k, best_s)) {
            best_k = o;
            best_s = s;
        }
    }
    if (cut > 0) {
        const unsigned na = ((volatile unsigned*)counts)[0], nb = ((volatile unsigned*)counts)[1];
        // The members: A whole (na < cut) and B's cut - na smallest. With few pairs, all of them
        // ranked; otherwise B's (cut - na)-th smallest found first and only the members ranked.
        const bool all = na + nb <= LCB_FAST;
        if (!all) lcb_select_rth(bk, bs, nb, (unsigned)cut - na, count, &tk, &ts, &rem);
        if (threadIdx.x == 0) taken = na;
        __syncthreads();
        for (unsigned i = threadIdx.x; i < na; i += blockDim.x) {
            sk[i] = ((volatile unsigned long long*)ak)[i];
            ss[i] = ((volatile unsigned*)as)[i];
        }
        for (unsigned i = threadIdx.x; i < nb; i += blockDim.x) {
            const unsigned long long k = ((volatile unsigned long long*)bk)[i];
            const unsigned s = ((volatile unsigned*)bs)[i];
            if (all) {
                sk[na + i] = k;
                ss[na + i] = s;
            } else if (!lcb_less(tk, ts, k, s)) {
                const unsigned at = atomicAdd(&taken, 1u);
                sk[at] = k;
                ss[at] = s;
            } else {
                lcb_offer(sums, s, best_k, best_s);
            }
        }
        __syncthreads();
        const unsigned m = all ? na + nb : (unsigned)cut;
        for (unsigned i = threadIdx.x; i < m; i += blockDim.x) {
            const unsigned long long k = sk[i];
            const unsigned s = ss[i];
            unsigned rank = 0;
            for (unsigned j = 0; j < m; ++j) rank += lcb_less(sk[j], ss[j], k, s);
            if (rank < (unsigned)cut) {
                members[start + rank] = ids[s];
                mdist[start + rank] = lcb_unorder(k);
                alive[s] = 0;
            } else {
                lcb_offer(sums, s, best_k, best_s);
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        counts[0] = 0;
        counts[1] = 0;
    }
    if (next < 0) return;
    rk[threadIdx.x] = best_k;
    rs[threadIdx.x] = best_s;
    __syncthreads();
    lcb_reduce_best(rk, rs);
    const unsigned slot = rs[0];
    if (slot == LCB_NONE) return;
    for (int i = threadIdx.x; i < d; i += blockDim.x) cbuf[i] = cv[(long long)i * stride + slot];
    if (threadIdx.x == 0) {
        centers[next] = ids[slot];
        alive[slot] = 0;
    }
}

// Stable compaction: new slot j takes old slot keep[j] (its column, id and sum) and is alive.
extern "C" __global__ void lc_build_gather(const float* __restrict__ cv, long long stride,
                                           const unsigned* __restrict__ ids,
                                           const double* __restrict__ sums,
                                           const unsigned* __restrict__ keep, long long nkeep,
                                           int d, float* __restrict__ ncv, long long nstride,
                                           unsigned* __restrict__ nids, double* __restrict__ nsums,
                                           unsigned char* __restrict__ nalive) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nkeep) return;
    const unsigned s = keep[j];
    for (int i = 0; i < d; ++i) ncv[(long long)i * nstride + j] = cv[(long long)i * stride + s];
    nids[j] = ids[s];
    nsums[j] = sums[s];
    nalive[j] = 1;
}

// Distances of `count` items (columns of the dimension-major table `x`, row `stride`) to the
// reference row blockIdx.y of the row-major `refs`: out[blockIdx.y * count + i] (SSS pivot
// selection and table).
extern "C" __global__ void lc_build_to_refs(const float* __restrict__ x, long long stride,
                                            long long count, const float* __restrict__ refs,
                                            int d, int metric, double mpow, double zero,
                                            double* __restrict__ out) {
    DYNAMIC_SHARED(float, lcb_ref);
    for (int i = threadIdx.x; i < d; i += blockDim.x) lcb_ref[i] = refs[(long long)blockIdx.y * d + i];
    __syncthreads();
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= count) return;
    out[(long long)blockIdx.y * count + j] = lcb_dist(metric, mpow, lcb_ref, x + j, stride, d, zero);
}
