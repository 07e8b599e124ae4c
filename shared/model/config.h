// The model hyper-parameters every part of WASTE needs, normalised from a release's
// config.json (flat, or nested under `text_config` as in Kimi K3). One parser, so the
// converter, synth, planner and compute can never disagree about a shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace waste {

enum class Arch { KimiLinear, KimiK3, DeepseekV3 };
enum class Activation { SiLU, SiTU };

const char* arch_name(Arch arch);  // "kimi_linear", "kimi_k3", "deepseek_v3"
Arch arch_from_name(const std::string& name);

// The most decoder layers a config may declare (K3 has 93). Peers size their bounds from it too
// (iod's bound on a touch's entries, iod/request_check.h).
constexpr int kMaxDecoderLayers = 1024;

struct ModelConfig {
  Arch arch = Arch::KimiLinear;
  std::string tensor_prefix;  // "language_model." when the text model is nested (K3), else ""

  int64_t vocab = 0;
  int hidden = 0;
  int n_layers = 0;
  int dense_intermediate = 0;  // layer-0 (and any other dense layer) MLP width
  float rms_eps = 1e-6f;
  int bos = -1, eos = -1;
  int64_t max_positions = 0;

  // MLA (all layers of DeepSeek-V3/K2; the full-attention layers of Kimi-Linear/K3).
  int n_heads = 0;
  int q_lora_rank = 0;  // 0: q_proj is a single matrix (Kimi-Linear)
  int kv_lora_rank = 0;
  int qk_nope = 0, qk_rope = 0, v_head = 0;
  bool mla_rope = true;          // false for NoPE (Kimi-Linear, K3)
  bool mla_output_gate = false;  // K3: attn * sigmoid(g_proj x) before o_proj

  // YaRN RoPE (DeepSeek-V3/K2); yarn=false means plain RoPE with rope_theta.
  float rope_theta = 10000.0f;
  bool yarn = false;
  float yarn_factor = 1.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  float yarn_mscale = 1.0f, yarn_mscale_all_dim = 0.0f;
  int64_t yarn_original_max_positions = 4096;

  // KDA (Kimi-Linear, K3). is_kda[L] for 0-based layer L.
  std::vector<bool> is_kda;
  int kda_heads = 0, kda_head_dim = 0, conv_kernel = 4;
  bool kda_full_rank_gate = false;  // K3: g_proj instead of g_a/g_b
  bool kda_lower_bound = false;     // K3: a = lb * sigmoid(exp(A_log) * (f + dt_bias))
  float kda_gate_lower_bound = -5.0f;

  // MoE.
  int n_experts = 0, top_k = 0, n_shared = 0;
  int moe_intermediate = 0;
  int first_dense = 0;    // layers [0, first_dense) are dense
  int moe_layer_freq = 1;
  int n_group = 1, topk_group = 1;
  float routed_scaling = 1.0f;
  bool renormalize = true;
  int latent_dim = 0;        // K3 latent MoE: experts work in this width; 0 = no latent MoE
  bool latent_norm = false;

  Activation activation = Activation::SiLU;
  float situ_beta = 4.0f, situ_linear_beta = 25.0f;
  int attn_res_block = 0;  // K3 Block Attention Residuals; 0 = off

  bool is_moe_layer(int layer) const {
    return n_experts > 0 && layer >= first_dense && layer % moe_layer_freq == 0;
  }
  bool is_mla_layer(int layer) const { return !is_kda.at(size_t(layer)); }
  // Width of the vectors routed experts read and write.
  int expert_hidden() const { return latent_dim > 0 ? latent_dim : hidden; }
  int n_moe_layers() const;
  std::vector<int> moe_layers() const;
  // Parameters of one routed expert (gate + up + down).
  int64_t expert_params() const { return 3LL * moe_intermediate * expert_hidden(); }

  // Parses config.json text. `source` names the file in errors. Throws Error on a missing or
  // out-of-range field, naming it.
  static ModelConfig from_json(const std::string& json_text, const std::string& source);
  static ModelConfig from_file(const std::string& path);
};

}  // namespace waste
