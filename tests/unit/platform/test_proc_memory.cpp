// Linux usable memory (shared/platform/linux/proc_memory.h) on fake /proc and cgroup trees, and
// platform::usable_memory on this machine.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "shared/platform/linux/proc_memory.h"
#include "shared/util/error.h"
#include "tests/support/temp_dir.h"

using namespace waste::platform;
namespace fs = std::filesystem;

namespace {

// A fake /proc + /sys tree in a temporary directory, removed at the end of the test.
struct FakeSystem {
  waste::test::TempDir dir;
  fs::path root;
  explicit FakeSystem(const std::string& name) : dir("waste-platform-" + name), root(dir.path()) {
    fs::create_directories(root / "proc/self");
    write("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:        1000 kB\n");
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
  SystemRoots roots() const { return SystemRoots{(root / "proc").string(), root.string()}; }
};

constexpr uint64_t GiB = 1ull << 30;
const char* kV1Unlimited = "9223372036854771712\n";

}  // namespace

TEST_CASE("cgroup limit values are parsed defensively") {
  CHECK_EQ(parse_cgroup_limit("4294967296\n"), 4 * GiB);
  CHECK_EQ(parse_cgroup_limit("max\n"), 0);
  CHECK_EQ(parse_cgroup_limit(kV1Unlimited), 0);
  CHECK_EQ(parse_cgroup_limit("99999999999999999999999\n"), 0);
  CHECK_EQ(parse_cgroup_limit(""), 0);
  CHECK_EQ(parse_cgroup_limit("12x"), 0);
  CHECK_EQ(parse_cgroup_limit("-5"), 0);
}

TEST_CASE("physical RAM alone when no cgroup limits apply") {
  FakeSystem s("phys");
  UsableMemory u = usable_memory_from(s.roots());
  CHECK_EQ(u.physical, 16 * GiB);
  CHECK_EQ(u.usable, 16 * GiB);
  CHECK(u.source.find("MemTotal") != std::string::npos);
}

TEST_CASE("cgroup v1 memory.limit_in_bytes up the hierarchy (this machine's layout)") {
  FakeSystem s("v1");
  s.write("proc/self/cgroup", "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n");
  s.write("proc/self/mountinfo",
          "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
          "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  s.write("sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);
  s.write("sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "6442450944\n");
  s.write("sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", kV1Unlimited);
  // A cpu-controller file with a smaller number must not be read as a memory limit.
  s.write("sys/fs/cgroup/cpu/memory.limit_in_bytes", "1024\n");
  UsableMemory u = usable_memory_from(s.roots());
  CHECK_EQ(u.usable, 6 * GiB);
  CHECK(u.source.find("sys/fs/cgroup/memory/process_api/memory.limit_in_bytes") != std::string::npos);
  CHECK(u.source.find("abc") == std::string::npos);
}

TEST_CASE("cgroup v2 memory.max and memory.high up to the root") {
  FakeSystem s("v2");
  s.write("proc/self/cgroup", "0::/user.slice/app.scope\n");
  s.write("proc/self/mountinfo", "25 22 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  s.write("sys/fs/cgroup/user.slice/app.scope/memory.max", "max\n");
  s.write("sys/fs/cgroup/user.slice/app.scope/memory.high", "7516192768\n");  // 7 GiB
  s.write("sys/fs/cgroup/user.slice/memory.max", "5368709120\n");             // 5 GiB: wins
  s.write("sys/fs/cgroup/user.slice/memory.high", "garbage\n");
  UsableMemory u = usable_memory_from(s.roots());
  CHECK_EQ(u.usable, 5 * GiB);
  CHECK(u.source.find("user.slice/memory.max") != std::string::npos);
  CHECK_EQ(u.limits.size(), 3);  // MemTotal, app memory.high, user.slice memory.max

  // memory.high below memory.max wins.
  s.write("sys/fs/cgroup/user.slice/app.scope/memory.high", "3221225472\n");
  CHECK_EQ(usable_memory_from(s.roots()).usable, 3 * GiB);
}

TEST_CASE("a namespaced cgroup mount (mount root is the container's cgroup)") {
  FakeSystem s("ns");
  s.write("proc/self/cgroup", "0::/docker/c1/inner\n");
  s.write("proc/self/mountinfo", "25 22 0:23 /docker/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  s.write("sys/fs/cgroup/inner/memory.max", "2147483648\n");
  s.write("sys/fs/cgroup/memory.max", "1073741824\n");
  CHECK_EQ(usable_memory_from(s.roots()).usable, 1 * GiB);
  // A cgroup path that tries to climb out of the mount is ignored.
  s.write("proc/self/cgroup", "0::/docker/c1/../../evil\n");
  CHECK_EQ(usable_memory_from(s.roots()).usable, 16 * GiB);
  // The mount root is a prefix by whole path components: /docker/c10 is not under /docker/c1,
  // so the mount's (c1's) limit does not apply.
  s.write("proc/self/cgroup", "0::/docker/c10/inner\n");
  CHECK_EQ(usable_memory_from(s.roots()).usable, 16 * GiB);
}

TEST_CASE("missing files: no mountinfo, no cgroup file, no meminfo") {
  FakeSystem s("missing");
  // No /proc/self/cgroup: physical only.
  CHECK_EQ(usable_memory_from(s.roots()).usable, 16 * GiB);
  // cgroup file but no mountinfo: the usual mount points are tried.
  s.write("proc/self/cgroup", "0::/\n");
  s.write("sys/fs/cgroup/memory.max", "8589934592\n");
  CHECK_EQ(usable_memory_from(s.roots()).usable, 8 * GiB);
  fs::remove(s.root / "proc/meminfo");
  CHECK_THROWS_AS(usable_memory_from(s.roots()), waste::Error);
  s.write("proc/meminfo", "MemFree: 5 kB\n");
  CHECK_THROWS_AS(usable_memory_from(s.roots()), waste::Error);
}

TEST_CASE("this machine") {
  UsableMemory u = usable_memory();
  CHECK_GT(u.physical, 0);
  CHECK_LE(u.usable, u.physical);
}
