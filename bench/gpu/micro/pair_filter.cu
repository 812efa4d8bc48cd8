// Microbenchmark of the graph's tile pair on one GPU (no Rust needed): cuBLAS GEMM + tile_filter
// (select/survivors.cu) against the fused tile pair (select/pair_filter.cu), for TF32 (f32 rows),
// f16 and int8 rows (and f16 rows split in two halves, fp16x3), on one 16384 x 16384 pair of
// d = 128. Thresholds are each row's and column's
// 32nd smallest key of the tile (about what a warm list lets through). Checks the fused kernel's
// survivors against the f64 keys and its counts against tile_filter's.
// build: nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fopenmp -I crates/voisin-cuda/kernels -I <abi dir> bench/gpu/micro/pair_filter.cu -lcublas
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "select/survivors.cu"
#include "select/pair_filter.cu"

#define CK(x)                                                                          \
    do {                                                                               \
        auto e_ = (x);                                                                 \
        if (e_ != 0) {                                                                 \
            printf("error %d at %s:%d: %s\n", (int)e_, __FILE__, __LINE__, #x);        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__global__ void read_all(const float4* p, size_t n4, float* out) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 1234.5f) out[0] = s;
}

static const int N = 16384, D = 128, KP = 16, CAP = 256, PICK = 32;

struct Bufs {
    unsigned *count, *floor, *idx;
    float* val;
    void alloc() {
        CK(cudaMalloc(&count, N * 4));
        CK(cudaMalloc(&floor, N * 4));
        CK(cudaMalloc(&idx, (size_t)N * CAP * 4));
        CK(cudaMalloc(&val, (size_t)N * CAP * 4));
    }
    void zero(cudaStream_t s) {
        CK(cudaMemsetAsync(count, 0, N * 4, s));
        CK(cudaMemsetAsync(floor, 0, N * 4, s));
    }
};

struct Got {
    std::vector<unsigned> rc, cc, ri, ci;
    std::vector<float> rv, cv;
};

static Got fetch(Bufs& r, Bufs& c) {
    Got g;
    g.rc.resize(N); g.cc.resize(N);
    g.ri.resize((size_t)N * CAP); g.ci.resize((size_t)N * CAP);
    g.rv.resize((size_t)N * CAP); g.cv.resize((size_t)N * CAP);
    CK(cudaMemcpy(g.rc.data(), r.count, N * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.cc.data(), c.count, N * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.ri.data(), r.idx, (size_t)N * CAP * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.ci.data(), c.idx, (size_t)N * CAP * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.rv.data(), r.val, (size_t)N * CAP * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.cv.data(), c.val, (size_t)N * CAP * 4, cudaMemcpyDeviceToHost));
    return g;
}

// kind: 0 tf32, 1 f16, 3 s8
static int sms = 132;

static void run_kind(int kind, cublasHandle_t h, cudaStream_t st) {
    const char* name = kind == 0 ? "tf32" : kind == 1 ? "f16" : "s8";
    std::mt19937 rng(7 + kind);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_int_distribution<int> ud(-128, 127);
    // Host values as doubles (exact) and device words.
    int ldw = kind == 0 ? D : kind == 1 ? D / 2 : D / 4;
    std::vector<double> ha((size_t)N * D), hb((size_t)N * D);
    std::vector<unsigned> wa((size_t)N * ldw), wb((size_t)N * ldw);
    auto fill = [&](std::vector<double>& hv, std::vector<unsigned>& w) {
        for (size_t i = 0; i < hv.size(); ++i) {
            if (kind == 0) {
                float f = nd(rng) + 0.25f;
                hv[i] = f;
                memcpy(&w[i], &f, 4);
            } else if (kind == 1) {
                __half x = __float2half(nd(rng) + 0.25f);
                hv[i] = __half2float(x);
                ((__half*)w.data())[i] = x;
            } else {
                int v = ud(rng);
                hv[i] = v;
                ((signed char*)w.data())[i] = (signed char)v;
            }
        }
    };
    fill(ha, wa);
    fill(hb, wb);
    std::vector<float> na(N), nb(N);
    for (int r = 0; r < N; ++r) {
        double sa = 0, sb = 0;
        for (int k = 0; k < D; ++k) {
            sa += ha[(size_t)r * D + k] * ha[(size_t)r * D + k];
            sb += hb[(size_t)r * D + k] * hb[(size_t)r * D + k];
        }
        na[r] = (float)sa;
        nb[r] = (float)sb;
    }
    int mode = kind == 3 ? KEY_L2_INT : KEY_L2;
    unsigned *da, *db;
    float *dna, *dnb, *tile, *rl, *cl;
    CK(cudaMalloc(&da, wa.size() * 4));
    CK(cudaMalloc(&db, wb.size() * 4));
    CK(cudaMalloc(&dna, N * 4));
    CK(cudaMalloc(&dnb, N * 4));
    CK(cudaMalloc(&tile, (size_t)N * N * 4));
    CK(cudaMalloc(&rl, (size_t)N * KP * 4));
    CK(cudaMalloc(&cl, (size_t)N * KP * 4));
    CK(cudaMemcpy(da, wa.data(), wa.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, wb.data(), wb.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dna, na.data(), N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dnb, nb.data(), N * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    // The tile, row-major N x N: column-major (B^T A).
    auto gemm = [&]() {
        if (kind == 3) {
            int one = 1, zero = 0;
            CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, N, D, &one, db, CUDA_R_8I, D, da,
                            CUDA_R_8I, D, &zero, tile, CUDA_R_32I, N, CUBLAS_COMPUTE_32I,
                            CUBLAS_GEMM_DEFAULT));
        } else {
            float one = 1, zero = 0;
            cudaDataType t = kind == 0 ? CUDA_R_32F : CUDA_R_16F;
            cublasComputeType_t c = kind == 0 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
            CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, N, D, &one, db, t, D, da, t, D, &zero,
                            tile, CUDA_R_32F, N, c, CUBLAS_GEMM_DEFAULT));
        }
    };
    const int REPS = 10;
    auto timed = [&](auto f) {
        f();
        CK(cudaStreamSynchronize(st));
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < REPS; ++i) f();
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return ms / REPS;
    };
    double flop = 2.0 * N * N * D;
    float t_gemm = timed(gemm);
    printf("[%s] cublas gemm %.3f ms (%.0f TFLOP/s)\n", name, t_gemm, flop / t_gemm / 1e9);
    float* scratch;
    CK(cudaMalloc(&scratch, 4));
    float t_read = timed([&]() { read_all<<<132 * 8, 512, 0, st>>>((const float4*)tile, (size_t)N * N / 4, scratch); });
    printf("[%s] read of the tile %.3f ms (%.2f TB/s)\n", name, t_read, (double)N * N * 4 / t_read / 1e9);
    // Thresholds: the PICK-th smallest key of each row and each column.
    std::vector<float> ht((size_t)N * N);
    gemm();
    CK(cudaMemcpy(ht.data(), tile, ht.size() * 4, cudaMemcpyDeviceToHost));
    auto key = [&](int r, int c) {
        float v = ht[(size_t)r * N + c];
        if (kind == 3) { int iv; memcpy(&iv, &v, 4); v = (float)iv; }
        return na[r] + nb[c] - 2.0f * v;
    };
    // The PICK-th smallest key of each row (rows) or each column.
    auto thresholds = [&](bool rows) {
        std::vector<float> th(N);
#pragma omp parallel for
        for (int i = 0; i < N; ++i) {
            std::vector<float> line(N);
            for (int j = 0; j < N; ++j) line[j] = rows ? key(i, j) : key(j, i);
            std::nth_element(line.begin(), line.begin() + PICK - 1, line.end());
            th[i] = line[PICK - 1];
        }
        return th;
    };
    std::vector<float> rth = thresholds(true), cth = thresholds(false);
    std::vector<float> hl((size_t)N * KP, 0.f);
    for (int r = 0; r < N; ++r) hl[(size_t)r * KP + KP - 1] = rth[r];
    CK(cudaMemcpy(rl, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice));
    for (int c = 0; c < N; ++c) hl[(size_t)c * KP + KP - 1] = cth[c];
    CK(cudaMemcpy(cl, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice));
    Bufs rb, cb;
    rb.alloc();
    cb.alloc();
    unsigned ro = 0, co = N;
    auto filt = [&]() {
        rb.zero(st);
        cb.zero(st);
        dim3 grid((N + 1023) / 1024, (N + 63) / 64);
        tile_filter<<<grid, 256, 0, st>>>(tile, N, N, N, mode, dna, dnb, ro, co, 0, rl, cl, KP, 1,
                                          rb.count, rb.floor, rb.val, rb.idx, cb.count, cb.floor,
                                          cb.val, cb.idx, CAP);
    };
    float t_filt = timed(filt);
    Got ref = fetch(rb, cb);
    printf("[%s] tile_filter %.3f ms (%.2f TB/s); gemm + filter %.3f ms\n", name, t_filt,
           (double)N * N * 4 / t_filt / 1e9, t_gemm + t_filt);
    auto check = [&](const char* what, Got& g) {
        long long rsum = 0, csum = 0, rref = 0, cref = 0, rows_diff = 0, over = 0;
        int maxd = 0;
        double worst = 0;
        long long bad = 0;
        for (int i = 0; i < N; ++i) {
            rsum += g.rc[i]; csum += g.cc[i]; rref += ref.rc[i]; cref += ref.cc[i];
            int dd = abs((int)g.rc[i] - (int)ref.rc[i]) + abs((int)g.cc[i] - (int)ref.cc[i]);
            rows_diff += dd != 0;
            maxd = std::max(maxd, dd);
            over += g.rc[i] > CAP || g.cc[i] > CAP;
            for (int side = 0; side < 2; ++side) {
                unsigned cnt = std::min<unsigned>(side ? g.cc[i] : g.rc[i], CAP);
                for (unsigned s = 0; s < cnt; ++s) {
                    unsigned id = side ? g.ci[(size_t)i * CAP + s] : g.ri[(size_t)i * CAP + s];
                    float kv = side ? g.cv[(size_t)i * CAP + s] : g.rv[(size_t)i * CAP + s];
                    int r = side ? (int)id - (int)ro : i, c = side ? i : (int)id - (int)co;
                    if (r < 0 || r >= N || c < 0 || c >= N) { ++bad; continue; }
                    double dot = 0;
                    for (int k = 0; k < D; ++k) dot += ha[(size_t)r * D + k] * hb[(size_t)c * D + k];
                    double ek = (double)na[r] + nb[c] - 2 * dot;
                    double err = fabs(kv - ek) / (na[r] + nb[c]);
                    worst = std::max(worst, err);
                    if (kv > (side ? cth[c] : rth[r])) ++bad;
                }
            }
        }
        printf("[%s] %s: survivors rows %lld cols %lld (tile_filter %lld %lld); items differing %lld, "
               "max diff %d, overflowing %lld, bad %lld, worst key error %.2e of the norms\n",
               name, what, rsum, csum, rref, cref, rows_diff, maxd, over, bad, worst);
    };
    check("tile_filter", ref);
    auto fused = [&](auto kern, const char* what, int kw_run = -1) {
        int kw = kw_run < 0 ? ldw : kw_run;
        int smem = PF_SHARED;
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int tiles = ((N + PF_BN - 1) / PF_BN) * ((N + PF_BM - 1) / PF_BM);
        dim3 grid(std::min(tiles, 2 * sms));
        auto f = [&]() {
            rb.zero(st);
            cb.zero(st);
            // The norms stand in for the scales back, which unscaled kinds never read.
            kern<<<grid, PF_THREADS, smem, st>>>(da, N, db, N, ldw, kw, mode, dna, dnb, dna, dnb,
                                                 ro, co, 0,
                                                 rl, cl, KP, 1, rb.count, rb.floor, rb.val, rb.idx,
                                                 cb.count, cb.floor, cb.val, cb.idx, CAP,
                                                 nullptr, nullptr);
        };
        float ms = timed(f);
        CK(cudaGetLastError());
        cudaFuncAttributes at;
        CK(cudaFuncGetAttributes(&at, kern));
        printf("[%s] fused %s: %.3f ms (%.0f TFLOP/s), %d registers, %zu local bytes\n", name, what,
               ms, flop / ms / 1e9, at.numRegs, (size_t)at.localSizeBytes);
        if (kw_run >= 0) return;
        Got g = fetch(rb, cb);
        check(what, g);
    };
    auto k = kind == 0 ? pair_filter_tf32 : kind == 1 ? pair_filter_f16 : pair_filter_s8;
    fused(k, "fused kw=0", 0);
    fused(k, "fused kw=half", ldw / 2);
    fused(k, "fused");
    if (kind == 1) {
        // Split rows (fp16x3) of the same values: each f16 value as its hi, with a lo of about
        // 2^-12 of it (which moves no key past a threshold the check would see), and factors
        // back of 1, so the keys and survivors are the f16 pair's: the time of the split pair.
        const int G = PF_SPLIT_GROUP, lds = D;  // words: 2D values
        std::vector<unsigned> sa((size_t)N * lds), sb((size_t)N * lds);
        auto split = [&](const std::vector<unsigned>& w, std::vector<unsigned>& out) {
            for (int r = 0; r < N; ++r)
                for (int k = 0; k < D; ++k) {
                    __half h = ((const __half*)w.data())[(size_t)r * D + k];
                    __half l = __float2half(__half2float(h) * 0.000244f * (1 + (k % 3)));
                    __half* o = (__half*)out.data() + (size_t)r * 2 * D;
                    o[k / G * 2 * G + k % G] = h;
                    o[k / G * 2 * G + k % G + G] = l;
                }
        };
        split(wa, sa);
        split(wb, sb);
        unsigned *dsa, *dsb;
        float* ones;
        CK(cudaMalloc(&dsa, sa.size() * 4));
        CK(cudaMalloc(&dsb, sb.size() * 4));
        CK(cudaMalloc(&ones, N * 4));
        std::vector<float> one(N, 1.0f);
        CK(cudaMemcpy(ones, one.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsa, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsb, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice));
        int smem = PF_SHARED;
        CK(cudaFuncSetAttribute(pair_filter_f16_split, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int tiles = ((N + PF_BN - 1) / PF_BN) * ((N + PF_BM - 1) / PF_BM);
        dim3 grid(std::min(tiles, 2 * sms));
        auto f = [&]() {
            rb.zero(st);
            cb.zero(st);
            pair_filter_f16_split<<<grid, PF_THREADS, smem, st>>>(
                dsa, N, dsb, N, lds, lds, mode, dna, dnb, ones, ones, ro, co, 0, rl, cl, KP, 1,
                rb.count, rb.floor, rb.val, rb.idx, cb.count, cb.floor, cb.val, cb.idx, CAP,
                nullptr, nullptr);
        };
        float ms = timed(f);
        CK(cudaGetLastError());
        cudaFuncAttributes at;
        CK(cudaFuncGetAttributes(&at, pair_filter_f16_split));
        printf("[%s] fused split: %.3f ms (%.0f TFLOP/s of products), %d registers, %zu local bytes\n",
               name, ms, 3 * flop / ms / 1e9, at.numRegs, (size_t)at.localSizeBytes);
        Got g = fetch(rb, cb);
        check("fused split", g);
        cudaFree(dsa); cudaFree(dsb); cudaFree(ones);
    }
    cudaFree(da); cudaFree(db); cudaFree(dna); cudaFree(dnb); cudaFree(tile); cudaFree(rl); cudaFree(cl);
    cudaFree(rb.count); cudaFree(rb.floor); cudaFree(rb.idx); cudaFree(rb.val);
    cudaFree(cb.count); cudaFree(cb.floor); cudaFree(cb.idx); cudaFree(cb.val);
}

int main(int argc, char** argv) {
    cublasHandle_t h;
    CK(cublasCreate(&h));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CK(cublasSetStream(h, st));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("device %s, %d SMs\n", p.name, p.multiProcessorCount);
    sms = p.multiProcessorCount;
    for (int i = 1; i < argc; ++i) run_kind(atoi(argv[i]), h, st);
    return 0;
}
