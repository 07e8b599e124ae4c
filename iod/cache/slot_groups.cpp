#include "iod/cache/slot_groups.h"

#include "shared/util/error.h"

namespace waste::cache {

void SlotGroups::reset(uint32_t groups, uint32_t slots) {
  members_.assign(groups, {});
  group_of_.assign(slots, kNone);
  member_at_.assign(slots, kNone);
  nonempty_.clear();
  nonempty_.reserve(groups < slots ? groups : slots);
  nonempty_at_.assign(groups, kNone);
}

void SlotGroups::remove_at(std::vector<uint32_t>& list, uint32_t at, std::vector<uint32_t>& index_of) {
  const uint32_t last = list.back();
  list[at] = last;
  index_of[last] = at;
  list.pop_back();
}

void SlotGroups::assign(uint32_t slot, uint32_t group) {
  // The message is built only on failure (this runs on every cache access).
  if (slot >= group_of_.size() || (group != kNone && group >= members_.size()))
    throw Error("slot groups: slot " + std::to_string(slot) + " or group " + std::to_string(group) + " out of range");
  const uint32_t old = group_of_[slot];
  if (old == group) return;
  if (old != kNone) {
    remove_at(members_[old], member_at_[slot], member_at_);
    if (members_[old].empty()) {
      remove_at(nonempty_, nonempty_at_[old], nonempty_at_);
      nonempty_at_[old] = kNone;
    }
  }
  group_of_[slot] = group;
  member_at_[slot] = kNone;
  if (group != kNone) {
    if (members_[group].empty()) {
      nonempty_at_[group] = uint32_t(nonempty_.size());
      nonempty_.push_back(group);
    }
    member_at_[slot] = uint32_t(members_[group].size());
    members_[group].push_back(slot);
  }
}

}  // namespace waste::cache
