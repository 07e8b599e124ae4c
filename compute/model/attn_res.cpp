#include "compute/model/attn_res.h"

#include <algorithm>
#include <vector>

#include "compute/model/ops.h"

namespace waste {

void attn_res(const float* const* blocks, int n_blocks, const float* partial, const AttnResWeights& w, int D, float eps,
              float* out) {
  const int n = n_blocks + 1;
  auto source = [&](int j) { return j < n_blocks ? blocks[j] : partial; };
  std::vector<float> score(static_cast<size_t>(n)), key(static_cast<size_t>(D));
  for (int j = 0; j < n; ++j) {
    rmsnorm(source(j), nullptr, D, eps, key.data());
    double s = 0;
    for (int d = 0; d < D; ++d) s += double(key[size_t(d)]) * w.norm[size_t(d)] * w.proj[size_t(d)];
    score[size_t(j)] = float(s);
  }
  softmax(score.data(), n);
  std::vector<float> mix(size_t(D), 0.0f);  // separate buffer: out may alias partial
  for (int j = 0; j < n; ++j) {
    const float* v = source(j);
    for (int d = 0; d < D; ++d) mix[size_t(d)] += score[size_t(j)] * v[d];
  }
  std::copy(mix.begin(), mix.end(), out);
}

}  // namespace waste
