#include "compute/experts/resident_experts.h"

#include <cstdlib>

#include "shared/util/error.h"
#include "shared/util/large_alloc.h"
#include "shared/util/progress.h"

namespace waste {

void ResidentExperts::FreeAligned::operator()(uint8_t* p) const { std::free(p); }

ResidentExperts::ResidentExperts(const Container& c, bool progress) {
  uint64_t total = 0;
  for (const ExpertLayerInfo& l : c.expert_layers()) total += uint64_t(l.expert_count) * l.layout.stride;
  Progress bar("loading experts", total, "B", progress);
  for (const ExpertLayerInfo& l : c.expert_layers()) {
    Layer& dst = layers_[l.layer];
    dst.info = &l;
    const uint64_t bytes = round_up(uint64_t(l.expert_count) * l.layout.stride, kRecordAlign);
    auto* raw = static_cast<uint8_t*>(alloc_large(bytes));
    require(raw != nullptr, "out of memory for the " + std::to_string(bytes) + " expert bytes of layer " +
                                std::to_string(l.layer) + " (--resident needs every expert in RAM)");
    dst.records.reset(raw);
    for (uint32_t e = 0; e < l.expert_count; ++e) {
      c.read_record(l.layer, e, raw + uint64_t(e) * l.layout.stride);
      bar.add(l.layout.stride);
    }
    if (l.layout.format == TensorFormat::VQ3R) dst.codebooks = c.read_codebooks(l.layer);
    bytes_ += bytes;
  }
  bar.finish();
}

ExpertView ResidentExperts::expert(int layer, int expert) {
  auto it = layers_.find(layer);
  require(it != layers_.end(), "layer " + std::to_string(layer) + " has no routed experts");
  const Layer& l = it->second;
  require(expert >= 0 && uint32_t(expert) < l.info->expert_count,
          "layer " + std::to_string(layer) + " has no expert " + std::to_string(expert));
  ++stats_.hits;
  return expert_view(l.records.get() + uint64_t(expert) * l.info->layout.stride, l.info->layout,
                     l.codebooks.empty() ? nullptr : l.codebooks.data());
}

size_t ResidentExperts::next_ready_group(std::span<Ready> out) {
  // The default batch protocol's release of the expert handed out before is a no-op here, so
  // every view of the group stays valid.
  return next_ready_each(out);
}

}  // namespace waste
