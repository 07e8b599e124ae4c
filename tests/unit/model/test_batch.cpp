// Batched decode across sessions (Model::forward_batch): three sessions at different positions,
// one prefilling a chunk and two decoding, in one pass give exactly (bit for bit) the logits
// each gets alone, and the same greedy continuations; each MoE layer fetches the union of the
// batch's experts once; a refused batch changes no session.
#include <doctest/doctest.h>

#include "tests/unit/fixture_dir.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

using namespace waste;

namespace {

// Counts the batch protocol's fetches: one fetch_layer per MoE layer and forward, and how many
// experts each asked for.
class CountingExperts : public ExpertSource {
 public:
  explicit CountingExperts(ExpertSource& inner) : inner_(inner) {}
  ExpertView expert(int layer, int expert) override { return inner_.expert(layer, expert); }
  void fetch_layer(int layer, std::span<const int> experts) override {
    ++fetches;
    records += experts.size();
    ExpertSource::fetch_layer(layer, experts);
  }
  uint64_t fetches = 0, records = 0;

 private:
  ExpertSource& inner_;
};

int32_t argmax(const float* v, int64_t n) { return int32_t(std::max_element(v, v + n) - v); }

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0; }

// A fixture's checkpoint as a Model whose routed experts go through `Experts`, a wrapper made on
// the checkpoint's own experts (counting, failing, ...). Built in place: the members refer to
// each other, in this order.
template <class Experts>
struct FixtureModel {
  explicit FixtureModel(const std::string& name)
      : dir(fixture_dir(name.c_str())),
        ckpt(Checkpoint::open(dir)),
        weights(ckpt),
        inner(ckpt),
        experts(inner),
        model(Model::create(weights, experts, ckpt.config())) {}
  std::string dir;
  Checkpoint ckpt;
  CheckpointWeights weights;
  CheckpointExperts inner;
  Experts experts;
  Model model;
};

}  // namespace

TEST_CASE("forward_batch: three sessions (one prefilling, two decoding) equal each alone, bit for bit") {
  for (const std::string name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    FixtureModel<CountingExperts> f(name);
    const std::string& dir = f.dir;
    CountingExperts& experts = f.experts;
    const Model& model = f.model;
    const ModelConfig& c = f.ckpt.config();
    const int64_t V = c.vocab;
    const int moe_layers = int(c.moe_layers().size());
    const auto ids =
        nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>();
    REQUIRE(ids.size() >= 12);
    const std::span<const int32_t> all(ids);
    const int64_t ctx = 64;

    // Histories: A has 7 tokens in (decodes next), B 3 (decodes next), C none (prefills 6 next,
    // all rows' logits). The default KDA prefill chunk is on: C's chunk goes through the chunked
    // form both ways, so the comparison is exact there too.
    Session a = model.new_session(ctx), b = model.new_session(ctx), cs = model.new_session(ctx);
    Session ra = model.new_session(ctx), rb = model.new_session(ctx), rc = model.new_session(ctx);
    std::vector<float> scratch(static_cast<size_t>(V));
    for (Session* s : {&a, &ra}) model.forward(*s, all.subspan(0, 7), scratch.data());
    for (Session* s : {&b, &rb}) model.forward(*s, all.subspan(2, 3), scratch.data());

    // Alone.
    std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V)), lc(size_t(6 * V));
    model.forward(ra, all.subspan(7, 1), la.data());
    model.forward(rb, all.subspan(5, 1), lb.data());
    model.forward(rc, all.subspan(4, 6), lc.data(), LogitRows::All);

    // Together.
    std::vector<float> ba(static_cast<size_t>(V)), bb(static_cast<size_t>(V)), bc(size_t(6 * V));
    const BatchItem items[] = {{&a, all.subspan(7, 1), ba.data(), LogitRows::Last},
                               {&cs, all.subspan(4, 6), bc.data(), LogitRows::All},
                               {&b, all.subspan(5, 1), bb.data(), LogitRows::Last}};
    const uint64_t fetches0 = experts.fetches;
    model.forward_batch(items);
    CHECK(experts.fetches - fetches0 == uint64_t(moe_layers));  // one fetch per MoE layer for all 8 rows
    CHECK(a.position() == 8);
    CHECK(b.position() == 4);
    CHECK(cs.position() == 6);
    CHECK(same_bits(ba.data(), la.data(), V));
    CHECK(same_bits(bb.data(), lb.data(), V));
    CHECK(same_bits(bc.data(), lc.data(), 6 * V));

    // Greedy continuations, 8 steps: all three decoding together vs each alone. The batch
    // fetches each layer's union once; alone, every session fetches its own experts.
    int32_t na = argmax(ba.data(), V), nb = argmax(bb.data(), V), nc = argmax(&bc[size_t(5 * V)], V);
    int32_t sa = argmax(la.data(), V), sb = argmax(lb.data(), V), sc = argmax(&lc[size_t(5 * V)], V);
    std::vector<int32_t> got_a, got_b, got_c, solo_a, solo_b, solo_c;
    std::vector<float> lcs(static_cast<size_t>(V));
    uint64_t batch_records = 0, solo_records = 0;
    for (int step = 0; step < 8; ++step) {
      got_a.push_back(na);
      got_b.push_back(nb);
      got_c.push_back(nc);
      const BatchItem dec[] = {{&cs, {&nc, 1}, bc.data()}, {&a, {&na, 1}, ba.data()}, {&b, {&nb, 1}, bb.data()}};
      uint64_t r0 = experts.records;
      model.forward_batch(dec);
      batch_records += experts.records - r0;

      solo_a.push_back(sa);
      solo_b.push_back(sb);
      solo_c.push_back(sc);
      r0 = experts.records;
      model.forward(ra, {&sa, 1}, la.data());
      model.forward(rb, {&sb, 1}, lb.data());
      model.forward(rc, {&sc, 1}, lcs.data());
      solo_records += experts.records - r0;
      CHECK(same_bits(ba.data(), la.data(), V));
      CHECK(same_bits(bb.data(), lb.data(), V));
      CHECK(same_bits(bc.data(), lcs.data(), V));
      na = argmax(ba.data(), V), nb = argmax(bb.data(), V), nc = argmax(bc.data(), V);
      sa = argmax(la.data(), V), sb = argmax(lb.data(), V), sc = argmax(lcs.data(), V);
    }
    CHECK(got_a == solo_a);
    CHECK(got_b == solo_b);
    CHECK(got_c == solo_c);
    // Three sessions' top-k sets over few experts overlap: the union is smaller than the sum.
    MESSAGE(name, ": expert records fetched for 8 steps of 3 sessions: batched ", batch_records, ", alone ",
            solo_records);
    CHECK(batch_records < solo_records);
  }
}

TEST_CASE("forward_batch: a refused batch changes no session; one item equals forward()") {
  const std::string dir = fixture_dir("kimi-linear");
  Checkpoint ckpt = Checkpoint::open(dir);
  CheckpointWeights weights(ckpt);
  CheckpointExperts experts(ckpt);
  Model model = Model::create(weights, experts, ckpt.config());
  const int64_t V = ckpt.config().vocab;
  const int32_t ok[2] = {3, 5}, bad = int32_t(V);
  std::vector<float> l1(static_cast<size_t>(V)), l2(static_cast<size_t>(V));

  Session a = model.new_session(8), b = model.new_session(8), full = model.new_session(2);
  // The same session twice, a token outside the vocabulary, a context overrun, a missing buffer:
  // each refused with an Error before anything ran.
  const BatchItem twice[] = {{&a, {ok, 1}, l1.data()}, {&a, {ok + 1, 1}, l2.data()}};
  CHECK_THROWS_WITH_AS(model.forward_batch(twice), doctest::Contains("appears twice"), Error);
  const BatchItem vocab[] = {{&a, {ok, 2}, l1.data()}, {&b, {&bad, 1}, l2.data()}};
  CHECK_THROWS_WITH_AS(model.forward_batch(vocab), doctest::Contains("outside the vocabulary"), Error);
  model.forward(full, {ok, 2}, l1.data());
  const BatchItem over[] = {{&a, {ok, 1}, l1.data()}, {&full, {ok, 1}, l2.data()}};
  CHECK_THROWS_WITH_AS(model.forward_batch(over), doctest::Contains("exceed the session context"), Error);
  const BatchItem no_buffer[] = {{&a, {ok, 1}, nullptr}};
  CHECK_THROWS_WITH_AS(model.forward_batch(no_buffer), doctest::Contains("no buffer"), Error);
  CHECK_THROWS_AS(model.forward_batch({}), Error);
  CHECK(a.position() == 0);
  CHECK(b.position() == 0);
  CHECK(full.position() == 2);

  // LogitRows::None needs no buffer; a one-item batch is forward() itself.
  Session r = model.new_session(8);
  const BatchItem none[] = {{&a, {ok, 2}, nullptr, LogitRows::None}};
  model.forward_batch(none);
  model.forward(r, {ok, 2}, l2.data());
  const BatchItem one[] = {{&a, {ok + 1, 1}, l1.data()}};
  model.forward_batch(one);
  model.forward(r, {ok + 1, 1}, l2.data());
  CHECK(same_bits(l1.data(), l2.data(), V));
}

TEST_CASE("forward_batch: an expert source that fails mid-pass is an Error, and the layer's batch is ended") {
  // Serves the first MoE layer, then fails as a vanished iod would.
  class FailingExperts : public ExpertSource {
   public:
    explicit FailingExperts(ExpertSource& inner) : inner_(inner) {}
    ExpertView expert(int layer, int expert) override { return inner_.expert(layer, expert); }
    void fetch_layer(int layer, std::span<const int> experts) override {
      if (++fetches > 1) {
        failed = true;
        throw Error("iod went away (test)");
      }
      ExpertSource::fetch_layer(layer, experts);
    }
    void end_layer() override {
      ended_after_failure |= failed;
      ExpertSource::end_layer();
    }
    int fetches = 0;
    bool failed = false, ended_after_failure = false;

   private:
    ExpertSource& inner_;
  };
  FixtureModel<FailingExperts> f("kimi-linear");
  FailingExperts& experts = f.experts;
  const Model& model = f.model;
  REQUIRE(f.ckpt.config().moe_layers().size() >= 2);
  const int64_t V = f.ckpt.config().vocab;
  std::vector<float> l1(static_cast<size_t>(V)), l2(static_cast<size_t>(V));
  Session a = model.new_session(8), b = model.new_session(8);
  const int32_t t[2] = {3, 5};
  const BatchItem items[] = {{&a, {t, 1}, l1.data()}, {&b, {t + 1, 1}, l2.data()}};
  CHECK_THROWS_WITH_AS(model.forward_batch(items), doctest::Contains("iod went away"), Error);
  CHECK(experts.fetches == 2);
  CHECK(experts.ended_after_failure);  // the failed layer's batch was ended too (nothing left held)
}

TEST_CASE("forward_batch: an expert that cannot be had fails only the sessions routed to it; the others are exact") {
  // Records which (layer, expert) each forward asks for; refuses one of them when told to, as
  // a damaged record would (ExpertUnavailable, the batch goes on). `late`: as iod's source does
  // when a record's check fails after it was handed out (CHECKING), the lost expert is handed
  // out first, with another expert's bytes, and the refusal comes at the next call.
  class LossyExperts : public ExpertSource {
   public:
    explicit LossyExperts(ExpertSource& inner) : inner_(inner) {}
    ExpertView expert(int layer, int expert) override {
      used.insert({layer, expert});
      if (layer == lost.first && expert == lost.second) {
        ExpertUnavailable e(layer, expert, "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " is damaged (test)");
        if (!late) throw e;
        pending_ = e;
        return inner_.expert(layer, expert == 0 ? 1 : 0);  // what the model makes of it must not count
      }
      return inner_.expert(layer, expert);
    }
    int next_ready(ExpertView& view) override {
      if (pending_) {
        const ExpertUnavailable e = *pending_;
        pending_.reset();
        throw e;
      }
      return ExpertSource::next_ready(view);
    }
    void end_layer() override {
      pending_.reset();
      ExpertSource::end_layer();
    }
    std::set<std::pair<int, int>> used;
    std::pair<int, int> lost{-1, -1};
    bool late = false;

   private:
    ExpertSource& inner_;
    std::optional<ExpertUnavailable> pending_;
  };
  for (const std::string name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    FixtureModel<LossyExperts> f(name);
    LossyExperts& experts = f.experts;
    const Model& model = f.model;
    const int64_t V = f.ckpt.config().vocab;

    // Two one-token sessions; an expert the first uses and the second does not (token pairs are
    // tried until the routing gives one).
    std::pair<int, int> only_a{-1, -1};
    int32_t ta = 0, tb = 0;
    std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
    for (int32_t x = 1; x < 40 && only_a.first < 0; ++x) {
      ta = x;
      tb = x + 40;
      Session sa = model.new_session(4), sb = model.new_session(4);
      experts.used.clear();
      model.forward(sa, {&ta, 1}, la.data());
      const auto used_a = experts.used;
      experts.used.clear();
      model.forward(sb, {&tb, 1}, lb.data());
      for (const auto& e : used_a)
        if (!experts.used.count(e)) {
          only_a = e;
          break;
        }
    }
    REQUIRE_MESSAGE(only_a.first >= 0, "no token pair routes differently");
    experts.lost = only_a;
    const std::string want = "layer " + std::to_string(only_a.first) + " expert " + std::to_string(only_a.second);

    for (const bool late : {false, true}) {
      CAPTURE(late);
      experts.late = late;
      Session a = model.new_session(4), b = model.new_session(4);
      std::vector<float> l1(static_cast<size_t>(V)), l2(static_cast<size_t>(V));
      const BatchItem items[] = {{&a, {&ta, 1}, l1.data()}, {&b, {&tb, 1}, l2.data()}};
      const std::vector<std::string> failed = model.forward_batch(items);
      REQUIRE(failed.size() == 2);
      CHECK_MESSAGE(failed[0].find(want) != std::string::npos, failed[0]);
      CHECK_MESSAGE(failed[1].empty(), failed[1]);
      CHECK(same_bits(l2.data(), lb.data(), V));  // the innocent session is bit-exact
      // Alone, the faulted session's forward throws the named error.
      Session again = model.new_session(4);
      CHECK_THROWS_WITH_AS(model.forward(again, {&ta, 1}, l1.data()), doctest::Contains(want.c_str()), ExpertUnavailable);
    }
  }
}
