// The model's weights straight from a Hugging Face checkpoint, dequantised exactly to f32
// (BF16, FP8 tiles, MXFP4 experts): the lossless path the fixture tests run, and the
// reference a converted container is compared with. Tensors are read on first use and kept.
// Test support: the engine reads containers only (compute/model/container_weights.h).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compute/model/weights.h"
#include "shared/hf/checkpoint.h"

namespace waste {

class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  MatrixView matrix(const std::string& name) const override;
  std::span<const float> vector(const std::string& name) const override;
  void embedding_row(int64_t token, float* out) const override;

 private:
  struct Stored {
    std::vector<float> values;
    std::vector<uint64_t> shape;
  };
  const Stored& load(const std::string& name, bool as_matrix) const;

  const Checkpoint& ckpt_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::unique_ptr<Stored>> cache_;
};

// Routed experts from the checkpoint as F32 expert records built in memory on first use.
class CheckpointExperts : public ExpertSource {
 public:
  explicit CheckpointExperts(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  ExpertView expert(int layer, int expert) override;
  size_t experts_built() const { return records_.size(); }

 private:
  const Checkpoint& ckpt_;
  std::mutex mutex_;
  std::map<std::pair<int, int>, std::unique_ptr<std::vector<float>>> records_;  // gate | up | down
  std::map<std::pair<int, int>, std::pair<int, int>> dims_;                     // hidden, intermediate
};

}  // namespace waste
