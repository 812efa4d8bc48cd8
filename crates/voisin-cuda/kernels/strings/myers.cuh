// Myers' bit-parallel edit distance (one machine word: patterns of at most 64 chars), shared by
// the levenshtein range search (strings/levenshtein.cu), the cover tree's pair distances
// (index/cover_pairs.cu) and the List of Clusters' build over strings (index/lc_build.cu).

#pragma once

// One text char: the pattern column's vertical deltas (`pv`: +1, `mv`: -1, one bit a pattern
// row) move on by that char, whose match mask over the pattern is `eq`, and `score` (the cell
// of the pattern's last row, bit `last`) follows its horizontal delta. Start with pv = ~0,
// mv = 0 and score = the pattern's length. The top row of the matrix is 0, 1, 2, ...: a +1
// enters at row 0.
__device__ __forceinline__ void myers_step(unsigned long long eq, unsigned long long last,
                                           unsigned long long& pv, unsigned long long& mv,
                                           unsigned& score) {
    const unsigned long long xv = eq | mv;
    const unsigned long long xh = (((eq & pv) + pv) ^ pv) | eq;
    unsigned long long ph = mv | ~(xh | pv);
    unsigned long long mh = pv & xh;
    if (ph & last) ++score;
    else if (mh & last) --score;
    ph = (ph << 1) | 1ull;
    mh <<= 1;
    pv = mh | ~(xv | ph);
    mv = ph & xv;
}

// The edit distance of chars[sa..sa + la) and chars[sb..sb + lb) (code points) when the shorter
// is at most 64 chars long (the pattern; each text char's match mask by a scan of it).
__device__ __forceinline__ unsigned myers_distance(const unsigned* __restrict__ chars, unsigned sa,
                                                   unsigned la, unsigned sb, unsigned lb) {
    if (la > lb) {
        unsigned t = sa; sa = sb; sb = t;
        t = la; la = lb; lb = t;
    }
    unsigned dist = lb;
    if (la > 0) {
        const unsigned long long last = 1ull << (la - 1);
        unsigned long long pv = ~0ull, mv = 0ull;
        dist = la;
        for (unsigned t = 0; t < lb; ++t) {
            const unsigned c = chars[sb + t];
            unsigned long long eq = 0ull;
            for (unsigned k = 0; k < la; ++k)
                eq |= (unsigned long long)(chars[sa + k] == c) << k;
            myers_step(eq, last, pv, mv, dist);
        }
    }
    return dist;
}
