// Block select: one thread block per tile row keeps that row's running list of the `kp` smallest
// keys (kp a power of two, at most 2048) across all the tiles of a pass.
//
// Why this shape: after the first tiles the list's worst key is a tight threshold, so almost every
// tile value fails one comparison and the tile is read once, coalesced. Values that pass go to a
// shared-memory buffer; a full buffer is bitonic-sorted and merged into the list (the
// min(L[i], B[kp-1-i]) trick gives a bitonic sequence holding the kp smallest, which one bitonic
// merge sorts). Ties at the threshold may be dropped in any order: the host re-ranks exactly and
// only needs *some* kp smallest approximate keys plus the largest of them.

#define SB_GROUP 4  // values per thread between barriers (one float4)
#define SB_LOADS 4  // float4 loads per thread in flight

__device__ void bitonic_sort(float* v, unsigned* ix, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (n >> 1); i += blockDim.x) {
                int lo = 2 * i - (i & (stride - 1));
                int hi = lo + stride;
                bool asc = (lo & size) == 0;
                if ((v[lo] > v[hi]) == asc) {
                    float tv = v[lo]; v[lo] = v[hi]; v[hi] = tv;
                    unsigned ti = ix[lo]; ix[lo] = ix[hi]; ix[hi] = ti;
                }
            }
            __syncthreads();
        }
    }
}

// Merges the `count` buffered entries into the sorted list. Only the filled part of the buffer
// is sorted (rounded up to a power of two, and to kp so that B[0..kp) is sorted with +inf
// padding): after the first tiles a row passes a few dozen values per tile, and sorting the
// whole buffer each time cost as much as reading the tile.
__device__ void merge_into_list(float* lv, unsigned* li, float* bv, unsigned* bi, int kp,
                                int count) {
    int m = 2;
    while (m < count) m <<= 1;
    int pad = m > kp ? m : kp;
    for (int i = count + threadIdx.x; i < pad; i += blockDim.x) {
        bv[i] = __int_as_float(0x7f800000);
        bi[i] = NO_INDEX;
    }
    __syncthreads();
    bitonic_sort(bv, bi, m);
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        float b = bv[kp - 1 - i];
        if (b < lv[i]) {
            lv[i] = b;
            li[i] = bi[kp - 1 - i];
        }
    }
    __syncthreads();
    for (int stride = kp >> 1; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < (kp >> 1); i += blockDim.x) {
            int lo = 2 * i - (i & (stride - 1));
            int hi = lo + stride;
            if (lv[lo] > lv[hi]) {
                float tv = lv[lo]; lv[lo] = lv[hi]; lv[hi] = tv;
                unsigned ti = li[lo]; li[lo] = li[hi]; li[hi] = ti;
            }
        }
        __syncthreads();
    }
}

// tile: rows x cols, row stride ld. rn/cn: per-row / per-column squared norms (KEY_L2 only).
// The global index of column c is col_off + c; with exclude_self, the pair whose global column
// index equals row_off + r is skipped (the graph's self pair). list_val/list_idx: rows x kp,
// sorted ascending, +inf / NO_INDEX when empty. nbuf: buffer size, a power of two >= kp and
// >= 2 * SB_GROUP * blockDim.x.
extern "C" __global__ void select_block(const float* __restrict__ tile, long long ld, int rows,
                                        int cols, int mode, const float* __restrict__ rn,
                                        const float* __restrict__ cn, unsigned row_off,
                                        unsigned col_off, int exclude_self,
                                        float* __restrict__ list_val,
                                        unsigned* __restrict__ list_idx, int kp, int nbuf) {
    extern __shared__ float smem[];
    float* lv = smem;
    unsigned* li = (unsigned*)(lv + kp);
    float* bv = (float*)(li + kp);
    unsigned* bi = (unsigned*)(bv + nbuf);
    __shared__ int count;
    __shared__ float thr;

    int r = blockIdx.x;
    if (r >= rows) return;
    float* gv = list_val + (size_t)r * kp;
    unsigned* gi = list_idx + (size_t)r * kp;
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        lv[i] = gv[i];
        li[i] = gi[i];
    }
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    if (threadIdx.x == 0) thr = lv[kp - 1];
    __syncthreads();

    const float* row = tile + (size_t)r * ld;
    unsigned self = row_off + (unsigned)r;
    // Values are handled SB_GROUP per thread between barriers (a group inserts at most
    // SB_GROUP * blockDim values, so the buffer is flushed while that much room is left).
    // `est` is a uniform upper bound of the fill (every thread gets the same barrier count);
    // the merge reads the true count, which no thread changes between the barrier and merge.
    // Loads run SB_LOADS groups ahead of their use: ncu showed the kernel at 1.5 TB/s with too
    // few bytes in flight; rows are read as float4 when the row stride allows it.
    int est = 0;
    const int room = nbuf - SB_GROUP * (int)blockDim.x;
    const bool vec = (ld & 3) == 0;
    const int span = SB_LOADS * SB_GROUP * blockDim.x;
    for (int start = 0; start < cols; start += span) {
        float v[SB_LOADS][SB_GROUP];
#pragma unroll
        for (int j = 0; j < SB_LOADS; ++j) {
            int c0 = start + (j * blockDim.x + threadIdx.x) * SB_GROUP;
            if (vec && c0 + SB_GROUP <= cols) {
                float4 q = *reinterpret_cast<const float4*>(row + c0);
                v[j][0] = q.x;
                v[j][1] = q.y;
                v[j][2] = q.z;
                v[j][3] = q.w;
            } else {
#pragma unroll
                for (int e = 0; e < SB_GROUP; ++e)
                    v[j][e] = c0 + e < cols ? row[c0 + e] : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < SB_LOADS; ++j) {
            int c0 = start + (j * blockDim.x + threadIdx.x) * SB_GROUP;
            float t = thr;
            bool any = false;
#pragma unroll
            for (int e = 0; e < SB_GROUP; ++e) {
                int c = c0 + e;
                unsigned gi = col_off + (unsigned)c;
                if (c < cols && !(exclude_self && gi == self)) {
                    float key = tile_key(mode, v[j][e], rn, cn, r, c);
                    if (key < t) {
                        int p = atomicAdd(&count, 1);
                        bv[p] = key;
                        bi[p] = gi;
                        any = true;
                    }
                }
            }
            est += SB_GROUP * __syncthreads_count(any);
            if (est > room) {
                int n = count;
                merge_into_list(lv, li, bv, bi, kp, n);
                if (threadIdx.x == 0) {
                    count = 0;
                    thr = lv[kp - 1];
                }
                __syncthreads();
                est = 0;
            }
        }
    }
    {
        int n = count;
        __syncthreads();
        if (n > 0) merge_into_list(lv, li, bv, bi, kp, n);
    }
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        gv[i] = lv[i];
        gi[i] = li[i];
    }
}

// Empties `n` list slots: +inf keys, no index.
extern "C" __global__ void fill_lists(float* __restrict__ val, unsigned* __restrict__ idx,
                                      unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        val[i] = __int_as_float(0x7f800000);
        idx[i] = NO_INDEX;
    }
}

// Copies the first `keep` entries of each list of `width` (sorted lists: the `keep` smallest) to
// rows x keep, so that only what the host needs crosses the bus; n = rows * keep.
extern "C" __global__ void list_prefix(const float* __restrict__ sv, const unsigned* __restrict__ si,
                                       int width, float* __restrict__ dv,
                                       unsigned* __restrict__ di, int keep,
                                       unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long r = i / (unsigned)keep, j = i % (unsigned)keep;
        dv[i] = sv[r * (unsigned)width + j];
        di[i] = si[r * (unsigned)width + j];
    }
}
