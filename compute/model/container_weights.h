// The model's weights from a .waste container: trunk tensors resident in RAM (any trunk
// format; matvec works on the stored bytes) and the embedding read a row per token from
// trunk.bin. ContainerExperts reads expert records with plain preads into memory it owns:
// the simple source for tools and tests; the engine's iod-backed source replaces it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "compute/model/weights.h"
#include "shared/container/reader.h"
#include "shared/util/file.h"

namespace waste {

class TrunkWeights : public WeightSource {
 public:
  // Both must outlive this object. The embedding may be skipped by the trunk (it is read
  // from disk a row at a time through one descriptor kept open for the object's life).
  TrunkWeights(const Container& container, const Trunk& trunk);
  MatrixView matrix(const std::string& name) const override;
  std::span<const float> vector(const std::string& name) const override;
  void embedding_row(int64_t token, float* out) const override;

 private:
  const Container& container_;
  const Trunk& trunk_;
  const TensorInfo* embed_ = nullptr;
  uint64_t embed_rows_ = 0;
};

class ContainerExperts : public ExpertSource {
 public:
  // Records read on first use are kept up to `max_cached_bytes` (then the cache is cleared).
  explicit ContainerExperts(const Container& container, uint64_t max_cached_bytes = 1ull << 30)
      : container_(container), max_bytes_(max_cached_bytes) {}
  ExpertView expert(int layer, int expert) override;
  ExpertSourceStats stats() override;

 private:
  const Container& container_;
  uint64_t max_bytes_, cached_bytes_ = 0;
  ExpertSourceStats stats_;
  mutable std::mutex mutex_;
  struct FreeAligned {
    void operator()(uint8_t* p) const;
  };
  // Records sit at kRecordAlign like iod's slots, so SIMD loads see the same alignment.
  std::map<std::pair<int, int>, std::unique_ptr<uint8_t[], FreeAligned>> records_;
  std::map<int, std::vector<float>> codebooks_;  // per VQ3R layer, kept for the views' lifetime
};

}  // namespace waste
