// What the cover tree's build kernels share (index/cover_pairs.cu, index/cover_net.cu): the
// distance between two items of the set, as the host's space measures it.
//
// Vectors under euclidean, cityblock and chebyshev: the exact f64 key of
// voisin::metric::exact::vector_key (common/exact.cuh) and the host's key_to_distance, so every
// distance equals the CPU's to the bit. Minkowski (code COVER_MINKOWSKI): an approximation
// (scaled by the largest coordinate difference, relative error far below COVER_MINK_DOUBT) that
// the host re-measures. Strings: levenshtein by Myers' bit vectors over the shorter string,
// exact; two strings longer than 64 chars are left to the host.

#pragma once
#include "index/space.cuh"
#include "strings/myers.cuh"

#define COVER_MINKOWSKI (-1)
#define COVER_NAN __longlong_as_double(0x7ff8000000000000LL)
// A minkowski distance within this relative distance of a radius is too close to call on the
// device.
#define COVER_MINK_DOUBT 1e-6

// The rows of a set of vectors and its metric (an EX_* code or COVER_MINKOWSKI with order p).
struct CoverVecs {
    const float* rows;
    int d;
    int metric;
    double p;
    double zero;

    // The distance of items a and b; `approx` is set under minkowski.
    __device__ __forceinline__ double operator()(unsigned a, unsigned b, bool& approx) const {
        const float* x = rows + (long long)a * d;
        const float* y = rows + (long long)b * d;
        approx = metric == COVER_MINKOWSKI;
        if (approx) {
            double m = 0.0;
            for (int k = 0; k < d; ++k) m = fmax(m, fabs((double)x[k] - (double)y[k]));
            double s = 0.0;
            if (m > 0.0)
                for (int k = 0; k < d; ++k) s += pow(fabs((double)x[k] - (double)y[k]) / m, p);
            return m > 0.0 ? m * pow(s, 1.0 / p) : 0.0;
        }
        return lc_dist(metric, exact_key_of(DenseRow{x}, DenseRow{y}, d, metric, zero));
    }
};

// Strings as code points, item i at chars[offs[i]..offs[i + 1]).
struct CoverStrs {
    const unsigned* chars;
    const unsigned* offs;

    // The edit distance of items a and b when it may be within r; else a lower bound above r
    // (their lengths' difference). -1 when both are longer than 64 chars (the host's to measure).
    __device__ __forceinline__ double within(unsigned a, unsigned b, double r) const {
        const unsigned sa = offs[a], la = offs[a + 1] - sa, sb = offs[b], lb = offs[b + 1] - sb;
        const unsigned shorter = la < lb ? la : lb, longer = la < lb ? lb : la;
        if ((double)(longer - shorter) > r) return (double)(longer - shorter);
        if (shorter > 64) return -1.0;
        return (double)myers_distance(chars, sa, la, sb, lb);
    }
};
