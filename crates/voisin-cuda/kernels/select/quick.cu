// Quick select ([Dashti13] §3.4, docs/references.md): one block per tile row keeps an unsorted running list of the row's
// kp smallest keys. Values below the list's worst key are appended to a shared-memory buffer
// behind the list; a full buffer is cut back to kp entries by quick-select, whose partitions are
// written with warp ballots (each warp takes its slots with one atomic, each lane its offset from
// the ballot's prefix), as the seed does to avoid a prefix sum.
//
// Duplicates: the partition is three-way (< pivot, == pivot, > pivot). If the wanted count falls
// among the equal keys the select stops and takes as many of them as needed; otherwise the next
// range excludes the pivot's equals, so every round shrinks the range and many equal keys can
// neither loop nor be lost.
//
// Contract (as select_block): the list holds the kp smallest of everything offered (or all of
// it); values dropped by the filter are >= the list's worst key, which only decreases. The list
// stays unsorted in memory (valid entries first, then +inf / NO_INDEX); the host sorts.

#include "common/keys.cuh"
#include "common/loads.cuh"

#define QS_LOADS 4  // float4 loads per thread in flight

// The slot of this lane's item among those its warp appends at `*counter` (every lane of the
// warp must call it; lanes with keep == false get a meaningless value).
__device__ __forceinline__ int qs_append(bool keep, int* counter) {
    unsigned b = __ballot_sync(0xffffffffu, keep);
    if (b == 0u) return 0;  // the usual case once the list is full: no shuffle, no atomic
    int lane = threadIdx.x & 31;
    int base = 0;
    if (lane == 0) base = atomicAdd(counter, __popc(b));
    base = __shfl_sync(0xffffffffu, base, 0);
    return base + __popc(b & ((1u << lane) - 1u));
}

__device__ __forceinline__ float qs_from_bits(unsigned u) {
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

// Keeps the `want` smallest of (av, ai)[0..n) and writes them to (ov, oi)[0..min(n, want)), any
// order; (bv, bi) is scratch of the same size. Returns their largest key (+inf when fewer than
// `want`). `sh` is block-shared scratch: 3 counters and a max. Called by the whole block.
__device__ float quick_select(float* av, unsigned* ai, float* bv, unsigned* bi, int n, int want,
                              float* __restrict__ ov, unsigned* __restrict__ oi, int* sh) {
    const int tid = threadIdx.x, bd = blockDim.x;
    unsigned* top = (unsigned*)(sh + 3);
    const bool full = n >= want;
    int out = 0, s = 0;
    unsigned my_max = 0u;  // order bits; 0 sorts below every float
    for (unsigned round = 1;; ++round) {
        if (n <= want) {
            for (int i = tid; i < n; i += bd) {
                ov[out + i] = av[s + i];
                oi[out + i] = ai[s + i];
                my_max = max(my_max, order_bits(av[s + i]));
            }
            break;
        }
        // Median of three pseudo-random samples: a fixed position would make sorted or periodic
        // rows take ~n rounds.
        unsigned h = (round * 2654435761u) ^ ((unsigned)n * 40503u);
        float p0 = av[s + (int)(h % (unsigned)n)];
        float p1 = av[s + (int)((h >> 11) % (unsigned)n)];
        float p2 = av[s + (int)((h >> 21) % (unsigned)n)];
        float p = fmaxf(fminf(p0, p1), fminf(fmaxf(p0, p1), p2));
        if (tid < 3) sh[tid] = 0;
        __syncthreads();
        int lt = 0, eq = 0;
        for (int i = tid; i < n; i += bd) {
            float v = av[s + i];
            lt += v < p;
            eq += v == p;
        }
        lt = __reduce_add_sync(0xffffffffu, lt);
        eq = __reduce_add_sync(0xffffffffu, eq);
        if ((tid & 31) == 0) {
            atomicAdd(&sh[0], lt);
            atomicAdd(&sh[1], eq);
        }
        __syncthreads();
        const int L = sh[0], E = sh[1];
        __syncthreads();
        if (tid < 3) sh[tid] = 0;
        __syncthreads();
        for (int i0 = 0; i0 < n; i0 += bd) {
            int i = i0 + tid;
            float v = i < n ? av[s + i] : p;
            unsigned id = i < n ? ai[s + i] : NO_INDEX;
            bool ok = i < n;
            int pl = qs_append(ok && v < p, &sh[0]);
            int pe = qs_append(ok && v == p, &sh[1]);
            int pg = qs_append(ok && v > p, &sh[2]);
            int at = v < p ? pl : (v == p ? L + pe : L + E + pg);
            if (ok) {
                bv[s + at] = v;
                bi[s + at] = id;
            }
        }
        __syncthreads();
        // (a, b) now hold the partition of the range: swap the roles of the two arrays.
        float* tv = av; av = bv; bv = tv;
        unsigned* ti = ai; ai = bi; bi = ti;
        if (L >= want) {
            n = L;
            continue;
        }
        int take = L + E >= want ? want : L + E;
        for (int i = tid; i < take; i += bd) {
            ov[out + i] = av[s + i];
            oi[out + i] = ai[s + i];
            my_max = max(my_max, order_bits(av[s + i]));
        }
        out += take;
        if (take == want) break;
        want -= take;
        s += take;
        n -= take;
    }
    if (tid == 0) *top = 0u;
    __syncthreads();
    my_max = __reduce_max_sync(0xffffffffu, my_max);
    if ((tid & 31) == 0) atomicMax(top, my_max);
    __syncthreads();
    float m = qs_from_bits(*top);
    __syncthreads();
    return full ? m : __int_as_float(0x7f800000);
}

// Arguments as select_block; list rows x kp (any order, valid entries first). cap: the entries
// each of the two shared arrays holds, >= kp + 2 * ROW_GROUP * blockDim.x. Dynamic shared memory:
// 2 * cap * 8 bytes.
extern "C" __global__ void select_quick(const float* __restrict__ tile, long long ld, int rows,
                                        int cols, int mode, const float* __restrict__ rn,
                                        const float* __restrict__ cn, unsigned row_off,
                                        unsigned col_off, int exclude_self,
                                        float* __restrict__ list_val,
                                        unsigned* __restrict__ list_idx, int kp, int cap) {
    DYNAMIC_SHARED(float, smem);
    float* av = smem;
    unsigned* ai = (unsigned*)(av + cap);
    float* bv = (float*)(ai + cap);
    unsigned* bi = (unsigned*)(bv + cap);
    __shared__ int sh[4];
    __shared__ int count;

    int r = blockIdx.x;
    if (r >= rows) return;
    float* gv = list_val + (size_t)r * kp;
    unsigned* gi = list_idx + (size_t)r * kp;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    // Valid list entries to the front of a (fill_lists leaves empty slots).
    for (int i0 = 0; i0 < kp; i0 += blockDim.x) {
        int i = i0 + threadIdx.x;
        bool ok = i < kp && gi[i] != NO_INDEX;
        int p = qs_append(ok, &count);
        if (ok) {
            av[p] = gv[i];
            ai[p] = gi[i];
        }
    }
    if (threadIdx.x == 0) sh[3] = 0;
    __syncthreads();
    int est = count;
    {
        unsigned m = 0u;
        for (int i = threadIdx.x; i < est; i += blockDim.x) m = max(m, order_bits(av[i]));
        m = __reduce_max_sync(0xffffffffu, m);
        if ((threadIdx.x & 31) == 0) atomicMax((unsigned*)&sh[3], m);
    }
    __syncthreads();
    float thr = est == kp ? qs_from_bits((unsigned)sh[3]) : __int_as_float(0x7f800000);

    const float* row = tile + (size_t)r * ld;
    unsigned self = row_off + (unsigned)r;
    const int room = cap - ROW_GROUP * (int)blockDim.x;
    const bool vec = (ld & 3) == 0;
    const int span = QS_LOADS * ROW_GROUP * blockDim.x;
    for (int start = 0; start < cols; start += span) {
        float v[QS_LOADS][ROW_GROUP];
        load_row_groups<QS_LOADS>(v, row, start, threadIdx.x, blockDim.x, cols, vec);
#pragma unroll
        for (int j = 0; j < QS_LOADS; ++j) {
            bool any = false;
#pragma unroll
            for (int e = 0; e < ROW_GROUP; ++e) {
                int c = start + (j * blockDim.x + threadIdx.x) * ROW_GROUP + e;
                unsigned g = col_off + (unsigned)c;
                float key = 0.0f;
                bool ok = c < cols && !(exclude_self && g == self);
                if (ok) key = tile_key(mode, v[j][e], rn, cn, r, c);
                ok = ok && key < thr;
                int p = qs_append(ok, &count);
                if (ok) {
                    av[p] = key;
                    ai[p] = g;
                }
                any |= ok;
            }
            // Uniform upper bound of the fill; the flush reads the true count, which no thread
            // changes between this barrier and the flush.
            est += ROW_GROUP * __syncthreads_count(any);
            if (est > room) {
                int n = count;
                float t = quick_select(av, ai, bv, bi, n, kp, gv, gi, sh);
                int kept = n < kp ? n : kp;
                for (int i = threadIdx.x; i < kept; i += blockDim.x) {
                    av[i] = gv[i];
                    ai[i] = gi[i];
                }
                if (threadIdx.x == 0) count = kept;
                __syncthreads();
                thr = t;
                est = kept;
            }
        }
    }
    __syncthreads();
    int n = count;
    __syncthreads();
    int kept = n;
    if (n > kp) {
        quick_select(av, ai, bv, bi, n, kp, gv, gi, sh);
        kept = kp;
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            gv[i] = av[i];
            gi[i] = ai[i];
        }
    }
    for (int i = kept + threadIdx.x; i < kp; i += blockDim.x) {
        gv[i] = __int_as_float(0x7f800000);
        gi[i] = NO_INDEX;
    }
}
