// `waste iobench MODEL --trace T` with the raw device interleaved (raw, round, raw, ...): the
// per-round and per-pass fields of its JSON, checked against the trace and the container on a
// tiny synthetic container (a few MB of raw reads; the rates themselves are not asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "iod/io/io_choice.h"
#include "shared/container/reader.h"
#include "tests/integration/process.h"
#include "tests/integration/synth_model.h"
#include "tests/io_uring_probe.h"
#include "tests/skip.h"

using namespace waste;
using namespace waste::test;

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

TEST_CASE("waste iobench interleaves raw passes with replay rounds and reports each") {
  TempDir tmp;
  std::string model = tmp / "tiny.waste";
  {
    synth_model(model, "--preset tiny-kimi-linear");
  }
  Container c = Container::open(model);
  const uint32_t L = uint32_t(c.expert_layers().size());
  const uint64_t stride = c.expert_layers()[0].layout.stride;
  for (const auto& l : c.expert_layers()) REQUIRE_EQ(l.layout.stride, stride);
  // 21 tokens, top-4 of 32 experts, spread so the cache of one working set misses often.
  std::string trace = tmp / "trace.jsonl";
  {
    std::ofstream f(trace);
    for (int t = 0; t < 21; ++t) {
      nlohmann::json layers = nlohmann::json::array();
      for (uint32_t l = 0; l < L; ++l) {
        std::vector<uint32_t> ex;
        for (uint32_t k = 0; k < 4; ++k) ex.push_back((uint32_t(t) * 11 + l * 5 + k * 7) % 32);
        layers.push_back(ex);
      }
      f << nlohmann::json{{"tok", t}, {"layers", layers}}.dump() << "\n";
    }
  }
  char raw_gb[64];  // two and a half records: a raw read takes three
  std::snprintf(raw_gb, sizeof raw_gb, "%.12g", 2.5 * double(stride) / 1e9);
  for (std::string io : {"uring", "pread"}) {
    CAPTURE(io);
    if (io == "uring") {
      // waste iobench --io uring refuses to run without io_uring (no silent fallback); a build
      // without it is checked to refuse by name below.
      if (const std::string why = waste::test::kernel_refuses_io_uring(); iod::kHaveUring && !why.empty()) {
        waste::test::skip_part("--io uring: " + why);
        continue;
      }
    }
    // --raw-depth 2: every pass (pass 0 too) reads at qd 4 and at depth 2. Raw passes of at
    // most 3 records each; the page cache is left alone (a test does not drop the machine's).
    auto r = run_command(waste_bin() + " iobench " + model + " --trace " + trace + " --qd 4 --io " + io +
                         " --rounds 3 --raw-depth 2 --raw-gb " + raw_gb +
                         " --no-drop-caches --json");
    INFO(r.output);
    if (io == "uring" && !iod::kHaveUring) {
      // Refused by name, not measured with pread behind the user's back.
      CHECK_NE(r.status, 0);
      CHECK(r.output.find("built without io_uring") != std::string::npos);
      waste::test::skip_part("built without io_uring: iobench --io uring");
      continue;
    }
    REQUIRE_EQ(r.status, 0);
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    // The stable fields.
    CHECK_EQ(j["tokens"].get<size_t>(), 21u);
    const uint64_t hits = j["hits"], misses = j["misses"];
    CHECK_EQ(hits + misses, 21u * L * 4);
    CHECK_GT(misses, 0u);
    CHECK_EQ(j["bytes_read"].get<uint64_t>(), misses * stride);  // lookahead 0: a read per miss
    CHECK_GT(j["gb_per_s"].get<double>(), 0.0);
    // Rounds: consecutive slices covering the trace; their sums are the totals.
    REQUIRE_EQ(j["rounds"].size(), 3u);
    size_t next = 0;
    uint64_t sum_hits = 0, sum_misses = 0;
    std::vector<double> ratios, ratios_depth;
    for (const auto& rd : j["rounds"]) {
      CHECK_EQ(rd["first_token"].get<size_t>(), next);
      CHECK_EQ(rd["tokens"].get<size_t>(), 7u);
      next += rd["tokens"].get<size_t>();
      sum_hits += rd["hits"].get<uint64_t>();
      sum_misses += rd["misses"].get<uint64_t>();
      // Client view of the depth: between 1 and top_k when the round read anything.
      if (rd["misses"].get<uint64_t>() > 0) {
        CHECK_GE(rd["inflight_at_issue"].get<double>(), 1.0);
        CHECK_LE(rd["inflight_at_issue"].get<double>(), 4.0);
        CHECK_LE(rd["inflight_mean"].get<double>(), 4.0);
      }
      double q = rd["raw_qd"]["mean"];
      CHECK_EQ(q, doctest::Approx((rd["raw_qd"]["before"].get<double>() + rd["raw_qd"]["after"].get<double>()) / 2));
      CHECK_EQ(rd["ratio_qd"].get<double>(), doctest::Approx(rd["gb_per_s"].get<double>() / q));
      ratios.push_back(rd["ratio_qd"]);
      double d = rd["raw_depth"]["mean"];
      CHECK_EQ(rd["ratio_depth"].get<double>(), doctest::Approx(rd["gb_per_s"].get<double>() / d));
      ratios_depth.push_back(rd["ratio_depth"]);
    }
    CHECK_EQ(next, 21u);
    CHECK_EQ(sum_hits, hits);
    CHECK_EQ(sum_misses, misses);
    CHECK_EQ(j["ratio_to_raw"].get<double>(), doctest::Approx(median_of(ratios)));
    CHECK_EQ(j["ratio_to_raw_depth"].get<double>(), doctest::Approx(median_of(ratios_depth)));
    // Raw passes: one before each round and one after the last, each at qd and at the depth,
    // three whole records per read, the page cache untouched as asked.
    const auto& passes = j["raw"]["passes"];
    REQUIRE_EQ(passes.size(), 4u);
    CHECK_EQ(j["raw"]["depth"].get<uint32_t>(), 2u);
    for (const auto& p : passes) {
      CHECK_EQ(p["at_qd"]["reads"].get<uint64_t>(), 3u);
      CHECK_EQ(p["at_qd"]["bytes"].get<uint64_t>(), 3 * stride);
      CHECK_EQ(p["at_qd"]["depth"].get<uint32_t>(), 4u);
      CHECK_EQ(p["at_depth"]["bytes"].get<uint64_t>(), 3 * stride);
      CHECK_EQ(p["at_depth"]["depth"].get<uint32_t>(), 2u);
      CHECK_FALSE(p["page_cache_dropped"].get<bool>());
    }
    // Reads aimed at the reuse distance of the round before: never in pass 0; at qd, whole
    // records, and each round's matched ratio against the passes either side that have one.
    CHECK_FALSE(passes[0].contains("at_matched"));
    for (const auto& p : passes)
      if (p.contains("at_matched")) {
        CHECK_EQ(p["at_matched"]["depth"].get<uint32_t>(), 4u);
        CHECK_EQ(p["at_matched"]["bytes"].get<uint64_t>(), 3 * stride);
        CHECK_GE(p["at_matched"]["target_reuse_gb"].get<double>(), 0.0);
      }
    for (const auto& rd : j["rounds"])
      if (rd.contains("ratio_matched"))
        CHECK_EQ(rd["ratio_matched"].get<double>(),
                 doctest::Approx(rd["gb_per_s"].get<double>() / rd["raw_matched"]["mean"].get<double>()));
    // Pass 0 comes first: nothing was read before, so all its six reads are first reads.
    CHECK_EQ(passes[0]["first_reads"].get<uint64_t>(), 6u);
    CHECK_EQ(j["raw"]["before"]["bytes"], passes[0]["at_qd"]["bytes"]);
    CHECK_EQ(j["page_cache"]["why_not"].get<std::string>(), "--no-drop-caches");
    CHECK_EQ(j["rounds"][0]["raw_qd"]["before"].get<double>(), passes[0]["at_qd"]["gb_per_s"].get<double>());
    CHECK_EQ(j["rounds"][2]["raw_qd"]["after"].get<double>(), passes[3]["at_qd"]["gb_per_s"].get<double>());
  }
  // Without --raw-depth the depth comes from round 1: pass 0 has no depth read. (The default
  // --io is uring, whose raw passes refuse to run without io_uring: pread there.)
  const std::string io = waste::test::io_uring_unavailable().empty() ? "" : " --io pread";
  auto r = run_command(waste_bin() + " iobench " + model + " --trace " + trace + io +
                       " --qd 4 --rounds 2 --raw-gb 0.000001 --no-drop-caches --json");
  INFO(r.output);
  REQUIRE_EQ(r.status, 0);
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const auto& passes = j["raw"]["passes"];
  REQUIRE_EQ(passes.size(), 3u);
  CHECK_EQ(passes[0]["at_qd"]["reads"].get<uint64_t>(), 1u);  // at least one record per read
  const uint32_t depth = j["raw"]["depth"];
  CHECK_GE(depth, 1u);
  CHECK_LE(depth, 4u);
  CHECK_FALSE(passes[0].contains("at_depth"));
  if (depth != 4) CHECK(passes[1].contains("at_depth"));
}

TEST_CASE("waste iobench --read-records reads the listed records in order and times the last ones") {
  TempDir tmp;
  std::string model = tmp / "tiny.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  Container c = Container::open(model);
  const auto& layers = c.expert_layers();
  REQUIRE(layers.size() >= 2);
  const uint64_t stride = layers[0].layout.stride;
  // 7 records over two banks (one read twice), comments and a blank line; the last 3 timed.
  std::string list = tmp / "reads.txt";
  {
    std::ofstream f(list);
    f << "# layer expert\n";
    f << layers[0].layer << " 0\n" << layers[1].layer << " 5\n\n";
    f << layers[0].layer << " 3  # again below\n" << layers[1].layer << " 1\n";
    f << layers[0].layer << " 3\n" << layers[1].layer << " " << layers[1].expert_count - 1 << "\n";
    f << layers[0].layer << " 2\n";
  }
  const std::string io = iod::kHaveUring && waste::test::kernel_refuses_io_uring().empty() ? "uring" : "pread";
  auto r = run_command(waste_bin() + " iobench " + model + " --read-records " + list +
                       " --timed-last 3 --qd 2 --io " + io + " --no-drop-caches --json");
  INFO(r.output);
  REQUIRE_EQ(r.status, 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK_EQ(j["records"].get<int>(), 7);
  CHECK_EQ(j["timed"]["reads"].get<int>(), 3);
  CHECK_EQ(j["timed"]["bytes"].get<uint64_t>(), 3 * stride);
  CHECK_EQ(j["untimed_head"]["reads"].get<int>(), 4);
  CHECK_EQ(j["untimed_head"]["bytes"].get<uint64_t>(), 4 * stride);
  CHECK(j["timed"]["gb_per_s"].get<double>() > 0);
  CHECK_EQ(j["io"].get<std::string>(), io);

  // Bad lists are refused naming the file, the line and what is wrong.
  auto refused = [&](const std::string& text, const std::string& expect) {
    std::string bad = tmp / "bad.txt";
    std::ofstream(bad) << text;
    auto b = run_command(waste_bin() + " iobench " + model + " --read-records " + bad + " --io " + io + " --no-drop-caches");
    INFO(b.output);
    CHECK_NE(b.status, 0);
    CHECK(b.output.find(expect) != std::string::npos);
  };
  refused(std::to_string(layers[0].layer) + " " + std::to_string(layers[0].expert_count) + "\n",
          "bad.txt:1: expert " + std::to_string(layers[0].expert_count) + " of layer");
  refused("\n" + std::to_string(layers[0].layer) + " 1 9\n", "bad.txt:2: expected 'layer expert'");
  refused("9999 0\n", "bad.txt:1: layer 9999 has no routed experts");
  refused("# nothing\n", "no records");
  // Strict numbers: not narrowed (4294967297 was read as layer 1), and a line that does not start
  // with a number is not skipped as if blank.
  refused(std::to_string(layers[0].layer) + " 0\n4294967297 5\n", "bad.txt:2: layer 4294967297 is out of range");
  refused(std::to_string(layers[0].layer) + " 0\nx y\n", "bad.txt:2: expected 'layer expert'");
  // The trace replay's options are refused with --read-records, not ignored; --timed-last alone too.
  for (const std::string& extra : std::vector<std::string>{"--rounds 3", "--trace " + list, "--lookahead 2", "--simulate", "--cache-ws 2"}) {
    auto b = run_command(waste_bin() + " iobench " + model + " --read-records " + list + " " + extra + " --io " + io);
    INFO(extra, ": ", b.output);
    CHECK_NE(b.status, 0);
    CHECK(b.output.find("excludes") != std::string::npos);
    CHECK(b.output.find(extra.substr(0, extra.find(' '))) != std::string::npos);
  }
  auto alone = run_command(waste_bin() + " iobench " + model + " --timed-last 2 --io " + io);
  CHECK_NE(alone.status, 0);
  CHECK(alone.output.find("--timed-last requires --read-records") != std::string::npos);
  CHECK_EQ(j["page_cache_dropped"].get<bool>(), false);  // --no-drop-caches above
  auto over = run_command(waste_bin() + " iobench " + model + " --read-records " + list + " --timed-last 8 --io " + io +
                          " --no-drop-caches");
  CHECK_NE(over.status, 0);
  CHECK(over.output.find("--timed-last 8 is more than the 7 records") != std::string::npos);
}
