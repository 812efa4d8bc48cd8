// The device pair oracle (src/index/oracle.rs) that the List of Clusters' and SSS's builds over
// strings ask where their device steps do not apply: "items x candidate lists -> distance
// within radius". The host's batch holds queries q (item qitem[q], radius qrad[q]) and their
// candidates cands[starts[q]..starts[q+1]];
// a launch covers the pairs t0..t0+n of the batch (cands and out are that chunk), one thread a
// pair (grid-stride), which finds its query by binary search in `starts`.
//
// out[t]: the edit distance (levenshtein, Myers' bit vectors over the shorter string, exact)
// when it is within the radius, else NaN; -1 for a pair of two strings longer than 64 chars,
// which the host measures.

#include "index/cover.cuh"

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

extern "C" __global__ void cover_pairs_lev(const unsigned* __restrict__ chars,
                                           const unsigned* __restrict__ offs,
                                           COVER_PAIR_PARAMS) {
    const CoverStrs strs{chars, offs};
    cover_for_pairs(starts, nq, t0, n, [&](long long i, unsigned q) {
        const double r = qrad[q];
        const double dist = strs.within(qitem[q], cands[i], r);
        out[i] = dist < 0.0 ? -1.0 : dist <= r ? dist : COVER_NAN;
    });
}
