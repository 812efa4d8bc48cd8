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

// in: n x d raw rows in the stored type (common/elem.cuh). shift: d values subtracted first (a
// translation; null for none). centre_rows: subtract each row's own mean (correlation). unit:
// scale to unit norm. out: the prepared rows, or null where the tiles read the stored rows (half
// storage: no shift, no centring, no scaling) and only the norms are wanted.
extern "C" __global__ void prepare_rows(const elem_t* __restrict__ in, long long n, int d,
                                        const float* __restrict__ shift, int centre_rows,
                                        int unit, float* __restrict__ out,
                                        float* __restrict__ sqnorm,
                                        double* __restrict__ norm) {
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const elem_t* x = in + row * d;
    float* o = out ? out + row * d : nullptr;
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
        s2 += (double)f * (double)f;
    }
    s2 = warp_sum(s2);
    if (lane == 0) {
        sqnorm[row] = (float)s2;
        norm[row] = sqrt(s2);
    }
}
