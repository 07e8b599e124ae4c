#include <doctest/doctest.h>

#include "iod/io/read_queue.h"

using waste::iod::ReadJob;
using waste::iod::ReadQueue;

namespace {
ReadJob job(uint32_t slot, uint64_t generation) {
  ReadJob j;
  j.slot = slot;
  j.generation = generation;
  return j;
}
}  // namespace

TEST_CASE("demand reads leave before prefetch reads") {
  ReadQueue q(3);
  q.push(job(0, 1), false);
  q.push(job(1, 1), true);
  q.push(job(2, 1), false);
  CHECK(q.queued() == 3);
  CHECK(q.try_pop()->slot == 1);
  CHECK(q.try_pop()->slot == 0);
  CHECK(q.try_pop()->slot == 2);
  CHECK_FALSE(q.try_pop());
  CHECK(q.queued() == 0);
}

TEST_CASE("a promoted prefetch leaves once, at demand priority") {
  ReadQueue q(2);
  q.push(job(0, 7), false);
  q.push(job(1, 7), false);
  CHECK_FALSE(q.promote(1, 6));  // another generation
  CHECK(q.promote(1, 7));
  CHECK(q.try_pop()->slot == 1);
  CHECK(q.try_pop()->slot == 0);
  CHECK_FALSE(q.try_pop());  // the prefetch copy of slot 1 is skipped
  CHECK_FALSE(q.promote(0, 7));  // already left
}

TEST_CASE("promoted prefetches of one slot, again and again, never overflow the prefetch ring") {
  // Under steady demand the prefetch ring is not drained, so the copies promotion leaves behind
  // must not pile up: every slot sits in it at most once.
  ReadQueue q(2);
  for (uint64_t gen = 1; gen <= 10; ++gen) {
    REQUIRE_NOTHROW(q.push(job(0, gen), false));
    REQUIRE(q.promote(0, gen));
    auto j = q.try_pop();
    REQUIRE(j);
    CHECK(j->slot == 0);
    CHECK(j->generation == gen);
  }
  q.push(job(1, 1), false);
  auto j = q.try_pop();
  REQUIRE(j);
  CHECK(j->slot == 1);
  CHECK_FALSE(q.try_pop());
}

TEST_CASE("a closed queue hands out nothing") {
  ReadQueue q(1);
  q.push(job(0, 1), true);
  q.close();
  CHECK(q.closed());
  CHECK_FALSE(q.try_pop());
  CHECK_FALSE(q.pop_wait());
}
