// shared/platform/shm.h on Linux: finding segments by name prefix, and the /dev/shm mount's huge
// page mode from a mount table.
#include <doctest/doctest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include "shared/ipc/shm_segment.h"
#include "shared/platform/linux/shm_mounts.h"
#include "shared/platform/shm.h"

using namespace waste::platform;

TEST_CASE("shm_names_with_prefix and shm_exists see a segment from creation to removal") {
  const std::string prefix = "waste-unit-platform-" + std::to_string(::getpid()) + "-";
  CHECK(shm_names_with_prefix(prefix).empty());
  {
    waste::ipc::ShmSegment s = waste::ipc::ShmSegment::create(prefix + "a", waste::ipc::segment_layout(1, 4096), 1, 2);
    CHECK(shm_exists(prefix + "a"));
    CHECK_FALSE(shm_exists(prefix + "b"));
    CHECK_EQ(shm_names_with_prefix(prefix), std::vector<std::string>{prefix + "a"});
    CHECK(shm_names_with_prefix(prefix + "b").empty());
  }  // the owner removes it
  CHECK_FALSE(shm_exists(prefix + "a"));
  CHECK(shm_names_with_prefix(prefix).empty());
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
  // This machine: one of the modes above, whatever it is.
  const std::string here = shm_huge_page_mode();
  CHECK_MESSAGE(std::string(" always within_size advise never deny force unknown ").find(" " + here + " ") !=
                    std::string::npos,
                here);
}
