#include "shared/ipc/expert_store_client.h"

#include "shared/ipc/rpc_call.h"

#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <kj/exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "proto/expert_store.capnp.h"
#include "shared/ipc/shm_segment.h"
#include "shared/stats/capnp.h"
#include "shared/stats/json.h"
#include "shared/stats/store_stats.h"
#include "shared/util/error.h"

namespace waste::ipc {

struct ExpertStoreClient::Impl {
  // An unanswered hint. The promise is kept, not dropped: dropping a capnp RemotePromise
  // cancels the call. `done` is set by the promise's own continuation; the promise is
  // destroyed later, by reap_hints (never from inside its continuation).
  struct Hint {
    kj::Maybe<kj::Promise<void>> promise;
    bool done = false;
  };
  std::string socket_path;
  int64_t call_timeout_ms;
  capnp::EzRpcClient rpc;
  proto::ExpertStore::Client store;
  ShmSegment segment;
  HintStats hint_stats;
  // Sized once at construction (hint_capacity); declared after rpc and store so that pending
  // hints are destroyed (cancelled) while the connection still exists.
  std::vector<Hint> hints;
  // The fetch sent by fetch_start, not yet answered (declared after rpc: cancelled first).
  kj::Maybe<kj::Promise<capnp::Response<proto::ExpertStore::FetchResults>>> pending_fetch;
  uint32_t pending_layer = 0;
  size_t pending_count = 0;
  Impl(const std::string& path, uint32_t hint_capacity, int64_t timeout_ms)
      : socket_path(path),
        call_timeout_ms(timeout_ms),
        rpc("unix:" + path),
        store(rpc.getMain<proto::ExpertStore>()),
        hints(std::max<uint32_t>(1, hint_capacity)) {  // never resized: a Hint does not move
    hint_stats.capacity = uint32_t(hints.size());
  }
  // A call's answer, within the deadline.
  template <typename T>
  T wait(kj::Promise<T>&& p) {
    try {
      T answer = wait_within(kj::mv(p), rpc.getWaitScope(), rpc.getIoProvider().getTimer(), call_timeout_ms);
      ++answers;
      return answer;
    } catch (const kj::Exception& e) {
      if (e.getType() != kj::Exception::Type::DISCONNECTED) ++answers;  // iod refused: it answered
      throw;
    }
  }
  uint64_t answers = 0;  // calls iod answered (an error it sent back included: it was there)
  // Runs as a hint's continuation (inside the event loop).
  void hint_answered(size_t i, const kj::Exception* error) {
    hints[i].done = true;
    --hint_stats.outstanding;
    if (!error || error->getType() != kj::Exception::Type::DISCONNECTED) ++answers;
    if (error && error->getType() == kj::Exception::Type::DISCONNECTED) hint_stats.disconnected = true;
    if (error) {
      ++hint_stats.failed;
      hint_stats.last_error = error->getDescription().cStr();
    }
  }
  // Sends one call without waiting for its answer, keeping its promise in a free entry of the
  // bounded `hints` container (dropping it would cancel the call). false: every entry is taken
  // (nothing sent). Never throws: errors are counted in hint_stats.
  template <typename Request>
  bool send_one_way(Request& req) noexcept {
    reap_hints();
    if (hint_stats.outstanding >= hints.size()) return false;
    size_t i = 0;
    while (hints[i].promise != nullptr) ++i;  // a free entry exists: outstanding < size
    const auto failed = [this](const char* what) {
      ++hint_stats.failed;
      hint_stats.last_error = what;
    };
    try {
      Impl* self = this;
      kj::Promise<void> p = req.send()
                                .then([self, i](auto&&) { self->hint_answered(i, nullptr); },
                                      [self, i](kj::Exception&& e) { self->hint_answered(i, &e); })
                                .eagerlyEvaluate(nullptr);
      hints[i].promise = kj::mv(p);
      ++hint_stats.outstanding;
      ++hint_stats.sent;
    } catch (const kj::Exception& e) {
      failed(e.getDescription().cStr());
      return true;
    } catch (const std::exception& e) {
      failed(e.what());
      return true;
    }
    try {
      // Cap'n Proto writes the call when the event loop turns: turn it now (without blocking),
      // or the call would only leave with the next fetch. Earlier calls' replies are taken too.
      rpc.getWaitScope().poll();
    } catch (const kj::Exception& e) {
      failed(e.getDescription().cStr());
    } catch (const std::exception& e) {
      failed(e.what());
    }
    return true;
  }
  void reap_hints() {
    for (Hint& h : hints)
      if (h.done) {
        h.promise = nullptr;
        h.done = false;
      }
  }
};

namespace {

// Every RPC error names the daemon's socket.
template <typename F>
auto call(const std::string& socket, const char* what, F&& f) -> decltype(f()) {
  return rpc_call("iod " + socket, what, std::forward<F>(f));
}

template <typename Builder>
void fill_handles(Builder list, std::span<const SlotHandle> hs) {
  for (size_t i = 0; i < hs.size(); ++i) {
    list[uint32_t(i)].setSlot(hs[i].slot);
    list[uint32_t(i)].setGeneration(hs[i].generation);
  }
}

}  // namespace

std::optional<Error> probe_iod(const std::string& socket_path, int64_t timeout_ms) {
  try {
    call(socket_path, "stats", [&] {
      capnp::EzRpcClient rpc("unix:" + socket_path);
      auto store = rpc.getMain<proto::ExpertStore>();
      wait_within(store.statsRequest().send(), rpc.getWaitScope(), rpc.getIoProvider().getTimer(), timeout_ms);
      return 0;
    });
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(e.what());
  }
}

ExpertStoreClient::ExpertStoreClient(const std::string& socket_path, uint64_t container_id, uint32_t hint_capacity,
                                     int64_t call_timeout_ms) {
  call(socket_path, "connect", [&] {
    impl_ = std::make_unique<Impl>(socket_path, hint_capacity, call_timeout_ms);
    auto req = impl_->store.attachRequest();
    req.setContainerId(container_id);
    auto resp = impl_->wait(req.send());
    auto s = resp.getSegment();
    info_.segment_name = s.getName().cStr();
    info_.layout.slot_count = s.getSlotCount();
    info_.layout.slot_bytes = s.getSlotBytes();
    info_.layout.slot_table_offset = s.getSlotTableOffset();
    info_.layout.slots_offset = s.getSlotsOffset();
    info_.layout.total_bytes = s.getBytes();
    info_.instance_id = s.getInstanceId();
    info_.container_id = s.getContainerId();
    require(s.getLayoutVersion() == kSegmentVersion,
            "iod " + socket_path + ": segment layout version " + std::to_string(s.getLayoutVersion()) +
                ", this build reads " + std::to_string(kSegmentVersion));
    return 0;
  });
  impl_->segment = ShmSegment::open_read_only(info_.segment_name, info_.layout, container_id);
}

ExpertStoreClient::~ExpertStoreClient() = default;

std::vector<SlotHandle> ExpertStoreClient::fetch(uint32_t layer, std::span<const uint32_t> experts,
                                                 std::span<const SlotHandle> releases) {
  fetch_start(layer, experts, releases);
  return fetch_finish();
}

void ExpertStoreClient::fetch_start(uint32_t layer, std::span<const uint32_t> experts,
                                    std::span<const SlotHandle> releases) {
  call(impl_->socket_path, "fetch", [&] {
    require(impl_->pending_fetch == nullptr, "iod " + impl_->socket_path + ": fetch of layer " +
                                                 std::to_string(layer) + " while the fetch of layer " +
                                                 std::to_string(impl_->pending_layer) + " is unanswered");
    auto req = impl_->store.fetchRequest();
    req.setLayer(layer);
    auto ex = req.initExperts(uint32_t(experts.size()));
    for (size_t i = 0; i < experts.size(); ++i) ex.set(uint32_t(i), experts[i]);
    fill_handles(req.initReleases(uint32_t(releases.size())), releases);
    impl_->pending_fetch = req.send().eagerlyEvaluate(nullptr);
    impl_->pending_layer = layer;
    impl_->pending_count = experts.size();
    // Cap'n Proto writes the call when the event loop turns: turn it now (without blocking),
    // so iod works on it while the caller computes.
    impl_->rpc.getWaitScope().poll();
    return 0;
  });
}

bool ExpertStoreClient::fetch_pending() const { return impl_->pending_fetch != nullptr; }

std::vector<SlotHandle> ExpertStoreClient::fetch_finish() {
  return call(impl_->socket_path, "fetch", [&] {
    kj::Promise<capnp::Response<proto::ExpertStore::FetchResults>> p = nullptr;
    KJ_IF_MAYBE (pending, impl_->pending_fetch) {
      p = kj::mv(*pending);
    } else {
      throw Error("iod " + impl_->socket_path + ": fetch_finish without a fetch_start");
    }
    impl_->pending_fetch = nullptr;
    const uint32_t layer = impl_->pending_layer;
    const size_t count = impl_->pending_count;
    auto resp = impl_->wait(kj::mv(p));
    // Callers pair handles[i] with experts[i]: a reply of another length is a protocol error.
    auto handles = resp.getHandles();
    require(handles.size() == count, "iod " + impl_->socket_path + ": fetch of " + std::to_string(count) +
                                         " experts of layer " + std::to_string(layer) + " returned " +
                                         std::to_string(handles.size()) + " handles");
    std::vector<SlotHandle> out;
    out.reserve(handles.size());
    for (auto h : handles) out.push_back({h.getSlot(), h.getGeneration()});
    return out;
  });
}

uint32_t ExpertStoreClient::prefetch(uint32_t layer, std::span<const uint32_t> experts) {
  return call(impl_->socket_path, "prefetch", [&] {
    auto req = impl_->store.prefetchRequest();
    req.setLayer(layer);
    auto ex = req.initExperts(uint32_t(experts.size()));
    for (size_t i = 0; i < experts.size(); ++i) ex.set(uint32_t(i), experts[i]);
    return impl_->wait(req.send()).getIssued();
  });
}

bool ExpertStoreClient::prefetch_async(uint32_t layer, std::span<const uint32_t> experts,
                                       std::span<const SlotHandle> releases) noexcept {
  try {
    auto req = impl_->store.prefetchRequest();
    req.setLayer(layer);
    auto ex = req.initExperts(uint32_t(experts.size()));
    for (size_t k = 0; k < experts.size(); ++k) ex.set(uint32_t(k), experts[k]);
    fill_handles(req.initReleases(uint32_t(releases.size())), releases);
    if (impl_->send_one_way(req)) return true;
  } catch (...) {  // building the request failed (out of memory): a hint may be lost
  }
  ++impl_->hint_stats.dropped;
  return false;
}

bool ExpertStoreClient::release_async(std::span<const SlotHandle> handles) noexcept {
  try {
    auto req = impl_->store.releaseRequest();
    fill_handles(req.initHandles(uint32_t(handles.size())), handles);
    return impl_->send_one_way(req);
  } catch (...) {
    return false;  // the caller keeps the handles and releases them another way
  }
}

namespace {

void fill_uses(capnp::List<proto::LayerUse>::Builder list, std::span<const LayerUse> uses) {
  for (size_t i = 0; i < uses.size(); ++i) {
    list[uint32_t(i)].setLayer(uses[i].layer);
    auto ex = list[uint32_t(i)].initExperts(uint32_t(uses[i].experts.size()));
    for (size_t k = 0; k < uses[i].experts.size(); ++k) ex.set(uint32_t(k), uses[i].experts[k]);
  }
}

}  // namespace

bool ExpertStoreClient::touch_async(std::span<const LayerUse> uses) noexcept {
  try {
    auto req = impl_->store.touchRequest();
    fill_uses(req.initUses(uint32_t(uses.size())), uses);
    return impl_->send_one_way(req);
  } catch (...) {
    return false;
  }
}

void ExpertStoreClient::touch(std::span<const LayerUse> uses) {
  call(impl_->socket_path, "touch", [&] {
    auto req = impl_->store.touchRequest();
    fill_uses(req.initUses(uint32_t(uses.size())), uses);
    impl_->wait(req.send());
    return 0;
  });
}

const HintStats& ExpertStoreClient::hint_stats() const { return impl_->hint_stats; }
uint64_t ExpertStoreClient::answers() const { return impl_->answers; }

void ExpertStoreClient::release(std::span<const SlotHandle> handles) {
  call(impl_->socket_path, "release", [&] {
    auto req = impl_->store.releaseRequest();
    fill_handles(req.initHandles(uint32_t(handles.size())), handles);
    impl_->wait(req.send());
    return 0;
  });
}

nlohmann::json ExpertStoreClient::stats() {
  return call(impl_->socket_path, "stats", [&] {
    auto resp = impl_->wait(impl_->store.statsRequest().send());
    auto s = resp.getStats();
    nlohmann::json j = stats::to_json(stats::from_capnp<stats::StoreStats>(s));
    j["io_path"] = s.getIoPath().cStr();
    j["policy"] = s.getPolicy().cStr();
    j["layers"] = nlohmann::json::array();
    for (auto l : s.getLayers()) {
      nlohmann::json layer = stats::to_json(stats::from_capnp<stats::LayerCounters>(l));
      layer["layer"] = l.getLayer();
      j["layers"].push_back(std::move(layer));
    }
    return j;
  });
}

void ExpertStoreClient::trace_start(const std::string& path) {
  call(impl_->socket_path, "traceStart", [&] {
    auto req = impl_->store.traceStartRequest();
    req.setPath(path);
    impl_->wait(req.send());
    return 0;
  });
}

uint64_t ExpertStoreClient::trace_stop() {
  return call(impl_->socket_path, "traceStop", [&] {
    return impl_->wait(impl_->store.traceStopRequest().send()).getRequests();
  });
}

const uint8_t* ExpertStoreClient::slot_data(uint32_t slot) const {
  if (slot >= info_.layout.slot_count)  // the message built only then: this runs several times per expert used
    throw Error("iod " + impl_->socket_path + ": slot " + std::to_string(slot) + " out of range (" +
                std::to_string(info_.layout.slot_count) + " slots)");
  return impl_->segment.slot_data(slot);
}

SlotState ExpertStoreClient::state(SlotHandle h) const {
  slot_data(h.slot);  // bounds the slot index (handles come from the peer)
  uint64_t w = impl_->segment.entry(h.slot).word.load(std::memory_order_acquire);
  return generation_of(w) == h.generation ? state_of(w) : SlotState::Free;
}

bool ExpertStoreClient::intact(SlotHandle h) const {
  slot_data(h.slot);  // bounds the slot index
  // The fence orders every earlier read of the slot's bytes before the word's load (the reader's
  // half of a sequence lock; iod's half: the word changes before the bytes do).
  std::atomic_thread_fence(std::memory_order_acquire);
  return impl_->segment.entry(h.slot).word.load(std::memory_order_relaxed) == make_state_word(SlotState::Ready, h.generation);
}

void ExpertStoreClient::ready_slots(std::vector<ReadySlot>& out) const {
  for (uint32_t s = 0; s < info_.layout.slot_count; ++s) {
    const SlotEntry& e = impl_->segment.entry(s);
    const uint64_t w = e.word.load(std::memory_order_acquire);  // READY: layer and expert were written before it
    if (state_of(w) != SlotState::Ready) continue;
    const uint32_t layer = e.layer, expert = e.expert;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.word.load(std::memory_order_relaxed) != w) continue;  // changed while read
    out.push_back({{s, generation_of(w)}, layer, expert});
  }
}

const uint8_t* ExpertStoreClient::wait(SlotHandle h, int64_t timeout_ns, Until until) const {
  const uint8_t* data = slot_data(h.slot);
  const SlotEntry& e = impl_->segment.entry(h.slot);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns < 0 ? 0 : timeout_ns);
  for (;;) {
    uint64_t w = e.word.load(std::memory_order_acquire);
    require(generation_of(w) == h.generation,
            "iod: stale handle: slot " + std::to_string(h.slot) + " generation " + std::to_string(h.generation) +
                " now holds generation " + std::to_string(generation_of(w)));
    switch (state_of(w)) {
      case SlotState::Ready: return data;
      case SlotState::Failed: {
        // iod wrote the reason before publishing FAILED (release/acquire on the word).
        std::string why(e.error, strnlen(e.error, kSlotErrorBytes));
        throw Error("iod: fetch of layer " + std::to_string(e.layer) + " expert " + std::to_string(e.expert) +
                    " failed: " + why);
      }
      case SlotState::Free:
        throw Error("iod: slot " + std::to_string(h.slot) + " is FREE (handle not from a fetch)");
      case SlotState::Checking:
        if (until == Until::Landed) return data;
        break;
      case SlotState::Loading: break;
    }
    // A word this build does not know (the segment version says both sides agree): no switch
    // default above, so the compiler names a state added without a case here.
    if (!in_progress(state_of(w)))
      throw Error("iod: slot " + std::to_string(h.slot) + " has unknown state " + std::to_string(uint32_t(state_of(w))));
    int64_t left = -1;
    if (timeout_ns >= 0) {
      left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now()).count();
      require(left > 0, "iod: timed out waiting for slot " + std::to_string(h.slot));
    }
    futex_wait_word(e.word, w, left);
  }
}

}  // namespace waste::ipc
