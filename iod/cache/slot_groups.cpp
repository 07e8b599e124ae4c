#include "iod/cache/slot_groups.h"

#include "shared/util/error.h"

namespace waste::cache {

void SlotGroups::reset(uint32_t groups, uint32_t slots) {
  members_.assign(groups, {});
  group_of_.assign(slots, kNone);
  nonempty_.clear();
  nonempty_.reserve(groups < slots ? groups : slots);
  nonempty_at_.assign(groups, kNone);
}

void SlotGroups::assign(uint32_t slot, uint32_t group) {
  // The message is built only on failure (this runs on every cache access).
  if (slot >= group_of_.size() || (group != kNone && group >= members_.size()))
    throw Error("slot groups: slot " + std::to_string(slot) + " or group " + std::to_string(group) + " out of range");
  const uint32_t old = group_of_[slot];
  if (old == group) return;
  if (old != kNone) {
    members_[old].erase(slot);
    if (members_[old].empty()) {
      // Swap-remove from the non-empty list.
      const uint32_t at = nonempty_at_[old], last = nonempty_.back();
      nonempty_[at] = last;
      nonempty_at_[last] = at;
      nonempty_.pop_back();
      nonempty_at_[old] = kNone;
    }
  }
  group_of_[slot] = group;
  if (group != kNone) {
    if (members_[group].empty()) {
      nonempty_at_[group] = uint32_t(nonempty_.size());
      nonempty_.push_back(group);
    }
    members_[group].insert(slot);
  }
}

}  // namespace waste::cache
