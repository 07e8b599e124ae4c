// shared/platform/memory.h populate_for_read: a shared mapping's pages are in this process's
// page tables after the call (its resident set counts them) where the kernel has the call
// (Linux 5.14: MADV_POPULATE_READ), and a read-only mapping works (compute maps iod's segment
// read-only).
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "shared/platform/memory.h"
#include "tests/skip.h"
#include "tests/unit/platform/smaps.h"

using namespace waste::platform;

namespace {

// Rss (KiB) of the mapping that starts at `p`, from /proc/self/smaps.
long rss_kib_of(const void* p) { return waste::test::smaps_kib_of(p, "Rss"); }

bool kernel_at_least(int major, int minor) {
  utsname u{};
  if (uname(&u) != 0) return false;
  int a = 0, b = 0;
  if (std::sscanf(u.release, "%d.%d", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

// Run through an emulator? meson sets MESON_EXE_WRAPPER for a cross build's tests (qemu-user
// here), and qemu-user takes madvise as a hint it may drop: it returns success for
// MADV_POPULATE_READ without touching the host's page tables.
bool under_emulator() { return std::getenv("MESON_EXE_WRAPPER") != nullptr; }

}  // namespace

TEST_CASE("populate_for_read maps every page of a read-only shared mapping") {
  constexpr size_t kBytes = 4 << 20;
  const int fd = memfd_create("waste-test-populate", 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, off_t(kBytes)) == 0);
  // The pages exist (written through a writable mapping, as iod's reads fill its slots)...
  void* w = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(w != MAP_FAILED);
  for (size_t i = 0; i < kBytes; i += 4096) static_cast<char*>(w)[i] = char(i >> 12);
  munmap(w, kBytes);
  // ... but a new mapping of them has none in its page tables until read.
  void* r = mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(r != MAP_FAILED);
  CHECK(rss_kib_of(r) == 0);
  const bool done = populate_for_read(r, kBytes);
  if (under_emulator()) {
    waste::test::skip_part("populate_for_read under an emulator (qemu-user drops madvise): page tables unchecked");
  } else if (kernel_at_least(5, 14)) {
    REQUIRE(done);
    CHECK(rss_kib_of(r) == long(kBytes >> 10));
  } else {
    CHECK(!done);
    CHECK(rss_kib_of(r) == 0);
  }
  CHECK(static_cast<const char*>(r)[4096 * 7] == 7);  // the data is the file's either way
  CHECK(populate_for_read(nullptr, 0));
  munmap(r, kBytes);
  close(fd);
}
