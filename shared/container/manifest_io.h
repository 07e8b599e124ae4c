// The manifest as plain structs, and its Cap'n Proto encoding (proto/manifest.capnp). Kept
// apart from the reader and writer so both use one codec, and so the parse is the single
// place where untrusted manifest bytes are bounded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/container/reader.h"

namespace waste {

struct ManifestData {
  uint32_t format_version = kFormatVersion;
  std::string arch, config_json, tensor_prefix, created_by;
  uint64_t container_id = 0;
  std::string trunk_file = "trunk.bin";
  uint64_t trunk_bytes = 0;
  std::vector<TensorInfo> tensors;
  std::vector<ExpertLayerInfo> layers;  // bank_path holds the bank's file name, relative to the container
  std::string codebooks_file;
  uint64_t codebooks_bytes = 0;
  std::string tokenizer_file, tokenizer_config_file;
  bool synthetic = false;
  std::string preprocessor_config_json;  // "" when the container has no vision tower
};

constexpr uint64_t kMaxManifestBytes = 256ull << 20;

std::vector<uint8_t> encode_manifest(const ManifestData& m);
// `source` names the file in errors. Bounds: size, traversal and nesting limits, list lengths.
ManifestData decode_manifest(const std::vector<uint8_t>& bytes, const std::string& source);

}  // namespace waste
