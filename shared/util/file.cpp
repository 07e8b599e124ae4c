#include "shared/util/file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/util/error.h"

namespace waste {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

namespace {

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

}  // namespace

File::File(const std::string& path, int flags, int mode) : path_(path) {
  // Opening a FIFO for reading blocks until a writer comes, for ever if none does (a FIFO
  // planted in a container directory would hang every tool). Reads open without blocking and
  // take only regular files and block devices (the raw-disk benchmark reads those).
  const bool reading = (flags & O_ACCMODE) == O_RDONLY && !(flags & O_CREAT);
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC | (reading ? O_NONBLOCK : 0), mode);
  if (fd_ < 0) throw Error(path + ": cannot open: " + errno_text());
  if (!reading) return;
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const std::string why = errno_text();
    close();
    throw Error(path + ": cannot stat: " + why);
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    close();
    throw Error(path + ": " + file_kind(st.st_mode) + ", not a regular file: refused");
  }
  if (!(flags & O_NONBLOCK)) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

File::~File() { close(); }

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void File::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) throw Error(path_ + ": cannot stat: " + errno_text());
  return uint64_t(st.st_size);
}

void File::pread_exact(void* dst, size_t n, uint64_t offset) const {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                  " failed: " + errno_text());
    }
    if (r == 0)
      throw Error(path_ + ": truncated: wanted " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                  ", file ends after " + std::to_string(done));
    done += size_t(r);
  }
}

void File::pwrite_exact(const void* src, size_t n, uint64_t offset) {
  const auto* p = static_cast<const uint8_t*>(src);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd_, p + done, n - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": write failed: " + errno_text());
    }
    done += size_t(r);
  }
}

void File::write_all(const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::write(fd_, p + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": write failed: " + errno_text());
    }
    done += size_t(r);
  }
}

void File::fsync() {
  if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed: " + errno_text());
}

void File::truncate(uint64_t size) {
  if (::ftruncate(fd_, off_t(size)) != 0) throw Error(path_ + ": truncate failed: " + errno_text());
}

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  File f(path, O_RDONLY);
  uint64_t n = f.size();
  require(n <= max_bytes, path + ": " + std::to_string(n) + " bytes, more than the " + std::to_string(max_bytes) +
                              " this file may have");
  std::vector<uint8_t> data(n);
  if (n) f.pread_exact(data.data(), n, 0);
  return data;
}

std::string read_file_text(const std::string& path, uint64_t max_bytes) {
  auto bytes = read_file_bytes(path, max_bytes);
  return std::string(bytes.begin(), bytes.end());
}

namespace {

// A name beside `path` that no one can guess in advance: path + ".tmp-" + 16 random hex digits.
// The old fixed name (path + ".tmp") let anyone who can write the directory plant a symlink
// there and have the write go through it to a file of their choosing.
std::string unpredictable_temp_name(const std::string& path) {
  uint8_t r[8];
  size_t got = 0;
  while (got < sizeof r) {
    const ssize_t k = ::getrandom(r + got, sizeof r - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": cannot get random bytes for a temporary name: " + errno_text());
    }
    got += size_t(k);
  }
  static const char hex[] = "0123456789abcdef";
  std::string name = path + ".tmp-";
  for (uint8_t b : r) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

}  // namespace

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  // The temporary is created fresh: O_EXCL (never an existing file, never through a symlink),
  // O_NOFOLLOW (says the same for the last component should O_EXCL ever be dropped), under an
  // unpredictable name, so nothing planted in the directory beforehand is written through. A
  // name that exists already (chance, or someone who guessed) is never reused: a few fresh names
  // are tried, then the error names the path.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    tmp = unpredictable_temp_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw Error(path + ": cannot create a temporary file beside it (" + tmp + "): " + errno_text());
  // From here on the temporary is ours, and every way out that does not rename it removes it: a
  // failed write (disk full), fsync or rename (the target a directory) leaves no stray file. The
  // writes go to the descriptor created above, never to the name opened again (the name could
  // have been swapped in between).
  try {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::write(fd, p + done, n - done);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw Error(path + ": write of the temporary " + tmp + " failed: " + errno_text());
      }
      done += size_t(r);
    }
    // Durable before the rename, so a crash leaves the old file or the whole new one.
    if (::fsync(fd) != 0) throw Error(path + ": fsync of the temporary " + tmp + " failed: " + errno_text());
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) throw Error(path + ": close of the temporary " + tmp + " failed: " + errno_text());
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error(path + ": rename failed: " + errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable once the directory is: without this a crash could bring back the old
  // name's entry. Best effort: the new contents are in place either way, and a directory some
  // file systems will not open or sync is no reason to fail a write that happened.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int open_own_fifo(const std::string& path, const std::string& who) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(who + ": cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error(who + ": " + path + " is not a FIFO of this user");
  }
  return fd;
}

}  // namespace waste
