// Fused distance + threshold filter for small candidate lists (src/ops/fused.rs): each block computes
// a 128 x 128 tile of dot products (queries x base items) in registers, forms the keys in the
// epilogue (tile_key, common/keys.cuh) and appends only the pairs whose key is at most the query's
// threshold to that query's candidate buffer. The tile never goes to device memory.
//
// Why a filter and not a running list: the host first selects each query's kp smallest keys in
// an ordinary tile (knn.rs), whose largest is the threshold; with a threshold that tight only a
// few hundred or thousand items per query pass in a 1M base, so appends are rare and plain
// atomics on the per-query counter suffice. merge_survivors (survivors.cu) then keeps the kp
// smallest of the list and the buffer. Counts past the buffer's capacity are still counted: the
// host sees the overflow and redoes those queries without fusion.
//
// One generic kernel body: the variation between strict fp32 (SIMT FMA) and TF32 (mma.sync
// m16n8k8 on tensor cores, inputs rounded by cvt.rna, fp32 accumulation) is the template flag.
// Both give each thread the same 64 outputs, the m16n8 accumulator layout of the mma: rows
// g and g+8, columns 2t and 2t+1 of each 16 x 8 piece (g = lane / 4, t = lane % 4).

#include "common/keys.cuh"

// FZ_BN (base items per tile) comes from src/runtime/abi.rs.
#define FZ_BM 128
#define FZ_BK 32
// Row stride of the row-major shared slabs (rows x 32 dims): 36 = 4 mod 32 keeps the fragment
// reads (row g, dim t: g * 36 + t, g < 8, t < 4) free of bank conflicts, and 144-byte rows keep
// float4 stores aligned and conflict-free (a quarter warp stores one 128-byte row piece).
#define FZ_LD (FZ_BK + 4)
#define FZ_THREADS 256
// Per-thread float4 groups of one 128 x 32 slab: 1024 groups over 256 threads.
#define FZ_LOADS (FZ_BM * FZ_BK / 4 / FZ_THREADS)

__device__ __forceinline__ float fz_tf32(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}

// Loads rows [r0, r0 + 128) x dims [k0, k0 + 32) of a row-major n x d matrix into registers as
// float4 groups (8 lanes read one 128-byte row piece), zero outside. `vec`: d % 4 == 0, so a
// group is either wholly inside the row or wholly past its end and 16-byte aligned.
__device__ __forceinline__ void fz_load(float4 (&v)[FZ_LOADS], const float* __restrict__ m, int n,
                                        int d, int r0, int k0, bool vec) {
#pragma unroll
    for (int e = 0; e < FZ_LOADS; ++e) {
        int idx = e * FZ_THREADS + threadIdx.x;
        int r = r0 + idx / (FZ_BK / 4), k = k0 + (idx % (FZ_BK / 4)) * 4;
        const float* p = m + (size_t)r * d + k;
        if (r >= n || k >= d) {
            v[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else if (vec) {
            v[e] = *reinterpret_cast<const float4*>(p);
        } else {
            v[e].x = p[0];
            v[e].y = k + 1 < d ? p[1] : 0.0f;
            v[e].z = k + 2 < d ? p[2] : 0.0f;
            v[e].w = k + 3 < d ? p[3] : 0.0f;
        }
    }
}

template <bool TF32>
__device__ __forceinline__ void fz_store(float* s, const float4 (&v)[FZ_LOADS]) {
#pragma unroll
    for (int e = 0; e < FZ_LOADS; ++e) {
        int idx = e * FZ_THREADS + threadIdx.x;
        float4 x = v[e];
        if (TF32) {
            x.x = fz_tf32(x.x);
            x.y = fz_tf32(x.y);
            x.z = fz_tf32(x.z);
            x.w = fz_tf32(x.w);
        }
        *reinterpret_cast<float4*>(s + (idx / (FZ_BK / 4)) * FZ_LD + (idx % (FZ_BK / 4)) * 4) = x;
    }
}

// Pair w's query tile (the fastest-moving index) and base tile: the blocks running at once
// (two per SM) share a few base tiles across all query tiles, so each base tile comes from
// device memory once and from L2 after; base tiles first streamed the whole base from device
// memory once per query tile (79 times for 10k queries).
__device__ __forceinline__ int fz_q0(long long w, int nqt) { return (int)(w % nqt) * FZ_BM; }
__device__ __forceinline__ int fz_b0(long long w, int nqt) { return (int)(w / nqt) * FZ_BN; }

// The block walks the (query tile, base tile) pairs w = blockIdx.x, + gridDim.x, ... (one block
// per SM), and the loads of the next pair's first slab are in flight during the
// last slab's products and the epilogue, so a tile's prologue is hidden.
template <bool TF32>
__device__ void fused_filter_body(const float* __restrict__ q, int nq, const float* __restrict__ b,
                                  int nb, int d, int mode, const float* __restrict__ qn,
                                  const float* __restrict__ bn, unsigned col_off,
                                  const float* __restrict__ thr, int thr_stride,
                                  unsigned* __restrict__ count, float* __restrict__ buf_val,
                                  unsigned* __restrict__ buf_idx, int cap) {
    __shared__ __align__(16) float qs[FZ_BM * FZ_LD];
    __shared__ __align__(16) float bs[FZ_BN * FZ_LD];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int g = lane >> 2, t = lane & 3;
    // 8 warps as 2 (query rows) x 4 (base columns); each warp owns 64 x 32 outputs.
    int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    int nqt = (nq + FZ_BM - 1) / FZ_BM;
    long long total = (long long)nqt * ((nb + FZ_BN - 1) / FZ_BN);
    long long w = blockIdx.x;
    if (w >= total) return;
    bool vec = (d & 3) == 0;
    float4 qv[FZ_LOADS], bv[FZ_LOADS];
    int q0 = fz_q0(w, nqt), b0 = fz_b0(w, nqt);
    fz_load(qv, q, nq, d, q0, 0, vec);
    fz_load(bv, b, nb, d, b0, 0, vec);
    while (true) {
        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
        for (int k0 = 0; k0 < d; k0 += FZ_BK) {
            __syncthreads();
            fz_store<TF32>(qs, qv);
            fz_store<TF32>(bs, bv);
            __syncthreads();
            // Next slab: of this pair, or the first of the next pair.
            long long nw = w;
            int nk = k0 + FZ_BK;
            if (nk >= d) {
                nk = 0;
                nw += gridDim.x;
            }
            if (nw < total) {
                fz_load(qv, q, nq, d, fz_q0(nw, nqt), nk, vec);
                fz_load(bv, b, nb, d, fz_b0(nw, nqt), nk, vec);
            }
            if (TF32) {
#pragma unroll
                for (int kk = 0; kk < FZ_BK; kk += 8) {
                    unsigned a[4][4], bb[4][2];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float* s = qs + (wm + i * 16 + g) * FZ_LD + kk + t;
                        a[i][0] = __float_as_uint(s[0]);
                        a[i][1] = __float_as_uint(s[8 * FZ_LD]);
                        a[i][2] = __float_as_uint(s[4]);
                        a[i][3] = __float_as_uint(s[8 * FZ_LD + 4]);
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float* s = bs + (wn + j * 8 + g) * FZ_LD + kk + t;
                        bb[j][0] = __float_as_uint(s[0]);
                        bb[j][1] = __float_as_uint(s[4]);
                    }
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            asm volatile(
                                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                                : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]),
                                  "+f"(acc[i][j][3])
                                : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
                                  "r"(bb[j][0]), "r"(bb[j][1]));
                }
            } else {
#pragma unroll 4
                for (int kk = 0; kk < FZ_BK; ++kk) {
                    float a[4][2], bb[4][2];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        a[i][0] = qs[(wm + i * 16 + g) * FZ_LD + kk];
                        a[i][1] = qs[(wm + i * 16 + g + 8) * FZ_LD + kk];
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        bb[j][0] = bs[(wn + j * 8 + 2 * t) * FZ_LD + kk];
                        bb[j][1] = bs[(wn + j * 8 + 2 * t + 1) * FZ_LD + kk];
                    }
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                acc[i][j][e] = fmaf(a[i][e >> 1], bb[j][e & 1], acc[i][j][e]);
                }
            }
        }
        // Epilogue: keys, threshold test, rare appends.
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int r = q0 + wm + i * 16 + g + 8 * h;
                if (r >= nq) continue;
                float limit = thr[(size_t)r * thr_stride];
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        int c = b0 + wn + j * 8 + 2 * t + e;
                        if (c >= nb) continue;
                        float key = tile_key(mode, acc[i][j][2 * h + e], qn, bn, r, c);
                        if (key <= limit) {
                            unsigned p = atomicAdd(&count[r], 1u);
                            if (p < (unsigned)cap) {
                                buf_val[(size_t)r * cap + p] = key;
                                buf_idx[(size_t)r * cap + p] = col_off + (unsigned)c;
                            }
                        }
                    }
            }
        w += gridDim.x;
        if (w >= total) break;
        q0 = fz_q0(w, nqt);
        b0 = fz_b0(w, nqt);
    }
}

// q: nq x d prepared query rows, b: nb x d prepared base rows (global index col_off + c).
// thr[r * thr_stride]: query r's threshold (the last slot of its running list). count: nq
// counters, zero before the launch. buf_*: nq x cap. Any grid of 256-thread blocks (as many
// as fit on the GPU at once: blocks loop over the tile pairs). The TF32 variant fits 128
// registers without spills (two blocks per SM); the FMA variant would spill there (one block).
extern "C" __global__ void __launch_bounds__(FZ_THREADS, 1)
    fused_filter_fp32(const float* __restrict__ q, int nq, const float* __restrict__ b, int nb,
                      int d, int mode, const float* __restrict__ qn,
                      const float* __restrict__ bn, unsigned col_off,
                      const float* __restrict__ thr, int thr_stride,
                      unsigned* __restrict__ count, float* __restrict__ buf_val,
                      unsigned* __restrict__ buf_idx, int cap) {
    fused_filter_body<false>(q, nq, b, nb, d, mode, qn, bn, col_off, thr, thr_stride, count,
                             buf_val, buf_idx, cap);
}

extern "C" __global__ void __launch_bounds__(FZ_THREADS, 2)
    fused_filter_tf32(const float* __restrict__ q, int nq, const float* __restrict__ b, int nb,
                      int d, int mode, const float* __restrict__ qn,
                      const float* __restrict__ bn, unsigned col_off,
                      const float* __restrict__ thr, int thr_stride,
                      unsigned* __restrict__ count, float* __restrict__ buf_val,
                      unsigned* __restrict__ buf_idx, int cap) {
    fused_filter_body<true>(q, nq, b, nb, d, mode, qn, bn, col_off, thr, thr_stride, count,
                            buf_val, buf_idx, cap);
}
