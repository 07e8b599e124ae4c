// The client side of iod's ExpertStore (compute, waste iobench, tests): connects to the unix
// socket, attaches, maps the segment read-only, and turns fetch handles into record bytes by
// waiting on the slots' state words (futex; no RPC per expert). Not thread-safe: one client
// per thread (the RPC runs on the calling thread's kj event loop).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "shared/ipc/segment_layout.h"

namespace waste::ipc {

struct SlotHandle {
  uint32_t slot = 0;
  uint64_t generation = 0;
  bool operator==(const SlotHandle&) const = default;
};

struct AttachInfo {
  std::string segment_name;
  SegmentLayout layout;
  uint64_t instance_id = 0, container_id = 0;
};

class ExpertStoreClient {
 public:
  // Connects to `socket_path` (an iod.sock) and attaches; container_id 0 skips the identity
  // check. Throws Error when the daemon is not there or serves another container.
  explicit ExpertStoreClient(const std::string& socket_path, uint64_t container_id = 0);
  ~ExpertStoreClient();
  ExpertStoreClient(const ExpertStoreClient&) = delete;
  ExpertStoreClient& operator=(const ExpertStoreClient&) = delete;

  const AttachInfo& info() const { return info_; }

  // Pins the experts of one decoder layer and returns their slots at once (reads proceed in
  // the daemon); `releases` are unpinned first (piggy-backed on the same call).
  std::vector<SlotHandle> fetch(uint32_t layer, std::span<const uint32_t> experts,
                                std::span<const SlotHandle> releases = {});
  // A hint (best first); returns how many reads it started.
  uint32_t prefetch(uint32_t layer, std::span<const uint32_t> experts);
  void release(std::span<const SlotHandle> handles);
  nlohmann::json stats();
  void trace_start(const std::string& path);
  uint64_t trace_stop();

  // Waits until the slot is READY and returns its record (slot_bytes, read-only). Throws Error
  // when the read failed (naming layer and expert), the handle is stale, or timeout_ns passes
  // (-1: wait for ever).
  const uint8_t* wait(SlotHandle h, int64_t timeout_ns = -1) const;
  SlotState state(SlotHandle h) const;  // current state; Free when the handle is stale
  const uint8_t* slot_data(uint32_t slot) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AttachInfo info_;
};

}  // namespace waste::ipc
