// libFuzzer target: untrusted bytes as a container's `usage` file (iod/cache/usage_file.h) through
// decode_usage, then what iod does with one at start: match it against the served geometry,
// take its prior and its hottest keys. The trailing xxh3 is set right before decoding: the
// fuzzer could never forge it, and the checks behind it are what matters (a wrong checksum is
// refused first; the unit tests cover that). Contract checked: a decoded file re-encodes to
// the same decoding, counts match its shape, and hottest keys exist in it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "iod/cache/usage_file.h"
#include "shared/container/format.h"
#include "shared/util/error.h"

namespace {

// The geometry of the seeds (tests/fuzz/corpus/usage): MoE layers 1..3 of 16 experts, top-4.
const waste::cache::CacheGeometry& served_geometry() {
  static const waste::cache::CacheGeometry g({1, 2, 3}, 16, 4);
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 8) {
    const uint64_t sum = waste::checksum64(bytes.data(), bytes.size() - 8);
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  }
  waste::cache::UsageCounts u;
  try {
    u = waste::cache::decode_usage(bytes, "fuzz usage");
  } catch (const waste::Error&) {
    return 0;
  }
  if (u.layers.empty() || u.counts.size() != u.layers.size() * size_t(u.experts)) __builtin_trap();
  const std::vector<uint8_t> again = waste::cache::encode_usage(u);
  try {
    if (waste::cache::encode_usage(waste::cache::decode_usage(again, "re-encoded")) != again) __builtin_trap();
  } catch (const waste::Error&) {
    __builtin_trap();  // what encode_usage writes, decode_usage must read
  }
  for (const waste::cache::ExpertKey& k : u.hottest(64))
    if (!std::binary_search(u.layers.begin(), u.layers.end(), k.layer) || k.expert >= u.experts) __builtin_trap();
  if (u.matches(served_geometry())) {
    const waste::cache::KeyPrior p = u.prior(served_geometry());
    if (u.tokens > 0 && p.size() != served_geometry().key_count()) __builtin_trap();
  }
  return 0;
}
