// libFuzzer target: untrusted text as the config.json and model.safetensors.index.json of a
// checkpoint directory, opened by Checkpoint::open as `waste convert` opens a release: the model
// config, the FP8 quantization_config, the index's weight_map, each shard it names against the
// shard's own header. The input is CONFIG, a NUL byte, then INDEX (no NUL: no index file); the
// directory also holds model.safetensors with one small F32 tensor, model.norm.weight.
// Contract checked: every tensor an opened checkpoint lists has a shape and a dtype.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace {

namespace fs = std::filesystem;

// One directory per process under $TMPDIR, removed at exit. Never destroyed, as
// fuzz_input_file.h's path: the atexit handler runs after the destructors of earlier statics.
const std::string& checkpoint_dir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d_owned = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/waste-fuzz-checkpoint-" + std::to_string(::getpid()));
    const std::string& d = *d_owned;
    fs::create_directories(d);
    // model.safetensors: the 8-byte header length, the header, 16 bytes of data (4 x F32).
    const std::string header = R"({"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
    std::string shard(8, '\0');
    for (int i = 0; i < 8; ++i) shard[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
    shard += header + std::string(16, '\0');
    waste::File(d + "/model.safetensors", O_WRONLY | O_CREAT | O_TRUNC).write_all(shard.data(), shard.size());
    std::atexit([] { fs::remove_all(checkpoint_dir()); });
    return d_owned;
  }();
  return *dir;
}

void write_text(const std::string& path, std::string_view text) {
  waste::File(path, O_WRONLY | O_CREAT | O_TRUNC).write_all(text.data(), text.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  write_text(dir + "/config.json", in.substr(0, nul));
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (nul != std::string_view::npos) {
    write_text(index_path, in.substr(nul + 1));
  } else {
    ::unlink(index_path.c_str());
  }
  try {
    const waste::Checkpoint c = waste::Checkpoint::open(dir);
    for (const std::string& name : c.names())
      if (c.dtype(name).empty() || c.file_of(name).empty()) __builtin_trap();
  } catch (const waste::Error&) {
  }
  return 0;
}
