// The element type of stored rows (src/ops/device_set.rs), chosen per NVRTC compile by
// VOISIN_ELEM (src/runtime/kernels.rs, `Storage::code`): 0 f32, 1 f16, 2 bf16, the half types as
// their bits, 3 u8. `elem_float` gives the stored value as an f32, exactly (every f16 and bf16 value is
// an f32 number), so the exact keys of common/exact.cuh see the values the CPU engine sees.
// docs/design/tensor-core-inputs.md.

#pragma once

#ifndef VOISIN_ELEM
#define VOISIN_ELEM 0
#endif

#if VOISIN_ELEM == 0
typedef float elem_t;
__device__ __forceinline__ float elem_float(elem_t x) { return x; }
#elif VOISIN_ELEM == 1
typedef unsigned short elem_t;
// IEEE binary16 bits to f32: normals rebias the exponent (15 to 127) and widen the
// significand; subnormals are m·2⁻²⁴ (exact: m < 2¹⁰); infinities and NaN keep their class.
__device__ __forceinline__ float elem_float(elem_t h) {
    unsigned s = ((unsigned)h & 0x8000u) << 16, e = ((unsigned)h >> 10) & 0x1fu,
             m = (unsigned)h & 0x3ffu;
    float mag;
    if (e == 0) {
        mag = (float)m * 5.9604644775390625e-08f;  // 2^-24
    } else if (e == 31) {
        mag = __uint_as_float(0x7f800000u | (m << 13));
    } else {
        mag = __uint_as_float(((e + 112u) << 23) | (m << 13));
    }
    return __uint_as_float(__float_as_uint(mag) | s);
}
#elif VOISIN_ELEM == 2
typedef unsigned short elem_t;
// bf16 is the high half of an f32.
__device__ __forceinline__ float elem_float(elem_t h) { return __uint_as_float((unsigned)h << 16); }
#elif VOISIN_ELEM == 3
typedef unsigned char elem_t;
__device__ __forceinline__ float elem_float(elem_t b) { return (float)b; }
#else
#error "VOISIN_ELEM: 0 (f32), 1 (f16), 2 (bf16) or 3 (u8)"
#endif
