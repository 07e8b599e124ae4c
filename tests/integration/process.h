// Helpers for integration tests that run the real `waste` binary: run a command, capture its
// output and exit status. (TempDir, which most of them use beside these, is tests/support's.)
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/temp_dir.h"

namespace waste::test {

struct CommandResult {
  int status = -1;  // exit code, or -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

inline std::string waste_bin() {
  const char* bin = std::getenv("WASTE_BIN");
  return bin ? bin : "waste";
}

inline std::string shared_dir() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  return dir ? dir : "../shared";
}

}  // namespace waste::test
