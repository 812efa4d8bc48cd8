// Column select for the k-NN graph: the column candidates of a tile (I, J), read in place.
// Without it the tile was transposed (a read and a write of the whole tile) so that the row
// kernel could read columns coalesced; here a block of 8 warps owns 32 consecutive columns,
// each warp reads 32 consecutive values of one row (128 bytes, coalesced) and lane c feeds
// column c's list. Lists and buffers of the 32 columns live in shared memory, so this kernel
// serves small lists only (kp <= 32, the graph's usual k); larger k keep the transpose path.
//
// Same contract as select_block: some kp smallest keys per column, ties in any order.

#include "common/keys.cuh"

#define SC_COLS 32
#define SC_WARPS 8
#define SC_GROUP 4   // rows per warp loaded before the first is used
// SC_KP (src/runtime/abi.rs): the list size, fixed: shared memory is sized for it.
#define SC_NB 64     // buffer per column: room for SC_WARPS * SC_GROUP inserts above SC_KP

// One warp sorts column `col`'s buffer and merges it into the column's list (both in shared
// memory), with the same min(L[i], B[kp-1-i]) + bitonic merge as select_block.
__device__ void sc_merge(float* lv, unsigned* li, float* bv, unsigned* bi, int count) {
    int lane = threadIdx.x & 31;
    for (int i = count + lane; i < SC_NB; i += 32) {
        bv[i] = __int_as_float(0x7f800000);
        bi[i] = NO_INDEX;
    }
    __syncwarp();
    for (int size = 2; size <= SC_NB; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = lane; i < SC_NB / 2; i += 32) {
                int lo = 2 * i - (i & (stride - 1));
                int hi = lo + stride;
                bool asc = (lo & size) == 0;
                if ((bv[lo] > bv[hi]) == asc) {
                    float tv = bv[lo]; bv[lo] = bv[hi]; bv[hi] = tv;
                    unsigned ti = bi[lo]; bi[lo] = bi[hi]; bi[hi] = ti;
                }
            }
            __syncwarp();
        }
    }
    {
        float b = bv[SC_KP - 1 - lane];
        if (b < lv[lane]) {
            lv[lane] = b;
            li[lane] = bi[SC_KP - 1 - lane];
        }
    }
    __syncwarp();
    for (int stride = SC_KP >> 1; stride > 0; stride >>= 1) {
        if (lane < SC_KP / 2) {
            int lo = 2 * lane - (lane & (stride - 1));
            int hi = lo + stride;
            if (lv[lo] > lv[hi]) {
                float tv = lv[lo]; lv[lo] = lv[hi]; lv[hi] = tv;
                unsigned ti = li[lo]; li[lo] = li[hi]; li[hi] = ti;
            }
        }
        __syncwarp();
    }
}

// tile: rows x cols, row stride ld. rn: per-row squared norms, cn: per-column (KEY_L2). Row r
// is item row_off + r, column c item col_off + c. list_val/list_idx: the columns' lists,
// column c at c * SC_KP, sorted ascending. Grid: ceil(cols / 32) blocks of 256 threads.
extern "C" __global__ void select_cols(const float* __restrict__ tile, long long ld, int rows,
                                       int cols, int mode, const float* __restrict__ rn,
                                       const float* __restrict__ cn, unsigned row_off,
                                       unsigned col_off, int exclude_self,
                                       float* __restrict__ list_val,
                                       unsigned* __restrict__ list_idx) {
    __shared__ float lv[SC_COLS][SC_KP];
    __shared__ unsigned li[SC_COLS][SC_KP];
    __shared__ float bv[SC_COLS][SC_NB];
    __shared__ unsigned bi[SC_COLS][SC_NB];
    __shared__ int cnt[SC_COLS];
    __shared__ float thr[SC_COLS];

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int c0 = blockIdx.x * SC_COLS;
    int ncol = min(SC_COLS, cols - c0);
    for (int i = threadIdx.x; i < SC_COLS * SC_KP; i += blockDim.x) {
        int c = i / SC_KP, j = i % SC_KP;
        bool live = c < ncol;
        lv[c][j] = live ? list_val[(size_t)(c0 + c) * SC_KP + j] : __int_as_float(0x7f800000);
        li[c][j] = live ? list_idx[(size_t)(c0 + c) * SC_KP + j] : NO_INDEX;
    }
    if (threadIdx.x < SC_COLS) cnt[threadIdx.x] = 0;
    __syncthreads();
    if (threadIdx.x < SC_COLS) thr[threadIdx.x] = lv[threadIdx.x][SC_KP - 1];
    __syncthreads();

    int c = c0 + lane;
    bool col_ok = lane < ncol;
    unsigned gc = col_off + (unsigned)c;
    for (int start = 0; start < rows; start += SC_WARPS * SC_GROUP) {
        float v[SC_GROUP];
#pragma unroll
        for (int j = 0; j < SC_GROUP; ++j) {
            int r = start + j * SC_WARPS + warp;
            v[j] = __int_as_float(0x7f800000);
            if (col_ok && r < rows && !(exclude_self && row_off + (unsigned)r == gc))
                v[j] = tile_key(mode, tile[(size_t)r * ld + c], rn, cn, r, c);
        }
        float t = thr[lane];
#pragma unroll
        for (int j = 0; j < SC_GROUP; ++j) {
            if (v[j] < t) {
                int p = atomicAdd(&cnt[lane], 1);
                bv[lane][p] = v[j];
                bi[lane][p] = row_off + (unsigned)(start + j * SC_WARPS + warp);
            }
        }
        // All inserts are done after this barrier, and every thread has read its column's
        // count before any thread can insert again.
        bool full = __syncthreads_or(cnt[lane] > SC_NB - SC_WARPS * SC_GROUP);
        if (full) {
            for (int k = warp; k < SC_COLS; k += SC_WARPS) {
                int n = cnt[k];
                if (n > 0) sc_merge(lv[k], li[k], bv[k], bi[k], n);
            }
            __syncthreads();
            if (threadIdx.x < SC_COLS) {
                cnt[threadIdx.x] = 0;
                thr[threadIdx.x] = lv[threadIdx.x][SC_KP - 1];
            }
            __syncthreads();
        }
    }
    for (int k = warp; k < SC_COLS; k += SC_WARPS) {
        int n = cnt[k];
        if (n > 0) sc_merge(lv[k], li[k], bv[k], bi[k], n);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ncol * SC_KP; i += blockDim.x) {
        int cc = i / SC_KP, j = i % SC_KP;
        list_val[(size_t)(c0 + cc) * SC_KP + j] = lv[cc][j];
        list_idx[(size_t)(c0 + cc) * SC_KP + j] = li[cc][j];
    }
}
