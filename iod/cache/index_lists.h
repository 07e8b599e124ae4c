// Several doubly linked lists over the indices 0..n-1 (slots or key indices), each index in at
// most one list at a time: O(1) push at either end, unlink, and walks from either end. Sized
// once by reset(); the baseline policies (ARC, S3-FIFO) keep their queues in these.
#pragma once
#include <cstdint>
#include <vector>

#include "iod/cache/geometry.h"

namespace waste::cache {

class IndexLists {
 public:
  static constexpr uint8_t kNone = 0xFF;

  void reset(uint32_t n, uint32_t lists) {
    prev_.assign(n, kNoSlot);
    next_.assign(n, kNoSlot);
    owner_.assign(n, kNone);
    head_.assign(lists, kNoSlot);
    tail_.assign(lists, kNoSlot);
    size_.assign(lists, 0);
  }
  // The list holding i, or kNone.
  uint8_t owner(uint32_t i) const { return owner_.at(i); }
  uint32_t size(uint8_t list) const { return size_[list]; }
  // head = most recently pushed at the front (MRU / newest), tail = the other end (LRU / oldest).
  uint32_t head(uint8_t list) const { return head_[list]; }
  uint32_t tail(uint8_t list) const { return tail_[list]; }
  // Toward the head / toward the tail; kNoSlot past the end.
  uint32_t toward_head(uint32_t i) const { return prev_[i]; }
  uint32_t toward_tail(uint32_t i) const { return next_[i]; }

  void unlink(uint32_t i) {
    const uint8_t l = owner_.at(i);
    if (l == kNone) return;
    const uint32_t p = prev_[i], n = next_[i];
    (p == kNoSlot ? head_[l] : next_[p]) = n;
    (n == kNoSlot ? tail_[l] : prev_[n]) = p;
    prev_[i] = next_[i] = kNoSlot;
    owner_[i] = kNone;
    --size_[l];
  }
  // Moves i (from whatever list) to the head of `list`.
  void push_head(uint8_t list, uint32_t i) {
    unlink(i);
    prev_[i] = kNoSlot;
    next_[i] = head_[list];
    (head_[list] == kNoSlot ? tail_[list] : prev_[head_[list]]) = i;
    head_[list] = i;
    owner_[i] = list;
    ++size_[list];
  }
  // Moves i (from whatever list) to the tail of `list`.
  void push_tail(uint8_t list, uint32_t i) {
    unlink(i);
    next_[i] = kNoSlot;
    prev_[i] = tail_[list];
    (tail_[list] == kNoSlot ? head_[list] : next_[tail_[list]]) = i;
    tail_[list] = i;
    owner_[i] = list;
    ++size_[list];
  }

 private:
  std::vector<uint32_t> prev_, next_;  // prev = toward the head
  std::vector<uint8_t> owner_;
  std::vector<uint32_t> head_, tail_, size_;
};

}  // namespace waste::cache
