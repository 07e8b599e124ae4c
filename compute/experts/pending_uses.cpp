#include "compute/experts/pending_uses.h"

namespace waste {

void PendingUses::add(uint32_t layer, uint32_t expert) {
  if (!open_ || entries_[live_ - 1].layer != layer) {
    if (live_ == 0) first_added_ = Clock::now();
    if (live_ == entries_.size()) entries_.emplace_back();
    entries_[live_].layer = layer;
    entries_[live_].experts.clear();  // keeps its capacity
    ++live_;
    open_ = true;
  }
  entries_[live_ - 1].experts.push_back(expert);
}

std::vector<uint32_t> PendingUses::take_layer(uint32_t layer) {
  if (!open_ || entries_[live_ - 1].layer != layer) return {};
  open_ = false;
  return entries_[--live_].experts;
}

size_t PendingUses::experts() const {
  size_t n = 0;
  for (const ipc::LayerUse& u : entries()) n += u.experts.size();
  return n;
}

}  // namespace waste
