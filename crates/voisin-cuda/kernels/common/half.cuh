// f32 to f16 on the device (distance/scaled_half.cu): the one rounding of a value to f16, to
// nearest even, as the bound of numerics/plan.rs assumes. The CPU simulation has its own
// (kernel-sim/shim/common/half.cuh).

#pragma once

// The bits of the f16 nearest to v (ties to even; beyond f16's range, infinity).
__device__ __forceinline__ unsigned short f16_bits_rn(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

// The value of f16 bits h (exact in f32).
__device__ __forceinline__ float f16_value(unsigned short h) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}
