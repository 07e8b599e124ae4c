#include "tools/iobench/record_ages.h"

#include <algorithm>
#include <numeric>

#include "shared/util/error.h"

namespace waste::iobench {

RecordAges::RecordAges(std::vector<uint32_t> experts_per_bank, std::vector<uint64_t> strides)
    : experts_(std::move(experts_per_bank)), strides_(std::move(strides)) {
  require(!experts_.empty() && experts_.size() == strides_.size(),
          "iobench: record ages need one stride per bank and at least one bank");
  size_t n = 0;
  for (size_t b = 0; b < experts_.size(); ++b) {
    require(experts_[b] > 0 && strides_[b] > 0, "iobench: bank " + std::to_string(b) + " has no records");
    first_.push_back(n);
    n += experts_[b];
  }
  last_.assign(n, 0);
}

size_t RecordAges::index(RecordRef r) const {
  require(r.bank < experts_.size() && r.expert < experts_[r.bank],
          "iobench: record " + std::to_string(r.bank) + "/" + std::to_string(r.expert) + " out of range");
  return first_[r.bank] + r.expert;
}

int64_t RecordAges::note_read(RecordRef r) {
  size_t i = index(r);
  int64_t reuse = last_[i] == 0 ? -1 : int64_t(clock_ - (last_[i] - 1));
  clock_ += strides_[r.bank];
  last_[i] = clock_ + 1;
  return reuse;
}

std::vector<RecordRef> RecordAges::coldest(uint64_t bytes, std::mt19937_64& rng) const {
  std::vector<size_t> order(last_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  // Shuffle first, then a stable sort by last read: ties (never read, or read by one layer
  // step's burst) come out in random order, so a pass does not walk one bank sequentially.
  std::shuffle(order.begin(), order.end(), rng);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return last_[a] < last_[b]; });
  return take(order, bytes);
}

std::vector<RecordRef> RecordAges::aged_near(uint64_t bytes_ago, uint64_t bytes, std::mt19937_64& rng) const {
  std::vector<size_t> order(last_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::shuffle(order.begin(), order.end(), rng);
  // Distance of a record's reuse from the wanted one; a never-read record is farthest.
  auto distance = [&](size_t i) -> uint64_t {
    if (last_[i] == 0) return UINT64_MAX;
    uint64_t ago = clock_ - (last_[i] - 1);
    return ago > bytes_ago ? ago - bytes_ago : bytes_ago - ago;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return distance(a) < distance(b); });
  return take(order, bytes);
}

std::vector<RecordRef> RecordAges::take(const std::vector<size_t>& order, uint64_t bytes) const {
  std::vector<RecordRef> out;
  uint64_t planned = 0;
  for (size_t i : order) {
    if (!out.empty() && planned >= bytes) break;
    uint32_t b = uint32_t(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin() - 1);
    out.push_back({b, uint32_t(i - first_[b])});
    planned += strides_[b];
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace waste::iobench
