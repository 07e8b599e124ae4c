// The trunk tensors and routed-expert tensors of each family, by their release names (without
// the tensor prefix) and shapes, derived from the config. The converter checks a checkpoint
// against this list, synth generates it, and the planner sums it: one list for all three.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/model/config.h"

namespace waste {

struct VisionConfig;

// What a tensor is for decides how it is stored by default (docs/FORMAT.md).
enum class TensorRole {
  Embedding,  // [vocab, hidden], stays on disk, one row read per token
  Head,       // lm_head [vocab, hidden]
  Matrix,     // attention, dense/shared MLP, latent projections
  Router,     // MoE gate [experts, hidden]: f32, bf16 for a large trunk (shared/model/trunk_storage.h)
  Vector,     // norms, biases, A_log, dt_bias, conv weights, AttnRes vectors: f32
};

struct TensorSpec {
  std::string name;  // e.g. "model.layers.3.self_attn.kv_b_proj.weight"
  std::vector<uint64_t> shape;
  TensorRole role = TensorRole::Matrix;
  // A_log of K3 is stored padded past the head count; any first dim >= min_len is accepted.
  bool padded = false;
  uint64_t min_len = 0;
  uint64_t elements() const;
};

// Every non-routed tensor of the text model, in a stable order (layer by layer).
std::vector<TensorSpec> trunk_tensor_specs(const ModelConfig& c);

// The K3 vision tower's and projector's tensors: 165 `vision_tower.*` (patch embedding, position
// grid, 6 per block, final norm) and 3 `mm_projector.*`, under their release names, which carry
// no tensor prefix. Matrices (patch_embed.proj [D, 3, p, p], used as [D, 3 p p]; wqkv, wo, fc0,
// fc1, proj.0, proj.2) have role Matrix; the norms and the learned position grid [H0, W0, D]
// have role Vector (stored f32: the grid is interpolated, not multiplied, and 4-bit storage
// lost 12.6% of it in the original engine). Order: as the release lists them.
std::vector<TensorSpec> vision_tensor_specs(const VisionConfig& v);
// True for a name of the vision tower or projector ("vision_tower." or "mm_projector." first):
// those tensors are not part of the text trunk.
bool is_vision_tensor(std::string_view release_name);

// "[a, b, c]": a tensor shape in error messages.
std::string shape_text(const std::vector<uint64_t>& shape);

// Release names of a routed expert's gate, up and down weights (K2: experts.E.{gate,up,down}_proj;
// Kimi-Linear/K3: experts.E.{w1,w3,w2}), without prefix and without the ".weight" suffix.
struct ExpertNames {
  std::string gate, up, down;
};
ExpertNames expert_tensor_names(const ModelConfig& c, int layer, int expert);

}  // namespace waste
