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

// The mean of a row's values, as Rust's f64 Sum then a division: one value at a time.
struct ExactMean {
    double s;
    __device__ __forceinline__ explicit ExactMean(double zero) : s(zero) {}
    __device__ __forceinline__ void add(float x) { s = __dadd_rn(s, (double)x); }
    __device__ __forceinline__ double of(int d) const { return __ddiv_rn(s, (double)d); }
};

template <class Row>
__device__ double ex_mean(Row a, int d, double zero) {
    ExactMean m(zero);
    for (int i = 0; i < d; ++i) m.add(a[i]);
    return m.of(d);
}

// The walk of metric M (an EX_* code; EX_COSINE and EX_CORRELATION share it, the latter with
// the rows' means in ca, cb) over the dimensions in order, a value of each row at a time, and
// its key: exact_key_of feeds it from the rows, finish/exact.cu from values it staged.
template <int M>
struct ExactWalk {
    double s, aa, bb, ca, cb;
    __device__ __forceinline__ ExactWalk(double zero, double ca, double cb)
        : s(M == EX_CHEBYSHEV || M == EX_COSINE || M == EX_CORRELATION ? 0.0 : zero), aa(0.0),
          bb(0.0), ca(ca), cb(cb) {}
    __device__ __forceinline__ void add(float fa, float fb) {
        double a = (double)fa, b = (double)fb;
        if (M == EX_SQEUCLIDEAN) {
            double t = __dsub_rn(a, b);
            s = __dadd_rn(s, __dmul_rn(t, t));
        } else if (M == EX_INNER_PRODUCT) {
            s = __dadd_rn(s, __dmul_rn(a, b));
        } else if (M == EX_CITYBLOCK) {
            s = __dadd_rn(s, fabs(__dsub_rn(a, b)));
        } else if (M == EX_CHEBYSHEV) {
            s = fmax(s, fabs(__dsub_rn(a, b)));
        } else {
            double x = __dsub_rn(a, ca), y = __dsub_rn(b, cb);
            s = __dadd_rn(s, __dmul_rn(x, y));
            aa = __dadd_rn(aa, __dmul_rn(x, x));
            bb = __dadd_rn(bb, __dmul_rn(y, y));
        }
    }
    __device__ __forceinline__ double key() const {
        if (M == EX_INNER_PRODUCT) return -s;
        if (M != EX_COSINE && M != EX_CORRELATION) return s;
        if (aa == 0.0 || bb == 0.0) return 1.0;
        double c = __dsub_rn(1.0, __ddiv_rn(s, __dmul_rn(__dsqrt_rn(aa), __dsqrt_rn(bb))));
        return c < 0.0 ? 0.0 : (c > 2.0 ? 2.0 : c);
    }
};

template <int M, class A, class B>
__device__ __forceinline__ double exact_walk(A a, B b, int d, double zero) {
    double ca = 0.0, cb = 0.0;
    if (M == EX_CORRELATION) {
        ca = ex_mean(a, d, zero);
        cb = ex_mean(b, d, zero);
    }
    ExactWalk<M> w(zero, ca, cb);
    for (int i = 0; i < d; ++i) w.add(a[i], b[i]);
    return w.key();
}

// An EX_* code as a type, so that a walk can take it as a template argument.
template <int M>
struct ExactMetric {
    static constexpr int code = M;
};

// Calls f(ExactMetric<M>{}) for the EX_* code `metric` (src/runtime/abi.rs), an unknown code
// as cosine: the one map from a host's code to its walk, for every kernel that walks. `f` is a
// struct with a templated __device__ call operator, not a generic lambda: NVRTC 13 on the
// device machine takes an unannotated generic lambda's operator for a host function and
// refuses it in JIT mode (an older NVRTC here accepted it).
template <class F>
__device__ __forceinline__ double with_exact_metric(int metric, F f) {
    switch (metric) {
    case EX_SQEUCLIDEAN: return f(ExactMetric<EX_SQEUCLIDEAN>{});
    case EX_INNER_PRODUCT: return f(ExactMetric<EX_INNER_PRODUCT>{});
    case EX_CITYBLOCK: return f(ExactMetric<EX_CITYBLOCK>{});
    case EX_CHEBYSHEV: return f(ExactMetric<EX_CHEBYSHEV>{});
    case EX_CORRELATION: return f(ExactMetric<EX_CORRELATION>{});
    default: return f(ExactMetric<EX_COSINE>{});
    }
}

// The walk of two rows as with_exact_metric's callee.
template <class A, class B>
struct ExactWalkOf {
    A a;
    B b;
    int d;
    double zero;
    template <class M>
    __device__ __forceinline__ double operator()(M) const {
        return exact_walk<M::code>(a, b, d, zero);
    }
};

// The exact key of base row `a` against query row `b` (vector_key's argument order); `metric`
// is an EX_* code.
template <class A, class B>
__device__ __forceinline__ double exact_key_of(A a, B b, int d, int metric, double zero) {
    return with_exact_metric(metric, ExactWalkOf<A, B>{a, b, d, zero});
}

__device__ double exact_key(const elem_t* __restrict__ a, const elem_t* __restrict__ b, int d,
                            int metric, double zero) {
    return exact_key_of(StoredRow{a}, StoredRow{b}, d, metric, zero);
}
