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
// rows, held the first version under a third of the copy rate). The test of a chunk's 64
// values is branch-free: a bit per value that passes the row's or the column's threshold, then
// one loop appends what the bits name. With the appends inside the unrolled loop (128 copies of
// them), ncu found the warps waiting on instruction fetches 41 % of the time
// (docs/design/graph-tile-filter.md).
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

// Keeps the kp smallest of row r's sorted running list (lv, li: kp slots) and its m buffered
// pairs (bv, bi: the first min(m, cap) of them). The list goes to shared memory as it is (sv,
// sx), the buffer after it, sorted on (key, index) by `group` (a power of two at least its
// pairs: room for kp + that many pairs); then each entry of either side lands at its index plus
// the entries of the other side before it (a merge path), and what lands below kp is written
// back. Pairs go before list entries of the same key, so empty slots of that key (NO_INDEX: a
// seed's threshold, a floor's ceiling) stay after them, and the order of the list's own ties
// does not matter. Sorting the whole of list + buffer instead took a 4096-slot sort per row
// and merge at k = 1000, where a chunk brings a few hundred pairs. With `floor` (not null) and m past cap,
// the list is cut to the keys at most the row's floor (see the top of this file). Every thread
// of the group calls it.
template <class Group>
__device__ void merge_row(float* lv, unsigned* li, int kp, unsigned m,
                          const unsigned* __restrict__ floor, int r, const float* bv,
                          const unsigned* bi, int cap, float* sv, unsigned* sx, Group group) {
    int kept = m > (unsigned)cap ? cap : (int)m, size = 2;
    while (size < kept) size <<= 1;
    // Keys above the smallest dropped one leave the list; their slots keep that key with no
    // index, a ceiling: the list's largest slot, so no later filter or selection lets in an
    // item above what was dropped. The floor is read before the group's first barrier: the
    // caller zeroes it once its own thread is done.
    bool cut = floor != nullptr && m > (unsigned)cap;
    unsigned below_cut = cut ? ~floor[r] : 0xffffffffu;
    float ceiling = order_key(below_cut);
    float* wv = sv + kp;
    unsigned* wx = sx + kp;
    for (int i = group.rank(); i < kp || i < size; i += group.size()) {
        if (i < kp) {
            sv[i] = lv[i];
            sx[i] = li[i];
        }
        if (i < size) {
            wv[i] = i < kept ? bv[i] : __int_as_float(0x7f800000);
            wx[i] = i < kept ? bi[i] : NO_INDEX;
        }
    }
    group.sync();
    bitonic_sort<true>(wv, wx, size, group);
    auto put = [&](int to, float key, unsigned id) {
        bool out = order_bits(key) > below_cut;
        lv[to] = out ? ceiling : key;
        li[to] = out ? NO_INDEX : id;
    };
    // List entry i: after the pairs of keys at most its own.
    for (int i = group.rank(); i < kp; i += group.size()) {
        float key = sv[i];
        int lo = 0, hi = kept;
        while (lo < hi) {
            int mid = (lo + hi) >> 1;
            if (wv[mid] <= key) lo = mid + 1;
            else hi = mid;
        }
        if (i + lo < kp) put(i + lo, key, sx[i]);
    }
    // Pair j: after the list's entries of smaller keys.
    for (int j = group.rank(); j < kept && j < kp; j += group.size()) {
        float key = wv[j];
        int lo = 0, hi = kp;
        while (lo < hi) {
            int mid = (lo + hi) >> 1;
            if (sv[mid] < key) lo = mid + 1;
            else hi = mid;
        }
        if (j + lo < kp) put(j + lo, key, wx[j]);
    }
}

// Merges each row's buffered pairs into its list (merge_row), one block per row, any number of
// threads; dynamic shared memory of `slots` (key, index) pairs, kp and a power of two at least
// cap (the k-NN's fused filter, whose rows hold thousands of pairs, and the k-NN's fused pairs
// at k = 1000, lists of 2048). Without
// `floor` (null), rows whose count passed cap are left alone (the caller redoes them) and the
// counters stay as they are. With it, such rows are merged and cut to their floor, and every
// merged row's counter and floor are zeroed for the next filter.
extern "C" __global__ void merge_survivors(float* __restrict__ list_val,
                                           unsigned* __restrict__ list_idx, int kp,
                                           unsigned* __restrict__ count,
                                           unsigned* __restrict__ floor,
                                           const float* __restrict__ buf_val,
                                           const unsigned* __restrict__ buf_idx, int cap,
                                           int slots) {
    DYNAMIC_SHARED(float, sv);
    int r = blockIdx.x;
    unsigned m = count[r];
    if (m == 0 || (m > (unsigned)cap && floor == nullptr)) return;
    merge_row(list_val + (size_t)r * kp, list_idx + (size_t)r * kp, kp, m, floor, r,
              buf_val + (size_t)r * cap, buf_idx + (size_t)r * cap, cap, sv,
              (unsigned*)(sv + slots), BlockGroup());
    if (floor != nullptr && threadIdx.x == 0) {
        count[r] = 0;
        floor[r] = 0;
    }
}

// The first of a warp's sorted keys (lanes ascending) whose key is not below `key`: how many
// are below it, 0 to 32. Every lane calls it, each with its own `key`.
__device__ __forceinline__ int ms_below(float sorted, float key) {
    int lo = 0;
#pragma unroll
    for (int step = 16; step > 0; step >>= 1)
        if (__shfl_sync(0xffffffffu, sorted, lo + step - 1) < key) lo += step;
    // lo <= 31 here; all 32 below needs the last one checked.
    if (__shfl_sync(0xffffffffu, sorted, 31) < key && lo == 31) lo = 32;
    return lo;
}

// merge_survivors for the graph (with floors), one warp per row: `rows` rows, each block's warps
// taking consecutive ones. The graph merges every row of both
// tiles after each filtered pair, and most rows have no pair or a few: one block of 64 threads
// per row spent ~48 us a launch of 16384 rows, most of it starting blocks that had nothing to
// do (95 us a pair, a sixth of the fused pair's time; docs/design/graph-tile-filter.md).
//
// A row whose pairs fit a warp (at most 32, none dropped) merges in registers: the warp sorts
// its pairs by (key, index), each list entry moves down by the pairs below its key and each pair
// lands after the entries at or below its key (a stable merge, the list first on ties), and what
// lands below kp is written. Other rows go the block kernel's way, with the warp's share of
// dynamic shared memory (`slots` pairs of it per warp) and the warp as the sorting group.
// Counters and floors are zeroed for the next filter. Lists of at most MS_LIST
// (src/runtime/abi.rs) entries; the host sends longer ones to merge_survivors.
extern "C" __global__ void merge_survivors_warp(float* __restrict__ list_val,
                                                unsigned* __restrict__ list_idx, int kp,
                                                unsigned* __restrict__ count,
                                                unsigned* __restrict__ floor,
                                                const float* __restrict__ buf_val,
                                                const unsigned* __restrict__ buf_idx, int cap,
                                                int slots, int rows) {
    constexpr unsigned FULL = 0xffffffffu;
    const float inf = __int_as_float(0x7f800000);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int r = blockIdx.x * (blockDim.x >> 5) + warp;
    if (r >= rows) return;
    // One lane reads the counter that lane 0 zeroes at the end.
    unsigned m = __shfl_sync(FULL, lane == 0 ? count[r] : 0u, 0);
    if (m == 0) return;
    float* lv = list_val + (size_t)r * kp;
    unsigned* li = list_idx + (size_t)r * kp;
    const float* bv = buf_val + (size_t)r * cap;
    const unsigned* bi = buf_idx + (size_t)r * cap;
    if (m <= 32 && m <= (unsigned)cap && kp <= MS_LIST) {
        // This lane's pair, the pairs sorted by (key, index) across the lanes (bitonic, in
        // registers); lanes past m hold +inf.
        float sk = lane < (int)m ? bv[lane] : inf;
        unsigned si = lane < (int)m ? bi[lane] : NO_INDEX;
#pragma unroll
        for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                float ok = __shfl_xor_sync(FULL, sk, stride);
                unsigned oi = __shfl_xor_sync(FULL, si, stride);
                bool keep_min = ((lane & stride) == 0) == ((lane & size) == 0);
                bool other_less = ok < sk || (ok == sk && oi < si);
                if (other_less == keep_min) {
                    sk = ok;
                    si = oi;
                }
            }
        // The list's entries this lane holds (i = lane + 32q), read before anything is written.
        float ev[MS_LIST / 32];
        unsigned ei[MS_LIST / 32];
#pragma unroll
        for (int q = 0; q < MS_LIST / 32; ++q) {
            int i = lane + 32 * q;
            ev[q] = i < kp ? lv[i] : inf;
            ei[q] = i < kp ? li[i] : NO_INDEX;
        }
        // Where this lane's pair lands: after the list's entries at or below its key (a binary
        // search of the sorted list).
        int at = 0;
        if (lane < (int)m) {
            int lo = 0, hi = kp;
            while (lo < hi) {
                int mid = (lo + hi) >> 1;
                if (lv[mid] <= sk) lo = mid + 1;
                else hi = mid;
            }
            at = lane + lo;
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < MS_LIST / 32; ++q) {
            if (32 * q >= kp) break;  // uniform across the warp
            int i = lane + 32 * q;
            int to = i + ms_below(sk, ev[q]);
            if (i < kp && to < kp) {
                lv[to] = ev[q];
                li[to] = ei[q];
            }
        }
        if (lane < (int)m && at < kp) {
            lv[at] = sk;
            li[at] = si;
        }
    } else {
        if (m > (unsigned)cap && floor == nullptr) return;
        DYNAMIC_SHARED(float, ms_shared);
        float* sv = ms_shared + (size_t)warp * 2 * slots;
        merge_row(lv, li, kp, m, floor, r, bv, bi, cap, sv, (unsigned*)(sv + slots), WarpGroup());
    }
    if (floor != nullptr && lane == 0) {
        count[r] = 0;
        floor[r] = 0;
    }
}
