// The k-NN graph's locality order and the tiles of a fused pair it lets skip (src/ops/locality.rs,
// docs/design/graph-tile-filter.md, "Locality order").
//
// The graph runs on its rows reordered so that near items sit in the same blocks of PF_BM rows.
// Each block gets a bounding sphere: a centre (the rows' mean, in f64) and a radius (the largest
// distance of a row from that centre, rounded up). Two items of blocks A and B are then at least
// dmin = |c_A - c_B| - R_A - R_B apart, so their L2 key is at least dmin^2, and the key a tensor
// core computes is at least that less the plan's bound. A tile of the fused pair whose lowest
// possible computed key is above every threshold it is tested against (its rows' lists' and,
// for both sides, its columns') could not append anything: pair_blocks leaves it out of the
// pair's work list, and pair_filter.cu runs only the tiles listed.

#include "common/keys.cuh"

// Row p of dst = row from[p] of src, rows of ld words, p < n; with `map`, each word w other than
// NO_INDEX becomes map[w] (the ids of lists moved between orders).
extern "C" __global__ void gather_rows(const unsigned* __restrict__ src, unsigned long long n,
                                       int ld, const unsigned* __restrict__ from,
                                       const unsigned* __restrict__ map,
                                       unsigned* __restrict__ dst) {
    unsigned long long total = n * (unsigned)ld;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < total; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long p = i / (unsigned)ld, w = i % (unsigned)ld;
        unsigned v = src[(unsigned long long)from[p] * (unsigned)ld + w];
        dst[i] = map && v != NO_INDEX ? map[v] : v;
    }
}

// One block (of any size, a multiple of 32 threads) per block of bm rows of `rows` (n rows of d
// f32 values, ld apart): centres[b * d + j] the mean of the block's values j, in f64, and
// radii[b] at least the largest distance of one of its rows from that centre (computed in f64,
// whose few roundings over d terms the factor 1 + 2^-30 covers for any d below 2^20).
extern "C" __global__ void block_spheres(const float* __restrict__ rows, long long n, int d,
                                         long long ld, int bm, double* __restrict__ centres,
                                         double* __restrict__ radii) {
    __shared__ double s_far[32];
    long long r0 = (long long)blockIdx.x * bm;
    int m = (int)min((long long)bm, n - r0);
    double* c = centres + (size_t)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        double s = 0.0;
        for (int r = 0; r < m; ++r) s += (double)rows[(r0 + r) * ld + j];
        c[j] = m > 0 ? s / m : 0.0;
    }
    __syncthreads();  // the centre, written by this block, is read whole below
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double far = 0.0;
    for (int r = warp; r < m; r += warps) {
        double s = 0.0;
        for (int j = lane; j < d; j += 32) {
            double v = (double)rows[(r0 + r) * ld + j] - c[j];
            s += v * v;
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        far = fmax(far, s);
    }
    if (lane == 0) s_far[warp] = far;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < warps; ++w) far = fmax(far, s_far[w]);
        radii[blockIdx.x] = sqrt(far) * (1.0 + 0x1p-30);
    }
}

// The tiles of one fused pair (rows [0, na) of a tile starting at block rb0 of the spheres,
// columns [0, nb) of one starting at block cb0; tiles of PF_BM x PF_BN numbered as
// pair_filter.cu's pf_tile numbers them) that may pass something, appended to work[] (count in
// *len, zero on entry; in any order), their values (rows x columns) added to *values. Only tiles
// whose row and column blocks are band_lo to band_hi - 1 blocks apart are considered (a
// diagonal pair runs in bands of block distance, nearest first; 0 and INT_MAX: every tile).
// A warp a tile: the centres' distance over the lanes, and the largest threshold of the tile's
// rows (row_list, kp slots per row, the kp-th the threshold) and, with `both`, of its columns.
//
// `slack` and `rel` are the plan's bound at the set's largest norm (src/ops/locality.rs): a key
// the tensor cores compute for two items whose exact key is K >= 0 is at least
// (K - slack) / (1 + rel) wherever that is positive. A tile is left out when that, for
// K = dmin^2 rounded down, is above every threshold; the spheres' own roundings are inside
// the factors 1 -+ 2^-30 on the distance and the key.
extern "C" __global__ void pair_blocks(const double* __restrict__ centres,
                                       const double* __restrict__ radii, int d, int rb0, int cb0,
                                       int na, int nb, const float* __restrict__ row_list,
                                       const float* __restrict__ col_list, int kp, int both,
                                       int band_lo, int band_hi, double slack, double rel,
                                       unsigned* __restrict__ work,
                                       unsigned* __restrict__ len,
                                       unsigned long long* __restrict__ values) {
    int lane = threadIdx.x & 31;
    int ntc = (nb + PF_BN - 1) / PF_BN;
    int tiles = ((na + PF_BM - 1) / PF_BM) * ntc;
    int w = (int)((blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5);
    if (w >= tiles) return;
    int rb = w / ntc, cb = w % ntc;
    int apart = abs(rb0 + rb - cb0 - cb);
    if (apart < band_lo || apart >= band_hi) return;
    const double* ca = centres + (size_t)(rb0 + rb) * d;
    const double* cc = centres + (size_t)(cb0 + cb) * d;
    double s = 0.0;
    for (int j = lane; j < d; j += 32) {
        double v = ca[j] - cc[j];
        s += v * v;
    }
    float thr = __int_as_float(0xff800000);
    for (int o = lane; o < PF_BM; o += 32) {
        int r = rb * PF_BM + o;
        if (r < na) thr = fmaxf(thr, row_list[(size_t)r * kp + kp - 1]);
        int c = cb * PF_BN + o;
        if (both && c < nb) thr = fmaxf(thr, col_list[(size_t)c * kp + kp - 1]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        thr = fmaxf(thr, __shfl_xor_sync(0xffffffffu, thr, o));
    }
    if (lane != 0) return;
    double dmin = sqrt(s) * (1.0 - 0x1p-30) - radii[rb0 + rb] - radii[cb0 + cb];
    bool skip = false;
    if (dmin > 0.0) {
        double low = (dmin * dmin * (1.0 - 0x1p-30) - slack) / (1.0 + rel);
        // A NaN threshold (never in a list) or +inf keeps the tile.
        skip = low > 0.0 && low > (double)thr;
    }
    if (skip) return;
    work[atomicAdd(len, 1u)] = (unsigned)w;
    unsigned long long rows = min(PF_BM, na - rb * PF_BM), cols = min(PF_BN, nb - cb * PF_BN);
    atomicAdd(values, rows * cols);
}
