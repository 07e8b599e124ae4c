// File refuses what is not a regular file (or a block device) when reading, without blocking:
// a FIFO planted where a container file should be used to hang open() for ever.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

namespace {

// The names in a directory, sorted: what a write left behind.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string atomic_write_error(const std::string& path, const std::string& text) {
  try {
    write_file_atomic(path, text.data(), text.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("write_file_atomic: a symlink planted at the old fixed temporary name is never followed") {
  // The old code wrote through path + ".tmp" with O_TRUNC and renamed the link over the target:
  // the victim was overwritten and the target became a symlink to it.
  TempDir d;
  const std::string victim = d.path() + "/victim", target = d.path() + "/usage";
  {
    File v(victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
    v.write_all("keep", 4);
  }
  std::filesystem::create_symlink(victim, target + ".tmp");
  write_file_atomic(target, "new data", 8);
  CHECK(read_file_text(victim, 100) == "keep");
  CHECK(read_file_text(target, 100) == "new data");
  CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(target)));
  // The planted link is left as it was (not ours to remove), and nothing else is left behind.
  CHECK(std::filesystem::is_symlink(target + ".tmp"));
  CHECK(names_in(d.path()) == std::vector<std::string>{"usage", "usage.tmp", "victim"});
}

TEST_CASE("write_file_atomic: a symlink at the target itself is replaced, its target untouched") {
  TempDir d;
  const std::string victim = d.path() + "/victim", target = d.path() + "/manifest";
  {
    File v(victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
    v.write_all("keep", 4);
  }
  std::filesystem::create_symlink(victim, target);
  write_file_atomic(target, "abc", 3);
  CHECK(read_file_text(victim, 100) == "keep");
  CHECK(!std::filesystem::is_symlink(target));
  CHECK(read_file_text(target, 100) == "abc");
  CHECK(names_in(d.path()) == std::vector<std::string>{"manifest", "victim"});
}

TEST_CASE("write_file_atomic: a failed rename (the target is a directory) leaves no temporary file") {
  TempDir d;
  const std::string target = d.path() + "/logits";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  const std::string e = atomic_write_error(target, "0123456789");
  CHECK(e.find(target + ": rename failed") == 0);
  // Only the directory, still empty: the temporary was removed.
  CHECK(names_in(d.path()) == std::vector<std::string>{"logits"});
  CHECK(names_in(target).empty());
}

TEST_CASE("write_file_atomic: a directory that does not exist is an error naming the path") {
  TempDir d;
  const std::string target = d.path() + "/absent/out";
  const std::string e = atomic_write_error(target, "x");
  CHECK(e.find(target + ": cannot create a temporary file beside it") == 0);
  CHECK(names_in(d.path()).empty());
}

TEST_CASE("write_file_atomic: replaces the content by rename, leaving no stray files") {
  TempDir d;
  const std::string target = d.path() + "/out.bin";
  const std::string first(5000, 'a'), second = "short";
  write_file_atomic(target, first.data(), first.size());
  CHECK(read_file_text(target, 10000) == first);
  // A reader holding the old file keeps seeing all of it: the new content arrives as a new file
  // under the name, never by truncating and rewriting the old one in place.
  File old_reader(target, O_RDONLY);
  write_file_atomic(target, second.data(), second.size());
  CHECK(read_file_text(target, 10000) == second);
  CHECK(old_reader.size() == first.size());
  std::string seen(first.size(), '\0');
  old_reader.pread_exact(seen.data(), seen.size(), 0);
  CHECK(seen == first);
  // Empty content is a valid write too.
  write_file_atomic(target, "", 0);
  CHECK(read_file_text(target, 100).empty());
  CHECK(names_in(d.path()) == std::vector<std::string>{"out.bin"});
}
