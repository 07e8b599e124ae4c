// VQ3R routed experts through the model: the same forward pass with experts encoded as VQ3R
// (RVQ lookup-table kernels) and with those codes decoded back to f32 (matvec) must agree
// closely; the only difference allowed is the kernels' int8 lookup-table rounding.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <thread>
#include <cstdlib>
#include <map>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/model/moe.h"
#include "shared/hf/checkpoint.h"
#include "shared/model/tensors.h"
#include "shared/rvq/encoder.h"
#include "shared/util/file.h"
#include "shared/util/thread_pool.h"
#include "tests/skip.h"

using namespace waste;

namespace {

struct EncodedMatrix {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<float> decoded;
};

// Every routed expert of a checkpoint encoded against one codebook set (enough for a test of
// the wiring; the converter trains books per layer and matrix kind).
class VqExperts : public ExpertSource {
 public:
  VqExperts(const Checkpoint& ck, bool decoded) : ck_(ck), decoded_(decoded) {
    const ModelConfig& c = ck.config();
    RvqOptions opt;
    opt.kmeans_iters = 4;
    opt.train_refine_passes = 1;
    const int first = c.moe_layers().front();
    std::vector<float> sample;
    for (int e = 0; e < 4; ++e) {
      std::vector<float> g = ck.read_weight(c.tensor_prefix + expert_tensor_names(c, first, e).gate);
      sample.insert(sample.end(), g.begin(), g.end());
    }
    const std::vector<float> one = train_codebooks(sample.data(), sample.size() / size_t(c.hidden), c.hidden, opt);
    for (int k = 0; k < 3; ++k) books_.insert(books_.end(), one.begin(), one.end());
    for (int L : c.moe_layers())
      for (int e = 0; e < c.n_experts; ++e) {
        const ExpertNames n = expert_tensor_names(c, L, e);
        auto& slot = experts_[{L, e}];
        slot[0] = encode(c.tensor_prefix + n.gate, opt);
        slot[1] = encode(c.tensor_prefix + n.up, opt);
        slot[2] = encode(c.tensor_prefix + n.down, opt);
      }
  }

  ExpertView expert(int layer, int e) override {
    const auto& m = experts_.at({layer, e});
    const ModelConfig& c = ck_.config();
    ExpertView v;
    v.hidden = c.hidden;
    v.intermediate = c.moe_intermediate;
    if (decoded_) {
      v.format = TensorFormat::F32;
      v.gate = reinterpret_cast<const uint8_t*>(m[0].decoded.data());
      v.up = reinterpret_cast<const uint8_t*>(m[1].decoded.data());
      v.down = reinterpret_cast<const uint8_t*>(m[2].decoded.data());
      return v;
    }
    v.format = TensorFormat::VQ3R;
    v.gate = m[0].codes.data();
    v.up = m[1].codes.data();
    v.down = m[2].codes.data();
    v.gate_scales = m[0].scales.data();
    v.up_scales = m[1].scales.data();
    v.down_scales = m[2].scales.data();
    v.codebooks = books_.data();
    return v;
  }

 private:
  EncodedMatrix encode(const std::string& name, const RvqOptions& opt) {
    std::vector<uint64_t> shape;
    std::vector<float> w = ck_.read_weight(name, &shape);
    const int rows = int(shape[0]), cols = int(shape[1]);
    EncodedMatrix m;
    m.codes.resize(vq3r_code_bytes(rows, cols));
    m.scales.resize(size_t(rows));
    encode_matrix(w.data(), rows, cols, books_.data(), opt, m.codes.data(), m.scales.data());
    m.decoded.resize(w.size());
    decode_matrix(m.codes.data(), m.scales.data(), rows, cols, books_.data(), m.decoded.data());
    return m;
  }

  const Checkpoint& ck_;
  bool decoded_;
  std::vector<float> books_;
  std::map<std::pair<int, int>, std::array<EncodedMatrix, 3>> experts_;
};

// The same experts handed out several at once (their views stay valid: they live in the map),
// counting the groups of more than one.
class GroupedVqExperts : public VqExperts {
 public:
  using VqExperts::VqExperts;
  size_t next_ready_group(std::span<Ready> out) override {
    const size_t k = next_ready_each(out);
    if (k > 1) ++groups;
    return k;
  }
  int groups = 0;
};

}  // namespace

TEST_CASE("VQ3R experts applied side by side, several at once, give the bits of one at a time") {
  // The experts ready at once run whole on different threads (moe.cpp step 4); one at a time
  // each expert's row tiles are split over the threads. One row (a decode) and rows per
  // expert on both sides of what one thread takes alone (kThreadExpertRows).
  if (ThreadPool::global().size() < 2) {
    // One thread asks for one expert at a time: both sides would be the same path.
    waste::test::skip_part("one compute thread (WASTE_THREADS=1): experts are never applied side by side");
    return;
  }
  const char* root = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(root != nullptr);
  Checkpoint ck = Checkpoint::open(std::string(root) + "/fixtures/kimi-linear");
  const ModelConfig& c = ck.config();
  CheckpointWeights weights(ck);
  VqExperts one(ck, false);
  GroupedVqExperts grouped(ck, false);
  const int L = c.moe_layers().front();
  const std::string p = "model.layers." + std::to_string(L) + ".block_sparse_moe.";
  MoeWeights w;
  w.router.gate = weights.matrix(p + "gate.weight");
  w.router.bias = weights.vector(p + "gate.e_score_correction_bias");
  const int64_t D = c.hidden;
  for (int64_t n : {1, 2, 9, 64}) {
    CAPTURE(n);
    std::vector<float> x(size_t(n * D)), ya(size_t(n * D)), yb(size_t(n * D));
    for (int64_t t = 0; t < n; ++t) weights.embedding_row((5 + 11 * t) % c.vocab, &x[size_t(t * D)]);
    std::vector<int> routed;
    moe_forward(c, L, w, one, x.data(), n, ya.data(), nullptr, &routed);
    const int before = grouped.groups;
    moe_forward(c, L, w, grouped, x.data(), n, yb.data());
    CHECK(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) == 0);
    if (routed.size() > 1) CHECK(grouped.groups > before);  // the model asked for groups
  }
}

TEST_CASE("VQ3R experts through the RVQ kernels match the same codes decoded to f32") {
  const char* root = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(root != nullptr);
  const std::string dir = std::string(root) + "/fixtures/kimi-linear";
  Checkpoint ck = Checkpoint::open(dir);
  const ModelConfig& c = ck.config();
  CheckpointWeights weights(ck);
  VqExperts vq(ck, false), f32(ck, true);

  // One MoE layer on the same inputs: routing is decided before the experts, so the two
  // sources see the same tokens and only the expert arithmetic differs. (Through the whole
  // model a random fixture's near-tied routers would flip and hide the comparison.)
  const int L = c.moe_layers().front();
  const std::string p = "model.layers." + std::to_string(L) + ".block_sparse_moe.";
  MoeWeights w;
  w.router.gate = weights.matrix(p + "gate.weight");
  w.router.bias = weights.vector(p + "gate.e_score_correction_bias");
  w.shared = {weights.matrix(p + "shared_experts.gate_proj.weight"), weights.matrix(p + "shared_experts.up_proj.weight"),
              weights.matrix(p + "shared_experts.down_proj.weight")};
  const int64_t n = 8, D = c.hidden;
  std::vector<float> x(size_t(n * D)), ya(size_t(n * D)), yb(size_t(n * D));
  for (int64_t t = 0; t < n; ++t) weights.embedding_row(10 + 7 * t, &x[size_t(t * D)]);
  moe_forward(c, L, w, vq, x.data(), n, ya.data());
  moe_forward(c, L, w, f32, x.data(), n, yb.data());
  double err = 0, norm = 0;
  for (size_t i = 0; i < ya.size(); ++i) {
    err += double(ya[i] - yb[i]) * (ya[i] - yb[i]);
    norm += double(yb[i]) * yb[i];
  }
  const double rel = std::sqrt(err / norm);
  MESSAGE("VQ3R kernels vs decoded f32, one MoE layer: relative L2 error ", rel);
  // The int8 lookup tables of the scalar and AVX-512 paths cost up to a few percent per expert
  // (shared/rvq tests allow 5%); a wiring mistake (wrong matrix, activation or weight) is O(1).
  CHECK(rel < 0.05);

  // moe_forward keeps its buffers and RVQ tables per thread between calls: a call after
  // others of more rows (beyond the 16 whose tables are kept) and of other inputs gives
  // exactly what the same call gives on a fresh thread (fresh buffers).
  {
    const int64_t big = 20;
    std::vector<float> xb(size_t(big * D)), yb_big(size_t(big * D)), fresh(size_t(3 * D)), reused(size_t(3 * D));
    for (int64_t t = 0; t < big; ++t) weights.embedding_row(3 + 5 * t, &xb[size_t(t * D)]);
    std::thread([&] { moe_forward(c, L, w, vq, xb.data() + 2 * D, 3, fresh.data()); }).join();
    std::thread([&] {
      moe_forward(c, L, w, vq, xb.data(), big, yb_big.data());
      moe_forward(c, L, w, vq, x.data(), n, ya.data());
      moe_forward(c, L, w, vq, xb.data() + 2 * D, 3, reused.data());
    }).join();
    CHECK(std::memcmp(fresh.data(), reused.data(), fresh.size() * sizeof(float)) == 0);
  }

  // The whole model through the VQ3R path: prefill rows equal token-by-token decode. KDA's
  // recurrence in prefill (kda_chunk 1): the chunked form's rounding differences can flip a
  // near-tied router choice of these random-ish VQ3R experts, which is not what this checks.
  Model a = Model::create(weights, vq, c);
  a.set_kda_chunk(1);
  const auto ids =
      nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>();
  const int64_t V = c.vocab, T = int64_t(ids.size());
  std::vector<float> la(size_t(T * V));
  Session sa = a.new_session(T);
  a.forward(sa, ids, la.data(), LogitRows::All);
  Session sc = a.new_session(T);
  std::vector<float> step(static_cast<size_t>(V));
  double drift = 0;
  for (int64_t t = 0; t < T; ++t) {
    a.forward(sc, {&ids[size_t(t)], 1}, step.data());
    for (int64_t i = 0; i < V; ++i) drift = std::max(drift, double(std::fabs(step[size_t(i)] - la[size_t(t * V + i)])));
  }
  MESSAGE("VQ3R prefill vs token-by-token: max |diff| ", drift);
  CHECK(drift <= 1e-5);
}
