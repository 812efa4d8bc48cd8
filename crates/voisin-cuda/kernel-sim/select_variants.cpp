// CPU simulation of the running-list select kernels (see select_variants.sh): after every tile
// of a pass, a row's list must hold the kp smallest keys offered so far (ties in any order).
#include "kern.h"
#include <cstdio>
#include <random>
std::mt19937 rng(7);
int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); ++fails; } } while (0)

enum Kind { BLOCK, HEAP, QUICK };
const char* names[] = {"block", "heap", "quick"};

// data: 0 uniform, 1 few distinct values, 2 all equal, 3 ascending, 4 descending
void test(Kind kind, int rows, int cols, int ntiles, int kp, int data, bool excl) {
  std::vector<float> lv(rows * kp);
  std::vector<unsigned> li(rows * kp);
  launch({1,1,1},{256,1,1},[&]{ fill_lists(lv.data(), li.data(), (unsigned long long)rows*kp); });
  std::vector<std::vector<std::pair<float,unsigned>>> ref(rows);
  for (int t = 0; t < ntiles; ++t) {
    std::vector<float> tile(rows * cols);
    for (int i = 0; i < rows * cols; ++i) {
      float& v = tile[i];
      int c = i % cols;
      v = data == 0 ? std::uniform_real_distribution<float>(0, 100)(rng)
        : data == 1 ? (float)(rng() % 5)
        : data == 2 ? 3.0f
        : data == 3 ? (float)(t * cols + c) : (float)(1e6 - t * cols - c);
    }
    unsigned col_off = t * cols, row_off = 5;
    for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c)
      if (!(excl && col_off + c == row_off + r)) ref[r].push_back({tile[r*cols+c], col_off + c});
    if (kind == BLOCK) {
      int nbuf = std::max(kp, 2 * 4 * 256);
      launch({(unsigned)rows,1,1},{256,1,1},[&]{ select_block(tile.data(), cols, rows, cols, KEY_DIRECT, nullptr, nullptr, row_off, col_off, excl, lv.data(), li.data(), kp, nbuf); });
    } else if (kind == HEAP) {
      launch({(unsigned)rows,1,1},{32,1,1},[&]{ select_heap(tile.data(), cols, rows, cols, KEY_DIRECT, nullptr, nullptr, row_off, col_off, excl, lv.data(), li.data(), kp); });
    } else {
      int cap = kp + 2 * 4 * 256;
      launch({(unsigned)rows,1,1},{256,1,1},[&]{ select_quick(tile.data(), cols, rows, cols, KEY_DIRECT, nullptr, nullptr, row_off, col_off, excl, lv.data(), li.data(), kp, cap); });
    }
    for (int r = 0; r < rows; ++r) {
      auto v = ref[r]; std::sort(v.begin(), v.end());
      int m = std::min<int>(kp, v.size());
      std::vector<std::pair<float,unsigned>> got;
      for (int i = 0; i < kp; ++i) {
        if (i < m) {
          unsigned id = li[r*kp+i];
          bool ok = false; for (auto& p : ref[r]) if (p.second == id && p.first == lv[r*kp+i]) ok = true;
          CHECK(ok, "%s id/value mismatch kp=%d r=%d i=%d id=%u", names[kind], kp, r, i, id);
          got.push_back({lv[r*kp+i], id});
        } else CHECK(li[r*kp+i] == NO_INDEX, "%s padding r=%d i=%d", names[kind], r, i);
      }
      if (kind != QUICK) for (int i = 1; i < m; ++i) CHECK(got[i-1].first <= got[i].first, "%s unsorted", names[kind]);
      std::sort(got.begin(), got.end());
      for (int i = 0; i < m && i < (int)got.size(); ++i)
        CHECK(got[i].first == v[i].first, "%s kp=%d tile=%d r=%d i=%d got %f want %f", names[kind], kp, t, r, i, got[i].first, v[i].first);
      for (int i = 1; i < (int)got.size(); ++i) CHECK(got[i-1].second != got[i].second || got[i-1].first != got[i].first, "%s dup id", names[kind]);
      if (excl) for (auto& p : got) CHECK(p.second != row_off + r, "%s self", names[kind]);
    }
    if (fails > 20) { printf("too many failures\n"); exit(1); }
  }
  printf("%s rows=%d cols=%d tiles=%d kp=%d data=%d excl=%d done\n", names[kind], rows, cols, ntiles, kp, data, excl);
}

int main() {
  for (Kind k : {HEAP, QUICK}) {
    for (int data = 0; data < 5; ++data) {
      test(k, 2, 3001, 3, 16, data, data == 1);
      test(k, 2, 700, 2, 64, data, false);
    }
    test(k, 3, 4099, 2, 256, 0, true);
    test(k, 2, 10, 3, 32, 0, false);   // fewer items than the list
    test(k, 1, 1, 2, 16, 0, true);     // the only item is the self pair on tile 0
  }
  test(QUICK, 2, 9000, 2, 2048, 0, false);
  test(QUICK, 2, 9000, 3, 1125, 0, true);   // quick lists need not be a power of two
  test(QUICK, 2, 3001, 3, 18, 1, false);
  test(QUICK, 2, 5000, 2, 1024, 1, false);
  test(QUICK, 1, 3000, 2, 4096, 2, false);
  printf(fails ? "FAILURES: %d\n" : "all passed\n", fails);
  return fails != 0;
}
