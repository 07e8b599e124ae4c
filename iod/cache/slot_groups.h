// Cached slots grouped by an integer group id, each group's slots kept in ascending order, with
// the list of non-empty groups. A policy whose eviction score depends only on a few per-slot
// fields (forecast: layer position, class, guess state) puts the slots with equal fields in one
// group: every slot of a group has the same score, so choosing a victim looks at one score per
// non-empty group instead of one per slot, and the group's lowest slot settles ties exactly as
// a scan over the slots in index order would.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <vector>

namespace waste::cache {

class SlotGroups {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // `groups` ids 0..groups-1, slots 0..slots-1, all slots in no group.
  void reset(uint32_t groups, uint32_t slots);
  // Moves the slot to `group` (kNone: out of every group). O(log group size).
  void assign(uint32_t slot, uint32_t group);
  uint32_t group_of(uint32_t slot) const { return group_of_[slot]; }
  std::span<const uint32_t> nonempty() const { return nonempty_; }
  const std::set<uint32_t>& members(uint32_t group) const { return members_[group]; }

 private:
  std::vector<std::set<uint32_t>> members_;  // per group: its slots, ascending
  std::vector<uint32_t> group_of_;           // per slot
  std::vector<uint32_t> nonempty_;           // the groups with members, in no order
  std::vector<uint32_t> nonempty_at_;        // per group: its index in nonempty_, or kNone
};

}  // namespace waste::cache
