// PendingUses (compute/experts/pending_uses.h): the unpinned uses compute sends iod in one touch.
// One entry per layer batch, in order; two passes of the same layer stay two entries (iod counts
// a token per pass); take_layer gives back only the open batch's, and a send leaves the lists'
// storage for the next passes.
#include <doctest/doctest.h>

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

TEST_CASE("PendingUses: clear empties it and the next uses start afresh") {
  PendingUses u;
  u.start_layer();
  u.add(1, 1);
  u.end_pass();
  const auto first = u.first_added();
  u.clear();
  CHECK(u.empty());
  CHECK_EQ(u.passes(), 0u);
  CHECK_EQ(u.experts(), 0u);
  u.add(1, 2);  // reuses the entry: only the new use is there
  REQUIRE_EQ(u.entries().size(), 1u);
  CHECK_EQ(u.entries()[0].experts, std::vector<uint32_t>{2});
  CHECK(u.first_added() >= first);
}
