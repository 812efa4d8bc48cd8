// Register probe: what page-locking a caller's rows in place costs against the staging copy
// (staging_probe.cu). A 512 MB pageable host buffer, already touched, is registered with
// cudaHostRegister (default and read-only flags), copied to the device in one DMA, and
// unregistered; each step timed alone, five rounds. Then the same 512 MB registered and copied
// in 64 MB pieces, each piece registered just before its copy (the copy of one overlapping the
// registration of the next). On the GPU machine:
//   nvcc -O2 -std=c++17 -o /tmp/rp bench/gpu/register_probe.cu && /tmp/rp
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
  const size_t total = 512ull << 20;
  char* src = (char*)aligned_alloc(4096, total);
  memset(src, 1, total);
  char* dev;
  CK(cudaMalloc(&dev, total));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (unsigned flags : {(unsigned)cudaHostRegisterDefault, (unsigned)cudaHostRegisterReadOnly}) {
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      CK(cudaHostRegister(src, total, flags));
      double t1 = now();
      CK(cudaMemcpyAsync(dev, src, total, cudaMemcpyHostToDevice, s));
      CK(cudaStreamSynchronize(s));
      double t2 = now();
      CK(cudaHostUnregister(src));
      double t3 = now();
      printf("flags %u: register %.2f ms, dma %.2f ms (%.1f GB/s), unregister %.2f ms, all %.2f ms\n",
             flags, (t1 - t0) * 1e3, (t2 - t1) * 1e3, total / (t2 - t1) / 1e9, (t3 - t2) * 1e3,
             (t3 - t0) * 1e3);
    }
  }
  // Pieces: register piece i, queue its copy, go on to piece i+1 while it flies.
  for (size_t piece : {16ull << 20, 64ull << 20}) {
    for (int r = 0; r < 3; r++) {
      double t0 = now();
      for (size_t at = 0; at < total; at += piece) {
        CK(cudaHostRegister(src + at, piece, cudaHostRegisterReadOnly));
        CK(cudaMemcpyAsync(dev + at, src + at, piece, cudaMemcpyHostToDevice, s));
      }
      CK(cudaStreamSynchronize(s));
      double t1 = now();
      for (size_t at = 0; at < total; at += piece) CK(cudaHostUnregister(src + at));
      double t2 = now();
      printf("pieces of %zu MB: register and copy %.2f ms (%.1f GB/s), unregister %.2f ms\n",
             piece >> 20, (t1 - t0) * 1e3, total / (t1 - t0) / 1e9, (t2 - t1) * 1e3);
    }
  }
  return 0;
}
