// A Hugging Face checkpoint directory as released: config.json plus model.safetensors, or
// shards listed by model.safetensors.index.json (or, without an index, every *.safetensors).
// Tensors are read one at a time with pread and decoded exactly to f32, whatever their
// storage: F32/F16/BF16, FP8 e4m3 with 128x128 `weight_scale_inv` tiles (K2/DeepSeek-V3),
// MXFP4 `weight_packed` + E8M0 `weight_scale` (K3 experts) or compressed-tensors INT4
// pack-quantized (K2.5 experts). Read-only after open; every method is thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/model/config.h"

namespace waste {

class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const;
  const std::string& config_json() const;  // verbatim text of config.json
  const ModelConfig& config() const;       // ModelConfig::from_json
  // Names are full release names incl. any prefix, e.g. "language_model.model.norm.weight".
  bool has(const std::string& full_name) const;
  std::vector<uint64_t> shape(const std::string& full_name) const;  // stored shape
  std::string dtype(const std::string& full_name) const;            // safetensors dtype, e.g. "BF16"
  std::vector<std::string> names() const;                           // sorted
  std::string file_of(const std::string& full_name) const;          // path of the shard holding it

  // A matrix that may be quantized, named without its ".weight"/".weight_packed" suffix; picks
  // whichever form exists and dequantises exactly. shape_out gets the logical [rows, cols].
  std::vector<float> read_weight(const std::string& base_name_with_prefix,
                                 std::vector<uint64_t>* shape_out = nullptr) const;
  // Logical shape of read_weight's result without reading data.
  std::vector<uint64_t> weight_shape(const std::string& base_name_with_prefix) const;
  // Any tensor by its full name, converted to f32 (an F8_E4M3 tensor with a sibling
  // `_scale_inv` is dequantised with it). shape_out gets the stored shape.
  std::vector<float> read_tensor(const std::string& full_name, std::vector<uint64_t>* shape_out = nullptr) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace waste
