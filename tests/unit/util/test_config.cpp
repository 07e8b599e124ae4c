#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/model/config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

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

TEST_CASE("a missing or malformed layer list is a waste::Error naming the field") {
  const std::string text = waste::read_file_text(fixture("kimi-linear"), 1 << 20);
  nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j.contains("linear_attn_config"));
  nlohmann::json missing = j;
  missing["linear_attn_config"].erase("kda_layers");
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(missing.dump(), "x.json"), doctest::Contains("kda_layers"), Error);
  nlohmann::json scalar = j;
  scalar["linear_attn_config"]["full_attn_layers"] = 4;
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(scalar.dump(), "x.json"), doctest::Contains("full_attn_layers"), Error);
  nlohmann::json situ = j;
  situ["hidden_act"] = "situ";
  situ["activation_situ_beta"] = 0.0;
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(situ.dump(), "x.json"), doctest::Contains("activation_situ_beta"), Error);
  situ["activation_situ_beta"] = 4.0;
  CHECK_NOTHROW(ModelConfig::from_json(situ.dump(), "x.json"));
}

TEST_CASE("configs that would make every logit NaN are refused naming the field") {
  const nlohmann::json kl = nlohmann::json::parse(waste::read_file_text(fixture("kimi-linear"), 1 << 20));
  const nlohmann::json ds = nlohmann::json::parse(waste::read_file_text(fixture("deepseek-v3"), 1 << 20));
  auto refused = [](nlohmann::json j, const std::string& path, const nlohmann::json& value, const char* field) {
    CAPTURE(path);
    j[nlohmann::json::json_pointer(path)] = value;
    CHECK_THROWS_WITH_AS(ModelConfig::from_json(j.dump(), "x.json"), doctest::Contains(field), Error);
  };
  refused(kl, "/rms_norm_eps", -1.0, "'rms_norm_eps' = -1.0 is outside (0");
  refused(kl, "/rms_norm_eps", 0.0, "rms_norm_eps");
  refused(kl, "/hidden_size", 128.5, "'hidden_size' must be an integer, not 128.5");
  refused(kl, "/num_hidden_layers", 4.0, "must be an integer");
  refused(kl, "/num_hidden_layers", waste::kMaxDecoderLayers + 1, "num_hidden_layers");  // iod's bounds assume it
  refused(ds, "/routed_scaling_factor", 0.0, "routed_scaling_factor");
  refused(ds, "/rope_theta", -5.0, "rope_theta");
  nlohmann::json yarn = ds;
  yarn["rope_scaling"] = {{"type", "yarn"}, {"factor", 0.0}};
  refused(yarn, "/rope_scaling/factor", 0.0, "'factor' = 0.0 is outside [1");
  yarn["rope_scaling"]["factor"] = 4.0;
  CHECK_NOTHROW(ModelConfig::from_json(yarn.dump(), "x.json"));
  refused(yarn, "/rope_scaling/beta_fast", -1.0, "beta_fast");
  // A layer named twice in the attention lists.
  nlohmann::json dup = kl;
  auto& kda = dup["linear_attn_config"]["kda_layers"];
  REQUIRE(kda.size() >= 1);
  kda.push_back(kda[0]);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(dup.dump(), "x.json"), doctest::Contains("twice"), Error);
  CHECK_NOTHROW(ModelConfig::from_json(kl.dump(), "x.json"));
  CHECK_NOTHROW(ModelConfig::from_json(ds.dump(), "x.json"));
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

#include "shared/model/presets.h"

TEST_CASE("presets parse and keep the released shapes") {
  for (const auto& name : preset_names()) {
    CAPTURE(name);
    ModelConfig c = ModelConfig::from_json(preset_config_json(name), name);
    CHECK(c.n_moe_layers() == c.n_layers - 1);
  }
  ModelConfig kl = ModelConfig::from_json(preset_config_json("kimi-linear-48b"), "kl");
  CHECK_EQ(kl.n_layers, 27);
  CHECK_EQ(kl.expert_params(), 7077888);
  int mla = 0;
  for (int l = 0; l < kl.n_layers; ++l) mla += kl.is_mla_layer(l);
  CHECK_EQ(mla, 7);
  CHECK(kl.is_mla_layer(26));
  ModelConfig k3 = ModelConfig::from_json(preset_config_json("kimi-k3"), "k3");
  CHECK_EQ(k3.expert_params(), 33030144);
  CHECK_EQ(k3.n_moe_layers(), 92);
  ModelConfig k2 = ModelConfig::from_json(preset_config_json("kimi-k2"), "k2");
  CHECK_EQ(k2.expert_params(), 44040192);
  // Trunk parameter counts from MODELS.md section 7.
  auto trunk_params = [](const ModelConfig& c) {
    uint64_t n = 0;
    for (const auto& t : trunk_tensor_specs(c)) n += t.elements();
    return n;
  };
  CHECK_EQ(trunk_params(kl), 2012259200ull);
  CHECK_EQ(trunk_params(k2), 11722208768ull);
}

TEST_CASE("preset overrides") {
  PresetOverrides o;
  o.layers = 8;
  o.experts = 64;
  o.hidden = 512;
  o.moe_intermediate = 256;
  o.vocab = 8192;
  ModelConfig c = ModelConfig::from_json(preset_config_json("kimi-linear-48b", o), "x");
  CHECK_EQ(c.n_layers, 8);
  CHECK_EQ(c.n_moe_layers(), 7);
  CHECK_EQ(c.n_experts, 64);
  CHECK_EQ(c.hidden, 512);
  CHECK_EQ(c.vocab, 8192);
  CHECK_EQ(c.eos, 8192 - 163840 + 163586);
  CHECK_THROWS_AS(preset_config_json("nope"), Error);
}

TEST_CASE("preset overrides: a value given out of range is an error naming the flag, not the default") {
  // --layers 0 and --experts -1 used to be taken as "not given" and wrote the preset's shape.
  auto error_of = [](const PresetOverrides& o) {
    try {
      preset_config_json("tiny-k3", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PresetOverrides o;
  o.layers = 0;
  CHECK(error_of(o) == "--layers must be at least 1, not 0");
  o = {};
  o.layers = -3;
  CHECK(error_of(o) == "--layers must be at least 1, not -3");
  o = {};
  o.layers = kMaxDecoderLayers + 1;
  CHECK(error_of(o) == "--layers must be at most " + std::to_string(kMaxDecoderLayers) + ", not " +
                           std::to_string(kMaxDecoderLayers + 1));
  o = {};
  o.experts = -1;
  CHECK(error_of(o) == "--experts must be at least 1, not -1");
  o = {};
  o.experts = 0;
  CHECK(error_of(o) == "--experts must be at least 1, not 0");
  o = {};
  o.hidden = 0;
  CHECK(error_of(o) == "--hidden must be at least 1, not 0");
  o = {};
  o.moe_intermediate = -7;
  CHECK(error_of(o) == "--moe-intermediate must be at least 1, not -7");
  o = {};
  o.vocab = 0;
  CHECK(error_of(o) == "--vocab must be at least 1, not 0");

  // Not given keeps the preset's values; the smallest values given are taken as given.
  const ModelConfig base = ModelConfig::from_json(preset_config_json("tiny-k3", {}), "base");
  CHECK(base.n_layers > 1);
  CHECK(base.n_experts > 1);
  o = {};
  o.layers = 1;
  o.experts = 1;
  const ModelConfig one = ModelConfig::from_json(preset_config_json("tiny-k3", o), "one");
  CHECK_EQ(one.n_layers, 1);
  CHECK_EQ(one.n_experts, 1);
  CHECK_EQ(one.hidden, base.hidden);
  CHECK_EQ(one.vocab, base.vocab);
}
