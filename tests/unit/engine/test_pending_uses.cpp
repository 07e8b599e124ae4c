// PendingUses (compute/experts/pending_uses.h): the unpinned uses compute sends iod in one touch.
// One entry per layer batch, in order; two passes of the same layer stay two entries (iod counts
// a token per pass); take_layer gives back only the open batch's, and a send leaves the lists'
// storage for the next passes.
#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "compute/experts/pending_uses.h"

using namespace waste;

TEST_CASE("PendingUses: one entry per layer batch, two passes of one layer stay two") {
  PendingUses u;
  CHECK(u.empty());
  u.start_layer();
  u.add(1, 5);
  u.add(1, 7);
  u.start_layer();
  u.add(2, 3);
  u.end_pass();
  u.start_layer();
  u.add(1, 9);  // the same layer, the next pass: a new entry
  u.end_pass();
  REQUIRE_EQ(u.entries().size(), 3u);
  CHECK_EQ(u.entries()[0].layer, 1u);
  CHECK_EQ(u.entries()[0].experts, std::vector<uint32_t>{5, 7});
  CHECK_EQ(u.entries()[1].layer, 2u);
  CHECK_EQ(u.entries()[2].layer, 1u);
  CHECK_EQ(u.entries()[2].experts, std::vector<uint32_t>{9});
  CHECK_EQ(u.experts(), 4u);
  CHECK_EQ(u.passes(), 2u);
  // Without start_layer a use of another layer still opens a new entry.
  u.add(3, 1);
  CHECK_EQ(u.entries().size(), 4u);
}

TEST_CASE("PendingUses: take_layer returns only the open batch's uses, if they are that layer's") {
  PendingUses u;
  u.start_layer();
  u.add(4, 1);
  u.add(4, 2);
  CHECK(u.take_layer(5).empty());  // another layer: nothing taken
  CHECK_EQ(u.entries().size(), 1u);
  CHECK_EQ(u.take_layer(4), std::vector<uint32_t>{1, 2});
  CHECK(u.empty());
  // A closed batch is not taken back: the next layer batch began.
  u.start_layer();
  u.add(4, 3);
  u.start_layer();
  CHECK(u.take_layer(4).empty());
  CHECK_EQ(u.experts(), 1u);
}

TEST_CASE("PendingUses: take_layer leaves the earlier layers' entries pending") {
  // As pin_the_rest uses it: the open batch's uses go back, what earlier layers used stays.
  PendingUses u;
  u.start_layer();
  u.add(1, 4);
  u.add(1, 6);
  u.start_layer();
  u.add(2, 8);
  u.add(2, 9);
  CHECK_EQ(u.take_layer(2), std::vector<uint32_t>{8, 9});
  REQUIRE_EQ(u.entries().size(), 1u);
  CHECK_EQ(u.entries()[0].layer, 1u);
  CHECK_EQ(u.experts(), 2u);
  u.add(2, 5);  // a fresh entry with only the new use
  REQUIRE_EQ(u.entries().size(), 2u);
  CHECK_EQ(u.entries()[1].layer, 2u);
  CHECK_EQ(u.entries()[1].experts, std::vector<uint32_t>{5});
}

TEST_CASE("PendingUses: the first use's time stays until a send; clear keeps the lists' storage") {
  PendingUses u;
  u.start_layer();
  for (uint32_t x = 0; x < 64; ++x) u.add(1, x);
  u.end_pass();
  const auto first = u.first_added();
  const uint32_t* storage = u.entries()[0].experts.data();
  const size_t capacity = u.entries()[0].experts.capacity();
  // A later use does not move the time the oldest pending one was added.
  const auto later = PendingUses::Clock::now() + std::chrono::milliseconds(1);
  while (PendingUses::Clock::now() < later) {
  }
  u.start_layer();
  u.add(2, 1);
  CHECK(u.first_added() == first);
  u.clear();
  CHECK(u.empty());
  CHECK_EQ(u.passes(), 0u);
  CHECK_EQ(u.experts(), 0u);
  u.add(1, 2);  // reuses the first entry and its list: only the new use is there
  REQUIRE_EQ(u.entries().size(), 1u);
  CHECK_EQ(u.entries()[0].experts, std::vector<uint32_t>{2});
  CHECK_EQ(u.entries()[0].experts.data(), storage);
  CHECK_EQ(u.entries()[0].experts.capacity(), capacity);
  CHECK(u.first_added() > first);  // the first use after the send starts the clock again
}
