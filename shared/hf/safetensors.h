// One .safetensors file: an 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the data. The header is parsed and validated
// once; tensor bytes are read on demand with pread, so memory holds one tensor at a time.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shared/util/file.h"

namespace waste {

// Upper bound on a header we accept: real shards have headers of a few hundred KB.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsTensor {
  std::string dtype;            // "F32", "BF16", "F8_E4M3", "U8", "I32", ...
  std::vector<uint64_t> shape;
  uint64_t offset = 0;          // absolute byte offset in the file
  uint64_t bytes = 0;
  uint64_t elements() const;
};

// Bytes per element of a safetensors dtype, 0 when the dtype is unknown.
size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
 public:
  // Opens and validates the header: every dtype known, every shape's size equal to its
  // byte range, every range inside the file. Errors name the file and the tensor.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // Raw little-endian bytes of a tensor (thread-safe: pread only).
  std::vector<uint8_t> read_bytes(const std::string& name) const;
  // n bytes at an absolute file offset (for reading a big tensor in pieces).
  void read_at(void* dst, size_t n, uint64_t offset) const { file_.pread_exact(dst, n, offset); }

 private:
  File file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace waste
