// Reading files around the operating system's page cache: iod reads expert records straight
// into its cache slots, and `waste iobench` measures the raw device the same way. Caching them
// twice (page cache and slot) would halve the RAM the expert cache can have, and a read that
// hits the page cache says nothing about the disk.
//
// Linux: O_DIRECT (linux/direct_io.cpp). Buffers, offsets and lengths of a direct read must be
// aligned to the device's logical block size; every record is kDirectIoAlign-aligned and a
// multiple of it (docs/FORMAT.md), which covers the block sizes in use (512 B and 4 KiB).
// What a macOS or Windows port supplies instead: docs/PORTING.md, "direct_io".
#pragma once
#include <cstdint>
#include <string>

namespace waste::platform {

// Alignment of every direct read's buffer, file offset and length.
constexpr uint64_t kDirectIoAlign = 4096;
// How this platform names direct I/O, for messages ("cannot open with O_DIRECT").
extern const char* const kDirectIoName;

enum class DirectFallback {
  Refuse,     // direct I/O or nothing (iobench's raw reference: a cached read measures RAM)
  PageCache,  // where the file system refuses direct I/O (tmpfs, some FUSE), read through the cache
};

struct DirectFile {
  int fd = -1;          // -1 when the file could not be opened; then `error` is the errno
  bool direct = false;  // false: opened through the page cache (PageCache fallback taken)
  int error = 0;
};

// Opens `path` read-only, close-on-exec, for direct reads.
DirectFile open_direct_read(const std::string& path, DirectFallback fallback);

// Reads `bytes` at `offset` into `dst`, retrying interruptions and short reads: returns the
// bytes read (fewer than asked only at end of file) or -errno.
int64_t read_at(int fd, uint8_t* dst, uint64_t bytes, uint64_t offset);

// Closes a descriptor of open_direct_read (no-op for -1).
void close_file(int fd);

// Drops the clean pages of the system's file cache (root only), so that the next buffered read
// of a file comes from the disk: benchmarks that compare cold reads. "" on success, else why not.
std::string drop_page_cache();

}  // namespace waste::platform
