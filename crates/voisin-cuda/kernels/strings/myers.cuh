// Myers' bit-parallel edit distance (one machine word: patterns of at most 64 chars), shared by
// the levenshtein range search (strings/levenshtein.cu) and the cover tree's pair distances
// (index/cover_pairs.cu).

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
