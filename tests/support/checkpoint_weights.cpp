#include "tests/support/checkpoint_weights.h"

#include <cstring>

#include "shared/model/tensors.h"
#include "shared/util/error.h"

namespace waste {

namespace {

constexpr const char* kWeightSuffix = ".weight";

}  // namespace

const CheckpointWeights::Stored& CheckpointWeights::load(const std::string& name, bool as_matrix) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(name);
  if (it != cache_.end()) return *it->second;
  auto s = std::make_unique<Stored>();
  const std::string full = ckpt_.config().tensor_prefix + name;
  // Matrices may be stored quantised (FP8 + scale_inv, MXFP4 packed + scale): read_weight
  // takes the base name and finds whichever form exists.
  if (as_matrix && name.ends_with(kWeightSuffix))
    s->values = ckpt_.read_weight(full.substr(0, full.size() - std::strlen(kWeightSuffix)), &s->shape);
  else
    s->values = ckpt_.read_tensor(full, &s->shape);
  const Stored& ref = *s;
  cache_[name] = std::move(s);
  return ref;
}

MatrixView CheckpointWeights::matrix(const std::string& name) const {
  const Stored& s = load(name, true);
  require(!s.shape.empty(), "checkpoint tensor " + name + " is a scalar, expected a matrix");
  MatrixView m;
  m.format = TensorFormat::F32;
  m.rows = int64_t(s.shape[0]);
  m.cols = m.rows ? int64_t(s.values.size()) / m.rows : 0;  // dims past the first flattened
  m.data = s.values.data();
  return m;
}

std::span<const float> CheckpointWeights::vector(const std::string& name) const {
  const Stored& s = load(name, false);
  return {s.values.data(), s.values.size()};
}

void CheckpointWeights::embedding_row(int64_t token, float* out) const {
  const MatrixView m = matrix("model.embed_tokens.weight");
  require(token >= 0 && token < m.rows, "embedding row " + std::to_string(token) + " is out of range");
  std::memcpy(out, static_cast<const float*>(m.data) + token * m.cols, size_t(m.cols) * sizeof(float));
}

ExpertView CheckpointExperts::expert(int layer, int expert) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(layer, expert);
  auto it = records_.find(key);
  if (it == records_.end()) {
    const ModelConfig& c = ckpt_.config();
    require(layer >= 0 && layer < c.n_layers && c.is_moe_layer(layer) && expert >= 0 && expert < c.n_experts,
            "checkpoint has no routed expert " + std::to_string(expert) + " in layer " + std::to_string(layer));
    const ExpertNames names = expert_tensor_names(c, layer, expert);
    std::vector<uint64_t> gs, us, ds;
    std::vector<float> g = ckpt_.read_weight(c.tensor_prefix + names.gate, &gs);
    std::vector<float> u = ckpt_.read_weight(c.tensor_prefix + names.up, &us);
    std::vector<float> d = ckpt_.read_weight(c.tensor_prefix + names.down, &ds);
    require(gs.size() == 2 && us == gs && ds.size() == 2 && ds[0] == gs[1] && ds[1] == gs[0],
            "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                ": gate/up/down shapes do not fit together");
    auto rec = std::make_unique<std::vector<float>>();
    rec->reserve(g.size() + u.size() + d.size());
    rec->insert(rec->end(), g.begin(), g.end());
    rec->insert(rec->end(), u.begin(), u.end());
    rec->insert(rec->end(), d.begin(), d.end());
    dims_[key] = {int(gs[1]), int(gs[0])};
    it = records_.emplace(key, std::move(rec)).first;
  }
  const auto [hidden, inner] = dims_[key];
  const float* base = it->second->data();
  const size_t mat = size_t(hidden) * size_t(inner);
  ExpertView v;
  v.format = TensorFormat::F32;
  v.hidden = hidden;
  v.intermediate = inner;
  v.gate = reinterpret_cast<const uint8_t*>(base);
  v.up = reinterpret_cast<const uint8_t*>(base + mat);
  v.down = reinterpret_cast<const uint8_t*>(base + 2 * mat);
  return v;
}

}  // namespace waste
