// Routed experts from a running iod (DESIGN.md 2, 6): per MoE layer one `fetch` of all the
// layer's experts (the previous layer's pins released on the same call; sent by fetch_layer,
// its answer taken by the first next_ready, so the caller computes meanwhile), then each expert is
// handed to the model as soon as its slot turns READY, in completion order, as a view straight
// into the read-only shared segment (no copy). Lookahead hints go out as `prefetch`, without
// waiting for the reply (ExpertStoreClient::prefetch_async: at most kDefaultHintCapacity
// unanswered, the rest dropped and counted in hint_stats()), naming only the experts not known to
// be READY already: with everything cached a hint would cost iod a message for nothing, and
// then the layer's pins ride on the next fetch instead (hints_skipped()).
//
// A layer needing more experts than the cache has slots (a big prefill chunk on a small
// budget) goes through a sliding window of at most slot_count() pinned experts: each expert's
// slot is released as soon as the model is done with it, and once half the window is free the
// next experts are fetched into it (the releases ride on that fetch), so the disk reads the
// next experts while the kernels run on the rest of the window. Results never depend on this:
// moe_forward sums in ascending expert order.
//
// Nothing waits on iod without a deadline: every RPC is bounded by call_timeout_ms
// (ExpertStoreClient), and a slot wait pings iod every `liveness_ms`, so a daemon that went
// away or stopped answering is an Error naming the socket within call_timeout_ms; a slot that
// stays LOADING longer than call_timeout_ms while iod answers (a stuck disk) is one too.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/model/weights.h"
#include "shared/container/reader.h"
#include "shared/ipc/expert_store_client.h"

namespace waste {

class IodExperts : public ExpertSource {
 public:
  // Connects to iod's socket and attaches (checking it serves this container).
  IodExperts(const Container& container, const std::string& socket_path,
             int64_t call_timeout_ms = ipc::kDefaultCallTimeoutMs, int liveness_ms = 200);
  ~IodExperts() override;

  // Throws: experts come by layer batch only (below), the protocol moe_forward uses.
  ExpertView expert(int layer, int expert) override;
  void prefetch(int layer, std::span<const int> experts) override;

  void fetch_layer(int layer, std::span<const int> experts) override;
  int next_ready(ExpertView& view) override;
  void end_layer() override;

  // iod's daemon-wide counters (hits, misses, bytes read); differences over a request are its own
  // when this is the only client.
  ExpertSourceStats stats() const override;
  ipc::ExpertStoreClient& client() { return *client_; }
  uint32_t slot_count() const { return client_->info().layout.slot_count; }
  const ipc::HintStats& hint_stats() const { return client_->hint_stats(); }
  // Hints not sent because every expert they named was READY in a slot this client was given
  // (and still holds that record), and the experts left out of hints for that reason.
  uint64_t hints_skipped() const { return hints_skipped_; }
  uint64_t hint_experts_resident() const { return hint_experts_resident_; }
  // Sends pending releases now (otherwise they ride on the next fetch).
  void flush_releases();
  // One round trip to iod (a stats call): throws Error when it does not answer in time.
  void ping() { client_->stats(); }

 private:
  const float* codebooks(int layer);
  ExpertView view_of(int layer, int expert, ipc::SlotHandle h);
  // Fetches the next `count` experts of the layer into the window.
  void refill(size_t count);
  // The same in two halves: sends the fetch; takes its answer (no-op when none is pending).
  void start_refill(size_t count);
  void finish_refill();
  std::vector<ipc::SlotHandle> fetch_retrying(uint32_t layer, std::span<const uint32_t> ids);
  // Waits for the slot to leave LOADING; nullptr when it turned FAILED.
  const uint8_t* wait_alive(ipc::SlotHandle h);
  // Drops window_[i] (its slot FAILED) and throws ExpertUnavailable with iod's reason.
  [[noreturn]] void drop_failed(size_t i);
  bool alive();  // one stats RPC: false when the connection is gone

  const Container& container_;
  std::string socket_;
  int64_t call_timeout_ms_;
  int liveness_ms_;
  bool dead_ = false;  // the connection failed: skip RPCs on destruction
  std::unique_ptr<ipc::ExpertStoreClient> client_;
  std::map<int, std::vector<float>> codebooks_;
  std::vector<ipc::SlotHandle> to_release_;  // piggy-backed on the next fetch

  // The layer batch in progress.
  int layer_ = -1;
  std::vector<int> experts_;
  size_t next_fetch_ = 0;   // experts_[0, next_fetch_) were fetched
  size_t window_cap_ = 1;   // slots the layer may pin at once
  size_t pending_count_ = 0;  // experts_[next_fetch_, + pending_count_) sent by start_refill, unanswered
  int last_moe_layer_ = -1;  // the container's last layer with routed experts

  // The last slot handle iod gave for each (layer, expert), [layer x experts_per_layer_ +
  // expert]: a hint leaves out an expert whose handle is still READY (its generation unchanged,
  // so the slot still holds that record). Advisory: iod may evict it a moment later, and the
  // fetch then reads it as it would have anyway. Sized once from the container.
  void remember(int layer, int expert, ipc::SlotHandle h);
  bool known_ready(int layer, int expert) const;
  uint32_t experts_per_layer_ = 0;
  std::vector<ipc::SlotHandle> last_handle_;  // slot kNoHandle: never fetched
  static constexpr uint32_t kNoHandle = UINT32_MAX;
  uint64_t hints_skipped_ = 0, hint_experts_resident_ = 0;
  struct Fetched {
    size_t index;  // into experts_
    ipc::SlotHandle handle;
  };
  std::vector<Fetched> window_;  // fetched, not yet handed out (in fetch order)
  std::optional<Fetched> in_use_;  // handed out by the last next_ready()
};

}  // namespace waste
