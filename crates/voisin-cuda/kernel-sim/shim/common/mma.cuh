// The CPU simulation's stand-in for kernels/common/mma.cuh (run.sh puts this folder first on
// the include path): the same names, with the warp-wide instructions done by the warp's 32
// threads through a scratch area and the warp barrier (simshim.h `__syncwarp`), and the
// asynchronous copies done at once (a valid order of what the barriers allow). The products are
// summed exactly for the data the tests give (small integers: every order gives the same sum).

#pragma once
#include <cstdint>

enum MmaKind { MMA_TF32, MMA_F16, MMA_BF16, MMA_S8 };

inline unsigned sim_lane() { return (threadIdx.y * blockDim.x + threadIdx.x) % 32; }
inline unsigned sim_warp() { return (threadIdx.y * blockDim.x + threadIdx.x) / 32; }

// An f16's value.
inline float sim_half(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

// The values a word of each kind holds (1, 2, 2 or 4), as doubles; TF32 keeps 10 mantissa bits.
template <int KIND>
inline int sim_values(unsigned w, double (&v)[4]) {
    if (KIND == MMA_TF32) {
        v[0] = __uint_as_float(w & ~0x1fffu);
        return 1;
    }
    if (KIND == MMA_F16) {
        v[0] = sim_half(w & 0xffff);
        v[1] = sim_half(w >> 16);
        return 2;
    }
    if (KIND == MMA_BF16) {
        v[0] = __uint_as_float(w << 16);
        v[1] = __uint_as_float(w & 0xffff0000u);
        return 2;
    }
    for (int i = 0; i < 4; ++i) v[i] = (double)(int8_t)(w >> (8 * i));
    return 4;
}

// Each warp's fragments, published for the other lanes.
inline unsigned sim_a[64][32][4], sim_b[64][32][2];
inline const unsigned* sim_rows[64][32];

template <int KIND>
struct Mma {
    typedef typename std::conditional<KIND == MMA_S8, int, float>::type acc_t;
    // D = A B + C over a 16 x 8-word A and an 8-word x 8 B, each lane holding the
    // fragments of common/mma.cuh's layout.
    static void run(acc_t (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        unsigned w = sim_warp(), l = sim_lane();
        for (int i = 0; i < 4; ++i) sim_a[w][l][i] = a[i];
        sim_b[w][l][0] = b0;
        sim_b[w][l][1] = b1;
        __syncwarp();
        unsigned g = l / 4, t = l % 4;
        for (int e = 0; e < 4; ++e) {
            unsigned row = g + 8 * (e / 2), col = 2 * t + (e % 2);
            double sum = 0;
            for (unsigned k = 0; k < 8; ++k) {
                unsigned aw = sim_a[w][(row % 8) * 4 + k % 4][row / 8 + 2 * (k / 4)];
                unsigned bw = sim_b[w][col * 4 + k % 4][k / 4];
                double av[4], bv[4];
                int n = sim_values<KIND>(aw, av);
                sim_values<KIND>(bw, bv);
                for (int i = 0; i < n; ++i) sum += av[i] * bv[i];
            }
            c[e] = (acc_t)((double)c[e] + sum);
        }
        __syncwarp();
    }
    static float value(acc_t c) { return (float)c; }
};

// Shared addresses are offsets into the simulation's shared block.
inline unsigned shared_address(const void* p) {
    return (unsigned)((const char*)p - (const char*)sim_smem);
}

inline void load_matrices(unsigned (&r)[4], unsigned addr) {
    unsigned w = sim_warp(), l = sim_lane();
    sim_rows[w][l] = (const unsigned*)((const char*)sim_smem + addr);
    __syncwarp();
    for (int m = 0; m < 4; ++m) r[m] = sim_rows[w][m * 8 + l / 4][l % 4];
    __syncwarp();
}

inline void copy16_async(unsigned dst, const void* src, bool in) {
    char* d = (char*)sim_smem + dst;
    if (in) memcpy(d, src, 16);
    else memset(d, 0, 16);
}

inline void copies_commit() {}

template <int N>
inline void copies_wait() {}
