#include "shared/model/config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "shared/model/config_json.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

using nlohmann::json;

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::KimiLinear: return "kimi_linear";
    case Arch::KimiK3: return "kimi_k3";
    case Arch::DeepseekV3: return "deepseek_v3";
  }
  return "?";
}

Arch arch_from_name(const std::string& name) {
  if (name == "kimi_linear") return Arch::KimiLinear;
  if (name == "kimi_k3") return Arch::KimiK3;
  if (name == "deepseek_v3" || name == "kimi_k2") return Arch::DeepseekV3;
  throw Error("unknown architecture '" + name + "' (expected kimi_linear, kimi_k3 or deepseek_v3)");
}

int ModelConfig::n_moe_layers() const { return int(moe_layers().size()); }

std::vector<int> ModelConfig::moe_layers() const {
  std::vector<int> out;
  for (int l = 0; l < n_layers; ++l)
    if (is_moe_layer(l)) out.push_back(l);
  return out;
}

namespace {

struct ConfigFields {
  const json& j;
  std::string where;

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  template <typename T>
  T get(const char* key) const {
    if (!has(key)) throw Error(where + ": missing field '" + key + "'");
    try {
      return j.at(key).get<T>();
    } catch (const json::exception& e) {
      throw Error(where + ": field '" + key + "' has the wrong type: " + e.what());
    }
  }

  template <typename T>
  T get_or(const char* key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }

  // Integer fields are bounded so that a corrupt config cannot ask for absurd allocations, and
  // must be integers (the JSON library would truncate a hidden_size of 128.5 to 128).
  int dim(const char* key, int64_t lo, int64_t hi) const {
    if (has(key) && !j.at(key).is_number_integer())
      throw Error(where + ": field '" + key + "' must be an integer, not " + j.at(key).dump());
    int64_t v = get<int64_t>(key);
    if (v < lo || v > hi)
      throw Error(where + ": field '" + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return int(v);
  }
  int dim_or(const char* key, int fallback, int64_t lo, int64_t hi) const {
    return has(key) ? dim(key, lo, hi) : fallback;
  }

  // A real-valued field within (lo, hi] (lo_open) or [lo, hi]: a negative eps or a YaRN factor of
  // 0 makes every logit NaN, so the range is the field's meaning, checked by name.
  float real(const char* key, float fallback, double lo, double hi, bool lo_open) const {
    const float v = has(key) ? get<float>(key) : fallback;
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
    if (!ok)
      throw Error(where + ": field '" + key + "' = " + (has(key) ? j.at(key).dump() : std::to_string(v)) + " is outside " +
                  (lo_open ? "(" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
};

constexpr int64_t kMaxDim = 1 << 20;

std::vector<bool> layer_set(const ConfigFields& r, const char* key, int n_layers) {
  if (!r.has(key)) throw Error(r.where + ": missing field '" + key + "'");
  if (!r.j.at(key).is_array()) throw Error(r.where + ": field '" + key + "' must be a list of layer numbers");
  std::vector<bool> set(size_t(n_layers), false);
  for (const auto& v : r.j.at(key)) {
    if (!v.is_number_integer()) throw Error(r.where + ": '" + key + "' holds a non-integer");
    int64_t one_based = v.get<int64_t>();
    if (one_based < 1 || one_based > n_layers)
      throw Error(r.where + ": '" + key + "' names layer " + std::to_string(one_based) + " (1-based) of " +
                  std::to_string(n_layers));
    if (set[size_t(one_based - 1)])
      throw Error(r.where + ": '" + key + "' names layer " + std::to_string(one_based) + " twice");
    set[size_t(one_based - 1)] = true;
  }
  return set;
}

}  // namespace

json parse_config_object(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(source + ": expected a JSON object");
  return root;
}

ModelConfig ModelConfig::from_json(const std::string& json_text, const std::string& source) {
  const json root = parse_config_object(json_text, source);

  ModelConfig c;
  const json* text = &root;
  std::string where = source;
  // Through a ConfigFields like every other field: json::value() throws the library's type_error (not
  // an Error naming the field) for a model_type that is not a string.
  const std::string model_type = ConfigFields{root, source}.get_or<std::string>("model_type", "");
  if (root.contains("text_config") && root["text_config"].is_object()) {
    text = &root["text_config"];
    where = source + " (text_config)";
    c.tensor_prefix = "language_model.";
  }
  ConfigFields r{*text, where};
  if (model_type == "kimi_k3") {
    c.arch = Arch::KimiK3;
  } else if (model_type == "kimi_linear" || r.get_or<std::string>("model_type", "") == "kimi_linear") {
    c.arch = Arch::KimiLinear;
  } else if (model_type == "deepseek_v3" || model_type == "kimi_k2") {
    c.arch = Arch::DeepseekV3;
  } else {
    throw Error(source + ": unsupported model_type '" + model_type +
                "' (WASTE runs kimi_linear, kimi_k3, kimi_k2 and deepseek_v3)");
  }

  c.vocab = r.dim("vocab_size", 2, 1 << 24);
  c.hidden = r.dim("hidden_size", 8, kMaxDim);
  c.n_layers = r.dim("num_hidden_layers", 1, kMaxDecoderLayers);
  c.dense_intermediate = r.dim("intermediate_size", 1, kMaxDim);
  c.rms_eps = r.real("rms_norm_eps", 1e-6f, 0.0, 1.0, true);
  c.bos = r.dim_or("bos_token_id", -1, -1, c.vocab - 1);
  if (r.has("eos_token_id") && r.j.at("eos_token_id").is_number_integer())
    c.eos = r.dim("eos_token_id", -1, c.vocab - 1);
  c.max_positions = r.get_or<int64_t>("max_position_embeddings", 4096);

  c.n_heads = r.dim("num_attention_heads", 1, 4096);
  c.q_lora_rank = r.dim_or("q_lora_rank", 0, 0, kMaxDim);
  c.kv_lora_rank = r.dim("kv_lora_rank", 1, kMaxDim);
  c.qk_nope = r.dim("qk_nope_head_dim", 1, 4096);
  c.qk_rope = r.dim("qk_rope_head_dim", 0, 4096);
  c.v_head = r.dim("v_head_dim", 1, 4096);
  c.rope_theta = r.real("rope_theta", 10000.0f, 1.0, 1e12, false);
  if (c.qk_rope % 2) throw Error(where + ": qk_rope_head_dim must be even");

  if (c.arch == Arch::DeepseekV3) {
    c.is_kda.assign(size_t(c.n_layers), false);
    c.mla_rope = true;
    c.n_experts = r.dim("n_routed_experts", 1, 1 << 16);
    c.top_k = r.dim("num_experts_per_tok", 1, 1024);
    c.n_shared = r.dim_or("n_shared_experts", 0, 0, 64);
    c.n_group = r.dim_or("n_group", 1, 1, 1024);
    c.topk_group = r.dim_or("topk_group", 1, 1, 1024);
    c.renormalize = r.get_or<bool>("norm_topk_prob", true);
    if (r.has("rope_scaling")) {
      ConfigFields rs{r.j.at("rope_scaling"), where + " rope_scaling"};
      std::string type = rs.get_or<std::string>("type", rs.get_or<std::string>("rope_type", ""));
      if (type == "yarn") {
        c.yarn = true;
        if (!rs.has("factor")) throw Error(rs.where + ": missing field 'factor'");
        c.yarn_factor = rs.real("factor", 1.0f, 1.0, 1e6, false);  // a factor < 1 would shrink the context
        c.yarn_beta_fast = rs.real("beta_fast", 32.0f, 0.0, 1e6, true);
        c.yarn_beta_slow = rs.real("beta_slow", 1.0f, 0.0, 1e6, true);
        c.yarn_mscale = rs.real("mscale", 1.0f, 0.0, 1e3, false);
        c.yarn_mscale_all_dim = rs.real("mscale_all_dim", 0.0f, 0.0, 1e3, false);
        c.yarn_original_max_positions = rs.get_or<int64_t>("original_max_position_embeddings", 4096);
      } else if (!type.empty()) {
        throw Error(where + ": rope_scaling type '" + type + "' is not supported (only yarn)");
      }
    }
    std::string scoring = r.get_or<std::string>("scoring_func", "sigmoid");
    if (scoring != "sigmoid") throw Error(where + ": scoring_func '" + scoring + "' is not supported (sigmoid only)");
  } else {
    if (!r.has("linear_attn_config")) throw Error(where + ": missing field 'linear_attn_config'");
    ConfigFields la{r.j.at("linear_attn_config"), where + " linear_attn_config"};
    c.is_kda = layer_set(la, "kda_layers", c.n_layers);
    std::vector<bool> full = layer_set(la, "full_attn_layers", c.n_layers);
    for (int l = 0; l < c.n_layers; ++l)
      if (c.is_kda[size_t(l)] == full[size_t(l)])
        throw Error(where + ": layer " + std::to_string(l + 1) +
                    " (1-based) must be in exactly one of kda_layers and full_attn_layers");
    c.kda_heads = la.dim("num_heads", 1, 4096);
    c.kda_head_dim = la.dim("head_dim", 1, 4096);
    c.conv_kernel = la.dim_or("short_conv_kernel_size", 4, 1, 64);
    c.kda_full_rank_gate = la.get_or<bool>("use_full_rank_gate", false);
    if (la.has("gate_lower_bound")) {
      c.kda_lower_bound = true;
      c.kda_gate_lower_bound = la.get<float>("gate_lower_bound");
    }
    c.mla_rope = !r.get_or<bool>("mla_use_nope", false);
    if (c.mla_rope) throw Error(where + ": mla_use_nope=false is not supported for Kimi-Linear/K3 (they are NoPE)");
    c.mla_output_gate = r.get_or<bool>("mla_use_output_gate", false);
    c.n_experts = r.dim("num_experts", 1, 1 << 16);
    c.top_k = r.dim("num_experts_per_token", 1, 1024);
    c.n_shared = r.dim_or("num_shared_experts", 0, 0, 64);
    c.n_group = r.dim_or("num_expert_group", 1, 1, 1024);
    c.topk_group = r.dim_or("topk_group", 1, 1, 1024);
    c.renormalize = r.get_or<bool>("moe_renormalize", true);
    std::string act = r.get_or<std::string>("moe_router_activation_func", "sigmoid");
    if (act != "sigmoid") throw Error(where + ": moe_router_activation_func '" + act + "' is not supported");
    if (r.has("routed_expert_hidden_size")) {
      int latent = r.dim("routed_expert_hidden_size", 1, kMaxDim);
      if (latent != c.hidden) {
        c.latent_dim = latent;
        c.latent_norm = r.get_or<bool>("latent_moe_use_norm", true);
      }
    }
    c.attn_res_block = r.dim_or("attn_res_block_size", 0, 0, 1024);
  }
  c.moe_intermediate = r.dim("moe_intermediate_size", 1, kMaxDim);
  c.first_dense = r.dim_or("first_k_dense_replace", 0, 0, c.n_layers);
  c.moe_layer_freq = r.dim_or("moe_layer_freq", 1, 1, c.n_layers);
  c.routed_scaling = r.real("routed_scaling_factor", 1.0f, 0.0, 1e6, true);
  if (c.top_k > c.n_experts) throw Error(where + ": num_experts_per_tok exceeds the expert count");
  if (c.n_experts % c.n_group != 0) throw Error(where + ": expert count is not a multiple of n_group");
  if (c.topk_group > c.n_group) throw Error(where + ": topk_group exceeds n_group");

  std::string act = r.get_or<std::string>("hidden_act", "silu");
  if (act == "silu") {
    c.activation = Activation::SiLU;
  } else if (act == "situ") {
    c.activation = Activation::SiTU;
    c.situ_beta = r.get_or<float>("activation_situ_beta", 4.0f);
    c.situ_linear_beta = r.get_or<float>("activation_situ_linear_beta", 25.0f);
    // SiTU divides by both betas (b*tanh(g/b)): zero, negative or NaN would poison every expert.
    if (!(c.situ_beta > 0) || !(c.situ_linear_beta > 0))
      throw Error(where + ": activation_situ_beta and activation_situ_linear_beta must be positive");
  } else {
    throw Error(where + ": hidden_act '" + act + "' is not supported (silu, situ)");
  }
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  return from_json(read_file_text(path, 16 << 20), path);
}

}  // namespace waste
