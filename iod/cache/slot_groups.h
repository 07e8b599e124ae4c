// Cached slots grouped by an integer group id, with the list of non-empty groups. A policy
// whose eviction score depends only on a few per-slot fields (forecast: layer position, class,
// guess state) puts the slots with equal fields in one group: every slot of a group has the
// same score, so choosing a victim computes one score per non-empty group instead of one per
// slot, and looks inside only the groups that can win. Moving a slot is O(1) (members are kept
// in no order: the chooser finds a group's lowest slot itself when ties matter).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace waste::cache {

class SlotGroups {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // `groups` ids 0..groups-1, slots 0..slots-1, all slots in no group.
  void reset(uint32_t groups, uint32_t slots);
  // Moves the slot to `group` (kNone: out of every group).
  void assign(uint32_t slot, uint32_t group);
  uint32_t group_of(uint32_t slot) const { return group_of_[slot]; }
  std::span<const uint32_t> nonempty() const { return nonempty_; }
  std::span<const uint32_t> members(uint32_t group) const { return members_[group]; }

 private:
  // Swap-removes `value` at `at` from `list`, fixing the index of the element moved into it.
  static void remove_at(std::vector<uint32_t>& list, uint32_t at, std::vector<uint32_t>& index_of);

  std::vector<std::vector<uint32_t>> members_;  // per group: its slots, in no order
  std::vector<uint32_t> group_of_;              // per slot: its group or kNone
  std::vector<uint32_t> member_at_;             // per slot: its index in members_[group]
  std::vector<uint32_t> nonempty_;              // the groups with members, in no order
  std::vector<uint32_t> nonempty_at_;           // per group: its index in nonempty_, or kNone
};

}  // namespace waste::cache
