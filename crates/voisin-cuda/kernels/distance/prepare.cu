// Row preparation on the device, one warp per row: what the tile kernels read (translated,
// centred or unit rows in f32) and the norms that the keys and the error bounds need.
//
// Each output value is one rounding of an f64 value, so the host's bound sees a relative error
// of one f32 unit per component. A row is zero after centring or normalising exactly when the
// exact key (metric::exact) treats it as zero: all-equal (correlation) or all-zero (cosine)
// rows; those stay exactly zero, which gives the key 1 - 0 = 1, the metric's rule.

#include "common/elem.cuh"

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// in: n raw rows of d values in the stored type (common/elem.cuh), ld_in apart. shift: d values
// subtracted first (a translation; null for none). centre_rows: subtract each row's own mean
// (correlation). unit: scale to unit norm. out: the prepared f32 rows (d apart), or null. out8:
// the prepared rows as int8 (ld8 apart, zero from d on), or null: int8 tiles of u8 rows shifted
// by 128, whose values are integers in [-128, 127] and so exact. Both null where the tiles read
// the stored rows (f16/bf16 tiles: no shift, no centring, no scaling) and only the norms are
// wanted.
extern "C" __global__ void prepare_rows(const elem_t* __restrict__ in, long long n, int d,
                                        long long ld_in, const float* __restrict__ shift,
                                        int centre_rows, int unit, float* __restrict__ out,
                                        signed char* __restrict__ out8, long long ld8,
                                        float* __restrict__ sqnorm,
                                        double* __restrict__ norm) {
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const elem_t* x = in + row * ld_in;
    float* o = out ? out + row * d : nullptr;
    signed char* o8 = out8 ? out8 + row * ld8 : nullptr;
    double m = 0.0;
    if (centre_rows) {
        double s = 0.0;
        for (int i = lane; i < d; i += 32) s += (double)elem_float(x[i]);
        m = warp_sum(s) / d;
    }
    double scale = 1.0;
    if (unit) {
        double s = 0.0;
        for (int i = lane; i < d; i += 32) {
            double v = (double)elem_float(x[i]) - (shift ? (double)shift[i] : 0.0) - m;
            s += v * v;
        }
        s = warp_sum(s);
        scale = s > 0.0 ? 1.0 / sqrt(s) : 0.0;
    }
    double s2 = 0.0;
    for (int i = lane; i < d; i += 32) {
        double v = (double)elem_float(x[i]) - (shift ? (double)shift[i] : 0.0) - m;
        float f = (float)(unit ? v * scale : v);
        if (o) o[i] = f;
        if (o8) o8[i] = (signed char)(int)f;
        s2 += (double)f * (double)f;
    }
    if (o8)
        for (long long i = d + lane; i < ld8; i += 32) o8[i] = 0;
    s2 = warp_sum(s2);
    if (lane == 0) {
        sqnorm[row] = (float)s2;
        norm[row] = sqrt(s2);
    }
}
