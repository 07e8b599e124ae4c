// The main() of a fuzz target outside libFuzzer (the default gcc build's fuzz-seeds suite):
// runs every file under the directories given (the committed seeds, tests/fuzz/corpus/<name>,
// and the inputs of fixed findings, tests/fuzz/regressions/<name>) through
// LLVMFuzzerTestOneInput once, in name order. A crash, a sanitizer report or an uncaught
// exception fails the test, so the seeds and every past finding stay regression tests.
// Usage: seeds_<name> DIR...   (a missing directory is skipped; no input at all is an error)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "shared/util/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The longest input scripts/fuzz.sh lets libFuzzer make (-max_len); seeds are far smaller.
constexpr uint64_t kMaxInputBytes = 1u << 20;

std::vector<std::filesystem::path> inputs_under(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& path : inputs_under(argv[i])) {
      const std::vector<uint8_t> bytes = waste::read_file_bytes(path.string(), kMaxInputBytes);
      std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
      std::fflush(stdout);  // the last name printed is the input at fault if it crashes
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++ran;
    }
  }
  std::printf("%zu inputs ran clean\n", ran);
  return ran > 0 ? 0 : 1;
}
