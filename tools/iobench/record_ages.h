// Which expert records the run read when, so the raw passes of `waste iobench` read cold ones.
// A virtual disk's host caches what was read recently (measured here: the same O_DIRECT pass
// swings 0.4-4.3 GB/s); a raw pass over records the replay just read measures that cache, not
// the device. Every read the run makes (replay misses, raw reads) is noted against a byte
// clock; a raw pass takes the records read longest ago (never read first), and each read's
// age is reported as the bytes the run read since that record was last read ("reuse GB"):
// reads far beyond the host cache are cold.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace waste::iobench {

struct RecordRef {
  uint32_t bank = 0;    // MoE position (index into the container's expert layers)
  uint32_t expert = 0;
  bool operator==(const RecordRef&) const = default;
};

class RecordAges {
 public:
  // experts_per_bank[b] records in bank b, each strides[b] bytes.
  RecordAges(std::vector<uint32_t> experts_per_bank, std::vector<uint64_t> strides);

  // Notes that `r` was read now; returns the reuse distance in bytes (bytes the run read since
  // r was last read; -1 when it was never read). Advances the byte clock by r's stride.
  int64_t note_read(RecordRef r);
  uint64_t clock_bytes() const { return clock_; }

  // Records to read for about `bytes` (at least one), coldest first: never-read records in a
  // random order, then by last read, oldest first; each record at most once per call. Does not
  // note them (note_read as they are read).
  std::vector<RecordRef> coldest(uint64_t bytes, std::mt19937_64& rng) const;

  // Records to read for about `bytes` (at least one) with the reuse distances of `reuses`
  // (bytes since the last read; -1 = never read), drawn from it at random: per draw, the unused
  // record whose last read lies closest to the drawn distance back (a never-read draw takes the
  // coldest unused record). A raw read with the replay's reuse pattern, so a host cache helps
  // both alike.
  std::vector<RecordRef> like_reuse(const std::vector<int64_t>& reuses, uint64_t bytes, std::mt19937_64& rng) const;

  uint64_t stride(uint32_t bank) const { return strides_.at(bank); }
  size_t records() const { return last_.size(); }

 private:
  size_t index(RecordRef r) const;
  std::vector<RecordRef> take(const std::vector<size_t>& order, uint64_t bytes) const;
  std::vector<uint32_t> experts_;
  std::vector<uint64_t> strides_;
  std::vector<size_t> first_;    // flat index of each bank's record 0
  std::vector<uint64_t> last_;   // clock after the last read + 1; 0 = never read
  uint64_t clock_ = 0;
};

// The median of v (the mean of the two middle values for an even count; 0 when empty).
double median(std::vector<double> v);

}  // namespace waste::iobench
