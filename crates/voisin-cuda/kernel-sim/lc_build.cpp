// CPU simulation of the List of Clusters build kernels (see lc_build.sh) against a plain build
// written as voisin-index's ListOfClusters::build: centers, members (in (distance, index) order)
// and member distances must be equal, bit for bit.
#include "kern.h"
#include <cstdio>
#include <random>
#include <functional>
std::mt19937 rng(5);
int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

struct Lc { std::vector<unsigned> centers, members; std::vector<double> dist; };

double dist_of(const std::vector<float>& v, int d, unsigned a, unsigned b, int metric) {
  return lc_dist(metric, lc_key(metric, &v[(size_t)a * d], &v[(size_t)b * d], 1, d, -0.0));
}

// The plain build over any distance.
Lc reference_by(int n, int take, const std::function<double(unsigned, unsigned)>& dist);

Lc reference(const std::vector<float>& v, int n, int d, int take, int metric) {
  return reference_by(n, take, [&](unsigned c, unsigned x) { return dist_of(v, d, c, x, metric); });
}

Lc reference_by(int n, int take, const std::function<double(unsigned, unsigned)>& dist) {
  Lc out;
  std::vector<std::pair<unsigned, double>> left;
  for (int i = 0; i < n; ++i) left.push_back({(unsigned)i, -0.0});
  long pos = n > 0 ? 0 : -1;
  auto tot = [](double a, double b) { return lcb_order(a) < lcb_order(b); };
  while (pos >= 0) {
    unsigned c = left[pos].first;
    left.erase(left.begin() + pos);
    out.centers.push_back(c);
    std::vector<std::tuple<unsigned long long, unsigned, double>> ds;
    for (auto& [x, s] : left) { double dd = dist(c, x); s = s + dd; ds.push_back({lcb_order(dd), x, s}); }
    std::sort(ds.begin(), ds.end(), [](auto& a, auto& b) { return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) < std::get<0>(b) : std::get<1>(a) < std::get<1>(b); });
    size_t cut = std::min((size_t)take, ds.size());
    for (size_t i = 0; i < cut; ++i) { out.members.push_back(std::get<1>(ds[i])); out.dist.push_back(lcb_unorder(std::get<0>(ds[i]))); }
    std::vector<std::pair<unsigned, double>> rest;
    for (size_t i = cut; i < ds.size(); ++i) rest.push_back({std::get<1>(ds[i]), std::get<2>(ds[i])});
    std::sort(rest.begin(), rest.end());
    left = rest;
    pos = -1;
    for (size_t i = 0; i < left.size(); ++i)
      if (pos < 0 || tot(left[pos].second, left[i].second)) pos = i;
  }
  return out;
}

// Strings as the device holds them: code points, item i at chars[offs[i]..offs[i + 1]).
struct Strs { std::vector<unsigned> chars, offs; };

// Drives the kernels as build.rs does (compaction threshold lowered to reach it at small n; at
// most `grid` blocks, so that several blocks share the slots grid-stride); over `strs` (d = 0)
// with the levenshtein scan when given.
Lc simulated(const std::vector<float>& v, int n, int d, int take, int metric, unsigned threads, unsigned grid, const Strs* strs = nullptr) {
  std::vector<int> cuts; int left = n;
  while (left > 0) { left -= 1; int c = std::min(take, left); left -= c; cuts.push_back(c); }
  int nc = cuts.size(), nm = n - nc;
  int len = n;
  std::vector<float> cv((size_t)d * n);
  for (int i = 0; i < n; ++i) for (int j = 0; j < d; ++j) cv[(size_t)j * n + i] = v[(size_t)i * d + j];
  std::vector<unsigned> ids(n); for (int i = 0; i < n; ++i) ids[i] = i;
  std::vector<double> sums(n, 0.0);
  std::vector<unsigned char> alive(n, 1); alive[0] = 0;
  std::vector<float> cbuf(v.begin(), v.begin() + d);
  if (cv.empty()) cv.push_back(0.0f);
  std::vector<unsigned> centers(nc, 0), members(std::max(nm, 1)); std::vector<double> mdist(std::max(nm, 1));
  std::vector<unsigned long long> keys(n), ak(std::max(take, 1)), bk(n), best_k(grid);
  std::vector<unsigned> hist(LCB_BINS, 0), as(std::max(take, 1)), bs(n), best_s(grid), done(1, 0), counts(3, 0);
  std::vector<long long> cut_bin(1, 0);
  left = n - 1; long start = 0;
  for (int step = 0; step < nc; ++step) {
    int cut = cuts[step];
    if (left > 0) {
      unsigned blocks = std::min<unsigned>((len + threads - 1) / threads, grid);
      long long next = step + 1 < nc ? step + 1 : -1;
      if (strs)
        launch({blocks,1,1},{threads,1,1},[&]{ lc_build_scan_lev(strs->chars.data(), strs->offs.data(), ids.data(), centers.data(), step, alive.data(), sums.data(), len, cut, keys.data(), hist.data(), cut_bin.data(), done.data()); });
      else
        launch({blocks,1,1},{threads,1,1},[&]{ lc_build_scan(cv.data(), len, d, metric, 0.0, -0.0, cbuf.data(), alive.data(), sums.data(), len, cut, keys.data(), hist.data(), cut_bin.data(), done.data()); });
      launch({blocks,1,1},{threads,1,1},[&]{ lc_build_collect(keys.data(), alive.data(), sums.data(), len, cut, cut_bin.data(), ak.data(), as.data(), bk.data(), bs.data(), counts.data(), best_k.data(), best_s.data(), ids.data(), members.data(), mdist.data(), start, cv.data(), len, d, cbuf.data(), centers.data(), next); });
      CHECK(done[0] == 0 && counts[0] == 0 && counts[1] == 0 && counts[2] == 0, "counters not reset at step %d", step);
      CHECK(std::all_of(hist.begin(), hist.end(), [](unsigned h) { return h == 0; }), "histogram not cleared at step %d", step);
    }
    left -= cut; start += cut;
    if (step + 1 < nc) {
      left -= 1;
      if (len > 2 * 16 && left <= len / 4 * 3) {
        std::vector<unsigned> keep;
        for (int i = 0; i < len; ++i) if (alive[i]) keep.push_back(i);
        CHECK((int)keep.size() == left, "alive %zu expected %d", keep.size(), left);
        int m = std::max((int)keep.size(), 1);
        std::vector<float> ncv(std::max((size_t)d * m, (size_t)1)); std::vector<unsigned> nids(m); std::vector<double> nsums(m); std::vector<unsigned char> nal(m);
        unsigned gt = 32, gb = (keep.size() + gt - 1) / gt;
        launch({std::max(gb, 1u),1,1},{gt,1,1},[&]{ lc_build_gather(cv.data(), len, ids.data(), sums.data(), keep.data(), keep.size(), d, ncv.data(), m, nids.data(), nsums.data(), nal.data()); });
        cv = ncv; ids = nids; sums = nsums; alive = nal; len = keep.size();
      }
    }
  }
  Lc out{centers, members, mdist};
  out.members.resize(nm); out.dist.resize(nm);
  return out;
}

// levels > 0: coordinates on a grid of `levels` values (many ties); levels == 0: random floats.
void test(int n, int d, int size, int levels, int metric, unsigned grid = 3) {
  std::vector<float> v((size_t)n * d);
  for (auto& x : v) x = levels > 0 ? (float)(rng() % levels) * 0.25f : std::uniform_real_distribution<float>(-3, 3)(rng);
  if (n > 3) { for (int j = 0; j < d; ++j) v[(size_t)3 * d + j] = v[j]; }  // a duplicate of item 0
  Lc want = reference(v, n, d, size - 1, metric);
  Lc got = simulated(v, n, d, size - 1, metric, 32, grid);
  CHECK(got.centers == want.centers, "centers differ n=%d d=%d size=%d metric=%d", n, d, size, metric);
  CHECK(got.members == want.members, "members differ n=%d d=%d size=%d metric=%d", n, d, size, metric);
  bool same = got.dist.size() == want.dist.size();
  for (size_t i = 0; same && i < got.dist.size(); ++i) same = lcb_order(got.dist[i]) == lcb_order(want.dist[i]);
  CHECK(same, "member distances differ n=%d d=%d size=%d metric=%d", n, d, size, metric);
}

int main() {
  for (int metric : {EX_SQEUCLIDEAN, EX_CITYBLOCK, EX_CHEBYSHEV}) {
    test(1, 3, 4, 5, metric);
    test(3, 2, 8, 3, metric);      // n < cluster size
    test(150, 3, 8, 4, metric);    // many ties
    test(301, 1, 17, 6, metric);   // n not a multiple of the size, dim 1
    test(70, 5, 1, 50, metric);    // clusters of one item
    test(260, 2, 32, 5, metric);   // larger clusters than the pairs ranked at once
    test(400, 3, 16, 0, metric, 5); // distinct distances: the histogram alone decides most
    test(300, 4, 9, 1, metric, 2); // every item equal: one bin, ties by slot
    test(200, 7, 64, 0, metric, 1); // one block
  }
  {
    // Zero and tiny distances beside huge ones (the histogram's first and last bins).
    int n = 120, d = 2;
    std::vector<float> v((size_t)n * d);
    for (int i = 0; i < n; ++i) for (int j = 0; j < d; ++j)
      v[(size_t)i * d + j] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1e-30f * (float)(i % 7) : 1e30f * (float)(i % 5);
    for (int metric : {EX_SQEUCLIDEAN, EX_CITYBLOCK, EX_CHEBYSHEV}) {
      Lc want = reference(v, n, d, 7, metric), got = simulated(v, n, d, 7, metric, 32, 4);
      CHECK(got.centers == want.centers && got.members == want.members, "extremes metric=%d", metric);
    }
  }
  {
    // Strings under levenshtein: short words over a small alphabet (many ties), duplicates, the
    // empty string and one string over 64 chars (the pattern is then the other string).
    std::vector<std::vector<unsigned>> words;
    for (int i = 0; i < 230; ++i) {
      std::vector<unsigned> w(rng() % 7);
      for (auto& c : w) c = "abc"[rng() % 3] + (rng() % 9 == 0 ? 0x100 : 0);
      words.push_back(w);
    }
    words[7] = words[3]; words[11] = {}; words[20] = std::vector<unsigned>(70, 'a'); if (!words[21].empty()) words[21][0] = 0xe9;
    Strs st; st.offs.push_back(0);
    for (auto& w : words) { st.chars.insert(st.chars.end(), w.begin(), w.end()); st.offs.push_back(st.chars.size()); }
    st.chars.push_back(0);
    auto lev = [&](unsigned a, unsigned b) {
      auto& x = words[a]; auto& y = words[b];
      std::vector<unsigned> row(y.size() + 1);
      for (size_t j = 0; j <= y.size(); ++j) row[j] = j;
      for (size_t i = 1; i <= x.size(); ++i) {
        unsigned diag = row[0]; row[0] = i;
        for (size_t j = 1; j <= y.size(); ++j) { unsigned up = row[j]; row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (x[i - 1] != y[j - 1])}); diag = up; }
      }
      return (double)row[y.size()];
    };
    int n = words.size();
    for (int size : {1, 2, 9, 33}) for (unsigned grid : {1u, 4u}) {
      Lc want = reference_by(n, size - 1, lev), got = simulated({}, n, 0, size - 1, 0, 32, grid, &st);
      CHECK(got.centers == want.centers && got.members == want.members, "strings size=%d grid=%u", size, grid);
      bool same = got.dist.size() == want.dist.size();
      for (size_t i = 0; same && i < got.dist.size(); ++i) same = got.dist[i] == want.dist[i];
      CHECK(same, "strings distances size=%d grid=%u", size, grid);
    }
  }
  // Distances to reference rows.
  int n = 37, d = 4;
  std::vector<float> v((size_t)n * d), cv((size_t)n * d), refs(2 * d);
  for (auto& x : v) x = (float)(rng() % 9) - 4.0f;
  for (int i = 0; i < n; ++i) for (int j = 0; j < d; ++j) cv[(size_t)j * n + i] = v[(size_t)i * d + j];
  for (int j = 0; j < d; ++j) { refs[j] = v[5 * d + j]; refs[d + j] = v[30 * d + j]; }
  std::vector<double> out(2 * (n - 3));
  launch({1,2,1},{64,1,1},[&]{ lc_build_to_refs(cv.data() + 3, n, n - 3, refs.data(), d, EX_CITYBLOCK, 0.0, -0.0, out.data()); });
  for (int r = 0; r < 2; ++r) for (int i = 0; i < n - 3; ++i)
    CHECK(out[r * (n - 3) + i] == dist_of(v, d, r ? 30 : 5, i + 3, EX_CITYBLOCK), "to_refs %d %d", r, i);
  if (fails) printf("lc_build: %d FAILED\n", fails); else printf("lc_build: all ok\n");
  return fails ? 1 : 0;
}
