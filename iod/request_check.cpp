#include "iod/request_check.h"

#include <algorithm>

#include "shared/container/reader.h"
#include "shared/util/error.h"

namespace waste::iod {

std::vector<uint32_t> experts_of(capnp::List<uint32_t>::Reader list) {
  std::vector<uint32_t> out;
  out.reserve(list.size());
  for (uint32_t x : list) out.push_back(x);
  return out;
}

std::vector<ipc::SlotHandle> handles_of(capnp::List<proto::SlotHandle>::Reader list) {
  std::vector<ipc::SlotHandle> out;
  out.reserve(list.size());
  for (auto h : list) out.push_back({h.getSlot(), h.getGeneration()});
  return out;
}

std::vector<LayerUse> layer_uses_of(capnp::List<proto::LayerUse>::Reader list) {
  // A list of empty structs costs the peer no bytes per element: bounded before anything is
  // allocated (a touch holds one entry per MoE layer of each of up to kTouchPasses passes).
  require_request(list.size() <= kMaxTouchEntries,
                  "touch: " + std::to_string(list.size()) + " entries (at most " + std::to_string(kMaxTouchEntries) + ")",
                  "uses");
  std::vector<LayerUse> out;
  out.reserve(list.size());
  for (auto u : list) out.push_back({u.getLayer(), experts_of(u.getExperts())});
  return out;
}

ServedExperts ServedExperts::of(const Container& c) {
  ServedExperts s;
  s.source = c.dir();
  s.expert_count.assign(size_t(std::max(0, c.config().n_layers)), 0);
  for (const ExpertLayerInfo& l : c.expert_layers())
    if (l.layer >= 0 && size_t(l.layer) < s.expert_count.size()) s.expert_count[size_t(l.layer)] = l.expert_count;
  return s;
}

void check_expert_key(const ServedExperts& served, uint32_t layer, uint32_t expert) {
  const bool moe = layer < served.expert_count.size() && served.expert_count[layer] > 0;
  require_request(layer <= 1u << 20 && moe, "layer " + std::to_string(layer) + " is not a MoE layer of " + served.source,
                  "layer");
  require_request(expert < served.expert_count[layer],
                  "layer " + std::to_string(layer) + ": expert " + std::to_string(expert) + " out of range (" +
                      std::to_string(served.expert_count[layer]) + " experts)",
                  "experts");
}

void check_layer_uses(const ServedExperts& served, std::span<const LayerUse> uses) {
  const size_t moe_layers = size_t(std::count_if(served.expert_count.begin(), served.expert_count.end(),
                                                 [](uint32_t n) { return n > 0; }));
  // A touch may span up to kTouchPasses passes over the layers, one entry per layer of each.
  require_request(uses.size() <= moe_layers * ipc::kTouchPasses,
                  "touch: " + std::to_string(uses.size()) + " entries for " + std::to_string(moe_layers) +
                      " MoE layers (at most " + std::to_string(ipc::kTouchPasses) + " passes of one per layer)",
                  "uses");
  for (const LayerUse& u : uses) {
    require_request(!u.experts.empty(), "touch: layer " + std::to_string(u.layer) + " names no expert", "uses");
    check_expert_key(served, u.layer, u.experts[0]);  // the layer is a MoE layer served
    require_request(u.experts.size() <= served.expert_count[u.layer],
                    "touch: layer " + std::to_string(u.layer) + " names " + std::to_string(u.experts.size()) +
                        " experts (it has " + std::to_string(served.expert_count[u.layer]) + ")",
                    "uses");
    for (uint32_t x : u.experts) check_expert_key(served, u.layer, x);
  }
}

void check_release_slot(const ipc::SlotHandle& h, uint32_t slots) {
  require_request(h.slot < slots, "release: slot " + std::to_string(h.slot) + " out of range (" + std::to_string(slots) + " slots)",
                  "handles");
}

}  // namespace waste::iod
