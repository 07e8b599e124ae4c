#include "compute/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "shared/util/error.h"

namespace waste {

namespace {

// A double in [0, 1) from the top 53 bits: the same on every standard library.
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[size_t(best)]) best = int32_t(i);
  return best;
}

}  // namespace

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty, int window) {
  if (penalty == 1.0f || window <= 0) return;
  const size_t from = history.size() > size_t(window) ? history.size() - size_t(window) : 0;
  std::unordered_set<int32_t> seen;
  for (size_t i = from; i < history.size(); ++i) {
    const int32_t id = history[i];
    if (id < 0 || size_t(id) >= logits.size() || !seen.insert(id).second) continue;
    float& l = logits[size_t(id)];
    l = l > 0 ? l / penalty : l * penalty;
  }
}

void apply_presence_frequency_penalty(std::span<float> logits, std::span<const int32_t> generated, float presence,
                                      float frequency) {
  if (presence == 0.0f && frequency == 0.0f) return;
  std::unordered_map<int32_t, int> count;
  for (int32_t id : generated)
    if (id >= 0 && size_t(id) < logits.size()) ++count[id];
  for (const auto& [id, n] : count) logits[size_t(id)] -= presence + frequency * float(n);
}

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {
  require(std::isfinite(p.temperature), "sampling: temperature must be finite");
  require(p.top_k >= 0, "sampling: top_k must be >= 0");
  require(p.top_p > 0.0f && p.top_p <= 1.0f, "sampling: top_p must be in (0, 1]");
  require(p.min_p >= 0.0f && p.min_p < 1.0f, "sampling: min_p must be in [0, 1)");
  require(p.repetition_penalty > 0.0f, "sampling: repetition_penalty must be > 0");
  require(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty), "sampling: penalties must be finite");
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated_from) {
  require(!logits.empty(), "sampling: empty logits");
  // NaN or +Inf logits (a damaged norm or head) would pick garbage ids and stream them as text:
  // an error instead. -Inf is a constraint's mask and fine.
  for (float x : logits)
    require(!(std::isnan(x) || x == std::numeric_limits<float>::infinity()),
            "the model produced NaN or infinite logits (its weights may be damaged: run waste verify)");
  work_.assign(logits.begin(), logits.end());
  apply_repetition_penalty(work_, history, params_.repetition_penalty, params_.repetition_window);
  if (generated_from < history.size())
    apply_presence_frequency_penalty(work_, history.subspan(generated_from), params_.presence_penalty,
                                     params_.frequency_penalty);
  if (params_.temperature <= 0.0f || params_.top_k == 1) return argmax(work_);

  // Candidates in decreasing logit order (ties: lower id first) when a filter needs ranks;
  // otherwise every id in id order (no sort of the whole vocabulary).
  const size_t V = work_.size();
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b);
  };
  size_t n = V;
  bool sorted = false;
  if (params_.top_k > 0 && size_t(params_.top_k) < V) {
    n = size_t(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + ptrdiff_t(n), order_.end(), by_logit);
    sorted = true;
  } else if (params_.top_p < 1.0f) {
    std::sort(order_.begin(), order_.end(), by_logit);
    sorted = true;
  }

  // Softmax at the temperature over the candidates (in double: sums over 160K terms).
  float max_logit = work_[size_t(order_[0])];
  if (!sorted)
    for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, work_[size_t(order_[i])]);
  std::vector<double> prob(n);
  double total = 0.0, p_max = 0.0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(double(work_[size_t(order_[i])] - max_logit) / double(params_.temperature));
    total += prob[i];
    p_max = std::max(p_max, prob[i]);
  }
  // Nucleus: keep the shortest prefix (in rank order) whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i] / total;
      if (cum >= double(params_.top_p)) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  // min-p: relative to the most likely token.
  const double floor = double(params_.min_p) * p_max;
  total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] < floor) prob[i] = 0.0;
    total += prob[i];
  }
  const double u = uniform01(rng_) * total;
  double cum = 0.0;
  int32_t last = order_[0];
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] == 0.0) continue;
    cum += prob[i];
    last = order_[i];
    if (u < cum) return order_[i];
  }
  return last;  // rounding left u at the very top
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // The earliest complete stop string ends the stream.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_)
    if (!s.empty()) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string() : out;
}

}  // namespace waste
