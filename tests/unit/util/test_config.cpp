#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "shared/model/config.h"
#include "shared/util/error.h"

using namespace waste;

static std::string fixture(const char* name) {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/fixtures/" + name + "/config.json";
}

TEST_CASE("Kimi-Linear fixture config") {
  ModelConfig c = ModelConfig::from_file(fixture("kimi-linear"));
  CHECK(c.arch == Arch::KimiLinear);
  CHECK_EQ(c.hidden, 128);
  CHECK_EQ(c.n_layers, 4);
  CHECK(c.is_kda[0]);
  CHECK(c.is_kda[1]);
  CHECK(c.is_mla_layer(2));  // 1-based 3
  CHECK(c.is_kda[3]);
  CHECK_EQ(c.n_moe_layers(), 3);
  CHECK_FALSE(c.is_moe_layer(0));
  CHECK_EQ(c.expert_hidden(), 128);
  CHECK_EQ(c.q_lora_rank, 0);
  CHECK_FALSE(c.mla_rope);
  CHECK(c.tensor_prefix.empty());
  CHECK_EQ(c.routed_scaling, doctest::Approx(2.446));
}

TEST_CASE("Kimi K3 fixture config is read from text_config") {
  ModelConfig c = ModelConfig::from_file(fixture("kimi-k3"));
  CHECK(c.arch == Arch::KimiK3);
  CHECK_EQ(c.tensor_prefix, "language_model.");
  CHECK_EQ(c.latent_dim, 64);
  CHECK_EQ(c.expert_hidden(), 64);
  CHECK(c.kda_full_rank_gate);
  CHECK(c.kda_lower_bound);
  CHECK_EQ(c.kda_gate_lower_bound, -5.0f);
  CHECK(c.mla_output_gate);
  CHECK(c.activation == Activation::SiTU);
  CHECK_EQ(c.attn_res_block, 2);
  CHECK_EQ(c.n_shared, 2);
  CHECK(c.is_mla_layer(3));
  CHECK(c.is_mla_layer(5));
}

TEST_CASE("DeepSeek-V3 fixture config") {
  ModelConfig c = ModelConfig::from_file(fixture("deepseek-v3"));
  CHECK(c.arch == Arch::DeepseekV3);
  CHECK(c.yarn);
  CHECK_EQ(c.yarn_factor, 40.0f);
  CHECK_EQ(c.n_group, 4);
  CHECK_EQ(c.topk_group, 2);
  CHECK(c.mla_rope);
  CHECK_EQ(c.n_moe_layers(), 3);
}

TEST_CASE("config errors name the field") {
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("{\"model_type\":\"kimi_linear\"}", "x.json"),
                       doctest::Contains("vocab_size"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("not json", "x.json"), doctest::Contains("x.json"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("{\"model_type\":\"llama\"}", "x.json"), doctest::Contains("llama"),
                       Error);
}

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "shared/model/tensors.h"

// The tensor list derived from each fixture's config must be exactly the release's trunk
// tensors (everything in the checkpoint except routed experts and FP8 scale tensors).
TEST_CASE("trunk tensor specs match every fixture's checkpoint") {
  for (const char* name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    std::string dir = std::string(std::getenv("WASTE_SHARED_DIR")) + "/fixtures/" + name;
    ModelConfig c = ModelConfig::from_file(dir + "/config.json");
    std::ifstream f(dir + "/model.safetensors", std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), std::streamsize(n));
    auto j = nlohmann::json::parse(header);
    std::map<std::string, std::vector<uint64_t>> want;
    for (auto& [k, v] : j.items()) {
      if (k == "__metadata__" || k.find(".experts.") != std::string::npos) continue;
      want[k.substr(c.tensor_prefix.size())] = v["shape"].get<std::vector<uint64_t>>();
    }
    auto specs = trunk_tensor_specs(c);
    CHECK_EQ(specs.size(), want.size());
    for (const auto& s : specs) {
      CAPTURE(s.name);
      REQUIRE(want.count(s.name));
      CHECK_EQ(want[s.name], s.shape);
    }
    auto names = expert_tensor_names(c, 1, 3);
    CHECK(j.contains(c.tensor_prefix + names.down + (c.arch == Arch::KimiK3 ? ".weight_packed" : ".weight")));
  }
}
