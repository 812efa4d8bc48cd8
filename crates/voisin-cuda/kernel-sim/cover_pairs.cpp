// CPU simulation of kernels/index/cover_pairs.cu (see cover_pairs.sh).
#include "kern.h"
#include <cstdio>
#include <random>
#include <string>
std::mt19937 rng(5);
int fails = 0, checked = 0;
#define CHECK(c, ...) do { ++checked; if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

struct Batch {
  std::vector<unsigned> items, cands;
  std::vector<double> radii;
  std::vector<unsigned long long> starts{0};
};

Batch batch(unsigned n, const std::vector<double>& rs) {
  Batch b;
  unsigned nq = 1 + rng() % 40;
  for (unsigned q = 0; q < nq; ++q) {
    b.items.push_back(rng() % n);
    b.radii.push_back(rs[rng() % rs.size()]);
    unsigned m = rng() % 3 == 0 ? 0 : rng() % 30;
    for (unsigned j = 0; j < m; ++j) b.cands.push_back(rng() % n);
    b.starts.push_back(b.cands.size());
  }
  return b;
}

// Runs `kern(t0, n, cands, out)` over the batch in two chunks with 2 blocks of 8 threads.
template <class K> std::vector<double> run(const Batch& b, K kern) {
  size_t np = b.cands.size(), half = np / 2;
  std::vector<double> out(np, 12345.0);
  for (auto [lo, hi] : {std::pair<size_t, size_t>{0, half}, {half, np}}) {
    if (hi == lo) continue;
    launch({2, 1, 1}, {8, 1, 1}, [&] { kern((unsigned long long)lo, (long long)(hi - lo), b.cands.data() + lo, out.data() + lo); });
  }
  return out;
}

unsigned query_of(const Batch& b, size_t t) {
  unsigned q = 0;
  while (b.starts[q + 1] <= t) ++q;
  return q;
}

unsigned lev(const std::u32string& a, const std::u32string& b) {
  std::vector<unsigned> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void strings() {
  std::vector<std::u32string> words;
  for (int i = 0; i < 50; ++i) {
    std::u32string w;
    unsigned len = rng() % 11;
    for (unsigned k = 0; k < len; ++k) w.push_back(U"abc\u00e9"[rng() % 4]);
    words.push_back(w);
  }
  words.push_back(std::u32string(70, U'a'));
  words.push_back(std::u32string(69, U'a') + U"b");
  words.push_back(std::u32string(64, U'b'));
  words.push_back(U"");
  std::vector<unsigned> chars, offs{0};
  for (auto& w : words) { for (auto c : w) chars.push_back(c); offs.push_back(chars.size()); }
  chars.push_back(0);
  Batch b = batch(words.size(), {0.0, 1.0, 2.0, 2.5, 5.0, INFINITY});
  auto out = run(b, [&](unsigned long long t0, long long k, const unsigned* c, double* o) {
    cover_pairs_lev(chars.data(), offs.data(), b.items.data(), b.radii.data(), b.starts.data(),
                    (unsigned)b.items.size(), t0, k, c, o);
  });
  for (size_t t = 0; t < b.cands.size(); ++t) {
    unsigned q = query_of(b, t);
    auto &x = words[b.items[q]], &y = words[b.cands[t]];
    double r = b.radii[q], got = out[t], want = lev(x, y);
    if (x.size() > 64 && y.size() > 64 && std::fabs((double)x.size() - (double)y.size()) <= r)
      CHECK(got == -1.0, "long pair: %g", got);
    else if (want <= r) CHECK(got == want, "lev %g vs %g (r %g)", got, want, r);
    else CHECK(std::isnan(got), "lev beyond %g: %g (%g)", r, got, want);
  }
}

int main() {
  for (int round = 0; round < 30; ++round) {
    strings();
  }
  printf("cover_pairs: %d checks, %d failures\n", checked, fails);
  return fails ? 1 : 0;
}
