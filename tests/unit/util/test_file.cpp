// File refuses what is not a regular file (or a block device) when reading, without blocking:
// a FIFO planted where a container file should be used to hang open() for ever.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "shared/util/error.h"
#include "shared/util/file.h"
#include "tests/support/temp_dir.h"

using namespace waste;
using waste::test::TempDir;

namespace {

std::string error_of(const std::string& path) {
  try {
    File f(path, O_RDONLY);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("File: a FIFO, a directory or a socket is refused at once, naming the path; files still read") {
  TempDir d;
  const std::string fifo = d.path() + "/trunk.bin", file = d.path() + "/manifest";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of(fifo);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // a deadline, not a timing claim
  CHECK(e.find(fifo + ": a FIFO, not a regular file") == 0);
  CHECK(error_of(d.path()).find("a directory, not a regular file") != std::string::npos);
  CHECK_THROWS_AS(read_file_bytes(fifo, 100), Error);

  write_file_atomic(file, "abc", 3);
  CHECK(read_file_text(file, 100) == "abc");
  File f(file, O_RDONLY);
  // Reads block as usual afterwards (O_NONBLOCK was only for the open).
  CHECK((::fcntl(f.fd(), F_GETFL) & O_NONBLOCK) == 0);
  // Writing opens are untouched.
  File w(d.path() + "/new", O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK(w.is_open());
}
