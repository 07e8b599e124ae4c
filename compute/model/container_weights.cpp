#include "compute/model/container_weights.h"

#include <fcntl.h>

#include <cstdlib>
#include <vector>

#include "shared/util/error.h"

namespace waste {

MatrixView TrunkWeights::matrix(const std::string& name) const { return trunk_.matrix(name); }

std::span<const float> TrunkWeights::vector(const std::string& name) const {
  const TensorInfo& t = trunk_.info(name);
  return {trunk_.f32(name), size_t(t.elements())};
}

TrunkWeights::TrunkWeights(const Container& container, const Trunk& trunk)
    : container_(container), trunk_(trunk) {
  embed_ = &container_.tensor("model.embed_tokens.weight");
  require(embed_->shape.size() == 2, "tensor model.embed_tokens.weight is not 2-D");
  require(embed_->format != TensorFormat::VQ3R, "tensor model.embed_tokens.weight: VQ3R is not a trunk format");
  embed_rows_ = embed_->shape[0];
}

void TrunkWeights::embedding_row(int64_t token, float* out) const {
  require(token >= 0 && uint64_t(token) < embed_rows_,
          "embedding row " + std::to_string(token) + " is out of range (" + std::to_string(embed_rows_) + " rows)");
  const uint64_t row = uint64_t(token);
  if (trunk_.has(embed_->name)) {  // resident after all: no disk read
    dequantize_row(trunk_.matrix(embed_->name), int64_t(row), out);
    return;
  }
  // One row read from trunk.bin through the container's descriptor (opened once).
  read_tensor_row(container_, *embed_, row, out);
}

ExpertSourceStats ContainerExperts::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ContainerExperts::FreeAligned::operator()(uint8_t* p) const { std::free(p); }

ExpertView ContainerExperts::expert(int layer, int expert) {
  std::lock_guard<std::mutex> lock(mutex_);
  const ExpertLayerInfo* info = container_.expert_layer(layer);
  require(info != nullptr, container_.dir() + ": layer " + std::to_string(layer) + " has no routed experts");
  const auto key = std::make_pair(layer, expert);
  auto it = records_.find(key);
  if (it != records_.end()) ++stats_.hits;
  if (it == records_.end()) {
    require(expert >= 0 && uint32_t(expert) < info->expert_count,
            container_.dir() + ": layer " + std::to_string(layer) + " has no expert " + std::to_string(expert));
    // A full cache is simply dropped: views handed out earlier must have been released
    // (the model releases each expert before asking for the next).
    if (cached_bytes_ + info->layout.stride > max_bytes_) {
      records_.clear();
      cached_bytes_ = 0;
    }
    auto* raw = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlign, round_up(info->layout.stride, kRecordAlign)));
    require(raw != nullptr, "out of memory for an expert record of " + std::to_string(info->layout.stride) + " bytes");
    std::unique_ptr<uint8_t[], FreeAligned> rec(raw);
    // A record that cannot be read or fails its checksum is that expert's fault alone.
    try {
      container_.read_record(layer, uint32_t(expert), rec.get());
    } catch (const Error& e) {
      throw ExpertUnavailable(layer, expert, e.what());
    }
    cached_bytes_ += info->layout.stride;
    ++stats_.misses;
    stats_.bytes_read += info->layout.stride;
    it = records_.emplace(key, std::move(rec)).first;
  }
  const float* books = nullptr;
  if (info->layout.format == TensorFormat::VQ3R) {
    auto b = codebooks_.find(layer);
    if (b == codebooks_.end()) b = codebooks_.emplace(layer, container_.read_codebooks(layer)).first;
    books = b->second.data();
  }
  return expert_view(it->second.get(), info->layout, books);
}

}  // namespace waste
