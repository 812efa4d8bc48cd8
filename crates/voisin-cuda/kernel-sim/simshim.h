// Shim that lets the CUDA C kernels compile as C++ and run on CPU threads (see run.sh).
#include <cmath>
#include <cstddef>
#include <cstring>
#include <atomic>
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
#include <memory>
#include <algorithm>
#include <type_traits>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
struct D3 { unsigned x = 0, y = 0, z = 0; };
thread_local D3 threadIdx;
D3 blockIdx, blockDim, gridDim;
std::barrier<>* bar;
std::barrier<>* warp_bars[64];
alignas(16) float sim_smem[1 << 16];
// A kernel's dynamic shared memory (common/keys.cuh): a pointer into sim_smem.
#define DYNAMIC_SHARED(T, name) T* name = (T*)sim_smem
inline void __syncthreads() { bar->arrive_and_wait(); }
// Blocks run one after another here, so a fence orders nothing more than program order.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <class T> T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicMin(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
template <class T> T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
using std::min;
using std::max;
inline float fabsf(float x) { return std::fabs(x); }
// Not std::fmax: its float overload calls ::fmaxf, this very function.
inline float fmaxf(float a, float b) { return std::isnan(a) ? b : std::isnan(b) ? a : a > b ? a : b; }
inline float powf(float a, float b) { return std::pow(a, b); }
template <class F> void launch(D3 grid, D3 block, F f) {
  gridDim = grid; blockDim = block;
  unsigned nt = block.x * block.y;
  for (unsigned by = 0; by < grid.y; ++by)
  for (unsigned bx = 0; bx < grid.x; ++bx) {
    blockIdx = {bx, by, 0};
    std::barrier<> b(nt); bar = &b;
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    for (unsigned w = 0; w < (nt + 31) / 32; ++w) {
      wb.emplace_back(new std::barrier<>(std::min(32u, nt - 32 * w)));
      warp_bars[w] = wb.back().get();
    }
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) ts.emplace_back([=] { threadIdx = {t % block.x, t / block.x, 0}; f(); });
    for (auto& t : ts) t.join();
  }
}
// __syncthreads_count: a barrier that also counts the threads whose predicate was true.
inline int sim_count_slots[2];
inline int sim_count_phase = 0;
inline int __syncthreads_count(int pred) {
    int slot = sim_count_phase;
    __atomic_fetch_add(&sim_count_slots[slot], pred ? 1 : 0, __ATOMIC_SEQ_CST);
    bar->arrive_and_wait();
    int total = __atomic_load_n(&sim_count_slots[slot], __ATOMIC_SEQ_CST);
    bar->arrive_and_wait();
    // One thread resets the other slot for the next call; phases alternate.
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        sim_count_slots[slot ^ 1] = 0;
        sim_count_phase = slot ^ 1;
    }
    bar->arrive_and_wait();
    return total;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) > 0; }
inline void __syncwarp() {
    unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
    warp_bars[t / 32]->arrive_and_wait();
}
struct float4 { float x, y, z, w; };
