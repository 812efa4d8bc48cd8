// The CPU simulation's stand-in for kernels/common/half.cuh: the compiler's _Float16, whose
// conversion from float rounds to nearest even, as cvt.rn.f16.f32 does.

#pragma once
#include <cstdint>
#include <cstring>

inline unsigned short f16_bits_rn(float v) {
    _Float16 h = (_Float16)v;
    unsigned short b;
    memcpy(&b, &h, 2);
    return b;
}

inline float f16_value(unsigned short b) {
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}
