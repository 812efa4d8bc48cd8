// Heap select ([BarrientosHeap] §5.2; [Barrientos13] §4.2.1.2): one warp per tile row, each lane a max-heap of `kp`
// entries in shared memory, merged at the end of the tile into the row's running list (the same
// sorted rows x kp lists as select_block, so both kernels share fill_lists and merge_into_list).
//
// Why a per-lane heap of the full list size: whatever the data, one lane may see all of a row's
// kp smallest keys, so anything smaller would need a widening pass. The warp reduction is the
// shared gate: the smallest root over the lanes. A lane whose heap is full holds kp keys no
// larger than its root, so the row's kp-th smallest key is at most that root, and a key at or
// above the gate (or above the running list's worst) can be dropped by every lane. Heaps start
// full of +inf, so the gate needs no special case for lanes that are not yet full.
//
// Contract (as select_block): after the merge the list holds kp entries, or every eligible item
// seen so far; every item left out has a key >= the list's largest. The end-of-tile step keeps
// heap entries <= gate (not <): the lane that set the gate then contributes its whole heap, so the
// merged list is full and its largest key is at most the gate, which bounds every dropped key.

#include "common/bitonic.cuh"
#include "common/keys.cuh"
#include "common/loads.cuh"

#define HP_LOADS 4  // float4 loads per lane in flight

__device__ __forceinline__ float hp_warp_min(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Lane `lane`'s heap is hv[j * 32 + lane], j < kp (bank-conflict free): replaces its root with
// (key, id) and sifts it down.
__device__ __forceinline__ void hp_replace_root(float* hv, unsigned* hi, int kp, int lane,
                                                float key, unsigned id) {
    int j = 0;
    for (;;) {
        int c = 2 * j + 1;
        if (c >= kp) break;
        float cv = hv[c * 32 + lane];
        if (c + 1 < kp) {
            float rv = hv[(c + 1) * 32 + lane];
            if (rv > cv) {
                c += 1;
                cv = rv;
            }
        }
        if (!(cv > key)) break;
        hv[j * 32 + lane] = cv;
        hi[j * 32 + lane] = hi[c * 32 + lane];
        j = c;
    }
    hv[j * 32 + lane] = key;
    hi[j * 32 + lane] = id;
}

// Arguments as select_block (kp a power of two); launched with 32 threads per block and
// (kp + 32 * kp) * 8 bytes of dynamic shared memory.
extern "C" __global__ void select_heap(const float* __restrict__ tile, long long ld, int rows,
                                       int cols, int mode, const float* __restrict__ rn,
                                       const float* __restrict__ cn, unsigned row_off,
                                       unsigned col_off, int exclude_self,
                                       float* __restrict__ list_val,
                                       unsigned* __restrict__ list_idx, int kp) {
    DYNAMIC_SHARED(float, smem);
    float* lv = smem;
    unsigned* li = (unsigned*)(lv + kp);
    float* hv = (float*)(li + kp);
    unsigned* hi = (unsigned*)(hv + 32 * kp);
    const float INF = __int_as_float(0x7f800000);

    int r = blockIdx.x;
    if (r >= rows) return;
    int lane = threadIdx.x;
    float* gv = list_val + (size_t)r * kp;
    unsigned* gi = list_idx + (size_t)r * kp;
    copy_list(lv, li, gv, gi, kp, lane, 32);
    for (int i = lane; i < 32 * kp; i += 32) {
        hv[i] = INF;
        hi[i] = NO_INDEX;
    }
    __syncwarp();
    const float thr = lv[kp - 1];
    float root = INF;
    float gate = thr;

    const float* row = tile + (size_t)r * ld;
    unsigned self = row_off + (unsigned)r;
    const bool vec = (ld & 3) == 0;
    const int span = HP_LOADS * ROW_GROUP * 32;
    for (int start = 0; start < cols; start += span) {
        float v[HP_LOADS][ROW_GROUP];
        load_row_groups<HP_LOADS>(v, row, start, lane, 32, cols, vec);
#pragma unroll
        for (int j = 0; j < HP_LOADS; ++j) {
#pragma unroll
            for (int e = 0; e < ROW_GROUP; ++e) {
                int c = start + (j * 32 + lane) * ROW_GROUP + e;
                unsigned g = col_off + (unsigned)c;
                if (c < cols && !(exclude_self && g == self)) {
                    float key = tile_key(mode, v[j][e], rn, cn, r, c);
                    if (key < gate && key < root) {
                        hp_replace_root(hv, hi, kp, lane, key, g);
                        root = hv[lane];
                    }
                }
            }
        }
        gate = fminf(thr, hp_warp_min(root));
    }
    gate = fminf(thr, hp_warp_min(root));
    __syncwarp();

    // Compacts the entries that pass the gate to the front of the heap storage, in place: a
    // chunk's writes land at or below the chunk, after every lane has read it.
    int count = 0;
    for (int base = 0; base < 32 * kp; base += 32) {
        float v = hv[base + lane];
        unsigned id = hi[base + lane];
        bool keep = id != NO_INDEX && v <= gate;
        unsigned b = __ballot_sync(0xffffffffu, keep);
        __syncwarp();
        if (keep) {
            int p = count + __popc(b & ((1u << lane) - 1u));
            hv[p] = v;
            hi[p] = id;
        }
        count += __popc(b);
        __syncwarp();
    }
    __syncthreads();
    if (count > 0) merge_into_list(lv, li, hv, hi, kp, count);
    copy_list(gv, gi, lv, li, kp, lane, 32);
}
