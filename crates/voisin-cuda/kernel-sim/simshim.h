// Shim that lets the CUDA C kernels compile as C++ and run on the CPU (see run.sh): each CUDA
// thread of a block is a fiber (ucontext) on one OS thread, switched only where it waits at a
// barrier, so the threads between two barriers run one after another in index order.
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <atomic>
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
// The running fiber's index: the scheduler sets it before it resumes a fiber.
D3 threadIdx;
D3 blockIdx, blockDim, gridDim;
// The fibers of the block being run, and the scheduler's context they return to.
struct SimFiber { ucontext_t ctx; D3 idx; bool done = false; };
inline ucontext_t sim_scheduler;
inline SimFiber* sim_fibers;
inline unsigned sim_current;
inline std::function<void()> sim_body;
// Arrivals at barriers and fibers ended: a round of the scheduler without either is a deadlock.
inline unsigned long long sim_progress = 0;
inline void sim_yield() { swapcontext(&sim_fibers[sim_current].ctx, &sim_scheduler); }
// A barrier of `expected` fibers (std::barrier's arrive_and_wait): the last to arrive goes on, the
// others wait, yielding, until the generation it opened has passed.
struct SimBarrier {
  unsigned expected, count = 0, gen = 0;
  explicit SimBarrier(unsigned n) : expected(n) {}
  void arrive_and_wait() {
    unsigned g = gen;
    ++sim_progress;
    if (++count == expected) { count = 0; ++gen; return; }
    while (gen == g) sim_yield();
  }
};
SimBarrier* bar;
SimBarrier* warp_bars[64];
alignas(16) float sim_smem[1 << 16];
// A kernel's dynamic shared memory (common/keys.cuh): a pointer into sim_smem.
#define DYNAMIC_SHARED(T, name) T* name = (T*)sim_smem
inline void __syncthreads() { bar->arrive_and_wait(); }
// Blocks and threads run one at a time here, so a fence orders nothing more than program order.
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
inline void sim_entry() {
  sim_body();
  sim_fibers[sim_current].done = true;
  ++sim_progress;
}
// Runs the block's fibers round by round until every one has ended (each round resumes every
// live fiber once, in index order).
inline void sim_run_block(unsigned nt) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  const size_t stack = 256 << 10;
  while (stacks.size() < nt) stacks.emplace_back(new char[stack]);
  std::vector<SimFiber> fs(nt);
  sim_fibers = fs.data();
  for (unsigned t = 0; t < nt; ++t) {
    getcontext(&fs[t].ctx);
    fs[t].ctx.uc_stack.ss_sp = stacks[t].get();
    fs[t].ctx.uc_stack.ss_size = stack;
    fs[t].ctx.uc_link = &sim_scheduler;
    makecontext(&fs[t].ctx, sim_entry, 0);
    fs[t].idx = {t % blockDim.x, t / blockDim.x, 0};
  }
  for (unsigned live = nt; live > 0;) {
    unsigned long long before = sim_progress;
    for (unsigned t = 0; t < nt; ++t) {
      if (fs[t].done) continue;
      sim_current = t; threadIdx = fs[t].idx;
      swapcontext(&sim_scheduler, &fs[t].ctx);
      if (fs[t].done) --live;
    }
    if (live > 0 && sim_progress == before) {
      printf("FAIL: block (%u, %u): every live thread waits at a barrier the others never reach\n",
             blockIdx.x, blockIdx.y);
      fflush(stdout);
      std::abort();
    }
  }
}
template <class F> void launch(D3 grid, D3 block, F f) {
  gridDim = grid; blockDim = block;
  unsigned nt = block.x * block.y;
  sim_body = [&] { f(); };
  for (unsigned by = 0; by < grid.y; ++by)
  for (unsigned bx = 0; bx < grid.x; ++bx) {
    blockIdx = {bx, by, 0};
    SimBarrier b(nt); bar = &b;
    std::vector<std::unique_ptr<SimBarrier>> wb;
    for (unsigned w = 0; w < (nt + 31) / 32; ++w) {
      wb.emplace_back(new SimBarrier(std::min(32u, nt - 32 * w)));
      warp_bars[w] = wb.back().get();
    }
    sim_run_block(nt);
  }
  sim_body = nullptr;
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
