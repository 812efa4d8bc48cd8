// The cover tree's build on the GPU (src/index/cover_build.rs, docs/design/gpu-cover-tree.md):
// one level's greedy passes (voisin-index cover/nets.rs), every slot's at once. A slot is an
// active node's far items, positions b..b+m of the level's batch in ascending item order, with
// their distances to the node; the pass makes the first free item a new node, which takes every
// free item within sep, and repeats. Items whose distances to the slot's node differ by more
// than sep cannot be within sep of each other and are not measured (Space::beyond, with the
// host's rounding allowance).
//
// Out, per position: taken = the position (in the slot) of the new node that takes the item,
// plus one (its own for a new node; 0 while free), dist = the distance to it (0 for a new
// node). A slot the device cannot decide (a minkowski distance within COVER_MINK_DOUBT of sep,
// two strings over 64 chars) gets flags[slot] = 1 and is redone on the host; its answers are
// ignored.
//
// cover_net_block_*   one block a slot (slots of at most NET_BLOCK_MAX items): the free
//                     positions kept compacted in order in `list`, so the first is the next
//                     new node and each round measures only free items.
// cover_net_round_*   one launch a round over the big slots: `cur` holds each big slot's new
//                     node for rounds r (cur[r % 3]), r + 1 (built by atomicMin of the free
//                     items left) and r + 2 (reset); NET_FREE when the slot is done.

#include "index/cover.cuh"

#define NET_THREADS 256
#define NET_FREE 0xffffffffu

// The batch, the outputs and the evaluations' counter, after the items' own arguments.
#define NET_PARAMS                                                                                \
    double sep, const unsigned *__restrict__ starts, const unsigned *__restrict__ items,           \
        const double *__restrict__ dists, unsigned *__restrict__ taken,                            \
        double *__restrict__ dist, unsigned *__restrict__ flags,                                   \
        unsigned long long *__restrict__ evals

// The distance of items a and b when the device can decide whether it is within sep: sets
// `doubt` otherwise.
struct NetVecs {
    CoverVecs v;
    __device__ __forceinline__ double operator()(unsigned a, unsigned b, double sep,
                                                 bool& doubt) const {
        bool approx;
        const double d = v(a, b, approx);
        if (approx && fabs(d - sep) <= COVER_MINK_DOUBT * sep) doubt = true;
        return d;
    }
};

struct NetStrs {
    CoverStrs s;
    __device__ __forceinline__ double operator()(unsigned a, unsigned b, double sep,
                                                 bool& doubt) const {
        const double d = s.within(a, b, sep);
        if (d < 0.0) doubt = true;
        return d;
    }
};

// Whether free position j of a slot must be measured against new node c (distances dj, dc to
// the slot's node).
__device__ __forceinline__ bool net_near(double dj, double dc, double sep) {
    return !lc_beyond(fabs(dj - dc), sep, dj + dc);
}

template <class Dist>
__device__ void net_block(Dist dist_of, const unsigned* __restrict__ slots,
                          unsigned* __restrict__ list, NET_PARAMS) {
    __shared__ unsigned warp_kept[NET_THREADS / 32];
    const unsigned slot = slots[blockIdx.x];
    const unsigned b = starts[slot], m = starts[slot + 1] - b;
    unsigned* L = list + b;
    // `taken` comes zeroed from the host (src/index/cover_build.rs).
    for (unsigned i = threadIdx.x; i < m; i += blockDim.x) L[i] = i;
    __syncthreads();
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned left = m, measured = 0;
    bool doubt = false;
    while (left > 0) {
        const unsigned c = L[0];
        const unsigned xc = items[b + c];
        const double dc = dists[b + c];
        if (threadIdx.x == 0) {
            taken[b + c] = c + 1;
            dist[b + c] = 0.0;
        }
        unsigned kept = 0;
        for (unsigned base = 1; base < left; base += blockDim.x) {
            const unsigned i = base + threadIdx.x;
            unsigned j = 0;
            bool keep = false;
            if (i < left) {
                j = L[i];
                keep = true;
                if (net_near(dists[b + j], dc, sep)) {
                    ++measured;
                    const double d = dist_of(xc, items[b + j], sep, doubt);
                    if (d >= 0.0 && d <= sep) {
                        taken[b + j] = c + 1;
                        dist[b + j] = d;
                        keep = false;
                    }
                }
            }
            // The kept positions, compacted in order to the front of L (every write lands
            // below the chunk being read, and after the barrier that ends its reads).
            const unsigned mask = __ballot_sync(0xffffffffu, keep);
            if (lane == 0) warp_kept[warp] = __popc(mask);
            __syncthreads();
            unsigned before = 0, total = 0;
            for (unsigned w = 0; w < blockDim.x / 32; ++w) {
                before += w < warp ? warp_kept[w] : 0;
                total += warp_kept[w];
            }
            if (keep) L[kept + before + __popc(mask & ((1u << lane) - 1u))] = j;
            kept += total;
            __syncthreads();
        }
        left = kept;
        if (__syncthreads_or(doubt)) {
            if (threadIdx.x == 0) flags[slot] = 1;
            break;
        }
    }
    const int sum = __reduce_add_sync(0xffffffffu, (int)measured);
    if (lane == 0 && sum > 0) atomicAdd(evals, (unsigned long long)sum);
}

// Big slot k of `bigs` (K of them) holds positions bstarts[k]..bstarts[k + 1] of the big slots'
// concatenation.
template <class Dist>
__device__ void net_round(Dist dist_of, const unsigned* __restrict__ bigs,
                          const unsigned* __restrict__ bstarts, unsigned K,
                          unsigned* __restrict__ cur, unsigned r, NET_PARAMS) {
    const unsigned long long gtid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned* now = cur + (r % 3) * K;
    unsigned* next = cur + ((r + 1) % 3) * K;
    unsigned* after = cur + ((r + 2) % 3) * K;
    for (unsigned long long k = gtid; k < K; k += stride) after[k] = NET_FREE;
    unsigned measured = 0;
    const unsigned total = bstarts[K];
    for (unsigned long long t = gtid; t < total; t += stride) {
        unsigned lo = 0, hi = K;  // bstarts[lo] <= t < bstarts[hi]
        while (hi - lo > 1) {
            const unsigned mid = lo + (hi - lo) / 2;
            if (bstarts[mid] <= t) lo = mid;
            else hi = mid;
        }
        const unsigned k = lo, slot = bigs[k], b = starts[slot];
        const unsigned q = (unsigned)t - bstarts[k], c = now[k];
        if (c == NET_FREE || q < c || taken[b + q] != 0) continue;
        if (q == c) {
            taken[b + q] = c + 1;
            dist[b + q] = 0.0;
            continue;
        }
        const double dc = dists[b + c];
        if (net_near(dists[b + q], dc, sep)) {
            ++measured;
            bool doubt = false;
            const double d = dist_of(items[b + c], items[b + q], sep, doubt);
            if (doubt) flags[slot] = 1;
            if (d >= 0.0 && d <= sep) {
                taken[b + q] = c + 1;
                dist[b + q] = d;
                continue;
            }
        }
        atomicMin(&next[k], q);
    }
    const int sum = __reduce_add_sync(0xffffffffu, (int)measured);
    if ((threadIdx.x & 31) == 0 && sum > 0) atomicAdd(evals, (unsigned long long)sum);
}

#define NET_VEC_ITEMS const float *__restrict__ rows, int d, int metric, double p, double zero
#define NET_LEV_ITEMS const unsigned *__restrict__ chars, const unsigned *__restrict__ offs
#define NET_BLOCK_ARGS const unsigned *__restrict__ slots, unsigned *__restrict__ list
#define NET_ROUND_ARGS                                                                            \
    const unsigned *__restrict__ bigs, const unsigned *__restrict__ bstarts, unsigned K,           \
        unsigned *__restrict__ cur, unsigned r
#define NET_ARGS sep, starts, items, dists, taken, dist, flags, evals

extern "C" __global__ void __launch_bounds__(NET_THREADS)
    cover_net_block_vec(NET_VEC_ITEMS, NET_BLOCK_ARGS, NET_PARAMS) {
    net_block(NetVecs{CoverVecs{rows, d, metric, p, zero}}, slots, list, NET_ARGS);
}

extern "C" __global__ void __launch_bounds__(NET_THREADS)
    cover_net_block_lev(NET_LEV_ITEMS, NET_BLOCK_ARGS, NET_PARAMS) {
    net_block(NetStrs{CoverStrs{chars, offs}}, slots, list, NET_ARGS);
}

extern "C" __global__ void __launch_bounds__(NET_THREADS)
    cover_net_round_vec(NET_VEC_ITEMS, NET_ROUND_ARGS, NET_PARAMS) {
    net_round(NetVecs{CoverVecs{rows, d, metric, p, zero}}, bigs, bstarts, K, cur, r, NET_ARGS);
}

extern "C" __global__ void __launch_bounds__(NET_THREADS)
    cover_net_round_lev(NET_LEV_ITEMS, NET_ROUND_ARGS, NET_PARAMS) {
    net_round(NetStrs{CoverStrs{chars, offs}}, bigs, bstarts, K, cur, r, NET_ARGS);
}
