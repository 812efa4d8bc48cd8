// CPU simulation of the rerank kernel (see rerank.sh) against a plain finish written the way
// knn.rs `finish` works: prove, cut the candidate prefix, exact keys, sort by (key, index), k.
#include "kern.h"
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
std::mt19937 rng(11);
int fails = 0, proven_rows = 0, open_rows = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

double lower(float v, double abs, double rel, double tiny) { double x = v; return ((x - abs) - rel * std::fabs(x)) - tiny; }
double upper(float v, double abs, double rel, double tiny) { double x = v; return ((x + abs) + rel * std::fabs(x)) + tiny; }

// nb base rows of d values from `levels` distinct integers (few levels: many equal keys);
// approximate keys are exact keys plus noise within `noise` (the bound is abs = noise).
void test(int nb, int d, int nq, int width, int k, int levels, double noise, double rel, int form) {
  int p0 = proven_rows, o0 = open_rows;
  std::vector<float> base(nb * d), qs(nq * d);
  for (auto& x : base) x = (float)(rng() % levels);
  for (auto& x : qs) x = (float)(rng() % levels) + 0.5f * (rng() % 2);
  double tiny = 1e-30, zero = -0.0;
  std::vector<float> lv(nq * width, INFINITY);
  std::vector<unsigned> li(nq * width, NO_INDEX);
  std::vector<double> abs(nq, noise);
  std::vector<std::vector<double>> exact(nq, std::vector<double>(nb));
  for (int q = 0; q < nq; ++q) {
    std::vector<std::pair<float, unsigned>> all;
    for (int b = 0; b < nb; ++b) {
      exact[q][b] = exact_key(&base[b * d], &qs[q * d], d, EX_SQEUCLIDEAN, zero);
      double e = std::uniform_real_distribution<double>(-noise, noise)(rng) * 0.5;
      all.push_back({(float)(exact[q][b] + e), (unsigned)b});
    }
    std::sort(all.begin(), all.end());
    for (int i = 0; i < std::min(nb, width); ++i) { lv[q * width + i] = all[i].first; li[q * width + i] = all[i].second; }
  }
  // Every seventh row out of order (two entries swapped, or an empty slot before an entry):
  // the kernel must leave it to the host, which sorts.
  std::vector<bool> disordered(nq, false);
  for (int q = 6; q < nq; q += 7) {
    int n = 0; while (n < width && li[q * width + n] != NO_INDEX) ++n;
    if (n < 2 || lv[q * width] == lv[q * width + n - 1]) continue;
    if (q % 2) { std::swap(lv[q * width], lv[q * width + n - 1]); std::swap(li[q * width], li[q * width + n - 1]); }
    else { li[q * width] = NO_INDEX; }
    disordered[q] = true;
  }
  std::vector<float> dist(nq * k, -1); std::vector<unsigned> ids(nq * k, 7), status(nq, 5);
  std::vector<double> keys(nq * k, -1);
  unsigned threads = std::clamp(width / 2, 32, 256);
  launch({(unsigned)nq,1,1},{threads,1,1},[&]{ rerank(lv.data(), li.data(), width, nq, nb, k, abs.data(), rel, tiny,
      base.data(), qs.data(), 0, d, (long long)d, EX_SQEUCLIDEAN, zero, form, dist.data(), keys.data(), ids.data(), status.data()); });
  for (int q = 0; q < nq; ++q) {
    if (disordered[q]) { ++open_rows; CHECK(status[q] == 0xffffffffu, "nb=%d k=%d q=%d: out of order, status %u", nb, k, q, status[q]); continue; }
    const float* v = &lv[q * width]; const unsigned* ix = &li[q * width];
    int n = 0; while (n < width && ix[n] != NO_INDEX) ++n;
    bool ok = n >= nb ? n >= k : (n >= k && lower(v[n - 1], abs[q], rel, tiny) > upper(v[k - 1], abs[q], rel, tiny));
    if (!ok) { ++open_rows; CHECK(status[q] == 0xffffffffu, "nb=%d k=%d q=%d: should be open, status %u", nb, k, q, status[q]); continue; }
    ++proven_rows;
    double thr = upper(v[k - 1], abs[q], rel, tiny);
    int m = 0; while (m < n && lower(v[m], abs[q], rel, tiny) <= thr) ++m;
    CHECK(status[q] == (unsigned)m, "nb=%d k=%d q=%d: status %u, want %d", nb, k, q, status[q], m);
    std::vector<std::pair<double, unsigned>> c;
    for (int i = 0; i < m; ++i) c.push_back({exact[q][ix[i]], ix[i]});
    std::sort(c.begin(), c.end());
    // Proven rows also agree with the exact answer over the whole base.
    std::vector<std::pair<double, unsigned>> truth;
    for (int b = 0; b < nb; ++b) truth.push_back({exact[q][b], (unsigned)b});
    std::sort(truth.begin(), truth.end());
    for (int i = 0; i < k; ++i) {
      double want = form == 2 ? std::sqrt(std::max(c[i].first, 0.0)) : c[i].first;
      CHECK(keys[q * k + i] == c[i].first, "nb=%d k=%d q=%d i=%d: key %g want %g", nb, k, q, i, keys[q * k + i], c[i].first);
      CHECK(ids[q * k + i] == c[i].second && dist[q * k + i] == (float)want,
            "nb=%d k=%d q=%d i=%d: got (%g, %u) want (%g, %u)", nb, k, q, i, dist[q * k + i], ids[q * k + i], (float)want, c[i].second);
      CHECK(truth[i].second == c[i].second, "nb=%d k=%d q=%d i=%d: not the true %d-th", nb, k, q, i, i);
    }
  }
  printf("nb=%d d=%d width=%d k=%d levels=%d: %d proven, %d open\n", nb, d, width, k, levels, proven_rows - p0, open_rows - o0);
}

// common/exact.cuh's keys (the ones every device finish uses, and the reference of `test`
// below) against a plain loop over the dimensions in order, written apart from them: every
// metric, both zeros Rust's sum may start from, dimensions from 1 to 1025, rows at every
// alignment (d values apart in one buffer), a dimension-major table and a zero row. Compared
// by bits.
double plain_key(const float* a, const float* b, int d, int metric, double zero) {
  auto mean = [&](const float* x) { double s = zero; for (int i = 0; i < d; ++i) s = s + (double)x[i]; return s / d; };
  double s = zero, ab = 0, aa = 0, bb = 0, ca = 0, cb = 0;
  switch (metric) {
  case EX_SQEUCLIDEAN: for (int i = 0; i < d; ++i) { double t = (double)a[i] - (double)b[i]; s = s + t * t; } return s;
  case EX_INNER_PRODUCT: for (int i = 0; i < d; ++i) s = s + (double)a[i] * (double)b[i]; return -s;
  case EX_CITYBLOCK: for (int i = 0; i < d; ++i) s = s + std::fabs((double)a[i] - (double)b[i]); return s;
  case EX_CHEBYSHEV: s = 0; for (int i = 0; i < d; ++i) s = std::fmax(s, std::fabs((double)a[i] - (double)b[i])); return s;
  default:
    if (metric == EX_CORRELATION) { ca = mean(a); cb = mean(b); }
    for (int i = 0; i < d; ++i) {
      double x = (double)a[i] - ca, y = (double)b[i] - cb;
      ab = ab + x * y; aa = aa + x * x; bb = bb + y * y;
    }
    if (aa == 0.0 || bb == 0.0) return 1.0;
    double c = 1.0 - ab / (std::sqrt(aa) * std::sqrt(bb));
    return c < 0.0 ? 0.0 : (c > 2.0 ? 2.0 : c);
  }
}

void test_exact_keys() {
  int checked = 0;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int d : {1, 3, 15, 16, 17, 37, 64, 127, 1025}) {
    int n = 9;
    std::vector<float> rows(n * d + 4), table(d * n);
    for (auto& v : rows) v = nd(rng) * 1e3f + 0.5f;
    for (int i = 0; i < d; ++i) rows[2 * d + i] = 0.0f;  // a zero row
    for (int r = 0; r < n; ++r) for (int i = 0; i < d; ++i) table[i * n + r] = rows[r * d + i];
    for (int metric : {EX_SQEUCLIDEAN, EX_INNER_PRODUCT, EX_COSINE, EX_CORRELATION, EX_CITYBLOCK, EX_CHEBYSHEV}) {
      for (double zero : {0.0, -0.0}) {
        for (int r = 0; r < n; ++r) {
          for (int q = 0; q < n; ++q) {
            const float* a = &rows[r * d];
            const float* b = &rows[q * d];
            double want = plain_key(a, b, d, metric, zero);
            double dense = exact_key_of(DenseRow{a}, DenseRow{b}, d, metric, zero);
            double stored = exact_key(a, b, d, metric, zero);
            double strided = exact_key_of(StridedRow{&table[r], n}, DenseRow{b}, d, metric, zero);
            for (double got : {dense, stored, strided}) {
              CHECK(std::memcmp(&got, &want, 8) == 0, "exact key d=%d metric=%d rows %d,%d: %.17g != %.17g", d, metric, r, q, got, want);
              ++checked;
            }
          }
        }
      }
    }
  }
  printf("exact keys: %d keys checked against a plain loop\n", checked);
}

// finish/exact.cu's kernels (a thread per pair; rows staged a warp at a time) against the plain
// loop, by bits: every metric, dimensions around the staging chunk, pair counts that leave a
// warp part empty, warps whose pairs share one query and warps whose pairs do not.
void test_exact_keys_kernel() {
  int checked = 0;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int d : {1, 5, 31, 32, 33, 100, 1025}) {
    int nb = 50, nq = 7;
    long long ld = d + (d % 3);  // rows padded as half storage pads them
    std::vector<float> base(nb * ld, 0.0f), qs(nq * ld, 0.0f);
    for (int r = 0; r < nb; ++r) for (int i = 0; i < d; ++i) base[r * ld + i] = nd(rng) * 100.0f + 3.0f;
    for (int r = 0; r < nq; ++r) for (int i = 0; i < d; ++i) qs[r * ld + i] = nd(rng) * 100.0f;
    for (int i = 0; i < d; ++i) base[4 * ld + i] = 0.0f;  // a zero row
    for (int np : {1, 37, 100, 160}) {
      // The first 64 pairs by query (whole warps of one query), the rest at random.
      std::vector<uint2> pairs(np);
      for (int p = 0; p < np; ++p)
        pairs[p] = p < 64 ? uint2{(unsigned)(p / 32 % nq), (unsigned)(rng() % nb)}
                          : uint2{(unsigned)(rng() % nq), (unsigned)(rng() % nb)};
      for (int metric : {EX_SQEUCLIDEAN, EX_INNER_PRODUCT, EX_COSINE, EX_CORRELATION, EX_CITYBLOCK, EX_CHEBYSHEV})
      for (bool staged : {false, true}) {
        double zero = np % 2 ? -0.0 : 0.0;
        std::vector<double> out(np + 1, 12345.0);
        unsigned per_block = 32 * EK_WARPS;
        launch({(unsigned)((np + per_block - 1) / per_block), 1, 1}, {per_block, 1, 1}, [&] {
          (staged ? exact_keys_staged : exact_keys)(base.data(), qs.data(), d, ld, pairs.data(), np, metric, zero, out.data());
        });
        for (int p = 0; p < np; ++p) {
          double want = plain_key(&base[pairs[p].y * ld], &qs[pairs[p].x * ld], d, metric, zero);
          CHECK(std::memcmp(&out[p], &want, 8) == 0, "exact_keys (staged %d) d=%d metric=%d pair %d of %d: %.17g != %.17g",
                staged, d, metric, p, np, out[p], want);
          ++checked;
        }
        CHECK(out[np] == 12345.0, "exact_keys d=%d: wrote past the last pair", d);
      }
    }
  }
  printf("exact_keys kernels: %d keys checked against a plain loop\n", checked);
}

int main() {
  test_exact_keys();
  test_exact_keys_kernel();
  test(3000, 5, 6, 2048, 1000, 3, 0.4, 0, 2);     // k=1000: thousands of equal keys
  test(3000, 5, 6, 2048, 1000, 40, 2.0, 0, 0);
  test(3000, 4, 6, 2048, 1000, 1000, 1e-3, 1e-6, 2); // relative part
  test(500, 3, 4, 2048, 500, 2, 0.1, 0, 2);       // the whole base in the list, k = n
  test(500, 3, 4, 2048, 499, 2, 0.1, 0, 0);
  test(2000, 3, 8, 16, 1, 4, 0.1, 0, 2);          // small lists: proved and open rows
  test(2000, 3, 8, 32, 10, 50, 0.5, 0, 0);
  test(2000, 3, 8, 32, 10, 3, 5.0, 0, 0);         // bound too wide: open
  test(2000, 8, 8, 256, 200, 1000, 0.05, 0, 2);
  printf("rerank sim: %d proven rows, %d open rows checked, %d failures\n", proven_rows, open_rows, fails);
  return fails != 0;
}
