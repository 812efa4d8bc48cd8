// Exact f64 keys, bit-identical to voisin::metric::exact::vector_key: `exact_key_of` (used by
// finish/exact.cu, finish/rerank.cu and index/*.cu) walks the dimensions in order with the same
// operations, each rounded on its own (the _rn intrinsics forbid the fused multiply-adds the
// compiler would otherwise form, which Rust never does). `zero` is the start value of Rust's f64
// Sum (it changed from 0.0 to -0.0 across versions; the sign shows in keys of zero vectors, and
// total order sees it).

#pragma once
#include "common/abi.cuh"
#include "common/elem.cuh"

// A dense row (a[i]), a column of a dimension-major table (a[i * stride]), or a dense row of
// stored values of the compile's element type (converted exactly: common/elem.cuh).
struct DenseRow {
    const float* __restrict__ p;
    __device__ __forceinline__ float operator[](int i) const { return p[i]; }
};
struct StoredRow {
    const elem_t* __restrict__ p;
    __device__ __forceinline__ float operator[](int i) const { return elem_float(p[i]); }
};
struct StridedRow {
    const float* __restrict__ p;
    long long stride;
    __device__ __forceinline__ float operator[](int i) const { return p[i * stride]; }
};

template <class Row>
__device__ double ex_mean(Row a, int d, double zero) {
    double s = zero;
    for (int i = 0; i < d; ++i) s = __dadd_rn(s, (double)a[i]);
    return __ddiv_rn(s, (double)d);
}

// The exact key of base row `a` against query row `b` (vector_key's argument order); `metric`
// is an EX_* code (src/runtime/abi.rs).
template <class A, class B>
__device__ __forceinline__ double exact_key_of(A a, B b, int d, int metric, double zero) {
    double r;
    switch (metric) {
    case EX_SQEUCLIDEAN: {
        double s = zero;
        for (int i = 0; i < d; ++i) {
            double t = __dsub_rn((double)a[i], (double)b[i]);
            s = __dadd_rn(s, __dmul_rn(t, t));
        }
        r = s;
        break;
    }
    case EX_INNER_PRODUCT: {
        double s = zero;
        for (int i = 0; i < d; ++i) s = __dadd_rn(s, __dmul_rn((double)a[i], (double)b[i]));
        r = -s;
        break;
    }
    case EX_CITYBLOCK: {
        double s = zero;
        for (int i = 0; i < d; ++i) s = __dadd_rn(s, fabs(__dsub_rn((double)a[i], (double)b[i])));
        r = s;
        break;
    }
    case EX_CHEBYSHEV: {
        double s = 0.0;
        for (int i = 0; i < d; ++i) s = fmax(s, fabs(__dsub_rn((double)a[i], (double)b[i])));
        r = s;
        break;
    }
    default: {  // cosine, correlation
        double ca = 0.0, cb = 0.0;
        if (metric == EX_CORRELATION) {
            ca = ex_mean(a, d, zero);
            cb = ex_mean(b, d, zero);
        }
        double ab = 0.0, aa = 0.0, bb = 0.0;
        for (int i = 0; i < d; ++i) {
            double x = __dsub_rn((double)a[i], ca), y = __dsub_rn((double)b[i], cb);
            ab = __dadd_rn(ab, __dmul_rn(x, y));
            aa = __dadd_rn(aa, __dmul_rn(x, x));
            bb = __dadd_rn(bb, __dmul_rn(y, y));
        }
        if (aa == 0.0 || bb == 0.0) {
            r = 1.0;
        } else {
            double c = __dsub_rn(1.0, __ddiv_rn(ab, __dmul_rn(__dsqrt_rn(aa), __dsqrt_rn(bb))));
            r = c < 0.0 ? 0.0 : (c > 2.0 ? 2.0 : c);
        }
        break;
    }
    }
    return r;
}

__device__ double exact_key(const elem_t* __restrict__ a, const elem_t* __restrict__ b, int d,
                            int metric, double zero) {
    return exact_key_of(StoredRow{a}, StoredRow{b}, d, metric, zero);
}
