// The fuzz input as a file on disk, for parsers whose entry point is a path (a safetensors
// shard, a session file): one file per process under $TMPDIR, rewritten for every input and
// removed at exit, so the parser reads exactly these bytes through its own file code.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace waste::fuzz {

// Never destroyed (a pointer kept in a static, so no leak either): the atexit handler that
// removes the file runs after the destructors of statics constructed before it was registered.
inline const std::string& input_file_path() {
  static const std::string* path = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* p = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/waste-fuzz-input-" + std::to_string(::getpid()));
    std::atexit([] { ::unlink(input_file_path().c_str()); });
    return p;
  }();
  return *path;
}

// Writes the bytes to input_file_path() (replacing what was there) and returns the path.
// Failing to write is the harness's fault, not the parser's: abort rather than report a finding
// in the code under test.
inline const std::string& write_input_file(const uint8_t* data, size_t size) {
  const std::string& path = input_file_path();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  ::close(fd);
  return path;
}

}  // namespace waste::fuzz
