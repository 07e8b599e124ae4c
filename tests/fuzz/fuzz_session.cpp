// libFuzzer target: untrusted bytes as a session file (`/load PATH`, Session.load) through
// read_session_file for a real model (the kimi-linear fixture of ../shared: MLA and KDA layers,
// so every section kind). The checksums (header, section table, each section) and the file size
// are set right before reading: the fuzzer could never forge them, and the checks behind them are what matters
// (a wrong checksum is refused first; unit-session covers that). The layout repaired here is
// the one compute/model/session_file.h documents: a 128-byte header, then 24-byte table
// entries, then the sections back to back. Contract checked: a file accepted restores a session
// at the position it holds, with ids in the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/model/session_file.h"
#include "shared/container/format.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

namespace {

// What the seeds (tests/fuzz/corpus/session) were written with.
constexpr uint64_t kContainerId = 42;
constexpr int64_t kMaxCtx = 64;

constexpr size_t kHeaderBytes = 128, kEntryBytes = 24;
constexpr size_t kSectionsAt = 28, kFileBytesAt = 56, kTableChecksumAt = 64, kHeaderChecksumAt = 120;

struct FixtureModel {
  waste::Checkpoint ckpt;
  waste::CheckpointWeights weights;
  waste::CheckpointExperts experts;
  waste::Model model;
  explicit FixtureModel(const std::string& dir)
      : ckpt(waste::Checkpoint::open(dir)), weights(ckpt), experts(ckpt), model(waste::Model::create(weights, experts, ckpt.config())) {}
};

const FixtureModel& fixture() {
  static const FixtureModel m = [] {
    const char* shared = std::getenv("WASTE_SHARED_DIR");
    return FixtureModel(std::string(shared && *shared ? shared : "../shared") + "/fixtures/kimi-linear");
  }();
  return m;
}

uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// Sets every checksum the file's own layout claims, as far as the bytes reach, and the size.
void repair_checksums(std::vector<uint8_t>& b) {
  if (b.size() < kHeaderBytes) return;
  put64(b, kFileBytesAt, b.size());
  uint32_t sections;
  std::memcpy(&sections, b.data() + kSectionsAt, 4);
  const uint64_t table_bytes = uint64_t(sections) * kEntryBytes;
  if (table_bytes <= b.size() - kHeaderBytes) {
    uint64_t at = kHeaderBytes + table_bytes;
    for (uint32_t i = 0; i < sections; ++i) {
      const size_t entry = kHeaderBytes + size_t(i) * kEntryBytes;
      const uint64_t bytes = get64(b, entry + 8);
      if (bytes > b.size() - at) break;
      put64(b, entry + 16, waste::checksum64(b.data() + at, bytes));
      at += bytes;
    }
    put64(b, kTableChecksumAt, waste::checksum64(b.data() + kHeaderBytes, table_bytes));
  }
  put64(b, kHeaderChecksumAt, waste::checksum64(b.data(), kHeaderChecksumAt));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const FixtureModel& f = fixture();
  std::vector<uint8_t> bytes(data, data + size);
  repair_checksums(bytes);
  const std::string& path = waste::fuzz::write_input_file(bytes.data(), bytes.size());
  try {
    const waste::SessionFileContents s = waste::read_session_file(path, f.model, kContainerId, kMaxCtx);
    if (int64_t(s.ids.size()) != s.state.position() || s.state.position() >= kMaxCtx) __builtin_trap();
    for (int32_t id : s.ids)
      if (id < 0 || id >= f.model.config().vocab) __builtin_trap();
  } catch (const waste::Error&) {
  }
  return 0;
}
