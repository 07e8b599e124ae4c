#include "compute/model/expert_apply.h"

#include <vector>

#include "compute/model/ops.h"
#include "shared/kernels/matvec.h"
#include "shared/util/error.h"

namespace waste {

void apply_lossless_expert(const ModelConfig& c, const ExpertView& v, const float* x, int64_t n, float* y) {
  if (v.format != TensorFormat::F32 && v.format != TensorFormat::BF16)
    throw Error(std::string("expert record format ") + format_name(v.format) +
                " is not a routed-expert format (F32, BF16 and VQ3R are)");
  auto view = [&](const uint8_t* data, int rows, int cols) {
    MatrixView m;
    m.format = v.format;
    m.rows = rows;
    m.cols = cols;
    m.data = data;
    return m;
  };
  const int D = v.hidden, I = v.intermediate;
  std::vector<float> gate(size_t(n) * I), up(size_t(n) * I);
  matmul(view(v.gate, I, D), x, n, gate.data());
  matmul(view(v.up, I, D), x, n, up.data());
  gated_activation(c, gate.data(), up.data(), int64_t(n) * I, gate.data());
  matmul(view(v.down, D, I), gate.data(), n, y);
}

}  // namespace waste
