#include <doctest/doctest.h>


#include "iod/cache/simulate.h"
#include "iod/cache/usage_file.h"
#include "shared/util/error.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/cache/trace_helpers.h"

using namespace waste::cache;
using waste::test::TempDir;

namespace {
UsageCounts sample() {
  CacheGeometry g({1, 2, 5}, 16, 4);
  UsageCounts u = UsageCounts::for_geometry(g, 0x1234abcdULL);
  for (int t = 0; t < 10; ++t) {
    u.add({1, 3});
    if (t % 2) u.add({5, 15});
    u.add({2, uint32_t(t)});
    u.end_token();
  }
  return u;
}
}  // namespace

TEST_CASE("usage file round-trips") {
  UsageCounts u = sample();
  std::vector<uint8_t> bytes = encode_usage(u);
  CHECK_EQ(bytes.size(), 32 + 3 * 4 + 3 * 16 * 4 + 8);
  UsageCounts v = decode_usage(bytes, "mem");
  CHECK_EQ(v.container_id, 0x1234abcdULL);
  CHECK_EQ(v.tokens, 10);
  CHECK_EQ(v.layers, u.layers);
  CHECK_EQ(v.experts, 16);
  CHECK_EQ(v.counts, u.counts);
  std::vector<ExpertKey> hot = v.hottest(2);
  REQUIRE_EQ(hot.size(), 2);
  CHECK_EQ(hot[0], ExpertKey{1, 3});
  CHECK_EQ(hot[1], ExpertKey{5, 15});
  CacheGeometry g({1, 2, 5}, 16, 4);
  KeyPrior p = v.prior(g);
  CHECK(p[g.key_index({1, 3})] == doctest::Approx(1.0));
  CHECK(p[g.key_index({5, 15})] == doctest::Approx(0.5));
  CHECK_FALSE(v.matches(CacheGeometry({1, 2, 5}, 32, 4)));

  TempDir tmp;
  const std::string path = tmp / "usage";
  write_usage_file(path, u);
  CHECK_EQ(read_usage_file(path).counts, u.counts);
}

TEST_CASE("usage file damage is rejected") {
  std::vector<uint8_t> good = encode_usage(sample());
  auto rejects = [](std::vector<uint8_t> b, const char* what) {
    CAPTURE(what);
    CHECK_THROWS_AS(decode_usage(b, "usage"), waste::Error);
  };
  for (size_t at : {size_t(0), size_t(4), size_t(20), size_t(40), good.size() - 20, good.size() - 1}) {
    std::vector<uint8_t> b = good;
    b[at] ^= 0x40;
    rejects(b, "flipped byte");
  }
  rejects(std::vector<uint8_t>(good.begin(), good.end() - 4), "truncated");
  rejects(std::vector<uint8_t>(good.begin(), good.begin() + 10), "header only");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  rejects(longer, "trailing byte");
  // A huge layer count in an otherwise consistent header is refused before any allocation.
  std::vector<uint8_t> huge = good;
  huge[27] = 0x7f;
  rejects(huge, "huge n_layers");
  try {
    std::vector<uint8_t> b = good;
    b[40] ^= 1;
    decode_usage(b, "model.waste/usage");
  } catch (const waste::Error& e) {
    CHECK(std::string(e.what()).find("model.waste/usage") != std::string::npos);
    CHECK(std::string(e.what()).find("checksum") != std::string::npos);
  }
}

TEST_CASE("usage counted from a trace pre-warms a later replay") {
  RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace("olmoe-299.jsonl"));
  CacheGeometry g = trace_geometry(t, 64);
  UsageCounts u = usage_from_trace(t, g);
  CHECK_EQ(u.tokens, 299);
  uint64_t total = 0;
  for (uint32_t c : u.counts) total += c;
  CHECK_EQ(total, 299ull * 16 * 8);
}
