// The q-quantile (0..1) of a sample by rank (the element at floor(q * n), clamped), as the
// iobench reports give their latencies; 0 for an empty sample.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace waste::iobench {

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

}  // namespace waste::iobench
