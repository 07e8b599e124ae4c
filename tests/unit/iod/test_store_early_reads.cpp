// A fetch short of slots (at a small budget, a layer's wrong guesses hold slots until their reads
// and checks end) reads the misses that fit at once instead of leaving the disk idle until the
// last slot frees; those records are reserved for it (never a victim) and count as its misses,
// not as hits, when it is answered. Driven in-process on a tiny synthetic container, with every
// record held in its check by the store's test hook so that slots stay busy on cue.
#include <doctest/doctest.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "iod/store.h"
#include "tests/unit/iod/store_harness.h"

using namespace waste;
using namespace waste::iod;
using namespace waste::iod::test;

namespace {

// Holds every record's payload check (StoreOptions::before_payload_check) until opened.
class CheckHold {
 public:
  void pass() {
    std::unique_lock lock(mu_);
    // Bounded: a test that fails before opening must not hang the store's shutdown.
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return open_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

TEST_CASE("store: a fetch short of slots reads the misses that fit at once and keeps them for itself") {
  TinyContainer tiny;
  Container c = Container::open(tiny.dir + "/tiny.waste");
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  REQUIRE(c.expert_layers()[0].expert_count >= 24);
  CheckHold hold;
  StoreOptions o;
  o.slots = 4;
  o.policy = "lru";
  o.prewarm = false;
  o.before_payload_check = [&] { hold.pass(); };
  Store st(c, "waste-unit-iod-early-" + std::to_string(::getpid()), 1, o);
  struct OpenAtEnd {
    CheckHold& h;
    ~OpenAtEnd() { h.open(); }
  } open_at_end{hold};  // declared after the store: opens before the store stops
  const uint64_t conn = st.open_connection(), other = st.open_connection();
  ReadsIdle idle(st);

  // Two guesses whose reads are held: their slots are busy.
  CHECK_EQ(st.prefetch(conn, l0, std::vector<uint32_t>{10, 11}), 2u);
  // Three misses, two free slots: the fetch must wait, and reads two of them meanwhile.
  CHECK_FALSE(st.try_fetch(conn, l0, std::vector<uint32_t>{1, 2, 3}, {}).has_value());
  StoreStats s = st.stats();
  CHECK_EQ(s.misses, 2u);
  CHECK_EQ(s.hits, 0u);
  CHECK_EQ(s.slots_occupied, 4u);
  CHECK_EQ(s.in_flight, 4u);
  CHECK_EQ(s.prefetch_issued, 2u);  // the early reads are demands, not guesses
  // One connection reserves at a time: another's fetch short of slots starts nothing.
  CHECK_FALSE(st.try_fetch(other, l0, std::vector<uint32_t>{5}, {}).has_value());
  CHECK_EQ(st.stats().misses, 2u);

  hold.open();
  idle.wait();
  // Every read is done. The guesses are evictable, the early reads are not: a hint for three
  // more records gets the guesses' two slots and no more.
  CHECK_EQ(st.prefetch(other, l0, std::vector<uint32_t>{20, 21, 22}), 2u);
  idle.wait();

  // The fetch fits now (a hint's slot for expert 3): answered with the early reads' records as
  // they are (no read again), every record intact, three misses and no hit.
  const auto hs = st.try_fetch(conn, l0, std::vector<uint32_t>{1, 2, 3}, {}, false);
  REQUIRE(hs.has_value());
  REQUIRE_EQ(hs->size(), 3u);
  for (size_t i = 0; i < 3; ++i) check_ready(st, c, l0, uint32_t(i + 1), (*hs)[i]);
  s = st.stats();
  CHECK_EQ(s.misses, 3u);
  CHECK_EQ(s.hits, 0u);
  const uint64_t record = c.expert_layers()[0].layout.stride;
  CHECK_EQ(s.bytes_read, 7 * record);  // 10, 11, 1, 2, 20, 21, 3: each once

  // Answered, the fetch holds nothing but its pins: released, its records are victims again.
  st.release(conn, *hs);
  CHECK_EQ(st.prefetch(other, l0, std::vector<uint32_t>{24, 25, 26}), 3u);
  idle.wait();
  st.close_connection(conn);
  st.close_connection(other);
}

TEST_CASE("store: a fetch that waited and was given up leaves no reservation behind") {
  TinyContainer tiny;
  Container c = Container::open(tiny.dir + "/tiny.waste");
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  CheckHold hold;
  StoreOptions o;
  o.slots = 4;
  o.policy = "lru";
  o.prewarm = false;
  o.before_payload_check = [&] { hold.pass(); };
  Store st(c, "waste-unit-iod-early2-" + std::to_string(::getpid()), 1, o);
  struct OpenAtEnd {
    CheckHold& h;
    ~OpenAtEnd() { h.open(); }
  } open_at_end{hold};
  const uint64_t conn = st.open_connection(), other = st.open_connection();
  ReadsIdle idle(st);
  CHECK_EQ(st.prefetch(other, l0, std::vector<uint32_t>{10, 11, 12}), 3u);
  CHECK_FALSE(st.try_fetch(conn, l0, std::vector<uint32_t>{1, 2}, {}).has_value());  // reads 1 now
  hold.open();
  idle.wait();
  SUBCASE("the connection closes") { st.close_connection(conn); }
  SUBCASE("the connection fetches anew") {
    // Four records, four slots: they fit only with expert 1's slot a victim again.
    const auto hs = st.try_fetch(conn, l0, std::vector<uint32_t>{3, 4, 5, 6}, {});
    REQUIRE(hs.has_value());
    st.release(conn, *hs);
  }
  // Expert 1's slot is a victim like any other now: four new records fit in the four slots.
  idle.wait();
  CHECK_EQ(st.prefetch(other, l0, std::vector<uint32_t>{24, 25, 26, 27}), 4u);
  idle.wait();
}

TEST_CASE("store: the records a waiting fetch found cached are not the victims of its early reads") {
  TinyContainer tiny;
  Container c = Container::open(tiny.dir + "/tiny.waste");
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  CheckHold hold;
  StoreOptions o;
  o.slots = 5;
  o.policy = "lru";
  o.prewarm = false;
  o.before_payload_check = [&] { hold.pass(); };
  Store st(c, "waste-unit-iod-early3-" + std::to_string(::getpid()), 1, o);
  struct OpenAtEnd {
    CheckHold& h;
    ~OpenAtEnd() { h.open(); }
  } open_at_end{hold};
  const uint64_t conn = st.open_connection();
  ReadsIdle idle(st);
  hold.open();
  // Expert 9 cached first (the least recently used), then 8.
  st.release(conn, fetch(st, conn, l0, {9}));
  idle.wait();
  st.release(conn, fetch(st, conn, l0, {8}));
  idle.wait();
  // Two guesses whose reads are held: two slots busy, one free.
  hold.close();
  CHECK_EQ(st.prefetch(conn, l0, std::vector<uint32_t>{10, 11}), 2u);
  // Three misses and 9, a hit: one free slot and 8's are all it may take. Its second early read
  // needs a victim, and the least recently used record is its own 9: it must take 8.
  CHECK_FALSE(st.try_fetch(conn, l0, std::vector<uint32_t>{1, 2, 3, 9}, {}).has_value());
  CHECK_EQ(st.stats().misses, 4u);  // 9, 8, then 1 and 2 early
  hold.open();
  idle.wait();
  // The held guesses' slots: the fetch fits, 9 a hit, nothing read twice.
  const auto hs = st.try_fetch(conn, l0, std::vector<uint32_t>{1, 2, 3, 9}, {}, false);
  REQUIRE(hs.has_value());
  const std::vector<uint32_t> want{1, 2, 3, 9};
  for (size_t i = 0; i < want.size(); ++i) check_ready(st, c, l0, want[i], (*hs)[i]);
  const StoreStats s = st.stats();
  CHECK_EQ(s.hits, 1u);
  CHECK_EQ(s.misses, 5u);
  CHECK_EQ(s.bytes_read, 7 * c.expert_layers()[0].layout.stride);  // 9, 8, 10, 11, 1, 2, 3
  st.release(conn, *hs);
}
