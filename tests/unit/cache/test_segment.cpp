// The shared-memory segment's read-only open: it must refuse a layout (announced by the iod
// peer) that is not the one segment_layout() gives, before any slot is addressed.
#include <doctest/doctest.h>

#include <unistd.h>

#include "shared/ipc/shm_segment.h"
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
