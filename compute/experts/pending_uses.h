// Unpinned expert uses not yet sent to iod (IodExperts' touch, docs/PROTOCOL.md): one entry per
// layer batch, in order, over up to ipc::kTouchPasses passes. Entries and their lists are kept
// between sends (live_ says how many are pending): once warm, the per-token path allocates
// nothing for them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shared/ipc/expert_store_client.h"

namespace waste {

class PendingUses {
 public:
  using Clock = std::chrono::steady_clock;
  // The next use starts a new entry: a layer batch began (two passes of a model with one MoE
  // layer must stay two entries, as iod counts a token per pass).
  void start_layer() { open_ = false; }
  void add(uint32_t layer, uint32_t expert);
  void end_pass() { ++passes_; }
  std::span<const ipc::LayerUse> entries() const { return {entries_.data(), live_}; }
  bool empty() const { return live_ == 0; }
  size_t passes() const { return passes_; }                       // passes ended since the last send
  Clock::time_point first_added() const { return first_added_; }  // not empty
  // Removes and returns the open batch's experts, if that batch is `layer`'s.
  std::vector<uint32_t> take_layer(uint32_t layer);
  size_t experts() const;  // over every pending entry
  void clear() {
    live_ = 0;
    passes_ = 0;
    open_ = false;
  }

 private:
  std::vector<ipc::LayerUse> entries_;
  size_t live_ = 0;
  size_t passes_ = 0;
  bool open_ = false;  // entries_[live_ - 1] belongs to the current layer batch
  Clock::time_point first_added_{};
};

}  // namespace waste
