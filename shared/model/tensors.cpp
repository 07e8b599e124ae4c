#include "shared/model/tensors.h"

#include "shared/model/vision_config.h"

namespace waste {

uint64_t TensorSpec::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

namespace {

using U = uint64_t;

struct Builder {
  std::vector<TensorSpec>& out;
  void add(std::string name, std::vector<U> shape, TensorRole role) { out.push_back({std::move(name), std::move(shape), role}); }
  void mat(const std::string& name, U rows, U cols) { add(name + ".weight", {rows, cols}, TensorRole::Matrix); }
  void vec(const std::string& name, U n) { add(name, {n}, TensorRole::Vector); }
};

void add_mla(Builder& b, const ModelConfig& c, const std::string& p) {
  const U H = U(c.n_heads), D = U(c.hidden), qk = U(c.qk_nope + c.qk_rope);
  if (c.q_lora_rank > 0) {
    b.mat(p + "q_a_proj", U(c.q_lora_rank), D);
    b.vec(p + "q_a_layernorm.weight", U(c.q_lora_rank));
    b.mat(p + "q_b_proj", H * qk, U(c.q_lora_rank));
  } else {
    b.mat(p + "q_proj", H * qk, D);
  }
  b.mat(p + "kv_a_proj_with_mqa", U(c.kv_lora_rank + c.qk_rope), D);
  b.vec(p + "kv_a_layernorm.weight", U(c.kv_lora_rank));
  b.mat(p + "kv_b_proj", H * U(c.qk_nope + c.v_head), U(c.kv_lora_rank));
  if (c.mla_output_gate) b.mat(p + "g_proj", H * U(c.v_head), D);
  b.mat(p + "o_proj", D, H * U(c.v_head));
}

void add_kda(Builder& b, const ModelConfig& c, const std::string& p) {
  const U H = U(c.kda_heads), K = U(c.kda_head_dim), P = H * K, D = U(c.hidden);
  for (const char* x : {"q", "k", "v"}) b.mat(p + x + "_proj", P, D);
  for (const char* x : {"q", "k", "v"}) b.add(p + x + "_conv1d.weight", {P, 1, U(c.conv_kernel)}, TensorRole::Vector);
  b.mat(p + "f_a_proj", K, D);
  b.mat(p + "f_b_proj", P, K);
  if (c.arch == Arch::KimiK3) {
    // Released as [128] for 96 heads: padded to a multiple of 32 entries.
    U padded = (H + 31) / 32 * 32;
    b.out.push_back({p + "A_log", {padded}, TensorRole::Vector, true, H});
  } else {
    b.add(p + "A_log", {1, 1, H, 1}, TensorRole::Vector);
  }
  b.vec(p + "dt_bias", P);
  b.mat(p + "b_proj", H, D);
  if (c.kda_full_rank_gate) {
    b.mat(p + "g_proj", P, D);
  } else {
    b.mat(p + "g_a_proj", K, D);
    b.mat(p + "g_b_proj", P, K);
  }
  b.vec(p + "o_norm.weight", K);
  b.mat(p + "o_proj", D, P);
}

void add_mlp(Builder& b, const std::string& p, U inner, U D) {
  b.mat(p + "gate_proj", inner, D);
  b.mat(p + "up_proj", inner, D);
  b.mat(p + "down_proj", D, inner);
}

}  // namespace

std::vector<TensorSpec> trunk_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  Builder b{out};
  const U D = U(c.hidden);
  const bool kimi = c.arch != Arch::DeepseekV3;
  b.add("model.embed_tokens.weight", {U(c.vocab), D}, TensorRole::Embedding);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.vec(p + "input_layernorm.weight", D);
    b.vec(p + "post_attention_layernorm.weight", D);
    if (c.attn_res_block > 0) {
      b.vec(p + "self_attention_res_norm.weight", D);
      b.add(p + "self_attention_res_proj.weight", {1, D}, TensorRole::Vector);
      b.vec(p + "mlp_res_norm.weight", D);
      b.add(p + "mlp_res_proj.weight", {1, D}, TensorRole::Vector);
    }
    if (c.is_mla_layer(l))
      add_mla(b, c, p + "self_attn.");
    else
      add_kda(b, c, p + "self_attn.");
    if (!c.is_moe_layer(l)) {
      add_mlp(b, p + "mlp.", U(c.dense_intermediate), D);
      continue;
    }
    const std::string m = p + (kimi ? "block_sparse_moe." : "mlp.");
    b.add(m + "gate.weight", {U(c.n_experts), D}, TensorRole::Router);
    b.vec(m + "gate.e_score_correction_bias", U(c.n_experts));
    if (c.latent_dim > 0) {
      b.mat(m + "routed_expert_down_proj", U(c.latent_dim), D);
      if (c.latent_norm) b.vec(m + "routed_expert_norm.weight", U(c.latent_dim));
      b.mat(m + "routed_expert_up_proj", D, U(c.latent_dim));
    }
    if (c.n_shared > 0) add_mlp(b, m + "shared_experts.", U(c.moe_intermediate) * U(c.n_shared), D);
  }
  b.vec("model.norm.weight", D);
  if (c.attn_res_block > 0) {
    b.vec("model.output_attn_res_norm.weight", D);
    b.add("model.output_attn_res_proj.weight", {1, D}, TensorRole::Vector);
  }
  b.add("lm_head.weight", {U(c.vocab), D}, TensorRole::Head);
  return out;
}

std::vector<TensorSpec> vision_tensor_specs(const VisionConfig& v) {
  std::vector<TensorSpec> out;
  Builder b{out};
  const U D = U(v.hidden), Q = U(v.qkv_hidden), I = U(v.intermediate), P = U(v.patch_size);
  const U M = U(v.merged_width()), T = U(v.text_hidden);
  b.add("vision_tower.patch_embed.proj.weight", {D, 3, P, P}, TensorRole::Matrix);
  b.add("vision_tower.patch_embed.pos_emb.weight", {U(v.pos_emb_height), U(v.pos_emb_width), D}, TensorRole::Vector);
  for (int l = 0; l < v.n_layers; ++l) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(l) + ".";
    b.vec(p + "norm0.weight", D);
    b.mat(p + "wqkv", 3 * Q, D);  // rows [q | k | v][head][head_dim]
    b.mat(p + "wo", D, Q);
    b.vec(p + "norm1.weight", D);
    b.mat(p + "mlp.fc0", I, D);
    b.mat(p + "mlp.fc1", D, I);
  }
  b.vec("vision_tower.encoder.final_layernorm.weight", D);
  b.mat("mm_projector.proj.0", M, M);
  b.mat("mm_projector.proj.2", T, M);
  b.vec("mm_projector.post_norm.weight", T);
  return out;
}

bool is_vision_tensor(std::string_view name) {
  return name.starts_with("vision_tower.") || name.starts_with("mm_projector.");
}

ExpertNames expert_tensor_names(const ModelConfig& c, int layer, int expert) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const std::string e = std::to_string(expert);
  if (c.arch == Arch::DeepseekV3) {
    const std::string m = p + "mlp.experts." + e + ".";
    return {m + "gate_proj", m + "up_proj", m + "down_proj"};
  }
  const std::string m = p + "block_sparse_moe.experts." + e + ".";
  return {m + "w1", m + "w3", m + "w2"};
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace waste
