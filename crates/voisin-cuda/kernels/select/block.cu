// Block select: one thread block per tile row keeps that row's running list of the `kp` smallest
// keys (kp a power of two, at most 2048) across all the tiles of a pass.
//
// Why this shape: after the first tiles the list's worst key is a tight threshold, so almost every
// tile value fails one comparison and the tile is read once, coalesced. Values that pass go to a
// shared-memory buffer; a full buffer is bitonic-sorted and merged into the list (the
// min(L[i], B[kp-1-i]) trick gives a bitonic sequence holding the kp smallest, which one bitonic
// merge sorts). Ties at the threshold may be dropped in any order: the host re-ranks exactly and
// only needs *some* kp smallest approximate keys plus the largest of them.

#include "common/bitonic.cuh"
#include "common/keys.cuh"
#include "common/loads.cuh"

#define SB_LOADS 4  // float4 loads per thread in flight

// tile: rows x cols, row stride ld. rn/cn: per-row / per-column squared norms (KEY_L2 only).
// The global index of column c is col_off + c; with exclude_self, the pair whose global column
// index equals row_off + r is skipped (the graph's self pair). list_val/list_idx: rows x kp,
// sorted ascending, +inf / NO_INDEX when empty. nbuf: buffer size, a power of two >= kp and
// >= 2 * ROW_GROUP * blockDim.x.
extern "C" __global__ void select_block(const float* __restrict__ tile, long long ld, int rows,
                                        int cols, int mode, const float* __restrict__ rn,
                                        const float* __restrict__ cn, unsigned row_off,
                                        unsigned col_off, int exclude_self,
                                        float* __restrict__ list_val,
                                        unsigned* __restrict__ list_idx, int kp, int nbuf) {
    DYNAMIC_SHARED(float, smem);
    float* lv = smem;
    unsigned* li = (unsigned*)(lv + kp);
    float* bv = (float*)(li + kp);
    unsigned* bi = (unsigned*)(bv + nbuf);
    __shared__ int count;
    __shared__ float thr;

    int r = blockIdx.x;
    if (r >= rows) return;
    float* gv = list_val + (size_t)r * kp;
    unsigned* gi = list_idx + (size_t)r * kp;
    copy_list(lv, li, gv, gi, kp, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    if (threadIdx.x == 0) thr = lv[kp - 1];
    __syncthreads();

    const float* row = tile + (size_t)r * ld;
    unsigned self = row_off + (unsigned)r;
    // Values are handled ROW_GROUP per thread between barriers (a group inserts at most
    // ROW_GROUP * blockDim values, so the buffer is flushed while that much room is left).
    // `est` is a uniform upper bound of the fill (every thread gets the same barrier count);
    // the merge reads the true count, which no thread changes between the barrier and merge.
    // Loads run SB_LOADS groups ahead of their use (load_row_groups).
    int est = 0;
    const int room = nbuf - ROW_GROUP * (int)blockDim.x;
    const bool vec = (ld & 3) == 0;
    const int span = SB_LOADS * ROW_GROUP * blockDim.x;
    for (int start = 0; start < cols; start += span) {
        float v[SB_LOADS][ROW_GROUP];
        load_row_groups<SB_LOADS>(v, row, start, threadIdx.x, blockDim.x, cols, vec);
#pragma unroll
        for (int j = 0; j < SB_LOADS; ++j) {
            int c0 = start + (j * blockDim.x + threadIdx.x) * ROW_GROUP;
            float t = thr;
            bool any = false;
#pragma unroll
            for (int e = 0; e < ROW_GROUP; ++e) {
                int c = c0 + e;
                unsigned gi = col_off + (unsigned)c;
                if (c < cols && !(exclude_self && gi == self)) {
                    float key = tile_key(mode, v[j][e], rn, cn, r, c);
                    if (key < t) {
                        int p = atomicAdd(&count, 1);
                        bv[p] = key;
                        bi[p] = gi;
                        any = true;
                    }
                }
            }
            est += ROW_GROUP * __syncthreads_count(any);
            if (est > room) {
                int n = count;
                merge_into_list(lv, li, bv, bi, kp, n);
                if (threadIdx.x == 0) {
                    count = 0;
                    thr = lv[kp - 1];
                }
                __syncthreads();
                est = 0;
            }
        }
    }
    {
        int n = count;
        __syncthreads();
        if (n > 0) merge_into_list(lv, li, bv, bi, kp, n);
    }
    copy_list(gv, gi, lv, li, kp, threadIdx.x, blockDim.x);
}

// Empties `n` list slots: +inf keys, no index.
extern "C" __global__ void fill_lists(float* __restrict__ val, unsigned* __restrict__ idx,
                                      unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        val[i] = __int_as_float(0x7f800000);
        idx[i] = NO_INDEX;
    }
}

// Keeps only a threshold per row in lists of `width` (n slots in all): every slot takes the key
// at `rank` (from 1) of the row's sorted list in `from` (lists of `from_width`) and no index.
// Lists filled from a sample of the base (knn.rs `passes`, graph.rs `seed`) so start with a
// threshold and no entries: the sample's items are met again in their own tiles and must not be
// listed twice. `from` may be `val` itself (from_width = width): the slot at `rank` then writes
// the value it reads.
extern "C" __global__ void seed_lists(const float* from, int from_width, int rank, float* val,
                                      unsigned* __restrict__ idx, int width,
                                      unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        val[i] = from[(i / (unsigned)width) * (unsigned long long)from_width + rank - 1];
        idx[i] = NO_INDEX;
    }
}

// Copies the first `keep` entries of lists of `width` (sorted lists: the `keep` smallest) to
// rows x keep, so that only what the host needs crosses the bus; n = rows * keep. Output row r
// is list `rows[r]`, or list r where `rows` is null (every list, in order).
extern "C" __global__ void list_prefix(const float* __restrict__ sv, const unsigned* __restrict__ si,
                                       int width, float* __restrict__ dv,
                                       unsigned* __restrict__ di, int keep,
                                       unsigned long long n, const unsigned* __restrict__ rows) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long r = i / (unsigned)keep, j = i % (unsigned)keep;
        unsigned long long from = rows ? rows[r] : r;
        dv[i] = sv[from * (unsigned)width + j];
        di[i] = si[from * (unsigned)width + j];
    }
}
