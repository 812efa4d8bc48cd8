// CPU simulation of the List of Clusters build kernels (see lc_build.sh) against a plain build
// written as voisin-index's ListOfClusters::build: centers, members (in (distance, index) order)
// and member distances must be equal, bit for bit.
#include "kern.h"
#include <cstdio>
#include <random>
std::mt19937 rng(5);
int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

struct Lc { std::vector<unsigned> centers, members; std::vector<double> dist; };

double dist_of(const std::vector<float>& v, int d, unsigned a, unsigned b, int metric) {
  return lc_dist(metric, lc_key(metric, &v[(size_t)a * d], &v[(size_t)b * d], 1, d, -0.0));
}

Lc reference(const std::vector<float>& v, int n, int d, int take, int metric) {
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
    for (auto& [x, s] : left) { double dd = dist_of(v, d, c, x, metric); s = s + dd; ds.push_back({lcb_order(dd), x, s}); }
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

// Drives the kernels as build.rs does (compaction threshold lowered to reach it at small n).
Lc simulated(const std::vector<float>& v, int n, int d, int take, int metric, unsigned threads) {
  const int CH = LCB_CHUNK;
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
  std::vector<unsigned> centers(nc, 0), members(std::max(nm, 1)); std::vector<double> mdist(std::max(nm, 1));
  size_t cand = (n + CH - 1) / CH * std::max(take, 1);
  std::vector<unsigned long long> ka(cand), kb(cand), bk(264); std::vector<unsigned> sa(cand), sb(cand), bs(264);
  left = n - 1; long start = 0;
  for (int step = 0; step < nc; ++step) {
    int cut = cuts[step];
    if (left > 0) {
      int blocks = (len + CH - 1) / CH;
      launch({(unsigned)blocks,1,1},{threads,1,1},[&]{ lc_build_scan(cv.data(), len, alive.data(), sums.data(), len, d, metric, 0.0, -0.0, cbuf.data(), take, ka.data(), sa.data()); });
      if (cut > 0) {
        long entries = (long)blocks * take;
        while (entries > CH) {
          int nb = (entries + CH - 1) / CH;
          launch({(unsigned)nb,1,1},{threads,1,1},[&]{ lc_build_select(ka.data(), sa.data(), entries, take, kb.data(), sb.data(), nullptr, nullptr, nullptr, nullptr, 0); });
          std::swap(ka, kb); std::swap(sa, sb);
          entries = (long)nb * take;
        }
        launch({1,1,1},{threads,1,1},[&]{ lc_build_select(ka.data(), sa.data(), entries, cut, nullptr, nullptr, ids.data(), alive.data(), members.data(), mdist.data(), start); });
      }
    }
    left -= cut; start += cut;
    if (step + 1 < nc) {
      int nb = std::min((len + (int)threads - 1) / (int)threads, 264);
      launch({(unsigned)nb,1,1},{threads,1,1},[&]{ lc_build_argmax(sums.data(), alive.data(), len, bk.data(), bs.data()); });
      launch({1,1,1},{threads,1,1},[&]{ lc_build_next(bk.data(), bs.data(), nb, cv.data(), len, d, ids.data(), alive.data(), cbuf.data(), centers.data(), step + 1); });
      left -= 1;
      if (len > 2 * 16 && left <= len / 2) {
        std::vector<unsigned> keep;
        for (int i = 0; i < len; ++i) if (alive[i]) keep.push_back(i);
        CHECK((int)keep.size() == left, "alive %zu expected %d", keep.size(), left);
        int m = std::max((int)keep.size(), 1);
        std::vector<float> ncv((size_t)d * m); std::vector<unsigned> nids(m); std::vector<double> nsums(m); std::vector<unsigned char> nal(m);
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

void test(int n, int d, int size, int levels, int metric) {
  std::vector<float> v((size_t)n * d);
  for (auto& x : v) x = (float)(rng() % levels) * 0.25f;
  if (n > 3) { for (int j = 0; j < d; ++j) v[(size_t)3 * d + j] = v[j]; }  // a duplicate of item 0
  Lc want = reference(v, n, d, size - 1, metric);
  Lc got = simulated(v, n, d, size - 1, metric, 32);
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
    test(150, 3, 8, 4, metric);    // many ties, several selection rounds
    test(301, 1, 17, 6, metric);   // n not a multiple of the size, dim 1
    test(70, 5, 1, 50, metric);    // clusters of one item
    test(260, 2, 32, 5, metric);   // the largest cluster of a chunk (half of it)
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
