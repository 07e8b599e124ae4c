// The client side of iod's ExpertStore (compute, waste iobench, tests): connects to the unix
// socket, attaches, maps the segment read-only, and turns fetch handles into record bytes by
// waiting on the slots' state words (futex; no RPC per expert). Not thread-safe: one client
// per thread (the RPC runs on the calling thread's kj event loop).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shared/ipc/segment_layout.h"
#include "shared/util/error.h"

namespace waste::ipc {

struct SlotHandle {
  uint32_t slot = 0;
  uint64_t generation = 0;
  bool operator==(const SlotHandle&) const = default;
};

// The experts one decoder layer used from slots read unpinned (touch).
struct LayerUse {
  uint32_t layer = 0;
  std::vector<uint32_t> experts;
};

// Counters of the fire-and-forget prefetch hints (prefetch_async).
struct HintStats {
  uint64_t sent = 0;         // hints sent
  uint64_t dropped = 0;      // not sent: hint_capacity hints were still unanswered
  uint64_t failed = 0;       // answered with an error (swallowed: a hint never fails its caller)
  uint32_t outstanding = 0;  // sent, not answered yet
  uint32_t capacity = 0;     // unanswered one-way calls kept at most (hint_capacity)
  bool disconnected = false; // a one-way call's answer said the connection is gone
  std::string last_error;    // of the last failed hint
};

// Unanswered hints a client keeps at most (prefetch_async drops the rest).
constexpr uint32_t kDefaultHintCapacity = 16;
// Passes over the MoE layers (tokens) one touch may span: a client serving layers unpinned holds
// their uses for up to this many passes, so iod wakes once in that many tokens rather than every
// token (each wake is a task switch into iod and back, TLB flushes on a core the model was using:
// docs/LEARNED.md, session 24). iod refuses a touch of more entries than this many per MoE layer.
constexpr uint32_t kTouchPasses = 16;
// How long a call waits for iod's answer by default. iod answers every call at once (reads go
// on in the background), so a call that takes seconds means a stopped or wedged daemon.
constexpr int64_t kDefaultCallTimeoutMs = 10'000;

struct AttachInfo {
  std::string segment_name;
  SegmentLayout layout;
  uint64_t instance_id = 0, container_id = 0;
};

// One stats call on a fresh connection to iod's socket (no attach, no segment): nothing when
// iod answered within timeout_ms, else why not (Error::unanswered: connected, but silent).
// For health probes (`waste health`).
std::optional<Error> probe_iod(const std::string& socket_path, int64_t timeout_ms);

class ExpertStoreClient {
 public:
  // Connects to `socket_path` (an iod.sock) and attaches; container_id 0 skips the identity
  // check. Throws Error when the daemon is not there or serves another container.
  // hint_capacity bounds the unanswered prefetch_async hints (the container of their
  // promises is sized to it here). Every call (attach included) that iod does not answer within
  // call_timeout_ms (<= 0: no deadline) throws Error saying so; the connection is then not to
  // be trusted (a late answer may still be on its way): drop the client.
  explicit ExpertStoreClient(const std::string& socket_path, uint64_t container_id = 0,
                             uint32_t hint_capacity = kDefaultHintCapacity,
                             int64_t call_timeout_ms = kDefaultCallTimeoutMs);
  ~ExpertStoreClient();
  ExpertStoreClient(const ExpertStoreClient&) = delete;
  ExpertStoreClient& operator=(const ExpertStoreClient&) = delete;

  const AttachInfo& info() const { return info_; }

  // Pins the experts of one decoder layer and returns their slots at once (reads proceed in
  // the daemon); `releases` are unpinned first (piggy-backed on the same call).
  std::vector<SlotHandle> fetch(uint32_t layer, std::span<const uint32_t> experts,
                                std::span<const SlotHandle> releases = {});
  // The same call in two halves, so the caller computes while iod answers: fetch_start sends
  // it (it is on the wire when this returns) and fetch_finish waits for its answer (within
  // call_timeout_ms from then) and returns what fetch would. One fetch at a time: a second
  // fetch_start (or fetch) before fetch_finish throws. The releases are iod's once sent; an
  // Overloaded answer leaves the experts unpinned, as with fetch.
  void fetch_start(uint32_t layer, std::span<const uint32_t> experts, std::span<const SlotHandle> releases = {});
  std::vector<SlotHandle> fetch_finish();
  bool fetch_pending() const;
  // A hint (best first); waits for the reply and returns how many reads it started.
  uint32_t prefetch(uint32_t layer, std::span<const uint32_t> experts);
  // The same hint, fire-and-forget: sends it and returns without waiting for the reply (the
  // call goes out on the wire before this returns, so it reaches iod ahead of any later fetch
  // on this connection). Replies are reaped whenever this client's event loop runs (any call
  // of this client, or the next prefetch_async). Returns false, sending nothing, when
  // hint_capacity hints are unanswered (counted as dropped). Never throws: a hint that fails
  // (iod gone, bad layer) is counted in hint_stats(); the next real call reports a dead iod.
  // `releases` ride on the hint (unpinned first); when it returns false they were not sent.
  bool prefetch_async(uint32_t layer, std::span<const uint32_t> experts,
                      std::span<const SlotHandle> releases = {}) noexcept;
  const HintStats& hint_stats() const;
  // How many calls iod has answered on this connection (a refusal counts: iod was there). A
  // call served from the shared segment alone does not count, so callers can tell "iod
  // answered" from "nothing needed iod".
  uint64_t answers() const;
  void release(std::span<const SlotHandle> handles);
  // The same release, fire-and-forget (sharing the hints' bound and counters): the slots are
  // free in iod as soon as it reads the call, not at our next fetch. false: nothing sent
  // (hint_capacity calls unanswered); the caller keeps the handles.
  bool release_async(std::span<const SlotHandle> handles) noexcept;
  // Reports uses served from READY slots without a fetch (proto touch), fire-and-forget
  // (sharing the hints' bound and counters). false: nothing sent (hint_capacity calls
  // unanswered, or the request could not be built); the caller may keep the uses for later.
  bool touch_async(std::span<const LayerUse> uses) noexcept;
  // The same, waiting for iod's answer (within call_timeout_ms): for when the uses must reach iod
  // before the next call and no one-way call can be sent.
  void touch(std::span<const LayerUse> uses);
  // Whether the slot still holds the record it held when `h` was READY: every read of
  // slot_data(h.slot) made before this call saw that record intact. (iod turns the state word
  // to LOADING of a new generation before a new record's bytes land; this reads the word after
  // an acquire fence, so a read that saw any new byte sees the new word.)
  bool intact(SlotHandle h) const;
  // Every slot READY now and the record it holds, read from the slot table without a call (a
  // sequence-lock read of each entry: one that changed while read is left out). Appends to out.
  struct ReadySlot {
    SlotHandle handle;
    uint32_t layer = 0, expert = 0;
  };
  void ready_slots(std::vector<ReadySlot>& out) const;
  nlohmann::json stats();
  void trace_start(const std::string& path);
  uint64_t trace_stop();

  // Waits until the slot is READY and returns its record (slot_bytes, read-only). Throws Error
  // when the read failed (naming layer and expert), the handle is stale, or timeout_ns passes
  // (-1: wait for ever). Until::Landed returns at CHECKING too: the bytes are in and will not
  // change, but what is made of them may be used only once the slot turns READY.
  enum class Until { Ready, Landed };
  const uint8_t* wait(SlotHandle h, int64_t timeout_ns = -1, Until until = Until::Ready) const;
  SlotState state(SlotHandle h) const;  // current state; Free when the handle is stale
  const uint8_t* slot_data(uint32_t slot) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AttachInfo info_;
};

}  // namespace waste::ipc
