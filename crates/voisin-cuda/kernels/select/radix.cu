// Radix select: one thread block per row finds the row's k smallest keys for any k up to the row
// length (no 2048 cap), at the price of five reads of the row: four 8-bit histogram passes pin
// down the k-th key's bits exactly, a fifth pass collects every key below it plus enough keys
// equal to it. Output order within a row is arbitrary; the host sorts.
//
// The row is a whole query-versus-base row (the planner gives radix mode one tile per row).

#include "common/keys.cuh"

extern "C" __global__ void select_radix(const float* __restrict__ tile, long long ld, int rows,
                                        int cols, int mode, const float* __restrict__ rn,
                                        const float* __restrict__ cn, unsigned row_off,
                                        unsigned col_off, int exclude_self, int k,
                                        float* __restrict__ out_val,
                                        unsigned* __restrict__ out_idx) {
    __shared__ unsigned hist[256];
    __shared__ unsigned prefix, mask;
    __shared__ int need;  // how many of the keys equal to the current prefix are still wanted
    __shared__ int n_lt, n_eq;

    int r = blockIdx.x;
    if (r >= rows) return;
    const float* row = tile + (size_t)r * ld;
    unsigned self = row_off + (unsigned)r;
    if (threadIdx.x == 0) {
        prefix = 0;
        mask = 0;
        need = k;
        n_lt = 0;
        n_eq = 0;
    }
    __syncthreads();

    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        unsigned p = prefix, m = mask;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            // The self pair gets the largest possible bits so it is never among the k.
            unsigned u = (exclude_self && col_off + (unsigned)c == self)
                             ? 0xffffffffu
                             : order_bits(tile_key(mode, row[c], rn, cn, r, c));
            if ((u & m) == p) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int left = need;
            unsigned b = 0;
            for (; b < 255; ++b) {
                if ((int)hist[b] >= left) break;
                left -= (int)hist[b];
            }
            need = left;
            prefix = p | (b << shift);
            mask = m | (255u << shift);
        }
        __syncthreads();
    }

    unsigned kth = prefix;
    int want_eq = need;
    int lt_total = k - want_eq;
    float* ov = out_val + (size_t)r * k;
    unsigned* oi = out_idx + (size_t)r * k;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        bool is_self = exclude_self && col_off + (unsigned)c == self;
        float v = tile_key(mode, row[c], rn, cn, r, c);
        unsigned u = is_self ? 0xffffffffu : order_bits(v);
        if (u < kth) {
            int p = atomicAdd(&n_lt, 1);
            ov[p] = v;
            oi[p] = col_off + (unsigned)c;
        } else if (u == kth) {
            int p = atomicAdd(&n_eq, 1);
            if (p < want_eq) {
                ov[lt_total + p] = v;
                oi[lt_total + p] = col_off + (unsigned)c;
            }
        }
    }
}
