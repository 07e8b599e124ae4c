// libFuzzer target: untrusted bytes as a .safetensors shard (the 8-byte header length, the JSON
// header, the data) opened by SafetensorsFile as `waste convert` opens a checkpoint's shards.
// Contract checked: every tensor accepted lies inside the file and its bytes match its shape and
// dtype, and reading it returns exactly that many bytes.
#include <cstddef>
#include <cstdint>

#include "shared/hf/safetensors.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = waste::fuzz::write_input_file(data, size);
  try {
    const waste::SafetensorsFile f(path);
    for (const auto& [name, t] : f.tensors()) {
      if (t.offset < 8 || t.offset > size || t.bytes > size - t.offset) __builtin_trap();
      if (t.elements() * waste::safetensors_dtype_size(t.dtype) != t.bytes) __builtin_trap();
      if (f.read_bytes(name).size() != t.bytes) __builtin_trap();
    }
  } catch (const waste::Error&) {
  }
  return 0;
}
