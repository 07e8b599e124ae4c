// waste-bench-trunk-storage: what each precision cut of the trunk storage rule
// (shared/model/trunk_storage.h) costs in logits and routing, on one container with a lossless
// trunk (`waste convert --trunk f32 --experts f32` of a fixture, or `waste synth --trunk f32`).
// Each variant stores the container's trunk matrices, head and routers again in memory by the
// rule (the same quantizer `waste convert` uses; the embedding stays as stored), then decodes
// the tokens one at a time (so every MoE layer's fetch is exactly one token's top-k) and is
// compared with the container as stored: mean and max |logit diff|, top-1 agreement, and per
// (token, MoE layer) the share of the top-k experts both chose and how often the whole set is
// the same. With --reference the logits are also compared with that f32 file.
//
// Usage: waste-bench-trunk-storage CONTAINER (--tokens FILE.json [--key input_ids] | --random N)
//                                  [--reference FILE.f32] [--seed S]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compute/model/container_weights.h"
#include "compute/model/model.h"
#include "shared/container/reader.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/quantize.h"
#include "shared/model/tensors.h"
#include "shared/model/trunk_storage.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

using namespace waste;

namespace {

// The container's trunk, with the matrices, head and routers stored again under `storage`.
class RestoredWeights : public WeightSource {
 public:
  RestoredWeights(const WeightSource& base, const ModelConfig& c, const TrunkStorage& storage)
      : base_(base), storage_(storage) {
    for (const TensorSpec& t : trunk_tensor_specs(c)) roles_[t.name] = t.role;
  }
  MatrixView matrix(const std::string& name) const override {
    const MatrixView v = base_.matrix(name);
    auto role = roles_.find(name);
    if (role == roles_.end() || role->second == TensorRole::Vector || role->second == TensorRole::Embedding) return v;
    const StoredAs st = trunk_storage(role->second, {uint64_t(v.rows), uint64_t(v.cols)}, storage_);
    if (st.format == v.format && st.group == v.group) return v;
    auto it = stored_.find(name);
    if (it == stored_.end()) {
      std::vector<float> values(size_t(v.rows * v.cols));
      for (int64_t r = 0; r < v.rows; ++r) dequantize_row(v, r, values.data() + r * v.cols);
      it = stored_.emplace(name, quantize_matrix(st.format, values.data(), uint64_t(v.rows), uint64_t(v.cols), st.group))
               .first;
    }
    MatrixView out = v;
    out.format = st.format;
    out.group = st.group;
    out.data = it->second.data();
    const TensorBytes layout = trunk_tensor_bytes(st.format, uint64_t(v.rows), uint64_t(v.cols), st.group);
    out.scales = layout.scales_offset ? reinterpret_cast<const uint16_t*>(it->second.data() + layout.scales_offset)
                                      : nullptr;
    return out;
  }
  std::span<const float> vector(const std::string& name) const override { return base_.vector(name); }
  void embedding_row(int64_t token, float* out) const override { base_.embedding_row(token, out); }

 private:
  const WeightSource& base_;
  TrunkStorage storage_;
  std::map<std::string, TensorRole> roles_;
  mutable std::map<std::string, std::vector<uint8_t>> stored_;
};

// Records the experts each MoE layer fetches (one token's top-k in step mode), serving them
// from the container.
class RecordingExperts : public ExpertSource {
 public:
  explicit RecordingExperts(ExpertSource& inner) : inner_(inner) {}
  ExpertView expert(int layer, int expert) override { return inner_.expert(layer, expert); }
  void release(int layer, int expert) override { inner_.release(layer, expert); }
  void fetch_layer(int layer, std::span<const int> experts) override {
    chosen.emplace_back(experts.begin(), experts.end());
    ExpertSource::fetch_layer(layer, experts);
  }
  std::vector<std::vector<int>> chosen;  // per (token, MoE layer) in order

 private:
  ExpertSource& inner_;
};

struct Run {
  std::vector<float> logits;  // [n, vocab]
  std::vector<std::vector<int>> chosen;
};

Run decode(const WeightSource& w, ExpertSource& container_experts, const ModelConfig& c,
           const std::vector<int32_t>& ids) {
  RecordingExperts experts(container_experts);
  Model model = Model::create(w, experts, c);
  model.set_lookahead(0);
  Session s = model.new_session(int64_t(ids.size()));
  Run r;
  r.logits.resize(ids.size() * size_t(c.vocab));
  for (size_t t = 0; t < ids.size(); ++t)
    model.forward(s, std::span<const int32_t>(&ids[t], 1), r.logits.data() + t * size_t(c.vocab));
  r.chosen = std::move(experts.chosen);
  return r;
}

struct LogitDiff {
  double mean = 0, max = 0;
  int top1 = 0;
};

LogitDiff compare(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  LogitDiff d;
  const int64_t n = int64_t(a.size()) / vocab;
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* x = a.data() + t * vocab;
    const float* y = b.data() + t * vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      const double e = std::fabs(double(x[i]) - y[i]);
      sum += e;
      d.max = std::max(d.max, e);
    }
    d.top1 += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
  }
  d.mean = sum / double(a.size());
  return d;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: waste-bench-trunk-storage CONTAINER (--tokens FILE.json [--key NAME] | --random N) "
               "[--reference FILE.f32] [--seed S]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string dir, tokens_file, key = "input_ids", reference;
  int64_t random_n = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokens") tokens_file = next();
    else if (a == "--key") key = next();
    else if (a == "--reference") reference = next();
    else if (a == "--random") random_n = std::stoll(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (!a.empty() && a[0] != '-' && dir.empty()) dir = a;
    else usage("unknown argument " + a);
  }
  if (dir.empty() || tokens_file.empty() == (random_n == 0)) usage("give a container and --tokens or --random");
  if (random_n < 0 || random_n > 4096) usage("--random must be 1..4096");

  Container container = Container::open(dir);
  const ModelConfig& c = container.config();
  std::vector<int32_t> ids;
  if (!tokens_file.empty()) {
    const nlohmann::json j = nlohmann::json::parse(read_file_text(tokens_file, 16 << 20));
    ids = (j.is_array() ? j : j.at(key)).get<std::vector<int32_t>>();
  } else {
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < random_n; ++i) ids.push_back(int32_t(rng() % uint64_t(c.vocab)));
  }
  std::vector<float> ref;
  if (!reference.empty()) {
    const std::vector<uint8_t> bytes = read_file_bytes(reference, 1ull << 30);
    // The reference holds at least these rows (the fixtures' _all file has more).
    if (bytes.size() < ids.size() * size_t(c.vocab) * 4) usage(reference + " is shorter than the tokens' logits");
    ref.resize(ids.size() * size_t(c.vocab));
    std::memcpy(ref.data(), bytes.data(), ref.size() * 4);
  }

  Trunk trunk(container, {"model.embed_tokens.weight"}, true);
  TrunkWeights stored(container, trunk);
  ContainerExperts experts(container, 8ull << 30);
  const Run base = decode(stored, experts, c, ids);

  struct Variant {
    const char* name;
    TrunkStorage storage;
  };
  auto storage = [](TensorFormat matrices, uint32_t group, TensorFormat router) {
    TrunkStorage s;
    s.matrices = matrices;
    s.group = group;
    s.router = router;
    return s;
  };
  // f32 matrices keep the head f32 too (the rule's head follows an unquantized trunk), so the
  // router variant alone is the router's own error.
  const Variant variants[] = {
      {"f32 + bf16 routers", storage(TensorFormat::F32, kTrunkGroup, TensorFormat::BF16)},
      {"q4g-32 (q8g-32 head)", storage(TensorFormat::Q4G, kTrunkGroup, TensorFormat::F32)},
      {"q4g-128 (q8g-32 head)", storage(TensorFormat::Q4G, 128, TensorFormat::F32)},
      {"q4g-32 + bf16 routers", storage(TensorFormat::Q4G, kTrunkGroup, TensorFormat::BF16)},
      {"q4g-128 + bf16 routers", storage(TensorFormat::Q4G, 128, TensorFormat::BF16)},
      {"f32 + q8g routers", storage(TensorFormat::F32, kTrunkGroup, TensorFormat::Q8G)},
      {"q4g-128 + q8g routers", storage(TensorFormat::Q4G, 128, TensorFormat::Q8G)},
  };
  std::printf("%s: %zu tokens decoded one at a time, %d MoE layers x top-%d of %d experts, vocab %d\n", dir.c_str(),
              ids.size(), c.n_moe_layers(), c.top_k, c.n_experts, int(c.vocab));
  double sum = 0, sum2 = 0;
  for (float v : base.logits) {
    sum += v;
    sum2 += double(v) * v;
  }
  const double mean = sum / double(base.logits.size());
  std::printf("logits as stored: std %.3g (the scale of the differences below)\n",
              std::sqrt(std::max(0.0, sum2 / double(base.logits.size()) - mean * mean)));
  if (!ref.empty()) {
    const LogitDiff r = compare(base.logits, ref, c.vocab);
    std::printf("%-26s vs reference: mean |diff| %.3g max %.3g top-1 %d/%zu\n", "as stored", r.mean, r.max, r.top1,
                ids.size());
  }
  std::printf("%-26s %11s %9s %7s | %9s %9s | %s\n", "variant", "mean|diff|", "max", "top-1", "top-k", "same set",
              ref.empty() ? "" : "vs reference: mean|diff| top-1");
  for (const Variant& v : variants) {
    RestoredWeights w(stored, c, v.storage);
    const Run run = decode(w, experts, c, ids);
    const LogitDiff d = compare(run.logits, base.logits, c.vocab);
    double overlap = 0;
    size_t same = 0;
    const size_t visits = std::min(run.chosen.size(), base.chosen.size());
    for (size_t i = 0; i < visits; ++i) {
      const std::set<int> a(run.chosen[i].begin(), run.chosen[i].end());
      size_t common = 0;
      for (int e : base.chosen[i]) common += a.count(e);
      overlap += double(common) / double(std::max<size_t>(1, base.chosen[i].size()));
      same += a == std::set<int>(base.chosen[i].begin(), base.chosen[i].end());
    }
    std::printf("%-26s %11.4g %9.4g %3d/%-3zu | %8.2f%% %8.2f%% |", v.name, d.mean, d.max, d.top1, ids.size(),
                100.0 * overlap / double(std::max<size_t>(1, visits)), 100.0 * double(same) / double(std::max<size_t>(1, visits)));
    if (!ref.empty()) {
      const LogitDiff r = compare(run.logits, ref, c.vocab);
      std::printf(" %.4g %d/%zu", r.mean, r.top1, ids.size());
    }
    std::printf("\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "waste-bench-trunk-storage: %s\n", e.what());
  return 1;
}
