#include "compute/model/moe.h"

#include <map>
#include <memory>
#include <algorithm>
#include <vector>

#include "compute/model/expert_apply.h"
#include "compute/model/ops.h"
#include "compute/model/rvq_experts.h"
#include "shared/util/error.h"

namespace waste {

void mlp_forward(const ModelConfig& c, const MlpWeights& w, const float* x, int64_t n, float* y) {
  const int64_t I = w.gate.rows;
  std::vector<float> gate(size_t(n * I)), up(size_t(n * I));
  matmul(w.gate, x, n, gate.data());
  matmul(w.up, x, n, up.data());
  gated_activation(c, gate.data(), up.data(), n * I, gate.data());
  matmul(w.down, gate.data(), n, y);
}

namespace {

// Per-thread buffers of the routed-expert step, kept between calls (see moe_forward).
struct MoeScratch {
  std::vector<float> contrib, acc, in, out, wts;
  std::vector<int64_t> rows;
  std::unique_ptr<RvqExpertBatch> rvq;
  bool situ = false;  // the activation rvq was made for
  float beta = 0, beta_linear = 0;
};

// Ends the layer's expert batch on every exit path (releases whatever is still held).
struct LayerBatchGuard {
  ExpertSource& src;
  ~LayerBatchGuard() {
    try {
      src.end_layer();
    } catch (...) {  // a release that fails (iod gone) must not mask the original error
    }
  }
};

}  // namespace

void moe_forward(const ModelConfig& c, int layer, const MoeWeights& w, ExpertSource& experts, const float* x,
                 int64_t n, float* y, PhaseTimes* prof, std::vector<int>* routed, std::vector<RowFault>* faults) {
  PhaseClock clock(prof);
  const int D = c.hidden, k = c.top_k;
  std::vector<int> chosen(size_t(n) * k);
  std::vector<float> weight(size_t(n) * k);
  route(c, w.router, x, n, chosen.data(), weight.data());
  clock.lap(&PhaseTimes::router, layer);

  // Routed experts read z: x itself, or its latent projection (K3).
  const bool latent = w.latent_down.rows > 0;
  const int Z = latent ? int(w.latent_down.rows) : D;
  std::vector<float> z_latent;
  const float* z = x;
  if (latent) {
    z_latent.resize(size_t(n) * Z);
    matmul(w.latent_down, x, n, z_latent.data());
    z = z_latent.data();
  }

  // Tokens per expert, in ascending expert order: the union of the batch's experts is fetched
  // once and each expert runs on all of its tokens at once.
  std::map<int, std::vector<std::pair<int64_t, float>>> users;
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) users[chosen[size_t(t * k + j)]].push_back({t, weight[size_t(t * k + j)]});
  std::vector<int> ids;
  std::vector<size_t> first_row;  // expert i's outputs start at row first_row[i] of `contrib`
  size_t total_rows = 0;
  for (const auto& [e, u] : users) {
    ids.push_back(e);
    first_row.push_back(total_rows);
    total_rows += u.size();
  }
  std::vector<const std::vector<std::pair<int64_t, float>>*> user_list;
  for (const auto& [e, u] : users) user_list.push_back(&u);
  if (routed) *routed = ids;
  clock.lap(&PhaseTimes::mlp, layer);

  // Experts arrive in any order (completion order through iod). Each writes its weighted
  // outputs into its own rows of `contrib`; the sum below runs in ascending expert order, so
  // the result never depends on arrival order, cache state or prefetching.
  // Buffers are reused call after call (per thread: moe_forward may run on several threads):
  // allocating them per layer made the allocator return and re-fault hundreds of KiB per row
  // (contrib and the RVQ lookup tables), which at 8 rows cost more than the experts.
  thread_local MoeScratch ws;
  ws.contrib.resize(total_rows * size_t(Z));  // every row is overwritten by its expert below
  std::vector<float>& contrib = ws.contrib;
  std::vector<float>& in = ws.in;
  std::vector<float>& out = ws.out;
  std::vector<float>& wts = ws.wts;
  std::vector<int64_t>& rows = ws.rows;
  bool rvq_ready = false;
  {
    LayerBatchGuard guard{experts};
    experts.fetch_layer(layer, ids);
    for (;;) {
      ExpertView v;
      int i;
      try {
        i = experts.next_ready(v);
      } catch (const ExpertUnavailable& lost) {
        // Only the rows routed to this expert are at fault: they get no contribution from it
        // and are reported; every other row of the batch comes out exact.
        if (!faults || lost.layer != layer) throw;
        const auto at = std::lower_bound(ids.begin(), ids.end(), lost.expert);
        if (at == ids.end() || *at != lost.expert) throw;
        const size_t k_lost = size_t(at - ids.begin());
        const auto& u = *user_list[k_lost];
        std::fill_n(&contrib[first_row[k_lost] * size_t(Z)], u.size() * size_t(Z), 0.0f);
        for (const auto& [row, wt] : u) faults->push_back({row, lost.what()});
        continue;
      }
      clock.lap(&PhaseTimes::fetch_wait, layer, i < 0 ? -1 : ids[size_t(i)]);
      if (i < 0) break;
      const int e = ids[size_t(i)];
      if (v.hidden != Z || v.intermediate != c.moe_intermediate)
        throw Error("expert " + std::to_string(e) + " of layer " + std::to_string(layer) + " has shape hidden " +
                    std::to_string(v.hidden) + " x inner " + std::to_string(v.intermediate) + ", expected " +
                    std::to_string(Z) + " x " + std::to_string(c.moe_intermediate));
      const auto& u = *user_list[size_t(i)];
      const int64_t m = int64_t(u.size());
      float* dst = &contrib[first_row[size_t(i)] * size_t(Z)];
      if (v.format == TensorFormat::VQ3R) {
        // Compressed experts go through the RVQ lookup-table kernels; each token's tables are
        // built once per layer and shared by all experts it chose.
        if (!rvq_ready) {
          const bool situ = c.activation == Activation::SiTU;
          if (!ws.rvq || ws.situ != situ || ws.beta != c.situ_beta || ws.beta_linear != c.situ_linear_beta) {
            ws.rvq = std::make_unique<RvqExpertBatch>(situ, c.situ_beta, c.situ_linear_beta);
            ws.situ = situ;
            ws.beta = c.situ_beta;
            ws.beta_linear = c.situ_linear_beta;
          }
          ws.rvq->set_inputs(z, n, Z);
          rvq_ready = true;
        }
        RvqExpertBatch* rvq = ws.rvq.get();
        rows.resize(size_t(m));
        wts.resize(size_t(m));
        for (int64_t r = 0; r < m; ++r) {
          rows[size_t(r)] = u[size_t(r)].first;
          wts[size_t(r)] = u[size_t(r)].second;
        }
        rvq->apply_rows(v, rows.data(), wts.data(), m, dst);
      } else {
        in.resize(size_t(m) * Z);
        out.resize(size_t(m) * Z);
        for (int64_t r = 0; r < m; ++r) std::copy_n(z + size_t(u[size_t(r)].first) * Z, Z, &in[size_t(r) * Z]);
        apply_lossless_expert(c, v, in.data(), m, out.data());
        for (int64_t r = 0; r < m; ++r) {
          const float wt = u[size_t(r)].second;
          for (int d = 0; d < Z; ++d) dst[size_t(r) * Z + d] = wt * out[size_t(r) * Z + d];
        }
      }
      clock.lap(&PhaseTimes::experts, layer, e);
    }
  }

  std::vector<float>& acc = ws.acc;
  acc.assign(size_t(n) * Z, 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& u = *user_list[i];
    for (size_t r = 0; r < u.size(); ++r) {
      float* a = &acc[size_t(u[r].first) * Z];
      const float* src = &contrib[(first_row[i] + r) * size_t(Z)];
      for (int d = 0; d < Z; ++d) a[d] += src[d];
    }
  }

  if (latent) {
    // Normalise the latent mixture, then lift it back to the model width.
    if (!w.latent_norm.empty())
      for (int64_t t = 0; t < n; ++t) rmsnorm(&acc[size_t(t) * Z], w.latent_norm.data(), Z, c.rms_eps, &acc[size_t(t) * Z]);
    matmul(w.latent_up, acc.data(), n, y);
  } else {
    std::copy(acc.begin(), acc.end(), y);
  }

  // The shared expert sees the same x, unweighted, added after the routed sum.
  if (w.shared.gate.rows > 0) {
    std::vector<float> s(size_t(n) * D);
    mlp_forward(c, w.shared, x, n, s.data());
    for (size_t i = 0; i < s.size(); ++i) y[i] += s[i];
  }
  clock.lap(&PhaseTimes::mlp, layer);
}

}  // namespace waste
