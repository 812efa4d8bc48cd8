// Bitonic sorting of (key, index) pairs in shared memory by a whole block or one warp, and the
// merge of a buffer of candidates into a sorted running list (select/block.cu, heap.cu,
// fused_filter.cu, survivors.cu).

#pragma once
#include "common/abi.cuh"

// Who sorts together: a whole block, or one warp (its own part of shared memory).
struct BlockGroup {
    __device__ __forceinline__ int rank() const { return threadIdx.x; }
    __device__ __forceinline__ int size() const { return blockDim.x; }
    __device__ __forceinline__ void sync() const { __syncthreads(); }
};
struct WarpGroup {
    __device__ __forceinline__ int rank() const { return threadIdx.x & 31; }
    __device__ __forceinline__ int size() const { return 32; }
    __device__ __forceinline__ void sync() const { __syncwarp(); }
};

// Sorts n (a power of two) pairs ascending by key; with TIES_BY_INDEX equal keys go by index,
// so the order is total and the result does not depend on the input order. Every thread of
// `group` calls it.
template <bool TIES_BY_INDEX, class Group = BlockGroup>
__device__ void bitonic_sort(float* v, unsigned* ix, int n, Group group = Group()) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = group.rank(); i < (n >> 1); i += group.size()) {
                int lo = 2 * i - (i & (stride - 1));
                int hi = lo + stride;
                bool asc = (lo & size) == 0;
                bool greater =
                    v[lo] > v[hi] || (TIES_BY_INDEX && v[lo] == v[hi] && ix[lo] > ix[hi]);
                if (greater == asc) {
                    float tv = v[lo]; v[lo] = v[hi]; v[hi] = tv;
                    unsigned ti = ix[lo]; ix[lo] = ix[hi]; ix[hi] = ti;
                }
            }
            group.sync();
        }
    }
}

// Merges the `count` buffered entries into the sorted list. Only the filled part of the buffer
// is sorted (rounded up to a power of two, and to kp so that B[0..kp) is sorted with +inf
// padding): after the first tiles a row passes a few dozen values per tile, and sorting the
// whole buffer each time cost as much as reading the tile. The min(L[i], B[kp-1-i]) step gives
// a bitonic sequence holding the kp smallest, which one bitonic merge sorts.
__device__ void merge_into_list(float* lv, unsigned* li, float* bv, unsigned* bi, int kp,
                                int count) {
    int m = 2;
    while (m < count) m <<= 1;
    int pad = m > kp ? m : kp;
    for (int i = count + threadIdx.x; i < pad; i += blockDim.x) {
        bv[i] = __int_as_float(0x7f800000);
        bi[i] = NO_INDEX;
    }
    __syncthreads();
    bitonic_sort<false>(bv, bi, m);
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        float b = bv[kp - 1 - i];
        if (b < lv[i]) {
            lv[i] = b;
            li[i] = bi[kp - 1 - i];
        }
    }
    __syncthreads();
    for (int stride = kp >> 1; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < (kp >> 1); i += blockDim.x) {
            int lo = 2 * i - (i & (stride - 1));
            int hi = lo + stride;
            if (lv[lo] > lv[hi]) {
                float tv = lv[lo]; lv[lo] = lv[hi]; lv[hi] = tv;
                unsigned ti = li[lo]; li[lo] = li[hi]; li[hi] = ti;
            }
        }
        __syncthreads();
    }
}

// Copies n list entries (key, index) from src to dst, thread t of `threads` taking every
// threads-th: a running list between global and shared memory.
__device__ __forceinline__ void copy_list(float* dv, unsigned* di, const float* sv,
                                          const unsigned* si, int n, int t, int threads) {
    for (int i = t; i < n; i += threads) {
        dv[i] = sv[i];
        di[i] = si[i];
    }
}
