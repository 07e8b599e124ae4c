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
#include "tests/unit/iod/store_harness.h"
#include "shared/container/reader.h"
#include "shared/ipc/segment_layout.h"
#include "shared/util/error.h"
#include "tools/synth/synth.h"
#include "tests/skip.h"
#include "tests/support/temp_dir.h"

using namespace waste;
using namespace waste::iod;

using namespace waste::iod::test;

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
