#include "compute/model/router.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "compute/model/ops.h"

namespace waste {

namespace {

// Indices of the k largest values, largest first; ties go to the lower index (stable).
std::vector<int> top_k_indices(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b); });
  idx.resize(size_t(k));
  return idx;
}

}  // namespace

void route_scores(const RouterParams& p, std::span<const float> bias, const float* logits, int* experts,
                  float* weights) {
  const int E = p.n_experts;
  std::vector<float> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    score[size_t(e)] = sigmoid(logits[e]);
    choice[size_t(e)] = score[size_t(e)] + bias[size_t(e)];
  }
  if (p.n_group > 1 && p.topk_group < p.n_group) {
    // A group scores the sum of its two best biased scores; only the topk_group best groups
    // stay eligible.
    const int per = E / p.n_group;
    std::vector<float> group_score(size_t(p.n_group));
    for (int g = 0; g < p.n_group; ++g) {
      std::vector<float> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      const int best = std::min(2, per);
      std::partial_sort(members.begin(), members.begin() + best, members.end(), std::greater<float>());
      group_score[size_t(g)] = std::accumulate(members.begin(), members.begin() + best, 0.0f);
    }
    std::vector<bool> keep(size_t(p.n_group), false);
    for (int g : top_k_indices(group_score, p.topk_group)) keep[size_t(g)] = true;
    for (int e = 0; e < E; ++e)
      if (!keep[size_t(e / per)]) choice[size_t(e)] = -std::numeric_limits<float>::infinity();
  }
  const std::vector<int> chosen = top_k_indices(choice, p.top_k);
  float sum = 0;
  for (int j = 0; j < p.top_k; ++j) {
    experts[j] = chosen[size_t(j)];
    weights[j] = score[size_t(chosen[size_t(j)])];  // unbiased
    sum += weights[j];
  }
  const float norm = (p.renormalize && p.top_k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
  for (int j = 0; j < p.top_k; ++j) weights[j] *= norm * p.routed_scaling;
}

void route(const RouterParams& p, const RouterWeights& w, const float* x, int64_t n, int* experts, float* weights) {
  std::vector<float> logits(size_t(n) * p.n_experts);
  matmul(w.gate, x, n, logits.data());
  for (int64_t t = 0; t < n; ++t)
    route_scores(p, w.bias, &logits[size_t(t) * p.n_experts], experts + t * p.top_k, weights + t * p.top_k);
}

}  // namespace waste
