#include "shared/kernels/quantize.h"

#include <cmath>
#include <cstring>

#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

std::vector<uint8_t> quantize_matrix(TensorFormat format, const float* src, uint64_t rows, uint64_t cols,
                                     uint32_t group) {
  TensorBytes layout = trunk_tensor_bytes(format, rows, cols, group);
  std::vector<uint8_t> out(layout.total, 0);
  switch (format) {
    case TensorFormat::F32:
      std::memcpy(out.data(), src, rows * cols * 4);
      return out;
    case TensorFormat::BF16:
    case TensorFormat::F16: {
      auto* dst = reinterpret_cast<uint16_t*>(out.data());
      for (uint64_t i = 0; i < rows * cols; ++i)
        dst[i] = format == TensorFormat::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      return out;
    }
    case TensorFormat::Q8G:
    case TensorFormat::Q4G: {
      const bool q8 = format == TensorFormat::Q8G;
      const float qmax = q8 ? 127.0f : 7.0f;
      auto* scales = reinterpret_cast<uint16_t*>(out.data() + layout.scales_offset);
      const uint64_t groups = cols / group;
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t g = 0; g < groups; ++g) {
          const float* x = src + r * cols + g * group;
          float amax = 0;
          for (uint32_t i = 0; i < group; ++i) amax = std::fmax(amax, std::fabs(x[i]));
          uint16_t s16 = f32_to_f16(amax / qmax);
          float s = f16_to_f32(s16);  // quantize against the scale the kernel will see
          scales[r * groups + g] = s16;
          float inv = s > 0 ? 1.0f / s : 0.0f;
          for (uint32_t i = 0; i < group; ++i) {
            float q = std::nearbyint(x[i] * inv);
            q = std::fmin(std::fmax(q, -qmax), qmax);
            uint64_t idx = r * cols + g * group + i;
            if (q8) {
              out[idx] = uint8_t(int8_t(q));
            } else {
              uint8_t nib = uint8_t(int(q) + 8);
              out[idx / 2] |= uint8_t(nib << ((idx & 1) * 4));
            }
          }
        }
      }
      return out;
    }
    case TensorFormat::VQ3R: break;
  }
  throw Error("quantize_matrix: vq3r is not a trunk format");
}

}  // namespace waste
