// CPU simulation of the rerank kernel (see rerank.sh) against a plain finish written the way
// knn.rs `finish` works: prove, cut the candidate prefix, exact keys, sort by (key, index), k.
#include "kern.h"
#include <cstdio>
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
  std::vector<float> dist(nq * k, -1); std::vector<unsigned> ids(nq * k, 7), status(nq, 5);
  unsigned threads = std::clamp(width / 2, 32, 256);
  launch({(unsigned)nq,1,1},{threads,1,1},[&]{ rerank(lv.data(), li.data(), width, nq, nb, k, abs.data(), rel, tiny,
      base.data(), qs.data(), 0, d, (long long)d, EX_SQEUCLIDEAN, zero, form, dist.data(), ids.data(), status.data()); });
  for (int q = 0; q < nq; ++q) {
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
      CHECK(ids[q * k + i] == c[i].second && dist[q * k + i] == (float)want,
            "nb=%d k=%d q=%d i=%d: got (%g, %u) want (%g, %u)", nb, k, q, i, dist[q * k + i], ids[q * k + i], (float)want, c[i].second);
      CHECK(truth[i].second == c[i].second, "nb=%d k=%d q=%d i=%d: not the true %d-th", nb, k, q, i, i);
    }
  }
  printf("nb=%d d=%d width=%d k=%d levels=%d: %d proven, %d open\n", nb, d, width, k, levels, proven_rows - p0, open_rows - o0);
}

int main() {
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
