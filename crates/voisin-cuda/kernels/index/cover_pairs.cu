// The cover tree's construction on the GPU (src/index/cover_build.rs, docs/design/gpu-cover-tree.md):
// one kernel family "items x candidate lists -> distance within radius". The host's batch holds
// queries q (item qitem[q], radius qrad[q]) and their candidates cands[starts[q]..starts[q+1]];
// a launch covers the pairs t0..t0+n of the batch (cands and out are that chunk), one thread a
// pair (grid-stride), which finds its query by binary search in `starts`.
//
// out[t]: the distance when it is within the radius, else NaN. Vectors under euclidean, cityblock
// and chebyshev: the exact f64 key of voisin::metric::exact::vector_key (common/exact.cuh) and the
// host's key_to_distance, so stored distances equal the CPU's to the bit. Minkowski (code
// COVER_MINKOWSKI): an approximate distance, written when within the radius widened by a relative
// 1e-6; the host re-measures every such pair exactly and decides on that. Strings: levenshtein
// (Myers' bit vectors over the shorter string, exact); a pair whose both strings are longer
// than 64 chars gets -1 and is measured on the host.

#include "index/space.cuh"
#include "strings/myers.cuh"

#define COVER_MINKOWSKI (-1)
#define COVER_NAN __longlong_as_double(0x7ff8000000000000LL)

// The batch's arguments, after the items' own: queries (item, radius, offsets into the
// candidates), the chunk's first pair t0 and size n, its candidates and answers.
#define COVER_PAIR_PARAMS                                                                         \
    const unsigned *__restrict__ qitem, const double *__restrict__ qrad,                          \
        const unsigned long long *__restrict__ starts, unsigned nq, unsigned long long t0,         \
        long long n, const unsigned *__restrict__ cands, double *__restrict__ out

// The query of pair t: the last q with starts[q] <= t (queries may be empty).
__device__ __forceinline__ unsigned cover_query(const unsigned long long* starts, unsigned nq,
                                                unsigned long long t) {
    unsigned lo = 0, hi = nq;  // starts[lo] <= t < starts[hi]
    while (hi - lo > 1) {
        unsigned mid = lo + (hi - lo) / 2;
        if (starts[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Calls f(i, q) for every pair i of the chunk (grid-stride) with its query q.
template <class F>
__device__ __forceinline__ void cover_for_pairs(const unsigned long long* starts, unsigned nq,
                                                unsigned long long t0, long long n, F f) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        f(i, cover_query(starts, nq, t0 + (unsigned long long)i));
}

extern "C" __global__ void cover_pairs_vec(const float* __restrict__ rows, int d, int metric,
                                           double p, double zero, COVER_PAIR_PARAMS) {
    cover_for_pairs(starts, nq, t0, n, [&](long long i, unsigned q) {
        const float* x = rows + (long long)qitem[q] * d;
        const float* y = rows + (long long)cands[i] * d;
        const double r = qrad[q];
        double dist;
        bool in;
        if (metric == COVER_MINKOWSKI) {
            double m = 0.0;
            for (int k = 0; k < d; ++k) m = fmax(m, fabs((double)x[k] - (double)y[k]));
            double s = 0.0;
            if (m > 0.0)
                for (int k = 0; k < d; ++k) s += pow(fabs((double)x[k] - (double)y[k]) / m, p);
            dist = m > 0.0 ? m * pow(s, 1.0 / p) : 0.0;
            in = dist <= r + 1e-6 * r;
        } else {
            dist = lc_dist(metric, exact_key_of(DenseRow{x}, DenseRow{y}, d, metric, zero));
            in = dist <= r;
        }
        out[i] = in ? dist : COVER_NAN;
    });
}

extern "C" __global__ void cover_pairs_lev(const unsigned* __restrict__ chars,
                                           const unsigned* __restrict__ offs,
                                           COVER_PAIR_PARAMS) {
    cover_for_pairs(starts, nq, t0, n, [&](long long i, unsigned q) {
        const unsigned a = qitem[q], b = cands[i];
        const unsigned sa = offs[a], la = offs[a + 1] - sa, sb = offs[b], lb = offs[b + 1] - sb;
        const unsigned shorter = la < lb ? la : lb, longer = la < lb ? lb : la;
        const double r = qrad[q];
        if ((double)(longer - shorter) > r) {
            out[i] = COVER_NAN;
            return;
        }
        // The pattern (the shorter string) must fit one machine word.
        if (shorter > 64) {
            out[i] = -1.0;
            return;
        }
        const unsigned dist = myers_distance(chars, sa, la, sb, lb);
        out[i] = (double)dist <= r ? (double)dist : COVER_NAN;
    });
}
