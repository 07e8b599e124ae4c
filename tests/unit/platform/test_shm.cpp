// shared/platform/shm.h on Linux: finding segments by name prefix, and the /dev/shm mount's huge
// page mode from a mount table.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shared/ipc/shm_segment.h"
#include "shared/platform/linux/shm_mounts.h"
#include "shared/platform/shm.h"
#include "shared/util/error.h"
#include "tests/skip.h"
#include "tests/unit/platform/smaps.h"

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

TEST_CASE("a private huge-page segment: clients map it by iod's descriptor path, on 2 MiB pages, and it has no name") {
  using namespace waste::ipc;
  const std::string name = "waste-unit-private-" + std::to_string(::getpid());
  const SegmentLayout layout = segment_layout(4, size_t(2) << 20);  // 8 MiB of slots: whole huge pages
  ShmSegment owner;
  try {
    owner = ShmSegment::create(name, layout, 1, 2, SegmentBacking::PrivateHuge);
  } catch (const waste::Error& e) {
    // The system refusing a step (user namespaces off: a container's seccomp filter, a sysctl;
    // no transparent huge pages) is a SKIP, auto falling back; any other failure is this code's.
    const std::string what = e.what();
    bool refused = false;
    for (const char* step : {"unshare", "setgroups", "uid_map", "gid_map", "mounting", "huge pages", "shmem_enabled",
                             "killed by signal"})
      refused = refused || what.find(step) != std::string::npos;
    REQUIRE_MESSAGE(refused, what);
    waste::test::skip_part("private huge-page file refused here: " + what);
    return;
  }
  CHECK(owner.private_file());
  CHECK_EQ(owner.name().rfind("/proc/" + std::to_string(::getpid()) + "/fd/", 0), 0u);
  CHECK_FALSE(shm_exists(name));  // nothing in /dev/shm to leave behind
  {
    ShmSegment reader = ShmSegment::open_read_only(owner.name(), layout, 2);
    // The same memory: what the owner writes, the reader sees.
    owner.slot_data(3)[12345] = 0x5a;
    CHECK_EQ(reader.slot_data(3)[12345], 0x5a);
    CHECK_EQ(reader.header().instance_id, 1u);
    // The pages are huge in the reader's mapping (populated at open): the point of the file.
    // qemu-user maps guest memory its own way, and its smaps are the host's: not checked there.
    if (std::getenv("MESON_EXE_WRAPPER") == nullptr) {
      const long pmd = waste::test::smaps_kib_of(reader.base(), "ShmemPmdMapped");
      CHECK_MESSAGE(pmd >= 2048, "ShmemPmdMapped " << pmd << " kB of the reader's mapping");
    }
  }
  // Only iod's descriptor paths are mapped by path, and only files of this user.
  for (const char* bad : {"/etc/hostname", "/proc/self/fd/3", "/proc/1/fd/../../../etc/hostname", "/proc/1/fd/3x"})
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only(bad, layout, 2),
                         doctest::Contains("not a name and not an iod descriptor path"), waste::Error);
  if (::geteuid() == 0) {
    char path[] = "/tmp/waste-unit-foreign-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::unlink(path);
    REQUIRE(::ftruncate(fd, off_t(layout.total_bytes)) == 0);
    REQUIRE(::fchown(fd, 65534, 65534) == 0);  // another user's file
    CHECK_THROWS_WITH_AS(ShmSegment::open_read_only("/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd),
                                                    layout, 2),
                         doctest::Contains("not a regular file of this user"), waste::Error);
    ::close(fd);
  }
}
