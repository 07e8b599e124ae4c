#include "compute/experts/iod_experts.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "shared/util/error.h"
#include "shared/util/timeline.h"

namespace waste {

IodExperts::IodExperts(const Container& container, const std::string& socket_path, int liveness_ms)
    : container_(container),
      socket_(socket_path),
      liveness_ms_(std::max(1, liveness_ms)),
      client_(std::make_unique<ipc::ExpertStoreClient>(socket_path, container.container_id())) {
  // Every record must fit a slot (iod sizes slots for the largest layer stride).
  for (const ExpertLayerInfo& l : container_.expert_layers())
    require(l.layout.stride <= client_->info().layout.slot_bytes,
            "iod " + socket_ + ": slots of " + std::to_string(client_->info().layout.slot_bytes) +
                " bytes are smaller than layer " + std::to_string(l.layer) + "'s records");
}

IodExperts::~IodExperts() {
  if (dead_) return;  // no goodbye RPCs to a daemon that is gone (they would only log noise)
  try {
    end_layer();
    flush_releases();
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

ExpertView IodExperts::view_of(int layer, int expert, ipc::SlotHandle h) {
  const ExpertLayerInfo* info = container_.expert_layer(layer);
  require(info != nullptr, container_.dir() + ": layer " + std::to_string(layer) + " has no routed experts");
  const uint8_t* rec = client_->slot_data(h.slot);
  // Header only: iod checked the payload checksum when it read the record.
  const std::string bad = check_record(rec, info->layout, uint32_t(layer), uint32_t(expert), false);
  require(bad.empty(), "iod " + socket_ + ": slot " + std::to_string(h.slot) + ": " + bad);
  return expert_view(rec, info->layout, codebooks(layer));
}

const uint8_t* IodExperts::wait_alive(ipc::SlotHandle h) {
  for (;;) {
    try {
      return client_->wait(h, int64_t(liveness_ms_) * 1'000'000);
    } catch (const Error&) {
      // A timeout leaves the slot LOADING; anything else (failed read, stale handle) is final.
      if (client_->state(h) != ipc::SlotState::Loading) throw;
    }
    // Still loading after liveness_ms: is iod alive? The ping throws naming the socket if not.
    try {
      client_->stats();
    } catch (const Error& e) {
      dead_ = true;
      throw Error(std::string("iod went away while compute waited for an expert: ") + e.what());
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
      if (std::string(e.what()).find("pinned or loading") == std::string::npos ||
          std::chrono::steady_clock::now() > deadline) {
        dead_ = dead_ || !alive();
        throw;
      }
      to_release_.clear();
      std::this_thread::sleep_for(std::chrono::microseconds(attempt < 10 ? 100 : 2000));  // bounded by the deadline
    }
  }
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
  client_->release(r);
}

ExpertView IodExperts::expert(int layer, int expert) {
  require(layer >= 0 && expert >= 0, "iod expert: negative layer or expert");
  const uint32_t e = uint32_t(expert);
  std::vector<ipc::SlotHandle> hs = fetch_retrying(uint32_t(layer), {&e, 1});
  require(hs.size() == 1, "iod " + socket_ + ": fetch returned " + std::to_string(hs.size()) + " handles for 1 expert");
  wait_alive(hs[0]);
  singles_[{layer, expert}] = hs[0];
  return view_of(layer, expert, hs[0]);
}

void IodExperts::release(int layer, int expert) {
  auto it = singles_.find({layer, expert});
  if (it == singles_.end()) return;
  to_release_.push_back(it->second);
  singles_.erase(it);
}

void IodExperts::prefetch(int layer, std::span<const int> experts) {
  if (experts.empty()) return;
  if (dead_) return;
  std::vector<uint32_t> ids(experts.begin(), experts.end());
  timeline::Span span("prefetch_issue", "compute", layer);
  // Fire-and-forget: waiting for iod's answer cost a round trip per layer (~1 ms per token-layer
  // when everything is cached) for a hint whose answer we never use. Its errors are counted by
  // the client, never thrown: a hint must not fail the token (a dead iod fails the next fetch).
  client_->prefetch_async(uint32_t(layer), ids);
}

void IodExperts::fetch_layer(int layer, std::span<const int> experts) {
  end_layer();
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  group_begin_ = group_end_ = 0;
  left_in_group_ = 0;
  if (!experts_.empty()) start_group();
}

void IodExperts::start_group() {
  // Our own pins from the last group/layer go back first (on this same call), so a group
  // may use every slot.
  const size_t cap = std::max<size_t>(1, slot_count());
  group_begin_ = group_end_;
  group_end_ = std::min(experts_.size(), group_begin_ + cap);
  std::vector<uint32_t> ids(experts_.begin() + ptrdiff_t(group_begin_), experts_.begin() + ptrdiff_t(group_end_));
  {
    timeline::Span span("fetch_issue", "compute", layer_);
    handles_ = fetch_retrying(uint32_t(layer_), ids);
  }
  require(handles_.size() == ids.size(), "iod " + socket_ + ": fetch returned " + std::to_string(handles_.size()) +
                                             " handles for " + std::to_string(ids.size()) + " experts");
  handed_.assign(ids.size(), false);
  left_in_group_ = ids.size();
}

int IodExperts::next_ready(ExpertView& view) {
  if (left_in_group_ == 0) {
    if (group_end_ >= experts_.size()) return -1;
    to_release_.insert(to_release_.end(), handles_.begin(), handles_.end());
    handles_.clear();
    start_group();
  }
  // Completion order: the first slot already READY; else wait on the oldest outstanding one.
  size_t pick = handed_.size();
  for (size_t i = 0; i < handed_.size(); ++i) {
    if (handed_[i]) continue;
    const ipc::SlotState s = client_->state(handles_[i]);
    if (s == ipc::SlotState::Ready) {
      pick = i;
      break;
    }
    if (s != ipc::SlotState::Loading) {  // failed or stale: wait() throws the precise reason
      client_->wait(handles_[i], 0);
    }
    if (pick == handed_.size()) pick = i;  // fallback: the first outstanding
  }
  require(pick < handed_.size(), "iod experts: internal error, no outstanding slot");
  if (client_->state(handles_[pick]) != ipc::SlotState::Ready) wait_alive(handles_[pick]);
  handed_[pick] = true;
  --left_in_group_;
  const size_t idx = group_begin_ + pick;
  timeline::instant("expert_ready", "compute", layer_, experts_[idx]);
  view = view_of(layer_, experts_[idx], handles_[pick]);
  return int(idx);
}

void IodExperts::end_layer() {
  to_release_.insert(to_release_.end(), handles_.begin(), handles_.end());
  // Unpinned now, not on the next fetch: the next layer's lookahead hint (sent before its
  // attention) can then read into these slots while that attention runs. At a small budget
  // nothing else is free, so this is the only overlap of reads with compute there.
  if (!dead_ && !to_release_.empty() && client_->release_async(to_release_)) to_release_.clear();
  handles_.clear();
  handed_.clear();
  experts_.clear();
  left_in_group_ = 0;
  group_begin_ = group_end_ = 0;
  layer_ = -1;
}

ExpertSourceStats IodExperts::stats() const {
  const nlohmann::json j = client_->stats();
  ExpertSourceStats s;
  s.hits = j.value("hits", uint64_t(0));
  s.misses = j.value("misses", uint64_t(0));
  s.bytes_read = j.value("bytes_read", uint64_t(0));
  if (j.contains("prefetch")) {
    const auto& p = j["prefetch"];
    s.prefetch_issued = p.value("issued", uint64_t(0));
    s.prefetch_used = p.value("used", uint64_t(0));
    s.prefetch_wasted = p.value("wasted", uint64_t(0));
  }
  return s;
}

}  // namespace waste
