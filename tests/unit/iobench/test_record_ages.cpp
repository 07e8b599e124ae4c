// iobench's cold-record choice (RecordAges) and median: the raw passes of `waste iobench` read
// records the run read longest ago, each once per pass, with the reuse distance in bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "shared/util/error.h"
#include "tools/iobench/record_ages.h"

using namespace waste;
using namespace waste::iobench;

TEST_CASE("note_read returns the bytes read since the record's last read") {
  RecordAges a({4, 2}, {100, 1000});
  CHECK_EQ(a.note_read({0, 1}), -1);  // never read
  CHECK_EQ(a.clock_bytes(), 100u);
  CHECK_EQ(a.note_read({1, 0}), -1);
  CHECK_EQ(a.note_read({0, 2}), -1);
  CHECK_EQ(a.clock_bytes(), 1200u);
  // Since {0,1} was read: {1,0} (1000) and {0,2} (100).
  CHECK_EQ(a.note_read({0, 1}), 1100);
  CHECK_EQ(a.note_read({0, 1}), 0);  // read again at once
  CHECK_THROWS_AS(a.note_read({0, 4}), Error);
  CHECK_THROWS_AS(a.note_read({2, 0}), Error);
  CHECK_THROWS_AS(RecordAges({4, 0}, {100, 100}), Error);
  CHECK_THROWS_AS(RecordAges({4}, {100, 100}), Error);
}

TEST_CASE("coldest takes never-read records first, then the oldest, each once") {
  RecordAges a({3, 3}, {10, 10});
  std::mt19937_64 rng(7);
  // Read four records in this order: {1,2} oldest, then {0,0}, {0,2}, {1,1} newest.
  for (RecordRef r : {RecordRef{1, 2}, RecordRef{0, 0}, RecordRef{0, 2}, RecordRef{1, 1}}) a.note_read(r);
  // 25 bytes -> 3 records of 10: the two never read ({0,1}, {1,0}) in some order, then {1,2}.
  auto picks = a.coldest(25, rng);
  REQUIRE_EQ(picks.size(), 3u);
  std::set<std::pair<uint32_t, uint32_t>> first2 = {{picks[0].bank, picks[0].expert}, {picks[1].bank, picks[1].expert}};
  CHECK_EQ(first2, std::set<std::pair<uint32_t, uint32_t>>{{0, 1}, {1, 0}});
  CHECK_EQ(picks[2], RecordRef{1, 2});
  // More bytes than the container: every record once, oldest-read last-but-ordered.
  auto all = a.coldest(1000, rng);
  REQUIRE_EQ(all.size(), 6u);
  CHECK_EQ(all[2], RecordRef{1, 2});
  CHECK_EQ(all[3], RecordRef{0, 0});
  CHECK_EQ(all[4], RecordRef{0, 2});
  CHECK_EQ(all[5], RecordRef{1, 1});
  // Zero bytes still gives one record (a pass reads at least one).
  CHECK_EQ(a.coldest(0, rng).size(), 1u);
}

TEST_CASE("coldest spreads ties over banks at random") {
  RecordAges a({64, 64, 64, 64}, {4096, 4096, 4096, 4096});
  std::mt19937_64 rng(1);
  auto picks = a.coldest(32 * 4096, rng);
  REQUIRE_EQ(picks.size(), 32u);
  std::set<uint32_t> banks;
  for (auto r : picks) banks.insert(r.bank);
  CHECK_EQ(banks.size(), 4u);  // 32 uniform picks from 4 banks all land in one with p ~ 4 * 4^-32
}

TEST_CASE("like_reuse draws records with the given reuse distances, each once") {
  RecordAges a({2, 2}, {10, 10});
  std::mt19937_64 rng(3);
  // Clock after each read: {0,0} 10, {0,1} 20, {1,0} 30; {1,1} never read. At 30: {0,0} was
  // read 20 bytes ago, {0,1} 10, {1,0} 0.
  for (RecordRef r : {RecordRef{0, 0}, RecordRef{0, 1}, RecordRef{1, 0}}) a.note_read(r);
  // One distance, 11: nearest {0,1} (1 away), then {0,0} (9 away) before {1,0} (11 away).
  auto near11 = a.like_reuse({11}, 20, rng);
  REQUIRE_EQ(near11.size(), 2u);
  CHECK_EQ(near11[0], RecordRef{0, 1});
  CHECK_EQ(near11[1], RecordRef{0, 0});
  // Never read (-1): the coldest first.
  auto never = a.like_reuse({-1}, 20, rng);
  REQUIRE_EQ(never.size(), 2u);
  CHECK_EQ(never[0], RecordRef{1, 1});
  CHECK_EQ(never[1], RecordRef{0, 0});
  // Distance 0 over more bytes than the container: every record once, the newest first.
  auto all = a.like_reuse({0}, 1000, rng);
  REQUIRE_EQ(all.size(), 4u);
  CHECK_EQ(all[0], RecordRef{1, 0});
  CHECK_EQ(all[1], RecordRef{0, 1});
  CHECK_EQ(all[3], RecordRef{1, 1});
  // No distances: the coldest records.
  CHECK_EQ(a.like_reuse({}, 5, rng)[0], RecordRef{1, 1});
}

TEST_CASE("median") {
  CHECK_EQ(median({}), 0.0);
  CHECK_EQ(median({3.0}), 3.0);
  CHECK_EQ(median({5.0, 1.0, 3.0}), 3.0);
  CHECK_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
}
