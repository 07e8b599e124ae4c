#include <doctest/doctest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "shared/util/thread_pool.h"

using namespace waste;

TEST_CASE("parallel_for covers every index exactly once") {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 7u, 1000u, 12345u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 4, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) CHECK_EQ(hits[i].load(), 1);
  }
}

TEST_CASE("parallel_for rethrows a chunk's exception") {
  ThreadPool pool(2);
  CHECK_THROWS_AS(pool.parallel_for(100, 1, [](size_t b, size_t) {
    if (b == 0) throw std::runtime_error("boom");
  }),
                  std::runtime_error);
  std::atomic<int> sum{0};
  pool.parallel_for(10, 1, [&](size_t b, size_t e) { sum += int(e - b); });
  CHECK_EQ(sum.load(), 10);
}

// Workers poll for the next loop before they block: thousands of back-to-back loops (each
// joined by polling workers) and loops from two callers at once must each run every index once.
TEST_CASE("parallel_for: back-to-back loops and concurrent callers") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64);
  for (int loop = 0; loop < 5000; ++loop)
    pool.parallel_for(hits.size(), 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
  for (auto& h : hits) CHECK_EQ(h.load(), 5000);

  std::atomic<long> a{0}, b{0};
  auto caller = [&pool](std::atomic<long>& sum) {
    for (int loop = 0; loop < 2000; ++loop)
      pool.parallel_for(100, 1, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) sum += long(i);
      });
  };
  std::thread other(caller, std::ref(b));
  caller(a);
  other.join();
  CHECK_EQ(a.load(), 2000L * 4950);
  CHECK_EQ(b.load(), 2000L * 4950);
}
