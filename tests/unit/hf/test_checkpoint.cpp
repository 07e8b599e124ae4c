#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shared/hf/checkpoint.h"
#include "shared/model/tensors.h"
#include "shared/util/error.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/fixture_dir.h"

using namespace waste;
using waste::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Writes a safetensors file from a header JSON text and a data section.
void write_safetensors(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
                       uint64_t claimed_len = UINT64_MAX) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

// A directory with the deepseek-v3 fixture's config and one safetensors file.
std::string make_checkpoint(const TempDir& tmp, const std::string& header, const std::vector<uint8_t>& data,
                            uint64_t claimed_len = UINT64_MAX) {
  fs::copy_file(fixture_dir("deepseek-v3") + "/config.json", tmp / "config.json");
  write_safetensors(tmp / "model.safetensors", header, data, claimed_len);
  return tmp.path();
}

std::string error_of(const std::string& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every fixture opens and holds every trunk tensor of its family") {
  for (const char* name : {"deepseek-v3", "deepseek-v3-fp8", "kimi-k3", "kimi-linear"}) {
    CAPTURE(name);
    Checkpoint ck = Checkpoint::open(fixture_dir(name));
    const ModelConfig& c = ck.config();
    CHECK(!ck.names().empty());
    CHECK(ck.config_json().find("hidden_size") != std::string::npos);
    for (const TensorSpec& s : trunk_tensor_specs(c)) {
      CAPTURE(s.name);
      std::string full = c.tensor_prefix + s.name;
      std::string base = full.substr(0, full.size() - 7);  // without ".weight"
      bool is_weight = full.size() > 7 && full.compare(full.size() - 7, 7, ".weight") == 0;
      std::vector<uint64_t> shape;
      std::vector<float> v = is_weight ? ck.read_weight(base, &shape) : ck.read_tensor(full, &shape);
      if (s.padded) {
        CHECK(shape.size() == 1);
        CHECK(shape[0] >= s.min_len);
      } else {
        CHECK(shape == s.shape);
      }
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      CHECK(v.size() == n);
    }
    for (int layer : c.moe_layers()) {
      ExpertNames en = expert_tensor_names(c, layer, c.n_experts - 1);
      std::vector<uint64_t> g, d;
      ck.read_weight(c.tensor_prefix + en.gate, &g);
      ck.read_weight(c.tensor_prefix + en.down, &d);
      CHECK(g == std::vector<uint64_t>{uint64_t(c.moe_intermediate), uint64_t(c.expert_hidden())});
      CHECK(d == std::vector<uint64_t>{uint64_t(c.expert_hidden()), uint64_t(c.moe_intermediate)});
      CHECK(ck.weight_shape(c.tensor_prefix + en.up) == g);
    }
  }
}

TEST_CASE("deepseek-v3-fp8 dequantises to the BF16 fixture's weights within e4m3 precision") {
  Checkpoint bf = Checkpoint::open(fixture_dir("deepseek-v3"));
  Checkpoint f8 = Checkpoint::open(fixture_dir("deepseek-v3-fp8"));
  REQUIRE(f8.dtype("model.layers.0.self_attn.q_a_proj.weight") == "F8_E4M3");
  for (const char* base : {"model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa",
                           "model.layers.2.self_attn.o_proj", "model.layers.1.mlp.experts.3.down_proj",
                           "model.layers.3.mlp.shared_experts.gate_proj"}) {
    CAPTURE(base);
    std::vector<uint64_t> sa, sb;
    std::vector<float> a = bf.read_weight(base, &sa);
    std::vector<float> b = f8.read_weight(base, &sb);
    REQUIRE(sa == sb);
    const float scale = f8.read_tensor(std::string(base) + ".weight_scale_inv")[0];
    double max_rel = 0, sum_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      // e4m3 keeps 3 mantissa bits: rounding error <= 1/16 of the value, or half a subnormal step.
      double tol = std::fabs(a[i]) / 16.0 * 1.01 + scale * std::ldexp(1.0, -10) + std::fabs(a[i]) / 256.0;
      CHECK(std::fabs(a[i] - b[i]) <= tol);
      if (a[i] != 0) max_rel = std::max(max_rel, double(std::fabs(a[i] - b[i]) / std::fabs(a[i])));
      sum_abs += std::fabs(a[i]);
    }
    CHECK(sum_abs > 0);
  }
  // Unquantized tensors are stored identically in both.
  CHECK(bf.read_tensor("lm_head.weight") == f8.read_tensor("lm_head.weight"));
  CHECK(bf.read_tensor("model.layers.1.mlp.gate.weight") == f8.read_tensor("model.layers.1.mlp.gate.weight"));
}

TEST_CASE("kimi-k3 MXFP4 experts decode with the documented rule") {
  Checkpoint ck = Checkpoint::open(fixture_dir("kimi-k3"));
  const std::string p = "language_model.model.layers.";
  REQUIRE(ck.dtype(p + "1.block_sparse_moe.experts.0.w1.weight_packed") == "U8");
  // Expected values computed outside WASTE (Python, straight from MODELS.md A.1).
  struct Want {
    std::string base;
    float first4[4], r5c33, r63c63;
    double sum, sum_abs;
  };
  const Want wants[] = {
      {p + "1.block_sparse_moe.experts.0.w1", {0.1875f, 0.125f, -0.125f, -0.09375f}, 0.03125f, -0.125f, 0.59375, 401.28125},
      {p + "5.block_sparse_moe.experts.31.w2", {-0.03125f, 0.09375f, -0.0625f, 0.03125f}, -0.125f, 0.09375f, -1.6875, 399.125},
  };
  for (const Want& w : wants) {
    CAPTURE(w.base);
    std::vector<uint64_t> shape;
    std::vector<float> v = ck.read_weight(w.base, &shape);
    REQUIRE(shape == std::vector<uint64_t>{64, 64});
    for (int i = 0; i < 4; ++i) CHECK(v[size_t(i)] == w.first4[i]);
    CHECK(v[5 * 64 + 33] == w.r5c33);
    CHECK(v[63 * 64 + 63] == w.r63c63);
    double sum = 0, sum_abs = 0;
    for (float x : v) sum += x, sum_abs += std::fabs(x);
    CHECK(sum == w.sum);
    CHECK(sum_abs == w.sum_abs);
  }
}

TEST_CASE("INT4 pack-quantized weight with weight_shape reads through the checkpoint") {
  TempDir tmp;
  // 2 x 16 weight: packed [2, 2] int32, scale [2, 1] f32 (group 16), weight_shape [2] int32.
  std::vector<uint8_t> data;
  auto put32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) data.push_back(uint8_t(v >> (8 * i))); };
  put32(0x8888880Fu); put32(0x88888888u); put32(0x88888889u); put32(0x18888888u);  // packed
  float s0 = 0.5f, s1 = 2.0f;
  uint32_t b0, b1;
  std::memcpy(&b0, &s0, 4), std::memcpy(&b1, &s1, 4);
  put32(b0); put32(b1);  // scale
  put32(2); put32(16);   // weight_shape
  std::string header = R"({"w.weight_packed":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},)"
                       R"("w.weight_scale":{"dtype":"F32","shape":[2,1],"data_offsets":[16,24]},)"
                       R"("w.weight_shape":{"dtype":"I32","shape":[2],"data_offsets":[24,32]}})";
  Checkpoint ck = Checkpoint::open(make_checkpoint(tmp, header, data));
  std::vector<uint64_t> shape;
  std::vector<float> v = ck.read_weight("w", &shape);
  REQUIRE(shape == std::vector<uint64_t>{2, 16});
  CHECK(v[0] == 3.5f);     // (15 - 8) * 0.5
  CHECK(v[1] == -4.0f);    // (0 - 8) * 0.5
  CHECK(v[16] == 2.0f);    // (9 - 8) * 2
  CHECK(v[31] == -14.0f);  // (1 - 8) * 2
}

TEST_CASE("bad safetensors files give errors naming the file") {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  SUBCASE("truncated data") {
    TempDir tmp;
    std::string err = error_of(make_checkpoint(tmp, good, std::vector<uint8_t>(4)));
    CHECK(err.find("model.safetensors") != std::string::npos);
    CHECK(err.find("'a'") != std::string::npos);
  }
  SUBCASE("header length past the end of the file") {
    TempDir tmp;
    std::string err = error_of(make_checkpoint(tmp, good, std::vector<uint8_t>(8), 1000));
    CHECK(err.find("model.safetensors") != std::string::npos);
    CHECK(err.find("header length") != std::string::npos);
  }
  SUBCASE("huge header length") {
    TempDir tmp;
    std::string err = error_of(make_checkpoint(tmp, good, std::vector<uint8_t>(8), uint64_t(1) << 62));
    CHECK(err.find("model.safetensors") != std::string::npos);
    CHECK(err.find("limit") != std::string::npos);
  }
  SUBCASE("offsets outside the file") {
    TempDir tmp;
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4096,4104]}})";
    std::string err = error_of(make_checkpoint(tmp, h, std::vector<uint8_t>(8)));
    CHECK(err.find("model.safetensors") != std::string::npos);
    CHECK(err.find("outside") != std::string::npos);
  }
  SUBCASE("size disagrees with shape") {
    TempDir tmp;
    std::string h = R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})";
    std::string err = error_of(make_checkpoint(tmp, h, std::vector<uint8_t>(8)));
    CHECK(err.find("'a'") != std::string::npos);
    CHECK(err.find("need 6") != std::string::npos);
  }
  SUBCASE("file shorter than the length prefix") {
    TempDir tmp;
    fs::copy_file(fixture_dir("deepseek-v3") + "/config.json", tmp / "config.json");
    std::ofstream(tmp / "model.safetensors") << "abc";
    std::string err = error_of(tmp.path());
    CHECK(err.find("model.safetensors") != std::string::npos);
  }
  SUBCASE("FP8 weight without its scale") {
    TempDir tmp;
    std::string h = R"({"m.weight":{"dtype":"F8_E4M3","shape":[2,4],"data_offsets":[0,8]}})";
    Checkpoint ck = Checkpoint::open(make_checkpoint(tmp, h, std::vector<uint8_t>(8, 0x38)));
    CHECK_THROWS_WITH_AS(ck.read_weight("m"), doctest::Contains("weight_scale_inv"), Error);
    CHECK_THROWS_WITH_AS(ck.read_weight("missing"), doctest::Contains("'missing.weight'"), Error);
  }
}
