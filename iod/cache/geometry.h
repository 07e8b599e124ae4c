// What the expert cache caches: (layer, expert) records of the MoE layers, visited in a fixed
// cyclic order each decode step (layer by layer, the layer's routed experts as listed). The
// geometry maps a key to a dense index so policies can keep per-key statistics in flat arrays,
// and to its position in the cycle so they can reason about "when is this layer needed next".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace waste::cache {

struct ExpertKey {
  uint32_t layer = 0;   // decoder layer (a trace's MoE-layer index in simulation)
  uint32_t expert = 0;  // routed expert id within the layer
  bool operator==(const ExpertKey&) const = default;
};

constexpr uint32_t kNoSlot = 0xFFFFFFFFu;

class CacheGeometry {
 public:
  CacheGeometry() = default;
  // moe_layers: the decoder layers that have routed experts, in decode order.
  CacheGeometry(std::vector<uint32_t> moe_layers, uint32_t experts_per_layer, uint32_t top_k);
  // Layers 0..n-1 (a routing trace numbers its MoE layers this way).
  static CacheGeometry dense(uint32_t n_moe_layers, uint32_t experts_per_layer, uint32_t top_k);

  const std::vector<uint32_t>& moe_layers() const { return layers_; }
  uint32_t moe_layer_count() const { return uint32_t(layers_.size()); }
  uint32_t experts_per_layer() const { return experts_; }
  uint32_t top_k() const { return top_k_; }
  // One token's routed reads: every MoE layer's top-k experts.
  uint32_t working_set_slots() const { return moe_layer_count() * top_k_; }
  uint32_t key_count() const { return moe_layer_count() * experts_; }

  bool contains(ExpertKey k) const;
  // Position of the key's layer in the decode cycle, 0..moe_layer_count()-1. Throws Error for
  // a layer without experts or an expert id out of range.
  uint32_t position(uint32_t layer) const;
  uint32_t key_index(ExpertKey k) const;  // position * experts + expert
  ExpertKey key_at(uint32_t index) const;
  std::string describe(ExpertKey k) const;  // "layer L expert E"

 private:
  std::vector<uint32_t> layers_;
  std::vector<int32_t> position_of_;  // decoder layer -> position, -1 when dense
  uint32_t experts_ = 0, top_k_ = 0;
};

}  // namespace waste::cache
