// The shared-memory segment's read-only open: it must refuse a layout (announced by the iod
// peer) that is not the one segment_layout() gives, before any slot is addressed.
#include <doctest/doctest.h>

#include <unistd.h>

#include "shared/ipc/shm_huge_pages.h"
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

TEST_CASE("huge page mode of /dev/shm from the mount table") {
  const std::string plain = "proc /proc proc rw 0 0\ntmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n";
  const std::string huge = "tmpfs /dev/shm tmpfs rw,relatime,size=24683620k,huge=within_size 0 0\n";
  const std::string never = "always within_size advise [never] deny force\n";
  CHECK_EQ(shm_huge_page_mode_of(plain, never), "never");
  CHECK_EQ(shm_huge_page_mode_of(huge, never), "within_size");
  CHECK_EQ(shm_huge_page_mode_of(plain + huge, never), "within_size");  // the last mount wins
  CHECK_EQ(shm_huge_page_mode_of(huge + plain, never), "never");
  CHECK_EQ(shm_huge_page_mode_of("proc /proc proc rw 0 0\n", never), "unknown");
  CHECK_EQ(shm_huge_page_mode_of(plain, "always within_size advise never deny [force]\n"), "force");
  CHECK(shm_huge_pages_enabled("within_size"));
  CHECK(shm_huge_pages_enabled("advise"));
  CHECK_FALSE(shm_huge_pages_enabled("never"));
  CHECK_FALSE(shm_huge_pages_enabled("unknown"));
}
