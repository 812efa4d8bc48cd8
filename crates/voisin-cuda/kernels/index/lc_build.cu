// Index construction on the GPU (docs/design/gpu-index-build.md): the List of Clusters' steps and
// the distances of items to a few reference items (SSS pivots).
//
// List of Clusters, one step per cluster, all state on the device: the items left are slots of a
// compacted dimension-major table (`cv`, row `stride`) with their ids, an alive flag and their
// running sum of distances to the centers so far. A step is
//   lc_build_scan    distance of every alive slot to the center (held in `cbuf`), sums updated,
//                    each block's `take` nearest (key, slot) pairs;
//   lc_build_select  the same cut over the blocks' lists, repeated until one block holds them all,
//                    whose last launch (`place`) writes the cluster's members and their distances
//                    and marks them gone;
//   lc_build_argmax  per block, the alive slot with the largest sum (ties to the smaller slot);
//   lc_build_next    the best of those: the next center, copied to `cbuf` and marked gone.
// Slots keep the items' order (compaction is stable), so ties by slot are ties by index, and
// pairs compare by (total order of the distance, slot): the CPU build's (distance, index) order.
// The keys are index/space.cuh's exact keys, bit-identical to the host's, so the steps choose
// what the CPU build chooses. With `mpow` > 0 (minkowski) the distance is an approximation the
// host re-measures exactly for the chosen members.

#include "index/space.cuh"

#define LCB_THREADS 1024
// Pairs one block sorts (src/index/build.rs CHUNK); kernel-sim/lc_build.sh makes it small.
#ifndef LCB_CHUNK
#define LCB_CHUNK 2048
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

// One compare-exchange of a bitonic network: k[lo] <= k[hi] afterwards when `asc`, else >=.
__device__ __forceinline__ void lcb_exchange(unsigned long long* k, unsigned* s, int lo, int hi,
                                             bool asc) {
    if (lcb_less(k[hi], s[hi], k[lo], s[lo]) == asc) {
        unsigned long long tk = k[lo]; k[lo] = k[hi]; k[hi] = tk;
        unsigned ts = s[lo]; s[lo] = s[hi]; s[hi] = ts;
    }
}

// Leaves the `take` smallest of the LCB_CHUNK pairs, ascending, in k[0..take), s[0..take), by the
// whole block (bitonic top-k): runs of p = take rounded up to a power of two are sorted,
// alternately ascending and descending; then, halving, the p smallest of an ascending and a
// descending run are their elementwise minima, a bitonic run that one merge sorts (about half the
// work of sorting the chunk for p = 64).
__device__ void lcb_topk(unsigned long long* k, unsigned* s, int take) {
    int p = 1;
    while (p < take) p <<= 1;
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (LCB_CHUNK >> 1); i += blockDim.x) {
                int lo = 2 * i - (i & (stride - 1));
                lcb_exchange(k, s, lo, lo + stride, (lo & size) == 0);
            }
            __syncthreads();
        }
    }
    // Live runs start at multiples of gap * p; run t of a level pairs with run t + 1 (t even).
    for (int gap = 1; gap * p < LCB_CHUNK; gap <<= 1) {
        const int span = gap * p, pairs = LCB_CHUNK / (2 * span);
        for (int i = threadIdx.x; i < pairs * p; i += blockDim.x) {
            const int a = 2 * (i / p) * span + i % p, b = a + span;
            if (lcb_less(k[b], s[b], k[a], s[a])) {
                k[a] = k[b];
                s[a] = s[b];
            }
        }
        __syncthreads();
        for (int stride = p >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < pairs * (p >> 1); i += blockDim.x) {
                const int t = i / (p >> 1), j = i % (p >> 1);
                const int lo = 2 * t * span + 2 * j - (j & (stride - 1));
                lcb_exchange(k, s, lo, lo + stride, (t & 1) == 0);
            }
            __syncthreads();
        }
    }
}

// Distances of the `len` slots to the center in `cbuf` (alive slots only), sums updated; block b
// writes its `take` nearest pairs (padded with (~0, LCB_NONE)) to out_key/out_slot + b * take.
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_scan(const float* __restrict__ cv, long long stride, const unsigned char* __restrict__ alive,
              double* __restrict__ sums, long long len, int d, int metric, double mpow,
              double zero, const float* __restrict__ cbuf, int take,
              unsigned long long* __restrict__ out_key, unsigned* __restrict__ out_slot) {
    __shared__ unsigned long long sk[LCB_CHUNK];
    __shared__ unsigned ss[LCB_CHUNK];
    DYNAMIC_SHARED(float, lcb_center);
    const float* c = lcb_center;
    for (int i = threadIdx.x; i < d; i += blockDim.x) lcb_center[i] = cbuf[i];
    __syncthreads();
    const long long base = (long long)blockIdx.x * LCB_CHUNK;
    for (int j = threadIdx.x; j < LCB_CHUNK; j += blockDim.x) {
        const long long s = base + j;
        unsigned long long key = ~0ull;
        unsigned slot = LCB_NONE;
        if (s < len && alive[s]) {
            const double dist = lcb_dist(metric, mpow, c, cv + s, stride, d, zero);
            sums[s] = __dadd_rn(sums[s], dist);
            key = lcb_order(dist);
            slot = (unsigned)s;
        }
        sk[j] = key;
        ss[j] = slot;
    }
    __syncthreads();
    if (take == 0) return;
    lcb_topk(sk, ss, take);
    for (int j = threadIdx.x; j < take; j += blockDim.x) {
        out_key[(long long)blockIdx.x * take + j] = sk[j];
        out_slot[(long long)blockIdx.x * take + j] = ss[j];
    }
}

// The `take` smallest pairs of each LCB_CHUNK of the `len` input pairs, as lc_build_scan writes
// them. With `members` (one block, len <= LCB_CHUNK): the cluster's first `take` pairs become
// members[start..start + take) (the slots' ids) and mdist (their distances), and their slots
// are marked gone.
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_select(const unsigned long long* __restrict__ in_key, const unsigned* __restrict__ in_slot,
                long long len, int take, unsigned long long* __restrict__ out_key,
                unsigned* __restrict__ out_slot, const unsigned* __restrict__ ids,
                unsigned char* __restrict__ alive, unsigned* __restrict__ members,
                double* __restrict__ mdist, long long start) {
    __shared__ unsigned long long sk[LCB_CHUNK];
    __shared__ unsigned ss[LCB_CHUNK];
    const long long base = (long long)blockIdx.x * LCB_CHUNK;
    for (int j = threadIdx.x; j < LCB_CHUNK; j += blockDim.x) {
        const long long s = base + j;
        sk[j] = s < len ? in_key[s] : ~0ull;
        ss[j] = s < len ? in_slot[s] : LCB_NONE;
    }
    __syncthreads();
    lcb_topk(sk, ss, take);
    for (int j = threadIdx.x; j < take; j += blockDim.x) {
        if (members) {
            const unsigned slot = ss[j];
            members[start + j] = ids[slot];
            mdist[start + j] = lcb_unorder(sk[j]);
            alive[slot] = 0;
        } else {
            out_key[(long long)blockIdx.x * take + j] = sk[j];
            out_slot[(long long)blockIdx.x * take + j] = ss[j];
        }
    }
}

// Whether (ka, sa) ranks above (kb, sb) for the next center: larger sum, ties to the smaller slot.
__device__ __forceinline__ bool lcb_better(unsigned long long ka, unsigned sa,
                                           unsigned long long kb, unsigned sb) {
    return ka > kb || (ka == kb && sa < sb);
}

// Reduces the block's (key, slot) candidates in shared memory to entry 0.
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

// Per block (grid-stride over the slots), the alive slot with the largest sum: best_key[b],
// best_slot[b] (LCB_NONE when the block saw none). blockDim.x is a power of two.
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_argmax(const double* __restrict__ sums, const unsigned char* __restrict__ alive,
                long long len, unsigned long long* __restrict__ best_key,
                unsigned* __restrict__ best_slot) {
    __shared__ unsigned long long sk[LCB_THREADS];
    __shared__ unsigned ss[LCB_THREADS];
    unsigned long long bk = 0;
    unsigned bs = LCB_NONE;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < len;
         s += (long long)gridDim.x * blockDim.x) {
        if (!alive[s]) continue;
        const unsigned long long k = lcb_order(sums[s]);
        if (lcb_better(k, (unsigned)s, bk, bs)) {
            bk = k;
            bs = (unsigned)s;
        }
    }
    sk[threadIdx.x] = bk;
    ss[threadIdx.x] = bs;
    __syncthreads();
    lcb_reduce_best(sk, ss);
    if (threadIdx.x == 0) {
        best_key[blockIdx.x] = sk[0];
        best_slot[blockIdx.x] = ss[0];
    }
}

// One block: the best of the `nb` blocks' candidates becomes center `step` (centers[step], its
// row copied to cbuf, its slot marked gone). blockDim.x is a power of two.
extern "C" __global__ void __launch_bounds__(LCB_THREADS)
lc_build_next(const unsigned long long* __restrict__ best_key,
              const unsigned* __restrict__ best_slot, int nb, const float* __restrict__ cv,
              long long stride, int d, const unsigned* __restrict__ ids,
              unsigned char* __restrict__ alive, float* __restrict__ cbuf,
              unsigned* __restrict__ centers, long long step) {
    __shared__ unsigned long long sk[LCB_THREADS];
    __shared__ unsigned ss[LCB_THREADS];
    unsigned long long bk = 0;
    unsigned bs = LCB_NONE;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        if (lcb_better(best_key[b], best_slot[b], bk, bs)) {
            bk = best_key[b];
            bs = best_slot[b];
        }
    }
    sk[threadIdx.x] = bk;
    ss[threadIdx.x] = bs;
    __syncthreads();
    lcb_reduce_best(sk, ss);
    const unsigned slot = ss[0];
    if (slot == LCB_NONE) return;
    for (int i = threadIdx.x; i < d; i += blockDim.x) cbuf[i] = cv[(long long)i * stride + slot];
    if (threadIdx.x == 0) {
        centers[step] = ids[slot];
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
