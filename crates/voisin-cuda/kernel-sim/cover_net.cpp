// CPU simulation of kernels/index/cover_net.cu (see cover_net.sh).
#include "kern.h"
#include <cstdio>
#include <random>
#include <string>
std::mt19937 rng(11);
int fails = 0, checked = 0;
#define CHECK(c, ...) do { ++checked; if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

// One level's batch: slots of ascending items with their distances to the slot's node.
struct Batch {
  std::vector<unsigned> starts{0}, items;
  std::vector<double> dists;
};

// The plain pass over slot s with `dist(a, b, sep, doubt)`: owners (positions), distances,
// evaluations, and whether a measured pair was in doubt.
struct Want { std::vector<unsigned> owner; std::vector<double> dist; unsigned long long evals = 0; bool doubt = false; };
template <class D> Want plain(const Batch& b, unsigned s, double sep, D dist) {
  unsigned lo = b.starts[s], m = b.starts[s + 1] - lo;
  Want w;
  w.owner.assign(m, NET_FREE);
  w.dist.assign(m, 0.0);
  for (unsigned c = 0; c < m; ++c) {
    if (w.owner[c] != NET_FREE) continue;
    w.owner[c] = c;
    for (unsigned j = c + 1; j < m; ++j) {
      if (w.owner[j] != NET_FREE) continue;
      double dj = b.dists[lo + j], dc = b.dists[lo + c];
      if (std::fabs(dj - dc) > sep + 1e-9 * std::fabs(dj + dc + sep)) continue;
      ++w.evals;
      bool doubt = false;
      double d = dist(b.items[lo + c], b.items[lo + j], sep, doubt);
      w.doubt |= doubt;
      if (d >= 0.0 && d <= sep) { w.owner[j] = c; w.dist[j] = d; }
    }
  }
  return w;
}

// Runs both kernels over the batch (slots with more than `big` items through the rounds) and
// checks every slot against the plain pass.
template <class D, class Block, class Round>
void check_level(const Batch& b, double sep, unsigned big, D dist, Block block, Round round, const char* what) {
  unsigned S = b.starts.size() - 1, n = b.items.size();
  std::vector<unsigned> taken(n, 0), flags(S, 0), list(n + 1), small, bigs, bstarts{0};
  std::vector<double> out(n, -7.0);
  unsigned long long evals = 0;
  for (unsigned s = 0; s < S; ++s) {
    unsigned m = b.starts[s + 1] - b.starts[s];
    if (m > big) { bigs.push_back(s); bstarts.push_back(bstarts.back() + m); }
    else small.push_back(s);
  }
  if (!small.empty())
    launch({(unsigned)small.size(), 1, 1}, {64, 1, 1}, [&] {
      block(small.data(), list.data(), sep, b.starts.data(), b.items.data(), b.dists.data(), taken.data(), out.data(), flags.data(), &evals);
    });
  unsigned K = bigs.size();
  if (K) {
    std::vector<unsigned> cur(3 * K, NET_FREE);
    for (unsigned k = 0; k < K; ++k) cur[k] = 0;
    for (unsigned r = 0;; ++r) {
      launch({2, 1, 1}, {64, 1, 1}, [&] {
        round(bigs.data(), bstarts.data(), K, cur.data(), r, sep, b.starts.data(), b.items.data(), b.dists.data(), taken.data(), out.data(), flags.data(), &evals);
      });
      bool alive = false;
      for (unsigned k = 0; k < K; ++k) alive |= cur[((r + 1) % 3) * K + k] != NET_FREE;
      if (!alive) break;
      CHECK(r < 100000, "%s: rounds do not end", what);
      if (r >= 100000) break;
    }
  }
  unsigned long long want_evals = 0;
  bool any_doubt = false;
  for (unsigned s = 0; s < S; ++s) {
    Want w = plain(b, s, sep, dist);
    any_doubt |= w.doubt;
    CHECK(flags[s] == (unsigned)w.doubt, "%s slot %u: flag %u, doubt %d", what, s, flags[s], (int)w.doubt);
    if (w.doubt) continue;
    want_evals += w.evals;
    unsigned lo = b.starts[s];
    for (unsigned p = 0; p < w.owner.size(); ++p) {
      CHECK(taken[lo + p] == w.owner[p] + 1, "%s slot %u pos %u: owner %u, want %u", what, s, p, taken[lo + p] - 1, w.owner[p]);
      CHECK(out[lo + p] == w.dist[p], "%s slot %u pos %u: dist %.17g, want %.17g", what, s, p, out[lo + p], w.dist[p]);
    }
  }
  if (!any_doubt) CHECK(evals == want_evals, "%s: %llu evaluations, want %llu", what, evals, want_evals);
}

// Slots over n items: each a random ascending subset, distances to a random node item.
template <class D> Batch slots(unsigned n, double sep, D dist) {
  Batch b;
  unsigned S = 1 + rng() % 6;
  for (unsigned s = 0; s < S; ++s) {
    unsigned node = rng() % n, keep = 1 + rng() % 4;
    for (unsigned i = 0; i < n; ++i) {
      if (i == node || rng() % keep) continue;
      bool doubt = false;
      b.items.push_back(i);
      b.dists.push_back(dist(node, i, 1e300, doubt));
    }
    b.starts.push_back(b.items.size());
  }
  return b;
}

void vectors(int metric, double p, bool grid) {
  unsigned n = 150 + rng() % 200, d = 1 + rng() % 5;
  std::vector<float> rows(n * d);
  for (auto& x : rows) x = grid ? (float)(rng() % 4) : std::uniform_real_distribution<float>(-3, 3)(rng);
  double zero = -0.0;
  NetVecs v{CoverVecs{rows.data(), (int)d, metric, p, zero}};
  for (double sep : {0.5, 1.0, 2.0, 3.0}) {
    Batch b = slots(n, sep, v);
    unsigned big = rng() % 2 ? 1u << 30 : rng() % 60;
    char what[64];
    snprintf(what, sizeof what, "vectors metric %d d %u sep %g big %u", metric, d, sep, big);
    check_level(b, sep, big, v,
      [&](const unsigned* sl, unsigned* li, double sp, const unsigned* st, const unsigned* it, const double* ds, unsigned* tk, double* o, unsigned* fl, unsigned long long* ev) {
        cover_net_block_vec(rows.data(), d, metric, p, zero, sl, li, sp, st, it, ds, tk, o, fl, ev); },
      [&](const unsigned* bg, const unsigned* bs, unsigned K, unsigned* cur, unsigned r, double sp, const unsigned* st, const unsigned* it, const double* ds, unsigned* tk, double* o, unsigned* fl, unsigned long long* ev) {
        cover_net_round_vec(rows.data(), d, metric, p, zero, bg, bs, K, cur, r, sp, st, it, ds, tk, o, fl, ev); },
      what);
  }
}

void strings() {
  std::vector<std::u32string> words;
  for (int i = 0; i < 150; ++i) {
    std::u32string w;
    unsigned len = rng() % 9;
    for (unsigned k = 0; k < len; ++k) w.push_back(U"abc\u00e9"[rng() % 4]);
    words.push_back(w);
  }
  if (rng() % 2) {
    words.push_back(std::u32string(70, U'a'));
    words.push_back(std::u32string(69, U'a') + U"b");
  }
  std::vector<unsigned> chars, offs{0};
  for (auto& w : words) { for (auto c : w) chars.push_back(c); offs.push_back(chars.size()); }
  chars.push_back(0);
  NetStrs s{CoverStrs{chars.data(), offs.data()}};
  for (double sep : {0.5, 1.0, 2.0, 4.0}) {
    Batch b = slots(words.size(), sep, [&](unsigned a, unsigned c, double, bool& doubt) {
      // The distance to the node, as the host would give it (dynamic programming).
      const auto &x = words[a], &y = words[c];
      std::vector<unsigned> prev(y.size() + 1), cur(y.size() + 1);
      for (size_t j = 0; j <= y.size(); ++j) prev[j] = j;
      for (size_t i = 1; i <= x.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= y.size(); ++j)
          cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x[i - 1] != y[j - 1])});
        std::swap(prev, cur);
      }
      return (double)prev[y.size()];
    });
    unsigned big = rng() % 2 ? 1u << 30 : rng() % 60;
    char what[64];
    snprintf(what, sizeof what, "strings sep %g big %u", sep, big);
    check_level(b, sep, big, s,
      [&](const unsigned* sl, unsigned* li, double sp, const unsigned* st, const unsigned* it, const double* ds, unsigned* tk, double* o, unsigned* fl, unsigned long long* ev) {
        cover_net_block_lev(chars.data(), offs.data(), sl, li, sp, st, it, ds, tk, o, fl, ev); },
      [&](const unsigned* bg, const unsigned* bs, unsigned K, unsigned* cur, unsigned r, double sp, const unsigned* st, const unsigned* it, const double* ds, unsigned* tk, double* o, unsigned* fl, unsigned long long* ev) {
        cover_net_round_lev(chars.data(), offs.data(), bg, bs, K, cur, r, sp, st, it, ds, tk, o, fl, ev); },
      what);
  }
}

int main() {
  for (int round = 0; round < 3; ++round) {
    for (bool grid : {false, true}) {
      vectors(EX_SQEUCLIDEAN, 0, grid);
      vectors(EX_CITYBLOCK, 0, grid);
      vectors(EX_CHEBYSHEV, 0, grid);
      vectors(COVER_MINKOWSKI, 3.0, grid);
    }
    strings();
  }
  printf("cover_net: %d checks, %d failures\n", checked, fails);
  return fails ? 1 : 0;
}
