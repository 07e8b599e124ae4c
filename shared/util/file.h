// Small RAII file helpers with errors that name the path. Used by the container reader and
// writer, the converter and the tools; the iod's direct-I/O path has its own code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace waste {

class File {
 public:
  File() = default;
  // flags as for open(2); throws Error naming the path on failure.
  File(const std::string& path, int flags, int mode = 0644);
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }
  uint64_t size() const;
  // Reads exactly n bytes at offset; a short read is an error naming the path and offset.
  void pread_exact(void* dst, size_t n, uint64_t offset) const;
  void pwrite_exact(const void* src, size_t n, uint64_t offset);
  void write_all(const void* src, size_t n);
  void fsync();
  void truncate(uint64_t size);
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes);
std::string read_file_text(const std::string& path, uint64_t max_bytes);
// Writes to a fresh temporary beside path (an unpredictable name, created O_EXCL | O_NOFOLLOW, so
// never through a symlink planted in the directory), fsyncs and renames it over path, so a crash
// never leaves a half-written file. On any failure the temporary is removed and the Error names
// path. A symlink at path itself is replaced, not followed.
void write_file_atomic(const std::string& path, const void* data, size_t n);
bool path_exists(const std::string& path);
// Opens a FIFO this user owns for reading without blocking (O_RDWR | O_NONBLOCK, never through a
// symlink): the test hooks' gates. O_RDWR, so the open never waits for a writer and what was
// written before it stays readable. Throws Error naming `who` (the hook) and the path.
int open_own_fifo(const std::string& path, const std::string& who);

}  // namespace waste
