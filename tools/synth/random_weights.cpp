#include "tools/synth/random_weights.h"

#include "shared/util/half.h"

namespace waste {

std::vector<uint8_t> random_quantized(TensorFormat f, uint64_t rows, uint64_t cols, uint32_t group, double std_dev,
                                      Rng& rng) {
  TensorBytes layout = trunk_tensor_bytes(f, rows, cols, group);
  std::vector<uint8_t> out(layout.total, 0);
  const uint64_t n = rows * cols;
  if (f == TensorFormat::Q8G) {
    // Uniform in [-127, 127]: std 73.6.
    for (uint64_t i = 0; i < n; ++i) out[i] = uint8_t(int8_t(int(rng.below(255)) - 127));
  } else {
    // Nibbles 1..15 (values -7..7, mean 0, std 4.32): two per byte.
    for (uint64_t i = 0; i < n / 2; ++i) {
      uint64_t r = rng.next();
      out[i] = uint8_t((1 + (r & 0xffff) % 15) | ((1 + (r >> 16 & 0xffff) % 15) << 4));
    }
  }
  const double value_std = f == TensorFormat::Q8G ? 73.6 : 4.32;
  const uint16_t scale = f32_to_f16(float(std_dev / value_std));
  auto* scales = reinterpret_cast<uint16_t*>(out.data() + layout.scales_offset);
  for (uint64_t i = 0; i < rows * (cols / group); ++i) scales[i] = scale;
  return out;
}

}  // namespace waste
