// The parts of an ExpertStore request (proto/expert_store.capnp) that come from the peer: the
// lists read out of its Cap'n Proto message, and the checks of every key and handle against what
// this iod serves. Kept apart from the RPC server and the store so the fuzzer
// (tests/fuzz/fuzz_expert_store_rpc.cpp) drives exactly the code a peer's message reaches.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/expert_store.capnp.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/model/config.h"

namespace waste {
class Container;
}

namespace waste::iod {

// The experts of a fetch or prefetch, and the handles of a fetch's releases or a release, as sent.
std::vector<uint32_t> experts_of(capnp::List<uint32_t>::Reader list);
std::vector<ipc::SlotHandle> handles_of(capnp::List<proto::SlotHandle>::Reader list);

// The experts each decoder layer used without a fetch (touch), as sent. A touch has one entry per
// MoE layer of each of at most ipc::kTouchPasses passes, and no config has more than kMaxDecoderLayers.
using ipc::LayerUse;
constexpr uint32_t kMaxTouchEntries = uint32_t(kMaxDecoderLayers) * ipc::kTouchPasses;
std::vector<LayerUse> layer_uses_of(capnp::List<proto::LayerUse>::Reader list);

// What a key may name: per decoder layer its routed expert count (0 for a dense layer).
struct ServedExperts {
  std::string source;                   // the container's directory, named in errors
  std::vector<uint32_t> expert_count;  // indexed by decoder layer
  static ServedExperts of(const Container& c);
};

// Throws InvalidRequest naming "layer" or "experts" unless `layer` is a MoE layer served and
// `expert` one of its experts.
void check_expert_key(const ServedExperts& served, uint32_t layer, uint32_t expert);
// Throws InvalidRequest naming "uses" unless a touch has at most ipc::kTouchPasses times as many
// entries as MoE layers are served (that many passes over the layers), each with 1 to that
// layer's expert count keys, every key served.
void check_layer_uses(const ServedExperts& served, std::span<const LayerUse> uses);
// Throws InvalidRequest naming "handles" unless the handle names one of the cache's `slots` slots.
void check_release_slot(const ipc::SlotHandle& h, uint32_t slots);

}  // namespace waste::iod
