// Warp intrinsics for the CPU simulator (select_variants.sh): the lanes of a warp exchange values
// through per-warp slots between two warp barriers of simshim.h.
using std::max;
inline unsigned sim_lane_vals[64][32];
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float fminf(float a, float b) { return std::fmin(a, b); }
inline void sim_gather(unsigned bits, unsigned out[32]) {
  unsigned t = threadIdx.y * blockDim.x + threadIdx.x, w = t / 32;
  sim_lane_vals[w][t % 32] = bits;
  warp_bars[w]->arrive_and_wait();
  for (int i = 0; i < 32; ++i) out[i] = sim_lane_vals[w][i];
  warp_bars[w]->arrive_and_wait();
}
template <class T> unsigned sim_bits(T v) { unsigned u; memcpy(&u, &v, 4); return u; }
template <class T> T sim_from(unsigned u) { T v; memcpy(&v, &u, 4); return v; }
inline unsigned __ballot_sync(unsigned, int p) {
  unsigned v[32], b = 0;
  sim_gather(p ? 1u : 0u, v);
  for (int i = 0; i < 32; ++i) if (v[i]) b |= 1u << i;
  return b;
}
template <class T> T __shfl_sync(unsigned, T x, int src) {
  unsigned v[32];
  sim_gather(sim_bits(x), v);
  return sim_from<T>(v[src & 31]);
}
template <class T> T __shfl_xor_sync(unsigned, T x, int o) {
  unsigned v[32];
  sim_gather(sim_bits(x), v);
  return sim_from<T>(v[(threadIdx.x % 32) ^ o]);
}
// 64-bit values (select/locality.cu's f64 sums) as two 32-bit exchanges.
inline double __shfl_xor_sync(unsigned m, double x, int o) {
  unsigned long long b; memcpy(&b, &x, 8);
  unsigned lo = __shfl_xor_sync(m, (unsigned)b, o), hi = __shfl_xor_sync(m, (unsigned)(b >> 32), o);
  b = ((unsigned long long)hi << 32) | lo;
  double y; memcpy(&y, &b, 8);
  return y;
}
inline int __reduce_add_sync(unsigned, int x) {
  unsigned v[32];
  sim_gather((unsigned)x, v);
  int s = 0;
  for (int i = 0; i < 32; ++i) s += (int)v[i];
  return s;
}
inline unsigned __reduce_max_sync(unsigned, unsigned x) {
  unsigned v[32], m = 0;
  sim_gather(x, v);
  for (int i = 0; i < 32; ++i) m = std::max(m, v[i]);
  return m;
}
