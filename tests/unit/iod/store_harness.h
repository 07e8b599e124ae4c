// What the store's in-process tests share: a tiny synthetic container, waits on a slot's read
// and on the store's reads, and a fetch that must succeed at once.
#pragma once
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "iod/store.h"
#include "shared/container/reader.h"
#include "shared/ipc/segment_layout.h"
#include "tools/synth/synth.h"
#include "tests/support/temp_dir.h"

namespace waste::iod::test {

// A synthetic tiny Kimi-Linear container in a temporary directory, removed at the end.
struct TinyContainer {
  waste::test::TempDir tmp{"waste-unit-iod"};
  std::string dir = tmp.path();
  TinyContainer() {
    SynthOptions o;
    o.preset = "tiny-kimi-linear";
    o.out = dir + "/tiny.waste";
    o.progress = false;
    synthesize(o);
  }
};

// Waits (bounded) until the handle's slot leaves LOADING and CHECKING; returns its state word.
inline uint64_t settle(const Store& st, ipc::SlotHandle h) {
  const ipc::SlotEntry& e = st.segment().entry(h.slot);
  for (int i = 0; i < 1000; ++i) {
    uint64_t w = e.word.load(std::memory_order_acquire);
    REQUIRE_EQ(ipc::generation_of(w), h.generation);
    if (!ipc::in_progress(ipc::state_of(w))) return w;
    ipc::futex_wait_word(e.word, w, 10'000'000);  // 10 ms per round, 10 s in all
  }
  FAIL("slot " << h.slot << " still loading after 10 s");
  return 0;
}

// The slot is READY and holds exactly the container's record.
inline void check_ready(const Store& st, const Container& c, uint32_t layer, uint32_t expert, ipc::SlotHandle h) {
  uint64_t w = settle(st, h);
  INFO("layer " << layer << " expert " << expert << " slot " << h.slot << ": " << st.segment().entry(h.slot).error);
  REQUIRE(ipc::state_of(w) == ipc::SlotState::Ready);
  const auto* l = c.expert_layer(int(layer));
  std::vector<uint8_t> want(l->layout.stride);
  c.read_record(int(layer), expert, want.data());
  CHECK(std::memcmp(st.segment().slot_data(h.slot), want.data(), want.size()) == 0);
}

inline std::vector<ipc::SlotHandle> fetch(Store& st, uint64_t conn, uint32_t layer, std::vector<uint32_t> experts,
                                   std::span<const ipc::SlotHandle> releases = {}) {
  auto hs = st.try_fetch(conn, layer, experts, releases);
  REQUIRE(hs.has_value());  // nothing else is pinned or loading long in this test
  REQUIRE_EQ(hs->size(), experts.size());
  return *hs;
}

// Waits until the store has no read queued or in flight, woken by its slots_changed signal
// (sent after every read completes).
class ReadsIdle {
 public:
  explicit ReadsIdle(Store& st) : st_(st) {
    st_.set_slots_changed([this] {
      std::lock_guard lock(mu_);
      ++signals_;
      cv_.notify_all();
    });
  }
  ~ReadsIdle() { st_.set_slots_changed({}); }
  void wait() {
    for (;;) {
      uint64_t seen;
      {
        std::lock_guard lock(mu_);
        seen = signals_;
      }
      // stats() takes the store's lock, which the signal holds while taking mu_: never
      // call it with mu_ held. A read ending after `seen` was taken bumps signals_.
      if (st_.stats().in_flight == 0) return;
      std::unique_lock lock(mu_);
      REQUIRE(cv_.wait_for(lock, std::chrono::seconds(10), [&] { return signals_ != seen; }));
    }
  }

 private:
  Store& st_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t signals_ = 0;
};


}  // namespace waste::iod::test
