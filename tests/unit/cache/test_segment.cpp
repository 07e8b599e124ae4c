// The shared-memory segment's read-only open: it must refuse a layout (announced by the iod
// peer) that is not the one segment_layout() gives, before any slot is addressed. And the
// clean-up of a crashed instance's segments by their name prefix.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "shared/ipc/shm_segment.h"
#include "shared/platform/shm.h"
#include "shared/util/error.h"

using namespace waste::ipc;

TEST_CASE("open_read_only accepts the announced layout and refuses an inconsistent one") {
  const std::string name = "waste-unit-segment-" + std::to_string(::getpid());
  const SegmentLayout layout = segment_layout(3, 10000);
  CHECK(layout.slot_bytes == 12288);
  ShmSegment owner = ShmSegment::create(name, layout, 1, 2);
  {
    ShmSegment reader = ShmSegment::open_read_only(name, layout, 2);
    CHECK(reader.slot_count() == 3);
    CHECK(reader.slot_bytes() == 12288);
  }
  SUBCASE("slot size not a 4 KiB multiple") {
    SegmentLayout bad = layout;
    bad.slot_bytes = 5000;
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only(name, bad, 2), doctest::Contains("slot size"), waste::Error);
  }
  SUBCASE("slots past the announced size") {
    SegmentLayout bad = layout;
    bad.slot_count = 1000;  // table and slots would lie far outside the mapping
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only(name, bad, 2), doctest::Contains("inconsistent"), waste::Error);
  }
  SUBCASE("slots offset inside the slot table") {
    SegmentLayout bad = layout;
    bad.slots_offset = bad.slot_table_offset;
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only(name, bad, 2), doctest::Contains("inconsistent"), waste::Error);
  }
  SUBCASE("another container") {
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only(name, layout, 3), doctest::Contains("another container"),
                         waste::Error);
  }
}

TEST_CASE("remove_instance_segments removes every segment of one instance and no other") {
  // Instance ids from the pid, so that parallel runs of this test do not meet.
  const uint64_t mine = 0x5eed000000000000ull | uint64_t(::getpid());
  const uint64_t other = mine ^ 0x00ff000000000000ull;
  const SegmentLayout layout = segment_layout(1, 4096);
  ShmSegment a = ShmSegment::create(segment_name(mine, 1), layout, mine, 1);
  ShmSegment b = ShmSegment::create(segment_name(mine, 2), layout, mine, 2);
  ShmSegment c = ShmSegment::create(segment_name(other, 1), layout, other, 1);
  CHECK_EQ(segment_name(mine, 1).size(), kSegmentNameLength);
  CHECK_EQ(segment_name(mine, 1).rfind(segment_prefix(mine), 0), 0u);
  std::vector<std::string> removed = remove_instance_segments(mine);
  std::sort(removed.begin(), removed.end());
  CHECK_EQ(removed, std::vector<std::string>{segment_name(mine, 1), segment_name(mine, 2)});
  CHECK_FALSE(waste::platform::shm_exists(segment_name(mine, 1)));
  CHECK_FALSE(waste::platform::shm_exists(segment_name(mine, 2)));
  CHECK(waste::platform::shm_exists(segment_name(other, 1)));
  CHECK(remove_instance_segments(mine).empty());
}
