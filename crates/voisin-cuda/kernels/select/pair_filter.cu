// The k-NN graph's fused tile pair (src/ops/pair.rs): the dot products of a block of one tile's
// rows against a block of another's on tensor cores, in registers, and in the epilogue the
// filter of tile_filter (select/survivors.cu): a pair whose key is at most its row's list's
// largest goes to the row's buffer, at most its column's largest to the column's buffer. The
// distance tile never goes to device memory: the graph wrote 1 GiB per 16384² pair and read it
// back once more (docs/design/graph-tile-filter.md).
//
// Rows are 32-bit words (common/mma.cuh): prepared f32 rows on TF32 tensor cores, stored
// f16/bf16 rows on their own, prepared int8 rows (u8 minus 128) on int8 ones with exact int32
// sums, and prepared f32 rows as f16 scaled per row by a power of two (distance/scaled_half.cu),
// whose sums the epilogue scales back, either whole (TF32 plans) or split into two f16 halves
// whose three leading products run per step (fp16x3 plans, pf_products). One body; the element
// kind, the scaling and the split are template parameters.
//
// A block takes tiles of PF_BM rows x PF_BN columns in turn; 8 warps as 2 (rows) x 4
// (columns), each 64 x PF_BN / 4. The inner dimension goes through shared memory PF_BK words at
// a time, PF_STAGES slabs in flight (cp.async), so the copies of the next slabs (the next
// tile's, at a tile's end) overlap the products and the epilogue of this one.

#include "common/append.cuh"
#include "common/keys.cuh"
#include "common/mma.cuh"

#define PF_THREADS 256
// Words from one shared row to the next: 36 = 4 mod 32 puts the eight 16-byte rows of each
// ldmatrix matrix on distinct banks, and 144-byte rows keep the 16-byte copies aligned.
#define PF_LD (PF_BK + 4)

// Dynamic shared memory of a block: the slabs in flight.
#define PF_SHARED (PF_STAGES * (PF_BM + PF_BN) * PF_LD * 4)

// Rows a block copies in one pass of its threads (each thread a 16-byte piece of one row).
#define PF_COPY_ROWS (PF_THREADS / (PF_BK / 4))

// Copies slab kt (words kt * PF_BK, + PF_BK) of rows [r0, r0 + ROWS) of `m` (ldw words apart,
// kw words long, nm rows) into `s` (ROWS x PF_LD words); zeros past either end. This thread
// copies words kt * PF_BK + 4 (tid % (PF_BK / 4)) of rows tid / (PF_BK / 4) + PF_COPY_ROWS q:
// one address computed, then a constant step a row pass (the copies run for every slab, and
// an address computed whole for each took ~230 instructions a slab, a sixth of the kernel's).
template <int ROWS>
__device__ __forceinline__ void pf_copy(unsigned* s, const unsigned* __restrict__ m, int nm,
                                        int ldw, int kw, int r0, int kt) {
    static_assert(ROWS % PF_COPY_ROWS == 0, "whole passes");
    int row = r0 + (int)threadIdx.x / (PF_BK / 4);
    int word = (int)threadIdx.x % (PF_BK / 4) * 4;
    int k = kt * PF_BK + word;
    const unsigned* src = m + (size_t)row * ldw + k;
    const size_t step = (size_t)PF_COPY_ROWS * ldw;
    unsigned dst = shared_address(s + ((int)threadIdx.x / (PF_BK / 4)) * PF_LD + word);
#pragma unroll
    for (int q = 0; q < ROWS / PF_COPY_ROWS; ++q) {
        bool in = row + q * PF_COPY_ROWS < nm && k < kw;
        copy16_async(dst + q * PF_COPY_ROWS * PF_LD * 4, in ? src + q * step : m, in);
    }
}

// Zeroes a thread's accumulators (at the start and after each tile's epilogue).
template <typename T, int J>
__device__ __forceinline__ void pf_zero(T (&acc)[4][J][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
}

// One slab's products into a thread's accumulators: a_slab and b_slab are this lane's row
// addresses (load_matrices) in the slab's A and B slots. Each k-step of 8 words takes four
// A fragments and two of B (four columns' groups of 8) into 16 MMAs.
//
// SPLIT: the rows are scaled f16 split in two, x = hi + lo (distance/scaled_half.cu), stored
// as groups of PF_SPLIT_GROUP values: 8 words of hi, then the same values' 8 words of lo. A
// step of 16 words takes both halves of each side and sums hi.hi' + hi.lo' + lo.hi' (three
// MMAs on fragments loaded once; lo.lo' is inside the split's bound, numerics/plan.rs). The two
// small products go to a fresh sum that is added to the accumulator once: the accumulator then
// meets two roundings a step, not three, which is what the bound counts (three a step made it
// ~6x fp32's, and a fifth of the clustered graph's rows outgrew their lists). Its A fragments
// are loaded per 16 rows, as the MMAs use them, so that the lo halves cost 8 registers more
// rather than 24.
template <int KIND, bool SPLIT, typename T, int J>
__device__ __forceinline__ void pf_products(T (&acc)[4][J][4], unsigned a_slab,
                                            unsigned b_slab) {
    static_assert(!SPLIT || (KIND == MMA_F16 && PF_BK % 16 == 0 && PF_SPLIT_GROUP == 16),
                  "split rows: f16, whole groups of 8 words of each half in a slab");
    auto a_at = [&](int i, int kk) { return a_slab + (unsigned)(i * 16 * PF_LD + kk) * 4; };
    auto b_at = [&](int j, int kk) { return b_slab + (unsigned)(j * 16 * PF_LD + kk) * 4; };
    if (!SPLIT) {
#pragma unroll
        for (int kk = 0; kk < PF_BK; kk += 8) {
            unsigned fa[4][4], fb[J / 2][4];
#pragma unroll
            for (int i = 0; i < 4; ++i) load_matrices(fa[i], a_at(i, kk));
#pragma unroll
            for (int j = 0; j < J / 2; ++j) load_matrices(fb[j], b_at(j, kk));
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < J; ++j)
                    Mma<KIND>::run(acc[i][j], fa[i], fb[j >> 1][2 * (j & 1)],
                                   fb[j >> 1][2 * (j & 1) + 1]);
        }
        return;
    }
#pragma unroll
    for (int kk = 0; kk < PF_BK; kk += 16) {
        unsigned hb[J / 2][4], lb[J / 2][4];
#pragma unroll
        for (int j = 0; j < J / 2; ++j) {
            load_matrices(hb[j], b_at(j, kk));
            load_matrices(lb[j], b_at(j, kk + 8));
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned ha[4], la[4];
            load_matrices(ha, a_at(i, kk));
            load_matrices(la, a_at(i, kk + 8));
#pragma unroll
            for (int j = 0; j < J; ++j) {
                int h = j >> 1, w = 2 * (j & 1);
                T small[4] = {0, 0, 0, 0};
                Mma<KIND>::run(small, ha, lb[h][w], lb[h][w + 1]);
                Mma<KIND>::run(small, la, hb[h][w], hb[h][w + 1]);
                Mma<KIND>::run(acc[i][j], ha, hb[h][w], hb[h][w + 1]);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += small[e];
            }
        }
    }
}

// Tile w of a pair of ceil(na / PF_BM) x ntc blocks, row block first: the blocks running at
// once share a few row blocks (and the whole column side stays in L2). With a work list (the
// tiles select/locality.cu's pair_blocks kept, `len` of them), its w-th entry; past its end
// (the copies' look-ahead after a block's last tile) tile 0, whose copies nothing reads.
__device__ __forceinline__ void pf_tile(const unsigned* __restrict__ work, int len, int w,
                                        int ntc, int& r0, int& c0) {
    if (work) w = w < len ? (int)work[w] : 0;
    r0 = (w / ntc) * PF_BM;
    c0 = (w % ntc) * PF_BN;
}

// Value o of part `part` (value part * PF_BM + o) of a tile's thresholds and key terms, as the
// epilogue reads them from shared memory: part 0 the rows' thresholds, then the rows' terms, the
// columns' thresholds, the columns' terms (KeyForm, common/keys.cuh), and with scaled rows the
// rows' factors (KeyForm's delta times the row's scale back) and the columns' scales back. A row
// or column past the end gets threshold -inf and term +inf: it passes nothing.
#define PF_PARTS(SCALED) ((SCALED) ? 6 : 4)
__device__ __forceinline__ float pf_bound(int part, int o, int r0, int c0, int na, int nb,
                                          const KeyForm& form, const float* __restrict__ an,
                                          const float* __restrict__ bn,
                                          const float* __restrict__ ab,
                                          const float* __restrict__ bb,
                                          const float* __restrict__ row_list,
                                          const float* __restrict__ col_list, int kp, int both) {
    const float no_pass = __int_as_float(0xff800000);
    const float never = __int_as_float(0x7f800000);
    int r = r0 + o, c = c0 + o;
    switch (part) {
    case 0: return r < na ? row_list[(size_t)r * kp + kp - 1] : no_pass;
    case 1: return r >= na ? never : form.norms ? an[r] : form.alpha;
    case 2: return both && c < nb ? col_list[(size_t)c * kp + kp - 1] : no_pass;
    case 3: return c >= nb ? never : form.norms ? bn[c] : 0.0f;
    case 4: return form.delta * (r < na ? ab[r] : 1.0f);
    default: return c < nb ? bb[c] : 1.0f;
    }
}

// The key of dot product t of scaled rows: fmaf(delta * 2^-e_r * 2^-e_c, t, rs + cs), the
// factor a power of two times delta (exact), so one rounding as form_key's. Unscaled (cf the
// constant 1), form_key itself.
__device__ __forceinline__ float pf_key(float rf, float cf, float t, float rs, float cs) {
    return fmaf(__fmul_rn(rf, cf), t, rs + cs);
}

// a: na rows of the tile's row block, b: nb rows of its column block, both ldw words apart and
// kw words long (kw and ldw multiples of 4, the rows 16-byte aligned; padding words zero; with
// SPLIT, kw whole groups of both halves, a multiple of 16);
// an, bn their squared norms (read where the mode needs them); with SCALED, ab and bb their
// scales back (distance/scaled_half.cu), unread otherwise. The other arguments are
// tile_filter's (select/survivors.cu), with the same meaning. Any grid of PF_THREADS-thread
// blocks with PF_SHARED bytes of dynamic shared memory: each block takes tiles blockIdx.x,
// + gridDim.x, ... of the pair, and its slabs are one stream across them, so the copies of a
// tile's first slabs are in flight during the previous tile's last products and epilogue.
//
// The epilogue is branch-free for the values that pass nothing: each thread sets a bit per
// value that passes its row's or its column's threshold (64 values: 8 rows x 8 columns), and
// only then appends what the bits name, in one loop. Appending inside the unrolled loop over
// the values put 128 copies of the append code in the kernel: ncu found the warps waiting on
// instruction fetches 41 % of the time, and the epilogue alone took as long as reading the
// whole tile from device memory (docs/design/graph-tile-filter.md).
//
// work, work_len: null, or the tiles to run (pf_tile) and on the device how many: the others
// are left out whole (select/locality.cu pair_blocks proves they pass nothing).
//
// ROWS: the rows' side only (the k-NN's query blocks against the base, the graph's diagonal
// pairs): the columns' thresholds are never compared, so the epilogue tests each value once.
template <int KIND, bool SCALED, bool SPLIT, bool ROWS>
__device__ __forceinline__ void pair_filter_body(
    const unsigned* __restrict__ a, int na, const unsigned* __restrict__ b, int nb, int ldw,
    int kw, int mode, const float* __restrict__ an, const float* __restrict__ bn,
    const float* __restrict__ ab, const float* __restrict__ bb, unsigned row_off, unsigned col_off, int exclude_self, const float* __restrict__ row_list,
    const float* __restrict__ col_list, int kp, int both, unsigned* __restrict__ row_count,
    unsigned* __restrict__ row_floor, float* __restrict__ row_val,
    unsigned* __restrict__ row_idx, unsigned* __restrict__ col_count,
    unsigned* __restrict__ col_floor, float* __restrict__ col_val,
    unsigned* __restrict__ col_idx, int cap, const unsigned* __restrict__ work,
    const unsigned* __restrict__ work_len) {
    constexpr int BN = PF_BN, WN = PF_BN / 4, J = WN / 8;
    static_assert(J == 4, "a thread's values are 8 rows x 8 columns: two 32-bit masks");
    constexpr int PARTS = PF_PARTS(SCALED);
    static_assert(2 * PF_BM == PF_THREADS && BN == PF_BM, "PARTS / 2 bound values per thread");
    static_assert(!SPLIT || SCALED, "split rows are scaled rows");
    typedef typename Mma<KIND>::acc_t acc_t;
    DYNAMIC_SHARED(unsigned, pf_shared);
    unsigned* as = pf_shared;                            // [PF_STAGES][PF_BM][PF_LD]
    unsigned* bs = pf_shared + PF_STAGES * PF_BM * PF_LD;  // [PF_STAGES][BN][PF_LD]
    // The current tile's thresholds and key terms (pf_bound), read while its products run.
    __shared__ float s_bound[PARTS * PF_BM];
    const float* s_rthr = s_bound;
    const float* s_rs = s_bound + PF_BM;
    const float* s_cthr = s_bound + 2 * PF_BM;
    const float* s_cs = s_bound + 3 * PF_BM;
    const float* s_rf = s_bound + 4 * PF_BM;  // SCALED only
    const float* s_cf = s_bound + 5 * PF_BM;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int g = lane >> 2, t = lane & 3;
    int wm = (warp >> 2) * 64, wn = (warp & 3) * WN;
    int ntc = (nb + BN - 1) / BN;
    int tiles = work ? (int)*work_len : ((na + PF_BM - 1) / PF_BM) * ntc;
    if ((int)blockIdx.x >= tiles) return;
    int mine = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    // At least one slab per tile (of zeros when kw is 0), so every tile has its epilogue.
    int nk = max(1, (kw + PF_BK - 1) / PF_BK);
    int total = mine * nk;
    const KeyForm form = key_form(mode);
    // A value's factors (pf_key), the same in the test and in the append: delta and 1 unscaled.
    auto row_factor = [&](int r) { return SCALED ? s_rf[r] : form.delta; };
    auto col_factor = [&](int c) { return SCALED ? s_cf[c] : 1.0f; };

    // This thread's bound values are h * PF_THREADS + threadIdx.x, h < PARTS / 2: value bound_o
    // of part 2h + (threadIdx.x >= PF_BM), so each unrolled h chooses between two parts (not a
    // switch over all of them, as a value index the compiler cannot bound would take).
    const int bound_o = (int)threadIdx.x % PF_BM;
    auto bound_part = [&](int h) { return 2 * h + ((int)threadIdx.x >= PF_BM); };

    // The copies' place in this block's stream of slabs: slab copy_kt of its tile copy_lt, whose
    // rows start at copy_r0 and columns at copy_c0 (a division a tile, not one a slab).
    int copy_kt = 0, copy_lt = 0, copy_r0, copy_c0;
    pf_tile(work, tiles, blockIdx.x, ntc, copy_r0, copy_c0);
    // Slab f of the stream (the next one) into slot f % PF_STAGES.
    auto copy_slab = [&](int f) {
        int slot = f % PF_STAGES;
        pf_copy<PF_BM>(as + slot * PF_BM * PF_LD, a, na, ldw, kw, copy_r0, copy_kt);
        pf_copy<BN>(bs + slot * BN * PF_LD, b, nb, ldw, kw, copy_c0, copy_kt);
        if (++copy_kt == nk) {
            copy_kt = 0;
            pf_tile(work, tiles, (int)blockIdx.x + ++copy_lt * (int)gridDim.x, ntc, copy_r0,
                    copy_c0);
        }
    };
#pragma unroll
    for (int s = 0; s < PF_STAGES - 1; ++s) {
        if (s < total) copy_slab(s);
        copies_commit();
    }
    {
        int r0, c0;
        pf_tile(work, tiles, blockIdx.x, ntc, r0, c0);
#pragma unroll
        for (int h = 0; h < PARTS / 2; ++h)
            s_bound[threadIdx.x + h * PF_THREADS] = pf_bound(
                bound_part(h), bound_o, r0, c0, na, nb, form, an, bn, ab, bb, row_list, col_list,
                kp, both);
    }

    // Each lane's row address for the fragment loads (common/mma.cuh load_matrices): A's
    // matrices are rows 0-7, 8-15 of words 0-3, then of words 4-7; B's rows 0-7 of words 0-3,
    // 4-7, then rows 8-15 (the next column group's).
    int mat = lane >> 3, mrow = lane & 7;
    const unsigned a_lane =
        shared_address(as + (wm + (mat & 1) * 8 + mrow) * PF_LD + (mat >> 1) * 4);
    const unsigned b_lane =
        shared_address(bs + (wn + (mat >> 1) * 8 + mrow) * PF_LD + (mat & 1) * 4);

    acc_t acc[4][J][4];
    pf_zero(acc);
    // The next tile's bound values, loaded at its predecessor's first slab and stored after
    // that one's epilogue.
    float next_bound[PARTS / 2];
#pragma unroll
    for (int h = 0; h < PARTS / 2; ++h) next_bound[h] = 0.0f;
    int kt = 0, lt = 0;
    for (int f = 0; f < total; ++f) {
        // Slab f is in; every thread is done with the slot the next copy overwrites (slab
        // f - 1's, used in the previous iteration).
        copies_wait<PF_STAGES - 2>();
        __syncthreads();
        if (kt == 0 && lt + 1 < mine) {
            int r0, c0;
            pf_tile(work, tiles, (int)blockIdx.x + (lt + 1) * (int)gridDim.x, ntc, r0, c0);
#pragma unroll
            for (int h = 0; h < PARTS / 2; ++h)
                next_bound[h] = pf_bound(bound_part(h), bound_o, r0, c0, na, nb, form, an,
                                         bn, ab, bb, row_list, col_list, kp, both);
        }
        if (f + PF_STAGES - 1 < total) copy_slab(f + PF_STAGES - 1);
        copies_commit();
        int slot = f % PF_STAGES;
        pf_products<KIND, SPLIT>(acc, a_lane + (unsigned)(slot * PF_BM * PF_LD) * 4,
                                 b_lane + (unsigned)(slot * BN * PF_LD) * 4);
        if (++kt < nk) continue;

        // Epilogue of tile lt. Value v = 8q + p of this thread: row q = 2i + h (wm + 16i + 8h
        // + g), column p = 2j + e (wn + 8j + 2t + e), accumulator acc[i][j][2h + e]; bit v % 32
        // of mask v / 32.
        int r0, c0;
        pf_tile(work, tiles, (int)blockIdx.x + lt * (int)gridDim.x, ntc, r0, c0);
        float cthr[8], cs[8], cf[8];
#pragma unroll
        for (int p = 0; p < 8; ++p) {
            int c = wn + (p >> 1) * 8 + 2 * t + (p & 1);
            cthr[p] = s_cthr[c];
            cs[p] = s_cs[c];
            cf[p] = col_factor(c);
        }
        unsigned rmask[2] = {0u, 0u}, cmask[2] = {0u, 0u};
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            int r = wm + (q >> 1) * 16 + (q & 1) * 8 + g;
            float rthr = s_rthr[r], rs = s_rs[r], rf = row_factor(r);
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                float key = pf_key(
                    rf, cf[p], Mma<KIND>::value(acc[q >> 1][p >> 1][2 * (q & 1) + (p & 1)]), rs,
                    cs[p]);
                if (key <= rthr) rmask[q >> 2] |= 1u << ((8 * q + p) & 31);
                if (!ROWS && key <= cthr[p]) cmask[q >> 2] |= 1u << ((8 * q + p) & 31);
            }
        }
        // The few values that passed: their key again (the same operations on the same
        // value), and the appends.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            unsigned todo = rmask[half] | cmask[half];
            while (todo) {
                int bit = __ffs(todo) - 1;
                todo &= todo - 1;
                int v = 32 * half + bit, q = v >> 3, p = v & 7;
                float value = 0.0f;
#pragma unroll
                for (int w = 32 * half; w < 32 * half + 32; ++w)
                    if (w == v)
                        value = Mma<KIND>::value(
                            acc[w >> 4][(w & 7) >> 1][2 * ((w >> 3) & 1) + (w & 1)]);
                int rl = wm + (q >> 1) * 16 + (q & 1) * 8 + g;
                int cl = wn + (p >> 1) * 8 + 2 * t + (p & 1);
                int r = r0 + rl, c = c0 + cl;
                if (r >= na || c >= nb || (exclude_self && row_off + r == col_off + c)) continue;
                float key = pf_key(row_factor(rl), col_factor(cl), value, s_rs[rl], s_cs[cl]);
                if ((rmask[half] >> bit) & 1)
                    tf_append(row_count, row_floor, row_val, row_idx, cap, r, key, col_off + c);
                if ((cmask[half] >> bit) & 1)
                    tf_append(col_count, col_floor, col_val, col_idx, cap, c, key, row_off + r);
            }
        }
        pf_zero(acc);
        kt = 0;
        if (++lt < mine) {
            __syncthreads();  // every thread is done with this tile's bound values
#pragma unroll
            for (int h = 0; h < PARTS / 2; ++h)
                s_bound[threadIdx.x + h * PF_THREADS] = next_bound[h];
        }
    }
}

// One entry point per element kind and scaling, and one more of each for the rows' side only
// (two blocks per multiprocessor: at most 128 registers, 110.6 KB of dynamic shared memory and
// 2 or 3 KB of static each; launch two per multiprocessor). The rows' entry points take the
// same arguments and ignore `both` and the columns'.
#define PAIR_FILTER(name, KIND, SCALED, SPLIT, ROWS)                                                   \
    extern "C" __global__ void __launch_bounds__(PF_THREADS, 2) name(                          \
        const unsigned* __restrict__ a, int na, const unsigned* __restrict__ b, int nb,        \
        int ldw, int kw, int mode, const float* __restrict__ an,                               \
        const float* __restrict__ bn, const float* __restrict__ ab,                            \
        const float* __restrict__ bb, unsigned row_off, unsigned col_off, int exclude_self,    \
        const float* __restrict__ row_list, const float* __restrict__ col_list, int kp,        \
        int both, unsigned* __restrict__ row_count, unsigned* __restrict__ row_floor,          \
        float* __restrict__ row_val, unsigned* __restrict__ row_idx,                           \
        unsigned* __restrict__ col_count, unsigned* __restrict__ col_floor,                    \
        float* __restrict__ col_val, unsigned* __restrict__ col_idx, int cap,                  \
        const unsigned* __restrict__ work, const unsigned* __restrict__ work_len) {            \
        pair_filter_body<KIND, SCALED, SPLIT, ROWS>(a, na, b, nb, ldw, kw, mode, an, bn, ab, bb, \
                                             row_off, col_off, exclude_self, row_list,         \
                                             col_list, kp, ROWS ? 0 : both, row_count,         \
                                             row_floor, row_val, row_idx, col_count,           \
                                             col_floor, col_val, col_idx, cap, work,           \
                                             work_len);                                        \
    }

PAIR_FILTER(pair_filter_tf32, MMA_TF32, false, false, false)
PAIR_FILTER(pair_filter_f16, MMA_F16, false, false, false)
PAIR_FILTER(pair_filter_f16_scaled, MMA_F16, true, false, false)
PAIR_FILTER(pair_filter_f16_split, MMA_F16, true, true, false)
PAIR_FILTER(pair_filter_bf16, MMA_BF16, false, false, false)
PAIR_FILTER(pair_filter_s8, MMA_S8, false, false, false)
PAIR_FILTER(pair_filter_tf32_rows, MMA_TF32, false, false, true)
PAIR_FILTER(pair_filter_f16_rows, MMA_F16, false, false, true)
PAIR_FILTER(pair_filter_f16_scaled_rows, MMA_F16, true, false, true)
PAIR_FILTER(pair_filter_f16_split_rows, MMA_F16, true, true, true)
PAIR_FILTER(pair_filter_bf16_rows, MMA_BF16, false, false, true)
PAIR_FILTER(pair_filter_s8_rows, MMA_S8, false, false, true)
