// The same computation under every SIMD level this CPU has (WASTE_SIMD caps the level of each
// child process; the levels come from the CPU probe, tests/support/simd_levels.h, so x86-64 runs
// scalar, avx2 and avx512 where it has them, aarch64 scalar and neon), compared with the scalar
// run: the in-tree form of the cross-SIMD bit-identity check.
//
// Whole-model logits are not bit-identical across levels, by design: the f32 kernels (F32/BF16
// matvec, the vector reductions, attention) sum in lane order, so each width rounds differently
// (docs/COMPUTE.md; measured on the fixtures, 2026-12-05: max |diff| <= 6e-6 of the largest
// logit), and the int8 paths (trunk activations, RVQ tables) turn such last-bit differences
// into a different rounding step now and then; on random synthetic weights a near-tied router
// choice then flips and logits differ by whole units. So the bits are checked where the kernels
// are documented bit-identical, per kernel family through the dispatched entry points on odd
// shapes (tests/integration/simd_probe.cpp, run once per level); the whole model on the lossless
// fixtures (f32 kernels only) within a bound, with the same argmax everywhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/util/cpu.h"
#include "tests/integration/f32_file.h"
#include "tests/integration/process.h"
#include "tests/support/simd_levels.h"

using namespace waste;
using namespace waste::test;

namespace {

// Scalar first (the reference), then every SIMD level of this CPU.
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l = {SimdLevel::Scalar};
  for (SimdLevel s : simd_levels_of_cpu()) l.push_back(s);
  return l;
}

std::string name_of(SimdLevel l) { return simd_level_name(l); }

// The RVQ kernels of a level are the table lookups of the scalar reference (AVX-512 VBMI, NEON
// TBL/TBX: the same integers and float operations, bit-identical) except on AVX2, which has no
// byte permute and decodes the weights instead (docs/RVQ.md "Kernels").
bool rvq_uses_tables(SimdLevel l) { return l != SimdLevel::Avx2; }

// max |a - b| over max |b|.
double relative_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return d / m;
}

// sqrt(sum (a - b)^2 / sum b^2).
double relative_rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double e = 0, s = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    s += double(b[i]) * double(b[i]);
  }
  return std::sqrt(e / s);
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name, " is not set (meson's test environment sets it)");
  return v;
}

}  // namespace

TEST_CASE("simd: the dispatched kernels give the scalar bits on every level where they are documented bit-identical") {
  const std::string probe = env_or_fail("WASTE_SIMD_PROBE");
  TempDir tmp;
  struct Run {
    SimdLevel level;
    std::vector<float> int8, exact, floats, rvq;
  };
  std::vector<Run> runs;
  for (SimdLevel l : levels()) {
    CAPTURE(name_of(l));
    const std::string out = tmp / name_of(l);
    std::filesystem::create_directories(out);
    // WASTE_TRUNK_ACT unset: the int8 trunk path is the default one.
    const auto r = run_command("env -u WASTE_TRUNK_ACT WASTE_SIMD=" + name_of(l) + " " + probe + " " + out);
    INFO(r.output);
    REQUIRE(r.status == 0);
    REQUIRE(r.output.find("simd=" + name_of(l) + "\n") != std::string::npos);  // the cap took effect
    runs.push_back({l, read_f32(out + "/int8.f32"), read_f32(out + "/exact.f32"), read_f32(out + "/float.f32"),
                    read_f32(out + "/rvq.f32")});
  }
  const Run& scalar = runs.front();
  REQUIRE(!scalar.int8.empty());
  for (const Run& r : runs) {
    CAPTURE(name_of(r.level));
    // Int8 trunk matvec: the same integer sums and float steps on every path (docs/COMPUTE.md).
    CHECK(same_bytes(r.int8, scalar.int8));
    // F32/BF16 where every product and partial sum is exact: any order, the same bits.
    CHECK(same_bytes(r.exact, scalar.exact));
    // F32/BF16 on Gaussian data: lane order rounds differently, within f32 rounding of the
    // reference (the sums here have at most 2304 terms).
    CHECK(relative_max_diff(r.floats, scalar.floats) <= 1e-5);
    if (rvq_uses_tables(r.level)) {
      CHECK(same_bytes(r.rvq, scalar.rvq));
    } else {
      // AVX2 decodes exactly; the reference's int8 tables cost about 1.5% of the output
      // (unit-rvq asserts < 3% against the decoded weights).
      CHECK(relative_rms_diff(r.rvq, scalar.rvq) < 0.03);
    }
  }
  MESSAGE("levels compared: " << runs.size());
}

TEST_CASE("simd: every lossless fixture's logits agree across levels (same argmax, within f32 rounding)") {
  const std::string fixtures = shared_dir() + "/fixtures";
  REQUIRE(std::filesystem::is_directory(fixtures));
  TempDir tmp;
  int seen = 0;
  for (const char* name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    const std::string dir = fixtures + "/" + name, model = tmp / (std::string(name) + ".waste");
    const auto c = run_command(waste_bin() + " convert " + dir + " --out " + model +
                               " --experts f32 --trunk f32 --no-progress");
    INFO(c.output);
    REQUIRE(c.status == 0);
    const auto ids = nlohmann::json::parse(std::ifstream(dir + "/tokens.json"))["input_ids"];
    REQUIRE(ids.size() > 0);
    if (seen == 0) {
      // `waste eval` reads the cap: a value that is no level of this CPU is named in a warning.
      const auto r = run_command("WASTE_SIMD=no-such-level " + waste_bin() + " eval " + model +
                                 " --no-progress --no-iod --tokens " + dir + "/tokens.json --logits " + (tmp / "x.f32"));
      CHECK_MESSAGE(r.output.find("WASTE_SIMD='no-such-level' is not a SIMD level") != std::string::npos, r.output);
    }
    std::vector<float> reference;
    for (SimdLevel l : levels()) {
      CAPTURE(name_of(l));
      const std::string out = tmp / (std::string(name) + "-" + name_of(l) + ".f32");
      const auto r = run_command("WASTE_SIMD=" + name_of(l) + " " + waste_bin() + " eval " + model +
                                 " --no-progress --no-iod --tokens " + dir + "/tokens.json --logits " + out);
      INFO(r.output);
      REQUIRE(r.status == 0);
      const std::vector<float> logits = read_f32(out);
      REQUIRE(logits.size() % ids.size() == 0);
      if (l == SimdLevel::Scalar) {
        reference = logits;
        continue;
      }
      const double d = relative_max_diff(logits, reference);
      MESSAGE(std::string(name) << " " << name_of(l) << " vs scalar: max |diff| / max |logit| " << d);
      CHECK(d <= 1e-4);
      const size_t V = logits.size() / ids.size();
      for (size_t t = 0; t < ids.size(); ++t) {
        const auto row = [&](const std::vector<float>& v) {
          return std::max_element(v.begin() + long(t * V), v.begin() + long((t + 1) * V)) - v.begin();
        };
        CHECK(row(logits) == row(reference));
      }
    }
    ++seen;
  }
  CHECK(seen == 3);
}
