// Routed experts from a running iod (DESIGN.md 2, 6): per MoE layer one `fetch` of all the
// layer's experts (the previous layer's pins released on the same call; sent by fetch_layer,
// its answer taken by the first next_ready, so the caller computes meanwhile), then each expert is
// handed to the model as soon as its record's bytes are in (READY, or CHECKING while iod verifies
// its checksum: docs/PROTOCOL.md), in completion order, as a view straight into the read-only
// shared segment (no copy). One handed out CHECKING is confirmed at the model's next call, which
// waits for READY and throws ExpertUnavailable for it if its check failed: the kernels run beside
// the check, and nothing made of unverified bytes outlives that call. Lookahead hints go out as
// `prefetch`, without waiting for the reply (ExpertStoreClient::prefetch_async: at most
// kDefaultHintCapacity unanswered, the rest dropped and counted in hint_stats()), naming only the
// experts not known to be READY already: with everything cached a hint would cost iod a message
// for nothing, and then the layer's pins ride on the next fetch instead (hints_skipped()).
//
// A layer needing more experts than the cache has slots (a big prefill chunk on a small
// budget) goes through a sliding window of at most slot_count() pinned experts: each expert's
// slot is released as soon as the model is done with it, and once half the window is free the
// next experts are fetched into it (the releases ride on that fetch), so the disk reads the
// next experts while the kernels run on the rest of the window. Results never depend on this:
// moe_forward sums in ascending expert order.
//
// Unpinned reads (docs/PROTOCOL.md): a layer whose experts are all READY in slots this client
// knows (a fetch's answer, or the slot table: entries read at attach and, when a layer names an
// expert it does not know, again at most every kRescanInterval; same generation: the slot still
// holds the record) is served with no fetch at all, each view straight from its slot, unpinned.
// iod may reuse such a slot meanwhile, so after the model is done with a view (the next
// next_ready or next_ready_group) the slot's state word is read again: the
// same READY generation means every byte the kernels read was the record's (iod changes the word
// before a new record's bytes land); a changed one means the read may be torn, and that expert is
// fetched pinned and handed out again under the same index (the model's result for it is
// replaced). Garbage never leads a kernel out of bounds: a view's pointers and shapes come from
// the manifest, never from the slot, and a VQ3R code byte indexes a 256-entry book. The uses go
// to iod after the fact, one `touch` per ipc::kTouchPasses tokens (or kTouchDelay, and always
// before a fetch, a hint or a stats call), so its hit counts, the policy's use order, the usage file and
// traces still see every expert the model used, in order. With everything cached this leaves one
// message in 16 tokens instead of a fetch (and its wake-ups of iod) per layer. While iod does
// not answer the one-way calls (hint_capacity unanswered) or the connection is gone, layers go
// back to fetches, whose deadlines report it.
//
// Nothing waits on iod without a deadline: every RPC is bounded by call_timeout_ms
// (ExpertStoreClient), and a slot wait pings iod every `liveness_ms`, so a daemon that went
// away or stopped answering is an Error naming the socket within call_timeout_ms; a slot that
// stays LOADING or CHECKING longer than call_timeout_ms while iod answers (a stuck disk or
// checker) is one too. The settle of the experts handed out CHECKING waits for all of them
// within one call_timeout_ms.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/experts/pending_uses.h"
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
  // Several at once (the model applies them on several threads): pinned, the first as
  // next_ready gives it (waiting if none has landed: READY or CHECKING), then every other one
  // landed; unpinned, as many as are still READY, in order. All are settled on the next call:
  // released (a CHECKING one once READY, or thrown as lost), or checked intact.
  size_t next_ready_group(std::span<Ready> out) override;
  void end_layer() override;

  // iod's daemon-wide counters (hits, misses, bytes read); differences over a request are its own
  // when this is the only client. Pending unpinned uses are sent first, so they are counted.
  ExpertSourceStats stats() override;
  ipc::ExpertStoreClient& client() { return *client_; }
  uint32_t slot_count() const { return client_->info().layout.slot_count; }
  const ipc::HintStats& hint_stats() const { return client_->hint_stats(); }
  // Hints not sent because every expert they named was READY in a slot this client was given
  // (and still holds that record), and the experts left out of hints for that reason.
  uint64_t hints_skipped() const { return hints_skipped_; }
  uint64_t hint_experts_resident() const { return hint_experts_resident_; }
  // Sends pending releases now (otherwise they ride on the next fetch).
  void flush_releases();
  // Unpinned reads (above) on or off (on by default; off: every layer is fetched and pinned).
  void set_unpinned_reads(bool on) { unpinned_reads_ = on; }
  // The longest pending uses wait for a pass's end before they go (kTouchDelay by default;
  // tests set it to make the send depend on passes alone, or on every pass).
  void set_touch_delay(std::chrono::milliseconds d) { touch_delay_ = d; }
  // Layers served unpinned; experts whose unpinned read was torn or whose slot was reused before
  // its turn, fetched pinned instead; uses reported by touch, and those dropped unsent (iod not
  // answering).
  uint64_t unpinned_layers() const { return unpinned_layers_; }
  uint64_t unpinned_refetched() const { return unpinned_refetched_; }
  uint64_t uses_touched() const { return uses_touched_; }
  uint64_t uses_dropped() const { return uses_dropped_; }
  // Experts handed out while iod was still verifying their record (CHECKING: their kernels ran
  // beside the check, and what they made was used only once the slot turned READY), and those
  // whose check then failed (thrown as ExpertUnavailable before the next group).
  uint64_t handed_unchecked() const { return handed_unchecked_; }
  uint64_t failed_after_handout() const { return failed_after_handout_; }
  // Sends the pending unpinned uses now, waiting for iod's answer when no one-way call can go
  // (otherwise they go every ipc::kTouchPasses passes or kTouchDelay, before a fetch or stats()).
  void flush_uses();
  // Marks the connection gone: no goodbye calls on destruction (a caller dropping a source whose
  // iod stopped answering must not wait for it again).
  void abandon() { dead_ = true; }
  // One round trip to iod (a stats call): throws Error when it does not answer in time.
  void ping() { client_->stats(); }

 private:
  const float* codebooks(int layer);
  const ExpertLayerInfo& layer_info(int layer) const;  // throws naming a layer without routed experts
  // Why h's slot does not hold (layer, expert) by its header, naming the socket and slot; or "".
  std::string header_problem(int layer, int expert, ipc::SlotHandle h) const;
  // The view of h's record, its header checked (Error when it is not (layer, expert)).
  ExpertView view_of(int layer, int expert, ipc::SlotHandle h);
  // Fetches the next `count` experts of the layer into the window.
  void refill(size_t count);
  // The same in two halves: sends the fetch; takes its answer (no-op when none is pending).
  void start_refill(size_t count);
  void finish_refill();
  std::vector<ipc::SlotHandle> fetch_retrying(uint32_t layer, std::span<const uint32_t> ids);
  // A synchronous fetch of layer_'s `ids` (retrying while overloaded), one handle per id.
  std::vector<ipc::SlotHandle> fetch_now(std::span<const uint32_t> ids);
  // Waits for the slot to turn READY (or, Until::Landed, CHECKING); nullptr when it turned FAILED.
  // Errors name the socket, the slot and layer_'s `expert`. call_timeout_ms counts from `started`:
  // a caller waiting for several slots in turn passes its own start, so the deadline bounds that
  // wait for all of them, not each slot's (next_ready_group's settle, then its own wait for a
  // landed slot, each have one).
  const uint8_t* wait_alive(ipc::SlotHandle h, int expert,
                            ipc::ExpertStoreClient::Until until = ipc::ExpertStoreClient::Until::Ready,
                            std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());
  // Drops window_[i] (its slot FAILED) and throws ExpertUnavailable with iod's reason.
  [[noreturn]] void drop_failed(size_t i);
  // Why h's slot (layer_'s `expert`) failed, as iod wrote it (or that the handle went stale).
  std::string failure_reason(int expert, ipc::SlotHandle h) const;
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
  // last_handle_'s index of (layer, expert), or kNoKey outside the container's keys.
  size_t key_of(int layer, int expert) const;
  static constexpr size_t kNoKey = SIZE_MAX;
  uint32_t experts_per_layer_ = 0;
  std::vector<ipc::SlotHandle> last_handle_;  // slot kNoHandle: never fetched
  static constexpr uint32_t kNoHandle = UINT32_MAX;
  uint64_t hints_skipped_ = 0, hint_experts_resident_ = 0;
  struct Fetched {
    size_t index;  // into experts_
    ipc::SlotHandle handle;
    bool unchecked = false;  // handed out CHECKING: its use waits for READY (settle_in_use)
  };
  std::vector<Fetched> window_;  // fetched, not yet handed out (in fetch order)
  std::vector<Fetched> in_use_;  // handed out by the last next_ready() or next_ready_group()
  std::vector<size_t> torn_;     // settle_in_use's buffer
  // Experts handed out CHECKING whose check then failed: each is thrown as ExpertUnavailable by
  // a next_ready_group of its own, before that call hands anything out (the model drops what it
  // made of them). Bounded by the batch.
  struct Lost {
    int expert;
    std::string why;
  };
  std::vector<Lost> lost_;
  // Experts handed out while iod still checked their record, and those whose check then failed.
  uint64_t handed_unchecked_ = 0, failed_after_handout_ = 0;
  // The model is done with in_use_: pinned, their pins go to to_release_; unpinned, each is
  // checked intact (its use recorded) or, torn, fetched pinned again with the rest.
  void settle_in_use();

  // Unpinned reads (above). While unpinned_, window_ holds the remembered handles, none pinned.
  bool unpinned_reads_ = true;
  bool unpinned_ = false;
  bool may_serve_unpinned();  // every expert of the layer READY, and iod taking one-way calls
  // Remembers the handle of every slot READY now, from the slot table (no call): records other
  // clients, prefetches or an earlier run brought in count too, not only what this client
  // fetched. Done at attach, then when a layer names an expert not known READY, at most every
  // kRescanInterval (a scan reads a 128-byte entry per slot).
  void learn_ready_slots();
  static constexpr std::chrono::milliseconds kRescanInterval{50};
  std::chrono::steady_clock::time_point last_scan_{};
  std::vector<ipc::ExpertStoreClient::ReadySlot> scan_;  // learn_ready_slots' buffer, reused
  // The unpinned layer goes pinned: `torn` (indices already handed out) and every expert not
  // yet handed out are fetched, pinned, into the window (the torn ones first).
  void pin_the_rest(std::span<const size_t> torn);
  void record_use(int expert);
  // One touch of uses_: one-way; when none can go, kept for later unless `now` (then waited for).
  void send_uses(bool now);
  // Unpinned uses not yet sent (pending_uses.h).
  using Clock = PendingUses::Clock;
  // Pending uses are sent at a pass's end once they span ipc::kTouchPasses passes or the oldest
  // is kTouchDelay old (so iod's counters lag by a bounded time while decoding), before any
  // fetch (iod sees the layers in order), before stats(), and on destruction.
  static constexpr std::chrono::milliseconds kTouchDelay{250};
  std::chrono::milliseconds touch_delay_ = kTouchDelay;
  size_t touch_entries_max_ = 0;  // ipc::kTouchPasses x the container's MoE layers
  PendingUses uses_;
  uint64_t unpinned_layers_ = 0, unpinned_refetched_ = 0, uses_touched_ = 0, uses_dropped_ = 0;
};

}  // namespace waste
