#include "compute/model/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compute/model/ops.h"
#include "compute/model/router.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

// Resolves tensors by release name and checks their shapes against the config, so a wrong
// checkpoint fails at load time naming the tensor, never mid-forward.
struct Loader {
  const WeightSource& w;

  MatrixView mat(const std::string& name, int64_t rows, int64_t cols) const {
    MatrixView m = w.matrix(name);
    if (m.rows != rows || m.cols != cols)
      throw Error("tensor " + name + " is [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                  "], expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    return m;
  }
  // A vector of exactly n values, or at least n when the release pads it (K3 A_log).
  std::span<const float> vec(const std::string& name, int64_t n, bool longer_ok = false) const {
    std::span<const float> v = w.vector(name);
    if (int64_t(v.size()) != n && !(longer_ok && int64_t(v.size()) > n))
      throw Error("tensor " + name + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
    return v.first(size_t(n));
  }
};

MlaWeights load_mla(const Loader& ld, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.n_heads, D = c.hidden, qk = c.qk_nope + c.qk_rope;
  MlaWeights m;
  if (c.q_lora_rank > 0) {
    m.q_a = ld.mat(p + "q_a_proj.weight", c.q_lora_rank, D);
    m.q_a_norm = ld.vec(p + "q_a_layernorm.weight", c.q_lora_rank);
    m.q_b = ld.mat(p + "q_b_proj.weight", H * qk, c.q_lora_rank);
  } else {
    m.q_proj = ld.mat(p + "q_proj.weight", H * qk, D);
  }
  m.kv_a = ld.mat(p + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope, D);
  m.kv_a_norm = ld.vec(p + "kv_a_layernorm.weight", c.kv_lora_rank);
  m.kv_b = ld.mat(p + "kv_b_proj.weight", H * (c.qk_nope + c.v_head), c.kv_lora_rank);
  require(m.kv_b.format != TensorFormat::VQ3R, "tensor " + p + "kv_b_proj.weight: VQ3R is not a trunk format");
  if (c.mla_output_gate) m.g_proj = ld.mat(p + "g_proj.weight", H * c.v_head, D);
  m.o_proj = ld.mat(p + "o_proj.weight", D, H * c.v_head);
  return m;
}

KdaWeights load_kda(const Loader& ld, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.kda_heads, K = c.kda_head_dim, P = H * K, D = c.hidden, W = c.conv_kernel;
  KdaWeights k;
  k.q_proj = ld.mat(p + "q_proj.weight", P, D);
  k.k_proj = ld.mat(p + "k_proj.weight", P, D);
  k.v_proj = ld.mat(p + "v_proj.weight", P, D);
  k.q_conv = ld.vec(p + "q_conv1d.weight", P * W);
  k.k_conv = ld.vec(p + "k_conv1d.weight", P * W);
  k.v_conv = ld.vec(p + "v_conv1d.weight", P * W);
  k.f_a = ld.mat(p + "f_a_proj.weight", K, D);
  k.f_b = ld.mat(p + "f_b_proj.weight", P, K);
  // K3 stores A_log padded past the head count; only the first `heads` entries are real.
  k.A_log = ld.vec(p + "A_log", H, c.arch == Arch::KimiK3);
  k.dt_bias = ld.vec(p + "dt_bias", P);
  k.b_proj = ld.mat(p + "b_proj.weight", H, D);
  if (c.kda_full_rank_gate) {
    k.g_proj = ld.mat(p + "g_proj.weight", P, D);
  } else {
    k.g_a = ld.mat(p + "g_a_proj.weight", K, D);
    k.g_b = ld.mat(p + "g_b_proj.weight", P, K);
  }
  k.o_norm = ld.vec(p + "o_norm.weight", K);
  k.o_proj = ld.mat(p + "o_proj.weight", D, P);
  return k;
}

MlpWeights load_mlp(const Loader& ld, const std::string& p, int64_t inner, int64_t D) {
  return {ld.mat(p + "gate_proj.weight", inner, D), ld.mat(p + "up_proj.weight", inner, D),
          ld.mat(p + "down_proj.weight", D, inner)};
}

AttnResWeights load_attn_res(const Loader& ld, const std::string& p, int64_t D) {
  return {ld.vec(p + "_norm.weight", D), ld.vec(p + "_proj.weight", D)};
}

}  // namespace

Model Model::create(const WeightSource& weights, ExpertSource& experts, const ModelConfig& c) {
  require(c.n_layers > 0 && c.hidden > 0 && c.vocab > 0, "model config has no layers, width or vocabulary");
  if (c.arch == Arch::KimiK3) require(c.attn_res_block > 0, "Kimi K3 config lacks attn_res_block_size");
  Model m(weights, experts, c);
  m.softmax_scale_ = mla_softmax_scale(c);
  const Loader ld{weights};
  const int64_t D = c.hidden;
  bool saw_mla = false;  // the first MLA layer decides the cache type
  const bool kimi = c.arch != Arch::DeepseekV3;
  for (int L = 0; L < c.n_layers; ++L) {
    const std::string p = "model.layers." + std::to_string(L) + ".";
    Layer l;
    l.input_norm = ld.vec(p + "input_layernorm.weight", D);
    l.post_norm = ld.vec(p + "post_attention_layernorm.weight", D);
    if (c.attn_res_block > 0) {
      l.attn_res = load_attn_res(ld, p + "self_attention_res", D);
      l.mlp_res = load_attn_res(ld, p + "mlp_res", D);
    }
    l.is_mla = c.is_mla_layer(L);
    if (l.is_mla) {
      l.mla = load_mla(ld, c, p + "self_attn.");
      // The first MLA layer's kv_b_proj decides the cache's type (shared/model/mla_cache.h), as
      // the planner reads it from the manifest.
      if (!saw_mla) m.mla_cache_ = waste::mla_cache_format(l.mla.kv_b.format);
      saw_mla = true;
    } else
      l.kda = load_kda(ld, c, p + "self_attn.");
    l.is_moe = c.is_moe_layer(L);
    if (!l.is_moe) {
      l.dense = load_mlp(ld, p + "mlp.", c.dense_intermediate, D);
    } else {
      const std::string q = p + (kimi ? "block_sparse_moe." : "mlp.");
      l.moe.router.gate = ld.mat(q + "gate.weight", c.n_experts, D);
      l.moe.router.bias = ld.vec(q + "gate.e_score_correction_bias", c.n_experts);
      if (c.latent_dim > 0) {
        l.moe.latent_down = ld.mat(q + "routed_expert_down_proj.weight", c.latent_dim, D);
        if (c.latent_norm) l.moe.latent_norm = ld.vec(q + "routed_expert_norm.weight", c.latent_dim);
        l.moe.latent_up = ld.mat(q + "routed_expert_up_proj.weight", D, c.latent_dim);
      }
      if (c.n_shared > 0) l.moe.shared = load_mlp(ld, q + "shared_experts.", int64_t(c.moe_intermediate) * c.n_shared, D);
    }
    m.layers_.push_back(l);
  }
  m.final_norm_ = ld.vec("model.norm.weight", D);
  if (c.attn_res_block > 0) m.output_res_ = load_attn_res(ld, "model.output_attn_res", D);
  m.lm_head_ = ld.mat("lm_head.weight", c.vocab, D);
  return m;
}

Session Model::new_session(int64_t max_ctx) const {
  require(max_ctx > 0, "session context must be at least one token");
  Session s;
  s.max_ctx_ = max_ctx;
  s.layers_.resize(size_t(config_.n_layers));
  for (int L = 0; L < config_.n_layers; ++L) {
    if (layers_[size_t(L)].is_mla) {
      s.layers_[size_t(L)].mla.width = config_.kv_lora_rank + config_.qk_rope;
      s.layers_[size_t(L)].mla.format = mla_cache_;
    } else
      s.layers_[size_t(L)].kda = make_kda_state(config_);
  }
  return s;
}

Session Model::restore_session(int64_t max_ctx, int64_t position, std::vector<LayerState> layers) const {
  require(position >= 0 && position <= max_ctx, "restore: position " + std::to_string(position) +
                                                    " is outside the session context of " + std::to_string(max_ctx));
  Session s = new_session(max_ctx);
  require(layers.size() == s.layers_.size(), "restore: " + std::to_string(layers.size()) + " layers of state, the model has " +
                                                 std::to_string(s.layers_.size()));
  for (size_t L = 0; L < layers.size(); ++L) {
    const LayerState& want = s.layers_[L];
    const LayerState& got = layers[L];
    const bool same = got.mla.width == want.mla.width && got.mla.format == want.mla.format &&
                      got.mla.values() == size_t(position) * size_t(want.mla.width) &&
                      (want.mla.format == MlaCacheFormat::BF16 ? got.mla.rows.empty() : got.mla.rows_bf16.empty()) &&
                      got.kda.state.size() == want.kda.state.size() && got.kda.conv_q.size() == want.kda.conv_q.size() &&
                      got.kda.conv_k.size() == want.kda.conv_k.size() && got.kda.conv_v.size() == want.kda.conv_v.size();
    require(same, "restore: layer " + std::to_string(L) + "'s state does not have this model's shape at position " +
                      std::to_string(position));
  }
  s.layers_ = std::move(layers);
  s.position_ = position;
  return s;
}

void Model::feed_forward(int L, const float* x, int64_t n, float* y) const {
  const Layer& l = layers_[size_t(L)];
  if (l.is_moe) {
    std::vector<int> routed;
    moe_forward(config_, L, l.moe, *experts_, x, n, y, profile_, lookahead_ > 0 ? &routed : nullptr, faults_);
    if (lookahead_ > 0) score_lookahead(L, routed);
  } else {
    PhaseClock clock(profile_);
    mlp_forward(config_, l.dense, x, n, y);
    clock.lap(&PhaseTimes::mlp, L);
  }
}

void Model::prefetch_next(int L, const float* h, int64_t n) const {
  if (lookahead_ <= 0 || L + 1 >= config_.n_layers || !layers_[size_t(L + 1)].is_moe) return;
  PhaseClock clock(profile_);
  const Layer& next = layers_[size_t(L + 1)];
  const int D = config_.hidden;
  // Sent once this layer is done (its experts released): then the reads go into the freed
  // slots while the next layer's attention runs, even at the floor budget where nothing else
  // is free. The guess: the next layer's router on the next layer's norm of the stream after
  // this layer (what it will see, minus the next attention's output).
  RouterParams guess_router = RouterParams::of(config_);
  guess_router.top_k = std::min(lookahead_, guess_router.n_experts);
  const int k = guess_router.top_k;
  std::vector<float> normed(size_t(n) * D);
  for (int64_t t = 0; t < n; ++t) rmsnorm(h + t * D, next.post_norm.data(), D, config_.rms_eps, &normed[size_t(t) * D]);
  std::vector<int> chosen(size_t(n) * k);
  std::vector<float> weight(chosen.size());
  route(guess_router, next.moe.router, normed.data(), n, chosen.data(), weight.data());
  // Best first: rank by position in each token's list, then by id.
  std::vector<int> order;
  std::vector<bool> seen(size_t(config_.n_experts), false);
  for (int j = 0; j < k; ++j)
    for (int64_t t = 0; t < n; ++t) {
      const int e = chosen[size_t(t * k + j)];
      if (!seen[size_t(e)]) {
        seen[size_t(e)] = true;
        order.push_back(e);
      }
    }
  {
    std::lock_guard lock(lookahead_record_->mu);
    auto& guess = lookahead_record_->guess;
    if (guess.size() < size_t(config_.n_layers)) guess.resize(size_t(config_.n_layers));
    guess[size_t(L + 1)] = order;
    std::sort(guess[size_t(L + 1)].begin(), guess[size_t(L + 1)].end());
  }
  experts_->prefetch(L + 1, order);
  clock.lap(&PhaseTimes::router, L + 1);
}

void Model::score_lookahead(int L, const std::vector<int>& routed) const {
  std::lock_guard lock(lookahead_record_->mu);
  auto& guess = lookahead_record_->guess;
  if (size_t(L) >= guess.size() || guess[size_t(L)].empty()) return;  // first layer: nothing guessed
  const auto& g = guess[size_t(L)];
  uint64_t hit = 0;
  for (int e : routed) hit += std::binary_search(g.begin(), g.end(), e) ? 1 : 0;
  LookaheadStats& st = lookahead_record_->stats;
  ++st.visits;
  st.predicted += g.size();
  st.needed += routed.size();
  st.hit += hit;
  guess[size_t(L)].clear();
}

Model::LookaheadStats Model::lookahead_stats() const {
  std::lock_guard lock(lookahead_record_->mu);
  return lookahead_record_->stats;
}

void Model::attention_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const {
  PhaseClock clock(profile_);
  if (layers_[size_t(L)].is_mla)
    mla_rows(L, parts, x, y);
  else
    kda_rows(L, parts, x, y);
  clock.lap(&PhaseTimes::attention, L);
}

// Projections in (all rows), attention over each session's own cache, projection out (all rows).
void Model::mla_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const {
  const MlaWeights& w = layers_[size_t(L)].mla;
  const int64_t n = parts.back().row0 + parts.back().n;
  MlaProjections p;
  mla_project(config_, w, x, n, p, &ThreadPool::global());
  for (const SessionRows& r : parts) {
    Session& s = *r.s;
    mla_attend(config_, w, rope_, softmax_scale_, s.layers_[size_t(L)].mla, s.max_ctx_, s.position_, p, r.row0, r.n,
               &ThreadPool::global());
  }
  mla_output(config_, w, p, n, y, &ThreadPool::global());
}

// Projections in (all rows), the delta rule on each session's own state, projection out (all rows).
void Model::kda_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const {
  const KdaWeights& w = layers_[size_t(L)].kda;
  const int64_t n = parts.back().row0 + parts.back().n;
  KdaProjections p;
  kda_project(config_, w, x, n, p);
  std::vector<float> o(size_t(n) * config_.kda_heads * config_.kda_head_dim);
  for (const SessionRows& r : parts)
    kda_mix(config_, w, r.s->layers_[size_t(L)].kda, p, r.row0, r.n, o.data(), kda_chunk_, &ThreadPool::global());
  kda_output(w, o.data(), n, y);
}

void Model::forward(Session& s, std::span<const int32_t> tokens, float* logits, LogitRows rows,
                    std::vector<float>* layer_hidden) const {
  const BatchItem item{&s, tokens, logits, rows, {}};  // no input rows: the embedding table's
  forward_rows({&item, 1}, layer_hidden, nullptr);
}

void Model::forward(Session& s, std::span<const int32_t> tokens, std::span<const float* const> inputs, float* logits,
                    LogitRows rows) const {
  const BatchItem item{&s, tokens, logits, rows, inputs};
  forward_rows({&item, 1}, nullptr, nullptr);
}

std::vector<std::string> Model::forward_batch(std::span<const BatchItem> items) const {
  std::vector<RowFault> faults;
  forward_rows(items, nullptr, &faults);
  // Rows are the items' tokens in order: each fault goes to the item holding its row (the first
  // reason per item is its error).
  std::vector<std::string> failed(items.size());
  for (const RowFault& f : faults) {
    int64_t row0 = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t m = int64_t(items[i].tokens.size());
      if (f.row < row0 + m) {
        if (failed[i].empty()) failed[i] = f.reason;
        break;
      }
      row0 += m;
    }
  }
  return failed;
}

void Model::forward_rows(std::span<const BatchItem> items, std::vector<float>* layer_hidden,
                         std::vector<RowFault>* faults) const {
  const int64_t D = config_.hidden, V = config_.vocab;
  require(!items.empty(), "forward: no sessions");
  // Everything is checked before any state changes, so a refused batch leaves every session
  // as it was.
  std::vector<SessionRows> parts;
  int64_t n = 0, head_rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    require(it.session != nullptr, "forward: batch item " + std::to_string(i) + " has no session");
    Session& s = *it.session;
    const int64_t m = int64_t(it.tokens.size());
    require(m > 0, "forward: no tokens");
    require(int64_t(s.layers_.size()) == config_.n_layers, "forward: session was not made by this model");
    require(s.position_ + m <= s.max_ctx_, "forward: " + std::to_string(s.position_ + m) +
                                               " tokens exceed the session context of " + std::to_string(s.max_ctx_));
    require(it.rows == LogitRows::None || it.logits != nullptr,
            "forward: batch item " + std::to_string(i) + " asks for logits but gives no buffer");
    for (size_t k = 0; k < i; ++k)
      require(items[k].session != it.session, "forward: a session appears twice in one batch (items " +
                                                  std::to_string(k) + " and " + std::to_string(i) + ")");
    for (int32_t id : it.tokens)
      require(id >= 0 && id < config_.vocab, "forward: token id " + std::to_string(id) +
                                                 " is outside the vocabulary of " + std::to_string(config_.vocab));
    require(it.inputs.empty() || int64_t(it.inputs.size()) == m,
            "forward: batch item " + std::to_string(i) + " has " + std::to_string(it.inputs.size()) +
                " input rows for " + std::to_string(m) + " tokens");
    parts.push_back({&s, n, m});
    n += m;
    head_rows += it.rows == LogitRows::All ? m : it.rows == LogitRows::Last ? 1 : 0;
  }

  PhaseClock clock(profile_);
  std::vector<float> h(size_t(n * D));
  for (size_t i = 0; i < items.size(); ++i)
    for (int64_t t = 0; t < parts[i].n; ++t) {
      float* row = &h[size_t((parts[i].row0 + t) * D)];
      const float* given = items[i].inputs.empty() ? nullptr : items[i].inputs[size_t(t)];
      if (given)
        std::copy_n(given, size_t(D), row);
      else
        weights_->embedding_row(items[i].tokens[size_t(t)], row);
    }
  if (layer_hidden) layer_hidden->assign(size_t(config_.n_layers * n * D), 0.0f);
  clock.lap(&PhaseTimes::embed);

  {
    // Faults are collected for this forward only, whatever way it leaves.
    struct FaultScope {
      std::vector<RowFault>*& slot;
      ~FaultScope() { slot = nullptr; }
    } scope{faults_};
    faults_ = faults;
    if (config_.arch == Arch::KimiK3)
      run_k3_decoder(parts, h.data(), n, layer_hidden);
    else
      run_residual_decoder(parts, h.data(), n, layer_hidden);
  }
  for (const SessionRows& p : parts) p.s->position_ += p.n;
  clock.lap(&PhaseTimes::other);
  if (head_rows == 0) return;

  // Only the rows asked for go through the final norm and the (large) output head, all items'
  // rows in one matmul (the head is read once per step, not once per session).
  std::vector<float> normed(size_t(head_rows * D));
  std::vector<std::pair<size_t, int64_t>> dest;  // item, its rows in the head's output
  int64_t r = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].rows == LogitRows::None) continue;
    const int64_t first = items[i].rows == LogitRows::All ? 0 : parts[i].n - 1;
    dest.push_back({i, parts[i].n - first});
    for (int64_t t = first; t < parts[i].n; ++t, ++r)
      rmsnorm(&h[size_t((parts[i].row0 + t) * D)], final_norm_.data(), int(D), config_.rms_eps, &normed[size_t(r * D)]);
  }
  if (dest.size() == 1) {
    matmul(lm_head_, normed.data(), head_rows, items[dest[0].first].logits);  // straight into the caller's buffer
  } else {
    std::vector<float> out(size_t(head_rows * V));
    matmul(lm_head_, normed.data(), head_rows, out.data());
    size_t at = 0;
    for (const auto& [i, m] : dest) {
      std::copy_n(&out[at], size_t(m * V), items[i].logits);
      at += size_t(m * V);
    }
  }
  clock.lap(&PhaseTimes::head);
}

}  // namespace waste
