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

std::vector<RecordRef> RecordAges::like_reuse(const std::vector<int64_t>& reuses, uint64_t bytes,
                                              std::mt19937_64& rng) const {
  if (reuses.empty()) return coldest(bytes, rng);
  // Records by how long ago they were read, longest first (never-read first of all, ties at
  // random); a draw binary-searches its distance and takes the nearest unused one either side.
  std::vector<size_t> order(last_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::shuffle(order.begin(), order.end(), rng);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return last_[a] < last_[b]; });
  auto ago = [&](size_t i) { return last_[i] == 0 ? UINT64_MAX : clock_ - (last_[i] - 1); };
  std::vector<bool> used(order.size(), false);  // by position in `order`
  std::vector<size_t> picked;
  uint64_t planned = 0;
  std::uniform_int_distribution<size_t> draw(0, reuses.size() - 1);
  while (picked.size() < order.size() && (picked.empty() || planned < bytes)) {
    int64_t want = reuses[draw(rng)];
    // First position whose age is <= want (ages fall along `order`); never read: position 0.
    size_t pos = 0;
    if (want >= 0) {
      size_t lo = 0, hi = order.size();
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ago(order[mid]) > uint64_t(want)) lo = mid + 1; else hi = mid;
      }
      pos = lo;
    }
    // The nearest unused position on either side (by age distance).
    size_t best = SIZE_MAX;
    uint64_t best_d = UINT64_MAX;
    for (size_t k = pos; k < order.size(); ++k)
      if (!used[k]) {
        best = k;
        best_d = want < 0 ? 0 : uint64_t(want) - std::min<uint64_t>(uint64_t(want), ago(order[k]));
        break;
      }
    for (size_t k = pos; k-- > 0;)
      if (!used[k]) {
        uint64_t d = want < 0 ? UINT64_MAX : (ago(order[k]) == UINT64_MAX ? UINT64_MAX - 1 : ago(order[k]) - uint64_t(want));
        if (best == SIZE_MAX || d < best_d) best = k;
        break;
      }
    used[best] = true;
    picked.push_back(order[best]);
    uint32_t b = uint32_t(std::upper_bound(first_.begin(), first_.end(), order[best]) - first_.begin() - 1);
    planned += strides_[b];
  }
  return take(picked, UINT64_MAX);
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
