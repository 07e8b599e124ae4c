#include "iod/cache/geometry.h"

#include "shared/util/error.h"

namespace waste::cache {

namespace {
// Bounds that keep per-key tables small even for a corrupt manifest or trace: K3 has 92 MoE
// layers of 896 experts (82,432 keys); these allow ~16x that.
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxExperts = 65536;
constexpr uint64_t kMaxKeys = 1u << 21;
}  // namespace

CacheGeometry::CacheGeometry(std::vector<uint32_t> moe_layers, uint32_t experts_per_layer, uint32_t top_k)
    : layers_(std::move(moe_layers)), experts_(experts_per_layer), top_k_(top_k) {
  require(!layers_.empty() && layers_.size() <= kMaxLayers,
          "cache geometry: MoE layer count " + std::to_string(layers_.size()) + " out of range 1.." +
              std::to_string(kMaxLayers));
  require(experts_ > 0 && experts_ <= kMaxExperts,
          "cache geometry: experts per layer " + std::to_string(experts_) + " out of range");
  require(top_k_ > 0 && top_k_ <= experts_, "cache geometry: top_k " + std::to_string(top_k_) +
                                                " out of range 1.." + std::to_string(experts_));
  require(uint64_t(layers_.size()) * experts_ <= kMaxKeys, "cache geometry: too many (layer, expert) keys");
  uint32_t max_layer = 0;
  for (uint32_t l : layers_) {
    require(l < 1u << 20, "cache geometry: layer number " + std::to_string(l) + " out of range");
    max_layer = std::max(max_layer, l);
  }
  position_of_.assign(size_t(max_layer) + 1, -1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    require(position_of_[layers_[i]] < 0, "cache geometry: layer " + std::to_string(layers_[i]) + " listed twice");
    position_of_[layers_[i]] = int32_t(i);
  }
}

CacheGeometry CacheGeometry::dense(uint32_t n_moe_layers, uint32_t experts_per_layer, uint32_t top_k) {
  std::vector<uint32_t> layers(n_moe_layers);
  for (uint32_t i = 0; i < n_moe_layers; ++i) layers[i] = i;
  return CacheGeometry(std::move(layers), experts_per_layer, top_k);
}

bool CacheGeometry::contains(ExpertKey k) const {
  return k.layer < position_of_.size() && position_of_[k.layer] >= 0 && k.expert < experts_;
}

// position() and key_index() run several times per cache access: the error message is built
// only on failure (require() would build it on every call).
uint32_t CacheGeometry::position(uint32_t layer) const {
  if (layer >= position_of_.size() || position_of_[layer] < 0)
    throw Error("expert cache: layer " + std::to_string(layer) + " has no routed experts");
  return uint32_t(position_of_[layer]);
}

uint32_t CacheGeometry::key_index(ExpertKey k) const {
  if (k.expert >= experts_)
    throw Error("expert cache: " + describe(k) + " out of range (layer has " + std::to_string(experts_) + " experts)");
  return position(k.layer) * experts_ + k.expert;
}

ExpertKey CacheGeometry::key_at(uint32_t index) const {
  return ExpertKey{layers_.at(index / experts_), index % experts_};
}

std::string CacheGeometry::describe(ExpertKey k) const {
  return "layer " + std::to_string(k.layer) + " expert " + std::to_string(k.expert);
}

}  // namespace waste::cache
