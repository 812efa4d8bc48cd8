// Tensor-core products and asynchronous copies for kernels that tile rows of any element type
// as 32-bit words (select/pair_filter.cu).
//
// A word holds one tf32 value, two f16 or bf16 values, or four int8 values, and the m16n8 MMA
// of each kind (k = 8, 16 or 32 elements: 8 words) takes its fragments at the same word
// positions (g = lane / 4, t = lane % 4):
//   A (16 rows x 8 words, row-major): a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4), a3 = (g + 8, t + 4);
//   B (8 words x 8 columns, a column is a row of the other side): b0 = (t, g), b1 = (t + 4, g);
//   the accumulator (16 x 8): c0, c1 = row g, columns 2t, 2t + 1; c2, c3 = row g + 8, the same.
// So one kernel body serves every kind, with the kind as a template parameter. TF32 operands
// are given as f32 bits: the tensor core ignores their 13 low bits (truncation, which the TF32
// error bound of numerics/plan.rs assumes).

#pragma once

enum MmaKind { MMA_TF32, MMA_F16, MMA_BF16, MMA_S8 };

template <int KIND>
struct Mma;

// The kinds with fp32 sums differ only in the instruction.
#define MMA_FLOAT_SUMS(KIND, INSTRUCTION)                                                      \
    template <>                                                                                \
    struct Mma<KIND> {                                                                         \
        typedef float acc_t;                                                                   \
        static __device__ __forceinline__ void run(acc_t (&c)[4], const unsigned (&a)[4],      \
                                                   unsigned b0, unsigned b1) {                 \
            asm(INSTRUCTION " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"           \
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                               \
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));               \
        }                                                                                      \
        /* The accumulator as the float the key is formed of. */                               \
        static __device__ __forceinline__ float value(acc_t c) { return c; }                   \
    };

MMA_FLOAT_SUMS(MMA_TF32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
MMA_FLOAT_SUMS(MMA_F16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MMA_FLOAT_SUMS(MMA_BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")

// int8 x int8 with int32 sums: exact. Its value is the sum as a float, as KEY_L2_INT forms it
// from a tile word holding the int32.
template <>
struct Mma<MMA_S8> {
    typedef int acc_t;
    static __device__ __forceinline__ void run(acc_t (&c)[4], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ float value(acc_t c) { return (float)c; }
};

// Four 8 x 4-word matrices from shared memory, one per register: lane l gives the address of
// row l % 8 of matrix l / 8 (16 bytes), and gets word t of row g of each. With A's matrices
// (rows 0-7 and 8-15 of words 0-3, then of words 4-7) that is a0..a3; with B's (rows 0-7 of
// words 0-3 and 4-7, then the next 8 rows), two columns' b0, b1.
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned shared_address(const void* p) {
    unsigned a;
    asm("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(p));
    return a;
}

// Copies 16 bytes from global `src` to shared `dst` without stopping the thread; with `in`
// false, writes 16 zero bytes and reads nothing (src must still be a valid address).
__device__ __forceinline__ void copy16_async(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(in ? 16 : 0)
                 : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void copies_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N groups of this thread's copies are still in flight.
template <int N>
__device__ __forceinline__ void copies_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
