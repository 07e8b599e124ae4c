#include "compute/experts/iod_experts.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "shared/stats/json.h"
#include "shared/util/error.h"
#include "shared/util/timeline.h"

namespace waste {

namespace {

// Called in a catch of iod's error. iod refusing compute's own request (a key or a handle it
// does not serve: InvalidRequest) is a fault of compute or of the pair, never of the HTTP
// client whose request it was: it must not reach that client as a 400 naming iod's field.
[[noreturn]] void rethrow_iod_error(const Error& e) {
  if (e.kind() == ErrorKind::InvalidRequest) throw Error("iod refused compute's request: " + std::string(e.what()));
  throw;
}

}  // namespace

IodExperts::IodExperts(const Container& container, const std::string& socket_path, int64_t call_timeout_ms,
                       int liveness_ms)
    : container_(container),
      socket_(socket_path),
      call_timeout_ms_(call_timeout_ms),
      liveness_ms_(std::max(1, liveness_ms)),
      client_(std::make_unique<ipc::ExpertStoreClient>(socket_path, container.container_id(),
                                                      ipc::kDefaultHintCapacity, call_timeout_ms)) {
  // Every record must fit a slot (iod sizes slots for the largest layer stride).
  for (const ExpertLayerInfo& l : container_.expert_layers()) {
    last_moe_layer_ = std::max(last_moe_layer_, l.layer);
    experts_per_layer_ = std::max(experts_per_layer_, l.expert_count);
  }
  // The container's own counts (each layer's experts file holds exactly expert_count records,
  // checked when it was opened): one handle per record at most (K3: 93 x 896, 1.3 MB).
  last_handle_.assign(size_t(last_moe_layer_ + 1) * experts_per_layer_, ipc::SlotHandle{kNoHandle, 0});
  touch_entries_max_ = container_.expert_layers().size() * ipc::kTouchPasses;
  for (const ExpertLayerInfo& l : container_.expert_layers())
    require(l.layout.stride <= client_->info().layout.slot_bytes,
            "iod " + socket_ + ": slots of " + std::to_string(client_->info().layout.slot_bytes) +
                " bytes are smaller than layer " + std::to_string(l.layer) + "'s records");
  learn_ready_slots();
}

void IodExperts::learn_ready_slots() {
  scan_.clear();
  client_->ready_slots(scan_);
  for (const auto& r : scan_) remember(int(r.layer), int(r.expert), r.handle);
  last_scan_ = std::chrono::steady_clock::now();
}

IodExperts::~IodExperts() {
  if (dead_) return;  // no goodbye RPCs to a daemon that is gone (they would only log noise)
  try {
    end_layer();
    flush_releases();
    send_uses(false);  // the unpinned uses still pending
    // Refused when iod leaves every one-way call unanswered: a destructor does not wait out the
    // call deadline for counters, so those uses are lost to iod's hit counts and usage file, and
    // said so here (this object's own counters die with it).
    if (!uses_.empty())
      spdlog::warn("iod: {} expert uses served unpinned were not reported (the connection's one-way calls to iod "
                   "were all unanswered at close); its hit counts and usage file miss them",
                   uses_.experts());
  } catch (...) {  // iod already gone: its pins died with our connection anyway
  }
}

const float* IodExperts::codebooks(int layer) {
  const ExpertLayerInfo* info = container_.expert_layer(layer);
  require(info != nullptr, container_.dir() + ": layer " + std::to_string(layer) + " has no routed experts");
  if (info->layout.format != TensorFormat::VQ3R) return nullptr;
  auto it = codebooks_.find(layer);
  if (it == codebooks_.end()) it = codebooks_.emplace(layer, container_.read_codebooks(layer)).first;
  return it->second.data();
}

const ExpertLayerInfo& IodExperts::layer_info(int layer) const {
  const ExpertLayerInfo* info = container_.expert_layer(layer);
  if (!info) throw Error(container_.dir() + ": layer " + std::to_string(layer) + " has no routed experts");
  return *info;
}

std::string IodExperts::header_problem(int layer, int expert, ipc::SlotHandle h) const {
  // Header only: iod checked the payload checksum when it read the record.
  const std::string bad = check_record(client_->slot_data(h.slot), layer_info(layer).layout, uint32_t(layer),
                                       uint32_t(expert), false);
  return bad.empty() ? bad : "iod " + socket_ + ": slot " + std::to_string(h.slot) + ": " + bad;
}

ExpertView IodExperts::view_of(int layer, int expert, ipc::SlotHandle h) {
  const std::string bad = header_problem(layer, expert, h);
  require(bad.empty(), bad);
  return expert_view(client_->slot_data(h.slot), layer_info(layer).layout, codebooks(layer));
}

const uint8_t* IodExperts::wait_alive(ipc::SlotHandle h, int expert, ipc::ExpertStoreClient::Until until,
                                      std::chrono::steady_clock::time_point started) {
  for (;;) {
    try {
      return client_->wait(h, int64_t(liveness_ms_) * 1'000'000, until);
    } catch (const Error&) {
      // A timeout leaves the slot LOADING (or CHECKING); FAILED is the caller's to report
      // (drop_failed); anything else (a stale handle) is final.
      const ipc::SlotState s = client_->state(h);
      if (s == ipc::SlotState::Failed) return nullptr;
      if (!ipc::in_progress(s)) throw;
    }
    // Still loading after liveness_ms: is iod alive? The ping throws naming the socket if not
    // (within call_timeout_ms: a stopped daemon does not answer at all).
    try {
      client_->stats();
    } catch (const Error& e) {
      dead_ = true;
      throw Error(std::string("iod went away while compute waited for an expert: ") + e.what(), ErrorKind::Unavailable,
                  "iod");
    }
    // iod answers but the read does not finish: a record read takes milliseconds, so this is a
    // stuck disk or a wedged read engine; the wait ends rather than holding the step for ever.
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    if (call_timeout_ms_ > 0 && waited.count() > call_timeout_ms_) {
      const bool checking = client_->state(h) == ipc::SlotState::Checking;
      throw Error("iod " + socket_ + ": slot " + std::to_string(h.slot) + " (layer " + std::to_string(layer_) +
                      " expert " + std::to_string(expert) + ")" + (checking ? " still checking" : " still loading") +
                      " when the wait for it ended, " + std::to_string(waited.count()) + " ms in (iod answers; " +
                      (checking ? "is its checking thread stuck?)" : "is its disk stuck?)"),
                  ErrorKind::Unavailable, "iod");
    }
  }
}

std::vector<ipc::SlotHandle> IodExperts::fetch_retrying(uint32_t layer, std::span<const uint32_t> ids) {
  // A fetch can find every unpinned slot still LOADING a prefetch (a small cache, a big
  // group); those reads finish within milliseconds, so wait and ask again. The releases went
  // through on the first attempt (iod unpins them before acquiring), so retries send none.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 0;; ++attempt) {
    try {
      std::vector<ipc::SlotHandle> hs = client_->fetch(layer, ids, to_release_);
      to_release_.clear();
      return hs;
    } catch (const Error& e) {
      // Overloaded: every slot is pinned or loading right now (iod's own wait gave up or its
      // queue of waiting fetches is full); anything else is final.
      if (e.kind() != ErrorKind::Overloaded || std::chrono::steady_clock::now() > deadline) {
        dead_ = dead_ || !alive();
        rethrow_iod_error(e);
      }
      to_release_.clear();
      std::this_thread::sleep_for(std::chrono::microseconds(attempt < 10 ? 100 : 2000));  // bounded by the deadline
    }
  }
}

std::vector<ipc::SlotHandle> IodExperts::fetch_now(std::span<const uint32_t> ids) {
  std::vector<ipc::SlotHandle> hs;
  {
    timeline::Span span("fetch_issue", "compute", layer_);
    hs = fetch_retrying(uint32_t(layer_), ids);
  }
  require(hs.size() == ids.size(), "iod " + socket_ + ": fetch returned " + std::to_string(hs.size()) +
                                       " handles for " + std::to_string(ids.size()) + " experts");
  return hs;
}

bool IodExperts::alive() {
  try {
    client_->stats();
    return true;
  } catch (const Error&) {
    return false;
  }
}

void IodExperts::flush_releases() {
  if (to_release_.empty()) return;
  std::vector<ipc::SlotHandle> r;
  r.swap(to_release_);
  try {
    client_->release(r);
  } catch (const Error& e) {
    rethrow_iod_error(e);
  }
}

ExpertView IodExperts::expert(int layer, int expert) {
  // The model asks for experts by layer batch only (moe_forward); a path fetching one expert
  // at a time would have to keep its own pins, and nothing takes it.
  throw Error("iod experts are served by layer batch (fetch_layer, next_ready), not one at a time (layer " +
              std::to_string(layer) + ", expert " + std::to_string(expert) + ")");
}

size_t IodExperts::key_of(int layer, int expert) const {
  if (layer < 0 || layer > last_moe_layer_ || expert < 0 || uint32_t(expert) >= experts_per_layer_) return kNoKey;
  return size_t(layer) * experts_per_layer_ + size_t(expert);
}

void IodExperts::remember(int layer, int expert, ipc::SlotHandle h) {
  if (const size_t k = key_of(layer, expert); k != kNoKey) last_handle_[k] = h;
}

bool IodExperts::known_ready(int layer, int expert) const {
  const size_t k = key_of(layer, expert);
  return k != kNoKey && last_handle_[k].slot != kNoHandle && client_->state(last_handle_[k]) == ipc::SlotState::Ready;
}

void IodExperts::prefetch(int layer, std::span<const int> experts) {
  if (experts.empty()) return;
  if (dead_) return;
  std::vector<uint32_t> ids;
  ids.reserve(experts.size());
  for (int e : experts)
    if (!known_ready(layer, e)) ids.push_back(uint32_t(e));
  hint_experts_resident_ += experts.size() - ids.size();
  if (ids.empty()) {
    // Nothing for iod to read: no message. The pins end_layer left in to_release_ go back on
    // the next layer's fetch (start_refill), one message per layer instead of two.
    ++hints_skipped_;
    return;
  }
  timeline::Span span("prefetch_issue", "compute", layer);
  // The pending uses go first: iod picks the hint's victims knowing every use made before it
  // (one more message only when a hint follows cached layers; iod wakes for the hint anyway).
  send_uses(false);
  // Fire-and-forget: waiting for iod's answer cost a round trip per layer (~1 ms per token-layer
  // when everything is cached) for a hint whose answer we never use. Its errors are counted by
  // the client, never thrown: a hint must not fail the token (a dead iod fails the next fetch).
  // The layer just ended left its pins in to_release_ (end_layer): they ride on this hint.
  if (client_->prefetch_async(uint32_t(layer), ids, to_release_)) to_release_.clear();
}

void IodExperts::fetch_layer(int layer, std::span<const int> experts) {
  // A batch left open is ended first. With none open, the pins the last layer left (its hint
  // was not sent: every expert it named was READY) ride on this fetch rather than go alone.
  // (A step an error ends between two MoE layers leaves them until its next fetch, or
  // the destructor; the MoE layer's own guard already released that layer's.)
  if (layer_ >= 0) end_layer();
  // This batch may add an entry: a full buffer goes first (iod's bound on a touch's entries; it
  // fills only when passes end early, errors on the way, as sends go every kTouchPasses passes).
  if (uses_.entries().size() >= touch_entries_max_) flush_uses();
  uses_.start_layer();
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  next_fetch_ = 0;
  window_cap_ = std::max<size_t>(1, slot_count());
  if (may_serve_unpinned()) {
    unpinned_ = true;
    ++unpinned_layers_;
    for (size_t i = 0; i < experts_.size(); ++i) window_.push_back({i, last_handle_[key_of(layer, experts_[i])]});
    next_fetch_ = experts_.size();
    // Pins a fetched layer left have no fetch to ride on now.
    if (!to_release_.empty() && client_->release_async(to_release_)) to_release_.clear();
    return;
  }
  // The unpinned uses so far go ahead of this fetch: iod's policy and trace see the layers in
  // order (one more message, only when fetched and unpinned layers mix).
  flush_uses();
  // The first window's fetch goes out now and is answered while the caller computes (the MoE
  // layer runs its shared expert between this and its first next_ready): the round trip, half
  // a millisecond a layer on 2 busy cores, no longer adds to every MoE layer.
  start_refill(std::min(window_cap_, experts_.size()));
}

bool IodExperts::may_serve_unpinned() {
  if (!unpinned_reads_ || dead_ || experts_.empty() || experts_.size() > window_cap_) return false;
  // The uses must be able to reach iod (a touch is a one-way call): while it leaves them
  // unanswered, or the connection is gone, fetches take over and their deadlines report it.
  const ipc::HintStats& h = client_->hint_stats();
  if (h.disconnected || h.outstanding >= h.capacity) return false;
  auto all_known = [&] { return std::all_of(experts_.begin(), experts_.end(), [&](int e) { return known_ready(layer_, e); }); };
  if (all_known()) return true;
  if (std::chrono::steady_clock::now() - last_scan_ < kRescanInterval) return false;
  learn_ready_slots();
  return all_known();
}

void IodExperts::pin_the_rest(std::span<const size_t> torn) {
  std::vector<size_t> index(torn.begin(), torn.end());
  for (const Fetched& f : window_) index.push_back(f.index);
  window_.clear();
  unpinned_ = false;
  if (index.empty()) return;
  // The layer's experts already used intact go in the same fetch (hits: nothing is read, and
  // their pins go back with the next message), so iod sees the layer as one request, as it
  // would have without unpinned reads; the uses pending from earlier batches go first, in order.
  const std::vector<uint32_t> used = uses_.take_layer(uint32_t(layer_));
  flush_uses();
  std::vector<uint32_t> ids = used;
  for (size_t i : index) ids.push_back(uint32_t(experts_[i]));
  // Until the fetch is answered the layer is not complete: an end_layer after it throws must
  // not leave pins for a hint that will not come. (Its uses go with the failed step.)
  next_fetch_ = 0;
  const std::vector<ipc::SlotHandle> hs = fetch_now(ids);
  next_fetch_ = experts_.size();
  for (size_t k = 0; k < used.size(); ++k) {
    to_release_.push_back(hs[k]);
    remember(layer_, int(used[k]), hs[k]);
  }
  for (size_t k = 0; k < index.size(); ++k) {
    window_.push_back({index[k], hs[used.size() + k]});
    remember(layer_, experts_[index[k]], hs[used.size() + k]);
  }
  unpinned_refetched_ += index.size();
}

void IodExperts::record_use(int expert) { uses_.add(uint32_t(layer_), uint32_t(expert)); }

void IodExperts::flush_uses() { send_uses(true); }

void IodExperts::send_uses(bool now) {
  if (uses_.empty()) return;
  const size_t n = uses_.experts();
  if (dead_) {
    uses_dropped_ += n;
  } else if (client_->touch_async(uses_.entries())) {
    uses_touched_ += n;
  } else if (!now) {
    return;  // iod leaves one-way calls unanswered: they go later (now: before a fetch or stats)
  } else {
    // They must reach iod before what follows (a fetch, a stats call): iod's policy and trace
    // see the layers in order, and its counters every use made before the call.
    try {
      client_->touch(uses_.entries());
    } catch (const Error& e) {
      uses_dropped_ += n;
      uses_.clear();
      dead_ = dead_ || !alive();
      rethrow_iod_error(e);
    }
    uses_touched_ += n;
  }
  uses_.clear();
}

void IodExperts::start_refill(size_t count) {
  if (count == 0 || dead_) {
    if (count) refill(count);  // a dead connection: refill reports it
    return;
  }
  std::vector<uint32_t> ids(experts_.begin() + ptrdiff_t(next_fetch_),
                            experts_.begin() + ptrdiff_t(next_fetch_ + count));
  timeline::instant("fetch_sent", "compute", layer_);
  try {
    client_->fetch_start(uint32_t(layer_), ids, to_release_);
  } catch (const Error& e) {
    dead_ = dead_ || !alive();
    rethrow_iod_error(e);
  }
  to_release_.clear();  // iod's once sent (it unpins them before it pins the new ones)
  pending_count_ = count;
}

void IodExperts::finish_refill() {
  if (pending_count_ == 0) return;
  const size_t count = pending_count_;
  pending_count_ = 0;
  std::vector<ipc::SlotHandle> hs;
  {
    timeline::Span span("fetch_issue", "compute", layer_);
    try {
      hs = client_->fetch_finish();
    } catch (const Error& e) {
      // Overloaded: nothing was pinned (every slot pinned or loading right now); ask again the
      // way a synchronous fetch does. Anything else is final.
      if (e.kind() != ErrorKind::Overloaded) {
        dead_ = dead_ || !alive();
        rethrow_iod_error(e);
      }
      std::vector<uint32_t> ids(experts_.begin() + ptrdiff_t(next_fetch_),
                                experts_.begin() + ptrdiff_t(next_fetch_ + count));
      hs = fetch_retrying(uint32_t(layer_), ids);
    }
  }
  require(hs.size() == count, "iod " + socket_ + ": fetch returned " + std::to_string(hs.size()) + " handles for " +
                                  std::to_string(count) + " experts");
  for (size_t i = 0; i < hs.size(); ++i) {
    window_.push_back({next_fetch_ + i, hs[i]});
    remember(layer_, experts_[next_fetch_ + i], hs[i]);
  }
  next_fetch_ += count;
}

void IodExperts::refill(size_t count) {
  if (count == 0) return;
  // Released slots (ours, now free) go back on this same call, so the new experts may use them.
  std::vector<uint32_t> ids(experts_.begin() + ptrdiff_t(next_fetch_),
                            experts_.begin() + ptrdiff_t(next_fetch_ + count));
  const std::vector<ipc::SlotHandle> hs = fetch_now(ids);
  for (size_t i = 0; i < hs.size(); ++i) {
    window_.push_back({next_fetch_ + i, hs[i]});
    remember(layer_, experts_[next_fetch_ + i], hs[i]);
  }
  next_fetch_ += count;
}

int IodExperts::next_ready(ExpertView& view) {
  Ready r;
  if (next_ready_group(std::span<Ready>(&r, 1)) == 0) return -1;
  view = r.view;
  return r.index;
}

void IodExperts::settle_in_use() {
  // The model is done with the experts handed out last: their slots go back (on the next fetch,
  // or at end_layer); unpinned, each slot must still hold its record, or that expert is fetched
  // and handed out again.
  //
  // One handed out CHECKING (its kernels ran beside iod's checksum) is used only once its slot
  // turns READY: wait for that here, before anything is released (a wait that throws leaves
  // in_use_ whole for end_layer to release once). A check that failed drops what the model made
  // of it: ExpertUnavailable, thrown by the caller before it hands anything out.
  // Each is settled once: a wait that throws leaves the rest unchecked for a retry. One deadline
  // bounds the settle, however many records it waits for: iod's pread pool checks on every one
  // of its threads, so several may be CHECKING at once, each ending just before its own deadline.
  const auto started = std::chrono::steady_clock::now();
  for (Fetched& done : in_use_) {
    if (!done.unchecked) continue;
    const int expert = experts_[done.index];
    bool failed = false;
    if (client_->state(done.handle) != ipc::SlotState::Ready) {
      timeline::Span span("check_wait", "compute", layer_, expert);
      try {
        failed = !wait_alive(done.handle, expert, ipc::ExpertStoreClient::Until::Ready, started);
      } catch (const Error&) {
        // A pinned slot leaves CHECKING only for READY or FAILED, and a FAILED one may be read
        // again (a new generation) on any connection's next demand: stale means it failed.
        // Anything else (iod gone, the deadline) is the step's failure.
        if (client_->state(done.handle) != ipc::SlotState::Free) throw;
        failed = true;
      }
    }
    done.unchecked = false;
    if (!failed) continue;
    lost_.push_back({expert, failure_reason(expert, done.handle)});
    ++failed_after_handout_;
  }
  torn_.clear();
  for (const Fetched& done : in_use_) {
    // Unpinned, the header is checked now, not before: the kernels have just read this record,
    // so the check no longer takes its first TLB and cache miss on the step's critical path
    // (~5 us each here, 0.3 ms a token). It is read before intact() (whose fence orders it
    // too). iod checked it when it read the record; a mismatch would be iod's bug, and the
    // model drops this expert's rows when told.
    const std::string bad = unpinned_ ? header_problem(layer_, experts_[done.index], done.handle) : std::string();
    if (!unpinned_) {
      to_release_.push_back(done.handle);
    } else if (client_->intact(done.handle) && bad.empty()) {
      record_use(experts_[done.index]);
    } else {
      // Torn, or (not expected: iod checked it) a header that is not the record's: fetched
      // pinned, whose header check reports a record that really is wrong.
      timeline::instant("unpinned_torn", "compute", layer_, experts_[done.index]);
      torn_.push_back(done.index);
    }
  }
  in_use_.clear();
  if (!torn_.empty()) pin_the_rest(torn_);
}

size_t IodExperts::next_ready_group(std::span<Ready> out) {
  require(!out.empty(), "next_ready_group: no room for an expert (0 means the layer is done)");
  finish_refill();  // the layer's first fetch, sent by fetch_layer
  settle_in_use();
  if (!lost_.empty()) {
    const Lost l = lost_.front();
    lost_.erase(lost_.begin());
    throw ExpertUnavailable(layer_, l.expert, l.why);
  }
  size_t k = 0;
  if (unpinned_) {
    // In order, as many as are still READY (pointers from the manifest's layout only, via
    // expert_view: nothing in a slot is trusted before the check above).
    while (k < out.size() && !window_.empty() && client_->state(window_.front().handle) == ipc::SlotState::Ready) {
      const Fetched f = window_.front();
      const ExpertView v = expert_view(client_->slot_data(f.handle.slot), layer_info(layer_).layout, codebooks(layer_));
      window_.erase(window_.begin());
      out[k++] = {int(f.index), v};
      in_use_.push_back(f);
      timeline::instant("expert_ready", "compute", layer_, experts_[f.index]);
    }
    if (k > 0 || window_.empty()) return k;
    // Reused before its turn: this expert and the rest of the layer are fetched and pinned.
    pin_the_rest({});
  }
  // Refill once half the window is free (a fetch per expert would cost a round trip each), or
  // when nothing fetched is left to hand out.
  const size_t remaining = experts_.size() - next_fetch_;
  const size_t free_slots = window_cap_ - window_.size();
  if (remaining > 0 && (window_.empty() || free_slots >= std::max<size_t>(1, window_cap_ / 2)))
    refill(std::min(free_slots, remaining));
  if (window_.empty()) return 0;

  // Completion order: the first slot whose bytes are in (READY, or CHECKING: see settle_in_use);
  // else wait on the oldest outstanding one.
  using ipc::landed;
  size_t pick = 0;
  for (size_t i = 0; i < window_.size(); ++i) {
    const ipc::SlotState s = client_->state(window_[i].handle);
    if (landed(s)) {
      pick = i;
      break;
    }
    if (s == ipc::SlotState::Failed) drop_failed(i);                   // throws ExpertUnavailable
    if (s != ipc::SlotState::Loading) client_->wait(window_[i].handle, 0);  // stale: throws the reason
  }
  if (!landed(client_->state(window_[pick].handle)))
    wait_alive(window_[pick].handle, experts_[window_[pick].index], ipc::ExpertStoreClient::Until::Landed);
  // Pinned, so from LOADING the word moves on to CHECKING, READY or FAILED (only a FAILED slot
  // may then be read again, under a new generation: stale, thrown by wait(0) in the loop above
  // on the next call).
  const ipc::SlotState picked = client_->state(window_[pick].handle);
  if (picked == ipc::SlotState::Failed) drop_failed(pick);
  window_[pick].unchecked = picked != ipc::SlotState::Ready;
  handed_unchecked_ += window_[pick].unchecked;
  const Fetched first = window_[pick];
  in_use_.push_back(first);
  window_.erase(window_.begin() + ptrdiff_t(pick));
  timeline::instant("expert_ready", "compute", layer_, experts_[first.index]);
  try {
    out[k++] = {int(first.index), view_of(layer_, experts_[first.index], first.handle)};
  } catch (const Error& e) {  // a slot whose header is not the record asked for: that record's fault
    throw ExpertUnavailable(layer_, experts_[first.index], e.what());
  }
  // Then any others READY now, without waiting. One whose header is wrong stays in the window:
  // it comes first in the next call, which reports it (the group handed out here is intact).
  // While experts are still to be fetched, at most half the window: the rest is pinned for
  // reads that land while the group computes (the refill comes once half is free).
  const size_t most = next_fetch_ < experts_.size() ? std::max<size_t>(1, window_cap_ / 2) : out.size();
  for (size_t i = 0; i < window_.size() && k < std::min(most, out.size());) {
    Fetched f = window_[i];
    const ipc::SlotState s = client_->state(f.handle);
    if (!landed(s)) {
      ++i;
      continue;
    }
    f.unchecked = s == ipc::SlotState::Checking;
    ExpertView v;
    try {
      v = view_of(layer_, experts_[f.index], f.handle);
    } catch (const Error&) {
      break;
    }
    window_.erase(window_.begin() + ptrdiff_t(i));
    in_use_.push_back(f);
    handed_unchecked_ += f.unchecked;
    out[k++] = {int(f.index), v};
    timeline::instant("expert_ready", "compute", layer_, experts_[f.index]);
  }
  return k;
}

void IodExperts::drop_failed(size_t i) {
  // iod published FAILED with its reason (a read error, a checksum mismatch): only this expert
  // is lost. It leaves the window, its slot goes back, and the batch goes on with the rest.
  const Fetched f = window_[i];
  window_.erase(window_.begin() + ptrdiff_t(i));
  to_release_.push_back(f.handle);
  throw ExpertUnavailable(layer_, experts_[f.index], failure_reason(experts_[f.index], f.handle));
}

std::string IodExperts::failure_reason(int expert, ipc::SlotHandle h) const {
  try {
    client_->wait(h, 0);  // FAILED: throws with the reason iod wrote; stale: says so
  } catch (const Error& e) {
    return e.what();
  }
  return "iod: layer " + std::to_string(layer_) + " expert " + std::to_string(expert) + " failed";
}

void IodExperts::end_layer() {
  // A fetch still unanswered (the layer ended before its first next_ready: an error on the
  // way) pinned slots that must go back: take its answer so they are released below.
  if (pending_count_ > 0) {
    try {
      finish_refill();
    } catch (...) {  // no pins came of it (or the connection is gone, and its pins with it)
      pending_count_ = 0;
    }
  }
  // Every expert handed out: the layer ran to its end (else an error ends it part way).
  const bool completed = layer_ >= 0 && next_fetch_ == experts_.size() && window_.empty();
  if (unpinned_) {  // nothing of it is pinned
    in_use_.clear();
    window_.clear();
    unpinned_ = false;
  }
  for (const Fetched& f : in_use_) to_release_.push_back(f.handle);
  in_use_.clear();
  for (const Fetched& f : window_) to_release_.push_back(f.handle);
  window_.clear();
  // The pins go back with the next message: the lookahead hint the model sends right after a
  // layer (prefetch above: one message instead of a release and a hint, and the hint reads into
  // these slots while the next attention runs, which at a small budget is the only overlap of
  // reads with compute), else the next layer's fetch. After the token's last MoE layer no hint
  // follows until the next step, which may be a long idle, and a layer an error ended is
  // followed by nothing soon: those go back at once.
  const bool hint_follows = completed && layer_ != last_moe_layer_;
  if (!dead_ && !to_release_.empty() && !hint_follows && client_->release_async(to_release_)) to_release_.clear();
  // The unpinned uses go to iod at a pass's end once they span kTouchPasses passes or the
  // oldest waited kTouchDelay: one message in 16 tokens while decoding fast, a bounded lag slow.
  if (completed && layer_ == last_moe_layer_ && !uses_.empty()) {
    uses_.end_pass();
    if (uses_.passes() >= ipc::kTouchPasses || Clock::now() - uses_.first_added() >= touch_delay_) send_uses(false);
  }
  experts_.clear();
  lost_.clear();  // a layer an error ended: what was lost went with it
  next_fetch_ = 0;
  layer_ = -1;
}

ExpertSourceStats IodExperts::stats() {
  flush_uses();  // answered after the touch (same connection, in order): counted (dead: dropped, counted so)
  return stats::from_json<ExpertSourceStats>(client_->stats());
}

}  // namespace waste
