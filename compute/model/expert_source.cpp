// The default batch protocol of ExpertSource: in order, one expert() at a time.
#include "compute/model/weights.h"

#include <algorithm>

namespace waste {

void ExpertSource::fetch_layer(int layer, std::span<const int> experts) {
  end_layer();  // a previous batch left open is released first
  batch_layer_ = layer;
  batch_.assign(experts.begin(), experts.end());
  batch_next_ = 0;
}

int ExpertSource::next_ready(ExpertView& view) {
  if (batch_held_ >= 0) {
    release(batch_layer_, batch_[size_t(batch_held_)]);
    batch_held_ = -1;
  }
  if (batch_next_ >= batch_.size()) return -1;
  const int i = int(batch_next_++);
  view = expert(batch_layer_, batch_[size_t(i)]);
  batch_held_ = i;
  return i;
}

size_t ExpertSource::next_ready_group(std::span<Ready> out) {
  require(!out.empty(), "next_ready_group: no room for an expert (0 means the layer is done)");
  ExpertView v;
  const int i = next_ready(v);
  if (i < 0) return 0;
  out[0] = {i, v};
  return 1;
}

size_t ExpertSource::next_ready_each(std::span<Ready> out, size_t most) {
  require(!out.empty(), "next_ready_group: no room for an expert (0 means the layer is done)");
  const size_t want = most == 0 ? out.size() : std::min(most, out.size());
  size_t k = 0;
  for (ExpertView v; k < want; ++k) {
    const int i = next_ready(v);
    if (i < 0) break;
    out[k] = {i, v};
  }
  return k;
}

void ExpertSource::end_layer() {
  if (batch_held_ >= 0) release(batch_layer_, batch_[size_t(batch_held_)]);
  batch_held_ = -1;
  batch_.clear();
  batch_next_ = 0;
}

}  // namespace waste
