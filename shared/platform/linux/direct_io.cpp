// Linux direct I/O: O_DIRECT on the descriptor, pread(2) for the reads.
#include "shared/platform/direct_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace waste::platform {

const char* const kDirectIoName = "O_DIRECT";

DirectFile open_direct_read(const std::string& path, DirectFallback fallback) {
  DirectFile f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (f.fd >= 0) {
    f.direct = true;
    return f;
  }
  f.error = errno;
  // EINVAL: the file system does not do O_DIRECT (tmpfs before Linux 6.6, some FUSE).
  if (f.error == EINVAL && fallback == DirectFallback::PageCache) {
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    f.error = f.fd >= 0 ? 0 : errno;
  }
  return f;
}

int64_t read_at(int fd, uint8_t* dst, uint64_t bytes, uint64_t offset) {
  int64_t got = 0;
  while (uint64_t(got) < bytes) {
    ssize_t n = ::pread(fd, dst + got, bytes - uint64_t(got), off_t(offset + uint64_t(got)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;  // end of file: a short read
    got += n;
  }
  return got;
}

void close_file(int fd) {
  if (fd >= 0) ::close(fd);
}

std::string drop_page_cache() {
  // No sync first: drop_caches drops clean pages only, and a sync would wait on other
  // processes' writes; what the benchmarks read is not being written, so it is all clean.
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open /proc/sys/vm/drop_caches: ") + std::strerror(errno);
  ssize_t n = ::write(fd, "3\n", 2);
  std::string why = n == 2 ? "" : std::string("cannot write /proc/sys/vm/drop_caches: ") + std::strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace waste::platform
