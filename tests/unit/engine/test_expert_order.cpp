// Placement never changes results, in-process: experts handed to the MoE layer in any arrival
// order, with or without lookahead prefetch, give bit-identical logits; prefill chunk sizes
// change only rounding (same argmax, relative difference within 1e-5).
#include <doctest/doctest.h>

#include "tests/unit/fixture_dir.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/file.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

// Hands a layer's experts out in a shuffled order (as iod's completion order would), keeping
// every view until end_layer, and records prefetch hints.
class ShuffledExperts : public ExpertSource {
 public:
  ShuffledExperts(ExpertSource& inner, uint64_t seed) : inner_(inner), rng_(seed) {}
  ExpertView expert(int layer, int expert) override { return inner_.expert(layer, expert); }
  void prefetch(int layer, std::span<const int> experts) override { prefetched_ += experts.size(); }
  void fetch_layer(int layer, std::span<const int> experts) override {
    layer_ = layer;
    order_.resize(experts.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = int(i);
    std::shuffle(order_.begin(), order_.end(), rng_);
    ids_.assign(experts.begin(), experts.end());
    next_ = 0;
  }
  int next_ready(ExpertView& v) override {
    if (next_ >= order_.size()) return -1;
    const int i = order_[next_++];
    v = inner_.expert(layer_, ids_[size_t(i)]);
    if (i != int(next_ - 1)) ++out_of_order_;
    return i;
  }
  // Shuffled groups of random sizes (as iod hands out whatever is READY at once); the views
  // stay valid (the inner source keeps them).
  size_t next_ready_group(std::span<Ready> out) override {
    const size_t k = next_ready_each(out, std::uniform_int_distribution<size_t>(1, out.size())(rng_));
    if (k > 1) ++groups_;
    return k;
  }
  void end_layer() override {}
  size_t prefetched_ = 0, out_of_order_ = 0, groups_ = 0;

 private:
  ExpertSource& inner_;
  std::mt19937_64 rng_;
  int layer_ = -1;
  std::vector<int> order_, ids_;
  size_t next_ = 0;
};

std::vector<float> run(const Model& m, std::span<const int32_t> ids, int chunk) {
  const int64_t V = m.config().vocab;
  Session s = m.new_session(64);
  std::vector<float> out(ids.size() * size_t(V));
  for (size_t at = 0; at < ids.size(); at += size_t(chunk)) {
    const size_t n = std::min(size_t(chunk), ids.size() - at);
    m.forward(s, ids.subspan(at, n), &out[at * size_t(V)], LogitRows::All);
  }
  return out;
}

}  // namespace

TEST_CASE("arrival order of experts and lookahead never change the logits; chunking only rounds") {
  for (const char* name : {"kimi-k3", "deepseek-v3", "kimi-linear"}) {
    CAPTURE(name);
    const std::string dir = fixture_dir(name);
    Checkpoint ckpt = Checkpoint::open(dir);
    CheckpointWeights weights(ckpt);
    CheckpointExperts plain(ckpt);
    const auto j = nlohmann::json::parse(read_file_text(dir + "/reference_greedy.json", 1 << 20));
    const auto ids = j.at("full_ids").get<std::vector<int32_t>>();

    Model in_order = Model::create(weights, plain, ckpt.config());
    const std::vector<float> base = run(in_order, ids, 32);

    ShuffledExperts shuffled(plain, 7);
    Model any_order = Model::create(weights, shuffled, ckpt.config());
    any_order.set_lookahead(ckpt.config().top_k + 2);
    CHECK(run(any_order, ids, 32) == base);
    CHECK(shuffled.out_of_order_ > 0);
    if (ThreadPool::global().size() > 1) CHECK(shuffled.groups_ > 0);  // with one thread: one at a time
    CHECK(shuffled.prefetched_ > 0);
    // Decode steps, shuffled, with lookahead: equal to in-order decode steps.
    CHECK(run(any_order, ids, 1) == run(in_order, ids, 1));

    for (int chunk : {1, 7}) {
      const std::vector<float> c = run(in_order, ids, chunk);
      const int64_t V = ckpt.config().vocab;
      double worst = 0, scale = 0;
      for (size_t i = 0; i < base.size(); ++i) {
        worst = std::max(worst, std::fabs(double(c[i]) - double(base[i])));
        scale = std::max(scale, std::fabs(double(base[i])));
      }
      CAPTURE(chunk);
      CHECK(worst <= 1e-5 * scale);
      for (size_t r = 0; r < ids.size(); ++r)
        CHECK(std::max_element(&c[r * V], &c[r * V] + V) - &c[r * V] ==
              std::max_element(&base[r * V], &base[r * V] + V) - &base[r * V]);
    }
  }
}
