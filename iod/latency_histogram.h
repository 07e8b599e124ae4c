// Read latency histogram: log-spaced buckets (8 per power of two of microseconds), so
// percentiles are within ~9% from 1 us to hours, in fixed memory.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace waste::iod {

class LatencyHistogram {
 public:
  void add(uint64_t ns) {
    double us = double(ns) / 1000.0;
    int b = us < 1.0 ? 0 : std::min(kBuckets - 1, int(std::log2(us) * kPerOctave) + 1);
    ++counts_[size_t(b)];
    ++total_;
    if (us > max_us_) max_us_ = us;
  }
  uint64_t total() const { return total_; }
  double max_us() const { return max_us_; }
  // Upper edge of the bucket holding the q-quantile (0 when empty).
  double percentile_us(double q) const {
    if (total_ == 0) return 0;
    uint64_t want = uint64_t(std::ceil(q * double(total_)));
    if (want == 0) want = 1;
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[size_t(b)];
      if (seen >= want) return std::min(max_us_, b == 0 ? 1.0 : std::exp2(double(b) / kPerOctave));
    }
    return max_us_;
  }

 private:
  static constexpr int kPerOctave = 8;
  static constexpr int kBuckets = 40 * kPerOctave;
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
  double max_us_ = 0;
};

}  // namespace waste::iod
