// Staging probe (docs/design/streaming.md): pageable host rows -> two pinned buffers filled by
// every core -> device, double-buffered as crates/voisin-cuda/src/runtime/staging.rs does.
// Variants: plain vs write-combined pinned pages, task and buffer sizes; fill-only and DMA-only
// rates. On the GPU machine: nvcc -O2 -std=c++17 -o /tmp/st bench/gpu/staging_probe.cu && /tmp/st
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include <atomic>
#include <cstdlib>
#include <algorithm>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Copies n bytes with `threads` threads taking tasks of `task` bytes from a shared counter.
static void par_copy(char* dst, const char* src, size_t n, size_t task, int threads) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) ts.emplace_back([&] {
    for (;;) {
      size_t at = next.fetch_add(task);
      if (at >= n) break;
      size_t len = std::min(task, n - at);
      memcpy(dst + at, src + at, len);
    }
  });
  for (auto& t : ts) t.join();
}

int main() {
  const size_t total = 512ull << 20;
  char* src = (char*)malloc(total);
  for (size_t i = 0; i < total; i += 4096) src[i] = (char)i;
  memset(src, 1, total);
  char* dev; cudaMalloc(&dev, total);
  cudaStream_t s; cudaStreamCreate(&s);
  int threads = std::thread::hardware_concurrency();
  printf("threads %d\n", threads);
  // DMA only from one pinned buffer.
  for (unsigned flags : {0u, (unsigned)cudaHostAllocWriteCombined}) {
    char* pin; cudaHostAlloc(&pin, 64ull << 20, flags);
    memset(pin, 2, 64ull << 20);
    cudaDeviceSynchronize();
    double t = now();
    for (int r = 0; r < 8; r++) cudaMemcpyAsync(dev + r * (64ull << 20), pin, 64ull << 20, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    double dt = now() - t;
    printf("dma only %s: 512 MB %.2f ms (%.1f GB/s)\n", flags ? "wc" : "plain", dt * 1e3, total / dt / 1e9);
    for (size_t task : {256ull << 10, 1ull << 20, 4ull << 20}) {
      double best = 1e9;
      for (int r = 0; r < 3; r++) {
        double t = now();
        par_copy(pin, src + (r % 8) * (64ull << 20), 64ull << 20, task, threads);
        best = std::min(best, now() - t);
      }
      printf("fill only %s task %zu KB: 64 MB %.2f ms (%.1f GB/s)\n", flags ? "wc" : "plain", task >> 10, best * 1e3, (64ull << 20) / best / 1e9);
    }
    cudaFreeHost(pin);
  }
  // The pipeline.
  for (unsigned flags : {0u, (unsigned)cudaHostAllocWriteCombined}) {
    for (size_t buf : {16ull << 20, 64ull << 20}) {
      char* pin[2]; cudaHostAlloc(&pin[0], buf, flags); cudaHostAlloc(&pin[1], buf, flags);
      memset(pin[0], 0, buf); memset(pin[1], 0, buf);
      cudaEvent_t ev[2]; cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming); cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming);
      for (size_t task : {256ull << 10, 1ull << 20, 4ull << 20}) {
        double best = 1e9;
        for (int r = 0; r < 3; r++) {
          bool used[2] = {false, false};
          cudaDeviceSynchronize();
          double t = now();
          int slot = 0;
          for (size_t at = 0; at < total; at += buf) {
            if (used[slot]) cudaEventSynchronize(ev[slot]);
            size_t len = std::min(buf, total - at);
            par_copy(pin[slot], src + at, len, task, threads);
            cudaMemcpyAsync(dev + at, pin[slot], len, cudaMemcpyHostToDevice, s);
            cudaEventRecord(ev[slot], s);
            used[slot] = true;
            slot ^= 1;
          }
          cudaStreamSynchronize(s);
          best = std::min(best, now() - t);
        }
        printf("pipeline %s buf %zu MB task %zu KB: 512 MB %.2f ms (%.1f GB/s)\n", flags ? "wc" : "plain", buf >> 20, task >> 10, best * 1e3, total / best / 1e9);
      }
      cudaFreeHost(pin[0]); cudaFreeHost(pin[1]);
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
