// A routed expert as it sits in a record (in an iod slot or a buffer): pointers into the
// record, no copy. The RVQ kernels and the F32/BF16 expert path read from this.
#pragma once
#include <cstdint>

#include "shared/container/format.h"

namespace waste {

struct ExpertView {
  TensorFormat format = TensorFormat::VQ3R;
  int hidden = 0;        // input width of gate/up, output width of down
  int intermediate = 0;  // inner width
  const uint8_t* gate = nullptr;  // [intermediate, hidden]: vq3r codes, or f32/bf16 values
  const uint8_t* up = nullptr;    // [intermediate, hidden]
  const uint8_t* down = nullptr;  // [hidden, intermediate]
  const uint16_t* gate_scales = nullptr;  // vq3r: f16, one per row
  const uint16_t* up_scales = nullptr;
  const uint16_t* down_scales = nullptr;
  const float* codebooks = nullptr;  // vq3r: gate, up, down books of the layer, kCodebookFloats each
};

// `record` points at the 64-byte header; layout comes from the manifest.
inline ExpertView expert_view(const uint8_t* record, const RecordLayout& layout, const float* layer_codebooks) {
  ExpertView v;
  v.format = layout.format;
  v.hidden = int(layout.hidden);
  v.intermediate = int(layout.intermediate);
  v.gate = record + layout.gate_offset;
  v.up = record + layout.up_offset;
  v.down = record + layout.down_offset;
  if (layout.format == TensorFormat::VQ3R) {
    const auto* s = reinterpret_cast<const uint16_t*>(record + layout.scales_offset);
    v.gate_scales = s;
    v.up_scales = s + layout.intermediate;
    v.down_scales = s + 2 * layout.intermediate;
    v.codebooks = layer_codebooks;
  }
  return v;
}

}  // namespace waste
