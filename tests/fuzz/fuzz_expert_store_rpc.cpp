// libFuzzer target: a malformed ExpertStore request from a peer of iod (proto/expert_store.capnp).
// The first byte chooses the method (fetch, prefetch, release, touch); the rest is the Cap'n Proto
// message of its parameters, read and checked by the code iod's RPC server runs on it
// (iod/request_check.h) against a fixed served geometry. Contract checked: keys accepted name
// a served expert, handles accepted a slot of the cache.
#include <kj/exception.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "iod/request_check.h"
#include "proto/expert_store.capnp.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_capnp_message.h"

namespace {

constexpr uint32_t kSlots = 64;

// A dense layer 0, then three MoE layers of 16 experts (the seeds name these).
const waste::iod::ServedExperts& served() {
  static const waste::iod::ServedExperts s{"fuzz container", {0, 16, 16, 16}};
  return s;
}

void check_keys(uint32_t layer, const std::vector<uint32_t>& experts) {
  for (uint32_t x : experts) {
    waste::iod::check_expert_key(served(), layer, x);
    if (layer >= served().expert_count.size() || x >= served().expert_count[layer]) __builtin_trap();
  }
}

void check_handles(const std::vector<waste::ipc::SlotHandle>& handles) {
  for (const auto& h : handles) {
    waste::iod::check_release_slot(h, kSlots);
    if (h.slot >= kSlots) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    waste::fuzz::FuzzMessage msg(data + 1, size - 1);
    using waste::proto::ExpertStore;
    switch (data[0] % 4) {
      case 0: {
        auto p = msg.root<ExpertStore::FetchParams>();
        const std::vector<uint32_t> experts = waste::iod::experts_of(p.getExperts());
        const auto releases = waste::iod::handles_of(p.getReleases());
        check_keys(p.getLayer(), experts);
        check_handles(releases);
        break;
      }
      case 1: {
        auto p = msg.root<ExpertStore::PrefetchParams>();
        check_keys(p.getLayer(), waste::iod::experts_of(p.getExperts()));
        break;
      }
      case 2: {
        auto p = msg.root<ExpertStore::TouchParams>();
        const auto uses = waste::iod::layer_uses_of(p.getUses());
        if (uses.size() > waste::iod::kMaxTouchEntries) __builtin_trap();
        waste::iod::check_layer_uses(served(), uses);
        // Accepted: one entry per MoE layer of each of at most kTouchPasses passes, none empty,
        // every key served.
        if (uses.size() > 3 * waste::ipc::kTouchPasses) __builtin_trap();
        for (const auto& use : uses) {
          if (use.experts.empty()) __builtin_trap();
          check_keys(use.layer, use.experts);
        }
        break;
      }
      default: {
        auto p = msg.root<ExpertStore::ReleaseParams>();
        check_handles(waste::iod::handles_of(p.getHandles()));
        break;
      }
    }
  } catch (const waste::Error&) {
  } catch (const kj::Exception&) {
  }
  return 0;
}
