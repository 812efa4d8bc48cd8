// Threshold filters and the merge of what passes them (src/ops/survivors.rs).
//
// A running list's largest key is a threshold: once a list has seen a few thousand items, only
// the few pairs at or under it can enter it. The filters append those pairs to a per-row buffer
// (an atomic counter per row, `cap` slots) instead of keeping a list; merge_survivors then keeps
// the kp smallest of the list and its buffer. Two filters feed it: the fused filter
// (fused_filter.cu), which computes its dot products in registers, and tile_filter here, which
// reads a distance tile that is already in device memory once and feeds both its rows' lists
// and its columns' lists (the k-NN graph's symmetric tiles: block select read the tile once for
// the rows and select_cols once more for the columns).
//
// A buffer that overflows (more than `cap` pairs passed, a threshold far from the list's final
// one) loses pairs. The knn path redoes such rows (merge_survivors leaves them alone when given
// no floor). The graph path gives a floor: the smallest key the buffer dropped, kept by
// atomicMax over inverted order bits (0 = nothing dropped). merge_survivors then merges the
// buffer anyway and cuts the list to the keys at most that floor, so the list keeps the
// contract of block select (every item left out has a key at least the list's largest): what
// was dropped has a key at least the floor, what failed the threshold a key above the old
// largest, which is at least the floor too. The cut slots keep the floor's key with no index
// (NO_INDEX: empty to whoever reads the list) as a ceiling: they stay the list's largest keys,
// so no later tile lets in an item above the floor, which would leave a dropped item under the
// list's largest (the CPU simulation, kernel-sim/sim.cpp, failed without it). A cut list may
// end short; the proof widens it.

#include "common/append.cuh"
#include "common/bitonic.cuh"
#include "common/keys.cuh"
#include "common/loads.cuh"

// Rows of the tile per block of tile_filter, loaded TF_CHUNK at a time; each thread owns
// ROW_GROUP consecutive columns, whose thresholds and norms it reads once for all the rows.
#define TF_ROWS 64
#define TF_CHUNK 16

// Filters a tile (rows x cols, row stride ld; the ten arguments every selection kernel starts
// with, select/block.cu) against its rows' lists (row_list: rows x kp, sorted, the largest
// last) and, with `both`, its columns' lists (col_list: cols x kp): a pair whose key is at most
// the row's largest goes to the row's buffer as column col_off + c, at most the column's
// largest to the column's buffer as row row_off + r. Each row's threshold is read once, before
// any merge: the buffers hold every pair under it (up to cap). Grid: (ceil(cols / (4 *
// blockDim.x)), ceil(rows / TF_ROWS)), blockDim.x >= 1; counters and floors of rows and
// columns zero before (merge_survivors leaves them so).
//
// The tile is read once, coalesced (a warp reads 512 consecutive bytes of a row), TF_CHUNK
// float4 loads in flight per thread; thresholds and norms come from registers and shared
// memory (reading both norms per value through L1, and each column's threshold once per 16
// rows, held the first version at ~1.4 TB/s on the H200). The test of a chunk's 64 values is
// branch-free: a bit per value that passes the row's or the column's threshold, then one loop
// appends what the bits name. With the appends inside the unrolled loop (128 copies of them),
// ncu found the warps waiting on instruction fetches 41 % of the time, at 1.32 TB/s.
extern "C" __global__ void tile_filter(const float* __restrict__ tile, long long ld, int rows,
                                       int cols, int mode, const float* __restrict__ rn,
                                       const float* __restrict__ cn, unsigned row_off,
                                       unsigned col_off, int exclude_self,
                                       const float* __restrict__ row_list,
                                       const float* __restrict__ col_list, int kp, int both,
                                       unsigned* __restrict__ row_count,
                                       unsigned* __restrict__ row_floor,
                                       float* __restrict__ row_val, unsigned* __restrict__ row_idx,
                                       unsigned* __restrict__ col_count,
                                       unsigned* __restrict__ col_floor,
                                       float* __restrict__ col_val, unsigned* __restrict__ col_idx,
                                       int cap) {
    static_assert(TF_CHUNK * ROW_GROUP == 64, "a chunk's values are one 64-bit mask");
    __shared__ float row_thr[TF_ROWS];
    __shared__ float row_term[TF_ROWS];
    const float no_pass = __int_as_float(0xff800000);  // -inf: nothing is at most it
    const KeyForm form = key_form(mode);
    int r0 = blockIdx.y * TF_ROWS;
    int start = blockIdx.x * blockDim.x * ROW_GROUP;
    int c0 = start + threadIdx.x * ROW_GROUP;
    int nr = min(TF_ROWS, rows - r0);
    for (int i = threadIdx.x; i < TF_ROWS; i += blockDim.x) {
        row_thr[i] = i < nr ? row_list[(size_t)(r0 + i) * kp + kp - 1] : no_pass;
        row_term[i] = form.norms ? (i < nr ? rn[r0 + i] : 0.0f) : form.alpha;
    }
    float col_thr[ROW_GROUP], col_term[ROW_GROUP];
#pragma unroll
    for (int e = 0; e < ROW_GROUP; ++e) {
        bool in = c0 + e < cols;
        col_thr[e] = both && in ? col_list[(size_t)(c0 + e) * kp + kp - 1] : no_pass;
        col_term[e] = form.norms && in ? cn[c0 + e] : 0.0f;
    }
    __syncthreads();
    if (c0 >= cols) return;
    const bool vec = (ld & 3) == 0;
    for (int i0 = 0; i0 < nr; i0 += TF_CHUNK) {
        // A chunk's rows are all loaded before any is used; rows past the end read as zeros
        // (the appends below skip them).
        float v[TF_CHUNK][1][ROW_GROUP];
#pragma unroll
        for (int i = 0; i < TF_CHUNK; ++i) {
            if (i0 + i < nr)
                load_row_groups<1>(v[i], tile + (size_t)(r0 + i0 + i) * ld, start, threadIdx.x,
                                   blockDim.x, cols, vec);
            else
#pragma unroll
                for (int e = 0; e < ROW_GROUP; ++e) v[i][0][e] = 0.0f;
        }
        // Value (i, e) is bit ROW_GROUP * i + e.
        unsigned long long rmask = 0, cmask = 0;
#pragma unroll
        for (int i = 0; i < TF_CHUNK; ++i) {
            float rt = row_thr[i0 + i], rs = row_term[i0 + i];
#pragma unroll
            for (int e = 0; e < ROW_GROUP; ++e) {
                float key = form_key(form, form_value(form, v[i][0][e]), rs, col_term[e]);
                rmask |= (unsigned long long)(key <= rt) << (ROW_GROUP * i + e);
                cmask |= (unsigned long long)(key <= col_thr[e]) << (ROW_GROUP * i + e);
            }
        }
        // The few that passed: their key again (the same operations on the same value), and
        // the appends.
        unsigned long long todo = rmask | cmask;
        while (todo) {
            int b = __ffsll((long long)todo) - 1;
            todo &= todo - 1;
            int i = b / ROW_GROUP, e = b % ROW_GROUP;
            float word = 0.0f;
#pragma unroll
            for (int w = 0; w < TF_CHUNK * ROW_GROUP; ++w)
                if (w == b) word = v[w / ROW_GROUP][0][w % ROW_GROUP];
            int r = r0 + i0 + i, c = c0 + e;
            if (i0 + i >= nr || c >= cols || (exclude_self && row_off + r == col_off + c))
                continue;
            float key =
                form_key(form, form_value(form, word), row_term[i0 + i], col_term[e]);
            if ((rmask >> b) & 1)
                tf_append(row_count, row_floor, row_val, row_idx, cap, r, key, col_off + c);
            if ((cmask >> b) & 1)
                tf_append(col_count, col_floor, col_val, col_idx, cap, c, key, row_off + r);
        }
    }
}

// Keeps the kp smallest of a row's sorted running list (list_*, kp slots) and its buffered
// pairs (min(count, cap) of them): both go to shared memory and one bitonic sort on (key,
// index) orders them. One block per row, any number of threads; dynamic shared memory of
// `slots` (key, index) pairs, a power of two at least kp + cap and at most FZ_MERGE. The graph
// merges every row of a tile after each filter, most with a few pairs: small blocks with little
// shared memory let many rows merge at once on each multiprocessor. Without `floor` (null), rows whose count passed cap are left alone (the caller
// redoes them) and the counters stay as they are. With it, such rows are merged and cut to the
// keys at most their floor (see the top of this file), and every merged row's counter and
// floor are zeroed for the next filter.
extern "C" __global__ void merge_survivors(float* __restrict__ list_val,
                                           unsigned* __restrict__ list_idx, int kp,
                                           unsigned* __restrict__ count,
                                           unsigned* __restrict__ floor,
                                           const float* __restrict__ buf_val,
                                           const unsigned* __restrict__ buf_idx, int cap,
                                           int slots) {
    DYNAMIC_SHARED(float, sv);
    unsigned* si = (unsigned*)(sv + slots);
    int r = blockIdx.x;
    unsigned m = count[r];
    if (m == 0 || (m > (unsigned)cap && floor == nullptr)) return;
    unsigned kept = m > (unsigned)cap ? (unsigned)cap : m;
    int total = kp + (int)kept, size = 2;
    while (size < total) size <<= 1;
    float* lv = list_val + (size_t)r * kp;
    unsigned* li = list_idx + (size_t)r * kp;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {
        if (i < kp) {
            sv[i] = lv[i];
            si[i] = li[i];
        } else if (i < total) {
            sv[i] = buf_val[(size_t)r * cap + (i - kp)];
            si[i] = buf_idx[(size_t)r * cap + (i - kp)];
        } else {
            sv[i] = __int_as_float(0x7f800000);
            si[i] = NO_INDEX;
        }
    }
    __syncthreads();
    bitonic_sort<true>(sv, si, size);
    if (floor != nullptr && m > (unsigned)cap) {
        // Keys above the smallest dropped one leave the list; their slots keep that key with no
        // index, a ceiling: the list's largest slot, so no later filter or selection lets in
        // an item above what was dropped.
        unsigned cut = ~floor[r];
        float ceiling = order_key(cut);
        for (int i = threadIdx.x; i < kp; i += blockDim.x)
            if (order_bits(sv[i]) > cut) {
                sv[i] = ceiling;
                si[i] = NO_INDEX;
            }
        __syncthreads();
    }
    copy_list(lv, li, sv, si, kp, threadIdx.x, blockDim.x);
    if (floor != nullptr && threadIdx.x == 0) {
        count[r] = 0;
        floor[r] = 0;
    }
}
