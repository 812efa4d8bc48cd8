// Appends to per-item survivor buffers (src/ops/survivors.rs `Survivors`): the filters of
// select/survivors.cu and select/pair_filter.cu feed the same buffers, merged by
// merge_survivors.

#pragma once
#include "common/keys.cuh"

// Appends (key, id) to `item`'s buffer (`cap` slots), or records its key in the item's floor
// once the buffer is full: the smallest key a full buffer dropped, as inverted order bits kept
// by atomicMax (0: nothing dropped; select/survivors.cu says why the merge needs it).
__device__ __forceinline__ void tf_append(unsigned* __restrict__ count,
                                          unsigned* __restrict__ floor,
                                          float* __restrict__ buf_val,
                                          unsigned* __restrict__ buf_idx, int cap, int item,
                                          float key, unsigned id) {
    unsigned p = atomicAdd(&count[item], 1u);
    if (p < (unsigned)cap) {
        buf_val[(size_t)item * cap + p] = key;
        buf_idx[(size_t)item * cap + p] = id;
    } else {
        atomicMax(&floor[item], ~order_bits(key));
    }
}
