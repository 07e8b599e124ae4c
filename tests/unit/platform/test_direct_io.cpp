// shared/platform/direct_io.h on Linux: opening for direct reads (with and without the page-cache
// fallback), whole and short reads at aligned offsets, errors as -errno.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "shared/platform/direct_io.h"
#include "tests/skip.h"
#include "tests/support/temp_dir.h"

using namespace waste::platform;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kBlock = kDirectIoAlign;

// A file of 3 blocks and 100 bytes, byte i = (i * 7 + 3) mod 256, in a temporary directory of
// `parent` (the file system under test), removed at the end.
struct TempFile {
  waste::test::TempDir dir;
  fs::path path;
  explicit TempFile(const std::string& parent) : dir("waste-unit-direct-io", parent), path(dir / "data") {
    std::ofstream f(path, std::ios::binary);
    for (uint64_t i = 0; i < 3 * kBlock + 100; ++i) f.put(char(uint8_t(i * 7 + 3)));
  }
};

struct AlignedBuffer {
  std::unique_ptr<uint8_t, void (*)(void*)> p{static_cast<uint8_t*>(std::aligned_alloc(kBlock, 2 * kBlock)), std::free};
};

}  // namespace

TEST_CASE("open_direct_read and read_at: whole blocks, the short tail, errors") {
  TempFile file("");  // "": $TMPDIR, else /tmp
  DirectFile f = open_direct_read(file.path.string(), DirectFallback::PageCache);
  REQUIRE(f.fd >= 0);
  CHECK_EQ(f.error, 0);
  AlignedBuffer buf;
  REQUIRE(buf.p != nullptr);
  CHECK_EQ(read_at(f.fd, buf.p.get(), 2 * kBlock, kBlock), int64_t(2 * kBlock));
  bool same = true;
  for (uint64_t i = 0; i < 2 * kBlock; ++i) same = same && buf.p.get()[i] == uint8_t((kBlock + i) * 7 + 3);
  CHECK(same);
  // At the end of the file a read comes back short, with exactly what is there.
  CHECK_EQ(read_at(f.fd, buf.p.get(), kBlock, 3 * kBlock), 100);
  CHECK_EQ(buf.p.get()[99], uint8_t((3 * kBlock + 99) * 7 + 3));
  CHECK_EQ(read_at(f.fd, buf.p.get(), kBlock, 4 * kBlock), 0);
  close_file(f.fd);
  CHECK_EQ(read_at(f.fd, buf.p.get(), kBlock, 0), -EBADF);  // closed
  close_file(-1);                                            // a no-op

  DirectFile missing = open_direct_read((file.path.string() + ".missing"), DirectFallback::PageCache);
  CHECK_EQ(missing.fd, -1);
  CHECK_EQ(missing.error, ENOENT);
}

TEST_CASE("open_direct_read on tmpfs: direct where the kernel can, refused or page cache where not") {
  std::error_code ec;
  if (!fs::is_directory("/dev/shm", ec)) {
    waste::test::skip_part("no /dev/shm here");
    return;
  }
  TempFile file("/dev/shm");
  DirectFile strict = open_direct_read(file.path.string(), DirectFallback::Refuse);
  // tmpfs does O_DIRECT since Linux 6.6; before, it refuses with EINVAL.
  if (strict.fd >= 0) CHECK(strict.direct);
  else CHECK_EQ(strict.error, EINVAL);
  close_file(strict.fd);
  DirectFile loose = open_direct_read(file.path.string(), DirectFallback::PageCache);
  REQUIRE(loose.fd >= 0);
  CHECK_EQ(loose.direct, strict.fd >= 0);
  AlignedBuffer buf;
  CHECK_EQ(read_at(loose.fd, buf.p.get(), kBlock, 0), int64_t(kBlock));
  CHECK_EQ(buf.p.get()[1], uint8_t(1 * 7 + 3));
  close_file(loose.fd);
}
