// The shared-memory segment iod creates and compute maps read-only (docs/PROTOCOL.md):
//
//   offset 0                  SegmentHeader (4 KiB reserved)
//   slot_table_offset         SlotEntry[slot_count], 128 bytes each
//   slots_offset (4 KiB)      slot_count slots of slot_bytes (a 4 KiB multiple) each
//
// Every slot has one 64-bit state word: bits 0..7 the state, bits 8..63 a generation that
// grows each time the slot is given a new record (or re-read). Only iod writes it. A reader
// holding a handle (slot, generation) waits on the word's low 32 bits with a futex (every
// transition changes them, so a wake is never lost) and knows its handle is stale when the
// generation no longer matches.
#pragma once
#include <atomic>
#include <cstdint>

namespace waste::ipc {

constexpr uint64_t kSegmentMagic = 0x31474553584157ull;  // "WAXSEG1"
// The version of the segment layout and of the ExpertStore protocol around it: attach refuses a
// pair of builds that differ. 2: prefetch carries releases (compute of this build leaves a
// layer's pins to its next hint; an iod that ignored that field would never unpin them).
// 3: touch (compute of this build reads READY slots unpinned and reports those uses after the
// fact; an iod without it would refuse every touch, and its policy would never see those uses).
// 4: a touch spans up to kTouchPasses passes (an iod of version 3 takes one entry per MoE layer
// and would refuse every touch of this build's compute).
// 5: CHECKING (a record's bytes are in and its header matches; its payload checksum is being
// verified): compute of this build runs kernels on it and uses what they made only once the slot
// turns READY. A compute of version 4 would take the new state for an unknown one.
constexpr uint32_t kSegmentVersion = 5;
constexpr uint64_t kSegmentHeaderBytes = 4096;
constexpr uint64_t kSlotAlign = 4096;
// Largest slot a client accepts (a record is at most 4 GiB, format.h); keeps the layout's
// arithmetic far from overflow.
constexpr uint64_t kMaxSlotBytes = 1ull << 32;

// CHECKING sits between LOADING and READY/FAILED while iod verifies the payload checksum
// (docs/PROTOCOL.md): the bytes no longer change, but nothing made of them may be used before
// READY. A reader that only wants verified records treats it as LOADING.
enum class SlotState : uint32_t { Free = 0, Loading = 1, Ready = 2, Failed = 3, Checking = 4 };
// iod is still at work on the slot's record: reading it, or verifying what it read.
constexpr bool in_progress(SlotState s) { return s == SlotState::Loading || s == SlotState::Checking; }
// The record's bytes are in and no longer change (verified or not yet).
constexpr bool landed(SlotState s) { return s == SlotState::Ready || s == SlotState::Checking; }

constexpr uint64_t make_state_word(SlotState s, uint64_t generation) { return (generation << 8) | uint64_t(s); }
constexpr SlotState state_of(uint64_t word) { return SlotState(word & 0xFF); }
constexpr uint64_t generation_of(uint64_t word) { return word >> 8; }
const char* state_name(SlotState s);

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_entry_bytes;   // sizeof(SlotEntry)
  uint64_t instance_id;        // hash of the run directory
  uint64_t container_id;       // manifest container id
  uint64_t total_bytes;
  uint64_t slot_table_offset;
  uint64_t slots_offset;
  uint64_t slot_bytes;
  uint32_t slot_count;
  uint32_t iod_pid;
  std::atomic<uint32_t> ready; // 1 once the table is initialised (iod writes it last)
  uint32_t reserved0;
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);

constexpr uint32_t kSlotErrorBytes = 96;

// One per slot. `word` is the state word; layer/expert/bytes say which record the slot holds
// (written before the word turns READY or FAILED); `error` is a NUL-terminated reason when FAILED.
struct alignas(64) SlotEntry {
  std::atomic<uint64_t> word;
  uint32_t layer;
  uint32_t expert;
  uint64_t record_bytes;
  uint64_t reserved;
  char error[kSlotErrorBytes];
};
static_assert(sizeof(SlotEntry) == 128);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct SegmentLayout {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  uint64_t slot_table_offset = kSegmentHeaderBytes;
  uint64_t slots_offset = 0;
  uint64_t total_bytes = 0;
};
// slot_bytes is rounded up to kSlotAlign.
SegmentLayout segment_layout(uint32_t slot_count, uint64_t record_bytes);

// Futex on the low 32 bits of a state word (little-endian: they sit at the word's address),
// through shared/platform/futex.h. Works across processes. Returns false on timeout.
bool futex_wait_word(const std::atomic<uint64_t>& word, uint64_t expected, int64_t timeout_ns);
void futex_wake_word(std::atomic<uint64_t>& word);

}  // namespace waste::ipc
