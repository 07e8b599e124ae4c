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
    : container_(container), trunk_(trunk), trunk_file_(container.trunk_path(), O_RDONLY) {
  embed_ = &container_.tensor("model.embed_tokens.weight");
  require(embed_->shape.size() == 2, "tensor model.embed_tokens.weight is not 2-D");
  require(embed_->format != TensorFormat::VQ3R, "tensor model.embed_tokens.weight: VQ3R is not a trunk format");
  embed_rows_ = embed_->shape[0];
  embed_cols_ = embed_->shape[1];
}

void TrunkWeights::embedding_row(int64_t token, float* out) const {
  require(token >= 0 && uint64_t(token) < embed_rows_,
          "embedding row " + std::to_string(token) + " is out of range (" + std::to_string(embed_rows_) + " rows)");
  const uint64_t row = uint64_t(token), cols = embed_cols_;
  if (trunk_.has(embed_->name)) {  // resident after all: no disk read
    dequantize_row(trunk_.matrix(embed_->name), int64_t(row), out);
    return;
  }
  // One row's values (and its group scales) with pread on the descriptor opened once; the
  // manifest's sizes were validated against the file when the container was opened.
  uint64_t row_bytes = 0;
  switch (embed_->format) {
    case TensorFormat::F32: row_bytes = cols * 4; break;
    case TensorFormat::BF16:
    case TensorFormat::F16: row_bytes = cols * 2; break;
    case TensorFormat::Q8G: row_bytes = cols; break;
    case TensorFormat::Q4G: row_bytes = cols / 2; break;
    case TensorFormat::VQ3R: throw Error("tensor model.embed_tokens.weight: VQ3R is not a trunk format");
  }
  thread_local std::vector<uint8_t> values;
  thread_local std::vector<uint16_t> scales;
  values.resize(row_bytes);
  trunk_file_.pread_exact(values.data(), row_bytes, embed_->offset + row * row_bytes);
  MatrixView v;
  v.format = embed_->format;
  v.rows = 1;
  v.cols = int64_t(cols);
  v.group = embed_->group;
  v.data = values.data();
  if (embed_->format == TensorFormat::Q8G || embed_->format == TensorFormat::Q4G) {
    require(embed_->group > 0 && cols % embed_->group == 0, "tensor model.embed_tokens.weight: bad group size");
    const uint64_t groups = cols / embed_->group;
    scales.resize(groups);
    trunk_file_.pread_exact(scales.data(), groups * 2, embed_->offset + embed_->scales_offset + row * groups * 2);
    v.scales = scales.data();
  }
  dequantize_row(v, 0, out);
}

ExpertSourceStats ContainerExperts::stats() const {
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
    container_.read_record(layer, uint32_t(expert), rec.get());
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
