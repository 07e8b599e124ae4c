// The store's branch for a read a dead io_uring abandoned, driven in-process on a tiny
// synthetic container: the engine's test hook abandons the first read it takes (the ring dies
// before submitting it), so exactly one known read is abandoned. The cache must forget that
// key (a later fetch reads it into another slot) and quarantine the slot for good (never
// handed out again, not counted as usable), with the count in stats.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "iod/store.h"
#include "shared/container/reader.h"
#include "shared/ipc/segment_layout.h"
#include "shared/util/error.h"
#include "tools/synth/synth.h"
#include "tests/skip.h"
#include "tests/support/temp_dir.h"

using namespace waste;
using namespace waste::iod;

namespace {

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
uint64_t settle(const Store& st, ipc::SlotHandle h) {
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
void check_ready(const Store& st, const Container& c, uint32_t layer, uint32_t expert, ipc::SlotHandle h) {
  uint64_t w = settle(st, h);
  INFO("layer " << layer << " expert " << expert << " slot " << h.slot << ": " << st.segment().entry(h.slot).error);
  REQUIRE(ipc::state_of(w) == ipc::SlotState::Ready);
  const auto* l = c.expert_layer(int(layer));
  std::vector<uint8_t> want(l->layout.stride);
  c.read_record(int(layer), expert, want.data());
  CHECK(std::memcmp(st.segment().slot_data(h.slot), want.data(), want.size()) == 0);
}

std::vector<ipc::SlotHandle> fetch(Store& st, uint64_t conn, uint32_t layer, std::vector<uint32_t> experts,
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

}  // namespace

TEST_CASE("store: a read abandoned by a dead io_uring is forgotten and its slot quarantined") {
  TinyContainer tiny;
  Container c = Container::open(tiny.dir + "/tiny.waste");
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  const uint32_t experts = c.expert_layers()[0].expert_count;
  constexpr uint32_t kSlots = 8;
  REQUIRE(experts >= 3 * kSlots);

  StoreOptions o;
  o.slots = kSlots;
  o.io = "uring";
  o.queue_depth = 4;
  o.policy = "lru";
  o.prewarm = false;
  o.uring_faults.fail_after_records = 1;  // the first read taken ...
  o.uring_faults.abandon_in_flight = true;     // ... is abandoned when the ring dies
  const std::string segment = "waste-unit-iod-" + std::to_string(::getpid());
  if (!kHaveUring) {
    // A build without io_uring refuses the choice by name instead of reading with pread.
    std::string refused;
    try {
      Store st(c, segment, 1, o);
    } catch (const Error& e) {
      refused = e.what();
    }
    CHECK(refused.find("built without io_uring") != std::string::npos);
    waste::test::skip_part("built without io_uring: no ring to abandon a read");
    return;
  }
  Store st(c, segment, 1, o);
  if (st.io_path().rfind("io_uring", 0) != 0) {
    waste::test::skip_part("io_uring unavailable here (" + st.io_path() + ")");
    return;
  }
  const uint64_t conn = st.open_connection();
  ReadsIdle idle(st);

  // Expert 1's read is the first queued, so the one abandoned; 2 and 3 go to the pread pool.
  auto hs = fetch(st, conn, l0, {1, 2, 3});
  const uint32_t bad_slot = hs[0].slot;
  const uint64_t w = settle(st, hs[0]);
  CHECK(ipc::state_of(w) == ipc::SlotState::Failed);
  CHECK(std::string(st.segment().entry(bad_slot).error).find("read abandoned") != std::string::npos);
  check_ready(st, c, l0, 2, hs[1]);
  check_ready(st, c, l0, 3, hs[2]);
  StoreStats s = st.stats();
  CHECK_EQ(s.quarantined_slots, 1u);
  CHECK_EQ(s.failures, 1u);
  CHECK_EQ(s.misses, 3u);
  CHECK_EQ(s.slots_occupied, 2u);  // 2 and 3; the quarantined slot holds no record
  CHECK(s.io_path.find("io_uring failed while serving") != std::string::npos);

  // Demanded again, expert 1 is a miss read into another slot, and comes back intact.
  auto again = fetch(st, conn, l0, {1}, hs);
  CHECK_NE(again[0].slot, bad_slot);
  check_ready(st, c, l0, 1, again[0]);
  s = st.stats();
  CHECK_EQ(s.misses, 4u);
  CHECK_EQ(s.hits, 0u);

  // Cycle many records through the cache (every usable slot reused several times, demand and
  // prefetch): the quarantined slot is never handed out nor read into again.
  std::vector<ipc::SlotHandle> prev = again;
  for (uint32_t x = 4; x + 1 < 3 * kSlots; x += 2) {
    idle.wait();  // so a slot is always evictable for the hint and the fetch
    CHECK_EQ(st.prefetch(conn, l0, std::vector<uint32_t>{x + 1}), 1u);
    auto h = fetch(st, conn, l0, {x}, prev);
    CHECK_NE(h[0].slot, bad_slot);
    check_ready(st, c, l0, x, h[0]);
    prev = h;
  }
  st.release(conn, prev);
  const uint64_t w_after = st.segment().entry(bad_slot).word.load(std::memory_order_acquire);
  CHECK_EQ(w_after, w);  // same generation, still FAILED: nobody touched it

  // The slot no longer counts as usable: kSlots - 1 distinct experts fit, kSlots never do.
  std::vector<uint32_t> all;
  for (uint32_t x = 0; x < kSlots; ++x) all.push_back(x);
  CHECK_THROWS_WITH_AS(st.try_fetch(conn, l0, all, {}), doctest::Contains("can never fit"), Error);
  all.pop_back();
  idle.wait();  // the last prefetches may still be loading (not evictable until done)
  std::optional<std::vector<ipc::SlotHandle>> fit = st.try_fetch(conn, l0, all, {});
  REQUIRE(fit.has_value());
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK_NE((*fit)[i].slot, bad_slot);
    check_ready(st, c, l0, all[i], (*fit)[i]);
  }
  CHECK_EQ(st.stats().quarantined_slots, 1u);
  st.close_connection(conn);
}
