#include "compute/model/moe.h"

#include <memory>
#include <algorithm>
#include <vector>

#include "compute/model/expert_apply.h"
#include "compute/model/ops.h"
#include "compute/model/rvq_experts.h"
#include "shared/rvq/kernels.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

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

// Experts taken at once per pool thread (step 4): 16 gave a 1024-id resident prefill's expert
// phase 5% less time than 4 (3 rounds alternated), 2 was slower than one at a time.
constexpr int kGroupPerThread = 16;

// Step 2's result: the batch's (row, weight) pairs grouped by expert, in flat arrays. Expert
// ids[i] (ascending) serves the pairs offsets[i] .. offsets[i + 1] of rows and weights, in the
// order the tokens chose them (row ascending). Pair p's weighted output goes to row p of the
// step's `contrib` buffer.
struct ExpertGroups {
  std::vector<int> ids;
  std::vector<size_t> offsets;  // ids.size() + 1 entries
  std::vector<int64_t> rows;
  std::vector<float> weights;
  std::vector<size_t> count, start;  // group_by_expert's working arrays, one entry per expert

  size_t size(size_t i) const { return offsets[i + 1] - offsets[i]; }
};

// Per-thread buffers of the routed-expert step, kept between calls (see moe_forward).
struct MoeScratch {
  std::vector<float> contrib, acc, in, out;
  std::vector<float> z_latent, shared_out;  // the routed experts' input (K3), the shared expert's output
  std::vector<int> chosen;  // the route's [n, k] experts and weights
  std::vector<ExpertSource::Ready> ready;  // a group of experts handed out at once (step 4)
  std::vector<size_t> alone;               // which of them run each on one thread
  std::vector<uint8_t> in_group;           // per batch index: handed out in the current group
  std::vector<float> weight;
  ExpertGroups groups;
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

// Step 2. A counting sort by expert id: stable, so each expert's pairs keep the tokens' order.
// chosen, weight: [n, k].
// Fills g, reusing its buffers (this runs once per MoE layer per step).
void group_by_expert(const int* chosen, const float* weight, int64_t n, int k, int n_experts, ExpertGroups& g) {
  const size_t pairs = size_t(n) * size_t(k);
  g.count.assign(size_t(n_experts), 0);
  for (size_t p = 0; p < pairs; ++p) ++g.count[size_t(chosen[p])];
  g.ids.clear();
  g.offsets.assign(1, 0);
  g.start.resize(size_t(n_experts));  // where expert e's pairs begin in rows
  for (int e = 0; e < n_experts; ++e) {
    g.start[size_t(e)] = g.offsets.back();
    if (g.count[size_t(e)] == 0) continue;
    g.ids.push_back(e);
    g.offsets.push_back(g.offsets.back() + g.count[size_t(e)]);
  }
  g.rows.resize(pairs);
  g.weights.resize(pairs);
  for (size_t p = 0; p < pairs; ++p) {
    const size_t at = g.start[size_t(chosen[p])]++;
    g.rows[at] = int64_t(p / size_t(k));
    g.weights[at] = weight[p];
  }
}

// The VQ3R kernels' batch over this step's rows z [n, Z]: each row's lookup tables are built
// once per layer and shared by every expert that reads the row. The object (and its table
// memory) is kept per thread and remade only when the activation changes.
RvqExpertBatch& rvq_batch(MoeScratch& ws, const ModelConfig& c, const float* z, int64_t n, int Z) {
  const bool situ = c.activation == Activation::SiTU;
  if (!ws.rvq || ws.situ != situ || ws.beta != c.situ_beta || ws.beta_linear != c.situ_linear_beta) {
    ws.rvq = std::make_unique<RvqExpertBatch>(situ, c.situ_beta, c.situ_linear_beta);
    ws.situ = situ;
    ws.beta = c.situ_beta;
    ws.beta_linear = c.situ_linear_beta;
  }
  ws.rvq->set_inputs(z, n, Z);
  return *ws.rvq;
}

void check_expert_shape(const ModelConfig& c, int layer, int expert, const ExpertView& v, int Z) {
  if (v.hidden != Z || v.intermediate != c.moe_intermediate)
    throw Error("expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + " has shape hidden " +
                std::to_string(v.hidden) + " x inner " + std::to_string(v.intermediate) + ", expected " +
                std::to_string(Z) + " x " + std::to_string(c.moe_intermediate));
}

// Step 4. Each expert as it arrives (completion order through iod; the batch was asked for with
// fetch_layer in step 3): its pairs' outputs, each times its weight, into its own rows of
// ws.contrib [pairs, Z]. Which order they arrive in never shows: step 5 sums them in expert
// order. An expert handed out again (its first view was torn) overwrites its rows.
//
// The experts ready at once are taken as a group and each runs whole on one thread, every
// row's tables built first. Split by row tiles instead, every thread read every table of the
// expert's rows (in a 128-row prefill chunk 442 KiB a row for Kimi-Linear's gate and up, from
// memory: waste-bench-kernels --prefill, 0.73-0.78 of the time side by side) and met the others
// at three barriers an expert (a decode's expert phase 0.69-0.78 side by side). One expert
// ready alone (a read just landed), or one with more rows than a thread's buffers hold, still
// splits by tiles.
void apply_one_expert(const ModelConfig& c, const ExpertView& v, const ExpertGroups& g, size_t i, const float* z,
                      int64_t n, int Z, MoeScratch& ws, RvqExpertBatch*& rvq) {
  const size_t first = g.offsets[i];
  const int64_t m = int64_t(g.size(i));
  float* dst = &ws.contrib[first * size_t(Z)];
  if (v.format == TensorFormat::VQ3R) {
    // Compressed experts go through the RVQ lookup-table kernels.
    if (!rvq) rvq = &rvq_batch(ws, c, z, n, Z);
    rvq->apply_rows(v, &g.rows[first], &g.weights[first], m, dst);
    return;
  }
  ws.in.resize(size_t(m) * Z);
  ws.out.resize(size_t(m) * Z);
  for (int64_t r = 0; r < m; ++r) std::copy_n(z + size_t(g.rows[first + size_t(r)]) * Z, Z, &ws.in[size_t(r) * Z]);
  apply_lossless_expert(c, v, ws.in.data(), m, ws.out.data());
  for (int64_t r = 0; r < m; ++r) {
    const float wt = g.weights[first + size_t(r)];
    for (int d = 0; d < Z; ++d) dst[size_t(r) * Z + d] = wt * ws.out[size_t(r) * Z + d];
  }
}

void apply_experts(const ModelConfig& c, int layer, ExpertSource& experts, const ExpertGroups& g, const float* z,
                   int64_t n, int Z, MoeScratch& ws, PhaseClock& clock, std::vector<RowFault>* faults) {
  ws.contrib.resize(g.rows.size() * size_t(Z));  // every row is overwritten below
  RvqExpertBatch* rvq = nullptr;                  // made on the first VQ3R expert
  ThreadPool& pool = ThreadPool::global();
  // A group of several per thread: the pool hands them out as threads free up, so experts of
  // different row counts even out.
  const size_t group = pool.size() > 1 ? size_t(kGroupPerThread) * pool.size() : 1;
  ws.ready.resize(group);
  for (;;) {
    size_t k;
    try {
      k = experts.next_ready_group(std::span<ExpertSource::Ready>(ws.ready.data(), group));
    } catch (const ExpertUnavailable& lost) {
      // Only the rows routed to this expert are at fault: they get no contribution from it
      // and are reported; every other row of the batch comes out exact. The expert may have
      // been applied already (handed out before its record's check failed): its rows are
      // zeroed all the same, so nothing made of those bytes reaches the sum.
      if (!faults || lost.layer != layer) throw;
      const auto at = std::lower_bound(g.ids.begin(), g.ids.end(), lost.expert);
      if (at == g.ids.end() || *at != lost.expert) throw;
      const size_t k_lost = size_t(at - g.ids.begin());
      std::fill_n(&ws.contrib[g.offsets[k_lost] * size_t(Z)], g.size(k_lost) * size_t(Z), 0.0f);
      for (size_t p = g.offsets[k_lost]; p < g.offsets[k_lost + 1]; ++p) faults->push_back({g.rows[p], lost.what()});
      continue;
    }
    clock.lap(&PhaseTimes::fetch_wait, layer, k == 0 ? -1 : g.ids[size_t(ws.ready[0].index)]);
    if (k == 0) break;
    // Those that run alone on a thread: VQ3R with few enough rows; the rest one by one here.
    ws.alone.clear();
    // Two threads on one expert's rows would race: a source's indices are checked, not trusted.
    ws.in_group.assign(g.ids.size(), 0);
    for (size_t j = 0; j < k; ++j) {
      const ExpertSource::Ready& r = ws.ready[j];
      require(r.index >= 0 && size_t(r.index) < g.ids.size(),
              "expert source handed out index " + std::to_string(r.index) + " of " + std::to_string(g.ids.size()));
      require(!ws.in_group[size_t(r.index)]++,
              "expert source handed out index " + std::to_string(r.index) + " twice in one group");
      const size_t i = size_t(r.index);
      check_expert_shape(c, layer, g.ids[i], r.view, Z);
      if (k > 1 && r.view.format == TensorFormat::VQ3R && int64_t(g.size(i)) <= kThreadExpertRows)
        ws.alone.push_back(j);
      else
        apply_one_expert(c, r.view, g, i, z, n, Z, ws, rvq);
    }
    if (ws.alone.size() == 1) {
      const ExpertSource::Ready& r = ws.ready[ws.alone[0]];
      apply_one_expert(c, r.view, g, size_t(r.index), z, n, Z, ws, rvq);
    } else if (!ws.alone.empty()) {
      if (!rvq) rvq = &rvq_batch(ws, c, z, n, Z);
      rvq->build_all(ws.ready[ws.alone[0]].view.codebooks);
      const RvqExpertBatch& tables = *rvq;
      pool.parallel_for(ws.alone.size(), 1, [&](size_t b, size_t e) {
        for (size_t a = b; a < e; ++a) {
          const ExpertSource::Ready& r = ws.ready[ws.alone[a]];
          const size_t first = g.offsets[size_t(r.index)];
          tables.apply_rows_alone(r.view, &g.rows[first], &g.weights[first], int64_t(g.size(size_t(r.index))),
                                  &ws.contrib[first * size_t(Z)]);
        }
      });
    }
    clock.lap(&PhaseTimes::experts, layer, g.ids[size_t(ws.ready[0].index)]);
  }
}

// Step 5. acc [n, Z] = each row's weighted expert outputs, added in ascending expert order: a
// fixed order, so the floating-point sum is the same whatever order the experts arrived in.
void sum_in_expert_order(const ExpertGroups& g, const std::vector<float>& contrib, int64_t n, int Z,
                         std::vector<float>& acc) {
  acc.assign(size_t(n) * Z, 0.0f);
  for (size_t p = 0; p < g.rows.size(); ++p) {
    float* a = &acc[size_t(g.rows[p]) * Z];
    const float* src = &contrib[p * size_t(Z)];
    for (int d = 0; d < Z; ++d) a[d] += src[d];
  }
}

}  // namespace

void moe_forward(const ModelConfig& c, int layer, const MoeWeights& w, ExpertSource& experts, const float* x,
                 int64_t n, float* y, PhaseTimes* prof, std::vector<int>* routed, std::vector<RowFault>* faults) {
  PhaseClock clock(prof);
  const int D = c.hidden, k = c.top_k;

  // The buffers are reused call after call (per thread: moe_forward may run on several threads):
  // allocating them per layer made the allocator return and re-fault hundreds of KiB per row
  // (contrib and the RVQ lookup tables), which at 8 rows cost more than the experts.
  thread_local MoeScratch ws;

  // 1. Route: each token's top_k experts and their weights.
  ws.chosen.resize(size_t(n) * k);
  ws.weight.resize(size_t(n) * k);
  route(RouterParams::of(c), w.router, x, n, ws.chosen.data(), ws.weight.data());
  clock.lap(&PhaseTimes::router, layer);

  // 2. Group the rows by expert: the union of the batch's experts is fetched once and each
  // expert runs on all of its rows at once.
  group_by_expert(ws.chosen.data(), ws.weight.data(), n, k, c.n_experts, ws.groups);
  const ExpertGroups& groups = ws.groups;
  if (routed) *routed = groups.ids;
  clock.lap(&PhaseTimes::mlp, layer);

  std::vector<float>& acc = ws.acc;
  const bool latent = w.latent_down.rows > 0;
  const int Z = latent ? int(w.latent_down.rows) : D;
  const bool shared = w.shared.gate.rows > 0;
  {
    // 3. Ask for the batch's experts first: iod answers the fetch (and reads what is missing)
    // while the latent projection and the shared expert below run.
    LayerBatchGuard guard{experts};
    experts.fetch_layer(layer, groups.ids);

    // Routed experts read z: x itself, or its latent projection (K3, MODELS.md A.5).
    const float* z = x;
    if (latent) {
      ws.z_latent.resize(size_t(n) * Z);
      matmul(w.latent_down, x, n, ws.z_latent.data());
      z = ws.z_latent.data();
    }
    // The shared expert sees the same x, unweighted; it is added after the routed sum.
    if (shared) {
      ws.shared_out.resize(size_t(n) * D);
      mlp_forward(c, w.shared, x, n, ws.shared_out.data());
    }
    clock.lap(&PhaseTimes::mlp, layer);

    // 4. Apply each expert as it arrives; 5. sum in expert order.
    apply_experts(c, layer, experts, groups, z, n, Z, ws, clock, faults);
  }
  sum_in_expert_order(groups, ws.contrib, n, Z, acc);

  if (latent) {
    // Normalise the latent mixture, then lift it back to the model width.
    if (!w.latent_norm.empty())
      for (int64_t t = 0; t < n; ++t) rmsnorm(&acc[size_t(t) * Z], w.latent_norm.data(), Z, c.rms_eps, &acc[size_t(t) * Z]);
    matmul(w.latent_up, acc.data(), n, y);
  } else {
    std::copy(acc.begin(), acc.end(), y);
  }

  if (shared)
    for (size_t i = 0; i < size_t(n) * size_t(D); ++i) y[i] += ws.shared_out[i];
  clock.lap(&PhaseTimes::mlp, layer);
}

}  // namespace waste
