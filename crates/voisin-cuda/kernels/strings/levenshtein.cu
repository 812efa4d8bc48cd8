// Levenshtein range search, one block per query, for queries of at most 64 chars (one machine
// word of Myers' bit vectors; longer queries run on the host). The base is sorted by length on
// the host, so each query scans only the contiguous slice whose lengths pass the length filter
// |m - n| <= r: threads of a block then see texts of similar length and diverge little.
//
// Per query the host sends its distinct chars, sorted and padded with 0xFFFFFFFF (above every
// Unicode scalar value), and the match mask (peq) of each; a text char is mapped to its mask by a
// branch-free binary search in shared memory. Every pair with distance <= r is appended as
// (query, sorted base position, distance) at a global cursor; pairs past `cap` are counted but
// not written, so the host can size the buffer and run again.

#include "common/abi.cuh"  // LEV_W: pattern chars per machine word
#include "strings/myers.cuh"

extern "C" __global__ void lev_range(const unsigned* __restrict__ chars,
                                     const unsigned* __restrict__ offs,
                                     const unsigned* __restrict__ qchars,
                                     const unsigned long long* __restrict__ qmasks,
                                     const unsigned* __restrict__ qinfo, unsigned r,
                                     unsigned long long cap,
                                     unsigned long long* __restrict__ cursor,
                                     unsigned* __restrict__ out) {
    __shared__ unsigned sc[LEV_W];
    __shared__ unsigned long long sm[LEV_W];
    unsigned q = blockIdx.x;
    for (unsigned i = threadIdx.x; i < LEV_W; i += blockDim.x) {
        sc[i] = qchars[(size_t)q * LEV_W + i];
        sm[i] = qmasks[(size_t)q * LEV_W + i];
    }
    __syncthreads();
    unsigned m = qinfo[4 * q], lo = qinfo[4 * q + 2], hi = qinfo[4 * q + 3];
    unsigned long long last = m ? 1ull << (m - 1) : 0ull;
    for (unsigned j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        unsigned s = offs[j], n = offs[j + 1] - s;
        if ((m > n ? m - n : n - m) > r) continue;
        unsigned d;
        if (m == 0) {
            d = n;
        } else {
            unsigned long long pv = ~0ull, mv = 0ull;
            d = m;
            for (unsigned t = 0; t < n; ++t) {
                unsigned c = chars[s + t];
                unsigned pos = 0;
#pragma unroll
                for (unsigned step = 32; step; step >>= 1)
                    if (sc[pos + step - 1] < c) pos += step;
                myers_step(sc[pos] == c ? sm[pos] : 0ull, last, pv, mv, d);
                // Cells on the diagonal that ends in the final cell never decrease, so once
                // this column's cell on it, row i = m - (columns left), exceeds r, so does the
                // distance. D[i][j] = j + (vertical +1s) - (vertical -1s) in rows 1..i.
                int i = (int)m - (int)(n - 1 - t);
                if (i >= 0) {
                    unsigned long long low = i >= LEV_W ? ~0ull : (1ull << i) - 1ull;
                    int di = (int)(t + 1) + __popcll(pv & low) - __popcll(mv & low);
                    if (di > (int)r) {
                        d = r + 1;
                        break;
                    }
                }
            }
        }
        if (d <= r) {
            unsigned long long p = atomicAdd(cursor, 1ull);
            if (p < cap) {
                out[3 * p] = q;
                out[3 * p + 1] = j;
                out[3 * p + 2] = d;
            }
        }
    }
}
