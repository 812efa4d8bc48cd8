// Row loads of the running-list selection kernels (select/block.cu, heap.cu, quick.cu).

#pragma once
#include "common/abi.cuh"

static_assert(ROW_GROUP == 4, "a row group is one float4");

// Loads LOADS groups of ROW_GROUP (src/runtime/abi.rs; one float4) consecutive values of `row` into `v`:
// group j of thread `t` of `threads` starts at column start + (j * threads + t) * ROW_GROUP.
// Rows are read as float4 when the row stride `vec` allows it; columns past `cols` read as 0
// (callers skip them by column). All loads are issued before any is used: ncu showed the
// selection at 1.5 TB/s with too few bytes in flight.
template <int LOADS>
__device__ __forceinline__ void load_row_groups(float (&v)[LOADS][ROW_GROUP],
                                                const float* __restrict__ row, int start, int t,
                                                int threads, int cols, bool vec) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
        int c0 = start + (j * threads + t) * ROW_GROUP;
        if (vec && c0 + ROW_GROUP <= cols) {
            float4 q = *reinterpret_cast<const float4*>(row + c0);
            v[j][0] = q.x;
            v[j][1] = q.y;
            v[j][2] = q.z;
            v[j][3] = q.w;
        } else {
#pragma unroll
            for (int e = 0; e < ROW_GROUP; ++e) v[j][e] = c0 + e < cols ? row[c0 + e] : 0.0f;
        }
    }
}
