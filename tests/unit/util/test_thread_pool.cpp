#include <doctest/doctest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
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
