#include "shared/ipc/segment_layout.h"

#include <bit>

#include "shared/container/format.h"
#include "shared/platform/futex.h"

namespace waste::ipc {

static_assert(std::endian::native == std::endian::little, "futex on the low half of the state word");

const char* state_name(SlotState s) {
  switch (s) {
    case SlotState::Free: return "FREE";
    case SlotState::Loading: return "LOADING";
    case SlotState::Ready: return "READY";
    case SlotState::Failed: return "FAILED";
    case SlotState::Checking: return "CHECKING";
  }
  return "?";
}

SegmentLayout segment_layout(uint32_t slot_count, uint64_t record_bytes) {
  SegmentLayout l;
  l.slot_count = slot_count;
  l.slot_bytes = round_up(record_bytes == 0 ? 1 : record_bytes, kSlotAlign);
  l.slot_table_offset = kSegmentHeaderBytes;
  l.slots_offset = round_up(l.slot_table_offset + uint64_t(slot_count) * sizeof(SlotEntry), kSlotAlign);
  l.total_bytes = l.slots_offset + uint64_t(slot_count) * l.slot_bytes;
  return l;
}

namespace {
uint32_t* low_half(const std::atomic<uint64_t>& word) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&word));
}
}  // namespace

bool futex_wait_word(const std::atomic<uint64_t>& word, uint64_t expected, int64_t timeout_ns) {
  return platform::futex_wait_shared(low_half(word), uint32_t(expected), timeout_ns);
}

void futex_wake_word(std::atomic<uint64_t>& word) { platform::futex_wake_shared(low_half(word)); }

}  // namespace waste::ipc
