#include "shared/model/presets.h"

#include <nlohmann/json.hpp>

#include "shared/model/config.h"
#include "shared/util/error.h"

namespace waste {

using nlohmann::json;

namespace {

// Kimi layer lists are 1-based; `is_full(l)` says which layers are MLA.
template <typename IsFull>
void set_kimi_layers(json& text, int n_layers, IsFull is_full) {
  json kda = json::array(), full = json::array();
  for (int l = 1; l <= n_layers; ++l) (is_full(l) ? full : kda).push_back(l);
  text["num_hidden_layers"] = n_layers;
  text["linear_attn_config"]["kda_layers"] = kda;
  text["linear_attn_config"]["full_attn_layers"] = full;
}

json kimi_linear(int layers) {
  json c = {
      {"architectures", {"KimiLinearForCausalLM"}}, {"model_type", "kimi_linear"},
      {"vocab_size", 163840}, {"hidden_size", 2304}, {"intermediate_size", 9216},
      {"num_attention_heads", 32}, {"num_key_value_heads", 32}, {"head_dim", 72},
      {"q_lora_rank", nullptr}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
      {"v_head_dim", 128}, {"mla_use_nope", true}, {"rope_scaling", nullptr}, {"rope_theta", 10000.0},
      {"linear_attn_config", {{"head_dim", 128}, {"num_heads", 32}, {"short_conv_kernel_size", 4}}},
      {"num_experts", 256}, {"num_experts_per_token", 8}, {"num_shared_experts", 1},
      {"moe_intermediate_size", 1024}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
      {"moe_renormalize", true}, {"moe_router_activation_func", "sigmoid"}, {"num_expert_group", 1},
      {"topk_group", 1}, {"use_grouped_topk", true}, {"routed_scaling_factor", 2.446}, {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-05}, {"tie_word_embeddings", false}, {"num_nextn_predict_layers", 0},
      {"bos_token_id", 163584}, {"eos_token_id", 163586}, {"pad_token_id", 163839},
      {"model_max_length", 1048576}, {"torch_dtype", "bfloat16"}};
  // Released lists: MLA at 4, 8, ..., 24 and 27 (1-based).
  set_kimi_layers(c, layers, [layers](int l) { return l % 4 == 0 || (layers == 27 && l == 27); });
  return c;
}

json kimi_k3(int layers) {
  json text = {
      {"architectures", {"KimiLinearForCausalLM"}}, {"model_type", "kimi_linear"},
      {"vocab_size", 163840}, {"hidden_size", 7168}, {"intermediate_size", 33792},
      {"num_attention_heads", 96}, {"num_key_value_heads", 96}, {"head_dim", 128},
      {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
      {"v_head_dim", 128}, {"mla_use_nope", true}, {"mla_use_output_gate", true}, {"rope_theta", 10000.0},
      {"linear_attn_config",
       {{"head_dim", 128}, {"num_heads", 96}, {"short_conv_kernel_size", 4}, {"gate_lower_bound", -5.0},
        {"use_full_rank_gate", true}}},
      {"num_experts", 896}, {"num_experts_per_token", 16}, {"num_shared_experts", 2},
      {"moe_intermediate_size", 3072}, {"routed_expert_hidden_size", 3584}, {"latent_moe_use_norm", true},
      {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"moe_renormalize", true},
      {"moe_router_activation_func", "sigmoid"}, {"num_expert_group", 1}, {"topk_group", 1},
      {"use_grouped_topk", true}, {"routed_scaling_factor", 1.0}, {"hidden_act", "situ"},
      {"activation_situ_beta", 4.0}, {"activation_situ_linear_beta", 25.0}, {"attn_res_block_size", 12},
      {"rms_norm_eps", 1e-05}, {"tie_word_embeddings", false}, {"max_position_embeddings", 1048576},
      {"bos_token_id", 163584}, {"eos_token_id", 163586}, {"pad_token_id", 163839}};
  // Released: MLA at every 4th layer and the last (93), 1-based.
  set_kimi_layers(text, layers, [layers](int l) { return l % 4 == 0 || (layers == 93 && l == 93); });
  // The release's MoonViT tower (MODELS.md 6.1): 1024 wide, 27 blocks of 12 x 128 heads, MLP
  // 4096, a learned 64 x 64 position grid, 2 x 2 merge into a 4096 -> 4096 -> 7168 projector.
  json vision = {{"init_pos_emb_height", 64}, {"init_pos_emb_time", 4}, {"init_pos_emb_width", 64},
                 {"merge_kernel_size", {2, 2}}, {"merge_type", "sd2_tpool"}, {"mlp_type", "mlp2"},
                 {"mm_projector_type", "patchmergerv2"}, {"patch_size", 14}, {"pos_emb_interpolation_mode", "bilinear"},
                 {"projector_hidden_act", "gelu"}, {"projector_ln_eps", 1e-05}, {"qkv_hidden_size", 1536},
                 {"text_hidden_size", 7168}, {"vt_hidden_size", 1024}, {"vt_intermediate_size", 4096},
                 {"vt_num_attention_heads", 12}, {"vt_num_hidden_layers", 27}};
  return {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"model_type", "kimi_k3"},
          {"bos_token_id", 163584}, {"eos_token_id", 163586}, {"media_placeholder_token_id", 163605},
          {"tie_word_embeddings", false}, {"text_config", text}, {"vision_config", vision}};
}

json kimi_k2(int layers) {
  return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "kimi_k2"},
          {"vocab_size", 163840}, {"hidden_size", 7168}, {"intermediate_size", 18432},
          {"num_hidden_layers", layers}, {"num_attention_heads", 64}, {"num_key_value_heads", 64},
          {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
          {"v_head_dim", 128}, {"n_routed_experts", 384}, {"num_experts_per_tok", 8}, {"n_shared_experts", 1},
          {"moe_intermediate_size", 2048}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
          {"n_group", 1}, {"topk_group", 1}, {"routed_scaling_factor", 2.827}, {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"}, {"norm_topk_prob", true}, {"hidden_act", "silu"},
          {"rms_norm_eps", 1e-06}, {"rope_theta", 50000.0},
          {"rope_scaling",
           {{"type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096}, {"beta_fast", 1.0},
            {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
          {"max_position_embeddings", 131072}, {"tie_word_embeddings", false},
          {"bos_token_id", 163584}, {"eos_token_id", 163585}};
}

// Small shapes of each family for tests and the demo: every code path, little memory.
json tiny(const std::string& family) {
  json c = family == "kimi-linear" ? kimi_linear(4) : family == "k3" ? kimi_k3(6) : kimi_k2(4);
  json& t = c.contains("text_config") ? c["text_config"] : c;
  t["vocab_size"] = 4096;
  t["hidden_size"] = 256;
  t["intermediate_size"] = 512;
  t["num_attention_heads"] = 4;
  t["num_key_value_heads"] = 4;
  t["kv_lora_rank"] = 64;
  t["qk_nope_head_dim"] = 32;
  t["qk_rope_head_dim"] = 16;
  t["v_head_dim"] = 32;
  t["moe_intermediate_size"] = 128;
  if (t.contains("q_lora_rank") && !t["q_lora_rank"].is_null()) t["q_lora_rank"] = 96;
  if (t.contains("linear_attn_config")) {
    t["linear_attn_config"]["num_heads"] = 4;
    t["linear_attn_config"]["head_dim"] = 32;
    t["num_experts"] = 32;
    t["num_experts_per_token"] = 4;
  } else {
    t["n_routed_experts"] = 32;
    t["num_experts_per_tok"] = 4;
    t["n_group"] = 4;
    t["topk_group"] = 2;
  }
  if (t.contains("routed_expert_hidden_size")) t["routed_expert_hidden_size"] = 128;
  if (t.contains("attn_res_block_size")) t["attn_res_block_size"] = 2;
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (t.contains(k)) t[k] = 4096 - 256 + (t[k].get<int>() - 163584);
    if (c.contains(k)) c[k] = t.value(k, 0);
  }
  // <|media_pad|> moves with the specials, so it stays the tokenizer's own id.
  if (c.contains("media_placeholder_token_id"))
    c["media_placeholder_token_id"] = 4096 - 256 + (c["media_placeholder_token_id"].get<int>() - 163584);
  if (c.contains("vision_config")) {
    // The vision fixture's small tower (shared/vision/kimi-k3): qkv 96 != hidden 64 as in the
    // release, the release's 64 x 64 position grid; its projector feeds the tiny hidden size.
    json& v = c["vision_config"];
    v["vt_hidden_size"] = 64;
    v["vt_num_hidden_layers"] = 2;
    v["vt_num_attention_heads"] = 4;
    v["qkv_hidden_size"] = 96;
    v["vt_intermediate_size"] = 128;
    v["text_hidden_size"] = t["hidden_size"];
  }
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"kimi-linear-48b", "kimi-k3", "kimi-k2", "tiny-kimi-linear", "tiny-k3", "tiny-k2"};
}

std::string preset_config_json(const std::string& name, const PresetOverrides& o) {
  json c;
  if (name == "kimi-linear-48b") c = kimi_linear(27);
  else if (name == "kimi-k3") c = kimi_k3(93);
  else if (name == "kimi-k2") c = kimi_k2(61);
  else if (name == "tiny-kimi-linear") c = tiny("kimi-linear");
  else if (name == "tiny-k3") c = tiny("k3");
  else if (name == "tiny-k2") c = tiny("k2");
  else {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
    throw Error("unknown preset '" + name + "' (presets: " + all + ")");
  }
  // A value that was given but makes no shape is the caller's mistake: say so, naming the flag,
  // rather than fall back to the preset's value (what 0 and negative values used to do).
  auto at_least_one = [](const char* flag, const std::optional<int>& v) {
    if (v && *v < 1) throw Error(std::string(flag) + " must be at least 1, not " + std::to_string(*v));
  };
  at_least_one("--layers", o.layers);
  at_least_one("--experts", o.experts);
  at_least_one("--hidden", o.hidden);
  at_least_one("--moe-intermediate", o.moe_intermediate);
  at_least_one("--vocab", o.vocab);
  json& t = c.contains("text_config") ? c["text_config"] : c;
  const bool kimi = t.contains("linear_attn_config");
  if (o.layers) {
    const int layers = *o.layers;
    if (layers > kMaxDecoderLayers)
      throw Error("--layers must be at most " + std::to_string(kMaxDecoderLayers) + ", not " + std::to_string(layers));
    if (kimi) {
      // Keep the family's pattern: MLA every 4th layer (1-based), KDA elsewhere.
      set_kimi_layers(t, layers, [](int l) { return l % 4 == 0; });
    } else {
      t["num_hidden_layers"] = layers;
    }
  }
  if (o.experts) {
    const int experts = *o.experts;
    t[kimi ? "num_experts" : "n_routed_experts"] = experts;
    const char* k = kimi ? "num_experts_per_token" : "num_experts_per_tok";
    if (t[k].get<int>() > experts) t[k] = experts;
    if (!kimi && experts % t["n_group"].get<int>() != 0) {
      t["n_group"] = 1;
      t["topk_group"] = 1;
    }
  }
  if (o.hidden) {
    t["hidden_size"] = *o.hidden;
    // The projector's output is a row of the text model's input.
    if (c.contains("vision_config")) c["vision_config"]["text_hidden_size"] = *o.hidden;
  }
  if (o.moe_intermediate) t["moe_intermediate_size"] = *o.moe_intermediate;
  if (o.vocab) {
    // Special ids sit at the top of the vocabulary: move them with it.
    const int vocab = *o.vocab;
    int old_vocab = t["vocab_size"].get<int>();
    t["vocab_size"] = vocab;
    std::vector<json*> objects{&c};
    if (&t != &c) objects.push_back(&t);
    for (json* j : objects)
      for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id", "media_placeholder_token_id"})
        if (j->contains(k) && (*j)[k].is_number_integer()) (*j)[k] = (*j)[k].get<int>() - old_vocab + vocab;
  }
  return c.dump(1);
}

}  // namespace waste
